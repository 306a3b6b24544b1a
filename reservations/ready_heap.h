/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ready_heap.c: READY restores in the order they left the waiting queue, a
 * min-heap on queue_seq. Never full: a READY request holds one of
 * max_running's credits. Scheduler thread only.
 */
#ifndef KVA_RESERVATIONS_READY_HEAP_H
#define KVA_RESERVATIONS_READY_HEAP_H

#include "engine_state.h"

/* r (its grant's queue_seq set) becomes READY. O(log R). */
void kva__ready_heap_push(kva_engine *e, struct kva__req *r);
/* r leaves (admitted, cancelled, its checkpoint gone). O(log R). */
void kva__ready_heap_remove(kva_engine *e, struct kva__req *r);
/* The READY request that left the queue first, or NULL. */
struct kva__req *kva__ready_heap_first(const kva_engine *e);
/* For a reset, which empties the heap: sorts it by queue_seq in place, for
 * kva__ready_heap_pop_last only (places are not updated; a sorted array is
 * still a heap). */
void kva__ready_heap_sort(kva_engine *e);
/* The last of a sorted heap, taken out; NULL when it is empty. */
struct kva__req *kva__ready_heap_pop_last(kva_engine *e);

#endif
