/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The waiting queue (e->waitq): requests join at the back, come back to
 * the front (preemption, reset, a failed or stale copy: rule
 * reset-returns-ready) and leave when admitted or cancelled; each push to the
 * back leaves a prefetch hint (`ahead`) in the request pushed KVA__AHEAD
 * before it. Under PRIORITY order, the back and the front are those of the
 * request's priority level (priority_levels.c). Calls head_timers.c, lookup.c
 * and priority_levels.c. Scheduler thread only.
 */
#include <errno.h>

#include "head_timers.h"
#include "lifecycle.h"
#include "lookup.h"
#include "prio.h"
#include "priority_levels.h"
#include "run_heap.h"
#include "waiting_queue.h"

/* r goes to the back: it becomes the `ahead` hint of the request pushed
 * KVA__AHEAD pushes ago (into its priority level, under PRIORITY order: the
 * level's own ring), if that one still waits unblocked (then its record,
 * touched that recently, is still in the cache). */
static void leave_hint(kva_engine *e, struct kva__req *r, struct kva__pushed *ring, uint32_t *n)
{
	uint32_t slot = kva__rec_slot(r);
	r->ahead = 0;
	struct kva__pushed *p = &ring[(*n)++ % KVA__AHEAD];
	struct kva__req *behind = kva_slab_lookup(&e->slab, p->slot, p->gen);
	if (behind && !(behind->flags & KVA__F_BLOCKED) &&
	    atomic_load_explicit(&behind->state, memory_order_relaxed) == KVA_STATE_WAITING)
		behind->ahead = slot + 1;
	p->slot = slot;
	p->gen = atomic_load_explicit(&r->hdr.gen, memory_order_relaxed);
}

/* Starts the cache misses of the request KVA__AHEAD places behind r. */
void kva__waiting_queue_prefetch_ahead(kva_engine *e, const struct kva__req *r)
{
	if ((r->flags & KVA__F_BLOCKED) || !r->ahead)
		return;
	const struct kva__req *x = kva_slab_get(&e->slab, r->ahead - 1);
	if (x)
		kva__rec_prefetch_slot(x, e->lv != NULL);
}

void kva__waiting_queue_enqueue(kva_engine *e, struct kva__req *r)
{
	kva__rec_wait_begins(r, e->now);
	if (e->lv) {
		kva__levels_join(e, r, false); /* room reserved at ingest (step_events.c) */
		uint32_t *n;
		struct kva__pushed *ring = kva__levels_ring(e, r, &n);
		leave_hint(e, r, ring, n);
	} else {
		leave_hint(e, r, e->pushed, &e->n_pushed);
		kva_waitq_push_back(&e->waitq, &r->wq);
	}
	kva__lookup_begin(e, r, false);
}

void kva__waiting_queue_requeue_front(kva_engine *e, struct kva__req *r, bool preempted)
{
	/* the host's local checkpoint stays, also after a reset: one stated
	 * before it is ignored by its mark (lookup.c), one stated after holds */
	kva__lookup_requeue(e, r, true);
	r->flags &= (uint16_t) ~(KVA__F_DECIDED | KVA__F_RESTORE | KVA__F_REFRESH | KVA__F_BLOCKED);
	r->reason = KVA_REASON_NONE;
	atomic_store_explicit(&r->pub_reason, 0, memory_order_relaxed);
	kva_timer_init(&r->deadline); /* the union held a list link until now */
	r->ahead = 0;                 /* and this one a time or a stale hint */
	kva__rec_set_state(e, r, KVA_STATE_WAITING);
	kva__rec_wait_begins(r, e->now);
	if (e->lv) {
		/* the front of its level; a new level that finds no memory
		 * borrows a neighbour's (kva__levels_join) */
		(void)kva__levels_reserve(e, r);
		kva__levels_join(e, r, true);
	} else
		kva_waitq_push_front(&e->waitq, &r->wq);
	kva__lookup_begin(e, r, preempted);
}

int kva__waiting_queue_set_priority(kva_engine *e, struct kva__req *r, int32_t p)
{
	struct kva__prio *pr = kva__prio(r);
	int32_t old = pr->priority;
	/* Not in the queue (not ingested yet, admitted, preempted): the
	 * priority counts when it joins it. */
	if (!(r->flags & KVA__F_INGESTED) ||
	    atomic_load_explicit(&r->state, memory_order_relaxed) != KVA_STATE_WAITING) {
		pr->priority = p;
		kva__run_heap_update(e, r); /* a running one: the victim choice */
		return 0;
	}
	/* It joins its new level's back as a new arrival: O(1), no walk past
	 * the level's later arrivals (with aging, its aging starts again). */
	int64_t key = kva__levels_key(e, r);
	uint64_t arrival = pr->arrival;
	pr->priority = p;
	if (pr->arrival < e->now)
		pr->arrival = e->now;
	if (kva__levels_key(e, r) == key) {
		pr->arrival = arrival; /* same level: its place stays */
		return 0;
	}
	if (kva__levels_reserve(e, r) != 0) {
		pr->priority = old;
		pr->arrival = arrival;
		return -ENOMEM;
	}
	kva__levels_leave(e, r); /* the level it is counted in (its index) */
	kva__levels_join(e, r, false);
	return 0;
}

void kva__waiting_queue_forget(kva_engine *e, struct kva__req *r)
{
	if (e->lv)
		kva__levels_leave(e, r);
	else
		kva_waitq_unlink(&e->waitq, &r->wq);
	kva__head_timers_forget(e, r);
	kva__lookup_forget(e, r);
}
