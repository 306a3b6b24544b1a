/* SPDX-License-Identifier: Apache-2.0 */
/*
 * chain: the registered chains, an open-addressing map (linear probing,
 * backward-shift deletion) keyed by prefix key, and their FIFO list for the
 * max_chains cap. I/O thread only.
 */
#define _GNU_SOURCE
#include "chain.h"

#include <stdlib.h>

#include "keyed_hash.h"

/* Probes past this many slots are refused: the map is at most half full,
 * and its homes are keyed, so only a host choosing keys at random meets it,
 * about never. */
#define CHAIN_PROBE_MAX 1024u

static inline size_t chain_home(const kva_fleet *f, uint64_t prefix_key)
{
	return (size_t)kvf_siphash13(&f->chain_key, prefix_key, 0, 0) & f->chain_mask;
}

void kvf_chain_unref(struct chain *chain)
{
	if (--chain->refs == 0)
		free(chain);
}

struct chain **kvf_chain_slot(kva_fleet *f, uint64_t prefix_key)
{
	size_t i = chain_home(f, prefix_key);
	for (uint32_t dist = 0; dist <= CHAIN_PROBE_MAX; dist++, i = (i + 1) & f->chain_mask)
		if (!f->chain_map[i] || f->chain_map[i]->cmd.prefix_key == prefix_key)
			return &f->chain_map[i];
	return NULL;
}

static void chain_map_del(kva_fleet *f, struct chain **slot)
{
	size_t i = (size_t)(slot - f->chain_map), j = i;
	for (;;) {
		f->chain_map[i] = NULL;
		for (;;) {
			j = (j + 1) & f->chain_mask;
			if (!f->chain_map[j])
				return;
			size_t home = chain_home(f, f->chain_map[j]->cmd.prefix_key);
			if (i <= j ? (home <= i || home > j) : (home <= i && home > j))
				break;
		}
		f->chain_map[i] = f->chain_map[j];
		i = j;
	}
}

static void chain_unlink(kva_fleet *f, struct chain *chain)
{
	if (chain->older)
		chain->older->newer = chain->newer;
	else
		f->oldest_chain = chain->newer;
	if (chain->newer)
		chain->newer->older = chain->older;
	else
		f->newest_chain = chain->older;
	f->nchains--;
}

void kvf_chain_add(kva_fleet *f, struct chain *chain)
{
	struct chain **slot = kvf_chain_slot(f, chain->cmd.prefix_key);
	if (!slot) { /* its run is too long: refused, as the index refuses */
		stat_add(f, STAT(chains_refused), 1);
		free(chain);
		return;
	}
	if (*slot) { /* a new chain for a known key replaces it */
		struct chain *old = *slot;
		chain_unlink(f, old);
		*slot = chain;
		kvf_chain_unref(old);
	} else {
		if (f->nchains >= f->cfg.max_chains) {
			struct chain *old = f->oldest_chain;
			chain_unlink(f, old);
			chain_map_del(f, kvf_chain_slot(f, old->cmd.prefix_key));
			kvf_chain_unref(old);
			stat_add(f, STAT(chains_evicted), 1);
			slot = kvf_chain_slot(f, chain->cmd.prefix_key);
		}
		*slot = chain;
	}
	chain->refs = 1;
	chain->newer = NULL;
	chain->older = f->newest_chain;
	if (f->newest_chain)
		f->newest_chain->newer = chain;
	else
		f->oldest_chain = chain;
	f->newest_chain = chain;
	f->nchains++;
	stat_set(f, STAT(chains), f->nchains);
}

void kvf_chains_free(kva_fleet *f)
{
	while (f->oldest_chain) {
		struct chain *chain = f->oldest_chain;
		chain_unlink(f, chain);
		kvf_chain_unref(chain);
	}
}
