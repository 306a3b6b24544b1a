/* SPDX-License-Identifier: Apache-2.0 */
/*
 * watch: the prefix a (publisher, medium) pair holds of a chain, and the
 * watches of checkpoints lookups were answered with: reported evicted
 * (kva_checkpoint_evicted, under a fresh epoch) once their prefix is no
 * longer whole, or dropped when they expire. I/O thread only.
 */
#define _GNU_SOURCE
#include "watch.h"

#include "chain.h"
#include "holders.h"

uint32_t kvf_prefix_held(kva_fleet *f, const struct chain *chain, uint32_t pair,
                         uint32_t max_blocks)
{
	uint32_t nblocks = max_blocks;
	for (uint32_t g = 0; g < 32; g++) {
		if (!(f->cfg.full_groups >> g & 1))
			continue;
		uint32_t loc = pair << 8 | g, i = 0;
		while (i < nblocks && kvf_holds(f, chain->hashes[i], loc))
			i++;
		nblocks = i;
	}
	if (!f->cfg.state_groups)
		return nblocks;
	for (; nblocks > 0; nblocks--) {
		bool all = true;
		for (uint32_t g = 0; g < 32 && all; g++)
			if (f->cfg.state_groups >> g & 1)
				all = kvf_holds(f, chain->hashes[nblocks - 1], pair << 8 | g);
		if (all)
			break;
	}
	return nblocks;
}

void kvf_prefix_mark_watched(kva_fleet *f, const struct chain *chain, uint32_t pair,
                             uint32_t nblocks)
{
	for (uint32_t g = 0; g < 32; g++) {
		bool full = f->cfg.full_groups >> g & 1, state = f->cfg.state_groups >> g & 1;
		if (!full && !state)
			continue;
		for (uint32_t i = full ? 0 : nblocks - 1; i < nblocks; i++)
			kvf_holds_watch(f, chain->hashes[i], pair << 8 | g);
	}
}

/* A live watch ends: its chain reference and its publisher's count go. */
static void watch_end(kva_fleet *f, struct watch *w)
{
	f->pubs[w->pair >> 8].watches--;
	kvf_chain_unref(w->chain);
	w->id = 0;
}

void kvf_watch_add(kva_fleet *f, uint64_t id, uint32_t pair, uint32_t nblocks,
                   struct chain *chain, uint64_t now)
{
	if (f->nwatches == MAX_WATCHES) { /* the oldest watch gives way */
		struct watch *w = &f->watches[f->watch_head];
		if (w->id)
			watch_end(f, w);
		f->watch_head = (f->watch_head + 1) % MAX_WATCHES;
		f->nwatches--;
	}
	f->pubs[pair >> 8].watches++;
	struct watch *w = &f->watches[(f->watch_head + f->nwatches) % MAX_WATCHES];
	*w = (struct watch){.id = id, .pair = pair, .nblocks = nblocks, .chain = chain,
	                    .expires = deadline_after(now, f->cfg.watch_ns)};
	chain->refs++;
	f->nwatches++;
}

static void watch_fire(kva_fleet *f, struct watch *w)
{
	kva_engine *e = atomic_load_explicit(&f->engine, memory_order_acquire); /* A2 */
	if (e && kva_checkpoint_evicted(e, w->id, ++f->epoch) == 0)
		stat_add(f, STAT(evictions_reported), 1);
	watch_end(f, w);
}

void kvf_watches_check(kva_fleet *f, uint32_t pair, int pub_id)
{
	/* a publisher without watches: no pass over the ring (a stream of
	 * clears costs O(1) each) */
	if (f->pubs[pub_id >= 0 ? (uint32_t)pub_id : pair >> 8].watches == 0)
		return;
	for (uint32_t k = 0; k < f->nwatches; k++) {
		struct watch *w = &f->watches[(f->watch_head + k) % MAX_WATCHES];
		if (!w->id)
			continue;
		if (pub_id >= 0) {
			if ((w->pair >> 8) == (uint32_t)pub_id)
				watch_fire(f, w);
		} else if (w->pair == pair &&
		           kvf_prefix_held(f, w->chain, pair, w->nblocks) < w->nblocks) {
			watch_fire(f, w);
		}
	}
}

void kvf_watches_expire(kva_fleet *f, uint64_t now)
{
	while (f->nwatches) {
		struct watch *w = &f->watches[f->watch_head];
		if (w->id && w->expires > now)
			break;
		if (w->id)
			watch_end(f, w);
		f->watch_head = (f->watch_head + 1) % MAX_WATCHES;
		f->nwatches--;
	}
}

bool kvf_watch_pair(kva_fleet *f, uint64_t id, uint32_t *pair)
{
	for (uint32_t k = 0; k < f->nwatches && id; k++) {
		const struct watch *w = &f->watches[(f->watch_head + k) % MAX_WATCHES];
		if (w->id == id) {
			*pair = w->pair;
			return true;
		}
	}
	return false;
}

void kvf_watches_free(kva_fleet *f)
{
	for (uint32_t k = 0; k < f->nwatches; k++) {
		struct watch *w = &f->watches[(f->watch_head + k) % MAX_WATCHES];
		if (w->id)
			kvf_chain_unref(w->chain);
	}
}
