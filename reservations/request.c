/*
 * Request lifecycle: submit, cancel, grow, preempt, finish, query, and the
 * scheduler-side handling of those events (ingest, cancellation in every
 * state, requeue after preemption, terminal reports and retirement).
 *
 * Cross-thread rules: a RUNNING request is owned by whoever wins a CAS on its
 * state word (kva_grow holds GROWING while it edits the page list; finish,
 * preempt and the scheduler's cancel move it out of RUNNING). Everything else
 * about a request changes only on the scheduler thread.
 */
#include <errno.h>
#include <string.h>

#include "alloc.h"
#include "engine_internal.h"

/* ---- records ------------------------------------------------------------ */

struct kva__req *kva__req_find(kva_engine *e, kva_handle h)
{
	struct kva_idtable_node *n = kva_idtable_lookup(&e->ids, h.id, h.gen);
	return n ? caa_container_of(n, struct kva__req, idn) : NULL;
}

static size_t answer_size(const struct kva__answer *a)
{
	return kva__answer_bytes(a->count, a->has_ref);
}

size_t kva__answer_bytes(uint32_t count, bool with_ref)
{
	size_t n = sizeof(struct kva__answer) + count * sizeof(kva_checkpoint);
	if (with_ref) /* the index entry sits after the entries, aligned */
		n = kva__answer_ref_offset(count) + sizeof(struct kva__ckpt_ref);
	return n;
}

void kva__answer_free(struct kva__answer *a)
{
	if (a)
		kva__free(a, answer_size(a));
}

/* A grant, its per-rank events, then inline room for its first page ids. */
static size_t grant_size(uint32_t world, uint32_t inline_cap)
{
	return sizeof(struct kva__grant) + world * sizeof(struct kva__event) +
	       inline_cap * sizeof(uint32_t);
}

static uint32_t *grant_inline_pages(struct kva__grant *g)
{
	return (uint32_t *)(g->rank_ev + g->world);
}

void kva__req_free(struct kva__req *r)
{
	kva__answer_free(r->manifest);
	struct kva__grant *g = kva__grant(r);
	if (g) {
		if (g->pages != grant_inline_pages(g))
			kva__free(g->pages, g->cap * sizeof(uint32_t));
		kva__free(g, grant_size(g->world, g->inline_cap));
	}
	kva__free(r, sizeof(*r));
}

void kva__req_free_rcu(struct rcu_head *head)
{
	kva_rcu_reclaim_begin();
	kva__req_free(caa_container_of(head, struct kva__req, rcu));
}

/* Makes sure r owns a grant whose page array holds min_cap ids. Scheduler
 * thread, or the GROWING owner. 0 or -ENOMEM (nothing changed). */
int kva__grant_ensure(kva_engine *e, struct kva__req *r, uint32_t min_cap)
{
	struct kva__grant *g = kva__grant(r);
	if (!g) {
		uint32_t w = e->cfg.world_size;
		/* room for the first admission's pages saves an allocation per admit */
		uint32_t icap = min_cap < 16 ? 16 : min_cap <= 1024 ? min_cap : 0;
		g = kva__calloc(grant_size(w, icap));
		if (!g)
			return -ENOMEM;
		g->req = r;
		g->world = (uint8_t)w;
		g->inline_cap = icap;
		g->cap = icap;
		g->pages = icap ? grant_inline_pages(g) : NULL;
		for (uint32_t i = 0; i < w; i++) {
			g->rank_ev[i].type = KVA__EV_COPY;
			g->rank_ev[i].rank = (uint8_t)i;
		}
		/* R3: publish a fully built grant to kva_copy_done / kva_query (A3). */
		atomic_store_explicit(&r->grant, g, memory_order_release);
	}
	if (g->cap < min_cap) {
		uint32_t cap = g->cap ? g->cap : 4;
		while (cap < min_cap)
			cap = cap > UINT32_MAX / 2 ? min_cap : cap * 2;
		uint32_t *p;
		if (g->pages && g->pages == grant_inline_pages(g)) {
			p = kva__alloc(cap * sizeof(uint32_t)); /* leave the inline room */
			if (p)
				memcpy(p, g->pages, g->cap * sizeof(uint32_t));
		} else {
			p = kva__realloc(g->pages, g->cap * sizeof(uint32_t), cap * sizeof(uint32_t));
		}
		if (!p)
			return -ENOMEM;
		g->pages = p;
		g->cap = cap;
	}
	return 0;
}

