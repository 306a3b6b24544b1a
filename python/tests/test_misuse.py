# SPDX-License-Identifier: Apache-2.0
"""Misuse raises, never crashes; interrupts are never lost (issue 34).

A second concurrent step(), close() while other threads are inside calls,
a handle of another engine, wrong types and out-of-range integers, and a
storm of SIGINTs against a stepping loop. Scenarios that crashed the
interpreter before run in a child interpreter (test_lifetime.run_child), so
a regression fails the test instead of killing the suite."""
import threading

import pytest

import kvadmit
from kvadmit import Checkpoint, CopyToken, Handle, LookupToken
from conftest import MS, step_until
from test_lifetime import run_child


# ---- one step at a time ------------------------------------------------------------------
def test_a_second_concurrent_step_raises_busy_and_changes_nothing(make_engine):
    inside, go = threading.Event(), threading.Event()
    E = []

    def lookup(key, prompt, token):
        inside.set()
        go.wait(10)
        E[0].answer(token, [])
    e = make_engine(lookup=lookup)
    E.append(e)
    e.submit(1, 100)               # no key: admitted
    e.submit(2, 100, prefix_key=7)  # its lookup holds the step
    out = {}

    def scheduler():
        out["admitted"] = sorted(a.handle.id for a in e.step(MS).admissions)
    t = threading.Thread(target=scheduler)
    t.start()
    assert inside.wait(10)
    for _ in range(3):
        with pytest.raises(kvadmit.Busy):
            e.step(2 * MS)
    with pytest.raises(kvadmit.Busy):  # nor may it close under the running step
        e.close()
    go.set()
    t.join(10)
    assert out == {"admitted": [1, 2]}  # 2's miss was answered inside the step
    s = e.stats()
    assert (s.steps, s.running, s.waiting) == (1, 2, 0)
    assert e.step(3 * MS).n_admitted == 0  # this thread steps next
    assert e.stats().steps == 2


