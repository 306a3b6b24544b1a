/* SPDX-License-Identifier: Apache-2.0 */
/*
 * prio.h: what a record carries under KVA_ORDER_PRIORITY — a trailer after
 * the record in its slab slot (the slot is 16 bytes larger; an FCFS engine's
 * stays 160). Types and one accessor only, below the engine state's users:
 * priority_levels.c (waiting) and run_heap.c (running) read it.
 */
#ifndef KVA_RESERVATIONS_PRIO_H
#define KVA_RESERVATIONS_PRIO_H

#include "record.h"

struct kva__prio {
	uint64_t arrival; /* ns: the host's, or the step clock at ingest */
	int32_t priority; /* the current one (kva_set_priority) */
	uint32_t at;      /* WAITING: its level's index (priority_levels.c);
	                   * RUNNING: its run stamp (run_heap.c) */
};

static inline struct kva__prio *kva__prio(const struct kva__req *r)
{
	return (struct kva__prio *)(uintptr_t)(r + 1);
}

/* r's lines (kva__rec_prefetch) and, under priority order (`prio`), its
 * trailer's: a 176-byte slot's trailer lies on a fourth line for one slot
 * in four, which the record's three prefetches miss. */
static inline void kva__rec_prefetch_slot(const struct kva__req *r, bool prio)
{
	kva__rec_prefetch(r);
	if (prio)
		__builtin_prefetch(kva__prio(r));
}

#endif
