/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Grants (see grant.h): building a request's grant and growing its page
 * array, reusing retired grants, a rank's copy report, and the one way
 * pages and credits go back. Calls event_queue.c, stats.c and alloc.c.
 *
 * Memory-order labels:
 *   R1     a grant fully built -> kva__grant() readers (A1 of record.h)
 *   A3     a rank's claim on copy_word sees the attempt: pairs with R1 of copy.c
 */
#include <errno.h>
#include <string.h>

#include "alloc.h"
#include "event_queue.h"
#include "grant.h"
#include "stats.h"

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

void kva__grant_free(struct kva__grant *g)
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

void kva__grant_retire(kva_engine *e, struct kva__grant *g)
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
			kva__grant_free(g);
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
	/* The next admission's grants, lines no cache holds at 1M waiting
	 * (retired in another order, long ago): the limbo's head, whose flush
	 * it reads, and the spare stack's top, which it rewrites. A miss each
	 * per admission otherwise. */
	if (e->grants_limbo)
		__builtin_prefetch(&e->grants_limbo->spare);
	if (e->grants_spare) {
		__builtin_prefetch(e->grants_spare, 1);
		__builtin_prefetch(&e->grants_spare->spare, 1);
	}
	return g;
}

static void grants_free_list(struct kva__grant *g)
{
	while (g) {
		struct kva__grant *next = g->spare.next;
		kva__grant_free(g);
		g = next;
	}
}

void kva__grants_free_retired(kva_engine *e)
{
	grants_free_list(e->grants_limbo);
	grants_free_list(e->grants_spare);
	e->grants_limbo = e->grants_limbo_tail = e->grants_spare = NULL;
	e->n_grants_spare = 0;
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

/* ---- giving pages back ------------------------------------------------------- */

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
