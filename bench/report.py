#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Turns kvadmit-bench's Google Benchmark JSON into the target table and plots.

    report.py RESULTS.json [--readme bench/README.md] [--plots docs/bench]
                           [--publish docs/bench/results.json]

Prints the target table (every ratio from the same run). With repetitions
the median is used. Only a complete run (every benchmark the table names is
in the JSON) is published: then --readme replaces the text between the
results markers of that file, --plots draws SVGs with gnuplot
(bench/plots.gp) into that folder and --publish copies the JSON there. A
subset (a --benchmark_filter run) prints its rows, says what it lacks and
leaves those files as they are. Timings are reported, never asserted: the
exit status is 0 whether targets are met or not, and whether the run was
complete or a subset (1 only on an unreadable JSON or README).
"""
import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile

BEGIN = "<!-- results:begin (bench/report.py writes this part) -->"
END = "<!-- results:end -->"
UNIT_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}


def load(path):
    """run_name -> the run to use (median of repetitions, else the run)."""
    with open(path) as f:
        doc = json.load(f)
    runs, medians = {}, {}
    for b in doc.get("benchmarks", []):
        name = b.get("run_name", b["name"])
        if b.get("run_type") == "aggregate":
            if b.get("aggregate_name") == "median":
                medians[name] = b
        elif "error_occurred" not in b or not b["error_occurred"]:
            runs.setdefault(name, b)
    runs.update(medians)
    return doc.get("context", {}), runs


class Results:
    def __init__(self, runs):
        self.runs = runs
        self.missing = []

    def get(self, name):
        r = self.runs.get(name)
        if r is None:
            self.missing.append(name)
        return r

    def find(self, prefix):
        """The run whose name starts with prefix (for names that carry a
        fixed iteration count), or None, noted as missing."""
        for name in sorted(self.runs):
            if name.startswith(prefix):
                return self.runs[name]
        self.missing.append(prefix + "…")
        return None

    def ns(self, name):
        """Real time per iteration in ns."""
        r = self.get(name)
        return None if r is None else r["real_time"] * UNIT_NS[r.get("time_unit", "ns")]

    def cpu_ns(self, name):
        """CPU time per iteration in ns (single-threaded loops only)."""
        r = self.get(name)
        return None if r is None else r["cpu_time"] * UNIT_NS[r.get("time_unit", "ns")]

    def counter(self, name, key):
        r = self.get(name)
        return None if r is None else r.get(key)


def fmt_ns(v):
    if v is None:
        return "missing"
    if v >= 1e6:
        return f"{v / 1e6:.2f} ms"
    if v >= 1e3:
        return f"{v / 1e3:.1f} µs"
    return f"{v:.0f} ns"


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def row(measure, target, value, shown, ok):
    state = "—" if value is None else ("met" if ok(value) else "**missed**")
    return f"| {measure} | {target} | {shown} | {state} |"


DRAM_MISS = "BM_dram_miss"


def misses(res, v):
    """v (ns) in this machine's unit: one dependent random load over 256 MiB
    (`BM_dram_miss`, CPU), the cost a 1M-waiting row pays per record line no
    cache holds. Empty when either is missing."""
    miss = res.cpu_ns(DRAM_MISS)
    return "" if v is None or not miss else f"; {v / miss:.1f} misses of {fmt_ns(miss)}"


def target_rows(res):
    # Single-threaded loops are judged on CPU time: on a shared VM their wall
    # time also counts the time other tenants' threads held the core.
    sb = {n: res.cpu_ns(f"BM_step_blocked/{n}") for n in (1000, 10000, 100000, 1000000)}
    rows = []
    flat = ratio(sb[1000000], sb[1000])
    # Targets as the core-v2 issue set them (tighter than the first release's).
    rows.append(row("`BM_step_blocked` flatness t(1M) / t(1k)", "≤ 1.3", flat,
                    f"{flat:.2f} ({fmt_ns(sb[1000000])} / {fmt_ns(sb[1000])})" if flat else "missing",
                    lambda v: v <= 1.3))
    wall = res.ns("BM_step_blocked/1000000")
    rows.append(row("`BM_step_blocked/1000000`", "≤ 40 ns", sb[1000000],
                    f"{fmt_ns(sb[1000000])} (wall {fmt_ns(wall)})", lambda v: v <= 40))
    rescan = res.cpu_ns("BM_rescan_step/10000")
    speed = ratio(rescan, sb[10000])
    rows.append(row("`BM_rescan_step/10000` ÷ `BM_step_blocked/10000`", "≥ 1000", speed,
                    f"{speed:,.0f} ({fmt_ns(rescan)} / {fmt_ns(sb[10000])})" if speed else "missing",
                    lambda v: v >= 1000))
    for b, target in ((1, 200), (64, 150), (4096, 150)):
        v = res.ns(f"BM_admit/{b}/manual_time")
        rows.append(row(f"admit per request, 1M waiting (`BM_admit/{b}`: batch of {b})",
                        f"≤ {target} ns", v, fmt_ns(v) + misses(res, v),
                        lambda v, t=target: v <= t))
    v = res.ns("BM_cancel/1000000/manual_time")
    cpu = res.runs.get("BM_cancel/1000000/manual_time", {}).get("cpu_ns")
    rows.append(row("cancel at 1M waiting (`BM_cancel/1000000`, call + step)", "≤ 300 ns", v,
                    fmt_ns(v) + (f" (CPU {fmt_ns(cpu)})" if cpu is not None else "") +
                    misses(res, v), lambda v: v <= 300))
    v = res.counter("BM_memory_per_request/1000000", "bytes_per_request")
    rss = res.counter("BM_memory_per_request/1000000", "rss_bytes_per_request")
    shown = "missing" if v is None else f"{v:.1f} B (RSS growth: {rss:.1f} B)"
    rows.append(row("bytes per waiting request (jemalloc arena)", "≤ 192", v, shown,
                    lambda v: round(v, 1) <= 192))
    sub1 = res.counter("BM_submit/manual_time/threads:1", "cpu_ns")
    raw1 = res.counter("BM_wfcq_enqueue_raw/manual_time/threads:1", "cpu_ns")
    r = ratio(sub1, raw1)
    rows.append(row("submit, 1 thread, ÷ `BM_wfcq_enqueue_raw`", "≤ 1.5× its time", r,
                    f"{r:.3f}× ({fmt_ns(sub1)} / {fmt_ns(raw1)})" if r else "missing",
                    lambda v: v <= 1.5))
    sub2 = res.counter("BM_submit/manual_time/threads:2", "items_per_second")
    mq2 = res.counter("BM_mutex_queue/manual_time/threads:2", "items_per_second")
    r = ratio(sub2, mq2)
    rows.append(row("submit, 2 threads, ÷ `BM_mutex_queue` throughput", "≥ 1.5×", r,
                    f"{r:.2f}× ({sub2 / 1e6:.2f} / {mq2 / 1e6:.2f} M/s)" if r else "missing",
                    lambda v: v >= 1.5))
    rows += core_v2_rows(res)
    rows += never_blocks_rows(res)
    rows += priority_rows(res)
    return rows


FILL = "BM_submit_fill/1000000/manual_time"
RAW_FILL = "BM_wfcq_enqueue_raw/1000000/manual_time"
CHURN = "BM_churn/repeats:1/manual_time"


def core_v2_rows(res):
    """The core-v2 targets: filling one engine, shared local checkpoints, a
    request's whole life and churn (bench/README.md says what each times)."""
    rows = []
    fill, raw = res.counter(FILL, "cpu_ns"), res.counter(RAW_FILL, "cpu_ns")
    r = ratio(fill, raw)
    wall = ratio(res.ns(FILL), res.ns(RAW_FILL))
    rows.append(row("submit into one engine that keeps 1M (`BM_submit_fill/1000000`) ÷ "
                    "`BM_wfcq_enqueue_raw/1000000`, CPU per submit", "≤ 1.5× its time", r,
                    f"{r:.2f}× ({fmt_ns(fill)} / {fmt_ns(raw)}; wall {wall:.2f}×)" if r and wall
                    else "missing", lambda v: v <= 1.5))
    v, w = res.counter(FILL, "ingest_cpu_ns"), res.counter(FILL, "ingest_ns")
    rows.append(row("ingest per request, the one step after 1M submits (`BM_submit_fill` "
                    "counter `ingest_cpu_ns`)", "≤ 200 ns", v,
                    f"{fmt_ns(v)} (wall {fmt_ns(w)})" if v is not None else "missing",
                    lambda v: v <= 200))
    for name, what in (("BM_shared_local_ingest", "answer + adopt"),
                       ("BM_shared_local_evict", "eviction + re-lookup")):
        full = {n: f"{name}/{n}/manual_time" for n in (1000, 16000)}
        t = {n: res.counter(f, "cpu_ns") for n, f in full.items()}
        w = {n: res.ns(f) for n, f in full.items()}
        worst = None if None in t.values() else max(t.values())
        rows.append(row(f"one shared local checkpoint, {what} per request (`{name}`, "
                        "1k / 16k sharing, CPU)", "≤ 1 µs", worst,
                        f"{fmt_ns(t[1000])} / {fmt_ns(t[16000])} (wall {fmt_ns(w[1000])} / "
                        f"{fmt_ns(w[16000])})" if worst else "missing", lambda v: v <= 1000))
        if name == "BM_shared_local_evict":
            big = f"{name}/1000000/manual_time"
            v = res.counter(big, "round_worst_step_us")
            rows.append(row("longest step of one eviction shared by 1M waiting requests "
                            f"(`{big.rsplit('/', 1)[0]}`, counter `round_worst_step_us`, wall)",
                            "≤ 1 ms", v,
                            f"{v:.0f} µs over {res.counter(big, 'steps'):.0f} steps"
                            if v is not None else "missing", lambda v: v <= 1000))
        flat = ratio(t[16000], t[1000])
        rows.append(row(f"`{name}` flatness t(16k) / t(1k)", "≤ 1.5", flat,
                        f"{flat:.2f} (wall {ratio(w[16000], w[1000]):.2f})" if flat else "missing",
                        lambda v: v <= 1.5))
    full = "BM_lifecycle/1000000/manual_time"
    v, w = res.counter(full, "cpu_ns"), res.ns(full)
    rows.append(row("a restore's whole life, 1M waiting (`BM_lifecycle/1000000`: submit … "
                    "retirement, CPU)", "≤ 1 µs", v,
                    f"{fmt_ns(v)} (wall {fmt_ns(w)}){misses(res, v)}" if v is not None
                    else "missing", lambda v: v <= 1000))
    cpu = res.counter(CHURN, "cpu_worst_over_median_max")
    wall = res.counter(CHURN, "worst_over_median_max")
    procs, stalled = res.counter(CHURN, "processes"), res.counter(CHURN, "stalled_processes")
    shown = "missing"
    if cpu is not None:
        shown = f"{cpu:.2f}× (wall {wall:.2f}×), worst of {procs:.0f} processes"
        if stalled:
            shown += f"; {stalled:.0f} stopped as stalled"
    rows.append(row("churn at 1M waiting, worst round ÷ median round (`BM_churn`, CPU)",
                    "≤ 2× in every process", cpu, shown, lambda v: v <= 2 and not stalled))
    return rows


