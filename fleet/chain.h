/* SPDX-License-Identifier: Apache-2.0 */
/*
 * chain: the registered chains (kva_fleet_chain_register), by prefix key.
 * An open-addressing map key -> chain plus a FIFO list that enforces
 * max_chains (the oldest goes). A chain is referenced by the map and by
 * each watch on it, and freed with the last reference. I/O thread only.
 */
#ifndef KVA_FLEET_CHAIN_H
#define KVA_FLEET_CHAIN_H

#include "fleet_state.h"

/* A registered chain: the block hashes of a prefix, in order. */
struct chain {
	struct cmd cmd; /* the node it arrived in (kind CMD_CHAIN, key prefix_key) */
	struct chain *older, *newer;
	uint32_t refs, nhashes;
	uint64_t hashes[];
};

void kvf_chain_unref(struct chain *chain);

/* The map slot of prefix_key: the chain registered for it, or an empty one;
 * NULL when neither is within the probe cap. */
struct chain **kvf_chain_slot(kva_fleet *f, uint64_t prefix_key);

/* Takes chain over (refs 1), replacing one registered for its key, or
 * evicting the oldest chain at max_chains; frees it if the probe cap
 * refuses its key (counted in chains_refused). */
void kvf_chain_add(kva_fleet *f, struct chain *chain);

/* Drops the map's reference to every chain (kva_fleet_destroy). */
void kvf_chains_free(kva_fleet *f);

#endif
