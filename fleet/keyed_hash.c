/* SPDX-License-Identifier: Apache-2.0 */
/*
 * keyed_hash: the per-fleet key. getrandom without blocking; a host where
 * the pool is not ready yet gets a key from the clock and an address,
 * weaker but still unknown to a remote publisher. And SipHash of many
 * words at once (kvf_siphash13_many): eight lanes of AVX-512 where the CPU
 * has it, one word at a time otherwise.
 */
#define _GNU_SOURCE
#include "keyed_hash.h"

#include <stdatomic.h>
#include <stddef.h>
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

static void siphash13_each(const struct kvf_key *key, const uint64_t *in, uint32_t tail,
                           unsigned tail_len, uint64_t *out, size_t n)
{
	for (size_t i = 0; i < n; i++)
		out[i] = kvf_siphash13(key, in[i], tail, tail_len);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
typedef uint64_t kvf_u64x8 __attribute__((vector_size(64)));

#define V8(x) ((kvf_u64x8){0} + (uint64_t)(x))
#define V8_ROTL(x, b) (((x) << (b)) | ((x) >> (64 - (b))))
#define V8_ROUND(v0, v1, v2, v3)                                                                   \
	do {                                                                                       \
		v0 += v1;                                                                          \
		v1 = V8_ROTL(v1, 13);                                                              \
		v1 ^= v0;                                                                          \
		v0 = V8_ROTL(v0, 32);                                                              \
		v2 += v3;                                                                          \
		v3 = V8_ROTL(v3, 16);                                                              \
		v3 ^= v2;                                                                          \
		v0 += v3;                                                                          \
		v3 = V8_ROTL(v3, 21);                                                              \
		v3 ^= v0;                                                                          \
		v2 += v1;                                                                          \
		v1 = V8_ROTL(v1, 17);                                                              \
		v1 ^= v2;                                                                          \
		v2 = V8_ROTL(v2, 32);                                                              \
	} while (0)

/* kvf_siphash13(key, m, tail, tail_len) of eight words per pass, the same
 * rounds in eight lanes (vprolq does the rotations). */
__attribute__((target("avx512f"))) static void siphash13_x8(const struct kvf_key *key,
                                                             const uint64_t *in, uint32_t tail,
                                                             unsigned tail_len, uint64_t *out,
                                                             size_t n)
{
	const uint64_t last = (uint64_t)(8 + tail_len) << 56 | tail; /* the same in every lane */
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		kvf_u64x8 m;
		__builtin_memcpy(&m, in + i, sizeof m);
		kvf_u64x8 v0 = V8(key->k0 ^ 0x736f6d6570736575ull);
		kvf_u64x8 v1 = V8(key->k1 ^ 0x646f72616e646f6dull);
		kvf_u64x8 v2 = V8(key->k0 ^ 0x6c7967656e657261ull);
		kvf_u64x8 v3 = V8(key->k1 ^ 0x7465646279746573ull) ^ m;
		V8_ROUND(v0, v1, v2, v3);
		v0 ^= m;
		v3 ^= V8(last); /* the tail and the length */
		V8_ROUND(v0, v1, v2, v3);
		v0 ^= V8(last);
		v2 ^= V8(0xff);
		V8_ROUND(v0, v1, v2, v3);
		V8_ROUND(v0, v1, v2, v3);
		V8_ROUND(v0, v1, v2, v3);
		kvf_u64x8 r = v0 ^ v1 ^ v2 ^ v3;
		__builtin_memcpy(out + i, &r, sizeof r);
	}
	siphash13_each(key, in + i, tail, tail_len, out + i, n - i);
}

void kvf_siphash13_many(const struct kvf_key *key, const uint64_t *in, uint32_t tail,
                        unsigned tail_len, uint64_t *out, size_t n)
{
	/* 0 unknown, 1 without AVX-512, 2 with: the same answer on every
	 * thread, so relaxed */
	static _Atomic int avx512;
	int has = atomic_load_explicit(&avx512, memory_order_relaxed);
	if (!has) {
		__builtin_cpu_init();
		has = __builtin_cpu_supports("avx512f") ? 2 : 1;
		atomic_store_explicit(&avx512, has, memory_order_relaxed);
	}
	if (has == 2)
		siphash13_x8(key, in, tail, tail_len, out, n);
	else
		siphash13_each(key, in, tail, tail_len, out, n);
}
#else
void kvf_siphash13_many(const struct kvf_key *key, const uint64_t *in, uint32_t tail,
                        unsigned tail_len, uint64_t *out, size_t n)
{
	siphash13_each(key, in, tail, tail_len, out, n);
}
#endif
