/* SPDX-License-Identifier: Apache-2.0 */
/*
 * index: which block hashes are stored where. One entry per (block hash,
 * location), a location being (publisher, medium, group) packed in 32 bits.
 * Open addressing with linear probing and backward-shift deletion, 16 bytes
 * a slot, no per-entry allocation; a hard cap on entries, enforced by CLOCK
 * eviction (a store or a lookup hit sets the entry's reference bit; the hand
 * clears bits until it finds an entry without one). Single-threaded: the
 * fleet's I/O thread owns it. The fleet's index without cfg.score; with it,
 * the readers' table is the index (score.h, holders.h).
 *
 * Against a publisher that chooses its block hashes: homes are SipHash
 * under a per-index random key (keyed_hash.h), and no entry sits more than
 * probe_max slots past its home (a store that would is refused and
 * counted), so a probe is bounded whatever the keys.
 *
 * Dropping every entry of a publisher is O(1): each entry carries its
 * publisher's generation; a drop moves the generation on, and the entries
 * of older ones are dead, skipped by finds and reclaimed when a probe or
 * the CLOCK hand meets them.
 */
#ifndef KVA_FLEET_INDEX_H
#define KVA_FLEET_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "big_table.h"
#include "keyed_hash.h"

#define KVF_LOC(pub, medium, group)                                                          \
	(((uint32_t)(pub) << 16) | ((uint32_t)(medium) << 8) | (uint32_t)(group))
#define KVF_LOC_PUB(loc) ((loc) >> 16)
#define KVF_LOC_PUB_MEDIUM(loc) ((loc) >> 8) /* the (publisher, medium) pair */

#define KVF_E_REF 1u     /* CLOCK reference bit */
#define KVF_E_WATCHED 2u /* part of a checkpoint some lookup was answered with */
#define KVF_E_FLAGS 0xffu
#define KVF_GEN_SHIFT 8 /* flags >> 8: the publisher's generation (24 bits) */
#define KVF_GEN_MASK 0xffffffu

#define KVF_INDEX_PUBS 4096u   /* publisher ids (KVA_FLEET_MAX_PUBLISHERS) */
#define KVF_PROBE_MAX 1024u    /* default probe_max (at 3/4 load and random
                                  homes a run this long is ~1e-13 likely) */

struct kvf_slot {
	uint64_t hash;
	uint32_t loc1; /* location + 1; 0 = empty */
	uint32_t flags;
};

/* Per publisher id: its generation and its live entries. */
struct kvf_index_pub {
	uint32_t gen;
	uint32_t reserved_;
	uint64_t live;
};

struct kvf_index {
	struct kvf_slot *slots; /* in mem: 2 MiB pages where the kernel gives them */
	struct kvf_big_table mem;
	size_t mask;      /* slots - 1 (a power of two) */
	size_t count, cap; /* count: occupied slots, dead entries included */
	size_t live;      /* live entries */
	size_t hand;      /* CLOCK */
	size_t probe_max; /* farthest an entry may sit from its home */
	uint64_t evicted; /* live entries pushed out by the cap */
	uint64_t refused; /* stores past probe_max */
	uint64_t reclaimed; /* dead entries freed */
	uint64_t gen_wraps; /* generation wraps (each one scans the table) */
	/* Each publisher's share of the cap (0: none). While some publisher
	 * holds its share or more (nover), the cap evicts only such
	 * publishers' entries: one publisher cannot push out the others'. */
	size_t quota;
	uint32_t nover;
	struct kvf_key key;
	struct kvf_index_pub *pubs; /* KVF_INDEX_PUBS */
};

/* cap entries (>= 1); the table is the power of two holding cap at <= 3/4
 * load; a random key. 0 or -ENOMEM. */
int kvf_index_init(struct kvf_index *ix, size_t cap);
void kvf_index_fini(struct kvf_index *ix);
size_t kvf_index_bytes(const struct kvf_index *ix);
/* The slot probes for (hash, loc) start at. */
size_t kvf_index_home(const struct kvf_index *ix, uint64_t hash, uint32_t loc);

/* Inserts (hash, loc) or refreshes it. *evicted (may be NULL) receives the
 * live entry the cap pushed out, if any (its flags tell whether it was
 * watched). Returns true if the entry is new; false if it was there, or
 * refused (counted in `refused`). */
bool kvf_index_put(struct kvf_index *ix, uint64_t hash, uint32_t loc, struct kvf_slot *evicted,
                   bool *did_evict);
/* The live entry (hash, loc), or NULL. Reclaims dead entries on the way, so
 * a pointer from an earlier call may be stale. */
struct kvf_slot *kvf_index_find(struct kvf_index *ix, uint64_t hash, uint32_t loc);
/* Removes (hash, loc); returns its flags (KVF_E_*) + 1 (0 if absent). */
uint32_t kvf_index_del(struct kvf_index *ix, uint64_t hash, uint32_t loc);
/* A batch's probes overlap: homes[k] = kvf_index_home(ix, hashes[k], loc)
 * for k < n (<= KVF_INDEX_FETCH, hashed together: kvf_siphash13_many), and
 * their slots fetched into the cache now; then kvf_index_put_from and
 * kvf_index_del_from, given a home, are kvf_index_put and kvf_index_del. */
#define KVF_INDEX_FETCH 32
void kvf_index_fetch(const struct kvf_index *ix, const uint64_t *hashes, uint32_t loc, size_t n,
                     size_t *homes);
bool kvf_index_put_from(struct kvf_index *ix, size_t home, uint64_t hash, uint32_t loc,
                        struct kvf_slot *evicted, bool *did_evict);
uint32_t kvf_index_del_from(struct kvf_index *ix, size_t home, uint64_t hash, uint32_t loc);
/* Removes every entry whose location satisfies (loc >> shift) == (key >>
 * shift), scanning the table; returns how many live ones; *watched set if
 * any of them was watched. */
size_t kvf_index_del_matching(struct kvf_index *ix, uint32_t key, unsigned shift, bool *watched);
/* Every entry of publisher pub is dead from now: O(1) (a scan once per 2^24
 * drops of one publisher, when its generation wraps). Returns how many live
 * entries it had. */
size_t kvf_index_drop_pub(struct kvf_index *ix, uint32_t pub);

/* Sets the share of the cap each publisher may hold before its entries go
 * first (0: none); scans the publisher table. */
void kvf_index_set_quota(struct kvf_index *ix, size_t quota);

static inline uint64_t kvf_index_pub_live(const struct kvf_index *ix, uint32_t pub)
{
	return ix->pubs[pub].live;
}

#endif
