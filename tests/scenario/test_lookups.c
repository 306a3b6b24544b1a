/* SPDX-License-Identifier: Apache-2.0 */
/* Lookups and manifests: rules retained-manifest, per-lookup-deadline, named-fallbacks-only,
 * eviction-revalidates and wait-logs-and-refreshes. */
#include "scenario.h"

#define KEY 7

static void rule02_one_lookup_per_request_however_long_it_waits(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	kva_handle hog = sc_occupy(s, 1, 90);
	uint32_t before = s->n_lookups;
	kva_handle h = sc_submit(s, 2, KEY, 480);
	kva_handle behind = sc_submit(s, 3, KEY, 480);
	sc_step(s, 0);
	/* issued at ingest, for the head and for the request behind it */
	assert_int_equal(s->n_lookups - before, 2);
	for (int i = 0; i < 500; i++)
		sc_step(s, 10 * SC_MS); /* 5 s of waiting, far past the 1 s lookup deadline */
	assert_int_equal(s->n_lookups - before, 2);
	kva_request_info info;
	assert_int_equal(kva_query(s->e, h, &info), 0);
	assert_int_equal(info.lookups, 1);
	assert_true(info.has_selection); /* the answer is retained */
	assert_int_equal(sc_stats(s).lookups_timed_out, 0);
	assert_int_equal(kva_finish(s->e, hog), 0);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 2);
	(void)behind;
	sc_free(s);
}

static void rule03_lookup_timeout_falls_back_with_its_reason(void **st)
{
	(void)st;
	struct sc *s = sc_default(); /* directory never answers key 5 */
	kva_handle h = sc_submit(s, 1, 5, 100);
	kva_handle behind = sc_submit(s, 2, 0, 100);
	sc_step(s, 0);
	assert_true(s->plan.head_blocked); /* undecided head holds the line */
	assert_null(sc_admitted(s, behind));
	sc_step(s, 999 * SC_MS);
	assert_int_equal(s->plan.n_admitted, 0);
	sc_step(s, 1 * SC_MS);
	const kva_admission *a = sc_admitted(s, h);
	assert_non_null(a);
	assert_int_equal(a->how, KVA_ADMIT_RECOMPUTE);
	assert_int_equal(a->reason, KVA_REASON_LOOKUP_TIMEOUT);
	assert_non_null(sc_admitted(s, behind));
	assert_int_equal(sc_stats(s).fallbacks[KVA_REASON_LOOKUP_TIMEOUT], 1);
	sc_free(s);
}

static void rule03_late_answer_is_ignored_and_counted(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	kva_handle h = sc_submit(s, 1, 5, 100);
	sc_step(s, 0);
	kva_lookup_token t = s->lookups[0].token;
	sc_step(s, 2 * SC_SEC);
	assert_non_null(sc_admitted(s, h));
	kva_manifest m = {.count = 1, .entries = {sc_ckpt(64, 900, 0)}};
	assert_int_equal(kva_lookup_answer(s->e, t, &m), -ESTALE);
	sc_step(s, 0);
	assert_int_equal(sc_stats(s).late_answers, 1);
	assert_int_equal(sc_stats(s).admitted_restore, 0);
	assert_int_equal(s->plan.n_copies, 0);
	sc_free(s);
}

/* Two answers to one lookup, both taken by kva_lookup_answer before the
 * step: the step handles the first; the second, superseded while it was
 * queued, is ignored and counted as late like any stale answer. */
static void rule03_answer_superseded_in_the_queue_is_counted_late(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	kva_handle h = sc_submit(s, 1, 5, 100);
	sc_step(s, 0);
	kva_lookup_token t = s->lookups[0].token;
	kva_manifest hit = {.count = 1, .entries = {sc_ckpt(64, 900, 0)}};
	kva_manifest miss = {.count = 0};
	assert_int_equal(kva_lookup_answer(s->e, t, &hit), 0);
	int rc = kva_lookup_answer(s->e, t, &miss); /* queued or refused: late either way */
	assert_true(rc == 0 || rc == -ESTALE);
	sc_step(s, 0);
	kva_stats x = sc_stats(s);
	assert_int_equal(x.lookups_answered, 1);
	assert_int_equal(x.late_answers, 1);
	assert_int_equal(x.fallbacks[KVA_REASON_MISS], 0); /* the first answer decided */
	assert_int_equal(s->plan.n_copies, 1);
	assert_int_equal(s->copies[0].handle.id, h.id);
	sc_free(s);
}

/* The lookup-latency histogram: a decisive lookup answered 200 ms after it
 * was issued (with a lookup_timeout_ns, whose deadline marks its start). */
static void rule03_answered_lookup_latency_is_measured(void **st)
{
	(void)st;
	struct sc *s = sc_default(); /* lookup_timeout_ns 1 s */
	sc_submit(s, 1, 5, 100);
	sc_step(s, SC_SEC);
	kva_lookup_token t = s->lookups[0].token;
	sc_step(s, 200 * SC_MS);
	kva_manifest m = {.count = 1, .entries = {sc_ckpt(64, 900, 0)}};
	assert_int_equal(kva_lookup_answer(s->e, t, &m), 0);
	sc_step(s, 0);
	kva_stats x = sc_stats(s);
	assert_int_equal(x.lookup_latency.count, 1);
	assert_int_equal(x.lookup_latency.sum_ns, 200 * SC_MS);
	const uint64_t *b = kva_histogram_bounds();
	for (int i = 0; i < KVA_HIST_BUCKETS - 1; i++)
		assert_int_equal(x.lookup_latency.buckets[i], 200 * SC_MS <= b[i] ? 1 : 0);
	sc_free(s);
}

static void rule03_each_lookup_has_its_own_deadline(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	kva_handle a = sc_submit(s, 1, 5, 100);
	sc_step(s, 0);
	sc_step(s, 600 * SC_MS);
	kva_handle b = sc_submit(s, 2, 6, 100);
	sc_step(s, 0);
	sc_step(s, 400 * SC_MS); /* a's deadline, not b's */
	assert_non_null(sc_admitted(s, a));
	assert_null(sc_admitted(s, b));
	sc_step(s, 599 * SC_MS);
	assert_int_equal(sc_state(s, b), KVA_STATE_WAITING);
	sc_step(s, 1 * SC_MS);
	assert_non_null(sc_admitted(s, b));
	sc_free(s);
}

static void rule10_miss_falls_back_with_its_reason(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	kva_handle h = sc_submit(s, 1, 5, 100);
	sc_step(s, 0);
	kva_manifest m = {.count = 0};
	assert_int_equal(kva_lookup_answer(s->e, s->lookups[0].token, &m), 0);
	sc_step(s, 0);
	const kva_admission *a = sc_admitted(s, h);
	assert_non_null(a);
	assert_int_equal(a->reason, KVA_REASON_MISS);
	assert_int_equal(a->recompute_tokens, 100);
	assert_int_equal(sc_stats(s).fallbacks[KVA_REASON_MISS], 1);
	sc_free(s);
}

