/* SPDX-License-Identifier: Apache-2.0 */
/*
 * When a step hands retired records to their grace period (lifecycle.c,
 * kva__rec_flush_retired): a flush costs a ticket and a call_rcu, so a step
 * that retired a few waits for more, but never past a step that retires
 * none. White-box: the test reads the engine's retired batch.
 */
#include "scenario.h"

#include "engine_state.h"
#include "record.h"

/* Admits n ordinary requests (one page each) and finishes them all. */
static void finish_n(struct sc *s, uint64_t first_id, int n)
{
	kva_handle h[64];
	for (int i = 0; i < n; i++)
		h[i] = sc_submit(s, first_id + (uint64_t)i, 0, 16);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_admitted, n);
	for (int i = 0; i < n; i++)
		assert_int_equal(kva_finish(s->e, h[i]), 0);
}

static void a_few_retirements_wait_until_a_step_retires_none(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	finish_n(s, 1, 3);
	sc_step(s, 0); /* reports and retires the three */
	assert_int_equal(s->plan.n_ended, 3);
	assert_int_equal(s->e->retired.n, 3);
	uint64_t flushed = s->e->retired.flushed;
	finish_n(s, 10, 2); /* this step admits, retires nothing */
	assert_int_equal(s->e->retired.n, 0);
	assert_int_equal(s->e->retired.flushed, flushed + 1);
	sc_step(s, 0); /* retires the two: they wait */
	assert_int_equal(s->e->retired.n, 2);
	sc_step(s, 0);
	assert_int_equal(s->e->retired.n, 0);
	assert_int_equal(s->e->retired.flushed, flushed + 2);
	sc_free(s);
}

static void enough_retirements_flush_at_the_end_of_their_step(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	uint64_t flushed = s->e->retired.flushed;
	for (int round = 0; round < 3; round++) {
		finish_n(s, 100 + 64 * (uint64_t)round, 16);
		sc_step(s, 0);
		assert_int_equal(s->plan.n_ended, 16);
		assert_int_equal(s->e->retired.n, 0);
		assert_int_equal(s->e->retired.flushed, flushed + 1 + (uint64_t)round);
	}
	sc_free(s);
}

static void cancel_events_follow_the_same_rule(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_occupy(s, 1, 100); /* every page: the next request waits */
	kva_handle w = sc_submit(s, 2, 0, 16);
	sc_step(s, 0);
	assert_true(s->plan.head_blocked);
	assert_int_equal(kva_cancel(s->e, w), 0);
	sc_step(s, 0);
	assert_non_null(sc_ended(s, w));
	assert_int_equal(s->e->cancels_retired.n, 1);
	sc_step(s, 0);
	assert_int_equal(s->e->cancels_retired.n, 0);
	sc_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(a_few_retirements_wait_until_a_step_retires_none),
		cmocka_unit_test(enough_retirements_flush_at_the_end_of_their_step),
		cmocka_unit_test(cancel_events_follow_the_same_rule),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
