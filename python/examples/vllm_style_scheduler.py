#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""A scheduler loop shaped like vLLM's Scheduler.schedule(), with kvadmit
deciding admissions.

* Requests arrive over time with a prefix key (a shared "document"); some
  documents have a stored checkpoint in an external store.
* A directory thread answers kvadmit's lookups asynchronously (the lookup
  callback only queues the token: it must not block).
* Requests are named by strings, as vLLM's request_id ("req-17").
* Two ways to own the KV pages:
  - default: kvadmit hands out its page ids and the CPU importer copies
    checkpoint bytes into a host page pool at those ids;
  - --credits-only: the host keeps its own BlockPool, as vLLM does: kvadmit
    only reserves and counts (Config.credits_only), every admission, grow()
    and copy job says how many blocks, the host takes them from its pool,
    runs the copies itself into its own blocks (one first attempt in ten
    fails, and kvadmit retries it) and frees them on preempt and finish. The
    pool never runs dry: kvadmit's credits are its size.
* Each step, like vLLM: running requests first (decode one token, or the next
  prefill chunk), within a token budget; a request that needs a page calls
  grow(); when grow() finds no space, the newest running request is
  preempted (and no new request is admitted in that step); then kvadmit
  admits waiting requests with what is left of the budget (0 left: none).
* A thin decode watermark (decode_reserve_pages=8) lets admissions fill the
  pool, so long decodes run it dry and preempt (a thicker one preempts less).
* It prints what was restored, recomputed and preempted.

