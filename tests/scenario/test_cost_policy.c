/* SPDX-License-Identifier: Apache-2.0 */
/* The cost policy (KVA_POLICY_COST; docs/design.md: cost policy): each decision edge — a
 * faster shorter checkpoint, a slow tier that loses to recomputing, a learned rate crossing
 * the margin, a saturated copy slot's deadline, the seeds before any copy finished — the
 * unchanged capacity wait (rule restore-waits-for-capacity) and a recompute's reservation. */
#include "scenario.h"

#define KEY 7
#define PROMPT 480 /* 30 pages; recomputing it: 48 ms at 10,000 tokens/s */
#define MS SC_MS

/* 1 MB a token (16 MB a page), 10,000 prefill tokens/s, 100 GB/s and 1 ms setup on every
 * tier but the disk (1 GB/s), half-life 1 (a new copy weighs a half), margin 10%. */
static void cost_config(kva_config *c)
{
	sc_config(c);
	c->policy = KVA_POLICY_COST;
	c->cost.page_bytes = 16000000;
	c->cost.prefill_tokens_per_s = 10000;
	for (int t = 0; t < KVA_TIER_COUNT; t++) {
		c->cost.tier_bytes_per_s[t] = 100000000000ull;
		c->cost.tier_setup_ns[t] = 1 * MS;
	}
	c->cost.tier_bytes_per_s[KVA_TIER_DISK] = 1000000000ull;
	c->cost.half_life = 1;
	c->cost.margin_pct = 10;
}

static kva_checkpoint ckpt(uint32_t pos, uint64_t id, uint8_t tier)
{
	kva_checkpoint c = sc_ckpt(pos, id, 0);
	c.tier = tier;
	return c;
}

static struct sc *cost_engine(void)
{
	kva_config c;
	cost_config(&c);
	return sc_new(&c);
}

/* A disk checkpoint of 320 tokens: 1 ms + 320 ms copy + 16 ms prefill of the rest = 337 ms,
 * against 48 ms recomputing: the head recomputes at once (KVA_REASON_COST), no copy. The same
 * checkpoint in host DRAM (1 + 3.2 + 16 ms) restores. */
static void slow_tier_loses_to_recompute(void **st)
{
	(void)st;
	struct sc *s = cost_engine();
	sc_dir_set(s, KEY, ckpt(320, 900, KVA_TIER_DISK));
	sc_dir_set(s, KEY + 1, ckpt(320, 901, KVA_TIER_HOST));
	kva_handle slow = sc_submit(s, 1, KEY, PROMPT);
	sc_step(s, 0);
	const kva_admission *a = sc_expect_admitted(s, slow, KVA_ADMIT_RECOMPUTE, 0, 0);
	assert_int_equal(a->reason, KVA_REASON_COST);
	assert_int_equal(s->plan.n_copies, 0);
	kva_handle fast = sc_submit(s, 2, KEY + 1, PROMPT);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 1);
	assert_int_equal(s->copies[0].position, 320);
	assert_int_equal(sc_state(s, fast), KVA_STATE_IMPORTING);
	kva_stats t = sc_stats(s);
	assert_int_equal(t.cost_recomputes, 1);
	assert_int_equal(t.cost_restores, 1);
	assert_int_equal(t.fallbacks[KVA_REASON_COST], 1);
	assert_string_equal(kva_reason_name(KVA_REASON_COST), "cost");
	sc_free(s);
}

/* The longest checkpoint is on disk (337 ms), a shorter one in host DRAM: 1 + 1.6 ms copy +
 * 32 ms prefill = 34.6 ms, faster than recomputing (48 ms) too: the shorter one is copied. */
static void faster_shorter_checkpoint_is_taken(void **st)
{
	(void)st;
	struct sc *s = cost_engine();
	sc_dir_set(s, KEY, ckpt(160, 900, KVA_TIER_HOST));
	sc_dir_add(s, KEY, ckpt(320, 901, KVA_TIER_DISK));
	kva_handle h = sc_submit(s, 1, KEY, PROMPT);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 1);
	assert_int_equal(s->copies[0].position, 160);
	assert_int_equal(s->copies[0].checkpoint_id, 900);
	sc_copies_done(s, 0);
	sc_step(s, 2 * MS);
	sc_expect_admitted(s, h, KVA_ADMIT_RESTORE, 0, 160);
	kva_stats t = sc_stats(s);
	assert_int_equal(t.cost_other_checkpoint, 1);
	assert_int_equal(t.cost_restores, 0);
	sc_assert_conserved(s);
	sc_free(s);
}

