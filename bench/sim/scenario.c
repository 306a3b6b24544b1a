/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The default scenario and the checks that refuse impossible ones. Every
 * constant here is derived in bench/sim/README.md (model class: a 70B-class
 * dense model — Llama-3.1-70B shape — served with TP2 on two H200s); none
 * was adjusted to produce a result.
 */
#include <stdio.h>

#include "sim.h"

/* KV pool of the reference deployment, in tokens (README: "KV pool"). */
#define SIM_POOL_TOKENS 360448u

void sim_defaults(struct sim_scenario *sc)
{
	*sc = (struct sim_scenario){
	    .w =
		{
		    .agents = 8,
		    .seed = 1,
		    .init_ctx_min = 80000,
		    .init_ctx_max = 104000,
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
	    .m =
		{
		    .kv_bytes_per_token = 327680.0,
		    .prefill_tok_s = 7000.0,
		    .attn_s_per_tok2 = 1.325e-9,
		    .decode_step_s = 0.021,
		    .kv_read_s_per_tok = 4.0e-8,
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
		},
	    .duration_s = 1800.0,
	    .pool_pages = 0, /* 0: SIM_POOL_TOKENS / page_tokens */
	    .page_tokens = 16,
	    .max_restore_wait_s = 60.0,
	    .lookup_timeout_s = 5.0,
	    .copy_fail_rate = 0.0,
	    .copy_slots = 32,
	    .world_size = 2,
	    .policies = SIM_POLICY_LEGACY | SIM_POLICY_WAIT,
	};
}

uint32_t sim_default_pool_pages(uint32_t page_tokens)
{
	return page_tokens ? SIM_POOL_TOKENS / page_tokens : 0;
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
