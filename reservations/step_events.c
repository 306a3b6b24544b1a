/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The step's event handling: each event of the inbox, the step's own queue
 * and the deferred cancels goes to its owner (submit -> record id map +
 * waiting queue + lookup; answer -> lookup; eviction -> evict_walk; copy
 * report -> admit -> copy; cancel -> whichever list holds the request, then
 * record; reset -> admit), fired timers to theirs (lookup deadlines, the
 * head's timers), and terminal outcomes to the plan. Calls admit.c,
 * evict_walk.c, lookup.c and the files below them; kva_step (engine.c) calls
 * it.
 *
 * Never blocks: the inbox (one lane per producer thread) is spliced without
 * waiting once per step; an event whose producer is still linking it waits
 * for the next step with all after it in its lane. Lanes have no order
 * between them: the one event that can overtake what it depends on, a cancel
 * of a request submitted on another thread, is retried until the submit
 * was ingested. Events the step's own callbacks produce (a directory
 * answering from its callback, an importer refusing) go to a private queue
 * handled in this step. An event that needs memory the step cannot get
 * waits (e->stalled), with everything behind it, for the next step.
 *
 * Memory-order labels:
 *   R1  the reset flag re-armed -> kva_reset_prefix_cache's exchange
 */
#include <errno.h>

#include "admit.h"
#include "alloc.h"
#include "event_queue.h"
#include "evict_walk.h"
#include "head_timers.h"
#include "held.h"
#include "lifecycle.h"
#include "lookup.h"
#include "prio.h"
#include "priority_levels.h"
#include "stats.h"
#include "step_events.h"
#include "waiting_queue.h"

/* The live incarnation of r's id may be on its way out already: finished
 * (kva_finish released it) or cancelled on another thread, whose event is
 * in a lane spliced after this submit. For the host that end came first, so
 * it is handled now (its own event then finds it ended). true: id free. */
static bool end_departing(kva_engine *e, uint64_t id)
{
	struct kva__req *old = kva__rec_live(e, id);
	if (!old)
		return false;
	uint32_t st = atomic_load_explicit(&old->state, memory_order_acquire);
	bool cancelled = atomic_load_explicit(&old->cancel_requested, memory_order_relaxed);
	if (st == KVA__STATE_ENDING) {
		old->flags |= KVA__F_EV_PENDING; /* its EV_FINISHED is still queued */
		kva__rec_end(e, old, KVA_STATE_FINISHED);
	} else if (st == KVA__STATE_PREEMPTED && cancelled) {
		/* preempted (pages given back), then cancelled: its EV_PREEMPTED
		 * would end it cancelled; the host's cancel came first */
		old->flags |= KVA__F_EV_PENDING;
		kva__rec_end(e, old, KVA_STATE_CANCELLED);
	} else if (cancelled) {
		kva__admit_cancel(e, old); /* may not end it (growing): then not free */
	}
	return kva__rec_live(e, id) == NULL;
}

/* 0, or -ENOMEM: nothing changed, the event is retried next step. */
static int handle_submit(kva_engine *e, struct kva__req *r)
{
	/* its priority level's room, so that joining it cannot fail */
	if (e->lv && kva__levels_ingest(e, r) != 0)
		return -ENOMEM;
	/* the host's checkpoint it may carry is held from its ingest on
	 * (held.c): room first, so that nothing fails halfway */
	if (r->nents && kva__held_reserve(&e->held, r->nents) != 0)
		return -ENOMEM;
	int rc = kva__rec_claim_id(e, r);
	if (rc == -EEXIST && end_departing(e, r->id))
		rc = kva__rec_claim_id(e, r);
	if (rc == -ENOMEM)
		return rc;
	kva__st_add_single_writer(e, ST_INGESTED, 1);
	if (rc == -EEXIST) { /* rule id-reuse: a live incarnation has this id */
		kva__log(e, KVA_LOG_WARN, KVA_LOGEV_DUPLICATE_ID, r, 0, 0,
		         "kvadmit: request id %llu is live already: the new submit is rejected",
		         (unsigned long long)r->id);
		kva__rec_end(e, r, KVA_STATE_REJECTED);
		return 0;
	}
	if (r->flags & KVA__F_CANCEL_EARLY) {
		/* Its cancel came first, from another thread's lane
		 * (kva__admit_cancel marked it): it ends here, never queued, no
		 * lookup. */
		r->flags |= KVA__F_INGESTED;
		kva__st_add_single_writer(e, ST_WAITING, 1);
		kva__rec_end(e, r, KVA_STATE_CANCELLED);
		return 0;
	}
	r->flags |= KVA__F_INGESTED | KVA__F_HELD;
	kva__held_hold_all(&e->held, r);
	kva__st_add_single_writer(e, ST_WAITING, 1);
	kva__waiting_queue_enqueue(e, r);
	return 0;
}