/* Under the wait policy the same answer copies the longest (the disk's). */
static void wait_policy_takes_the_longest(void **st)
{
	(void)st;
	kva_config c;
	cost_config(&c);
	c.policy = KVA_POLICY_WAIT;
	struct sc *s = sc_new(&c);
	sc_dir_set(s, KEY, ckpt(160, 900, KVA_TIER_HOST));
	sc_dir_add(s, KEY, ckpt(320, 901, KVA_TIER_DISK));
	sc_submit(s, 1, KEY, PROMPT);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 1);
	assert_int_equal(s->copies[0].position, 320);
	sc_free(s);
}

/* A disk seeded so that a 320-token restore is predicted at 50 ms (1 + 33 + 16): slower than
 * recomputing (48 ms) but within the 10% margin, so it restores. Its copy takes 60 ms: the
 * learned bandwidth puts the next one at 76 ms, past the margin: it recomputes. With no
 * margin the first one would have recomputed already. */
static void learned_rate_crosses_the_margin(void **st)
{
	(void)st;
	kva_config c;
	cost_config(&c);
	c.cost.tier_bytes_per_s[KVA_TIER_DISK] = 9696969697ull; /* 320 MB in 33 ms */
	struct sc *s = sc_new(&c);
	sc_dir_set(s, KEY, ckpt(320, 900, KVA_TIER_DISK));
	kva_handle a = sc_submit(s, 1, KEY, PROMPT);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 1);
	kva_stats t = sc_stats(s);
	assert_int_equal(t.tier_bytes_per_s[KVA_TIER_DISK], 9696969697ull); /* the seed */
	sc_copies_done(s, 0);
	sc_step(s, 60 * MS);
	sc_expect_admitted(s, a, KVA_ADMIT_RESTORE, 0, 320);
	t = sc_stats(s);
	/* (60 - 1) ms for 320 MB */
	assert_true(t.tier_bytes_per_s[KVA_TIER_DISK] > 5420000000ull &&
	            t.tier_bytes_per_s[KVA_TIER_DISK] < 5430000000ull);
	kva_handle b = sc_submit(s, 2, KEY, PROMPT);
	sc_step(s, 0);
	const kva_admission *adm = sc_expect_admitted(s, b, KVA_ADMIT_RECOMPUTE, 0, 0);
	assert_int_equal(adm->reason, KVA_REASON_COST);
	sc_free(s);

	c.cost.margin_pct = 0;
	s = sc_new(&c);
	sc_dir_set(s, KEY, ckpt(320, 900, KVA_TIER_DISK));
	a = sc_submit(s, 1, KEY, PROMPT);
	sc_step(s, 0);
	adm = sc_expect_admitted(s, a, KVA_ADMIT_RECOMPUTE, 0, 0);
	assert_int_equal(adm->reason, KVA_REASON_COST);
	sc_free(s);
}

/* One copy slot, taken by a first restore (request 1, 320 tokens of 480 on a GPU tier)
 * whose copy does not finish. */
static struct sc *slot_taken(void)
{
	kva_config c;
	cost_config(&c);
	c.copy_slots = 1;
	struct sc *s = sc_new(&c);
	sc_dir_set(s, KEY, ckpt(320, 900, KVA_TIER_GPU));
	sc_submit(s, 1, KEY, PROMPT);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 1);
	return s;
}

/* One copy slot, taken by a first restore that does not finish. The second head's restore
 * (20.2 ms, plus a slot wait seeded at one copy's 4.2 ms) beats recomputing (48 ms), so it
 * waits for the slot, but only until waiting longer makes recomputing faster: 48 ms + 10%
 * - 20.2 ms = 32.6 ms after it blocked; then it recomputes (KVA_REASON_COST). It never
 * waited past its predicted recompute time plus the margin. */
