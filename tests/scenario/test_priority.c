/* SPDX-License-Identifier: Apache-2.0 */
/*
 * KVA_ORDER_PRIORITY (docs/design.md, "Priority order"): the waiting queue is
 * in (priority, arrival) order, and every rule holds within it — a READY
 * restore passes a blocked head of any priority, a preempted or reset request
 * goes to the front of its own priority, kva_set_priority moves a waiting
 * request (also while its lookup is out) and waits for a running one's
 * preemption, and aging bounds a low priority's wait. FCFS ignores priorities.
 */
#include <pthread.h>

#include "scenario.h"

#define KEY_R 7 /* a restore the directory answers at once */

static kva_config prio_config(void)
{
	kva_config c;
	sc_config(&c);
	c.order = KVA_ORDER_PRIORITY;
	return c;
}

static kva_handle submit_p(struct sc *s, uint64_t id, uint64_t key, uint32_t prompt, int32_t p,
                           uint64_t arrival)
{
	kva_request r = {.id = id, .prefix_key = key, .prompt_tokens = prompt, .priority = p,
	                 .arrival_ns = arrival};
	kva_handle h;
	assert_int_equal(kva_submit(s->e, &r, &h), 0);
	return h;
}

struct ids {
	uint64_t id[SC_MAX];
	uint32_t n;
};

static int collect(void *ctx, const kva_waiting_info *w)
{
	struct ids *o = ctx;
	assert_int_equal(w->position, o->n);
	o->id[o->n++] = w->handle.id;
	return 0;
}

/* The waiting queue's ids, head first, are `want` (n of them). */
static void expect_order(struct sc *s, const uint64_t *want, uint32_t n)
{
	struct ids o = {.n = 0};
	assert_int_equal(kva_waiting_foreach(s->e, collect, &o, 0), (int)n);
	for (uint32_t i = 0; i < n; i++)
		assert_int_equal(o.id[i], want[i]);
}

/* One step that admits nothing: the queue shows the order. */
static void step_held(struct sc *s, uint64_t dt)
{
	s->plan.hold_admissions = true;
	sc_step(s, dt);
	s->plan.hold_admissions = false;
}

static void test_order_priority_then_arrival(void **state)
{
	(void)state;
	kva_config c = prio_config();
	struct sc *s = sc_new(&c);
	int32_t prio[] = {5, 1, 5, 0, 1, 3, -2, 3};
	for (uint64_t i = 0; i < 8; i++)
		submit_p(s, 10 + i, 0, 16, prio[i], 0);
	step_held(s, SC_MS);
	const uint64_t want[] = {16, 13, 11, 14, 15, 17, 10, 12};
	expect_order(s, want, 8);
	/* admission takes them in that order */
	assert_int_equal(sc_step(s, SC_MS), 8);
	for (uint32_t i = 0; i < 8; i++)
		assert_int_equal(s->admitted[i].handle.id, want[i]);
	sc_free(s);
}

/* Many levels appearing and emptying in any order: the queue is always the
 * sorted order (checked against a sort of the same keys). */
static void test_order_many_levels(void **state)
{
	(void)state;
	kva_config c = prio_config();
	struct sc *s = sc_new(&c);
	struct {
		int32_t p;
		uint64_t id;
	} w[600];
	uint32_t n = 0;
	uint64_t x = 12345;
	for (uint32_t round = 0; round < 6; round++) {
		for (uint32_t k = 0; k < 100; k++) {
			x = x * 6364136223846793005ull + 1442695040888963407ull;
			int32_t p = (int32_t)(x >> 33) % 40 - 20;
			uint64_t id = 1000 + round * 100 + k;
			submit_p(s, id, 0, 16, p, 0);
			/* insertion sort: stable, so arrival order within a priority */
			uint32_t j = n++;
			while (j > 0 && w[j - 1].p > p) {
				w[j] = w[j - 1];
				j--;
			}
			w[j].p = p;
			w[j].id = id;
		}
		step_held(s, SC_MS);
		uint64_t want[600];
		for (uint32_t i = 0; i < n; i++)
			want[i] = w[i].id;
		expect_order(s, want, n);
		/* admit a few from the head (levels empty at the front) */
		for (uint32_t i = 0; i < 3 && n; i++) {
			kva_handle h;
			assert_int_equal(sc_step(s, SC_MS) > 0, 1);
			for (uint32_t a = 0; a < s->plan.n_admitted; a++) {
				h = s->admitted[a].handle;
				assert_int_equal(h.id, w[0].id);
				memmove(w, w + 1, (--n) * sizeof(w[0]));
				assert_int_equal(kva_finish(s->e, h), 0);
			}
		}
	}
	sc_free(s);
}

