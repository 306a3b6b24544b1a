/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pagepool: page ids on one chain that moves whole in and out of `top`.
 *
 * This file owns `top` (avail << 32 | head + 1) and link[]. link[id].next
 * is "id below + 1" (0 = end of chain); link[id].last is the chain's last
 * id, meaningful while id heads a chain. The links are plain memory: an
 * id's links are read and written only by whoever holds the id: its owner
 * (taken, not put back), or the thread that holds the chain it is on, from
 * the CAS that took the chain off `top` to the CAS that installs a chain
 * again.
 *
 * Memory-order labels:
 *   R1/A1  a chain installed on top -> the take that claims and swaps it out
 *   R1/A2  a chain installed on top -> the install that takes it over
 *   R1/A3  a chain installed on top -> a take that claimed and needs more
 *
 * No ABA: the head in `top` changes only by install (no chain -> a chain)
 * and by take-over (a chain -> none), each a CAS of the whole word. An
 * install relies on nothing but the word it compares (no chain on top, and
 * avail); a take-over reads the chain only after its CAS succeeded, and
 * then the chain is whatever was installed last, published by that install
 * (R1). No CAS acts on something read through an earlier value of `top`,
 * so none can be fooled by a value that came back.
 *
 * Why a take that has claimed always gets its ids: let S be the ids in the
 * pool (on `top`, or in transit: held by a take between taking the chain
 * and giving the rest back, or by an install that took a chain over) and D
 * the ids still owed to takes that have claimed. Then S >= avail + D: a put
 * adds to S and avail at once, a claim moves n from avail to D, a fetch
 * takes m from S and D alike. A take owed ids therefore finds S >= D > 0:
 * ids are on `top`, or in a transit that ends after the holder's private
 * step (at most KVA_PAGEPOOL_ROUND links, or O(1) for a join).
 */
#include "pagepool.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <urcu/arch.h>

#ifndef KVA_DEBUG
#define KVA_DEBUG 0
#endif

/* Busy-waits between yields while the ids a take needs are in transit. */
#define SPINS_PER_YIELD 64u

#define AVAIL(w) ((uint32_t)((w) >> 32))
#define HEAD(w) ((uint32_t)(w)) /* id + 1, 0 = no chain */

static inline uint64_t word(uint32_t avail, uint32_t head)
{
	return (uint64_t)avail << 32 | head;
}

struct kva_pagepool_link {
	uint32_t next; /* id below + 1, 0 = none */
	uint32_t last; /* at a chain's head: the chain's last id */
};

int kva_pagepool_init(struct kva_pagepool *p, uint32_t n)
{
	p->n = 0;
	p->link = NULL;
	atomic_init(&p->top, word(0, 0));
	if (n == 0)
		return 0;
	p->link = malloc((size_t)n * sizeof(*p->link));
	if (!p->link)
		return -ENOMEM;
	/* Take order starts at id 0: one chain 0 -> 1 -> ... -> n-1. */
	for (uint32_t i = 0; i < n; i++)
		p->link[i] = (struct kva_pagepool_link){i + 1 < n ? i + 2 : 0, n - 1};
	p->n = n;
	atomic_init(&p->top, word(n, 1));
	return 0;
}

void kva_pagepool_fini(struct kva_pagepool *p)
{
	free(p->link);
	p->link = NULL;
	p->n = 0;
	atomic_store_explicit(&p->top, word(0, 0), memory_order_relaxed);
}

/* Puts the chain first..last, which this thread holds (linked from first to
 * last), on top and adds `count` to avail. If top holds another chain, takes
 * that over and hangs it below ours: a chain's last id is kept at its head,
 * so a join is O(1). Lock-free: a CAS fails only when another succeeded. */
