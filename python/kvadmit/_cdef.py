# SPDX-License-Identifier: Apache-2.0
"""The C declarations the binding uses: include/kvadmit/kvadmit.h and importer.h
(CPU importer part), written out for cffi's ABI mode.

cffi computes every struct layout from these declarations, so they must
match the headers exactly. tests/test_layout.py makes sure they do: it
generates a C program from this text (sizeof, offsetof and the type of every
field, every enumerator's value, every function's prototype), compiles it
against the real headers and compares, and it checks that the headers have
no struct field, enumerator or KVA_API function this text lacks. Change the
header, then this file; the test names what differs.
"""

CDEF = r"""
#define KVA_MAX_CHECKPOINTS 8
#define KVA_MAX_WORLD 32
#define KVA_HIST_BUCKETS 14
#define KVA_PRIORITY_CLASSES 8

typedef struct kva_engine kva_engine;

typedef struct kva_handle {
    uint64_t id;
    uint32_t gen;
    uint32_t slot;
} kva_handle;

typedef struct kva_lookup_token {
    uint64_t id;
    uint32_t gen;
    uint32_t seq;
    uint32_t slot;
    uint32_t reserved_;
} kva_lookup_token;

typedef struct kva_copy_token {
    uint64_t id;
    uint32_t gen;
    uint32_t attempt;
    uint32_t slot;
    uint32_t reserved_;
} kva_copy_token;

enum kva_feature {
    KVA_FEATURE_RESTORE_RESERVATION = 1,
    KVA_FEATURE_BOUNDED_WAIT = 2,
    KVA_FEATURE_COLLECTIVE_COPY = 3,
    KVA_FEATURE_LOCAL_REVALIDATION = 4,
    KVA_FEATURE_RESET_RELEASES_READY = 5,
    KVA_FEATURE_CUDA_IMPORTER = 6,
    KVA_FEATURE_HOST_LOCAL = 7,
    KVA_FEATURE_EXACT_BUDGET = 8,
    KVA_FEATURE_CREDITS_ONLY = 9,
    KVA_FEATURE_COST_POLICY = 10,
};
uint32_t kva_version(void);
const char *kva_version_string(void);
bool kva_has_feature(int feature);
const char *kva_strerror(int err);

enum kva_policy { KVA_POLICY_WAIT = 0, KVA_POLICY_LEGACY = 1, KVA_POLICY_COST = 2 };
enum kva_tier {
    KVA_TIER_UNKNOWN = 0,
    KVA_TIER_GPU = 1,
    KVA_TIER_HOST = 2,
    KVA_TIER_DISK = 3,
    KVA_TIER_REMOTE = 4,
    KVA_TIER_COUNT = 5
};
enum kva_order { KVA_ORDER_FCFS = 0, KVA_ORDER_PRIORITY = 1 };
enum kva_log_level { KVA_LOG_DEBUG = 0, KVA_LOG_INFO = 1, KVA_LOG_WARN = 2, KVA_LOG_ERROR = 3 };
enum kva_location { KVA_LOC_EXTERNAL = 0, KVA_LOC_LOCAL = 1 };
enum kva_config_flag { KVA_CONFIG_CREDITS_ONLY = 1 };

struct kva_copy_job;
typedef void (*kva_lookup_fn)(void *ctx, uint64_t prefix_key, uint32_t prompt_tokens,
                              kva_lookup_token token);
typedef int (*kva_import_fn)(void *ctx, kva_engine *e, const struct kva_copy_job *job);
typedef void (*kva_log_fn)(void *ctx, int level, const char *msg);

enum kva_log_event {
    KVA_LOGEV_WAIT_STARTED = 1,
    KVA_LOGEV_WAIT_ONGOING = 2,
    KVA_LOGEV_WAIT_EXPIRED = 3,
    KVA_LOGEV_FALLBACK = 4,
    KVA_LOGEV_LOOKUP_TIMEOUT = 5,
    KVA_LOGEV_COPY_FAILED = 6,
    KVA_LOGEV_COPY_RETRY = 7,
    KVA_LOGEV_SHORTER = 8,
    KVA_LOGEV_DUPLICATE_ID = 9,
    KVA_LOGEV_PLAN_TOO_SMALL = 10,
    KVA_LOGEV_NO_MEMORY = 11,
    KVA_LOGEV_INVARIANT = 12,
    KVA_LOGEV_IMPORTER_REFUSED = 13,
    KVA_LOGEV_COST = 14,
    KVA_LOGEV_COUNT = 15
};

typedef struct kva_log_record {
    int level;
    int event;
    kva_handle handle;
    int reason;
    uint64_t value;
    const char *message;
} kva_log_record;
typedef void (*kva_log_record_fn)(void *ctx, const kva_log_record *rec);
typedef void (*kva_wake_fn)(void *ctx);

typedef struct kva_cost_config {
    uint64_t page_bytes;
    uint64_t prefill_tokens_per_s;
    uint64_t tier_bytes_per_s[5];
    uint64_t tier_setup_ns[5];
    uint32_t half_life;
    uint32_t margin_pct;
    uint64_t prefill_attn_ps;
} kva_cost_config;

typedef struct kva_importer_ref {
    kva_import_fn submit;
    void *ctx;
} kva_importer_ref;

typedef struct kva_config {
    uint32_t total_pages;
    uint32_t page_tokens;
    uint32_t decode_reserve_pages;
    uint32_t decode_headroom_pages;
    uint32_t prefill_chunk_tokens;
    uint16_t copy_slots;
    uint16_t max_running;
    uint32_t world_size;
    uint32_t max_copy_retries;
    uint64_t lookup_timeout_ns;
    uint64_t max_restore_wait_ns;
    uint64_t wait_log_interval_ns;
    uint64_t lookup_refresh_ns;
    int policy;
    uint32_t flags;
    kva_lookup_fn lookup;
    void *lookup_ctx;
    kva_importer_ref importers[32];
    kva_log_fn log;
    void *log_ctx;
    uint64_t start_ns;
    kva_wake_fn wake;
    void *wake_ctx;
    kva_log_record_fn log_record;
    void *log_record_ctx;
    int log_level;
    int order;
    int32_t preempt_threshold;
    uint64_t aging_interval_ns;
    kva_cost_config cost;
} kva_config;

void kva_config_default(kva_config *cfg);
kva_engine *kva_engine_create(const kva_config *cfg, int *err);
void kva_engine_destroy(kva_engine *e);

struct kva_ended;
typedef void (*kva_unfinished_fn)(void *ctx, const struct kva_ended *r);
void kva_engine_destroy_with(kva_engine *e, kva_unfinished_fn fn, void *ctx);

void kva_atfork_prepare(void);
void kva_atfork_parent(void);
void kva_atfork_child(void);

typedef struct kva_checkpoint {
    uint32_t position;
    uint8_t location;
    uint8_t compatible;
    uint8_t tier;
    uint8_t reserved_;
    uint64_t id;
    uint64_t epoch;
} kva_checkpoint;

typedef struct kva_request {
    uint64_t id;
    uint64_t prefix_key;
    uint32_t prompt_tokens;
    uint32_t flags;
    void *user;
    struct kva_checkpoint local;
    int32_t priority;
    uint32_t reserved_;
    uint64_t arrival_ns;
} kva_request;

enum kva_state {
    KVA_STATE_WAITING = 1,
    KVA_STATE_IMPORTING = 2,
    KVA_STATE_READY = 3,
    KVA_STATE_RUNNING = 4,
    KVA_STATE_FINISHED = 5,
    KVA_STATE_CANCELLED = 6,
    KVA_STATE_REJECTED = 7,
};

enum kva_reason {
    KVA_REASON_NONE = 0,
    KVA_REASON_NO_KEY = 1,
    KVA_REASON_MISS = 2,
    KVA_REASON_INCOMPATIBLE = 3,
    KVA_REASON_LOOKUP_TIMEOUT = 4,
    KVA_REASON_RETRIES_EXHAUSTED = 5,
    KVA_REASON_WAIT_EXPIRED = 6,
    KVA_REASON_TOO_LARGE = 7,
    KVA_REASON_LEGACY = 8,
    KVA_REASON_COST = 9,
    KVA_REASON_COUNT = 10
};
const char *kva_reason_name(int reason);

int kva_submit(kva_engine *e, const kva_request *r, kva_handle *out);
int kva_cancel(kva_engine *e, kva_handle h);

typedef struct kva_manifest {
    uint32_t count;
    kva_checkpoint entries[8];
} kva_manifest;

int kva_lookup_answer(kva_engine *e, kva_lookup_token t, const kva_manifest *m);
int kva_local_checkpoint(kva_engine *e, kva_handle h, const kva_checkpoint *cp);

typedef struct kva_copy_job {
    kva_copy_token token;
    kva_handle handle;
    uint32_t rank;
    uint32_t world_size;
    uint64_t checkpoint_id;
    uint64_t checkpoint_epoch;
    uint32_t position;
    uint32_t npages;
    const uint32_t *pages;
} kva_copy_job;

int kva_copy_done(kva_engine *e, kva_copy_token t, uint32_t rank, int status);
int kva_prefill_observed(kva_engine *e, uint64_t tokens, uint64_t ns);
int kva_prefill_observed_span(kva_engine *e, uint64_t tokens, uint64_t square_span,
                              uint64_t ns);
int kva_checkpoint_evicted(kva_engine *e, uint64_t checkpoint_id, uint64_t epoch);

enum kva_how {
    KVA_ADMIT_RESTORE = 1,
    KVA_ADMIT_LOCAL = 2,
    KVA_ADMIT_RECOMPUTE = 3,
};

typedef struct kva_admission {
    kva_handle handle;
    void *user;
    uint8_t how;
    uint8_t reason;
    uint16_t reserved_;
    uint32_t local_tokens;
    uint32_t restored_tokens;
    uint32_t recompute_tokens;
    uint32_t pages_off;
    uint32_t npages;
    uint32_t reserved_pages;
} kva_admission;

typedef struct kva_fallback {
    kva_handle handle;
    uint8_t reason;
} kva_fallback;

typedef struct kva_ended {
    kva_handle handle;
    void *user;
    uint8_t state;
} kva_ended;

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
    uint32_t token_budget;
    bool hold_admissions;
    bool token_budget_exact;
    uint32_t events;
    uint32_t timers_fired;
    uint32_t records_touched;
    bool head_blocked;
    bool backlog;
    bool too_small;
    bool preempt_hint;
} kva_plan;

typedef struct kva_plan_sizes {
    uint32_t admitted, pages, copies, fallbacks, ended;
} kva_plan_sizes;
int kva_plan_min_sizes(const kva_config *cfg, kva_plan_sizes *out);

int kva_step(kva_engine *e, uint64_t now_ns, kva_plan *plan);

int kva_grow(kva_engine *e, kva_handle h, uint32_t pages, uint32_t *ids_out);
int kva_preempt(kva_engine *e, kva_handle h);
int kva_set_priority(kva_engine *e, kva_handle h, int32_t p);
int kva_preempt_candidate(kva_engine *e, kva_handle *out);
int kva_finish(kva_engine *e, kva_handle h);
int kva_reset_prefix_cache(kva_engine *e);

typedef struct kva_histogram {
    uint64_t count, sum_ns;
    uint64_t buckets[14];
} kva_histogram;
const uint64_t *kva_histogram_bounds(void);

typedef struct kva_stats {
    uint64_t total_pages, free_pages, reserved_pages, in_use_pages, draining_pages;
    uint64_t free_copy_slots, free_run_slots;
    uint64_t submitted, ingested, rejected, finished, cancelled, preempted;
    uint64_t waiting, importing, ready, running;
    uint64_t admitted_restore, admitted_local, admitted_recompute;
    uint64_t prompt_tokens_admitted, tokens_local, tokens_restored, tokens_recomputed;
    uint64_t lookups_issued, lookups_answered, lookups_timed_out, late_answers, refreshes,
        revalidations;
    uint64_t copy_jobs, copy_attempts_failed, copy_retries, shorter_fallbacks, stale_copy_reports;
    uint64_t fallbacks[10];
    uint64_t restore_blocked_steps, wait_logs, wait_expired;
    uint64_t steps, events;
    uint64_t restores_waiting, capacity_wait_ns;
    uint64_t local_stated, local_upgrades;
    uint64_t plan_too_small, alloc_failures;
    uint64_t logs_suppressed;
    kva_histogram capacity_wait, lookup_latency, copy_duration, time_to_admission;
    uint64_t priority_levels;
    int64_t urgent_level, lax_level;
    uint64_t urgent_waiting, lax_waiting, urgent_wait_ns, lax_wait_ns;
    uint64_t admitted_by_priority[KVA_PRIORITY_CLASSES];
    uint64_t cost_restores, cost_other_checkpoint, cost_recomputes;
    uint64_t prefill_tokens_per_s;
    uint64_t tier_bytes_per_s[5], tier_setup_ns[5];
    uint64_t copy_slot_interval_ns;
    uint64_t prefill_attn_ps;
} kva_stats;

void kva_stats_get(const kva_engine *e, kva_stats *out);

typedef struct kva_request_info {
    kva_handle handle;
    void *user;
    uint8_t state;
    uint8_t reason;
    uint8_t selected_location;
    uint8_t has_selection;
    uint32_t prompt_tokens;
    uint32_t selected_position;
    uint32_t pages_held;
    uint32_t pages_reserved;
    uint32_t lookups;
    uint32_t copy_attempts;
    uint8_t cancel_requested;
    uint64_t predicted_restore_ns, predicted_recompute_ns;
} kva_request_info;

int kva_query(kva_engine *e, kva_handle h, kva_request_info *out);

typedef struct kva_waiting_info {
    kva_handle handle;
    void *user;
    uint32_t position;
    uint32_t prompt_tokens;
} kva_waiting_info;

typedef int (*kva_waiting_fn)(void *ctx, const kva_waiting_info *w);
int kva_waiting_foreach(kva_engine *e, kva_waiting_fn fn, void *ctx, size_t max);

size_t kva_stats_format(const kva_stats *s, char *buf, size_t len);
enum kva_metrics_format {
    KVA_METRICS_PROMETHEUS = 0,
    KVA_METRICS_OPENMETRICS = 1,
};
size_t kva_stats_format_as(const kva_stats *s, int format, char *buf, size_t len);

/* ---- importer.h: the CPU importer ---- */
typedef int (*kva_resolve_fn)(void *ctx, uint64_t checkpoint_id, uint64_t epoch, uint32_t rank,
                              const void **src, size_t *bytes);
typedef void (*kva_report_fn)(void *ctx, kva_engine *e, const kva_copy_job *job, int status);

typedef struct kva_importer_stats {
    uint64_t jobs_submitted;
    uint64_t jobs_refused;
    uint64_t jobs_ok;
    uint64_t jobs_failed;
    uint64_t jobs_injected;
    uint64_t jobs_cancelled;
    uint64_t pages_copied;
    uint64_t bytes_copied;
    uint64_t copy_calls;
    uint64_t busy_ns;
    uint64_t in_flight;
} kva_importer_stats;

typedef struct kva_cpu_importer kva_cpu_importer;

typedef struct kva_cpu_importer_config {
    uint32_t threads;
    uint32_t rank;
    size_t page_bytes;
    void *dest_base;
    uint32_t dest_pages;
    kva_resolve_fn resolve;
    void *resolve_ctx;
    kva_report_fn report;
    void *report_ctx;
    uint64_t latency_ns;
    uint64_t bandwidth_bytes_per_s;
    double fail_rate;
    uint64_t seed;
} kva_cpu_importer_config;

void kva_cpu_importer_config_default(kva_cpu_importer_config *cfg);
kva_cpu_importer *kva_cpu_importer_create(const kva_cpu_importer_config *cfg, int *err);
void kva_cpu_importer_destroy(kva_cpu_importer *imp);
kva_importer_ref kva_cpu_importer_ref(kva_cpu_importer *imp);
int kva_cpu_importer_wait_idle(kva_cpu_importer *imp, uint64_t timeout_ns);
void kva_cpu_importer_stats(const kva_cpu_importer *imp, kva_importer_stats *out);
void kva_cpu_importer_set_failures(kva_cpu_importer *imp, double fail_rate, uint64_t seed);
bool kva_cpu_importer_fails(uint64_t seed, double fail_rate, kva_copy_token token, uint32_t rank);
"""

# The CUDA importer lives in its own library (libkvadmit-cuda); the binding
# only asks whether it is there (kvadmit.cuda_importer_supported()).
CUDA_CDEF = r"""
bool kva_cuda_importer_supported(void);
"""

# KVA_API functions of the headers that the binding leaves out on purpose
# (tests/test_layout.py checks this list too).
NOT_BOUND = {
    "kva_cuda_importer_config_default", "kva_cuda_importer_create", "kva_cuda_importer_destroy",
    "kva_cuda_importer_ref", "kva_cuda_importer_progress", "kva_cuda_importer_wait_idle",
    "kva_cuda_importer_stats", "kva_cuda_importer_decode_stream", "kva_cuda_importer_copy_method",
    "kva_cuda_importer_cuda_error", "kva_cuda_importer_last_error",
}
