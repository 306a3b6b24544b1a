/* SPDX-License-Identifier: Apache-2.0 */
/* Admission under capacity pressure: rules restore-waits-for-capacity,
 * paired-reservation, reservations-never-preempt, decode-never-suppressed,
 * fcfs-ready-bypass, too-large-at-once and the legacy
 * policy as the comparison case. */
#include "scenario.h"

/* 100 pages, 16 tokens each. A restore of a 480-token prompt from a
 * 320-token checkpoint needs 30 pages (20 imported + 10 continuation). */
#define KEY 7
#define PROMPT 480
#define POS 320

static void rule01_capacity_waiting_keeps_restore_waiting(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, KEY, sc_ckpt(POS, 900, 0));
	kva_handle big = sc_occupy(s, 1, 80); /* 20 pages left */
	kva_handle h = sc_submit(s, 2, KEY, PROMPT);
	for (int i = 0; i < 50; i++) {
		sc_step(s, 100 * SC_MS);
		assert_null(sc_admitted(s, h));
		assert_int_equal(s->plan.n_copies, 0);
		assert_true(s->plan.head_blocked);
	}
	assert_int_equal(sc_state(s, h), KVA_STATE_WAITING);
	kva_stats stt = sc_stats(s);
	assert_int_equal(stt.admitted_recompute, 1); /* only the occupier */
	for (int r = 0; r < KVA_REASON_COUNT; r++)
		if (r != KVA_REASON_NO_KEY)
			assert_int_equal(stt.fallbacks[r], 0);
	/* capacity returns: it restores */
	assert_int_equal(kva_finish(s->e, big), 0);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 1);
	assert_int_equal(s->copies[0].npages, POS / 16);
	sc_copies_done(s, 0);
	sc_step(s, 0);
	const kva_admission *a = sc_admitted(s, h);
	assert_non_null(a);
	assert_int_equal(a->how, KVA_ADMIT_RESTORE);
	assert_int_equal(a->restored_tokens, POS);
	sc_assert_conserved(s);
	sc_free(s);
}

static void rule01_copy_slot_waiting_keeps_restore_waiting(void **st)
{
	(void)st;
	kva_config c;
	sc_config(&c);
	c.copy_slots = 1;
	struct sc *s = sc_new(&c);
	sc_dir_set(s, KEY, sc_ckpt(32, 900, 0));
	kva_handle a = sc_submit(s, 1, KEY, 64);
	kva_handle b = sc_submit(s, 2, KEY, 64);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 1); /* a holds the only slot */
	assert_int_equal(s->copies[0].handle.id, a.id);
	kva_copy_job first = s->copies[0];
	for (int i = 0; i < 10; i++) {
		sc_step(s, 10 * SC_MS);
		assert_int_equal(s->plan.n_copies, 0);
		assert_null(sc_admitted(s, b));
	}
	assert_int_equal(sc_state(s, b), KVA_STATE_WAITING);
	assert_int_equal(sc_stats(s).admitted_recompute, 0);
	assert_int_equal(kva_copy_done(s->e, first.token, 0, 0), 0);
	sc_step(s, 0);
	assert_non_null(sc_admitted(s, a));
	assert_int_equal(s->plan.n_copies, 1); /* the slot went to b */
	assert_int_equal(s->copies[0].handle.id, b.id);
	sc_free(s);
}

static void rule04_paired_reservation_covers_continuation(void **st)
{
	(void)st;
	kva_config c;
	sc_config(&c);
	c.decode_headroom_pages = 4;
	struct sc *s = sc_new(&c);
	sc_dir_set(s, KEY, sc_ckpt(POS, 900, 0));
	kva_handle h = sc_submit(s, 1, KEY, PROMPT);
	sc_step(s, 0);
	sc_copies_done(s, 0);
	sc_step(s, 0);
	const kva_admission *a = sc_admitted(s, h);
	assert_non_null(a);
	assert_int_equal(a->npages, 20);
	assert_int_equal(a->reserved_pages, 10 + 4); /* rest of the prompt + headroom */
	/* Someone else takes every free page ... */
	kva_handle hog = sc_occupy(s, 2, 1);
	uint64_t left = sc_free_pages(s);
	assert_int_equal(kva_grow(s->e, hog, (uint32_t)left, NULL), 0);
	assert_int_equal(sc_free_pages(s), 0);
	/* ... and the restore still finishes its prompt in chunks, and decodes. */
	for (int i = 0; i < 14; i++)
		assert_int_equal(kva_grow(s->e, h, 1, NULL), 0);
	assert_int_equal(kva_grow(s->e, h, 1, NULL), -ENOSPC);
	sc_assert_conserved(s);
	sc_free(s);
}

