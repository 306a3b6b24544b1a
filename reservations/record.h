/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Request records and what they own: the slot a request lives in, its state
 * word, its grant (pages and credits), its embedded events, its terminal
 * report and retirement. The lowest layer of reservations/: record.c calls
 * nothing above it.
 *
 * Ownership: the scheduler thread (inside kva_step) is the only writer of a
 * request's waiting-side state (queue links, manifest, timers, selection).
 * Other threads reach a record through its handle's slot and generation
 * (kva__rec_find, inside an RCU read-side section) and touch it only through
 * atomics: the state word (CAS arbitration of RUNNING requests), the lookup
 * word, the copy report word, the cancel flag and statistics. A slot is
 * reused only after an RCU grace period (lockfree/slab), so such a reader
 * never sees a reused record.
 */
#ifndef KVA_RESERVATIONS_RECORD_H
#define KVA_RESERVATIONS_RECORD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <urcu/list.h>

#include "kvadmit/kvadmit.h"
#include <kvadmit/lockfree/capacity.h>
#include <kvadmit/lockfree/inbox.h>
#include <kvadmit/lockfree/slab.h>
#include <kvadmit/lockfree/timerwheel.h>
#include <kvadmit/lockfree/waitq.h>

#ifndef KVA_DEBUG
#define KVA_DEBUG 0
#endif

/* Internal request states beyond the public ones (transient, CAS-owned). */
enum {
	KVA__STATE_GROWING = 16,   /* RUNNING, a kva_grow owns the page list */
	KVA__STATE_PREEMPTED = 17, /* released, waiting for the step to requeue */
	KVA__STATE_ENDING = 18,    /* kva_finish released it, the step reports it */
	KVA__STATE_CANCELLING = 19, /* the step's cancel owns a running request */
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
	KVA__EV_LOCAL,     /* kva_local_checkpoint (rule 22) */
};

struct kva__event {
	struct kva_inbox_node node;
	uint8_t type;
	uint8_t rank;   /* EV_COPY */
	int16_t status; /* EV_COPY: 0 ok, else failed */
	uint32_t slot;  /* embedded in a record: that record's slot */
};

/* A directory answer. Adopted as the retained manifest when it lists more
 * than one checkpoint; a single entry is copied into the record. */
struct kva__answer {
	struct kva__event ev;
	kva_lookup_token token;
	uint32_t count;
	uint32_t cap; /* entries allocated: a directory's answer one more than it
	               * lists, for the host's own local checkpoint (rule 22) */
	kva_checkpoint entries[];
};

/* kva_checkpoint.reserved_ inside the engine: this entry is the local
 * checkpoint the host stated (rule 22), not the directory's. At most one per
 * manifest, flagged KVA__F_HOSTLOCAL in its record. */
#define KVA__CK_HOST 1u

/* The host states a local checkpoint of a request (rule 22). The producer
 * allocates the room the request's manifest may need for it, so the step
 * never has to (and never stalls on it). */
struct kva__local {
	struct kva__event ev;
	kva_handle h;
	kva_checkpoint cp;
	struct kva__answer *spare; /* KVA_MAX_CHECKPOINTS + 1 entries; NULL once used */
};

/* A cancel request: names the incarnation, so a cancel that arrives after
 * the record was retired (and its slot reused) finds nothing. Lives in the
 * engine's own slab of cancel events (e->cancels), one cache line each, so
 * a cancel allocates nothing from the heap and two producers never write
 * one line. */
struct kva__cancel {
	struct kva_slab_hdr hdr;
	union {
		struct {
			struct kva__event ev;
			kva_handle h;
			uint32_t self; /* its index in e->cancels */
		};
		struct kva_slab_rcu rcu; /* free: the slab's batch area */
		char line_[64 - sizeof(struct kva_slab_hdr)];
	};
};

_Static_assert(sizeof(struct kva__cancel) == 64, "one cancel event per cache line");

struct kva__evict {
	struct kva__event ev;
	uint64_t checkpoint_id;
	uint64_t epoch;
	/* While its sharers are looked at over several steps (lookup.c): the
	 * next one (slot + 1; 0: done), the lowest epoch of those indexed
	 * under the checkpoint since the walk's pass began, and whether one
	 * more pass from the list's front must follow this one (an eviction
	 * this pass does not cover came meanwhile). */
	uint32_t cursor;
	bool again;
	uint64_t joined_min;
};