STEP_TAIL = "BM_step_tail/1000000/"
ENGINES = "BM_submit_engines/{}/manual_time"


def never_blocks_rows(res):
    """A step that never blocks (issue 28): the step's tail under a steady
    load and a noisy host, on the step thread's CPU time (`BM_step_tail`), and
    one thread submitting to 8 engines against 1. Cancel at 1M is the row
    above; the system calls come from scripts/step-syscalls.sh, not this JSON."""
    rows = []
    r = res.find(STEP_TAIL)
    cpu = {k: None if r is None else r.get(f"cpu_{k}") for k in ("p50_us", "p99_us", "p9999_us",
                                                                    "max_us", "max_over_p50")}
    wall = {k: None if r is None else r.get(f"wall_{k}") for k in cpu}
    steps = f"{r['steps']:,.0f} steps" if r else ""

    def us(v):
        return "missing" if v is None else fmt_ns(v * 1e3)

    def floor(k):
        """The controls' figure beside the step's: the machine's own tail."""
        if r is None or r.get(f"memctl_{k}") is None:
            return ""
        return (f"; controls under the same load: memory walk {us(r[f'memctl_{k}'])}, "
                f"arithmetic {us(r[f'control_{k}'])}")

    rows.append(row("longest step, 1M waiting, producers + noisy host (`BM_step_tail/1000000`, "
                    "CPU)", "≤ 200 µs", cpu["max_us"],
                    f"{us(cpu['max_us'])} (wall {us(wall['max_us'])}) over {steps}"
                    f"{floor('max_us')}" if r else "missing", lambda v: v <= 200))
    rows.append(row("p99.99 step (`BM_step_tail/1000000`, CPU)", "≤ 50 µs", cpu["p9999_us"],
                    f"{us(cpu['p9999_us'])} (wall {us(wall['p9999_us'])}); p50 "
                    f"{us(cpu['p50_us'])}, p99 {us(cpu['p99_us'])}{floor('p9999_us')}" if r
                    else "missing", lambda v: v <= 50))
    v = cpu["max_over_p50"]
    rows.append(row("longest step ÷ median step (`BM_step_tail/1000000`, CPU)", "≤ 50", v,
                    f"{v:,.1f} (wall {wall['max_over_p50']:,.1f})" if v is not None
                    else "missing", lambda v: v <= 50))
    one, eight = (res.counter(ENGINES.format(n), "cpu_ns") for n in (1, 8))
    rat = ratio(eight, one)
    w = ratio(res.ns(ENGINES.format(8)), res.ns(ENGINES.format(1)))
    rows.append(row("submit from one thread to 8 engines ÷ to 1 engine, per call "
                    "(`BM_submit_engines/8` ÷ `/1`, CPU)", "≤ 1.3", rat,
                    f"{rat:.2f} ({fmt_ns(eight)} / {fmt_ns(one)}; wall {w:.2f})" if rat and w
                    else "missing", lambda v: v <= 1.3))
    return rows


