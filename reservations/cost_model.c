/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The cost policy (see cost_model.h; docs/design.md: cost policy). Rates
 * are exponentially weighted averages: an observation weighs alpha =
 * 1 - 2^(-1/half_life), so after half_life observations an old one's weight
 * has halved. Per tier, each completed copy adds (bytes, ns) to weighted
 * moments; setup latency and bandwidth are the intercept and slope of their
 * least-squares line (while the sizes barely vary, the setup stays what it
 * was and the bandwidth takes the rest). Predictions look at the head's
 * entries only (at most KVA_MAX_CHECKPOINTS + 1): O(1) per step.
 *
 * Memory-order labels: none; the published rates are relaxed values that
 * readers (kva_stats_get, kva_query) show as they find them.
 */
#include <errno.h>

#include "cost_model.h"
#include "lookup.h"
#include "stats.h"

/* No libm (the library links libc and liburcu only): a rounding of a
 * non-negative value, and 2^(-1/h) by its series (|x| <= ln 2). */
static uint64_t round_ns(double v)
{
	return v <= 0 ? 0 : v >= 1.8e19 ? UINT64_MAX : (uint64_t)(v + 0.5);
}

static double half_power(uint32_t h)
{
	double x = -0.69314718055994531 / h, term = 1, sum = 1;
	for (int k = 1; k < 24; k++) {
		term *= x / k;
		sum += term;
	}
	return sum;
}

int kva__cost_config_check(const kva_config *c)
{
	const kva_cost_config *k = &c->cost;
	if (c->policy != KVA_POLICY_COST)
		return 0;
	if (!k->page_bytes || !k->prefill_tokens_per_s || !k->half_life || k->half_life > 65535 ||
	    k->margin_pct > 1000)
		return -EINVAL;
	for (int t = 0; t < KVA_TIER_COUNT; t++)
		if (!k->tier_bytes_per_s[t])
			return -EINVAL;
	return 0;
}

static void publish(kva_engine *e)
{
	struct kva__cost *m = &e->cost;
	atomic_store_explicit(&m->pub_ns_per_token_x1000, round_ns(m->ns_per_token * 1000),
	                      memory_order_relaxed);
	atomic_store_explicit(&m->pub_attn_ps, round_ns(m->ns_per_square * 1000),
	                      memory_order_relaxed);
	for (int t = 0; t < KVA_TIER_COUNT; t++) {
		double bps = m->tier[t].ns_per_byte > 0 ? 1e9 / m->tier[t].ns_per_byte : 0;
		atomic_store_explicit(&m->pub_bytes_per_s[t], round_ns(bps),
		                      memory_order_relaxed);
		atomic_store_explicit(&m->pub_setup_ns[t], round_ns(m->tier[t].setup_ns),
		                      memory_order_relaxed);
	}
	atomic_store_explicit(&m->pub_slot_interval_ns, round_ns(m->slot_interval_ns),
	                      memory_order_relaxed);
}

void kva__cost_init(kva_engine *e)
{
	struct kva__cost *m = &e->cost;
	const kva_cost_config *k = &e->cfg.cost;
	if (e->cfg.policy != KVA_POLICY_COST)
		return;
	m->alpha = 1.0 - half_power(k->half_life);
	m->margin = k->margin_pct / 100.0;
	m->ns_per_token = 1e9 / (double)k->prefill_tokens_per_s;
	m->ns_per_square = (double)k->prefill_attn_ps / 1000;
	for (int t = 0; t < KVA_TIER_COUNT; t++) {
		m->tier[t].ns_per_byte = 1e9 / (double)k->tier_bytes_per_s[t];
		m->tier[t].setup_ns = (double)k->tier_setup_ns[t];
	}
	publish(e);
}

static double ewma(const struct kva__cost *m, double old, double x, bool first)
{
	return first ? x : old + m->alpha * (x - old);
}

/* The copy-slot release rate: the mean time between two releases (a copy
 * slot is released when its import is READY: admit.c, make_ready). */
static void slot_released(kva_engine *e)
{
	struct kva__cost *m = &e->cost;
	if (m->releases)
		m->slot_interval_ns = ewma(m, m->slot_interval_ns, (double)(e->now - m->last_release),
		                           m->releases == 1);
	m->last_release = e->now;
	if (m->releases < 2)
		m->releases++;
}

void kva__cost_slot_released(kva_engine *e)
{
	if (e->cfg.policy != KVA_POLICY_COST)
		return;
	slot_released(e);
	publish(e);
}