/* The host's arrival times order one priority, even when they come out of order. */
static void test_host_arrival(void **state)
{
	(void)state;
	kva_config c = prio_config();
	struct sc *s = sc_new(&c);
	submit_p(s, 1, 0, 16, 2, 50);
	submit_p(s, 2, 0, 16, 2, 30);
	submit_p(s, 3, 0, 16, 2, 70);
	submit_p(s, 4, 0, 16, 2, 10);
	submit_p(s, 5, 0, 16, 1, 90);
	submit_p(s, 6, 0, 16, 2, 50); /* same arrival as 1: after it */
	step_held(s, SC_MS);
	const uint64_t want[] = {5, 4, 2, 1, 6, 3};
	expect_order(s, want, 6);
	sc_free(s);
}

/* Capacity frees: the smallest priority goes first whatever the submit order,
 * and a restore blocked for capacity at the head holds those behind it. */
static void test_head_blocks_by_priority(void **state)
{
	(void)state;
	kva_config c = prio_config();
	struct sc *s = sc_new(&c);
	kva_handle big = sc_occupy(s, 99, 90);
	sc_dir_set(s, KEY_R, sc_ckpt(160, 9, 0));
	kva_handle low = submit_p(s, 1, 0, 16, 9, 0);      /* 1 page: would fit */
	kva_handle high = submit_p(s, 2, KEY_R, 320, 0, 0); /* a restore of 20 pages */
	sc_step(s, SC_MS);
	assert_int_equal(s->plan.n_admitted, 0);
	assert_true(s->plan.head_blocked);
	assert_int_equal(sc_state(s, low), KVA_STATE_WAITING);
	assert_int_equal(kva_finish(s->e, big), 0);
	sc_step(s, SC_MS);
	assert_int_equal(sc_state(s, high), KVA_STATE_IMPORTING);
	assert_non_null(sc_admitted(s, low));
	sc_free(s);
}

/* rule fcfs-ready-bypass across priorities: a low-priority restore that owns
 * its capacity (READY) is admitted past a blocked head of a higher priority. */
static void test_ready_bypass_across_priorities(void **state)
{
	(void)state;
	kva_config c = prio_config();
	struct sc *s = sc_new(&c);
	sc_occupy(s, 99, 60);
	sc_dir_set(s, KEY_R, sc_ckpt(160, 9, 0));
	kva_handle low = submit_p(s, 1, KEY_R, 320, 50, 0); /* 20 pages: imports */
	sc_step(s, SC_MS);
	assert_int_equal(sc_state(s, low), KVA_STATE_IMPORTING);
	assert_int_equal(s->plan.n_copies, 1);
	kva_copy_job job = s->copies[0];
	kva_handle high = submit_p(s, 2, KEY_R + 1, 400, -50, 0); /* 25 pages > 20 free */
	sc_dir_set(s, KEY_R + 1, sc_ckpt(160, 10, 0));
	sc_step(s, SC_MS);
	assert_true(s->plan.head_blocked);
	assert_int_equal(sc_state(s, high), KVA_STATE_WAITING);
	assert_int_equal(kva_copy_done(s->e, job.token, 0, 0), 0);
	sc_step(s, SC_MS);
	sc_expect_admitted(s, low, KVA_ADMIT_RESTORE, 0, 160);
	assert_true(s->plan.head_blocked);
	assert_int_equal(sc_state(s, high), KVA_STATE_WAITING);
	sc_assert_conserved(s);
	sc_free(s);
}

