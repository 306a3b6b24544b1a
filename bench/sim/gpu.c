/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GPU: how long one engine step takes, as a function of the prefill
 * tokens, the decode batch and the context they attend to. A roofline in
 * three terms (constants and their derivation in bench/sim/README.md):
 *
 *   linear layers   max(weights read, tokens / prefill_tok_s)
 *                   a step reads the weights once (the decode floor) or is
 *                   compute bound once it carries enough prefill tokens; a
 *                   mixture of experts reads only the experts its tokens
 *                   route to: each token picks top_k of n_experts, so a
 *                   step of T tokens touches a share 1 - (1 - k/n)^T of them
 *   prefill attn    attn_s_per_tok2 * sum(p1^2 - p0^2) over prefill chunks
 *                   (causal attention of chunk [p0, p1) is quadratic)
 *   decode attn     kv_read_s_per_tok * sum(context) over decoding sequences
 *                   (each decode step reads every context token's KV once,
 *                   also when it verifies several speculated tokens)
 */
#include <math.h>

#include "sim.h"

double sim_gpu_step_s(const struct sim_model *m, const struct sim_batch *b)
{
	double tokens = (double)(b->prefill_tokens + b->decode_tokens);
	double experts = m->weight_expert_bytes;
	if (experts > 0 && m->n_experts)
		experts *= 1.0 - pow(1.0 - (double)m->top_k / m->n_experts, tokens);
	double read = (m->weight_dense_bytes + experts) / m->tp / m->mem_bytes_s +
		      m->decode_overhead_s;
	double linear = tokens / m->prefill_tok_s;
	if (linear < read)
		linear = read;
	return linear + m->attn_s_per_tok2 * b->attn_tok2 + m->kv_read_s_per_tok * b->decode_ctx;
}
