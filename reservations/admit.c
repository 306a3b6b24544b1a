/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Admission (see admit.h): the FCFS head's paired reservation (rules
 * restore-waits-for-capacity, paired-reservation, reservations-never-preempt,
 * fcfs-ready-bypass, too-large-at-once), immediate local and ordinary
 * admissions written into the plan, READY restores passing a blocked head,
 * copy reports, the prefix-cache reset (rule reset-returns-ready), rechecks
 * and cancels (rule cancel-any-thread). Calls copy.c, evict_walk.c, lookup.c,
 * the queue's files (waiting_queue.c, head_timers.c, ready_heap.c,
 * token_budget.c) and what lies below them (lifecycle.c, grant.c, held.c,
 * stats.c).
 */
#include <errno.h>
#include <string.h>

#include "admit.h"
#include "copy.h"
#include "cost_model.h"
#include "evict_walk.h"
#include "grant.h"
#include "head_timers.h"
#include "held.h"
#include "lifecycle.h"
#include "lookup.h"
#include "prio.h"
#include "ready_heap.h"
#include "stats.h"
#include "token_budget.h"
#include "waiting_queue.h"

/* How many heads ahead admission fetches records. */
#define ADMIT_AHEAD 4
/* How many waiting requests from the head a reset's recheck asks about. */
#define RECHECK_AHEAD 32

/* The page ids an admission of `pages` pages lists in the plan: none when
 * the host keeps its own pool (KVA_CONFIG_CREDITS_ONLY). */
static uint32_t listed_pages(const kva_engine *e, uint32_t pages)
{
	return (e->cfg.flags & KVA_CONFIG_CREDITS_ONLY) ? 0 : pages;
}

static bool plan_room(const kva_engine *e, uint32_t pages)
{
	const kva_plan *p = e->plan;
	return p->n_admitted < p->admitted_cap && p->pages_cap - p->n_pages >= listed_pages(e, pages);
}

/* ---- the plan's admissions ------------------------------------------------------- */

/* r got the capacity it waited for at the head (an admission, or an
 * import's reservation: the copy that follows is not a capacity wait). */
static void capacity_wait_ends(kva_engine *e, struct kva__req *r)
{
	if (r->flags & KVA__F_BLOCKED)
		kva__observe(e, H_CAPACITY_WAIT, e->now - r->blocked_since);
	r->flags &= (uint16_t)~KVA__F_BLOCKED;
	r->ahead = 0; /* not a hint: a time */
}

/* r becomes RUNNING: listed in the plan with its pages; every prompt token
 * counted once as local, restored or recomputed (rule tokens-counted-once). */
static void plan_admit(kva_engine *e, struct kva__req *r, uint8_t how, uint32_t local,
                       uint32_t restored)
{
	kva_plan *p = e->plan;
	kva__token_budget_spend(e, kva__token_budget_first_chunk(e, r->prompt_tokens, local + restored));
	struct kva__grant *g = kva__grant(r);
	uint32_t n = atomic_load_explicit(&g->npages, memory_order_relaxed);
	kva_admission *a = &p->admitted[p->n_admitted++];
	a->handle = kva__rec_handle(r);
	a->user = r->user;
	a->how = how;
	a->reason = how == KVA_ADMIT_RECOMPUTE ? r->reason : KVA_REASON_NONE;
	a->reserved_ = 0;
	a->local_tokens = local;
	a->restored_tokens = restored;
	a->recompute_tokens = r->prompt_tokens - local - restored;
	a->npages = n;
	a->reserved_pages = atomic_load_explicit(&g->reserved, memory_order_relaxed);
	uint32_t listed = listed_pages(e, n);
	a->pages_off = listed ? p->n_pages : 0;
	if (listed) /* credits only: no ids, maybe no page array at all */
		memcpy(p->pages + p->n_pages, g->pages, listed * sizeof(uint32_t));
	p->n_pages += listed;

	kva__st_add(e, ST_RESERVED_PAGES, -(int64_t)n);
	kva__st_add(e, ST_IN_USE_PAGES, n);
	kva__st_add_single_writer(e, how == KVA_ADMIT_RESTORE ? ST_ADMIT_RESTORE
	                 : how == KVA_ADMIT_LOCAL ? ST_ADMIT_LOCAL
	                                          : ST_ADMIT_RECOMPUTE,
	              1);
	kva__st_add_single_writer(e, ST_TOK_ADMITTED, r->prompt_tokens);
	kva__st_add_single_writer(e, ST_TOK_LOCAL, local);
	kva__st_add_single_writer(e, ST_TOK_RESTORED, restored);
	kva__st_add_single_writer(e, ST_TOK_RECOMPUTED, a->recompute_tokens);
	capacity_wait_ends(e, r);
	kva__observe(e, H_ADMISSION, e->now - kva__rec_wait_ends(r));
	kva__rec_set_state(e, r, KVA_STATE_RUNNING);
}

