/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Conformance: LMCache tests/v1/multiprocess/test_checkpoint_restore_capacity.py
 * (local-inference-lab/LMCache @ c337fc8e65372cc4b9933b48cbc4d3c6e6464d9c).
 * A restore refused for capacity keeps its checkpoint (it is not delisted)
 * and restores once capacity returns.
 */
#include "conf.h"

#define KEY 7

/* Original: the raw payload bytes fit in what is free but the page-aligned
 * allocations do not; the restore waits (it is not a miss), the checkpoint
 * stays listed, and it restores once the space is there. kvadmit: a restore
 * is counted in whole pages — a 305-token checkpoint of a 321-token prompt
 * needs ceil(321/16) = 21 pages, 20 of them imported — so 20 free pages are
 * not enough, and exactly 21 are. */
static void restore_accounts_for_page_alignment(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, KEY, sc_ckpt(305, 900, 0));
	sc_occupy(s, 1, 79);
	kva_handle one = sc_occupy(s, 2, 1); /* 20 pages free = 320 tokens */
	kva_handle h = sc_submit(s, 3, KEY, 321);
	for (int i = 0; i < 5; i++) {
		sc_step(s, 100 * SC_MS);
		assert_int_equal(s->plan.n_copies, 0);
		assert_null(sc_admitted(s, h));
	}
	kva_request_info info = conf_info(s, h);
	assert_int_equal(info.state, KVA_STATE_WAITING);
	assert_true(info.has_selection); /* still listed: not a miss */
	assert_int_equal(info.selected_position, 305);
	assert_int_equal(info.lookups, 1);
	kva_stats stt = sc_stats(s);
	for (int r = 0; r < KVA_REASON_COUNT; r++)
		if (r != KVA_REASON_NO_KEY)
			assert_int_equal(stt.fallbacks[r], 0);
	assert_int_equal(stt.free_pages, 20);
	/* one more page: exactly the 21 whole pages it needs */
	assert_int_equal(kva_finish(s->e, one), 0);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 1);
	assert_int_equal(s->copies[0].checkpoint_id, 900);
	assert_int_equal(s->copies[0].npages, 20); /* ceil(305 / 16) */
	assert_int_equal(sc_free_pages(s), 0);
	sc_copies_done(s, 0);
	sc_step(s, 0);
	const kva_admission *a = sc_admitted(s, h);
	assert_non_null(a);
	assert_int_equal(a->how, KVA_ADMIT_RESTORE);
	assert_int_equal(a->restored_tokens, 305);
	assert_int_equal(a->recompute_tokens, 16);
	assert_int_equal(a->npages, 20);
	assert_int_equal(a->reserved_pages, 1);
	sc_assert_conserved(s);
	sc_free(s);
}

/* Original: the allocation failed, then a concurrent writer released its
 * space before the failure was consumed; the restore acts on the failure it
 * got (no restore now, nothing delisted) and restores on the next attempt.
 * kvadmit: capacity that returns after a step refused the reservation does
 * not change that step's outcome; the next step reserves for the same
 * selected checkpoint, without a new lookup. */
static void restore_uses_allocation_result_before_capacity_returns(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	kva_handle hog = sc_occupy(s, 1, 90);
	kva_handle h = sc_submit(s, 2, KEY, 480); /* needs 30 */
	sc_step(s, 0);
	assert_true(s->plan.head_blocked);
	assert_int_equal(s->plan.n_copies, 0);
	uint64_t blocked = sc_stats(s).restore_blocked_steps;
	assert_true(blocked >= 1);
	/* the space comes back after the refusal */
	assert_int_equal(kva_finish(s->e, hog), 0);
	assert_int_equal(sc_free_pages(s), 100);
	kva_request_info info = conf_info(s, h);
	assert_int_equal(info.state, KVA_STATE_WAITING); /* nothing retroactive */
	assert_int_equal(info.pages_reserved + info.pages_held, 0);
	assert_true(info.has_selection);
	uint32_t lookups = s->n_lookups;
	sc_step(s, 0); /* the next attempt */
	assert_int_equal(s->n_lookups, lookups);
	assert_int_equal(s->plan.n_copies, 1);
	assert_int_equal(s->copies[0].checkpoint_id, 900);
	sc_copies_done(s, 0);
	sc_step(s, 0);
	const kva_admission *a = sc_admitted(s, h);
	assert_non_null(a);
	assert_int_equal(a->how, KVA_ADMIT_RESTORE);
	assert_int_equal(a->restored_tokens, 320);
	assert_int_equal(conf_info(s, h).lookups, 1);
	sc_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(restore_accounts_for_page_alignment),
		cmocka_unit_test(restore_uses_allocation_result_before_capacity_returns),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
