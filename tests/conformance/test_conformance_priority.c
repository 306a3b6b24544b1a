/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Ports of vLLM's priority-scheduling tests (tests/v1/core/test_scheduler.py,
 * tests/conformance/CATALOGUE.md) to KVA_ORDER_PRIORITY: the waiting order by
 * (priority, arrival) with vLLM's float arrival times as the host's
 * arrival_ns, max_num_seqs as max_running, and vLLM's own preemption as the
 * host's kva_preempt of kva_preempt_candidate (kvadmit never preempts).
 */
#include "conf.h"

static struct sc *prio_engine(uint16_t max_running, uint32_t total_pages)
{
	kva_config c;
	sc_config(&c);
	c.order = KVA_ORDER_PRIORITY;
	c.max_running = max_running;
	if (total_pages)
		c.total_pages = total_pages;
	return sc_new(&c);
}

/* vLLM's create_requests_with_priority: ids 0..n-1, `tokens` each. */
static void submit_all(struct sc *s, kva_handle *h, uint32_t n, const int32_t *prio,
                       const double *arrival, uint32_t tokens)
{
	for (uint32_t i = 0; i < n; i++) {
		kva_request r = {.id = i, .prompt_tokens = tokens, .priority = prio[i],
		                 .arrival_ns = (uint64_t)(arrival[i] * (double)SC_SEC)};
		assert_int_equal(kva_submit(s->e, &r, &h[i]), 0);
	}
}

static void expect_admitted(struct sc *s, const uint64_t *ids, uint32_t n)
{
	assert_int_equal(s->plan.n_admitted, n);
	for (uint32_t i = 0; i < n; i++)
		assert_int_equal(s->admitted[i].handle.id, ids[i]);
}

struct ids {
	uint64_t id[16];
	uint32_t n;
};

static int collect(void *ctx, const kva_waiting_info *w)
{
	struct ids *o = ctx;
	o->id[o->n++] = w->handle.id;
	return 0;
}

static void expect_waiting(struct sc *s, const uint64_t *ids, uint32_t n)
{
	struct ids o = {.n = 0};
	assert_int_equal(kva_waiting_foreach(s->e, collect, &o, 0), (int)n);
	for (uint32_t i = 0; i < n; i++)
		assert_int_equal(o.id[i], ids[i]);
}

/* A step at the clock that makes every arrival above past. */
static void step_at_10s(struct sc *s)
{
	sc_step(s, 10 * SC_SEC);
}

static void basic_ordering(void **state)
{
	(void)state;
	struct sc *s = prio_engine(64, 0);
	kva_handle h[3];
	submit_all(s, h, 3, (const int32_t[]){2, 0, 1}, (const double[]){1, 2, 3}, 10);
	step_at_10s(s);
	expect_admitted(s, (const uint64_t[]){1, 2, 0}, 3);
	sc_free(s);
}

static void arrival_time_tiebreaker(void **state)
{
	(void)state;
	struct sc *s = prio_engine(64, 0);
	kva_handle h[3];
	submit_all(s, h, 3, (const int32_t[]){1, 1, 1}, (const double[]){3, 1, 2}, 10);
	step_at_10s(s);
	expect_admitted(s, (const uint64_t[]){1, 2, 0}, 3);
	sc_free(s);
}

static void mixed_priority_and_arrival(void **state)
{
	(void)state;
	struct sc *s = prio_engine(64, 0);
	kva_handle h[4];
	submit_all(s, h, 4, (const int32_t[]){2, 1, 1, 0}, (const double[]){1, 3, 2, 4}, 10);
	step_at_10s(s);
	expect_admitted(s, (const uint64_t[]){3, 2, 1, 0}, 4);
	sc_free(s);
}

/* vLLM's test is skipped upstream ("needs investigation"); its intent, a
 * high-priority request getting in under memory pressure by preempting the
 * low-priority ones, is the host's here: the plan says so
 * (preempt_hint) and names the victim (kva_preempt_candidate). */
