/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pagepool: pool of page ids (uint32_t, 0 .. n-1), every call bounded.
 *
 * A bitmap: bit i of the map is set while id i is in the pool. `avail`
 * counts the ids no take has claimed yet. A take claims n ids from `avail`
 * in one CAS (all or nothing), then collects them by clearing set bits, up
 * to 64 ids with one fetch_and; a put sets its ids' bits (one fetch_or per
 * 64-id word) and only then counts them in `avail`. A summary bitmap, one
 * bit per word, says which words may hold ids, so a take skips empty
 * stretches of a large pool without reading them.
 *
 * Bounds: every call is bounded whatever other threads do. A take tries
 * its claim CAS at most KVA_PAGEPOOL_CLAIM_TRIES times and collects in at
 * most KVA_PAGEPOOL_PASSES passes over the map: one that follows the
 * summary, then one over every word. A take that has claimed is owed ids
 * that are set in the map (a put sets them before counting them), and no
 * id is ever held "in transit" by another thread, so a descheduled thread
 * delays nobody. What a take does not find on its pass over every word was
 * taken meanwhile by other takes, each one it was owed; rather than pass
 * again, it gives back what it collected and its claim and says -EAGAIN
 * (contended), as it does when other threads kept winning the claim CAS.
 * Either means other calls completed meanwhile (lock-free as a whole); the
 * caller tries again later (the scheduler's step: at the next step, with
 * plan.backlog set). (An earlier pool, a chain moved whole off and back
 * onto one word, made a take wait while another thread cut ids off the
 * chain: a descheduled holder stalled the step for a time slice.)
 *
 * Order: ids come lowest first within a word, words in ascending order
 * (wrapping) from a hint: the word of the most recent put's first id, or
 * where the most recent take stopped. With no other call in flight, the
 * ids a put returns are in the word the next take starts from.
 *
 * Capacity counters (capacity.h) decide *whether* a caller may take pages;
 * the pool only turns credits into concrete ids. Put ids back before
 * releasing their credits and a holder of credits always finds ids: its
 * take returns 0 or -EAGAIN, never -ENOSPC, and never loses an id.
 *
 * Synchronisation table:
 *   call                  | may run concurrently with
 *   ----------------------+-----------------------------------------------
 *   take / take_n         | everything (bounded: see Bounds)
 *   put / put_n           | everything (wait-free: one RMW per word touched)
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

/* Failed claim CASes after which a take gives up (-EAGAIN): other threads
 * kept changing `avail`, each failure one of their claims or puts done, so
 * this stops only a thread that is being starved (as
 * KVA_CAPACITY_STEP_TRIES does for credits). */
#define KVA_PAGEPOOL_CLAIM_TRIES 64u
/* Passes over the map a take makes to collect what it claimed: one over the
 * words the summary names, then one over every word. */
#define KVA_PAGEPOOL_PASSES 2u

/* kva_pagepool_take_n - take exactly n ids into ids[], or none.
 * Thread: any.  Cost: at most KVA_PAGEPOOL_CLAIM_TRIES CASes on `avail`,
 * then at most KVA_PAGEPOOL_PASSES passes over the map (one fetch_and per
 * word that has ids to take), and on -EAGAIN a put of what it collected.
 * Effect: ids come in the order the file comment describes.
 * Returns: 0 (n ids in ids[]; n == 0 takes nothing), -ENOSPC (fewer than n
 * unclaimed, or n more than the pool holds: nothing taken), -EAGAIN (other
 * threads kept winning the claim CAS, or took the ids it was owed during
 * its last pass: nothing taken, pool and count as if never called; try
 * again later). */
int kva_pagepool_take_n(struct kva_pagepool *p, uint32_t *ids, size_t n);
/* kva_pagepool_take_n for one id. */
int kva_pagepool_take(struct kva_pagepool *p, uint32_t *id);
/* Any thread. The ids must have been taken from this pool and not put back. */
void kva_pagepool_put(struct kva_pagepool *p, uint32_t id);
void kva_pagepool_put_n(struct kva_pagepool *p, const uint32_t *ids, size_t n);

#ifdef KVA_FAULT_INJECTION
/* Test builds: the next k claim CASes fail as if another thread had changed
 * `avail` (UINT32_MAX: every one until armed again). Returns the claim CASes
 * tried since the previous call (failed ones included) and the passes over
 * the map begun since then, and zeroes both counts. */
void kva__pagepool_fault_arm(uint32_t k, uint64_t *claim_tries, uint64_t *passes);
#endif

/* Ids in the pool not claimed by a take, never more than the pool holds;
 * exact when no call is in flight. */
size_t kva_pagepool_count(const struct kva_pagepool *p);

#endif
