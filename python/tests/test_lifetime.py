# SPDX-License-Identifier: Apache-2.0
"""Lifetimes and error mapping: what the binding keeps alive for the C side,
when and on which thread it destroys engines and importers, and which
exception an argument the C types cannot hold raises.

Where the wrong behaviour would destroy memory the library still uses (a
destroy on an importer's own worker, or under a running kva_step), the
scenario runs in a child interpreter that reports what it saw as JSON, so a
regression fails the test instead of crashing the suite."""
import array
import ctypes.util
import gc
import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
import tracemalloc
import weakref

import pytest

import kvadmit
from kvadmit import Checkpoint, CopyToken, Handle, How, LookupToken, PlanSizes
from conftest import MS, step_until

PAGE = 64
PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(kvadmit.__file__)))


class Buf(bytearray):
    """A bytearray that can be weakly referenced: tells when the binding let
    a resolved source go."""


CHILD_PRELUDE = """
import gc, json, signal, sys, threading, time, weakref
import kvadmit
from kvadmit import Checkpoint
PAGE = 64
out = {}
def wait_for(cond, limit=10):
    deadline = time.monotonic() + limit
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.001)
    return cond()
"""


def run_child(code, timeout=60):
    """Runs CHILD_PRELUDE and `code` in a fresh interpreter importing the
    kvadmit under test; returns (returncode, the JSON its last stdout line
    printed, stderr)."""
    env = dict(os.environ, PYTHONPATH=PKG_DIR, PYTHONDONTWRITEBYTECODE="1")
    r = subprocess.run([sys.executable, "-c", CHILD_PRELUDE + textwrap.dedent(code)],
                       capture_output=True, text=True, timeout=timeout, env=env)
    lines = r.stdout.strip().splitlines()
    try:
        out = json.loads(lines[-1]) if lines else None
    except ValueError:
        out = None
    return r.returncode, out, r.stderr


# ---- CpuImporter: a resolved source lives until its own job is reported -----------------
def test_two_jobs_resolving_one_checkpoint_keep_both_sources(make_engine):
    """Two restores of one shared prefix resolve the same checkpoint at once,
    each to a fresh object: the first job's source must live until the
    first job is reported, not only until the second resolve (review #1)."""
    refs, lock, both = [], threading.Lock(), threading.Event()

    def resolve(cid, epoch, rank):
        obj = Buf(4 * PAGE)  # a fresh object, nothing else holds it
        with lock:
            refs.append(weakref.ref(obj))
            if len(refs) == 2:
                both.set()
        return obj
    # the injected latency holds both jobs between resolve and copy; close cuts it short
    imp = kvadmit.CpuImporter(bytearray(256 * PAGE), PAGE, resolve, threads=2,
                              latency_ns=60 * 10**9)
    eng = []
    e = make_engine(total_pages=256, importers=[imp],
                    lookup=lambda k, p, t: eng[0].answer(t, [Checkpoint(64, 99, 1)]))
    eng.append(e)
    e.submit(1, 100, prefix_key=1)
    e.submit(2, 100, prefix_key=1)
    copies = []
    step_until(e, lambda p: len(copies) >= 2, on_plan=lambda p: copies.extend(p.copies))
    assert both.wait(10)
    deadline = time.monotonic() + 2
    while imp.pinned < 2 and time.monotonic() < deadline:
        time.sleep(0.001)  # the second resolve's own pinning, right after it returned
    assert imp.pinned == 2
    assert [r() is not None for r in refs] == [True, True]  # neither job reported yet
    assert imp.stats().in_flight == 2
    e.close()  # both jobs copy from their sources, are reported, and let them go
    assert imp.closed and imp.pinned == 0
    assert [r() is None for r in refs] == [True, True]