static void rule10_incompatible_checkpoint_falls_back_with_its_reason(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	kva_checkpoint c = sc_ckpt(64, 900, 0);
	c.compatible = 0;
	sc_dir_set(s, KEY, c);
	kva_handle h = sc_submit(s, 1, KEY, 100);
	sc_step(s, 0);
	const kva_admission *a = sc_admitted(s, h);
	assert_non_null(a);
	assert_int_equal(a->reason, KVA_REASON_INCOMPATIBLE);
	kva_stats stt = sc_stats(s);
	assert_int_equal(stt.fallbacks[KVA_REASON_INCOMPATIBLE], 1);
	assert_int_equal(stt.fallbacks[KVA_REASON_MISS], 0);
	sc_free(s);
}

static void rule10_longest_compatible_checkpoint_is_selected(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	kva_checkpoint longest = sc_ckpt(480, 903, 0);
	longest.compatible = 0;
	sc_dir_add(s, KEY, sc_ckpt(160, 901, 0));
	sc_dir_add(s, KEY, sc_ckpt(320, 902, 0));
	sc_dir_add(s, KEY, longest);
	sc_dir_add(s, KEY, sc_ckpt(640, 904, 0)); /* longer than the prompt */
	sc_submit(s, 1, KEY, 500);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 1);
	assert_int_equal(s->copies[0].checkpoint_id, 902);
	assert_int_equal(s->copies[0].npages, 20);
	sc_free(s);
}

static void rule15_evicted_full_local_selection_relooks_up_and_restores(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, KEY, sc_ckpt(480, 500, 1)); /* full prefix, local */
	kva_handle hog = sc_occupy(s, 1, 90);
	kva_handle h = sc_submit(s, 2, KEY, 480);
	sc_step(s, 0);
	kva_request_info info;
	assert_int_equal(kva_query(s->e, h, &info), 0);
	assert_int_equal(info.selected_location, KVA_LOC_LOCAL);
	/* the local copy goes away while h waits; the store has it externally */
	sc_dir_clear(s);
	sc_dir_set(s, KEY, sc_ckpt(480, 600, 0));
	assert_int_equal(kva_checkpoint_evicted(s->e, 500, 2), 0);
	sc_step(s, 0);
	assert_int_equal(sc_stats(s).revalidations, 1);
	assert_int_equal(kva_query(s->e, h, &info), 0);
	assert_int_equal(info.lookups, 2);
	assert_int_equal(info.selected_location, KVA_LOC_EXTERNAL);
	assert_int_equal(kva_finish(s->e, hog), 0);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 1);
	assert_int_equal(s->copies[0].checkpoint_id, 600);
	sc_copies_done(s, 0);
	sc_step(s, 0);
	const kva_admission *a = sc_admitted(s, h);
	assert_non_null(a);
	assert_int_equal(a->how, KVA_ADMIT_RESTORE);
	assert_int_equal(sc_stats(s).admitted_recompute, 1); /* the hog only */
	sc_free(s);
}

static void rule15_evicted_partial_local_selection_relooks_up_and_restores(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, KEY, sc_ckpt(320, 500, 1)); /* partial prefix, local */
	kva_handle hog = sc_occupy(s, 1, 90);
	kva_handle h = sc_submit(s, 2, KEY, 480);
	sc_step(s, 0);
	sc_dir_clear(s);
	sc_dir_set(s, KEY, sc_ckpt(320, 600, 0));
	assert_int_equal(kva_checkpoint_evicted(s->e, 500, 5), 0);
	sc_step(s, 0);
	assert_int_equal(kva_finish(s->e, hog), 0);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 1);
	sc_copies_done(s, 0);
	sc_step(s, 0);
	const kva_admission *a = sc_admitted(s, h);
	assert_non_null(a);
	assert_int_equal(a->how, KVA_ADMIT_RESTORE);
	assert_int_equal(a->restored_tokens, 320);
	assert_int_equal(a->recompute_tokens, 160);
	sc_free(s);
}

/* The store dropped the external checkpoint a waiting restore selected (a
 * fleet directory reports BlockRemoved): it looks up again instead of
 * copying what is gone. */
static void rule15_evicted_external_selection_relooks_up(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	kva_handle big = sc_occupy(s, 100, 95);
	sc_dir_set(s, 8, sc_ckpt(160, 900, 0));
	kva_handle h = sc_submit(s, 1, 8, 320); /* waits for capacity */
	sc_step(s, 0);
	assert_true(s->plan.head_blocked);
	uint32_t lookups = s->n_lookups;
	sc_dir_clear(s);
	sc_dir_set(s, 8, sc_ckpt(96, 901, 0)); /* what the store has now */
	assert_int_equal(kva_checkpoint_evicted(s->e, 900, 2), 0);
	sc_step(s, 0);
	assert_int_equal(s->n_lookups, lookups + 1);
	kva_request_info i;
	assert_int_equal(kva_query(s->e, h, &i), 0);
	assert_int_equal(i.selected_position, 96);
	assert_int_equal(sc_stats(s).revalidations, 1);
	assert_int_equal(kva_finish(s->e, big), 0);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 1);
	assert_int_equal(s->copies[0].checkpoint_id, 901);
	sc_free(s);
}

static void rule15_unrelated_or_older_eviction_touches_nobody(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	kva_checkpoint c = sc_ckpt(320, 500, 1);
	c.epoch = 7;
	sc_dir_set(s, KEY, c);
	sc_occupy(s, 1, 90);
	kva_handle h = sc_submit(s, 2, KEY, 480);
	sc_step(s, 0);
	uint32_t lookups = s->n_lookups;
	assert_int_equal(kva_checkpoint_evicted(s->e, 501, 99), 0); /* another checkpoint */
	assert_int_equal(kva_checkpoint_evicted(s->e, 500, 7), 0);  /* not newer than ours */
	sc_step(s, 0);
	assert_int_equal(s->n_lookups, lookups);
	assert_int_equal(sc_stats(s).revalidations, 0);
	assert_int_equal(s->plan.records_touched, 2); /* the candidate + the head */
	kva_request_info info;
	assert_int_equal(kva_query(s->e, h, &info), 0);
	assert_int_equal(info.selected_location, KVA_LOC_LOCAL);
	sc_free(s);
}

/* Many requests share one checkpoint (a system prompt). An eviction that
 * is not newer than any of their copies, repeated or stale, reads one
 * record, not one per sharer; a newer one revalidates exactly those older. */
