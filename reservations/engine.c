/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The engine: configuration, create/destroy, and kva_step, which handles
 * events, expires timers and admits — in that order, in O(events handled +
 * timers expired + requests admitted) (rule step-never-walks-queue). It never
 * walks the waiting queue: only its head is looked at, and only READY restores
 * (which own their capacity) are admitted past a blocked head (rule
 * fcfs-ready-bypass).
 *
 * The top of reservations/: calls admit.c, copy.c, evict_walk.c, lookup.c
 * and the files below them.
 * One step's data flow: intake's events (inbox) -> handlers here, which hand
 * each to its owner (submit -> record id map + waiting queue + lookup; answer
 * -> lookup; eviction -> evict_walk; copy report -> admit -> copy; cancel ->
 * whichever list holds the request, then record) -> timers (lookup
 * deadlines, the head's timers) -> terminal reports (record retirement)
 * -> admit.c's admission run -> copy.c's dispatch.
 *
 * Never blocks: the inbox (one lane per producer thread) is spliced without
 * waiting once per step; an event whose producer is still linking it waits
 * for the next step with all after it in its lane. Lanes have no order
 * between them: the one event that can overtake what it depends on, a cancel
 * of a request submitted on another thread, is retried until the submit
 * was ingested. Events the step's own callbacks produce (a directory answering from its
 * callback, an importer refusing) go to a private queue handled in this step.
 * No RCU read-side section is held here: the scheduler is the only writer of
 * everything it walks, and the only thread that retires records.
 *
 * Memory-order labels:
 *   R1  the reset flag re-armed -> kva_reset_prefix_cache's exchange
 */
#include <errno.h>
#include <string.h>

#include "admit.h"
#include "alloc.h"
#include "checkpoint_index.h"
#include "copy.h"
#include "event_queue.h"
#include "evict_walk.h"
#include "head_timers.h"
#include "held.h"
#include "lifecycle.h"
#include "lookup.h"
#include "stats.h"
#include "token_budget.h"
#include "waiting_queue.h"

#define MS 1000000ull
#define SEC (1000 * MS)
#define TIMER_TICK_NS (1ull << 20) /* ~1 ms; bucket width only: expiries are exact */

void kva_config_default(kva_config *cfg)
{
	if (!cfg)
		return;
	memset(cfg, 0, sizeof(*cfg));
	cfg->page_tokens = 16;
	cfg->prefill_chunk_tokens = 2048;
	cfg->copy_slots = 32;
	cfg->max_running = 256;
	cfg->world_size = 1;
	cfg->max_copy_retries = 2;
	cfg->lookup_timeout_ns = 5 * SEC;
	cfg->max_restore_wait_ns = 60 * SEC;
	cfg->wait_log_interval_ns = 30 * SEC;
	cfg->lookup_refresh_ns = 20 * SEC;
	cfg->policy = KVA_POLICY_WAIT;
	cfg->log_level = KVA_LOG_INFO;
}

static int config_check(const kva_config *c)
{
	if (!c->total_pages || !c->page_tokens || !c->prefill_chunk_tokens || !c->copy_slots ||
	    !c->max_running || !c->world_size || c->world_size > KVA_MAX_WORLD)
		return -EINVAL;
	if (c->decode_reserve_pages >= c->total_pages || c->decode_headroom_pages > c->total_pages)
		return -EINVAL;
	if (c->policy != KVA_POLICY_WAIT && c->policy != KVA_POLICY_LEGACY)
		return -EINVAL;
	if (c->log_level < KVA_LOG_DEBUG || c->log_level > KVA_LOG_ERROR)
		return -EINVAL;
	bool first = c->importers[0].submit != NULL; /* all ranks or none */
	for (uint32_t i = 1; i < c->world_size; i++)
		if ((c->importers[i].submit != NULL) != first)
			return -EINVAL;
	return 0;
}

