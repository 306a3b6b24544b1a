/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Conformance: vLLM tests/v1/core/test_boundary_admission_review.py
 * (local-inference-lab/vllm @ 917724e724b0007a101ce23e8c34be7218afc8f5).
 */
#include "conf.h"

#define KEY 7

/* Original: a deferred restore at the head blocks a later cold request, and
 * the running-request limit is left as it was. kvadmit: a restore waiting
 * for capacity at the head holds back a later request that would fit. */
static void deferred_head_blocks_later_cold_request(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	kva_handle run = sc_occupy(s, 1, 80); /* 20 free: the restore needs 30 */
	kva_handle head = sc_submit(s, 2, KEY, 480);
	sc_step(s, 0);
	uint64_t run_slots = sc_stats(s).free_run_slots;
	kva_handle cold = sc_submit(s, 3, 0, 24); /* 2 pages: it would fit */
	for (int i = 0; i < 5; i++) {
		sc_step(s, 10 * SC_MS);
		assert_true(s->plan.head_blocked);
		assert_int_equal(s->plan.n_admitted, 0);
	}
	assert_int_equal(sc_state(s, head), KVA_STATE_WAITING);
	assert_int_equal(sc_state(s, cold), KVA_STATE_WAITING);
	assert_int_equal(conf_queue_position(s, cold), 1);
	assert_int_equal(sc_stats(s).free_run_slots, run_slots);
	assert_int_equal(sc_free_pages(s), 20);
	(void)run;
	sc_free(s);
}

/* Original: preempting a request that read a checkpoint removes its reader
 * bookkeeping. kvadmit: a preempted restore holds no pages, no credits and no
 * selection any more; it is back in the waiting queue with a fresh lookup,
 * and restores again as a new reservation. */
static void preemption_removes_reader_bookkeeping(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	kva_handle h = sc_submit(s, 1, KEY, 480);
	sc_step(s, 0);
	sc_copies_done(s, 0);
	sc_step(s, 0);
	assert_non_null(sc_admitted(s, h));
	assert_int_equal(kva_grow(s->e, h, 3, NULL), 0);
	sc_dir_clear(s); /* the re-lookup stays unanswered for now */
	assert_int_equal(kva_preempt(s->e, h), 0);
	kva_stats stt = sc_stats(s);
	assert_int_equal(stt.free_pages, stt.total_pages); /* pages and credits at once */
	assert_int_equal(stt.reserved_pages, 0);
	sc_step(s, 0);
	kva_request_info info = conf_info(s, h);
	assert_int_equal(info.state, KVA_STATE_WAITING);
	assert_int_equal(info.pages_held, 0);
	assert_int_equal(info.pages_reserved, 0);
	assert_false(info.has_selection);
	assert_int_equal(info.lookups, 2);
	assert_int_equal(conf_queue_position(s, h), 0);
	kva_manifest m = {.count = 1, .entries = {sc_ckpt(320, 900, 0)}};
	assert_int_equal(kva_lookup_answer(s->e, s->lookups[s->n_lookups - 1].token, &m), 0);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 1);
	assert_int_equal(s->copies[0].token.attempt, 2);
	sc_copies_done(s, 0);
	sc_step(s, 0);
	const kva_admission *a = sc_admitted(s, h);
	assert_non_null(a);
	assert_int_equal(a->restored_tokens, 320);
	assert_int_equal(a->reserved_pages, 10);
	sc_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(deferred_head_blocks_later_cold_request),
		cmocka_unit_test(preemption_removes_reader_bookkeeping),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