static void rule15_repeated_eviction_of_a_shared_checkpoint_walks_nobody(void **st)
{
	(void)st;
	enum { N = 20 };
	struct sc *s = sc_default();
	kva_checkpoint c = sc_ckpt(320, 500, 1);
	c.epoch = 7;
	sc_dir_set(s, KEY, c);
	sc_occupy(s, 1, 90);
	for (int i = 0; i < N; i++)
		sc_submit(s, 2 + (uint64_t)i, KEY, 480);
	sc_step(s, 0);
	c.epoch = 9; /* the directory's copy is newer for those that ask now */
	sc_dir_clear(s);
	sc_dir_set(s, KEY, c);
	for (int i = 0; i < N; i++)
		sc_submit(s, 100 + (uint64_t)i, KEY, 480);
	sc_step(s, 0);
	assert_true(s->plan.head_blocked);

	assert_int_equal(kva_checkpoint_evicted(s->e, 500, 7), 0); /* older than all */
	sc_step(s, 0);
	assert_int_equal(sc_stats(s).revalidations, 0);
	assert_true(s->plan.records_touched <= 2); /* the list's first + the head */

	assert_int_equal(kva_checkpoint_evicted(s->e, 500, 8), 0); /* the first N only */
	sc_step(s, 0);
	assert_int_equal(sc_stats(s).revalidations, N); /* they reselect epoch 9 */
	assert_int_equal(kva_checkpoint_evicted(s->e, 500, 8), 0); /* resent */
	sc_step(s, 0);
	assert_int_equal(sc_stats(s).revalidations, N);
	assert_true(s->plan.records_touched <= 2);

	assert_int_equal(kva_checkpoint_evicted(s->e, 500, 10), 0); /* newer than all */
	sc_step(s, 0);
	assert_int_equal(sc_stats(s).revalidations, 3 * N);
	sc_free(s);
}

/* Two requests share one checkpoint id with different epochs (7 and 9). An
 * eviction at epoch 9 is newer than the first's copy only: the first looks
 * up again, the second, which selected epoch 9 itself, is left alone. */
static void rule15_eviction_at_a_sharers_own_epoch_leaves_that_sharer_alone(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	kva_checkpoint c = sc_ckpt(320, 500, 0);
	c.epoch = 7;
	sc_dir_set(s, KEY, c);
	sc_occupy(s, 1, 90);
	kva_handle old = sc_submit(s, 2, KEY, 480);
	sc_step(s, 0);
	c.epoch = 9;
	sc_dir_clear(s);
	sc_dir_set(s, KEY, c);
	kva_handle cur = sc_submit(s, 3, KEY, 480);
	sc_step(s, 0);
	assert_true(s->plan.head_blocked);
	uint32_t asked = s->n_lookups;
	assert_int_equal(kva_checkpoint_evicted(s->e, 500, 9), 0);
	sc_step(s, 0);
	assert_int_equal(sc_stats(s).revalidations, 1);
	assert_int_equal(s->n_lookups, asked + 1);
	assert_int_equal(s->lookups[asked].token.id, old.id);
	kva_request_info info;
	assert_int_equal(kva_query(s->e, cur, &info), 0);
	assert_int_equal(info.lookups, 1); /* never asked again */
	assert_true(info.has_selection);
	sc_free(s);
}

/* What one step looks at of a pending eviction's sharers (lookup.c), and
 * how many requests at the queue's front it checks besides (admit.c). */
#define EVICT_STEP 1024
#define EVICT_FRONT 128

/* On s: n requests of `prompt` tokens (handles into h, if given) waiting
 * behind a hog of `hog_pages`, all selecting local checkpoint 500 at
 * `epoch`, a full hit, blocked. Returns the hog. */
static kva_handle sharers(struct sc *s, kva_handle *h, uint32_t n, uint32_t prompt,
                          uint64_t epoch, uint32_t hog_pages)
{
	kva_checkpoint c = sc_ckpt(prompt, 500, 1);
	c.epoch = epoch;
	sc_dir_set(s, KEY, c);
	kva_handle hog = sc_occupy(s, 1, hog_pages);
	for (uint32_t i = 0; i < n; i++) {
		kva_handle x = sc_submit(s, 2 + i, KEY, prompt);
		if (h)
			h[i] = x;
	}
	sc_step(s, 0);
	assert_true(s->plan.head_blocked);
	return hog;
}

/* The default engine with n such requests of 480 tokens (30 pages) behind a
 * hog of 90 pages; *hog (if asked) is the hog. */
static struct sc *shared_local(kva_handle *h, uint32_t n, uint64_t epoch, kva_handle *hog)
{
	struct sc *s = sc_default();
	kva_handle occupy = sharers(s, h, n, 480, epoch, 90);
	if (hog)
		*hog = occupy;
	return s;
}

/* An engine of 4,000 pages with room for as many running requests. */
static struct sc *big_pool(void)
{
	kva_config cfg;
	sc_config(&cfg);
	cfg.total_pages = 4000;
	cfg.max_running = 4096;
	return sc_new(&cfg);
}

/* Steps until the step says nothing is left; each step revalidates at most
 * its budget. Returns the steps taken. */
static uint32_t step_out_evictions(struct sc *s)
{
	uint32_t steps = 0;
	uint64_t before = sc_stats(s).revalidations;
	do {
		sc_step(s, SC_MS);
		uint64_t now = sc_stats(s).revalidations;
		assert_true(now - before <= EVICT_STEP + EVICT_FRONT + 1); /* + the head at admission */
		before = now;
		assert_true(++steps < 100);
	} while (s->plan.backlog);
	return steps;
}

/* The directory lists checkpoint 500 at epoch `found` from now on; it is
 * evicted at `epoch`. */
static void evict_listing(struct sc *s, uint64_t epoch, uint64_t found)
{
	kva_checkpoint c = sc_ckpt(480, 500, 1);
	c.epoch = found;
	sc_dir_clear(s);
	sc_dir_set(s, KEY, c);
	assert_int_equal(kva_checkpoint_evicted(s->e, 500, epoch), 0);
}

/* A request for another prompt whose directory still lists checkpoint 500
 * at epoch 7: one that has not heard of an eviction yet. */
static kva_handle stale_sharer(struct sc *s)
{
	kva_checkpoint c = sc_ckpt(480, 500, 1);
	c.epoch = 7;
	sc_dir_set(s, KEY + 1, c);
	return sc_submit(s, 9000, KEY + 1, 480);
}

/* Each of h[0, n) still waiting has asked the directory `times` times and
 * selected what it answered. */
static void assert_lookups(struct sc *s, const kva_handle *h, uint32_t n, uint32_t times)
{
	for (uint32_t i = 0; i < n; i++) {
		kva_request_info info;
		if (kva_query(s->e, h[i], &info) == 0) {
			assert_int_equal(info.lookups, times);
			assert_true(info.has_selection);
		}
	}
}

