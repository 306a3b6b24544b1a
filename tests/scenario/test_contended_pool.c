/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A page-id take crowded out by other threads (docs/design.md, "The bounds
 * of a step's work"): the step's take gives up after
 * KVA_PAGEPOOL_CLAIM_TRIES claim CASes (lockfree/pagepool.h) rather than
 * retry for as long as others win, gives back its credits, and the head
 * waits for the next step, which plan.backlog asks for (a READY restore
 * whose take for a longer local checkpoint is crowded out stays READY, its
 * pages and credits unchanged). kva_grow, on a host
 * thread, tries a crowded-out take again a bounded number of times, then
 * says -ENOSPC with nothing changed.
 *
 * KVADMIT_FAULT_INJECTION builds only (skipped elsewhere): the pool's claim
 * hook fails the claim CASes as other threads winning them would.
 */
#include "scenario.h"

#ifdef KVA_FAULT_INJECTION
#include <unistd.h>

#include "engine_state.h"

#define KEY 7

/* The next k claim CASes fail; returns the claim CASes tried since the
 * previous call. */
static uint64_t contend(uint32_t k)
{
	uint64_t tries, passes;
	kva__pagepool_fault_arm(k, &tries, &passes);
	return tries;
}

/* Nothing held: every credit free, every id in the pool. */
static void assert_whole(struct sc *s, uint64_t held)
{
	kva_stats st = sc_stats(s);
	sc_assert_conserved(s);
	assert_int_equal(st.free_pages, st.total_pages - held);
	assert_int_equal(kva_pagepool_count(&s->e->pool), st.total_pages - held);
}

static void a_crowded_out_take_leaves_the_head_waiting_for_the_next_step(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	kva_handle h = sc_submit(s, 1, 0, 64); /* 4 pages */
	contend(KVA_PAGEPOOL_CLAIM_TRIES);     /* the whole take of this step */
	assert_int_equal(sc_step(s, SC_MS), 0);
	assert_int_equal(contend(0), KVA_PAGEPOOL_CLAIM_TRIES); /* tried no more */
	assert_true(s->plan.backlog);
	assert_true(s->plan.head_blocked);
	assert_int_equal(sc_state(s, h), KVA_STATE_WAITING);
	assert_whole(s, 0); /* its credits went back */

	assert_int_equal(sc_step(s, SC_MS), 1);
	assert_non_null(sc_expect_admitted(s, h, KVA_ADMIT_RECOMPUTE, 0, 0));
	assert_false(s->plan.backlog);
	assert_int_equal(s->plan.n_pages, 4);
	assert_whole(s, 4);
	assert_int_equal(kva_finish(s->e, h), 0);
	sc_step(s, SC_MS);
	assert_whole(s, 0);
	sc_free(s);
}

/* A restore's paired reservation: the same, and its copy starts at the
 * next step with the pages it would have had. */
static void a_crowded_out_restore_starts_its_copy_at_the_next_step(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	kva_handle h = sc_submit(s, 1, KEY, 480); /* 30 pages, 20 copied */
	contend(KVA_PAGEPOOL_CLAIM_TRIES);
	sc_step(s, SC_MS);
	assert_int_equal(contend(0), KVA_PAGEPOOL_CLAIM_TRIES);
	assert_true(s->plan.backlog);
	assert_int_equal(s->plan.n_copies, 0);
	assert_int_equal(sc_state(s, h), KVA_STATE_WAITING);
	assert_whole(s, 0);

	sc_step(s, SC_MS);
	assert_false(s->plan.backlog);
	assert_int_equal(s->plan.n_copies, 1);
	assert_int_equal(s->copies[0].npages, 20);
	assert_int_equal(sc_state(s, h), KVA_STATE_IMPORTING);
	assert_int_equal(kva_pagepool_count(&s->e->pool), 80);
	sc_copies_done(s, 0);
	sc_step(s, SC_MS);
	assert_non_null(sc_expect_admitted(s, h, KVA_ADMIT_RESTORE, 0, 320));
	assert_int_equal(kva_finish(s->e, h), 0);
	sc_step(s, SC_MS);
	assert_whole(s, 0);
	sc_free(s);
}

/* A restore READY on its import that the host gave a longer local
 * checkpoint during the copy takes the pages the local prefix needs beyond
 * the imported ones (take_more, reservations/admit.c) from credits it
 * already owns. Crowded out, it stays READY, owning the same pages and
 * credits, and is admitted at the next step as it would have been. */
static void a_crowded_out_take_more_keeps_the_ready_restore_for_the_next_step(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, KEY, sc_ckpt(128, 80, 0));
	kva_handle h = sc_submit(s, 1, KEY, 256); /* 16 pages, 8 imported */
	sc_step(s, SC_MS);
	assert_int_equal(s->plan.n_copies, 1);
	kva_checkpoint longer = sc_ckpt(200, 71, 1); /* 13 pages: 5 more */
	assert_int_equal(kva_local_checkpoint(s->e, h, &longer), 0);
	sc_copies_done(s, 0);
	kva_stats before = sc_stats(s);
	size_t pool = kva_pagepool_count(&s->e->pool);
	kva_request_info was;
	assert_int_equal(kva_query(s->e, h, &was), 0);
	assert_int_equal(was.pages_held + was.pages_reserved, 16);

	contend(KVA_PAGEPOOL_CLAIM_TRIES); /* take_more's take */
	assert_int_equal(sc_step(s, SC_MS), 0);
	assert_int_equal(contend(0), KVA_PAGEPOOL_CLAIM_TRIES); /* tried no more */
	assert_true(s->plan.backlog);
	assert_int_equal(s->plan.n_admitted, 0);
	kva_request_info i;
	assert_int_equal(kva_query(s->e, h, &i), 0);
	assert_int_equal(i.state, KVA_STATE_READY);
	assert_int_equal(i.pages_held, was.pages_held);
	assert_int_equal(i.pages_reserved, was.pages_reserved);
	kva_stats now = sc_stats(s);
	sc_assert_conserved(s);
	assert_int_equal(now.free_pages, before.free_pages);
	assert_int_equal(now.reserved_pages + now.in_use_pages,
			 before.reserved_pages + before.in_use_pages);
	assert_int_equal(kva_pagepool_count(&s->e->pool), pool); /* no id lost */

	assert_int_equal(sc_step(s, SC_MS), 1);
	assert_false(s->plan.backlog);
	const kva_admission *a = sc_expect_admitted(s, h, KVA_ADMIT_LOCAL, 200, 0);
	assert_int_equal(a->restored_tokens, 0);
	assert_int_equal(a->npages, 13);
	assert_int_equal(a->npages + a->reserved_pages, 16);
	assert_int_equal(kva_pagepool_count(&s->e->pool), pool - 5);
	sc_assert_conserved(s);
	assert_int_equal(kva_finish(s->e, h), 0);
	sc_step(s, SC_MS);
	assert_whole(s, 0);
	sc_free(s);
}

