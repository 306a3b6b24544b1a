/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cost_state.h: the cost policy's learned rates (KVA_POLICY_COST), types
 * only, embedded in the engine state; cost_model.c learns and predicts.
 */
#ifndef KVA_RESERVATIONS_COST_STATE_H
#define KVA_RESERVATIONS_COST_STATE_H

#include <stdatomic.h>
#include <stdint.h>

#include "kvadmit/kvadmit.h"

/* One tier's copies: exponentially weighted moments of (bytes, ns), from
 * which setup latency (intercept) and bandwidth (slope) are fitted. */
struct kva__tier_rate {
	double mb, md, mbb, mbd, mdd; /* E[b], E[d], E[b^2], E[b d], E[d^2] */
	double ns_per_byte, setup_ns;
	uint32_t n; /* copies seen (saturating) */
};

struct kva__cost {
	double alpha; /* weight of a new observation: 1 - 2^(-1/half_life) */
	double margin; /* margin_pct / 100 */
	/* prefill of [start, end): ns_per_token (end - start) + ns_per_square (end^2 - start^2) */
	double ns_per_token, ns_per_square;
	bool prefill_seen;
	/* E[x1^2], E[x1 x2], E[x2^2], E[x1 y], E[x2 y] of the span reports (x1 tokens,
	 * x2 square span, y ns), weighted as every average here */
	double m11, m12, m22, m1y, m2y;
	struct kva__tier_rate tier[KVA_TIER_COUNT];
	double slot_interval_ns; /* mean time between copy-slot releases */
	uint64_t last_release;   /* step clock of the last one */
	uint32_t releases;       /* seen (saturating): 0 none, 1 no interval yet */
	/* the head the choice was made for, and what it chose from */
	const void *head;
	uint32_t head_gen;
	int8_t head_sel;
	uint8_t head_nents;
	uint64_t head_restore_ns, head_recompute_ns; /* its predictions */
	/* producers (kva_prefill_observed); the step folds them in */
	_Atomic uint64_t obs_tokens, obs_square, obs_ns;
	/* published for kva_stats and kva_query (scheduler writes) */
	_Atomic uint64_t pub_ns_per_token_x1000; /* prefill ns per 1000 tokens */
	_Atomic uint64_t pub_attn_ps; /* ns_per_square in picoseconds */
	_Atomic uint64_t pub_bytes_per_s[KVA_TIER_COUNT], pub_setup_ns[KVA_TIER_COUNT];
	_Atomic uint64_t pub_slot_interval_ns;
	_Atomic uint64_t pub_head; /* slot << 32 | gen of the head last chosen for */
	_Atomic uint8_t pub_head_tier;
};

#endif