def test_job_cancelled_at_close_keeps_another_jobs_source(make_engine):
    """At close, a job that had not started is reported cancelled without a
    resolve. Its report must not release the source of another job of the
    same checkpoint that is still being reported (review #2).

    Jobs: E (checkpoint 100) holds worker X in resolve; C (checkpoint 99)
    resolved on worker Y and waits in the injected latency; D (checkpoint
    99) is queued. close(): Y copies C and reports it; C's report wakes the
    engine, and the wake (on Y, inside C's report) lets E finish, so X
    reports E, takes D, reports it cancelled and exits (destroy has begun);
    the wake then looks at C's source."""
    st = {"closing": False, "c_thread": None, "x_tid": None, "seen": None}
    c_ref = []
    release_e = threading.Event()
    entered = {99: threading.Event(), 100: threading.Event()}

    def resolve(cid, epoch, rank):
        if cid == 100:
            st["x_tid"] = threading.get_native_id()
            entered[100].set()
            release_e.wait(10)
            return bytes(4 * PAGE)
        obj = Buf(4 * PAGE)  # only C resolves checkpoint 99: D never starts
        c_ref.append(weakref.ref(obj))
        st["c_thread"] = threading.get_ident()
        entered[99].set()
        return obj
    imp = kvadmit.CpuImporter(bytearray(256 * PAGE), PAGE, resolve, threads=2,
                              latency_ns=60 * 10**9)

    def wake():
        if not st["closing"] or st["seen"] is not None or \
                threading.get_ident() != st["c_thread"]:
            return
        release_e.set()
        x_task = f"/proc/self/task/{st['x_tid']}"
        deadline = time.monotonic() + 10
        while os.path.exists(x_task) and time.monotonic() < deadline:
            time.sleep(0.001)  # X: E reported, D reported cancelled, then it exits
        st["seen"] = (not os.path.exists(x_task), c_ref[0]() is not None)

    cps = {1: Checkpoint(64, 100, 1), 2: Checkpoint(64, 99, 1), 3: Checkpoint(64, 99, 1)}
    eng = []
    e = make_engine(total_pages=256, importers=[imp], wake=wake,
                    lookup=lambda k, p, t: eng[0].answer(t, [cps[k]]))
    eng.append(e)
    e.submit(1, 100, prefix_key=1)  # E
    _, now = step_until(e, lambda p: p.n_copies)
    assert entered[100].wait(10)
    e.submit(2, 100, prefix_key=2)  # C
    _, now = step_until(e, lambda p: p.n_copies, now)
    assert entered[99].wait(10)
    e.submit(3, 100, prefix_key=3)  # D: both workers busy, it waits in the queue
    _, now = step_until(e, lambda p: p.n_copies, now)
    assert imp.stats().in_flight == 3
    e.step(now + MS)  # the inbox is empty: C's report will wake the engine
    st["closing"] = True
    e.close()
    release_e.set()
    assert st["seen"] == (True, True)  # D was reported while C's source was still held
    assert imp.closed and imp.pinned == 0 and c_ref[0]() is None


# ---- destroys: never on an importer's own worker, never under a running step ----------


def test_engine_collected_on_an_importer_worker_is_destroyed_on_a_helper_thread():
    """An engine in a reference cycle, dropped while its CpuImporter copies,
    may be collected on that importer's worker (inside resolve). The
    finalizer must not destroy the importer there: its destroy joins that
    very thread, and would free it under the running job (review #3)."""
    rc, out, err = run_child("""
    STORE = bytes(4 * PAGE)
    tokens = []
    WR = []

    dropped = threading.Event()

    def resolve(cid, epoch, rank):
        dropped.wait(10)  # until the host let the engine go
        out["engine_alive_before"] = WR[0]() is not None
        gc.collect()  # the collection that finds the dropped engine runs here
        out["engine_collected"] = WR[0]() is None
        out["importer_destroyed_inside_resolve"] = IMP.closed
        return STORE

    class Host:
        def __init__(self):
            self.imp = kvadmit.CpuImporter(bytearray(256 * PAGE), PAGE, resolve)
            self.engine = kvadmit.Engine(total_pages=256, page_tokens=16,
                                         importers=[self.imp],
                                         lookup=lambda k, p, t: tokens.append(t))
            self.me = self  # a cycle: only the cyclic GC frees it
    gc.disable()
    h = Host()
    IMP = h.imp
    WR.append(weakref.ref(h.engine))
    h.engine.submit(1, 100, prefix_key=1)
    h.engine.step(1_000_000)
    h.engine.answer(tokens.pop(), [Checkpoint(64, 99, 1)])
    out["copies"] = h.engine.step(2_000_000).n_copies
    del h
    dropped.set()
    out["importer_destroyed_later"] = wait_for(lambda: IMP.closed)
    print(json.dumps(out))
    """)
    assert rc == 0, err
    assert out == {"copies": 1, "engine_alive_before": True, "engine_collected": True,
                   "importer_destroyed_inside_resolve": False,
                   "importer_destroyed_later": True}, err
    assert "callback raised" not in err


