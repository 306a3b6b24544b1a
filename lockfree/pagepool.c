/*
 * pagepool: a Treiber stack of page ids with an ABA tag.
 *
 * This file owns the `top` word and the `next[]` links. top packs a 32-bit
 * tag (bumped by every successful CAS) above `id + 1` of the top id (0 =
 * empty); next[id] holds `below + 1` while id is in the pool. A link is
 * written only by the thread that owns the id (after taking it, before
 * putting it back), always before the release CAS that publishes it (R1), and
 * read only by takers after an acquire of top (A1).
 *
 * Why the chain below an unchanged (tag, top) is unchanged: every change of
 * the stack is a successful CAS on top, and every such CAS bumps the tag.
 * While top still holds the value T a taker loaded, no id has left or
 * entered the stack since T was installed, so every id on the chain below T
 * is still in the pool and nobody owns it, so nobody may write its link. All
 * the links were written before the CASes that pushed those ids, which head
 * release sequences read by our acquire of T, so the walk sees exactly those
 * links. If instead the stack changed between our load and our CAS, the
 * walk may have read a newer link (written by a later owner), but then top
 * is no longer T and the CAS fails. A stale walk therefore never takes
 * effect. The tag wraps after 2^32 changes, so the argument assumes that no
 * thread is descheduled between its load and its CAS for 2^32 operations
 * of the pool.
 *
 * `count` is a statistic: put adds before publishing, take subtracts after
 * unlinking, so it never underflows and is never below the real size; it is
 * exact whenever no call is in flight.
 */
#include "pagepool.h"

#include <errno.h>
#include <stdlib.h>

#ifndef KVA_DEBUG
#define KVA_DEBUG 0
#endif

#define TOP_LINK(w) ((uint32_t)(w))
#define TOP_TAG(w) ((uint32_t)((w) >> 32))

static inline uint64_t top_make(uint32_t tag, uint32_t link)
{
	return (uint64_t)tag << 32 | link;
}

int kva_pagepool_init(struct kva_pagepool *p, uint32_t n)
{
	p->n = n;
	p->next = NULL;
	atomic_init(&p->count, (size_t)n);
	atomic_init(&p->top, top_make(0, 0));
	if (n == 0)
		return 0;
	p->next = malloc((size_t)n * sizeof(*p->next));
	if (!p->next)
		return -ENOMEM;
	/* Take order starts at id 0: top = 0, next[i] = i + 1 (stored + 1). */
	for (uint32_t i = 0; i < n; i++)
		atomic_init(&p->next[i], i + 1 < n ? i + 2 : 0);
	atomic_init(&p->top, top_make(0, 1));
	return 0;
}

void kva_pagepool_fini(struct kva_pagepool *p)
{
	free(p->next);
	p->next = NULL;
	p->n = 0;
	atomic_store_explicit(&p->top, top_make(0, 0), memory_order_relaxed);
	atomic_store_explicit(&p->count, 0, memory_order_relaxed);
}

bool kva_pagepool_take(struct kva_pagepool *p, uint32_t *id)
{
	return kva_pagepool_take_n(p, id, 1);
}

bool kva_pagepool_take_n(struct kva_pagepool *p, uint32_t *ids, size_t n)
{
	if (n == 0)
		return true;
	if (n > p->n)
		return false;

	/* A1: pairs with R1 in kva_pagepool_put_n (and R2 below) — the links of
	 * every id on the stack below this top are visible (see the file
	 * comment). */
	uint64_t old = atomic_load_explicit(&p->top, memory_order_acquire);
	for (;;) {
		uint32_t link = TOP_LINK(old);
		size_t got = 0;

		while (got < n && link != 0) {
			ids[got++] = link - 1;
			/* Relaxed: ordered by A1 (the acquire of top); a stale link only
			 * happens when top changed, and then the CAS below fails. */
			link = atomic_load_explicit(&p->next[link - 1], memory_order_relaxed);
		}
		if (got < n) {
			/* Too few on the chain we walked. Decide on a value that is the
			 * latest in top's order (a CAS reads the latest value): if top is
			 * still `old`, the walk was exact and the pool really held fewer
			 * than n ids at that moment. Unlike a successful take, these ids
			 * stay in the pool and may be taken and relinked right after; R2
			 * (release, paired with A1 of that later taker) orders our link
			 * reads before its writes. Failure refreshes `old` (A1 again). */
			if (atomic_compare_exchange_strong_explicit(
				&p->top, &old, old, memory_order_acq_rel, memory_order_acquire))
				return false;
			continue;
		}
		/* A1 on failure too: `old` is refreshed and walked again. */
		if (atomic_compare_exchange_weak_explicit(
			&p->top, &old, top_make(TOP_TAG(old) + 1, link), memory_order_acquire,
			memory_order_acquire))
			break;
	}
	/* Relaxed: a statistic. */
	atomic_fetch_sub_explicit(&p->count, n, memory_order_relaxed);
	return true;
}

void kva_pagepool_put(struct kva_pagepool *p, uint32_t id)
{
	kva_pagepool_put_n(p, &id, 1);
}

void kva_pagepool_put_n(struct kva_pagepool *p, const uint32_t *ids, size_t n)
{
	if (n == 0)
		return;
	/* An id out of range would write outside next[]: drop the whole call
	 * rather than corrupt memory (a caller bug, checked in debug builds). */
	if (KVA_DEBUG) {
		for (size_t i = 0; i < n; i++)
			if (ids[i] >= p->n)
				return;
	}
	/* The caller owns these ids, so their links are ours to write. ids[0]
	 * ends up on top, ids[n - 1] above the old top. */
	for (size_t i = 0; i + 1 < n; i++)
		atomic_store_explicit(&p->next[ids[i]], ids[i + 1] + 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&p->count, n, memory_order_relaxed);

	uint32_t last = ids[n - 1];
	uint64_t old = atomic_load_explicit(&p->top, memory_order_relaxed);
	for (;;) {
		atomic_store_explicit(&p->next[last], TOP_LINK(old), memory_order_relaxed);
		/* R1: pairs with A1 in kva_pagepool_take_n — publishes the links
		 * above, and whatever the caller wrote into the pages. Failure is
		 * relaxed: we read nothing through the refreshed value. */
		if (atomic_compare_exchange_weak_explicit(
			&p->top, &old, top_make(TOP_TAG(old) + 1, ids[0] + 1), memory_order_release,
			memory_order_relaxed))
			return;
	}
}

size_t kva_pagepool_count(const struct kva_pagepool *p)
{
	/* Relaxed: a statistic. */
	return atomic_load_explicit(&p->count, memory_order_relaxed);
}
