/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Conformance: LMCache tests/v1/multiprocess/test_checkpoint_cancel_drain.py
 * (local-inference-lab/LMCache @ 79660cd2808b51436762536d0ac81c12521c6d0e).
 * A lookup that never answers is a miss and never fatal; a cancelled lookup
 * holds nothing; only copies that were handed destination pages must drain.
 * In kvadmit the storage lookup is the directory lookup (kva_config.lookup,
 * kva_lookup_answer) and a lease that exposed slots is a dispatched copy job.
 */
#include "conf.h"

#define KEY 7
#define SILENT 5 /* a key the scripted directory never answers */

/* Original: a lookup that storage never answers is abandoned and reported a
 * miss, promptly, and the worker keeps serving (twice in a row). kvadmit: the
 * lookup's deadline makes it a LOOKUP_TIMEOUT recompute, one after the other,
 * no copy; the abandoned lookup's late answer changes nothing. */
static void lookup_that_never_drains_after_cancel_is_a_miss(void **st)
{
	(void)st;
	struct sc *s = sc_default(); /* lookup_timeout_ns = 1 s */
	for (uint64_t id = 1; id <= 2; id++) {
		kva_handle h = sc_submit(s, id, SILENT, 100);
		sc_step(s, 0);
		kva_lookup_token t = s->lookups[s->n_lookups - 1].token;
		sc_step(s, 999 * SC_MS);
		assert_null(sc_admitted(s, h));
		sc_step(s, SC_MS); /* promptly: at its deadline */
		const kva_admission *a = sc_admitted(s, h);
		assert_non_null(a);
		assert_int_equal(a->how, KVA_ADMIT_RECOMPUTE);
		assert_int_equal(a->reason, KVA_REASON_LOOKUP_TIMEOUT);
		assert_int_equal(s->plan.n_copies, 0);
		kva_manifest late = {.count = 1, .entries = {sc_ckpt(64, 900, 0)}};
		assert_int_equal(kva_lookup_answer(s->e, t, &late), -ESTALE);
		assert_int_equal(kva_finish(s->e, h), 0);
		sc_step(s, 0);
	}
	kva_stats stt = sc_stats(s);
	assert_int_equal(stt.lookups_timed_out, 2);
	assert_int_equal(stt.fallbacks[KVA_REASON_LOOKUP_TIMEOUT], 2);
	assert_int_equal(stt.late_answers, 2);
	assert_int_equal(stt.copy_jobs, 0);
	assert_int_equal(stt.free_pages, stt.total_pages);
	sc_free(s);
}

/* Original (cancel raises, or times out): the pending lookup still ends as a
 * miss and the worker accepts the next transfer. kvadmit: a cancel that
 * fails (-EALREADY: one is already requested) leaves the first cancel in
 * force; the engine keeps serving, and the next request on a silent
 * directory ends as a LOOKUP_TIMEOUT miss. */
static void failed_cancel_of_a_pending_lookup_is_a_miss(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	kva_handle h = sc_submit(s, 1, SILENT, 100);
	sc_step(s, 0);
	assert_int_equal(kva_cancel(s->e, h), 0);
	assert_int_equal(kva_cancel(s->e, h), -EALREADY); /* the cancel that fails */
	sc_step(s, 0);
	const kva_ended *e = sc_ended(s, h);
	assert_non_null(e);
	assert_int_equal(e->state, KVA_STATE_CANCELLED);
	kva_handle again = sc_submit(s, 2, SILENT, 100);
	sc_step(s, 0);
	sc_step(s, SC_SEC);
	const kva_admission *a = sc_admitted(s, again);
	assert_non_null(a);
	assert_int_equal(a->reason, KVA_REASON_LOOKUP_TIMEOUT);
	assert_int_equal(sc_stats(s).copy_jobs, 0);
	assert_int_equal(sc_stats(s).cancelled, 1);
	sc_free(s);
}

/* Original: a failing poll of a pending lookup surfaces as an ordinary error,
 * not as an unsafe copy, and the worker still accepts work. kvadmit: a
 * malformed answer is refused (-EINVAL) and changes nothing: the lookup is
 * still awaited, a valid answer to the same token is then taken, and no copy
 * starts from the bad one. */
static void failed_poll_of_a_pending_lookup_is_not_fatal(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	kva_handle h = sc_submit(s, 1, SILENT, 480);
	sc_step(s, 0);
	kva_lookup_token t = s->lookups[0].token;
	kva_manifest bad = {.count = 2, .entries = {sc_ckpt(320, 901, 0), sc_ckpt(160, 902, 0)}};
	assert_int_equal(kva_lookup_answer(s->e, t, &bad), -EINVAL); /* unsorted */
	kva_manifest worse = {.count = KVA_MAX_CHECKPOINTS + 1};
	assert_int_equal(kva_lookup_answer(s->e, t, &worse), -EINVAL);
	sc_step(s, 100 * SC_MS);
	assert_int_equal(s->plan.n_copies, 0);
	assert_int_equal(sc_state(s, h), KVA_STATE_WAITING);
	assert_false(conf_info(s, h).has_selection);
	kva_handle other = sc_submit(s, 2, 0, 16); /* still accepting work */
	kva_manifest good = {.count = 1, .entries = {sc_ckpt(320, 901, 0)}};
	assert_int_equal(kva_lookup_answer(s->e, t, &good), 0);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 1);
	assert_int_equal(s->copies[0].checkpoint_id, 901);
	assert_non_null(sc_admitted(s, other));
	sc_copies_done(s, 0);
	sc_step(s, 0);
	assert_non_null(sc_admitted(s, h));
	sc_free(s);
}

