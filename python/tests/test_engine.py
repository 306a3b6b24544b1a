# SPDX-License-Identifier: Apache-2.0
"""Every entry point of the binding, its error paths, callbacks that raise,
threads, and the CPU importer."""
import array
import errno
import logging
import os
import queue
import re
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import kvadmit
from kvadmit import (Checkpoint, How, Location, LogEvent, LogLevel, Reason, State)
from conftest import MS, step_until

EXT = Location.EXTERNAL


def answer_external(engine, position, cid=7, epoch=1):
    def lookup(key, prompt, token):
        engine_ref[0].answer(token, [Checkpoint(position, cid, epoch, EXT, True)])
    engine_ref = [engine]
    return lookup


# ---- module-level ------------------------------------------------------------------
def test_version_features_and_names():
    assert kvadmit.version() >> 8 == (kvadmit.ABI_MAJOR << 8 | kvadmit.ABI_MINOR)
    assert kvadmit.version_string() == kvadmit.__version__
    assert kvadmit.has_feature(kvadmit.Feature.RESTORE_RESERVATION)
    assert kvadmit.has_feature(kvadmit.Feature.HOST_LOCAL)
    assert not kvadmit.has_feature(999)
    assert kvadmit.reason_name(Reason.MISS)
    assert "invalid" in kvadmit.strerror(-errno.EINVAL).lower() or kvadmit.strerror(-errno.EINVAL)
    b = kvadmit.histogram_bounds()
    assert b[-1] is None and list(b[:-1]) == sorted(b[:-1])
    assert isinstance(kvadmit.cuda_importer_supported(), bool)
    assert os.path.exists(kvadmit.library_path) or kvadmit.library_path


def test_plan_min_sizes():
    s = kvadmit.plan_min_sizes(kvadmit.Config(total_pages=100, page_tokens=16, copy_slots=1,
                                              max_running=4, decode_reserve_pages=10))
    assert s.pages == 90 and s.admitted >= 1
    with pytest.raises(kvadmit.InvalidArgument):
        kvadmit.plan_min_sizes(kvadmit.Config())


def test_bad_config_raises_with_errno_name_and_text():
    with pytest.raises(kvadmit.InvalidArgument) as ei:
        kvadmit.Engine(total_pages=0, page_tokens=16, copy_slots=1, max_running=1)
    err = ei.value
    assert err.errno == errno.EINVAL and err.errno_name == "EINVAL"
    assert err.strerror == kvadmit.strerror(-errno.EINVAL)
    assert "EINVAL" in str(err) and isinstance(err, ValueError)
    with pytest.raises(kvadmit.InvalidArgument):
        kvadmit.Engine(total_pages=2**40, page_tokens=16, copy_slots=1, max_running=1)


# ---- the request lifecycle ------------------------------------------------------------
def test_recompute_admission_grow_finish(make_engine):
    e = make_engine(decode_headroom_pages=4)
    h = e.submit(1, 300, prefix_key=0, user=12345)
    assert isinstance(h, kvadmit.Handle) and h.id == 1
    plan, now = step_until(e, lambda p: p.n_admitted)
    (a,) = plan.admissions
    assert a.handle == h and a.user == 12345 and a.how is How.RECOMPUTE
    assert a.reason is Reason.NO_KEY and a.recompute_tokens == 300
    pages = plan.pages_of(a)
    assert isinstance(pages, memoryview) and pages.format == "I" and len(pages) == a.npages
    assert len(set(pages.tolist())) == a.npages
    info = e.query(h)
    assert info.state is State.RUNNING and info.user == 12345 and info.pages_held == a.npages
    ids = e.grow(h, 2)
    assert isinstance(ids, array.array) and len(ids) == 2
    out = array.array("I", [0] * 4)
    assert e.grow(h, 3, out=memoryview(out)[:3]) is not None and out[2] != 0
    assert e.grow(h, 1, out=False) is None
    e.finish(h)
    with pytest.raises((kvadmit.AlreadyDone, kvadmit.NotFound)):
        e.finish(h)
    plan, now = step_until(e, lambda p: p.n_ended, now)
    (end,) = plan.ended
    assert end.handle == h and end.state is State.FINISHED and end.user == 12345
    st = e.stats()
    assert st.finished == 1 and st.free_pages == st.total_pages
    with pytest.raises(kvadmit.NotFound):
        e.query(h)


