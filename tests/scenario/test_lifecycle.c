/* SPDX-License-Identifier: Apache-2.0 */
/* Lifecycle and whole-engine behaviour: rules bounded-wait, id-reuse,
 * tokens-counted-once, step-never-walks-queue, capabilities, and eight
 * agents whose checkpoints together exceed the pool. */
#include "scenario.h"

#define KEY 7

static void rule08_bounded_wait_warns_once_then_recomputes_and_stops_holding(void **st)
{
	(void)st;
	kva_config c;
	sc_config(&c);
	c.max_restore_wait_ns = 10 * SC_SEC;
	c.wait_log_interval_ns = 0;
	struct sc *s = sc_new(&c);
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	sc_occupy(s, 1, 90); /* 10 free */
	kva_handle h = sc_submit(s, 2, KEY, 480); /* restore needs 30 */
	kva_handle behind = sc_submit(s, 3, 0, 16);
	sc_step(s, 0);
	for (int i = 0; i < 99; i++)
		sc_step(s, 100 * SC_MS);
	assert_int_equal(s->n_warn, 0);
	assert_null(sc_admitted(s, behind));
	sc_step(s, 100 * SC_MS); /* 10 s */
	assert_int_equal(s->n_warn, 1);
	assert_non_null(strstr(s->last_log, "recomputing"));
	/* as a recompute it needs only its first chunk (16 pages > 10 free: still
	 * the head, but no longer a restore); after room frees it goes first */
	const kva_admission *a = sc_admitted(s, h);
	if (!a) {
		assert_true(s->plan.head_blocked);
	}
	for (int i = 0; i < 100; i++)
		sc_step(s, SC_SEC);
	assert_int_equal(s->n_warn, 1); /* exactly one warning */
	kva_stats stt = sc_stats(s);
	assert_int_equal(stt.wait_expired, 1);
	assert_int_equal(stt.fallbacks[KVA_REASON_WAIT_EXPIRED], 1);
	kva_request_info info;
	assert_int_equal(kva_query(s->e, h, &info), 0);
	assert_int_equal(info.reason, KVA_REASON_WAIT_EXPIRED);
	assert_false(info.has_selection);
	sc_free(s);
}

static void rule08_expired_waiter_no_longer_holds_others_as_a_restore(void **st)
{
	(void)st;
	kva_config c;
	sc_config(&c);
	c.max_restore_wait_ns = 5 * SC_SEC;
	struct sc *s = sc_new(&c);
	sc_dir_set(s, KEY, sc_ckpt(1440, 900, 0));
	sc_occupy(s, 1, 70); /* 30 free */
	kva_handle h = sc_submit(s, 2, KEY, 1500); /* restore needs 94 pages: waits */
	kva_handle behind = sc_submit(s, 3, 0, 16);
	sc_step(s, 0);
	sc_step(s, 5 * SC_SEC);
	/* now an ordinary admission of 16 pages: fits, and the line moves */
	const kva_admission *a = sc_admitted(s, h);
	assert_non_null(a);
	assert_int_equal(a->reason, KVA_REASON_WAIT_EXPIRED);
	assert_non_null(sc_admitted(s, behind));
	sc_free(s);
}

/* The blocked head's checkpoint is evicted and its re-lookup is still out
 * when the bound passes: the wait is not lost. Once the answer makes it a
 * restore again it gives up at the next step (its wait counts from when it
 * first blocked), instead of waiting without bound. */
