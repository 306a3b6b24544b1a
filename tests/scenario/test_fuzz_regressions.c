/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Regressions found by the fuzz targets (tests/fuzz/), replayed through the
 * public API so that every build (release, sanitizers, valgrind) runs them,
 * not only the clang fuzz build. Each test names the rule it proves and the
 * target that found it; the minimised input sits in tests/fuzz/corpus/ too.
 */
#include "scenario/scenario.h"

/* fuzz_engine (hang): the engine pushes event nodes embedded in its records
 * again (submit, then finish or preempt; a rank per copy attempt). A node
 * that was not last in its drained batch kept a stale next link, so the
 * next drain replayed an old SUBMIT and then spun forever. Fixed in
 * lockfree/inbox.c (push resets the link); here the engine-level symptom. */
static void test_one_outcome_each_when_event_nodes_are_reused(void **state)
{
	(void)state;
	struct sc *s = sc_default();
	kva_handle a = sc_submit(s, 1, 0, 16);
	kva_handle b = sc_submit(s, 2, 0, 16); /* a's submit node links to b's */
	assert_int_equal(sc_step(s, 0), 2);
	assert_int_equal(kva_finish(s->e, a), 0); /* a's node pushed again */
	sc_step(s, 0);
	assert_non_null(sc_ended(s, a));
	assert_int_equal(s->plan.n_ended, 1);
	assert_int_equal(s->plan.n_admitted, 0); /* b was not ingested twice */
	assert_int_equal(sc_state(s, b), KVA_STATE_RUNNING);
	assert_int_equal(kva_preempt(s->e, b), 0);
	assert_int_equal(sc_step(s, 0), 1);
	assert_int_equal(kva_finish(s->e, b), 0);
	sc_step(s, 0);
	assert_non_null(sc_ended(s, b));
	kva_stats st = sc_stats(s);
	assert_int_equal(st.ingested, 2);
	assert_int_equal(st.running + st.waiting, 0);
	sc_assert_conserved(s);
	sc_free(s);
}

/* fuzz_differential: a request's grant outlives its reservations, and the
 * failed-attempt count in it was never reset, so a restore admitted again
 * after a preemption (or a reset) started with its retries already spent
 * and recomputed on its first failed copy. */
static void test_rule11_new_reservation_gets_the_full_retry_budget(void **state)
{
	(void)state;
	kva_config c;
	sc_config(&c);
	c.max_copy_retries = 1;
	struct sc *s = sc_new(&c);
	sc_dir_set(s, 7, sc_ckpt(64, 70, 0));
	kva_handle h = sc_submit(s, 1, 7, 100);
	sc_step(s, 0);
	assert_int_equal(sc_copies_done(s, -1), 1); /* spends the one retry */
	sc_step(s, 0);
	assert_int_equal(sc_copies_done(s, 0), 1);
	sc_step(s, 0);
	assert_non_null(sc_admitted(s, h));
	assert_int_equal(kva_preempt(s->e, h), 0);
	sc_step(s, 0); /* front of the queue, looked up again, imports again */
	assert_int_equal(sc_copies_done(s, -1), 1);
	sc_step(s, 0);
	assert_null(sc_admitted(s, h));	       /* not recomputed ... */
	assert_int_equal(s->plan.n_copies, 1); /* ... retried */
	assert_int_equal(sc_copies_done(s, 0), 1);
	sc_step(s, 0);
	const kva_admission *a = sc_admitted(s, h);
	assert_non_null(a);
	assert_int_equal(a->how, KVA_ADMIT_RESTORE);
	assert_int_equal(sc_stats(s).fallbacks[KVA_REASON_RETRIES_EXHAUSTED], 0);
	sc_free(s);
}

/* fuzz_engine: once a request had ended (cancelled while waiting, its
 * report not yet taken), its lookup still counted as awaited, so every
 * further answer returned 0, was allocated and queued, and was only dropped
 * as late at the next step; a live request's handled lookup refuses them. */