static void preemption(void **state)
{
	(void)state;
	struct sc *s = prio_engine(3, 6); /* 6 pages of 16 tokens */
	kva_handle lo[2], hi;
	submit_all(s, lo, 2, (const int32_t[]){5, 5}, (const double[]){1, 2}, 30);
	step_at_10s(s);
	expect_admitted(s, (const uint64_t[]){0, 1}, 2);
	assert_int_equal(kva_grow(s->e, lo[0], 1, NULL), 0); /* decode: 5 of 6 pages used */
	kva_request r = {.id = 7, .prompt_tokens = 30, .arrival_ns = 3 * SC_SEC};
	assert_int_equal(kva_submit(s->e, &r, &hi), 0);
	sc_step(s, SC_MS);
	assert_int_equal(s->plan.n_admitted, 0);
	assert_true(s->plan.head_blocked && s->plan.preempt_hint);
	kva_handle v;
	assert_int_equal(kva_preempt_candidate(s->e, &v), 0);
	assert_int_equal(v.id, lo[1].id); /* equal priorities: the later arrival */
	assert_int_equal(kva_preempt(s->e, v), 0);
	sc_step(s, SC_MS);
	expect_admitted(s, (const uint64_t[]){7}, 1);
	expect_waiting(s, (const uint64_t[]){1}, 1);
	sc_free(s);
}

static void no_preemption_when_space_available(void **state)
{
	(void)state;
	struct sc *s = prio_engine(3, 0);
	kva_handle lo[2], hi;
	submit_all(s, lo, 2, (const int32_t[]){5, 5}, (const double[]){1, 2}, 30);
	step_at_10s(s);
	kva_request r = {.id = 7, .prompt_tokens = 30, .arrival_ns = 3 * SC_SEC};
	assert_int_equal(kva_submit(s->e, &r, &hi), 0);
	sc_step(s, SC_MS);
	expect_admitted(s, (const uint64_t[]){7}, 1);
	assert_false(s->plan.preempt_hint);
	kva_stats st = sc_stats(s);
	assert_int_equal(st.running, 3);
	assert_int_equal(st.waiting, 0);
	sc_free(s);
}

static void preemption_victim_selection(void **state)
{
	(void)state;
	struct sc *s = prio_engine(1, 0);
	kva_handle h[3];
	submit_all(s, h, 3, (const int32_t[]){3, 2, 0}, (const double[]){1, 2, 3}, 10);
	step_at_10s(s);
	expect_admitted(s, (const uint64_t[]){2}, 1);
	expect_waiting(s, (const uint64_t[]){1, 0}, 2);
	sc_free(s);
}

static void equal_priority_preemption(void **state)
{
	(void)state;
	struct sc *s = prio_engine(1, 0);
	kva_handle h[3];
	submit_all(s, h, 3, (const int32_t[]){2, 2, 2}, (const double[]){3, 1, 2}, 10);
	step_at_10s(s);
	expect_admitted(s, (const uint64_t[]){1}, 1);
	expect_waiting(s, (const uint64_t[]){2, 0}, 2);
	sc_free(s);
}

static void waiting_queue_order(void **state)
{
	(void)state;
	struct sc *s = prio_engine(1, 0);
	kva_handle h[4];
	submit_all(s, h, 4, (const int32_t[]){3, 1, 2, 0}, (const double[]){1, 2, 3, 4}, 10);
	step_at_10s(s);
	expect_admitted(s, (const uint64_t[]){3}, 1);
	expect_waiting(s, (const uint64_t[]){1, 2, 0}, 3);
	sc_free(s);
}

static void fcfs_fallback(void **state)
{
	(void)state;
	struct sc *s = prio_engine(64, 0);
	kva_handle h[4];
	submit_all(s, h, 4, (const int32_t[]){1, 1, 1, 1}, (const double[]){4, 1, 3, 2}, 10);
	step_at_10s(s);
	expect_admitted(s, (const uint64_t[]){1, 3, 2, 0}, 4);
	sc_free(s);
}