PRIO_STEP_PAIRED = "BM_priority_step_paired/1024/manual_time"
PRIO_PAIRED = "BM_priority_admit_paired/64/{}/manual_time"


def priority_rows(res):
    """Priority order (issue 30), each against FCFS in the same run: the
    blocked step over 1 and 1,024 levels (CPU), admission at 64 levels with
    FCFS rounds interleaved in one loop (`fcfs_ratio`; interleaved
    priorities is the target's layout, bursts of 1,024 the order's own cost),
    and a priority change with its step."""
    rows = []
    # the three engines' steps interleaved in one loop (BM_priority_step_paired):
    # this guest's vCPUs differ in speed, and the unpaired rows ran one after
    # the other (BM_priority_step_blocked/L, in the table of all rows)
    many, one, fcfs, flat = (res.counter(PRIO_STEP_PAIRED, c) for c in
                             ("cpu_ns", "one_cpu_ns", "fcfs_cpu_ns", "flat_ratio"))
    rows.append(row("`BM_priority_step_blocked` flatness t(1,024 levels) / t(1 level), 1M "
                    "(CPU; `BM_priority_step_paired/1024`)", "≤ 1.3", flat,
                    f"{flat:.2f} ({fmt_ns(many)} / {fmt_ns(one)})" if flat else "missing",
                    lambda v: v <= 1.3))
    rows.append(row("`BM_priority_step_blocked/1024` (CPU; `BM_priority_step_paired/1024`)",
                    "≤ 40 ns", many, f"{fmt_ns(many)} (FCFS {fmt_ns(fcfs)} in the same loop)",
                    lambda v: v <= 40))
    for run, what in ((1, "priorities interleaved"), (1024, "in bursts of 1,024")):
        name = PRIO_PAIRED.format(run)
        v = res.counter(name, "fcfs_ratio")
        f = res.counter(name, "fcfs_ns")
        rows.append(row(f"admission per request, 1M waiting over 64 levels ÷ FCFS, {what} "
                        f"(`BM_priority_admit_paired/64/{run}`, wall)", "≤ 1.2×", v,
                        f"{v:.2f}× ({fmt_ns(res.ns(name))} / {fmt_ns(f)})" if v else "missing",
                        lambda v: v <= 1.2))
    v = res.ns("BM_priority_set/64/manual_time")
    cpu = res.counter("BM_priority_set/64/manual_time", "cpu_ns")
    rows.append(row("`kva_set_priority` + its step per request, 1M (`BM_priority_set/64`)",
                    "≤ 300 ns", v, fmt_ns(v) + (f" (CPU {fmt_ns(cpu)})" if cpu is not None
                                                else "") + misses(res, v), lambda v: v <= 300))
    return rows


