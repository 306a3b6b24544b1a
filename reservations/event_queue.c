/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Handing events to the scheduler (see event_queue.h): the producers'
 * fan-in, the step's own queue for what its callbacks produce, the host's
 * wake, and the slab of cancel events. Calls only the lock-free blocks
 * (and alloc.c's fault point).
 */
#include "alloc.h"
#include "event_queue.h"

_Thread_local kva_engine *kva__tls_stepping; /* event_queue.h */

struct kva__cancel *kva__cancel_new(kva_engine *e)
{
	/* Taking a slot is this call's allocation (fault-injection builds). */
	if (kva__fault_point())
		return NULL;
	uint32_t idx;
	struct kva__cancel *c = kva_slab_alloc(&e->cancels, &idx);
	if (c)
		c->self = idx;
	return c;
}

void kva__cancel_free(kva_engine *e, struct kva__cancel *c)
{
	kva_slab_retire(&e->cancels, &e->cancels_retired, c->self);
}

void kva__cancel_unused(kva_engine *e, struct kva__cancel *c)
{
	kva_slab_unalloc(&e->cancels, c->self);
}

bool kva__event_enqueue(kva_engine *e, struct kva__event *ev)
{
	/* Answers and copy reports the step's own callbacks produce belong to
	 * it (bounded by the lookups and copies it started); anything else a
	 * callback does (a submit, a cancel) waits for the next step. */
	if (kva__tls_stepping == e && (ev->type == KVA__EV_ANSWER || ev->type == KVA__EV_COPY)) {
		kva_inbox_push(&e->local, &ev->node);
		return false;
	}
	return kva_fanin_push(&e->inbox, &ev->node) && e->cfg.wake;
}

void kva__wake(kva_engine *e)
{
	e->cfg.wake(e->cfg.wake_ctx);
}

void kva__event_push(kva_engine *e, struct kva__event *ev)
{
	if (kva__event_enqueue(e, ev))
		kva__wake(e);
}