static void test_rule3_answers_for_an_ended_request_are_stale(void **state)
{
	(void)state;
	struct sc *s = sc_default();
	kva_manifest miss = {0};
	sc_dir_set(s, 4, sc_ckpt(16, 40, 0)); /* answered from inside the callback */
	kva_handle a = sc_submit(s, 1, 4, 100);
	assert_int_equal(kva_cancel(s->e, a), 0);
	s->plan.ended_cap = 0; /* keep the ended records: report them later */
	sc_step(s, 0);	       /* ingest, lookup, cancel; the answer is dropped */
	assert_int_equal(sc_state(s, a), KVA_STATE_CANCELLED);
	uint64_t late = sc_stats(s).late_answers;
	assert_int_equal(kva_lookup_answer(s->e, s->lookups[0].token, &miss), -ESTALE);
	assert_int_equal(sc_stats(s).late_answers, late + 1);

	kva_handle b = sc_submit(s, 2, 9, 100); /* no directory entry: unanswered */
	sc_step(s, 0);
	assert_int_equal(kva_cancel(s->e, b), 0);
	sc_step(s, 0);
	assert_int_equal(sc_state(s, b), KVA_STATE_CANCELLED);
	assert_int_equal(kva_lookup_answer(s->e, s->lookups[1].token, &miss), -ESTALE);

	s->plan.ended_cap = SC_MAX;
	sc_step(s, 0);
	assert_int_equal(s->plan.n_ended, 2);
	assert_int_equal(kva_lookup_answer(s->e, s->lookups[1].token, &miss), -ENOENT);
	sc_assert_conserved(s);
	sc_free(s);
}

/* fuzz_differential: a slot keeps its grant across incarnations, and the
 * grant's attempt counter went with it: a new request's first copy attempt
 * was numbered after its predecessor's (kva_query's copy_attempts too). */
static void test_reused_slot_starts_copy_attempts_at_one(void **state)
{
	(void)state;
	struct sc *s = sc_default();
	sc_dir_set(s, 8, sc_ckpt(32, 901, 0));
	static bool seen[1 << 16];
	memset(seen, 0, sizeof(seen));
	bool reused = false;
	for (uint64_t id = 1; id < 100000 && !reused; id++) {
		kva_handle h = sc_submit(s, id, 8, 64);
		sc_step(s, SC_MS);
		assert_int_equal(s->plan.n_copies, 1);
		assert_int_equal(s->copies[0].token.attempt, 1);
		kva_request_info info;
		assert_int_equal(kva_query(s->e, h, &info), 0);
		assert_int_equal(info.copy_attempts, 1);
		reused = seen[h.slot];
		seen[h.slot] = true;
		sc_copies_done(s, -1); /* a failed first attempt: the next is 2 */
		sc_step(s, SC_MS);
		assert_int_equal(s->copies[0].token.attempt, 2);
		sc_copies_done(s, 0);
		sc_step(s, SC_MS);
		assert_int_equal(kva_finish(s->e, h), 0);
		sc_step(s, SC_MS);
	}
	assert_true(reused); /* checked on a slot used before */
	sc_free(s);
}

/* fuzz_engine: a refresh still out when its restore was admitted stayed
 * "awaited": every answer to it was taken (0) and dropped by the step,
 * instead of being refused as stale. */
static void test_refresh_out_at_admission_is_stale(void **state)
{
	(void)state;
	kva_config c;
	sc_config(&c);
	c.lookup_refresh_ns = 1 * SC_SEC;
	struct sc *s = sc_new(&c);
	kva_handle big = sc_occupy(s, 100, 95);
	sc_dir_set(s, 7, sc_ckpt(64, 80, 0));
	sc_submit(s, 1, 7, 256); /* answered at once, then waits for capacity */
	sc_step(s, 0);
	sc_dir_clear(s); /* the refresh stays unanswered */
	sc_step(s, 2 * SC_SEC);
	assert_int_equal(s->n_lookups, 2);
	kva_lookup_token refresh = s->lookups[1].token;
	assert_int_equal(kva_finish(s->e, big), 0);
	sc_step(s, 0); /* admitted: its import starts */
	assert_int_equal(s->plan.n_copies, 1);
	kva_manifest m = {.count = 1, .entries = {sc_ckpt(64, 80, 0)}};
	assert_int_equal(kva_lookup_answer(s->e, refresh, &m), -ESTALE);
	assert_int_equal(kva_lookup_answer(s->e, refresh, &m), -ESTALE);
	sc_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_one_outcome_each_when_event_nodes_are_reused),
	    cmocka_unit_test(test_rule11_new_reservation_gets_the_full_retry_budget),
	    cmocka_unit_test(test_rule3_answers_for_an_ended_request_are_stale),
	    cmocka_unit_test(test_reused_slot_starts_copy_attempts_at_one),
	    cmocka_unit_test(test_refresh_out_at_admission_is_stale),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
