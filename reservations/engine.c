/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The engine: configuration, create/destroy, and kva_step, which handles
 * events, expires timers and admits — in that order, in O(events handled +
 * timers expired + requests admitted) (rule step-never-walks-queue). It never
 * walks the waiting queue: only its head is looked at, and only READY restores
 * (which own their capacity) are admitted past a blocked head (rule
 * fcfs-ready-bypass).
 *
 * The top of reservations/: calls step_events.c, admit.c, copy.c,
 * evict_walk.c, lookup.c and the files below them.
 * One step's data flow: intake's events (inbox) -> step_events.c, which
 * hands each to its owner -> timers (lookup deadlines, the head's timers)
 * -> terminal reports (record retirement) -> admit.c's admission run ->
 * copy.c's dispatch.
 *
 * Never blocks: events are spliced without waiting (step_events.c). No RCU
 * read-side section is held here: the scheduler is the only writer of
 * everything it walks, and the only thread that retires records.
 *
 * Who the scheduler is: whichever thread holds e->in_step (a CAS), so two
 * threads calling kva_step at once get -EBUSY instead of sharing the
 * scheduler's plain state.
 *   A1 (kva_step's CAS)   pairs with R1 (its release at the end of the
 *                         previous step, maybe on another thread): sees all
 *                         the scheduler-only state that step wrote.
 */
#include <errno.h>
#include <stdalign.h>
#include <string.h>

#include "admit.h"
#include "alloc.h"
#include "checkpoint_index.h"
#include "copy.h"
#include "cost_model.h"
#include "event_queue.h"
#include "evict_walk.h"
#include "held.h"
#include "lifecycle.h"
#include "lookup.h"
#include "priority_levels.h"
#include "run_heap.h"
#include "stats.h"
#include "step_events.h"
#include "token_budget.h"

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
	/* the cost policy's seeds (docs/design.md: cost policy; bench/sim/README.md cites them) */
	static const uint64_t gbps[KVA_TIER_COUNT] = {3, 25, 10, 1, 3}; /* GB/s (disk: 1.5) */
	cfg->cost.page_bytes = 16 * 1024;
	cfg->cost.prefill_tokens_per_s = 8000;
	for (int t = 0; t < KVA_TIER_COUNT; t++) {
		cfg->cost.tier_bytes_per_s[t] = gbps[t] * 1000000000ull;
		cfg->cost.tier_setup_ns[t] = 1000000;
	}
	cfg->cost.tier_bytes_per_s[KVA_TIER_DISK] = 1500000000ull;
	cfg->cost.half_life = 8;
	cfg->cost.margin_pct = 10;
}

static int config_check(const kva_config *c)
{
	if (!c->total_pages || !c->page_tokens || !c->prefill_chunk_tokens || !c->copy_slots ||
	    !c->max_running || !c->world_size || c->world_size > KVA_MAX_WORLD)
		return -EINVAL;
	if (c->decode_reserve_pages >= c->total_pages || c->decode_headroom_pages > c->total_pages)
		return -EINVAL;
	if (c->policy != KVA_POLICY_WAIT && c->policy != KVA_POLICY_LEGACY &&
	    c->policy != KVA_POLICY_COST)
		return -EINVAL;
	if (kva__cost_config_check(c))
		return -EINVAL;
	if (c->flags & ~(uint32_t)KVA_CONFIG_CREDITS_ONLY)
		return -EINVAL; /* bits kept for later meanings */
	if ((c->flags & KVA_CONFIG_CREDITS_ONLY) && c->importers[0].submit)
		return -EINVAL; /* importers copy into kvadmit's page ids */
	if (c->log_level < KVA_LOG_DEBUG || c->log_level > KVA_LOG_ERROR)
		return -EINVAL;
	if ((c->order != KVA_ORDER_FCFS && c->order != KVA_ORDER_PRIORITY) ||
	    c->preempt_threshold < 0)
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
		.pages = (cfg->flags & KVA_CONFIG_CREDITS_ONLY) ? 0
		                                                : cfg->total_pages - cfg->decode_reserve_pages,
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
	e = kva__calloc_aligned(sizeof(*e), alignof(kva_engine)); /* alignas members */
	if (!e)
		goto fail;
	e->cfg = *cfg;
	kva__cost_init(e);
	e->usable_pages = cfg->total_pages - cfg->decode_reserve_pages;
	if (!(cfg->page_tokens & (cfg->page_tokens - 1)))
		e->page_shift = (uint32_t)__builtin_ctz(cfg->page_tokens);
	e->now = cfg->start_ns;
	if (kva_pagepool_init(&e->pool, cfg->total_pages) != 0)
		goto fail_free;
	/* Records from zeroed chunks: a fresh slot has no grant and no manifest.
	 * -EAGAIN from it: no pthread key for threads' exit hooks. */
	rc = kva_slab_init(&e->slab, kva__levels_slot_size(cfg), offsetof(struct kva__req, rcu),
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
	if (kva__levels_init(e) != 0)
		goto fail_ready;
	if (kva__run_heap_init(e) != 0) {
		kva__levels_fini(e);
		goto fail_ready;
	}
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
fail_ready:
	kva__free(e->ready, cfg->max_running * sizeof(*e->ready));
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
	kva__free_aligned(e, sizeof(*e), alignof(kva_engine));
fail:
	if (err)
		*err = rc;
	return NULL;
}

/* Frees what a queued event owns (answers, evictions); events embedded in
 * records and grants, and cancels and priority changes (their slab), die
 * with those. */
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
	kva__levels_fini(e);
	kva__run_heap_fini(e);
	kva__ckpt_walks_free(e);
	kva_idmap_fini(&e->live_ids);
	kva_idmap_fini(&e->ckpt);
	kva__held_fini(&e->held);
	kva_pagepool_fini(&e->pool);
	kva_fanin_fini(&e->inbox);
	kva_inbox_fini(&e->local);
	kva_inbox_fini(&e->deferred);
	kva__free_aligned(e, sizeof(*e), alignof(kva_engine));
}