def test_priority_order_set_priority_and_candidate(make_engine):
    e = make_engine(order=kvadmit.Order.PRIORITY)
    low = e.submit(1, 16, priority=5)
    high = e.submit(2, 16, priority=-1)
    mid = e.submit(3, 16, priority=2, arrival_ns=7)
    e.step(MS, hold_admissions=True)
    assert [w.handle.id for w in e.waiting()] == [2, 3, 1]
    e.set_priority(low, -5)
    e.step(2 * MS, hold_admissions=True)
    assert [w.handle.id for w in e.waiting()] == [1, 2, 3]
    plan = e.step(3 * MS)
    assert [a.handle.id for a in plan.admissions] == [1, 2, 3] and not plan.preempt_hint
    assert e.preempt_candidate() == mid
    e.finish(mid)
    e.step(4 * MS)
    assert e.preempt_candidate() == high
    st = e.stats()
    # priorities -5 (set), -1 and 2: classes < 0 (two) and 2-3 (one)
    assert st.admitted_by_priority == (2, 0, 0, 1, 0, 0, 0, 0) and st.priority_levels == 0
    with pytest.raises(kvadmit.InvalidArgument):
        make_engine().set_priority(high, 0)


def test_restore_with_host_copies(make_engine):
    eng = None
    lookups = []

    def lookup(key, prompt, token):
        lookups.append((key, prompt))
        eng.answer(token, [Checkpoint(256, 99, 1)])

    e = make_engine(decode_headroom_pages=8, lookup=lookup)
    eng = e
    h = e.submit(5, 300, prefix_key=42)
    copies = []

    def run_copies(plan):
        for job in plan.copies:
            copies.append(job)
            assert job.handle == h and job.npages == len(job.pages) == 16
            e.copy_done(job.token, job.rank, 0)
    plan, now = step_until(e, lambda p: p.n_admitted, on_plan=run_copies)
    (a,) = plan.admissions
    assert lookups == [(42, 300)] and copies
    assert a.how is How.RESTORE and a.restored_tokens == 256 and a.recompute_tokens == 44
    with pytest.raises(kvadmit.AlreadyDone):
        e.copy_done(copies[0].token, 0, 0)  # that rank reported
    with pytest.raises(kvadmit.OutOfRange):
        e.copy_done(copies[0].token, 5, 0)
    e.preempt(h)
    assert e.query(h).state is State.WAITING
    st = e.stats()
    assert st.preempted == 1 and st.admitted_restore == 1 and st.tokens_restored == 256
    e.cancel(h)
    with pytest.raises(kvadmit.AlreadyDone):
        e.cancel(h)
    plan, now = step_until(e, lambda p: p.n_ended, now)
    assert plan.ended[0].state is State.CANCELLED


def test_async_directory_thread_and_stale_answer(make_engine):
    tokens = queue.Queue()
    e = make_engine(lookup=lambda key, prompt, token: tokens.put(token), lookup_timeout_ns=0)
    answered = []

    def directory():
        while True:
            t = tokens.get()
            if t is None:
                return
            e.answer(t, [])  # a miss
            answered.append(t)
    th = threading.Thread(target=directory)
    th.start()
    try:
        h = e.submit(1, 64, prefix_key=3)
        # the directory answers in real time; no lookup timeout
        plan, now = step_until(e, lambda p: p.n_admitted, limit=100000,
                               on_plan=lambda p: time.sleep(0.0002))
        assert plan.admissions[0].reason is Reason.MISS
    finally:
        tokens.put(None)
        th.join()
    with pytest.raises((kvadmit.Stale, kvadmit.NotFound)):
        e.answer(answered[0], [])
    with pytest.raises(kvadmit.InvalidArgument):  # unsorted manifest
        e.answer(answered[0], [Checkpoint(32, 1, 1), Checkpoint(16, 2, 1)])
    with pytest.raises(kvadmit.InvalidArgument):
        e.answer(answered[0], [Checkpoint(16 * i + 16, i, 1) for i in range(9)])
    e.finish(h)