int kva_plan_min_sizes(const kva_config *cfg, kva_plan_sizes *out)
{
	if (!cfg || !out || config_check(cfg) != 0)
		return -EINVAL;
	*out = (kva_plan_sizes){
		.admitted = 1,
		.pages = cfg->total_pages - cfg->decode_reserve_pages,
		.copies = cfg->importers[0].submit ? 0 : cfg->world_size,
		.fallbacks = 0,
		.ended = 1,
	};
	return 0;
}

/* Never-used slots the process's slab grower keeps ready (and their pages
 * faulted in) for the producers, off every engine thread, so that
 * kva_submit and kva_cancel take a slot instead of growing a slab (an
 * allocation of up to 10 MiB) or faulting in a huge page, and the step
 * does neither (lockfree/slab_grower.h). In proportion to the slab, up to
 * these: an engine that holds few requests keeps few ready, one that holds
 * a million keeps them all. A burst past this between two of the grower's
 * polls grows on the submitting thread. */
#define RECORDS_AHEAD 16384u
#define CANCELS_AHEAD 1024u

kva_engine *kva_engine_create(const kva_config *cfg, int *err)
{
	int rc = cfg ? config_check(cfg) : -EINVAL;
	kva_engine *e = NULL;
	if (!rc && kva_rcu_fork_unsafe())
		rc = -ENOTSUP; /* kvadmit.h, fork: no grace period can end here */
	if (rc)
		goto fail;
	rc = -ENOMEM;
	e = kva__calloc(sizeof(*e));
	if (!e)
		goto fail;
	e->cfg = *cfg;
	e->usable_pages = cfg->total_pages - cfg->decode_reserve_pages;
	if (!(cfg->page_tokens & (cfg->page_tokens - 1)))
		e->page_shift = (uint32_t)__builtin_ctz(cfg->page_tokens);
	e->now = cfg->start_ns;
	if (kva_pagepool_init(&e->pool, cfg->total_pages) != 0)
		goto fail_free;
	/* Records from zeroed chunks: a fresh slot has no grant and no manifest.
	 * -EAGAIN from it: no pthread key for threads' exit hooks. */
	rc = kva_slab_init(&e->slab, sizeof(struct kva__req), offsetof(struct kva__req, rcu),
	                   kva__calloc_big, kva__free_big);
	if (rc)
		goto fail_pool;
	rc = -ENOMEM;
	/* Allocated now, so ingest and indexing find room even when memory is
	 * short later (a map that cannot grow still fills up). */
	if (kva_idmap_init(&e->live_ids, kva__alloc_big, kva__free_big, 64) != 0)
		goto fail_slab;
	if (kva_idmap_init(&e->ckpt, kva__alloc, kva__free, 64) != 0)
		goto fail_ids;
	if (kva__held_init(&e->held) != 0)
		goto fail_ckpt;
	if (kva__ckpt_walks_init(e) != 0)
		goto fail_held;
	if (kva_slab_init(&e->cancels, sizeof(struct kva__cancel), offsetof(struct kva__cancel, rcu),
	                  kva__calloc_big, kva__free_big) != 0)
		goto fail_evictions;
	e->ready = kva__alloc(cfg->max_running * sizeof(*e->ready));
	if (!e->ready)
		goto fail_cancels;
	kva_slab_set_warm(&e->slab, kva__warm);
	kva_slab_set_warm(&e->cancels, kva__warm);
	kva_slab_grower_add(&e->slab_ahead, &e->slab, RECORDS_AHEAD);
	kva_slab_grower_add(&e->cancels_ahead, &e->cancels, CANCELS_AHEAD);
	kva_capacity_init(&e->cap, (struct kva_credits){cfg->total_pages, cfg->copy_slots,
	                                                cfg->max_running});
	kva_fanin_init(&e->inbox);
	kva_inbox_init(&e->local);
	kva_inbox_init(&e->deferred);
	kva_inbox_batch_init(&e->batch);
	kva_inbox_batch_init(&e->local_batch);
	kva_waitq_init(&e->waitq);
	CDS_INIT_LIST_HEAD(&e->ended);
	CDS_INIT_LIST_HEAD(&e->copy_pending);
	kva_timerwheel_init(&e->wheel, TIMER_TICK_NS, e->now);
	for (int i = 0; i < HT_COUNT; i++)
		kva_timer_init(&e->head_timer[i]);
	kva_inbox_node_init(&e->reset_ev.node);
	e->reset_ev.type = KVA__EV_RESET;
	if (err)
		*err = 0;
	return e;
fail_cancels:
	kva_slab_fini(&e->cancels);
fail_evictions:
	kva__ckpt_walks_free(e);
fail_held:
	kva__held_fini(&e->held);
fail_ckpt:
	kva_idmap_fini(&e->ckpt);
fail_ids:
	kva_idmap_fini(&e->live_ids);
fail_slab:
	kva_slab_fini(&e->slab);
fail_pool:
	kva_pagepool_fini(&e->pool);
fail_free:
	kva__free(e, sizeof(*e));
fail:
	if (err)
		*err = rc;
	return NULL;
}