static void handle_life_event(kva_engine *e, struct kva__req *r, uint8_t type)
{
	if (r->flags & KVA__F_EV_PENDING) {
		/* a resubmit of its id ended it first (end_departing): the slot,
		 * which this event lives in, may go now */
		r->flags &= (uint16_t)~KVA__F_EV_PENDING;
		if (r->flags & KVA__F_REPORTED)
			kva__rec_retire(e, r);
		return;
	}
	if (type == KVA__EV_FINISHED) {
		kva__rec_end(e, r, KVA_STATE_FINISHED);
		return;
	}
	/* preempted: back to the front with a fresh lookup, unless cancelled */
	if (atomic_load_explicit(&r->cancel_requested, memory_order_relaxed)) {
		kva__rec_end(e, r, KVA_STATE_CANCELLED);
		return;
	}
	kva__waiting_queue_requeue_front(e, r, true);
}

static struct kva__req *embedded_req(kva_engine *e, struct kva__event *ev)
{
	return kva_slab_get(&e->slab, ev->slot);
}

/* 0, or -ENOMEM: the event needs memory this step could not get. */
static int dispatch_event(kva_engine *e, struct kva__event *ev)
{
	uint8_t type = ev->type; /* handlers free the events they own */
	switch (type) {
	case KVA__EV_SUBMIT:
		if (handle_submit(e, embedded_req(e, ev)) != 0)
			return -ENOMEM;
		break;
	case KVA__EV_CANCEL: {
		struct kva__cancel *c = caa_container_of(ev, struct kva__cancel, ev);
		struct kva__req *r = kva__rec_find(e, c->h.slot, c->h.gen, c->h.id);
		/* Refused only while a kva_grow owns it: retried next step, at
		 * most one such cancel per thread inside kva_grow. */
		if (r && !kva__admit_cancel(e, r))
			kva_inbox_push(&e->deferred, &ev->node);
		else
			kva__cancel_free(e, c);
		break;
	}
	case KVA__EV_FINISHED:
	case KVA__EV_PREEMPTED:
		handle_life_event(e, embedded_req(e, ev), type);
		break;
	case KVA__EV_ANSWER:
		if (kva__lookup_on_answer(e, caa_container_of(ev, struct kva__answer, ev)) != 0)
			return -ENOMEM;
		break;
	case KVA__EV_COPY:
		kva__admit_on_copy(e, embedded_req(e, ev), ev);
		break;
	case KVA__EV_EVICT:
		if (kva__evict_walk_start(e, caa_container_of(ev, struct kva__evict, ev)) != 0)
			return -ENOMEM;
		break;
	case KVA__EV_LOCAL: {
		struct kva__local *l = caa_container_of(ev, struct kva__local, ev);
		struct kva__req *r = kva__rec_find(e, l->h.slot, l->h.gen, l->h.id);
		if (r && kva__lookup_on_local(e, r, &l->cp, &l->spare) != 0)
			return -ENOMEM;
		kva__local_free(l);
		break;
	}
	case KVA__EV_PRIORITY: {
		struct kva__cancel *p = caa_container_of(ev, struct kva__cancel, ev);
		struct kva__req *r = kva__rec_find(e, p->h.slot, p->h.gen, p->h.id);
		if (r && kva__waiting_queue_set_priority(e, r, p->priority) != 0)
			return -ENOMEM;
		kva__cancel_free(e, p);
		break;
	}
	case KVA__EV_RESET:
		/* R1: re-arm before acting, so a reset requested from now on is a
		 * new event. */
		atomic_store_explicit(&e->reset_requested, 0, memory_order_release);
		kva__admit_reset_ready(e);
		break;
	}
	e->plan->events++;
	/* every event but these names exactly one record */
	e->plan->records_touched += type != KVA__EV_EVICT && type != KVA__EV_RESET;
	return 0;
}