def test_close_inside_resolve_destroys_on_a_helper_thread():
    """Engine.close() called from resolve (on the importer's own worker)
    closes the engine for calls at once and destroys it on a helper
    thread once that worker is free (review #3, explicit close)."""
    rc, out, err = run_child("""
    E = []
    stepped = threading.Event()
    def resolve(cid, epoch, rank):
        stepped.wait(10)  # not while the scheduler steps (close() would be Busy)
        E[0].close()
        out["engine_closed"] = E[0].closed
        out["importer_destroyed_inside_resolve"] = IMP.closed
        return bytes(4 * PAGE)
    IMP = kvadmit.CpuImporter(bytearray(256 * PAGE), PAGE, resolve)
    e = kvadmit.Engine(total_pages=256, page_tokens=16, importers=[IMP],
                       lookup=lambda k, p, t: E[0].answer(t, [Checkpoint(64, 99, 1)]))
    E.append(e)
    e.submit(1, 100, prefix_key=1)
    out["copies"] = e.step(1_000_000).n_copies
    stepped.set()
    out["importer_destroyed_later"] = wait_for(lambda: IMP.closed)
    try:
        e.step(2_000_000)
    except kvadmit.InvalidArgument:
        out["step_after"] = "InvalidArgument"
    print(json.dumps(out))
    """)
    assert rc == 0, err
    assert out == {"copies": 1, "engine_closed": True,
                   "importer_destroyed_inside_resolve": False,
                   "importer_destroyed_later": True, "step_after": "InvalidArgument"}, err


def test_close_inside_step_is_deferred_until_kva_step_returns():
    """close() reached inside this engine's step -- a lookup callback, or a
    SIGTERM handler running in one -- must not destroy the engine under
    kva_step: step() destroys it once kva_step returned, then raises
    InvalidArgument (review #8)."""
    rc, out, err = run_child("""
    in_lookup = [False]
    unfinished = []
    E = []

    def on_term(signum, frame):
        E[0].close(on_unfinished=lambda x: unfinished.append((x.handle.id, in_lookup[0])))
        out.setdefault("closed_in_handler", E[0].closed)

    def lookup(key, prompt, token):
        in_lookup[0] = True
        try:
            if key == 3:
                signal.raise_signal(signal.SIGTERM)  # the handler runs inside this callback
            elif key != 2:
                E[0].answer(token, [])
        finally:
            in_lookup[0] = False
    signal.signal(signal.SIGTERM, on_term)
    e = kvadmit.Engine(total_pages=1024, page_tokens=16, max_running=64, lookup=lookup)
    E.append(e)
    for i in range(1, 7):
        e.submit(i, 100, prefix_key=i)
    try:
        e.step(1_000_000)
        out["step"] = "returned"
    except kvadmit.InvalidArgument as exc:
        out["step"] = "InvalidArgument"
    out["unfinished"] = sorted(unfinished)
    e.close()  # idempotent
    print(json.dumps(out))
    """)
    assert rc == 0, err
    assert out == {"closed_in_handler": True, "step": "InvalidArgument",
                   "unfinished": [[i, False] for i in range(1, 7)]}, err


