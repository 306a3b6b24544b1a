/* SPDX-License-Identifier: Apache-2.0 */
/*
 * idmap: open-addressing map from a 64-bit id to a 32-bit value, for state
 * that one thread owns (no atomics, no RCU). Linear probing over a power-of-
 * two table kept at most 3/4 full, deletion by backward shift (no
 * tombstones, so churn never degrades probes), ids hashed with kva_hash64
 * (a bijection: distinct ids never share a hash). An entry stores the id's
 * hash, not the id: the hash identifies it, and the backward shift of a
 * removal and the copy of a growth read each entry's home without hashing
 * again.
 *
 * Growth doubles the table (amortised O(1); the copy is one pass); kva_idmap_reserve() lets a caller grow before a
 * change it must not fail halfway.
 *
 * Synchronisation table: single thread; nothing may run concurrently.
 */
#ifndef KVA_LOCKFREE_IDMAP_H
#define KVA_LOCKFREE_IDMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hash.h"

#define KVA_IDMAP_NONE UINT32_MAX /* reserved: not a storable value */

typedef void *(*kva_idmap_alloc_fn)(size_t bytes);
typedef void (*kva_idmap_free_fn)(void *p, size_t bytes);

/* Key (the id's kva_hash64) and value side by side, so one cache line holds
 * both (one miss a probe); the key in two halves keeps an entry 12 bytes
 * with 4-byte alignment. */
struct kva_idmap_entry {
	uint32_t key_lo, key_hi;
	uint32_t val; /* KVA_IDMAP_NONE: empty */
};

struct kva_idmap {
	struct kva_idmap_entry *ents;
	uint32_t cap; /* 0 or a power of two */
	uint32_t count;
	kva_idmap_alloc_fn mem_alloc;
	kva_idmap_free_fn mem_free;
};

/* A map with room for `initial` entries (rounded up; at least 64).
 * 0 or -ENOMEM (then nothing is allocated). */
int kva_idmap_init(struct kva_idmap *m, kva_idmap_alloc_fn a, kva_idmap_free_fn f,
                   uint32_t initial);
void kva_idmap_fini(struct kva_idmap *m);
/* Room for n more entries: grows if memory allows, else true while the
 * current table can take them (0) or -ENOMEM (map unchanged). */
int kva_idmap_reserve(struct kva_idmap *m, uint32_t n);
/* The value slot of id, NULL if absent (valid until the next change). */
uint32_t *kva_idmap_find(const struct kva_idmap *m, uint64_t id);
/* 0, -EEXIST (id present, unchanged), -ENOMEM (map unchanged). */
int kva_idmap_insert(struct kva_idmap *m, uint64_t id, uint32_t val);
/* true if id was present. */
bool kva_idmap_remove(struct kva_idmap *m, uint64_t id);

/* A hint: starts the cache miss of id's first probe. */
static inline void kva_idmap_prefetch(const struct kva_idmap *m, uint64_t id)
{
	if (m->cap)
		__builtin_prefetch(&m->ents[(uint32_t)kva_hash64(id) & (m->cap - 1)]);
}

#endif
