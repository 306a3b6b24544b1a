/* SPDX-License-Identifier: Apache-2.0 */
/* Copies: rules retry-then-shorter, drain-before-reuse, cancel-any-thread (during a copy),
 * reset-returns-ready and collective-completion. */
#include <urcu/urcu-memb.h>

#include "scenario.h"

#define KEY 7

static void rule11_failed_copy_is_retried_keeping_its_reservation(void **st)
{
	(void)st;
	struct sc *s = sc_default(); /* max_copy_retries = 2 */
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	kva_handle h = sc_submit(s, 1, KEY, 480);
	sc_step(s, 0);
	uint64_t free_after_reserve = sc_free_pages(s);
	uint32_t first_page = s->copies[0].pages[0];
	sc_copies_done(s, 1);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 1);
	assert_int_equal(s->copies[0].token.attempt, 2);
	assert_int_equal(s->copies[0].pages[0], first_page); /* same pages */
	assert_int_equal(sc_free_pages(s), free_after_reserve);
	sc_copies_done(s, 0);
	sc_step(s, 0);
	const kva_admission *a = sc_admitted(s, h);
	assert_non_null(a);
	assert_int_equal(a->how, KVA_ADMIT_RESTORE);
	kva_stats stt = sc_stats(s);
	assert_int_equal(stt.copy_retries, 1);
	assert_int_equal(stt.copy_attempts_failed, 1);
	sc_free(s);
}

/* A retired request's grant goes to the next admission after a grace
 * period (grant.c, grant reuse): the new request starts with its own pages
 * and no attempts, and the old request's copy token stays refused. */
static void rule11_a_reused_grant_starts_clean(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	kva_handle a = sc_submit(s, 1, KEY, 480);
	sc_step(s, 0);
	kva_copy_token stale = s->copies[0].token;
	sc_copies_done(s, 1); /* attempt 1 fails, attempt 2 succeeds */
	sc_step(s, 0);
	sc_copies_done(s, 0);
	sc_step(s, 0);
	assert_non_null(sc_admitted(s, a));
	kva_request_info info;
	assert_int_equal(kva_query(s->e, a, &info), 0);
	assert_int_equal(info.copy_attempts, 2);
	assert_int_equal(info.pages_held + info.pages_reserved, 30);
	assert_int_equal(kva_finish(s->e, a), 0);
	sc_step(s, 0);
	assert_non_null(sc_ended(s, a)); /* reported and retired */
	urcu_memb_barrier();  /* its grace period: the grant may be reused */

	sc_dir_set(s, KEY + 1, sc_ckpt(160, 901, 0));
	kva_handle b = sc_submit(s, 2, KEY + 1, 224);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 1);
	assert_int_equal(s->copies[0].token.attempt, 1);
	assert_int_equal(s->copies[0].npages, 10);
	assert_int_equal(kva_query(s->e, b, &info), 0);
	assert_int_equal(info.state, KVA_STATE_IMPORTING);
	assert_int_equal(info.copy_attempts, 1);
	assert_int_equal(info.pages_held + info.pages_reserved, 14);
	assert_int_equal(kva_copy_done(s->e, stale, 0, 0), -ENOENT);
	sc_copies_done(s, 0);
	sc_step(s, 0);
	const kva_admission *adm = sc_admitted(s, b);
	assert_non_null(adm);
	assert_int_equal(adm->restored_tokens, 160);
	assert_int_equal(kva_query(s->e, b, &info), 0);
	assert_int_equal(info.pages_held + info.pages_reserved, 14);
	assert_int_equal(info.copy_attempts, 1);
	assert_int_equal(kva_finish(s->e, b), 0);
	sc_step(s, 0);
	sc_assert_conserved(s);
	sc_free(s);
}