def test_local_checkpoints(make_engine):
    e = make_engine()
    full = e.submit(1, 64, prefix_key=0, local=Checkpoint(64, 11, 1))
    part = e.submit(2, 64, prefix_key=0)
    e.local_checkpoint(part, (32, 12, 1))
    plan, now = step_until(e, lambda p: p.n_admitted >= 1)
    got = {a.handle: a for a in plan.admissions}
    if part not in got:
        plan, now = step_until(e, lambda p: p.n_admitted >= 1, now)
        got.update({a.handle: a for a in plan.admissions})
    assert got[full].how is How.LOCAL and got[full].local_tokens == 64
    assert got[part].local_tokens == 32
    with pytest.raises(kvadmit.OutOfRange):
        e.submit(3, 64, local=Checkpoint(65, 1, 1))
    with pytest.raises(kvadmit.InvalidArgument):
        e.local_checkpoint(part, (0, 1, 1))
    with pytest.raises(kvadmit.OutOfRange):
        e.local_checkpoint(part, (99, 1, 1))
    e.checkpoint_evicted(11, 2)
    e.reset_prefix_cache()
    e.finish(full)
    e.finish(part)


def test_error_paths(make_engine):
    e = make_engine(total_pages=64, decode_reserve_pages=0)
    with pytest.raises(kvadmit.InvalidArgument):
        e.submit(1, 0)
    bogus = kvadmit.Handle(77, 1, 3)
    for call in (e.cancel, e.finish, e.preempt, e.query):
        with pytest.raises(kvadmit.NotFound):
            call(bogus)
    with pytest.raises(kvadmit.NotFound):
        e.grow(bogus, 1)
    h = e.submit(1, 16)
    with pytest.raises(kvadmit.Busy):  # not running yet
        e.grow(h, 1)
    step_until(e, lambda p: p.n_admitted)
    assert len(e.grow(h, 63)) == 63  # the whole pool
    with pytest.raises(kvadmit.NoSpace) as ei:
        e.grow(h, 1)
    assert ei.value.errno_name == "ENOSPC"
    with pytest.raises(kvadmit.OutOfRange):
        e.grow(h, 4, out=array.array("I", [0, 0]))
    e.finish(h)
    with pytest.raises(kvadmit.NotFound):
        e.copy_done(kvadmit.CopyToken(0, 0, 0, 0))
    with pytest.raises(kvadmit.NotFound):
        e.answer(kvadmit.LookupToken(123, 1, 1, 5), [])
    e.close()
    assert e.closed
    with pytest.raises(kvadmit.KvadmitError):
        e.submit(2, 16)
    with pytest.raises(kvadmit.KvadmitError):
        e.step(0)
    e.close()  # idempotent


def test_duplicate_id_rejected_and_structured_log(make_engine):
    records = []
    e = make_engine(log_record=records.append, log_level=LogLevel.DEBUG)
    h1 = e.submit(9, 16)
    h2 = e.submit(9, 16)
    ended = []
    plan, now = step_until(e, lambda p: p.n_ended or ended, on_plan=lambda p: ended.extend(p.ended))
    assert any(x.handle == h2 and x.state is State.REJECTED for x in ended)
    dup = [r for r in records if r.event is LogEvent.DUPLICATE_ID]
    assert dup and dup[0].level is LogLevel.WARN and dup[0].message
    assert all(isinstance(r, kvadmit.LogRecord) for r in records)
    e.finish(h1)


def test_text_log_and_default_logging(make_engine, caplog):
    lines = []
    e = make_engine(log=lambda level, msg: lines.append((level, msg)))
    e.submit(9, 16)
    e.submit(9, 16)
    step_until(e, lambda p: p.n_ended)
    assert any(level is LogLevel.WARN for level, _ in lines)
    caplog.set_level(logging.DEBUG, logger="kvadmit")
    e2 = make_engine()
    e2.submit(9, 16)
    e2.submit(9, 16)
    step_until(e2, lambda p: p.n_ended)
    recs = [r for r in caplog.records if r.name == "kvadmit.engine"]
    assert recs and recs[0].kva_event is LogEvent.DUPLICATE_ID