static void with_limited_slots(void **state)
{
	(void)state;
	struct sc *s = prio_engine(2, 0);
	kva_handle h[4];
	submit_all(s, h, 4, (const int32_t[]){3, 1, 2, 0}, (const double[]){1, 2, 3, 4}, 10);
	step_at_10s(s);
	expect_admitted(s, (const uint64_t[]){3, 1}, 2);
	expect_waiting(s, (const uint64_t[]){2, 0}, 2);
	sc_free(s);
}

static void heap_property(void **state)
{
	(void)state;
	struct sc *s = prio_engine(1, 0);
	const int32_t prio[] = {5, 1, 8, 3, 2, 7, 4, 6};
	kva_handle h[8];
	submit_all(s, h, 8, prio, (const double[]){0, 1, 2, 3, 4, 5, 6, 7}, 10);
	int32_t got[8];
	for (uint32_t k = 0; k < 8; k++) {
		step_at_10s(s);
		assert_int_equal(s->plan.n_admitted, 1);
		got[k] = prio[s->admitted[0].handle.id];
		assert_int_equal(kva_finish(s->e, s->admitted[0].handle), 0);
	}
	for (uint32_t k = 0; k < 8; k++)
		assert_int_equal(got[k], (int32_t)k + 1);
	sc_free(s);
}

/* Out of KV for the running decodes: vLLM preempts the low-priority one and
 * resumes it once the high-priority one finished. Here the host's kva_grow
 * fails, it preempts kva_preempt_candidate, and the preempted request is
 * readmitted first when room comes back. */
static void preemption_and_resumption_when_out_of_kv(void **state)
{
	(void)state;
	struct sc *s = prio_engine(2, 4); /* 4 usable blocks, as vLLM's 5 with the null block */
	kva_handle low, high;
	kva_request r = {.id = 0, .prompt_tokens = 30, .priority = 1};
	assert_int_equal(kva_submit(s->e, &r, &low), 0);
	sc_step(s, SC_MS);
	expect_admitted(s, (const uint64_t[]){0}, 1);
	r = (kva_request){.id = 1, .prompt_tokens = 32, .priority = 0};
	assert_int_equal(kva_submit(s->e, &r, &high), 0);
	sc_step(s, SC_MS);
	expect_admitted(s, (const uint64_t[]){1}, 1);
	assert_int_equal(sc_free_pages(s), 0); /* the pool is full */
	assert_int_equal(kva_grow(s->e, high, 1, NULL), -ENOSPC); /* its 33rd token */
	kva_handle v;
	assert_int_equal(kva_preempt_candidate(s->e, &v), 0);
	assert_int_equal(v.id, low.id);
	assert_int_equal(kva_preempt(s->e, v), 0);
	assert_int_equal(kva_grow(s->e, high, 1, NULL), 0);
	sc_step(s, SC_MS);
	assert_int_equal(s->plan.n_admitted, 0); /* 1 page free: low's 2 do not fit */
	expect_waiting(s, (const uint64_t[]){0}, 1);
	assert_int_equal(kva_finish(s->e, high), 0);
	sc_step(s, SC_MS);
	expect_admitted(s, (const uint64_t[]){0}, 1);
	expect_waiting(s, NULL, 0);
	sc_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(basic_ordering),
		cmocka_unit_test(arrival_time_tiebreaker),
		cmocka_unit_test(mixed_priority_and_arrival),
		cmocka_unit_test(preemption),
		cmocka_unit_test(no_preemption_when_space_available),
		cmocka_unit_test(preemption_victim_selection),
		cmocka_unit_test(equal_priority_preemption),
		cmocka_unit_test(waiting_queue_order),
		cmocka_unit_test(fcfs_fallback),
		cmocka_unit_test(with_limited_slots),
		cmocka_unit_test(heap_property),
		cmocka_unit_test(preemption_and_resumption_when_out_of_kv),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
