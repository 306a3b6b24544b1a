/* SPDX-License-Identifier: Apache-2.0 */
/*
 * score: see score.h. Entries are cds_lfht nodes keyed by block hash, one
 * per (hash, location), added as duplicates; a query walks the chain and,
 * per (publisher, medium) pair that holds its block 0, the blocks it holds
 * in order. Nodes are freed after a grace period (kva_rcu_call), identities
 * likewise when replaced.
 */
#define _GNU_SOURCE
#include "score.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <kvadmit/lockfree/hash.h>
#include <kvadmit/lockfree/rcu_thread.h>
#include <urcu/rculfhash.h>

#include "index.h"

#define TOPIC_MAX 95u
#define MAX_PAIRS 1024u /* (publisher, medium) pairs a query follows */
#define PAIR_SLOTS 2048u /* its open-addressing map: at most half full */

struct node {
	struct cds_lfht_node lfht;
	uint64_t hash;
	uint32_t loc;
	struct rcu_head rcu;
};

struct ident {
	struct rcu_head rcu;
	int64_t dp_rank;
	uint8_t topic_len;
	char topic[TOPIC_MAX + 1];
};

struct kvf_score {
	struct cds_lfht *ht;
	uint32_t full_groups;
	/* published with release stores (I/O thread), read with acquire loads
	 * (kvf_score_query) or rcu_dereference inside a read-side section */
	struct ident *_Atomic ident[KVA_FLEET_MAX_PUBLISHERS];
	_Atomic uint32_t block_size[KVA_FLEET_MAX_PUBLISHERS];
};

static void node_free(struct rcu_head *head)
{
	kva_rcu_reclaim_begin();
	free(caa_container_of(head, struct node, rcu));
}

static void ident_free(struct rcu_head *head)
{
	kva_rcu_reclaim_begin();
	free(caa_container_of(head, struct ident, rcu));
}

static int match_hash(struct cds_lfht_node *n, const void *key)
{
	return caa_container_of(n, struct node, lfht)->hash == *(const uint64_t *)key;
}

struct kvf_score *kvf_score_new(uint32_t full_groups, uint64_t max_blocks)
{
	if (kva_rcu_init()) /* liburcu's call_rcu thread with signals blocked */
		return NULL;
	struct kvf_score *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->full_groups = full_groups;
	/* buckets for the index's cap up front: resizing while the I/O thread
	 * adds nodes would cost it (and the call_rcu thread) dearly */
	unsigned long buckets = 1024;
	while (buckets < max_blocks && buckets < (1ul << 30))
		buckets <<= 1;
	s->ht = cds_lfht_new_flavor(buckets, buckets, 0, CDS_LFHT_AUTO_RESIZE | CDS_LFHT_ACCOUNTING,
	                            &urcu_memb_flavor, NULL);
	if (!s->ht) {
		free(s);
		return NULL;
	}
	return s;
}

void kvf_score_free(struct kvf_score *s)
{
	if (!s)
		return;
	struct cds_lfht_iter it;
	struct node *n;
	/* no reader is left (kva_fleet_destroy's contract): freed at once */
	kva_rcu_read_lock();
	cds_lfht_for_each_entry(s->ht, &it, n, lfht) {
		if (cds_lfht_del(s->ht, &n->lfht) == 0)
			free(n);
	}
	kva_rcu_read_unlock();
	cds_lfht_destroy(s->ht, NULL);
	for (uint32_t i = 0; i < KVA_FLEET_MAX_PUBLISHERS; i++)
		free(atomic_load_explicit(&s->ident[i], memory_order_relaxed));
	free(s);
}

void kvf_score_add(struct kvf_score *s, uint64_t hash, uint32_t loc)
{
	struct node *n = malloc(sizeof(*n));
	if (!n)
		return; /* a score misses this entry; the index still has it */
	n->hash = hash;
	n->loc = loc;
	cds_lfht_node_init(&n->lfht);
	kva_rcu_read_lock();
	cds_lfht_add(s->ht, kva_hash64(hash), &n->lfht); /* publishes n (release) */
	kva_rcu_read_unlock();
}

