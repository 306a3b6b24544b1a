/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Priority order (KVA_ORDER_PRIORITY) at 1,000,000 waiting, each benchmark
 * with the FCFS engine as its baseline in the same run (argument 0 = FCFS,
 * else the number of priority levels the requests are spread over; a
 * request's priority is its id mod that):
 *
 * BM_priority_step_blocked/L: kva_step with the head blocked and no events,
 * as BM_step_blocked, over L = 0 (FCFS), 1, 16 and 1,024 levels.
 *
 * BM_priority_admit/L: rounds of B = 1,024: B running requests finish and
 * one step (timed) handles the B finishes and admits B restores from the
 * head; untimed, their copies complete and a step admits them from READY,
 * and B new restores join (the queue stays at 1,000,000). Per admitted
 * request. L = 0, 1 (the order's own cost) and 64 (also: the admitted records
 * are 64 slots apart in memory, where FCFS admits neighbours).
 *
 * BM_priority_set/L: rounds of K = 1,024 kva_set_priority calls on random
 * waiting requests (each to another random level) and the step that moves
 * them; timed: the calls and the step, per request (the handles and levels
 * are drawn before, untimed: a host holds the handle it changes). L = 64.
 *
 * Each builds its engine once per argument (about as long as the FCFS
 * fixture) and frees it when the next argument needs another.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bm.h"
#include "fixture.h"
#include "gbench.h"

#define WAITING 1000000
#define ROUND 1024

static struct bx *cur;
static uint32_t cur_levels = UINT32_MAX;

static struct bx *engine(uint32_t levels)
{
	if (cur && cur_levels == levels)
		return cur;
	bx_free(cur);
	bx_cache_clear(); /* one 1M engine in memory at a time */
	cur = bx_blocked_levels(WAITING, levels);
	cur_levels = levels;
	return cur;
}

static double seconds(uint64_t ns) { return (double)ns / 1e9; }

static void bm_priority_step_blocked(gb_state *s, void *arg)
{
	(void)arg;
	struct bx *b = engine((uint32_t)gb_range_arg(s, 0));
	uint64_t touched = 0, blocked = 0, events = 0;
	size_t n;
	while ((n = gb_keep_running_batch(s, 256)))
		for (size_t i = 0; i < n; i++) {
			bx_step(b);
			touched += b->plan.records_touched;
			blocked += b->plan.head_blocked;
			events += b->plan.events + b->plan.timers_fired;
		}
	if (blocked != (uint64_t)gb_iterations_done(s) || events)
		gb_skip_with_error(s, "the head was not blocked, or the step had events");
	gb_counter(s, "records_touched", (double)touched, GB_COUNTER_PER_ITERATION);
	gb_counter(s, "waiting", (double)b->n_waiting, GB_COUNTER_DEFAULT);
}

static void bm_priority_admit(gb_state *s, void *arg)
{
	(void)arg;
	struct bx *b = engine((uint32_t)gb_range_arg(s, 0));
	size_t batch = ROUND < b->n_waiting / 4 ? ROUND : b->n_waiting / 4;
	/* b->running is a ring of the running requests, oldest first */
	size_t cap = BX_RUNNERS + BX_MAX_BATCH, head = 0;
	while (gb_keep_running_batch(s, batch)) {
		for (size_t i = 0; i < batch; i++)
			bx_check(kva_finish(b->e, b->running[(head + i) % cap]), "kva_finish");
		head = (head + batch) % cap;
		b->n_running -= batch;
		uint64_t t0 = bx_clock_ns();
		bx_step(b);
		uint64_t t1 = bx_clock_ns();
		gb_set_iteration_time(s, seconds(t1 - t0));
		if (b->plan.n_copies != batch || !b->plan.head_blocked)
			bx_check(-EPROTO, "admitted a different batch");
		for (uint32_t i = 0; i < b->plan.n_copies; i++)
			bx_waiting_del(b, b->plan.copies[i].handle.id);
		/* untimed: imports complete and run, the queue refills */
		bx_copies_done(b);
		bx_step(b);
		if (b->plan.n_admitted != batch)
			bx_check(-EPROTO, "READY restores not admitted");
		for (uint32_t i = 0; i < b->plan.n_admitted; i++)
			b->running[(head + b->n_running++) % cap] = b->plan.admitted[i].handle;
		for (size_t i = 0; i < batch; i++)
			bx_waiting_add(b, bx_submit(b, true));
		if (bx_step(b) != 0)
			bx_check(-EPROTO, "a new restore was admitted");
		bx_reclaim(b, batch);
	}
	/* the ring starts at 0 again for the next call */
	kva_handle *tmp = malloc(b->n_running * sizeof(*tmp));
	if (!tmp)
		bx_check(-ENOMEM, "ring");
	for (size_t i = 0; i < b->n_running; i++)
		tmp[i] = b->running[(head + i) % cap];
	memcpy(b->running, tmp, b->n_running * sizeof(*tmp));
	free(tmp);
}

/* Every tracked waiting request's handle (the set the benchmark changes
 * priorities in: it admits nothing, so the set stays). */
static kva_handle *waiting_handles(struct bx *b, size_t *n)
{
	kva_handle *h = malloc(b->n_waiting * sizeof(*h));
	if (!h)
		bx_check(-ENOMEM, "handles");
	*n = 0;
	for (uint64_t id = b->win_lo; id <= b->next_id; id++)
		if (b->win[id & b->win_mask].id == id)
			h[(*n)++] = b->win[id & b->win_mask];
	return h;
}

static void bm_priority_set(gb_state *s, void *arg)
{
	(void)arg;
	uint32_t levels = (uint32_t)gb_range_arg(s, 0);
	struct bx *b = engine(levels);
	size_t n, k = ROUND < b->n_waiting / 4 ? ROUND : b->n_waiting / 4;
	kva_handle *all = waiting_handles(b, &n);
	kva_handle *pick = malloc(k * sizeof(*pick));
	int32_t *to = malloc(k * sizeof(*to));
	if (!pick || !to)
		bx_check(-ENOMEM, "picks");
	uint64_t rng = 0x9e3779b97f4a7c15ull, touched = 0;
	while (gb_keep_running_batch(s, k)) {
		/* untimed: the host holds the handles it changes; drawing them
		 * from the table of all 1M is a cache miss of the benchmark's */
		for (size_t i = 0; i < k; i++) {
			/* xorshift64: a random request, a random level */
			rng ^= rng << 13;
			rng ^= rng >> 7;
			rng ^= rng << 17;
			pick[i] = all[rng % n];
			to[i] = (int32_t)((rng >> 32) % levels);
		}
		uint64_t t0 = bx_clock_ns();
		for (size_t i = 0; i < k; i++)
			bx_check(kva_set_priority(b->e, pick[i], to[i]), "kva_set_priority");
		bx_step(b);
		uint64_t t1 = bx_clock_ns();
		gb_set_iteration_time(s, seconds(t1 - t0));
		touched += b->plan.records_touched;
		if (b->plan.n_admitted || b->plan.events != k)
			bx_check(-EPROTO, "the step admitted, or missed a change");
	}
	free(pick);
	free(to);
	free(all);
	gb_counter(s, "records_touched", (double)touched, GB_COUNTER_PER_ITERATION);
}

void bm_register_priority(void)
{
	gb_bench *b = gb_register("BM_priority_step_blocked", bm_priority_step_blocked, NULL);
	gb_arg(gb_arg(gb_arg(gb_arg(b, 0), 1), 16), 1024);
	b = gb_use_manual_time(gb_register("BM_priority_admit", bm_priority_admit, NULL));
	gb_arg(gb_arg(gb_arg(b, 0), 1), 64);
	b = gb_use_manual_time(gb_register("BM_priority_set", bm_priority_set, NULL));
	gb_arg(b, 64);
}

void bm_cleanup_priority(void)
{
	bx_free(cur);
	cur = NULL;
	cur_levels = UINT32_MAX;
}