static void saturated_slot_has_a_deadline(void **st)
{
	(void)st;
	struct sc *s = slot_taken();
	kva_handle b = sc_submit(s, 2, KEY, PROMPT);
	sc_step(s, 0);
	assert_int_equal(sc_state(s, b), KVA_STATE_WAITING);
	assert_true(s->plan.head_blocked);
	kva_request_info info;
	assert_int_equal(kva_query(s->e, b, &info), 0);
	assert_int_equal(info.predicted_recompute_ns, 48 * MS);
	assert_int_equal(info.predicted_restore_ns, 20200000); /* 1 + 3.2 + 16 ms */
	sc_step(s, 32 * MS);
	assert_int_equal(sc_state(s, b), KVA_STATE_WAITING);
	sc_step(s, 1 * MS);
	const kva_admission *adm = sc_expect_admitted(s, b, KVA_ADMIT_RECOMPUTE, 0, 0);
	assert_int_equal(adm->reason, KVA_REASON_COST);
	assert_int_equal(sc_stats(s).importing, 1); /* request 1 still copies */
	assert_int_equal(sc_stats(s).wait_expired, 0);
	sc_free(s);
}

/* The deadline is armed as a timer: a step with nothing else to do fires it. */
static void slot_deadline_fires_as_a_timer(void **st)
{
	(void)st;
	struct sc *s = slot_taken();
	kva_handle b = sc_submit(s, 2, KEY, PROMPT);
	sc_step(s, 0);
	sc_step(s, 40 * MS);
	assert_true(s->plan.timers_fired >= 1);
	sc_expect_admitted(s, b, KVA_ADMIT_RECOMPUTE, 0, 0);
	sc_free(s);
}

/* Short of pages, a recompute would wait as long (rule restore-waits-for-capacity): the
 * restore keeps waiting past its slot deadline; no cost fallback. */
static void capacity_shortage_still_waits(void **st)
{
	(void)st;
	struct sc *s = slot_taken(); /* 30 pages, the slot */
	sc_occupy(s, 3, 50); /* 20 pages left */
	kva_handle b = sc_submit(s, 2, KEY, PROMPT);
	sc_step(s, 0);
	sc_step(s, 100 * MS);
	sc_step(s, 100 * MS);
	assert_int_equal(sc_state(s, b), KVA_STATE_WAITING);
	assert_int_equal(sc_stats(s).fallbacks[KVA_REASON_COST], 0);
	assert_int_equal(sc_stats(s).cost_restores, 1 + 1);
	sc_free(s);
}

/* Under the cost policy a recompute reserves its prompt and decode headroom, all or
 * nothing, as a restore does: its predicted prefill runs through, where one admitted on its
 * first chunk into a full pool would be preempted mid-prefill and start again. PROMPT is
 * 30 pages, the headroom 2, the first chunk 16: the admission lists 16 pages and keeps 16
 * reserved, which its grows take before the pool's. With 31 pages free it waits (30 + 2 do
 * not fit), where the wait policy admits its first chunk. */
static void recompute_reserves_its_prompt(void **st)
{
	(void)st;
	for (int policy = 0; policy < 2; policy++) {
		kva_config c;
		cost_config(&c);
		c.decode_headroom_pages = 2;
		if (policy)
			c.policy = KVA_POLICY_WAIT;
		struct sc *s = sc_new(&c);
		bool cost = c.policy == KVA_POLICY_COST;
		kva_handle hog = sc_occupy(s, 9, 69); /* 31 pages free */
		kva_handle a = sc_submit(s, 1, KEY, PROMPT);
		sc_step(s, 0); /* asks the directory */
		assert_int_equal(s->n_lookups, 1);
		kva_manifest miss = {.count = 0};
		assert_int_equal(kva_lookup_answer(s->e, s->lookups[s->n_lookups - 1].token, &miss), 0);
		sc_step(s, 0);
		if (cost) {
			assert_int_equal(sc_state(s, a), KVA_STATE_WAITING);
			assert_true(s->plan.head_blocked);
			assert_int_equal(sc_free_pages(s), 31);
			assert_int_equal(kva_finish(s->e, hog), 0);
			sc_step(s, 0);
		}
		const kva_admission *adm = sc_expect_admitted(s, a, KVA_ADMIT_RECOMPUTE, 0, 0);
		assert_int_equal(adm->reason, KVA_REASON_MISS);
		assert_int_equal(adm->npages, 16);
		assert_int_equal(adm->reserved_pages, cost ? 16 : 0);
		uint64_t free_before = sc_free_pages(s);
		assert_int_equal(kva_grow(s->e, a, 14, NULL), 0);
		assert_int_equal(sc_free_pages(s), cost ? free_before : free_before - 14);
		if (cost) {
			/* the slow tier's recompute (KVA_REASON_COST) reserves the same way */
			sc_dir_set(s, KEY + 1, ckpt(320, 900, KVA_TIER_DISK));
			kva_handle b = sc_submit(s, 2, KEY + 1, PROMPT);
			sc_step(s, 0);
			adm = sc_expect_admitted(s, b, KVA_ADMIT_RECOMPUTE, 0, 0);
			assert_int_equal(adm->reason, KVA_REASON_COST);
			assert_int_equal(adm->reserved_pages, 16);
		}
		sc_assert_conserved(s);
		sc_free(s);
	}
}

