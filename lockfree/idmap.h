/* SPDX-License-Identifier: Apache-2.0 */
/*
 * idmap: open-addressing map from a 64-bit id to a 32-bit value, for state
 * that one thread owns (no atomics, no RCU). Linear probing over a power-of-
 * two table kept at most 3/4 full, deletion by backward shift (no
 * tombstones, so churn never degrades probes), ids hashed with kva_hash64
 * (a bijection: distinct ids never share a hash). An entry stores the id's
 * hash, not the id: the hash identifies it, and the backward shift of a
 * removal and the moves of a growth read each entry's home without hashing
 * again.
 *
 * Growth doubles the table incrementally, so that no change costs more than
 * a constant: the table that crosses 3/4 stays in use while its successor is
 * filled with empty slots KVA_IDMAP_INIT_STEP at a time, then its entries
 * move over, at most KVA_IDMAP_MOVE_STEP of them per insert or remove, with
 * lookups probing both tables meanwhile. The old table is drained from an
 * empty slot downwards, so that every slot it empties is the last of its run
 * and the rest of the table stays a valid linear-probing table (no
 * tombstones there either). Each id is in exactly one of the two tables.
 *
 * Memory: while a growth is in progress both tables exist (the new one
 * twice the old: three times the old table's bytes). A growth ends after
 * about cap/KVA_IDMAP_INIT_STEP + old cap/(KVA_IDMAP_MOVE_STEP/2) inserts
 * and removes, long before the new table could fill; a map left untouched
 * mid-growth keeps both. Outside a growth: one table, 12 bytes an entry.
 *
 * kva_idmap_reserve() lets a caller make room before a change it must not
 * fail halfway; it never moves entries for n = 1.
 *
 * Synchronisation table: single thread; nothing may run concurrently.
 */
#ifndef KVA_LOCKFREE_IDMAP_H
#define KVA_LOCKFREE_IDMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <kvadmit/lockfree/hash.h>

#define KVA_IDMAP_NONE UINT32_MAX /* reserved: not a storable value */

/* Growth work done by one insert or remove: slots of the new table made
 * empty (24 KiB; 512 slots made the ingest of a million requests, one step
 * of BM_submit_fill, 5 % slower, 4096 measured the same as 2048), and slots
 * of the old one examined (each moves at most its entry). */
#define KVA_IDMAP_INIT_STEP 2048u
#define KVA_IDMAP_MOVE_STEP 32u

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
	struct kva_idmap_entry *ents; /* the newest table: all entries once no growth runs */
	uint32_t cap;                 /* 0 or a power of two */
	uint32_t count;               /* entries in both tables */
	/* A growth in progress (old != NULL). ents[0, ready) are initialised;
	 * until ready == cap, old is the only table in use. */
	struct kva_idmap_entry *old;
	uint32_t ocap, ocount;
	uint32_t ready;
	/* Draining old: `stop` is an empty slot of old (UINT32_MAX while the
	 * search for one, at `scan`, goes on); slots [scan, stop] cyclically
	 * are done and empty; the next one is scan - 1. */
	uint32_t scan, stop;
	uint64_t moved; /* entries a growth moved, ever (tests) */
	kva_idmap_alloc_fn mem_alloc;
	kva_idmap_free_fn mem_free;
};

/* A map with room for `initial` entries (rounded up; at least 64).
 * 0 or -ENOMEM (then nothing is allocated). */
int kva_idmap_init(struct kva_idmap *m, kva_idmap_alloc_fn a, kva_idmap_free_fn f,
                   uint32_t initial);
void kva_idmap_fini(struct kva_idmap *m);
/* Room for n more entries: the next n inserts cannot fail for memory,
 * whatever removes, finds and reserves come between. Starts a growth if
 * memory allows (a larger table; no entry moves), else is 0 while the
 * current table can take them, or -ENOMEM (map unchanged). An n larger than
 * the room a growth in progress leaves (never n = 1) first completes that
 * growth: fewer than 4n entries move. */
int kva_idmap_reserve(struct kva_idmap *m, uint32_t n);
/* The value slot of id, NULL if absent (valid until the next change). */
uint32_t *kva_idmap_find(const struct kva_idmap *m, uint64_t id);
/* 0, -EEXIST (id present, unchanged), -ENOMEM (map unchanged). Moves at
 * most KVA_IDMAP_MOVE_STEP entries of a growth. */
int kva_idmap_insert(struct kva_idmap *m, uint64_t id, uint32_t val);
/* true if id was present. Moves at most KVA_IDMAP_MOVE_STEP entries of a
 * growth (besides the backward shift of its own table). */
bool kva_idmap_remove(struct kva_idmap *m, uint64_t id);

/* A hint: starts the cache miss of id's first probe (in both tables while
 * a growth runs). Always inlined: GCC finds a function that only prefetches
 * pure and deletes a call to it that it did not inline early, prefetches
 * and all (GCC 12 -O2 did so in engine.c and record.c, also to the earlier
 * one-prefetch version). */
static inline __attribute__((always_inline)) void kva_idmap_prefetch(const struct kva_idmap *m,
                                                                      uint64_t id)
{
	uint64_t h = kva_hash64(id);
	if (m->old)
		__builtin_prefetch(&m->old[(uint32_t)h & (m->ocap - 1)]);
	if (m->cap && m->ready == m->cap)
		__builtin_prefetch(&m->ents[(uint32_t)h & (m->cap - 1)]);
}

#endif
