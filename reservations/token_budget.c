/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The step's prefill token budget (kva_plan.token_budget): what is left of
 * it (e->budget_left), and the first chunk an admission would prefill now.
 * Owns e->budget_left; calls nothing.
 */
#include "token_budget.h"

void kva__token_budget_start(kva_engine *e)
{
	kva_plan *plan = e->plan;
	uint32_t b = plan->token_budget;
	bool none = b == KVA_TOKEN_BUDGET_UNLIMITED || (b == 0 && !plan->token_budget_exact);
	e->budget_left = none ? UINT64_MAX : b;
}

bool kva__token_budget_spent(const kva_engine *e)
{
	return e->budget_left == 0;
}

/* The tokens an admission prefills in its first step: its first chunk after
 * the cached prefix, at least one. */
static uint32_t first_chunk(const kva_engine *e, uint32_t prompt, uint32_t cached)
{
	uint32_t rest = prompt - cached;
	uint32_t t = rest < e->cfg.prefill_chunk_tokens ? rest : e->cfg.prefill_chunk_tokens;
	return t ? t : 1;
}

/* What is left of the budget for `tokens` (all of them if they fit). */
static uint32_t budget_cut(const kva_engine *e, uint32_t tokens)
{
	return tokens < e->budget_left ? tokens : (uint32_t)e->budget_left;
}

uint32_t kva__token_budget_first_chunk(const kva_engine *e, uint32_t prompt, uint32_t cached)
{
	return budget_cut(e, first_chunk(e, prompt, cached));
}

void kva__token_budget_spend(kva_engine *e, uint32_t tokens)
{
	e->budget_left -= tokens;
}
