/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvadmit: admission engine for LLM serving under KV-cache pressure.
 *
 * One scheduler thread calls kva_step(); every other entry point may be
 * called from any thread. Time is always an argument (now_ns): the engine
 * never reads a clock. Control calls return 0 or a negative errno
 * (kva_strerror() explains); the library never exits, aborts or prints.
 *
 * Thread contract per call:
 *   kva_engine_create / kva_engine_destroy  nothing else may run on the engine
 *   kva_step                                 the scheduler thread only
 *   kva_submit, kva_cancel, kva_lookup_answer, kva_copy_done,
 *   kva_checkpoint_evicted, kva_local_checkpoint, kva_reset_prefix_cache,
 *   kva_stats_get, kva_query,
 *   kva_waiting_foreach                      any thread, lock-free
 *   kva_grow, kva_preempt, kva_finish        any thread; calls for the SAME
 *                                            handle are serialised by the host
 *                                            (as a serving engine does), and
 *                                            arbitrated against a concurrent
 *                                            kva_cancel by an atomic state CAS
 */
#ifndef KVADMIT_KVADMIT_H
#define KVADMIT_KVADMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvadmit/export.h"  /* KVA_API */
#include "kvadmit/version.h" /* KVA_VERSION_*, generated from project(VERSION) */