static void rule08_bounded_wait_survives_a_relookup_of_the_blocked_head(void **st)
{
	(void)st;
	kva_config c;
	sc_config(&c);
	c.max_restore_wait_ns = 10 * SC_SEC;
	c.lookup_timeout_ns = 5 * SC_SEC;
	c.wait_log_interval_ns = 0;
	struct sc *s = sc_new(&c);
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	sc_occupy(s, 1, 90); /* 10 free */
	kva_handle h = sc_submit(s, 2, KEY, 480); /* restore needs 30 */
	sc_step(s, 0);
	assert_true(s->plan.head_blocked); /* T0 */
	sc_step(s, 8 * SC_SEC);
	sc_dir_clear(s); /* the re-lookup stays out until answered below */
	assert_int_equal(kva_checkpoint_evicted(s->e, 900, 2), 0);
	uint32_t asked = s->n_lookups;
	sc_step(s, 0);
	assert_int_equal(s->n_lookups, asked + 1);
	sc_step(s, 3 * SC_SEC); /* T0 + 11 s: past the bound, undecided */
	kva_manifest m = {.count = 1, .entries = {sc_ckpt(320, 901, 0)}};
	assert_int_equal(kva_lookup_answer(s->e, s->lookups[asked].token, &m), 0);
	sc_step(s, 0); /* a restore again, blocked */
	for (int i = 0; i < 3; i++)
		sc_step(s, SC_SEC);
	kva_stats stt = sc_stats(s);
	assert_int_equal(stt.wait_expired, 1);
	assert_int_equal(stt.fallbacks[KVA_REASON_WAIT_EXPIRED], 1);
	kva_request_info info;
	assert_int_equal(kva_query(s->e, h, &info), 0);
	assert_int_equal(info.reason, KVA_REASON_WAIT_EXPIRED);
	assert_int_equal(s->n_warn, 1);
	sc_free(s);
}

/* The head's timers and the capacity-wait gauge belong to the restore
 * blocked at the head. A preempted request requeued to the front that
 * blocks there (an ordinary admission) takes the head: the gauge reads 0
 * and the passed restore's bound does not fire behind it; when the restore
 * is the head again it goes on from when it first blocked. */
static void rule18_head_timers_and_gauge_follow_the_head(void **st)
{
	(void)st;
	kva_config c;
	sc_config(&c);
	c.max_restore_wait_ns = 10 * SC_SEC;
	c.wait_log_interval_ns = 0;
	struct sc *s = sc_new(&c);
	kva_handle hog = sc_occupy(s, 100, 80);    /* 20 free */
	kva_handle b = sc_submit(s, 101, 0, 1000); /* first chunk 16 pages: 4 free */
	sc_step(s, 0);
	assert_non_null(sc_admitted(s, b));
	sc_dir_set(s, KEY, sc_ckpt(160, 900, 0));
	kva_handle a = sc_submit(s, 102, KEY, 320); /* a restore of 20 pages: blocks */
	sc_step(s, SC_SEC);
	sc_step(s, SC_SEC);
	assert_int_equal(sc_stats(s).capacity_wait_ns, SC_SEC);
	assert_int_equal(kva_preempt(s->e, b), 0);
	assert_int_equal(kva_grow(s->e, hog, 16, NULL), 0); /* b blocks at the front */
	for (int i = 0; i < 12; i++) {
		sc_step(s, SC_SEC);
		assert_true(s->plan.head_blocked);
		kva_stats x = sc_stats(s);
		assert_int_equal(x.capacity_wait_ns, 0); /* no restore is the blocked head */
		assert_int_equal(x.wait_expired, 0);
	}
	assert_int_equal(sc_state(s, a), KVA_STATE_WAITING);
	assert_int_equal(kva_finish(s->e, hog), 0);
	sc_step(s, SC_SEC); /* b first, then a reserves: it waited since it first blocked */
	assert_non_null(sc_admitted(s, b));
	assert_int_equal(sc_state(s, a), KVA_STATE_IMPORTING);
	kva_stats x = sc_stats(s);
	assert_int_equal(x.wait_expired, 0);
	assert_int_equal(x.capacity_wait.count, 2); /* b's 12 s at the head, a's 14 s */
	assert_int_equal(x.capacity_wait.sum_ns, 26 * SC_SEC);
	sc_free(s);
}

/* Rule wait-logs-and-refreshes: a restore's wait logs once when it begins. A
 * requeued request
 * that takes the head for a while (here preempted, then cancelled) does not
 * make the restore's wait begin again when it is the head once more: no
 * second "starts waiting" line inside the interval. */
