/* SPDX-License-Identifier: Apache-2.0 */
/* Shared helpers for kvadmit tests (not part of the library). */
#ifndef KVA_TEST_H
#define KVA_TEST_H

#include <stdint.h>
#include <stdlib.h>

/* Scales a full-size iteration count by KVA_STRESS_SCALE percent (default
 * 100) so sanitizer builds can run stress tests shorter; never below 1. */
static inline uint64_t kva_test_scaled(uint64_t full)
{
	const char *s = getenv("KVA_STRESS_SCALE");
	uint64_t pct = s ? strtoull(s, NULL, 10) : 100;
	uint64_t n = full * pct / 100;
	return n ? n : 1;
}

/* Deterministic xorshift64* for tests. */
static inline uint64_t kva_test_rand(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545F4914F6CDD1DULL;
}

#endif