/* A preempted request goes to the front of its own priority: behind every
 * more urgent one, before the others of its priority. */
static void test_preempted_front_of_level(void **state)
{
	(void)state;
	kva_config c = prio_config();
	struct sc *s = sc_new(&c);
	kva_handle r = submit_p(s, 1, 0, 16, 1, 0);
	kva_handle q = submit_p(s, 2, 0, 16, 3, 0);
	sc_step(s, SC_MS);
	assert_int_equal(sc_state(s, r), KVA_STATE_RUNNING);
	assert_int_equal(sc_state(s, q), KVA_STATE_RUNNING);
	submit_p(s, 10, 0, 16, 0, 0);
	/* arrived before r: by arrival alone r would go after them */
	submit_p(s, 11, 0, 16, 1, 1);
	submit_p(s, 12, 0, 16, 1, 2);
	submit_p(s, 13, 0, 16, 2, 0);
	submit_p(s, 14, 0, 16, 5, 0);
	step_held(s, SC_MS);
	assert_int_equal(kva_preempt(s->e, r), 0);
	assert_int_equal(kva_preempt(s->e, q), 0);
	step_held(s, SC_MS);
	const uint64_t want[] = {10, 1, 11, 12, 13, 2, 14};
	expect_order(s, want, 7);
	/* an earlier host arrival joining q's level stops behind it */
	submit_p(s, 16, 0, 16, 3, 5);
	step_held(s, SC_MS);
	const uint64_t then[] = {10, 1, 11, 12, 13, 2, 16, 14};
	expect_order(s, then, 8);
	sc_free(s);
}

/* rule reset-returns-ready: READY restores go back to the front of their own
 * priority, in the order they had among themselves. */
static void test_reset_front_of_level(void **state)
{
	(void)state;
	kva_config c = prio_config();
	struct sc *s = sc_new(&c);
	sc_dir_set(s, KEY_R, sc_ckpt(32, 9, 0));
	kva_handle a = submit_p(s, 1, KEY_R, 64, 2, 0);
	kva_handle b = submit_p(s, 2, KEY_R, 64, 0, 0);
	kva_handle d = submit_p(s, 3, KEY_R, 64, 2, 0);
	sc_step(s, SC_MS);
	assert_int_equal(s->plan.n_copies, 3);
	sc_copies_done(s, 0);
	s->plan.hold_admissions = true; /* they stay READY */
	sc_step(s, SC_MS);
	assert_int_equal(sc_state(s, a), KVA_STATE_READY);
	assert_int_equal(sc_state(s, b), KVA_STATE_READY);
	assert_int_equal(sc_state(s, d), KVA_STATE_READY);
	submit_p(s, 10, 0, 16, 0, 0);
	submit_p(s, 11, 0, 16, 2, 0);
	submit_p(s, 12, 0, 16, 1, 0);
	step_held(s, SC_MS);
	assert_int_equal(kva_reset_prefix_cache(s->e), 0);
	sc_dir_clear(s); /* their new lookups stay out */
	step_held(s, SC_MS);
	const uint64_t want[] = {2, 10, 12, 1, 3, 11};
	expect_order(s, want, 6);
	sc_assert_conserved(s);
	sc_free(s);
}

/* kva_set_priority: a waiting request moves to the back of its new level (its
 * lookup still out), a running one keeps running and its new priority counts
 * when it is preempted. */
