/* SPDX-License-Identifier: Apache-2.0 */
/* Rule host-local-checkpoints: local checkpoints the host already knows (its
 * own prefix cache),
 * stated at submit (kva_request.local) or later (kva_local_checkpoint). */
#include "scenario/scenario.h"

static kva_request_info info_of(struct sc *s, kva_handle h)
{
	kva_request_info i;
	assert_int_equal(kva_query(s->e, h, &i), 0);
	return i;
}

static void rule22_full_local_hit_is_admitted_without_a_lookup(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	kva_handle h = sc_submit_local(s, 1, 7, 256, sc_ckpt(256, 70, 1));
	assert_int_equal(sc_step(s, 0), 1);
	const kva_admission *a = sc_expect_admitted(s, h, KVA_ADMIT_LOCAL, 256, 0);
	assert_int_equal(a->recompute_tokens, 0);
	assert_int_equal(a->npages, 16);
	assert_int_equal(s->n_lookups, 0); /* the directory was never asked */
	assert_int_equal(sc_stats(s).lookups_issued, 0);
	sc_assert_conserved(s);
	sc_free(s);
}

/* Nothing to ask the directory (no key): the host's own checkpoint is the
 * path, partial or not. */
static void rule22_request_without_a_key_uses_its_local_checkpoint(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	kva_handle h = sc_submit_local(s, 1, 0, 256, sc_ckpt(100, 70, 1));
	assert_int_equal(sc_step(s, 0), 1);
	sc_expect_admitted(s, h, KVA_ADMIT_LOCAL, 100, 0);
	assert_int_equal(s->n_lookups, 0);
	sc_free(s);
}

static void rule22_partial_local_is_merged_with_the_answer(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, 7, sc_ckpt(128, 80, 0)); /* external, longer than the local */
	kva_handle h = sc_submit_local(s, 1, 7, 256, sc_ckpt(64, 70, 1));
	sc_step(s, 0);
	assert_int_equal(s->n_lookups, 1); /* partial: the directory may know more */
	assert_int_equal(s->plan.n_copies, 1);
	assert_int_equal(s->copies[0].position, 128);
	sc_copies_done(s, 0);
	assert_int_equal(sc_step(s, 0), 1);
	const kva_admission *a = sc_admitted(s, h);
	assert_non_null(a);
	assert_int_equal(a->how, KVA_ADMIT_RESTORE);
	/* every token once: the host's own cache first, the import for the rest */
	assert_int_equal(a->local_tokens, 64);
	assert_int_equal(a->restored_tokens, 64);
	assert_int_equal(a->recompute_tokens, 128);
	sc_free(s);
}

static void rule22_miss_or_timeout_keeps_the_local_checkpoint(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	kva_manifest miss = {0};
	s->dir[s->n_dir++] = (struct sc_dir_entry){7, miss};
	kva_handle a = sc_submit_local(s, 1, 7, 256, sc_ckpt(64, 70, 1));
	kva_handle b = sc_submit_local(s, 2, 8, 256, sc_ckpt(96, 71, 1)); /* key 8: never answered */
	sc_step(s, 0);
	sc_expect_admitted(s, a, KVA_ADMIT_LOCAL, 64, 0);
	assert_null(sc_admitted(s, b)); /* waits for its answer */
	sc_step(s, 2 * SC_SEC);          /* the lookup times out */
	sc_expect_admitted(s, b, KVA_ADMIT_LOCAL, 96, 0);
	kva_stats x = sc_stats(s);
	assert_int_equal(x.lookups_timed_out, 1);
	assert_int_equal(x.fallbacks[KVA_REASON_MISS] + x.fallbacks[KVA_REASON_LOOKUP_TIMEOUT], 0);
	sc_free(s);
}

static void rule22_full_local_hit_decides_an_outstanding_lookup(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	kva_handle h = sc_submit(s, 1, 7, 256); /* key 7 is not answered */
	sc_step(s, 0);
	assert_int_equal(s->n_lookups, 1);
	assert_int_equal(s->plan.n_admitted, 0);
	kva_checkpoint full = sc_ckpt(256, 70, 1);
	assert_int_equal(kva_local_checkpoint(s->e, h, &full), 0);
	assert_int_equal(sc_step(s, 0), 1);
	sc_expect_admitted(s, h, KVA_ADMIT_LOCAL, 256, 0);
	/* the directory's answer now comes late and changes nothing */
	kva_manifest m = {.count = 1, .entries = {sc_ckpt(128, 80, 0)}};
	assert_int_equal(kva_lookup_answer(s->e, s->lookups[0].token, &m), -ESTALE);
	sc_step(s, 0);
	assert_int_equal(sc_state(s, h), KVA_STATE_RUNNING);
	assert_int_equal(sc_stats(s).local_stated, 1);
	sc_free(s);
}

