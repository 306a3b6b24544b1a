/* SPDX-License-Identifier: Apache-2.0 */
/*
 * slab_reclaim: how a slab's retired batches reach their grace period, for
 * slab.c only: the process-wide pool of reclaim tickets that carry a batch
 * through call_rcu, and the call_rcu thread of kvadmit's own they go to.
 *
 * Synchronisation table:
 *   call                            | may run concurrently with
 *   --------------------------------+-----------------------------------
 *   kva__slab_ticket_get / _put     | everything (any threads)
 *   kva_slab_tickets_ahead (slab.h) | everything (any threads)
 *   kva__slab_reclaimer_start       | everything (any threads)
 *   kva__slab_call_rcu              | everything (a registered thread)
 */
#ifndef KVA_LOCKFREE_SLAB_RECLAIM_H
#define KVA_LOCKFREE_SLAB_RECLAIM_H

#include <stdint.h>

#include <kvadmit/lockfree/rcu_thread.h>

/* A flushed batch on its way through call_rcu. */
struct kva__slab_ticket {
	struct rcu_head head;
	uint64_t serial;       /* the slab the batch returns to */
	uint64_t flush;        /* the flush's number (kva_slab_next_flush) */
	uint32_t first;        /* the chain's first slot, linked by hdr.next */
	uint32_t self;         /* index in the pool */
	_Atomic uint32_t next; /* free list: index + 1, 0 = none */
};

/* A free ticket, or NULL: none free while a grower keeps the pool
 * (kva_slab_tickets_ahead), or no memory. */
struct kva__slab_ticket *kva__slab_ticket_get(void);
/* Back on the free list (the callback is done with it). */
void kva__slab_ticket_put(struct kva__slab_ticket *t);

/* Creates kvadmit's call_rcu thread once (kva_slab_init calls it). */
void kva__slab_reclaimer_start(void);
/* call_rcu on kvadmit's call_rcu thread once it exists (else the calling
 * thread's usual one): an enqueue, never a futex wake. */
void kva__slab_call_rcu(struct rcu_head *head, void (*func)(struct rcu_head *head));
/* Fork child: liburcu freed that thread's data; the next start makes one. */
void kva__slab_reclaimer_atfork_child(void);

#endif