static void install(struct kva_pagepool *p, uint32_t first, uint32_t last, uint32_t count)
{
	p->link[last].next = 0;
	/* Relaxed: only compared by the CASes below, which order what we read. */
	uint64_t w = atomic_load_explicit(&p->top, memory_order_relaxed);
	for (;;) {
		if (!HEAD(w)) {
			p->link[first].last = last;
			/* R1: pairs with A1/A3 in take_n and A2 below — the chain's
			 * links, and whatever owners wrote into those pages
			 * before putting them. Failure relaxed: only compared. */
			if (atomic_compare_exchange_weak_explicit(
				&p->top, &w, word(AVAIL(w) + count, first + 1),
				memory_order_release, memory_order_relaxed))
				return;
			continue;
		}
		/* A2: pairs with R1 above (another install) — that chain's links
		 * are ours once the CAS succeeds. */
		if (atomic_compare_exchange_weak_explicit(&p->top, &w, word(AVAIL(w), 0),
							  memory_order_acquire,
							  memory_order_relaxed)) {
			p->link[last].next = HEAD(w);
			last = p->link[HEAD(w) - 1].last;
			w = word(AVAIL(w), 0); /* what we left; the next CAS checks it */
		}
	}
}

static void wait_for_transit(unsigned *spins)
{
	if (++*spins % SPINS_PER_YIELD == 0)
		sched_yield(); /* the holder may have been descheduled */
	else
		caa_cpu_relax();
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

	/* Claim n, all or nothing, and take the chain if one is on top.
	 * Relaxed: only compared; the CAS acquires (A1). */
	uint64_t w = atomic_load_explicit(&p->top, memory_order_relaxed);
	do {
		if (AVAIL(w) < n)
			return false;
		/* A1: pairs with R1 in install — the chain is ours to walk. */
	} while (
	    !atomic_compare_exchange_weak_explicit(&p->top, &w, word(AVAIL(w) - (uint32_t)n, 0),
						   memory_order_acquire, memory_order_relaxed));
	uint32_t head = HEAD(w);
	size_t got = 0;
	unsigned spins = 0;
	for (;;) {
		if (head) {
			uint32_t last = p->link[head - 1].last;
			size_t want = n - got < KVA_PAGEPOOL_ROUND ? n - got : KVA_PAGEPOOL_ROUND;
			uint32_t x = head;
			for (size_t k = 0; k < want && x; k++) {
				ids[got++] = x - 1;
				x = p->link[x - 1].next;
			}
			if (x) /* the rest, back at once; still counted in avail */
				install(p, x - 1, last, 0);
			if (got == n)
				return true;
		}
		/* Claimed ids are left: on top, or in transit (file comment).
		 * Relaxed: looking before the CAS (A3) keeps waiters read-only. */
		w = atomic_load_explicit(&p->top, memory_order_relaxed);
		if (!HEAD(w)) {
			wait_for_transit(&spins);
			head = 0;
			continue;
		}
		/* A3: pairs with R1 in install — the chain on top, without
		 * claiming more. */
		head = atomic_compare_exchange_weak_explicit(&p->top, &w, word(AVAIL(w), 0),
							     memory_order_acquire,
							     memory_order_relaxed)
			   ? HEAD(w)
			   : 0;
	}
}

void kva_pagepool_put(struct kva_pagepool *p, uint32_t id)
{
	kva_pagepool_put_n(p, &id, 1);
}

void kva_pagepool_put_n(struct kva_pagepool *p, const uint32_t *ids, size_t n)
{
	if (n == 0)
		return;
	/* An id out of range would write outside link[]: drop the whole call
	 * rather than corrupt memory (a caller bug, checked in debug builds). */
	if (KVA_DEBUG) {
		for (size_t i = 0; i < n; i++)
			if (ids[i] >= p->n)
				return;
	}
	/* The caller owns these ids, so their links are ours to write. ids[0]
	 * ends up on top. */
	for (size_t i = 0; i + 1 < n; i++)
		p->link[ids[i]].next = ids[i + 1] + 1;
	install(p, ids[0], ids[n - 1], (uint32_t)n);
}

size_t kva_pagepool_count(const struct kva_pagepool *p)
{
	/* Relaxed: a snapshot. */
	return AVAIL(atomic_load_explicit(&p->top, memory_order_relaxed));
}