/* Page ids for credits r owns were not in the pool. Cannot happen while
 * ids >= credits outstanding (R1/A1 of capacity.c); if that invariant ever
 * broke, nothing garbage is handed out, and the host hears of it. */
static void log_pages_missing(kva_engine *e, struct kva__req *r)
{
	kva__log(e, KVA_LOG_ERROR, KVA_LOGEV_INVARIANT, r, 0, 0,
	         "kvadmit: no page ids for request %llu's owned credits", (unsigned long long)r->id);
}

/* The head's just reserved credits got no page ids (take_pages' rc): they
 * go back and the head waits. -EAGAIN: other threads kept the page pool
 * busy for a whole bounded take (KVA_PAGEPOOL_CLAIM_TRIES,
 * KVA_PAGEPOOL_PASSES), so the step stops trying, as for a contended
 * reservation: the head waits for the next step, which the plan's backlog
 * asks for. Otherwise ids were missing, which cannot happen. */
static int pages_not_taken(kva_engine *e, struct kva__req *r, struct kva_credits reserved, int rc,
                           bool restore)
{
	kva_capacity_release(&e->cap, reserved);
	if (rc == -EAGAIN) {
		e->contended = true;
		kva__head_timers_block(e, r, restore);
		return 0;
	}
	log_pages_missing(e, r);
	e->plan->head_blocked = true;
	return 0;
}

/* Takes n page ids for the `total` credits r just reserved: 0, or the
 * pool's -ENOSPC / -EAGAIN (nothing taken). */
static int take_pages(kva_engine *e, struct kva__grant *g, uint32_t n, uint32_t total)
{
	int rc = kva_pagepool_take_n(&e->pool, g->pages, n);
	if (rc)
		return rc;
	atomic_store_explicit(&g->npages, n, memory_order_relaxed);
	atomic_store_explicit(&g->reserved, total - n, memory_order_relaxed);
	g->import_pages = n;
	kva__st_add(e, ST_RESERVED_PAGES, total);
	return 0;
}

/* The head's page list could not be allocated: it holds the line this step
 * (head_blocked) and is retried at the next. */
static int head_no_memory(kva_engine *e, struct kva__req *r)
{
	e->plan->head_blocked = true;
	kva__alloc_failed(e, r->id, "page list");
	return 0;
}

/* Whether an empty plan could hold an admission of `pages` pages. */
static bool plan_could_hold(const kva_engine *e, uint32_t pages)
{
	return e->plan->admitted_cap > 0 && e->plan->pages_cap >= listed_pages(e, pages);
}

/* Whether the plan has room for r's admission of `pages` pages now; if it
 * could not hold it even empty, the plan is too small (flagged, counted). */
static bool plan_fits(kva_engine *e, struct kva__req *r, uint32_t pages, const char *what)
{
	if (plan_room(e, pages))
		return true;
	if (!plan_could_hold(e, pages))
		kva__plan_too_small(e, r->id, what, pages);
	return false;
}

/* ---- admission ------------------------------------------------------------------------ */