static void rule22_longer_local_upgrades_a_waiting_restore_without_a_lookup(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	kva_handle big = sc_occupy(s, 100, 90); /* 10 pages free */
	sc_dir_set(s, 7, sc_ckpt(64, 80, 0));
	kva_handle h = sc_submit(s, 1, 7, 256); /* needs 16: waits */
	sc_step(s, 0);
	assert_true(s->plan.head_blocked);
	kva_request_info i = info_of(s, h);
	assert_int_equal(i.selected_position, 64);
	assert_int_equal(i.selected_location, KVA_LOC_EXTERNAL);
	uint32_t lookups = s->n_lookups;

	kva_checkpoint loc = sc_ckpt(192, 70, 1);
	assert_int_equal(kva_local_checkpoint(s->e, h, &loc), 0);
	sc_step(s, 0);
	i = info_of(s, h);
	assert_int_equal(i.selected_position, 192);
	assert_int_equal(i.selected_location, KVA_LOC_LOCAL);
	assert_int_equal(s->n_lookups, lookups); /* no new lookup */
	assert_int_equal(sc_stats(s).local_upgrades, 1);

	/* a shorter one than what the host already stated changes nothing */
	kva_checkpoint shorter = sc_ckpt(128, 71, 1);
	assert_int_equal(kva_local_checkpoint(s->e, h, &shorter), 0);
	sc_step(s, 0);
	assert_int_equal(info_of(s, h).selected_position, 192);
	assert_int_equal(sc_stats(s).local_stated, 1);

	assert_int_equal(kva_finish(s->e, big), 0);
	assert_int_equal(sc_step(s, 0), 1);
	sc_expect_admitted(s, h, KVA_ADMIT_LOCAL, 192, 0);
	assert_int_equal(sc_stats(s).copy_jobs, 0); /* the external one was never copied */
	sc_assert_conserved(s);
	sc_free(s);
}

static void rule22_local_upgrades_a_waiting_recompute(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	kva_handle big = sc_occupy(s, 100, 95); /* 5 pages free */
	kva_manifest miss = {0};
	s->dir[s->n_dir++] = (struct sc_dir_entry){7, miss};
	kva_handle h = sc_submit(s, 1, 7, 256); /* miss: recompute, first chunk 16 pages: waits */
	sc_step(s, 0);
	assert_true(s->plan.head_blocked);
	assert_int_equal(info_of(s, h).reason, KVA_REASON_MISS);
	kva_checkpoint loc = sc_ckpt(128, 70, 1);
	assert_int_equal(kva_local_checkpoint(s->e, h, &loc), 0);
	sc_step(s, 0);
	kva_request_info i = info_of(s, h);
	assert_true(i.has_selection);
	assert_int_equal(i.selected_position, 128);
	assert_int_equal(i.reason, KVA_REASON_NONE);
	assert_int_equal(kva_finish(s->e, big), 0);
	assert_int_equal(sc_step(s, 0), 1);
	const kva_admission *a = sc_expect_admitted(s, h, KVA_ADMIT_LOCAL, 128, 0);
	assert_int_equal(a->recompute_tokens, 128);
	sc_free(s);
}

/* Rule too-large-at-once holds for a recompute decided without a selection (a
 * miss): a
 * local checkpoint stated later must not make a request too large for any
 * reservation a restore, which would block the head for good (with
 * max_restore_wait_ns 0, unbounded) while every page is free. */
