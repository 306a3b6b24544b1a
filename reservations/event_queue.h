/* SPDX-License-Identifier: Apache-2.0 */
/*
 * event_queue.h, event_queue.c: how an event (events.h) reaches the
 * scheduler — the producers' fan-in (waking the host when it was empty),
 * the step's own queue for answers and copy reports its callbacks produce,
 * and the engine's slab of cancel events. Any thread unless noted.
 */
#ifndef KVA_RESERVATIONS_EVENT_QUEUE_H
#define KVA_RESERVATIONS_EVENT_QUEUE_H

#include "engine_state.h"

/* The engine whose kva_step runs on this thread, if any: events it produces
 * (a directory answering from its callback) belong to the step in progress.
 * Inline accessors: every step sets, clears and asks it. */
extern _Thread_local kva_engine *kva__tls_stepping;
/* Scheduler thread: e's step runs on this thread from now (NULL: ended). */
static inline void kva__rec_stepping(kva_engine *e) { kva__tls_stepping = e; }
/* Any thread: whether e's step runs on this thread (a callback re-entering it). */
static inline bool kva__rec_stepping_here(const kva_engine *e) { return kva__tls_stepping == e; }
/* Any thread: hands an event to the scheduler — the inbox (waking the host
 * when it was empty), or the step's own queue for an answer or copy report
 * the scheduler thread produces inside kva_step. */
void kva__event_push(kva_engine *e, struct kva__event *ev);
/* The same without the wake: true when the host's wake callback is due,
 * for a caller inside an RCU read-side section to call kva__wake after it
 * (no callback runs inside one: kvadmit.h). */
bool kva__event_enqueue(kva_engine *e, struct kva__event *ev);
void kva__wake(kva_engine *e);

/* Any thread: a cancel event from e->cancels, or NULL (no memory for a new
 * chunk). The scheduler frees it with kva__cancel_free; the thread that took
 * it and did not push it gives it back with kva__cancel_unused. */
struct kva__cancel *kva__cancel_new(kva_engine *e);
void kva__cancel_free(kva_engine *e, struct kva__cancel *c);
void kva__cancel_unused(kva_engine *e, struct kva__cancel *c);

#endif