void kvf_score_del(struct kvf_score *s, uint64_t hash, uint32_t loc)
{
	struct cds_lfht_iter it;
	struct node *n;
	kva_rcu_read_lock();
	cds_lfht_for_each_entry_duplicate(s->ht, kva_hash64(hash), match_hash, &hash, &it, n, lfht)
	{
		if (n->loc == loc && cds_lfht_del(s->ht, &n->lfht) == 0) {
			kva_rcu_call(&n->rcu, node_free);
			break;
		}
	}
	kva_rcu_read_unlock();
}

void kvf_score_drop_publisher(struct kvf_score *s, uint32_t pub)
{
	struct cds_lfht_iter it;
	struct node *n;
	kva_rcu_read_lock();
	cds_lfht_for_each_entry(s->ht, &it, n, lfht) {
		if (KVF_LOC_PUB(n->loc) == pub && cds_lfht_del(s->ht, &n->lfht) == 0)
			kva_rcu_call(&n->rcu, node_free);
	}
	kva_rcu_read_unlock();
}

/* Replaces pub's identity with *next (a copy), the old one freed after a
 * grace period. */
static void ident_set(struct kvf_score *s, uint32_t pub, const struct ident *next)
{
	struct ident *copy = malloc(sizeof(*copy));
	if (!copy)
		return; /* the old identity stays */
	*copy = *next;
	/* release: a reader's acquire load sees the copy's fields */
	struct ident *old = atomic_exchange_explicit(&s->ident[pub], copy, memory_order_acq_rel);
	if (old)
		kva_rcu_call(&old->rcu, ident_free);
}

void kvf_score_topic(struct kvf_score *s, uint32_t pub, const void *topic, size_t len)
{
	/* the I/O thread is the only writer: its own pointer, read relaxed */
	const struct ident *cur = atomic_load_explicit(&s->ident[pub], memory_order_relaxed);
	len = len > TOPIC_MAX ? TOPIC_MAX : len;
	if (cur && cur->topic_len == len && memcmp(cur->topic, topic, len) == 0)
		return;
	struct ident next = {.dp_rank = cur ? cur->dp_rank : -1, .topic_len = (uint8_t)len};
	memcpy(next.topic, topic, len);
	next.topic[len] = 0;
	ident_set(s, pub, &next);
}

void kvf_score_rank(struct kvf_score *s, uint32_t pub, int64_t dp_rank)
{
	const struct ident *cur = atomic_load_explicit(&s->ident[pub], memory_order_relaxed);
	if (cur ? cur->dp_rank == dp_rank : dp_rank < 0)
		return;
	struct ident next = {.dp_rank = dp_rank};
	if (cur) {
		next.topic_len = cur->topic_len;
		memcpy(next.topic, cur->topic, sizeof next.topic);
	}
	ident_set(s, pub, &next);
}

void kvf_score_block_size(struct kvf_score *s, uint32_t pub, uint32_t block_size)
{
	atomic_store_explicit(&s->block_size[pub], block_size, memory_order_relaxed);
}

/* A query's (publisher, medium) pairs: a small open-addressing map pair ->
 * index into len[]; the pairs come from block 0's entries only. */
struct walk {
	uint32_t npairs;
	uint32_t pair[MAX_PAIRS], len[MAX_PAIRS];
	uint16_t slot[PAIR_SLOTS]; /* index + 1; 0 empty */
};

static uint32_t *walk_len(struct walk *w, uint32_t pair, bool add)
{
	for (uint32_t i = (uint32_t)kva_hash64(pair) & (PAIR_SLOTS - 1);;
	     i = (i + 1) & (PAIR_SLOTS - 1)) {
		uint16_t k = w->slot[i];
		if (k && w->pair[k - 1] == pair)
			return &w->len[k - 1];
		if (!k) {
			if (!add || w->npairs == MAX_PAIRS)
				return NULL;
			w->pair[w->npairs] = pair;
			w->len[w->npairs] = 0;
			w->slot[i] = (uint16_t)++w->npairs;
			return &w->len[w->npairs - 1];
		}
	}
}