static void rule22_local_never_upgrades_a_recompute_too_large_to_restore(void **st)
{
	(void)st;
	kva_config c;
	sc_config(&c);
	c.max_restore_wait_ns = 0; /* unbounded: only rule too-large-at-once can decide */
	struct sc *s = sc_new(&c);
	kva_handle hog = sc_occupy(s, 100, 95); /* 5 pages free */
	kva_manifest miss = {0};
	s->dir[s->n_dir++] = (struct sc_dir_entry){7, miss};
	kva_handle big = sc_submit(s, 1, 7, 3200); /* 200 pages > 100: miss, recompute */
	kva_handle small = sc_submit(s, 2, 0, 16);
	sc_step(s, 0);
	assert_true(s->plan.head_blocked); /* its first chunk (16 pages) waits */
	assert_int_equal(info_of(s, big).reason, KVA_REASON_MISS);
	kva_checkpoint loc = sc_ckpt(160, 70, 1);
	assert_int_equal(kva_local_checkpoint(s->e, big, &loc), 0);
	sc_step(s, 0);
	kva_request_info i = info_of(s, big);
	assert_false(i.has_selection);
	assert_int_equal(i.reason, KVA_REASON_MISS);
	assert_int_equal(kva_finish(s->e, hog), 0);
	assert_int_equal(sc_step(s, SC_SEC), 2);
	sc_expect_admitted(s, big, KVA_ADMIT_RECOMPUTE, 0, 0);
	assert_non_null(sc_admitted(s, small));
	assert_int_equal(sc_stats(s).fallbacks[KVA_REASON_MISS], 1);
	sc_free(s);
}

/* The same with a prompt whose page count plus the decode headroom would
 * wrap 32 bits: no reservation may take fewer credits than pages. */
/* The directory lists an external checkpoint at the very position of the
 * host's partial local one: the host's own copy is preferred (no import). */
static void rule22_local_wins_over_an_external_checkpoint_at_the_same_position(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, 7, sc_ckpt(128, 80, 0)); /* external, as long as the local */
	kva_handle h = sc_submit_local(s, 1, 7, 256, sc_ckpt(128, 70, 1));
	assert_int_equal(sc_step(s, 0), 1);
	assert_int_equal(s->n_lookups, 1); /* partial: the directory was asked */
	assert_int_equal(s->plan.n_copies, 0);
	const kva_admission *a = sc_expect_admitted(s, h, KVA_ADMIT_LOCAL, 128, 0);
	assert_int_equal(a->recompute_tokens, 128);
	assert_int_equal(sc_stats(s).copy_jobs, 0);
	sc_assert_conserved(s);
	sc_free(s);
}

/* Rule bounded-wait gives up once: a restore whose bounded wait expired
 * recomputes,
 * and a local checkpoint stated afterwards does not make it a restore
 * again (it would wait on capacity a second time). */
static void rule22_local_never_revives_an_expired_restore_wait(void **st)
{
	(void)st;
	kva_config c;
	sc_config(&c);
	c.max_restore_wait_ns = 5 * SC_SEC;
	struct sc *s = sc_new(&c);
	kva_handle hog = sc_occupy(s, 100, 95); /* 5 pages free */
	sc_dir_set(s, 7, sc_ckpt(320, 80, 0));
	kva_handle h = sc_submit(s, 1, 7, 480); /* a restore of 30 pages: waits */
	sc_step(s, 0);
	assert_true(info_of(s, h).has_selection);
	sc_step(s, 5 * SC_SEC); /* expired: a recompute, first chunk 16 pages: waits */
	assert_true(s->plan.head_blocked);
	assert_int_equal(info_of(s, h).reason, KVA_REASON_WAIT_EXPIRED);
	kva_checkpoint loc = sc_ckpt(128, 70, 1);
	assert_int_equal(kva_local_checkpoint(s->e, h, &loc), 0);
	sc_step(s, 0);
	kva_request_info i = info_of(s, h);
	assert_false(i.has_selection);
	assert_int_equal(i.reason, KVA_REASON_WAIT_EXPIRED);
	assert_int_equal(sc_stats(s).local_upgrades, 0);
	assert_int_equal(kva_finish(s->e, hog), 0);
	assert_int_equal(sc_step(s, 0), 1);
	const kva_admission *a = sc_expect_admitted(s, h, KVA_ADMIT_RECOMPUTE, 0, 0);
	assert_int_equal(a->reason, KVA_REASON_WAIT_EXPIRED);
	assert_int_equal(sc_stats(s).wait_expired, 1);
	sc_free(s);
}

static void rule22_local_on_a_wrapping_prompt_keeps_credits_conserved(void **st)
{
	(void)st;
	kva_config c;
	sc_config(&c);
	c.page_tokens = 1;
	c.prefill_chunk_tokens = 16;
	c.decode_headroom_pages = 1;
	struct sc *s = sc_new(&c);
	kva_manifest miss = {0};
	s->dir[s->n_dir++] = (struct sc_dir_entry){7, miss};
	kva_handle big = sc_submit(s, 1, 7, UINT32_MAX);
	s->plan.hold_admissions = true;
	sc_step(s, 0);
	s->plan.hold_admissions = false;
	kva_checkpoint loc = sc_ckpt(10, 70, 1);
	assert_int_equal(kva_local_checkpoint(s->e, big, &loc), 0);
	assert_int_equal(sc_step(s, 0), 1);
	const kva_admission *a = sc_expect_admitted(s, big, KVA_ADMIT_RECOMPUTE, 0, 0);
	assert_int_equal(a->npages, 16); /* its first chunk */
	sc_assert_conserved(s);
	assert_int_equal(kva_finish(s->e, big), 0);
	sc_step(s, 0);
	sc_assert_conserved(s);
	assert_int_equal(sc_free_pages(s), 100);
	sc_free(s);
}

