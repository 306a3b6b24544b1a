/* SPDX-License-Identifier: Apache-2.0 */
/*
 * waitq: FCFS waiting queue as an intrusive doubly linked list published
 * with RCU (cds_list_*_rcu).
 *
 * One writer (the owner's scheduler thread) mutates; any number of readers
 * traverse concurrently inside an RCU read-side critical section. A node
 * unlinked by the writer may still be seen by readers that entered before
 * the unlink: the owner frees it only after a grace period (call_rcu).
 * Re-queue: a node pushed again within a grace period of its unlink is safe
 * for memory, but a reader still standing on it follows its new links and
 * may see some nodes twice or miss some; never repeating that keeps each
 * traversal duplicate-free (nodes only move forward in list order).
 *
 * Synchronisation table:
 *   call                                  | may run concurrently with
 *   --------------------------------------+-------------------------------
 *   push_back/push_front/unlink           | readers only (single writer)
 *   kva_waitq_first/next (writer view)    | readers only (writer thread)
 *   kva_waitq_for_each_rcu                | everything (under rcu read lock)
 *
 * All operations are O(1).
 */
#ifndef KVA_LOCKFREE_WAITQ_H
#define KVA_LOCKFREE_WAITQ_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <urcu/rculist.h>

struct kva_waitq_node {
	struct cds_list_head link;
};

struct kva_waitq {
	struct cds_list_head head;
};

void kva_waitq_init(struct kva_waitq *q);

/* Writer only. The node must not be queued. */
void kva_waitq_push_back(struct kva_waitq *q, struct kva_waitq_node *n);
void kva_waitq_push_front(struct kva_waitq *q, struct kva_waitq_node *n);
/* Writer only. n (not queued) goes right after `at` (queued in q), or to
 * the front when `at` is NULL: how an ordered queue places a node inside it
 * (reservations/priority_levels.c). A reader standing on `at` sees n or
 * not; never a node twice unless n itself was unlinked within a grace
 * period (see "Re-queue"). */
void kva_waitq_insert_after(struct kva_waitq *q, struct kva_waitq_node *at,
                            struct kva_waitq_node *n);
/* Writer only. The node must be queued in q. */
void kva_waitq_unlink(struct kva_waitq *q, struct kva_waitq_node *n);

/* Writer view (no RCU needed on the writer thread). */
struct kva_waitq_node *kva_waitq_first(struct kva_waitq *q);
struct kva_waitq_node *kva_waitq_next(struct kva_waitq *q, struct kva_waitq_node *n);
/* The node before n; NULL when n is the first. */
struct kva_waitq_node *kva_waitq_prev(struct kva_waitq *q, struct kva_waitq_node *n);

static inline bool kva_waitq_empty(struct kva_waitq *q)
{
	return kva_waitq_first(q) == NULL;
}

/* A1: pairs with R1 in waitq.c (the writer's release store of a link) —
 * the reader sees the node it reaches and the record around it. Spelled out
 * rather than rcu_dereference(), which without _LGPL_SOURCE compiles to a
 * plain load; GCC turns rcu_dereference's consume into acquire anyway. */
#define kva__waitq_load_next(l) __atomic_load_n(&(l)->next, __ATOMIC_ACQUIRE)

/* Reader traversal: caller holds the RCU read lock. pos is a
 * struct kva_waitq_node *. */
#define kva_waitq_for_each_rcu(q, pos)                                                             \
	for (struct cds_list_head *kva__l = kva__waitq_load_next(&(q)->head);                      \
	     kva__l != &(q)->head &&                                                               \
	     ((pos) = caa_container_of(kva__l, struct kva_waitq_node, link), 1);                   \
	     kva__l = kva__waitq_load_next(kva__l))

#endif