/* A cancel in whatever state r is in now (admit.h). */
bool kva__admit_cancel(kva_engine *e, struct kva__req *r)
{
	switch (atomic_load_explicit(&r->state, memory_order_acquire)) {
	case KVA_STATE_WAITING:
		/* Not ingested yet: its submit came from another thread's lane and
		 * is later in this batch, not spliced yet, or stalled. It ends at
		 * its ingest (step_events.c handle_submit): nothing is retried. */
		if (!(r->flags & KVA__F_INGESTED)) {
			r->flags |= KVA__F_CANCEL_EARLY;
			return true;
		}
		kva__waiting_queue_forget(e, r);
		break;
	case KVA_STATE_IMPORTING:
		kva__copy_cancel(e, r);
		break;
	case KVA_STATE_READY:
		kva__ready_heap_remove(e, r);
		kva__rec_give_back(e, r, 0, true);
		break;
	case KVA_STATE_RUNNING: {
		uint32_t want = KVA_STATE_RUNNING;
		/* Pairs with R4 of intake.c: we own the page list afterwards. */
		if (atomic_compare_exchange_strong_explicit(&r->state, &want, KVA__STATE_CANCELLING,
		                                            memory_order_acquire, memory_order_relaxed)) {
			kva__st_add(e, ST_RUNNING, -1);
			kva__rec_give_back(e, r, 0, false);
			break;
		}
		/* A kva_grow owns it this instant: retry. Finished or preempted
		 * meanwhile: their events decide. */
		return want != KVA__STATE_GROWING;
	}
	case KVA__STATE_GROWING:
		return false;
	default:
		return true; /* PREEMPTED: handled with its requeue; terminal: nothing */
	}
	kva__rec_end(e, r, KVA_STATE_CANCELLED);
	return true;
}

/* A cancel accepted for r is still in the inbox: behind an event that
 * stalled for memory (which holds the rest of the inbox for the next step),
 * or pushed while this step runs. r (waiting, or READY) ends CANCELLED here,
 * as its event would end it, instead of being admitted (kvadmit.h: a cancel
 * takes effect at the next step); the event finds it ended. Needs no
 * memory, so a step that waits for memory still admits whatever needs none. */
static bool cancelled_meanwhile(kva_engine *e, struct kva__req *r)
{
	/* Relaxed: kva_cancel claims the flag before it pushes its event, and
	 * this step's splice of that event (acquire) orders the claim before
	 * this load; a claim made during the step may or may not be seen. */
	return atomic_load_explicit(&r->cancel_requested, memory_order_relaxed) &&
	       kva__admit_cancel(e, r);
}

/* The step's reservation (rules paired-reservation and
 * reservations-never-preempt): 1 reserved, 0 does not fit,
 * -EAGAIN other threads kept changing the capacity word for
 * KVA_CAPACITY_STEP_TRIES CASes, so the step stops trying (a bounded
 * step); the head waits for the next step, which the plan's backlog asks
 * for. */
static int reserve(kva_engine *e, struct kva_credits want)
{
	int got = kva_capacity_reserve_bounded(&e->cap, want, e->cfg.decode_reserve_pages,
	                                       KVA_CAPACITY_STEP_TRIES);
	if (got < 0)
		e->contended = true;
	return got;
}

/* Credits a recompute reserves at admission: its first chunk's, as vLLM
 * allocates. Under the cost policy, its prompt's and decode headroom's,
 * all or nothing, as a restore's (rule paired-reservation): the policy
 * predicts a prefill that runs through, and a recompute admitted on its
 * first chunk into a full pool is preempted mid-prefill and starts again
 * (docs/design.md, cost policy: "A recompute reserves its prompt"). */
static uint32_t recompute_pages(const kva_engine *e, uint32_t prompt_pages, uint32_t first)
{
	if (e->cfg.policy != KVA_POLICY_COST)
		return first;
	uint64_t total = (uint64_t)prompt_pages + e->cfg.decode_headroom_pages;
	return total > e->usable_pages ? e->usable_pages : (uint32_t)total;
}