/* Gauges follow the state; every state change goes through here. */
static enum kva__stat gauge_of(uint32_t s)
{
	switch (s) {
	case KVA_STATE_WAITING: return ST_WAITING;
	case KVA_STATE_IMPORTING: return ST_IMPORTING;
	case KVA_STATE_READY: return ST_READY;
	case KVA_STATE_RUNNING:
	case KVA__STATE_GROWING: return ST_RUNNING;
	default: return ST_COUNT;
	}
}

void kva__req_set_state(kva_engine *e, struct kva__req *r, uint32_t to)
{
	uint32_t from = atomic_load_explicit(&r->state, memory_order_relaxed);
	enum kva__stat gf = gauge_of(from), gt = gauge_of(to);
	if (gf != ST_COUNT && (r->flags & KVA__F_INGESTED))
		kva__st_add(e, gf, -1);
	if (gt != ST_COUNT)
		kva__st_add(e, gt, 1);
	/* R4: readers (kva_query, kva_grow's CAS) see the request's new
	 * ownership only after everything the scheduler set up for it. */
	atomic_store_explicit(&r->state, to, memory_order_release);
}

/* Gives back everything a request owns: its materialised page ids, every
 * credit, its run slot and `slots` copy slots, in one capacity release. Ids
 * go back to the pool before their credits (R1 in capacity.c), so whoever
 * reserves those credits finds ids. */
static void give_back_all(kva_engine *e, struct kva__req *r, uint16_t slots)
{
	struct kva__grant *g = kva__grant(r);
	uint32_t n = atomic_load_explicit(&g->npages, memory_order_relaxed);
	struct kva_credits give = {atomic_load_explicit(&g->reserved, memory_order_relaxed) + n,
	                           slots, 1};
	kva_pagepool_put_n(&e->pool, g->pages, n);
	atomic_store_explicit(&g->npages, 0, memory_order_relaxed);
	atomic_store_explicit(&g->reserved, 0, memory_order_relaxed);
	g->import_pages = 0;
	kva_capacity_release(&e->cap, give);
}

/* A request just moved out of RUNNING by its CAS owner: every page, credit
 * and its run slot go back at once. */
static void give_back_running(kva_engine *e, struct kva__req *r)
{
	struct kva__grant *g = kva__grant(r);
	kva__st_add(e, ST_RESERVED_PAGES,
	            -(int64_t)atomic_load_explicit(&g->reserved, memory_order_relaxed));
	kva__st_add(e, ST_IN_USE_PAGES, -(int64_t)atomic_load_explicit(&g->npages, memory_order_relaxed));
	kva__st_add(e, ST_RUNNING, -1);
	give_back_all(e, r, 0);
}

/* A request that owns its whole grant but does not run (READY, or an import
 * that drained): every page and credit, its run slot and `slots` copy slots
 * go back at once. */
void kva__release_owned(kva_engine *e, struct kva__req *r, uint16_t slots)
{
	struct kva__grant *g = kva__grant(r);
	kva__st_add(e, ST_RESERVED_PAGES,
	            -(int64_t)(atomic_load_explicit(&g->npages, memory_order_relaxed) +
	                       atomic_load_explicit(&g->reserved, memory_order_relaxed)));
	give_back_all(e, r, slots);
}

/* ---- terminal outcomes --------------------------------------------------- */

static void req_unlink_waiting(kva_engine *e, struct kva__req *r)
{
	kva_waitq_unlink(&e->waitq, &r->wq);
	kva__head_forget(e, r);
	kva_timerwheel_cancel(&e->wheel, &r->deadline);
	kva__ckpt_unindex(e, r);
}

/* Scheduler thread: records the one terminal outcome of r and queues its
 * report. */