def never_blocks_other_rows(res):
    out = []
    r = next((res.runs[n] for n in sorted(res.runs) if n.startswith(STEP_TAIL)), None)
    if r:
        def tail(kind):
            return " / ".join(fmt_ns(r[f"{kind}_{k}_us"] * 1e3)
                              for k in ("p50", "p99", "p9999", "max"))
        out.append(f"| `BM_step_tail/1000000` ({r['steps']:,.0f} steps {r['step_period_us']:.0f} µs "
                   f"apart, {r['events_per_step']:.0f} events a step) | CPU p50 / p99 / p99.99 / "
                   f"max {tail('cpu')} | wall {tail('wall')}; inside steps "
                   f"{r['step_minor_faults']:,.0f} page faults, "
                   f"{r['step_voluntary_switches']:,.0f} voluntary context switches; steps over "
                   f"50 µs CPU {r['cpu_steps_over_50us']:,.0f}, over 200 µs "
                   f"{r['cpu_steps_over_200us']:,.0f} |")
        if r.get("memctl_p50_us") is not None:
            out.append(f"| the same run's controls, timed right after every step (no kvadmit "
                       f"call) | memory walk over 256 MiB p50 / p99 / p99.99 / max "
                       f"{tail('memctl')} | arithmetic {tail('control')} |")
    for n in (1, 3, 8):
        r = res.runs.get(ENGINES.format(n))
        if r:
            out.append(f"| `BM_submit_engines/{n}` (one thread, round-robin over {n} "
                       f"engine{'s' if n > 1 else ''}) | wall {fmt_ns(res.ns(ENGINES.format(n)))} "
                       f"per submit | CPU {fmt_ns(r['cpu_ns'])} |")
    return out


