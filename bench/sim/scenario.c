/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The default scenario and the checks that refuse impossible ones. Two
 * profiles (--profile): the production deployment (a GLM-4.7-Flash-class
 * MoE on two DGX Spark, the default) and a 70B-class dense model on two
 * H200s. Every constant is derived in bench/sim/README.md; none was
 * adjusted to produce a result.
 */
#include <stdio.h>
#include <string.h>

#include "sim.h"

/* Profiles: the model and hardware of one engine. Every number is derived in
 * bench/sim/README.md ("Profiles"); none was adjusted to produce a result. */
static const struct sim_model profile_spark_glm = {
    .profile = "spark-glm",
    .model_class = "GLM-4.7-Flash-class MoE (30B-A3B, MLA), TP2+DCP2 on two DGX Spark, MTP",
    .pool_tokens = 1020000, /* the production deployment's aggregate KV tokens */
    .kv_bytes_per_token = 54144.0, /* 47 layers x (512 + 64) x 2 B (MLA latent) */
    .prefill_tok_s = 20833.0,	    /* 2 x 125 TFLOP/s x 50% / 6 GFLOP per token */
    .attn_s_per_tok2 = 3.85e-9,	    /* 481,280 FLOP x (p1^2 - p0^2) / 125 TFLOP/s */
    .weight_dense_bytes = 4.2e9,    /* ~2.1 B non-routed parameters, BF16 */
    .weight_expert_bytes = 55.6e9,  /* 64 experts x 46 layers x 9.44 M, BF16 */
    .n_experts = 64,
    .top_k = 4,
    .tp = 2,
    .mem_bytes_s = 232e9,	 /* 273 GB/s LPDDR5x x 85% */
    .decode_overhead_s = 0.0062, /* 141 collectives x 30 us + 2 ms */
    .kv_read_s_per_tok = 1.167e-7, /* 54,144 B / 2 (DCP2) / 232 GB/s */
    .spec_verify = 4,		   /* MTP: 3 drafts + 1 */
    .spec_accept_milli = 2500,	   /* 2.5 tokens kept per step */
    .import_bytes_s = 68e9,	   /* host store in the same LPDDR5x: 273 / 2 x 50% */
    .write_bytes_s = 68e9,
    .copy_setup_s = 0.0005,
    .lookup_latency_s = 0.001,
    .idle_poll_s = 0.001,
    .step_token_budget = 8192,
    .max_context = 202752,
    .decode_headroom_tokens = 512,
    .decode_reserve_frac = 0.01,
    .max_running = 256,
    .max_copy_retries = 2,
    .keep_local = true,
    /* the deployment's checkpoints are request-boundary bundles of recurrent
     * state (README, "Local cache"): no hit at an arbitrary shorter prefix */
    .local_boundary = true,
};

static const struct sim_model profile_h200_70b = {
    .profile = "h200-70b",
    .model_class = "70B-class dense (Llama-3.1-70B shape), TP2 on two H200",
    .pool_tokens = 360448,
    .kv_bytes_per_token = 327680.0,
    .prefill_tok_s = 7000.0,
    .attn_s_per_tok2 = 1.325e-9,
    .weight_dense_bytes = 141.2e9, /* 70.6 B parameters, BF16 */
    .weight_expert_bytes = 0,
    .n_experts = 0,
    .top_k = 0,
    .tp = 2,
    .mem_bytes_s = 4.08e12,	 /* 4.8 TB/s x 85% */
    .decode_overhead_s = 0.0036, /* 160 all-reduces x 10 us + 2 ms */
    .kv_read_s_per_tok = 4.0e-8,
    .spec_verify = 1,
    .spec_accept_milli = 1000,
    .import_bytes_s = 25e9,
    .write_bytes_s = 25e9,
    .copy_setup_s = 0.0005,
    .lookup_latency_s = 0.001,
    .idle_poll_s = 0.001,
    .step_token_budget = 8192,
    .max_context = 131072,
    .decode_headroom_tokens = 512,
    .decode_reserve_frac = 0.01,
    .max_running = 256,
    .max_copy_retries = 2,
    .keep_local = true,
};

