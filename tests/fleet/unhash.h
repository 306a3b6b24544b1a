/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The inverse of kva_hash64 (splitmix64's finaliser, a public bijection):
 * what anyone can compute to aim block hashes at one home of a table homed
 * by kva_hash64 alone. The index's adversarial-keys test and the flooding
 * benchmark use it.
 */
#ifndef KVA_TESTS_FLEET_UNHASH_H
#define KVA_TESTS_FLEET_UNHASH_H

#include <stdint.h>

/* a's inverse modulo 2^64 (a odd): Newton, doubling the correct bits. */
static inline uint64_t kva_test_inv_mul(uint64_t a)
{
	uint64_t x = a;
	for (int i = 0; i < 6; i++)
		x *= 2 - a * x;
	return x;
}

static inline uint64_t kva_test_unhash64(uint64_t x)
{
	x ^= x >> 31 ^ x >> 62;
	x *= kva_test_inv_mul(0x94d049bb133111ebull);
	x ^= x >> 27 ^ x >> 54;
	x *= kva_test_inv_mul(0xbf58476d1ce4e5b9ull);
	x ^= x >> 30 ^ x >> 60;
	return x;
}

#endif
