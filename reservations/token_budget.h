/* SPDX-License-Identifier: Apache-2.0 */
/*
 * token_budget.c: the step's prefill token budget (kva_plan.token_budget,
 * e->budget_left): set once per step, spent by each admission's first chunk.
 * Scheduler thread only.
 */
#ifndef KVA_RESERVATIONS_TOKEN_BUDGET_H
#define KVA_RESERVATIONS_TOKEN_BUDGET_H

#include "engine_state.h"

/* Once per step, before the first kva__admit_run: the step's token budget
 * (none: no limit). */
void kva__token_budget_start(kva_engine *e);
/* Whether nothing is left for a prefill this step. */
bool kva__token_budget_spent(const kva_engine *e);
/* The tokens an admission prefills in its first step (its first chunk after
 * the `cached` prefix, at least one), cut to what is left of the budget. */
uint32_t kva__token_budget_first_chunk(const kva_engine *e, uint32_t prompt, uint32_t cached);
/* An admission starts `tokens` (at most what is left). */
void kva__token_budget_spend(kva_engine *e, uint32_t tokens);

#endif