void kva__req_end(kva_engine *e, struct kva__req *r, uint32_t terminal)
{
	kva__req_set_state(e, r, terminal);
	kva__st_add(e, terminal == KVA_STATE_FINISHED   ? ST_FINISHED
	               : terminal == KVA_STATE_CANCELLED ? ST_CANCELLED
	                                                 : ST_REJECTED,
	            1);
	cds_list_add_tail(&r->wq.link, &e->ended);
}

/* Scheduler thread: r leaves the id table; memory goes after a grace period.
 * Not while r's own cancel event may still be queued: the inbox or the
 * deferred queue holds it by address, so handling that event retires r. */
void kva__req_retire(kva_engine *e, struct kva__req *r)
{
	/* R8: claim the cancel. A kva_cancel that loses this exchange pushes
	 * nothing and sees r terminal (A8); one that won has pushed its event
	 * or will before its RCU read section ends. */
	if (atomic_exchange_explicit(&r->cancel_requested, 1, memory_order_acq_rel) &&
	    !(r->flags & KVA__F_CANCEL_SEEN)) {
		r->flags |= KVA__F_RETIRE_PENDING;
		return;
	}
	kva_idtable_del(&e->ids, &r->idn);
	kva__ckpt_unindex(e, r);
	kva_rcu_call(&r->rcu, kva__req_free_rcu);
}

/* ---- ingest ---------------------------------------------------------------- */

static bool id_has_live_incarnation(kva_engine *e, struct kva__req *self)
{
	struct kva_idtable_iter it;
	for (struct kva_idtable_node *n = kva_idtable_first(&e->ids, self->idn.id, &it); n;
	     n = kva_idtable_next(&e->ids, &it)) {
		struct kva__req *o = caa_container_of(n, struct kva__req, idn);
		if (o != self && (o->flags & KVA__F_INGESTED) &&
		    !kva__state_is_terminal(atomic_load_explicit(&o->state, memory_order_relaxed)))
			return true;
	}
	return false;
}

void kva__handle_submit(kva_engine *e, struct kva__req *r)
{
	kva__st_add(e, ST_INGESTED, 1);
	if (id_has_live_incarnation(e, r)) {
		kva__req_end(e, r, KVA_STATE_REJECTED);
		return;
	}
	r->flags |= KVA__F_INGESTED;
	kva__st_add(e, ST_WAITING, 1);
	kva_waitq_push_back(&e->waitq, &r->wq);
	/* A cancel may have been requested before ingest: its event follows. */
	kva__lookup_issue(e, r, true);
}

/* ---- cancel ---------------------------------------------------------------- */

int kva_cancel(kva_engine *e, kva_handle h)
{
	if (!e)
		return -EINVAL;
	int rc = 0;
	kva_rcu_read_lock();
	struct kva__req *r = kva__req_find(e, h);
	if (!r || kva__state_is_terminal(atomic_load_explicit(&r->state, memory_order_acquire))) {
		rc = -ENOENT;
	} else if (atomic_exchange_explicit(&r->cancel_requested, 1, memory_order_acq_rel)) {
		/* A8: pairs with R8 in kva__req_retire: lost to the scheduler's
		 * claim means r ended meanwhile. */
		rc = kva__state_is_terminal(atomic_load_explicit(&r->state, memory_order_acquire))
		             ? -ENOENT
		             : -EALREADY;
	} else {
		r->ev_cancel.type = KVA__EV_CANCEL;
		kva_inbox_push(&e->inbox, &r->ev_cancel.node);
	}
	kva_rcu_read_unlock();
	return rc;
}

