#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the seed corpus of the fuzz targets (tests/fuzz/corpus/<target>/).

Each seed is a short scripted scenario in the target's input encoding (see the
top of fuzz_engine.c, fuzz_differential.c and fuzz_lockfree.c), chosen so that
fuzzing starts from the deep paths -- imports completing on every rank,
retries and shorter checkpoints, reset, preemption, waiting heads and their
timers, evictions, importer refusals, allocation failures -- instead of having
to find them byte by byte. Regression inputs (regress-*) are kept as found
and are not rewritten here, except fuzz_config's, which are scripted below
(hardening issue, items 1-4). Run: python3 tests/fuzz/seeds.py
"""
import os

HERE = os.path.dirname(os.path.abspath(__file__))


class Enc:
    """Mirrors fuzz_input.h: fz_below(n) reads one byte for n <= 256, else two."""

    def __init__(self):
        self.b = bytearray()

    def u8(self, v):
        self.b.append(v & 0xFF)

    def u16(self, v):
        self.u8(v)
        self.u8(v >> 8)

    def below(self, n, v):
        assert 0 <= v < n, (v, n)
        if n <= 256:
            self.u8(v)
        else:
            self.u16(v)


# ---- fuzz_engine ----------------------------------------------------------------

ENGINE_STEP_DT = {0: 0, 1: 1, 2: 10, 3: 200, 4: 1000, 5: 3000, 6: 20000, 7: 70000}  # ms


class Engine(Enc):
    """Writes fuzz_engine inputs. Directory entries: (pos, local, compatible, id, epoch)."""

    def __init__(self, pages=40, pt=16, watermark=0, headroom=1, slots=2, retries=1,
                 legacy=False, chunk=64, running=8, world=1, importers=False,
                 timeouts=(1, 1, 1, 0), start=1, plan_big=True, dir=None):
        super().__init__()
        self.pages, self.pt = pages, pt
        self.usable = pages - watermark
        self.below(93, pages - 4)
        self.u8([1, 2, 4, 8, 16].index(pt))
        self.below(pages // 4 + 1, watermark)
        self.u8(headroom | (slots - 1) << 2 | retries << 4 | (3 << 6 if legacy else 0))
        self.below(16 * pt, chunk - 1)
        self.u8((running - 1) | (world - 1) << 3 | (0 if importers else 1) << 5)
        lt, wm, lg, rf = timeouts
        self.u8(lt | wm << 2 | lg << 4 | rf << 6)
        self.u8(start)
        if plan_big:
            self.u8(0xFF)  # every plan array "big"
            self.u8(0x08)
        else:
            self.u8(0x02)  # one admission per step, tight pages / copies / ended
            self.u8(0x11)
        dir = dir or {}
        for key in range(1, 6):
            immediate, entries = dir.get(key, (True, []))
            self.u8(1 if immediate else 0)
            self.manifest(entries)

    def manifest(self, entries):
        scale = self.usable * self.pt
        self.u8(len(entries))
        pos = 0
        for p, local, compat, cid, epoch in entries:
            x = (1 if local else 0) | (2 if compat else 0)
            self.u8(x)
            self.u8((cid - 1) & 7 | epoch << 3)
            self.below(scale // 2 + 2, p - pos - 1)
            pos = p

    def submit(self, id, key, prompt, big=False):
        self.u8(0)
        self.u8(id | key << 3 | (0x80 if big else 0))
        n = (self.pages + 4) * self.pt if big else self.usable * self.pt
        self.below(n, prompt - 1)

    def cancel(self, i):
        self.u8(2)
        self.u8(i)

    def answer(self, k, entries):
        self.u8(3)
        self.u8(k)
        self.manifest(entries)

    def copy_one(self, k, rank=0, fail=False):
        self.u8(4)
        self.u8(k)
        self.u8(rank | (0 if fail else 0x20))

    def copy_all(self, k, fail=False):
        self.u8(5)
        self.u8(k)
        self.u8(0 if fail else 0x40)

    def bogus(self, k, rank):
        self.u8(6)
        self.u8(k)
        self.u8(rank)

    def evict(self, cid, epoch):
        self.u8(7)
        self.u8((cid - 1) % 12 | epoch << 4)

    def grow(self, k, pages):
        self.u8(8)
        self.u8(k)
        self.u8(pages - 1)

    def preempt(self, k):
        self.u8(9)
        self.u8(k)

    def finish(self, k):
        self.u8(10)
        self.u8(k)

    def reset(self):
        self.u8(11)

    def fault(self, k):
        self.u8(12 | 0x80 | ((k - 1) % 4) << 4)

    def step(self, ms=1, budget=None, hold=False):
        sel = [d for d, v in ENGINE_STEP_DT.items() if v == ms][0]
        if budget is None and not hold:
            self.u8(13 | sel << 4)
            return
        self.u8(13 | sel << 4 | 0x80)  # bit 7: a budget byte follows
        self.u8(0x80 if hold else (budget // 8) & 0x7F)

    def host_local(self, prompt, pos, cid=0):
        # rule host-local-checkpoints: a local checkpoint of the host's own cache
        self.u8(cid & 3)
        self.below(prompt + prompt // 8 + 1, pos - 1)

    def submit_local(self, id, key, prompt, pos, cid=0):
        self.u8(1)
        self.u8(id | key << 3)
        self.below(self.usable * self.pt, prompt - 1)
        self.host_local(prompt, pos, cid)

    def local(self, k, prompt, pos, cid=1):
        self.u8(12 | 0x40)
        self.u8(k)
        self.host_local(prompt, pos, cid)


def engine_seeds():
    ext64, ext128 = (64, False, True, 1, 1), (128, False, True, 2, 1)
    loc32, loc96 = (32, True, True, 3, 1), (96, True, True, 4, 1)
    bad48 = (48, False, False, 5, 1)
    seeds = {}

    e = Engine(dir={1: (True, [loc32, ext64]), 2: (True, [ext64, ext128])})
    e.submit(0, 1, 100)
    e.submit(1, 2, 200)
    e.submit(2, 0, 40)
    e.step()
    e.copy_all(0)
    e.step()
    e.step()
    e.grow(0, 3)
    e.finish(0)
    e.finish(1)
    e.step()
    seeds["restore-ready-admit"] = e

    e = Engine(world=2, retries=1, dir={1: (True, [ext64, ext128])})
    e.submit(0, 1, 160)
    e.step()
    e.copy_all(0, fail=True)
    e.step()
    e.copy_all(0, fail=True)
    e.step()  # retries spent: the shorter checkpoint
    e.copy_one(0, 0)
    e.copy_one(0, 1)
    e.step()
    e.preempt(0)
    e.step()
    e.copy_all(0, fail=True)
    e.step()
    seeds["retries-shorter-preempt"] = e

    e = Engine(dir={1: (True, [ext64]), 2: (True, [loc96])})
    e.submit(0, 1, 100)
    e.submit(1, 1, 90)
    e.step()
    e.copy_all(0)
    e.copy_one(1, 0)
    e.reset()
    e.step()
    e.step()
    e.copy_all(0)
    e.step()
    e.submit(2, 2, 120)
    e.step()
    e.preempt(0)
    e.reset()
    e.step()
    seeds["reset-ready-and-copying"] = e

    e = Engine(pages=20, watermark=2, headroom=2, timeouts=(1, 1, 1, 1),
               dir={1: (True, [loc32, ext128]), 2: (False, [])})
    e.submit(0, 0, 200)  # occupies most of the pool
    e.step()
    e.grow(0, 4)
    e.submit(1, 1, 250)  # restore that must wait
    e.submit(2, 2, 20)  # held behind it, lookup unanswered
    e.step(1000)
    e.evict(3, 2)
    e.step(3000)
    e.answer(1, [loc32])
    e.step(20000)
    e.step(70000)  # bounded wait expires
    e.finish(0)
    e.step()
    seeds["blocked-head-timers-evict"] = e

    e = Engine(world=3, importers=True, slots=3, dir={1: (True, [ext64]), 3: (True, [bad48, ext128])})
    e.submit(0, 1, 100)
    e.submit(1, 3, 200)
    e.submit(2, 3, 300)
    e.step()
    e.copy_one(0, 0)
    e.copy_one(0, 1, fail=True)
    e.bogus(0, 1)
    e.copy_all(1)
    e.step()
    e.cancel(2)
    e.step()
    e.copy_all(0)
    e.step()
    seeds["importers-three-ranks-cancel"] = e

    e = Engine(legacy=True, pages=16, plan_big=False, dir={1: (True, [ext128]), 4: (False, [])})
    for i in range(5):
        e.submit(i, 1 if i % 2 else 4, 60 + 30 * i)
    e.submit(0, 0, 10)  # a live id again: rejected
    e.step()
    e.answer(0, [loc32, ext64])
    e.step()
    e.step()
    e.cancel(1)
    e.finish(2)
    e.step()
    e.step()
    seeds["legacy-tight-plan-duplicate"] = e

    e = Engine(dir={1: (True, [ext64]), 2: (False, [])})
    e.fault(1)
    e.submit(0, 1, 100)
    e.submit(1, 2, 100)
    e.fault(2)
    e.step()
    e.fault(1)
    e.answer(0, [loc32])
    e.evict(3, 1)
    e.step()
    e.copy_all(0)
    e.fault(3)
    e.step()
    e.grow(0, 2)
    e.step()
    seeds["allocation-failures"] = e

    # rule host-local-checkpoints and the token budget: a full local hit without a key, a partial
    # one merged with the answer, one that decides an outstanding lookup, a
    # preempted request resuming locally, a step that preempted, budgets
    e = Engine(dir={1: (True, [ext128]), 2: (False, [])})
    e.submit_local(0, 0, 100, 100)
    e.submit_local(1, 1, 200, 64)
    e.submit(2, 2, 150)
    e.step(budget=64)
    e.local(2, 150, 150)
    e.copy_all(0)
    e.step(budget=8)
    e.step()
    e.local(0, 100, 60, cid=2)
    e.preempt(0)
    e.step(hold=True)
    e.step(budget=200)
    e.local(1, 200, 220)  # past the prompt: -ERANGE
    e.step()
    seeds["host-local-budget"] = e
    return seeds


# ---- fuzz_differential --------------------------------------------------------------

class Diff(Enc):
    def __init__(self, pages=40, pt=16, watermark=0, headroom=1, slots=2, retries=1,
                 legacy=False, chunk=64, running=4, world=1, plan=(0xFF, 0x00), dir=None):
        super().__init__()
        self.max_prompt = (pages + 4) * pt
        self.below(63, pages - 2)
        self.u8([1, 2, 4, 8, 16].index(pt))
        self.below(pages // 4 + 1, watermark)
        self.u8(headroom | (slots - 1) << 2 | retries << 4 | (3 << 6 if legacy else 0))
        self.below(16 * pt, chunk - 1)
        self.u8((running - 1) | (world - 1) << 3)
        self.u8(plan[0])
        self.u8(plan[1])
        dir = dir or {}
        for key in range(1, 5):
            entries = dir.get(key, [])
            self.u8(len(entries))
            pos = 0
            for p, local, compat in entries:
                self.u8((1 if local else 0) | (2 if compat else 0))
                self.below(self.max_prompt // 2 + 2, p - pos - 1)
                pos = p

    def submit(self, key, prompt):
        self.u8(0)
        self.u8(0)
        self.u8(key)
        self.below(self.max_prompt, prompt - 1)

    def finish(self, k):
        self.u8(2)
        self.u8(k)

    def copy(self, k, fail=False, rank=0):
        self.u8(3)
        self.u8(k)
        self.u8((0 if fail else 1) | rank << 2)

    def step(self):
        self.u8(4)
        self.u8(0)

    def cancel(self, k):
        self.u8(5)
        self.u8(k)

    def preempt(self, k):
        self.u8(6)
        self.u8(k)

    def grow(self, k, pages):
        self.u8(7)
        self.u8(k)
        self.u8(pages - 1)


def differential_seeds():
    seeds = {}
    d = Diff(dir={1: [(64, False, True)], 2: [(32, True, True), (96, False, True)],
                  3: [(48, False, False)]})
    for key, prompt in ((1, 100), (2, 150), (3, 80), (0, 40), (1, 300)):
        d.submit(key, prompt)
    d.step()
    d.copy(0)
    d.step()
    d.copy(0)
    d.step()
    d.grow(0, 3)
    d.finish(1)
    d.step()
    seeds["mixed-restores"] = d

    d = Diff(world=2, retries=1, dir={1: [(32, True, True), (64, False, True), (128, False, True)]})
    d.submit(1, 200)
    d.step()
    d.copy(0, fail=True)
    d.copy(0, rank=1)
    d.step()
    d.copy(0, fail=True)
    d.copy(0)
    d.step()
    d.copy(0, fail=True)
    d.copy(0)
    d.step()
    seeds["retries-then-shorter"] = d

    d = Diff(pages=24, watermark=4, legacy=True, plan=(0x02, 0x05),
             dir={1: [(160, False, True)], 2: [(64, True, True)]})
    for key, prompt in ((0, 200), (1, 250), (2, 120), (1, 100)):
        d.submit(key, prompt)
    d.step()
    d.step()
    d.preempt(0)
    d.cancel(1)
    d.step()
    d.copy(0)
    d.step()
    seeds["legacy-tight-plan"] = d

    d = Diff(pages=30, headroom=2, dir={1: [(96, False, True)]})
    d.submit(0, 300)
    d.submit(1, 150)
    d.submit(0, 20)
    d.step()
    d.grow(0, 6)
    d.step()
    d.finish(0)
    d.step()
    d.cancel(0)
    d.step()
    seeds["blocked-head-bypass"] = d
    return seeds


# ---- fuzz_lockfree ----------------------------------------------------------------------

def lockfree_seeds():
    seeds = {}
    t = Enc()
    t.u8(0)  # timerwheel
    t.u8(2)  # tick 1000
    t.u16(50)
    t.u8(10)
    for i in range(24):  # actions: none, re-arm, cancel, arm other, nested advance
        t.u8((i % 5) | (i % 8) << 3)
        t.u8((i * 7) % 24)
        t.u16(1000 * (i + 1))
    for i in range(24):  # arm everything at spread-out times
        t.u8(0 | i << 2)
        t.u8(i % 7)
        t.u16(997 * i)
        t.u16(i)
        t.u16(0)
    for sel in (2, 3, 4, 0xC2, 5, 6, 7):
        t.u8(2)
        t.u8(sel)
        t.u16(40000)
        t.u16(3)
        t.u16(0)
    seeds["timerwheel-cascade"] = t

    w = Enc()
    w.u8(1)  # waitq
    for op in (0, 4, 8, 1 << 0 | 12 << 2, 3 | 4 << 2, 2, 1 | 4 << 2, 3 | 8 << 2, 0 | 8 << 2, 2, 2):
        w.u8(op)
    seeds["waitq-mixed"] = w

    n = Enc()
    n.u8(2)  # inbox
    n.u8(40)
    for i in range(40):
        n.u8(1 | (i % 5) << 1 if i % 4 else 0)
    n.u8(200)
    n.u8(150)
    n.u8(1)
    seeds["inbox-reuse-two-producers"] = n
    return seeds


# ---- fuzz_config ------------------------------------------------------------------

U32 = {"0": 0, "1": 1, "2": 2, "lim": 3, "lim-1": 4, "lim+1": 5, "max": 6, "max-1": 7, "2^31": 8}
U64 = {"0": 0, "1": 1, "max": 2, "max-1": 3, "2^63": 4, "2^32": 5, "tick": 9}
PROMPTS = [1, 2, 16, 100, 4096, 1 << 20, 0xFFFFFFFE, 0xFFFFFFFF]
STEP_DT = ["0", "1ns", "tick", "1s", "60s", "2^62", "max/2", "max"]


class Config(Enc):
    """Writes fuzz_config inputs: one class per field (see u32_class / u64_class).

    u32 fields take a class name or ("u8", v) / ("u16", v) / ("u32", v); u64 fields a
    class name or ("ms", v) / ("s", v) / ("max-s", v)."""

    def __init__(self, pages="lim", pt="lim", reserve="0", headroom="0", chunk="lim",
                 slots=("u8", 4), running=("u8", 8), world="1", retries="lim",
                 timeouts=(("s", 5), ("s", 60), ("s", 30), ("s", 20)), start="1",
                 policy=0, lookup=True, log=True, wake=True, importers=0, refuse=False,
                 caps=(3, 3, 3, 3, 3), priority=None, cost=None):
        """priority: None (FCFS, nothing written), or (order class 0..3: FCFS,
        PRIORITY, 2, -1; preempt_threshold as a u32 field; aging interval as a
        u64 field). cost: None (nothing written), or (COST instead of `policy`,
        a broken cost config, a margin as a u32 field or None)."""
        super().__init__()
        for v in (pages, pt, reserve, headroom, chunk, slots, running, world, retries):
            self.u32(v)
        for v in tuple(timeouts) + (start,):
            self.u64(v)
        self.u8(policy | (0 if lookup else 4) | (8 if log else 0) | (16 if wake else 0)
                | importers << 5 | (128 if refuse else 0))
        for i, c in enumerate(caps):
            self.u8(c | (4 if i == 0 and priority is not None else 0)
                    | (8 if i == 0 and cost is not None else 0))
        if priority is not None:
            order, threshold, aging = priority
            self.u8(order)
            self.u32(threshold)
            self.u64(aging)
        if cost is not None:
            use, broken, margin = cost
            self.u8((1 if use else 0) | (2 if broken else 0) | (4 if margin is not None else 0))
            if margin is not None:
                self.u32(margin)

    def u32(self, v):
        if isinstance(v, str):
            self.u8(U32[v])
        else:
            kind, x = v
            self.u8({"u8": 9, "u16": 10, "u32": 11}[kind])
            if kind == "u8":
                self.u8(x)
            elif kind == "u16":
                self.u16(x)
            else:
                self.u16(x & 0xFFFF)
                self.u16(x >> 16)

    def u64(self, v):
        if isinstance(v, str):
            self.u8(U64[v])
        else:
            kind, x = v
            self.u8({"ms": 6, "s": 7, "max-s": 8}[kind])
            self.u8(x)

    def submit(self, key, prompt, prio=0):
        """prio: an index into fuzz_config's priorities (0: priority 0)."""
        self.u8(0)
        self.u8(key | prio << 2 | PROMPTS.index(prompt) << 5)

    def set_priority(self, k, to):
        """to: 0 INT32_MIN, 1 -1, 2 1, 3 INT32_MAX; k indexes the handles."""
        assert k < 64
        self.u8(7)
        self.u8(k | to << 6)

    def answer(self, k, entries, miss=False):
        """entries: (pos_class, local, compatible); pos_class 0: 1, 1: prompt/2, 2: prompt,
        3: UINT32_MAX. k indexes the pending lookups (swap-removed when answered)."""
        assert k < 16
        self.u8(2)
        self.u8(k | len(entries) << 4 | (64 if miss else 0))
        for pos, local, compatible in entries:
            self.u8(pos | (4 if local else 0) | (0 if compatible else 8))

    def copy(self, k, fail=False):
        self.u8(3)
        self.u8(k | (128 if fail else 0))

    def end(self, k, finish=False):
        self.u8(4)
        self.u8(k | (128 if finish else 0))

    def reset(self):
        self.u8(4)
        self.u8(64)

    def step(self, dt="1s"):
        self.u8(5 | STEP_DT.index(dt) << 3)