/* What an admitted (or importing) request owns, from its first reservation
 * to its retirement. A retired request's grant is unlinked from its record
 * and waits for a grace period (readers that found the record may still
 * read it), then for the next admission, which takes the most recently
 * retired one: its lines are still in the cache, where the grant a slot
 * kept from its previous life would be a DRAM miss at a large waiting
 * count (record.c, "grant reuse"). */
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
	union {
		struct {
			uint64_t queue_seq;    /* order it left the waiting queue to import (rule 17) */
			uint64_t copy_started; /* step clock when the current attempt was dispatched */
		};
		struct { /* retired: waiting to be reused (scheduler only) */
			struct kva__grant *next;
			uint64_t flush; /* reusable once this slab flush's grace period passed */
		} spare;
	};
	uint32_t attempts;         /* copy attempts started for this request */
	uint32_t retries;          /* failed attempts on the current checkpoint */
	uint32_t n_reported;       /* scheduler's count for the current attempt */
	bool any_failed;
	bool copying;              /* an attempt is in flight (pages must drain) */
	bool copy_queued;          /* waiting in copy_pending for plan/importer room */
	uint8_t world;
	/* attempt << 32 | mask of ranks that reported it. Producers CAS a bit
	 * in (A3 of record.c); the scheduler publishes a new attempt with a
	 * release store (R1 of copy.c) after the previous one fully drained. */
	_Atomic uint64_t copy_word;
	struct kva__event rank_ev[]; /* world entries, one per rank */
};

enum kva__req_flag {
	KVA__F_DECIDED = 1u << 0,  /* lookup answered or given up: path known */
	KVA__F_RESTORE = 1u << 1,  /* a checkpoint is selected */
	KVA__F_REFRESH = 1u << 2,  /* a non-decisive refresh lookup is out */
	KVA__F_INGESTED = 1u << 3, /* in the waiting order (not a rejected duplicate) */
	KVA__F_REPORTED = 1u << 4, /* terminal outcome handed to the host */
	KVA__F_BLOCKED = 1u << 5,  /* blocked_since is valid */
	KVA__F_INDEXED = 1u << 6,  /* in the checkpoint index (lookup.c) */
	KVA__F_COUNTED = 1u << 7,  /* counted in ST_RESTORES_WAITING (lookup.c) */
	KVA__F_HOSTLOCAL = 1u << 8, /* the manifest holds a KVA__CK_HOST entry */
	KVA__F_EV_PENDING = 1u << 9, /* ended before its own queued ev_main was
	                              * handled: retired only after that (engine.c) */
	KVA__F_GRANTED = 1u << 10,   /* has a grant (from its first reservation on):
	                              * the record's grant pointer is a line the
	                              * step need not read otherwise */
	KVA__F_HELD = 1u << 11,      /* its manifest's local entries are counted in
	                              * the held map (record.c): from its ingest */
	KVA__F_CANCEL_EARLY = 1u << 12, /* its cancel was handled before its submit
	                                 * (another lane): it ends at ingest */
};

/* How far behind a waiting request the one its `ahead` hint names was
 * pushed: admission prefetches that far ahead without walking the queue. */
#define KVA__AHEAD 8

/* 160 bytes: 64 Ki of them fill a 10 MiB chunk (an exact jemalloc size
 * class), and with the live-id map's share a waiting request costs under 192. */