static void rule18_passed_restore_back_at_the_head_does_not_log_its_start_again(void **st)
{
	(void)st;
	kva_config c;
	sc_config(&c);
	c.wait_log_interval_ns = 30 * SC_SEC;
	struct sc *s = sc_new(&c);
	kva_handle hog = sc_occupy(s, 100, 80);    /* 20 free */
	kva_handle b = sc_submit(s, 101, 0, 1000); /* first chunk 16 pages: 4 free */
	sc_step(s, 0);
	assert_non_null(sc_admitted(s, b));
	sc_dir_set(s, KEY, sc_ckpt(160, 900, 0));
	kva_handle a = sc_submit(s, 102, KEY, 320); /* a restore of 20 pages: blocks */
	sc_step(s, SC_SEC);
	assert_int_equal(s->n_logs, 1);
	assert_non_null(strstr(s->last_log, "request 102 starts waiting"));
	assert_int_equal(kva_preempt(s->e, b), 0);
	assert_int_equal(kva_grow(s->e, hog, 16, NULL), 0); /* b blocks at the front */
	for (int i = 0; i < 3; i++) {
		sc_step(s, SC_SEC);
		assert_true(s->plan.head_blocked);
	}
	assert_int_equal(kva_cancel(s->e, b), 0); /* a is the head again */
	for (int i = 0; i < 3; i++) {
		sc_step(s, SC_SEC);
		assert_true(s->plan.head_blocked);
	}
	assert_int_equal(sc_state(s, a), KVA_STATE_WAITING);
	assert_int_equal(s->n_logs, 1); /* its wait began once */
	assert_int_equal(sc_stats(s).wait_logs, 1);
	sc_free(s);
}

/* A kva_preempt and a kva_cancel of the same running request handled in
 * one step, in either order (the preempt may win the state CAS before the
 * step handles the cancel): it ends CANCELLED, once, and the directory is
 * not asked about it again. */
static void preempt_and_cancel(bool cancel_first)
{
	struct sc *s = sc_default();
	kva_manifest miss = {0};
	s->dir[s->n_dir++] = (struct sc_dir_entry){KEY, miss};
	kva_handle h = sc_submit(s, 1, KEY, 64);
	sc_step(s, 0);
	assert_non_null(sc_admitted(s, h)); /* a miss: recomputes */
	assert_int_equal(s->n_lookups, 1);
	if (cancel_first) {
		assert_int_equal(kva_cancel(s->e, h), 0);
		assert_int_equal(kva_preempt(s->e, h), 0);
	} else {
		assert_int_equal(kva_preempt(s->e, h), 0);
		assert_int_equal(kva_cancel(s->e, h), 0);
	}
	sc_step(s, 0);
	const kva_ended *en = sc_ended(s, h);
	assert_non_null(en);
	assert_int_equal(en->state, KVA_STATE_CANCELLED);
	assert_int_equal(s->n_lookups, 1); /* no fresh lookup for a cancelled request */
	kva_stats x = sc_stats(s);
	assert_int_equal(x.lookups_issued, 1);
	assert_int_equal(x.cancelled, 1);
	assert_int_equal(x.waiting, 0);
	for (int i = 0; i < 3; i++) {
		sc_step(s, SC_SEC);
		assert_int_equal(s->plan.n_admitted, 0);
		assert_int_equal(s->plan.n_ended, 0); /* reported exactly once */
	}
	sc_assert_conserved(s);
	assert_int_equal(sc_free_pages(s), 100);
	sc_free(s);
}

static void preempted_then_cancelled_request_ends_cancelled(void **st)
{
	(void)st;
	preempt_and_cancel(false);
}

static void cancelled_then_preempted_request_ends_cancelled(void **st)
{
	(void)st;
	preempt_and_cancel(true);
}