static void test_set_priority(void **state)
{
	(void)state;
	kva_config c = prio_config();
	struct sc *s = sc_new(&c);
	kva_handle run = submit_p(s, 1, 0, 16, 0, 0);
	sc_step(s, SC_MS);
	assert_int_equal(sc_state(s, run), KVA_STATE_RUNNING);
	kva_handle x = submit_p(s, 2, KEY_R, 64, 5, 0); /* its lookup stays out */
	submit_p(s, 3, 0, 16, 1, 0);
	submit_p(s, 4, 0, 16, 1, 0);
	submit_p(s, 5, 0, 16, 3, 0);
	step_held(s, SC_MS);
	assert_int_equal(s->n_lookups, 1);
	const uint64_t before[] = {3, 4, 5, 2};
	expect_order(s, before, 4);
	assert_int_equal(kva_set_priority(s->e, x, 1), 0);
	assert_int_equal(kva_set_priority(s->e, run, 9), 0);
	step_held(s, SC_MS);
	const uint64_t moved[] = {3, 4, 2, 5};
	expect_order(s, moved, 4);
	assert_int_equal(sc_state(s, run), KVA_STATE_RUNNING);
	assert_int_equal(kva_preempt(s->e, run), 0);
	step_held(s, SC_MS);
	const uint64_t preempted[] = {3, 4, 2, 5, 1};
	expect_order(s, preempted, 5);
	/* its lookup's answer still counts: a miss, then admitted in order */
	kva_manifest miss = {.count = 0};
	assert_int_equal(kva_lookup_answer(s->e, s->lookups[0].token, &miss), 0);
	assert_int_equal(sc_step(s, SC_MS), 5);
	for (uint32_t i = 0; i < 5; i++)
		assert_int_equal(s->admitted[i].handle.id, preempted[i]);
	/* ended: -ENOENT; FCFS: -EINVAL */
	assert_int_equal(kva_finish(s->e, x), 0);
	sc_step(s, SC_MS);
	assert_int_equal(kva_set_priority(s->e, x, 0), -ENOENT);
	sc_free(s);
	kva_config f;
	sc_config(&f);
	s = sc_new(&f);
	if (s->cfg.order == KVA_ORDER_FCFS)
		assert_int_equal(kva_set_priority(s->e, x, 0), -EINVAL);
	sc_free(s);
}

/* A priority change is a new arrival at the back of the new level: behind
 * requests that arrived after it, O(1) whatever the level's size. */
static void test_set_priority_joins_back(void **state)
{
	(void)state;
	kva_config c = prio_config();
	struct sc *s = sc_new(&c);
	kva_handle y = submit_p(s, 1, 0, 16, 7, 0);
	step_held(s, SC_MS);
	submit_p(s, 2, 0, 16, 4, 0);
	submit_p(s, 3, 0, 16, 4, 0);
	step_held(s, SC_MS);
	assert_int_equal(kva_set_priority(s->e, y, 4), 0);
	step_held(s, SC_MS);
	const uint64_t want[] = {2, 3, 1};
	expect_order(s, want, 3);
	/* the same priority again: it keeps its place */
	assert_int_equal(kva_set_priority(s->e, y, 4), 0);
	submit_p(s, 4, 0, 16, 4, 0);
	step_held(s, SC_MS);
	const uint64_t then[] = {2, 3, 1, 4};
	expect_order(s, then, 4);
	sc_free(s);
}

/* FCFS ignores priorities: submit order. */
static void test_fcfs_ignores_priority(void **state)
{
	(void)state;
	kva_config c;
	sc_config(&c);
	struct sc *s = sc_new(&c);
	if (s->cfg.order != KVA_ORDER_FCFS) {
		sc_free(s);
		skip();
	}
	submit_p(s, 1, 0, 16, 5, 0);
	submit_p(s, 2, 0, 16, 0, 0);
	submit_p(s, 3, 0, 16, -3, 9);
	step_held(s, SC_MS);
	const uint64_t want[] = {1, 2, 3};
	expect_order(s, want, 3);
	sc_free(s);
}

