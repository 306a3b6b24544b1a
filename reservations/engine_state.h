/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The engine's state, one struct for all of reservations/ (no code: it sits
 * below every file that uses it). Who writes what:
 * "shared" fields are touched by any thread through atomics or lock-free
 * structures; "scheduler" fields only inside kva_step (and create/destroy).
 * Each file's header says which functions it owns; the layering (calls go
 * downward only) is: engine.c -> admit.c -> copy.c -> lookup.c -> record.c,
 * with intake.c (the any-thread entry points) -> record.c, and stats.c a leaf.
 */
#ifndef KVA_RESERVATIONS_ENGINE_STATE_H
#define KVA_RESERVATIONS_ENGINE_STATE_H

#include <stdalign.h>

#include <kvadmit/lockfree/fanin.h>
#include <kvadmit/lockfree/idmap.h>
#include <kvadmit/lockfree/pagepool.h>
#include "record.h"
#include <kvadmit/lockfree/slab_grower.h>

enum kva__head_timer { HT_WAIT, HT_LOG, HT_REFRESH, HT_COUNT };

/* The measured durations (kva_stats' histograms), in stats.c's storage. */
enum kva__hist { H_CAPACITY_WAIT, H_LOOKUP, H_COPY, H_ADMISSION, H_COUNT };
#define KVA__HIST_WORDS (2 + KVA_HIST_BUCKETS) /* count, sum, per-bucket counts */

#define KVA__SHARDS KVA_FANIN_LANES /* producer-counter shards, one line each */
#define KVA__IDS_LEAVING 16         /* ended ids whose live-id entries go at the next settle */

/* The engine's record of the local checkpoints live requests hold in their
 * manifests (record.c, "held local checkpoints"): how many entries hold one
 * id, and the newest epoch an eviction of it reported. */
struct kva__held {
	uint64_t evicted;   /* newest eviction epoch reported while held; 0 none */
	uint32_t refs;      /* entries of live records' manifests with this id */
	uint32_t next_free; /* on the free list: the next one's index + 1 */
};
#define KVA__HELD_CHUNK 1024u /* trackers allocated together, never moved */

struct kva__shard {
	alignas(64) _Atomic uint64_t submitted;
};

struct kva_engine {
	kva_config cfg;
	uint32_t usable_pages; /* total - decode watermark: larger reservations are TOO_LARGE */
	uint32_t page_shift;   /* log2(page_tokens) when a power of two, else 0 */

	/* shared with any thread */
	struct kva_fanin inbox; /* one lane per producer thread */
	struct kva_capacity cap;
	struct kva_pagepool pool;
	_Atomic uint8_t reset_requested;
	struct kva__event reset_ev;
	_Atomic uint32_t reset_calls; /* kva_reset_prefix_cache calls (kva__host_mark) */
	alignas(64) _Atomic uint64_t st[ST_COUNT];
	_Atomic uint64_t hist[H_COUNT][KVA__HIST_WORDS]; /* scheduler writes, any thread reads */
	struct kva__shard shard[KVA__SHARDS]; /* what producers count */
	struct kva_slab slab;                 /* the records (own cache lines inside) */
	struct kva_slab cancels;              /* cancel events (struct kva__cancel) */
	/* the process's slab grower keeps both ready ahead (engine.c) */
	struct kva_slab_ahead slab_ahead, cancels_ahead;

	/* scheduler thread only */
	alignas(64) struct kva_waitq waitq; /* RCU readers: kva_waiting_foreach */
	struct kva_inbox_batch batch;       /* spliced from the inbox, not yet handled */
	struct kva_inbox local;             /* produced by the step's own callbacks */
	struct kva_inbox_batch local_batch; /* spliced from local, not yet handled */
	struct kva_inbox deferred;          /* cancels retried next step */
	struct kva__event *stalled;         /* needed memory: handled first next step */
	/* READY restores, a min-heap on the order they left the queue (admit.c).
	 * Room for max_running: each holds a running credit. */
	struct kva__ready_ent {
		uint64_t seq; /* the grant's queue_seq, here so a sift reads no record */
		struct kva__req *r;
	} *ready;
	uint32_t n_ready;
	struct cds_list_head ended;         /* terminal, not yet reported */
	struct cds_list_head copy_pending;  /* need a copy job dispatched */
	struct kva_idmap live_ids;          /* id -> slot of its live incarnation */
	/* Ended ids still in live_ids: removed together at the next settle
	 * (record.c), so each entry's cache miss overlaps other work. */
	uint64_t ids_leaving[KVA__IDS_LEAVING];
	uint32_t n_ids_leaving;
	struct kva_idmap ckpt;              /* selected checkpoint id -> first waiting slot */
	/* Local checkpoint id -> its tracker's index, for every local entry of
	 * a live (ingested) record's manifest, selected or not (record.c). */
	struct kva_idmap held;
	struct kva__held **held_chunks;
	uint32_t n_held_chunks, held_chunks_cap;
	uint32_t held_free, n_held_free; /* free trackers: index + 1 list, its length */
	/* Evictions whose sharers are still being looked at, any number of
	 * them sharing one budget per step (lookup.c), found by checkpoint id
	 * through evict_at (id -> index in evicting). */
	struct kva__evict **evicting;
	uint32_t n_evicting, evicting_cap;
	struct kva_idmap evict_at;
	uint32_t evict_budget; /* sharers this step may still look at */
	struct kva_slab_retired retired;    /* slots waiting for their grace period */
	struct kva_slab_retired cancels_retired; /* handled cancel events, likewise */
	uint32_t retired_seen, cancels_seen; /* their counts at the last step's end (record.c) */
	/* Retired requests' grants (record.c): waiting for their grace period
	 * (oldest first), then ready for reuse (most recently retired on top). */
	struct kva__grant *grants_limbo, *grants_limbo_tail, *grants_spare;
	uint32_t n_grants_spare;
	struct kva_timerwheel wheel;
	/* The last KVA__AHEAD requests pushed to the back of the queue (a
	 * ring), so each push can leave its slot as the `ahead` hint of the
	 * one pushed KVA__AHEAD before it (admit.c). */
	struct kva__pushed {
		uint32_t slot, gen;
	} pushed[KVA__AHEAD];
	uint32_t n_pushed;
	struct kva__req *head_req; /* request the head timers belong to */
	struct kva__req *refresh_req; /* the last refresh went to it (admit.c) */
	uint64_t refresh_sent;        /* ... at this step clock */
	uint32_t reset_epoch;      /* bumped by each prefix-cache reset */
	bool head_recheck;         /* admission stopped at a head whose host
	                            * checkpoint a reset forgot (admit.c) */
	bool admit_asked;          /* admission issued lookups (rule 15, admit.c) */
	uint64_t import_seq;       /* imports started from the head, in queue order */
	uint64_t budget_left;      /* prefill tokens this step may still start (admit.c) */
	struct kva_timer head_timer[HT_COUNT];
	uint64_t now;
	kva_plan *plan; /* the plan of the step in progress */
	bool in_step;
	bool was_too_small; /* the last step's plan was too small (log once per run) */
	bool contended;     /* this step gave up a reservation to contention (admit.c) */
	struct {
		uint64_t window; /* second of the step clock the count is for */
		uint32_t lines;
	} log_rate[KVA_LOGEV_COUNT]; /* per-event rate limit (stats.c) */
	bool alloc_failing; /* the last step-side allocation failed (log once per run) */
};