static void rule14_id_reuse_stale_events_never_touch_new_incarnation(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	kva_handle old = sc_submit(s, 42, KEY, 480);
	sc_step(s, 0);
	kva_copy_token old_copy = s->copies[0].token;
	kva_lookup_token old_lookup = s->lookups[s->n_lookups - 1].token;
	/* a live id cannot be submitted twice: the duplicate is rejected */
	kva_handle dup = sc_submit(s, 42, KEY, 480);
	sc_step(s, 0);
	const kva_ended *en = sc_ended(s, dup);
	assert_non_null(en);
	assert_int_equal(en->state, KVA_STATE_REJECTED);
	assert_int_equal(sc_state(s, old), KVA_STATE_IMPORTING);
	/* cancel; the copy of the old incarnation still drains */
	assert_int_equal(kva_cancel(s->e, old), 0);
	sc_step(s, 0);
	kva_handle fresh = sc_submit(s, 42, KEY, 480);
	assert_true(fresh.slot != old.slot || fresh.gen != old.gen); /* distinct incarnations */
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 1);
	kva_copy_job fresh_job = s->copies[0];
	/* stale events: the old copy result and a late old answer */
	assert_int_equal(kva_copy_done(s->e, old_copy, 0, 0), 0); /* drains the old one */
	kva_manifest m = {.count = 0};
	assert_int_equal(kva_lookup_answer(s->e, old_lookup, &m), -ESTALE);
	assert_int_equal(kva_copy_done(s->e, old_copy, 0, 0), -EALREADY);
	sc_step(s, 0);
	assert_int_equal(kva_copy_done(s->e, old_copy, 0, 0), -ENOENT); /* retired */
	assert_null(sc_admitted(s, fresh));
	assert_int_equal(sc_state(s, fresh), KVA_STATE_IMPORTING);
	assert_int_equal(sc_state(s, old), 0); /* retired */
	assert_int_equal(kva_copy_done(s->e, fresh_job.token, 0, 0), 0);
	sc_step(s, 0);
	assert_non_null(sc_admitted(s, fresh));
	sc_assert_conserved(s);
	sc_free(s);
}

static void rule16_every_prompt_token_counted_once(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, 1, sc_ckpt(320, 900, 0)); /* external */
	sc_dir_set(s, 2, sc_ckpt(160, 901, 1)); /* local */
	kva_handle a = sc_submit(s, 1, 1, 480);
	kva_handle b = sc_submit(s, 2, 2, 200);
	kva_handle c = sc_submit(s, 3, 0, 100);
	sc_step(s, 0);
	sc_copies_done(s, 0);
	sc_step(s, 0);
	kva_stats stt = sc_stats(s);
	assert_int_equal(stt.prompt_tokens_admitted, 480 + 200 + 100);
	assert_int_equal(stt.tokens_restored, 320); /* imported tokens only */
	assert_int_equal(stt.tokens_local, 160);
	assert_int_equal(stt.tokens_recomputed, 160 + 40 + 100);
	assert_int_equal(stt.tokens_local + stt.tokens_restored + stt.tokens_recomputed,
	                 stt.prompt_tokens_admitted);
	/* a preempted request is a new admission when it comes back */
	assert_int_equal(kva_preempt(s->e, c), 0);
	sc_step(s, 0);
	stt = sc_stats(s);
	assert_int_equal(stt.prompt_tokens_admitted, 480 + 200 + 100 + 100);
	assert_int_equal(stt.tokens_local + stt.tokens_restored + stt.tokens_recomputed,
	                 stt.prompt_tokens_admitted);
	(void)a;
	(void)b;
	sc_free(s);
}

static void rule20_step_cost_does_not_grow_with_waiting_count(void **st)
{
	(void)st;
	uint32_t touched[2], events[2];
	const uint32_t counts[2] = {100, 3000};
	for (int k = 0; k < 2; k++) {
		kva_config c;
		sc_config(&c);
		c.total_pages = 1000;
		struct sc *s = sc_new(&c);
		sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
		sc_occupy(s, 1, 990);
		for (uint32_t i = 0; i < counts[k]; i++)
			sc_submit(s, 100 + i, KEY, 480);
		sc_step(s, 0); /* ingest: O(events) */
		assert_int_equal(s->plan.events, counts[k] + counts[k]);
		sc_step(s, SC_MS);
		touched[k] = s->plan.records_touched;
		events[k] = s->plan.events;
		assert_true(s->plan.head_blocked);
		sc_free(s);
	}
	assert_int_equal(events[0], 0);
	assert_int_equal(events[1], 0);
	assert_int_equal(touched[0], 1); /* the head, and nothing else */
	assert_int_equal(touched[1], 1);
}

