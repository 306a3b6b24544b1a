/* SPDX-License-Identifier: Apache-2.0 */
/*
 * waitq: the FCFS waiting queue (see waitq.h for the contract).
 *
 * Owns the list links of queued nodes; the nodes themselves belong to the
 * caller, who frees them after a grace period.
 *
 * The operations are liburcu's cds_list_add_rcu / cds_list_add_tail_rcu /
 * cds_list_del_rcu, spelled out with GCC __atomic builtins on the same
 * struct cds_list_head. liburcu publishes with a fence plus a volatile store:
 * the same machine code on x86, but a plain store to ThreadSanitizer, which
 * reported every reader's atomic load as racing with it. Readers only follow
 * `next`, so every store to a `next` is a release store (a plain mov on x86),
 * including the new node's own, which a reader still standing on that node
 * from an earlier incarnation may follow (see "Re-queue" in waitq.h); `prev`
 * is writer-private. The fields are plain pointers in liburcu's type, hence
 * builtins rather than <stdatomic.h>.
 */
#include <kvadmit/lockfree/waitq.h>

static inline void set_next(struct cds_list_head *at, struct cds_list_head *n)
{
	/* R1: pairs with A1 in kva_waitq_for_each_rcu — a reader that reaches
	 * n through `at` sees n's links and the record it is embedded in. */
	__atomic_store_n(&at->next, n, __ATOMIC_RELEASE);
}

void kva_waitq_init(struct kva_waitq *q)
{
	q->head.next = &q->head;
	q->head.prev = &q->head;
}

void kva_waitq_push_back(struct kva_waitq *q, struct kva_waitq_node *n)
{
	struct cds_list_head *last = q->head.prev;

	set_next(&n->link, &q->head);
	n->link.prev = last;
	set_next(last, &n->link);
	q->head.prev = &n->link;
}

void kva_waitq_push_front(struct kva_waitq *q, struct kva_waitq_node *n)
{
	struct cds_list_head *first = q->head.next;

	set_next(&n->link, first);
	n->link.prev = &q->head;
	first->prev = &n->link;
	set_next(&q->head, &n->link);
}

void kva_waitq_insert_after(struct kva_waitq *q, struct kva_waitq_node *at,
                            struct kva_waitq_node *n)
{
	struct cds_list_head *prev = at ? &at->link : &q->head;
	struct cds_list_head *next = prev->next;

	/* n's own link first, then the one that publishes it (R1) */
	set_next(&n->link, next);
	n->link.prev = prev;
	next->prev = &n->link;
	set_next(prev, &n->link);
}

void kva_waitq_unlink(struct kva_waitq *q, struct kva_waitq_node *n)
{
	(void)q; /* the queue the node is in: kept in the signature for symmetry */
	struct cds_list_head *l = &n->link;

	l->next->prev = l->prev;
	/* Release although l->next was published before: a reader that loads
	 * it from here must synchronise with this store, not the older one. */
	set_next(l->prev, l->next);
	/* l->next stays intact: readers standing on n still walk on. */
}

/* The writer reads its own links plainly: only it ever stores them. */
struct kva_waitq_node *kva_waitq_first(struct kva_waitq *q)
{
	struct cds_list_head *l = q->head.next;

	return l == &q->head ? NULL : caa_container_of(l, struct kva_waitq_node, link);
}

struct kva_waitq_node *kva_waitq_next(struct kva_waitq *q, struct kva_waitq_node *n)
{
	struct cds_list_head *l = n->link.next;

	return l == &q->head ? NULL : caa_container_of(l, struct kva_waitq_node, link);
}

struct kva_waitq_node *kva_waitq_prev(struct kva_waitq *q, struct kva_waitq_node *n)
{
	struct cds_list_head *l = n->link.prev;

	return l == &q->head ? NULL : caa_container_of(l, struct kva_waitq_node, link);
}
