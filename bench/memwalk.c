/* SPDX-License-Identifier: Apache-2.0 */
/* The memory yardstick's ring (memwalk.h). */
#include "memwalk.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "fixture.h"

#define HUGE_PAGE (2u << 20)

void mw_init(struct mw_ring *r, size_t bytes)
{
	size_t size = (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
	r->n = (uint32_t)(bytes / sizeof(uint32_t));
	r->slot = r->n > 1 ? aligned_alloc(HUGE_PAGE, size) : NULL;
	if (!r->slot)
		bx_check(-ENOMEM, "the memory walk's ring");
#ifdef MADV_HUGEPAGE
	(void)madvise(r->slot, size, MADV_HUGEPAGE);
#endif
	for (uint32_t i = 0; i < r->n; i++)
		r->slot[i] = i;
	/* Sattolo's shuffle: a single cycle, so a walk never settles in a
	 * short loop that would fit a cache */
	uint64_t x = 88172645463325252u;
	for (uint32_t i = r->n - 1; i > 0; i--) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		uint32_t j = (uint32_t)(x % i), t = r->slot[i];
		r->slot[i] = r->slot[j], r->slot[j] = t;
	}
	r->at = 0;
}

void mw_fini(struct mw_ring *r)
{
	free(r->slot);
	r->slot = NULL;
	r->n = 0;
}

void mw_walk(struct mw_ring *r, uint64_t hops)
{
	__asm__ volatile("" ::: "memory");
	uint32_t at = r->at;
	for (uint64_t i = 0; i < hops; i++)
		at = r->slot[at];
	__asm__ volatile("" : : "r"(at) : "memory");
	r->at = at;
}

struct mw_ring *mw_shared(void)
{
	static struct mw_ring ring;
	if (!ring.slot)
		mw_init(&ring, bx_small() ? (4u << 20) : MW_SHARED_BYTES);
	return &ring;
}