def test_raising_callbacks_are_logged_not_lost(make_engine, caplog):
    caplog.set_level(logging.ERROR, logger="kvadmit")

    def bad_lookup(key, prompt, token):
        raise RuntimeError("directory down")

    def bad_log(rec):
        raise ValueError("log sink broken")

    def bad_wake():
        raise KeyError("wake")
    e = make_engine(lookup=bad_lookup, log_record=bad_log, wake=bad_wake)
    h = e.submit(1, 32, prefix_key=5)
    e.submit(1, 32)  # a duplicate: a log line for the raising log callback
    plan, now = step_until(e, lambda p: p.n_admitted)
    # the raising directory answers a miss at once
    assert plan.admissions[0].handle == h and plan.admissions[0].reason is Reason.MISS
    text = caplog.text
    assert "directory down" in text and "lookup" in text
    assert "log sink broken" in text and "wake" in text


def test_python_importer_callable_and_failures(make_engine, caplog):
    caplog.set_level(logging.ERROR, logger="kvadmit")
    jobs = []
    calls = {"n": 0}

    def importer(job):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("importer exploded")  # logged, the rank fails, retried
        jobs.append(job)
        return 0
    eng = []
    e = make_engine(lookup=lambda k, p, t: eng[0].answer(t, [Checkpoint(32, 5, 1)]),
                    importers=[importer], max_copy_retries=3)
    eng.append(e)
    h = e.submit(1, 64, prefix_key=1)

    def report(plan):
        while jobs:
            j = jobs.pop()
            e.copy_done(j.token, j.rank, 0)
    plan, now = step_until(e, lambda p: p.n_admitted, on_plan=report)
    assert plan.admissions[0].how is How.RESTORE
    assert e.stats().copy_attempts_failed == 1
    assert "importer exploded" in caplog.text
    e.finish(h)


def test_keyboard_interrupt_in_callback_reaches_step(make_engine):
    def lookup(key, prompt, token):
        raise KeyboardInterrupt
    e = make_engine(lookup=lookup)
    h = e.submit(1, 32, prefix_key=5)
    with pytest.raises(KeyboardInterrupt):
        step_until(e, lambda p: False, limit=3)
    # the step itself completed: the lookup was answered as a miss, admitted
    assert e.plan.n_admitted == 1 and e.query(h).state is State.RUNNING
    e.finish(h)
    step_until(e, lambda p: p.n_ended)  # the engine goes on


def test_stats_metrics_waiting(make_engine):
    e = make_engine(total_pages=64, max_running=1)
    hs = [e.submit(i, 16, user=i) for i in range(1, 6)]
    step_until(e, lambda p: p.n_admitted)
    w = e.waiting()
    assert [x.handle for x in w] == hs[1:] and [x.position for x in w] == [0, 1, 2, 3]
    assert [x.user for x in e.waiting(max=2)] == [2, 3]
    st = e.stats()
    assert isinstance(st, kvadmit.Stats) and st.submitted == 5 and st.waiting == 4
    assert st.fallbacks[Reason.NO_KEY] >= 1
    assert isinstance(st.time_to_admission, kvadmit.Histogram)
    prom = e.metrics()
    assert "kvadmit_build_info" in prom and "# TYPE" in prom
    om = e.metrics(kvadmit.MetricsFormat.OPENMETRICS)
    assert om.rstrip().endswith("# EOF")
    assert e.plan is e.step(10 * MS)


def test_plan_too_small_and_budget(make_engine):
    e = make_engine(total_pages=256, plan_sizes=kvadmit.PlanSizes(4, 2, 4, 4, 4))
    e.submit(1, 160)  # 10 pages: more than pages_cap
    plan = e.step(MS)
    assert plan.too_small and plan.n_admitted == 0
    e2 = make_engine(prefill_chunk_tokens=64)
    for i in range(4):
        e2.submit(i + 1, 64)
    plan = e2.step(MS, token_budget=100)
    assert plan.n_admitted == 2
    plan = e2.step(2 * MS, hold_admissions=True)
    assert plan.n_admitted == 0
    plan = e2.step(3 * MS)
    assert plan.n_admitted == 2


def test_close_with_unfinished_and_context_manager():
    seen = []
    with kvadmit.Engine(total_pages=64, page_tokens=16, copy_slots=1, max_running=4) as e:
        e.submit(1, 16, user=10)
        e.submit(2, 16, user=20)
        e.step(MS)
        e.submit(3, 16, user=30)
        e.close(on_unfinished=seen.append)
    assert sorted(x.user for x in seen) == [10, 20, 30]
    assert {x.state for x in seen} <= {State.WAITING, State.RUNNING}