/* Frees what a queued event owns (answers, evictions); events embedded in
 * records and grants, and cancels (their slab), die with those. */
static void discard_event(struct kva__event *ev)
{
	if (ev->type == KVA__EV_ANSWER)
		kva__answer_free(caa_container_of(ev, struct kva__answer, ev));
	else if (ev->type == KVA__EV_EVICT)
		kva__free(ev, sizeof(struct kva__evict));
	else if (ev->type == KVA__EV_LOCAL)
		kva__local_free(caa_container_of(ev, struct kva__local, ev));
}

static void discard_queue(struct kva_inbox *q, struct kva_inbox_batch *b)
{
	if (q)
		kva_inbox_splice_nonblocking(q, b);
	struct kva_inbox_node *n;
	while ((n = kva_inbox_batch_pop_nonblocking(b)))
		discard_event(caa_container_of(n, struct kva__event, node));
}

void kva_engine_destroy_with(kva_engine *e, kva_unfinished_fn fn, void *ctx)
{
	if (e && fn)
		kva__rec_each_unreported(e, fn, ctx);
	kva_engine_destroy(e);
}

void kva_engine_destroy(kva_engine *e)
{
	if (!e)
		return;
	kva_rcu_enter();
	/* No producer runs any more (the contract): nothing is half-linked. */
	if (e->stalled)
		discard_event(e->stalled);
	kva_fanin_splice_nonblocking(&e->inbox, &e->batch);
	discard_queue(NULL, &e->batch);
	struct kva_inbox_batch b;
	kva_inbox_batch_init(&b);
	discard_queue(&e->local, &e->local_batch);
	discard_queue(&e->deferred, &b);
	/* No reader is left (the contract), so retired slots need no grace
	 * period and no barrier: call_rcu callbacks still queued for the slab
	 * find it gone (slab.c). Destroy never waits for liburcu's call_rcu
	 * thread, which sleeps 10 ms between batches and may not exist at all
	 * in a forked child. */
	kva_slab_grower_remove(&e->slab_ahead);
	kva_slab_grower_remove(&e->cancels_ahead);
	kva__rec_free_all(e);
	kva_slab_fini(&e->slab);
	kva_slab_fini(&e->cancels); /* after the queues above: they held some */
	kva__free(e->ready, e->cfg.max_running * sizeof(*e->ready));
	kva__ckpt_walks_free(e);
	kva_idmap_fini(&e->live_ids);
	kva_idmap_fini(&e->ckpt);
	kva__held_fini(&e->held);
	kva_pagepool_fini(&e->pool);
	kva_fanin_fini(&e->inbox);
	kva_inbox_fini(&e->local);
	kva_inbox_fini(&e->deferred);
	kva__free(e, sizeof(*e));
}

/* ---- event handlers ------------------------------------------------------------ */

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
			kva__rec_prefetch(r);
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
static bool handle_local(kva_engine *e)
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
static void handle_events(kva_engine *e)
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
	if (local_pending(e) && !handle_local(e)) {
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
		handle_local(e);
}

