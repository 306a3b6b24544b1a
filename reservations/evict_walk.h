/* SPDX-License-Identifier: Apache-2.0 */
/*
 * evict_walk.h, evict_walk.c: what an eviction does to the requests that
 * selected its checkpoint (rule eviction-revalidates) — those whose copy is
 * older look up again, a bounded number per step, the rest over later steps.
 * Scheduler thread only.
 */
#ifndef KVA_RESERVATIONS_EVICT_WALK_H
#define KVA_RESERVATIONS_EVICT_WALK_H

#include "engine_state.h"

/* Sharers the pending evictions look at per step, all together: about
 * 0.1 ms of cache misses at a million waiting. */
#define KVA__EVICT_STEP_RECORDS 1024
#ifdef KVA_FAULT_INJECTION
/* Test builds: fuzz_engine lowers it (0: the default) so that its few
 * sharers walk over several steps too. */
extern uint32_t kva__evict_step_records;
void kva__evict_step_records_set(uint32_t n);
#else
#define kva__evict_step_records KVA__EVICT_STEP_RECORDS
#endif

/* An eviction: takes ev (kept while its sharers are revalidated over
 * several steps, or freed). 0, or -ENOMEM: no room to keep one more walk
 * pending; nothing changed, the event is retried. */
int kva__evict_walk_start(kva_engine *e, struct kva__evict *ev);
/* At the start of each step: the budget of sharers evictions may look at. */
static inline void kva__evict_step_begin(kva_engine *e)
{
	e->evict_budget = kva__evict_step_records;
}
/* Each step: the pending evictions look at more sharers, within the step's
 * budget (e->evict_budget, set by the step). true if any was looked at. */
bool kva__evict_walks_continue(kva_engine *e);
/* Whether a pending eviction is newer than r's selected copy (r a restore,
 * WAITING, about to be admitted); if so r looks up again. */
bool kva__evict_revalidate_sel(kva_engine *e, struct kva__req *r);

#endif