static const struct sim_model *const profiles[] = {&profile_spark_glm, &profile_h200_70b};

const char *sim_profile_names(void)
{
	return "spark-glm (default: the production deployment) | h200-70b";
}

int sim_profile(struct sim_scenario *sc, const char *name)
{
	for (size_t i = 0; i < sizeof(profiles) / sizeof(profiles[0]); i++)
		if (!strcmp(profiles[i]->profile, name)) {
			sc->m = *profiles[i];
			sc->keep_local = sc->m.keep_local;
			sc->local_boundary = sc->m.local_boundary;
			return 0;
		}
	return -1;
}

void sim_defaults(struct sim_scenario *sc)
{
	*sc = (struct sim_scenario){
	    .w =
		{
		    .agents = 8,
		    .seed = 1,
		    .warm = true,
		    .init_ctx_min = 0, /* sim_default_start */
		    .init_ctx_max = 0,
		    .first_min = 8000,
		    .first_max = 24000,
		    .tool_median = 800,
		    .tool_sigma = 1.0,
		    .tool_min = 32,
		    .tool_max = 16384,
		    .decode_median = 250,
		    .decode_sigma = 0.6,
		    .decode_min = 16,
		    .decode_max = 2048,
		    .think_median_s = 2.0,
		    .think_sigma = 1.0,
		    .think_min_s = 0.05,
		    .think_max_s = 60.0,
		    .compact_min = 48000,
		    .compact_max = 64000,
		},
	    .duration_s = 1800.0,
	    .pool_pages = 0, /* 0: the profile's pool tokens / page_tokens */
	    .page_tokens = 16,
	    .max_restore_wait_s = 60.0,
	    .lookup_timeout_s = 5.0,
	    .copy_fail_rate = 0.0,
	    .copy_slots = 32,
	    .world_size = 2,
	    .nodes = 1,
	    .policies = SIM_POLICY_LEGACY | SIM_POLICY_WAIT,
	};
	sim_profile(sc, "spark-glm");
	sim_store_profile(sc, "default", false, false);
}

/* sgl-project/sglang#26305 (8K-token prompts, 16 concurrent): recompute 1,725 ms to the
 * first token, a hit in the file-backed L3 tier 2,450 ms. The slow tier restores at that
 * ratio to the profile's prefill rate: its bandwidth over all ranks is the KV of
 * prefill_tok_s x 1,725 / 2,450 tokens a second (README "Store tiers"). */
#define SGLANG_RECOMPUTE_MS 1725.0
#define SGLANG_FILE_HIT_MS 2450.0

const char *sim_store_names(void)
{
	return "default | slow-tier | mixed-tier | slot-saturation";
}

int sim_store_profile(struct sim_scenario *sc, const char *name, bool agents_given,
		      bool slots_given)
{
	const struct sim_model *m = &sc->m;
	sc->store = name;
	sc->cost_margin = 0.10;
	sc->tier[0] = (struct sim_tier){KVA_TIER_HOST, m->import_bytes_s, m->copy_setup_s};
	sc->tier[1] = (struct sim_tier){
	    KVA_TIER_DISK,
	    m->kv_bytes_per_token * m->prefill_tok_s * (SGLANG_RECOMPUTE_MS / SGLANG_FILE_HIT_MS) /
		sc->world_size,
	    m->copy_setup_s};
	if (!strcmp(name, "default"))
		sc->slow_share = 0;
	else if (!strcmp(name, "slow-tier"))
		sc->slow_share = 1;
	else if (!strcmp(name, "mixed-tier"))
		sc->slow_share = 0.5;
	else if (!strcmp(name, "slot-saturation")) {
		sc->slow_share = 0;
		if (!agents_given)
			sc->w.agents = 32;
		if (!slots_given)
			sc->copy_slots = 1;
	} else {
		return -1;
	}
	return 0;
}

uint32_t sim_default_pool_pages(const struct sim_scenario *sc)
{
	return sc->page_tokens ? (uint32_t)(sc->m.pool_tokens / sc->page_tokens) : 0;
}

