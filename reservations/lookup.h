/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lookup.h, lookup.c: the directory side of a waiting request — one lookup per
 * incarnation (rule retained-manifest), its deadline (rule
 * per-lookup-deadline), the retained manifest and the checkpoint it selects
 * (kept in the checkpoint index), refresh answers (rule
 * wait-logs-and-refreshes), the host's own local checkpoints (rule
 * host-local-checkpoints), and the fallback to recompute. Calls
 * checkpoint_index.c, held.c, lifecycle.c and stats.c. Scheduler thread only.
 */
#ifndef KVA_RESERVATIONS_LOOKUP_H
#define KVA_RESERVATIONS_LOOKUP_H

#include "engine_state.h"

/* Asks the directory about r. A decisive lookup decides r's path (r blocks
 * the head until it is answered or times out); a refresh only may replace
 * the retained manifest. The callback runs with no lock held. */
void kva__lookup_issue(kva_engine *e, struct kva__req *r, bool decisive);
/* r joins the waiting queue: a decisive lookup, unless the host's own local
 * checkpoint decides it (rule host-local-checkpoints) — a full hit, or any when
 * `resume` (a preempted request). */
void kva__lookup_begin(kva_engine *e, struct kva__req *r, bool resume);
/* r's manifest and selection go, but the host's local checkpoint when
 * `keep` (a requeue, an eviction of another checkpoint), which stays as its
 * only entry, unselected; one stated before the last reset never stays. */
void kva__lookup_requeue(kva_engine *e, struct kva__req *r, bool keep);
/* The host stated a local checkpoint of r (rule host-local-checkpoints). A
 * manifest that must
 * grow takes *spare (set to NULL then). 0, or -ENOMEM: no room to hold the
 * checkpoint (held.c), nothing changed; the event
 * is retried next step. */
int kva__lookup_on_local(kva_engine *e, struct kva__req *r, const kva_checkpoint *cp,
                         struct kva__answer **spare);
/* Tokens of the host's local checkpoint in r's manifest, 0 if none (or
 * stated before the last prefix-cache reset). */
uint32_t kva__host_position(kva_engine *e, const struct kva__req *r);
/* Whether r (a restore) selected a host checkpoint that a prefix-cache
 * reset forgot since (rule host-local-checkpoints). */
bool kva__lookup_sel_forgotten(kva_engine *e, const struct kva__req *r);
/* If so, r (WAITING) looks up again and true. */
bool kva__lookup_host_forgotten(kva_engine *e, struct kva__req *r);
/* 0, or -ENOMEM: the answer could not be indexed; nothing changed, retry. */
int kva__lookup_on_answer(kva_engine *e, struct kva__answer *a);
void kva__lookup_on_deadline(kva_engine *e, struct kva__req *r);
/* r's copy of checkpoint `id` is older than an eviction (evict_walk.c):
 * r looks up again; another local checkpoint the host knows stays. */
void kva__lookup_revalidate(kva_engine *e, struct kva__req *r, uint64_t id);
/* r leaves the waiting side: deadline and index entry go. */
void kva__lookup_forget(kva_engine *e, struct kva__req *r);
/* Drops r's retained manifest and selection. */
void kva__manifest_drop(kva_engine *e, struct kva__req *r);
/* r takes the ordinary (recompute) path for `reason`. */
void kva__fallback(kva_engine *e, struct kva__req *r, uint8_t reason);
/* Points r at manifest entry `sel` (indexes it while r waits on a local one). */
void kva__select(kva_engine *e, struct kva__req *r, int sel);
/* The next shorter compatible entry than the selected one, -1 if none. */
int kva__select_shorter(kva_engine *e, const struct kva__req *r);
/* Whether r's retained entry i could be selected (compatible, within the
 * prompt, neither forgotten by a reset nor reported evicted). */
bool kva__lookup_usable(kva_engine *e, const struct kva__req *r, int i);

#endif
