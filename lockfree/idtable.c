/*
 * idtable: id → record hash table on cds_lfht (see idtable.h for the
 * contract).
 *
 * Owns the cds_lfht and the record count; records belong to the caller.
 * Records sharing an id are kept as cds_lfht duplicates (cds_lfht_add, not
 * add_unique), so a new incarnation can be inserted before the old one is
 * removed; every lookup matches on (id, gen). Ids are hashed with the
 * splitmix64 finalizer, a bijection, so distinct ids never share a hash and
 * sequential ids still spread over all buckets.
 *
 * ThreadSanitizer cannot see inside liburcu (not instrumented), so the
 * publication of a record through the table is restated: release on the
 * node before cds_lfht_add, acquire on it in the match callback, before any
 * of its fields is read — every node a lookup returns passed through match.
 */
#include "idtable.h"
#include "tsan_hb.h"

#include <errno.h>

/* Largest initial size we round up to; cds_lfht grows past it on demand. */
#define INIT_BUCKETS_MAX (1UL << 24)
#define INIT_BUCKETS_DEFAULT 64UL

struct id_gen {
	uint64_t id;
	uint32_t gen;
};

static unsigned long hash_id(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return (unsigned long)x;
}

static inline struct kva_idtable_node *to_rec(struct cds_lfht_node *n)
{
	/* A1: pairs with R1 in kva_idtable_add — the record's id and gen. */
	KVA__TSAN_ACQUIRE(n);
	return caa_container_of(n, struct kva_idtable_node, lfht);
}

static int match_id(struct cds_lfht_node *n, const void *key)
{
	return to_rec(n)->id == *(const uint64_t *)key;
}

static int match_id_gen(struct cds_lfht_node *n, const void *key)
{
	const struct id_gen *k = key;
	struct kva_idtable_node *r = to_rec(n);

	return r->id == k->id && r->gen == k->gen;
}

static struct kva_idtable_node *iter_rec(struct cds_lfht_iter *it)
{
	struct cds_lfht_node *n = cds_lfht_iter_get_node(it);

	return n ? caa_container_of(n, struct kva_idtable_node, lfht) : NULL;
}

int kva_idtable_init(struct kva_idtable *t, unsigned long initial_buckets)
{
	unsigned long size = 1;

	if (initial_buckets == 0)
		initial_buckets = INIT_BUCKETS_DEFAULT;
	if (initial_buckets > INIT_BUCKETS_MAX)
		initial_buckets = INIT_BUCKETS_MAX;
	while (size < initial_buckets)
		size <<= 1;
	atomic_init(&t->count, 0);
	/* The initial size is also the floor auto-resize shrinks back to. */
	t->ht = cds_lfht_new_flavor(size, size, 0, CDS_LFHT_AUTO_RESIZE | CDS_LFHT_ACCOUNTING,
				    &urcu_memb_flavor, NULL);
	return t->ht ? 0 : -ENOMEM;
}

int kva_idtable_fini(struct kva_idtable *t)
{
	int err;

	/* Checked here rather than by cds_lfht_destroy: a refused destroy has
	 * already switched auto-resize off for good. Relaxed: nothing runs
	 * concurrently with fini. */
	if (atomic_load_explicit(&t->count, memory_order_relaxed) != 0)
		return -EBUSY;
	err = cds_lfht_destroy(t->ht, NULL);
	if (err)
		return -EBUSY;
	t->ht = NULL;
	return 0;
}

void kva_idtable_add(struct kva_idtable *t, struct kva_idtable_node *node)
{
	/* Counted before it becomes visible, so a concurrent del of it can
	 * never take the count below zero. Relaxed: a statistic. */
	atomic_fetch_add_explicit(&t->count, 1, memory_order_relaxed);
	/* R1: pairs with A1 in to_rec — lookups see id, gen and the record
	 * fields written before add (cds_lfht_add is a full barrier). */
	KVA__TSAN_RELEASE(&node->lfht);
	cds_lfht_add(t->ht, hash_id(node->id), &node->lfht);
}

int kva_idtable_del(struct kva_idtable *t, struct kva_idtable_node *node)
{
	if (cds_lfht_del(t->ht, &node->lfht))
		return -ENOENT;
	atomic_fetch_sub_explicit(&t->count, 1, memory_order_relaxed);
	return 0;
}

struct kva_idtable_node *kva_idtable_lookup(struct kva_idtable *t, uint64_t id, uint32_t gen)
{
	struct id_gen k = {.id = id, .gen = gen};
	struct cds_lfht_iter it;

	cds_lfht_lookup(t->ht, hash_id(id), match_id_gen, &k, &it);
	return iter_rec(&it);
}

struct kva_idtable_node *kva_idtable_first(struct kva_idtable *t, uint64_t id,
					   struct kva_idtable_iter *it)
{
	it->id = id;
	cds_lfht_lookup(t->ht, hash_id(id), match_id, &it->id, &it->it);
	return iter_rec(&it->it);
}

struct kva_idtable_node *kva_idtable_next(struct kva_idtable *t, struct kva_idtable_iter *it)
{
	/* cds_lfht_next_duplicate would dereference an exhausted iterator. */
	if (!cds_lfht_iter_get_node(&it->it))
		return NULL;
	cds_lfht_next_duplicate(t->ht, match_id, &it->id, &it->it);
	return iter_rec(&it->it);
}

unsigned long kva_idtable_count(struct kva_idtable *t)
{
	return atomic_load_explicit(&t->count, memory_order_relaxed);
}