/* Hands terminal outcomes to the host, each exactly once; retires records
 * unless pages of theirs are still under a copy. */
static void emit_ended(kva_engine *e)
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

static void timer_fired(struct kva_timer *t, void *arg)
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

/* ---- the step ---------------------------------------------------------------- */

static void plan_clear(kva_plan *p)
{
	p->n_admitted = p->n_pages = p->n_copies = p->n_fallbacks = p->n_ended = 0;
	p->events = p->timers_fired = p->records_touched = 0;
	p->head_blocked = false;
	p->backlog = false;
	p->too_small = false;
}

/* A NULL array must not claim room: the step would write through it. */
static bool plan_valid(const kva_plan *p)
{
	return (p->admitted || !p->admitted_cap) && (p->pages || !p->pages_cap) &&
	       (p->copies || !p->copies_cap) && (p->fallbacks || !p->fallbacks_cap) &&
	       (p->ended || !p->ended_cap);
}

/* Admission stopped at a head whose host checkpoint a reset forgot (it
 * looks up now), or asked the directory again itself (a pending eviction newer
 * than a head's copy, rule eviction-revalidates): when the directory answers
 * from its callback, the answer is handled and admission goes on in this step
 * rather than one such head per step. Each round admits at least one request or
 * ends the loop. */
static void admit_again(kva_engine *e)
{
	for (;;) {
		bool forgotten = e->head_recheck && kva__admit_head_recheck(e);
		if (!forgotten && !e->admit_asked)
			break;
		e->admit_asked = false;
		handle_local(e);
		/* the head blocked only until its lookup: whether a head waits
		 * now is this round's to say */
		e->plan->head_blocked = false;
		if (!kva__admit_run(e))
			break;
	}
	if (e->admit_asked) { /* the last round's lookups: answered in this step too */
		e->admit_asked = false;
		handle_local(e);
	}
}

int kva_step(kva_engine *e, uint64_t now_ns, kva_plan *plan)
{
	if (!e || !plan || e->in_step || !plan_valid(plan))
		return -EINVAL;
	if (kva_rcu_fork_unsafe())
		return -ENOTSUP; /* kvadmit.h, fork: retiring needs grace periods */
	kva_rcu_enter(); /* call_rcu of retired slots needs a registered thread */
	plan_clear(plan);
	e->contended = false;
	e->plan = plan;
	e->in_step = true;
	kva__rec_stepping(e);
	if (now_ns > e->now)
		e->now = now_ns;
	kva__st_add_single_writer(e, ST_STEPS, 1);
	kva__evict_step_begin(e);

	handle_events(e);
	bool asked = false;
	/* rule eviction-revalidates: the queue's front first, then a budget of the walk */
	if (e->n_evicting) {
		asked = kva__admit_revalidate_front(e);
		asked |= kva__evict_walks_continue(e);
	}
	asked |= kva_timerwheel_advance(&e->wheel, e->now, timer_fired, e);
	asked |= kva__admit_head_recheck(e);
	if (asked)
		handle_local(e); /* answers to lookups the timers or the recheck issued */
	emit_ended(e);
	kva__token_budget_start(e);
	kva__admit_run(e);
	if (e->head_recheck || e->admit_asked)
		admit_again(e);
	kva__copy_dispatch_pending(e); /* refused ranks: handled next step */
	kva__rec_ids_settle(e);        /* the ended ids' map misses, last */
	kva__rec_flush_retired(e);
	plan->backlog = e->stalled || e->head_recheck || e->n_evicting || e->contended ||
	                !kva_inbox_batch_empty(&e->batch) ||
	                !kva_inbox_empty(&e->local) || !kva_inbox_batch_empty(&e->local_batch) ||
	                !kva_inbox_empty(&e->deferred) ||
	                !cds_list_empty(&e->ended);

	e->was_too_small = plan->too_small;
	kva__rec_stepping(NULL);
	kva__st_add_single_writer(e, ST_EVENTS, plan->events);
	e->in_step = false;
	e->plan = NULL;
	return (int)plan->n_admitted;
}
