/*
 * idtable: lock-free hash table from a 64-bit id to intrusive records, on
 * liburcu's cds_lfht (urcu-memb flavour, auto-resize).
 *
 * Several records may share an id as long as their generations differ: a
 * reused id is told apart from its previous incarnation by the generation,
 * and a lookup by (id, gen) never returns the wrong incarnation.
 *
 * Records are owned by the caller. After kva_idtable_del() a record may still
 * be read by lookups that started before; free it only after a grace period
 * (kva_rcu_call() from rcu_thread.h, whose callback starts with
 * kva_rcu_reclaim_begin(); or kva_rcu_synchronize()).
 *
 * Synchronisation table (every call with the RCU read lock held, except
 * init/fini):
 *   call                        | may run concurrently with
 *   ----------------------------+------------------------------
 *   add / del                   | everything
 *   lookup / first / next       | everything
 *   init / fini                 | nothing
 */
#ifndef KVA_LOCKFREE_IDTABLE_H
#define KVA_LOCKFREE_IDTABLE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "rcu_thread.h"
#include <urcu/rculfhash.h>

struct kva_idtable_node {
	struct cds_lfht_node lfht;
	uint64_t id;
	uint32_t gen;
};

struct kva_idtable {
	struct cds_lfht *ht;
	/* Records present; O(1) for kva_idtable_count and the emptiness check
	 * in fini (cds_lfht's own counters are per-CPU approximations, exact
	 * only by walking the table). */
	_Atomic unsigned long count;
};

struct kva_idtable_iter {
	struct cds_lfht_iter it;
	uint64_t id;
};

/* Returns 0 or -ENOMEM. */
int kva_idtable_init(struct kva_idtable *t, unsigned long initial_buckets);
/* The table must be empty. Must not be called from an RCU read-side section
 * or from a call_rcu callback. Returns 0 or -EBUSY (not empty). */
int kva_idtable_fini(struct kva_idtable *t);

/* RCU read lock held. node->id and node->gen must be set. */
void kva_idtable_add(struct kva_idtable *t, struct kva_idtable_node *node);
/* RCU read lock held. 0, or -ENOENT if it was not (or no longer) present. */
int kva_idtable_del(struct kva_idtable *t, struct kva_idtable_node *node);
/* RCU read lock held. The record with this id and generation, or NULL. */
struct kva_idtable_node *kva_idtable_lookup(struct kva_idtable *t, uint64_t id, uint32_t gen);
/* RCU read lock held. Iterate every record with this id (any generation). */
struct kva_idtable_node *kva_idtable_first(struct kva_idtable *t, uint64_t id,
					   struct kva_idtable_iter *it);
struct kva_idtable_node *kva_idtable_next(struct kva_idtable *t, struct kva_idtable_iter *it);

/* Number of records, possibly stale on return (any thread; O(1), no RCU
 * read lock needed). */
unsigned long kva_idtable_count(struct kva_idtable *t);

#endif
