/* SPDX-License-Identifier: Apache-2.0 */
/*
 * score: the router query (kva_fleet_score) and, with it, the fleet's
 * index. The (block hash, location) entries lie in a flat table that any
 * thread reads while the I/O thread adds and removes entries: each slot
 * has its own sequence number, readers retry a slot caught mid-write (and
 * pass it over after a few tries), so readers never wait for the I/O
 * thread, nor it for them. Built only when kva_fleet_config.score is set,
 * and then it is the index too (an entry cap with CLOCK eviction and
 * per-publisher shares, watched and reference flags, the lookups' probes):
 * one table, one probe per event. Without cfg.score the fleet keeps its
 * I/O-thread-only index (index.c). Also each publisher's identity (the
 * topic frame of its last message, its data-parallel rank, replaced under
 * RCU) and block size, published for readers.
 *
 * Writers: the I/O thread only (apply.c, io_thread.c); kvf_score_free with
 * no reader left (kva_fleet_destroy).
 */
#ifndef KVA_FLEET_SCORE_H
#define KVA_FLEET_SCORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvadmit/fleet.h"
#include "wire.h"

struct kvf_score;

#define KVF_SCORE_MEDIA 64u /* medium ids the table keys (6 bits of a slot's key) */

/* NULL without memory. full_groups: the groups whose blocks make a prefix
 * (the only ones queries read); keep_groups: the groups the table takes
 * (full_groups at least); max_blocks: the slots are sized for that many
 * entries, and with cap_entries it is the entry cap (the table is the
 * index: at the cap an add evicts, CLOCK). */
struct kvf_score *kvf_score_new(uint32_t full_groups, uint32_t keep_groups, uint64_t max_blocks,
                                bool cap_entries);
void kvf_score_free(struct kvf_score *s);

/* Held until kvf_score_flush (or until many are held), then applied in
 * their order; entries of groups not kept are left out. Held writes are
 * one batch's, so one publisher's (the fleet flushes at a batch's end). */
void kvf_score_add(struct kvf_score *s, uint64_t hash, uint32_t loc);
void kvf_score_del(struct kvf_score *s, uint64_t hash, uint32_t loc);
/* Applies the held adds and removals: readers see them from then on. */
void kvf_score_flush(struct kvf_score *s);
/* Homes are SipHash under a random key, as the index's; an add that would
 * sit more than probe_max (KVF_PROBE_MAX) slots past its home is refused
 * and counted (kvf_score_counts). For tests: the home of a hash, a lower
 * cap. */
size_t kvf_score_home(const struct kvf_score *s, uint64_t hash);
size_t kvf_score_bytes(const struct kvf_score *s); /* the table's */
void kvf_score_set_probe_max(struct kvf_score *s, size_t probe_max);
/* For tests: the slots each flush sweeps (a pass then spans many flushes). */
void kvf_score_set_sweep_slots(struct kvf_score *s, size_t n);
/* For fuzzers: a fixed key instead of the random one, so that an input
 * replays the same table; an empty table only (otherwise ignored). */
void kvf_score_set_key(struct kvf_score *s, uint64_t k0, uint64_t k1);
/* Every entry of publisher pub, out of answers at once; returns how many
 * were live. O(1) (and a flush):
 * its column is dead, and the flushes that follow sweep it from the table,
 * SWEEP_SLOTS slots each; pub's next add takes a free column (none: the
 * add is left out, counted in kvf_score_counts' uncopied). */
uint64_t kvf_score_drop_publisher(struct kvf_score *s, uint32_t pub);
/* The index's part (I/O thread). Each publisher's share of the entry cap
 * (0: none): while one holds its share or more, the cap evicts only such
 * publishers' entries. */
void kvf_score_set_quota(struct kvf_score *s, uint64_t quota);
/* Whether loc holds hash (held writes applied first); watch: the entry's
 * slot is marked watched and referenced (for every holder in it: a removal
 * of any of them is then looked at, which only costs a check). */
bool kvf_score_holds(struct kvf_score *s, uint64_t hash, uint32_t loc, bool watch);
/* The (publisher << 8 | medium) pairs that lost a watched entry since the
 * last call (at most KVF_SCORE_WATCHED_PAIRS; *overflow: more did, all of
 * that batch's publisher's pairs are to be looked at). */
#define KVF_SCORE_WATCHED_PAIRS 64
uint32_t kvf_score_watched_take(struct kvf_score *s, uint32_t *pairs, bool *overflow);
/* The table's counts (I/O thread; the fleet's stats, and tests). */
struct kvf_score_counts {
	uint64_t live;     /* entries: (block, location) bits not dead */
	uint64_t cap;      /* the entry cap (0: none) */
	uint64_t evicted;  /* entries the cap took out */
	uint64_t refused;  /* adds past probe_max, or no entry to evict */
	uint64_t uncopied; /* adds without a column (kva_fleet_stats.score_uncopied) */
	uint64_t swept;    /* slots the sweep looked at */
};
void kvf_score_counts(const struct kvf_score *s, struct kvf_score_counts *c);
uint64_t kvf_score_pub_live(const struct kvf_score *s, uint32_t pub);
/* For tests: slots in use (dead entries not yet swept included). */
size_t kvf_score_count(const struct kvf_score *s);
/* The publisher's identity, when it changed (cheap when it did not). */
void kvf_score_topic(struct kvf_score *s, uint32_t pub, const void *topic, size_t len);
void kvf_score_rank(struct kvf_score *s, uint32_t pub, int64_t dp_rank);
void kvf_score_block_size(struct kvf_score *s, uint32_t pub, uint32_t block_size);

/* media: the fleet's medium names (append-only; an id a reader finds in an
 * entry was named before the entry was added); block_size: configured per
 * medium id (0: the publisher's own). Any thread. */
int kvf_score_query(struct kvf_score *s, const char (*media)[KVF_MEDIUM_MAX + 1],
                    const uint32_t *block_size, const uint64_t *hashes, uint32_t n,
                    kva_fleet_match *out, uint32_t cap);

#endif
