/* SPDX-License-Identifier: Apache-2.0 */
/* Rules retry-then-shorter, eviction-revalidates and host-local-checkpoints: an
 * eviction of a checkpoint a request holds but has
 * not selected (a shorter local entry of its manifest, the host's own local
 * checkpoint) is not forgotten: when that entry is taken later (a shorter
 * checkpoint after failed copies, a lookup that missed or timed out, a
 * preemption's resume, the local tokens counted at an import's admission),
 * no request is admitted with local tokens from a checkpoint whose eviction
 * at a newer epoch was reported before its admission. */
#include "scenario/scenario.h"

#define KEY 7

/* Steps until h is admitted (a few steps at most); its admission. */
static const kva_admission *step_until_admitted(struct sc *s, kva_handle h)
{
	for (int i = 0; i < 8; i++) {
		sc_step(s, 0);
		const kva_admission *a = sc_admitted(s, h);
		if (a)
			return a;
	}
	fail_msg("request %llu was not admitted", (unsigned long long)h.id);
	return NULL;
}

/* h is admitted as a restore of `restored` tokens, with nothing local. */
static void admitted_restoring_only(struct sc *s, kva_handle h, uint32_t restored)
{
	step_until_admitted(s, h);
	sc_expect_admitted(s, h, KVA_ADMIT_RESTORE, 0, restored);
	sc_assert_conserved(s);
}

/* Fails every copy of the last step's plan until the plan has none. */
static void fail_copies(struct sc *s)
{
	for (int i = 0; i < 8 && s->plan.n_copies; i++) {
		sc_copies_done(s, 1);
		sc_step(s, 0);
	}
}

/* Path 1 (rule retry-then-shorter): the request imports the longer external
 * checkpoint; the
 * shorter local one its manifest also lists is evicted during the copy; the
 * copy's retries run out: the evicted local checkpoint is not a shorter
 * checkpoint left, and the request recomputes. */
static void rule11_shorter_local_evicted_during_the_import_is_not_used(void **st)
{
	(void)st;
	struct sc *s = sc_default(); /* max_copy_retries = 2 */
	sc_dir_add(s, KEY, sc_ckpt(160, 901, 1));
	sc_dir_add(s, KEY, sc_ckpt(320, 902, 0));
	kva_handle h = sc_submit(s, 1, KEY, 480);
	sc_step(s, 0);
	assert_int_equal(sc_state(s, h), KVA_STATE_IMPORTING);
	assert_int_equal(s->plan.n_copies, 1);
	assert_int_equal(s->copies[0].checkpoint_id, 902);
	assert_int_equal(kva_checkpoint_evicted(s->e, 901, 2), 0); /* handled first */
	fail_copies(s);
	const kva_admission *a = sc_admitted(s, h);
	assert_non_null(a);
	assert_int_equal(a->local_tokens, 0);
	assert_int_equal(a->how, KVA_ADMIT_RECOMPUTE);
	assert_int_equal(a->reason, KVA_REASON_RETRIES_EXHAUSTED);
	sc_assert_conserved(s);
	sc_free(s);
}

/* The same with the eviction reported while the request waits for
 * capacity (it is indexed under the external checkpoint it selected). */
static void rule11_shorter_local_evicted_while_waiting_is_not_used(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	kva_handle big = sc_occupy(s, 100, 95);
	sc_dir_add(s, KEY, sc_ckpt(160, 901, 1));
	sc_dir_add(s, KEY, sc_ckpt(320, 902, 0));
	kva_handle h = sc_submit(s, 1, KEY, 480);
	sc_step(s, 0);
	assert_int_equal(sc_state(s, h), KVA_STATE_WAITING);
	assert_int_equal(kva_checkpoint_evicted(s->e, 901, 2), 0);
	sc_step(s, 0);
	assert_int_equal(s->n_lookups, 1); /* its selected checkpoint stays */
	assert_int_equal(kva_finish(s->e, big), 0);
	sc_step(s, 0);
	assert_int_equal(sc_state(s, h), KVA_STATE_IMPORTING);
	fail_copies(s);
	const kva_admission *a = sc_admitted(s, h);
	assert_non_null(a);
	assert_int_equal(a->local_tokens, 0);
	assert_int_equal(a->how, KVA_ADMIT_RECOMPUTE);
	sc_assert_conserved(s);
	sc_free(s);
}