def config_run(c, prios=(0, 0, 0, 0)):
    """The defaults seed's operations on c: four submits (priority indices
    prios), answers, a copy, a finish, steps."""
    for i, p in enumerate(prios):
        c.submit(1 + i % 3, 100, p)
    c.step("0")
    c.answer(0, [(1, False, True), (2, False, True)])
    c.answer(0, [(0, True, True)])
    c.step("tick")
    c.copy(0)
    c.step("1s")
    c.end(0, finish=True)
    c.step("60s")
    return c


def config_seeds():
    seeds = {}
    seeds["defaults"] = config_run(Config())
    c = Config(world="2", importers=1, slots=("u8", 2), retries="1")
    for i in range(3):
        c.submit(1, 100)
    c.step("0")
    c.answer(0, [(1, False, True)])
    c.answer(0, [(2, False, True)])
    c.step("0")
    c.copy(0)
    c.copy(1, fail=True)
    c.step("tick")
    c.reset()
    c.step("1s")
    seeds["importers-two-ranks"] = c
    c = Config(policy=1, pages=("u8", 20), chunk="1", importers=1, refuse=True)
    for i in range(5):
        c.submit(2, 100)
    c.step("0")
    c.answer(0, [(2, False, True)])
    c.step("1s")
    seeds["legacy-refusing-importer"] = c
    c = Config(reserve="lim", world="lim+1", policy=2)
    seeds["invalid-ranges"] = c
    c = Config(pages="1", pt="max", chunk="max", slots="max", running="max", world="lim",
               retries="max", importers=2, timeouts=("max", "max", "max", "max"), start="max")
    seeds["edges-everywhere"] = c
    c = Config(pages="1", pt="max", chunk="max", slots="max", running="max", retries="max",
               timeouts=("max", "max-1", "2^63", "1"), start=("max-s", 30))
    for p in (1, 0xFFFFFFFF, 16):
        c.submit(1, p)
    c.step("0")
    c.answer(0, [(0, False, True), (3, False, True)])
    c.answer(0, [(2, True, True)])
    for dt in ("1ns", "tick", "1s", "1s"):
        c.step(dt)
    seeds["edges-valid-near-the-end-of-time"] = c
    # priority order with aging and a preemption threshold: mixed priorities,
    # a change on a waiting request, one on a running one
    c = Config(pages=("u8", 20), priority=(1, "1", ("s", 1)))
    for i, prio in enumerate((4, 5, 1, 2)):
        c.submit(1 + i % 3, 100, prio)
    c.step("0")
    c.answer(0, [(2, False, True)])
    c.set_priority(3, 0)
    c.step("tick")
    c.set_priority(0, 3)
    for dt in ("1s", "60s"):
        c.step(dt)
    seeds["priority-aging-threshold"] = c
    c = Config(priority=(3, "lim+1", "max"))
    seeds["invalid-order-and-threshold"] = c
    c = Config(priority=(0, "0", "1"))
    c.submit(1, 100, 3)
    c.set_priority(0, 1)
    c.step("0")
    seeds["fcfs-refuses-priority-changes"] = c
    # the cost policy (the cap byte's bit 3): with kva_config_default's seeds,
    # under PRIORITY with a margin at its limit, beside a refusing importer,
    # and a broken cost config, -EINVAL under COST and not read under WAIT
    for name, kw in (("cost-policy", dict(cost=(True, False, None))),
                     ("cost-under-priority", dict(priority=(1, "0", "0"),
                                                  cost=(True, False, "lim"))),
                     ("cost-refusing-importer", dict(importers=1, refuse=True,
                                                     cost=(True, False, ("u8", 0))))):
        seeds[name] = config_run(Config(pages=("u8", 20), **kw), prios=(0, 1, 2, 3))
    seeds["cost-broken-config"] = Config(cost=(True, True, None))
    seeds["cost-config-not-read"] = Config(cost=(False, True, None))
    # item 1: durations whose deadline passes UINT64_MAX mean never; the lookup
    # must not time out (nor refresh, expire or log every step) at once
    regress = {}
    c = Config(timeouts=("max", "max", "max", "max"), start="1")
    c.submit(1, 100)
    c.submit(2, 100)
    for dt in ("0", "1ns", "1s", "60s", "2^62"):
        c.step(dt)
    regress["item1-durations-uint64-max"] = c
    c = Config(timeouts=(("s", 10), ("s", 10), ("s", 1), ("s", 10)), start=("max-s", 3))
    c.submit(1, 100)
    c.submit(0, 16)
    c.step("0")
    c.answer(0, [(2, False, True)])
    for _ in range(6):
        c.step("1ns")
    c.step("1s")
    regress["item1-start-near-uint64-max"] = c
    # item 2: a plan too small for what the step must hand out (pages_cap 32
    # with a 64-page first chunk; no copies room with no importer): the final
    # drain with room must still end everything
    c = Config(pages="lim", chunk="max", caps=(1, 1, 0, 0, 1))
    c.submit(0, 4096)
    c.submit(1, 4096)
    c.step("0")
    c.answer(0, [(2, False, True)])
    for _ in range(4):
        c.step("1s")
    regress["item2-plan-too-small"] = c
    # item 3: reset with two READY restores whose copies finished out of
    # queue order (coverage here; the order itself is the scenario tests')
    c = Config(slots=("u8", 4))
    c.submit(1, 100)
    c.submit(2, 100)
    c.step("0")
    c.answer(0, [(1, False, True)])
    c.answer(0, [(1, False, True)])
    c.step("0")
    c.copy(1)
    c.copy(0)
    c.step("0")
    c.reset()
    c.step("0")
    c.step("0")
    regress["item3-reset-after-out-of-order-copies"] = c
    # item 4: a compatible checkpoint at position UINT32_MAX of a UINT32_MAX
    # prompt is TOO_LARGE, never INCOMPATIBLE
    c = Config()
    c.submit(1, 0xFFFFFFFF)
    c.step("0")
    c.answer(0, [(3, False, True)])
    c.step("0")
    c.submit(2, 0xFFFFFFFF)
    c.step("0")
    c.answer(0, [(0, False, True), (3, True, True)])
    c.step("1s")
    regress["item4-position-uint32-max"] = c
    return seeds, regress