static void rule20_blocked_head_polls_no_lookups(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	sc_occupy(s, 1, 95);
	for (int i = 0; i < 500; i++)
		sc_submit(s, 10 + i, KEY, 480);
	sc_step(s, 0);
	uint32_t lookups = s->n_lookups;
	for (int i = 0; i < 100; i++) {
		sc_step(s, SC_MS);
		assert_true(s->plan.records_touched <= 1);
	}
	assert_int_equal(s->n_lookups, lookups);
	sc_free(s);
}

static void rule21_capabilities_are_probeable(void **st)
{
	(void)st;
	assert_int_equal(kva_version(), KVA_VERSION_NUMBER);
	assert_true(kva_has_feature(KVA_FEATURE_RESTORE_RESERVATION));
	assert_true(kva_has_feature(KVA_FEATURE_BOUNDED_WAIT));
	assert_true(kva_has_feature(KVA_FEATURE_COLLECTIVE_COPY));
	assert_false(kva_has_feature(9999));
	assert_non_null(kva_version_string());
	assert_string_not_equal(kva_strerror(-ENOSPC), kva_strerror(-EINVAL));
}

/* Between an accepted cancel and the step that ends the request, the
 * request says so (hardening issue, item 5); the cancel ends it CANCELLED,
 * after which finish says the request is gone, not "already finished". */
static void cancel_in_progress_is_reported_truthfully(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	kva_handle h = sc_occupy(s, 1, 10);
	assert_int_equal(kva_cancel(s->e, h), 0);
	kva_request_info i;
	assert_int_equal(kva_query(s->e, h, &i), 0);
	assert_int_equal(i.state, KVA_STATE_RUNNING);
	assert_int_equal(i.cancel_requested, 1);
	assert_int_equal(kva_cancel(s->e, h), -EALREADY);
	sc_step(s, 0);
	assert_non_null(sc_ended(s, h));
	assert_int_equal(sc_ended(s, h)->state, KVA_STATE_CANCELLED);
	assert_int_equal(kva_finish(s->e, h), -ENOENT);
	assert_int_equal(sc_free_pages(s), 100);
	sc_free(s);
}

/* An id whose incarnation was cancelled is free again as soon as the cancel
 * is handled, exactly as after a finish (hardening issue, item 7): the
 * resubmission in the same step is accepted, whatever the state cancelled. */
static void cancelled_incarnation_does_not_block_its_id(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	kva_handle running = sc_occupy(s, 2, 4);
	kva_handle finished = sc_occupy(s, 3, 4);
	kva_handle waiting = sc_submit(s, 1, KEY, 64); /* KEY: not answered, waits */
	sc_step(s, 0);
	assert_int_equal(kva_cancel(s->e, waiting), 0);
	assert_int_equal(kva_cancel(s->e, running), 0);
	assert_int_equal(kva_finish(s->e, finished), 0);
	kva_handle again[3] = {sc_submit(s, 1, 0, 16), sc_submit(s, 2, 0, 16), sc_submit(s, 3, 0, 16)};
	sc_step(s, 0);
	for (int k = 0; k < 3; k++) {
		assert_non_null(sc_admitted(s, again[k]));
		assert_null(sc_ended(s, again[k])); /* not REJECTED */
	}
	assert_int_equal(sc_stats(s).rejected, 0);
	sc_free(s);
}

struct unfinished {
	uint32_t n;
	uint8_t state_of[16]; /* by user pointer index */
	uint32_t calls_of[16];
};

static int users[16];

static void collect_unfinished(void *ctx, const kva_ended *r)
{
	struct unfinished *u = ctx;
	int k = (int)((int *)r->user - users);
	assert_true(k >= 0 && k < 16);
	u->state_of[k] = r->state;
	u->calls_of[k]++;
	u->n++;
}

/* kva_engine_destroy_with hands back every request the host was not told
 * ended, once, in whatever state it is in (hardening issue, item 15). */