void kva__cost_copy_observed(kva_engine *e, uint8_t tier, uint32_t pages, uint64_t ns)
{
	if (e->cfg.policy != KVA_POLICY_COST || tier >= KVA_TIER_COUNT || !pages)
		return;
	struct kva__cost *m = &e->cost;
	struct kva__tier_rate *t = &m->tier[tier];
	double b = (double)pages * (double)e->cfg.cost.page_bytes, d = (double)ns;
	bool first = t->n == 0;
	t->mb = ewma(m, t->mb, b, first);
	t->md = ewma(m, t->md, d, first);
	t->mbb = ewma(m, t->mbb, b * b, first);
	t->mbd = ewma(m, t->mbd, b * d, first);
	t->mdd = ewma(m, t->mdd, d * d, first);
	if (t->n < UINT32_MAX)
		t->n++;
	double var = t->mbb - t->mb * t->mb, cov = t->mbd - t->mb * t->md;
	double vard = t->mdd - t->md * t->md;
	/* The fitted line only where it explains the durations: at least three
	 * copies (two always lie on a line) whose sizes account for half of
	 * their durations' variance or more (R^2 >= 1/2). A copy that queued on
	 * its link behind others took longer for a reason its size does not
	 * show; a line through such points can put nearly all of the time in
	 * the setup and learn a bandwidth orders of magnitude too high. */
	if (t->n >= 3 && var > 1e-4 * t->mb * t->mb && cov > 0 && cov * cov >= 0.5 * var * vard) {
		/* sizes vary and explain the durations: the fitted line */
		t->ns_per_byte = cov / var;
		t->setup_ns = t->md - t->ns_per_byte * t->mb;
		if (t->setup_ns < 0) {
			t->setup_ns = 0;
			t->ns_per_byte = t->md / t->mb;
		}
	} else if (t->md > t->setup_ns) {
		t->ns_per_byte = (t->md - t->setup_ns) / t->mb;
	} else { /* faster than the setup assumed: half of it each */
		t->setup_ns = t->md / 2;
		t->ns_per_byte = t->md / 2 / t->mb;
	}
	publish(e);
}

/* One span report (x1 tokens, x2 square span, y ns) into the two-term line
 * y = a x1 + b x2, by weighted least squares without an intercept. While
 * the positions barely vary the two terms cannot be told apart: the
 * attention term stays what it was (the seed) and the linear one takes the
 * rest. */
static void fit_prefill(struct kva__cost *m, double x1, double x2, double y)
{
	bool first = !m->prefill_seen;
	m->m11 = ewma(m, m->m11, x1 * x1, first);
	m->m12 = ewma(m, m->m12, x1 * x2, first);
	m->m22 = ewma(m, m->m22, x2 * x2, first);
	m->m1y = ewma(m, m->m1y, x1 * y, first);
	m->m2y = ewma(m, m->m2y, x2 * y, first);
	double det = m->m11 * m->m22 - m->m12 * m->m12;
	if (det > 1e-6 * m->m11 * m->m22) {
		double a = (m->m1y * m->m22 - m->m2y * m->m12) / det;
		double b = (m->m2y * m->m11 - m->m1y * m->m12) / det;
		if (a > 0 && b >= 0) {
			m->ns_per_token = a;
			m->ns_per_square = b;
			return;
		}
	}
	double a = (m->m1y - m->ns_per_square * m->m12) / m->m11;
	if (a > 0) {
		m->ns_per_token = a;
		return;
	}
	/* the attention term alone overshoots: it takes all */
	m->ns_per_token = 1e-3;
	m->ns_per_square = (m->m2y - m->ns_per_token * m->m12) / m->m22;
	if (m->ns_per_square < 0)
		m->ns_per_square = 0;
}

/* Folds the host's prefill reports in (kva_prefill_observed[_span]).
 * Exchanges: a report racing them may split across two folds, which moves
 * one sample's weight a little, never a token. A fold whose reports said
 * no positions is a rate per token, as the host measured it. */
static void fold_prefill(kva_engine *e)
{
	struct kva__cost *m = &e->cost;
	if (!atomic_load_explicit(&m->obs_ns, memory_order_relaxed))
		return;
	uint64_t ns = atomic_exchange_explicit(&m->obs_ns, 0, memory_order_relaxed);
	uint64_t tok = atomic_exchange_explicit(&m->obs_tokens, 0, memory_order_relaxed);
	uint64_t sq = atomic_exchange_explicit(&m->obs_square, 0, memory_order_relaxed);
	if (!tok || !ns)
		return;
	if (sq) {
		fit_prefill(m, (double)tok, (double)sq, (double)ns);
	} else {
		m->ns_per_token = ewma(m, m->ns_per_token, (double)ns / (double)tok, !m->prefill_seen);
		m->ns_per_square = 0;
	}
	m->prefill_seen = true;
	publish(e);
}

/* Prefill of positions [from, to): its tokens and its attention. */
static double span_ns(double ns_per_token, double ns_per_square, uint32_t from, uint32_t to)
{
	double f = from, t = to;
	return ns_per_token * (t - f) + ns_per_square * (t * t - f * f);
}

