/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A record's life in the engine (see lifecycle.h): its slot, its state
 * changes and the gauges that follow them, the live-id map, its one
 * terminal outcome and its retirement. Calls grant.c, held.c and stats.c.
 *
 * Memory-order labels:
 *   R2     a new state published -> readers of the state word (A2 of intake.c)
 */
#include "events.h"
#include "grant.h"
#include "held.h"
#include "lifecycle.h"
#include "run_heap.h"
#include "stats.h"

struct kva__req *kva__rec_find(kva_engine *e, uint32_t slot, uint32_t gen, uint64_t id)
{
	struct kva__req *r = kva_slab_lookup(&e->slab, slot, gen);
	return r && r->id == id ? r : NULL;
}

struct kva__req *kva__rec_new(kva_engine *e, int32_t priority, uint32_t *slot)
{
	/* A step admits one level's requests together: records 64 slots apart
	 * (64 levels interleaved) cost a cache miss each where neighbours share
	 * lines and the prefetcher's stream (BM_priority_admit_paired/64/1:
	 * 1.29x FCFS before, 1.08-1.14x after, alternating runs). */
	return e->lv ? kva_slab_alloc_near(&e->slab, (uint32_t)priority, slot)
	             : kva_slab_alloc(&e->slab, slot);
}

uint32_t kva__rec_publish(kva_engine *e, struct kva__req *r)
{
	return kva_slab_publish(&e->slab, r);
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
	if (e->run) /* PRIORITY order: the preemption candidates */
		kva__run_heap_on_state(e, r, to);
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
	 * live incarnation (rule id-reuse), so the entry is r's own. */
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

void kva__rec_retire(kva_engine *e, struct kva__req *r)
{
	kva__held_drop_all(&e->held, r);
	r->flags &= (uint16_t)~KVA__F_HELD;
	manifest_free(r);
	struct kva__grant *g = r->flags & KVA__F_GRANTED ? kva__grant(r) : NULL;
	if (g) { /* readers that see NULL from now on find no grant (grant reuse) */
		atomic_store_explicit(&r->grant, NULL, memory_order_relaxed);
		kva__grant_retire(e, g);
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
			kva__grant_free(g);
	}
	kva__grants_free_retired(e);
}

#ifdef KVA_FAULT_INJECTION
size_t kva__held_ids(const kva_engine *e)
{
	return kva__held_count(&e->held);
}
#endif