/* 1 admitted, 0 blocked, -1 no room in the plan. */
static int admit_head(kva_engine *e, struct kva__req *r)
{
	kva_plan *p = e->plan;
	if ((r->flags & KVA__F_RESTORE) && kva__lookup_sel_forgotten(e, r)) {
		/* rule host-local-checkpoints: a reset forgot what it selected.
		 * It looks up at the
		 * next step's start (kva__admit_head_recheck), where an answer
		 * given re-entrantly is handled in that step, as kvadmit.h says;
		 * a lookup issued here would wait a step for it. */
		p->head_blocked = true;
		e->head_recheck = true;
		return 0;
	}
	/* rule eviction-revalidates: an eviction whose walk has not reached r yet
	 * (evict_walk.c) is
	 * newer than its copy: it looks up again, and may be decided at once
	 * (the host's own checkpoint) */
	if ((r->flags & KVA__F_RESTORE) && e->n_evicting && kva__evict_revalidate_sel(e, r))
		e->admit_asked = true; /* its callback answer is handled in this step */
	if (!(r->flags & KVA__F_DECIDED)) {
		p->head_blocked = true; /* FCFS: an undecided head holds the line */
		if (e->head_req != r) /* a restore's timers stay with the head */
			kva__head_timers_forget(e, e->head_req);
		return 0;
	}
	uint32_t prompt_pages = kva__pages_for(e, r->prompt_tokens);
	bool legacy = false;
	bool cost = e->cfg.policy == KVA_POLICY_COST;
	if (cost && (r->flags & KVA__F_RESTORE))
		kva__cost_choose(e, r); /* its source by predicted time (cost_model.c) */
	if (r->flags & KVA__F_RESTORE) {
		const kva_checkpoint *c = kva__selected_checkpoint(r);
		bool local = c->location == KVA_LOC_LOCAL;
		if (local && kva__token_budget_spent(e))
			return -1; /* it would prefill now; an import would not */
		/* cannot wrap: every path to a selection checks rule
		 * too-large-at-once, so
		 * total <= usable_pages (lookup.c, too_large) */
		uint32_t total = prompt_pages + e->cfg.decode_headroom_pages;
		uint32_t kp = kva__pages_for(e, c->position);
		if (local && !plan_fits(e, r, kp, "admission pages"))
			return -1;
		if (kva__grant_ensure(e, r, kp) != 0)
			return head_no_memory(e, r); /* nothing taken */
		kva__alloc_ok(e);
		/* rules paired-reservation and reservations-never-preempt: everything it
		 * needs or nothing, above the watermark */
		struct kva_credits want = {total, local ? 0 : 1, 1};
		int got = reserve(e, want);
		if (got > 0) {
			int rc = take_pages(e, kva__grant(r), kp, total);
			if (rc)
				return pages_not_taken(e, r, want, rc, true);
			/* rule retry-then-shorter: a new reservation (after
			 * preemption or reset too)
			 * gets the whole retry budget; the grant outlives them */
			kva__grant(r)->retries = 0;
			kva__waiting_queue_forget(e, r);
			if (local) {
				plan_admit(e, r, KVA_ADMIT_LOCAL, c->position, 0);
			} else {
				capacity_wait_ends(e, r);
				kva__grant(r)->queue_seq = ++e->import_seq;
				kva__rec_set_state(e, r, KVA_STATE_IMPORTING);
				kva__copy_start(e, r);
			}
			return 1;
		}
		/* rule restore-waits-for-capacity: wait, don't recompute.
		 * Legacy engines gave up only on
		 * imports; a local prefix hit waited for capacity there too. A
		 * contended word waits too (the step says backlog). */
		uint64_t deadline = UINT64_MAX;
		if (cost && got == 0 && kva__cost_wait_over(e, r, &deadline)) {
			kva__head_timers_forget(e, r); /* recomputes: its wait for a slot is over */
		} else if (e->cfg.policy != KVA_POLICY_LEGACY || local || got < 0) {
			kva__head_timers_block(e, r, true);
			kva__head_timers_deadline(e, r, deadline);
			return 0;
		} else {
			/* rule legacy-decides-at-admission: legacy decides at
			 * admission — it recomputes only if the ordinary
			 * admission fits now; else it keeps its answer and tries
			 * the restore first again next time */
			legacy = true;
		}
	}
	if (kva__token_budget_spent(e))
		return -1;
	/* the first credit grant covers the first chunk, cut to the budget */
	uint32_t first = kva__pages_for(e, kva__token_budget_first_chunk(e, r->prompt_tokens, 0));
	if (first > e->usable_pages)
		first = e->usable_pages; /* a first chunk larger than the pool could never start */
	if (!plan_fits(e, r, first, "admission pages"))
		return -1;
	if (kva__grant_ensure(e, r, first) != 0)
		return head_no_memory(e, r);
	kva__alloc_ok(e);
	struct kva_credits want = {recompute_pages(e, prompt_pages, first), 0, 1};
	if (reserve(e, want) <= 0) {
		kva__head_timers_block(e, r, false);
		return 0;
	}
	int rc = take_pages(e, kva__grant(r), first, want.pages);
	if (rc)
		return pages_not_taken(e, r, want, rc, false);
	if (legacy) {
		kva__head_timers_forget(e, r);
		kva__fallback(e, r, KVA_REASON_LEGACY);
	}
	kva__waiting_queue_forget(e, r);
	plan_admit(e, r, KVA_ADMIT_RECOMPUTE, 0, 0);
	return 1;
}

/* An imported request admitted for a longer local checkpoint materialises
 * its pages from credits it already owns. false: no room (plan or memory),
 * or the page pool stayed contended (it waits, READY, for the next step,
 * which the plan's backlog asks for). */