def test_close_while_another_thread_steps_or_inside_wake_raises_busy():
    """close() from another thread while step() runs, or inside the
    engine's own wake callback (inside submit), cannot destroy safely:
    Busy, and the engine goes on (review #8)."""
    rc, out, err = run_child("""
    in_lookup, tried = threading.Event(), threading.Event()
    E = []

    def lookup(key, prompt, token):
        in_lookup.set()
        tried.wait(10)  # the other thread's close() happens now
        E[0].answer(token, [])

    def closer():
        in_lookup.wait(10)
        try:
            E[0].close()
            out["other_thread"] = "closed"
        except kvadmit.Busy:
            out["other_thread"] = "Busy"
        tried.set()

    def wake():
        if out.get("wake") is None and "other_thread" in out:
            try:
                E[0].close()
                out["wake"] = "closed"
            except kvadmit.Busy:
                out["wake"] = "Busy"
    e = kvadmit.Engine(total_pages=1024, page_tokens=16, max_running=64, lookup=lookup,
                       wake=wake)
    E.append(e)
    t = threading.Thread(target=closer)
    t.start()
    e.submit(1, 100, prefix_key=1)
    out["first_step_admitted"] = e.step(1_000_000).n_admitted
    t.join()
    e.step(2_000_000)  # the inbox is empty again
    e.submit(2, 100)   # wake: close() inside it
    out["second_step_admitted"] = e.step(3_000_000).n_admitted
    e.close()
    out["closed"] = e.closed
    print(json.dumps(out))
    """)
    assert rc == 0, err
    assert out == {"other_thread": "Busy", "first_step_admitted": 1, "wake": "Busy",
                   "second_step_admitted": 1, "closed": True}, err


# ---- engines whose callbacks refer to them are collected ---------------------------------
def test_engine_whose_callbacks_refer_to_it_is_collected():
    """A host object whose bound methods are the engine's callbacks (and
    which holds the engine) is an ordinary cycle: the GC must collect it and
    the finalizer close the engine and its importer (review #4)."""
    class Host:
        def __init__(self, kind):
            self.imp = kvadmit.CpuImporter(bytearray(64 * PAGE), PAGE, self.resolve) \
                if kind == "cpu" else None
            importers = [self.imp] if kind == "cpu" else [self.import_job]
            self.engine = kvadmit.Engine(total_pages=64, page_tokens=16, copy_slots=1,
                                         max_running=4, lookup=self.lookup, log=self.log,
                                         log_record=self.log_record, wake=self.wake,
                                         importers=importers)

        def lookup(self, key, prompt, token):
            self.engine.answer(token, [Checkpoint(32, 5, 1)])

        def log(self, level, message):
            self.engine

        def log_record(self, rec):
            self.engine

        def wake(self):
            self.engine

        def import_job(self, job):
            self.engine.copy_done(job.token, job.rank, 0)
            return 0

        def resolve(self, cid, epoch, rank):
            Host.worker_tid = threading.get_native_id()
            return bytes(2 * PAGE) if self.engine else None

    def restore_once(kind):
        """A restore through the host's callbacks; returns a weak reference
        to the engine and drops everything else (holding the host's
        importer would hold its resolve, the host, the engine)."""
        h = Host(kind)
        h.engine.submit(1, 48, prefix_key=1)
        wait = h.imp.wait_idle if h.imp else (lambda timeout: True)
        plan, _ = step_until(h.engine, lambda p: p.n_admitted, on_plan=lambda p: wait(10**9))
        assert plan.admissions[0].how is How.RESTORE
        return weakref.ref(h.engine)
    gc.disable()  # the cycles go at the collect below, not at some allocation before
    try:
        refs = [restore_once("cpu"), restore_once("callable")]
        worker = f"/proc/self/task/{Host.worker_tid}"
        assert os.path.exists(worker)  # the CpuImporter's worker thread
    finally:
        gc.enable()
    gc.collect()
    assert [r() for r in refs] == [None, None]
    assert not os.path.exists(worker)  # its engine's finalizer destroyed the importer


