/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GPU: how long one engine step takes, as a function of the prefill
 * tokens, the decode batch and the context they attend to. A roofline in
 * three terms (constants and their derivation in bench/sim/README.md):
 *
 *   linear layers   max(decode_step_s, tokens / prefill_tok_s)
 *                   a step reads the weights once (the decode floor) or is
 *                   compute bound once it carries enough prefill tokens
 *   prefill attn    attn_s_per_tok2 * sum(p1^2 - p0^2) over prefill chunks
 *                   (causal attention of chunk [p0, p1) is quadratic)
 *   decode attn     kv_read_s_per_tok * sum(context) over decoding sequences
 *                   (each decode step reads every context token's KV once)
 */
#include "sim.h"

double sim_gpu_step_s(const struct sim_model *m, const struct sim_batch *b)
{
	double linear = (double)(b->prefill_tokens + b->n_decode) / m->prefill_tok_s;
	if (linear < m->decode_step_s)
		linear = m->decode_step_s;
	return linear + m->attn_s_per_tok2 * b->attn_tok2 + m->kv_read_s_per_tok * b->decode_ctx;
}
