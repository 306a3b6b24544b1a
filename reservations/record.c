/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Records: slots, state, grants, the one give-back path, terminal outcomes,
 * the live-id map and retirement (see record.h). Calls nothing in
 * reservations/ but alloc.c and stats.c.
 *
 * Memory-order labels:
 *   R1/A1  a grant fully built -> kva__grant() readers (record.h)
 *   R2     a new state published -> readers of the state word (A2 of intake.c)
 *   A3     a rank's claim on copy_word sees the attempt: pairs with R1 of copy.c
 */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "alloc.h"
#include "engine_state.h"

/* The memory budget of a waiting request (bench: BM_memory_per_request). */
_Static_assert(sizeof(struct kva__req) <= 160, "a record grew past 160 bytes");
/* Any-thread calls read one line of a record (record.h). */
_Static_assert(offsetof(struct kva__req, pub_sel) + sizeof(uint32_t) <= 32,
               "the fields any-thread calls read left the record's first 32 bytes");
/* The grant stays with the slot: the slab must not write it while free. */
_Static_assert(offsetof(struct kva__req, grant) >=
                   offsetof(struct kva__req, rcu) + sizeof(struct kva_slab_rcu),
               "the grant lies in the bytes the slab uses while a slot is free");

/* The engine whose kva_step runs on this thread, if any: events it produces
 * (a directory answering from its callback) belong to the step in progress. */
static _Thread_local kva_engine *tls_stepping;

void kva__rec_stepping(kva_engine *e) { tls_stepping = e; }

struct kva__req *kva__rec_find(kva_engine *e, uint32_t slot, uint32_t gen, uint64_t id)
{
	struct kva__req *r = kva_slab_lookup(&e->slab, slot, gen);
	return r && r->id == id ? r : NULL;
}

struct kva__req *kva__rec_new(kva_engine *e, uint32_t *slot)
{
	return kva_slab_alloc(&e->slab, slot);
}

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

uint32_t kva__rec_publish(kva_engine *e, struct kva__req *r)
{
	return kva_slab_publish(&e->slab, r);
}