def core_v2_other_rows(res):
    out = []
    r = res.runs.get(FILL)
    if r:
        out.append(f"| `BM_submit_fill/1000000` | wall {fmt_ns(res.ns(FILL))} per submit "
                   f"| CPU {fmt_ns(r['cpu_ns'])}; ingest step {fmt_ns(r['ingest_ns'])} "
                   f"(CPU {fmt_ns(r['ingest_cpu_ns'])}) per request |")
    r = res.runs.get(RAW_FILL)
    if r:
        out.append(f"| `BM_wfcq_enqueue_raw/1000000` (one queue keeps them) | wall "
                   f"{fmt_ns(res.ns(RAW_FILL))} per enqueue | CPU {fmt_ns(r['cpu_ns'])} |")
    for name in ("BM_shared_local_ingest", "BM_shared_local_evict"):
        for n in (1000, 16000):
            full = f"{name}/{n}/manual_time"
            r = res.runs.get(full)
            if r:
                out.append(f"| `{name}/{n}` | {fmt_ns(res.ns(full))} per request (CPU "
                           f"{fmt_ns(r['cpu_ns'])}) | call {r['call_ns']:.0f} ns + step "
                           f"{r['step_ns']:.0f} ns |")
    full = "BM_lifecycle/1000000/manual_time"
    r = res.runs.get(full)
    if r:
        parts = " + ".join(f"{k[:-3].replace('_', ' ')} {r[k]:.0f}" for k in
                           ("finish_ns", "submit_ns", "step1_ns", "answer_ns", "copy_done_ns",
                            "step2_ns") if k in r)
        out.append(f"| `BM_lifecycle/1000000` (batches of {r.get('batch', 0):.0f}) | "
                   f"{fmt_ns(res.ns(full))} per request (CPU {fmt_ns(r['cpu_ns'])}) | "
                   f"{parts} ns |")
    r = res.runs.get(CHURN)
    if r:
        per = ", ".join(f"{r[k]:.2f}" for k in sorted(
            (k for k in r if k.startswith("cpu_worst_over_median_p")), key=lambda k: int(k[23:])))
        out.append(f"| `BM_churn` ({r['processes']:.0f} processes × {r['rounds']:.0f} rounds of "
                   f"{r['churn_per_round']:,.0f} cancels + submits) | median round "
                   f"{fmt_ns(r['median_round_ms'] * 1e6)} (CPU "
                   f"{fmt_ns(r['cpu_median_round_ms'] * 1e6)}), worst "
                   f"{fmt_ns(r['worst_round_ms'] * 1e6)} | worst ÷ median (CPU) per process: "
                   f"{per} |")
    return out


