/*
 * The engine's private types, shared by the files of reservations/.
 *
 * Ownership: the scheduler thread (inside kva_step) is the only writer of a
 * request's waiting-side state (queue links, manifest, timers, selection).
 * Other threads touch a record only through atomics: the state word (CAS
 * arbitration of RUNNING requests), the lookup word, the copy report word,
 * the cancel flag and statistics. Records are found by (id, gen) in the
 * idtable under RCU and freed with call_rcu, so a late reader never sees
 * freed memory.
 */
#ifndef KVA_RESERVATIONS_ENGINE_INTERNAL_H
#define KVA_RESERVATIONS_ENGINE_INTERNAL_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "kvadmit/kvadmit.h"
#include "capacity.h"
#include "idtable.h"
#include "inbox.h"
#include "pagepool.h"
#include "rcu_thread.h"
#include "timerwheel.h"
#include "waitq.h"

#ifndef KVA_DEBUG
#define KVA_DEBUG 0
#endif

/* Internal request states beyond the public ones (transient, CAS-owned). */
enum {
	KVA__STATE_GROWING = 16,   /* RUNNING, a kva_grow owns the page list */
	KVA__STATE_PREEMPTED = 17, /* released, waiting for the step to requeue */
	KVA__STATE_ENDING = 18,    /* finish/cancel released, step reports it */
};

enum kva__event_type {
	KVA__EV_SUBMIT = 1,
	KVA__EV_CANCEL,
	KVA__EV_ANSWER,
	KVA__EV_COPY,
	KVA__EV_EVICT,
	KVA__EV_RESET,
	KVA__EV_FINISHED,  /* kva_finish released a running request */
	KVA__EV_PREEMPTED, /* kva_preempt released a running request */
};

struct kva__event {
	struct kva_inbox_node node;
	uint8_t type;
	uint8_t rank;   /* EV_COPY */
	int16_t status; /* EV_COPY: 0 ok, else failed */
};

/* A directory answer; when adopted it is the request's retained manifest. */
struct kva__answer {
	struct kva__event ev;
	kva_lookup_token token;
	uint32_t count;
	uint32_t has_ref; /* a kva__ckpt_ref follows the entries (some entry is local) */
	kva_checkpoint entries[];
};

static inline size_t kva__answer_ref_offset(uint32_t count)
{
	return (sizeof(struct kva__answer) + count * sizeof(kva_checkpoint) + 7) / 8 * 8;
}

/* Index entry: checkpoint id -> request that selected it (local only). */
struct kva__ckpt_ref {
	struct kva_idtable_node node; /* id = checkpoint id */
	struct kva__req *req;
	struct kva__answer *owner;
	bool indexed;
	struct rcu_head rcu; /* the index is an lfht: free its answer after a grace period */
};

/* The index entry space of an answer, NULL when none of its entries is local. */
static inline struct kva__ckpt_ref *kva__answer_ref(struct kva__answer *a)
{
	return a && a->has_ref ? (struct kva__ckpt_ref *)((char *)a + kva__answer_ref_offset(a->count))
	                       : NULL;
}

struct kva__evict {
	struct kva__event ev;
	uint64_t checkpoint_id;
	uint64_t epoch;
};

/* What an admitted (or importing) request owns. Allocated at its first
 * reservation, kept for the record's life, freed with it. */
struct kva__grant {
	struct kva__req *req;
	uint32_t reset_epoch;      /* engine reset epoch when the copy started */
	uint32_t *pages;           /* materialised page ids: imported first, then grown;
	                            * starts in the grant's own tail (one allocation) */
	uint32_t inline_cap;       /* page ids the tail holds */
	_Atomic uint32_t npages;   /* readers: kva_query */
	uint32_t cap;
	_Atomic uint32_t reserved; /* credits owned, not yet materialised */
	uint32_t import_pages;     /* pages[0 .. import_pages) are copy destinations */
	uint32_t attempts;         /* copy attempts started for this request */
	uint32_t retries;          /* failed attempts on the current checkpoint */
	uint32_t n_reported;       /* scheduler's count for the current attempt */
	bool any_failed;
	bool copying;              /* an attempt is in flight (pages must drain) */
	bool copy_queued;          /* waiting in copy_pending for plan/importer room */
	uint8_t world;
	/* A2: attempt << 32 | mask of ranks that reported it. Producers CAS a
	 * bit in (kva_copy_done); the scheduler publishes a new attempt with a
	 * release store when it hands it out, after the previous one fully
	 * drained. */
	_Atomic uint64_t copy_word;
	struct kva__event rank_ev[]; /* world entries, one per rank */
};

