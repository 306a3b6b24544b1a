/* SPDX-License-Identifier: Apache-2.0 */
/*
 * capacity: atomic credit counters with all-or-nothing reservations.
 *
 * Three lanes packed into one 64-bit word: pages (32 bits), slots (16 bits)
 * and runs (16 bits). A reservation of any mix of lanes is one CAS on the
 * word, so it is taken whole or not at all and no other thread ever sees a
 * half-taken reservation. (Reserve-with-rollback on separate counters was
 * rejected: between the first take and the rollback another thread can fail
 * a reservation that should have succeeded, which breaks FCFS reasoning.)
 * Releases are one fetch_add and never fail.
 *
 * The pages lane may be protected by a floor: try_reserve refuses to leave
 * fewer than `floor` free pages (callers pass 0 to go below it). A
 * reservation that takes no pages (only slots and/or runs) is not held back
 * by the floor: the floor protects pages, nothing else.
 *
 * Synchronisation table:
 *   call                     | may run concurrently with
 *   -------------------------+--------------------------------
 *   kva_capacity_try_reserve | everything
 *   kva_capacity_reserve_bounded | everything
 *   kva_capacity_release     | everything
 *   kva_capacity_free        | everything (a snapshot)
 *   init                     | nothing
 *
 * Memory order: a successful reserve is an acquire (A1) that pairs with the
 * release (R1) of kva_capacity_release, so whatever the releasing thread did
 * before giving credits back (e.g. putting page ids back in a pool) is
 * visible to the thread that reserves them.
 */
#ifndef KVA_LOCKFREE_CAPACITY_H
#define KVA_LOCKFREE_CAPACITY_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct kva_credits {
	uint32_t pages;
	uint16_t slots;
	uint16_t runs;
};

struct kva_capacity {
	alignas(64) _Atomic uint64_t word; /* free credits, packed */
	struct kva_credits total;
	/* Debug builds: releases that pushed a lane above its total (caller
	 * bugs; the word is then wrong). Always 0 in release builds. */
	_Atomic uint32_t overreleases;
};

static inline uint64_t kva_credits_pack(struct kva_credits c)
{
	return (uint64_t)c.pages | ((uint64_t)c.slots << 32) | ((uint64_t)c.runs << 48);
}

static inline struct kva_credits kva_credits_unpack(uint64_t w)
{
	struct kva_credits c = {(uint32_t)w, (uint16_t)(w >> 32), (uint16_t)(w >> 48)};
	return c;
}

/* Not thread-safe. All credits start free. */
void kva_capacity_init(struct kva_capacity *c, struct kva_credits total);

/* Any thread. Takes all of `want` or nothing. Fails if any lane lacks
 * credits or if the pages lane would drop below `pages_floor`. */
bool kva_capacity_try_reserve(struct kva_capacity *c, struct kva_credits want, uint32_t pages_floor);
/* Failed CASes after which a scheduler's reserve gives up for this step:
 * other threads kept changing the word (each failure means another call
 * completed, so this only ever stops a thread that is being starved). */
#define KVA_CAPACITY_STEP_TRIES 64u
/* Any thread: kva_capacity_try_reserve with at most `tries` CAS attempts.
 * 1 reserved, 0 does not fit, -EAGAIN still contended after `tries`
 * (nothing taken; whether it fits is not known). */
int kva_capacity_reserve_bounded(struct kva_capacity *c, struct kva_credits want,
                                 uint32_t pages_floor, uint32_t tries);

/* Any thread. Gives credits back; never fails. Giving back more than was
 * taken is a caller bug (checked in debug builds only). */
void kva_capacity_release(struct kva_capacity *c, struct kva_credits give);

/* Any thread: a snapshot of the free credits. */
struct kva_credits kva_capacity_free(const struct kva_capacity *c);

#endif