def other_rows(res):
    out = []
    miss = res.cpu_ns(DRAM_MISS)
    if miss:
        out.append(f"| one dependent random load over 256 MiB on huge pages (`{DRAM_MISS}`, "
                   f"CPU; no kvadmit call) | {fmt_ns(miss)} | the unit of the rows above that "
                   f"say \"misses\": a record line no cache holds at 1M waiting |")
    for n in (500, 1000, 10000, 100000, 1000000):
        k, r = f"BM_step_blocked/{n}", f"BM_rescan_step/{n}"
        if k in res.runs or r in res.runs:
            kv = fmt_ns(res.cpu_ns(k)) if k in res.runs else "—"
            rv = fmt_ns(res.cpu_ns(r)) if r in res.runs else "—"
            out.append(f"| step, {n:,} waiting (CPU) | kvadmit {kv} | rescan {rv} |")
    for name, what in (("BM_lookup_answer/manual_time", "lookup answer, per event"),
                       ("BM_copy_done/manual_time", "copy report, per event"),
                       ("BM_cancel/1000000/manual_time", "cancel at 1M")):
        r = res.get(name)
        if r is None:
            continue
        split = ""
        if "call_ns" in r:
            split = f"call {r['call_ns']:.0f} ns + step {r['step_ns']:.0f} ns"
        out.append(f"| {what} (`{name.split('/manual_time')[0]}`) | "
                   f"{fmt_ns(res.ns(name))} | {split} |")
    for t in (1, 2):
        for name in ("BM_submit", "BM_wfcq_enqueue_raw", "BM_mutex_queue", "BM_reserve_release",
                     "BM_mutex_counter"):
            full = f"{name}/manual_time/threads:{t}"
            ips = res.counter(full, "items_per_second")
            if ips is not None:
                out.append(f"| `{name}`, {t} thread{'s' if t > 1 else ''} | {ips / 1e6:.2f} M items/s "
                           f"| CPU {res.counter(full, 'cpu_ns'):.0f} ns per item per thread |")
    out += core_v2_other_rows(res)
    out += never_blocks_other_rows(res)
    return out


def file_match(path, pattern, default):
    """The first group of pattern in the file, or default."""
    try:
        with open(path) as f:
            m = re.search(pattern, f.read())
            return m.group(1).strip() if m else default
    except OSError:
        return default


def machine(context):
    model = file_match("/proc/cpuinfo", r"model name\s*:\s*(.*)", "unknown CPU")
    osname = file_match("/etc/os-release", r'PRETTY_NAME="([^"]*)"', platform.system())
    virt = ""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        m = re.search(r"Hypervisor vendor:\s*(\S+)", out)
        virt = f", {m.group(1)} virtual machine" if m else ""
        c = subprocess.run(["systemd-detect-virt", "--container"], capture_output=True,
                           text=True).stdout.strip()
        virt += f" ({c} container)" if c and c != "none" else ""
    except OSError:
        pass
    caches = ", ".join(f"L{c['level']} {c['size'] // 1024} KiB"
                       for c in context.get("caches", []) if c.get("type") != "Instruction")
    load = ", ".join(f"{x:.2f}" for x in context.get("load_avg", []))
    # The slab and the live-id map ask for huge pages (reservations/alloc.c):
    # the kernel's mode decides whether they get them.
    thp = file_match("/sys/kernel/mm/transparent_hugepage/enabled", r"\[(\w+)\]", "?")
    return (f"{context.get('num_cpus', '?')} × {model} at {context.get('mhz_per_cpu', '?')} MHz"
            f"{virt}; {osname}; caches {caches}; transparent huge pages {thp}; "
            f"run {context.get('date', '?')}, load average at the start {load or '?'}")