static void rule11_exhausted_retries_fall_back_to_shorter_checkpoint(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_add(s, KEY, sc_ckpt(160, 901, 0));
	sc_dir_add(s, KEY, sc_ckpt(320, 902, 0));
	kva_handle h = sc_submit(s, 1, KEY, 480);
	sc_step(s, 0);
	uint64_t free_pages = sc_free_pages(s);
	for (int i = 0; i < 3; i++) { /* first attempt + 2 retries */
		assert_int_equal(s->plan.n_copies, 1);
		assert_int_equal(s->copies[0].checkpoint_id, 902);
		sc_copies_done(s, 1);
		sc_step(s, 0);
	}
	assert_int_equal(s->plan.n_copies, 1);
	assert_int_equal(s->copies[0].checkpoint_id, 901);
	assert_int_equal(s->copies[0].npages, 10);
	assert_int_equal(sc_free_pages(s), free_pages); /* still owns 30 credits */
	sc_copies_done(s, 0);
	sc_step(s, 0);
	const kva_admission *a = sc_admitted(s, h);
	assert_non_null(a);
	assert_int_equal(a->how, KVA_ADMIT_RESTORE);
	assert_int_equal(a->restored_tokens, 160);
	assert_int_equal(a->npages, 10);
	assert_int_equal(a->reserved_pages, 20);
	assert_int_equal(sc_stats(s).shorter_fallbacks, 1);
	sc_assert_conserved(s);
	sc_free(s);
}

static void rule11_recompute_only_when_no_shorter_checkpoint_is_left(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, KEY, sc_ckpt(320, 902, 0));
	kva_handle h = sc_submit(s, 1, KEY, 480);
	sc_step(s, 0);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(s->plan.n_copies, 1);
		sc_copies_done(s, 1);
		sc_step(s, 0);
	}
	const kva_admission *a = sc_admitted(s, h);
	assert_non_null(a);
	assert_int_equal(a->how, KVA_ADMIT_RECOMPUTE);
	assert_int_equal(a->reason, KVA_REASON_RETRIES_EXHAUSTED);
	assert_int_equal(a->recompute_tokens, 480);
	assert_int_equal(sc_stats(s).fallbacks[KVA_REASON_RETRIES_EXHAUSTED], 1);
	sc_assert_conserved(s);
	sc_free(s);
}

/* capacity_wait measures how long a head waited for capacity: it ends at
 * the reservation. The copy after it is copy_duration's, and a restore
 * cancelled during its copy still waited. */
static void capacity_wait_ends_at_the_reservation_not_the_copy(void **st)
{
	(void)st;
	kva_config c;
	sc_config(&c);
	c.max_restore_wait_ns = 0;
	struct sc *s = sc_new(&c);
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	kva_handle hog = sc_occupy(s, 1, 40); /* 60 free: two restores of 30 fit */
	kva_handle hog2 = sc_occupy(s, 2, 50); /* 10 free */
	kva_handle a = sc_submit(s, 3, KEY, 480);
	sc_step(s, 0);
	assert_true(s->plan.head_blocked);
	assert_int_equal(kva_finish(s->e, hog), 0);
	sc_step(s, SC_SEC); /* waited 1 s: reserves, its copy starts */
	assert_int_equal(s->plan.n_copies, 1);
	kva_copy_job ja = s->copies[0];
	kva_handle b = sc_submit(s, 4, KEY, 480);
	sc_step(s, 0);
	assert_true(s->plan.head_blocked);
	assert_int_equal(kva_finish(s->e, hog2), 0);
	sc_step(s, 2 * SC_SEC); /* waited 2 s */
	assert_int_equal(s->plan.n_copies, 1);
	kva_copy_job jb = s->copies[0];
	kva_stats x = sc_stats(s);
	assert_int_equal(x.capacity_wait.count, 2);
	assert_int_equal(x.capacity_wait.sum_ns, 3 * SC_SEC);
	sc_step(s, 10 * SC_SEC); /* the copies take 10 s more */
	assert_int_equal(kva_cancel(s->e, b), 0);
	assert_int_equal(kva_copy_done(s->e, ja.token, ja.rank, 0), 0);
	assert_int_equal(kva_copy_done(s->e, jb.token, jb.rank, 0), 0);
	sc_step(s, 0);
	assert_non_null(sc_admitted(s, a));
	x = sc_stats(s);
	assert_int_equal(x.capacity_wait.count, 2);
	assert_int_equal(x.capacity_wait.sum_ns, 3 * SC_SEC);
	assert_int_equal(x.copy_duration.count, 2);
	sc_free(s);
}