Usage: vllm_style_scheduler.py [--requests N] [--seed S] [--credits-only]
"""
import argparse
import os
import queue
import random
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import kvadmit  # noqa: E402
from kvadmit import Checkpoint, How, NoSpace, State  # noqa: E402

PAGE_TOKENS = 16
PAGE_BYTES = 64           # a tiny "KV page" so the copies are real but cheap
TOTAL_PAGES = 1024
MAX_BATCHED_TOKENS = 1024  # vLLM's max_num_batched_tokens
STEP_NS = 10_000_000       # 10 ms of model time per step


class Req:
    __slots__ = ("rid", "prompt", "key", "output", "arrival", "handle", "computed", "generated",
                 "pages", "state")

    def __init__(self, rid, prompt, key, output, arrival):
        self.rid, self.prompt, self.key, self.output, self.arrival = (rid, prompt, key, output,
                                                                      arrival)
        self.handle = None
        self.computed = 0    # tokens with KV in pages (prefix restored/local + prefilled + decoded)
        self.generated = 0
        self.pages = 0       # pages the request holds
        self.state = "new"


def pages_for(tokens):
    return -(-tokens // PAGE_TOKENS)


class BlockPool:
    """The host's own KV blocks (vLLM's BlockPool), in credits-only mode:
    kvadmit says how many, the host says which."""

    def __init__(self, n):
        self.free = list(range(n - 1, -1, -1))
        self.held = {}  # request id -> its block ids

    def take(self, rid, n):
        if n > len(self.free):  # kvadmit's credits are the pool: cannot happen
            raise RuntimeError(f"block pool dry: {n} wanted, {len(self.free)} free")
        blocks = [self.free.pop() for _ in range(n)]
        self.held.setdefault(rid, []).extend(blocks)
        return blocks

    def release(self, rid):
        self.free.extend(self.held.pop(rid, ()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--credits-only", action="store_true",
                    help="the host keeps its own block pool (Config.credits_only)")
    args = ap.parse_args()
    credits = args.credits_only
    rnd = random.Random(args.seed)

    # The external checkpoint store: document key -> (checkpoint id, prefix tokens, bytes).
    documents = list(range(1, 21))
    store = {}
    for key in documents[:12]:
        tokens = rnd.choice([256, 512, 768])
        store[key] = (1000 + key, tokens,
                      bytes((key + i) % 256 for i in range(pages_for(tokens) * PAGE_BYTES)))
    by_id = {cid: data for cid, _, data in store.values()}

    def resolve(checkpoint_id, epoch, rank):  # importer worker thread
        return by_id.get(checkpoint_id)

    # The directory: lookups are queued by the callback, answered by a thread.
    lookups = queue.Queue()
    engine_box = []

    def directory():
        while True:
            item = lookups.get()
            if item is None:
                return
            key, prompt, token = item
            hit = store.get(key)
            cps = [Checkpoint(hit[1], hit[0], 1)] if hit and hit[1] <= prompt else []
            try:
                engine_box[0].answer(token, cps)
            except kvadmit.KvadmitError:
                pass  # stale (the request was cancelled or preempted meanwhile)

    pool = bytearray(TOTAL_PAGES * PAGE_BYTES)
    blocks = BlockPool(TOTAL_PAGES) if credits else None
    importers = [] if credits else [kvadmit.CpuImporter(pool, PAGE_BYTES, resolve, threads=2)]
    cfg = kvadmit.Config(total_pages=TOTAL_PAGES, page_tokens=PAGE_TOKENS, copy_slots=8,
                         max_running=128, decode_headroom_pages=4,
                         # a thin decode watermark: long decodes run the pool dry and preempt
                         decode_reserve_pages=8,
                         prefill_chunk_tokens=512, lookup_timeout_ns=30_000_000_000,
                         lookup=lambda key, prompt, token: lookups.put((key, prompt, token)),
                         importers=importers, credits_only=credits,
                         log_level=kvadmit.LogLevel.ERROR)  # not each failed copy
    reqs = []
    now = 0
    for rid in range(1, args.requests + 1):
        now += rnd.randint(0, 2) * STEP_NS
        key = rnd.choice(documents)
        prompt = rnd.randint(200, 1000)
        reqs.append(Req(f"req-{rid}", prompt, key if rnd.random() < 0.8 else 0,
                        rnd.randint(8, 400), now))

    totals = {"restored": 0, "recomputed": 0, "local": 0, "preempted": 0, "admitted": {},
              "copies_failed": 0}

    def run_copy(job):
        """Credits only: the host runs kvadmit's copy job into its own blocks."""
        if job.token.attempt == 1 and rnd.random() < 0.1:
            totals["copies_failed"] += 1  # e.g. the store timed out: kvadmit retries
            engine.copy_done(job.token, job.rank, -5)
            return
        cid, data = job.checkpoint_id, by_id[job.checkpoint_id]
        for i, b in enumerate(blocks.take(job.handle.id, job.npages)):
            pool[b * PAGE_BYTES:(b + 1) * PAGE_BYTES] = data[i * PAGE_BYTES:(i + 1) * PAGE_BYTES]
        engine.copy_done(job.token, job.rank, 0)
    dir_thread = threading.Thread(target=directory, daemon=True)
    dir_thread.start()
    with kvadmit.Engine(cfg) as engine:
        engine_box.append(engine)
        by_rid = {}
        running = []          # in admission order: the newest is preempted first
        arrivals = list(reversed(reqs))
        done = 0
        now = 0
        steps = 0
        while done < len(reqs):
            steps += 1
            now += STEP_NS
            while arrivals and arrivals[-1].arrival <= now:
                r = arrivals.pop()
                r.handle = engine.submit(r.rid, r.prompt, prefix_key=r.key)
                r.state = "waiting"
                by_rid[r.rid] = r
            budget = MAX_BATCHED_TOKENS
            preempted_now = False
            # 1. running requests: prefill chunks, then one decode token each
            i = 0
            while i < len(running) and budget > 0:
                r = running[i]
                if r.computed < r.prompt:
                    n = min(r.prompt - r.computed, budget, cfg.prefill_chunk_tokens)
                else:
                    n = 1
                need = pages_for(r.computed + n) - r.pages
                while need > 0:
                    try:
                        engine.grow(r.handle, need, out=False)
                        if credits:
                            blocks.take(r.rid, need)
                        r.pages += need
                        need = 0
                    except NoSpace:
                        victim = running.pop()  # the newest running request
                        engine.preempt(victim.handle)
                        if credits:
                            blocks.release(victim.rid)
                        victim.state, victim.pages = "waiting", 0
                        totals["preempted"] += 1
                        preempted_now = True
                        if victim is r:
                            break
                if r.state != "running":
                    continue  # r itself was preempted (it was the newest)
                budget -= n
                r.computed += n
                if r.computed > r.prompt:
                    r.generated += 1
                if r.generated >= r.output:
                    engine.finish(r.handle)
                    if credits:
                        blocks.release(r.rid)
                    r.state = "finished"
                    running.pop(i)
                    continue
                i += 1
            # 2. kvadmit admits within what is left of the budget
            plan = engine.step(now, token_budget=budget, hold_admissions=preempted_now)
            for a in plan.admissions:
                r = by_rid[a.handle.id]  # the host's own string id
                r.state = "running"
                r.computed = a.local_tokens + a.restored_tokens
                r.pages = a.npages
                r.computed += min(a.recompute_tokens, max(a.npages * PAGE_TOKENS - r.computed, 0))
                r.computed = min(r.computed, r.prompt)
                totals["restored"] += a.restored_tokens
                totals["local"] += a.local_tokens
                totals["recomputed"] += a.recompute_tokens
                kind = a.how.name if a.how is not How.RECOMPUTE else f"RECOMPUTE/{a.reason.name}"
                totals["admitted"][kind] = totals["admitted"].get(kind, 0) + 1
                cid = store[r.key][0] if r.key in store else None
                if credits:
                    if a.how is not How.RESTORE:  # a restore's blocks came with its copy
                        blocks.take(r.rid, a.npages)
                    first = blocks.held[r.rid][0]
                else:
                    first = plan.pages_of(a)[0]
                if a.how is How.RESTORE:  # the imported pages hold the checkpoint's bytes
                    assert pool[first * PAGE_BYTES] == by_id[cid][0]
                running.append(r)
            if credits:
                for job in plan.copies:
                    run_copy(job)
            for x in plan.ended:
                if x.state in (State.FINISHED, State.CANCELLED, State.REJECTED):
                    done += 1
            if steps > 200_000:
                raise SystemExit("the workload did not drain")
            if not plan.n_admitted and not running:
                time.sleep(0.0001)  # waiting for the directory or an import: real time
        stats = engine.stats()
        leftover = sum(len(b) for b in blocks.held.values()) if credits else 0
    lookups.put(None)
    dir_thread.join()

    mode = "credits only, the host's BlockPool" if credits else "kvadmit's page ids, CPU importer"
    print(f"requests {len(reqs)} ({mode}), steps {steps}, simulated {now / 1e9:.1f} s")
    print(f"admitted: {totals['admitted']}")
    print(f"tokens: restored {totals['restored']}, recomputed {totals['recomputed']}, "
          f"local {totals['local']}")
    print(f"preempted {totals['preempted']} (engine: {stats.preempted}), "
          f"finished {stats.finished}, lookups {stats.lookups_issued}, "
          f"copy jobs {stats.copy_jobs}, restore waits (blocked steps) "
          f"{stats.restore_blocked_steps}")
    if credits:
        print(f"host copies failed {totals['copies_failed']} (engine: "
              f"{stats.copy_attempts_failed}), blocks free {len(blocks.free)}/{TOTAL_PAGES}")
    ok = (stats.finished == len(reqs) and stats.free_pages == stats.total_pages
          and totals["restored"] > 0 and totals["preempted"] > 0 and leftover == 0
          and (not credits or len(blocks.free) == TOTAL_PAGES))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