static void test_bad_input(void **state)
{
	(void)state;
	kva_config c = prio_config();
	struct sc *s = sc_new(&c);
	kva_request r = {.id = 1, .prompt_tokens = 16, .reserved_ = 1};
	kva_handle h;
	assert_int_equal(kva_submit(s->e, &r, &h), -EINVAL);
	assert_int_equal(kva_set_priority(NULL, h, 0), -EINVAL);
	kva_config bad = c;
	bad.order = 2;
	int err = 0;
	assert_null(kva_engine_create(&bad, &err));
	assert_int_equal(err, -EINVAL);
	bad = c;
	bad.preempt_threshold = -1;
	assert_null(kva_engine_create(&bad, &err));
	assert_int_equal(err, -EINVAL);
	sc_free(s);
}

/* Aging (kva_config.aging_interval_ns = I): a request Δp levels less urgent
 * than a steady stream is outranked by no arrival after (Δp + 1)·I, and so is
 * admitted while the stream goes on. One admission a step, one arrival a step. */
static void test_aging_bound(void **state)
{
	(void)state;
	kva_config c = prio_config();
	const uint64_t I = 1 * SC_SEC, dt = 100 * SC_MS;
	const int32_t dp = 10;
	c.aging_interval_ns = I;
	c.max_running = 1;
	struct sc *s = sc_new(&c);
	uint64_t t0 = s->now;
	kva_handle low = submit_p(s, 1, 0, 16, dp, 0);
	uint64_t admitted_at = 0, stream_after = 0;
	kva_handle running = {0};
	for (uint64_t id = 100; id < 100 + 400; id++) {
		submit_p(s, id, 0, 16, 0, 0);
		if (running.id)
			assert_int_equal(kva_finish(s->e, running), 0);
		sc_step(s, dt);
		assert_int_equal(s->plan.n_admitted, 1);
		running = s->admitted[0].handle;
		if (running.id == low.id)
			admitted_at = s->now;
		else if (admitted_at == 0 && s->now - t0 > (uint64_t)(dp + 1) * I + dt)
			stream_after++; /* a stream request that arrived after the bound went first */
	}
	assert_int_not_equal(admitted_at, 0);
	assert_int_equal(stream_after, 0);
	assert_true(admitted_at - t0 <= (uint64_t)(dp + 1) * I + 2 * dt);
	sc_free(s);
}

/* Without aging the same stream starves it (the test above can fail). */
static void test_no_aging_starves(void **state)
{
	(void)state;
	kva_config c = prio_config();
	c.max_running = 1;
	struct sc *s = sc_new(&c);
	kva_handle low = submit_p(s, 1, 0, 16, 10, 0);
	kva_handle running = {0};
	for (uint64_t id = 100; id < 100 + 200; id++) {
		submit_p(s, id, 0, 16, 0, 0);
		if (running.id)
			assert_int_equal(kva_finish(s->e, running), 0);
		sc_step(s, 100 * SC_MS);
		running = s->admitted[0].handle;
		assert_int_not_equal(running.id, low.id);
	}
	sc_free(s);
}

/* kva_preempt_candidate: the running request with the largest (priority,
 * arrival), kept as requests start, end and change priority. */
static void test_preempt_candidate(void **state)
{
	(void)state;
	kva_config c = prio_config();
	struct sc *s = sc_new(&c);
	kva_handle h, a = submit_p(s, 1, 0, 16, 1, 0);
	assert_int_equal(kva_preempt_candidate(s->e, &h), -ENOENT);
	kva_handle b = submit_p(s, 2, 0, 16, 5, 10);
	kva_handle d = submit_p(s, 3, 0, 16, 5, 20);
	kva_handle z = submit_p(s, 4, 0, 16, 0, 0);
	assert_int_equal(sc_step(s, SC_MS), 4);
	assert_int_equal(kva_preempt_candidate(s->e, &h), 0);
	assert_int_equal(h.id, d.id);
	assert_int_equal(kva_finish(s->e, d), 0);
	sc_step(s, SC_MS);
	assert_int_equal(kva_preempt_candidate(s->e, &h), 0);
	assert_int_equal(h.id, b.id);
	assert_int_equal(kva_set_priority(s->e, z, 9), 0);
	sc_step(s, SC_MS);
	assert_int_equal(kva_preempt_candidate(s->e, &h), 0);
	assert_int_equal(h.id, z.id);
	assert_int_equal(kva_preempt(s->e, z), 0);
	assert_int_equal(kva_cancel(s->e, b), 0);
	s->plan.hold_admissions = true;
	sc_step(s, SC_MS);
	assert_int_equal(kva_preempt_candidate(s->e, &h), 0);
	assert_int_equal(h.id, a.id);
	assert_int_equal(kva_preempt_candidate(NULL, &h), -EINVAL);
	sc_free(s);
	kva_config f;
	sc_config(&f);
	s = sc_new(&f);
	if (s->cfg.order == KVA_ORDER_FCFS)
		assert_int_equal(kva_preempt_candidate(s->e, &h), -EINVAL);
	sc_free(s);
}