#ifdef __cplusplus
extern "C" {
#endif

#define KVA_MAX_CHECKPOINTS 8 /* entries in one manifest */
#define KVA_MAX_WORLD 32      /* ranks of one copy job (one 32-bit report mask) */

typedef struct kva_engine kva_engine;

/* A request incarnation: the host's id, the engine slot that holds its
 * record, and that slot's generation for this incarnation (odd; a slot's
 * generation changes whenever it is reused), so a reused id or slot is never
 * confused with its predecessor. Any-thread calls reach the record through
 * the slot directly: a bounds check and a generation compare.
 * ABI 0.2: `slot` replaced 0.1's reserved field (and tokens grew a slot). */
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

/* ---- capabilities (rule 21) ---------------------------------------- */
enum kva_feature {
	KVA_FEATURE_RESTORE_RESERVATION = 1, /* paired reservation, wait policy */
	KVA_FEATURE_BOUNDED_WAIT = 2,
	KVA_FEATURE_COLLECTIVE_COPY = 3, /* world_size > 1 */
	KVA_FEATURE_LOCAL_REVALIDATION = 4,
	KVA_FEATURE_RESET_RELEASES_READY = 5,
	KVA_FEATURE_CUDA_IMPORTER = 6, /* libkvadmit-cuda, built with CUDA, is in the process */
	KVA_FEATURE_HOST_LOCAL = 7,    /* kva_request.local, kva_local_checkpoint (rule 22) */
};
/* KVA_VERSION_NUMBER of the library actually loaded. */
KVA_API uint32_t kva_version(void);
KVA_API const char *kva_version_string(void);
KVA_API bool kva_has_feature(int feature);

/* ---- errors ---------------------------------------------------------- *
 * Negative errno values used by the API:
 *   -EINVAL   NULL or malformed argument (bad config, unsorted manifest ...)
 *   -ENOENT   unknown or ended handle / token
 *   -ESTALE   token of a lookup or copy attempt that is no longer current
 *   -EALREADY the operation was already done (double finish, rank reported
 *             twice, cancel already requested)
 * (A duplicate live id is not an error code: kva_submit accepts it and the
 * step ends it REJECTED, rule 14. Each call lists the codes it can return,
 * and tests/scenario/test_errno_contract.c checks both directions.)
 *   -EBUSY    the request is in a state that does not allow the call now
 *   -ENOSPC   kva_grow: no free credits
 *   -ERANGE   a number out of range (rank >= world_size, too many pages)
 *   -ENOMEM   allocation failed; nothing changed, the engine stays usable
 *   -ENODEV   (importers) no device
 */
KVA_API const char *kva_strerror(int err);

/* ---- configuration ---------------------------------------------------- */
enum kva_policy {
	KVA_POLICY_WAIT = 0,   /* a selected restore waits for capacity (rules 1-21) */
	KVA_POLICY_LEGACY = 1, /* refused restore is admitted to recompute */
};

enum kva_log_level { KVA_LOG_DEBUG = 0, KVA_LOG_INFO = 1, KVA_LOG_WARN = 2, KVA_LOG_ERROR = 3 };

enum kva_location { KVA_LOC_EXTERNAL = 0, KVA_LOC_LOCAL = 1 };

struct kva_copy_job;

/* Callbacks. For each: the thread that runs it, what it may call, what it
 * must not do. No callback runs inside an RCU read-side section or holds a
 * kvadmit lock, so none can deadlock the engine; but the step waits for each
 * callback it runs, so a slow one delays every admission. None may destroy
 * the engine, wait for an RCU grace period (synchronize_rcu, rcu_barrier) or
 * call kva_step: a re-entrant kva_step returns -EINVAL. */

/* Directory: asked once per request incarnation at ingest (and on refresh /
 * revalidation). Thread: the scheduler, inside kva_step. May call any
 * any-thread entry point, kva_lookup_answer() included (re-entrantly: the
 * answer is handled in the same step). Must not block (hand the token to
 * another thread and answer from there); a lookup never answered times out
 * (rule 3). */
typedef void (*kva_lookup_fn)(void *ctx, uint64_t prefix_key, uint32_t prompt_tokens,
                              kva_lookup_token token);
/* Importer: hands one rank's share of a copy job to an importer. Thread: the
 * scheduler, inside kva_step. May call kva_copy_done() re-entrantly (e.g. to
 * report a failure at once) or later from any thread. Must not block.
 * Returns 0, or a negative errno, in which case the engine treats that rank
 * as failed. job->pages stays valid until every rank of the attempt
 * reported. */
typedef int (*kva_import_fn)(void *ctx, kva_engine *e, const struct kva_copy_job *job);
/* Log line (level enum kva_log_level, text without a newline, valid only
 * during the call). Thread: the scheduler, inside kva_step. May call any
 * any-thread entry point; must not block for long (queue the line). */
typedef void (*kva_log_fn)(void *ctx, int level, const char *msg);

/* What a log line is about (kva_log_record.event), with what `value` holds. */
enum kva_log_event {
	KVA_LOGEV_WAIT_STARTED = 1, /* INFO: a restore waits for capacity; pages it needs */
	KVA_LOGEV_WAIT_ONGOING,     /* INFO: still waiting, each wait_log_interval_ns; ns waited */
	KVA_LOGEV_WAIT_EXPIRED,     /* WARN: bounded wait over, recomputes (rule 8); ns waited */
	KVA_LOGEV_FALLBACK,         /* DEBUG: takes the ordinary path; `reason` says why */
	KVA_LOGEV_LOOKUP_TIMEOUT,   /* INFO: the directory did not answer (rule 3); timeout ns */
	KVA_LOGEV_COPY_FAILED,      /* WARN: a copy attempt failed on a rank; the attempt */
	KVA_LOGEV_COPY_RETRY,       /* INFO: the same checkpoint again (rule 11); retry number */
	KVA_LOGEV_SHORTER,          /* INFO: retries spent, a shorter checkpoint; its position */
	KVA_LOGEV_DUPLICATE_ID,     /* WARN: a submit for a live id, REJECTED (rule 14); 0 */
	KVA_LOGEV_PLAN_TOO_SMALL,   /* ERROR: see kva_plan.too_small; what it needed */
	KVA_LOGEV_NO_MEMORY,        /* WARN: a step-side allocation failed, retried; 0 */
	KVA_LOGEV_INVARIANT,        /* ERROR: an internal invariant failed, a safe path taken; 0 */
	KVA_LOGEV_IMPORTER_REFUSED, /* WARN: an importer refused a rank (EIO: it is dead, e.g.
	                             * after a sticky CUDA error); the errno it returned */
	KVA_LOGEV_COUNT
};

/* One log line, structured. Lines that can repeat per request are rate
 * limited per event (at most 16 a second of the step's clock; the rest are
 * counted in kva_stats.logs_suppressed). */
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
/* Wakeup: the engine's inbox went from empty to non-empty. Thread: whichever
 * produced the event (kva_submit, kva_cancel, an answer, a copy report ...),
 * possibly several at once, possibly the scheduler itself. Must be cheap and
 * must not block or call back into kvadmit (it runs inside those calls):
 * signal a condition variable or write an eventfd the scheduler sleeps on. */
typedef void (*kva_wake_fn)(void *ctx);

typedef struct kva_importer_ref {
	kva_import_fn submit; /* NULL: the host runs the plan's copy jobs itself */
	void *ctx;
} kva_importer_ref;

/* Every field's valid range is given beside it; kva_engine_create returns
 * -EINVAL for anything outside (and -ENOMEM when total_pages' page-id array
 * cannot be allocated: 4 bytes a page). */
typedef struct kva_config {
	uint32_t total_pages;          /* 1..UINT32_MAX */
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
	/* Durations: 0 means never (unbounded), and so does any value whose
	 * deadline would pass UINT64_MAX ns (deadlines saturate, never wrap). */
	uint64_t lookup_timeout_ns;     /* per unanswered lookup; 0 = never */
	uint64_t max_restore_wait_ns;   /* bounded wait; 0 = unbounded */
	uint64_t wait_log_interval_ns;  /* at most one wait log per interval; 0 = never */
	uint64_t lookup_refresh_ns;     /* the blocked head restore refreshes its
	                                 * lookup this often; 0 = never */
	int policy;                     /* enum kva_policy: WAIT or LEGACY */
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
} kva_config;

/* Fills *cfg with defaults: timeouts (wait 60 s, log 30 s, lookup 5 s,
 * refresh 20 s), 1 rank, 2 retries, wait policy, INFO logging, 16-token
 * pages, 2048-token prefill chunks, 32 copy slots, 256 running. Only the
 * pool size (total_pages) has no default; set the rest to the host's. */
KVA_API void kva_config_default(kva_config *cfg);

/* Returns NULL and *err < 0 on failure: -EINVAL (a configuration it
 * refuses), -ENOMEM, -EAGAIN (no pthread key was left for threads' exit
 * hooks when the process's first engine was created: no engine can be
 * created in this process),
 * -ENOTSUP (a forked child that may only destroy: see "fork" above). */
KVA_API kva_engine *kva_engine_create(const kva_config *cfg, int *err);
/* Shutdown, in this order: (1) stop the directory (no kva_lookup_answer
 * after destroy begins) and the host's frontends (no submit, cancel, grow
 * ...); (2) quiesce importers (kva_importer_destroy, or the host's own: no
 * kva_copy_done after destroy begins; the copies' destination pages are the
 * host's to stop writing); (3) destroy. Requests may be in any state: their
 * records, pages and credits are freed with the engine. */
KVA_API void kva_engine_destroy(kva_engine *e);

/* One request the host has not been told ended (kva_engine_destroy_with):
 * state is where it was — WAITING (also submitted but not yet ingested),
 * IMPORTING, READY, RUNNING, or FINISHED / CANCELLED / REJECTED when its
 * terminal report was not handed out yet. */
struct kva_ended;
typedef void (*kva_unfinished_fn)(void *ctx, const struct kva_ended *r);
/* kva_engine_destroy, after calling fn once for every request whose terminal
 * report the host has not received (in no particular order), so a host can
 * release what its `user` pointers own without tracking handles itself. fn
 * runs on the calling thread and must not call kvadmit on this engine. */
KVA_API void kva_engine_destroy_with(kva_engine *e, kva_unfinished_fn fn, void *ctx);

/* ---- threads, signals, fork --------------------------------------------
 * Threads kvadmit starts block every signal, so a host's handlers never run
 * on them: the CPU and CUDA importers' workers, and liburcu's default
 * call_rcu thread, which the first kva_engine_create starts with every
 * signal blocked (liburcu 0.13 does not block them itself). If the host, or
 * another library, used liburcu's urcu-memb call_rcu before that, the
 * thread already exists with the mask of the thread that created it: block
 * signals around that first use, or create an engine first.
 *
 * RCU registration: kvadmit registers each thread that calls it with
 * liburcu's urcu-memb flavour on its first call and unregisters it when it
 * exits. A host thread that uses urcu-memb itself registers before its first
 * kvadmit call (kvadmit then leaves the registration to it), or not at all
 * (a thread kvadmit registered may use urcu-memb read-side sections as it
 * is, and may end that registration itself, e.g. at its end, but never
 * register again: liburcu's registry would hold the thread twice, or
 * kvadmit's exit hook would end the host's registration). A host may end and
 * renew its own registration at any time outside a kvadmit call: kvadmit
 * notices on its next call, and while the thread is not registered,
 * registers it only around each call. A call from a thread-specific-data
 * destructor is handled (the thread then registers only around each call),
 * except a thread's first kvadmit call made in the last of the C library's
 * destructor rounds (PTHREAD_DESTRUCTOR_ITERATIONS, 4 on glibc: a destructor
 * that re-armed itself three times): no exit hook can run after it, so that
 * thread would stay registered after it ended.
 *
 * Fork: a child forked without exec may use kvadmit only when the host calls
 * these around fork(), for example once at start-up:
 *     pthread_atfork(kva_atfork_prepare, kva_atfork_parent, kva_atfork_child);
 * They pause liburcu's call_rcu threads (urcu-memb call_rcu_before_fork and
 * after_fork_parent / after_fork_child, which they call: a host that also
 * uses liburcu's call_rcu must not register those as well), hold kvadmit's
 * own lock across the fork, and give the child a new call_rcu thread, with
 * every signal blocked. In the child: engines inherited from the parent may
 * be destroyed (kva_engine_destroy never waits for liburcu), or used on if
 * no other thread was inside a kvadmit call on them at the fork; new engines
 * may be created and used — but only if, at the fork, no thread other than
 * the forking one was registered with urcu-memb (liburcu's rule for a fork
 * without exec: the other readers' registry entries live in their TLS, which
 * the child's new threads reuse). A child forked while another thread was
 * registered through kvadmit may only destroy: kva_engine_create and
 * kva_step return -ENOTSUP there. kvadmit's lock is held from that decision
 * to the fork, so a thread registering or unregistering through kvadmit
 * meanwhile (its first call, its exit) waits until the fork is done. Threads
 * the host registered itself are its own to unregister before the fork.
 * Importers are not inherited (their threads stay in the parent): never
 * destroy them in the child, and destroy an inherited engine that refers to
 * one instead of stepping it. Without these calls only exec or _exit is
 * safe in the child. Call from the forking thread only. */
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
	uint16_t reserved_; /* 0: anything else is -EINVAL (room for a later meaning) */
	uint64_t id;
	uint64_t epoch;
} kva_checkpoint;

