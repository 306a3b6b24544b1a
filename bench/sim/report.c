/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Results: sample sets (turn times, time to first token), the derived
 * metrics, the full side-by-side table (--details) and the single JSON object. Both are pure functions of the results,
 * so equal runs print equal bytes (wall time is left out under --no-wall).
 *
 * Definitions (also in bench/sim/README.md):
 *   decode tok/s       tokens sampled in the window / window length
 *   from cache         (local + restored) / prompt tokens of all admissions,
 *                      as the engine counts them (rule tokens-counted-once)
 *   per-turn cache     over completed turns: cached tokens of each turn's first
 *                      admission / its prompt tokens (vLLM's num_cached_tokens,
 *                      counted once per request: the production table's count)
 *   later turn         (later_turns) any turn after a session's first;
 *                      (later_turns_stored) a turn whose history was already
 *                      stored when it began; either counts as restored when
 *                      none of its admissions recomputed
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

int sim_samples_add(struct sim_samples *s, double x)
{
	if (s->n == s->cap) {
		uint32_t cap = s->cap ? 2 * s->cap : 256;
		double *v = realloc(s->v, cap * sizeof(*v));
		if (!v)
			return -1;
		s->v = v;
		s->cap = cap;
	}
	s->v[s->n++] = x;
	return 0;
}

double sim_samples_mean(const struct sim_samples *s)
{
	double sum = 0;
	for (uint32_t i = 0; i < s->n; i++)
		sum += s->v[i];
	return s->n ? sum / s->n : 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* Nearest rank. */
double sim_samples_pct(struct sim_samples *s, double p)
{
	if (!s->n)
		return 0;
	qsort(s->v, s->n, sizeof(*s->v), cmp_double);
	double r = ceil(p * s->n);
	uint32_t i = r < 1 ? 0 : (uint32_t)r - 1;
	return s->v[i < s->n ? i : s->n - 1];
}

void sim_samples_free(struct sim_samples *s)
{
	free(s->v);
	memset(s, 0, sizeof(*s));
}

double sim_ctx_to_pool_start(const struct sim_scenario *sc)
{
	uint64_t sum = 0;
	for (uint32_t i = 0; i < sc->w.agents; i++)
		sum += sc->w.warm ? sim_draw_init_ctx(&sc->w, i) : sim_draw_first(&sc->w, i, 0);
	return (double)sum / ((double)sc->pool_pages * sc->page_tokens * sc->nodes);
}

/* ---- derived metrics ------------------------------------------------------- */

struct sim_metrics sim_metrics(const struct sim_scenario *sc, struct sim_result *r)
{
	struct sim_metrics m;
	const kva_stats *st = &r->st;
	double admitted = (double)st->prompt_tokens_admitted;
	m.decode_tok_s = (double)r->decode_tokens / sc->duration_s;
	/* the local hits legacy recomputes kept are the host's (the engine
	 * counts those tokens recomputed: it decided a recompute) */
	m.local = admitted ? (double)(st->tokens_local + r->kept_local_tokens) / admitted : 0;
	m.external = admitted ? (double)st->tokens_restored / admitted : 0;
	m.cache = m.local + m.external;
	double tp = (double)r->turn_prompt_tokens;
	m.turn_local = tp ? (double)r->turn_local_tokens / tp : 0;
	m.turn_external = tp ? (double)r->turn_ext_tokens / tp : 0;
	m.turn_cache = m.turn_local + m.turn_external;
	m.mean_turn = sim_samples_mean(&r->turn_s);
	m.ttft50 = sim_samples_pct(&r->ttft_s, 0.50);
	m.ttft99 = sim_samples_pct(&r->ttft_s, 0.99);
	m.ok = r->credits_conserved && r->no_leaked_pages && r->all_terminal && r->reported_once &&
	       r->page_accounting;
	return m;
}

bool sim_under_pressure(const struct sim_result *r)
{
	return r->st.preempted || r->st.fallbacks[KVA_REASON_LEGACY] ||
	       r->st.restore_blocked_steps || r->evicted_pages;
}

static double pct(uint64_t part, uint64_t whole)
{
	return whole ? 100.0 * (double)part / (double)whole : 0;
}

static uint64_t fallback_total(const kva_stats *st)
{
	uint64_t n = 0;
	for (int k = 1; k < KVA_REASON_COUNT; k++)
		n += st->fallbacks[k];
	return n;
}

const char *sim_policy_name(int p)
{
	return p == SIM_POLICY_WAIT ? "wait" : p == SIM_POLICY_COST ? "cost" : "legacy";
}

/* ---- table --------------------------------------------------------------------- */

#define LABEL_W 36
#define COL_W 20

static void row(FILE *f, struct sim_result *r[SIM_N_POLICIES], const char *label,
		const char *vals[SIM_N_POLICIES])
{
	fprintf(f, "%-*s", LABEL_W, label);
	for (int i = 0; i < SIM_N_POLICIES; i++)
		if (r[i])
			fprintf(f, "%*s", COL_W, vals[i]);
	fputc('\n', f);
}

#define ROWF(label, ...)                                                                           \
	do {                                                                                       \
		char b_[SIM_N_POLICIES][64];                                                       \
		const char *v_[SIM_N_POLICIES] = {b_[0], b_[1], b_[2]};                            \
		for (int i = 0; i < SIM_N_POLICIES; i++)                                           \
			if (r[i]) {                                                                \
				struct sim_result *x = r[i];                                       \
				struct sim_metrics *mx = &m[i];                                        \
				(void)x;                                                           \
				(void)mx;                                                          \
				snprintf(b_[i], sizeof(b_[i]), __VA_ARGS__);                       \
			}                                                                          \
		row(f, r, label, v_);                                                              \
	} while (0)

void sim_print_details(FILE *f, const struct sim_scenario *sc,
		       struct sim_result *r[SIM_N_POLICIES])
{
	struct sim_metrics m[SIM_N_POLICIES];
	for (int i = 0; i < SIM_N_POLICIES; i++)
		if (r[i])
			m[i] = sim_metrics(sc, r[i]);
	fprintf(f, "kvadmit-sim: %u agents on %u engine%s, %.0f s simulated, seed %llu, %s start\n",
		sc->w.agents, sc->nodes, sc->nodes == 1 ? "" : "s", sc->duration_s,
		(unsigned long long)sc->w.seed, sc->w.warm ? "warm" : "cold");
	if (sc->nodes > 1) /* agent i on engine i mod N: the load of each engine */
		fprintf(f, "%u-%u agents per engine\n", sc->w.agents / sc->nodes,
			(sc->w.agents + sc->nodes - 1) / sc->nodes);
	fprintf(f,
		"pool %u pages x %u tokens (%llu tokens) per engine; agents' contexts %.2fx the "
		"pools at start\n",
		sc->pool_pages, sc->page_tokens,
		(unsigned long long)sc->pool_pages * sc->page_tokens, sim_ctx_to_pool_start(sc));
	fprintf(f, "model: %s (bench/sim/README.md); copies over %u rank%s at %.0f GB/s each\n\n",
		sc->m.model_class, sc->world_size, sc->world_size == 1 ? "" : "s",
		sc->m.import_bytes_s / 1e9);
	const char *hdr[SIM_N_POLICIES];
	for (int i = 0; i < SIM_N_POLICIES; i++)
		hdr[i] = r[i] ? sim_policy_name(r[i]->policy) : "";
	row(f, r, "", hdr);
	ROWF("decode tokens/s", "%.1f", mx->decode_tok_s);
	ROWF("per-turn prompt from cache", "%.1f%%", 100 * mx->turn_cache);
	ROWF("  local / external", "%.1f%% / %.1f%%", 100 * mx->turn_local,
	     100 * mx->turn_external);
	ROWF("  later turns only", "%.1f%%",
	     x->later_prompt_tokens ? 100.0 * x->later_cached_tokens / x->later_prompt_tokens : 0);
	ROWF("  misses: 1st turns / new / other", "%.1f%% / %.1f%% / %.1f%%",
	     pct(x->miss_first, x->turn_prompt_tokens), pct(x->miss_new, x->turn_prompt_tokens),
	     pct(x->miss_other, x->turn_prompt_tokens));
	ROWF("later turns restored (stored)", "%llu/%llu",
	     (unsigned long long)x->later_stored_restored, (unsigned long long)x->later_stored);
	ROWF("prompt tokens from cache (admissions)", "%.1f%%", 100 * mx->cache);
	ROWF("  local reuse", "%.1f%%", 100 * mx->local);
	ROWF("  external restore", "%.1f%%", 100 * mx->external);
	ROWF("later turns restored (after 1st)", "%llu/%llu",
	     (unsigned long long)x->later_turns_restored, (unsigned long long)x->later_turns);
	ROWF("turns completed", "%llu", (unsigned long long)x->turns_completed);
	ROWF("mean turn time (s)", "%.1f", mx->mean_turn);
	ROWF("turns in flight at end, mean age", "%llu, %.1f s", (unsigned long long)x->in_flight,
	     x->in_flight_age_s);
	ROWF("TTFT p50 / p99 (s)", "%.1f / %.1f", mx->ttft50, mx->ttft99);
	ROWF("TTFT mean (s)", "%.2f", sim_samples_mean(&x->ttft_s));
	ROWF("cost: restore / other / recompute", "%llu / %llu / %llu",
	     (unsigned long long)x->st.cost_restores, (unsigned long long)x->st.cost_other_checkpoint,
	     (unsigned long long)x->st.cost_recomputes);
	ROWF("longest copy-slot wait (s)", "%.3f", x->slot_wait_max_s);
	ROWF("preemptions", "%llu", (unsigned long long)x->st.preempted);
	ROWF("steps held (preempted / budget)", "%llu / %llu", (unsigned long long)x->hold_steps,
	     (unsigned long long)x->budget_steps);
	ROWF("recompute fallbacks", "%llu", (unsigned long long)fallback_total(&x->st));
	for (int k = 1; k < KVA_REASON_COUNT; k++) {
		char label[64];
		snprintf(label, sizeof(label), "  %s", kva_reason_name(k));
		ROWF(label, "%llu", (unsigned long long)x->st.fallbacks[k]);
	}
	ROWF("admitted restore / local", "%llu / %llu", (unsigned long long)x->st.admitted_restore,
	     (unsigned long long)x->st.admitted_local);
	ROWF("legacy recomputes keeping local", "%llu", (unsigned long long)x->kept_local);
	ROWF("engine steps", "%llu", (unsigned long long)x->st.steps);
	/* busy time is summed over engines: the share is per engine */
	ROWF("GPU busy (mean of engines)", "%.0f%%", 100 * x->gpu_busy_s / sc->duration_s / sc->nodes);
	ROWF("contexts / pool: mean, end", "%.1fx, %.1fx", x->ctx_to_pool_mean, x->ctx_to_pool_end);
	ROWF("compactions (new sessions)", "%llu", (unsigned long long)x->compactions);
	ROWF("invariants (credits, leaks, ends)", "%s", mx->ok ? "ok" : "FAILED");
	ROWF("wall seconds", "%.2f", x->wall_s);
	for (int i = 0; i < SIM_N_POLICIES; i++)
		if (r[i] && !m[i].ok)
			fprintf(f, "%s: invariant check failed: %s\n", sim_policy_name(r[i]->policy),
				r[i]->check_msg);
}

/* ---- JSON ----------------------------------------------------------------------- */

static void json_policy(FILE *f, const struct sim_scenario *sc, struct sim_result *r)
{
	struct sim_metrics m = sim_metrics(sc, r);
	const kva_stats *st = &r->st;
	fprintf(f, "\"%s\":{", sim_policy_name(r->policy));
	fprintf(f, "\"decode_tok_s\":%.6g,", m.decode_tok_s);
	fprintf(f, "\"cache_token_share\":%.6g,", m.cache);
	fprintf(f, "\"local_token_share\":%.6g,", m.local);
	fprintf(f, "\"external_token_share\":%.6g,", m.external);
	fprintf(f, "\"later_turns_restored\":%llu,", (unsigned long long)r->later_turns_restored);
	fprintf(f, "\"later_turns\":%llu,", (unsigned long long)r->later_turns);
	fprintf(f, "\"turns_completed\":%llu,", (unsigned long long)r->turns_completed);
	fprintf(f, "\"mean_turn_s\":%.6g,", m.mean_turn);
	fprintf(f, "\"ttft_p50_s\":%.6g,", m.ttft50);
	fprintf(f, "\"ttft_p99_s\":%.6g,", m.ttft99);
	fprintf(f, "\"ttft_mean_s\":%.6g,", sim_samples_mean(&r->ttft_s));
	/* the cost policy's choices and rates (0 under the other policies), and the
	 * copy-slot check: the longest wait of one turn for a slot alone, and the most
	 * one exceeded its predicted recompute time plus the margin (null: none waited) */
	fprintf(f,
		"\"cost\":{\"restores\":%llu,\"other_checkpoint\":%llu,\"recomputes\":%llu,"
		"\"prefill_tok_s\":%llu,\"prefill_attn_ps\":%llu,\"host_bytes_s\":%llu,"
		"\"disk_bytes_s\":%llu},",
		(unsigned long long)st->cost_restores, (unsigned long long)st->cost_other_checkpoint,
		(unsigned long long)st->cost_recomputes, (unsigned long long)st->prefill_tokens_per_s,
		(unsigned long long)st->prefill_attn_ps,
		(unsigned long long)st->tier_bytes_per_s[KVA_TIER_HOST],
		(unsigned long long)st->tier_bytes_per_s[KVA_TIER_DISK]);
	fprintf(f, "\"copy_slot_wait_max_s\":%.6g,", r->slot_wait_max_s);
	if (isinf(r->slot_over_max_s))
		fprintf(f, "\"copy_slot_wait_over_recompute_max_s\":null,");
	else
		fprintf(f, "\"copy_slot_wait_over_recompute_max_s\":%.6g,", r->slot_over_max_s);
	fprintf(f, "\"preemptions\":%llu,", (unsigned long long)st->preempted);
	fprintf(f, "\"fallbacks\":{");
	for (int k = 1; k < KVA_REASON_COUNT; k++)
		fprintf(f, "%s\"%s\":%llu", k > 1 ? "," : "", kva_reason_name(k),
			(unsigned long long)st->fallbacks[k]);
	fprintf(f, "},");
	fprintf(f, "\"steps\":%llu,", (unsigned long long)st->steps);
	fprintf(f,
		"\"turn_cache_share\":%.6g,\"turn_local_share\":%.6g,\"turn_external_share\":%.6g,",
		m.turn_cache, m.turn_local, m.turn_external);
	fprintf(f, "\"later_turns_stored\":%llu,\"later_turns_stored_restored\":%llu,",
		(unsigned long long)r->later_stored, (unsigned long long)r->later_stored_restored);
	/* the per-turn share's misses, in prompt tokens of completed turns */
	fprintf(f,
		"\"later_turn_cache_share\":%.6g,\"first_turns_completed\":%llu,"
		"\"turn_miss_tokens\":{\"prompt\":%llu,\"first_turns\":%llu,\"new\":%llu,"
		"\"other\":%llu},",
		r->later_prompt_tokens ? (double)r->later_cached_tokens / r->later_prompt_tokens : 0,
		(unsigned long long)r->first_turns, (unsigned long long)r->turn_prompt_tokens,
		(unsigned long long)r->miss_first, (unsigned long long)r->miss_new,
		(unsigned long long)r->miss_other);
	fprintf(f, "\"turns_in_flight\":%llu,\"in_flight_mean_age_s\":%.6g,",
		(unsigned long long)r->in_flight, r->in_flight_age_s);
	fprintf(f, "\"hold_steps\":%llu,\"budget_spent_steps\":%llu,",
		(unsigned long long)r->hold_steps, (unsigned long long)r->budget_steps);
	fprintf(f, "\"preempted_at_admission\":%llu,",
		(unsigned long long)r->preempted_at_admission);
	fprintf(f, "\"legacy_kept_local\":{\"admissions\":%llu,\"tokens\":%llu},",
		(unsigned long long)r->kept_local, (unsigned long long)r->kept_local_tokens);
	if (sc->no_wall)
		fprintf(f, "\"wall_s\":null,");
	else
		fprintf(f, "\"wall_s\":%.3f,", r->wall_s);
	fprintf(f, "\"decode_tokens\":%llu,", (unsigned long long)r->decode_tokens);
	fprintf(f,
		"\"prompt_tokens\":{\"admitted\":%llu,\"local\":%llu,\"restored\":%llu,"
		"\"recomputed\":%llu},",
		(unsigned long long)st->prompt_tokens_admitted,
		(unsigned long long)st->tokens_local, (unsigned long long)st->tokens_restored,
		(unsigned long long)st->tokens_recomputed);
	fprintf(f, "\"admitted\":{\"restore\":%llu,\"local\":%llu,\"recompute\":%llu},",
		(unsigned long long)st->admitted_restore, (unsigned long long)st->admitted_local,
		(unsigned long long)st->admitted_recompute);
	fprintf(f,
		"\"lookups\":{\"issued\":%llu,\"timed_out\":%llu,\"late\":%llu,\"refreshes\":%llu,"
		"\"revalidations\":%llu},",
		(unsigned long long)st->lookups_issued, (unsigned long long)st->lookups_timed_out,
		(unsigned long long)st->late_answers, (unsigned long long)st->refreshes,
		(unsigned long long)st->revalidations);
	fprintf(f, "\"copies\":{\"jobs\":%llu,\"failed\":%llu,\"retries\":%llu,\"shorter\":%llu},",
		(unsigned long long)st->copy_jobs, (unsigned long long)st->copy_attempts_failed,
		(unsigned long long)st->copy_retries, (unsigned long long)st->shorter_fallbacks);
	fprintf(f, "\"restore_blocked_steps\":%llu,\"wait_expired\":%llu,",
		(unsigned long long)st->restore_blocked_steps,
		(unsigned long long)st->wait_expired);
	fprintf(f,
		"\"local_cache\":{\"evicted_pages\":%llu,\"evictions_reported\":%llu,"
		"\"stale_local_admissions\":%llu,\"shrunk_entries\":%llu},",
		(unsigned long long)r->evicted_pages, (unsigned long long)r->evictions_reported,
		(unsigned long long)r->stale_local, (unsigned long long)r->shrunk_entries);
	fprintf(f, "\"gpu_steps\":%llu,\"gpu_busy_s\":%.6g,\"idle_polls\":%llu,",
		(unsigned long long)r->gpu_steps, r->gpu_busy_s, (unsigned long long)r->idle_polls);
	fprintf(f, "\"ctx_to_pool_mean\":%.6g,\"ctx_to_pool_end\":%.6g,\"compactions\":%llu,",
		r->ctx_to_pool_mean, r->ctx_to_pool_end, (unsigned long long)r->compactions);
	sim_timeline_json(f, &r->tl);
	fputc(',', f);
	fprintf(f,
		"\"checks\":{\"ok\":%s,\"credits_conserved\":%s,\"no_leaked_pages\":%s,"
		"\"all_terminal\":%s,\"reported_once\":%s,\"page_accounting\":%s}",
		m.ok ? "true" : "false", r->credits_conserved ? "true" : "false",
		r->no_leaked_pages ? "true" : "false", r->all_terminal ? "true" : "false",
		r->reported_once ? "true" : "false", r->page_accounting ? "true" : "false");
	fprintf(f, "}");
}

void sim_print_json(FILE *f, const struct sim_scenario *sc, struct sim_result *r[SIM_N_POLICIES])
{
	const struct sim_model *md = &sc->m;
	const struct sim_workload *w = &sc->w;
	fprintf(f, "{\"scenario\":{");
	fprintf(f, "\"profile\":\"%s\",\"agents\":%u,\"nodes\":%u,\"duration_s\":%.6g,\"seed\":%llu,",
		md->profile, w->agents, sc->nodes, sc->duration_s, (unsigned long long)w->seed);
	fprintf(f, "\"start\":\"%s\",\"keep_local\":%s,\"local_cache\":\"%s\",",
		w->warm ? "warm" : "cold", sc->keep_local ? "true" : "false",
		sc->local_boundary ? "boundary" : "prefix");
	fprintf(f, "\"directory\":\"%s\",", sc->directory == SIM_DIR_FLEET ? "fleet" : "model");
	fprintf(f,
		"\"store\":{\"name\":\"%s\",\"slow_share\":%.6g,\"fast_bytes_s\":%.6g,"
		"\"slow_bytes_s\":%.6g,\"setup_s\":%.6g,\"cost_margin\":%.6g},",
		sc->store, sc->slow_share, sc->tier[0].bytes_s, sc->tier[1].bytes_s,
		sc->tier[1].setup_s, sc->cost_margin);
	fprintf(f, "\"pool_pages\":%u,\"page_tokens\":%u,\"pool_tokens\":%llu,", sc->pool_pages,
		sc->page_tokens, (unsigned long long)sc->pool_pages * sc->page_tokens);
	fprintf(f, "\"ctx_to_pool_start\":%.6g,", sim_ctx_to_pool_start(sc));
	fprintf(f, "\"world_size\":%u,\"copy_slots\":%u,\"copy_fail_rate\":%.6g,", sc->world_size,
		sc->copy_slots, sc->copy_fail_rate);
	fprintf(f, "\"max_restore_wait_s\":%.6g,\"lookup_timeout_s\":%.6g,", sc->max_restore_wait_s,
		sc->lookup_timeout_s);
	fprintf(f, "\"decode_reserve_pages\":%u,\"decode_headroom_pages\":%u,",
		sim_decode_reserve_pages(sc), sim_headroom_pages(sc));
	struct sim_batch one = {.n_decode = 1, .decode_tokens = md->spec_verify};
	fprintf(f,
		"\"model\":{\"class\":\"%s\",\"pool_tokens\":%llu,"
		"\"kv_bytes_per_token\":%.6g,\"prefill_tok_s\":%.6g,\"attn_s_per_tok2\":%.6g,"
		"\"decode_step_s\":%.6g,\"weight_dense_bytes\":%.6g,\"weight_expert_bytes\":%.6g,"
		"\"experts\":%u,\"top_k\":%u,\"tp\":%u,\"mem_bytes_s\":%.6g,"
		"\"decode_overhead_s\":%.6g,\"spec_verify\":%u,\"spec_accept\":%.6g,"
		"\"kv_read_s_per_tok\":%.6g,\"import_bytes_s\":%.6g,"
		"\"write_bytes_s\":%.6g,\"copy_setup_s\":%.6g,\"lookup_latency_s\":%.6g,"
		"\"step_token_budget\":%u,\"max_context\":%u,\"max_running\":%u},",
		md->model_class, (unsigned long long)md->pool_tokens, md->kv_bytes_per_token,
		md->prefill_tok_s, md->attn_s_per_tok2, sim_gpu_step_s(md, &one),
		md->weight_dense_bytes, md->weight_expert_bytes, md->n_experts, md->top_k, md->tp,
		md->mem_bytes_s, md->decode_overhead_s, md->spec_verify,
		md->spec_accept_milli / 1000.0, md->kv_read_s_per_tok, md->import_bytes_s,
		md->write_bytes_s, md->copy_setup_s, md->lookup_latency_s, md->step_token_budget,
		md->max_context, md->max_running);
	fprintf(
	    f,
	    "\"workload\":{\"init_ctx\":[%u,%u],\"first_prompt\":[%u,%u],\"tool_tokens\":{\"median\":%.6g,\"sigma\":%.6g,"
	    "\"min\":%u,\"max\":%u},\"decode_tokens\":{\"median\":%.6g,\"sigma\":%.6g,\"min\":%u,"
	    "\"max\":%u},\"think_s\":{\"median\":%.6g,\"sigma\":%.6g,\"min\":%.6g,\"max\":%.6g},"
	    "\"compact_to\":[%u,%u]}",
	    w->init_ctx_min, w->init_ctx_max, w->first_min, w->first_max, w->tool_median, w->tool_sigma, w->tool_min,
	    w->tool_max, w->decode_median, w->decode_sigma, w->decode_min, w->decode_max,
	    w->think_median_s, w->think_sigma, w->think_min_s, w->think_max_s, w->compact_min,
	    w->compact_max);
	fprintf(f, "},\"policies\":{");
	bool first = true;
	for (int i = 0; i < SIM_N_POLICIES; i++) {
		if (!r[i])
			continue;
		if (!first)
			fputc(',', f);
		first = false;
		json_policy(f, sc, r[i]);
	}
	fprintf(f, "}}\n");
}
