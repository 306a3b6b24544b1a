/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pagepool: lock-free pool of page ids (uint32_t, 0 .. n-1).
 *
 * The ids form one chain, linked through an array indexed by page id. One
 * 64-bit word, `top`, holds the chain's head and `avail`, the number of
 * ids no take has claimed yet. Nobody walks the chain while it is on `top`:
 * a take claims n ids and swaps the whole chain out in one CAS, cuts off
 * what it needs in private and puts the rest back; a put installs its ids
 * as a chain and counts them in one CAS. The head in `top` only goes from
 * empty to a chain or from a chain to empty, and no CAS depends on anything
 * read through an earlier value of `top` (a chain is walked only after the
 * CAS that took it), so a value that comes back cannot fool one: no ABA by
 * design, no tag. Every CAS is O(1) from the load it compares: a chain's
 * last id is recorded at its head, so joining two chains needs no walk.
 *
 * Claiming is all-or-nothing (false when fewer than n are unclaimed). A put
 * counts its ids in the same CAS that puts them back, so every claimed id
 * is on `top` or in a short transit between threads.
 *
 * Capacity counters (capacity.h) decide *whether* a caller may take pages;
 * the pool only turns credits into concrete ids. Put ids back before
 * releasing their credits and a holder of credits always finds ids.
 *
 * Progress: put_n is lock-free. take_n never fails once it has claimed
 * (nor spuriously before), but it may wait for its ids: while another take
 * holds the chain to cut at most KVA_PAGEPOOL_ROUND ids off it (or a put
 * joins two chains, O(1)), the chain is off `top`. That wait is bounded by
 * the other call's short private step, unless that thread is descheduled
 * inside it: then the waiter spins, yielding the CPU, until it runs again.
 * A take of more than KVA_PAGEPOOL_ROUND ids fetches them in rounds, giving
 * the rest of the chain back after each, so nobody waits on its whole walk.
 *
 * Synchronisation table:
 *   call                  | may run concurrently with
 *   ----------------------+-----------------------------------------------
 *   take / take_n         | everything (may wait, see Progress)
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

/* Most ids a take cuts off the chain while it holds it. */
#define KVA_PAGEPOOL_ROUND 64u

struct kva_pagepool_link; /* per id: next, and the chain's last id at a head */

struct kva_pagepool {
	/* avail << 32 | (head id + 1); the low half 0: no chain on top (the
	 * pool is empty, or its ids are in transit) */
	alignas(64) _Atomic uint64_t top;
	struct kva_pagepool_link *link; /* indexed by id; owned as the ids are */
	uint32_t n;
};

/* Fills the pool with ids 0 .. n-1. Returns 0 or -ENOMEM. */
int kva_pagepool_init(struct kva_pagepool *p, uint32_t n);
void kva_pagepool_fini(struct kva_pagepool *p);

/* Any thread. false when the pool is empty. */
bool kva_pagepool_take(struct kva_pagepool *p, uint32_t *id);
/* Any thread. Takes exactly n ids into ids[] or none (returns false: fewer
 * than n unclaimed). With no other call in flight, the most recently put
 * come first. */
bool kva_pagepool_take_n(struct kva_pagepool *p, uint32_t *ids, size_t n);
/* Any thread. The ids must have been taken from this pool and not put back.
 * put_n keeps their order: ids[0] is taken first. */
void kva_pagepool_put(struct kva_pagepool *p, uint32_t id);
void kva_pagepool_put_n(struct kva_pagepool *p, const uint32_t *ids, size_t n);

/* Ids in the pool not claimed by a take, never more than the pool holds;
 * exact when no call is in flight. */
size_t kva_pagepool_count(const struct kva_pagepool *p);

#endif
