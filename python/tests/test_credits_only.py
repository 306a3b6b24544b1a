# SPDX-License-Identifier: Apache-2.0
"""A host that keeps its own block pool (Config.credits_only, the C
library's KVA_CONFIG_CREDITS_ONLY) and names its requests with strings
(vLLM's request_id): a full lifecycle with a failed copy and a preemption,
duplicates and collisions."""
import pytest

import kvadmit
from kvadmit import Checkpoint, How, State
from conftest import MS, step_until


def test_credits_only_lifecycle_with_string_ids(make_engine):
    tokens = []
    e = make_engine(total_pages=100, page_tokens=16, prefill_chunk_tokens=256,
                    decode_reserve_pages=0, credits_only=True,
                    lookup=lambda k, p, t: tokens.append(t))
    assert kvadmit.has_feature(kvadmit.Feature.CREDITS_ONLY)
    a = e.submit("req-a", 1000)
    b = e.submit("req-b", 100, prefix_key=7)
    assert (a.id, b.id) == ("req-a", "req-b")
    plan = e.step(MS)
    (adm,) = plan.admissions
    assert adm.handle == a and adm.npages == 16  # 256 tokens: 16 pages of the host's pool
    assert len(plan.pages_of(adm)) == 0 and len(plan.pages) == 0
    e.answer(tokens.pop(), [Checkpoint(64, 80, 1)])
    plan = e.step(2 * MS)
    (job,) = plan.copies
    assert job.handle == b and job.npages == 4 and len(job.pages) == 0
    assert e.grow(a, 8) is None  # counted, no ids
    assert e.query(a).pages_held == 24
    e.copy_done(job.token, 0, -5)  # the host's copy failed: the same checkpoint again
    plan = e.step(3 * MS)
    (job2,) = plan.copies
    assert job2.token.attempt == job.token.attempt + 1 and job2.npages == 4
    e.copy_done(job2.token, 0, 0)
    plan, now = step_until(e, lambda p: p.n_admitted, now=3 * MS)
    (adm,) = plan.admissions
    assert (adm.handle, adm.how, adm.restored_tokens, adm.npages) == (b, How.RESTORE, 64, 4)
    free = e.stats().free_pages
    e.preempt(a)
    assert e.stats().free_pages == free + 24
    plan, now = step_until(e, lambda p: p.n_admitted, now=now)
    assert plan.admissions[0].handle == a  # same string, same incarnation
    e.finish(a)
    e.cancel(b)
    plan, now = step_until(e, lambda p: p.n_ended >= 2, now=now,
                           on_plan=lambda p: None)
    ended = {x.handle.id: x.state for x in plan.ended}
    assert ended == {"req-a": State.FINISHED, "req-b": State.CANCELLED}
    e.step(now + MS)  # the host read that plan: the strings are free now
    assert e._ids.to_engine == {} and e._ids.to_host == {}
    s = e.stats()
    assert (s.free_pages, s.preempted, s.copy_attempts_failed) == (100, 1, 1)
    with pytest.raises(kvadmit.NotFound):
        e.query(a)
    again = e.submit("req-a", 16)  # a string is reusable once its request ended
    assert e.step(now + 2 * MS).admissions[0].handle == again


def test_a_live_string_submitted_again_is_rejected_and_keeps_its_request(make_engine):
    e = make_engine()
    h = e.submit("x", 16)
    e.step(MS)
    dup = e.submit("x", 16)
    plan = e.step(2 * MS)
    assert [(x.handle, x.state) for x in plan.ended] == [(dup, State.REJECTED)]
    e.step(3 * MS)
    assert e.query(h).state is State.RUNNING  # "x" still names the live one
    e.finish(h)


def test_string_and_int_ids_never_collide(make_engine):
    e = make_engine()
    hi, hs = e.submit(5, 16), e.submit("5", 16)
    got = {a.handle.id for a in e.step(MS).admissions}
    assert got == {5, "5"} and hi != hs
    with pytest.raises(kvadmit.InvalidArgument):
        e.submit(2**63, 16)  # the strings' range on this engine
    f = make_engine()
    f.submit(2**63 + 1, 16)
    with pytest.raises(kvadmit.InvalidArgument):
        f.submit("y", 16)


def test_credits_only_refuses_importers():
    imp = kvadmit.CpuImporter(bytearray(64 * 64), 64, lambda *a: bytes(64))
    try:
        with pytest.raises(kvadmit.InvalidArgument, match="credits_only"):
            kvadmit.Engine(total_pages=64, credits_only=True, importers=[imp])
    finally:
        imp.close()


# ---- zero-copy views and the cheap counters ----------------------------------------------
def test_views_read_the_plan_without_tuples_and_map_string_ids(make_engine):
    e = make_engine()
    hs = [e.submit(f"r{i}", 16 * (i + 1)) for i in range(5)]
    plan = e.step(MS)
    view = plan.admitted_view
    assert len(view) == plan.n_admitted == 5
    got = [(plan.host_id(a.handle.id), a.npages, a.how) for a in view]
    want = [(a.handle.id, a.npages, int(a.how)) for a in plan.admissions]
    assert got == want and [g[0] for g in got] == [h.id for h in hs]
    assert len(plan.ended_view) == 0 and len(plan.copies_view) == 0
    e.cancel(hs[0])
    e.finish(hs[1])
    plan = e.step(2 * MS)
    assert sorted(plan.host_id(x.handle.id) for x in plan.ended_view) == ["r0", "r1"]


def test_stats_raw_and_stats_agree(make_engine):
    e = make_engine()
    for i in range(3):
        e.submit(i + 1, 16)
    e.step(MS)
    raw = e.stats_raw()
    s = e.stats()
    for name in ("running", "waiting", "free_pages", "steps", "admitted_recompute"):
        assert getattr(raw, name) == getattr(s, name)
    assert raw.fallbacks[int(kvadmit.Reason.NO_KEY)] == s.fallbacks[kvadmit.Reason.NO_KEY] == 3
    assert s.capacity_wait.count == raw.capacity_wait.count
    assert e.stats_raw(raw) is raw  # reused
    with pytest.raises(Exception):  # Stats stays frozen although built without __init__
        s.running = 5
    assert s == e.stats()