/* A checkpoint shared by more waiting requests than a step looks at (a
 * system prompt) is revalidated over several steps, so no step costs O(k) (rule
 * step-never-walks-queue): each sharer looks up again exactly once, the step
 * reports backlog until the walk is done, and the list's floor is right after
 * it. */
static void rule15_eviction_of_a_widely_shared_checkpoint_is_spread_over_steps(void **st)
{
	(void)st;
	enum { N = 2500 };
	static kva_handle h[N];
	struct sc *s = shared_local(h, N, 7, NULL);
	uint64_t issued = sc_stats(s).lookups_issued;
	evict_listing(s, 8, 9); /* they find epoch 9 when they ask again */
	assert_int_equal(step_out_evictions(s), (N + EVICT_STEP - 1) / EVICT_STEP);
	assert_int_equal(sc_stats(s).revalidations, N);
	assert_int_equal(sc_stats(s).lookups_issued - issued, N);
	assert_lookups(s, h, N, 2);
	assert_int_equal(sc_stats(s).waiting, N);
	/* all selected epoch 9 now: the eviction resent reads one record */
	assert_int_equal(kva_checkpoint_evicted(s->e, 500, 8), 0);
	sc_step(s, SC_MS);
	assert_true(s->plan.records_touched <= 2);
	assert_int_equal(sc_stats(s).revalidations, N);
	sc_assert_conserved(s);
	sc_free(s);
}

/* Twenty checkpoints, each shared by 100 waiting requests, evicted at once:
 * any number of walks may be pending, and they share the step's budget (rule
 * step-never-walks-queue). Before, eight walks were kept pending and the ninth
 * to twentieth each ran whole in the step of its eviction (1,200 records in one
 * step on top of the budget). */
static void rule15_many_pending_evictions_share_one_budget(void **st)
{
	(void)st;
	enum { K = 20, PER = 100 };
	struct sc *s = sc_default();
	sc_occupy(s, 1, 90);
	for (uint32_t k = 0; k < K; k++) {
		kva_checkpoint c = sc_ckpt(480, 500 + k, 1);
		c.epoch = 7;
		sc_dir_set(s, KEY + k, c);
		for (uint32_t i = 0; i < PER; i++)
			sc_submit(s, 2 + k * PER + i, KEY + k, 480);
	}
	sc_step(s, 0);
	assert_true(s->plan.head_blocked);
	uint64_t issued = sc_stats(s).lookups_issued;
	sc_dir_clear(s);
	for (uint32_t k = 0; k < K; k++) {
		kva_checkpoint c = sc_ckpt(480, 500 + k, 1);
		c.epoch = 9; /* what they find when they ask again */
		sc_dir_set(s, KEY + k, c);
		assert_int_equal(kva_checkpoint_evicted(s->e, 500 + k, 8), 0);
	}
	assert_int_equal(step_out_evictions(s), (K * PER + EVICT_STEP - 1) / EVICT_STEP);
	assert_int_equal(sc_stats(s).revalidations, K * PER);
	assert_int_equal(sc_stats(s).lookups_issued - issued, K * PER);
	assert_int_equal(sc_stats(s).waiting, K * PER);
	sc_assert_conserved(s);
	sc_free(s);
}

/* The walk goes from the most recently indexed sharer, so the head of the
 * queue is the last it reaches. Capacity comes back in the eviction's
 * step: the head must not be admitted from the lost local copy on the way
 * (the queue's front looks up again first); it restores from the store's
 * copy instead, and no request is ever admitted LOCAL. */
static void rule15_a_sharer_the_walk_has_not_reached_is_never_admitted_from_the_lost_copy(void **st)
{
	(void)st;
	enum { N = 1500 };
	static kva_handle h[N];
	kva_handle hog;
	struct sc *s = shared_local(h, N, 7, &hog);
	sc_dir_clear(s);
	sc_dir_set(s, KEY, sc_ckpt(480, 600, 0)); /* the store's copy */
	assert_int_equal(kva_checkpoint_evicted(s->e, 500, 8), 0);
	assert_int_equal(kva_finish(s->e, hog), 0); /* room for three restores now */
	sc_step(s, 0);
	/* the front of the queue (the walk had not reached it) looked up again
	 * at the step's start; the directory's answers (from its callback) came
	 * in this step, and the first three import the store's copy (90 of the
	 * 100 pages) */
	assert_int_equal(s->plan.n_admitted, 0);
	assert_int_equal(sc_stats(s).revalidations, EVICT_STEP + EVICT_FRONT);
	assert_int_equal(s->plan.n_copies, 3);
	for (int i = 0; i < 3; i++)
		assert_int_equal(s->copies[i].checkpoint_id, 600);
	kva_request_info info;
	assert_int_equal(kva_query(s->e, h[0], &info), 0);
	assert_int_equal(info.lookups, 2);
	assert_int_equal(info.state, KVA_STATE_IMPORTING);
	const kva_admission *a = NULL;
	for (int i = 0; i < 10 && !(a = sc_admitted(s, h[0])); i++) {
		sc_copies_done(s, 0);
		sc_step(s, SC_MS);
		for (uint32_t k = 0; k < s->plan.n_admitted; k++)
			assert_int_not_equal(s->admitted[k].how, KVA_ADMIT_LOCAL);
	}
	assert_non_null(a);
	assert_int_equal(a->how, KVA_ADMIT_RESTORE);
	assert_int_equal(sc_stats(s).admitted_local, 0);
	sc_free(s);
}

/* Sharers cancelled while a walk is pending, the one it was about to look
 * at among them, do not end the walk early: every other sharer still
 * looks up again, once. */
static void rule15_cancelled_sharers_do_not_cut_a_pending_walk_short(void **st)
{
	(void)st;
	enum { N = 2500 };
	static kva_handle h[N];
	struct sc *s = shared_local(h, N, 7, NULL);
	evict_listing(s, 8, 9);
	sc_step(s, SC_MS);
	/* the walk looked at h[N - 1] .. h[N - 1024] (next: h[N - 1025]), and
	 * the front of the queue at h[0] .. h[127] */
	assert_int_equal(sc_stats(s).revalidations, EVICT_STEP + EVICT_FRONT);
	assert_true(s->plan.backlog);
	uint32_t cancelled = 0;
	for (uint32_t i = EVICT_FRONT; i + EVICT_STEP < N; i++)
		if (i % 3 == 0 || i + EVICT_STEP + 1 == N || i + EVICT_STEP + 2 == N) {
			assert_int_equal(kva_cancel(s->e, h[i]), 0);
			cancelled++;
		}
	step_out_evictions(s);
	assert_int_equal(sc_stats(s).revalidations, N - cancelled);
	assert_lookups(s, h, N, 2);
	sc_assert_conserved(s);
	sc_free(s);
}

/* A newer eviction arriving while a walk is pending makes the rest of it
 * look at the newer epoch, and one more pass follows: sharers the walk kept
 * before (their copy was newer than the first eviction) are looked at again,
 * and every sharer older than the second eviction looks up again exactly
 * once. */
