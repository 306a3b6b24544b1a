/* SPDX-License-Identifier: Apache-2.0 */
/*
 * apply: a publisher's decoded batch applied to the index (stores, removals,
 * clears), the fleet's medium names, and a publisher's entries dropped.
 * I/O thread only (but kvf_medium_id also in kva_fleet_create, before it).
 */
#ifndef KVA_FLEET_APPLY_H
#define KVA_FLEET_APPLY_H

#include "fleet_state.h"

/* Id of a medium name (len bytes; 0: "GPU"), added when new; NO_MEDIUM past
 * MAX_MEDIA names. */
uint32_t kvf_medium_id(kva_fleet *f, const char *name, size_t len);
/* The id of a known name, or NO_MEDIUM; *name and *len become the name as
 * kept ("GPU" for an empty one, truncated to KVF_MEDIUM_MAX). */
uint32_t kvf_medium_find(kva_fleet *f, const char **name, size_t *len);

/* The enum kva_tier a medium's name says (len bytes), by words in it
 * without case: GPU, CPU / DRAM / host, disk / SSD / file, remote stores;
 * anything else KVA_TIER_UNKNOWN. */
uint8_t kvf_medium_tier(const char *name, size_t len);

/* Every entry of pub goes, its watches are reported, and why is logged. */
void kvf_drop_publisher(kva_fleet *f, struct publisher *pub, const char *why);

/* The index's counts into the statistics. */
void kvf_index_stats(kva_fleet *f);

/* Decodes data and applies it; a malformed batch is counted and logged. */
void kvf_apply_batch(kva_fleet *f, struct publisher *pub, const uint8_t *data, size_t len);

#endif