static void rule22_local_stated_during_copy_is_counted_at_admission(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, 7, sc_ckpt(128, 80, 0));
	sc_dir_set(s, 8, sc_ckpt(128, 81, 0));
	kva_handle a = sc_submit(s, 1, 7, 256);
	kva_handle b = sc_submit(s, 2, 8, 256);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 2);
	assert_int_equal(sc_state(s, a), KVA_STATE_IMPORTING);
	kva_checkpoint shorter = sc_ckpt(48, 70, 1), longer = sc_ckpt(200, 71, 1);
	assert_int_equal(kva_local_checkpoint(s->e, a, &shorter), 0);
	assert_int_equal(kva_local_checkpoint(s->e, b, &longer), 0);
	sc_copies_done(s, 0);
	assert_int_equal(sc_step(s, 0), 2);
	const kva_admission *x = sc_admitted(s, a), *y = sc_admitted(s, b);
	assert_non_null(x);
	assert_non_null(y);
	assert_int_equal(x->how, KVA_ADMIT_RESTORE);
	assert_int_equal(x->local_tokens, 48);
	assert_int_equal(x->restored_tokens, 80);
	assert_int_equal(x->npages, 8);
	/* the local checkpoint covers the import: local only, its pages taken
	 * from the reservation the request already owns */
	assert_int_equal(y->how, KVA_ADMIT_LOCAL);
	assert_int_equal(y->local_tokens, 200);
	assert_int_equal(y->restored_tokens, 0);
	assert_int_equal(y->npages, 13);
	assert_int_equal(y->npages + y->reserved_pages, 16);
	kva_stats t = sc_stats(s);
	assert_int_equal(t.tokens_local, 248);
	assert_int_equal(t.tokens_restored, 80);
	assert_int_equal(t.tokens_recomputed, 512 - 248 - 80);
	sc_assert_conserved(s);
	sc_free(s);
}

/* A request READY on a local checkpoint (a shorter one after its copy
 * failed) is admitted from the longer local checkpoint the host states
 * meanwhile, with pages for all of it (found by fuzz_engine). */
static void rule22_longer_local_stated_while_ready_is_used_at_admission(void **st)
{
	(void)st;
	kva_config c;
	sc_config(&c);
	c.max_copy_retries = 0;
	struct sc *s = sc_new(&c);
	sc_dir_set(s, 7, sc_ckpt(32, 3, 1));
	sc_dir_add(s, 7, sc_ckpt(128, 80, 0));
	kva_handle h = sc_submit(s, 1, 7, 256);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 1);
	sc_copies_done(s, -1); /* no retry: the shorter, local one */
	s->plan.admitted_cap = 0;
	sc_step(s, 0);
	assert_int_equal(sc_state(s, h), KVA_STATE_READY);
	kva_checkpoint longer = sc_ckpt(96, 70, 1);
	assert_int_equal(kva_local_checkpoint(s->e, h, &longer), 0);
	s->plan.admitted_cap = SC_MAX;
	assert_int_equal(sc_step(s, 0), 1);
	const kva_admission *a = sc_expect_admitted(s, h, KVA_ADMIT_LOCAL, 96, 0);
	assert_int_equal(a->npages, 6);
	assert_int_equal(a->npages + a->reserved_pages, 16);
	sc_assert_conserved(s);
	sc_free(s);
}