struct kva__req {
	/* The handle check, the state word, the cancel claim and the lookup
	 * word (kva_cancel, kva_lookup_answer, the CAS of kva_finish,
	 * kva_preempt and kva_grow) sit in the first 32 bytes: one cache line
	 * whether the slot starts on a line or half-way into one (slots are
	 * 160 bytes). Other any-thread reads reach further lines: kva_query
	 * and kva_waiting_foreach read user and prompt_tokens (bytes 48-67)
	 * and the foreach its link (wq); kva_query, copy reports, kva_grow and
	 * kva_finish read the grant pointer (byte 152), which must stay after
	 * the area a free batch overwrites (docs/design.md, "Handles and
	 * records"). */
	struct kva_slab_hdr hdr; /* generation (handles) and the slab's free link */
	uint64_t id;
	_Atomic uint32_t state;       /* enum kva_state / KVA__STATE_* */
	_Atomic uint32_t lookup_word; /* seq << 1 | KVA__LW_AWAITING */
	_Atomic uint8_t cancel_requested;
	_Atomic uint8_t lookups;    /* statistic for kva_query (saturating) */
	_Atomic uint8_t pub_reason; /* reason, published for kva_query */
	uint8_t reason;             /* enum kva_reason once on the ordinary path */
	_Atomic uint32_t pub_sel;   /* selected position << 1 | local; 0 none (kva_query) */
	struct kva__event ev_main;  /* submit, then finished / preempted; .slot = ours */
	void *user;
	uint64_t prefix_key;
	uint32_t prompt_tokens;
	uint16_t flags;             /* enum kva__req_flag, scheduler only */
	int8_t sel;                 /* selected manifest entry, -1 none */
	uint8_t nents;              /* entries of the retained manifest (one, or
	                             * manifest->count) */
	/* The waiting queue: RCU readers (kva_waiting_foreach) walk it, so a
	 * record never reuses these links for another list while it lives. */
	struct kva_waitq_node wq;
	/* Never read by other threads; which member is in use follows state. */
	union {
		struct kva_timer deadline; /* WAITING: decisive lookup's deadline */
		/* WAITING with a selection (F_INDEXED): the checkpoint index
		 * list, slot + 1, 0 = none. Never while the deadline is armed (a
		 * selection means the decisive lookup was answered), and laid over
		 * the timer's expiry so its links stay NULL: cancelling the
		 * unarmed timer is a no-op. */
		struct {
			void *unarmed_[2];
			uint32_t prev, next;
			/* On the list's first record only: no record on the
			 * list selected an epoch below it, so an eviction up to
			 * it changes nothing and walks nobody. Over the timer's
			 * seq, which an unarmed timer never reads. */
			uint64_t epoch_floor;
		} ck;
		struct cds_list_head link; /* ended or copy_pending list */
		uint32_t ready_at;         /* READY: its index in the engine's ready heap */
		struct kva_slab_rcu rcu;   /* retired: the slab's grace-period batch */
	};
	union {
		uint64_t blocked_since; /* F_BLOCKED: first step it was blocked at the head */
		/* WAITING without F_BLOCKED: slot + 1 of the request pushed
		 * KVA__AHEAD places behind it (0: none). A prefetch hint only:
		 * it may name a slot that has moved on since. */
		uint32_t ahead;
	};
	union {
		kva_checkpoint one;            /* nents == 1 */
		struct kva__answer *manifest;  /* nents > 1 */
	};
	/* After the rcu area, so the slab's free lists never overwrite it: NULL
	 * from retirement through the slot's next incarnation until it reserves. */
	struct kva__grant *_Atomic grant; /* R1/A1 below: published at the first reservation */
};
/* The layout the comment at the top of the struct promises. */
_Static_assert(offsetof(struct kva__req, pub_sel) + sizeof(uint32_t) <= 32,
               "the hot any-thread fields fit in one line at either slot offset");
_Static_assert(offsetof(struct kva__req, grant) >=
                   offsetof(struct kva__req, rcu) + sizeof(struct kva_slab_rcu),
               "the grant pointer survives a free batch");

/* lookup_word's low bit: the lookup of that seq is still awaited. */
#define KVA__LW_AWAITING 1u

/* Statistics: producer-written counters live on their own lines (shards). */
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
	ST_FALLBACK0, /* + enum kva_reason */
	ST_COUNT = ST_FALLBACK0 + KVA_REASON_COUNT
};

/* A1: pairs with R1 in kva__grant_ensure: the grant is fully built. */
static inline struct kva__grant *kva__grant(struct kva__req *r)
{
	return atomic_load_explicit(&r->grant, memory_order_acquire);
}

static inline bool kva__state_is_terminal(uint32_t s)
{
	return s == KVA_STATE_FINISHED || s == KVA_STATE_CANCELLED || s == KVA_STATE_REJECTED ||
	       s == KVA__STATE_ENDING || s == KVA__STATE_CANCELLING;
}

/* While a record waits (ingested or requeued, until admitted) its embedded
 * event is idle, so its link holds when the wait began (time to admission);
 * admission clears it before the event can be queued again. */
_Static_assert(sizeof(struct kva_inbox_node) >= sizeof(uint64_t), "room for a time");
static inline void kva__rec_wait_begins(struct kva__req *r, uint64_t now)
{
	memcpy(&r->ev_main.node, &now, sizeof(now));
}
static inline uint64_t kva__rec_wait_ends(struct kva__req *r)
{
	uint64_t t;
	memcpy(&t, &r->ev_main.node, sizeof(t));
	kva_inbox_node_init(&r->ev_main.node);
	return t;
}