/* Long-running agents are found at any point of a session's life, which
 * runs from a condensed restart (compact_min..compact_max) to the model's
 * window, where it is condensed again; a turn adds about the same tokens
 * whatever the size, so every size in between is as likely. */
void sim_default_start(struct sim_scenario *sc)
{
	if (sc->w.init_ctx_max)
		return;
	sc->w.init_ctx_min = sc->w.compact_min;
	sc->w.init_ctx_max = sc->m.max_context;
}

uint32_t sim_decode_reserve_pages(const struct sim_scenario *sc)
{
	/* vLLM's watermark: 1% of the blocks stay free for running requests */
	return (uint32_t)((double)sc->pool_pages * sc->m.decode_reserve_frac + 0.999);
}

uint32_t sim_headroom_pages(const struct sim_scenario *sc)
{
	return (sc->m.decode_headroom_tokens + sc->page_tokens - 1) / sc->page_tokens;
}

const char *sim_check(const struct sim_scenario *sc, char *buf, size_t len)
{
	const struct sim_workload *w = &sc->w;
	if (w->agents < 1 || w->agents > SIM_MAX_AGENTS)
		return snprintf(buf, len, "--agents must be 1..%u", SIM_MAX_AGENTS), buf;
	if (!(sc->duration_s > 0 && sc->duration_s <= 1e7))
		return "--duration must be > 0 and <= 10000000 seconds";
	if (sc->page_tokens < 1 || sc->page_tokens > 4096)
		return "--page-tokens must be 1..4096";
	if (sc->pool_pages < 1 || sc->pool_pages > (1u << 24))
		return "--pool-pages must be 1..16777216";
	if (sc->nodes < 1 || sc->nodes > 4096)
		return "--nodes must be 1..4096";
	if (sc->copy_slots < 1 || sc->copy_slots > 65535)
		return "--copy-slots must be 1..65535";
	if (sc->world_size < 1 || sc->world_size > KVA_MAX_WORLD)
		return snprintf(buf, len, "--world-size must be 1..%d", KVA_MAX_WORLD), buf;
	if (!(sc->copy_fail_rate >= 0 && sc->copy_fail_rate <= 1))
		return "--copy-fail-rate must be in [0, 1]";
	if (!(sc->max_restore_wait_s >= 0 && sc->max_restore_wait_s <= 1e7))
		return "--max-restore-wait must be 0 (unbounded) .. 10000000 seconds";
	if (!(sc->lookup_timeout_s >= 0 && sc->lookup_timeout_s <= 1e7))
		return "--lookup-timeout must be 0 (never) .. 10000000 seconds";
	/* The longest KV one request can hold: a full window, or a compacted
	 * session plus its longest answer. It has to fit beside the watermark,
	 * or that request would preempt itself forever. */
	uint64_t longest = sc->m.max_context;
	if ((uint64_t)w->compact_max + w->decode_max > longest)
		longest = (uint64_t)w->compact_max + w->decode_max;
	uint64_t need = (longest + sc->page_tokens - 1) / sc->page_tokens + sim_headroom_pages(sc);
	uint64_t usable = sc->pool_pages - sim_decode_reserve_pages(sc);
	if (sim_decode_reserve_pages(sc) >= sc->pool_pages || need > usable) {
		uint64_t min_pages =
		    (uint64_t)((double)need / (1.0 - sc->m.decode_reserve_frac)) + 2;
		snprintf(
		    buf, len,
		    "impossible scenario: a pool of %u pages x %u tokens cannot hold one agent's "
		    "longest context (%llu tokens + %u pages decode headroom + %u pages "
		    "watermark); "
		    "such a turn could only ever preempt itself. Use --pool-pages >= %llu.",
		    sc->pool_pages, sc->page_tokens, (unsigned long long)longest,
		    sim_headroom_pages(sc), sim_decode_reserve_pages(sc),
		    (unsigned long long)min_pages);
		return buf;
	}
	return NULL;
}
