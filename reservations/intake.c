/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Intake: every entry point any thread may call. Each reaches its record
 * through the handle's (or token's) slot and generation — a bounds check and
 * a compare inside an RCU read-side section, no search — and hands the
 * scheduler an event; running requests are arbitrated by a CAS on their
 * state word. Calls only event_queue.c, grant.c, lifecycle.c and stats.c.
 *
 * Memory-order labels:
 *   A2  a reader sees a state and what the scheduler set up before it: pairs
 *       with R2 of lifecycle.c (and R4 below)
 *   A3  kva_lookup_answer sees the awaited seq: pairs with R1 of lookup.c
 *   R4/A4  kva_grow hands the page list back -> the next CAS owner
 *   A5  kva_waiting_foreach sees a record it reaches: pairs with R2 of slab.c
 */
#include <errno.h>
#include <string.h>

#include "alloc.h"
#include "cost_model.h"
#include "event_queue.h"
#include "grant.h"
#include "lifecycle.h"
#include "prio.h"
#include "stats.h"

/* The calling thread's producer-counter shard: its inbox lane's. */
static struct kva__shard *my_shard(kva_engine *e)
{
	return &e->shard[kva_fanin_lane() % KVA__SHARDS];
}

/* RCU read lock held. */
static struct kva__req *find(kva_engine *e, kva_handle h)
{
	return kva__rec_find(e, h.slot, h.gen, h.id);
}

/* 0, -EINVAL, -ERANGE (past a prompt of `prompt` tokens). */
static int host_local_valid(const kva_checkpoint *cp, uint32_t prompt)
{
	if (cp->location != KVA_LOC_LOCAL || !cp->compatible || cp->reserved_ ||
	    cp->tier >= KVA_TIER_COUNT)
		return -EINVAL;
	return cp->position > prompt ? -ERANGE : 0;
}

/* ---- submit ------------------------------------------------------------------ */

int kva_submit(kva_engine *e, const kva_request *q, kva_handle *out)
{
	if (!e || !q || !out || q->prompt_tokens == 0 || q->flags != 0 || q->reserved_ != 0)
		return -EINVAL;
	if (q->local.position) {
		int rc = host_local_valid(&q->local, q->prompt_tokens);
		if (rc)
			return rc;
	}
	uint32_t slot;
	struct kva__req *r = kva__rec_new(e, q->priority, &slot);
	if (!r)
		return -ENOMEM;
	/* No memset: every field the scheduler reads is set below, and the
	 * grant pointer is NULL since the slot's last retirement. */
	kva_inbox_node_init(&r->ev_main.node);
	r->ev_main.type = KVA__EV_SUBMIT;
	r->ev_main.slot = slot;
	r->id = q->id;
	r->user = q->user;
	r->prefix_key = q->prefix_key;
	r->prompt_tokens = q->prompt_tokens;
	atomic_init(&r->state, KVA_STATE_WAITING);
	atomic_init(&r->lookup_word, 0);
	atomic_init(&r->pub_sel, 0);
	atomic_init(&r->cancel_requested, 0);
	atomic_init(&r->lookups, 0);
	atomic_init(&r->pub_reason, 0);
	r->reason = KVA_REASON_NONE;
	r->sel = -1;
	/* rule host-local-checkpoints: the retained manifest starts with it */
	if (q->local.position) {
		r->one = q->local;
		kva__ck_set_mark(&r->one, kva__host_mark(e));
		r->nents = 1;
		r->flags = KVA__F_HOSTLOCAL;
	} else {
		r->nents = 0;
		r->flags = 0;
	}
	r->blocked_since = 0;
	kva_timer_init(&r->deadline);
	if (e->lv) /* the slot has room for it (priority_levels.h) */
		*kva__prio(r) = (struct kva__prio){q->arrival_ns, q->priority, 0};
	uint32_t gen = kva__rec_publish(e, r);
	/* Fill the handle first: once pushed, the record belongs to the
	 * scheduler, which may end and retire it. */
	*out = (kva_handle){q->id, gen, slot};
	/* An add, not a load and a store: lanes are shared once a process has
	 * had more producer threads than lanes (kva_fanin_lane), and two
	 * threads on one shard would lose counts. Relaxed: a statistic, read
	 * by kva_stats_get with no order against anything else. */
	atomic_fetch_add_explicit(&my_shard(e)->submitted, 1, memory_order_relaxed);
	/* The inbox push publishes every field above to the scheduler. */
	kva__event_push(e, &r->ev_main);
	return 0;
}

/* ---- cancel ---------------------------------------------------------------- */

