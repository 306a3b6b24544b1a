/* SPDX-License-Identifier: Apache-2.0 */
/*
 * index: which block hashes are stored where. One entry per (block hash,
 * location), a location being (publisher, medium, group) packed in 32 bits.
 * Open addressing with linear probing and backward-shift deletion, 16 bytes
 * a slot, no per-entry allocation; a hard cap on entries, enforced by CLOCK
 * eviction (a store or a lookup hit sets the entry's reference bit; the hand
 * clears bits until it finds an entry without one). Single-threaded: the
 * fleet's I/O thread owns it.
 */
#ifndef KVA_FLEET_INDEX_H
#define KVA_FLEET_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KVF_LOC(pub, medium, group)                                                          \
	(((uint32_t)(pub) << 16) | ((uint32_t)(medium) << 8) | (uint32_t)(group))
#define KVF_LOC_PUB(loc) ((loc) >> 16)
#define KVF_LOC_PUB_MEDIUM(loc) ((loc) >> 8) /* the (publisher, medium) pair */

#define KVF_E_REF 1u     /* CLOCK reference bit */
#define KVF_E_WATCHED 2u /* part of a checkpoint some lookup was answered with */

struct kvf_slot {
	uint64_t hash;
	uint32_t loc1; /* location + 1; 0 = empty */
	uint32_t flags;
};

struct kvf_index {
	struct kvf_slot *slots;
	size_t mask;      /* slots - 1 (a power of two) */
	size_t count, cap;
	size_t hand;      /* CLOCK */
	uint64_t evicted; /* entries pushed out by the cap */
};

/* cap entries (>= 1); the table is the power of two holding cap at <= 3/4
 * load. 0 or -ENOMEM. */
int kvf_index_init(struct kvf_index *ix, size_t cap);
void kvf_index_fini(struct kvf_index *ix);
size_t kvf_index_bytes(const struct kvf_index *ix);

/* Inserts (hash, loc) or refreshes it. *evicted (may be NULL) receives the
 * entry the cap pushed out, if any (its flags tell whether it was watched).
 * Returns true if the entry is new. */
bool kvf_index_put(struct kvf_index *ix, uint64_t hash, uint32_t loc, struct kvf_slot *evicted,
                   bool *did_evict);
struct kvf_slot *kvf_index_find(struct kvf_index *ix, uint64_t hash, uint32_t loc);
/* Removes (hash, loc); returns its flags + 1 (0 if absent). */
uint32_t kvf_index_del(struct kvf_index *ix, uint64_t hash, uint32_t loc);
/* Removes every entry whose location satisfies (loc >> shift) == (key >>
 * shift); returns how many; *watched set if any of them was watched. */
size_t kvf_index_del_matching(struct kvf_index *ix, uint32_t key, unsigned shift, bool *watched);

#endif