def test_threads_submit_and_cancel_while_stepping(make_engine):
    e = make_engine(total_pages=4096, max_running=512)
    n_threads, per = 4, 500
    handles = [[] for _ in range(n_threads)]
    errors = []

    def producer(k):
        try:
            for i in range(per):
                h = e.submit(k * per + i + 1, 16)
                handles[k].append(h)
                if i % 3 == 0:
                    try:
                        e.cancel(h)
                    except kvadmit.NotFound:
                        pass  # the scheduler admitted and finished it first: ended
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
    threads = [threading.Thread(target=producer, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    admitted, ended, now = [], [], 0
    while any(t.is_alive() for t in threads) or len(admitted) + len(
            [x for x in ended if x.state is State.CANCELLED]) < n_threads * per:
        now += MS
        plan = e.step(now)
        for a in plan.admissions:
            admitted.append(a.handle)
            e.finish(a.handle)
        ended.extend(plan.ended)
        if now > 100_000 * MS:
            break
    for t in threads:
        t.join()
    assert not errors
    for _ in range(10):
        now += MS
        ended.extend(e.step(now).ended)
    st = e.stats()
    assert st.submitted == n_threads * per
    assert len(ended) == n_threads * per
    assert st.free_pages == st.total_pages


def test_wake_from_producer_thread(make_engine):
    woke = threading.Event()
    e = make_engine(wake=woke.set)
    t = threading.Thread(target=lambda: e.submit(1, 16))
    t.start()
    t.join()
    assert woke.wait(5)
    step_until(e, lambda p: p.n_admitted)


def test_register_at_fork_child_runs_an_engine():
    """In a fresh interpreter: a child may use kvadmit only if no other
    thread kvadmit registered was alive at the fork (kvadmit.h), and threads
    that earlier tests of this process started may still be ending."""
    code = textwrap.dedent("""
        import os, sys
        import kvadmit
        MS = 1_000_000
        kvadmit.register_at_fork()
        assert kvadmit.register_at_fork() is False
        with kvadmit.Engine(total_pages=64, page_tokens=16, copy_slots=1, max_running=4) as e:
            e.submit(1, 16)
            pid = os.fork()
            if pid == 0:  # child: the inherited engine and a new one
                code = 1
                try:
                    with kvadmit.Engine(total_pages=64, page_tokens=16, copy_slots=1,
                                        max_running=4) as c:
                        c.submit(1, 16)
                        code = 0 if c.step(MS).n_admitted == 1 else 2
                finally:
                    os._exit(code)
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == 0, status
            assert e.step(MS).n_admitted == 1
        print("ok")
    """)
    # the child imports the kvadmit under test, also when pytest alone put it on sys.path
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(kvadmit.__file__)))
    path = os.pathsep.join(p for p in (pkg, os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTHONPATH=path)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60, env=env)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


# ---- the CPU importer ------------------------------------------------------------------
PAGE = 64


def checkpoint_bytes(cid, pages):
    return bytes((cid * 7 + i) % 251 for i in range(pages * PAGE))


def test_cpu_importer_copies_bytes(make_engine):
    dest = bytearray(256 * PAGE)
    store = {(99, 1): checkpoint_bytes(99, 4)}
    resolved = []

    def resolve(cid, epoch, rank):
        resolved.append(threading.current_thread() is not threading.main_thread())
        return store.get((cid, epoch))
    imp = kvadmit.CpuImporter(dest, PAGE, resolve, threads=2)
    eng = []
    e = make_engine(total_pages=256, page_tokens=16, importers=[imp],
                    lookup=lambda k, p, t: eng[0].answer(t, [Checkpoint(64, 99, 1)]))
    eng.append(e)
    h = e.submit(1, 100, prefix_key=1)
    # the importer's threads copy in real time: let them finish between steps
    plan, now = step_until(e, lambda p: p.n_admitted, on_plan=lambda p: imp.wait_idle(10**9))
    a = plan.admissions[0]
    assert a.how is How.RESTORE and a.restored_tokens == 64 and resolved == [True]
    got = b"".join(bytes(dest[p * PAGE:(p + 1) * PAGE]) for p in plan.pages_of(a)[:4])
    assert got == store[(99, 1)]
    assert imp.wait_idle(10**9)
    s = imp.stats()
    assert s.jobs_ok == 1 and s.pages_copied == 4 and s.in_flight == 0
    assert imp.pinned == 0
    with pytest.raises(kvadmit.InvalidArgument):
        make_engine(importers=[imp])  # already belongs to an engine
    e.finish(h)
    e.close()
    assert imp.closed