class Seq(Enc):
    """fuzz_fleet_seq's input: an operation byte, then seq_of's byte (and 8
    more for a raw number)."""
    LIVE, BIG, REPLAY, END, RETRY, GIVE_UP = range(6)
    EDGES = {-1: 0, "max": 1, "min": 2, 0: 3, -2: 4, "max-1": 5}

    def op(self, op, mode="last", k=0):
        self.u8(op)
        if mode == "last":  # the last live number + k (the first: k itself)
            self.u8((k + 24) << 2)
        elif mode == "first":
            self.u8(k << 2)
        elif mode == "expected":
            self.u8(((k + 24) << 2) | 1)
        elif mode == "raw":
            self.u8(2)
            for i in range(8):
                self.u8((k >> (56 - 8 * i)) & 0xFF)
        else:  # an edge
            self.u8((self.EDGES[k] << 2) | 3)
        return self


def fleet_seq_seeds():
    S = Seq
    seeds = {}
    c = Seq().op(S.LIVE, "first", 0)
    for _ in range(10):
        c.op(S.LIVE, "last", 1)
    seeds["in-order"] = c
    c = Seq().op(S.LIVE, "first", 0).op(S.LIVE, "last", 3)  # a gap: a replay from 1
    c.op(S.REPLAY, "expected", 0).op(S.REPLAY, "expected", 0).op(S.END, "first", 0)
    c.op(S.LIVE, "last", 1)
    seeds["gap-and-replay"] = c
    c = Seq().op(S.LIVE, "first", 0).op(S.LIVE, "last", 2)
    c.op(S.REPLAY, "raw", 1 << 62).op(S.END, "first", 0)
    for _ in range(3):
        c.op(S.LIVE, "last", 1)
    seeds["forged-replay"] = c
    c = Seq().op(S.LIVE, "first", 0)
    for _ in range(3):
        c.op(S.LIVE, "last", 1)
    c.op(S.LIVE, "edge", 0).op(S.LIVE, "last", 1)  # the sequence went back: a restart
    c.op(S.REPLAY, "expected", 0).op(S.END, "first", 0)
    seeds["restart"] = c
    c = Seq().op(S.LIVE, "first", 0)
    for e in (-1, "max", "min", -2, "max-1"):
        c.op(S.LIVE, "edge", e).op(S.REPLAY, "edge", e)
    c.op(S.LIVE, "last", 1)
    seeds["edges"] = c
    c = Seq().op(S.LIVE, "first", 0).op(S.LIVE, "last", 2)
    for _ in range(6):  # past max_pending (4): held overflow
        c.op(S.LIVE, "last", 1)
    c.op(S.RETRY, "first", 0).op(S.GIVE_UP, "first", 0)
    c.op(S.REPLAY, "expected", 0).op(S.END, "first", 0).op(S.LIVE, "last", 1)
    seeds["held-overflow"] = c
    c = Seq().op(S.LIVE, "first", 5)  # joined late: a replay from 0
    c.op(S.BIG, "last", 1).op(S.REPLAY, "expected", 0).op(S.REPLAY, "expected", 1)
    c.op(S.END, "first", 0).op(S.LIVE, "last", 1)
    seeds["late-join"] = c
    return seeds


