/* SPDX-License-Identifier: Apache-2.0 */
/*
 * inbox: multi-producer single-consumer event queue on liburcu's cds_wfcq.
 *
 * Producers enqueue with one atomic exchange (wait-free) and never take a
 * lock. The single consumer moves everything enqueued so far into a private
 * batch with one splice, then walks the batch without touching the shared
 * head again.
 *
 * Two consumer flavours. _blocking waits (spins, then sleeps) for a
 * producer that has exchanged the tail but not yet linked its node: fine for
 * a worker thread. _nonblocking never waits: such a node, and everything
 * after it, stays in the batch for the next call (an engine step that must
 * never block uses only these).
 *
 * Synchronisation table:
 *   call                            | may run concurrently with
 *   --------------------------------+----------------------------------------
 *   kva_inbox_push                  | itself (any threads), the consumer calls
 *   kva_inbox_drain_blocking,       | kva_inbox_push; NOT with each other or
 *   kva_inbox_splice_nonblocking    | themselves (one consumer)
 *   kva_inbox_batch_pop_*           | anything (the batch is the consumer's)
 *   kva_inbox_empty                 | anything (a hint: may be stale on return)
 *
 * Happens-before: everything a producer wrote before kva_inbox_push() is
 * visible to the consumer after it receives the node from a batch (also to
 * ThreadSanitizer: see the annotations in inbox.c).
 */
#ifndef KVA_LOCKFREE_INBOX_H
#define KVA_LOCKFREE_INBOX_H

#include <stdalign.h>
#include <stdbool.h>
#include <stddef.h>
#include <urcu/wfcqueue.h>

struct kva_inbox_node {
	struct cds_wfcq_node wfcq;
};

struct kva_inbox {
	/* consumer side and producer side on their own cache lines */
	alignas(64) struct __cds_wfcq_head head;
	alignas(64) struct cds_wfcq_tail tail;
};

/* A private list of received nodes, in enqueue order. */
struct kva_inbox_batch {
	struct __cds_wfcq_head head;
	struct cds_wfcq_tail tail;
};

void kva_inbox_init(struct kva_inbox *q);
/* The queue must be empty (drained) or its nodes owned elsewhere. */
void kva_inbox_fini(struct kva_inbox *q);

static inline void kva_inbox_node_init(struct kva_inbox_node *n) { cds_wfcq_node_init(&n->wfcq); }

/* Any thread, wait-free. Returns true when the queue was empty before this
 * push (the caller may use it to wake the consumer). */
bool kva_inbox_push(struct kva_inbox *q, struct kva_inbox_node *n);

/* Consumer only. Moves every node enqueued so far into *batch (which is
 * (re)initialised). Returns true if anything was moved. May wait for a
 * producer that is between its exchange and its link store. */
bool kva_inbox_drain_blocking(struct kva_inbox *q, struct kva_inbox_batch *batch);

/* Consumer only. Pops the oldest node of a drained batch, NULL when empty.
 * May wait like kva_inbox_drain_blocking. */
struct kva_inbox_node *kva_inbox_batch_pop_blocking(struct kva_inbox_batch *batch);

void kva_inbox_batch_init(struct kva_inbox_batch *batch);

/* Consumer only, never waits. Appends the nodes enqueued so far to *batch
 * (which keeps what earlier calls left in it). Returns false when nothing
 * could be moved: the queue is empty, or its first producer is still linking. */
bool kva_inbox_splice_nonblocking(struct kva_inbox *q, struct kva_inbox_batch *batch);

/* Consumer only, never waits. The oldest node of the batch; NULL when the
 * batch is empty or when that node cannot be detached yet (a producer has
 * not linked the node after it): it stays for a later call. */
struct kva_inbox_node *kva_inbox_batch_pop_nonblocking(struct kva_inbox_batch *batch);

/* Consumer only, a hint for prefetching: the node linked after `n` (NULL:
 * the batch's first), or NULL if there is none yet. Its contents are only
 * guaranteed once popped; nothing under ThreadSanitizer (which cannot see
 * the producers' link stores and would report the early look). */
static inline struct kva_inbox_node *kva_inbox_batch_peek(struct kva_inbox_batch *batch,
                                                          struct kva_inbox_node *n)
{
#ifdef KVA_TSAN
	(void)batch;
	(void)n;
	return NULL;
#else
	struct cds_wfcq_node *w = n ? &n->wfcq : &batch->head.node;
	w = __atomic_load_n(&w->next, __ATOMIC_ACQUIRE);
	return w ? caa_container_of(w, struct kva_inbox_node, wfcq) : NULL;
#endif
}

/* Out of line, in inbox.c: there liburcu's emptiness test is inline; in a
 * caller without _LGPL_SOURCE it is a call into the shared liburcu-common,
 * through the PLT (an idle step asks about five queues). */
bool kva_inbox_batch_empty(struct kva_inbox_batch *batch);

/* Any thread: a hint only. */
bool kva_inbox_empty(struct kva_inbox *q);

#endif