/* The run heap drops stale entries by rebuilding once they are half of it:
 * thousands of starts and ends over a running set of at most 200, and after
 * every step the candidate is the brute-force answer over what runs. */
static void test_preempt_candidate_through_rebuilds(void **state)
{
	(void)state;
	enum { MAXRUN = 200, ROUNDS = 300, PER = 40 };
	kva_config c = prio_config();
	c.total_pages = 4 * MAXRUN;
	c.max_running = 4 * MAXRUN;
	struct sc *s = sc_new(&c);
	static int32_t prio_of[ROUNDS * PER + 1]; /* by id; arrival = id * 10 */
	kva_handle run[MAXRUN];
	uint32_t n = 0, seed = 12345, starts = 0;
	uint64_t id = 1;
	for (uint32_t round = 0; round < ROUNDS; round++) {
		/* ten rounds filling, ten draining: every entry left in the heap
		 * may become the largest before its request ends */
		for (uint32_t k = 0; (round / 10) % 2 == 0 && n + k < MAXRUN && k < PER; k++, id++) {
			seed = seed * 1103515245u + 12345u;
			prio_of[id] = (int32_t)((seed >> 16) % 9) - 4;
			submit_p(s, id, 0, 16, prio_of[id], id * 10);
		}
		int adm = sc_step(s, SC_MS);
		for (int i = 0; i < adm; i++)
			run[n++] = s->admitted[i].handle;
		starts += (uint32_t)adm;
		/* the brute-force victim: largest (priority, arrival) */
		uint32_t v = 0;
		for (uint32_t i = 1; i < n; i++)
			if (prio_of[run[i].id] > prio_of[run[v].id] ||
			    (prio_of[run[i].id] == prio_of[run[v].id] && run[i].id > run[v].id))
				v = i;
		kva_handle h;
		assert_int_equal(kva_preempt_candidate(s->e, &h), n ? 0 : -ENOENT);
		if (n)
			assert_int_equal(h.id, run[v].id);
		/* a random third of the running ones finish */
		for (uint32_t i = 0; i < n;) {
			seed = seed * 1103515245u + 12345u;
			if ((seed >> 16) % 3 == 0) {
				assert_int_equal(kva_finish(s->e, run[i]), 0);
				run[i] = run[--n];
			} else {
				i++;
			}
		}
	}
	assert_true(starts > 4 * c.max_running); /* many rebuilds, by either rule */
	sc_free(s);
}

/* plan.preempt_hint: the head, blocked for capacity, outranks the candidate
 * by at least preempt_threshold (SGLang's preemption threshold). */
