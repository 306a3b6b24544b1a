/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The engine's state, one struct for all of reservations/: types only, and
 * a few one-line inline accessors of its fields. It sits above the type
 * headers it embeds (events.h, record.h, held.h, counters.h) and below
 * every file with code that reads it. Who writes what: "shared" fields are
 * touched by any thread through atomics or lock-free structures;
 * "scheduler" fields only inside kva_step (and create/destroy). The files,
 * and the order calls go in (downward only), are listed in docs/design.md
 * ("Where the code lives").
 */
#ifndef KVA_RESERVATIONS_ENGINE_STATE_H
#define KVA_RESERVATIONS_ENGINE_STATE_H

#include <stdalign.h>
#include <stdatomic.h>

#include "cost_state.h"
#include "counters.h"
#include "events.h"
#include "held.h"
#include "record.h"
#include <kvadmit/lockfree/capacity.h>
#include <kvadmit/lockfree/fanin.h>
#include <kvadmit/lockfree/idmap.h>
#include <kvadmit/lockfree/inbox.h>
#include <kvadmit/lockfree/pagepool.h>
#include <kvadmit/lockfree/slab.h>
#include <kvadmit/lockfree/slab_grower.h>
#include <kvadmit/lockfree/timerwheel.h>
#include <kvadmit/lockfree/waitq.h>

enum kva__head_timer { HT_WAIT, HT_LOG, HT_REFRESH, HT_COUNT };

#define KVA__IDS_LEAVING 16 /* ended ids whose live-id entries go at the next settle */

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
	struct kva__levels *lv;             /* PRIORITY order: its levels (priority_levels.c) */
	struct kva__run_ent *run;           /* PRIORITY order: RUNNING, a max-heap (run_heap.c) */
	uint32_t n_run, n_run_live, run_stamp; /* entries, of them live, last stamp */
	struct kva_inbox_batch batch;       /* spliced from the inbox, not yet handled */
	struct kva_inbox local;             /* produced by the step's own callbacks */
	struct kva_inbox_batch local_batch; /* spliced from local, not yet handled */
	struct kva_inbox deferred;          /* cancels retried next step */
	struct kva__event *stalled;         /* needed memory: handled first next step */
	/* READY restores, a min-heap on the order they left the queue (ready_heap.c).
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
	 * (lifecycle.c), so each entry's cache miss overlaps other work. */
	uint64_t ids_leaving[KVA__IDS_LEAVING];
	uint32_t n_ids_leaving;
	/* selected checkpoint id -> first waiting slot (checkpoint_index.c) */
	struct kva_idmap ckpt;
	/* Every local entry of a live (ingested) record's manifest, selected
	 * or not (held.c). */
	struct kva__held_map held;
	/* Evictions whose sharers are still being looked at, any number of
	 * them sharing one budget per step (evict_walk.c), found by checkpoint
	 * id through evict_at (id -> index in evicting; checkpoint_index.c). */
	struct kva__evict **evicting;
	uint32_t n_evicting, evicting_cap;
	struct kva_idmap evict_at;
	uint32_t evict_budget; /* sharers this step may still look at */
	struct kva_slab_retired retired;    /* slots waiting for their grace period */
	struct kva_slab_retired cancels_retired; /* handled cancel events, likewise */
	uint32_t retired_seen, cancels_seen; /* their counts at the last step's end (lifecycle.c) */
	/* Retired requests' grants (grant.c): waiting for their grace period
	 * (oldest first), then ready for reuse (most recently retired on top). */
	struct kva__grant *grants_limbo, *grants_limbo_tail, *grants_spare;
	uint32_t n_grants_spare;
	struct kva_timerwheel wheel;
	/* The last KVA__AHEAD requests pushed to the back of the queue (a
	 * ring), so each push can leave its slot as the `ahead` hint of the
	 * one pushed KVA__AHEAD before it (waiting_queue.c). */
	struct kva__pushed {
		uint32_t slot, gen;
	} pushed[KVA__AHEAD];
	uint32_t n_pushed;
	struct kva__req *head_req; /* request the head timers belong to (head_timers.c) */
	struct kva__req *refresh_req; /* the last refresh went to it (head_timers.c) */
	uint64_t refresh_sent;        /* ... at this step clock */
	uint32_t reset_epoch;      /* bumped by each prefix-cache reset */
	bool head_recheck;         /* admission stopped at a head whose host
	                            * checkpoint a reset forgot (admit.c) */
	/* admission issued lookups (rule eviction-revalidates, admit.c) */
	bool admit_asked;
	uint64_t import_seq;       /* imports started from the head, in queue order */
	uint64_t budget_left;      /* prefill tokens this step may still start (token_budget.c) */
	struct kva_timer head_timer[HT_COUNT];
	uint64_t now;
	kva_plan *plan; /* the plan of the step in progress */
	/* A kva_step runs (engine.c: its CAS turns a second, concurrent one away) */
	atomic_bool in_step;
	bool was_too_small; /* the last step's plan was too small (log once per run) */
	bool contended;     /* this step gave up a reservation to contention (admit.c) */
	struct {
		uint64_t window; /* second of the step clock the count is for */
		uint32_t lines;
	} log_rate[KVA_LOGEV_COUNT]; /* per-event rate limit (stats.c) */
	bool alloc_failing; /* the last step-side allocation failed (log once per run) */
	struct kva__cost cost; /* KVA_POLICY_COST's rates (cost_model.c) */
};

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

/* The mark a host-stated checkpoint carries in reserved_ (rule
 * host-local-checkpoints):
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

#endif
