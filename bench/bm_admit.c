/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Admission and cancellation with 1,000,000 requests waiting.
 *
 * BM_admit/B: a running request holding exactly the capacity of B restores
 * finishes; the next step drains that one event and admits B restores from
 * the head (paired reservation + copy job each); the B+1-th blocks again.
 * Only that step is timed (manual time), and each admitted request is one
 * iteration, so the reported time is per admitted request. Between timed
 * steps, untimed: the imports complete and the B requests run, B new
 * restores join the tail (the queue stays at 1,000,000), and B running
 * requests are merged into one that holds B restores' worth of pages
 * (B - 1 finish, the last grows), ready for the next round.
 *
 * BM_admit_cost/B: the same under KVA_POLICY_COST (each admitted head's
 * prediction), against BM_admit in the same run.
 *
 * BM_cancel/N: K random waiting requests are cancelled by handle (any
 * position in the queue) and one step processes the cancels (unlink, credits,
 * report, retire). Timed: the K kva_cancel calls and that step, per cancel;
 * the counters split it into the call and the step's share, and cpu_ns is
 * the thread's CPU time over the same stretch (on a shared machine the wall
 * time also counts the time other tenants held the core).
 */
#include <errno.h>
#include <stdio.h>

#include "bm.h"
#include "fixture.h"
#include "gbench.h"

#define WAITING 1000000
#define CANCEL_BATCH 1024

static double seconds(uint64_t ns) { return (double)ns / 1e9; }

static size_t batch_cap(const struct bx *b, size_t want)
{
	return want > b->n_waiting / 4 ? b->n_waiting / 4 : want;
}

/* Leaves one running request holding exactly B restores' worth of credits
 * and returns it; the step that drains the finish events admits nothing. */
static kva_handle make_gate(struct bx *b, size_t batch)
{
	kva_handle gate = b->running[--b->n_running];
	for (size_t i = 1; i < batch; i++)
		bx_check(kva_finish(b->e, b->running[--b->n_running]), "kva_finish");
	kva_request_info info;
	bx_check(kva_query(b->e, gate, &info), "kva_query");
	/* growth takes the gate's own reservation first, then the freed pages */
	uint32_t grow = (uint32_t)(batch * BX_NEED) - info.pages_held;
	if (grow)
		bx_check(kva_grow(b->e, gate, grow, NULL), "kva_grow");
	if (bx_step(b) != 0 || !b->plan.head_blocked)
		bx_check(-EPROTO, "gate step admitted");
	return gate;
}

static void bm_admit(gb_state *s, void *arg)
{
	struct bx *b = bx_blocked_as(WAITING, arg ? *(const int *)arg : KVA_POLICY_WAIT);
	size_t batch = batch_cap(b, (size_t)gb_range_arg(s, 0));
	uint64_t steps = 0, events = 0, touched = 0;
	while (gb_keep_running_batch(s, batch)) {
		kva_handle gate = make_gate(b, batch);
		bx_check(kva_finish(b->e, gate), "kva_finish");
		uint64_t t0 = bx_clock_ns();
		bx_step(b);
		uint64_t t1 = bx_clock_ns();
		gb_set_iteration_time(s, seconds(t1 - t0));
		steps++;
		events += b->plan.events;
		touched += b->plan.records_touched;
		if (b->plan.n_copies != batch || !b->plan.head_blocked)
			bx_check(-EPROTO, "admitted a different batch");
		for (uint32_t i = 0; i < b->plan.n_copies; i++)
			bx_waiting_del(b, b->plan.copies[i].handle.id);

		/* untimed: imports complete, the batch runs, the queue refills */
		bx_copies_done(b);
		for (size_t i = 0; i < batch; i++)
			bx_waiting_add(b, bx_submit(b, true));
		if (bx_step(b) != (int)batch || !b->plan.head_blocked)
			bx_check(-EPROTO, "the imported batch did not run");
		for (uint32_t i = 0; i < b->plan.n_admitted; i++)
			b->running[b->n_running++] = b->plan.admitted[i].handle;
		bx_reclaim(b, batch); /* the gate and the B - 1 merged into it */
	}
	gb_set_items_processed(s, gb_iterations_done(s));
	gb_counter(s, "batch", (double)batch, GB_COUNTER_DEFAULT);
	gb_counter(s, "waiting", (double)b->n_waiting, GB_COUNTER_DEFAULT);
	if (steps) {
		gb_counter(s, "events_per_step", (double)events / (double)steps, GB_COUNTER_DEFAULT);
		gb_counter(s, "records_touched_per_step", (double)touched / (double)steps,
		           GB_COUNTER_DEFAULT);
	}
}

static void bm_cancel(gb_state *s, void *arg)
{
	(void)arg;
	struct bx *b = bx_blocked((size_t)gb_range_arg(s, 0));
	size_t batch = batch_cap(b, CANCEL_BATCH);
	kva_handle victims[CANCEL_BATCH];
	uint64_t rng = 0x9e3779b97f4a7c15ull, call_ns = 0, step_ns = 0, cpu_ns = 0;
	while (gb_keep_running_batch(s, batch)) {
		for (size_t i = 0; i < batch; i++)
			victims[i] = bx_waiting_take_random(b, &rng);
		uint64_t c0 = bx_cpu_ns(), t0 = bx_clock_ns();
		for (size_t i = 0; i < batch; i++)
			bx_check(kva_cancel(b->e, victims[i]), "kva_cancel");
		uint64_t t1 = bx_clock_ns();
		bx_step(b);
		uint64_t t2 = bx_clock_ns();
		cpu_ns += bx_cpu_ns() - c0;
		gb_set_iteration_time(s, seconds(t2 - t0));
		call_ns += t1 - t0;
		step_ns += t2 - t1;
		if (b->plan.n_ended != batch || b->plan.n_admitted || !b->plan.head_blocked)
			bx_check(-EPROTO, "cancel step");

		/* untimed: as many new restores join the tail */
		for (size_t i = 0; i < batch; i++)
			bx_waiting_add(b, bx_submit(b, true));
		if (bx_step(b) != 0 || !b->plan.head_blocked)
			bx_check(-EPROTO, "refill step admitted");
		bx_reclaim(b, batch);
	}
	double it = (double)gb_iterations_done(s);
	gb_set_items_processed(s, gb_iterations_done(s));
	if (it > 0) {
		gb_counter(s, "call_ns", (double)call_ns / it, GB_COUNTER_DEFAULT);
		gb_counter(s, "step_ns", (double)step_ns / it, GB_COUNTER_DEFAULT);
		gb_counter(s, "cpu_ns", (double)cpu_ns / it, GB_COUNTER_DEFAULT);
	}
	gb_counter(s, "waiting", (double)b->n_waiting, GB_COUNTER_DEFAULT);
}

void bm_register_admit(void)
{
	gb_bench *b = gb_use_manual_time(gb_register("BM_admit", bm_admit, NULL));
	gb_arg(gb_arg(gb_arg(b, 1), 64), 4096);
	static const int cost = KVA_POLICY_COST;
	gb_arg(gb_use_manual_time(gb_register("BM_admit_cost", bm_admit, (void *)&cost)), 64);
	gb_arg(gb_use_manual_time(gb_register("BM_cancel", bm_cancel, NULL)), WAITING);
}