static void rule05_refused_reservation_changes_nothing(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, KEY, sc_ckpt(POS, 900, 0));
	kva_handle run1 = sc_occupy(s, 1, 40);
	kva_handle run2 = sc_occupy(s, 2, 40);
	kva_request_info i1, i2;
	assert_int_equal(kva_query(s->e, run1, &i1), 0);
	kva_stats before = sc_stats(s);
	kva_handle h = sc_submit(s, 3, KEY, PROMPT);
	for (int i = 0; i < 5; i++)
		sc_step(s, SC_MS);
	kva_stats after = sc_stats(s);
	assert_int_equal(after.free_pages, before.free_pages);
	assert_int_equal(after.in_use_pages, before.in_use_pages);
	assert_int_equal(after.preempted, 0);
	assert_int_equal(sc_state(s, run1), KVA_STATE_RUNNING);
	assert_int_equal(sc_state(s, run2), KVA_STATE_RUNNING);
	assert_int_equal(kva_query(s->e, run2, &i2), 0);
	assert_int_equal(i2.pages_held, 40);
	assert_int_equal(i1.pages_held, 40);
	assert_int_equal(sc_state(s, h), KVA_STATE_WAITING);
	sc_free(s);
}

static void rule05_reservation_respects_decode_watermark(void **st)
{
	(void)st;
	kva_config c;
	sc_config(&c);
	c.decode_reserve_pages = 10;
	struct sc *s = sc_new(&c);
	sc_dir_set(s, KEY, sc_ckpt(POS, 900, 0));
	kva_handle run = sc_occupy(s, 1, 61); /* 39 free: 30 needed, but only 29 above the mark */
	kva_handle h = sc_submit(s, 2, KEY, PROMPT);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 0);
	assert_int_equal(sc_free_pages(s), 39);
	/* decode growth may use the watermark */
	assert_int_equal(kva_grow(s->e, run, 35, NULL), 0);
	assert_int_equal(sc_free_pages(s), 4);
	assert_int_equal(sc_state(s, h), KVA_STATE_WAITING);
	sc_free(s);
}

/* The watermark holds for every admission's first credit grant, not only a
 * restore's reservation: an ordinary admission (no checkpoint) that would
 * take free credits below decode_reserve_pages waits (kva_plan_min_sizes:
 * an admission needs at most total - watermark pages). */
static void rule05_ordinary_admission_respects_decode_watermark(void **st)
{
	(void)st;
	kva_config c;
	sc_config(&c);
	c.decode_reserve_pages = 10;
	struct sc *s = sc_new(&c);
	kva_handle run = sc_occupy(s, 1, 90); /* growth may dip to the mark: 10 free */
	assert_int_equal(sc_free_pages(s), 10);
	kva_handle h = sc_submit(s, 2, 0, 16); /* a recompute of one page */
	for (int i = 0; i < 3; i++) {
		sc_step(s, SC_MS);
		assert_null(sc_admitted(s, h));
		assert_true(s->plan.head_blocked);
	}
	assert_int_equal(sc_state(s, h), KVA_STATE_WAITING);
	assert_int_equal(sc_free_pages(s), 10);
	assert_int_equal(kva_finish(s->e, run), 0);
	sc_step(s, 0);
	assert_non_null(sc_admitted(s, h));
	sc_assert_conserved(s);
	sc_free(s);
}

static void rule06_ready_import_keeps_decode_running(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, KEY, sc_ckpt(POS, 900, 0));
	kva_handle dec = sc_occupy(s, 1, 10);
	kva_handle h = sc_submit(s, 2, KEY, PROMPT);
	sc_step(s, 0);
	sc_copies_done(s, 0);
	sc_step(s, 0);
	assert_non_null(sc_admitted(s, h));
	/* the step that admitted the ready import left the decoder untouched */
	kva_request_info info;
	assert_int_equal(kva_query(s->e, dec, &info), 0);
	assert_int_equal(info.state, KVA_STATE_RUNNING);
	assert_int_equal(info.pages_held, 10);
	assert_int_equal(kva_grow(s->e, dec, 1, NULL), 0);
	assert_int_equal(sc_stats(s).preempted, 0);
	sc_free(s);
}

