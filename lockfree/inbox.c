/* SPDX-License-Identifier: Apache-2.0 */
/*
 * inbox: the MPSC event queue (see inbox.h for the contract).
 *
 * Owns nothing but the cds_wfcq head/tail pair; nodes belong to the caller.
 * Producers go through cds_wfcq_enqueue (one xchg on the tail, then a store
 * linking the previous tail); the consumer detaches everything with one
 * splice into a private batch and pops from there, so the shared head is
 * touched once per drain, not once per event.
 *
 * In normal builds liburcu's inline versions are used (_LGPL_SOURCE). Under
 * ThreadSanitizer we call the library's out-of-line copies of the same code
 * instead: they are not instrumented, so TSan sees neither their plain
 * link stores nor their inline-asm xchg and only the release/acquire
 * annotations below, which state the queue's real happens-before edge.
 */
#ifndef KVA_TSAN
#define _LGPL_SOURCE 1
#endif
#include <kvadmit/lockfree/inbox.h>
#include <kvadmit/lockfree/tsan_hb.h>

void kva_inbox_init(struct kva_inbox *q)
{
	__cds_wfcq_init(&q->head, &q->tail);
}

void kva_inbox_fini(struct kva_inbox *q)
{
	/* __cds_wfcq_head has no mutex to destroy; nodes are the caller's. */
	(void)q;
}

bool kva_inbox_push(struct kva_inbox *q, struct kva_inbox_node *n)
{
	/* A dequeued node keeps a stale next link; re-pushing it unreset (the
	 * engine reuses embedded events) would corrupt the queue. */
	cds_wfcq_node_init(&n->wfcq);
	/* R1: pairs with A1 in kva_inbox_batch_pop — publishes the producer's
	 * writes to the record. cds_wfcq_enqueue's xchg is a full barrier. */
	KVA__TSAN_RELEASE(&n->wfcq);
	/* cds_wfcq_enqueue returns false when the queue was empty. */
	return !cds_wfcq_enqueue(&q->head, &q->tail, &n->wfcq);
}

bool kva_inbox_drain_blocking(struct kva_inbox *q, struct kva_inbox_batch *batch)
{
	__cds_wfcq_init(&batch->head, &batch->tail);
	/* Single consumer: no dequeue lock needed on either side. */
	return __cds_wfcq_splice_blocking(&batch->head, &batch->tail, &q->head, &q->tail) !=
	       CDS_WFCQ_RET_SRC_EMPTY;
}

static struct kva_inbox_node *received(struct cds_wfcq_node *w)
{
	if (!w || w == CDS_WFCQ_WOULDBLOCK)
		return NULL;
	/* A1: pairs with R1 in kva_inbox_push — sees the record's fields. */
	KVA__TSAN_ACQUIRE(w);
	return caa_container_of(w, struct kva_inbox_node, wfcq);
}

struct kva_inbox_node *kva_inbox_batch_pop_blocking(struct kva_inbox_batch *batch)
{
	return received(__cds_wfcq_dequeue_blocking(&batch->head, &batch->tail));
}

void kva_inbox_batch_init(struct kva_inbox_batch *batch)
{
	__cds_wfcq_init(&batch->head, &batch->tail);
}

bool kva_inbox_splice_nonblocking(struct kva_inbox *q, struct kva_inbox_batch *batch)
{
	enum cds_wfcq_ret r =
		__cds_wfcq_splice_nonblocking(&batch->head, &batch->tail, &q->head, &q->tail);
	return r == CDS_WFCQ_RET_DEST_EMPTY || r == CDS_WFCQ_RET_DEST_NON_EMPTY;
}

struct kva_inbox_node *kva_inbox_batch_pop_nonblocking(struct kva_inbox_batch *batch)
{
	return received(__cds_wfcq_dequeue_nonblocking(&batch->head, &batch->tail));
}

bool kva_inbox_batch_empty(struct kva_inbox_batch *batch)
{
	return cds_wfcq_empty(&batch->head, &batch->tail);
}

bool kva_inbox_empty(struct kva_inbox *q)
{
	return cds_wfcq_empty(&q->head, &q->tail);
}