/* Before any copy finished the seeds stand (stats show them); a host's prefill report
 * replaces the prefill seed at the next step, and kva_query's predictions follow. */
static void seeds_before_any_copy(void **st)
{
	(void)st;
	struct sc *s = cost_engine();
	kva_stats t = sc_stats(s);
	assert_int_equal(t.prefill_tokens_per_s, 10000);
	assert_int_equal(t.tier_bytes_per_s[KVA_TIER_DISK], 1000000000ull);
	assert_int_equal(t.tier_bytes_per_s[KVA_TIER_HOST], 100000000000ull);
	assert_int_equal(t.tier_setup_ns[KVA_TIER_REMOTE], 1 * MS);
	assert_int_equal(t.copy_slot_interval_ns, 0);
	char buf[16384];
	size_t n = kva_stats_format(&t, buf, sizeof(buf));
	assert_true(n < sizeof(buf));
	assert_non_null(strstr(buf, "kvadmit_cost_copy_bytes_per_second{tier=\"disk\"} 1000000000"));
	assert_non_null(strstr(buf, "kvadmit_fallbacks_total{reason=\"cost\"} 0"));

	/* seeds decide the first head: host DRAM restores */
	sc_dir_set(s, KEY, ckpt(320, 900, KVA_TIER_HOST));
	sc_submit(s, 1, KEY, PROMPT);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 1);

	assert_int_equal(kva_prefill_observed(s->e, 1000, 50 * MS), 0); /* 20,000 tokens/s */
	assert_int_equal(kva_prefill_observed(s->e, 1, 0), -EINVAL);
	assert_int_equal(kva_prefill_observed(NULL, 1, 1), -EINVAL);
	kva_handle b = sc_submit(s, 2, KEY, PROMPT);
	sc_step(s, 0);
	assert_int_equal(sc_stats(s).prefill_tokens_per_s, 20000);
	kva_request_info info;
	assert_int_equal(kva_query(s->e, b, &info), 0);
	assert_int_equal(info.predicted_recompute_ns, 24 * MS);
	sc_free(s);
}

/* A prefill's time has an attention term, b (end^2 - start^2), beside a per token: a long
 * prompt's recompute is not predicted at a short one's rate. A disk at 4 GB/s; PROMPT's
 * 320-token checkpoint restores in 1 + 80 ms + the rest's prefill. Linear (b = 0): 16 ms of
 * rest, 97 ms against recomputing's 48: it recomputes. With b = 500 ns: the rest 16 + 64 ms,
 * 161 ms against 48 + 115.2 = 163.2 ms: it restores. The host's span reports teach b: one
 * at positions [0, 100), one at [1000, 1100), each a step, on the line a = 100 us, b = 500 ns;
 * the first alone cannot split the terms (the seed's b = 0 stands, a takes all), the two fit
 * it exactly. */