typedef struct kva_request {
	uint64_t id;            /* host's id; reusable once the incarnation ended */
	uint64_t prefix_key;    /* what the directory is asked about; 0 = no lookup */
	uint32_t prompt_tokens; /* > 0 */
	uint32_t flags;         /* reserved, 0 */
	void *user;             /* returned in kva_query and plans */
	/* Rule 22: the longest checkpoint of this prompt the host's own prefix
	 * cache holds (location KVA_LOC_LOCAL, compatible, position <=
	 * prompt_tokens); position 0 = none. A full hit (position ==
	 * prompt_tokens) is decided at once, without a lookup; a partial one is
	 * merged into the directory's answer (and used if the lookup misses or
	 * times out). ABI 0.2: new field. */
	struct kva_checkpoint local;
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
	KVA_REASON_LOOKUP_TIMEOUT,    /* rule 3 */
	KVA_REASON_RETRIES_EXHAUSTED, /* rule 11, no shorter checkpoint left */
	KVA_REASON_WAIT_EXPIRED,      /* rule 8 */
	KVA_REASON_TOO_LARGE,         /* rule 9 */
	KVA_REASON_LEGACY,            /* legacy policy: refused restore recomputes */
	KVA_REASON_COUNT
};
KVA_API const char *kva_reason_name(int reason);