/* What the host sees of an internal state (enum kva_state). */
static inline uint8_t kva__public_state(uint32_t s)
{
	switch (s) {
	case KVA__STATE_GROWING: return KVA_STATE_RUNNING;
	case KVA__STATE_PREEMPTED: return KVA_STATE_WAITING;
	case KVA__STATE_ENDING: return KVA_STATE_FINISHED;
	case KVA__STATE_CANCELLING: return KVA_STATE_CANCELLED;
	default: return (uint8_t)s;
	}
}

/* Every line of a record: 160 bytes at a 32-byte offset span up to three,
 * and handling or admitting one reads all of them (header and id, queue and
 * index links, checkpoint and grant). */
static inline void kva__rec_prefetch(const struct kva__req *r)
{
	__builtin_prefetch(r);
	__builtin_prefetch(&r->wq);
	__builtin_prefetch(&r->grant);
}

/* A grant's header, its rank events and the first of its inline page ids
 * (what giving its pages back reads). */
static inline void kva__grant_prefetch(const struct kva__grant *g)
{
	const char *p = (const char *)g;
	__builtin_prefetch(p);
	__builtin_prefetch(p + 64);
	__builtin_prefetch(p + 128);
}

static inline struct kva__req *kva__req_of_wq(struct kva_waitq_node *n)
{
	return caa_container_of(n, struct kva__req, wq);
}

static inline struct kva__req *kva__req_of_link(struct cds_list_head *l)
{
	return caa_container_of(l, struct kva__req, link);
}

static inline uint32_t kva__rec_slot(const struct kva__req *r) { return r->ev_main.slot; }

/* The handle of r's current incarnation (owner, or a reader that matched it). */
static inline kva_handle kva__rec_handle(struct kva__req *r)
{
	return (kva_handle){r->id, atomic_load_explicit(&r->hdr.gen, memory_order_relaxed),
	                    kva__rec_slot(r)};
}

/* The retained manifest's entries (nents of them). */
static inline const kva_checkpoint *kva__manifest_entries(const struct kva__req *r)
{
	return r->nents > 1 ? r->manifest->entries : &r->one;
}

/* The selected checkpoint; only while r->sel >= 0. */
static inline const kva_checkpoint *kva__selected_checkpoint(const struct kva__req *r)
{
	return &kva__manifest_entries(r)[r->sel];
}

/* ---- record.c ------------------------------------------------------------ */

/* Any thread inside an RCU read-side section (or the scheduler): the live
 * record of incarnation {slot, gen} with this id, NULL if there is none. */
struct kva__req *kva__rec_find(kva_engine *e, uint32_t slot, uint32_t gen, uint64_t id);
/* Any thread: a free slot for a new record, its index in *slot; NULL: -ENOMEM. */
struct kva__req *kva__rec_new(kva_engine *e, uint32_t *slot);
/* Any thread: the record, filled, becomes findable under a new generation. */
uint32_t kva__rec_publish(kva_engine *e, struct kva__req *r);
/* Scheduler thread: e's step runs on this thread from now (NULL: ended). */
void kva__rec_stepping(kva_engine *e);
/* Any thread: hands an event to the scheduler — the inbox (waking the host
 * when it was empty), or the step's own queue for an answer or copy report
 * the scheduler thread produces inside kva_step. */
void kva__event_push(kva_engine *e, struct kva__event *ev);
/* The same without the wake: true when the host's wake callback is due,
 * for a caller inside an RCU read-side section to call kva__wake after it
 * (no callback runs inside one: kvadmit.h). */
bool kva__event_enqueue(kva_engine *e, struct kva__event *ev);
void kva__wake(kva_engine *e);

/* Any thread: an answer event with room for `cap` entries (count 0); NULL
 * when out of memory. */
struct kva__answer *kva__answer_new(uint32_t cap);
void kva__answer_free(struct kva__answer *a);
/* Any thread: a cancel event from e->cancels, or NULL (no memory for a new
 * chunk). The scheduler frees it with kva__cancel_free; the thread that took
 * it and did not push it gives it back with kva__cancel_unused. */
struct kva__cancel *kva__cancel_new(kva_engine *e);
void kva__cancel_free(kva_engine *e, struct kva__cancel *c);
void kva__cancel_unused(kva_engine *e, struct kva__cancel *c);
/* Any thread: a kva__local event with its spare manifest; NULL: -ENOMEM. */
struct kva__local *kva__local_new(void);
void kva__local_free(struct kva__local *l);

