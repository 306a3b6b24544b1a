/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cost_model.h, cost_model.c: the cost policy (KVA_POLICY_COST,
 * docs/design.md: cost policy) — rates learned from the copies and the
 * host's prefill reports, predicted time to first token per source, and
 * the head's choice among its checkpoints and recomputing. Calls lookup.c
 * (selection, fallback) and stats.c. Scheduler thread unless said.
 */
#ifndef KVA_RESERVATIONS_COST_MODEL_H
#define KVA_RESERVATIONS_COST_MODEL_H

#include "engine_state.h"

/* 0 or -EINVAL: the cost config's ranges (only checked under COST). */
int kva__cost_config_check(const kva_config *c);
/* Seeds the rates from cfg.cost (at create). */
void kva__cost_init(kva_engine *e);
/* A copy of `pages` pages from tier `tier` took `ns`, dispatch to the last
 * rank's report; its copy slot is released now. */
void kva__cost_copy_observed(kva_engine *e, uint8_t tier, uint32_t pages, uint64_t ns);
/* A copy's slot was released (its import is READY, copied or not). */
void kva__cost_slot_released(kva_engine *e);
/* The head r (F_RESTORE, decided) under COST: choose its source by
 * predicted time to first token. Returns true when it now recomputes
 * (fallen back with KVA_REASON_COST); else its selection may have changed. */
bool kva__cost_choose(kva_engine *e, struct kva__req *r);
/* The head r could not reserve. true: it waits for a copy slot only (its
 * pages would fit) longer than recomputing would take; it fell back with
 * KVA_REASON_COST. Else `*deadline` is when that will be (UINT64_MAX:
 * never). */
bool kva__cost_wait_over(kva_engine *e, struct kva__req *r, uint64_t *deadline);
/* Any thread: predictions for kva_query (ns from now; restore 0 when no
 * selection) from the published rates. */
void kva__cost_query(const kva_engine *e, kva_handle h, uint32_t prompt, uint32_t sel_position,
                     bool local, uint64_t *restore_ns, uint64_t *recompute_ns);

#endif