/* Scheduler thread: a cancel in whatever state r is in now. */
void kva__handle_cancel(kva_engine *e, struct kva__req *r)
{
	uint32_t s = atomic_load_explicit(&r->state, memory_order_acquire);
	struct kva__grant *g = kva__grant(r);
	r->flags |= KVA__F_CANCEL_SEEN; /* unless deferred below */
	switch (s) {
	case KVA_STATE_WAITING:
		if (!(r->flags & KVA__F_INGESTED))
			return; /* rejected duplicate: already ended */
		req_unlink_waiting(e, r);
		kva__req_end(e, r, KVA_STATE_CANCELLED);
		return;
	case KVA_STATE_IMPORTING: {
		/* Credits and the copy slot return at once (rule 12) ... */
		uint32_t rsv = atomic_load_explicit(&g->reserved, memory_order_relaxed);
		uint32_t n = atomic_load_explicit(&g->npages, memory_order_relaxed);
		atomic_store_explicit(&g->reserved, 0, memory_order_relaxed);
		kva__st_add(e, ST_RESERVED_PAGES, -(int64_t)(rsv + n));
		struct kva_credits give = {rsv, 1, 1};
		if (g->copy_queued) {
			/* never dispatched: nothing to drain */
			cds_list_del(&r->wq.link);
			g->copy_queued = false;
			g->copying = false;
			kva_pagepool_put_n(&e->pool, g->pages, n);
			atomic_store_explicit(&g->npages, 0, memory_order_relaxed);
			give.pages += n;
		} else {
			/* ... the destination pages only after every rank reported. */
			kva__st_add(e, ST_DRAINING_PAGES, n);
		}
		kva_capacity_release(&e->cap, give);
		kva__req_end(e, r, KVA_STATE_CANCELLED);
		return;
	}
	case KVA_STATE_READY:
		cds_list_del(&r->wq.link);
		kva__release_owned(e, r, 0);
		kva__req_end(e, r, KVA_STATE_CANCELLED);
		return;
	case KVA_STATE_RUNNING: {
		uint32_t want = KVA_STATE_RUNNING;
		/* A5: pairs with R5 in kva_grow: we own the page list afterwards. */
		if (atomic_compare_exchange_strong_explicit(&r->state, &want, KVA__STATE_ENDING,
		                                            memory_order_acquire, memory_order_relaxed)) {
			give_back_running(e, r);
			kva__req_end(e, r, KVA_STATE_CANCELLED);
			return;
		}
		if (want == KVA__STATE_GROWING) { /* a kva_grow owns it this instant */
			r->flags &= (uint16_t)~KVA__F_CANCEL_SEEN;
			kva_inbox_push(&e->deferred, &r->ev_cancel.node);
		}
		return; /* finished or preempted meanwhile: their events decide */
	}
	case KVA__STATE_GROWING:
		r->flags &= (uint16_t)~KVA__F_CANCEL_SEEN;
		kva_inbox_push(&e->deferred, &r->ev_cancel.node);
		return;
	default:
		/* PREEMPTED: handled with its requeue. Terminal: nothing, except
		 * the retirement that waited for this event. */
		if (r->flags & KVA__F_RETIRE_PENDING)
			kva__req_retire(e, r);
		return;
	}
}

/* Scheduler thread: the event kva_finish / kva_preempt pushed. */
void kva__handle_life_event(kva_engine *e, struct kva__req *r, uint8_t type)
{
	if (type == KVA__EV_FINISHED) {
		kva__req_end(e, r, KVA_STATE_FINISHED);
		return;
	}
	/* preempted: back to the front with a fresh lookup, unless cancelled */
	if (atomic_load_explicit(&r->cancel_requested, memory_order_relaxed)) {
		kva__req_end(e, r, KVA_STATE_CANCELLED);
		return;
	}
	kva__requeue_front(e, r);
}

/* Scheduler thread: r, no longer running or importing, goes back to the
 * front of the waiting queue as a new incarnation of its wait: no manifest,
 * no reason, a fresh decisive lookup (after preemption and reset). */
void kva__requeue_front(kva_engine *e, struct kva__req *r)
{
	kva__manifest_drop(e, r);
	r->flags &= (uint16_t) ~(KVA__F_DECIDED | KVA__F_RESTORE | KVA__F_REFRESH | KVA__F_BLOCKED);
	r->reason = KVA_REASON_NONE;
	atomic_store_explicit(&r->pub_reason, 0, memory_order_relaxed);
	kva__req_set_state(e, r, KVA_STATE_WAITING);
	kva_waitq_push_front(&e->waitq, &r->wq);
	kva__lookup_issue(e, r, true);
}