def test_two_threads_stepping_at_once_admit_each_request_once(make_engine):
    e = make_engine(total_pages=256, max_running=256)
    seen, lock = {}, threading.Lock()
    busy = [0, 0]
    rounds = 1500

    def loop(k):
        for i in range(rounds):
            e.submit(1 + k * rounds + i, 16)
            try:
                plan = e.step((i + 1) * MS)
            except kvadmit.Busy:
                busy[k] += 1
                continue
            for a in plan.admissions:
                with lock:
                    seen[a.handle.id] = seen.get(a.handle.id, 0) + 1
                e.finish(a.handle)
    ts = [threading.Thread(target=loop, args=(k,)) for k in (0, 1)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    for _ in range(10):
        for a in e.step(10**12).admissions:
            seen[a.handle.id] = seen.get(a.handle.id, 0) + 1
            e.finish(a.handle)
    assert sorted(seen) == list(range(1, 2 * rounds + 1))
    assert set(seen.values()) == {1}
    e.step(2 * 10**12)
    s = e.stats()
    assert (s.finished, s.running, s.waiting, s.free_pages) == (2 * rounds, 0, 0, 256)


def test_close_while_threads_submit_waits_for_their_calls_then_they_find_it_closed():
    """close() while other threads are inside calls waits for those calls
    (new ones find the engine closed) and then destroys it; every later
    call raises InvalidArgument, and nothing crashes. Before, the
    interpreter crashed (SIGSEGV)."""
    rc, out, err = run_child("""
    e = kvadmit.Engine(total_pages=4096, page_tokens=16, max_running=4096)
    stop = threading.Event()
    counts = {"submitted": 0, "closed_errors": 0, "other": 0}
    lock = threading.Lock()
    def submitter(k):
        i = 0
        while not stop.is_set():
            i += 1
            try:
                h = e.submit(k * 10**9 + i, 16)
                e.query(h)
                e.cancel(h)
                with lock:
                    counts["submitted"] += 1
            except kvadmit.InvalidArgument as exc:
                with lock:
                    counts["closed_errors"] += 1
                if "closed" in str(exc):
                    return
                counts["other"] += 1
    ts = [threading.Thread(target=submitter, args=(k,)) for k in range(1, 4)]
    for t in ts:
        t.start()
    wait_for(lambda: counts["submitted"] > 200)
    e.close()  # waits for the calls in flight
    out["closed"] = e.closed
    stop.set()
    for t in ts:
        t.join(10)
    out["threads_saw_closed"] = counts["closed_errors"] == 3
    out["other"] = counts["other"]
    print(json.dumps(out))
    """)
    assert rc == 0, err
    assert out == {"closed": True, "threads_saw_closed": True, "other": 0}, err


# ---- handles carry their engine ----------------------------------------------------------
def test_a_handle_of_another_engine_is_refused(make_engine):
    a, b = make_engine(), make_engine()
    ha, hb = a.submit(1, 16), b.submit(1, 16)
    assert ha[:3] == hb[:3] and ha != hb  # same id, slot and generation
    step_until(a, lambda p: p.n_admitted)
    step_until(b, lambda p: p.n_admitted)
    for call in (b.finish, b.cancel, b.preempt, b.query, lambda h: b.grow(h, 1),
                 lambda h: b.local_checkpoint(h, (16, 5))):
        with pytest.raises(kvadmit.InvalidArgument, match="another engine"):
            call(ha)
    assert b.query(hb).state is kvadmit.State.RUNNING
    a.finish(ha)
    b.finish(hb)
    assert a.query(ha).handle == ha  # handles the engine hands back carry it too
    assert all(x.handle.engine == a.serial for x in a.plan.admissions)


# ---- types and ranges --------------------------------------------------------------------
def test_wrong_types_raise_typeerror_and_out_of_range_ints_overflowerror(make_engine):
    e = make_engine()
    h = e.submit(1, 100)
    step_until(e, lambda p: p.n_admitted)
    tok = LookupToken(1, 1, 1, 1)
    T, O = TypeError, OverflowError
    cases = [
        (O, lambda: e.submit(2, 100, user=2**64)),
        (O, lambda: e.submit(2, 100, user=2**70)),
        (O, lambda: e.submit(2, 100, user=-5)),
        (T, lambda: e.submit(2, 100, user="x")),
        (T, lambda: e.submit(2, 100, user=1.5)),
        (T, lambda: e.submit(2.0, 100)),
        (T, lambda: e.submit(b"2", 100)),
        (T, lambda: e.submit(2, 100.0)),
        (O, lambda: e.submit(-1, 100)),
        (O, lambda: e.submit(2, 2**32)),
        (O, lambda: e.submit(2, 100, prefix_key=2**64)),
        (T, lambda: e.cancel((1, 2))),
        (T, lambda: e.cancel(1)),
        (T, lambda: e.finish("h")),
        (T, lambda: e.query(Handle(1, 0, "x"))),
        (O, lambda: e.preempt(Handle(1, -1, 0))),
        (O, lambda: e.cancel(Handle(2**64, 1, 1))),
        (T, lambda: e.grow(h, "1")),
        (O, lambda: e.copy_done(CopyToken(-1, 1, 1, 1), 0, 0)),
        (O, lambda: e.copy_done(CopyToken(1, 1, 1, 1), 0, 2**40)),
        (T, lambda: e.answer(tok, [Checkpoint("5", 1)])),
        (O, lambda: e.answer(LookupToken(-1, 1, 1, 1), [])),
        (O, lambda: e.checkpoint_evicted(-1, 0)),
        (T, lambda: e.checkpoint_evicted(1.0, 0)),
        (T, lambda: e.step(1.5)),
        (O, lambda: e.step(-1)),
        (O, lambda: e.step(2 * MS, token_budget=-1)),
        (O, lambda: e.step(2 * MS, token_budget=2**32)),
        (T, lambda: e.step(2 * MS, token_budget="5")),
        (T, lambda: e.step(2 * MS, hold_admissions=5)),
        (T, lambda: kvadmit.Engine(total_pages="1024")),
        (T, lambda: kvadmit.Engine(total_pages=1024.0)),
        (O, lambda: kvadmit.Engine(total_pages=-1)),
        (O, lambda: kvadmit.Engine(total_pages=2**32)),
        (T, lambda: kvadmit.Engine(total_pages=64, lookup=5)),
        (T, lambda: kvadmit.Engine(total_pages=64, log="x")),
        (T, lambda: kvadmit.Engine(total_pages=64, log_record=3)),
        (T, lambda: kvadmit.Engine(total_pages=64, wake=object())),
    ]
    wrong = []
    for i, (want, call) in enumerate(cases):
        try:
            call()
            wrong.append((i, "no error"))
        except want as exc:
            if not isinstance(exc, (kvadmit.InvalidArgument, TypeError)):
                wrong.append((i, repr(exc)))
        except BaseException as exc:
            wrong.append((i, repr(exc)))
    assert wrong == []
    # the engine is fine after all that, and the user round-trips at its extremes
    h2 = e.submit(2, 16, user=2**64 - 1)
    assert e.query(h2).user == 2**64 - 1
    assert e.query(h).state is kvadmit.State.RUNNING and len(e.grow(h, 2)) == 2


@pytest.mark.parametrize("fields, name", [
    ({"total_pages": 0}, "total_pages"),
    ({"total_pages": 64, "page_tokens": 0}, "page_tokens"),
    ({"total_pages": 64, "decode_reserve_pages": 64}, "decode_reserve_pages"),
    ({"total_pages": 64, "decode_headroom_pages": 65}, "decode_headroom_pages"),
    ({"total_pages": 64, "world_size": 33}, "world_size"),
    ({"total_pages": 64, "copy_slots": 0}, "copy_slots"),
    ({"total_pages": 64, "max_running": 0}, "max_running"),
    ({"total_pages": 64, "prefill_chunk_tokens": 0}, "prefill_chunk_tokens"),
    ({"total_pages": 64, "policy": 7}, "policy"),
    ({"total_pages": 64, "log_level": 9}, "log_level"),
])
def test_construction_errors_name_the_field(fields, name):
    with pytest.raises(kvadmit.InvalidArgument, match=f"kva_config.{name}"):
        kvadmit.Engine(**fields)


# ---- the budget: None is no budget, 0 is nothing left ------------------------------------
def test_a_remaining_budget_of_zero_admits_nothing_that_prefills(make_engine):
    e = make_engine()
    hs = [e.submit(i, 64) for i in range(1, 4)]
    hit = e.submit(9, 64, local=Checkpoint(64, 90, location=kvadmit.Location.LOCAL))
    for i in range(3):
        assert e.step((i + 1) * MS, token_budget=0).n_admitted == 0
    assert e.stats().waiting == 4
    assert [a.handle for a in e.step(4 * MS, token_budget=64).admissions] == [hs[0]]
    assert {a.handle for a in e.step(5 * MS).admissions} == {hs[1], hs[2], hit}  # None


# ---- interrupts: kept, re-raised by step() with its plan; no lookup lost ------------------
def test_sigint_storm_against_a_stepping_loop_loses_no_interrupt_and_no_lookup():
    """A shell sends SIGINT as fast as it can while the host steps. The
    host's handler raises KeyboardInterrupt (at most once per step)
    wherever the main thread happens to be inside step(): in the
    binding, in a lookup or log callback wrapper -- before its try
    included. Every interrupt raised must come out of step() (with the
    step's plan when kva_step ran), and every lookup must reach the host or
    be answered as a miss: with lookup_timeout_ns=0 a lost one would leave
    its request waiting forever."""
    rc, out, err = run_child("""
    import os, subprocess
    import logging
    logging.disable(logging.CRITICAL)  # the binding logs each interrupted callback
    sys.setswitchinterval(1e-5)
    queue, seen = [], {}
    raised, caught, with_plan = [0], [0], [0]
    armed = [False]
    def on_int(signum, frame):
        if armed[0]:
            armed[0] = False
            raised[0] += 1
            raise KeyboardInterrupt
    signal.signal(signal.SIGINT, on_int)
    e = kvadmit.Engine(total_pages=1 << 14, page_tokens=16, max_running=4096,
                       lookup_timeout_ns=0, lookup_refresh_ns=0,
                       lookup=lambda k, p, t: queue.append(t),
                       log=lambda level, msg: None, log_level=kvadmit.LogLevel.DEBUG)
    def take(plan):
        for a in plan.admissions:
            seen[a.handle.id] = seen.get(a.handle.id, 0) + 1
            e.finish(a.handle)
    sender = subprocess.Popen([sys.executable, "-c", "import os, sys\\n"
                               "while True: os.kill(int(sys.argv[1]), 2)", str(os.getpid())],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    nid, now, steps = 0, 0, 0
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and raised[0] < 100:
        for _ in range(4):
            nid += 1
            e.submit(nid, 32, prefix_key=nid)
        now += 1_000_000
        plan = None
        armed[0] = True
        try:
            plan = e.step(now)
        except KeyboardInterrupt as ki:
            armed[0] = False
            caught[0] += 1
            plan = getattr(ki, "plan", None)  # none when it landed on step()'s first line
            with_plan[0] += plan is not None
        armed[0] = False
        steps += 1
        if plan is not None:
            take(plan)
        while queue:
            try:
                e.answer(queue.pop(), [])
            except kvadmit.Stale:
                pass  # answered as a miss by the binding already
    sender.kill()
    sender.wait()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for _ in range(100):
        while queue:
            try:
                e.answer(queue.pop(), [])
            except kvadmit.Stale:
                pass
        now += 1_000_000
        take(e.step(now))
        if len(seen) == nid:
            break
    e.step(now + 1_000_000)
    s = e.stats()
    out["raised_all_caught"] = raised[0] == caught[0]
    out["many"] = raised[0] >= 50
    out["some_with_plan"] = with_plan[0] > 0
    out["every_request_admitted_once"] = sorted(seen) == list(range(1, nid + 1)) and \\
        set(seen.values()) == {1}
    out["nothing_left"] = (s.waiting, s.running, s.finished == nid) == (0, 0, True)
    out["lookups_answered"] = s.lookups_issued == s.lookups_answered
    # no interrupted call left a count or the scheduler's claim behind
    out["nothing_counted"] = e._inflight == {} and e._claim == {} and e._stepping == 0
    e.close()
    out["closed"] = e.closed
    sys.stderr.write(f"steps {steps} requests {nid} interrupts {raised[0]} with plan "
                     f"{with_plan[0]} lookups {s.lookups_issued}/{s.lookups_answered} "
                     f"late {s.late_answers}\\n")
    print(json.dumps(out))
    """, timeout=120)
    assert rc == 0, err
    assert out == {"raised_all_caught": True, "many": True, "some_with_plan": True,
                   "every_request_admitted_once": True, "nothing_left": True,
                   "lookups_answered": True, "nothing_counted": True, "closed": True}, err


def test_an_interrupt_in_wake_is_raised_by_the_call_that_ran_it(make_engine):
    """wake runs inside submit (the inbox went from empty to non-empty): a
    KeyboardInterrupt there comes out of that submit, after the request was
    queued (nothing lost), and not out of a later step()."""
    raised = []

    def wake():
        if not raised:
            raised.append(1)
            raise KeyboardInterrupt
    e = make_engine(wake=wake)
    with pytest.raises(KeyboardInterrupt):
        e.submit(1, 16)
    plan = e.step(MS)  # no interrupt left over
    assert [a.handle.id for a in plan.admissions] == [1]


def test_an_interrupt_in_a_log_callback_comes_out_of_step_with_its_plan(make_engine):
    def log(level, msg):
        raise KeyboardInterrupt
    e = make_engine(log=log, log_level=kvadmit.LogLevel.DEBUG)
    e.submit(1, 16, prefix_key=0)
    e.submit(2, 16)
    e.submit(2, 16)  # a duplicate live id: a WARN line inside the step
    with pytest.raises(KeyboardInterrupt) as ki:
        e.step(MS)
    assert ki.value.plan is e.plan and ki.value.plan.n_admitted == 2
    assert e.step(2 * MS).n_admitted == 0  # the interrupt was raised once
