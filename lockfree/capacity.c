/* SPDX-License-Identifier: Apache-2.0 */
/*
 * capacity: the packed free-credit word and its two operations.
 *
 * This file owns the only writes to kva_capacity.word after init: reserve is
 * one CAS loop that subtracts a whole kva_credits at once, release is one
 * fetch_add. Because every lane is checked before the subtraction, no lane
 * ever borrows from its neighbour; a release can only carry into the next
 * lane if a caller gives back more than it took, which debug builds detect
 * exactly (from the value the fetch_add returns) and count in
 * kva_capacity.overreleases. The library never aborts on that bug.
 */
#include <kvadmit/lockfree/capacity.h>

#include <errno.h>

#ifndef KVA_DEBUG
#define KVA_DEBUG 0
#endif

void kva_capacity_init(struct kva_capacity *c, struct kva_credits total)
{
	atomic_init(&c->word, kva_credits_pack(total));
	atomic_init(&c->overreleases, 0);
	c->total = total;
}

/* Whether `want` fits in `have` without leaving fewer than `floor` pages.
 * Unsigned differences only: each subtraction is guarded by its comparison.
 * A reservation that takes no pages is not held back by the floor. */
static inline bool fits(struct kva_credits have, struct kva_credits want, uint32_t floor)
{
	if (have.pages < want.pages || have.slots < want.slots || have.runs < want.runs)
		return false;
	return want.pages == 0 || have.pages - want.pages >= floor;
}

int kva_capacity_reserve_bounded(struct kva_capacity *c, struct kva_credits want,
                                 uint32_t pages_floor, uint32_t tries)
{
	const uint64_t take = kva_credits_pack(want);
	/* Relaxed: only a guess for the CAS below, which re-reads the word. */
	uint64_t old = atomic_load_explicit(&c->word, memory_order_relaxed);

	for (uint32_t i = 0;; i++) {
		if (!fits(kva_credits_unpack(old), want, pages_floor))
			return 0;
		if (i == tries)
			return -EAGAIN;
		/* Every lane of old >= the same lane of take: no borrow crosses lanes. */
		/* A1: pairs with R1 in kva_capacity_release — the reserver sees what
		 * the releaser did before giving the credits back. Failure is relaxed:
		 * the refreshed value is only re-checked, nothing is read through it. */
		if (atomic_compare_exchange_weak_explicit(
			&c->word, &old, old - take, memory_order_acquire, memory_order_relaxed))
			return 1;
	}
}

bool kva_capacity_try_reserve(struct kva_capacity *c, struct kva_credits want, uint32_t pages_floor)
{
	return kva_capacity_reserve_bounded(c, want, pages_floor, UINT32_MAX) > 0;
}

/* Debug only: would old + give exceed the totals in some lane? */
static bool overreleased(const struct kva_capacity *c, uint64_t old, struct kva_credits give)
{
	struct kva_credits o = kva_credits_unpack(old);
	return (uint64_t)o.pages + give.pages > c->total.pages ||
	       (uint32_t)o.slots + give.slots > c->total.slots ||
	       (uint32_t)o.runs + give.runs > c->total.runs;
}

void kva_capacity_release(struct kva_capacity *c, struct kva_credits give)
{
	/* R1: pairs with A1 in kva_capacity_try_reserve. */
	uint64_t old =
	    atomic_fetch_add_explicit(&c->word, kva_credits_pack(give), memory_order_release);

	/* `old` is the exact value our add applied to, and a correct caller's
	 * credits are not free, so old + give <= total in every lane: this
	 * check has no false positives even under concurrency. The word is
	 * already wrong at this point; we only record the caller's bug. */
	if (KVA_DEBUG && overreleased(c, old, give))
		atomic_fetch_add_explicit(&c->overreleases, 1, memory_order_relaxed);
}

struct kva_credits kva_capacity_free(const struct kva_capacity *c)
{
	/* Relaxed: a snapshot for statistics and decisions that are re-checked
	 * by try_reserve; nothing is read through it. */
	return kva_credits_unpack(atomic_load_explicit(&c->word, memory_order_relaxed));
}