static void rule06_reservation_credits_never_preempt_decode(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, KEY, sc_ckpt(POS, 900, 0));
	kva_handle dec = sc_occupy(s, 1, 60);
	kva_handle h = sc_submit(s, 2, KEY, PROMPT); /* reserves 30 of the 40 free */
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 1);
	assert_int_equal(sc_free_pages(s), 10);
	/* decode grows into the free pages, then is refused: the 30 reserved
	 * credits are not taken from the import */
	assert_int_equal(kva_grow(s->e, dec, 10, NULL), 0);
	assert_int_equal(kva_grow(s->e, dec, 1, NULL), -ENOSPC);
	kva_request_info info;
	assert_int_equal(kva_query(s->e, h, &info), 0);
	assert_int_equal(info.pages_held + info.pages_reserved, 30);
	assert_int_equal(sc_state(s, h), KVA_STATE_IMPORTING);
	sc_free(s);
}

static void rule06_decode_on_full_pool_may_preempt_while_restores_wait(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, KEY, sc_ckpt(POS, 900, 0));
	kva_handle old = sc_occupy(s, 1, 50);
	kva_handle young = sc_occupy(s, 2, 50);
	kva_handle h = sc_submit(s, 3, KEY, PROMPT);
	sc_step(s, 0);
	assert_int_equal(sc_state(s, h), KVA_STATE_WAITING);
	/* the old request's decode needs a page: the host preempts the youngest */
	assert_int_equal(kva_grow(s->e, old, 1, NULL), -ENOSPC);
	assert_int_equal(kva_preempt(s->e, young), 0);
	assert_int_equal(kva_grow(s->e, old, 1, NULL), 0);
	sc_step(s, 0);
	/* the preempted request went to the front: admitted first, ahead of h */
	assert_true(s->plan.n_admitted >= 1);
	assert_int_equal(s->admitted[0].handle.id, young.id);
	assert_int_equal(s->plan.n_copies, 1);
	assert_int_equal(s->copies[0].handle.id, h.id);
	assert_int_equal(sc_stats(s).preempted, 1);
	sc_assert_conserved(s);
	sc_free(s);
}

static void rule07_blocked_head_admits_only_ready_restores(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, KEY, sc_ckpt(POS, 900, 0));
	sc_dir_set(s, 8, sc_ckpt(32, 901, 0));
	kva_handle small_restore = sc_submit(s, 1, 8, 64); /* 4 pages */
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 1);
	kva_copy_job job = s->copies[0];
	kva_handle run = sc_occupy(s, 2, 80); /* 16 free now */
	kva_handle head = sc_submit(s, 3, KEY, PROMPT); /* needs 30: blocked */
	kva_handle later_restore = sc_submit(s, 4, 8, 64);
	kva_handle later_plain = sc_submit(s, 5, 0, 16);
	sc_step(s, 0);
	assert_true(s->plan.head_blocked);
	assert_int_equal(s->plan.n_admitted, 0);
	assert_int_equal(s->plan.n_copies, 0); /* later restore does not pass the head */
	assert_int_equal(kva_copy_done(s->e, job.token, 0, 0), 0);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_admitted, 1); /* the READY restore passes the blocked head */
	assert_non_null(sc_admitted(s, small_restore));
	assert_null(sc_admitted(s, later_plain));
	assert_null(sc_admitted(s, later_restore));
	/* when the head goes, the two behind it keep their order */
	assert_int_equal(kva_finish(s->e, run), 0);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 2);
	assert_int_equal(s->copies[0].handle.id, head.id);
	assert_int_equal(s->copies[1].handle.id, later_restore.id);
	assert_non_null(sc_admitted(s, later_plain));
	sc_free(s);
}

/* A checkpoint at the largest position is still a checkpoint: TOO_LARGE
 * when it cannot fit, never INCOMPATIBLE (hardening issue, item 4). */
static void rule09_checkpoint_at_uint32_max_is_too_large_not_incompatible(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, KEY, sc_ckpt(UINT32_MAX, 900, 0));
	kva_handle h = sc_submit(s, 1, KEY, UINT32_MAX);
	sc_step(s, 0);
	kva_request_info i;
	assert_int_equal(kva_query(s->e, h, &i), 0);
	assert_int_equal(i.reason, KVA_REASON_TOO_LARGE);
	kva_stats x = sc_stats(s);
	assert_int_equal(x.fallbacks[KVA_REASON_TOO_LARGE], 1);
	assert_int_equal(x.fallbacks[KVA_REASON_INCOMPATIBLE], 0);
	sc_free(s);
}