/* Any thread: a slot from the calling thread's cache and one wait-free
 * enqueue, no lock (the cache refills in batches; a background thread keeps
 * slots ready, and a submit grows the slab by a chunk only when submits
 * outrun it, or while the engine holds fewer than 1,792 records). The
 * request is ingested at the next step. *out receives its handle.
 * 0, -EINVAL, -ERANGE (r->local past the prompt), -ENOMEM. */
KVA_API int kva_submit(kva_engine *e, const kva_request *r, kva_handle *out);

/* Any thread, O(1): the handle's slot, a generation compare, one small
 * allocation and one enqueue. Takes effect at the next step: credits and the
 * copy slot return at once, destination pages after their copy drains (rule 12).
 * 0, -EINVAL, -ENOENT (unknown / ended), -EALREADY, -ENOMEM. */
KVA_API int kva_cancel(kva_engine *e, kva_handle h);

/* ---- directory answers ------------------------------------------------ */

typedef struct kva_manifest {
	uint32_t count; /* 0 = miss; <= KVA_MAX_CHECKPOINTS */
	kva_checkpoint entries[KVA_MAX_CHECKPOINTS]; /* ascending position, unique ids */
} kva_manifest;

/* Any thread. 0, -EINVAL (bad manifest), -ENOENT (unknown incarnation),
 * -ESTALE (this lookup is no longer awaited: late or superseded; counted),
 * -ENOMEM. */