/* How far ahead of the event being handled its record is fetched; its
 * queue neighbours and live-id entry are fetched at half that distance. */
#define PREFETCH_AHEAD 8

/* The record an event names, or NULL; a guess before the event is popped. */
static struct kva__req *event_req_hint(kva_engine *e, struct kva_inbox_node *n)
{
	struct kva__event *ev = caa_container_of(n, struct kva__event, node);
	switch (ev->type) {
	case KVA__EV_CANCEL:
	case KVA__EV_PRIORITY:
		return kva_slab_get(&e->slab, caa_container_of(ev, struct kva__cancel, ev)->h.slot);
	case KVA__EV_ANSWER:
		return kva_slab_get(&e->slab, caa_container_of(ev, struct kva__answer, ev)->token.slot);
	case KVA__EV_LOCAL:
		return kva_slab_get(&e->slab, caa_container_of(ev, struct kva__local, ev)->h.slot);
	case KVA__EV_EVICT:
	case KVA__EV_RESET:
		return NULL;
	default:
		return kva_slab_get(&e->slab, ev->slot);
	}
}

/* Two scouts walk ahead of the events being handled, one node per event, so
 * a batch of events on records scattered over a large engine overlaps their
 * cache misses: the far scout fetches a record, the near one (whose record
 * the far one fetched) its queue neighbours and live-id entry. Hints only. */
struct scouts {
	struct kva_inbox_node *far, *near;
	unsigned far_lead, near_lead; /* events between the next pop and each */
};

static void scout(kva_engine *e, struct kva_inbox_batch *b, struct scouts *sc)
{
	struct kva__req *r;
	while (sc->far_lead < PREFETCH_AHEAD) {
		struct kva_inbox_node *x = kva_inbox_batch_peek(b, sc->far);
		if (!x)
			break;
		sc->far = x;
		sc->far_lead++;
		if ((r = event_req_hint(e, x)))
			kva__rec_prefetch_slot(r, e->lv != NULL);
	}
	while (sc->near_lead < PREFETCH_AHEAD / 2) {
		struct kva_inbox_node *x = kva_inbox_batch_peek(b, sc->near);
		if (!x)
			break;
		sc->near = x;
		sc->near_lead++;
		if ((r = event_req_hint(e, x))) {
			__builtin_prefetch(r->wq.link.prev);
			__builtin_prefetch(r->wq.link.next);
			/* a priority change moves r in the queue, its id stays */
			if (caa_container_of(x, struct kva__event, node)->type != KVA__EV_PRIORITY)
				kva_idmap_prefetch(&e->live_ids, r->id);
		}
	}
}

/* The event at the head of the batch was popped: the scouts are one nearer. */
static void scout_popped(struct scouts *sc)
{
	if (sc->far_lead && --sc->far_lead == 0)
		sc->far = NULL;
	if (sc->near_lead && --sc->near_lead == 0)
		sc->near = NULL;
}

/* ev needed memory the step could not get: it is handled first next step. */
static void stall(kva_engine *e, struct kva__event *ev)
{
	struct kva__req *r = event_req_hint(e, &ev->node);
	kva__alloc_failed(e, r ? r->id : 0, "event");
	e->stalled = ev;
}

/* Handles a batch's events in order; false when one needed memory: it waits
 * in e->stalled, the rest in the batch, for the next step. */
static bool handle_batch(kva_engine *e, struct kva_inbox_batch *b)
{
	struct scouts sc = {NULL, NULL, 0, 0};
	struct kva_inbox_node *n;
	while ((scout(e, b, &sc), n = kva_inbox_batch_pop_nonblocking(b))) {
		scout_popped(&sc);
		struct kva__event *ev = caa_container_of(n, struct kva__event, node);
		if (dispatch_event(e, ev) != 0) {
			stall(e, ev);
			return false;
		}
	}
	return true;
}

/* Events the scheduler's own callbacks produced that wait to be handled. */
static bool local_pending(kva_engine *e)
{
	return !kva_inbox_batch_empty(&e->local_batch) || !kva_inbox_empty(&e->local);
}

/* Events the scheduler thread itself produced (a directory answering from
 * its callback, an importer refusing a rank), until none is left: bounded by
 * the lookups and copies this step started. */