static double prefill_ns(const struct kva__cost *m, uint32_t from, uint32_t to)
{
	return span_ns(m->ns_per_token, m->ns_per_square, from, to);
}

/* A copy of `position` tokens: setup + bytes at ns_per_byte (the learned
 * rates here, the published ones in kva__cost_query). */
static double copy_time(const kva_engine *e, double setup_ns, double ns_per_byte,
                        uint32_t position)
{
	double bytes = (double)kva__pages_for(e, position) * (double)e->cfg.cost.page_bytes;
	return setup_ns + bytes * ns_per_byte;
}

/* A copy of `position` tokens from `tier`. */
static double copy_ns(const kva_engine *e, uint8_t tier, uint32_t position)
{
	const struct kva__tier_rate *t = &e->cost.tier[tier < KVA_TIER_COUNT ? tier : 0];
	return copy_time(e, t->setup_ns, t->ns_per_byte, position);
}

/* Expected wait for a copy slot for entry c: none while one is free; else
 * the time between releases, seeded (none seen yet) by c's own copy time
 * shared among the slots. */
static double slot_wait_ns(const kva_engine *e, const kva_checkpoint *c)
{
	if (kva_capacity_free(&e->cap).slots)
		return 0;
	return e->cost.releases > 1 ? e->cost.slot_interval_ns
	                            : copy_ns(e, c->tier, c->position) / e->cfg.copy_slots;
}

/* Predicted time to first token restoring entry c of a prompt, without
 * any wait for a copy slot. */
static double restore_ns(const kva_engine *e, const kva_checkpoint *c, uint32_t prompt)
{
	double rest = prefill_ns(&e->cost, c->position, prompt);
	return c->location == KVA_LOC_LOCAL ? rest : copy_ns(e, c->tier, c->position) + rest;
}

static double with_queue(const kva_engine *e, const kva_checkpoint *c, uint32_t prompt)
{
	double t = restore_ns(e, c, prompt);
	return c->location == KVA_LOC_LOCAL ? t : t + slot_wait_ns(e, c);
}

static void remember(kva_engine *e, struct kva__req *r, double restore, double recompute)
{
	struct kva__cost *m = &e->cost;
	kva_handle h = kva__rec_handle(r);
	atomic_store_explicit(&m->pub_head, (uint64_t)h.slot << 32 | h.gen, memory_order_relaxed);
	atomic_store_explicit(&m->pub_head_tier, kva__selected_checkpoint(r)->tier,
	                      memory_order_relaxed);
	m->head = r;
	m->head_gen = atomic_load_explicit(&r->hdr.gen, memory_order_relaxed);
	m->head_sel = r->sel;
	m->head_nents = r->nents;
	m->head_restore_ns = round_ns(restore);
	m->head_recompute_ns = round_ns(recompute);
}

bool kva__cost_choose(kva_engine *e, struct kva__req *r)
{
	struct kva__cost *m = &e->cost;
	fold_prefill(e);
	if (m->head == r && m->head_gen == atomic_load_explicit(&r->hdr.gen, memory_order_relaxed) &&
	    m->head_sel == r->sel && m->head_nents == r->nents)
		return false; /* chosen already, from the same entries */
	const kva_checkpoint *ents = kva__manifest_entries(r);
	int cur = r->sel, best = cur;
	double cur_t = with_queue(e, &ents[cur], r->prompt_tokens), best_t = cur_t;
	for (int i = 0; i < r->nents; i++) {
		if (i == cur || !kva__lookup_usable(e, r, i))
			continue;
		double t = with_queue(e, &ents[i], r->prompt_tokens);
		if (t < best_t) {
			best = i;
			best_t = t;
		}
	}
	/* the longest stays unless another is faster by more than the margin */
	if (best != cur && best_t * (1 + m->margin) >= cur_t) {
		best = cur;
		best_t = cur_t;
	}
	double recompute = prefill_ns(m, 0, r->prompt_tokens);
	bool recomputes = recompute * (1 + m->margin) < best_t;
	const kva_checkpoint *b = &ents[best];
	/* the level first: a variadic call with doubles costs a busy head's admission */
	if (e->cfg.log_level <= KVA_LOG_DEBUG && (e->cfg.log || e->cfg.log_record))
		kva__log(e, KVA_LOG_DEBUG, KVA_LOGEV_COST, r, recomputes ? KVA_REASON_COST : 0,
		         round_ns(recomputes ? recompute : best_t),
		         "kvadmit: request %llu %s: restore %u tokens (tier %u) %.1f ms, longest %u %.1f ms, "
		         "recompute %.1f ms",
		         (unsigned long long)r->id,
		         recomputes ? "recomputes" : best != cur ? "takes another checkpoint" : "restores",
		         b->position, b->tier, best_t / 1e6, ents[cur].position, cur_t / 1e6,
		         recompute / 1e6);
	if (recomputes) {
		kva__st_add_single_writer(e, ST_COST_RECOMPUTE, 1);
		m->head = NULL;
		kva__fallback(e, r, KVA_REASON_COST);
		return true;
	}
	kva__st_add_single_writer(e, best != cur ? ST_COST_OTHER : ST_COST_RESTORE, 1);
	if (best != cur)
		kva__select(e, r, best);
	remember(e, r, best_t, recompute);
	return false;
}