static bool take_more(kva_engine *e, struct kva__req *r, uint32_t tokens)
{
	struct kva__grant *g = kva__grant(r);
	uint32_t n = atomic_load_explicit(&g->npages, memory_order_relaxed);
	uint32_t want = kva__pages_for(e, tokens);
	if (want <= n)
		return true;
	if (!plan_fits(e, r, want, "admission pages"))
		return false;
	if (kva__grant_ensure(e, r, want) != 0) {
		kva__alloc_failed(e, r->id, "page list");
		return false;
	}
	g = kva__grant(r);
	int rc = kva_pagepool_take_n(&e->pool, g->pages + n, want - n);
	if (rc == -EAGAIN) {
		e->contended = true;
		return false;
	}
	if (rc) {
		log_pages_missing(e, r); /* admitted with the imported pages only */
		return true;
	}
	atomic_store_explicit(&g->npages, want, memory_order_relaxed);
	atomic_store_explicit(&g->reserved,
	                      atomic_load_explicit(&g->reserved, memory_order_relaxed) - (want - n),
	                      memory_order_relaxed);
	return true;
}

/* A request that owns its capacity (import done, or an owned fallback) is
 * admitted past a blocked head (rule fcfs-ready-bypass): 1. 0 when the plan is
 * full. -1 when the local checkpoint it is READY on (a shorter one after its
 * copy failed, rule retry-then-shorter) was reported evicted since it took it:
 * it gives its capacity back and looks up again from the front, as a reset's
 * READY restore does (rules eviction-revalidates, reset-returns-ready), never
 * admitted from a lost checkpoint. */
static int admit_ready(kva_engine *e, struct kva__req *r)
{
	if ((r->flags & KVA__F_RESTORE) && kva__held_gone(&e->held, kva__selected_checkpoint(r))) {
		kva__ready_heap_remove(e, r);
		kva__st_add_single_writer(e, ST_REVALIDATIONS, 1);
		kva__rec_give_back(e, r, 0, true);
		kva__waiting_queue_requeue_front(e, r, false);
		e->admit_asked = true; /* its callback answer is handled in this step */
		return -1;
	}
	if (kva__token_budget_spent(e))
		return false;
	struct kva__grant *g = kva__grant(r);
	if (!plan_fits(e, r, atomic_load_explicit(&g->npages, memory_order_relaxed), "imported pages"))
		return false;
	if (r->flags & KVA__F_RESTORE) {
		const kva_checkpoint *c = kva__selected_checkpoint(r);
		/* rule host-local-checkpoints: a local checkpoint the host
		 * stated during the copy
		 * serves its tokens; the import the rest, or nothing if the local
		 * one covers it (its pages then come from the reservation) */
		uint32_t q = kva__host_position(e, r);
		if (c->location == KVA_LOC_LOCAL && c->position > q)
			q = c->position;
		/* admitted local: its pages cover the local prefix (the host may
		 * have stated a longer one since the pages were taken) */
		if (q >= c->position && !take_more(e, r, q))
			return false;
		kva__ready_heap_remove(e, r);
		if (q >= c->position)
			plan_admit(e, r, KVA_ADMIT_LOCAL, q, 0);
		else
			plan_admit(e, r, KVA_ADMIT_RESTORE, q, c->position - q);
	} else {
		kva__ready_heap_remove(e, r);
		plan_admit(e, r, KVA_ADMIT_RECOMPUTE, 0, 0);
	}
	return true;
}

static void make_ready(kva_engine *e, struct kva__req *r)
{
	kva_capacity_release(&e->cap, (struct kva_credits){0, 1, 0}); /* the copy slot */
	kva__cost_slot_released(e);
	kva__rec_set_state(e, r, KVA_STATE_READY);
	kva__ready_heap_push(e, r);
}

void kva__admit_on_copy(kva_engine *e, struct kva__req *r, struct kva__event *ev)
{
	switch (kva__copy_on_report(e, r, ev)) {
	case KVA__COPY_READY:
		make_ready(e, r);
		break;
	case KVA__COPY_REQUEUE:
		kva__waiting_queue_requeue_front(e, r, false);
		break;
	default:
		break;
	}
}

