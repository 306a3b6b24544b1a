/* SPDX-License-Identifier: Apache-2.0 */
/*
 * keyed_hash: SipHash-1-3 (Aumasson and Bernstein's keyed PRF, one
 * compression and three finalisation rounds) of one or one-and-a-half
 * 64-bit words, under a 128-bit key drawn per fleet from getrandom. The
 * homes of the index and of the chain map: a publisher or a host that
 * chooses block hashes or prefix keys cannot aim them at one run of slots
 * without the key (kva_hash64 alone is a public bijection, invertible).
 */
#ifndef KVA_FLEET_KEYED_HASH_H
#define KVA_FLEET_KEYED_HASH_H

#include <stddef.h>
#include <stdint.h>

struct kvf_key {
	uint64_t k0, k1;
};

/* A fresh random key (getrandom; the clock and an address if it fails). */
void kvf_key_random(struct kvf_key *key);

#define KVF_ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

struct kvf_sip {
	uint64_t v0, v1, v2, v3;
};

static inline void kvf_sipround(struct kvf_sip *s)
{
	s->v0 += s->v1;
	s->v1 = KVF_ROTL(s->v1, 13);
	s->v1 ^= s->v0;
	s->v0 = KVF_ROTL(s->v0, 32);
	s->v2 += s->v3;
	s->v3 = KVF_ROTL(s->v3, 16);
	s->v3 ^= s->v2;
	s->v0 += s->v3;
	s->v3 = KVF_ROTL(s->v3, 21);
	s->v3 ^= s->v0;
	s->v2 += s->v1;
	s->v1 = KVF_ROTL(s->v1, 17);
	s->v1 ^= s->v2;
	s->v2 = KVF_ROTL(s->v2, 32);
}

static inline void kvf_sip_block(struct kvf_sip *s, uint64_t m)
{
	s->v3 ^= m;
	kvf_sipround(s);
	s->v0 ^= m;
}

/* SipHash-1-3 of the message m0 (8 bytes, little-endian), then `tail`
 * (tail_len bytes, 0..4) under key. */
static inline uint64_t kvf_siphash13(const struct kvf_key *key, uint64_t m0, uint32_t tail,
                                     unsigned tail_len)
{
	struct kvf_sip s = {key->k0 ^ 0x736f6d6570736575ull, key->k1 ^ 0x646f72616e646f6dull,
	                    key->k0 ^ 0x6c7967656e657261ull, key->k1 ^ 0x7465646279746573ull};
	kvf_sip_block(&s, m0);
	kvf_sip_block(&s, (uint64_t)(8 + tail_len) << 56 | tail);
	s.v2 ^= 0xff;
	kvf_sipround(&s);
	kvf_sipround(&s);
	kvf_sipround(&s);
	return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}

/* out[i] = kvf_siphash13(key, in[i], tail, tail_len) for i < n (one tail for
 * all): eight at a time where the CPU has AVX-512 (about 1 ns a word instead
 * of 6.5 on the machine of bench/README.md), one at a time otherwise. */
void kvf_siphash13_many(const struct kvf_key *key, const uint64_t *in, uint32_t tail,
                        unsigned tail_len, uint64_t *out, size_t n);

#endif