/* A request READY on the shorter local checkpoint (its copy failed) whose
 * local checkpoint is evicted before it is admitted looks up again instead
 * (rule eviction-revalidates): it is never admitted from it. */
static void rule11_ready_on_a_local_checkpoint_evicted_before_admission_looks_up(void **st)
{
	(void)st;
	kva_config c;
	sc_config(&c);
	c.max_copy_retries = 0;
	struct sc *s = sc_new(&c);
	sc_dir_add(s, KEY, sc_ckpt(160, 901, 1));
	sc_dir_add(s, KEY, sc_ckpt(320, 902, 0));
	kva_handle h = sc_submit(s, 1, KEY, 480);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 1);
	sc_copies_done(s, 1); /* no retry: the shorter, local one */
	s->plan.admitted_cap = 0;
	sc_step(s, 0);
	assert_int_equal(sc_state(s, h), KVA_STATE_READY);
	s->plan.admitted_cap = SC_MAX;
	sc_dir_clear(s);
	sc_dir_set(s, KEY, sc_ckpt(320, 903, 0)); /* the directory now knows another copy */
	assert_int_equal(kva_checkpoint_evicted(s->e, 901, 2), 0);
	uint32_t lookups = s->n_lookups;
	sc_step(s, 0);
	assert_null(sc_admitted(s, h));
	assert_true(s->n_lookups > lookups);
	assert_int_equal(s->plan.n_copies, 1);
	assert_int_equal(s->copies[0].checkpoint_id, 903);
	sc_copies_done(s, 0);
	admitted_restoring_only(s, h, 320);
	sc_free(s);
}

/* Rule host-local-checkpoints's upgrade, then rule retry-then-shorter: the host
 * states a (shorter) local
 * checkpoint while the request waits, which keeps its longer selection; the
 * manifest's other local entry was evicted meanwhile. When the copy's
 * retries run out, the shorter checkpoint taken is the host's, never the
 * evicted one (longer than the host's). */
static void rule11_shorter_checkpoint_after_an_upgrade_is_never_an_evicted_one(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	kva_handle big = sc_occupy(s, 100, 95);
	sc_dir_add(s, KEY, sc_ckpt(200, 901, 1));
	sc_dir_add(s, KEY, sc_ckpt(320, 902, 0));
	kva_handle h = sc_submit(s, 1, KEY, 480);
	sc_step(s, 0);
	assert_int_equal(kva_checkpoint_evicted(s->e, 901, 2), 0);
	sc_step(s, 0);
	kva_checkpoint loc = sc_ckpt(160, 70, 1);
	assert_int_equal(kva_local_checkpoint(s->e, h, &loc), 0);
	sc_step(s, 0);
	kva_request_info i;
	assert_int_equal(kva_query(s->e, h, &i), 0);
	assert_int_equal(i.selected_position, 320);
	assert_int_equal(kva_finish(s->e, big), 0);
	sc_step(s, 0);
	fail_copies(s); /* the shorter checkpoint left: the host's, not the evicted one */
	const kva_admission *a = sc_admitted(s, h);
	assert_non_null(a);
	assert_int_equal(a->how, KVA_ADMIT_LOCAL);
	assert_int_equal(a->local_tokens, 160);
	sc_assert_conserved(s);
	sc_free(s);
}

/* Path 3: a running request's local checkpoint is evicted; preempted, it
 * does not resume from it: it looks up instead. */
static void rule22_preempted_request_does_not_resume_from_an_evicted_local(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	kva_manifest miss = {0};
	s->dir[s->n_dir++] = (struct sc_dir_entry){KEY, miss};
	kva_handle h = sc_submit_local(s, 1, KEY, 256, sc_ckpt(160, 70, 1));
	sc_step(s, 0);
	const kva_admission *a = sc_admitted(s, h);
	assert_non_null(a);
	assert_int_equal(a->local_tokens, 160);
	uint32_t lookups = s->n_lookups;
	assert_int_equal(kva_checkpoint_evicted(s->e, 70, 2), 0);
	sc_step(s, 0);
	assert_int_equal(kva_preempt(s->e, h), 0);
	a = step_until_admitted(s, h);
	assert_int_equal(a->local_tokens, 0);
	assert_int_equal(a->how, KVA_ADMIT_RECOMPUTE);
	assert_int_equal(s->n_lookups, lookups + 1); /* it asked the directory */
	sc_free(s);
}

