/* SPDX-License-Identifier: Apache-2.0 */
/*
 * copy.c: copy jobs — queueing an attempt, handing it to importers and the plan,
 * collective completion (rule collective-completion), bounded retries with shorter-
 * checkpoint recovery (rule retry-then-shorter) and drain before reuse (rule
 * drain-before-reuse). Calls lookup.c, lifecycle.c and grant.c; what a finished copy
 * makes of the request (READY, requeue after a reset) it reports back to its caller.
 * Scheduler thread.
 */
#ifndef KVA_RESERVATIONS_COPY_H
#define KVA_RESERVATIONS_COPY_H

#include "engine_state.h"

/* What a completed copy attempt asks of the admission side. */
enum kva__copy_outcome {
	KVA__COPY_PENDING,   /* nothing yet: ranks outstanding, or a retry queued */
	KVA__COPY_READY,     /* owns its capacity, import done (or fallback): READY */
	KVA__COPY_REQUEUE,   /* a reset happened while copying: back to the front */
	KVA__COPY_DRAINED,   /* a cancelled request's pages are back */
};

/* Queues a new copy attempt of r's selected checkpoint. */
void kva__copy_start(kva_engine *e, struct kva__req *r);
/* One rank of r's current attempt reported. */
enum kva__copy_outcome kva__copy_on_report(kva_engine *e, struct kva__req *r,
                                           struct kva__event *ev);
/* Hands queued attempts to the importers and lists them in the plan. */
void kva__copy_dispatch_pending(kva_engine *e);
/* An IMPORTING request is cancelled: credits and the copy slot now, its
 * destination pages when the copy drained (at once if never dispatched). */
void kva__copy_cancel(kva_engine *e, struct kva__req *r);

#endif
