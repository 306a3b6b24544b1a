/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pagepool: lock-free pool of page ids (uint32_t, 0 .. n-1).
 *
 * A bitmap: bit i of the map is set while id i is in the pool. `avail`
 * counts the ids no take has claimed yet. A take claims n ids from `avail`
 * in one CAS (all or nothing), then collects them by clearing set bits, up
 * to 64 ids with one fetch_and; a put sets its ids' bits (one fetch_or per
 * 64-id word) and only then counts them in `avail`. A summary bitmap, one
 * bit per word, says which words may hold ids, so a take skips empty
 * stretches of a large pool without reading them.
 *
 * Progress: every call is lock-free. A take that has claimed is owed ids
 * that are set in the map (a put sets them before counting them), and no
 * id is ever held "in transit" by another thread: whatever a take does not
 * find on one pass was taken by another take that was owed it, so a thread
 * descheduled in the middle of any call delays nobody. (The previous pool,
 * a chain moved whole off and back onto one word, made a take wait while
 * another thread cut ids off the chain: a descheduled holder stalled the
 * scheduler's step for a time slice.)
 *
 * Order: ids come lowest first within a word, words in ascending order
 * (wrapping) from a hint: the word of the most recent put's first id, or
 * where the most recent take stopped. With no other call in flight, the
 * ids a put returns are in the word the next take starts from.
 *
 * Capacity counters (capacity.h) decide *whether* a caller may take pages;
 * the pool only turns credits into concrete ids. Put ids back before
 * releasing their credits and a holder of credits always finds ids.
 *
 * Synchronisation table:
 *   call                  | may run concurrently with
 *   ----------------------+-----------------------------------------------
 *   take / take_n         | everything (lock-free)
 *   put / put_n           | everything (lock-free)
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
	/* Written at init only: read by every call, so kept off the line the
	 * counters below bounce on. */
	_Atomic uint64_t *map;	   /* bit i % 64 of map[i / 64]: id i is in the pool */
	_Atomic uint64_t *summary; /* bit w % 64 of summary[w / 64]: map[w] may hold ids */
	uint32_t n;		   /* ids */
	uint32_t words;		   /* map words */
	/* Ids in the pool that no take has claimed; written by every call. */
	alignas(64) _Atomic uint64_t avail;
	_Atomic uint32_t hint; /* map word the next take starts from */
};

/* Fills the pool with ids 0 .. n-1. Returns 0 or -ENOMEM. */
int kva_pagepool_init(struct kva_pagepool *p, uint32_t n);
void kva_pagepool_fini(struct kva_pagepool *p);

/* Any thread. false when the pool is empty. */
bool kva_pagepool_take(struct kva_pagepool *p, uint32_t *id);
/* Any thread. Takes exactly n ids into ids[] or none (returns false: fewer
 * than n unclaimed). Ids come in the order the file comment describes. */
bool kva_pagepool_take_n(struct kva_pagepool *p, uint32_t *ids, size_t n);
/* Any thread. The ids must have been taken from this pool and not put back. */
void kva_pagepool_put(struct kva_pagepool *p, uint32_t id);
void kva_pagepool_put_n(struct kva_pagepool *p, const uint32_t *ids, size_t n);

/* Ids in the pool not claimed by a take, never more than the pool holds;
 * exact when no call is in flight. */
size_t kva_pagepool_count(const struct kva_pagepool *p);

#endif