static void rule12_cancel_during_copy_frees_credits_now_pages_after_drain(void **st)
{
	(void)st;
	kva_config c;
	sc_config(&c);
	c.copy_slots = 1;
	struct sc *s = sc_new(&c);
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	kva_handle h = sc_submit(s, 1, KEY, 480); /* 20 imported + 10 continuation */
	sc_step(s, 0);
	kva_copy_job job = s->copies[0];
	assert_int_equal(sc_free_pages(s), 70);
	assert_int_equal(kva_cancel(s->e, h), 0);
	sc_step(s, 0);
	assert_non_null(sc_ended(s, h));
	kva_stats stt = sc_stats(s);
	assert_int_equal(stt.free_pages, 80);      /* continuation credits back at once */
	assert_int_equal(stt.draining_pages, 20);  /* destination pages still under the copy */
	assert_int_equal(stt.free_copy_slots, 1);  /* the slot is back at once */
	sc_assert_conserved(s);
	/* a reservation needing those pages cannot have them yet */
	kva_handle big = sc_submit(s, 2, 0, 16);
	sc_step(s, 0);
	assert_int_equal(kva_grow(s->e, big, 80, NULL), -ENOSPC);
	assert_int_equal(kva_grow(s->e, big, 79, NULL), 0);
	/* the copy drains: now they can be reused */
	assert_int_equal(kva_copy_done(s->e, job.token, 0, 0), 0);
	sc_step(s, 0);
	stt = sc_stats(s);
	assert_int_equal(stt.draining_pages, 0);
	assert_int_equal(stt.free_pages, 20);
	assert_int_equal(kva_grow(s->e, big, 20, NULL), 0);
	sc_assert_conserved(s);
	sc_free(s);
}

static void rule13_cancelled_waiting_head_releases_the_barrier(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	sc_occupy(s, 1, 80);
	kva_handle head = sc_submit(s, 2, KEY, 480);
	kva_handle behind = sc_submit(s, 3, 0, 100);
	sc_step(s, 0);
	assert_true(s->plan.head_blocked);
	assert_null(sc_admitted(s, behind));
	assert_int_equal(kva_cancel(s->e, head), 0);
	assert_int_equal(kva_cancel(s->e, head), -EALREADY);
	sc_step(s, 0);
	assert_non_null(sc_admitted(s, behind));
	const kva_ended *en = sc_ended(s, head);
	assert_non_null(en);
	assert_int_equal(en->state, KVA_STATE_CANCELLED);
	assert_int_equal(kva_cancel(s->e, head), -ENOENT);
	sc_free(s);
}

static void rule13_cancel_ready_and_running_return_everything(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	sc_occupy(s, 1, 80);
	sc_dir_set(s, 8, sc_ckpt(32, 901, 0));
	kva_handle ready = sc_submit(s, 2, 8, 64);
	kva_handle head = sc_submit(s, 3, KEY, 480);
	sc_step(s, 0);
	sc_copies_done(s, 0);
	assert_int_equal(kva_cancel(s->e, ready), 0); /* before the step that would admit it */
	sc_step(s, 0);
	assert_null(sc_admitted(s, ready));
	assert_int_equal(sc_free_pages(s), 20);
	assert_int_equal(kva_cancel(s->e, head), 0);
	sc_step(s, 0);
	kva_handle run = sc_occupy(s, 4, 1);
	assert_int_equal(kva_cancel(s->e, run), 0);
	sc_step(s, 0);
	assert_non_null(sc_ended(s, run));
	assert_int_equal(kva_grow(s->e, run, 1, NULL), -ENOENT);
	sc_assert_conserved(s);
	sc_free(s);
}

/* a and b import; their copies finish in order, or b's first. */
static void reset_releases_ready_imports_in_queue_order(bool b_first)
{
	struct sc *s = sc_default();
	sc_dir_set(s, 8, sc_ckpt(32, 901, 0));
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	kva_handle a = sc_submit(s, 1, 8, 64);
	kva_handle b = sc_submit(s, 2, 8, 64);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 2);
	kva_copy_job ja = s->copies[0], jb = s->copies[1];
	kva_handle run = sc_occupy(s, 3, 90); /* 2 free: the waiter is blocked */
	kva_handle waiter = sc_submit(s, 4, KEY, 480);
	sc_step(s, 0);
	if (b_first) /* handled first in the step: b is READY first */
		assert_int_equal(kva_copy_done(s->e, jb.token, 0, 0), 0);
	assert_int_equal(kva_copy_done(s->e, ja.token, 0, 0), 0);
	if (!b_first)
		assert_int_equal(kva_copy_done(s->e, jb.token, 0, 0), 0);
	/* reset arrives before the READY imports are admitted */
	assert_int_equal(kva_reset_prefix_cache(s->e), 0);
	uint32_t lookups = s->n_lookups;
	sc_step(s, 0);
	assert_null(sc_admitted(s, a));
	assert_int_equal(s->n_lookups - lookups, 2); /* each got a fresh lookup */
	assert_int_equal(sc_state(s, a), KVA_STATE_IMPORTING);
	/* a and b, in their order, ahead of the waiter */
	assert_int_equal(s->plan.n_copies, 2);
	assert_int_equal(s->copies[0].handle.id, a.id);
	assert_int_equal(s->copies[1].handle.id, b.id);
	(void)run;
	(void)waiter;
	sc_assert_conserved(s);
	sc_free(s);
}

