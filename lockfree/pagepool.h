/*
 * pagepool: lock-free pool of page ids (uint32_t, 0 .. n-1).
 *
 * A Treiber stack whose links live in an array indexed by page id, with a
 * 32-bit tag next to the top index in one 64-bit word so that a CAS cannot
 * succeed on a recycled top (ABA). Taking or putting k ids is one CAS after
 * an O(k) walk / link.
 *
 * Capacity counters (capacity.h) decide *whether* a caller may take pages;
 * the pool only turns credits into concrete ids. Put ids back before
 * releasing their credits and a holder of credits always finds ids.
 *
 * Synchronisation table:
 *   call                  | may run concurrently with
 *   ----------------------+-----------------------------
 *   take / take_n         | everything
 *   put / put_n           | everything
 *   kva_pagepool_count    | everything (a snapshot)
 *   init / fini           | nothing
 */
#ifndef KVA_LOCKFREE_PAGEPOOL_H
#define KVA_LOCKFREE_PAGEPOOL_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct kva_pagepool {
	alignas(64) _Atomic uint64_t top; /* tag << 32 | (id + 1); low half 0 = empty */
	_Atomic size_t count;             /* statistic */
	_Atomic uint32_t *next;           /* next[id] = id below it + 1, 0 = none */
	uint32_t n;
};

/* Fills the pool with ids 0 .. n-1. Returns 0 or -ENOMEM. */
int kva_pagepool_init(struct kva_pagepool *p, uint32_t n);
void kva_pagepool_fini(struct kva_pagepool *p);

/* Any thread. false when the pool is empty. */
bool kva_pagepool_take(struct kva_pagepool *p, uint32_t *id);
/* Any thread. Takes exactly n ids into ids[] or none (returns false). */
bool kva_pagepool_take_n(struct kva_pagepool *p, uint32_t *ids, size_t n);
/* Any thread. The ids must have been taken from this pool and not put back. */
void kva_pagepool_put(struct kva_pagepool *p, uint32_t id);
void kva_pagepool_put_n(struct kva_pagepool *p, const uint32_t *ids, size_t n);

size_t kva_pagepool_count(const struct kva_pagepool *p);

#endif