void kva__admit_reset_ready(kva_engine *e)
{
	e->reset_epoch++; /* imports still copying requeue when they drain */
	/* last READY first, each pushed to the front: relative order kept.
	 * Sorted in place (reset is rare), the heap is emptied from its end. */
	kva__ready_heap_sort(e);
	struct kva__req *r;
	while ((r = kva__ready_heap_pop_last(e))) {
		kva__touched(e);
		/* rule reset-returns-ready: pages back, to the front */
		kva__rec_give_back(e, r, 0, true);
		kva__waiting_queue_requeue_front(e, r, false);
	}
}

bool kva__admit_head_recheck(kva_engine *e)
{
	e->head_recheck = false;
	struct kva_waitq_node *n = kva_waitq_first(&e->waitq);
	if (!n)
		return false;
	struct kva__req *r = kva__req_of_wq(n);
	if (!(r->flags & KVA__F_RESTORE) || !kva__lookup_host_forgotten(e, r))
		return false;
	/* A reset forgets every host checkpoint at once, so the requests after
	 * the head are likely to need a new lookup too: ask about a few now,
	 * so their answers come back together with the head's instead of one
	 * directory round trip (and one step) each. Bounded: a step still
	 * never walks the queue. */
	n = kva_waitq_next(&e->waitq, n);
	for (unsigned k = 1; n && k < RECHECK_AHEAD; k++) {
		struct kva_waitq_node *next = kva_waitq_next(&e->waitq, n);
		e->plan->records_touched++;
		r = kva__req_of_wq(n);
		if (r->flags & KVA__F_RESTORE)
			kva__lookup_host_forgotten(e, r);
		n = next;
	}
	return true;
}

/* While an eviction's walk is pending (evict_walk.c), the first requests of the
 * queue, the next to be admitted, are checked at every step, so that their
 * new lookups go out together ahead of admission. The walk starts from the
 * most recently indexed sharers, and a request it has not reached looks up
 * at admission, so without this a directory answering a step later would
 * let one request a step through. Bounded: a step still never walks the
 * queue. */
#define EVICT_FRONT 128

bool kva__admit_revalidate_front(kva_engine *e)
{
	bool asked = false;
	struct kva_waitq_node *n = kva_waitq_first(&e->waitq);
	for (unsigned k = 0; n && k < EVICT_FRONT; k++) {
		struct kva_waitq_node *next = kva_waitq_next(&e->waitq, n);
		struct kva__req *r = kva__req_of_wq(n);
		e->plan->records_touched++;
		if ((r->flags & KVA__F_RESTORE) && kva__evict_revalidate_sel(e, r))
			asked = true;
		n = next;
	}
	return asked;
}

uint32_t kva__admit_run(kva_engine *e)
{
	kva_plan *plan = e->plan;
	uint32_t left = 0;
	if (plan->hold_admissions)
		return 0; /* the host preempted this step: nothing new starts */
	/* rule fcfs-ready-bypass: restores that own their capacity go first, past the head */
	for (struct kva__req *r; (r = kva__ready_heap_first(e));) {
		plan->records_touched++;
		if (cancelled_meanwhile(e, r))
			continue;
		int rc = admit_ready(e, r);
		if (!rc)
			break;
		left += rc > 0;
	}
	/* FCFS: admit from the head until one is blocked; never look further.
	 * Admitting a run of heads, a scout runs ADMIT_AHEAD records ahead and
	 * starts their cache misses (one more node per admission; it reads a
	 * record's link only after it was fetched). Not for the first head, so
	 * a blocked step stays minimal. */
	struct kva_waitq_node *n, *scout = NULL;
	unsigned lead = 0; /* the scout is `lead` nodes after the head */
	for (bool batch = false; (n = kva_waitq_first(&e->waitq)); batch = true) {
		plan->records_touched++;
		if (batch) {
			if (lead)
				lead--; /* the previous head left: one nearer */
			if (!lead)
				scout = n;
			while (lead < ADMIT_AHEAD) {
				struct kva_waitq_node *x = kva_waitq_next(&e->waitq, scout);
				if (!x)
					break;
				scout = x;
				lead++;
				kva__rec_prefetch_slot(kva__req_of_wq(x), e->lv != NULL);
			}
			kva__waiting_queue_prefetch_ahead(e, kva__req_of_wq(n));
		}
		if (cancelled_meanwhile(e, kva__req_of_wq(n)))
			continue; /* it left the queue, as an admitted head does */
		if (admit_head(e, kva__req_of_wq(n)) <= 0)
			break;
		left++;
	}
	return left;
}