/* ---- running requests (any thread) ---------------------------------------- */

/* RCU read lock held. Moves h's request out of RUNNING into `to` with one
 * CAS; the winner owns its page list until it stores a new state.
 * 0, -ENOENT (unknown or ended), -EALREADY (finishing twice), -EBUSY. */
static int take_running(kva_engine *e, kva_handle h, uint32_t to, struct kva__req **out)
{
	struct kva__req *r = kva__req_find(e, h);
	if (!r)
		return -ENOENT;
	uint32_t s = KVA_STATE_RUNNING;
	/* A5: pairs with R5 in kva_grow (and R4): we own the page list. */
	if (atomic_compare_exchange_strong_explicit(&r->state, &s, to, memory_order_acquire,
	                                            memory_order_relaxed)) {
		*out = r;
		return 0;
	}
	if (to == KVA__STATE_ENDING && (s == KVA__STATE_ENDING || s == KVA_STATE_FINISHED))
		return -EALREADY;
	return kva__state_is_terminal(s) ? -ENOENT : -EBUSY;
}

/* Adds pages to a RUNNING request inside the GROWING ownership window. */
static int grow_owned(kva_engine *e, struct kva__req *r, uint32_t pages, uint32_t *ids_out)
{
	struct kva__grant *g = kva__grant(r);
	uint32_t n = atomic_load_explicit(&g->npages, memory_order_relaxed);
	uint32_t rsv = atomic_load_explicit(&g->reserved, memory_order_relaxed);
	uint32_t own = rsv < pages ? rsv : pages;
	uint32_t extra = pages - own;
	if (n + pages < n)
		return -ERANGE;
	int rc = kva__grant_ensure(e, r, n + pages);
	if (rc)
		return rc;
	/* Growth may dip below the decode watermark: that is what it is for. */
	if (extra && !kva_capacity_try_reserve(&e->cap, (struct kva_credits){extra, 0, 0}, 0))
		return -ENOSPC;
	if (!kva_pagepool_take_n(&e->pool, g->pages + n, pages)) {
		/* cannot happen while ids >= credits (R1/A1); never hand out garbage */
		kva_capacity_release(&e->cap, (struct kva_credits){extra, 0, 0});
		return -ENOSPC;
	}
	atomic_store_explicit(&g->reserved, rsv - own, memory_order_relaxed);
	atomic_store_explicit(&g->npages, n + pages, memory_order_relaxed);
	kva__st_add(e, ST_RESERVED_PAGES, -(int64_t)own);
	kva__st_add(e, ST_IN_USE_PAGES, pages);
	if (ids_out)
		memcpy(ids_out, g->pages + n, pages * sizeof(uint32_t));
	return 0;
}

int kva_grow(kva_engine *e, kva_handle h, uint32_t pages, uint32_t *ids_out)
{
	if (!e || pages == 0)
		return -EINVAL;
	if (pages > e->cfg.total_pages)
		return -ERANGE;
	struct kva__req *r;
	kva_rcu_read_lock();
	int rc = take_running(e, h, KVA__STATE_GROWING, &r);
	if (!rc) {
		rc = grow_owned(e, r, pages, ids_out);
		/* R5: hand the page list back; pairs with A5 of the next owner. */
		atomic_store_explicit(&r->state, KVA_STATE_RUNNING, memory_order_release);
	}
	kva_rcu_read_unlock();
	return rc;
}

/* Moves r out of RUNNING into `to` and gives everything back. */
static int release_running(kva_engine *e, kva_handle h, uint32_t to, uint8_t ev_type)
{
	if (!e)
		return -EINVAL;
	struct kva__req *r;
	kva_rcu_read_lock();
	int rc = take_running(e, h, to, &r);
	if (!rc) {
		give_back_running(e, r);
		if (ev_type == KVA__EV_PREEMPTED)
			kva__st_add(e, ST_PREEMPTED, 1);
		r->ev_main.type = ev_type;
		kva_inbox_push(&e->inbox, &r->ev_main.node);
	}
	kva_rcu_read_unlock();
	return rc;
}