def test_cpu_importer_failures_retry_then_fall_back(make_engine, caplog):
    caplog.set_level(logging.ERROR, logger="kvadmit")
    dest = bytearray(256 * PAGE)
    imp = kvadmit.CpuImporter(dest, PAGE, lambda cid, epoch, rank: None)  # always missing
    eng = []
    e = make_engine(total_pages=256, importers=[imp], max_copy_retries=1,
                    lookup=lambda k, p, t: eng[0].answer(t, [Checkpoint(64, 5, 1)]))
    eng.append(e)
    h = e.submit(1, 100, prefix_key=1)
    plan, now = step_until(e, lambda p: p.n_admitted, on_plan=lambda p: imp.wait_idle(10**9))
    assert plan.admissions[0].how is How.RECOMPUTE
    assert plan.admissions[0].reason is Reason.RETRIES_EXHAUSTED
    assert imp.stats().jobs_failed == 2
    imp.set_failures(0.5, 3)
    t = kvadmit.CopyToken(1, 1, 1, 1)
    assert kvadmit.CpuImporter.fails(3, 1.0, t, 0) and not kvadmit.CpuImporter.fails(3, 0.0, t, 0)
    e.finish(h)


def test_cpu_importer_resolve_raising_is_logged(caplog):
    caplog.set_level(logging.ERROR, logger="kvadmit")

    def resolve(cid, epoch, rank):
        raise OSError("store offline")
    imp = kvadmit.CpuImporter(bytearray(64 * PAGE), PAGE, resolve)
    eng = []
    with kvadmit.Engine(total_pages=64, page_tokens=16, copy_slots=1, max_running=4,
                        importers=[imp], max_copy_retries=0,
                        lookup=lambda k, p, t: eng[0].answer(t, [Checkpoint(32, 5, 1)])) as e:
        eng.append(e)
        e.submit(1, 48, prefix_key=1)
        plan, _ = step_until(e, lambda p: p.n_admitted, on_plan=lambda p: imp.wait_idle(10**9))
        assert plan.admissions[0].how is How.RECOMPUTE
    assert "store offline" in caplog.text


def test_cpu_importer_bad_config():
    with pytest.raises(kvadmit.InvalidArgument):
        kvadmit.CpuImporter(bytearray(64), 0, lambda *a: None)
    with kvadmit.CpuImporter(bytearray(64 * PAGE), PAGE, lambda *a: None) as imp:
        assert not imp.closed
    assert imp.closed
    with pytest.raises(kvadmit.KvadmitError):
        imp.stats()


@pytest.mark.parametrize("mode", [[], ["--credits-only"]])
def test_example_runs_to_completion(mode):
    """The vLLM-style example, on kvadmit's page ids and on the host's own
    block pool (credits only), with string request ids: it exits 0 only if
    every request finished, every page came back, something was restored
    and something preempted (and, credits only, every host block is free)."""
    here = os.path.dirname(os.path.abspath(__file__))
    ex = os.path.join(here, "..", "examples", "vllm_style_scheduler.py")
    r = subprocess.run([sys.executable, ex, "--requests", "300"] + mode, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    m = re.search(r"preempted (\d+) \(engine: (\d+)\)", r.stdout)
    assert m and int(m.group(1)) > 0 and m.group(1) == m.group(2), r.stdout
    assert ("host copies failed" in r.stdout) == bool(mode)


def test_readme_example_runs():
    """The README's example, extracted and run as written (so it cannot rot)."""
    import contextlib, io, pathlib, re
    text = (pathlib.Path(__file__).resolve().parents[1] / "README.md").read_text()
    code = re.search(r"```python\n(import queue.*?)```", text, re.S).group(1)
    assert len(code.strip().splitlines()) <= 25
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})
    assert out.getvalue().split() == ["RESTORE", "256", "44"]