static void rule17_reset_releases_ready_imports_to_the_front_in_order(void **st)
{
	(void)st;
	reset_releases_ready_imports_in_queue_order(false);
}

/* Queue order, not copy-completion order (hardening issue, item 3). */
static void rule17_reset_keeps_queue_order_when_copies_finish_out_of_order(void **st)
{
	(void)st;
	reset_releases_ready_imports_in_queue_order(true);
}

/* Many imports whose copies finish in a scrambled order, some cancelled
 * while READY: admission (rule fcfs-ready-bypass) and a reset (rule
 * reset-returns-ready) still take them in queue order. (The READY set is a
 * heap: completions out of order used to cost a walk each, quadratic in one
 * step.) */
static void ready_imports_in_queue_order_whatever_the_completion_order(bool reset)
{
	enum { N = 32 };
	kva_config c;
	sc_config(&c);
	c.copy_slots = N;
	struct sc *s = sc_new(&c);
	sc_dir_set(s, 8, sc_ckpt(16, 901, 0));
	kva_handle h[N];
	for (int i = 0; i < N; i++)
		h[i] = sc_submit(s, (uint64_t)i + 1, 8, 32);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, N);
	kva_copy_job jobs[N];
	memcpy(jobs, s->copies, sizeof(jobs));
	s->plan.hold_admissions = true; /* they pile up READY */
	for (int k = 0; k < N; k++) { /* 7 is coprime with 32: a permutation */
		const kva_copy_job *j = &jobs[(k * 7 + 3) % N];
		assert_int_equal(kva_copy_done(s->e, j->token, j->rank, 0), 0);
		if (k % 5 == 4)
			sc_step(s, 0); /* some handled together, some alone */
	}
	sc_step(s, 0);
	assert_int_equal(sc_stats(s).ready, N);
	bool gone[N] = {false};
	for (int i = 5; i < N; i += 7) { /* from inside the heap; one needs a sift up */
		assert_int_equal(kva_cancel(s->e, h[i]), 0);
		gone[i] = true;
	}
	if (reset)
		assert_int_equal(kva_reset_prefix_cache(s->e), 0);
	s->plan.hold_admissions = false;
	sc_step(s, 0);
	/* admitted (or requeued and copying again) in queue order */
	uint32_t n = reset ? s->plan.n_copies : s->plan.n_admitted, at = 0;
	for (int i = 0; i < N; i++) {
		if (gone[i])
			continue;
		assert_true(at < n);
		uint64_t id = reset ? s->copies[at].handle.id : s->admitted[at].handle.id;
		assert_int_equal(id, h[i].id);
		at++;
	}
	assert_int_equal(at, n);
	assert_int_equal(sc_stats(s).ready, 0);
	sc_assert_conserved(s);
	sc_free(s);
}

static void rule7_ready_imports_are_admitted_in_queue_order_whatever_the_completion_order(void **st)
{
	(void)st;
	ready_imports_in_queue_order_whatever_the_completion_order(false);
}

static void rule17_reset_requeues_many_ready_imports_in_queue_order(void **st)
{
	(void)st;
	ready_imports_in_queue_order_whatever_the_completion_order(true);
}