static void rule22_preempted_request_resumes_from_local_without_a_lookup(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	kva_manifest miss = {0};
	s->dir[s->n_dir++] = (struct sc_dir_entry){7, miss};
	kva_handle h = sc_submit(s, 1, 7, 256);
	kva_handle plain = sc_submit(s, 2, 7, 256);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_admitted, 2);
	assert_int_equal(s->n_lookups, 2);
	kva_checkpoint loc = sc_ckpt(160, 70, 1);
	assert_int_equal(kva_local_checkpoint(s->e, h, &loc), 0);
	sc_step(s, 0);
	assert_int_equal(kva_preempt(s->e, h), 0);
	assert_int_equal(kva_preempt(s->e, plain), 0);
	sc_step(s, 0);
	sc_expect_admitted(s, h, KVA_ADMIT_LOCAL, 160, 0);
	/* only the one without a local checkpoint asked the directory again */
	assert_int_equal(s->n_lookups, 3);
	assert_int_equal(s->lookups[2].token.id, 2);
	const kva_admission *p = sc_admitted(s, plain);
	assert_non_null(p);
	assert_int_equal(p->how, KVA_ADMIT_RECOMPUTE);
	sc_free(s);
}

static void rule22_eviction_keeps_the_hosts_other_local_checkpoint(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	kva_handle big = sc_occupy(s, 100, 95);
	/* the directory lists a longer local checkpoint (id 90) than the host's (id 70) */
	sc_dir_set(s, 7, sc_ckpt(192, 90, 1));
	kva_handle h = sc_submit_local(s, 1, 7, 256, sc_ckpt(64, 70, 1));
	sc_step(s, 0);
	assert_int_equal(info_of(s, h).selected_position, 192);
	sc_dir_clear(s); /* after the eviction the directory knows nothing */
	assert_int_equal(kva_checkpoint_evicted(s->e, 90, 2), 0);
	sc_step(s, 0); /* revalidation lookup, unanswered */
	assert_int_equal(s->n_lookups, 2);
	sc_step(s, 2 * SC_SEC); /* it times out: the host's own checkpoint is still there */
	kva_request_info i = info_of(s, h);
	assert_true(i.has_selection);
	assert_int_equal(i.selected_position, 64);
	assert_int_equal(kva_finish(s->e, big), 0);
	assert_int_equal(sc_step(s, 0), 1);
	assert_int_equal(sc_admitted(s, h)->local_tokens, 64);
	sc_free(s);
}

static void rule22_prefix_cache_reset_forgets_stated_checkpoints(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, 7, sc_ckpt(128, 80, 0));
	kva_handle h = sc_submit_local(s, 1, 7, 256, sc_ckpt(48, 70, 1));
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 1);
	kva_copy_job job = s->copies[0];
	assert_int_equal(kva_reset_prefix_cache(s->e), 0);
	sc_step(s, 0);
	/* drained: back to the front with a fresh lookup */
	assert_int_equal(kva_copy_done(s->e, job.token, 0, 0), 0);
	sc_step(s, 0);
	assert_int_equal(s->n_lookups, 2);
	assert_int_equal(s->plan.n_copies, 1);
	sc_copies_done(s, 0);
	assert_int_equal(sc_step(s, 0), 1);
	const kva_admission *a = sc_admitted(s, h);
	assert_non_null(a);
	assert_int_equal(a->how, KVA_ADMIT_RESTORE);
	assert_int_equal(a->local_tokens, 0); /* the reset wiped the host's cache */
	assert_int_equal(a->restored_tokens, 128);
	sc_free(s);
}

/* The reset forgets what the host stated before it wherever the request is:
 * a waiting restore that selected it looks up again when it reaches the
 * head, a running one preempted after the reset does not resume from it.
 * What the host states after the reset holds. */