bool kva__event_enqueue(kva_engine *e, struct kva__event *ev)
{
	/* Answers and copy reports the step's own callbacks produce belong to
	 * it (bounded by the lookups and copies it started); anything else a
	 * callback does (a submit, a cancel) waits for the next step. */
	if (tls_stepping == e && (ev->type == KVA__EV_ANSWER || ev->type == KVA__EV_COPY)) {
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

static size_t answer_bytes(uint32_t cap)
{
	return sizeof(struct kva__answer) + cap * sizeof(kva_checkpoint);
}

struct kva__answer *kva__answer_new(uint32_t cap)
{
	struct kva__answer *a = kva__alloc(answer_bytes(cap));
	if (a) {
		kva_inbox_node_init(&a->ev.node);
		a->ev.type = KVA__EV_ANSWER;
		a->count = 0;
		a->cap = cap;
	}
	return a;
}

void kva__answer_free(struct kva__answer *a)
{
	if (a)
		kva__free(a, answer_bytes(a->cap));
}

struct kva__local *kva__local_new(void)
{
	struct kva__local *l = kva__alloc(sizeof(*l));
	if (l && !(l->spare = kva__answer_new(KVA_MAX_CHECKPOINTS + 1))) {
		kva__free(l, sizeof(*l));
		l = NULL;
	}
	return l;
}

void kva__local_free(struct kva__local *l)
{
	kva__answer_free(l->spare);
	kva__free(l, sizeof(*l));
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

static void grant_free(struct kva__grant *g)
{
	if (g->pages != grant_inline_pages(g))
		kva__free(g->pages, g->cap * sizeof(uint32_t));
	kva__free(g, grant_size(g->world, g->inline_cap));
}

/* ---- grant reuse -----------------------------------------------------------------
 *
 * A retired request's grant leaves its record (kva__rec_retire) for the
 * limbo list, tagged with the slab flush that follows: a reader that found
 * the record before its retirement may still read the grant until a grace
 * period has passed since then (kva_slab_flush_done; no call_rcu of its
 * own). The next admission takes from the spare stack, refilled from the
 * limbo as grace periods pass, most recently retired first. Beyond
 * GRANTS_SPARE_MAX spares a grant is freed: after a burst the engine keeps
 * no more than that for the next one. Each reuse moves at most
 * GRANTS_MATURE_STEP grants out of the limbo, so a burst of retirements
 * costs no single admission more than that; every grant was once admitted,
 * so the limbo still drains faster than it fills. */
#define GRANTS_SPARE_MAX 4096u
#define GRANTS_MATURE_STEP 4u

static void grant_retire(kva_engine *e, struct kva__grant *g)
{
	g->spare.next = NULL;
	g->spare.flush = kva_slab_next_flush(&e->retired);
	if (e->grants_limbo_tail)
		e->grants_limbo_tail->spare.next = g;
	else
		e->grants_limbo = g;
	e->grants_limbo_tail = g;
}

/* A grant no reader can reach, or NULL. Scheduler only. */
static struct kva__grant *grant_reuse(kva_engine *e)
{
	struct kva__grant *g;
	for (unsigned k = 0; k < GRANTS_MATURE_STEP && (g = e->grants_limbo) &&
	                     kva_slab_flush_done(&e->slab, g->spare.flush);
	     k++) {
		if (!(e->grants_limbo = g->spare.next))
			e->grants_limbo_tail = NULL;
		if (e->n_grants_spare >= GRANTS_SPARE_MAX) {
			grant_free(g);
			continue;
		}
		g->spare.next = e->grants_spare;
		e->grants_spare = g;
		e->n_grants_spare++;
	}
	if ((g = e->grants_spare)) {
		e->grants_spare = g->spare.next;
		e->n_grants_spare--;
		/* what the last owner left; pages, cap and world stay */
		g->reset_epoch = 0;
		atomic_store_explicit(&g->npages, 0, memory_order_relaxed);
		atomic_store_explicit(&g->reserved, 0, memory_order_relaxed);
		g->import_pages = 0;
		g->queue_seq = 0;
		g->copy_started = 0;
		g->attempts = 0;
		g->retries = 0;
		g->n_reported = 0;
		g->any_failed = g->copying = g->copy_queued = false;
		atomic_store_explicit(&g->copy_word, 0, memory_order_relaxed);
	}
	return g;
}

static void grants_free_list(struct kva__grant *g)
{
	while (g) {
		struct kva__grant *next = g->spare.next;
		grant_free(g);
		g = next;
	}
}

static struct kva__grant *grant_new(kva_engine *e, uint32_t min_cap)
{
	uint32_t w = e->cfg.world_size;
	/* room for the first admission's pages saves an allocation per admit */
	uint32_t icap = min_cap < 16 ? 16 : min_cap <= 1024 ? min_cap : 0;
	struct kva__grant *g = kva__calloc(grant_size(w, icap));
	if (!g)
		return NULL;
	g->world = (uint8_t)w;
	g->inline_cap = icap;
	g->cap = icap;
	g->pages = icap ? grant_inline_pages(g) : NULL;
	return g;
}

/* g becomes r's, for kva_copy_done and kva_query too. Scheduler only. */
static void grant_attach(struct kva__req *r, struct kva__grant *g)
{
	g->req = r;
	for (uint32_t i = 0; i < g->world; i++) {
		kva_inbox_node_init(&g->rank_ev[i].node);
		g->rank_ev[i].type = KVA__EV_COPY;
		g->rank_ev[i].rank = (uint8_t)i;
		g->rank_ev[i].slot = kva__rec_slot(r);
	}
	/* R1: publish a fully built grant to kva_copy_done / kva_query (A1). */
	atomic_store_explicit(&r->grant, g, memory_order_release);
	r->flags |= KVA__F_GRANTED;
}

int kva__grant_ensure(kva_engine *e, struct kva__req *r, uint32_t min_cap)
{
	struct kva__grant *g = kva__grant(r);
	/* Only a request the scheduler admits has none: kva_grow's is RUNNING. */
	if (!g) {
		if (!(g = grant_reuse(e)) && !(g = grant_new(e, min_cap)))
			return -ENOMEM;
		grant_attach(r, g);
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

int kva__grant_report(kva_engine *e, struct kva__grant *g, uint32_t attempt, uint32_t rank,
                      int status, bool *wake)
{
	int rc = 0;
	/* A3: pairs with R1 of copy.c: the attempt and its pages. */
	uint64_t w = atomic_load_explicit(&g->copy_word, memory_order_acquire);
	for (;;) {
		/* attempts count from 1; 0 names none (a grant that never copied) */
		if (attempt == 0 || (uint32_t)(w >> 32) != attempt) {
			rc = -ESTALE;
			break;
		}
		if (w & (1ull << rank)) {
			rc = -EALREADY;
			break;
		}
		/* One report per rank per attempt: the bit is the claim. */
		if (atomic_compare_exchange_weak_explicit(&g->copy_word, &w, w | (1ull << rank),
		                                          memory_order_acq_rel, memory_order_acquire))
			break;
	}
	if (rc) {
		kva__st_add(e, ST_STALE_COPY, 1);
		return rc;
	}
	g->rank_ev[rank].status = status ? 1 : 0;
	*wake = kva__event_enqueue(e, &g->rank_ev[rank]);
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

void kva__rec_set_state(kva_engine *e, struct kva__req *r, uint32_t to)
{
	uint32_t from = atomic_load_explicit(&r->state, memory_order_relaxed);
	enum kva__stat gf = gauge_of(from), gt = gauge_of(to);
	/* RUNNING is also left by kva_finish/kva_preempt on other threads */
	if (gf != ST_COUNT && (r->flags & KVA__F_INGESTED))
		gf == ST_RUNNING ? kva__st_add(e, gf, -1)
		                 : kva__st_add_single_writer(e, gf, (uint64_t)-1);
	if (gt != ST_COUNT)
		gt == ST_RUNNING ? kva__st_add(e, gt, 1) : kva__st_add_single_writer(e, gt, 1);
	/* R2: readers (kva_query, kva_grow's CAS) see the request's new
	 * ownership only after everything the scheduler set up for it. */
	atomic_store_explicit(&r->state, to, memory_order_release);
}

void kva__pages_return(kva_engine *e, const uint32_t *ids, uint32_t n, struct kva_credits extra)
{
	kva_pagepool_put_n(&e->pool, ids, n);
	extra.pages += n;
	kva_capacity_release(&e->cap, extra);
}

void kva__rec_give_back(kva_engine *e, struct kva__req *r, uint16_t slots, bool reserved_gauge)
{
	struct kva__grant *g = kva__grant(r);
	uint32_t n = atomic_load_explicit(&g->npages, memory_order_relaxed);
	uint32_t rsv = atomic_load_explicit(&g->reserved, memory_order_relaxed);
	if (reserved_gauge) {
		kva__st_add(e, ST_RESERVED_PAGES, -(int64_t)(n + rsv));
	} else {
		kva__st_add(e, ST_RESERVED_PAGES, -(int64_t)rsv);
		kva__st_add(e, ST_IN_USE_PAGES, -(int64_t)n);
	}
	atomic_store_explicit(&g->npages, 0, memory_order_relaxed);
	atomic_store_explicit(&g->reserved, 0, memory_order_relaxed);
	g->import_pages = 0;
	kva__pages_return(e, g->pages, n, (struct kva_credits){rsv, slots, 1});
}

/* Retirements a step-end flush waits for. A flush is a ticket and a
 * call_rcu: for a step that retired one request it was a sixth of the step
 * (BM_admit/1). Full batches (KVA_SLAB_RETIRE_BATCH) flush as they fill. */
#define FLUSH_AT 16u

static void flush_some(struct kva_slab *s, struct kva_slab_retired *b, uint32_t *seen)
{
	if (b->n >= FLUSH_AT || b->n == *seen)
		kva_slab_flush(s, b);
	*seen = b->n;
}

void kva__rec_flush_retired(kva_engine *e)
{
	flush_some(&e->slab, &e->retired, &e->retired_seen);
	flush_some(&e->cancels, &e->cancels_retired, &e->cancels_seen);
}

/* An ended record's live-id entry is a random line of a table as large as
 * the waiting count (a DRAM miss at 1M waiting). kva__rec_end prefetches it
 * and leaves the removal to here, after the step's other work: every reader
 * of the map settles first, so no caller ever sees a departed id. */
void kva__rec_ids_settle(kva_engine *e)
{
	for (uint32_t i = 0; i < e->n_ids_leaving; i++)
		kva_idmap_remove(&e->live_ids, e->ids_leaving[i]);
	e->n_ids_leaving = 0;
}

int kva__rec_claim_id(kva_engine *e, struct kva__req *r)
{
	kva__rec_ids_settle(e);
	return kva_idmap_insert(&e->live_ids, r->id, kva__rec_slot(r));
}

struct kva__req *kva__rec_live(kva_engine *e, uint64_t id)
{
	kva__rec_ids_settle(e);
	uint32_t *slot = kva_idmap_find(&e->live_ids, id);
	return slot ? kva_slab_get(&e->slab, *slot) : NULL;
}

void kva__rec_end(kva_engine *e, struct kva__req *r, uint32_t terminal)
{
	/* The id may be submitted again. An ingested record is its id's only
	 * live incarnation (rule 14), so the entry is r's own. */
	if (r->flags & KVA__F_INGESTED) {
		if (e->n_ids_leaving == KVA__IDS_LEAVING)
			kva__rec_ids_settle(e);
		kva_idmap_prefetch(&e->live_ids, r->id);
		e->ids_leaving[e->n_ids_leaving++] = r->id;
	}
	kva__rec_set_state(e, r, terminal);
	kva__st_add_single_writer(e, terminal == KVA_STATE_FINISHED   ? ST_FINISHED
	                             : terminal == KVA_STATE_CANCELLED ? ST_CANCELLED
	                                                               : ST_REJECTED,
	                          1);
	cds_list_add_tail(&r->link, &e->ended);
}

static void manifest_free(struct kva__req *r)
{
	if (r->nents > 1)
		kva__answer_free(r->manifest);
	r->nents = 0;
}

/* ---- held local checkpoints ---------------------------------------------------------
 *
 * The checkpoint index (lookup.c) finds a waiting request by the checkpoint
 * it selected. A request also holds entries it has not selected: the
 * shorter ones of its manifest (rule 11 takes one when copies fail), the
 * host's own (rule 22: a lookup's miss or timeout, a preemption's resume,
 * the local tokens of an import's admission). An external entry taken later
 * is copied, and its copy finds out; a local one is not, so its eviction
 * must not be forgotten while a request holds it. The engine counts the
 * local entries of live records' manifests per id and keeps, while the
 * count is not 0, the newest epoch an eviction of that id reported: O(1)
 * per eviction and per entry held or dropped (a manifest has at most
 * KVA_MAX_CHECKPOINTS + 1), memory for the distinct local ids live requests
 * hold (12 + 16 bytes each, trackers in chunks that are reused, never
 * moved), nothing for external entries. An id nobody holds remembers
 * nothing, and a directory's answer is taken as it lists its entries (the
 * news its directory had when it answered; lookup.c, select_entry): what
 * is checked is an entry retained and taken later. */

static struct kva__held *held_at(const kva_engine *e, uint32_t i)
{
	return &e->held_chunks[i / KVA__HELD_CHUNK][i % KVA__HELD_CHUNK];
}

int kva__held_init(kva_engine *e)
{
	e->held_chunks = NULL;
	e->n_held_chunks = e->held_chunks_cap = 0;
	e->held_free = e->n_held_free = 0;
	return kva_idmap_init(&e->held, kva__alloc, kva__free, 64);
}

void kva__held_fini(kva_engine *e)
{
	for (uint32_t i = 0; i < e->n_held_chunks; i++)
		kva__free(e->held_chunks[i], KVA__HELD_CHUNK * sizeof(struct kva__held));
	if (e->held_chunks)
		kva__free(e->held_chunks, e->held_chunks_cap * sizeof(*e->held_chunks));
	kva_idmap_fini(&e->held);
}

static void held_free_push(kva_engine *e, uint32_t i)
{
	held_at(e, i)->next_free = e->held_free;
	e->held_free = i + 1;
	e->n_held_free++;
}

int kva__held_reserve(kva_engine *e, uint32_t n)
{
	if (kva_idmap_reserve(&e->held, n) != 0)
		return -ENOMEM;
	while (e->n_held_free < n) {
		if (e->n_held_chunks == e->held_chunks_cap) {
			/* the chunk list: a pointer per 1,024 ids, doubled */
			uint32_t cap = e->held_chunks_cap ? 2 * e->held_chunks_cap : 4;
			struct kva__held **c = kva__alloc(cap * sizeof(*c));
			if (!c)
				return -ENOMEM;
			if (e->held_chunks) {
				memcpy(c, e->held_chunks, e->n_held_chunks * sizeof(*c));
				kva__free(e->held_chunks, e->held_chunks_cap * sizeof(*c));
			}
			e->held_chunks = c;
			e->held_chunks_cap = cap;
		}
		struct kva__held *chunk = kva__alloc(KVA__HELD_CHUNK * sizeof(*chunk));
		if (!chunk)
			return -ENOMEM;
		uint32_t base = e->n_held_chunks * KVA__HELD_CHUNK;
		e->held_chunks[e->n_held_chunks++] = chunk;
		for (uint32_t i = KVA__HELD_CHUNK; i-- > 0;)
			held_free_push(e, base + i);
	}
	return 0;
}

static struct kva__held *held_find(const kva_engine *e, uint64_t id)
{
	const uint32_t *i = kva_idmap_find(&e->held, id);
	return i ? held_at(e, *i) : NULL;
}

void kva__held_hold(kva_engine *e, const kva_checkpoint *cp)
{
	if (cp->location != KVA_LOC_LOCAL)
		return;
	struct kva__held *t = held_find(e, cp->id);
	if (t) {
		t->refs++;
		return;
	}
	uint32_t i = e->held_free - 1; /* reserved: the list is not empty */
	t = held_at(e, i);
	e->held_free = t->next_free;
	e->n_held_free--;
	t->refs = 1;
	t->evicted = 0;
	(void)kva_idmap_insert(&e->held, cp->id, i); /* reserved: cannot fail */
}

void kva__held_drop(kva_engine *e, const kva_checkpoint *cp)
{
	if (cp->location != KVA_LOC_LOCAL)
		return;
	uint32_t *i = kva_idmap_find(&e->held, cp->id);
	if (!i)
		return; /* cannot happen: every held entry counted */
	uint32_t at = *i;
	if (--held_at(e, at)->refs)
		return;
	kva_idmap_remove(&e->held, cp->id);
	held_free_push(e, at);
}

void kva__held_evicted(kva_engine *e, uint64_t id, uint64_t epoch)
{
	struct kva__held *t = held_find(e, id);
	if (t && t->evicted < epoch)
		t->evicted = epoch;
}

bool kva__held_gone(const kva_engine *e, const kva_checkpoint *cp)
{
	if (cp->location != KVA_LOC_LOCAL || !e->held.count)
		return false;
	const struct kva__held *t = held_find(e, cp->id);
	return t && t->evicted > cp->epoch;
}

#ifdef KVA_FAULT_INJECTION
size_t kva__held_ids(const kva_engine *e)
{
	return e->held.count;
}
#endif

static void held_each(kva_engine *e, struct kva__req *r,
                      void (*fn)(kva_engine *, const kva_checkpoint *))
{
	if (!(r->flags & KVA__F_HELD))
		return;
	const kva_checkpoint *c = kva__manifest_entries(r);
	for (uint32_t i = 0; i < r->nents; i++)
		fn(e, &c[i]);
}

void kva__held_hold_all(kva_engine *e, struct kva__req *r)
{
	held_each(e, r, kva__held_hold);
}

void kva__held_drop_all(kva_engine *e, struct kva__req *r)
{
	held_each(e, r, kva__held_drop);
}

void kva__rec_retire(kva_engine *e, struct kva__req *r)
{
	kva__held_drop_all(e, r);
	r->flags &= (uint16_t)~KVA__F_HELD;
	manifest_free(r);
	struct kva__grant *g = r->flags & KVA__F_GRANTED ? kva__grant(r) : NULL;
	if (g) { /* readers that see NULL from now on find no grant (grant reuse) */
		atomic_store_explicit(&r->grant, NULL, memory_order_relaxed);
		grant_retire(e, g);
	}
	kva_slab_retire(&e->slab, &e->retired, kva__rec_slot(r));
}

void kva__rec_each_unreported(kva_engine *e, kva_unfinished_fn fn, void *ctx)
{
	for (uint32_t i = 0, end = kva_slab_end(&e->slab); i < end; i++) {
		struct kva__req *r = kva_slab_get(&e->slab, i);
		if (!r || !(atomic_load_explicit(&r->hdr.gen, memory_order_relaxed) & 1) ||
		    (r->flags & KVA__F_REPORTED))
			continue; /* no chunk, free or retired, or the host knows it ended */
		kva_ended x = {kva__rec_handle(r), r->user,
		               kva__public_state(atomic_load_explicit(&r->state, memory_order_relaxed))};
		fn(ctx, &x);
	}
}

void kva__rec_free_all(kva_engine *e)
{
	for (uint32_t i = 0, end = kva_slab_end(&e->slab); i < end; i++) {
		struct kva__req *r = kva_slab_get(&e->slab, i);
		if (!r)
			continue; /* a chunk whose allocation failed */
		if (atomic_load_explicit(&r->hdr.gen, memory_order_relaxed) & 1)
			manifest_free(r); /* live: never retired */
		struct kva__grant *g = kva__grant(r);
		if (g)
			grant_free(g);
	}
	grants_free_list(e->grants_limbo);
	grants_free_list(e->grants_spare);
	e->grants_limbo = e->grants_limbo_tail = e->grants_spare = NULL;
	e->n_grants_spare = 0;
}