int kva_cancel(kva_engine *e, kva_handle h)
{
	if (!e)
		return -EINVAL;
	int rc = 0;
	struct kva__cancel *c = NULL;
	kva_rcu_read_lock();
	struct kva__req *r = find(e, h);
	/* A2: pairs with R2 of lifecycle.c. */
	if (!r || kva__state_is_terminal(atomic_load_explicit(&r->state, memory_order_acquire)))
		rc = -ENOENT;
	else if (atomic_load_explicit(&r->cancel_requested, memory_order_relaxed))
		rc = -EALREADY;
	/* The event before the claim, so a claim is never undone. */
	else if (!(c = kva__cancel_new(e)))
		rc = -ENOMEM;
	else if (atomic_exchange_explicit(&r->cancel_requested, 1, memory_order_relaxed))
		rc = -EALREADY; /* another thread's cancel won meanwhile */
	kva_rcu_read_unlock();
	if (rc) {
		if (c)
			kva__cancel_unused(e, c);
		return rc;
	}
	kva_inbox_node_init(&c->ev.node);
	c->ev.type = KVA__EV_CANCEL;
	c->h = h;
	kva__event_push(e, &c->ev);
	return 0;
}

/* ---- directory answers ---------------------------------------------------- */

static int manifest_valid(const kva_manifest *m)
{
	if (m->count > KVA_MAX_CHECKPOINTS)
		return -EINVAL;
	for (uint32_t i = 0; i < m->count; i++) {
		const kva_checkpoint *c = &m->entries[i];
		if (c->position == 0 || c->location > KVA_LOC_LOCAL || c->reserved_ ||
		    c->tier >= KVA_TIER_COUNT)
			return -EINVAL;
		if (i && c->position <= m->entries[i - 1].position)
			return -EINVAL; /* unsorted or duplicate position */
		for (uint32_t j = 0; j < i; j++)
			if (m->entries[j].id == c->id)
				return -EINVAL; /* duplicate checkpoint id */
	}
	return 0;
}

int kva_lookup_answer(kva_engine *e, kva_lookup_token t, const kva_manifest *m)
{
	if (!e || !m)
		return -EINVAL;
	int rc = manifest_valid(m);
	if (rc)
		return rc;
	kva_rcu_read_lock();
	struct kva__req *r = kva__rec_find(e, t.slot, t.gen, t.id);
	/* A3: pairs with R1 of lookup.c. */
	uint32_t w = r ? atomic_load_explicit(&r->lookup_word, memory_order_acquire) : 0;
	if (!r)
		rc = -ENOENT;
	else if (w != (t.seq << 1 | KVA__LW_AWAITING) ||
	         /* ended (A2): awaits no lookup */
	         kva__state_is_terminal(atomic_load_explicit(&r->state, memory_order_acquire)))
		rc = -ESTALE;
	kva_rcu_read_unlock();
	if (rc == -ESTALE)
		kva__st_add(e, ST_LATE_ANSWERS, 1);
	if (rc)
		return rc;
	struct kva__answer *a = kva__answer_new(m->count + 1); /* + the host's entry */
	if (!a)
		return -ENOMEM;
	a->token = t;
	a->count = m->count;
	memcpy(a->entries, m->entries, m->count * sizeof(kva_checkpoint));
	for (uint32_t i = 0; i < m->count; i++)
		a->entries[i].reserved_ = 0; /* never KVA__CK_HOST: the directory's */
	kva__event_push(e, &a->ev);
	return 0;
}

/* ---- local checkpoints the host knows (rule host-local-checkpoints) -------------------------- */

int kva_local_checkpoint(kva_engine *e, kva_handle h, const kva_checkpoint *cp)
{
	if (!e || !cp || cp->position == 0)
		return -EINVAL;
	struct kva__local *l = NULL;
	kva_rcu_read_lock();
	struct kva__req *r = find(e, h);
	/* A2: pairs with R2 of lifecycle.c. */
	int rc = !r || kva__state_is_terminal(atomic_load_explicit(&r->state, memory_order_acquire))
	                 ? -ENOENT
	                 : host_local_valid(cp, r->prompt_tokens);
	if (!rc && !(l = kva__local_new()))
		rc = -ENOMEM; /* checked first: an ended handle is -ENOENT, not this */
	kva_rcu_read_unlock();
	if (rc)
		return rc;
	kva_inbox_node_init(&l->ev.node);
	l->ev.type = KVA__EV_LOCAL;
	l->h = h;
	l->cp = *cp;
	kva__ck_set_mark(&l->cp, kva__host_mark(e));
	kva__event_push(e, &l->ev);
	return 0;
}

/* ---- priority changes (KVA_ORDER_PRIORITY) ---------------------------------- */