/* The same with the checkpoint stated while the request runs. */
static void rule22_preempted_request_does_not_resume_from_an_evicted_stated_local(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	kva_manifest miss = {0};
	s->dir[s->n_dir++] = (struct sc_dir_entry){KEY, miss};
	kva_handle h = sc_submit(s, 1, KEY, 256);
	sc_step(s, 0);
	assert_non_null(sc_admitted(s, h));
	kva_checkpoint loc = sc_ckpt(160, 70, 1);
	assert_int_equal(kva_local_checkpoint(s->e, h, &loc), 0);
	sc_step(s, 0);
	assert_int_equal(kva_checkpoint_evicted(s->e, 70, 2), 0);
	assert_int_equal(kva_preempt(s->e, h), 0);
	const kva_admission *a = step_until_admitted(s, h);
	assert_int_equal(a->local_tokens, 0);
	sc_free(s);
}

/* Path 4: the host's checkpoint of a request whose lookup is still out is
 * evicted; the directory then misses: the request recomputes. */
static void rule22_host_checkpoint_evicted_before_the_answer_is_not_used(void **st)
{
	(void)st;
	struct sc *s = sc_default(); /* KEY not in the directory: answered by hand */
	kva_handle h = sc_submit_local(s, 1, KEY, 256, sc_ckpt(100, 70, 1));
	sc_step(s, 0);
	assert_int_equal(s->n_lookups, 1);
	assert_int_equal(kva_checkpoint_evicted(s->e, 70, 2), 0);
	sc_step(s, 0);
	kva_manifest miss = {0};
	assert_int_equal(kva_lookup_answer(s->e, s->lookups[0].token, &miss), 0);
	const kva_admission *a = step_until_admitted(s, h);
	assert_int_equal(a->local_tokens, 0);
	assert_int_equal(a->how, KVA_ADMIT_RECOMPUTE);
	assert_int_equal(a->reason, KVA_REASON_MISS);
	sc_free(s);
}

/* The same when the lookup times out. */
static void rule22_host_checkpoint_evicted_before_a_timeout_is_not_used(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	kva_handle h = sc_submit_local(s, 1, KEY, 256, sc_ckpt(100, 70, 1));
	sc_step(s, 0);
	assert_int_equal(kva_checkpoint_evicted(s->e, 70, 2), 0);
	sc_step(s, 0);
	sc_step(s, 2 * SC_SEC);
	const kva_admission *a = sc_admitted(s, h);
	if (!a)
		a = step_until_admitted(s, h);
	assert_int_equal(a->local_tokens, 0);
	assert_int_equal(a->how, KVA_ADMIT_RECOMPUTE);
	assert_int_equal(a->reason, KVA_REASON_LOOKUP_TIMEOUT);
	sc_free(s);
}

/* The host's checkpoint (not selected: the directory's external one is
 * longer) is evicted during the import: admission counts no local tokens. */
static void rule22_host_checkpoint_evicted_during_the_import_is_not_counted(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, KEY, sc_ckpt(320, 902, 0));
	kva_handle h = sc_submit_local(s, 1, KEY, 480, sc_ckpt(100, 70, 1));
	sc_step(s, 0);
	assert_int_equal(sc_state(s, h), KVA_STATE_IMPORTING);
	assert_int_equal(kva_checkpoint_evicted(s->e, 70, 2), 0); /* handled first */
	sc_copies_done(s, 0);
	admitted_restoring_only(s, h, 320);
	sc_free(s);
}

/* The host's checkpoint (not selected) is evicted while the request waits
 * on the directory's; that one is evicted next: the re-lookup misses, and
 * the request does not fall back on the host's evicted checkpoint. */