static void rule09_too_large_restore_is_classified_at_once(void **st)
{
	(void)st;
	kva_config c;
	sc_config(&c);
	c.decode_reserve_pages = 10;
	struct sc *s = sc_new(&c);
	sc_dir_set(s, KEY, sc_ckpt(1440, 900, 0));
	kva_handle h = sc_submit(s, 1, KEY, 1600); /* 100 pages > 90 usable */
	sc_step(s, 0);
	const kva_admission *a = sc_admitted(s, h);
	assert_non_null(a);
	assert_int_equal(a->how, KVA_ADMIT_RECOMPUTE);
	assert_int_equal(a->reason, KVA_REASON_TOO_LARGE);
	assert_int_equal(sc_stats(s).fallbacks[KVA_REASON_TOO_LARGE], 1);
	assert_int_equal(s->plan.n_fallbacks, 1);
	assert_int_equal(s->fallbacks[0].reason, KVA_REASON_TOO_LARGE);
	sc_free(s);
}

/* Rule too-large-at-once's boundary: a reservation of exactly the usable pool
 * (total -
 * watermark) can fit, so it is a restore, not TOO_LARGE. */
static void rule09_restore_of_exactly_the_usable_pool_is_not_too_large(void **st)
{
	(void)st;
	kva_config c;
	sc_config(&c);
	c.decode_reserve_pages = 10;
	struct sc *s = sc_new(&c);
	sc_dir_set(s, KEY, sc_ckpt(1280, 900, 0));
	kva_handle h = sc_submit(s, 1, KEY, 1440); /* 90 pages == 90 usable */
	sc_step(s, 0);
	assert_null(sc_admitted(s, h));
	assert_int_equal(s->plan.n_copies, 1);
	assert_int_equal(s->copies[0].npages, 80);
	assert_int_equal(sc_state(s, h), KVA_STATE_IMPORTING);
	assert_int_equal(sc_stats(s).fallbacks[KVA_REASON_TOO_LARGE], 0);
	sc_copies_done(s, 0);
	sc_step(s, 0);
	const kva_admission *a = sc_admitted(s, h);
	assert_non_null(a);
	assert_int_equal(a->how, KVA_ADMIT_RESTORE);
	assert_int_equal(a->restored_tokens, 1280);
	assert_int_equal(a->npages + a->reserved_pages, 90);
	sc_assert_conserved(s);
	sc_free(s);
}

static void rule09_first_chunk_larger_than_pool_still_starts(void **st)
{
	(void)st;
	kva_config c;
	sc_config(&c);
	c.decode_reserve_pages = 10;
	c.prefill_chunk_tokens = 4096;
	struct sc *s = sc_new(&c);
	kva_handle h = sc_submit(s, 1, 0, 3000); /* first chunk 188 pages > 90 usable */
	sc_step(s, 0);
	const kva_admission *a = sc_admitted(s, h);
	assert_non_null(a);
	assert_int_equal(a->npages, 90);
	sc_free(s);
}

/* Legacy policy, an external checkpoint for KEY, `hog` pages held by a
 * running request, and a restore submitted and stepped once. */
static struct sc *legacy_restore_behind(uint32_t hog_pages, kva_handle *hog, kva_handle *h)
{
	kva_config c;
	sc_config(&c);
	c.policy = KVA_POLICY_LEGACY;
	struct sc *s = sc_new(&c);
	sc_dir_set(s, KEY, sc_ckpt(POS, 900, 0));
	*hog = sc_occupy(s, 1, hog_pages);
	*h = sc_submit(s, 2, KEY, PROMPT);
	sc_step(s, 0);
	return s;
}

static void legacy_policy_admits_refused_restore_to_recompute(void **st)
{
	(void)st;
	kva_handle hog, h;
	struct sc *s = legacy_restore_behind(80, &hog, &h);
	const kva_admission *a = sc_admitted(s, h);
	assert_non_null(a);
	assert_int_equal(a->how, KVA_ADMIT_RECOMPUTE);
	assert_int_equal(a->reason, KVA_REASON_LEGACY);
	assert_int_equal(a->recompute_tokens, PROMPT);
	assert_int_equal(sc_stats(s).fallbacks[KVA_REASON_LEGACY], 1);
	sc_free(s);
}