int kva_set_priority(kva_engine *e, kva_handle h, int32_t p)
{
	if (!e || !e->lv)
		return -EINVAL;
	struct kva__cancel *c = NULL;
	kva_rcu_read_lock();
	struct kva__req *r = find(e, h);
	/* A2: pairs with R2 of lifecycle.c. */
	int rc = !r || kva__state_is_terminal(atomic_load_explicit(&r->state, memory_order_acquire))
	                 ? -ENOENT
	                 : 0;
	if (!rc && !(c = kva__cancel_new(e))) /* a slab slot: no heap allocation */
		rc = -ENOMEM;
	kva_rcu_read_unlock();
	if (rc)
		return rc;
	kva_inbox_node_init(&c->ev.node);
	c->ev.type = KVA__EV_PRIORITY;
	c->h = h;
	c->priority = p;
	kva__event_push(e, &c->ev);
	return 0;
}

/* ---- copy reports ---------------------------------------------------------- */

int kva_copy_done(kva_engine *e, kva_copy_token t, uint32_t rank, int status)
{
	if (!e)
		return -EINVAL;
	if (rank >= e->cfg.world_size)
		return -ERANGE;
	bool wake = false;
	kva_rcu_read_lock();
	struct kva__req *r = kva__rec_find(e, t.slot, t.gen, t.id);
	struct kva__grant *g = r ? kva__grant(r) : NULL;
	int rc = g ? kva__grant_report(e, g, t.attempt, rank, status, &wake) : -ENOENT;
	kva_rcu_read_unlock();
	if (wake) /* out of the read-side section, as every callback */
		kva__wake(e);
	return rc;
}

/* ---- evictions and resets -------------------------------------------------- */

int kva_checkpoint_evicted(kva_engine *e, uint64_t checkpoint_id, uint64_t epoch)
{
	if (!e)
		return -EINVAL;
	struct kva__evict *ev = kva__alloc(sizeof(*ev));
	if (!ev)
		return -ENOMEM;
	kva_inbox_node_init(&ev->ev.node);
	ev->ev.type = KVA__EV_EVICT;
	ev->checkpoint_id = checkpoint_id;
	ev->epoch = epoch;
	kva__event_push(e, &ev->ev);
	return 0;
}

int kva_reset_prefix_cache(kva_engine *e)
{
	if (!e)
		return -EINVAL;
	/* Host checkpoints stated before this call are forgotten from now on
	 * (kva__host_mark; relaxed: a count, ordered by coherence). */
	atomic_fetch_add_explicit(&e->reset_calls, 1, memory_order_relaxed);
	/* One queued reset covers every request made before it is handled;
	 * pairs with R1 of step_events.c. */
	if (!atomic_exchange_explicit(&e->reset_requested, 1, memory_order_acq_rel))
		kva__event_push(e, &e->reset_ev);
	return 0;
}

/* ---- running requests ------------------------------------------------------ */

/* RCU read lock held. Moves h's request out of RUNNING into `to` with one
 * CAS; the winner owns its page list until it stores a new state (a cancel
 * the step has not handled yet loses to it).
 * 0, -ENOENT (unknown or ended), -EALREADY (finishing twice), -EBUSY (not
 * running, or the step's cancel owns it this instant). */
static int take_running(kva_engine *e, kva_handle h, uint32_t to, struct kva__req **out)
{
	/* A running request's record and grant were last touched when it was
	 * admitted, long ago: fetch all of the record's lines before the handle
	 * check waits for the first, and the grant (fixed while it runs: it
	 * leaves only at retirement) before the claim below waits for its CAS,
	 * so the caller's misses overlap instead of following one another. */
	struct kva__req *r = kva_slab_get(&e->slab, h.slot);
	if (r)
		kva__rec_prefetch_slot(r, e->lv != NULL);
	if (!(r = find(e, h)))
		return -ENOENT;
	struct kva__grant *g = atomic_load_explicit(&r->grant, memory_order_relaxed);
	if (g)
		kva__grant_prefetch(g); /* a hint: the acquire load that uses it is A1 */
	uint32_t s = KVA_STATE_RUNNING;
	/* A4: pairs with R4 in kva_grow (and R2 of lifecycle.c): we own the page list. */
	if (atomic_compare_exchange_strong_explicit(&r->state, &s, to, memory_order_acquire,
	                                            memory_order_relaxed)) {
		*out = r;
		return 0;
	}
	if (to == KVA__STATE_ENDING && (s == KVA__STATE_ENDING || s == KVA_STATE_FINISHED))
		return -EALREADY;
	if (s == KVA__STATE_CANCELLING) /* it ends CANCELLED within this step */
		return -EBUSY;
	return kva__state_is_terminal(s) ? -ENOENT : -EBUSY;
}

