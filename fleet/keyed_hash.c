/* SPDX-License-Identifier: Apache-2.0 */
/*
 * keyed_hash: the per-fleet key. getrandom without blocking; a host where
 * the pool is not ready yet gets a key from the clock and an address,
 * weaker but still unknown to a remote publisher.
 */
#define _GNU_SOURCE
#include "keyed_hash.h"

#include <sys/random.h>
#include <time.h>

#include <kvadmit/lockfree/hash.h>

void kvf_key_random(struct kvf_key *key)
{
	if (getrandom(key, sizeof(*key), GRND_NONBLOCK) == (ssize_t)sizeof(*key))
		return;
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	uint64_t x = (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
	key->k0 = kva_hash64(x ^ (uint64_t)(uintptr_t)key);
	key->k1 = kva_hash64(key->k0 + (uint64_t)(uintptr_t)&t);
}