static void test_preempt_hint(void **state)
{
	(void)state;
	kva_config c = prio_config();
	c.preempt_threshold = 3;
	struct sc *s = sc_new(&c);
	kva_handle big = submit_p(s, 1, 0, 16, 10, 0);
	sc_step(s, SC_MS);
	assert_int_equal(kva_grow(s->e, big, 89, NULL), 0);
	kva_handle head = submit_p(s, 2, 0, 320, 8, 0); /* a 16-page chunk: 10 free */
	sc_step(s, SC_MS);
	assert_true(s->plan.head_blocked);
	assert_false(s->plan.preempt_hint); /* 10 - 8 < 3 */
	assert_int_equal(kva_set_priority(s->e, head, 7), 0);
	sc_step(s, SC_MS);
	assert_true(s->plan.head_blocked);
	assert_true(s->plan.preempt_hint); /* 10 - 7 >= 3 */
	kva_handle h;
	assert_int_equal(kva_preempt_candidate(s->e, &h), 0);
	assert_int_equal(h.id, big.id);
	assert_int_equal(kva_preempt(s->e, big), 0);
	sc_step(s, SC_MS);
	assert_non_null(sc_admitted(s, head));
	assert_false(s->plan.preempt_hint);
	sc_free(s);
}

/* Stats by priority: levels in use, the most and least urgent level's key,
 * count and wait as of the last step, and admissions by priority class
 * (bounded: eight classes whatever priorities the host uses). */
static void test_stats_by_level(void **state)
{
	(void)state;
	kva_config c = prio_config();
	struct sc *s = sc_new(&c);
	submit_p(s, 1, 0, 16, 3, 0);
	submit_p(s, 2, 0, 16, 3, 0);
	step_held(s, SC_MS);
	submit_p(s, 3, 0, 16, -7, 0);
	submit_p(s, 4, 0, 16, 9, 0);
	submit_p(s, 5, 0, 16, 9, 0);
	submit_p(s, 6, 0, 16, 9, 0);
	step_held(s, 2 * SC_MS);
	kva_stats st = sc_stats(s);
	assert_int_equal(st.priority_levels, 3);
	assert_int_equal(st.urgent_level, -7);
	assert_int_equal(st.urgent_waiting, 1);
	assert_int_equal(st.urgent_wait_ns, 0); /* ingested in this step */
	assert_int_equal(st.lax_level, 9);
	assert_int_equal(st.lax_waiting, 3);
	step_held(s, 5 * SC_MS);
	st = sc_stats(s);
	assert_int_equal(st.urgent_wait_ns, 5 * SC_MS);
	assert_int_equal(sc_step(s, SC_MS), 6);
	st = sc_stats(s);
	assert_int_equal(st.priority_levels, 0);
	assert_int_equal(st.urgent_waiting + st.lax_waiting, 0);
	const uint64_t want[KVA_PRIORITY_CLASSES] = {1, 0, 0, 2, 0, 3, 0, 0};
	for (int i = 0; i < KVA_PRIORITY_CLASSES; i++)
		assert_int_equal(st.admitted_by_priority[i], want[i]);
	char text[16384];
	assert_true(kva_stats_format(&st, text, sizeof(text)) < sizeof(text));
	assert_non_null(strstr(text, "kvadmit_admissions_by_priority_total{priority=\"8-15\"} 3"));
	sc_free(s);
}

/* Producers on other threads submit and change priorities while the
 * scheduler steps (and walks the queue after each step): afterwards it is
 * in order of every request's last priority. Run under TSan too. */
#define PRODUCERS 2
#define PER_PRODUCER 300

struct producer {
	struct sc *s;
	uint64_t base;
	int32_t last[PER_PRODUCER];
};

static void *produce(void *arg)
{
	struct producer *p = arg;
	kva_handle h[PER_PRODUCER];
	for (uint32_t i = 0; i < PER_PRODUCER; i++) {
		kva_request r = {.id = p->base + i, .prompt_tokens = 16,
		                 .priority = (int32_t)(i % 7)};
		assert_int_equal(kva_submit(p->s->e, &r, &h[i]), 0);
		p->last[i] = r.priority;
	}
	for (uint32_t i = 0; i < PER_PRODUCER; i += 2) {
		p->last[i] = (int32_t)((i * 5) % 11) - 3;
		assert_int_equal(kva_set_priority(p->s->e, h[i], p->last[i]), 0);
	}
	return NULL;
}

static struct producer *prods;