static void destroy_with_returns_every_unfinished_request_once(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, 8, sc_ckpt(32, 901, 0));
	sc_dir_set(s, 9, sc_ckpt(32, 902, 0));
	kva_request q[9] = {
		{.id = 1, .prefix_key = 8, .prompt_tokens = 64, .user = &users[1]}, /* importing */
		{.id = 2, .prefix_key = 9, .prompt_tokens = 64, .user = &users[2]}, /* ready */
		{.id = 3, .prompt_tokens = 16, .user = &users[3]},                  /* running */
		{.id = 4, .prompt_tokens = 16, .user = &users[4]},                  /* finished, reported */
		{.id = 5, .prompt_tokens = 16, .user = &users[5]},                  /* finished, unreported */
		{.id = 6, .prefix_key = KEY, .prompt_tokens = 64, .user = &users[6]}, /* waiting */
	};
	kva_handle h[9];
	for (int k = 0; k < 6; k++)
		assert_int_equal(kva_submit(s->e, &q[k], &h[k]), 0);
	sc_step(s, 0);
	kva_copy_job j2 = s->copies[1];
	assert_int_equal(j2.handle.id, 2);
	assert_int_equal(kva_copy_done(s->e, j2.token, 0, 0), 0);
	assert_int_equal(kva_finish(s->e, h[3]), 0);
	s->plan.admitted_cap = 0; /* 2 stays READY */
	sc_step(s, 0);
	assert_non_null(sc_ended(s, h[3]));
	assert_int_equal(kva_finish(s->e, h[4]), 0);
	kva_request dup = {.id = 6, .prompt_tokens = 16, .user = &users[7]}; /* 6 is live */
	kva_request later = {.id = 8, .prompt_tokens = 16, .user = &users[8]};
	assert_int_equal(kva_submit(s->e, &dup, &h[6]), 0);
	s->plan.ended_cap = 0; /* no room for reports: 5 and 7's ends stay unreported */
	sc_step(s, 0);
	assert_int_equal(kva_submit(s->e, &later, &h[7]), 0); /* never ingested */
	struct unfinished u = {0};
	kva_engine_destroy_with(s->e, collect_unfinished, &u);
	s->e = NULL;
	assert_int_equal(u.state_of[1], KVA_STATE_IMPORTING);
	assert_int_equal(u.state_of[2], KVA_STATE_READY);
	assert_int_equal(u.state_of[3], KVA_STATE_RUNNING);
	assert_int_equal(u.calls_of[4], 0); /* its end was reported */
	assert_int_equal(u.state_of[5], KVA_STATE_FINISHED);
	assert_int_equal(u.state_of[6], KVA_STATE_WAITING);
	assert_int_equal(u.state_of[7], KVA_STATE_REJECTED);
	assert_int_equal(u.state_of[8], KVA_STATE_WAITING);
	for (int k = 0; k < 16; k++)
		assert_true(u.calls_of[k] <= 1);
	assert_int_equal(u.n, 7);
	free(s);
}

static void finish_reports_once_and_frees_everything(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	kva_handle h = sc_occupy(s, 1, 10);
	assert_int_equal(kva_finish(s->e, h), 0);
	assert_int_equal(kva_finish(s->e, h), -EALREADY);
	assert_int_equal(sc_free_pages(s), 100);
	sc_step(s, 0);
	assert_non_null(sc_ended(s, h));
	assert_int_equal(sc_ended(s, h)->state, KVA_STATE_FINISHED);
	sc_step(s, 0);
	assert_null(sc_ended(s, h));
	assert_int_equal(kva_finish(s->e, h), -ENOENT);
	assert_int_equal(kva_preempt(s->e, h), -ENOENT);
	sc_free(s);
}

/* Eight agents, each with a growing context, whose checkpoints together are
 * 2.4x the pool: every later turn restores, nobody cold-prefills, no page is
 * leaked. Turn t of agent a has a (96 + 64 t)-token context: 6 + 4t pages. */