static void rule22_prefix_cache_reset_forgets_them_for_waiting_and_running(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	kva_manifest miss = {0};
	s->dir[s->n_dir++] = (struct sc_dir_entry){7, miss};
	kva_handle run = sc_submit_local(s, 1, 7, 256, sc_ckpt(64, 70, 1));
	sc_step(s, 0); /* a miss: the local checkpoint decides */
	sc_expect_admitted(s, run, KVA_ADMIT_LOCAL, 64, 0);
	kva_handle hog = sc_occupy(s, 2, 80); /* 4 pages free */
	kva_handle wait = sc_submit_local(s, 3, 7, 256, sc_ckpt(64, 71, 1));
	sc_step(s, 0);
	assert_true(s->plan.head_blocked);
	kva_request_info i = info_of(s, wait);
	assert_true(i.has_selection);
	assert_int_equal(i.selected_location, KVA_LOC_LOCAL);

	uint32_t asked = s->n_lookups;
	assert_int_equal(kva_reset_prefix_cache(s->e), 0);
	sc_step(s, 0); /* the head finds its selection forgotten: asks again */
	assert_int_equal(s->n_lookups, asked + 1);
	assert_int_equal(sc_stats(s).revalidations, 1);
	assert_false(info_of(s, wait).has_selection);
	assert_int_equal(kva_finish(s->e, hog), 0);
	assert_int_equal(kva_preempt(s->e, run), 0);
	uint32_t n_run = 0, n_wait = 0;
	for (int k = 0; k < 4; k++) {
		sc_step(s, 0);
		const kva_admission *a = sc_admitted(s, run);
		if (a) {
			assert_int_equal(a->how, KVA_ADMIT_RECOMPUTE);
			assert_int_equal(a->local_tokens, 0);
			n_run++;
		}
		if ((a = sc_admitted(s, wait))) {
			assert_int_equal(a->how, KVA_ADMIT_RECOMPUTE);
			assert_int_equal(a->local_tokens, 0);
			n_wait++;
		}
	}
	assert_int_equal(n_run, 1);
	assert_int_equal(n_wait, 1);
	assert_int_equal(s->n_lookups, asked + 2); /* both asked the directory again */

	/* stated after the reset: a full local hit, admitted without a lookup */
	kva_handle fresh = sc_submit_local(s, 4, 7, 256, sc_ckpt(256, 72, 1));
	sc_step(s, 0);
	sc_expect_admitted(s, fresh, KVA_ADMIT_LOCAL, 256, 0);
	assert_int_equal(s->n_lookups, asked + 2);
	sc_free(s);
}

/* After a reset, many waiting requests that stated full local hits need a
 * lookup each. They are asked about together, and admission goes on in the
 * step where the directory answers, not one request per step (10,000 such
 * requests took 10,000 steps). */
static void rule22_reset_rechecks_waiting_requests_together(void **st)
{
	(void)st;
	enum { N = 40 }; /* 2 pages each: all fit once the hog is gone */
	for (int async = 0; async < 2; async++) {
		struct sc *s = sc_default();
		uint64_t key = async ? 8 : 7; /* 7 answers from its callback, 8 later */
		kva_manifest miss = {0};
		s->dir[s->n_dir++] = (struct sc_dir_entry){7, miss};
		kva_handle hog = sc_occupy(s, 1000, 100);
		kva_handle h[N];
		for (int i = 0; i < N; i++)
			h[i] = sc_submit_local(s, (uint64_t)i + 1, key, 32, sc_ckpt(32, 500 + i, 1));
		sc_step(s, 0);
		assert_true(s->plan.head_blocked);
		assert_int_equal(s->n_lookups, 0); /* full local hits ask nobody */
		assert_int_equal(kva_reset_prefix_cache(s->e), 0);
		assert_int_equal(kva_finish(s->e, hog), 0);
		uint32_t admitted = 0, steps = 0;
		while (admitted < N && steps < 10) {
			uint32_t asked = s->n_lookups;
			admitted += (uint32_t)sc_step(s, 0);
			steps++;
			for (uint32_t k = asked; async && k < s->n_lookups; k++)
				assert_int_equal(kva_lookup_answer(s->e, s->lookups[k].token, &miss), 0);
		}
		assert_int_equal(admitted, N);
		/* at once: one step; answered later: the head and 31 behind it,
		 * answered, then the other 8, answered */
		assert_int_equal(steps, async ? 3 : 1);
		assert_int_equal(s->n_lookups, N);
		assert_int_equal(sc_stats(s).revalidations, N);
		for (int i = 0; i < N; i++)
			assert_int_equal(info_of(s, h[i]).state, KVA_STATE_RUNNING);
		sc_free(s);
	}
}

/* The recheck of forgotten heads after a reset runs admission again in the
 * step where the directory answers. plan.head_blocked says the FCFS head
 * waits at the end of the step; a head that blocked only until its recheck
 * was answered, and was admitted in the same step, is not waiting: with
 * every request admitted (nothing left waiting) or admission stopped by the
 * token budget, head_blocked must be false (kvadmit.h, kva_plan). */