/* Statistics: kva__st_add (any thread, an atomic add) for the counters
 * other threads also write (running, preempted, reserved/in-use pages, late
 * answers, stale copies); kva__st_add_single_writer for the rest, which
 * only the scheduler thread writes. */
static inline void kva__st_add(kva_engine *e, enum kva__stat s, int64_t v)
{
	atomic_fetch_add_explicit(&e->st[s], (uint64_t)v, memory_order_relaxed);
}
/* For counters only the scheduler thread writes: no locked instruction on
 * the step's path (readers still load them atomically). */
static inline void kva__st_add_single_writer(kva_engine *e, enum kva__stat s, uint64_t v)
{
	atomic_store_explicit(&e->st[s], atomic_load_explicit(&e->st[s], memory_order_relaxed) + v,
	                      memory_order_relaxed);
}
static inline uint64_t kva__st_get(const kva_engine *e, enum kva__stat s)
{
	return atomic_load_explicit(&e->st[s], memory_order_relaxed);
}

/* Pages for `tokens`; a shift for the usual power-of-two page sizes (a
 * 64-bit division costs as much as a blocked step's other work). */
static inline uint32_t kva__pages_for(const kva_engine *e, uint64_t tokens)
{
	uint64_t t = tokens + e->cfg.page_tokens - 1;
	return (uint32_t)(e->page_shift || e->cfg.page_tokens == 1 ? t >> e->page_shift
	                                                          : t / e->cfg.page_tokens);
}

/* A deadline `d` ns after `t`, saturated: a sum past UINT64_MAX means never
 * (a timer at UINT64_MAX does not fire), not a moment in the past. */
static inline uint64_t kva__after(uint64_t t, uint64_t d)
{
	return d > UINT64_MAX - t ? UINT64_MAX : t + d;
}

/* The mark a host-stated checkpoint carries in reserved_ (rule 22):
 * KVA__CK_HOST and the count of prefix-cache resets the host had called
 * when it stated it (15 bits). A reset forgets every checkpoint stated
 * before it without walking the records that hold one: an entry whose mark
 * is not the current one is ignored wherever it is read (lookup.c). A
 * request would have to outlive 32,768 resets for a stale mark to match.
 * Relaxed: a reset called before the statement (in the host's order) is
 * seen by coherence; one racing it from another thread may go either way,
 * as its reset event does. */
static inline uint16_t kva__host_mark(kva_engine *e)
{
	uint32_t n = atomic_load_explicit(&e->reset_calls, memory_order_relaxed);
	return (uint16_t)(KVA__CK_HOST | (n & 0x7fffu) << 1);
}

static inline void kva__touched(kva_engine *e)
{
	if (e->plan)
		e->plan->records_touched++;
}

/* stats.c: one log line about `r` (NULL: none) through the host's text and
 * structured callbacks (scheduler thread), rate limited per event. */
void kva__log(kva_engine *e, int level, int event, const struct kva__req *r, int reason,
              uint64_t value, const char *fmt, ...) __attribute__((format(printf, 7, 8)));
/* stats.c: one measured duration (scheduler thread). */
void kva__observe(kva_engine *e, enum kva__hist h, uint64_t ns);

/* stats.c: the plan cannot hold what `what` (request id) needs even when
 * empty: flag, count (once per step) and log (once per run of such steps). */
void kva__plan_too_small(kva_engine *e, uint64_t id, const char *what, uint32_t need);
/* stats.c: a step-side allocation failed (retried later): count; log once
 * per run of failures. kva__alloc_ok ends the run. */
void kva__alloc_failed(kva_engine *e, uint64_t id, const char *what);
static inline void kva__alloc_ok(kva_engine *e) { e->alloc_failing = false; }

/* Whether an empty plan could hold an admission of `pages` pages. */
static inline bool kva__plan_could_hold(const kva_plan *p, uint32_t pages)
{
	return p->admitted_cap > 0 && p->pages_cap >= pages;
}

#endif