/* Original: a cancelled lookup exposed nothing and copied nothing; it is
 * released when storage answers late, and the engine restores again once
 * storage answers. kvadmit: a request cancelled with its lookup out holds no
 * pages; the late answer is refused; the same id submitted again, with the
 * directory answering, restores with one copy. */
static void cancelled_lookup_is_released_when_storage_answers_late(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	kva_handle h = sc_submit(s, 1, KEY, 480); /* the directory does not answer yet */
	sc_step(s, 0);
	kva_lookup_token t = s->lookups[0].token;
	assert_int_equal(kva_cancel(s->e, h), 0);
	sc_step(s, 0);
	assert_non_null(sc_ended(s, h));
	assert_int_equal(s->plan.n_copies, 0);
	kva_stats stt = sc_stats(s);
	assert_int_equal(stt.free_pages, stt.total_pages);
	assert_int_equal(stt.reserved_pages + stt.draining_pages, 0);
	kva_manifest m = {.count = 1, .entries = {sc_ckpt(320, 900, 0)}};
	int rc = kva_lookup_answer(s->e, t, &m);
	assert_true(rc == -ENOENT || rc == -ESTALE);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 0);
	/* storage answers now: a new incarnation restores */
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	kva_handle again = sc_submit(s, 1, KEY, 480);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 1);
	assert_int_equal(s->copies[0].handle.gen, again.gen);
	sc_copies_done(s, 0);
	sc_step(s, 0);
	const kva_admission *a = sc_admitted(s, again);
	assert_non_null(a);
	assert_int_equal(a->how, KVA_ADMIT_RESTORE);
	assert_int_equal(sc_stats(s).copy_jobs, 1);
	sc_free(s);
}

/* Original: of two pending lookups one is cancelled; polling the other
 * releases it too; its late poll answers a miss once and is then unknown;
 * cancelling it again, or an unknown lease, is harmless; nothing is left.
 * kvadmit: the cancelled request ends, its late answer is refused, a second
 * cancel and a cancel of a never-issued handle return -ENOENT, the other
 * request restores, and every page is back at the end. */
static void released_cancelled_lookup_answers_its_late_poll_with_a_miss(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	kva_handle cancelled = sc_submit(s, 1, KEY, 480);
	kva_handle other = sc_submit(s, 2, KEY, 480);
	sc_step(s, 0);
	assert_int_equal(s->n_lookups, 2);
	assert_int_equal(kva_cancel(s->e, cancelled), 0);
	sc_step(s, 0);
	assert_non_null(sc_ended(s, cancelled));
	kva_manifest m = {.count = 1, .entries = {sc_ckpt(320, 900, 0)}};
	int rc = kva_lookup_answer(s->e, s->lookups[0].token, &m);
	assert_true(rc == -ENOENT || rc == -ESTALE);
	assert_int_equal(kva_cancel(s->e, cancelled), -ENOENT);
	kva_handle never = {.id = 99, .gen = 1, .slot = 12345};
	assert_int_equal(kva_cancel(s->e, never), -ENOENT);
	assert_int_equal(kva_lookup_answer(s->e, s->lookups[1].token, &m), 0);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 1);
	assert_int_equal(s->copies[0].handle.id, other.id);
	sc_copies_done(s, 0);
	sc_step(s, 0);
	assert_non_null(sc_admitted(s, other));
	assert_int_equal(kva_finish(s->e, other), 0);
	sc_step(s, 0);
	kva_stats stt = sc_stats(s);
	assert_int_equal(stt.free_pages, stt.total_pages);
	assert_int_equal(stt.draining_pages, 0);
	assert_int_equal(stt.cancelled, 1);
	assert_int_equal(stt.finished, 1);
	sc_free(s);
}

/* Original: closing must wait for a lease that exposed slots (a copy may
 * still write them), but not for a cancelled or pending lookup. kvadmit: a
 * cancelled restore whose copy was dispatched keeps its destination pages
 * draining until its report; a cancelled request whose lookup was still out
 * holds nothing; the engine is destroyed with a lookup still pending. */
static void close_waits_only_for_leases_that_exposed_slots(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	kva_handle copying = sc_submit(s, 1, KEY, 480);
	kva_handle pending = sc_submit(s, 2, SILENT, 480);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 1);
	kva_copy_job job = s->copies[0];
	assert_int_equal(kva_cancel(s->e, copying), 0);
	assert_int_equal(kva_cancel(s->e, pending), 0);
	sc_step(s, 0);
	assert_non_null(sc_ended(s, copying));
	assert_non_null(sc_ended(s, pending));
	kva_stats stt = sc_stats(s);
	assert_int_equal(stt.draining_pages, job.npages); /* only the exposed pages */
	assert_int_equal(stt.free_pages, stt.total_pages - job.npages);
	assert_int_equal(kva_copy_done(s->e, job.token, 0, 0), 0);
	sc_step(s, 0);
	stt = sc_stats(s);
	assert_int_equal(stt.draining_pages, 0);
	assert_int_equal(stt.free_pages, stt.total_pages);
	/* a lookup still out at destroy time is fine */
	sc_submit(s, 3, SILENT, 480);
	sc_step(s, 0);
	assert_int_equal(sc_stats(s).waiting, 1);
	sc_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(lookup_that_never_drains_after_cancel_is_a_miss),
		cmocka_unit_test(failed_cancel_of_a_pending_lookup_is_a_miss),
		cmocka_unit_test(failed_poll_of_a_pending_lookup_is_not_fatal),
		cmocka_unit_test(cancelled_lookup_is_released_when_storage_answers_late),
		cmocka_unit_test(released_cancelled_lookup_answers_its_late_poll_with_a_miss),
		cmocka_unit_test(close_waits_only_for_leases_that_exposed_slots),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