static void rule22_recheck_admitting_everything_leaves_no_head_blocked(void **st)
{
	(void)st;
	enum { N = 40 }; /* more than one recheck round: 32, then 8 */
	for (int budget = 0; budget < 2; budget++) {
		struct sc *s = sc_default();
		kva_manifest miss = {0};
		s->dir[s->n_dir++] = (struct sc_dir_entry){7, miss}; /* answers at once */
		kva_handle hog = sc_occupy(s, 1000, 100);
		for (int i = 0; i < N; i++)
			sc_submit_local(s, (uint64_t)i + 1, 7, 32, sc_ckpt(32, 500 + i, 1));
		sc_step(s, 0);
		assert_true(s->plan.head_blocked);
		assert_int_equal(kva_reset_prefix_cache(s->e), 0);
		assert_int_equal(kva_finish(s->e, hog), 0);
		/* each recompute costs its 32 prompt tokens: 36 of 40 fit the budget */
		s->plan.token_budget = budget ? 36 * 32 : 0;
		uint32_t n = (uint32_t)sc_step(s, 0);
		assert_int_equal(n, budget ? 36 : N);
		assert_int_equal(sc_stats(s).waiting, N - n);
		/* nothing waits for capacity, a lookup or memory */
		assert_false(s->plan.head_blocked);
		s->plan.token_budget = 0;
		sc_step(s, 0);
		assert_int_equal(sc_stats(s).waiting, 0);
		assert_false(s->plan.head_blocked);
		sc_assert_conserved(s);
		sc_free(s);
	}
}

/* A host checkpoint the reset forgot is never the shorter checkpoint an
 * exhausted copy falls back to (rule retry-then-shorter): its pages are gone. */
static void rule22_forgotten_checkpoint_is_never_the_shorter_fallback(void **st)
{
	(void)st;
	struct sc *s = sc_default(); /* max_copy_retries = 2 */
	sc_dir_set(s, 7, sc_ckpt(320, 902, 0));
	kva_handle hog = sc_occupy(s, 100, 90); /* 10 free */
	kva_handle h = sc_submit_local(s, 1, 7, 480, sc_ckpt(48, 70, 1));
	sc_step(s, 0); /* restores 320 tokens (30 pages): waits */
	assert_true(s->plan.head_blocked);
	assert_int_equal(kva_reset_prefix_cache(s->e), 0);
	assert_int_equal(kva_finish(s->e, hog), 0);
	sc_step(s, 0);
	for (int i = 0; i < 3; i++) { /* first attempt + 2 retries */
		assert_int_equal(s->plan.n_copies, 1);
		assert_int_equal(s->copies[0].checkpoint_id, 902);
		sc_copies_done(s, 1);
		sc_step(s, 0);
	}
	const kva_admission *a = sc_admitted(s, h);
	assert_non_null(a);
	assert_int_equal(a->how, KVA_ADMIT_RECOMPUTE);
	assert_int_equal(a->reason, KVA_REASON_RETRIES_EXHAUSTED);
	assert_int_equal(a->local_tokens, 0);
	assert_int_equal(sc_stats(s).shorter_fallbacks, 0);
	sc_assert_conserved(s);
	sc_free(s);
}

/* A checkpoint stated before a reset call is forgotten even when the step
 * handles the statement after the call: the host's cache is wiped from the
 * call on. */
static void rule22_statement_queued_before_a_reset_is_forgotten(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, 7, sc_ckpt(320, 902, 0));
	kva_handle hog = sc_occupy(s, 100, 90); /* 10 free */
	kva_handle h = sc_submit(s, 1, 7, 480);
	sc_step(s, 0); /* restores 320 tokens: waits */
	kva_checkpoint loc = sc_ckpt(400, 902, 1); /* the same id, longer, local */
	assert_int_equal(kva_local_checkpoint(s->e, h, &loc), 0);
	assert_int_equal(kva_reset_prefix_cache(s->e), 0);
	sc_step(s, 0);
	kva_request_info i = info_of(s, h);
	assert_true(i.has_selection);
	assert_int_equal(i.selected_position, 320);
	assert_int_equal(i.selected_location, KVA_LOC_EXTERNAL);
	assert_int_equal(kva_finish(s->e, hog), 0);
	sc_step(s, 0);
	sc_copies_done(s, 0);
	sc_step(s, 0);
	sc_expect_admitted(s, h, KVA_ADMIT_RESTORE, 0, 320);
	sc_free(s);
}

/* What the host states after the reset holds, also for an import that was
 * copying at the reset: when its copy drains it goes back to the front with
 * that checkpoint and is admitted from it. */
static void rule22_stated_after_a_reset_survives_the_drain_requeue(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, 7, sc_ckpt(320, 900, 0));
	kva_handle h = sc_submit(s, 1, 7, 480);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 1);
	kva_copy_job job = s->copies[0];
	assert_int_equal(kva_reset_prefix_cache(s->e), 0);
	sc_step(s, 0); /* handled: the copy drains first */
	kva_checkpoint loc = sc_ckpt(400, 902, 1); /* stated after the reset */
	assert_int_equal(kva_local_checkpoint(s->e, h, &loc), 0);
	sc_step(s, 0);
	assert_int_equal(kva_copy_done(s->e, job.token, job.rank, 0), 0);
	sc_step(s, 0); /* drained: to the front, looks up again, keeps the local one */
	sc_expect_admitted(s, h, KVA_ADMIT_LOCAL, 400, 0);
	assert_int_equal(s->plan.n_copies, 0);
	sc_free(s);
}

