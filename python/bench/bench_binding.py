#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The binding's own benchmark (python/README.md):

1. Python overhead per call: submit, submit+cancel, an empty step, a step
   admitting one request (and reading its admission and pages).
2. A blocked step with W requests waiting (W = 1,000 and 10,000): through
   the binding (kvadmit's O(1) step) against a pure-Python rescanning step
   (a deque of waiting requests re-checked every step, as today's Python
   schedulers do: every waiting request asks "do my pages fit?").
3. Reading a 64-admission plan through tuples and through the zero-copy
   view, and stats() against its former construction and stats_raw().

--quick: a smoke run for ctest (small counts, same code paths).
"""
import argparse
import collections
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import kvadmit  # noqa: E402

MS = 1_000_000


def per_op_ns(fn, n, rounds):
    best = None
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        fn(n)
        dt = (time.perf_counter_ns() - t0) / n
        best = dt if best is None else min(best, dt)
    return best


def overheads(n, rounds):
    """Each measurement on a fresh engine with an empty queue."""
    out = {}
    st = {"id": 0, "now": 0}

    def engine():
        return kvadmit.Engine(total_pages=1 << 22, page_tokens=16, copy_slots=4,
                              max_running=65535)

    def submit(k):
        rid = st["id"]
        for _ in range(k):
            rid += 1
            e.submit(rid, 16)
        st["id"] = rid

    def pairs(k):
        rid = st["id"]
        for _ in range(k):
            rid += 1
            e.cancel(e.submit(rid, 16))
        st["id"] = rid
        st["now"] += MS
        e.step(st["now"])  # retire the cancelled (inside the timing: amortised)

    def steps(k):
        now = st["now"]
        for _ in range(k):
            now += MS
            e.step(now)
        st["now"] = now

    def admit_one(k):
        now, rid = st["now"], st["id"]
        for _ in range(k):
            rid += 1
            now += MS
            h = e.submit(rid, 16)
            plan = e.step(now)
            a = plan.admissions[0]
            plan.pages_of(a)
            e.finish(h)
        st["now"], st["id"] = now, rid

    for name, fn in (("submit", submit), ("submit + cancel", pairs),
                     ("step, empty plan", steps),
                     ("submit + step admitting it + read admission + finish", admit_one)):
        with engine() as e:
            out[name] = per_op_ns(fn, n, rounds)
    return out


def binding_blocked_step(waiting, n, rounds):
    """A blocked head: the pool is full, `waiting` requests wait."""
    with kvadmit.Engine(total_pages=64, page_tokens=16, copy_slots=1, max_running=8,
                        decode_reserve_pages=0) as e:
        big = e.submit(1, 64 * 16)  # takes the whole pool
        now = MS
        e.step(now)
        for i in range(waiting):
            e.submit(i + 2, 32)
        now += MS
        e.step(now)
        assert e.stats().waiting == waiting
        st = {"now": now}

        def steps(k):
            now = st["now"]
            for _ in range(k):
                now += MS
                e.step(now)
            st["now"] = now
        r = per_op_ns(steps, n, rounds)
        e.finish(big)
    return r


class PyReq:
    __slots__ = ("rid", "prompt_tokens", "pages_needed")

    def __init__(self, rid, prompt_tokens, page_tokens):
        self.rid = rid
        self.prompt_tokens = prompt_tokens
        self.pages_needed = -(-prompt_tokens // page_tokens)


def python_rescan_step(waiting, n, rounds):
    """Today's Python scheduler: every step re-checks every waiting request."""
    free_pages = 0
    q = collections.deque(PyReq(i + 2, 32, 16) for i in range(waiting))

    def steps(k):
        for _ in range(k):
            admitted = []
            kept = collections.deque()
            while q:
                r = q.popleft()
                if r.pages_needed <= free_pages:  # never: the pool is full
                    admitted.append(r)
                else:
                    kept.append(r)
            q.extend(kept)
    return per_op_ns(steps, n, rounds)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    n, rounds = (200, 2) if args.quick else (20000, 7)
    print(f"libkvadmit: {kvadmit.library_path} ({kvadmit.version_string()})")
    print("1. Python overhead per call (best of %d rounds of %d)" % (rounds, n))
    for name, ns in overheads(n, rounds).items():
        print(f"   {name:<55} {ns:8.0f} ns")
    print("2. blocked step with W waiting: binding vs pure-Python rescanning step")
    sizes = (100, 1000) if args.quick else (1000, 10000)
    for w in sizes:
        b = binding_blocked_step(w, 50 if args.quick else 2000, rounds)
        p = python_rescan_step(w, 5 if args.quick else 50, rounds)
        print(f"   W={w:<6} binding {b:9.0f} ns/step   Python rescan {p:12.0f} ns/step "
              f"({p / b:,.0f}x)")
    print("3. reading a plan of 64 admissions, and the counters (best of %d rounds)" % rounds)
    for name, ns in plan_reads(n // 10 or 1, rounds).items():
        print(f"   {name:<55} {ns:8.0f} ns")
    return 0


def plan_reads(n, rounds):
    """Per call: plan.admissions (a NamedTuple and a Handle an admission)
    against plan.admitted_view (a zero-copy cffi slice) reading the same
    three fields; stats() against the former Stats(**values) construction
    (the baseline, rebuilt here) and stats_raw()."""
    from kvadmit._lib import ffi
    from kvadmit._stats import Stats, histogram_bounds
    from kvadmit._types import _REASON, Histogram
    out = {}
    with kvadmit.Engine(total_pages=1 << 16, page_tokens=16, max_running=1024) as e:
        for i in range(64):
            e.submit(i + 1, 16)
        plan = e.step(MS)
        assert plan.n_admitted == 64

        def tuples(k):
            for _ in range(k):
                for a in plan.admissions:
                    (a.handle.id, a.npages, a.how)

        def view(k):
            for _ in range(k):
                for a in plan.admitted_view:
                    (a.handle.id, a.npages, a.how)

        def stats_init(s):  # the construction stats() used before (baseline)
            values = {}
            bounds = histogram_bounds()
            for name, f in ffi.typeof("kva_stats").fields:
                v = getattr(s, name)
                if name == "fallbacks":
                    values[name] = {_REASON.get(i, i): v[i] for i in range(len(v))}
                elif f.type.kind == "struct":
                    values[name] = Histogram(v.count, v.sum_ns, tuple(v.buckets), bounds)
                else:
                    values[name] = v
            return Stats(**values)

        def stats_before(k):
            for _ in range(k):
                s = ffi.new("kva_stats *")
                kvadmit._lib.lib.kva_stats_get(e._e, s)
                stats_init(s)

        def stats_now(k):
            for _ in range(k):
                e.stats()
        raw = e.stats_raw()

        def stats_raw(k):
            for _ in range(k):
                e.stats_raw(raw).waiting

        for name, fn in (("plan.admissions, 3 fields each (64 tuples)", tuples),
                         ("plan.admitted_view, same 3 fields (zero-copy)", view),
                         ("stats() as before (dataclass __init__, baseline)", stats_before),
                         ("stats()", stats_now), ("stats_raw(out) + one field", stats_raw)):
            out[name] = per_op_ns(fn, n, rounds)
    return out


if __name__ == "__main__":
    sys.exit(main())