/* Scheduler thread, or the GROWING owner: r owns a grant whose page array
 * holds min_cap ids. 0 or -ENOMEM (nothing changed). */
int kva__grant_ensure(kva_engine *e, struct kva__req *r, uint32_t min_cap);

/* Any thread (caller keeps g's record found, e.g. under RCU): one rank of
 * copy attempt `attempt` finished. 0, -ESTALE (not the attempt handed out),
 * -EALREADY (this rank already reported). *wake: call kva__wake once out
 * of the read-side section (set on 0 only). */
int kva__grant_report(kva_engine *e, struct kva__grant *g, uint32_t attempt, uint32_t rank,
                      int status, bool *wake);

void kva__rec_set_state(kva_engine *e, struct kva__req *r, uint32_t to);

/* The one way page ids go back: ids to the pool first, then their credits
 * together with `extra` (R1 of capacity.c: whoever reserves those credits
 * finds ids). */
void kva__pages_return(kva_engine *e, const uint32_t *ids, uint32_t n, struct kva_credits extra);
/* r gives back every page and credit it owns, its run slot and `slots` copy
 * slots. `reserved_gauge`: its pages were counted as reserved (not running). */
void kva__rec_give_back(kva_engine *e, struct kva__req *r, uint16_t slots, bool reserved_gauge);

/* Scheduler thread: the live-id map (rule 14). 0, -EEXIST (a live request
 * has this id), -ENOMEM. */
int kva__rec_claim_id(kva_engine *e, struct kva__req *r);
/* Scheduler thread: the live incarnation of id, or NULL. */
struct kva__req *kva__rec_live(kva_engine *e, uint64_t id);
/* Scheduler thread: removes the entries of ids that ended (kva__rec_end
 * defers them); called at the end of each step and before any map read. */
void kva__rec_ids_settle(kva_engine *e);
/* Scheduler thread, at the end of a step: hands the retired records and
 * cancel events to their grace period (call_rcu) once enough have gathered,
 * or as soon as a step retires none, so a quiet engine never sits on them. */
void kva__rec_flush_retired(kva_engine *e);
/* Scheduler thread: records the one terminal outcome of r and queues its
 * report. */
void kva__rec_end(kva_engine *e, struct kva__req *r, uint32_t terminal);
/* Scheduler thread: r's slot goes back after a grace period; what r owned
 * but its grant goes now. */
void kva__rec_retire(kva_engine *e, struct kva__req *r);
/* Engine destroy: fn for every live record whose end the host was not told. */
void kva__rec_each_unreported(kva_engine *e, kva_unfinished_fn fn, void *ctx);
/* Engine destroy: frees every grant and manifest left in the slab. */
void kva__rec_free_all(kva_engine *e);

/* Scheduler thread: the held local checkpoints (record.c). Every local
 * entry of a KVA__F_HELD record's manifest counts once under its id, so an
 * eviction of a checkpoint a request holds but has not selected (a shorter
 * entry of its manifest, the host's own) is remembered for as long as some
 * request holds that id, and an entry is never taken later from a copy
 * reported evicted (rules 11, 15, 22).
 *   reserve  room for n more ids: the next n holds cannot fail (0, -ENOMEM)
 *   hold     one more entry (cp local, else nothing); room reserved unless
 *            the id is held already
 *   drop     one entry fewer; the id's record goes with its last entry
 *   evicted  an eviction of id at epoch (a held id remembers the newest)
 *   gone     cp is local and an eviction newer than its copy was reported
 *   hold_all / drop_all  every entry of r's manifest (KVA__F_HELD only) */
int kva__held_reserve(kva_engine *e, uint32_t n);
void kva__held_hold(kva_engine *e, const kva_checkpoint *cp);
void kva__held_drop(kva_engine *e, const kva_checkpoint *cp);
void kva__held_evicted(kva_engine *e, uint64_t id, uint64_t epoch);
bool kva__held_gone(const kva_engine *e, const kva_checkpoint *cp);
void kva__held_hold_all(kva_engine *e, struct kva__req *r);
void kva__held_drop_all(kva_engine *e, struct kva__req *r);
int kva__held_init(kva_engine *e);
void kva__held_fini(kva_engine *e);
#ifdef KVA_FAULT_INJECTION
/* Ids held now: 0 once every request has ended and retired (fuzz_engine). */
size_t kva__held_ids(const kva_engine *e);
#endif

#endif