enum kva__req_flag {
	KVA__F_DECIDED = 1u << 0,        /* lookup answered or given up: path known */
	KVA__F_RESTORE = 1u << 1,        /* a checkpoint is selected */
	KVA__F_REFRESH = 1u << 2,        /* a non-decisive refresh lookup is out */
	KVA__F_INGESTED = 1u << 3,       /* in the waiting order (not a rejected duplicate) */
	KVA__F_REPORTED = 1u << 4,       /* terminal outcome handed to the host */
	KVA__F_BLOCKED = 1u << 5,        /* blocked_since is valid */
	KVA__F_CANCEL_SEEN = 1u << 6,    /* its cancel event was handled for good */
	KVA__F_RETIRE_PENDING = 1u << 7, /* retire once that cancel event is handled */
};

struct kva__req {
	struct kva_idtable_node idn; /* id, gen */
	struct kva__event ev_main;   /* submit, then finished / preempted */
	struct kva__event ev_cancel;
	/* waitq, ready, ended or copy_pending list. Relinked right after an
	 * unlink: safe because no RCU reader ever walks the engine's waitq
	 * (kva_query and stats go through the id table and counters). */
	struct kva_waitq_node wq;
	union {
		struct kva_timer deadline; /* lookup deadline (waiting only) */
		struct rcu_head rcu;       /* reclamation (after retire) */
	};
	uint64_t prefix_key;
	void *user;
	_Atomic uint32_t state;       /* enum kva_state / KVA__STATE_* */
	_Atomic uint32_t lookup_word; /* seq << 1 | awaiting */
	uint32_t prompt_tokens;
	uint16_t flags;               /* enum kva__req_flag, scheduler only */
	int8_t sel;                   /* selected manifest entry, -1 none */
	uint8_t reason;               /* enum kva_reason once on the ordinary path */
	_Atomic uint8_t cancel_requested;
	_Atomic uint8_t lookups;      /* statistic for kva_query (saturating) */
	_Atomic uint8_t pub_reason;   /* reason, published for kva_query */
	_Atomic uint32_t pub_sel;     /* selected position << 1 | local; 0 none (kva_query) */
	struct kva__answer *manifest; /* retained answer */
	struct kva__grant *_Atomic grant; /* R3/A3: published once, lives as long as r */
	uint64_t blocked_since; /* first step it was blocked at the head (KVA__F_BLOCKED) */
};

enum kva__stat {
	ST_SUBMITTED, ST_INGESTED, ST_REJECTED, ST_FINISHED, ST_CANCELLED, ST_PREEMPTED,
	ST_WAITING, ST_IMPORTING, ST_READY, ST_RUNNING,
	ST_ADMIT_RESTORE, ST_ADMIT_LOCAL, ST_ADMIT_RECOMPUTE,
	ST_TOK_ADMITTED, ST_TOK_LOCAL, ST_TOK_RESTORED, ST_TOK_RECOMPUTED,
	ST_LOOKUPS, ST_ANSWERED, ST_LOOKUP_TIMEOUTS, ST_LATE_ANSWERS, ST_REFRESHES, ST_REVALIDATIONS,
	ST_COPY_JOBS, ST_COPY_FAILED, ST_COPY_RETRIES, ST_SHORTER, ST_STALE_COPY,
	ST_BLOCKED_STEPS, ST_WAIT_LOGS, ST_WAIT_EXPIRED, ST_STEPS, ST_EVENTS,
	ST_RESERVED_PAGES, ST_IN_USE_PAGES, ST_DRAINING_PAGES,
	ST_FALLBACK0, /* + enum kva_reason */
	ST_COUNT = ST_FALLBACK0 + KVA_REASON_COUNT
};

enum kva__head_timer { HT_WAIT, HT_LOG, HT_REFRESH, HT_COUNT };

struct kva_engine {
	kva_config cfg;
	uint32_t usable_pages; /* total - decode watermark: larger reservations are TOO_LARGE */

	/* shared with any thread */
	struct kva_inbox inbox;
	struct kva_capacity cap;
	struct kva_pagepool pool;
	struct kva_idtable ids;
	alignas(64) _Atomic uint32_t next_gen;
	_Atomic uint8_t reset_requested;
	struct kva__event reset_ev;
	alignas(64) _Atomic uint64_t st[ST_COUNT];