static void rule15_a_newer_eviction_during_a_walk_covers_every_older_copy(void **st)
{
	(void)st;
	enum { NA = 1200, NB = 1200 };
	static kva_handle h[NA + NB];
	struct sc *s = shared_local(h, NA, 7, NULL);
	kva_checkpoint c = sc_ckpt(480, 500, 1);
	c.epoch = 9;
	sc_dir_clear(s);
	sc_dir_set(s, KEY, c);
	for (uint32_t i = 0; i < NB; i++)
		h[NA + i] = sc_submit(s, 5000 + i, KEY, 480);
	sc_step(s, 0);
	evict_listing(s, 8, 11); /* they find epoch 11 when they ask again */
	sc_step(s, SC_MS); /* walked 1024 of the epoch-9 sharers: all kept */
	assert_int_equal(sc_stats(s).revalidations, EVICT_FRONT); /* the queue's front */
	assert_int_equal(kva_checkpoint_evicted(s->e, 500, 10), 0);
	step_out_evictions(s);
	assert_int_equal(sc_stats(s).revalidations, NA + NB);
	assert_lookups(s, h, NA + NB, 2);
	sc_free(s);
}

/* n sharers at epoch 7, the checkpoint evicted at 8 (the directory lists 9
 * now) and one step of the walk taken; then a request joins, indexed under
 * a copy at epoch 7 (*late). */
static struct sc *walk_joined_by_a_stale_sharer(uint32_t n, kva_handle *late)
{
	struct sc *s = shared_local(NULL, n, 7, NULL);
	evict_listing(s, 8, 9);
	sc_step(s, SC_MS);
	assert_true(s->plan.backlog);
	*late = stale_sharer(s);
	return s;
}

/* A request indexed while a walk is pending, with a copy older than the
 * eviction (a directory that had not heard of it yet), lies ahead of the
 * walk's cursor: the floor the finished walk leaves must stay below it, so
 * the eviction resent still finds it. */
static void rule15_a_sharer_indexed_during_a_walk_keeps_the_floor_below_its_copy(void **st)
{
	(void)st;
	enum { N = 1500 };
	kva_handle late;
	struct sc *s = walk_joined_by_a_stale_sharer(N, &late);
	step_out_evictions(s);
	uint64_t revalidated = sc_stats(s).revalidations;
	assert_int_equal(revalidated, N);
	assert_int_equal(kva_checkpoint_evicted(s->e, 500, 8), 0); /* resent */
	sc_step(s, SC_MS);
	assert_int_equal(sc_stats(s).revalidations, revalidated + 1);
	assert_lookups(s, &late, 1, 2);
	sc_free(s);
}

/* The same sharer, with the eviction resent while the walk is still
 * pending: the resend is not covered by the walk (the sharer is ahead of
 * its cursor), so one more pass follows and finds it. */
static void rule15_an_eviction_resent_during_a_walk_finds_a_sharer_indexed_since(void **st)
{
	(void)st;
	enum { N = 2500 };
	kva_handle late;
	struct sc *s = walk_joined_by_a_stale_sharer(N, &late);
	sc_step(s, SC_MS);
	assert_true(s->plan.backlog); /* still walking */
	assert_int_equal(kva_checkpoint_evicted(s->e, 500, 8), 0); /* resent */
	step_out_evictions(s);
	assert_int_equal(sc_stats(s).revalidations, N + 1);
	assert_lookups(s, &late, 1, 2);
	sc_free(s);
}

/* A checkpoint evicted again (each time newer) before a pass over its
 * sharers is done, as a hot shared prefix evicted and stored again in a
 * churning store: the walk goes on rather than starting over at the front,
 * so every sharer looks up again, not only the first ones; and once the
 * evictions stop the walk ends within two passes. */
static void rule15_evictions_faster_than_a_walk_still_reach_every_sharer(void **st)
{
	(void)st;
	enum { N = 3000 };
	static kva_handle h[N];
	struct sc *s = shared_local(h, N, 7, NULL);
	uint64_t ep = 8;
	for (int round = 0; round < 20; round++, ep += 2) {
		evict_listing(s, ep, ep + 1); /* dropped, and stored again newer */
		sc_step(s, SC_MS);
		sc_step(s, SC_MS);
	}
	uint32_t never = 0;
	for (uint32_t i = 0; i < N; i++) {
		kva_request_info info;
		assert_int_equal(kva_query(s->e, h[i], &info), 0);
		never += info.lookups == 1;
	}
	assert_int_equal(never, 0);
	uint32_t steps = step_out_evictions(s);
	assert_true(steps <= 2 * ((N + EVICT_STEP - 1) / EVICT_STEP) + 1);
	/* all selected the last copy: the last eviction resent reads one record */
	uint64_t revalidated = sc_stats(s).revalidations;
	assert_int_equal(kva_checkpoint_evicted(s->e, 500, ep - 2), 0);
	sc_step(s, SC_MS);
	assert_int_equal(sc_stats(s).revalidations, revalidated);
	assert_false(s->plan.backlog);
	sc_assert_conserved(s);
	sc_free(s);
}

/* The walk starts from the most recently indexed sharers; a request it has
 * not reached looks up again when admission gets to it. With a directory
 * that answers a step later, the front of the queue must not look up one
 * request per step: the first requests of the queue look up together at
 * every step of a walk, so admission goes on at more than one a step. */
static void rule15_the_front_of_the_queue_looks_up_again_first_during_a_walk(void **st)
{
	(void)st;
	enum { N = 1500 }; /* more than a step's walk; lookups fit SC_MAX */
	static kva_handle h[N];
	struct sc *s = big_pool();
	kva_handle hog = sharers(s, h, N, 16, 7, 4000); /* one page each */
	sc_dir_clear(s); /* from now on the test answers, a step later */
	uint32_t answered = s->n_lookups;
	assert_int_equal(kva_checkpoint_evicted(s->e, 500, 8), 0);
	assert_int_equal(kva_finish(s->e, hog), 0); /* room for all */
	kva_checkpoint c = sc_ckpt(16, 500, 1);
	c.epoch = 9;
	kva_manifest m = {.count = 1, .entries = {c}};
	uint32_t admitted = 0;
	for (int step = 0; step < 2; step++) { /* the walk has not reached the front */
		admitted += (uint32_t)sc_step(s, SC_MS);
		for (; answered < s->n_lookups; answered++)
			assert_int_equal(kva_lookup_answer(s->e, s->lookups[answered].token, &m), 0);
	}
	assert_true(admitted >= 100);
	kva_request_info info;
	assert_int_equal(kva_query(s->e, h[0], &info), 0);
	assert_int_equal(info.lookups, 2);
	assert_int_equal(info.state, KVA_STATE_RUNNING);
	sc_free(s);
}