static void copy_name(char *dst, size_t cap, const char *src, size_t n)
{
	n = n >= cap ? cap - 1 : n;
	memcpy(dst, src, n);
	dst[n] = 0;
}

/* Identity fields of out from pub's published ident (inside the section). */
static void fill_ident(struct kvf_score *s, kva_fleet_match *o)
{
	/* acquire: pairs with the release in ident_set; the ident is not freed
	 * before this read-side section ends */
	const struct ident *id = atomic_load_explicit(&s->ident[o->publisher], memory_order_acquire);
	o->dp_rank = id ? (int32_t)id->dp_rank : -1;
	if (!id)
		return;
	copy_name(o->topic, sizeof o->topic, id->topic, id->topic_len);
	/* "kv@pod@model": the pod and the model after the first two '@' */
	const char *a = memchr(id->topic, '@', id->topic_len);
	const char *end = id->topic + id->topic_len;
	const char *b = a ? memchr(a + 1, '@', (size_t)(end - a - 1)) : NULL;
	if (a && b) {
		copy_name(o->pod, sizeof o->pod, a + 1, (size_t)(b - a - 1));
		copy_name(o->model, sizeof o->model, b + 1, (size_t)(end - b - 1));
	}
}

static int by_blocks(const void *pa, const void *pb)
{
	const kva_fleet_match *a = pa, *b = pb;
	if (a->blocks != b->blocks)
		return a->blocks > b->blocks ? -1 : 1;
	if (a->publisher != b->publisher)
		return a->publisher < b->publisher ? -1 : 1;
	return strcmp(a->medium, b->medium);
}

int kvf_score_query(struct kvf_score *s, const char (*media)[KVF_MEDIUM_MAX + 1],
                    const uint32_t *block_size, const uint64_t *hashes, uint32_t n,
                    kva_fleet_match *out, uint32_t cap)
{
	struct walk walk, *w = &walk; /* 12 KiB of stack: no allocation on this path */
	w->npairs = 0;
	memset(w->slot, 0, sizeof w->slot);
	struct cds_lfht_iter it;
	struct node *nd;
	kva_rcu_read_lock();
	for (uint32_t i = 0; i < n; i++) {
		uint32_t advanced = 0;
		uint64_t h = hashes[i];
		cds_lfht_for_each_entry_duplicate(s->ht, kva_hash64(h), match_hash, &h, &it, nd, lfht)
		{
			uint32_t group = nd->loc & 0xff;
			if (group > 31 || !(s->full_groups >> group & 1))
				continue;
			uint32_t *len = walk_len(w, KVF_LOC_PUB_MEDIUM(nd->loc), i == 0);
			if (len && *len == i) { /* several full groups: the first counts */
				*len = i + 1;
				advanced++;
			}
		}
		if (!advanced) /* nobody holds block i: no prefix goes further */
			break;
	}
	uint32_t nout = 0;
	for (uint32_t k = 0; k < w->npairs; k++) {
		kva_fleet_match o = {.publisher = w->pair[k] >> 8, .blocks = w->len[k]};
		uint32_t medium = w->pair[k] & 0xff;
		copy_name(o.medium, sizeof o.medium, media[medium], strlen(media[medium]));
		uint32_t bs = block_size[medium] ? block_size[medium]
		                                 : atomic_load_explicit(&s->block_size[o.publisher],
		                                                        memory_order_relaxed);
		o.tokens = o.blocks * bs;
		fill_ident(s, &o);
		if (nout < cap) {
			out[nout++] = o;
			continue;
		}
		/* full: the longest stay */
		uint32_t shortest = 0;
		for (uint32_t j = 1; j < nout; j++)
			if (by_blocks(&out[j], &out[shortest]) > 0)
				shortest = j;
		if (cap && by_blocks(&o, &out[shortest]) < 0)
			out[shortest] = o;
	}
	kva_rcu_read_unlock();
	qsort(out, nout, sizeof(*out), by_blocks);
	return (int)nout;
}
