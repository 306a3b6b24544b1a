/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stats.h, stats.c: what the engine tells the host — counting (the inline
 * writers below), measured durations, log lines through the host's
 * callbacks, and the kva_stats snapshot with its text exposition. The
 * counter and histogram ids are counters.h. Calls nothing else in
 * reservations/ above the engine state.
 */
#ifndef KVA_RESERVATIONS_STATS_H
#define KVA_RESERVATIONS_STATS_H

#include "engine_state.h"

/* Any thread: adds v to counter s (an atomic add). For the counters other
 * threads also write: running, preempted, reserved/in-use pages, late
 * answers, stale copies. */
static inline void kva__st_add(kva_engine *e, enum kva__stat s, int64_t v)
{
	atomic_fetch_add_explicit(&e->st[s], (uint64_t)v, memory_order_relaxed);
}
/* Scheduler thread only: adds v to a counter only the scheduler writes — a
 * plain load and store, no locked instruction on the step's path (readers
 * still load it atomically). */
static inline void kva__st_add_single_writer(kva_engine *e, enum kva__stat s, uint64_t v)
{
	atomic_store_explicit(&e->st[s], atomic_load_explicit(&e->st[s], memory_order_relaxed) + v,
	                      memory_order_relaxed);
}
/* Any thread: counter s now. */
static inline uint64_t kva__st_get(const kva_engine *e, enum kva__stat s)
{
	return atomic_load_explicit(&e->st[s], memory_order_relaxed);
}

/* Scheduler thread: one log line about `r` (NULL: none) through the host's
 * text and structured callbacks, rate limited per event. */
void kva__log(kva_engine *e, int level, int event, const struct kva__req *r, int reason,
              uint64_t value, const char *fmt, ...) __attribute__((format(printf, 7, 8)));
/* Scheduler thread: one measured duration. */
void kva__observe(kva_engine *e, enum kva__hist h, uint64_t ns);

/* Scheduler thread: the plan cannot hold what `what` (request id) needs
 * even when empty: flag, count (once per step) and log (once per run of
 * such steps). */
void kva__plan_too_small(kva_engine *e, uint64_t id, const char *what, uint32_t need);
/* Scheduler thread: a step-side allocation failed (retried later): count;
 * log once per run of failures. kva__alloc_ok ends the run. */
void kva__alloc_failed(kva_engine *e, uint64_t id, const char *what);
static inline void kva__alloc_ok(kva_engine *e) { e->alloc_failing = false; }

#endif