def table(context, res, source):
    lines = [f"Measured by `make bench` on: {machine(context)}.",
             f"Source: `{source}` (median of the repetitions). Step and rescan rows use CPU "
             "time (single-threaded loops), and submit with 1 thread the CPU time per item "
             "(counter `cpu_ns`); admit and cancel are the wall time of the timed step (manual "
             "time); 2-thread throughput is items over the wall time of lockstep batches. "
             "The rows from `BM_submit_fill` on (filling one engine and its ingest, shared "
             "local checkpoints, the lifecycle, churn) use the timed thread's CPU time over the "
             "timed calls and steps (counters), with the wall time alongside. The step-tail rows are "
             "percentiles of every step's thread CPU time in one run of `BM_step_tail` (wall "
             "alongside), and many engines compare the thread's CPU time per submit.", "",
             "| measure | target | measured | |", "|---|---|---|---|"]
    lines += target_rows(res)
    lines += ["", "Other results from the same run:", "", "| benchmark | time | |", "|---|---|---|"]
    lines += other_rows(res)
    return "\n".join(lines) + "\n"


def write_readme(path, text):
    with open(path) as f:
        doc = f.read()
    if BEGIN not in doc or END not in doc:
        sys.exit(f"report.py: {path} has no results markers")  # status 1
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    with open(path, "w") as f:
        f.write(head + BEGIN + "\n" + text + END + tail)


def plots(res, datadir, outdir, script):
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(datadir, "step.dat"), "w") as f:
        f.write("# waiting kvadmit_ns rescan_ns\n")
        for n in (500, 1000, 10000, 100000, 1000000):
            k = res.runs.get(f"BM_step_blocked/{n}")
            r = res.runs.get(f"BM_rescan_step/{n}")
            kv = res.cpu_ns(f"BM_step_blocked/{n}") if k else None
            rv = res.cpu_ns(f"BM_rescan_step/{n}") if r else None
            f.write(f"{n} {kv if kv else 'NaN'} {rv if rv else 'NaN'}\n")
    with open(os.path.join(datadir, "threads.dat"), "w") as f:
        names = ("BM_submit", "BM_wfcq_enqueue_raw", "BM_mutex_queue", "BM_reserve_release",
                 "BM_mutex_counter")
        f.write("# threads " + " ".join(names) + " (M items/s)\n")
        for t in (1, 2):
            vals = []
            for n in names:
                r = res.runs.get(f"{n}/manual_time/threads:{t}")
                vals.append(f"{r['items_per_second'] / 1e6:.4f}" if r else "NaN")
            f.write(f"{t} " + " ".join(vals) + "\n")
    subprocess.run(["gnuplot", "-e", f"datadir='{datadir}'; outdir='{outdir}'", script],
                   check=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("json")
    ap.add_argument("--readme")
    ap.add_argument("--plots", metavar="DIR")
    ap.add_argument("--publish", metavar="JSON", help="copy the JSON here when the run is complete")
    a = ap.parse_args()
    context, runs = load(a.json)
    res = Results(runs)
    text = table(context, res, os.path.relpath(a.publish or a.json))
    print(text)
    if res.missing:
        print("report.py: a subset run; missing from the JSON: "
              + ", ".join(sorted(set(res.missing))), file=sys.stderr)
        if a.readme or a.plots or a.publish:
            print("report.py: the README, plots and published JSON are left as they were "
                  "(only a complete run replaces them)", file=sys.stderr)
        return 0
    if a.publish and os.path.abspath(a.publish) != os.path.abspath(a.json):
        os.makedirs(os.path.dirname(os.path.abspath(a.publish)), exist_ok=True)
        shutil.copyfile(a.json, a.publish)
    if a.readme:
        write_readme(a.readme, text)
    if a.plots:
        here = os.path.dirname(os.path.abspath(__file__))
        with tempfile.TemporaryDirectory() as datadir:
            plots(res, datadir, a.plots, os.path.join(here, "plots.gp"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