class Index(Enc):
    """fuzz_fleet_index's input: a config byte, then operations of five
    bytes (what, block, publisher, medium, group) and their arguments."""
    ADD, DEL, DROP, WATCH, QUOTA, BATCH_END, TIME, QUERY = 0, 3, 4, 5, 6, 7, 8, 9

    def __init__(self, cap, probe=0, aimed=False):
        super().__init__()  # cap: 1 + 3k, k < 16
        self.u8((cap - 1) // 3 | (probe & 7) << 4 | (0x80 if aimed else 0))

    def op(self, what, block=0, pub=0, medium=0, group=0, *args):
        for v in (what, block, pub, medium, group) + args:
            self.u8(v)
        return self

    def query(self, blocks):
        self.op(self.QUERY)
        self.u8(len(blocks) - 1)
        for b in blocks:
            self.u8(b)
        return self


def fleet_index_seeds():
    I = Index
    seeds = {}
    c = Index(7, probe=6)
    for b in range(16):  # over twice the cap: CLOCK evicts
        c.op(I.ADD, b, b % 3, 0, 0)
    c.query([0, 1, 2, 3]).op(I.DEL, 15, 0, 0, 0).query([15])
    seeds["past-the-cap"] = c
    c = Index(40, probe=2, aimed=True)  # 16 blocks, one home: the probe bound (4)
    for b in range(16):
        c.op(I.ADD, b, 1, 1, 0)
    c.query(list(range(8)))
    seeds["aimed-homes"] = c
    c = Index(46, probe=7)
    for r in range(10):  # a publisher that clears in every batch: columns run out
        c.op(I.ADD, r, 2, 0, 0).op(I.ADD, r, 3, 0, 1).op(I.DROP, 0, 2)
    c.op(I.TIME).op(I.ADD, 1, 2, 0, 0).query([1])
    seeds["drops-and-graces"] = c
    c = Index(10, probe=7)
    c.op(I.ADD, 4, 0, 2, 0).op(I.ADD, 4, 1, 2, 0).op(I.ADD, 5, 0, 2, 2)
    c.op(I.WATCH, 4, 0, 2, 0).op(I.DEL, 4, 1, 2, 0).op(I.BATCH_END)
    c.op(I.DEL, 4, 0, 2, 0).op(I.BATCH_END).query([4, 5])
    seeds["watched-removals"] = c
    c = Index(13, probe=7)
    c.op(I.QUOTA, 0, 0, 0, 0, 6)  # a share of 6 each
    for b in range(5):
        c.op(I.ADD, b, 0, 0, 0)
    for b in range(16):  # the flood evicts its own entries, not publisher 0's
        c.op(I.ADD, b, 5, 1, 0)
    c.query([0, 1, 2, 3, 4])
    seeds["shares"] = c
    return seeds


def main():
    cfg_seeds, cfg_regress = config_seeds()
    for target, seeds, prefix in (("fuzz_engine", engine_seeds(), "seed-"),
                                  ("fuzz_differential", differential_seeds(), "seed-"),
                                  ("fuzz_lockfree", lockfree_seeds(), "seed-"),
                                  ("fuzz_config", cfg_seeds, "seed-"),
                                  ("fuzz_config", cfg_regress, "regress-"),
                                  ("fuzz_fleet_seq", fleet_seq_seeds(), "seed-"),
                                  ("fuzz_fleet_index", fleet_index_seeds(), "seed-")):
        d = os.path.join(HERE, "corpus", target)
        os.makedirs(d, exist_ok=True)
        for name, enc in seeds.items():
            with open(os.path.join(d, prefix + name), "wb") as f:
                f.write(bytes(enc.b))


if __name__ == "__main__":
    main()