static void long_prompt_prefill_has_an_attention_term(void **st)
{
	(void)st;
	for (int seeded = 0; seeded < 2; seeded++) {
		kva_config c;
		cost_config(&c);
		c.cost.tier_bytes_per_s[KVA_TIER_DISK] = 4000000000ull;
		c.cost.prefill_attn_ps = seeded ? 500000 : 0;
		struct sc *s = sc_new(&c);
		assert_int_equal(sc_stats(s).prefill_attn_ps, seeded ? 500000 : 0);
		sc_dir_set(s, KEY, ckpt(320, 900, KVA_TIER_DISK));
		kva_handle h = sc_submit(s, 1, KEY, PROMPT);
		sc_step(s, 0);
		if (seeded) {
			assert_int_equal(s->plan.n_copies, 1);
			assert_int_equal(sc_state(s, h), KVA_STATE_IMPORTING);
			kva_request_info info;
			assert_int_equal(kva_query(s->e, h, &info), 0);
			assert_int_equal(info.predicted_recompute_ns, 163200000);
			assert_int_equal(info.predicted_restore_ns, 161000000);
		} else {
			const kva_admission *a = sc_expect_admitted(s, h, KVA_ADMIT_RECOMPUTE, 0, 0);
			assert_int_equal(a->reason, KVA_REASON_COST);
		}
		sc_free(s);
	}

	kva_config c;
	cost_config(&c);
	c.cost.tier_bytes_per_s[KVA_TIER_DISK] = 4000000000ull;
	struct sc *s = sc_new(&c);
	sc_dir_set(s, KEY + 1, ckpt(320, 901, KVA_TIER_HOST));
	assert_int_equal(kva_prefill_observed_span(s->e, 100, 10000, 15000000), 0);
	sc_submit(s, 1, KEY + 1, PROMPT); /* a head decision folds the reports in */
	sc_step(s, 0);
	kva_stats t = sc_stats(s);
	assert_int_equal(t.prefill_tokens_per_s, 6666); /* 150 us a token */
	assert_int_equal(t.prefill_attn_ps, 0);
	assert_int_equal(kva_prefill_observed_span(s->e, 100, 210000, 115000000), 0);
	sc_submit(s, 2, KEY + 1, PROMPT);
	sc_step(s, 0);
	t = sc_stats(s);
	assert_int_equal(t.prefill_tokens_per_s, 10000);
	assert_int_equal(t.prefill_attn_ps, 500000);
	char buf[16384];
	assert_true(kva_stats_format(&t, buf, sizeof(buf)) < sizeof(buf));
	assert_non_null(strstr(buf, "kvadmit_cost_prefill_attention_picoseconds 500000"));
	sc_dir_set(s, KEY, ckpt(320, 900, KVA_TIER_DISK));
	kva_handle h = sc_submit(s, 3, KEY, PROMPT);
	sc_step(s, 0);
	assert_int_equal(sc_state(s, h), KVA_STATE_IMPORTING); /* restores, as seeded above */
	assert_int_equal(sc_stats(s).cost_recomputes, 0);
	/* a report without positions is a rate per token: the attention term goes */
	assert_int_equal(kva_prefill_observed(s->e, 100, 20 * MS), 0);
	assert_int_equal(kva_prefill_observed_span(s->e, 1, 1, 0), -EINVAL);
	assert_int_equal(kva_prefill_observed_span(NULL, 1, 1, 1), -EINVAL);
	sc_submit(s, 4, KEY + 1, PROMPT);
	sc_step(s, 0);
	t = sc_stats(s);
	assert_int_equal(t.prefill_attn_ps, 0);
	sc_free(s);
}

/* One restore of `pos` tokens from host DRAM whose copy takes d_ns, then finished. */
static void one_copy(struct sc *s, uint64_t id, uint32_t pos, uint64_t d_ns)
{
	sc_dir_set(s, KEY + id, ckpt(pos, 900 + id, KVA_TIER_HOST));
	kva_handle h = sc_submit(s, id, KEY + id, PROMPT);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 1);
	sc_copies_done(s, 0);
	sc_step(s, d_ns);
	sc_expect_admitted(s, h, KVA_ADMIT_RESTORE, 0, pos);
	assert_int_equal(kva_finish(s->e, h), 0);
}

/* Copies whose durations barely follow their sizes (they queued on a link behind others:
 * 160 and 320 MB in 480, 500, 520 and 530 ms) teach an effective bandwidth, about
 * 0.5 GB/s here, and keep the 1 ms setup; a line through them would put 489 ms in the
 * setup and learn 9 GB/s. Copies that follow their sizes (20 ms + 0.5 GB/s) teach that
 * line once three are in. Recomputing costs 4.8 s (100 tokens/s): every head restores. */