static void legacy_policy_local_hit_waits_like_any_request(void **st)
{
	(void)st;
	kva_config c;
	sc_config(&c);
	c.policy = KVA_POLICY_LEGACY;
	struct sc *s = sc_new(&c);
	sc_dir_set(s, KEY, sc_ckpt(POS, 500, 1)); /* local */
	kva_handle run = sc_occupy(s, 1, 80);
	kva_handle h = sc_submit(s, 2, KEY, PROMPT);
	sc_step(s, 0);
	assert_null(sc_admitted(s, h));
	assert_int_equal(sc_stats(s).fallbacks[KVA_REASON_LEGACY], 0);
	assert_int_equal(kva_finish(s->e, run), 0);
	sc_step(s, 0);
	const kva_admission *a = sc_admitted(s, h);
	assert_non_null(a);
	assert_int_equal(a->how, KVA_ADMIT_LOCAL);
	assert_int_equal(a->local_tokens, POS);
	sc_free(s);
}

static void legacy_policy_copy_slot_shortage_recomputes(void **st)
{
	(void)st;
	kva_config c;
	sc_config(&c);
	c.policy = KVA_POLICY_LEGACY;
	c.copy_slots = 1;
	struct sc *s = sc_new(&c);
	sc_dir_set(s, KEY, sc_ckpt(32, 900, 0));
	sc_submit(s, 1, KEY, 64);
	kva_handle b = sc_submit(s, 2, KEY, 64);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 1);
	const kva_admission *a = sc_admitted(s, b);
	assert_non_null(a);
	assert_int_equal(a->reason, KVA_REASON_LEGACY);
	sc_free(s);
}

/* Rule legacy-decides-at-admission: a legacy restore refused for capacity does
 * not decide to
 * recompute then; if, when it is finally admitted, the restore fits, it
 * restores with the answer it already has. */
static void rule23_legacy_decides_at_admission_and_restores_when_it_fits(void **st)
{
	(void)st;
	kva_handle hog, h;
	struct sc *s = legacy_restore_behind(100, &hog, &h); /* not even a first chunk fits */
	sc_step(s, SC_MS);
	assert_null(sc_admitted(s, h));
	assert_int_equal(sc_stats(s).fallbacks[KVA_REASON_LEGACY], 0); /* not decided yet */
	kva_request_info info;
	assert_int_equal(kva_query(s->e, h, &info), 0);
	assert_true(info.has_selection); /* keeps its answer */
	assert_int_equal(kva_finish(s->e, hog), 0); /* now the restore fits */
	sc_step(s, SC_MS);
	assert_int_equal(s->plan.n_copies, 1);
	assert_int_equal(sc_copies_done(s, 0), 1);
	sc_step(s, SC_MS);
	const kva_admission *a = sc_admitted(s, h);
	assert_non_null(a);
	assert_int_equal(a->how, KVA_ADMIT_RESTORE);
	assert_int_equal(a->restored_tokens, POS);
	assert_int_equal(sc_stats(s).fallbacks[KVA_REASON_LEGACY], 0);
	sc_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(rule01_capacity_waiting_keeps_restore_waiting),
		cmocka_unit_test(rule23_legacy_decides_at_admission_and_restores_when_it_fits),
		cmocka_unit_test(rule01_copy_slot_waiting_keeps_restore_waiting),
		cmocka_unit_test(rule04_paired_reservation_covers_continuation),
		cmocka_unit_test(rule05_refused_reservation_changes_nothing),
		cmocka_unit_test(rule05_reservation_respects_decode_watermark),
		cmocka_unit_test(rule05_ordinary_admission_respects_decode_watermark),
		cmocka_unit_test(rule06_ready_import_keeps_decode_running),
		cmocka_unit_test(rule06_reservation_credits_never_preempt_decode),
		cmocka_unit_test(rule06_decode_on_full_pool_may_preempt_while_restores_wait),
		cmocka_unit_test(rule07_blocked_head_admits_only_ready_restores),
		cmocka_unit_test(rule09_too_large_restore_is_classified_at_once),
		cmocka_unit_test(rule09_checkpoint_at_uint32_max_is_too_large_not_incompatible),
		cmocka_unit_test(rule09_restore_of_exactly_the_usable_pool_is_not_too_large),
		cmocka_unit_test(rule09_first_chunk_larger_than_pool_still_starts),
		cmocka_unit_test(legacy_policy_admits_refused_restore_to_recompute),
		cmocka_unit_test(legacy_policy_local_hit_waits_like_any_request),
		cmocka_unit_test(legacy_policy_copy_slot_shortage_recomputes),
	};
	return cmocka_run_group_tests_name("admission", tests, NULL, NULL);
}