/* ---- the step ---------------------------------------------------------------- */

static void plan_clear(kva_plan *p)
{
	p->n_admitted = p->n_pages = p->n_copies = p->n_fallbacks = p->n_ended = 0;
	p->events = p->timers_fired = p->records_touched = 0;
	p->head_blocked = false;
	p->backlog = false;
	p->too_small = false;
	p->preempt_hint = false;
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
		kva__step_events_handle_local(e);
		/* the head blocked only until its lookup: whether a head waits
		 * now is this round's to say */
		e->plan->head_blocked = false;
		if (!kva__admit_run(e))
			break;
	}
	if (e->admit_asked) { /* the last round's lookups: answered in this step too */
		e->admit_asked = false;
		kva__step_events_handle_local(e);
	}
}

int kva_step(kva_engine *e, uint64_t now_ns, kva_plan *plan)
{
	if (!e || !plan)
		return -EINVAL;
	if (kva__rec_stepping_here(e))
		return -EINVAL; /* a callback re-entering its own step (kvadmit.h) */
	bool idle = false;
	/* A1: pairs with R1 below, of the step before (any thread) */
	if (!atomic_compare_exchange_strong_explicit(&e->in_step, &idle, true, memory_order_acquire,
	                                             memory_order_relaxed))
		return -EBUSY; /* another thread's step runs: nothing touched */
	int rc = !plan_valid(plan) ? -EINVAL : kva_rcu_fork_unsafe() ? -ENOTSUP : 0;
	if (rc) { /* -ENOTSUP: kvadmit.h, fork: retiring needs grace periods */
		atomic_store_explicit(&e->in_step, false, memory_order_relaxed); /* nothing written */
		return rc;
	}
	kva_rcu_enter(); /* call_rcu of retired slots needs a registered thread */
	plan_clear(plan);
	e->contended = false;
	e->plan = plan;
	kva__rec_stepping(e);
	if (now_ns > e->now)
		e->now = now_ns;
	kva__st_add_single_writer(e, ST_STEPS, 1);
	kva__evict_step_begin(e);

	kva__step_events_handle(e);
	bool asked = false;
	/* rule eviction-revalidates: the queue's front first, then a budget of the walk */
	if (e->n_evicting) {
		asked = kva__admit_revalidate_front(e);
		asked |= kva__evict_walks_continue(e);
	}
	asked |= kva_timerwheel_advance(&e->wheel, e->now, kva__step_events_timer_fired, e);
	asked |= kva__admit_head_recheck(e);
	if (asked)
		kva__step_events_handle_local(e); /* answers to lookups the timers or the recheck issued */
	kva__step_events_emit_ended(e);
	kva__token_budget_start(e);
	kva__admit_run(e);
	if (e->head_recheck || e->admit_asked)
		admit_again(e);
	kva__run_heap_hint(e);
	if (e->lv)
		kva__levels_publish(e);
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
	e->plan = NULL;
	int n = (int)plan->n_admitted;
	/* R1: pairs with A1 of the next step, which may run on another thread */
	atomic_store_explicit(&e->in_step, false, memory_order_release);
	return n;
}
