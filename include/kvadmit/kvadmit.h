/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvadmit: admission engine for LLM serving under KV-cache pressure.
 *
 * One scheduler thread calls kva_step(); time is always an argument (now_ns): the engine never
 * reads a clock. Control calls return 0 or -errno (kva_strerror); the library never exits,
 * aborts or prints. Each call's comment is its contract: summary, thread, cost, effect, returns;
 * rules are cited by name (docs/design.md, "Admission rules"). Each calling thread is registered
 * with urcu-memb; kvadmit's own threads block all signals (docs/embedding.md: threads and fork).
 *
 * Synchronisation:
 *   kva_engine_create, kva_engine_destroy[_with]  nothing else may run on the engine
 *   kva_step                                      the scheduler thread only (a second,
 *                                                 concurrent caller gets -EBUSY)
 *   kva_submit, kva_cancel, kva_lookup_answer, kva_copy_done, kva_checkpoint_evicted,
 *   kva_local_checkpoint, kva_reset_prefix_cache, kva_stats_get, kva_query,
 *   kva_waiting_foreach                           any thread, lock-free
 *   kva_grow, kva_preempt, kva_finish             any thread; the host serialises calls for one
 *                                                 handle; a state CAS arbitrates each against a
 *                                                 concurrent kva_cancel
 *   kva_atfork_*                                  the forking thread (pthread_atfork)
 */
#ifndef KVADMIT_KVADMIT_H
#define KVADMIT_KVADMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <kvadmit/export.h>  /* KVA_API */
#include <kvadmit/version.h> /* KVA_VERSION_*, generated from project(VERSION) */

