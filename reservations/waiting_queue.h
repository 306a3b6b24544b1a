/* SPDX-License-Identifier: Apache-2.0 */
/*
 * waiting_queue.c: the FCFS waiting queue — joining at the back, requeueing
 * to the front, leaving it — and its prefetch hints. Scheduler thread only.
 */
#ifndef KVA_RESERVATIONS_WAITING_QUEUE_H
#define KVA_RESERVATIONS_WAITING_QUEUE_H

#include "engine_state.h"

/* A newly ingested request joins the back of the queue and is looked up. */
void kva__waiting_queue_enqueue(kva_engine *e, struct kva__req *r);
/* r, no longer running or importing, goes back to the front as a new wait:
 * no manifest, no reason, a fresh decisive lookup — but the host's local
 * checkpoint stays (if stated since the last reset), and a preempted request
 * resumes from it (rule host-local-checkpoints). */
void kva__waiting_queue_requeue_front(kva_engine *e, struct kva__req *r, bool preempted);
/* r leaves the waiting queue (admitted or cancelled): queue link, head
 * timers, lookup deadline and index entry go. */
void kva__waiting_queue_forget(kva_engine *e, struct kva__req *r);
/* PRIORITY order: r's priority becomes p; a waiting request whose level
 * changes joins the back of its new one as an arrival of this step. 0, or
 * -ENOMEM (nothing changed). */
int kva__waiting_queue_set_priority(kva_engine *e, struct kva__req *r, int32_t p);
/* Starts the cache misses of the request KVA__AHEAD places behind r. */
void kva__waiting_queue_prefetch_ahead(kva_engine *e, const struct kva__req *r);

#endif
