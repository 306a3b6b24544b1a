/* SPDX-License-Identifier: Apache-2.0 */
/*
 * checkpoint_index.h, checkpoint_index.c: the checkpoint index (rule
 * eviction-revalidates) — for each checkpoint id, the waiting requests that
 * selected it, linked through their records — and the registry of eviction
 * walks still pending over those lists (the walk itself is evict_walk.c).
 * Scheduler thread only.
 */
#ifndef KVA_RESERVATIONS_CHECKPOINT_INDEX_H
#define KVA_RESERVATIONS_CHECKPOINT_INDEX_H

#include "engine_state.h"

/* Room for one more indexed id: the next kva__ckpt_index cannot fail.
 * 0 or -ENOMEM. */
int kva__ckpt_reserve(kva_engine *e);
/* r (WAITING, its selection's id `id`) joins the front of id's list. */
void kva__ckpt_index(kva_engine *e, struct kva__req *r, uint64_t id);
/* r leaves its list, if it is on one (KVA__F_INDEXED); a pending walk
 * about to look at r goes on with the next. */
void kva__ckpt_unindex(kva_engine *e, struct kva__req *r);
/* The first of id's sharers: its slot + 1, 0 if none. */
uint32_t kva__ckpt_first(kva_engine *e, uint64_t id);

/* The pending walk of checkpoint id, or NULL. */
struct kva__evict *kva__ckpt_walk_of(kva_engine *e, uint64_t id);
/* Room for one more pending walk, before anything changes. 0 or -ENOMEM. */
int kva__ckpt_walk_reserve(kva_engine *e);
/* ev's walk becomes pending (room reserved). */
void kva__ckpt_walk_add(kva_engine *e, struct kva__evict *ev);
/* Pending walk i is done: the last one takes its place. */
void kva__ckpt_walk_remove(kva_engine *e, uint32_t i);
/* Create: the pending walks' map. 0 or -ENOMEM. */
int kva__ckpt_walks_init(kva_engine *e);
/* Destroy: the pending walks and their map go. */
void kva__ckpt_walks_free(kva_engine *e);

#endif
