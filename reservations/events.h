/* SPDX-License-Identifier: Apache-2.0 */
/*
 * events.h, events.c: what reaches the scheduler as an event — the event
 * kinds, the embeddable event header and the payloads that carry one
 * (directory answers, host-stated local checkpoints, cancels, evictions) —
 * and the allocation of the payloads that live on the heap. The lowest
 * layer of reservations/ beside alloc.c: no engine state here. Handing an
 * event to the scheduler is event_queue.c.
 */
#ifndef KVA_RESERVATIONS_EVENTS_H
#define KVA_RESERVATIONS_EVENTS_H

#include <stdbool.h>
#include <stdint.h>

#include "kvadmit/kvadmit.h"
#include <kvadmit/lockfree/inbox.h>
#include <kvadmit/lockfree/slab.h>

enum kva__event_type {
	KVA__EV_SUBMIT = 1,
	KVA__EV_CANCEL,
	KVA__EV_ANSWER,
	KVA__EV_COPY,
	KVA__EV_EVICT,
	KVA__EV_RESET,
	KVA__EV_FINISHED,  /* kva_finish released a running request */
	KVA__EV_PREEMPTED, /* kva_preempt released a running request */
	KVA__EV_LOCAL,     /* kva_local_checkpoint (rule host-local-checkpoints) */
	KVA__EV_PRIORITY,  /* kva_set_priority (struct kva__cancel) */
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
	               * lists, for the host's own local checkpoint (rule
	               * host-local-checkpoints) */
	kva_checkpoint entries[];
};

/* kva_checkpoint.reserved_ inside the engine: this entry is the local
 * checkpoint the host stated (rule host-local-checkpoints), not the
 * directory's. At most one per manifest, flagged KVA__F_HOSTLOCAL in its
 * record. */
#define KVA__CK_HOST 1u

/* A host-stated entry's mark (kva__host_mark) spans reserved_ (low byte,
 * KVA__CK_HOST in it) and tier (high byte): a host's own checkpoint is
 * local, so its tier is never read. */
static inline uint16_t kva__ck_mark(const kva_checkpoint *c)
{
	return (uint16_t)(c->reserved_ | (unsigned)c->tier << 8);
}
static inline void kva__ck_set_mark(kva_checkpoint *c, uint16_t m)
{
	c->reserved_ = (uint8_t)m;
	c->tier = (uint8_t)(m >> 8);
}

/* The host states a local checkpoint of a request (rule
 * host-local-checkpoints). The producer
 * allocates the room the request's manifest may need for it, so the step
 * never has to (and never stalls on it). */
struct kva__local {
	struct kva__event ev;
	kva_handle h;
	kva_checkpoint cp;
	struct kva__answer *spare; /* KVA_MAX_CHECKPOINTS + 1 entries; NULL once used */
};

/* A cancel request, or a priority change (ev.type KVA__EV_PRIORITY): names
 * the incarnation, so one that arrives after the record was retired (and
 * its slot reused) finds nothing. Lives in the engine's own slab of these
 * events (e->cancels, event_queue.c), one cache line each, so neither
 * allocates from the heap and two producers never write one line. */
struct kva__cancel {
	struct kva_slab_hdr hdr;
	union {
		struct {
			struct kva__event ev;
			kva_handle h;
			uint32_t self;    /* its index in e->cancels */
			int32_t priority; /* KVA__EV_PRIORITY: the new one */
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
	/* While its sharers are looked at over several steps (evict_walk.c):
	 * the next one (slot + 1; 0: done), the lowest epoch of those indexed
	 * under the checkpoint since the walk's pass began, and whether one
	 * more pass from the list's front must follow this one (an eviction
	 * this pass does not cover came meanwhile). */
	uint32_t cursor;
	bool again;
	uint64_t joined_min;
};

/* Any thread: an answer event with room for `cap` entries (count 0); NULL
 * when out of memory. */
struct kva__answer *kva__answer_new(uint32_t cap);
void kva__answer_free(struct kva__answer *a);
/* Any thread: a kva__local event with its spare manifest; NULL: -ENOMEM. */
struct kva__local *kva__local_new(void);
void kva__local_free(struct kva__local *l);

#endif