# ---- CpuImporter.close on an importer an engine owns ----------------------------------
def test_close_of_an_importer_an_engine_owns_raises(make_engine):
    """CpuImporter.close() on an importer an engine owns would let the
    engine submit copy jobs into a destroyed importer (review #5)."""
    store = {(99, 1): bytes(4 * PAGE)}
    imp = kvadmit.CpuImporter(bytearray(256 * PAGE), PAGE, lambda c, ep, r: store.get((c, ep)))
    eng = []
    e = make_engine(total_pages=256, importers=[imp],
                    lookup=lambda k, p, t: eng[0].answer(t, [Checkpoint(64, 99, 1)]))
    eng.append(e)
    with pytest.raises(kvadmit.InvalidArgument):
        imp.close()
    with imp:  # __exit__ leaves an owned importer alone
        pass
    assert not imp.closed
    e.submit(1, 100, prefix_key=1)  # the importer still works
    plan, _ = step_until(e, lambda p: p.n_admitted, on_plan=lambda p: imp.wait_idle(10**9))
    assert plan.admissions[0].how is How.RESTORE
    e.close()
    assert imp.closed
    imp.close()  # no one's now: idempotent


# ---- submit's per-thread buffer --------------------------------------------------------
def test_failed_submit_leaves_nothing_for_the_next_one(make_engine):
    """A submit whose `local` cannot be converted must not leave its `user`
    and `local` in the thread's request buffer for the next submit (review #6)."""
    e = make_engine()
    with pytest.raises(Exception):  # a malformed local checkpoint (epoch < 0)
        e.submit(1, 300, user=777, local=Checkpoint(128, 5, -1))
    with pytest.raises(Exception):  # a malformed tuple
        e.submit(1, 300, user=778, local=(128, "x"))
    h = e.submit(2, 300)
    assert e.query(h).user == 0
    plan, _ = step_until(e, lambda p: p.n_admitted)
    (a,) = plan.admissions
    assert (a.handle, a.how, a.local_tokens, a.user) == (h, How.RECOMPUTE, 0, 0)
    h3 = e.submit(3, 300, user=5, local=Checkpoint(64, 6, 1))  # a good one still works
    with pytest.raises(Exception):  # the budget half-set
        e.step(10 * MS, token_budget=64, hold_admissions=5)
    plan, _ = step_until(e, lambda p: p.n_admitted)
    (a,) = plan.admissions
    assert (a.handle, a.user, a.local_tokens) == (h3, 5, 64)


# ---- a failed Engine(...) gives its importers back --------------------------------------
def test_failed_engine_construction_releases_its_importers(make_engine):
    """Engine(...) raising after it claimed a CpuImporter (a bad config
    field, a bad later entry, bad plan sizes, the importer listed twice)
    must leave the importer the host's: reusable, and closed by `with`
    (review #7)."""
    def new_imp():
        return kvadmit.CpuImporter(bytearray(64 * PAGE), PAGE, lambda *a: None, threads=2)
    failing = [
        (kvadmit.InvalidArgument, lambda imp: dict(total_pages=64, page_tokens=0,
                                                    importers=[imp])),
        (TypeError, lambda imp: dict(total_pages=64, page_tokens=16, world_size=2,
                                     importers=[imp, object()])),
        ((kvadmit.KvadmitError, OverflowError),
         lambda imp: dict(total_pages=64, page_tokens=16, importers=[imp],
                          plan_sizes=PlanSizes(-1, 64, 64, 4, 4))),
        (kvadmit.InvalidArgument, lambda imp: dict(total_pages=64, page_tokens=16,
                                                    world_size=2, importers=[imp, imp])),
    ]
    for exc, kw in failing:
        imp = new_imp()
        with pytest.raises(exc):
            kvadmit.Engine(copy_slots=1, max_running=4, **kw(imp))
        e = make_engine(total_pages=64, importers=[imp])  # reusable
        e.close()
        assert imp.closed
        imp = new_imp()
        with pytest.raises(exc):
            kvadmit.Engine(copy_slots=1, max_running=4, **kw(imp))
        with imp:
            pass
        assert imp.closed  # `with` closed it: no worker threads left behind


