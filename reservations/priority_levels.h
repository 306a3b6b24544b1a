/* SPDX-License-Identifier: Apache-2.0 */
/*
 * priority_levels.c: the waiting queue under KVA_ORDER_PRIORITY — one list
 * in admission order (the same e->waitq the FCFS order uses), cut into
 * levels of one key each, and a table of the levels in use. Calls alloc.c
 * and stats.c; waiting_queue.c calls it. Scheduler thread only, except
 * kva__prio(), which the submitting thread fills before its event is
 * pushed. docs/design.md, "Priority order", has the bounds.
 */
#ifndef KVA_RESERVATIONS_PRIORITY_LEVELS_H
#define KVA_RESERVATIONS_PRIORITY_LEVELS_H

#include "engine_state.h"
#include "prio.h"


/* The slab's slot size for cfg. */
size_t kva__levels_slot_size(const kva_config *cfg);
/* 0, or -ENOMEM. Nothing to do (e->lv stays NULL) under FCFS. */
int kva__levels_init(kva_engine *e);
void kva__levels_fini(kva_engine *e);
/* Room for r's level, so that the join that follows cannot fail. O(1) when
 * its level is in use. 0 or -ENOMEM (nothing changed: the caller retries
 * next step). */
int kva__levels_reserve(kva_engine *e, struct kva__req *r);
/* At ingest: r's arrival is the step's clock if the host gave none; then
 * kva__levels_reserve. */
int kva__levels_ingest(kva_engine *e, struct kva__req *r);
/* r joins its level: at the back (after the requests of its level that
 * arrived no later), or at the front (preempted, reset). O(1) when the level
 * is in use and, at the back, r arrived no earlier than its last; a new
 * level costs O(log L + L) for L levels in use. Never fails: without the
 * room kva__levels_reserve would have made, r joins a neighbouring level at
 * its place in the order (counted and logged as an allocation failure). */
void kva__levels_join(kva_engine *e, struct kva__req *r, bool front);
/* The ring of the last KVA__AHEAD requests pushed to the back of r's level
 * (waiting_queue.c's prefetch hints), and its push count in *n. */
struct kva__pushed *kva__levels_ring(kva_engine *e, const struct kva__req *r, uint32_t **n);
/* At the step's end: kva_stats' priority gauges (levels in use; the most and
 * the least urgent level's key, count and first request's wait). O(1). */
void kva__levels_publish(kva_engine *e);
/* r leaves the queue. O(1); O(L) when its level empties and is not the
 * first. */
void kva__levels_leave(kva_engine *e, struct kva__req *r);
/* The key that orders r: its priority, plus, with aging, the aging
 * intervals from the clock's zero to its arrival (kva_config.aging_interval_ns):
 * static, so waiting requests age together and nothing is ever re-sorted. */
int64_t kva__levels_key(const kva_engine *e, const struct kva__req *r);

#endif