int kva_finish(kva_engine *e, kva_handle h)
{
	return release_running(e, h, KVA__STATE_ENDING, KVA__EV_FINISHED);
}

int kva_preempt(kva_engine *e, kva_handle h)
{
	return release_running(e, h, KVA__STATE_PREEMPTED, KVA__EV_PREEMPTED);
}

/* ---- submit ------------------------------------------------------------------ */

int kva_submit(kva_engine *e, const kva_request *q, kva_handle *out)
{
	if (!e || !q || !out || q->prompt_tokens == 0 || q->flags != 0)
		return -EINVAL;
	struct kva__req *r = kva__alloc(sizeof(*r));
	if (!r)
		return -ENOMEM;
	memset(r, 0, sizeof(*r));
	r->idn.id = q->id;
	/* Generations only need to differ between incarnations of one id. */
	uint32_t gen = atomic_fetch_add_explicit(&e->next_gen, 1, memory_order_relaxed) + 1;
	r->idn.gen = gen ? gen : atomic_fetch_add_explicit(&e->next_gen, 1, memory_order_relaxed) + 1;
	r->prefix_key = q->prefix_key;
	r->user = q->user;
	r->prompt_tokens = q->prompt_tokens;
	r->sel = -1;
	atomic_init(&r->state, KVA_STATE_WAITING);
	kva_timer_init(&r->deadline);
	kva_inbox_node_init(&r->ev_main.node);
	kva_inbox_node_init(&r->ev_cancel.node);
	r->ev_main.type = KVA__EV_SUBMIT;

	kva_rcu_read_lock();
	kva_idtable_add(&e->ids, &r->idn);
	kva_rcu_read_unlock();
	kva__st_add(e, ST_SUBMITTED, 1);
	/* Fill the handle first: once pushed, the record belongs to the
	 * scheduler, which may end, retire and (after a grace period) free it. */
	out->id = r->idn.id;
	out->gen = r->idn.gen;
	out->reserved_ = 0;
	/* The inbox push publishes every field above to the scheduler. */
	kva_inbox_push(&e->inbox, &r->ev_main.node);
	return 0;
}

/* ---- query ------------------------------------------------------------------- */

static uint8_t public_state(uint32_t s)
{
	switch (s) {
	case KVA__STATE_GROWING: return KVA_STATE_RUNNING;
	case KVA__STATE_PREEMPTED: return KVA_STATE_WAITING;
	case KVA__STATE_ENDING: return KVA_STATE_FINISHED;
	default: return (uint8_t)s;
	}
}

int kva_query(kva_engine *e, kva_handle h, kva_request_info *out)
{
	if (!e || !out)
		return -EINVAL;
	int rc = 0;
	kva_rcu_read_lock();
	struct kva__req *r = kva__req_find(e, h);
	if (!r) {
		rc = -ENOENT;
	} else {
		memset(out, 0, sizeof(*out));
		out->handle = h;
		out->user = r->user;
		out->prompt_tokens = r->prompt_tokens;
		out->state = public_state(atomic_load_explicit(&r->state, memory_order_acquire));
		out->reason = atomic_load_explicit(&r->pub_reason, memory_order_relaxed);
		uint32_t sel = atomic_load_explicit(&r->pub_sel, memory_order_relaxed);
		out->has_selection = sel != 0;
		out->selected_position = sel >> 1;
		out->selected_location = (sel & 1) ? KVA_LOC_LOCAL : KVA_LOC_EXTERNAL;
		out->lookups = atomic_load_explicit(&r->lookups, memory_order_relaxed);
		/* A3: pairs with R3 in kva__grant_ensure. */
		struct kva__grant *g = kva__grant(r);
		if (g) {
			out->pages_held = atomic_load_explicit(&g->npages, memory_order_relaxed);
			out->pages_reserved = atomic_load_explicit(&g->reserved, memory_order_relaxed);
			out->copy_attempts = (uint32_t)(atomic_load_explicit(&g->copy_word,
			                                                     memory_order_relaxed) >> 32);
		}
	}
	kva_rcu_read_unlock();
	return rc;
}