bool kva__step_events_handle_local(kva_engine *e)
{
	/* An event already waits for memory (e->stalled): it is handled
	 * first next step, and what follows it waits too. Handling more here
	 * (after the timers, or in the recheck loop) could stall a second
	 * event, which would replace the first: lost, its answer leaked and
	 * its request waiting for that lookup for ever. */
	if (e->stalled)
		return false;
	/* What a stall left first, then whatever was queued since, in order. */
	do {
		if (!handle_batch(e, &e->local_batch))
			return false;
	} while (kva_inbox_splice_nonblocking(&e->local, &e->local_batch));
	return true;
}

/* The events present when the step began, in order: one that stalled last
 * step and the rest of the batches it stalled in, what the scheduler
 * produced after its last look (refused copies), deferred cancels, the
 * inbox — then what handling those produced. Stops at the first event that
 * needs memory it cannot get. */
void kva__step_events_handle(kva_engine *e)
{
	if (e->stalled) {
		struct kva__event *ev = e->stalled;
		e->stalled = NULL;
		if (dispatch_event(e, ev) != 0) {
			stall(e, ev);
			return;
		}
		kva__alloc_ok(e);
		/* What the stall held back goes before what the stalled step
		 * produced after it (its refused copy ranks), as without the
		 * stall: a stall delays events, never reorders them (rule
		 * fcfs-ready-bypass, requests returning to the front). */
		if (!kva_inbox_batch_empty(&e->local_batch) && !handle_batch(e, &e->local_batch))
			return;
		if (!kva_inbox_batch_empty(&e->batch) && !handle_batch(e, &e->batch))
			return;
	}
	/* Each queue is looked at before it is handled: a step with nothing
	 * to do (a blocked head at any waiting count) makes no call for it. */
	if (local_pending(e) && !kva__step_events_handle_local(e)) {
		/* the inbox as it is now waits behind the stall, ahead of what
		 * this step produces from here on */
		kva_fanin_splice_nonblocking(&e->inbox, &e->batch);
		return;
	}
	if (!kva_inbox_empty(&e->deferred)) {
		struct kva_inbox_batch d;
		struct kva_inbox_node *n;
		kva_inbox_batch_init(&d);
		kva_inbox_splice_nonblocking(&e->deferred, &d);
		while ((n = kva_inbox_batch_pop_nonblocking(&d)))
			dispatch_event(e, caa_container_of(n, struct kva__event, node)); /* cancels never stall */
	}
	/* Everything linked by now; a producer still linking waits for the
	 * next step together with whatever follows it. The batch may also
	 * hold what a stall left last step. */
	kva_fanin_splice_nonblocking(&e->inbox, &e->batch);
	if (!kva_inbox_batch_empty(&e->batch) && !handle_batch(e, &e->batch))
		return;
	if (local_pending(e))
		kva__step_events_handle_local(e);
}

/* Hands terminal outcomes to the host, each exactly once; retires records
 * unless pages of theirs are still under a copy. */
void kva__step_events_emit_ended(kva_engine *e)
{
	kva_plan *p = e->plan;
	while (!cds_list_empty(&e->ended)) {
		if (p->ended && p->n_ended >= p->ended_cap)
			return; /* next step */
		struct kva__req *r = kva__req_of_link(e->ended.next);
		cds_list_del(&r->link);
		r->flags |= KVA__F_REPORTED;
		p->records_touched++;
		if (p->ended)
			p->ended[p->n_ended++] = (kva_ended){kva__rec_handle(r), r->user,
			                                     (uint8_t)atomic_load_explicit(&r->state,
			                                                                   memory_order_relaxed)};
		bool copying = (r->flags & KVA__F_GRANTED) && kva__grant(r)->copying;
		if (!copying && !(r->flags & KVA__F_EV_PENDING))
			kva__rec_retire(e, r);
	}
}

void kva__step_events_timer_fired(struct kva_timer *t, void *arg)
{
	kva_engine *e = arg;
	e->plan->timers_fired++;
	e->plan->records_touched++;
	if (t >= &e->head_timer[0] && t < &e->head_timer[HT_COUNT]) {
		kva__head_timers_fired(e, (int)(t - e->head_timer));
		return;
	}
	kva__lookup_on_deadline(e, caa_container_of(t, struct kva__req, deadline));
}
