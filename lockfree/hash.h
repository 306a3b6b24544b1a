/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The one 64-bit mixer of kvadmit: splitmix64's finaliser, a bijection with
 * full avalanche (distinct inputs never collide). Used for map homes and for
 * deterministic per-job decisions.
 */
#ifndef KVA_LOCKFREE_HASH_H
#define KVA_LOCKFREE_HASH_H

#include <stdint.h>

static inline uint64_t kva_hash64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

#endif
