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
 * BM_priority_step_paired/L: the same step on the L-level, a 1-level and
 * the FCFS engine in turn in one loop (the targets' flatness and step rows).
 *
 * BM_priority_admit/L/R: rounds of B = 1,024: B running requests finish
 * and one step (timed) handles the B finishes and admits B restores from
 * the head; untimed, their copies complete and a step admits them from
 * READY, and B new restores join (the queue stays at 1,000,000). Per
 * admitted request. L = 0, 1 (the order's own cost) and 64 levels; R = 1:
 * priorities interleaved request by request (priority id mod L: the
 * records admitted together, and finishing together, lie 64 slots apart in
 * memory, where FCFS's are neighbours), R = 1,024: in bursts of 1,024
 * submits of one priority ((id / R) mod L: neighbours again, so the order's
 * cost at 64 levels without the layout's).
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
static uint32_t cur_levels = UINT32_MAX, cur_run;

/* The engine of `levels` levels, priorities in bursts of `run` submits. */
static struct bx *engine_runs(uint32_t levels, uint32_t run)
{
	if (cur && cur_levels == levels && cur_run == run)
		return cur;
	bx_free(cur);
	bx_cache_clear(); /* one 1M engine at a time (and the paired FCFS one) */
	cur = bx_blocked_runs(WAITING, levels, run);
	cur_levels = levels;
	cur_run = run;
	return cur;
}

static struct bx *engine(uint32_t levels) { return engine_runs(levels, 1); }

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

/* BM_priority_step_paired/L: the blocked step of the L-level engine, the
 * 1-level engine and the FCFS engine (both kept) in turn, 256 steps each,
 * in one loop: a shared machine's load, and which of this guest's two
 * vCPUs (which run the engine's code at different speeds) the thread is
 * on, move all three alike, where BM_priority_step_blocked's arguments run
 * one after the other. Timed (manual): the L-level engine's steps, wall;
 * counters the thread's CPU per step of each (cpu_ns, one_cpu_ns,
 * fcfs_cpu_ns) and flat_ratio = cpu_ns / one_cpu_ns. */
static struct bx *one_pair, *fcfs_pair;

#define PAIR_STEPS 256

static uint64_t steps_cpu(struct bx *b, uint64_t *wall)
{
	uint64_t c0 = bx_cpu_ns(), t0 = bx_clock_ns();
	for (int i = 0; i < PAIR_STEPS; i++)
		bx_step(b);
	*wall = bx_clock_ns() - t0;
	if (!b->plan.head_blocked || b->plan.events + b->plan.timers_fired)
		bx_check(-EPROTO, "the head was not blocked, or the step had events");
	return bx_cpu_ns() - c0;
}

static void bm_priority_step_paired(gb_state *s, void *arg)
{
	(void)arg;
	struct bx *p = engine((uint32_t)gb_range_arg(s, 0));
	if (!one_pair)
		one_pair = bx_blocked_levels(WAITING, 1);
	if (!fcfs_pair)
		fcfs_pair = bx_blocked_levels(WAITING, 0);
	uint64_t cp = 0, c1 = 0, cf = 0, wall;
	while (gb_keep_running_batch(s, PAIR_STEPS)) {
		cf += steps_cpu(fcfs_pair, &wall);
		c1 += steps_cpu(one_pair, &wall);
		cp += steps_cpu(p, &wall);
		gb_set_iteration_time(s, seconds(wall)); /* the batch's, as BM_priority_admit's */
	}
	double it = (double)gb_iterations_done(s);
	if (it > 0) {
		gb_counter(s, "cpu_ns", (double)cp / it, GB_COUNTER_DEFAULT);
		gb_counter(s, "one_cpu_ns", (double)c1 / it, GB_COUNTER_DEFAULT);
		gb_counter(s, "fcfs_cpu_ns", (double)cf / it, GB_COUNTER_DEFAULT);
		gb_counter(s, "flat_ratio", c1 ? (double)cp / (double)c1 : 0, GB_COUNTER_DEFAULT);
	}
}

/* One round of B on b: B running requests finish, one step (timed: its ns
 * returned) handles them and admits B restores from the head; untimed, the
 * copies complete, a step admits them and B new restores join. b->running is
 * a ring of the running requests, oldest at *head. */
static uint64_t admit_round(struct bx *b, size_t batch, size_t *head)
{
	size_t cap = BX_RUNNERS + BX_MAX_BATCH;
	for (size_t i = 0; i < batch; i++)
		bx_check(kva_finish(b->e, b->running[(*head + i) % cap]), "kva_finish");
	*head = (*head + batch) % cap;
	b->n_running -= batch;
	uint64_t t0 = bx_clock_ns();
	bx_step(b);
	uint64_t t1 = bx_clock_ns();
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
		b->running[(*head + b->n_running++) % cap] = b->plan.admitted[i].handle;
	for (size_t i = 0; i < batch; i++)
		bx_waiting_add(b, bx_submit(b, true));
	if (bx_step(b) != 0)
		bx_check(-EPROTO, "a new restore was admitted");
	bx_reclaim(b, batch);
	return t1 - t0;
}

/* The ring starts at 0 again for the next call. */
static void ring_rewind(struct bx *b, size_t head)
{
	size_t cap = BX_RUNNERS + BX_MAX_BATCH;
	kva_handle *tmp = malloc(b->n_running * sizeof(*tmp));
	if (!tmp)
		bx_check(-ENOMEM, "ring");
	for (size_t i = 0; i < b->n_running; i++)
		tmp[i] = b->running[(head + i) % cap];
	memcpy(b->running, tmp, b->n_running * sizeof(*tmp));
	free(tmp);
}

static size_t admit_batch(const struct bx *b)
{
	return ROUND < b->n_waiting / 4 ? ROUND : b->n_waiting / 4;
}

static void bm_priority_admit(gb_state *s, void *arg)
{
	(void)arg;
	struct bx *b = engine_runs((uint32_t)gb_range_arg(s, 0), (uint32_t)gb_range_arg(s, 1));
	size_t batch = admit_batch(b), head = 0;
	while (gb_keep_running_batch(s, batch))
		gb_set_iteration_time(s, seconds(admit_round(b, batch, &head)));
	ring_rewind(b, head);
}

/* BM_priority_admit_paired/L/R: the same rounds alternately on the FCFS
 * engine and on the priority engine of L levels in bursts of R, both
 * built once and kept: timed, the priority engine's rounds; counter
 * fcfs_ratio, their time over the FCFS rounds' (which ran in between, so
 * a shared machine's load drifting during the run moves both alike). */
static void bm_priority_admit_paired(gb_state *s, void *arg)
{
	(void)arg;
	struct bx *p = engine_runs((uint32_t)gb_range_arg(s, 0), (uint32_t)gb_range_arg(s, 1));
	if (!fcfs_pair)
		fcfs_pair = bx_blocked_levels(WAITING, 0);
	struct bx *f = fcfs_pair;
	size_t batch = admit_batch(p) < admit_batch(f) ? admit_batch(p) : admit_batch(f);
	size_t hp = 0, hf = 0;
	uint64_t tp = 0, tf = 0;
	while (gb_keep_running_batch(s, batch)) {
		tf += admit_round(f, batch, &hf);
		uint64_t t = admit_round(p, batch, &hp);
		tp += t;
		gb_set_iteration_time(s, seconds(t));
	}
	ring_rewind(p, hp);
	ring_rewind(f, hf);
	gb_counter(s, "fcfs_ratio", tf ? (double)tp / (double)tf : 0, GB_COUNTER_DEFAULT);
	gb_counter(s, "fcfs_ns", (double)tf / (double)gb_iterations_done(s), GB_COUNTER_DEFAULT);
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
	uint64_t rng = 0x9e3779b97f4a7c15ull, touched = 0, call_ns = 0, step_ns = 0, cpu_ns = 0;
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
		uint64_t c0 = bx_cpu_ns(), t0 = bx_clock_ns();
		for (size_t i = 0; i < k; i++)
			bx_check(kva_set_priority(b->e, pick[i], to[i]), "kva_set_priority");
		uint64_t t1 = bx_clock_ns();
		bx_step(b);
		uint64_t t2 = bx_clock_ns();
		cpu_ns += bx_cpu_ns() - c0;
		gb_set_iteration_time(s, seconds(t2 - t0));
		call_ns += t1 - t0;
		step_ns += t2 - t1;
		touched += b->plan.records_touched;
		if (b->plan.n_admitted || b->plan.events != k)
			bx_check(-EPROTO, "the step admitted, or missed a change");
	}
	free(pick);
	free(to);
	free(all);
	gb_counter(s, "records_touched", (double)touched, GB_COUNTER_PER_ITERATION);
	double it = (double)gb_iterations_done(s);
	if (it > 0) { /* as BM_cancel's: the calls', the step's, and the thread's CPU */
		gb_counter(s, "call_ns", (double)call_ns / it, GB_COUNTER_DEFAULT);
		gb_counter(s, "step_ns", (double)step_ns / it, GB_COUNTER_DEFAULT);
		gb_counter(s, "cpu_ns", (double)cpu_ns / it, GB_COUNTER_DEFAULT);
	}
}

void bm_register_priority(void)
{
	gb_bench *b = gb_register("BM_priority_step_blocked", bm_priority_step_blocked, NULL);
	gb_arg(gb_arg(gb_arg(gb_arg(b, 0), 1), 16), 1024);
	gb_arg(gb_use_manual_time(gb_register("BM_priority_step_paired", bm_priority_step_paired,
	                                      NULL)),
	       1024);
	b = gb_use_manual_time(gb_register("BM_priority_admit", bm_priority_admit, NULL));
	static const int64_t admit_args[][2] = {{0, 1}, {1, 1}, {64, 1}, {64, ROUND}};
	for (size_t i = 0; i < sizeof(admit_args) / sizeof(admit_args[0]); i++)
		gb_args(b, admit_args[i], 2);
	b = gb_use_manual_time(
	    gb_register("BM_priority_admit_paired", bm_priority_admit_paired, NULL));
	gb_args(gb_args(b, admit_args[2], 2), admit_args[3], 2);
	b = gb_use_manual_time(gb_register("BM_priority_set", bm_priority_set, NULL));
	gb_arg(b, 64);
}

void bm_cleanup_priority(void)
{
	bx_free(cur);
	bx_free(fcfs_pair);
	cur = fcfs_pair = NULL;
	cur_levels = UINT32_MAX;
}