# ---- arguments the C types cannot hold ----------------------------------------------------
def test_unconvertible_arguments_raise_kvadmit_errors(make_engine):
    """Every argument cffi cannot convert raises the documented KvadmitError
    subclass, as the library would answer (review #9)."""
    e = make_engine(total_pages=1024, world_size=1)
    h = e.submit(1, 100)
    step_until(e, lambda p: p.n_admitted)
    tok = LookupToken(1, 1, 1, 1)
    IA, OOR = kvadmit.InvalidArgument, kvadmit.OutOfRange
    cases = [
        (IA, lambda: e.submit(-1, 100)),
        (IA, lambda: e.submit(2, 2**32)),
        (IA, lambda: e.submit(2, 100, prefix_key=-1)),
        (IA, lambda: e.submit(2, 100, user="x")),
        (IA, lambda: e.submit(2, 100, local=Checkpoint(-5, 1))),
        (OOR, lambda: e.submit(2, 100, local=Checkpoint(2**32, 1))),
        (IA, lambda: e.cancel(Handle(-1, 0, 0))),
        (IA, lambda: e.finish(Handle(2**64, 0, 0))),
        (IA, lambda: e.preempt(Handle(1, -1, 0))),
        (IA, lambda: e.query(Handle(1, 0, "x"))),
        (OOR, lambda: e.copy_done(CopyToken(1, 1, 1, 1), -1, 0)),
        (OOR, lambda: e.copy_done(CopyToken(1, 1, 1, 1), 2**32, 0)),
        (IA, lambda: e.copy_done(CopyToken(-1, 1, 1, 1), 0, 0)),
        (IA, lambda: e.copy_done(CopyToken(1, 1, 1, 1), 0, 2**40)),
        (IA, lambda: e.answer(tok, [Checkpoint(-5, 1)])),
        (IA, lambda: e.answer(tok, [Checkpoint(16, 1, 1, location=-1)])),
        (IA, lambda: e.answer(LookupToken(-1, 1, 1, 1), [])),
        (IA, lambda: e.local_checkpoint(h, (16, -1))),
        (OOR, lambda: e.local_checkpoint(h, (2**32, 1))),
        (IA, lambda: e.checkpoint_evicted(-1, 0)),
        (OOR, lambda: e.grow(h, -1)),
        (OOR, lambda: e.grow(h, -1, out=False)),
        (OOR, lambda: e.grow(h, 1025)),
        (IA, lambda: e.grow(h, "1")),
        (IA, lambda: e.grow(h, 1, out=object())),
        (IA, lambda: e.step(-1)),
        (IA, lambda: e.step(2 * MS, token_budget=-1)),
        (IA, lambda: e.waiting(-1)),
        (IA, lambda: e.metrics(2**40)),
        (IA, lambda: e.metrics("x")),
        (IA, lambda: kvadmit.Engine(total_pages=-1, page_tokens=16)),
        (IA, lambda: kvadmit.Engine(total_pages="x", page_tokens=16)),
        (IA, lambda: kvadmit.CpuImporter(bytearray(64 * PAGE), PAGE, None, threads=-1)),
        (IA, lambda: kvadmit.CpuImporter(b"read-only", PAGE, None)),
        (IA, lambda: kvadmit.CpuImporter.fails(-1, 0.5, CopyToken(1, 1, 1, 1), 0)),
    ]
    wrong = []
    for i, (want, call) in enumerate(cases):
        try:
            call()
            wrong.append((i, "no error"))
        except want:
            pass
        except BaseException as exc:
            wrong.append((i, repr(exc)))
    assert wrong == []
    with kvadmit.CpuImporter(bytearray(64 * PAGE), PAGE, lambda *a: None) as imp:
        with pytest.raises(IA):
            imp.wait_idle(-1)
        with pytest.raises(IA):
            imp.set_failures("x")
    # the engine is fine after all that
    assert e.query(h).state is kvadmit.State.RUNNING and len(e.grow(h, 2)) == 2