KVA_API int kva_lookup_answer(kva_engine *e, kva_lookup_token t, const kva_manifest *m);

/* Any thread (rule 22): the host's own prefix cache now holds checkpoint
 * `cp` of h's prompt (a longer local checkpoint appeared). Takes effect at
 * the next step, without a new lookup:
 *   WAITING   the selection is upgraded if cp is the longer compatible
 *             checkpoint (a recompute decision becomes a local admission;
 *             a full hit decides an outstanding lookup at once);
 *   IMPORTING, READY  accounted at admission: the local tokens first, the
 *             import for the rest (or only local if cp covers the import);
 *   RUNNING   kept: a preemption resumes from it without a new lookup.
 * Not longer than the checkpoint already stated: changes nothing. A
 * prefix-cache reset forgets the checkpoints stated before it was called,
 * in any state (a waiting restore that selected one looks up again when it
 * reaches the head, and the forgotten ones among the 31 behind it with it;
 * answers given from the lookup callback are handled in that step).
 * 0, -EINVAL (NULL, position 0, not local, not compatible), -ERANGE
 * (position past the prompt), -ENOENT (unknown or ended handle), -ENOMEM. */
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
	const uint32_t *pages;  /* destination page ids; valid until every rank reported */
} kva_copy_job;

/* Any thread. status 0 = success, anything else = failure. 0, -EINVAL,
 * -ERANGE (rank), -ENOENT (unknown incarnation), -ESTALE (not the current
 * attempt), -EALREADY (this rank already reported). */
KVA_API int kva_copy_done(kva_engine *e, kva_copy_token t, uint32_t rank, int status);

/* Any thread. A checkpoint was evicted (a local one, or one the store dropped:
 * a fleet directory reports both); waiting requests that selected it with an
 * older epoch look up again (rule 15). Imports already copying find out from
 * their copy. A local checkpoint a request holds without having selected it
 * (a shorter entry of its manifest, the host's own) is never taken later
 * from a copy older than the eviction: not as the shorter checkpoint after
 * failed copies, not after a lookup's miss or timeout, not on a
 * preemption's resume, and its tokens are not counted local when an import
 * is admitted; a request READY on such a local checkpoint looks up again.
 * 0, -EINVAL, -ENOMEM. */
KVA_API int kva_checkpoint_evicted(kva_engine *e, uint64_t checkpoint_id, uint64_t epoch);

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
	uint32_t npages;     /* pages handed over now: RESTORE / LOCAL the imported
	                      * or local prefix's (the rest of the prompt and the
	                      * decode headroom are reserved_pages, taken with
	                      * kva_grow); RECOMPUTE its first chunk's */
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

/* Caller-owned arrays; the step fills at most *_cap entries of each and
 * leaves the rest for the next step (nothing is dropped), with two
 * exceptions: `fallbacks` is informational (admissions carry their reason;
 * stats count every fallback), and a NULL `ended` means the host does not
 * want terminal reports: ended requests are then retired unlisted. */
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
	/* Prefill tokens this step may start (vLLM's max_num_batched_tokens
	 * less what running requests use); 0 = unlimited. Each admission costs
	 * the tokens it prefills first: its first chunk (min(prompt - cached
	 * prefix, prefill_chunk_tokens), at least 1), cut to what is left of
	 * the budget, with a recompute's first credit grant cut to match.
	 * Admissions stop when the budget is spent; an import started from the
	 * head costs nothing now (it prefills when admitted from READY). */
	uint32_t token_budget;
	/* The host preempted in this step: admit nothing new (vLLM schedules no
	 * waiting request in a step that preempted). Events, timers and copy
	 * dispatch still run; READY restores wait too. */
	bool hold_admissions;
	/* outputs about the step itself */
	uint32_t events;          /* inbox events drained */
	uint32_t timers_fired;
	uint32_t records_touched; /* request records read or written (rule 20) */
	bool head_blocked;        /* the FCFS head waits: for capacity, its lookup or
	                           * memory (not set when the plan's room, too_small,
	                           * or token_budget stopped admission) */
	/* Work is already waiting for the next step: an event whose producer
	 * was still linking it, one that needed memory, a deferred cancel, a
	 * report that did not fit `ended`. A host that sleeps until `wake`
	 * must step again first: those arrive without a wakeup. */
	bool backlog;
	/* Something could not be listed even in an empty plan: an admission
	 * needing more pages than pages_cap (or admitted_cap 0), a copy job with
	 * more ranks than copies_cap. It waits, holding what it owns, until the
	 * host passes bigger arrays (kva_plan_min_sizes); counted in
	 * kva_stats.plan_too_small and logged once per run of such steps. */
	bool too_small;
} kva_plan;