static void rule22_bad_input_is_refused(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	kva_handle h = sc_submit(s, 1, 7, 256);
	kva_checkpoint c = sc_ckpt(64, 70, 1);
	assert_int_equal(kva_local_checkpoint(NULL, h, &c), -EINVAL);
	assert_int_equal(kva_local_checkpoint(s->e, h, NULL), -EINVAL);
	c.position = 0;
	assert_int_equal(kva_local_checkpoint(s->e, h, &c), -EINVAL);
	c = sc_ckpt(64, 70, 0); /* not local */
	assert_int_equal(kva_local_checkpoint(s->e, h, &c), -EINVAL);
	c = sc_ckpt(64, 70, 1);
	c.compatible = 0;
	assert_int_equal(kva_local_checkpoint(s->e, h, &c), -EINVAL);
	c = sc_ckpt(64, 70, 1);
	c.reserved_ = 2; /* reserved, must be 0 */
	assert_int_equal(kva_local_checkpoint(s->e, h, &c), -EINVAL);
	c = sc_ckpt(257, 70, 1);
	assert_int_equal(kva_local_checkpoint(s->e, h, &c), -ERANGE);
	kva_request r = {.id = 2, .prefix_key = 7, .prompt_tokens = 100, .local = sc_ckpt(101, 1, 1)};
	kva_handle h2;
	assert_int_equal(kva_submit(s->e, &r, &h2), -ERANGE);
	r.local = sc_ckpt(50, 1, 0);
	assert_int_equal(kva_submit(s->e, &r, &h2), -EINVAL);
	assert_int_equal(kva_cancel(s->e, h), 0);
	sc_step(s, 0);
	c = sc_ckpt(64, 70, 1);
	assert_int_equal(kva_local_checkpoint(s->e, h, &c), -ENOENT);
	sc_step(s, 0);
	assert_int_equal(sc_stats(s).local_stated, 0);
	sc_assert_conserved(s);
	sc_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(rule22_full_local_hit_is_admitted_without_a_lookup),
		cmocka_unit_test(rule22_request_without_a_key_uses_its_local_checkpoint),
		cmocka_unit_test(rule22_partial_local_is_merged_with_the_answer),
		cmocka_unit_test(rule22_miss_or_timeout_keeps_the_local_checkpoint),
		cmocka_unit_test(rule22_full_local_hit_decides_an_outstanding_lookup),
		cmocka_unit_test(rule22_longer_local_upgrades_a_waiting_restore_without_a_lookup),
		cmocka_unit_test(rule22_local_upgrades_a_waiting_recompute),
		cmocka_unit_test(rule22_local_never_upgrades_a_recompute_too_large_to_restore),
		cmocka_unit_test(rule22_local_wins_over_an_external_checkpoint_at_the_same_position),
		cmocka_unit_test(rule22_local_never_revives_an_expired_restore_wait),
		cmocka_unit_test(rule22_local_on_a_wrapping_prompt_keeps_credits_conserved),
		cmocka_unit_test(rule22_local_stated_during_copy_is_counted_at_admission),
		cmocka_unit_test(rule22_longer_local_stated_while_ready_is_used_at_admission),
		cmocka_unit_test(rule22_preempted_request_resumes_from_local_without_a_lookup),
		cmocka_unit_test(rule22_eviction_keeps_the_hosts_other_local_checkpoint),
		cmocka_unit_test(rule22_prefix_cache_reset_forgets_stated_checkpoints),
		cmocka_unit_test(rule22_prefix_cache_reset_forgets_them_for_waiting_and_running),
		cmocka_unit_test(rule22_reset_rechecks_waiting_requests_together),
		cmocka_unit_test(rule22_recheck_admitting_everything_leaves_no_head_blocked),
		cmocka_unit_test(rule22_forgotten_checkpoint_is_never_the_shorter_fallback),
		cmocka_unit_test(rule22_statement_queued_before_a_reset_is_forgotten),
		cmocka_unit_test(rule22_stated_after_a_reset_survives_the_drain_requeue),
		cmocka_unit_test(rule22_bad_input_is_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