/* Admission may reach past the queue's front that a step checks, before
 * the walk does (here with a directory answering from its callback and room
 * for everyone): each restore it admits is checked against the pending
 * eviction first, so none is admitted from the lost copy. The lost copy
 * covered the whole prompt (32 tokens), the directory now lists a shorter
 * one (16): every admission must serve 16. */
static void rule15_admission_never_takes_a_copy_a_pending_walk_made_stale(void **st)
{
	(void)st;
	enum { N = 1500 };
	struct sc *s = big_pool();
	kva_handle hog = sharers(s, NULL, N, 32, 7, 4000);
	kva_checkpoint c = sc_ckpt(16, 500, 1);
	c.epoch = 9;
	sc_dir_clear(s);
	sc_dir_set(s, KEY, c);
	assert_int_equal(kva_checkpoint_evicted(s->e, 500, 8), 0);
	assert_int_equal(kva_finish(s->e, hog), 0);
	uint32_t admitted = 0;
	for (int step = 0; step < 4; step++) {
		admitted += (uint32_t)sc_step(s, SC_MS);
		for (uint32_t k = 0; k < s->plan.n_admitted; k++) {
			assert_int_equal(s->admitted[k].how, KVA_ADMIT_LOCAL);
			assert_int_equal(s->admitted[k].local_tokens, 16);
		}
	}
	assert_int_equal(admitted, N);
	sc_free(s);
}

/* A sharer the walk has not reached yet whose host states a shorter local
 * checkpoint (rule host-local-checkpoints) keeps its selection, the copy the
 * pending eviction made stale, and is indexed again at the list's front, behind
 * the walk's cursor: the walk must still make it look up again, or once the
 * walk is done admission takes the lost copy. */
static void rule15_a_sharer_reindexed_before_the_walk_reaches_it_still_looks_up_again(void **st)
{
	(void)st;
	enum { N = 1500, V = 300 }; /* V: past the queue's front, before the walk */
	static kva_handle h[N];
	struct sc *s = big_pool();
	kva_handle hog = sharers(s, h, N, 32, 7, 4000); /* full local hits of 32 tokens */
	kva_checkpoint c = sc_ckpt(16, 500, 1);
	c.epoch = 9;
	sc_dir_clear(s);
	sc_dir_set(s, KEY, c); /* the store has a shorter copy now */
	assert_int_equal(kva_checkpoint_evicted(s->e, 500, 8), 0);
	sc_step(s, SC_MS);
	assert_true(s->plan.backlog);
	kva_request_info info;
	assert_int_equal(kva_query(s->e, h[V], &info), 0);
	assert_int_equal(info.lookups, 1); /* not reached yet */
	kva_checkpoint mine = sc_ckpt(16, 700, 1);
	assert_int_equal(kva_local_checkpoint(s->e, h[V], &mine), 0);
	step_out_evictions(s);
	assert_int_equal(kva_query(s->e, h[V], &info), 0);
	assert_int_equal(info.lookups, 2);
	assert_int_equal(sc_stats(s).revalidations, N);
	assert_int_equal(kva_finish(s->e, hog), 0);
	const kva_admission *a = NULL;
	for (int i = 0; i < 4 && !a; i++) {
		sc_step(s, SC_MS);
		a = sc_admitted(s, h[V]);
	}
	assert_non_null(a);
	assert_int_equal(a->how, KVA_ADMIT_LOCAL);
	assert_int_equal(a->local_tokens, 16); /* never the lost copy's 32 */
	sc_free(s);
}

static void rule15_local_selection_is_admitted_without_a_copy(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, KEY, sc_ckpt(320, 500, 1));
	kva_handle h = sc_submit(s, 1, KEY, 480);
	sc_step(s, 0);
	const kva_admission *a = sc_admitted(s, h);
	assert_non_null(a);
	assert_int_equal(a->how, KVA_ADMIT_LOCAL);
	assert_int_equal(a->local_tokens, 320);
	assert_int_equal(s->plan.n_copies, 0);
	sc_free(s);
}

struct logs {
	int n;
};

static void rule18_wait_logs_at_most_once_per_interval_and_refreshes(void **st)
{
	(void)st;
	kva_config c;
	sc_config(&c);
	c.max_restore_wait_ns = 0; /* unbounded: only logs and refreshes */
	c.wait_log_interval_ns = 30 * SC_SEC;
	c.lookup_refresh_ns = 20 * SC_SEC;
	struct sc *s = sc_new(&c);
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	kva_handle hog = sc_occupy(s, 1, 90);
	kva_handle h = sc_submit(s, 2, KEY, 480);
	sc_step(s, 0);
	for (int i = 0; i < 1000; i++)
		sc_step(s, 100 * SC_MS); /* 100 s */
	/* once when the wait begins, then at most once per interval: at 0, 30, 60, 90 s */
	assert_int_equal(s->n_logs, 4);
	assert_int_equal(s->n_warn, 0);
	kva_stats stt = sc_stats(s);
	assert_int_equal(stt.wait_logs, 4);
	assert_int_equal(stt.refreshes, 5); /* at 20, 40, 60, 80, 100 s */
	kva_request_info info;
	assert_int_equal(kva_query(s->e, h, &info), 0);
	assert_true(info.has_selection); /* refreshing never dropped the manifest */
	assert_int_equal(info.state, KVA_STATE_WAITING);
	/* an unanswered refresh keeps the retained manifest */
	sc_dir_clear(s);
	for (int i = 0; i < 200; i++)
		sc_step(s, 100 * SC_MS);
	assert_int_equal(kva_query(s->e, h, &info), 0);
	assert_true(info.has_selection);
	assert_int_equal(kva_finish(s->e, hog), 0);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 1);
	sc_free(s);
}

/* Capacity-wait status: how many restores wait for capacity, how long the
 * blocked head has waited, in stats and metrics; the wait's first log line. */
static void rule18_capacity_wait_status_in_stats_metrics_and_log(void **st)
{
	(void)st;
	kva_config c;
	sc_config(&c);
	c.max_restore_wait_ns = 0;
	c.wait_log_interval_ns = 30 * SC_SEC;
	struct sc *s = sc_new(&c);
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	kva_handle hog = sc_occupy(s, 1, 90);
	sc_submit(s, 2, KEY, 480);
	sc_submit(s, 3, KEY, 480);
	sc_submit(s, 4, 0, 16); /* no checkpoint: not a restore */
	sc_step(s, 0);
	kva_stats stt = sc_stats(s);
	assert_int_equal(stt.restores_waiting, 2);
	assert_int_equal(stt.capacity_wait_ns, 0); /* blocked since this step */
	assert_int_equal(s->n_logs, 1);           /* the wait begins */
	assert_non_null(strstr(s->last_log, "request 2 starts waiting"));
	for (int i = 0; i < 50; i++)
		sc_step(s, 100 * SC_MS);
	stt = sc_stats(s);
	assert_int_equal(stt.capacity_wait_ns, 5 * SC_SEC);
	char text[4096];
	kva_stats_format(&stt, text, sizeof(text));
	assert_non_null(strstr(text, "kvadmit_restores_waiting 2\n"));
	assert_non_null(strstr(text, "kvadmit_capacity_wait_seconds 5.000000000\n"));
	assert_int_equal(kva_finish(s->e, hog), 0);
	sc_step(s, SC_MS); /* both restores reserve and import */
	stt = sc_stats(s);
	assert_int_equal(stt.restores_waiting, 0);
	assert_int_equal(stt.capacity_wait_ns, 0);
	sc_free(s);
}