/* Array sizes with which every step can make progress for `cfg`: an
 * admission needs at most usable pages (total - decode watermark) and one
 * entry, a copy job world_size entries (with importers the copies list is
 * optional: a cap of 0 lists nothing, any other cap must hold world_size).
 * fallbacks may be 0; ended 0 only with a NULL `ended`. */
typedef struct kva_plan_sizes {
	uint32_t admitted, pages, copies, fallbacks, ended;
} kva_plan_sizes;
/* 0, -EINVAL (NULL or a configuration kva_engine_create refuses). */
KVA_API int kva_plan_min_sizes(const kva_config *cfg, kva_plan_sizes *out);

/* Scheduler thread only. Handle events, expire timers, admit. Returns the
 * number of admissions, or a negative errno (-EINVAL; -ENOTSUP in a forked
 * child that may only destroy, see "fork" above). Time going backwards
 * is treated as no time passing.
 * Never blocks and is bounded: it handles the events enqueued before it
 * began (plus what its own callbacks answer re-entrantly); an event whose
 * producer is still linking it, and everything after it, waits for the next
 * step. Callbacks (lookup, log, importer submit) run outside any RCU
 * read-side section. */
KVA_API int kva_step(kva_engine *e, uint64_t now_ns, kva_plan *plan);

/* ---- running requests -------------------------------------------------- */
/* Adds `pages` pages to a RUNNING request: first from its own reservation,
 * then from free credits (may go below the decode watermark). Writes the
 * page ids to ids_out (may be NULL). 0, -EINVAL (NULL engine, 0 pages),
 * -ENOSPC (nothing changed), -ENOENT, -EBUSY (not running, or the step is
 * cancelling it), -ERANGE, -ENOMEM.
 * kva_grow, kva_preempt and kva_finish race a kva_cancel through the state
 * CAS: before the step handles the cancel they win (a finish then ends the
 * request FINISHED); while the step cancels it they get -EBUSY, after it
 * -ENOENT. */
KVA_API int kva_grow(kva_engine *e, kva_handle h, uint32_t pages, uint32_t *ids_out);
/* RUNNING -> front of the waiting queue with a fresh lookup (or resuming from
 * the host's local checkpoint, rule 22); its pages and credits return at
 * once. 0, -EINVAL (NULL engine), -ENOENT, -EBUSY. */
KVA_API int kva_preempt(kva_engine *e, kva_handle h);
/* RUNNING -> FINISHED; pages and credits return at once. 0, -EINVAL (NULL
 * engine), -ENOENT, -EALREADY (already finished), -EBUSY (not running, or
 * cancelling). */
KVA_API int kva_finish(kva_engine *e, kva_handle h);
/* Forced prefix-cache reset (rule 17): READY-but-unadmitted imports give
 * their pages back and return to the front of the waiting queue with a fresh
 * lookup; imports still copying do so once their copy drains. Takes effect
 * at the next step. Local checkpoints the host stated before this call are
 * forgotten at once, whatever state their request is in (rule 22); those
 * stated after it hold. 0, -EINVAL. */
KVA_API int kva_reset_prefix_cache(kva_engine *e);

/* ---- introspection ------------------------------------------------------ */
/* Durations the engine measures with its own clock (the steps' now_ns), as
 * cumulative histograms: buckets[i] counts observations <= kva_histogram_
 * bounds()[i] ns; the last bucket is +Inf (== count). */
#define KVA_HIST_BUCKETS 14
typedef struct kva_histogram {
	uint64_t count, sum_ns;
	uint64_t buckets[KVA_HIST_BUCKETS];
} kva_histogram;
/* The upper bounds in ns (KVA_HIST_BUCKETS - 1 of them; +Inf after). */
KVA_API const uint64_t *kva_histogram_bounds(void);