def test_grow_checks_pages_before_allocating_the_id_array(make_engine):
    """grow(h, n) with n beyond the pool must raise OutOfRange without
    allocating an n-entry id array first (review #9)."""
    e = make_engine(total_pages=1024)
    h = e.submit(1, 16)
    step_until(e, lambda p: p.n_admitted)
    tracemalloc.start()
    try:
        with pytest.raises(kvadmit.OutOfRange):
            e.grow(h, 1 << 22)  # 16 MiB of ids
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
    assert list(e.grow(h, 3, out=array.array("I", [0] * 3))) != [0, 0, 0]


# ---- the in-tree library search ------------------------------------------------------------
def test_in_tree_search_skips_sanitizer_builds(tmp_path, monkeypatch):
    """build/asan sorts before build/rel's siblings: dlopen of an ASan
    library aborts the interpreter, so the search must not try it (review,
    not counted)."""
    from kvadmit import _lib
    pkg = tmp_path / "python" / "kvadmit"
    pkg.mkdir(parents=True)
    bodies = {"asan": b"\x7fELF... U __asan_init ...", "tsan": b"\x7fELF... U __tsan_init",
              "fuzz": b"\x7fELF... __asan_init __sancov", "plain": b"\x7fELF... kva_step"}
    for name, body in bodies.items():
        (tmp_path / "build" / name).mkdir(parents=True)
        (tmp_path / "build" / name / _lib.SONAME).write_bytes(body)
    monkeypatch.delenv("KVADMIT_LIBRARY", raising=False)
    monkeypatch.setattr(_lib, "_HERE", str(pkg))
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None)
    found = [p for p in _lib._candidates() if p.startswith(str(tmp_path))]
    assert found == [str(tmp_path / "build" / "plain" / _lib.SONAME)]


def test_import_with_only_an_asan_build_beside_raises_importerror(tmp_path):
    """The same end to end, with the tree's real ASan build: ImportError
    (or the next build), never an aborted interpreter."""
    rel = os.path.realpath(kvadmit.library_path)
    asan = os.path.join(os.path.dirname(os.path.dirname(rel)), "asan", "libkvadmit.so.0.2")
    if not os.path.exists(asan) or ctypes.util.find_library("kvadmit"):
        pytest.skip("needs the tree's build/asan and no installed libkvadmit")
    with open(rel, "rb") as f:
        if b"__asan_init" in f.read():
            pytest.skip("the library under test is itself an ASan build")
    shutil.copytree(os.path.join(PKG_DIR, "kvadmit"), tmp_path / "python" / "kvadmit",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "build" / "asan").mkdir(parents=True)
    os.symlink(asan, tmp_path / "build" / "asan" / "libkvadmit.so.0.2")
    env = {k: v for k, v in os.environ.items() if k not in ("KVADMIT_LIBRARY", "LD_PRELOAD")}
    env.update(PYTHONPATH=str(tmp_path / "python"), PYTHONDONTWRITEBYTECODE="1")
    code = "import kvadmit; print(kvadmit.library_path)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=60)
    assert r.returncode == 1 and "ImportError" in r.stderr and "sanitizer" in r.stderr, r.stderr
    (tmp_path / "build" / "zz").mkdir()
    os.symlink(rel, tmp_path / "build" / "zz" / "libkvadmit.so.0.2")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(tmp_path / "build" / "zz" / "libkvadmit.so.0.2")