static void eight_agents_exceeding_the_pool_all_restore_in_turn(void **st)
{
	(void)st;
	kva_config c;
	sc_config(&c);
	c.total_pages = 100;
	c.copy_slots = 2;
	c.max_restore_wait_ns = 0;
	c.prefill_chunk_tokens = 4096;
	c.decode_headroom_pages = 4; /* the 64 decoded tokens */
	struct sc *s = sc_new(&c);
	enum { AGENTS = 8, TURNS = 6 };
	uint32_t ctx[AGENTS];
	kva_handle h[AGENTS];
	int turn[AGENTS], running[AGENTS];
	uint64_t ck_id = 1000;
	for (int a = 0; a < AGENTS; a++) {
		ctx[a] = 96;
		turn[a] = 0;
		h[a] = sc_submit(s, (uint64_t)a * 100, 0, ctx[a]); /* first turn: cold */
		running[a] = 0;
	}
	uint32_t later_turns = 0, restored_turns = 0, done = 0;
	for (int step = 0; step < 5000 && done < AGENTS; step++) {
		sc_step(s, 10 * SC_MS);
		for (uint32_t i = 0; i < s->plan.n_admitted; i++) {
			const kva_admission *ad = &s->admitted[i];
			int a = (int)(ad->handle.id / 100);
			running[a] = 1;
			if (turn[a] > 0) {
				later_turns++;
				restored_turns += ad->how == KVA_ADMIT_RESTORE;
				assert_int_not_equal(ad->how, KVA_ADMIT_RECOMPUTE);
			}
			/* finish the prompt and decode 64 tokens: grow into the reservation */
			uint32_t need = (ctx[a] + 64 + 15) / 16;
			uint32_t have = ad->npages;
			if (need > have)
				assert_int_equal(kva_grow(s->e, ad->handle, need - have, NULL), 0);
		}
		sc_copies_done(s, 0);
		/* the running agents finish their turn: checkpoint, then next turn */
		for (int a = 0; a < AGENTS; a++) {
			if (!running[a])
				continue;
			running[a] = 0;
			assert_int_equal(kva_finish(s->e, h[a]), 0);
			ctx[a] += 64;
			if (++turn[a] == TURNS) {
				done++;
				continue;
			}
			uint64_t key = (uint64_t)a * 100 + (uint64_t)turn[a];
			sc_dir_set(s, key, sc_ckpt(ctx[a], ck_id++, 0)); /* always-write */
			ctx[a] += 32; /* tool output appended */
			h[a] = sc_submit(s, key, key, ctx[a]);
		}
	}
	assert_int_equal(done, AGENTS);
	assert_int_equal(later_turns, AGENTS * (TURNS - 1));
	assert_int_equal(restored_turns, later_turns);
	sc_step(s, 0);
	sc_step(s, 0);
	kva_stats stt = sc_stats(s);
	assert_int_equal(stt.free_pages, stt.total_pages); /* nothing leaked */
	assert_int_equal(stt.draining_pages + stt.reserved_pages + stt.in_use_pages, 0);
	assert_int_equal(stt.finished, AGENTS * TURNS);
	assert_int_equal(stt.fallbacks[KVA_REASON_LEGACY] + stt.fallbacks[KVA_REASON_TOO_LARGE] +
	                         stt.fallbacks[KVA_REASON_WAIT_EXPIRED],
	                 0);
	sc_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(rule08_bounded_wait_warns_once_then_recomputes_and_stops_holding),
		cmocka_unit_test(rule08_expired_waiter_no_longer_holds_others_as_a_restore),
		cmocka_unit_test(rule08_bounded_wait_survives_a_relookup_of_the_blocked_head),
		cmocka_unit_test(rule18_head_timers_and_gauge_follow_the_head),
		cmocka_unit_test(rule18_passed_restore_back_at_the_head_does_not_log_its_start_again),
		cmocka_unit_test(rule14_id_reuse_stale_events_never_touch_new_incarnation),
		cmocka_unit_test(rule16_every_prompt_token_counted_once),
		cmocka_unit_test(rule20_step_cost_does_not_grow_with_waiting_count),
		cmocka_unit_test(rule20_blocked_head_polls_no_lookups),
		cmocka_unit_test(rule21_capabilities_are_probeable),
		cmocka_unit_test(finish_reports_once_and_frees_everything),
		cmocka_unit_test(cancel_in_progress_is_reported_truthfully),
		cmocka_unit_test(cancelled_incarnation_does_not_block_its_id),
		cmocka_unit_test(preempted_then_cancelled_request_ends_cancelled),
		cmocka_unit_test(cancelled_then_preempted_request_ends_cancelled),
		cmocka_unit_test(destroy_with_returns_every_unfinished_request_once),
		cmocka_unit_test(eight_agents_exceeding_the_pool_all_restore_in_turn),
	};
	return cmocka_run_group_tests_name("lifecycle", tests, NULL, NULL);
}