typedef struct kva_stats {
	/* credits (rule: free + reserved + in_use + draining == total at quiescence) */
	uint64_t total_pages, free_pages, reserved_pages, in_use_pages, draining_pages;
	uint64_t free_copy_slots, free_run_slots;
	/* requests */
	uint64_t submitted, ingested, rejected, finished, cancelled, preempted;
	uint64_t waiting, importing, ready, running;
	uint64_t admitted_restore, admitted_local, admitted_recompute;
	/* rule 16: tokens of admitted requests, each counted once */
	uint64_t prompt_tokens_admitted, tokens_local, tokens_restored, tokens_recomputed;
	/* lookups */
	uint64_t lookups_issued, lookups_answered, lookups_timed_out, late_answers, refreshes,
		revalidations;
	/* copies */
	uint64_t copy_jobs, copy_attempts_failed, copy_retries, shorter_fallbacks, stale_copy_reports;
	/* fallback decisions by reason (index = enum kva_reason): a request may
	 * count more than once (again after a preemption) or be upgraded later
	 * (rule 22) or cancelled; recomputes by reason: kva_admission.reason */
	uint64_t fallbacks[KVA_REASON_COUNT];
	/* waiting for capacity */
	uint64_t restore_blocked_steps, wait_logs, wait_expired;
	uint64_t steps, events;
	/* restores waiting for capacity now (decided, checkpoint selected), and
	 * how long the blocked head restore has waited so far (0: none), as of
	 * the last step */
	uint64_t restores_waiting, capacity_wait_ns;
	/* rule 22: local checkpoints stated by the host after submit, and the
	 * selections they upgraded */
	uint64_t local_stated, local_upgrades;
	/* steps whose plan was too small for something (kva_plan.too_small),
	 * and allocations the step needed and could not get (retried later) */
	uint64_t plan_too_small, alloc_failures;
	/* log lines dropped by the per-event rate limit */
	uint64_t logs_suppressed;
	/* Measured from the step's clock: how long a head waited for capacity
	 * (admitted or given up); how long a decisive lookup took to be answered
	 * (only with a lookup_timeout_ns, whose deadline marks its start); how long
	 * a copy attempt took until its last rank reported; how long a request
	 * waited from ingest (or requeue) to admission. */
	kva_histogram capacity_wait, lookup_latency, copy_duration, time_to_admission;
} kva_stats;

/* Any thread; atomics only, never blocks. */
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
	/* A kva_cancel was accepted. Before the request is terminal: the step
	 * has not ended it yet (it ends CANCELLED unless a kva_finish wins the
	 * race first); it stays set once it ended. */
	uint8_t cancel_requested;
} kva_request_info;

/* Any thread, under RCU. 0, -EINVAL, -ENOENT. */
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

/* Any thread, lock-free: walks the waiting queue in admission order, at most
 * `max` requests (0 = all), without stopping the scheduler (admin dumps,
 * "position in queue"). fn runs inside an RCU read-side section: it must not
 * block, wait for a grace period or destroy the engine; it may call
 * kva_query (and other any-thread calls, but a kva_cancel or kva_submit
 * from fn may run the host's wake inside that section: the one exception to
 * "no callback runs inside an RCU read-side section"). The walk is a live view: a request admitted or cancelled
 * meanwhile may still be listed, one requeued to the front meanwhile may be
 * listed twice or missed; every listed one was waiting during the walk.
 * Returns the number of requests passed to fn, or -EINVAL. */
KVA_API int kva_waiting_foreach(kva_engine *e, kva_waiting_fn fn, void *ctx, size_t max);

/* Renders the stats as Prometheus text exposition (format 0.0.4): # HELP and
 * # TYPE for every family, counters ending in _total, gauges, histograms
 * in seconds, and kvadmit_build_info. Into buf, NUL-terminated, whole lines
 * only when truncated to len. Returns the length it needed. */
KVA_API size_t kva_stats_format(const kva_stats *s, char *buf, size_t len);

enum kva_metrics_format {
	KVA_METRICS_PROMETHEUS = 0, /* text 0.0.4, as kva_stats_format */
	KVA_METRICS_OPENMETRICS = 1, /* OpenMetrics 1.0 text, ending in # EOF */
};
/* kva_stats_format in the chosen format (enum kva_metrics_format); 0 for an
 * unknown format or NULL stats. */
KVA_API size_t kva_stats_format_as(const kva_stats *s, int format, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