/* A restore blocked at the head behind a hog, refreshing every 20 s, with a
 * request behind it; the directory's next answer is `m`. */
static struct sc *refresh_setup(const kva_manifest *m, kva_handle *h, kva_handle *behind,
				kva_handle *hog)
{
	kva_config c;
	sc_config(&c);
	c.max_restore_wait_ns = 0;
	c.wait_log_interval_ns = 0;
	c.lookup_refresh_ns = 20 * SC_SEC;
	c.prefill_chunk_tokens = 64; /* as a recompute it would start with 4 pages */
	struct sc *s = sc_new(&c);
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	*hog = sc_occupy(s, 1, 90);
	*h = sc_submit(s, 2, KEY, 480); /* needs 30 + 0 pages: blocked */
	*behind = sc_submit(s, 3, 0, 16);  /* 1 page: fits, but FCFS holds it */
	sc_step(s, 0);
	sc_step(s, SC_SEC);
	assert_true(s->plan.head_blocked);
	assert_null(sc_admitted(s, *behind));
	s->dir[0].m = *m; /* what the directory says from now on */
	return s;
}

/* Steps past the refresh (due at 21 s) and returns what h looks like. */
static kva_request_info after_refresh(struct sc *s, kva_handle h)
{
	for (int i = 0; i < 25; i++)
		sc_step(s, SC_SEC);
	kva_request_info info;
	assert_int_equal(kva_query(s->e, h, &info), 0);
	return info;
}

static void rule18_refresh_that_no_longer_lists_the_checkpoint_ends_the_restore_wait(void **st)
{
	(void)st;
	kva_manifest gone = {.count = 0};
	kva_handle h, behind, hog;
	struct sc *s = refresh_setup(&gone, &h, &behind, &hog);
	int admitted_behind = 0;
	for (int i = 0; i < 25 && !admitted_behind; i++) { /* the refresh is due at 21 s */
		sc_step(s, SC_SEC);
		admitted_behind = sc_admitted(s, behind) != NULL;
	}
	assert_int_equal(sc_stats(s).refreshes, 1);
	kva_request_info info;
	assert_int_equal(kva_query(s->e, h, &info), 0);
	assert_false(info.has_selection); /* left the restore wait at once */
	assert_int_equal(info.reason, KVA_REASON_MISS);
	assert_int_equal(sc_stats(s).fallbacks[KVA_REASON_MISS], 1);
	/* it no longer holds the line as a restore: it recomputes from its
	 * first chunk, and the request behind it follows */
	assert_true(admitted_behind);
	assert_int_equal(sc_state(s, h), KVA_STATE_RUNNING);
	assert_int_equal(kva_finish(s->e, hog), 0);
	for (int i = 0; i < 3; i++) {
		sc_step(s, SC_MS);
		assert_int_equal(s->plan.n_copies, 0); /* never copies the vanished checkpoint */
	}
	assert_int_equal(sc_stats(s).copy_jobs, 0);
	sc_free(s);
}

/* A refresh has no deadline: one the directory never answers is superseded
 * by the next interval's, so a checkpoint that vanishes later is still
 * noticed (one lost answer used to end refreshing for the whole wait, and
 * the request then copied the vanished checkpoint). Found by mutation
 * testing. */
static void rule18_unanswered_refresh_does_not_stop_later_refreshes(void **st)
{
	(void)st;
	kva_config c;
	sc_config(&c);
	c.max_restore_wait_ns = 0;
	c.wait_log_interval_ns = 0;
	c.lookup_refresh_ns = 20 * SC_SEC;
	struct sc *s = sc_new(&c);
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	kva_handle hog = sc_occupy(s, 1, 90);
	kva_handle h = sc_submit(s, 2, KEY, 480); /* 30 pages: blocked */
	sc_step(s, 0);
	sc_dir_clear(s); /* the first refresh (20 s) is never answered */
	for (int i = 0; i < 25; i++)
		sc_step(s, SC_SEC);
	assert_int_equal(sc_stats(s).refreshes, 1);
	uint32_t lost = s->n_lookups - 1;
	kva_manifest gone = {.count = 0}; /* back, and 900 is gone */
	s->dir[s->n_dir++] = (struct sc_dir_entry){KEY, gone};
	for (int i = 0; i < 20; i++) /* the 40 s refresh */
		sc_step(s, SC_SEC);
	assert_int_equal(sc_stats(s).refreshes, 2);
	kva_request_info info;
	assert_int_equal(kva_query(s->e, h, &info), 0);
	assert_false(info.has_selection); /* left the restore wait */
	/* the lost refresh's answer, arriving now, is refused as superseded */
	kva_manifest back = {.count = 1, .entries = {sc_ckpt(320, 900, 0)}};
	assert_int_equal(kva_lookup_answer(s->e, s->lookups[lost].token, &back), -ESTALE);
	assert_int_equal(sc_stats(s).late_answers, 1);
	assert_int_equal(kva_finish(s->e, hog), 0);
	for (int i = 0; i < 3; i++)
		sc_step(s, SC_MS);
	assert_int_equal(sc_stats(s).copy_jobs, 0); /* never copies the vanished checkpoint */
	assert_int_equal(sc_state(s, h), KVA_STATE_RUNNING);
	sc_free(s);
}

/* A refresh the directory answers within the lookup timeout is not lost,
 * even when that takes longer than the refresh interval (here 1.5 s against
 * 1 s, with a 5 s timeout): its answer must still count. Superseding every
 * refresh still out after one interval refused every answer of such a
 * directory as late, so the blocked restore never heard that its checkpoint
 * vanished, and copied it once capacity returned. */
