/* SPDX-License-Identifier: Apache-2.0 */
/*
 * record.h: a request's record and its grant — the structs, their flags and
 * internal states, and the inline accessors that read one record. Types
 * only, below the engine state: what runs records against the engine is
 * lifecycle.c (slots, states, ends, retirement) and grant.c (building,
 * reusing and giving back grants).
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
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <urcu/list.h>

#include "events.h"
#include <kvadmit/lockfree/slab.h>
#include <kvadmit/lockfree/timerwheel.h>
#include <kvadmit/lockfree/waitq.h>

/* Internal request states beyond the public ones (transient, CAS-owned). */
enum {
	KVA__STATE_GROWING = 16,   /* RUNNING, a kva_grow owns the page list */
	KVA__STATE_PREEMPTED = 17, /* released, waiting for the step to requeue */
	KVA__STATE_ENDING = 18,    /* kva_finish released it, the step reports it */
	KVA__STATE_CANCELLING = 19, /* the step's cancel owns a running request */
};

/* What an admitted (or importing) request owns, from its first reservation
 * to its retirement. A retired request's grant is unlinked from its record
 * and waits for a grace period (readers that found the record may still
 * read it), then for the next admission, which takes the most recently
 * retired one: its lines are still in the cache, where the grant a slot
 * kept from its previous life would be a DRAM miss at a large waiting
 * count (grant.c, "grant reuse"). */
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
			/* order it left the waiting queue to import (rule reset-returns-ready) */
			uint64_t queue_seq;
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
	 * in (A3 of grant.c); the scheduler publishes a new attempt with a
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
	KVA__F_INDEXED = 1u << 6,  /* in the checkpoint index (checkpoint_index.c) */
	KVA__F_COUNTED = 1u << 7,  /* counted in ST_RESTORES_WAITING (lookup.c) */
	KVA__F_HOSTLOCAL = 1u << 8, /* the manifest holds a KVA__CK_HOST entry */
	KVA__F_EV_PENDING = 1u << 9, /* ended before its own queued ev_main was
	                              * handled: retired only after that (step_events.c) */
	KVA__F_GRANTED = 1u << 10,   /* has a grant (from its first reservation on):
	                              * the record's grant pointer is a line the
	                              * step need not read otherwise */
	KVA__F_HELD = 1u << 11,      /* its manifest's local entries are counted in
	                              * the held map (held.c): from its ingest */
	KVA__F_CANCEL_EARLY = 1u << 12, /* its cancel was handled before its submit
	                                 * (another lane): it ends at ingest */
	KVA__F_RUNHEAP = 1u << 13,   /* in the run heap (run_heap.c, PRIORITY order) */
	KVA__F_FRONT = 1u << 14,     /* joined its priority level's front (preempted,
	                              * reset): later joins stop behind it */
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
	struct kva__grant *_Atomic grant; /* set at the first reservation: R1 of grant.c, A1 */
};
/* The memory budget of a waiting request (bench: BM_memory_per_request). */
_Static_assert(sizeof(struct kva__req) <= 160, "a record grew past 160 bytes");
/* The layout the comment at the top of the struct promises. */
_Static_assert(offsetof(struct kva__req, pub_sel) + sizeof(uint32_t) <= 32,
               "the hot any-thread fields fit in one line at either slot offset");
_Static_assert(offsetof(struct kva__req, grant) >=
                   offsetof(struct kva__req, rcu) + sizeof(struct kva_slab_rcu),
               "the grant pointer survives a free batch");

/* lookup_word's low bit: the lookup of that seq is still awaited. */
#define KVA__LW_AWAITING 1u

/* A1: pairs with R1 of grant.c (grant_attach): the grant is fully built. */
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

#endif