/* kva_grow tries a crowded-out take again (16 takes in all, kvadmit.h),
 * then says -ENOSPC with nothing changed. */
static void grow_retries_a_crowded_out_take_then_says_enospc(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	kva_handle h = sc_occupy(s, 1, 1);
	uint32_t ids[2];
	alarm(30); /* a grow that retries for ever fails here rather than hangs */
	contend(3 * KVA_PAGEPOOL_CLAIM_TRIES); /* three takes crowded out */
	assert_int_equal(kva_grow(s->e, h, 2, ids), 0);
	assert_int_equal(contend(UINT32_MAX), 3 * KVA_PAGEPOOL_CLAIM_TRIES + 1);
	assert_whole(s, 3);

	assert_int_equal(kva_grow(s->e, h, 2, ids), -ENOSPC);
	assert_int_equal(contend(0), 16 * KVA_PAGEPOOL_CLAIM_TRIES);
	assert_whole(s, 3);
	kva_request_info info;
	assert_int_equal(kva_query(s->e, h, &info), 0);
	assert_int_equal(info.state, KVA_STATE_RUNNING); /* still the host's */
	assert_int_equal(info.pages_held, 3);

	assert_int_equal(kva_grow(s->e, h, 2, ids), 0);
	assert_whole(s, 5);
	assert_int_equal(kva_finish(s->e, h), 0);
	sc_step(s, SC_MS);
	assert_whole(s, 0);
	sc_free(s);
	alarm(0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(a_crowded_out_take_leaves_the_head_waiting_for_the_next_step),
	    cmocka_unit_test(a_crowded_out_restore_starts_its_copy_at_the_next_step),
	    cmocka_unit_test(a_crowded_out_take_more_keeps_the_ready_restore_for_the_next_step),
	    cmocka_unit_test(grow_retries_a_crowded_out_take_then_says_enospc),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
#else
int main(void)
{
	printf("test_contended_pool: needs -DKVADMIT_FAULT_INJECTION=ON; skipped\n");
	return 77;
}
#endif