static void rule17_reset_during_copy_requeues_after_drain(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, 8, sc_ckpt(32, 901, 0));
	kva_handle a = sc_submit(s, 1, 8, 64);
	sc_step(s, 0);
	kva_copy_job ja = s->copies[0];
	assert_int_equal(kva_reset_prefix_cache(s->e), 0);
	sc_step(s, 0);
	assert_int_equal(sc_state(s, a), KVA_STATE_IMPORTING); /* still copying */
	assert_int_equal(kva_copy_done(s->e, ja.token, 0, 0), 0);
	uint32_t lookups = s->n_lookups;
	sc_step(s, 0);
	assert_null(sc_admitted(s, a)); /* the drained import was not admitted */
	assert_int_equal(s->n_lookups - lookups, 1);
	assert_int_equal(s->plan.n_copies, 1); /* looked up again, restores afresh */
	assert_int_equal(s->copies[0].token.attempt, 2);
	sc_assert_conserved(s);
	/* the drained attempt's copy slot came back: only the new one is taken */
	assert_int_equal(sc_stats(s).free_copy_slots, s->cfg.copy_slots - 1);
	sc_copies_done(s, 0);
	sc_step(s, 0);
	assert_non_null(sc_admitted(s, a));
	assert_int_equal(sc_stats(s).free_copy_slots, s->cfg.copy_slots);
	sc_free(s);
}

static void rule19_world2_admits_only_after_both_ranks(void **st)
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
	assert_int_equal(s->copies[0].rank, 0);
	assert_int_equal(s->copies[1].rank, 1);
	kva_copy_token t = s->copies[0].token;
	assert_int_equal(kva_copy_done(s->e, t, 0, 0), 0);
	assert_int_equal(kva_copy_done(s->e, t, 0, 0), -EALREADY);
	assert_int_equal(kva_copy_done(s->e, t, 2, 0), -ERANGE);
	for (int i = 0; i < 3; i++) {
		sc_step(s, SC_MS);
		assert_null(sc_admitted(s, h));
	}
	assert_int_equal(kva_copy_done(s->e, t, 1, 0), 0);
	sc_step(s, 0);
	assert_non_null(sc_admitted(s, h));
	sc_free(s);
}

static void rule19_one_rank_failing_fails_the_attempt_and_it_is_retried(void **st)
{
	(void)st;
	kva_config c;
	sc_config(&c);
	c.world_size = 2;
	struct sc *s = sc_new(&c);
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	kva_handle h = sc_submit(s, 1, KEY, 480);
	sc_step(s, 0);
	kva_copy_token t = s->copies[0].token;
	assert_int_equal(kva_copy_done(s->e, t, 0, 0), 0);
	assert_int_equal(kva_copy_done(s->e, t, 1, 5), 0);
	sc_step(s, 0);
	assert_null(sc_admitted(s, h));
	assert_int_equal(s->plan.n_copies, 2);
	assert_int_equal(s->copies[0].token.attempt, 2);
	assert_int_equal(kva_copy_done(s->e, t, 1, 0), -ESTALE); /* old attempt */
	sc_copies_done(s, 0);
	sc_step(s, 0);
	assert_non_null(sc_admitted(s, h));
	assert_int_equal(sc_stats(s).copy_attempts_failed, 1);
	sc_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(rule11_failed_copy_is_retried_keeping_its_reservation),
		cmocka_unit_test(rule11_a_reused_grant_starts_clean),
		cmocka_unit_test(rule11_exhausted_retries_fall_back_to_shorter_checkpoint),
		cmocka_unit_test(rule11_recompute_only_when_no_shorter_checkpoint_is_left),
		cmocka_unit_test(capacity_wait_ends_at_the_reservation_not_the_copy),
		cmocka_unit_test(rule12_cancel_during_copy_frees_credits_now_pages_after_drain),
		cmocka_unit_test(rule13_cancelled_waiting_head_releases_the_barrier),
		cmocka_unit_test(rule13_cancel_ready_and_running_return_everything),
		cmocka_unit_test(rule17_reset_releases_ready_imports_to_the_front_in_order),
		cmocka_unit_test(rule17_reset_keeps_queue_order_when_copies_finish_out_of_order),
		cmocka_unit_test(rule7_ready_imports_are_admitted_in_queue_order_whatever_the_completion_order),
		cmocka_unit_test(rule17_reset_requeues_many_ready_imports_in_queue_order),
		cmocka_unit_test(rule17_reset_during_copy_requeues_after_drain),
		cmocka_unit_test(rule19_world2_admits_only_after_both_ranks),
		cmocka_unit_test(rule19_one_rank_failing_fails_the_attempt_and_it_is_retried),
	};
	return cmocka_run_group_tests_name("copies", tests, NULL, NULL);
}
