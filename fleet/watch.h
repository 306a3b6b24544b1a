/* SPDX-License-Identifier: Apache-2.0 */
/*
 * watch: where a chain's blocks are (a publisher and medium "pair"), the
 * checkpoint id a lookup is answered with, and the watches of answered
 * checkpoints: while a watch lasts (watch_ns), the loss of a block of its
 * prefix is reported to the engine (kva_checkpoint_evicted). The watches are
 * a ring of MAX_WATCHES; the oldest gives way. I/O thread only.
 */
#ifndef KVA_FLEET_WATCH_H
#define KVA_FLEET_WATCH_H

#include "fleet_state.h"

#include <kvadmit/lockfree/hash.h>

#define MAX_WATCHES 65536u

struct chain;

struct watch {
	uint64_t id; /* the checkpoint's; 0: dead */
	uint32_t pair, nblocks;
	uint64_t expires;
	struct chain *chain; /* a reference */
};

/* The (publisher, medium) pair: KVF_LOC_PUB_MEDIUM of its locations. */
static inline uint32_t pair_of(uint32_t pub_id, uint32_t medium) { return pub_id << 8 | medium; }

static inline uint64_t checkpoint_id(uint64_t last_hash, uint32_t pair)
{
	return kva_hash64(last_hash ^ kva_hash64((uint64_t)pair + 1));
}

/* Longest prefix of chain (at most max_blocks blocks) the pair holds in
 * every full group, shortened to where every state group holds the last
 * block. */
uint32_t kvf_prefix_held(kva_fleet *f, const struct chain *chain, uint32_t pair,
                         uint32_t max_blocks);

/* Flags the index entries of the prefix watched (and referenced). */
void kvf_prefix_mark_watched(kva_fleet *f, const struct chain *chain, uint32_t pair,
                             uint32_t nblocks);

void kvf_watch_add(kva_fleet *f, uint64_t id, uint32_t pair, uint32_t nblocks,
                   struct chain *chain, uint64_t now);

/* Watches of `pair` (or of every pair of publisher pub_id when pub_id >= 0)
 * whose prefix is no longer whole are reported evicted. */
void kvf_watches_check(kva_fleet *f, uint32_t pair, int pub_id);

void kvf_watches_expire(kva_fleet *f, uint64_t now);

/* *pair of the live watch of checkpoint id; false if none (a scan of the
 * ring: kva_fleet_report_failure only). */
bool kvf_watch_pair(kva_fleet *f, uint64_t id, uint32_t *pair);

/* Drops every watch's chain reference (kva_fleet_destroy). */
void kvf_watches_free(kva_fleet *f);

#endif