static int check_sorted(void *ctx, const kva_waiting_info *w)
{
	int32_t *prev = ctx;
	const struct producer *p = &prods[(w->handle.id - 1) / 1000 - 1];
	int32_t pr = p->last[(w->handle.id - 1) % 1000];
	assert_true(pr >= *prev);
	*prev = pr;
	return 0;
}

static int count_cb(void *ctx, const kva_waiting_info *w)
{
	(void)w;
	(*(uint32_t *)ctx)++;
	return 0;
}

static void test_threads_submit_and_change(void **state)
{
	(void)state;
	kva_config c = prio_config();
	struct sc *s = sc_new(&c);
	struct producer p[PRODUCERS];
	pthread_t t[PRODUCERS];
	prods = p;
	for (uint32_t k = 0; k < PRODUCERS; k++) {
		p[k].s = s;
		p[k].base = 1000 * (k + 1) + 1;
		assert_int_equal(pthread_create(&t[k], NULL, produce, &p[k]), 0);
	}
	for (int i = 0; i < 50; i++) { /* steps while they produce; a walk each */
		uint32_t n = 0;
		step_held(s, SC_MS);
		assert_true(kva_waiting_foreach(s->e, count_cb, &n, 0) >= 0);
	}
	for (uint32_t k = 0; k < PRODUCERS; k++)
		assert_int_equal(pthread_join(t[k], NULL), 0);
	step_held(s, SC_MS);
	int32_t prev = INT32_MIN;
	assert_int_equal(kva_waiting_foreach(s->e, check_sorted, &prev, 0),
	                 PRODUCERS * PER_PRODUCER);
	sc_free(s);
}

/* Records of one level that one thread submits, interleaved with other
 * levels, lie in neighbouring slots (kva_slab_alloc_near): a step admits a
 * level's requests together, and neighbours share lines and prefetch
 * streams (bench/README.md, BM_priority_admit_paired/64/1). */
static void test_one_levels_records_are_neighbours(void **state)
{
	(void)state;
	enum { LEVELS = 4, PER = 16 };
	kva_config c = prio_config();
	struct sc *s = sc_new(&c);
	uint32_t slot[LEVELS][PER];
	for (uint32_t i = 0; i < LEVELS * PER; i++)
		slot[i % LEVELS][i / LEVELS] =
		    submit_p(s, 1 + i, 0, 16, (int32_t)(i % LEVELS) - 1, 0).slot;
	for (uint32_t l = 0; l < LEVELS; l++)
		for (uint32_t k = 1; k < PER; k++)
			assert_int_equal(slot[l][k], slot[l][k - 1] + 1);
	/* and the engine takes them as it takes any others */
	assert_int_equal(sc_step(s, SC_MS), LEVELS * PER);
	for (uint32_t i = 0; i < LEVELS * PER; i++)
		assert_int_equal(s->admitted[i].handle.id % LEVELS, (i / PER + 1) % LEVELS);
	sc_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_order_priority_then_arrival),
		cmocka_unit_test(test_order_many_levels),
		cmocka_unit_test(test_host_arrival),
		cmocka_unit_test(test_head_blocks_by_priority),
		cmocka_unit_test(test_ready_bypass_across_priorities),
		cmocka_unit_test(test_preempted_front_of_level),
		cmocka_unit_test(test_reset_front_of_level),
		cmocka_unit_test(test_set_priority),
		cmocka_unit_test(test_set_priority_joins_back),
		cmocka_unit_test(test_fcfs_ignores_priority),
		cmocka_unit_test(test_bad_input),
		cmocka_unit_test(test_aging_bound),
		cmocka_unit_test(test_no_aging_starves),
		cmocka_unit_test(test_preempt_candidate),
		cmocka_unit_test(test_preempt_candidate_through_rebuilds),
		cmocka_unit_test(test_preempt_hint),
		cmocka_unit_test(test_threads_submit_and_change),
		cmocka_unit_test(test_stats_by_level),
		cmocka_unit_test(test_one_levels_records_are_neighbours),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
