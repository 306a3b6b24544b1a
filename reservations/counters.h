/* SPDX-License-Identifier: Apache-2.0 */
/*
 * counters.h: which counters and measured durations the engine keeps — the
 * counter ids, the histogram ids and the producers' counter shards. Types
 * only, below the engine state that stores them; stats.h writes and reads
 * them, stats.c turns them into kva_stats and text.
 */
#ifndef KVA_RESERVATIONS_COUNTERS_H
#define KVA_RESERVATIONS_COUNTERS_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdint.h>

#include "kvadmit/kvadmit.h"
#include <kvadmit/lockfree/fanin.h>

/* The engine's counters (e->st). Producer-written counters live on their
 * own lines (shards). */
enum kva__stat {
	ST_INGESTED, ST_REJECTED, ST_FINISHED, ST_CANCELLED, ST_PREEMPTED,
	ST_WAITING, ST_IMPORTING, ST_READY, ST_RUNNING,
	ST_ADMIT_RESTORE, ST_ADMIT_LOCAL, ST_ADMIT_RECOMPUTE,
	ST_TOK_ADMITTED, ST_TOK_LOCAL, ST_TOK_RESTORED, ST_TOK_RECOMPUTED,
	ST_LOOKUPS, ST_ANSWERED, ST_LOOKUP_TIMEOUTS, ST_LATE_ANSWERS, ST_REFRESHES, ST_REVALIDATIONS,
	ST_COPY_JOBS, ST_COPY_FAILED, ST_COPY_RETRIES, ST_SHORTER, ST_STALE_COPY,
	ST_BLOCKED_STEPS, ST_WAIT_LOGS, ST_WAIT_EXPIRED, ST_STEPS, ST_EVENTS,
	ST_RESERVED_PAGES, ST_IN_USE_PAGES, ST_DRAINING_PAGES,
	ST_RESTORES_WAITING, ST_CAPACITY_WAIT_NS,
	ST_LOCAL_STATED, ST_LOCAL_UPGRADES, ST_PLAN_TOO_SMALL, ST_ALLOC_FAILURES,
	ST_LOGS_SUPPRESSED,
	/* PRIORITY order: gauges of the last step (priority_levels.c), signed
	 * levels stored as their two's complement */
	ST_PRIO_LEVELS, ST_URGENT_LEVEL, ST_LAX_LEVEL, ST_URGENT_WAITING, ST_LAX_WAITING,
	ST_URGENT_WAIT_NS, ST_LAX_WAIT_NS,
	ST_ADMIT_PRIO0, /* + a class of KVA_PRIORITY_CLASSES (run_heap.c) */
	ST_COST_RESTORE = ST_ADMIT_PRIO0 + KVA_PRIORITY_CLASSES, /* cost policy decisions */
	ST_COST_OTHER, ST_COST_RECOMPUTE,
	ST_FALLBACK0, /* + enum kva_reason */
	ST_COUNT = ST_FALLBACK0 + KVA_REASON_COUNT
};

/* The measured durations (kva_stats' histograms), in stats.c's storage. */
enum kva__hist { H_CAPACITY_WAIT, H_LOOKUP, H_COPY, H_ADMISSION, H_COUNT };
#define KVA__HIST_WORDS (2 + KVA_HIST_BUCKETS) /* count, sum, per-bucket counts */

#define KVA__SHARDS KVA_FANIN_LANES /* producer-counter shards, one line each */

struct kva__shard {
	alignas(64) _Atomic uint64_t submitted;
};

#endif