static void rule18_refresh_slower_than_the_interval_is_still_answered(void **st)
{
	(void)st;
	kva_config c;
	sc_config(&c);
	c.max_restore_wait_ns = 0;
	c.wait_log_interval_ns = 0;
	c.lookup_timeout_ns = 5 * SC_SEC;
	c.lookup_refresh_ns = 1 * SC_SEC;
	struct sc *s = sc_new(&c);
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	kva_handle hog = sc_occupy(s, 1, 90);
	kva_handle h = sc_submit(s, 2, KEY, 480); /* 30 pages: blocked */
	sc_step(s, 0);
	assert_true(s->plan.head_blocked);
	sc_dir_clear(s); /* from now on the directory answers 1.5 s after each ask */
	uint64_t asked_at[SC_MAX];
	uint32_t answered = s->n_lookups, seen = s->n_lookups;
	kva_manifest gone = {.count = 0}; /* checkpoint 900 vanished */
	for (int i = 0; i < 100; i++) { /* 10 s in steps of 100 ms */
		sc_step(s, 100 * SC_MS);
		for (; seen < s->n_lookups; seen++)
			asked_at[seen] = s->now;
		for (; answered < s->n_lookups && s->now - asked_at[answered] >= 1500 * SC_MS;
		     answered++)
			(void)kva_lookup_answer(s->e, s->lookups[answered].token, &gone);
	}
	assert_true(sc_stats(s).refreshes >= 1);
	assert_true(answered > 1); /* the directory answered refreshes, in 1.5 s each */
	assert_int_equal(sc_stats(s).late_answers, 0); /* none of them came too late */
	kva_request_info info;
	assert_int_equal(kva_query(s->e, h, &info), 0);
	assert_false(info.has_selection); /* it heard that 900 is gone */
	assert_int_equal(kva_finish(s->e, hog), 0);
	for (int i = 0; i < 3; i++)
		sc_step(s, SC_MS);
	assert_int_equal(sc_stats(s).copy_jobs, 0); /* never copies the vanished checkpoint */
	assert_int_equal(sc_state(s, h), KVA_STATE_RUNNING);
	sc_free(s);
}

static void rule18_refresh_that_finds_only_incompatible_checkpoints_recomputes(void **st)
{
	(void)st;
	kva_manifest m = {.count = 1, .entries = {sc_ckpt(320, 900, 0)}};
	m.entries[0].compatible = 0;
	kva_handle h, behind, hog;
	struct sc *s = refresh_setup(&m, &h, &behind, &hog);
	kva_request_info info = after_refresh(s, h);
	assert_false(info.has_selection);
	assert_int_equal(info.reason, KVA_REASON_INCOMPATIBLE);
	assert_int_equal(sc_stats(s).fallbacks[KVA_REASON_INCOMPATIBLE], 1);
	assert_int_equal(sc_stats(s).copy_jobs, 0);
	sc_free(s);
}

static void rule18_refresh_listing_another_checkpoint_reselects_and_keeps_waiting(void **st)
{
	(void)st;
	kva_manifest m = {.count = 2, .entries = {sc_ckpt(160, 901, 0), sc_ckpt(256, 902, 0)}};
	kva_handle h, behind, hog;
	struct sc *s = refresh_setup(&m, &h, &behind, &hog);
	kva_request_info info = after_refresh(s, h);
	assert_true(info.has_selection);
	assert_int_equal(info.selected_position, 256); /* the longest one it lists now */
	assert_int_equal(info.state, KVA_STATE_WAITING);
	assert_null(sc_admitted(s, behind)); /* still a restore holding the line */
	assert_int_equal(kva_finish(s->e, hog), 0);
	sc_step(s, SC_MS);
	assert_int_equal(s->plan.n_copies, 1);
	assert_int_equal(s->copies[0].checkpoint_id, 902);
	assert_int_equal(s->copies[0].position, 256);
	sc_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(rule02_one_lookup_per_request_however_long_it_waits),
		cmocka_unit_test(rule03_lookup_timeout_falls_back_with_its_reason),
		cmocka_unit_test(rule03_late_answer_is_ignored_and_counted),
		cmocka_unit_test(rule03_answer_superseded_in_the_queue_is_counted_late),
		cmocka_unit_test(rule03_answered_lookup_latency_is_measured),
		cmocka_unit_test(rule03_each_lookup_has_its_own_deadline),
		cmocka_unit_test(rule10_miss_falls_back_with_its_reason),
		cmocka_unit_test(rule10_incompatible_checkpoint_falls_back_with_its_reason),
		cmocka_unit_test(rule10_longest_compatible_checkpoint_is_selected),
		cmocka_unit_test(rule15_evicted_full_local_selection_relooks_up_and_restores),
		cmocka_unit_test(rule15_evicted_partial_local_selection_relooks_up_and_restores),
		cmocka_unit_test(rule15_evicted_external_selection_relooks_up),
		cmocka_unit_test(rule15_unrelated_or_older_eviction_touches_nobody),
		cmocka_unit_test(rule15_repeated_eviction_of_a_shared_checkpoint_walks_nobody),
		cmocka_unit_test(rule15_eviction_at_a_sharers_own_epoch_leaves_that_sharer_alone),
		cmocka_unit_test(rule15_eviction_of_a_widely_shared_checkpoint_is_spread_over_steps),
		cmocka_unit_test(rule15_many_pending_evictions_share_one_budget),
		cmocka_unit_test(rule15_a_sharer_the_walk_has_not_reached_is_never_admitted_from_the_lost_copy),
		cmocka_unit_test(rule15_cancelled_sharers_do_not_cut_a_pending_walk_short),
		cmocka_unit_test(rule15_a_newer_eviction_during_a_walk_covers_every_older_copy),
		cmocka_unit_test(rule15_a_sharer_indexed_during_a_walk_keeps_the_floor_below_its_copy),
		cmocka_unit_test(rule15_an_eviction_resent_during_a_walk_finds_a_sharer_indexed_since),
		cmocka_unit_test(rule15_evictions_faster_than_a_walk_still_reach_every_sharer),
		cmocka_unit_test(rule15_the_front_of_the_queue_looks_up_again_first_during_a_walk),
		cmocka_unit_test(rule15_admission_never_takes_a_copy_a_pending_walk_made_stale),
		cmocka_unit_test(rule15_a_sharer_reindexed_before_the_walk_reaches_it_still_looks_up_again),
		cmocka_unit_test(rule15_local_selection_is_admitted_without_a_copy),
		cmocka_unit_test(rule18_wait_logs_at_most_once_per_interval_and_refreshes),
		cmocka_unit_test(rule18_capacity_wait_status_in_stats_metrics_and_log),
		cmocka_unit_test(rule18_refresh_that_no_longer_lists_the_checkpoint_ends_the_restore_wait),
		cmocka_unit_test(rule18_unanswered_refresh_does_not_stop_later_refreshes),
		cmocka_unit_test(rule18_refresh_slower_than_the_interval_is_still_answered),
		cmocka_unit_test(rule18_refresh_that_finds_only_incompatible_checkpoints_recomputes),
		cmocka_unit_test(rule18_refresh_listing_another_checkpoint_reselects_and_keeps_waiting),
	};
	return cmocka_run_group_tests_name("lookups", tests, NULL, NULL);
}
