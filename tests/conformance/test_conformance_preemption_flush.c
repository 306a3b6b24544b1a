/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Conformance: LMCache tests/v1/test_vllm_recurrent_checkpoint_preemption.py
 * (local-inference-lab/LMCache @ 4439c6fcadc87254757677e70e814dcc79b6d305).
 * Pages that an in-flight copy may still touch are never handed out again
 * before the copy drains (rule drain-before-reuse). In kvadmit the pages an
 * in-flight copy writes are an import's destination pages; what can take them
 * away from their owner is a cancel or a prefix-cache reset (an import cannot
 * be preempted: kva_preempt answers -EBUSY until it runs).
 */
#include "conf.h"

#define KEY 7

/* Original: a flagged preemption waits for every in-flight copy before the
 * pages are overwritten; one that does not drain by a deadline is fatal.
 * kvadmit: an import cannot be preempted while it copies; a prefix-cache
 * reset during the copy leaves its pages with it until every rank reported
 * (nobody else can have them meanwhile), then requeues it. Deliberate
 * difference: no deadline and no fatal error — the library never aborts, the
 * pages stay accounted as the import's until the report arrives. */
static void handle_preemptions_drains_pending_before_overwrite(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	kva_handle h = sc_submit(s, 1, KEY, 480); /* 30 pages, 20 under the copy */
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 1);
	kva_copy_job job = s->copies[0];
	uint32_t dest[32];
	memcpy(dest, job.pages, job.npages * sizeof(uint32_t));
	assert_int_equal(kva_preempt(s->e, h), -EBUSY);
	assert_int_equal(kva_reset_prefix_cache(s->e), 0);
	sc_step(s, 0);
	assert_int_equal(sc_state(s, h), KVA_STATE_IMPORTING);
	assert_int_equal(sc_free_pages(s), 70);
	/* everything else is taken: nothing can reach the copy's pages */
	kva_handle other = sc_occupy(s, 2, 70);
	uint32_t ids[8];
	assert_int_equal(kva_grow(s->e, other, 1, ids), -ENOSPC);
	for (int i = 0; i < 5; i++) { /* however long the copy takes */
		sc_step(s, SC_SEC);
		assert_int_equal(sc_state(s, h), KVA_STATE_IMPORTING);
		assert_int_equal(kva_grow(s->e, other, 1, ids), -ENOSPC);
	}
	assert_int_equal(s->n_warn, 0);
	sc_dir_clear(s); /* the reset dropped what the directory knew */
	assert_int_equal(kva_copy_done(s->e, job.token, 0, 0), 0);
	sc_step(s, 0);
	/* drained: the pages are free again and the request looks up afresh */
	assert_int_equal(conf_info(s, h).lookups, 2);
	assert_int_equal(sc_state(s, h), KVA_STATE_WAITING);
	assert_int_equal(sc_free_pages(s), 30);
	uint32_t all[32];
	assert_int_equal(kva_grow(s->e, other, 30, all), 0); /* now they can be reused */
	for (uint32_t k = 0; k < job.npages; k++)
		assert_true(conf_has_page(all, 30, dest[k]));
	assert_int_equal(sc_free_pages(s), 0);
	sc_assert_conserved(s);
	sc_free(s);
}

/* Original: without a preemption the hook leaves in-flight copies alone.
 * kvadmit: preempting an unrelated running request does not touch an import
 * that is copying; its copy completes and it is admitted as a restore. */
static void handle_preemptions_skips_unflagged_metadata(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	kva_handle run = sc_occupy(s, 1, 10);
	kva_handle h = sc_submit(s, 2, KEY, 480);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 1);
	kva_copy_job job = s->copies[0];
	kva_request_info before = conf_info(s, h);
	assert_int_equal(kva_preempt(s->e, run), 0);
	sc_step(s, 0);
	kva_request_info after = conf_info(s, h);
	assert_int_equal(after.state, KVA_STATE_IMPORTING);
	assert_int_equal(after.pages_held, before.pages_held);
	assert_int_equal(after.pages_reserved, before.pages_reserved);
	assert_int_equal(after.copy_attempts, before.copy_attempts);
	assert_int_equal(sc_stats(s).draining_pages, 0);
	assert_int_equal(sc_stats(s).preempted, 1);
	assert_int_equal(kva_copy_done(s->e, job.token, 0, 0), 0);
	sc_step(s, 0);
	const kva_admission *a = sc_admitted(s, h);
	assert_non_null(a);
	assert_int_equal(a->how, KVA_ADMIT_RESTORE);
	sc_free(s);
}

/* Original: a copy that completes before the deadline drains without an
 * error. kvadmit: the owner of a copying import goes away (cancel); the copy
 * then completes: its report is accepted, the pages come back, no warning. */
static void handle_preemptions_accepts_copy_that_drains_in_time(void **st)
{
	(void)st;
	kva_config c;
	sc_config(&c);
	c.world_size = 2;
	struct sc *s = sc_new(&c);
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	kva_handle h = sc_submit(s, 1, KEY, 480);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 2);
	kva_copy_token t = s->copies[0].token;
	assert_int_equal(kva_copy_done(s->e, t, 0, 0), 0);
	assert_int_equal(kva_cancel(s->e, h), 0);
	sc_step(s, 0);
	assert_non_null(sc_ended(s, h));
	assert_int_equal(sc_stats(s).draining_pages, 20);
	sc_step(s, 50 * SC_MS);
	assert_int_equal(kva_copy_done(s->e, t, 1, 0), 0); /* drains in time */
	sc_step(s, 0);
	kva_stats stt = sc_stats(s);
	assert_int_equal(stt.draining_pages, 0);
	assert_int_equal(stt.free_pages, stt.total_pages);
	assert_int_equal(stt.copy_attempts_failed, 0);
	assert_int_equal(s->n_warn, 0);
	sc_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(handle_preemptions_drains_pending_before_overwrite),
		cmocka_unit_test(handle_preemptions_skips_unflagged_metadata),
		cmocka_unit_test(handle_preemptions_accepts_copy_that_drains_in_time),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