	/* scheduler thread only */
	alignas(64) struct kva_waitq waitq;
	struct cds_list_head ready;        /* READY restores, completion order */
	struct cds_list_head ended;        /* terminal, not yet reported */
	struct cds_list_head copy_pending; /* need a copy job dispatched */
	struct kva_idtable ckpt;           /* local checkpoint id -> selecting requests */
	struct kva_inbox deferred;         /* cancels retried next step */
	struct kva_timerwheel wheel;
	struct kva__req *head_req; /* request the head timers belong to */
	uint32_t reset_epoch;      /* bumped by each prefix-cache reset */
	struct kva_timer head_timer[HT_COUNT];
	uint64_t now;
	kva_plan *plan;   /* the plan of the step in progress */
	bool in_step;
};

/* statistics helpers */
static inline void kva__st_add(kva_engine *e, enum kva__stat s, int64_t v)
{
	atomic_fetch_add_explicit(&e->st[s], (uint64_t)v, memory_order_relaxed);
}
/* For counters only the scheduler thread writes: no locked instruction on
 * the step's path (readers still load them atomically). */
static inline void kva__st_sched(kva_engine *e, enum kva__stat s, uint64_t v)
{
	atomic_store_explicit(&e->st[s], atomic_load_explicit(&e->st[s], memory_order_relaxed) + v,
	                      memory_order_relaxed);
}
static inline uint64_t kva__st_get(const kva_engine *e, enum kva__stat s)
{
	return atomic_load_explicit(&e->st[s], memory_order_relaxed);
}

static inline uint32_t kva__pages_for(const kva_engine *e, uint64_t tokens)
{
	return (uint32_t)((tokens + e->cfg.page_tokens - 1) / e->cfg.page_tokens);
}

/* A3: pairs with R3 in kva__grant_ensure: the grant is fully built. */
static inline struct kva__grant *kva__grant(struct kva__req *r)
{
	return atomic_load_explicit(&r->grant, memory_order_acquire);
}

static inline bool kva__state_is_terminal(uint32_t s)
{
	return s == KVA_STATE_FINISHED || s == KVA_STATE_CANCELLED || s == KVA_STATE_REJECTED ||
	       s == KVA__STATE_ENDING;
}

static inline struct kva__req *kva__req_of_wq(struct kva_waitq_node *n)
{
	return caa_container_of(n, struct kva__req, wq);
}

/* request.c */
struct kva__req *kva__req_find(kva_engine *e, kva_handle h); /* RCU read lock held */
void kva__req_free(struct kva__req *r);
void kva__req_free_rcu(struct rcu_head *head); /* call_rcu callback */
void kva__answer_free(struct kva__answer *a);
size_t kva__answer_bytes(uint32_t count, bool with_ref);
void kva__req_set_state(kva_engine *e, struct kva__req *r, uint32_t to);
void kva__req_end(kva_engine *e, struct kva__req *r, uint32_t terminal);
void kva__req_retire(kva_engine *e, struct kva__req *r);
void kva__release_owned(kva_engine *e, struct kva__req *r, uint16_t slots);
void kva__requeue_front(kva_engine *e, struct kva__req *r);
int kva__grant_ensure(kva_engine *e, struct kva__req *r, uint32_t min_cap);
void kva__handle_cancel(kva_engine *e, struct kva__req *r);
void kva__handle_life_event(kva_engine *e, struct kva__req *r, uint8_t type);
void kva__handle_submit(kva_engine *e, struct kva__req *r);

/* lookup.c */
void kva__lookup_issue(kva_engine *e, struct kva__req *r, bool decisive);
void kva__lookup_on_answer(kva_engine *e, struct kva__answer *a);
void kva__lookup_on_deadline(kva_engine *e, struct kva__req *r);
void kva__lookup_on_evict(kva_engine *e, struct kva__evict *ev);
void kva__manifest_drop(kva_engine *e, struct kva__req *r);
void kva__ckpt_unindex(kva_engine *e, struct kva__req *r);
void kva__fallback(kva_engine *e, struct kva__req *r, uint8_t reason);
void kva__select(kva_engine *e, struct kva__req *r, int sel);
void kva__manifest_adopt(kva_engine *e, struct kva__req *r, struct kva__answer *a, int sel);
int kva__select_shorter(const struct kva__req *r);

/* restore.c */
int kva__admit_head(kva_engine *e, struct kva__req *r); /* 1 admitted, 0 blocked, <0 no room */
bool kva__admit_ready(kva_engine *e, struct kva__req *r);
void kva__copy_on_report(kva_engine *e, struct kva__req *r, struct kva__event *ev);
void kva__copy_dispatch_pending(kva_engine *e);
void kva__reset_ready(kva_engine *e);
void kva__log(kva_engine *e, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* engine.c */
void kva__head_forget(kva_engine *e, struct kva__req *r);
bool kva__plan_fallback(kva_engine *e, struct kva__req *r, uint8_t reason);

#endif
