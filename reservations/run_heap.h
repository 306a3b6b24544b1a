/* SPDX-License-Identifier: Apache-2.0 */
/*
 * run_heap.c: under KVA_ORDER_PRIORITY, the RUNNING requests in a max-heap
 * on (priority, arrival): its top is vLLM's preemption victim
 * (kva_preempt_candidate). lifecycle.c keeps it as states change. Scheduler
 * thread only.
 */
#ifndef KVA_RESERVATIONS_RUN_HEAP_H
#define KVA_RESERVATIONS_RUN_HEAP_H

#include "engine_state.h"

struct kva__run_ent {
	int32_t priority;
	uint32_t stamp;   /* its request's run stamp when pushed: stale if newer */
	uint64_t arrival; /* here, so that a sift reads no record */
	struct kva__req *r;
	uint32_t gen;     /* its request's generation: stale once retired */
};

/* 0, or -ENOMEM. Nothing (e->run stays NULL) under FCFS. */
int kva__run_heap_init(kva_engine *e);
void kva__run_heap_fini(kva_engine *e);
/* r's state becomes `to` (lifecycle.c, before it changes): r enters the heap
 * when it becomes RUNNING (O(log R), no other record touched), its entry is
 * stale when it stops (O(1)). */
void kva__run_heap_on_state(kva_engine *e, struct kva__req *r, uint32_t to);
/* r's priority changed: a new entry if it runs (the old one is stale). O(log R). */
void kva__run_heap_update(kva_engine *e, struct kva__req *r);
/* After admission: plan.preempt_hint, when the head waits for capacity (its
 * lookup decided) and its priority is at least preempt_threshold smaller
 * than the heap's top's (priorities as given, aging aside). O(1). */
void kva__run_heap_hint(kva_engine *e);

#endif
