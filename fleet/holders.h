/* SPDX-License-Identifier: Apache-2.0 */
/*
 * holders: which locations hold a block, asked of the fleet's one index.
 * With cfg.score that is the table routers read (score.c: one probe per
 * event serves both); without it, the I/O thread's own table (index.c).
 * I/O thread only.
 */
#ifndef KVA_FLEET_HOLDERS_H
#define KVA_FLEET_HOLDERS_H

#include "fleet_state.h"
#include "score.h"

/* Whether loc (publisher, medium, group) holds hash. */
static inline bool kvf_holds(kva_fleet *f, uint64_t hash, uint32_t loc)
{
	return f->score ? kvf_score_holds(f->score, hash, loc, false)
	                : kvf_index_find(&f->index, hash, loc) != NULL;
}

/* The entry is part of an answered checkpoint: its removal is looked at,
 * and it counts as used (CLOCK). */
static inline void kvf_holds_watch(kva_fleet *f, uint64_t hash, uint32_t loc)
{
	if (f->score) {
		kvf_score_holds(f->score, hash, loc, true);
		return;
	}
	struct kvf_slot *entry = kvf_index_find(&f->index, hash, loc);
	if (entry)
		entry->flags |= KVF_E_WATCHED | KVF_E_REF;
}

/* Every entry of publisher pub goes, O(1); returns how many were live. */
static inline size_t kvf_holders_drop(kva_fleet *f, uint32_t pub)
{
	return f->score ? (size_t)kvf_score_drop_publisher(f->score, pub)
	                : kvf_index_drop_pub(&f->index, pub);
}

/* The entry cap. */
static inline uint64_t kvf_holders_cap(const kva_fleet *f)
{
	return f->cfg.max_blocks > SIZE_MAX / 64 ? SIZE_MAX / 64 : f->cfg.max_blocks;
}

/* Publisher pub's live entries. */
static inline uint64_t kvf_holders_pub_live(const kva_fleet *f, uint32_t pub)
{
	return f->score ? kvf_score_pub_live(f->score, pub) : kvf_index_pub_live(&f->index, pub);
}

/* Each publisher's share of the cap (0: none). */
static inline void kvf_holders_set_quota(kva_fleet *f, uint64_t quota)
{
	if (f->score)
		kvf_score_set_quota(f->score, quota);
	else
		kvf_index_set_quota(&f->index, (size_t)quota);
}

#endif