#ifdef __cplusplus
extern "C" {
#endif

#define KVA_MAX_CHECKPOINTS 8 /* entries in one manifest */
#define KVA_MAX_WORLD 32      /* ranks of one copy job (one 32-bit report mask) */

typedef struct kva_engine kva_engine;

/* A request incarnation: the host's id, the slot holding its record, and that slot's generation
 * (odd; it changes whenever the slot is reused), so a reused id or slot never matches. */
typedef struct kva_handle {
	uint64_t id;
	uint32_t gen;
	uint32_t slot;
} kva_handle;

/* Names one directory lookup of one incarnation. */
typedef struct kva_lookup_token {
	uint64_t id;
	uint32_t gen;
	uint32_t seq;
	uint32_t slot;
	uint32_t reserved_;
} kva_lookup_token;

/* Names one copy attempt of one incarnation. */
typedef struct kva_copy_token {
	uint64_t id;
	uint32_t gen;
	uint32_t attempt;
	uint32_t slot;
	uint32_t reserved_;
} kva_copy_token;

/* ---- capabilities (rule capabilities) -------------------------------- */
enum kva_feature {
	KVA_FEATURE_RESTORE_RESERVATION = 1, /* paired reservation, wait policy */
	KVA_FEATURE_BOUNDED_WAIT = 2,
	KVA_FEATURE_COLLECTIVE_COPY = 3, /* world_size > 1 */
	KVA_FEATURE_LOCAL_REVALIDATION = 4,
	KVA_FEATURE_RESET_RELEASES_READY = 5,
	KVA_FEATURE_CUDA_IMPORTER = 6, /* libkvadmit-cuda, built with CUDA, is in the process */
	KVA_FEATURE_HOST_LOCAL = 7,    /* kva_request.local, kva_local_checkpoint */
	KVA_FEATURE_EXACT_BUDGET = 8,  /* kva_plan.token_budget_exact */
	KVA_FEATURE_CREDITS_ONLY = 9,  /* KVA_CONFIG_CREDITS_ONLY */
	KVA_FEATURE_COST_POLICY = 10,  /* KVA_POLICY_COST, kva_checkpoint.tier, kva_cost_config */
};
/* KVA_VERSION_NUMBER of the library actually loaded. */
KVA_API uint32_t kva_version(void);
KVA_API const char *kva_version_string(void);
KVA_API bool kva_has_feature(int feature);

/* ---- errors ---------------------------------------------------------- *
 *   -EINVAL   NULL or malformed argument (bad config, unsorted manifest ...)
 *   -ENOENT   unknown or ended handle / token
 *   -ESTALE   token of a lookup or copy attempt that is no longer current
 *   -EALREADY already done (double finish, rank reported twice, cancel already requested)
 *   -EBUSY    the request's state does not allow the call now
 *   -ENOSPC   kva_grow: no free credits
 *   -ERANGE   a number out of range (rank >= world_size, too many pages)
 *   -ENOMEM   allocation failed; nothing changed, the engine stays usable
 *   -ENODEV   (importers) no device
 * A duplicate live id is no error: the step ends it REJECTED (rule id-reuse). */
KVA_API const char *kva_strerror(int err);

/* ---- configuration ---------------------------------------------------- */
enum kva_policy {
	KVA_POLICY_WAIT = 0,   /* a selected restore waits for capacity */
	KVA_POLICY_LEGACY = 1, /* refused restore is admitted to recompute */
	/* The head's source (a checkpoint, or recomputing) by predicted time to first token, and
	 * a restore waiting for a copy slot recomputes once waiting makes it slower
	 * (KVA_REASON_COST; docs/design.md: cost policy). Capacity still waits as with WAIT; a
	 * recompute reserves its whole prompt and decode headroom, as a restore does. */
	KVA_POLICY_COST = 2,
};

/* Where a checkpoint lives (kva_checkpoint.tier); the cost policy learns one copy rate per
 * tier. UNKNOWN: the directory did not say. */
enum kva_tier {
	KVA_TIER_UNKNOWN = 0,
	KVA_TIER_GPU = 1,    /* another GPU's memory (NVLink, RDMA) */
	KVA_TIER_HOST = 2,   /* host DRAM */
	KVA_TIER_DISK = 3,   /* a local file or SSD */
	KVA_TIER_REMOTE = 4, /* a remote store over the network */
	KVA_TIER_COUNT
};

/* The order of the waiting queue (kva_config.order; docs/design.md: priority order). */
enum kva_order {
	KVA_ORDER_FCFS = 0,     /* submit order; kva_request.priority is ignored */
	KVA_ORDER_PRIORITY = 1, /* smallest (priority, arrival) first, vLLM's convention */
};

enum kva_log_level { KVA_LOG_DEBUG = 0, KVA_LOG_INFO = 1, KVA_LOG_WARN = 2, KVA_LOG_ERROR = 3 };

enum kva_location { KVA_LOC_EXTERNAL = 0, KVA_LOC_LOCAL = 1 };

/* kva_config.flags */
enum kva_config_flag {
	/* Credits only: kvadmit reserves, counts and orders pages but hands out no page ids. The
	 * host keeps its own block pool (vLLM's BlockPool, SGLang's token pool ...): an admission's
	 * npages, a kva_grow's pages and a copy job's npages say how many pages to take from it,
	 * and the host names its own pages when it runs the copy. Plans need no page array
	 * (kva_plan_min_sizes: pages 0), kva_admission.pages_off is 0, kva_copy_job.pages is NULL,
	 * kva_grow writes no ids. Importers are refused (-EINVAL): they copy into kvadmit's ids;
	 * the host runs plan->copies itself and reports kva_copy_done. */
	KVA_CONFIG_CREDITS_ONLY = 1u << 0,
};

struct kva_copy_job;

/* Callbacks run outside any RCU read-side section and kvadmit lock, but the step waits for each.
 * None may destroy the engine, wait for an RCU grace period or call kva_step (-EINVAL).
 * docs/design.md, "Contract edges": callbacks. */

/* kva_lookup_fn - ask the directory about one incarnation: at ingest, refresh, revalidation.
 * Thread: the scheduler, inside kva_step; must not block. Answer re-entrantly (handled in this
 * step) or later from any thread; unanswered, it times out (rule per-lookup-deadline). */
typedef void (*kva_lookup_fn)(void *ctx, uint64_t prefix_key, uint32_t prompt_tokens,
                              kva_lookup_token token);
/* kva_import_fn - hand one rank's share of a copy job to an importer.
 * Thread: the scheduler, inside kva_step; must not block. kva_copy_done may follow re-entrantly
 * or from any thread; job->pages stays valid until every rank of the attempt reported.
 * Returns: 0, or -errno: that rank failed. */
typedef int (*kva_import_fn)(void *ctx, kva_engine *e, const struct kva_copy_job *job);
/* kva_log_fn - one log line (enum kva_log_level; no newline; msg valid during the call).
 * Thread: the scheduler, inside kva_step; may call any-thread calls; must not block for long. */
typedef void (*kva_log_fn)(void *ctx, int level, const char *msg);

/* What a log line is about (kva_log_record.event), with what `value` holds. */
enum kva_log_event {
	KVA_LOGEV_WAIT_STARTED = 1, /* INFO: a restore waits for capacity; pages it needs */
	KVA_LOGEV_WAIT_ONGOING,     /* INFO: still waiting, each wait_log_interval_ns; ns waited */
	KVA_LOGEV_WAIT_EXPIRED,     /* WARN: bounded wait over, recomputes; ns waited */
	KVA_LOGEV_FALLBACK,         /* DEBUG: takes the ordinary path; `reason` says why */
	KVA_LOGEV_LOOKUP_TIMEOUT,   /* INFO: the directory did not answer; timeout ns */
	KVA_LOGEV_COPY_FAILED,      /* WARN: a copy attempt failed on a rank; the attempt */
	KVA_LOGEV_COPY_RETRY,       /* INFO: the same checkpoint again; retry number */
	KVA_LOGEV_SHORTER,          /* INFO: retries spent, a shorter checkpoint; its position */
	KVA_LOGEV_DUPLICATE_ID,     /* WARN: a submit for a live id, REJECTED; 0 */
	KVA_LOGEV_PLAN_TOO_SMALL,   /* ERROR: see kva_plan.too_small; what it needed */
	KVA_LOGEV_NO_MEMORY,        /* WARN: a step-side allocation failed, retried; 0 */
	KVA_LOGEV_INVARIANT,        /* ERROR: an internal invariant failed, a safe path taken; 0 */
	KVA_LOGEV_IMPORTER_REFUSED, /* WARN: an importer refused a rank (EIO: a dead importer);
	                             * the errno it returned */
	KVA_LOGEV_COST,             /* DEBUG: the cost policy chose a source; its predicted
	                             * time to first token in ns (the text gives every one) */
	KVA_LOGEV_COUNT
};

/* One log line, structured. Lines that can repeat per request are rate limited per event (16 a
 * second of the step's clock; the rest count in kva_stats.logs_suppressed). */
typedef struct kva_log_record {
	int level;          /* enum kva_log_level */
	int event;          /* enum kva_log_event */
	kva_handle handle;  /* the request it is about; id 0, gen 0 when none */
	int reason;         /* enum kva_reason where one applies, else 0 */
	uint64_t value;     /* per event, as listed above */
	const char *message; /* the same text kva_log_fn gets; valid during the call */
} kva_log_record;
/* Same thread and rules as kva_log_fn. */
typedef void (*kva_log_record_fn)(void *ctx, const kva_log_record *rec);
/* kva_wake_fn - the engine's inbox went from empty to non-empty.
 * Thread: the producer of the event (submit, cancel, answer, report ...), maybe several at once,
 * maybe the scheduler. Must be cheap, never block or call kvadmit: signal a condvar or eventfd. */
typedef void (*kva_wake_fn)(void *ctx);

/* The cost policy's model (KVA_POLICY_COST). Rates are learned as exponentially weighted
 * averages whose weight halves every `half_life` observations; the seeds stand until then. */
typedef struct kva_cost_config {
	uint64_t page_bytes;           /* KV bytes of one page over all ranks, > 0 with COST */
	uint64_t prefill_tokens_per_s; /* seed of the host's prefill rate, > 0 with COST */
	/* seeds per tier (index enum kva_tier): copy bandwidth (bytes/s, > 0 with COST) and
	 * setup latency (ns) */
	uint64_t tier_bytes_per_s[KVA_TIER_COUNT];
	uint64_t tier_setup_ns[KVA_TIER_COUNT];
	uint32_t half_life;  /* observations, 1..65535 with COST */
	/* A source other than the longest checkpoint is taken only when it is predicted faster
	 * by more than this share (percent, 0..1000), and a waiting restore recomputes once
	 * recomputing is faster by more than it. */
	uint32_t margin_pct;
	/* Seed of attention's share of a prefill: picoseconds per unit of end^2 - start^2 of the
	 * positions prefilled (causal attention over [start, end) grows with end^2 - start^2);
	 * 0: none until kva_prefill_observed_span measures it. Any value. */
	uint64_t prefill_attn_ps;
} kva_cost_config;

typedef struct kva_importer_ref {
	kva_import_fn submit; /* NULL: the host runs the plan's copy jobs itself */
	void *ctx;
} kva_importer_ref;

/* Valid ranges are given per field; kva_engine_create refuses anything outside. */
typedef struct kva_config {
	uint32_t total_pages;          /* 1..UINT32_MAX (the free pool is a bitmap: a bit a page) */
	uint32_t page_tokens;          /* tokens per page, 1..UINT32_MAX */
	uint32_t decode_reserve_pages; /* decode watermark, 0..total_pages - 1: reservations
	                                * keep this many free */
	uint32_t decode_headroom_pages; /* 0..total_pages: added to every restore's continuation */
	uint32_t prefill_chunk_tokens;  /* 1..UINT32_MAX: first credit grant of an ordinary
	                                 * admission (capped at the usable pool) */
	uint16_t copy_slots;            /* concurrent copy jobs, 1..65535 */
	uint16_t max_running;           /* IMPORTING + READY + RUNNING, 1..65535 */
	uint32_t world_size;            /* ranks per copy job, 1..KVA_MAX_WORLD */
	uint32_t max_copy_retries;      /* 0..UINT32_MAX: retries of one checkpoint before a
	                                 * shorter one */
	/* Durations: 0, or a deadline past UINT64_MAX ns (they saturate), means never. */
	uint64_t lookup_timeout_ns;     /* per unanswered lookup; 0 = never */
	uint64_t max_restore_wait_ns;   /* bounded wait; 0 = unbounded */
	uint64_t wait_log_interval_ns;  /* at most one wait log per interval; 0 = never */
	uint64_t lookup_refresh_ns;     /* the blocked head restore refreshes its
	                                 * lookup this often; 0 = never */
	int policy;                     /* enum kva_policy: WAIT or LEGACY */
	/* enum kva_config_flag bits; 0 (kva_config_default): kvadmit hands out page ids. Sits in
	 * what was padding: the struct keeps 0.2.0's size and layout. */
	uint32_t flags;
	kva_lookup_fn lookup;           /* NULL: every request is a miss */
	void *lookup_ctx;
	/* one per rank (index = rank): all of ranks 0..world_size-1 set, or none */
	kva_importer_ref importers[KVA_MAX_WORLD];
	kva_log_fn log;                 /* NULL: no text log lines */
	void *log_ctx;
	uint64_t start_ns; /* any: the clock's value at creation */
	kva_wake_fn wake;  /* NULL: the host polls kva_step */
	void *wake_ctx;
	/* Structured log lines, beside or instead of `log`; NULL: none. */
	kva_log_record_fn log_record;
	void *log_record_ctx;
	/* Least level (enum kva_log_level) passed to either log callback;
	 * kva_config_default sets INFO; 0 (a zeroed config) passes DEBUG too. */
	int log_level;
	/* enum kva_order; 0 (a zeroed or default config) is FCFS. Under PRIORITY a record costs
	 * 16 bytes more (docs/design.md: priority order). */
	int order;
	/* PRIORITY only: kva_plan.preempt_hint is set when the head, blocked for capacity, has a
	 * priority at least this much smaller than kva_preempt_candidate's; 0..INT32_MAX, 0 means
	 * any smaller priority (SGLang's preemption threshold). */
	int32_t preempt_threshold;
	/* PRIORITY only, aging: a waiting request ranks one priority level sooner per interval it
	 * has waited, counted from its arrival; 0 = no aging (the default). */
	uint64_t aging_interval_ns;
	/* KVA_POLICY_COST's model (kva_config_default: 16 KiB pages, 8,000 prefill tokens/s,
	 * GPU 25 GB/s, host 10 GB/s, disk 1.5 GB/s, remote 3 GB/s, unknown 3 GB/s; 1 ms setup;
	 * half-life 8; margin 10%). Read only under COST. */
	kva_cost_config cost;
} kva_config;

/* kva_config_default - all but total_pages: wait 60 s, log 30 s, lookup 5 s, refresh 20 s, 1 rank,
 * 2 retries, WAIT, INFO, 16-token pages, 2048-token chunks, 32 copy slots, 256 running. */
KVA_API void kva_config_default(kva_config *cfg);

/* kva_engine_create - an engine for cfg.  Thread: any.
 * Returns: the engine, or NULL and *err: -EINVAL, -ENOMEM, -EAGAIN (no pthread key was left when
 * the process's first engine was created), -ENOTSUP (a forked child that may only destroy). */
KVA_API kva_engine *kva_engine_create(const kva_config *cfg, int *err);
/* kva_engine_destroy - free the engine and its requests, in any state.
 * Thread: any, alone: first stop the directory and frontends, then destroy the importers (no
 * answer or copy report once destroy begins). */
KVA_API void kva_engine_destroy(kva_engine *e);

/* A request the host was not told ended (kva_engine_destroy_with), in the state it was in:
 * WAITING (submitted too), IMPORTING, READY, RUNNING, or terminal, its report not handed out. */
struct kva_ended;
typedef void (*kva_unfinished_fn)(void *ctx, const struct kva_ended *r);
/* kva_engine_destroy_with - kva_engine_destroy, after fn(ctx, r) once for each such request, in
 * no order.  Thread: as destroy; fn runs on it and must not call kvadmit on this engine. */
KVA_API void kva_engine_destroy_with(kva_engine *e, kva_unfinished_fn fn, void *ctx);

/* kva_atfork_prepare/_parent/_child - keep kvadmit usable in a child forked without exec.
 * Thread: the forking thread: pthread_atfork(kva_atfork_prepare, kva_atfork_parent,
 * kva_atfork_child). Without them only exec or _exit is safe in the child; a child forked while
 * another thread was registered with urcu-memb may only destroy (docs/embedding.md: Fork). */
KVA_API void kva_atfork_prepare(void);
KVA_API void kva_atfork_parent(void);
KVA_API void kva_atfork_child(void);

/* ---- requests --------------------------------------------------------- */
/* A checkpoint of a prompt prefix: in a directory's answer, or one the host
 * knows locally (kva_request.local, kva_local_checkpoint). */
typedef struct kva_checkpoint {
	uint32_t position; /* prefix tokens covered, > 0 */
	uint8_t location;  /* enum kva_location */
	uint8_t compatible;
	uint8_t tier;      /* enum kva_tier (< KVA_TIER_COUNT, else -EINVAL); 0: unknown */
	uint8_t reserved_; /* 0: anything else is -EINVAL (room for a later meaning) */
	uint64_t id;
	uint64_t epoch;
} kva_checkpoint;

typedef struct kva_request {
	uint64_t id;            /* host's id; reusable once the incarnation ended */
	uint64_t prefix_key;    /* what the directory is asked about; 0 = no lookup */
	uint32_t prompt_tokens; /* > 0 */
	uint32_t flags;         /* reserved, 0 */
	void *user;             /* returned in kva_query and plans */
	/* The longest checkpoint of this prompt in the host's own prefix cache (LOCAL, compatible,
	 * position <= prompt_tokens; 0 = none): a full hit is admitted without a lookup, a partial
	 * one joins the answer and survives a miss or timeout (rule host-local-checkpoints). */
	struct kva_checkpoint local;
	/* KVA_ORDER_PRIORITY: smaller is admitted sooner (vLLM's convention); ignored under FCFS. */
	int32_t priority;
	uint32_t reserved_; /* 0 */
	/* The host's arrival time in ns on the steps' clock, which orders requests of one priority
	 * (earlier first); 0 = the step that ingests it. PRIORITY only. */
	uint64_t arrival_ns;
} kva_request;

enum kva_state {
	KVA_STATE_WAITING = 1,
	KVA_STATE_IMPORTING = 2,
	KVA_STATE_READY = 3,
	KVA_STATE_RUNNING = 4,
	KVA_STATE_FINISHED = 5,
	KVA_STATE_CANCELLED = 6,
	KVA_STATE_REJECTED = 7, /* duplicate live id found at ingest */
};

/* Why a request takes the ordinary (recompute) path. */
enum kva_reason {
	KVA_REASON_NONE = 0,
	KVA_REASON_NO_KEY,            /* no prefix key: nothing to look up */
	KVA_REASON_MISS,              /* directory has nothing usable */
	KVA_REASON_INCOMPATIBLE,      /* only incompatible checkpoints */
	KVA_REASON_LOOKUP_TIMEOUT,    /* rule per-lookup-deadline */
	KVA_REASON_RETRIES_EXHAUSTED, /* rule retry-then-shorter, no shorter checkpoint left */
	KVA_REASON_WAIT_EXPIRED,      /* rule bounded-wait */
	KVA_REASON_TOO_LARGE,         /* rule too-large-at-once */
	KVA_REASON_LEGACY,            /* legacy policy: refused restore recomputes */
	KVA_REASON_COST,              /* cost policy: recomputing is predicted faster */
	KVA_REASON_COUNT
};
KVA_API const char *kva_reason_name(int reason);

/* kva_submit - queue a request; the next step ingests it.
 * Thread: any, lock-free.  Cost: a slot from the thread's cache and one wait-free enqueue.
 * Returns: 0 and *out = its handle, -EINVAL, -ERANGE (r->local past the prompt), -ENOMEM. */
KVA_API int kva_submit(kva_engine *e, const kva_request *r, kva_handle *out);

/* kva_cancel - end a request CANCELLED at the next step (rule cancel-any-thread).
 * Thread: any.  Cost: O(1).  Effect: credits and copy slot return then, pages once their copy
 * drained.  Returns: 0, -EINVAL, -ENOENT (unknown or ended), -EALREADY, -ENOMEM. */
KVA_API int kva_cancel(kva_engine *e, kva_handle h);

/* ---- directory answers ------------------------------------------------ */

typedef struct kva_manifest {
	uint32_t count; /* 0 = miss; <= KVA_MAX_CHECKPOINTS */
	kva_checkpoint entries[KVA_MAX_CHECKPOINTS]; /* ascending position, unique ids */
} kva_manifest;

/* kva_lookup_answer - the directory's answer to lookup t.  Thread: any.
 * Returns: 0, -EINVAL (bad manifest), -ENOENT (unknown incarnation), -ESTALE (late or
 * superseded; counted), -ENOMEM. */
KVA_API int kva_lookup_answer(kva_engine *e, kva_lookup_token t, const kva_manifest *m);

/* kva_local_checkpoint - the host's own prefix cache now holds cp for h's prompt.  Thread: any.
 * Effect: next step, no lookup: a longer cp upgrades a waiting request's selection, counts at an
 * import's admission, is a running one's resume point (rule host-local-checkpoints).
 * Returns: 0, -EINVAL (NULL, position 0, not local/compatible), -ERANGE, -ENOENT, -ENOMEM. */
KVA_API int kva_local_checkpoint(kva_engine *e, kva_handle h, const kva_checkpoint *cp);

/* ---- copies ------------------------------------------------------------ */
typedef struct kva_copy_job {
	kva_copy_token token;
	kva_handle handle;
	uint32_t rank;          /* this rank's share */
	uint32_t world_size;
	uint64_t checkpoint_id;
	uint64_t checkpoint_epoch;
	uint32_t position;      /* checkpoint tokens */
	uint32_t npages;        /* destination pages = ceil(position / page_tokens) */
	const uint32_t *pages;  /* destination page ids; valid until every rank reported.
	                         * NULL with KVA_CONFIG_CREDITS_ONLY: the host's own npages */
} kva_copy_job;

/* kva_copy_done - one rank's result of copy attempt t (status 0: success).  Thread: any.
 * Returns: 0, -EINVAL, -ERANGE (rank), -ENOENT (unknown incarnation), -ESTALE (not the current
 * attempt), -EALREADY (this rank already reported). */
KVA_API int kva_copy_done(kva_engine *e, kva_copy_token t, uint32_t rank, int status);

/* kva_checkpoint_evicted - checkpoint_id is gone as of epoch.
 * Thread: any.  Cost: O(1); sharers are revalidated over later steps.
 * Effect: waiting requests that selected it at an older epoch look up again; no older copy of a
 * local entry is taken later (rule eviction-revalidates).  Returns: 0, -EINVAL, -ENOMEM. */
KVA_API int kva_checkpoint_evicted(kva_engine *e, uint64_t checkpoint_id, uint64_t epoch);

/* kva_prefill_observed - the host prefilled `tokens` in `ns` (e.g. one step's prefill tokens
 * and its duration): the cost policy's prefill rate learns from it, as a rate per token (a
 * report without positions sets the attention term to 0).  Thread: any.
 * Cost: O(1), two atomic adds; the next step folds them in.  Returns: 0, -EINVAL (NULL, ns 0). */
KVA_API int kva_prefill_observed(kva_engine *e, uint64_t tokens, uint64_t ns);
/* kva_prefill_observed_span - kva_prefill_observed, with `square_span` the sum over the
 * step's prefill chunks [start, end) of end^2 - start^2 (saturating at UINT64_MAX): the cost
 * policy then learns a prefill time of a × tokens + b × square_span, so that a long prompt's
 * prefill is not predicted at a short one's rate (docs/design.md, cost policy).
 * Thread: any.  Cost: O(1), three atomic adds.  Returns: 0, -EINVAL (NULL, ns 0). */
KVA_API int kva_prefill_observed_span(kva_engine *e, uint64_t tokens, uint64_t square_span,
                                      uint64_t ns);

/* ---- the step ---------------------------------------------------------- */
enum kva_how {
	KVA_ADMIT_RESTORE = 1,   /* external checkpoint imported */
	KVA_ADMIT_LOCAL = 2,     /* local checkpoint reused */
	KVA_ADMIT_RECOMPUTE = 3, /* ordinary prefill */
};

typedef struct kva_admission {
	kva_handle handle;
	void *user;
	uint8_t how;            /* enum kva_how */
	uint8_t reason;         /* enum kva_reason when how == RECOMPUTE */
	uint16_t reserved_;
	uint32_t local_tokens;    /* prefix served from a local checkpoint */
	uint32_t restored_tokens; /* prefix imported from an external checkpoint */
	uint32_t recompute_tokens;
	uint32_t pages_off;  /* first of this admission's pages in plan->pages */
	uint32_t npages;     /* pages handed over now: RESTORE / LOCAL the prefix's (the rest
	                      * of the prompt and the decode headroom are reserved_pages, taken
	                      * with kva_grow); RECOMPUTE its first chunk's (under
	                      * KVA_POLICY_COST the rest of its prompt and the headroom are
	                      * reserved_pages too) */
	uint32_t reserved_pages; /* credits still owned for kva_grow (continuation) */
} kva_admission;

typedef struct kva_fallback {
	kva_handle handle;
	uint8_t reason; /* enum kva_reason */
} kva_fallback;

typedef struct kva_ended {
	kva_handle handle;
	void *user;
	uint8_t state; /* FINISHED, CANCELLED or REJECTED */
} kva_ended;

/* Caller-owned arrays; the step fills at most *_cap entries of each and leaves the rest for the
 * next step, except `fallbacks` (informational: stats count every one) and a NULL `ended` (ended
 * requests then retire unlisted). */
#define KVA_TOKEN_BUDGET_UNLIMITED UINT32_MAX /* kva_plan.token_budget: no budget */

typedef struct kva_plan {
	kva_admission *admitted;
	uint32_t admitted_cap, n_admitted;
	uint32_t *pages;
	uint32_t pages_cap, n_pages;
	kva_copy_job *copies;
	uint32_t copies_cap, n_copies;
	kva_fallback *fallbacks;
	uint32_t fallbacks_cap, n_fallbacks;
	kva_ended *ended;
	uint32_t ended_cap, n_ended;
	/* inputs about the step (left as they are by kva_step) */
	/* Prefill tokens this step may start (vLLM's max_num_batched_tokens less what running
	 * requests use). KVA_TOKEN_BUDGET_UNLIMITED: no budget. 0: no budget too, unless
	 * token_budget_exact. An admission costs its first chunk after its cached prefix, at least
	 * 1; an import started from the head costs nothing until admitted from READY
	 * (docs/design.md: per-step budget). */
	uint32_t token_budget;
	/* The host preempted in this step: admit nothing new, READY restores included. */
	bool hold_admissions;
	/* true: token_budget is what is left, 0 included (0 tokens left: nothing that prefills is
	 * admitted). false (a zeroed plan, 0.2.0's first meaning): 0 = unlimited. Sits in what
	 * was padding: the struct's size and layout are those of 0.2.0 before it. */
	bool token_budget_exact;
	/* outputs about the step itself */
	uint32_t events;          /* inbox events drained */
	uint32_t timers_fired;
	uint32_t records_touched; /* request records read or written (rule step-never-walks-queue) */
	bool head_blocked;        /* the FCFS head waits: for capacity, its lookup or
	                           * memory (not set when the plan's room, too_small,
	                           * or token_budget stopped admission) */
	/* Work is already waiting for the next step, with no wakeup to come: a host that sleeps
	 * until `wake` steps again first. */
	bool backlog;
	/* Something cannot be listed even in an empty plan; it waits, holding what it owns, until
	 * the arrays reach kva_plan_min_sizes (counted in kva_stats.plan_too_small, logged). */
	bool too_small;
	/* PRIORITY: the head waits for capacity and outranks kva_preempt_candidate by at least
	 * kva_config.preempt_threshold: preempting that request would let it in. */
	bool preempt_hint;
} kva_plan;

/* Array sizes with which every step can progress: an admission needs at most the usable pages
 * and one entry, a copy job world_size entries (with importers, copies_cap 0 lists none).
 * fallbacks may be 0; ended 0 only with a NULL `ended`. */
typedef struct kva_plan_sizes {
	uint32_t admitted, pages, copies, fallbacks, ended;
} kva_plan_sizes;
/* kva_plan_min_sizes - those sizes for cfg.  Returns: 0, -EINVAL (NULL, or a refused cfg). */
KVA_API int kva_plan_min_sizes(const kva_config *cfg, kva_plan_sizes *out);

/* kva_step - handle events, expire timers, admit, dispatch copies; fill plan.
 * Thread: the scheduler only: one kva_step at a time per engine, from any thread in turn (each
 * step sees everything the one before it did).  Cost: never blocks; bounded by the events enqueued
 * before it began, the expired timers and the plan (rule step-never-walks-queue).
 * Returns: admissions, -EINVAL (also re-entrant, from a callback of the step), -EBUSY (another
 * thread's kva_step runs on e now: nothing done, plan untouched), -ENOTSUP (a forked child that
 * only destroys). */
KVA_API int kva_step(kva_engine *e, uint64_t now_ns, kva_plan *plan);

/* ---- running requests -------------------------------------------------- */
/* kva_grow - add pages to a RUNNING request, ids to ids_out (may be NULL; not written with
 * KVA_CONFIG_CREDITS_ONLY): its reservation first, then free credits, even below the watermark.  Thread: any, one call per handle at a time.
 * Cost: lock-free; a page-id take that other threads keep crowding out is tried 16 times.
 * Returns: 0, -EINVAL (NULL engine, 0 pages), -ENOSPC (nothing changed: no free credits, or
 * other threads kept the page pool contended through all 16 takes), -ENOENT, -EBUSY (not
 * running, or cancelling), -ERANGE, -ENOMEM. */
KVA_API int kva_grow(kva_engine *e, kva_handle h, uint32_t pages, uint32_t *ids_out);
/* kva_preempt - RUNNING to the front of the waiting queue, with a fresh lookup or the host's
 * local checkpoint.  Thread: any, one call per handle at a time.  Effect: pages and credits
 * return at once.  Returns: 0, -EINVAL (NULL engine), -ENOENT, -EBUSY. */
KVA_API int kva_preempt(kva_engine *e, kva_handle h);
/* kva_set_priority - h's priority becomes p (KVA_ORDER_PRIORITY).  Thread: any.
 * Cost: O(1) here (one event, a slot of the engine's own event slab, no heap allocation); the
 * step moves a waiting request to the back of its new level, O(1) while that level is in use
 * (docs/design.md: priority order).  Effect: next step; a request
 * already admitted keeps running, and p counts when it is preempted.
 * Returns: 0, -EINVAL (NULL engine, or FCFS order), -ENOENT (unknown or ended), -ENOMEM. */
KVA_API int kva_set_priority(kva_engine *e, kva_handle h, int32_t p);
/* kva_preempt_candidate - the RUNNING request with the largest (priority, arrival), vLLM's
 * victim, as of the last step.  Thread: the scheduler, between steps.  Cost: O(1).
 * Returns: 0 and *out, -EINVAL (NULL, or FCFS order), -ENOENT (nothing running). */
KVA_API int kva_preempt_candidate(kva_engine *e, kva_handle *out);
/* kva_finish - RUNNING to FINISHED.  Thread: any, one call per handle at a time.
 * Effect: pages and credits return at once.  Returns: 0, -EINVAL (NULL engine), -ENOENT,
 * -EALREADY (already finished), -EBUSY (not running, or cancelling). */
KVA_API int kva_finish(kva_engine *e, kva_handle h);
/* kva_reset_prefix_cache - forced reset (rule reset-returns-ready).  Thread: any.
 * Effect: local checkpoints stated before it are forgotten at once; at the next step READY imports
 * give their pages back and requeue at the front for a fresh lookup (copying ones once drained).
 * Returns: 0, -EINVAL. */
KVA_API int kva_reset_prefix_cache(kva_engine *e);

/* ---- introspection ------------------------------------------------------ */
/* Durations the engine measures with its own clock (the steps' now_ns), as cumulative
 * histograms: buckets[i] counts observations <= kva_histogram_bounds()[i] ns; the last bucket
 * is +Inf (== count). */
#define KVA_HIST_BUCKETS 14
#define KVA_PRIORITY_CLASSES 8 /* kva_stats.admitted_by_priority */
typedef struct kva_histogram {
	uint64_t count, sum_ns;
	uint64_t buckets[KVA_HIST_BUCKETS];
} kva_histogram;
/* The upper bounds in ns (KVA_HIST_BUCKETS - 1 of them; +Inf after). */
KVA_API const uint64_t *kva_histogram_bounds(void);

typedef struct kva_stats {
	/* credits (free + reserved + in_use + draining == total at quiescence) */
	uint64_t total_pages, free_pages, reserved_pages, in_use_pages, draining_pages;
	uint64_t free_copy_slots, free_run_slots;
	/* requests */
	uint64_t submitted, ingested, rejected, finished, cancelled, preempted;
	uint64_t waiting, importing, ready, running;
	uint64_t admitted_restore, admitted_local, admitted_recompute;
	/* tokens of admitted requests, each counted once (rule tokens-counted-once) */
	uint64_t prompt_tokens_admitted, tokens_local, tokens_restored, tokens_recomputed;
	/* lookups */
	uint64_t lookups_issued, lookups_answered, lookups_timed_out, late_answers, refreshes,
		revalidations;
	/* copies */
	uint64_t copy_jobs, copy_attempts_failed, copy_retries, shorter_fallbacks, stale_copy_reports;
	/* fallback decisions by reason (index = enum kva_reason): a request may count more than
	 * once (after a preemption) or be upgraded or cancelled later */
	uint64_t fallbacks[KVA_REASON_COUNT];
	/* waiting for capacity */
	uint64_t restore_blocked_steps, wait_logs, wait_expired;
	uint64_t steps, events;
	/* as of the last step: restores waiting for capacity (checkpoint selected), and how long
	 * the blocked head restore has waited (0: none) */
	uint64_t restores_waiting, capacity_wait_ns;
	/* local checkpoints stated after submit, and the selections they upgraded */
	uint64_t local_stated, local_upgrades;
	/* steps whose plan was too small (kva_plan.too_small); step allocations that failed */
	uint64_t plan_too_small, alloc_failures;
	/* log lines dropped by the per-event rate limit */
	uint64_t logs_suppressed;
	/* A head's capacity wait (admitted or given up); a decisive lookup's answer time (only
	 * with lookup_timeout_ns, whose deadline marks its start); a copy attempt until its last
	 * rank reported; ingest (or requeue) to admission. */
	kva_histogram capacity_wait, lookup_latency, copy_duration, time_to_admission;
	/* KVA_ORDER_PRIORITY (0 under FCFS), as of the last step: priority levels in use, and of the
	 * most and the least urgent level its key (the priority, aged: docs/design.md), its waiting
	 * requests and how long its first one has waited. */
	uint64_t priority_levels;
	int64_t urgent_level, lax_level;
	uint64_t urgent_waiting, lax_waiting, urgent_wait_ns, lax_wait_ns;
	/* Admissions by priority class, a bounded label set: [0] < 0, [1] 0, [2] 1, [3] 2-3, [4] 4-7,
	 * [5] 8-15, [6] 16-255, [7] >= 256. */
	uint64_t admitted_by_priority[KVA_PRIORITY_CLASSES];
	/* Cost policy (KVA_POLICY_COST): heads it decided to restore as selected, to restore a
	 * shorter or other-tier checkpoint than the longest, to recompute (also counted in
	 * fallbacks[KVA_REASON_COST]); the learned rates (seeds until measured): the host's
	 * prefill rate, per tier (enum kva_tier) copy bandwidth and setup latency, and the mean
	 * time between copy-slot releases (0: none seen). */
	uint64_t cost_restores, cost_other_checkpoint, cost_recomputes;
	uint64_t prefill_tokens_per_s;
	uint64_t tier_bytes_per_s[KVA_TIER_COUNT], tier_setup_ns[KVA_TIER_COUNT];
	uint64_t copy_slot_interval_ns;
	/* Cost policy: the learned attention term of a prefill (kva_cost_config.prefill_attn_ps's
	 * unit; the seed until measured). */
	uint64_t prefill_attn_ps;
} kva_stats;

/* kva_stats_get - a snapshot of the counters.  Thread: any; atomics only, never blocks. */
KVA_API void kva_stats_get(const kva_engine *e, kva_stats *out);

typedef struct kva_request_info {
	kva_handle handle;
	void *user;
	uint8_t state;      /* enum kva_state */
	uint8_t reason;     /* fallback reason if the request took the ordinary path */
	uint8_t selected_location; /* of the selected checkpoint, if any */
	uint8_t has_selection;
	uint32_t prompt_tokens;
	uint32_t selected_position;
	uint32_t pages_held;     /* pages materialised (imported / grown) */
	uint32_t pages_reserved; /* credits owned but not yet materialised */
	uint32_t lookups;        /* directory lookups issued for it */
	uint32_t copy_attempts;
	/* A kva_cancel was accepted; the step may not have handled it yet (a racing kva_finish
	 * can still win). Stays set once the request ended. */
	uint8_t cancel_requested;
	/* Cost model predictions of its time to first token from now (ns; learned rates): of
	 * restoring its selected checkpoint (0: none selected) and of recomputing. */
	uint64_t predicted_restore_ns, predicted_recompute_ns;
} kva_request_info;

/* kva_query - h's state and numbers.  Thread: any, under RCU.  Returns: 0, -EINVAL, -ENOENT. */
KVA_API int kva_query(kva_engine *e, kva_handle h, kva_request_info *out);

/* One waiting request, as kva_waiting_foreach sees it. */
typedef struct kva_waiting_info {
	kva_handle handle;
	void *user;
	uint32_t position; /* 0 = the head */
	uint32_t prompt_tokens;
} kva_waiting_info;

/* Return non-zero to stop the walk. */
typedef int (*kva_waiting_fn)(void *ctx, const kva_waiting_info *w);

/* kva_waiting_foreach - fn for each waiting request in admission order, at most max (0: all).
 * Thread: any, lock-free; a live view (docs/design.md: walking the waiting queue). fn runs in
 * an RCU read-side section: no blocking, grace period or destroy; kva_query is fine.
 * Returns: requests passed to fn, or -EINVAL. */
KVA_API int kva_waiting_foreach(kva_engine *e, kva_waiting_fn fn, void *ctx, size_t max);

/* kva_stats_format - s as Prometheus text 0.0.4 (HELP, TYPE, histograms in seconds, build_info)
 * into buf, NUL-terminated, whole lines only.  Returns: the length it needed. */
KVA_API size_t kva_stats_format(const kva_stats *s, char *buf, size_t len);

enum kva_metrics_format {
	KVA_METRICS_PROMETHEUS = 0, /* text 0.0.4, as kva_stats_format */
	KVA_METRICS_OPENMETRICS = 1, /* OpenMetrics 1.0 text, ending in # EOF */
};
/* kva_stats_format_as - kva_stats_format in enum kva_metrics_format `format`.
 * Returns: as kva_stats_format; 0 for an unknown format or NULL stats. */
KVA_API size_t kva_stats_format_as(const kva_stats *s, int format, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
