/*
 * inbox: multi-producer single-consumer event queue on liburcu's cds_wfcq.
 *
 * Producers enqueue with one atomic exchange (wait-free) and never take a
 * lock. The single consumer takes everything enqueued so far with one
 * __cds_wfcq_splice_blocking() into a private batch, then walks the batch
 * without touching shared state again.
 *
 * Synchronisation table:
 *   call                 | may run concurrently with
 *   ---------------------+-----------------------------------------------
 *   kva_inbox_push       | itself (any threads), kva_inbox_drain
 *   kva_inbox_drain      | kva_inbox_push; NOT with itself (one consumer)
 *   kva_inbox_batch_pop  | anything (the batch is private to the consumer)
 *   kva_inbox_empty      | anything (a hint: may be stale on return)
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
 * (re)initialised). Returns true if anything was moved. */
bool kva_inbox_drain(struct kva_inbox *q, struct kva_inbox_batch *batch);

/* Consumer only. Pops the oldest node of a drained batch, NULL when empty. */
struct kva_inbox_node *kva_inbox_batch_pop(struct kva_inbox_batch *batch);

/* Any thread: a hint only. */
bool kva_inbox_empty(struct kva_inbox *q);

#endif
