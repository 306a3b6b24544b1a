/* SPDX-License-Identifier: Apache-2.0 */
/*
 * held.h, held.c: the held-checkpoint map — for every local checkpoint that a
 * live request's manifest holds, selected or not, how many entries hold it and
 * the newest eviction reported while they did, so that an entry is never taken
 * later from a copy reported evicted (rules retry-then-shorter,
 * eviction-revalidates, host-local-checkpoints). Owns its data (struct
 * kva__held_map, one in the engine state) and calls only alloc.c. Scheduler
 * thread only.
 */
#ifndef KVA_RESERVATIONS_HELD_H
#define KVA_RESERVATIONS_HELD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "record.h"
#include <kvadmit/lockfree/idmap.h>

/* One held id: how many entries hold it, and the newest epoch an eviction
 * of it reported. */
struct kva__held {
	uint64_t evicted;   /* newest eviction epoch reported while held; 0 none */
	uint32_t refs;      /* entries of live records' manifests with this id */
	uint32_t next_free; /* on the free list: the next one's index + 1 */
};
#define KVA__HELD_CHUNK 1024u /* trackers allocated together, never moved */

struct kva__held_map {
	struct kva_idmap ids; /* local checkpoint id -> its tracker's index */
	struct kva__held **chunks;
	uint32_t n_chunks, chunks_cap;
	uint32_t free, n_free; /* free trackers: index + 1 list, its length */
};

/* Every local entry of a KVA__F_HELD record's manifest counts once under
 * its id, so an eviction of a checkpoint a request holds but has not
 * selected (a shorter entry of its manifest, the host's own) is remembered
 * for as long as some request holds that id.
 *   init / fini  an empty map (0 or -ENOMEM) / everything it owns goes
 *   reserve  room for n more ids: the next n holds cannot fail (0, -ENOMEM)
 *   hold     one more entry (cp local, else nothing); room reserved unless
 *            the id is held already
 *   drop     one entry fewer; the id's record goes with its last entry
 *   evicted  an eviction of id at epoch (a held id remembers the newest)
 *   gone     cp is local and an eviction newer than its copy was reported
 *   hold_all / drop_all  every entry of r's manifest (KVA__F_HELD only) */
int kva__held_init(struct kva__held_map *m);
void kva__held_fini(struct kva__held_map *m);
int kva__held_reserve(struct kva__held_map *m, uint32_t n);
void kva__held_hold(struct kva__held_map *m, const kva_checkpoint *cp);
void kva__held_drop(struct kva__held_map *m, const kva_checkpoint *cp);
void kva__held_evicted(struct kva__held_map *m, uint64_t id, uint64_t epoch);
bool kva__held_gone(const struct kva__held_map *m, const kva_checkpoint *cp);
void kva__held_hold_all(struct kva__held_map *m, struct kva__req *r);
void kva__held_drop_all(struct kva__held_map *m, struct kva__req *r);

/* Ids held now: 0 once every request has ended and retired. */
static inline size_t kva__held_count(const struct kva__held_map *m) { return m->ids.count; }

#endif
