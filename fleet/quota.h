/* SPDX-License-Identifier: Apache-2.0 */
/*
 * quota: what one publisher may take of what the fleet shares. Its share of
 * the index cap (an even split among the open publishers: past it, its
 * entries are the ones the cap evicts), and the quarantine of a (publisher,
 * medium) pair whose copies failed (kva_fleet_report_failure): left out of
 * answers for quarantine_ns. The per-publisher caps on medium names and on
 * checkpoints in an answer live where they apply (apply.c, lookup_answer.c).
 * I/O thread only.
 */
#ifndef KVA_FLEET_QUOTA_H
#define KVA_FLEET_QUOTA_H

#include "fleet_state.h"

/* The index's per-publisher share, after a publisher opened or closed. */
void kvf_quota_update(kva_fleet *f);

/* The pair of the watched checkpoint `id` is quarantined until now +
 * quarantine_ns (counted; an id no watch knows is counted apart). */
void kvf_quarantine_report(kva_fleet *f, uint64_t id, uint64_t now);

/* Whether pair is quarantined at now. */
bool kvf_quarantined(kva_fleet *f, uint32_t pair, uint64_t now);

#endif