static void rule22_host_checkpoint_evicted_while_waiting_is_not_kept(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	kva_handle big = sc_occupy(s, 100, 95);
	sc_dir_set(s, KEY, sc_ckpt(192, 90, 1));
	kva_handle h = sc_submit_local(s, 1, KEY, 256, sc_ckpt(64, 70, 1));
	sc_step(s, 0);
	kva_request_info i;
	assert_int_equal(kva_query(s->e, h, &i), 0);
	assert_int_equal(i.selected_position, 192);
	assert_int_equal(kva_checkpoint_evicted(s->e, 70, 2), 0);
	sc_step(s, 0);
	sc_dir_clear(s);
	kva_manifest miss = {0};
	s->dir[s->n_dir++] = (struct sc_dir_entry){KEY, miss};
	assert_int_equal(kva_checkpoint_evicted(s->e, 90, 2), 0);
	sc_step(s, 0);
	assert_int_equal(kva_finish(s->e, big), 0);
	const kva_admission *a = step_until_admitted(s, h);
	assert_int_equal(a->local_tokens, 0);
	assert_int_equal(a->how, KVA_ADMIT_RECOMPUTE);
	sc_free(s);
}

/* Not an over-reaction: an eviction older than (or as old as) the copy a
 * request holds leaves it usable, and a checkpoint stated again with a newer
 * epoch after its eviction is used. */
static void rule22_stale_eviction_or_newer_copy_keeps_the_host_checkpoint(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	kva_checkpoint c5 = sc_ckpt(100, 70, 1);
	c5.epoch = 5;
	kva_handle h = sc_submit_local(s, 1, KEY, 256, c5);
	sc_step(s, 0);
	assert_int_equal(kva_checkpoint_evicted(s->e, 70, 5), 0); /* not newer */
	sc_step(s, 0);
	kva_manifest miss = {0};
	assert_int_equal(kva_lookup_answer(s->e, s->lookups[0].token, &miss), 0);
	const kva_admission *a = step_until_admitted(s, h);
	assert_int_equal(a->how, KVA_ADMIT_LOCAL);
	assert_int_equal(a->local_tokens, 100);

	/* evicted, then stated again (a newer copy of the same id) */
	kva_handle g = sc_submit_local(s, 2, KEY, 256, sc_ckpt(100, 71, 1));
	sc_step(s, 0);
	assert_int_equal(kva_checkpoint_evicted(s->e, 71, 2), 0);
	sc_step(s, 0);
	kva_checkpoint again = sc_ckpt(120, 71, 1);
	again.epoch = 3;
	assert_int_equal(kva_local_checkpoint(s->e, g, &again), 0);
	sc_step(s, 0);
	assert_int_equal(kva_lookup_answer(s->e, s->lookups[s->n_lookups - 1].token, &miss), 0);
	a = step_until_admitted(s, g);
	assert_int_equal(a->how, KVA_ADMIT_LOCAL);
	assert_int_equal(a->local_tokens, 120);
	sc_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(rule11_shorter_local_evicted_during_the_import_is_not_used),
		cmocka_unit_test(rule11_shorter_local_evicted_while_waiting_is_not_used),
		cmocka_unit_test(rule11_ready_on_a_local_checkpoint_evicted_before_admission_looks_up),
		cmocka_unit_test(rule11_shorter_checkpoint_after_an_upgrade_is_never_an_evicted_one),
		cmocka_unit_test(rule22_preempted_request_does_not_resume_from_an_evicted_local),
		cmocka_unit_test(rule22_preempted_request_does_not_resume_from_an_evicted_stated_local),
		cmocka_unit_test(rule22_host_checkpoint_evicted_before_the_answer_is_not_used),
		cmocka_unit_test(rule22_host_checkpoint_evicted_before_a_timeout_is_not_used),
		cmocka_unit_test(rule22_host_checkpoint_evicted_during_the_import_is_not_counted),
		cmocka_unit_test(rule22_host_checkpoint_evicted_while_waiting_is_not_kept),
		cmocka_unit_test(rule22_stale_eviction_or_newer_copy_keeps_the_host_checkpoint),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