static void queued_copies_teach_no_huge_bandwidth(void **st)
{
	(void)st;
	kva_config c;
	cost_config(&c);
	c.cost.prefill_tokens_per_s = 100;
	struct sc *s = sc_new(&c);
	static const uint64_t queued[4] = {480 * MS, 500 * MS, 520 * MS, 530 * MS};
	for (int i = 0; i < 4; i++)
		one_copy(s, 1 + (uint64_t)i, i % 2 ? 320 : 160, queued[i]);
	kva_stats t = sc_stats(s);
	assert_true(t.tier_bytes_per_s[KVA_TIER_HOST] > 490000000ull &&
	            t.tier_bytes_per_s[KVA_TIER_HOST] < 510000000ull);
	assert_int_equal(t.tier_setup_ns[KVA_TIER_HOST], 1 * MS);
	sc_free(s);

	s = sc_new(&c);
	for (int i = 0; i < 4; i++) {
		uint32_t pos = i % 2 ? 320 : 160;
		one_copy(s, 1 + (uint64_t)i, pos, 20 * MS + (uint64_t)pos * 2 * MS);
		t = sc_stats(s);
		if (i < 2) /* fewer than three: the setup stays */
			assert_int_equal(t.tier_setup_ns[KVA_TIER_HOST], 1 * MS);
	}
	assert_true(t.tier_bytes_per_s[KVA_TIER_HOST] > 499000000ull &&
	            t.tier_bytes_per_s[KVA_TIER_HOST] < 501000000ull);
	assert_true(t.tier_setup_ns[KVA_TIER_HOST] > 19 * MS && t.tier_setup_ns[KVA_TIER_HOST] < 21 * MS);
	sc_free(s);
}

/* The cost config's ranges, and a tier past the enum in an answer. */
static void bad_cost_input_is_refused(void **st)
{
	(void)st;
	kva_config c;
	cost_config(&c);
	c.total_pages = 100;
	int err = 0;
	kva_config bad = c;
	bad.cost.page_bytes = 0;
	assert_null(kva_engine_create(&bad, &err));
	assert_int_equal(err, -EINVAL);
	bad = c;
	bad.cost.half_life = 0;
	assert_null(kva_engine_create(&bad, &err));
	bad = c;
	bad.cost.tier_bytes_per_s[KVA_TIER_GPU] = 0;
	assert_null(kva_engine_create(&bad, &err));
	bad = c;
	bad.cost.margin_pct = 1001;
	assert_null(kva_engine_create(&bad, &err));
	bad = c;
	bad.policy = 3;
	assert_null(kva_engine_create(&bad, &err));
	bad = c;
	bad.policy = KVA_POLICY_WAIT;
	bad.cost.page_bytes = 0; /* not read */
	kva_engine *ok = kva_engine_create(&bad, &err);
	assert_non_null(ok);
	kva_engine_destroy(ok);
	assert_true(kva_has_feature(KVA_FEATURE_COST_POLICY));

	struct sc *s = cost_engine();
	kva_handle h = sc_submit(s, 1, KEY, PROMPT); /* not in the directory: the lookup waits */
	sc_step(s, 0);
	assert_int_equal(s->n_lookups, 1);
	kva_manifest m = {.count = 1};
	m.entries[0] = ckpt(320, 900, KVA_TIER_COUNT);
	assert_int_equal(kva_lookup_answer(s->e, s->lookups[0].token, &m), -EINVAL);
	kva_checkpoint local = sc_ckpt(160, 5, 1);
	local.tier = KVA_TIER_COUNT;
	assert_int_equal(kva_local_checkpoint(s->e, h, &local), -EINVAL);
	m.entries[0].tier = KVA_TIER_REMOTE;
	assert_int_equal(kva_lookup_answer(s->e, s->lookups[0].token, &m), 0);
	sc_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(slow_tier_loses_to_recompute),
		cmocka_unit_test(faster_shorter_checkpoint_is_taken),
		cmocka_unit_test(wait_policy_takes_the_longest),
		cmocka_unit_test(learned_rate_crosses_the_margin),
		cmocka_unit_test(saturated_slot_has_a_deadline),
		cmocka_unit_test(slot_deadline_fires_as_a_timer),
		cmocka_unit_test(capacity_shortage_still_waits),
		cmocka_unit_test(recompute_reserves_its_prompt),
		cmocka_unit_test(seeds_before_any_copy),
		cmocka_unit_test(long_prompt_prefill_has_an_attention_term),
		cmocka_unit_test(queued_copies_teach_no_huge_bandwidth),
		cmocka_unit_test(bad_cost_input_is_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