/* A host thread's take: one the pool gives up to contention (-EAGAIN,
 * other threads kept winning it) is tried again, KVA__GROW_TAKES takes in
 * all, since no step waits for this thread; then the pool's answer. */
#define KVA__GROW_TAKES 16
static int take_ids(kva_engine *e, uint32_t *ids, uint32_t n)
{
	int rc = -EAGAIN;
	for (int i = 0; i < KVA__GROW_TAKES && rc == -EAGAIN; i++)
		rc = kva_pagepool_take_n(&e->pool, ids, n);
	return rc;
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
	if (take_ids(e, g->pages + n, pages) != 0) {
		/* contended throughout, or (cannot happen while ids >= credits)
		 * missing: never hand out garbage */
		kva_capacity_release(&e->cap, (struct kva_credits){extra, 0, 0});
		return -ENOSPC;
	}
	atomic_store_explicit(&g->reserved, rsv - own, memory_order_relaxed);
	atomic_store_explicit(&g->npages, n + pages, memory_order_relaxed);
	kva__st_add(e, ST_RESERVED_PAGES, -(int64_t)own);
	kva__st_add(e, ST_IN_USE_PAGES, pages);
	if (ids_out && !(e->cfg.flags & KVA_CONFIG_CREDITS_ONLY)) /* no ids: the host's pool */
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
		/* R4: hand the page list back; pairs with A4 of the next owner. */
		atomic_store_explicit(&r->state, KVA_STATE_RUNNING, memory_order_release);
	}
	kva_rcu_read_unlock();
	return rc;
}

/* Moves r out of RUNNING into `to`, gives everything back at once and tells
 * the scheduler. */
static int release_running(kva_engine *e, kva_handle h, uint32_t to, uint8_t ev_type)
{
	if (!e)
		return -EINVAL;
	struct kva__req *r;
	bool wake = false;
	kva_rcu_read_lock();
	int rc = take_running(e, h, to, &r);
	if (!rc) {
		kva__st_add(e, ST_RUNNING, -1);
		kva__rec_give_back(e, r, 0, false);
		if (ev_type == KVA__EV_PREEMPTED)
			kva__st_add(e, ST_PREEMPTED, 1);
		r->ev_main.type = ev_type;
		wake = kva__event_enqueue(e, &r->ev_main);
	}
	kva_rcu_read_unlock();
	if (wake) /* out of the read-side section, as every callback */
		kva__wake(e);
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

/* ---- readers ------------------------------------------------------------------ */

int kva_query(kva_engine *e, kva_handle h, kva_request_info *out)
{
	if (!e || !out)
		return -EINVAL;
	int rc = 0;
	kva_rcu_read_lock();
	struct kva__req *r = find(e, h);
	if (!r) {
		rc = -ENOENT;
	} else {
		memset(out, 0, sizeof(*out));
		out->handle = h;
		out->user = r->user;
		out->prompt_tokens = r->prompt_tokens;
		out->state = kva__public_state(atomic_load_explicit(&r->state, memory_order_acquire));
		out->reason = atomic_load_explicit(&r->pub_reason, memory_order_relaxed);
		uint32_t sel = atomic_load_explicit(&r->pub_sel, memory_order_relaxed);
		out->has_selection = sel != 0;
		out->selected_position = sel >> 1;
		out->selected_location = (sel & 1) ? KVA_LOC_LOCAL : KVA_LOC_EXTERNAL;
		out->lookups = atomic_load_explicit(&r->lookups, memory_order_relaxed);
		out->cancel_requested = atomic_load_explicit(&r->cancel_requested,
		                                             memory_order_relaxed);
		if (e->cfg.policy == KVA_POLICY_COST)
			kva__cost_query(e, h, r->prompt_tokens, sel >> 1, sel & 1,
			                &out->predicted_restore_ns, &out->predicted_recompute_ns);
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

int kva_waiting_foreach(kva_engine *e, kva_waiting_fn fn, void *ctx, size_t max)
{
	if (!e || !fn)
		return -EINVAL;
	uint32_t pos = 0;
	struct kva_waitq_node *n;
	kva_rcu_read_lock();
	kva_waitq_for_each_rcu(&e->waitq, n) {
		if (max && pos >= max)
			break;
		struct kva__req *r = kva__req_of_wq(n);
		/* A5: pairs with R2 of slab.c. Even: retired during this walk. */
		uint32_t gen = atomic_load_explicit(&r->hdr.gen, memory_order_acquire);
		if (!(gen & 1))
			continue;
		kva_waiting_info w = {{r->id, gen, kva__rec_slot(r)}, r->user, pos, r->prompt_tokens};
		pos++;
		if (fn(ctx, &w))
			break;
	}
	kva_rcu_read_unlock();
	return (int)pos;
}