bool kva__cost_wait_over(kva_engine *e, struct kva__req *r, uint64_t *deadline)
{
	*deadline = UINT64_MAX;
	struct kva_credits f = kva_capacity_free(&e->cap);
	uint64_t need = (uint64_t)kva__pages_for(e, r->prompt_tokens) + e->cfg.decode_headroom_pages;
	/* rule restore-waits-for-capacity: short of pages or a run slot, a
	 * recompute would wait as long (checked first: a head blocked for
	 * capacity, the common case, reads no entry) */
	if (f.slots || !f.runs || f.pages < need + e->cfg.decode_reserve_pages)
		return false;
	const kva_checkpoint *c = kva__selected_checkpoint(r);
	if (c->location == KVA_LOC_LOCAL)
		return false;
	double recompute = prefill_ns(&e->cost, 0, r->prompt_tokens);
	double slack = recompute * (1 + e->cost.margin) - restore_ns(e, c, r->prompt_tokens);
	uint64_t since = (r->flags & KVA__F_BLOCKED) ? r->blocked_since : e->now;
	*deadline = slack <= 0 ? since : kva__after(since, (uint64_t)slack);
	if (e->now < *deadline)
		return false;
	kva__st_add_single_writer(e, ST_COST_RECOMPUTE, 1);
	kva__log(e, KVA_LOG_DEBUG, KVA_LOGEV_COST, r, KVA_REASON_COST, round_ns(recompute),
	         "kvadmit: request %llu waited %.1f ms for a copy slot; recomputing (%.1f ms) is "
	         "faster now", (unsigned long long)r->id, (double)(e->now - since) / 1e6,
	         recompute / 1e6);
	e->cost.head = NULL;
	kva__fallback(e, r, KVA_REASON_COST);
	return true;
}

void kva__cost_query(const kva_engine *e, kva_handle h, uint32_t prompt, uint32_t sel_position,
                     bool local, uint64_t *restore_ns_out, uint64_t *recompute_ns_out)
{
	const struct kva__cost *m = &e->cost;
	/* the head's tier is known; another request's, unknown */
	uint8_t tier = atomic_load_explicit(&m->pub_head, memory_order_relaxed) ==
	                       ((uint64_t)h.slot << 32 | h.gen)
	                   ? atomic_load_explicit(&m->pub_head_tier, memory_order_relaxed)
	                   : KVA_TIER_UNKNOWN;
	double ns_tok = atomic_load_explicit(&m->pub_ns_per_token_x1000, memory_order_relaxed) / 1000.0;
	double ns_sq = atomic_load_explicit(&m->pub_attn_ps, memory_order_relaxed) / 1000.0;
	*recompute_ns_out = round_ns(span_ns(ns_tok, ns_sq, 0, prompt));
	*restore_ns_out = 0;
	if (!sel_position)
		return;
	double t = span_ns(ns_tok, ns_sq, sel_position, prompt);
	if (!local) {
		uint64_t bps = atomic_load_explicit(&m->pub_bytes_per_s[tier], memory_order_relaxed);
		t += copy_time(e, (double)atomic_load_explicit(&m->pub_setup_ns[tier], memory_order_relaxed),
		               bps ? 1e9 / (double)bps : 0, sel_position);
	}
	*restore_ns_out = round_ns(t);
}

int kva_prefill_observed_span(kva_engine *e, uint64_t tokens, uint64_t square_span, uint64_t ns)
{
	if (!e || !ns)
		return -EINVAL;
	/* tokens and span before ns: the step's fold looks at ns first (fold_prefill) */
	atomic_fetch_add_explicit(&e->cost.obs_tokens, tokens, memory_order_relaxed);
	if (square_span)
		atomic_fetch_add_explicit(&e->cost.obs_square, square_span, memory_order_relaxed);
	atomic_fetch_add_explicit(&e->cost.obs_ns, ns, memory_order_relaxed);
	return 0;
}

int kva_prefill_observed(kva_engine *e, uint64_t tokens, uint64_t ns)
{
	return kva_prefill_observed_span(e, tokens, 0, ns);
}
