/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The priority order (KVA_ORDER_PRIORITY). The waiting queue stays one RCU
 * list (e->waitq) in admission order, so admission's walk from the head and
 * kva_waiting_foreach are the FCFS order's, unchanged. The list is cut into
 * levels, each a run of requests of one key (kva__levels_key): the table
 * below finds a level by key (an idmap) and keeps its first and last node,
 * so joining the back or the front of a level in use is O(1). When a level
 * appears, its place is found by a binary search over the keys in use,
 * kept sorted largest first so that the level admission empties, the
 * head's, is the array's last and leaves without a memmove.
 *
 * Within a level, the requests preempted or returned by a reset come first,
 * the last returned first (each joined the level's front: rules
 * reset-returns-ready, preemption), then the others in (arrival, join)
 * order: joining the back walks back past the requests that arrived later,
 * never past one that joined the front (none to walk past when the host's
 * arrivals come in order, or the host gives none: then the arrival is the
 * ingest step's clock, which never goes back). A priority change joins the
 * back of its new level as an arrival of the step that handles it.
 */
#include <errno.h>
#include <string.h>

#include "alloc.h"
#include "priority_levels.h"
#include "stats.h"

struct kva__level {
	int64_t key;
	struct kva__req *first, *last;
	uint64_t last_arrival; /* the last one's: a join compares without reading it */
	uint32_t count;
	uint32_t next_free; /* on the free list: index + 1, 0 = none */
	/* admission's prefetch hints within the level (waiting_queue.c) */
	uint32_t n_pushed;
	struct kva__pushed pushed[KVA__AHEAD];
};

struct kva__levels {
	struct kva__level *lv; /* cap of them: in use, or on the free list */
	uint32_t *order;       /* the in-use levels' indices, keys descending */
	uint32_t cap, n_order, free_top;
	struct kva_idmap by_key; /* key -> index in lv */
};

#define LEVELS_INITIAL 16u

size_t kva__levels_slot_size(const kva_config *cfg)
{
	return sizeof(struct kva__req) + (cfg->order == KVA_ORDER_PRIORITY ? sizeof(struct kva__prio) : 0);
}

/* Levels [from, to) go on the free list. */
static void free_range(struct kva__levels *t, uint32_t from, uint32_t to)
{
	for (uint32_t i = to; i-- > from;) {
		t->lv[i].next_free = t->free_top;
		t->free_top = i + 1;
	}
}

/* Both arrays twice as large, or neither (then nothing changed). */
static int grow(struct kva__levels *t)
{
	uint32_t cap = t->cap ? t->cap * 2 : LEVELS_INITIAL;
	if (cap < t->cap)
		return -ENOMEM;
	struct kva__level *lv = kva__alloc(cap * sizeof(*lv));
	uint32_t *order = kva__alloc(cap * sizeof(*order));
	if (!lv || !order) {
		if (lv)
			kva__free(lv, cap * sizeof(*lv));
		if (order)
			kva__free(order, cap * sizeof(*order));
		return -ENOMEM;
	}
	if (t->cap) {
		memcpy(lv, t->lv, t->cap * sizeof(*lv));
		memcpy(order, t->order, t->n_order * sizeof(*order));
		kva__free(t->lv, t->cap * sizeof(*lv));
		kva__free(t->order, t->cap * sizeof(*order));
	}
	t->lv = lv;
	t->order = order;
	free_range(t, t->cap, cap);
	t->cap = cap;
	return 0;
}

int kva__levels_init(kva_engine *e)
{
	if (e->cfg.order != KVA_ORDER_PRIORITY)
		return 0;
	struct kva__levels *t = kva__calloc(sizeof(*t));
	if (!t)
		return -ENOMEM;
	if (kva_idmap_init(&t->by_key, kva__alloc, kva__free, 64) != 0 || grow(t) != 0) {
		kva_idmap_fini(&t->by_key); /* a no-op on a map that failed init */
		kva__free(t, sizeof(*t));
		return -ENOMEM;
	}
	e->lv = t;
	return 0;
}

void kva__levels_fini(kva_engine *e)
{
	struct kva__levels *t = e->lv;
	if (!t)
		return;
	kva_idmap_fini(&t->by_key);
	kva__free(t->lv, t->cap * sizeof(*t->lv));
	kva__free(t->order, t->cap * sizeof(*t->order));
	kva__free(t, sizeof(*t));
	e->lv = NULL;
}

int64_t kva__levels_key(const kva_engine *e, const struct kva__req *r)
{
	const struct kva__prio *p = kva__prio(r);
	uint64_t i = e->cfg.aging_interval_ns;
	if (!i)
		return p->priority;
	/* at most 2^62 intervals: the sum with any int32 fits */
	uint64_t n = p->arrival / i;
	return (int64_t)p->priority + (int64_t)(n < (1ull << 62) ? n : (1ull << 62));
}

static uint32_t *find(struct kva__levels *t, int64_t key)
{
	return kva_idmap_find(&t->by_key, (uint64_t)key);
}

int kva__levels_ingest(kva_engine *e, struct kva__req *r)
{
	struct kva__prio *p = kva__prio(r);
	if (!p->arrival)
		p->arrival = e->now; /* the steps' clock never goes back: in order */
	return kva__levels_reserve(e, r);
}

int kva__levels_reserve(kva_engine *e, struct kva__req *r)
{
	struct kva__levels *t = e->lv;
	if (find(t, kva__levels_key(e, r)))
		return 0;
	if (!t->free_top && grow(t) != 0)
		return -ENOMEM;
	return kva_idmap_reserve(&t->by_key, 1);
}

/* Where key goes in order (descending): the first index whose key is smaller. */
static uint32_t order_pos(const struct kva__levels *t, int64_t key)
{
	uint32_t lo = 0, hi = t->n_order;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (t->lv[t->order[mid]].key > key)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* A new, empty level for key, or KVA_IDMAP_NONE without room for it. */
static uint32_t level_new(struct kva__levels *t, int64_t key)
{
	if (!t->free_top || kva_idmap_insert(&t->by_key, (uint64_t)key, t->free_top - 1) != 0)
		return KVA_IDMAP_NONE;
	uint32_t i = t->free_top - 1;
	t->free_top = t->lv[i].next_free;
	t->lv[i] = (struct kva__level){.key = key};
	uint32_t at = order_pos(t, key);
	memmove(t->order + at + 1, t->order + at, (t->n_order - at) * sizeof(*t->order));
	t->order[at] = i;
	t->n_order++;
	return i;
}

static struct kva_waitq_node *wq(struct kva__req *r)
{
	return r ? &r->wq : NULL;
}

static struct kva__req *prev_req(kva_engine *e, struct kva__req *r)
{
	struct kva_waitq_node *n = kva_waitq_prev(&e->waitq, &r->wq);
	return n ? kva__req_of_wq(n) : NULL;
}

/* The request a new level of key goes after: the last of the largest level
 * with a smaller key (NULL: the queue's front). */
static struct kva__req *after_smaller(struct kva__levels *t, int64_t key, uint32_t self)
{
	uint32_t at = order_pos(t, key);
	if (at < t->n_order && t->order[at] == self)
		at++; /* the new level itself (its key is not smaller) */
	return at < t->n_order ? t->lv[t->order[at]].last : NULL;
}

/* Without room for r's own level (an allocation failed): the level next to
 * its place, the smallest with a larger key (r joins its front) or else the
 * largest (its back): the order of the list still holds. */
static uint32_t neighbour(kva_engine *e, struct kva__levels *t, int64_t key, bool *front)
{
	uint32_t at = order_pos(t, key);
	kva__alloc_failed(e, 0, "priority level");
	if (at > 0) {
		*front = true;
		return t->order[at - 1];
	}
	*front = false;
	return t->order[0];
}

void kva__levels_join(kva_engine *e, struct kva__req *r, bool front)
{
	struct kva__levels *t = e->lv;
	struct kva__prio *p = kva__prio(r);
	int64_t key = kva__levels_key(e, r);
	uint32_t *v = find(t, key);
	uint32_t i = v ? *v : level_new(t, key);
	if (i == KVA_IDMAP_NONE && !t->n_order) {
		/* no level at all: r alone keeps the order whatever its key */
		kva_waitq_insert_after(&e->waitq, NULL, &r->wq);
		p->at = KVA_IDMAP_NONE;
		return;
	}
	if (i == KVA_IDMAP_NONE)
		i = neighbour(e, t, key, &front);
	struct kva__level *l = &t->lv[i];
	p->at = i;
	r->flags = front ? (uint16_t)(r->flags | KVA__F_FRONT) : (uint16_t)(r->flags & ~KVA__F_FRONT);
	if (!l->count) {
		struct kva__req *at = after_smaller(t, l->key, i);
		kva_waitq_insert_after(&e->waitq, wq(at), &r->wq);
		l->first = l->last = r;
		l->last_arrival = p->arrival;
	} else if (front) {
		kva_waitq_insert_after(&e->waitq, wq(prev_req(e, l->first)), &r->wq);
		l->first = r;
	} else if (p->arrival >= l->last_arrival || (l->last->flags & KVA__F_FRONT)) {
		kva_waitq_insert_after(&e->waitq, &l->last->wq, &r->wq);
		l->last = r;
		l->last_arrival = p->arrival;
	} else {
		/* an earlier arrival than the last's: back past the later ones,
		 * never past one that joined the front */
		struct kva__req *at = l->last;
		while (at && !(at->flags & KVA__F_FRONT) && kva__prio(at)->arrival > p->arrival)
			at = at == l->first ? NULL : prev_req(e, at);
		if (!at) {
			kva_waitq_insert_after(&e->waitq, wq(prev_req(e, l->first)), &r->wq);
			l->first = r;
		} else {
			kva_waitq_insert_after(&e->waitq, &at->wq, &r->wq);
		}
	}
	l->count++;
}

struct kva__pushed *kva__levels_ring(kva_engine *e, const struct kva__req *r, uint32_t **n)
{
	uint32_t i = kva__prio(r)->at;
	if (i == KVA_IDMAP_NONE) { /* in no level (priority_levels.c, no memory) */
		*n = &e->n_pushed;
		return e->pushed;
	}
	struct kva__level *l = &e->lv->lv[i];
	*n = &l->n_pushed;
	return l->pushed;
}

static void gauge(kva_engine *e, enum kva__stat s, uint64_t v)
{
	/* relaxed: a gauge kva_stats_get reads with no order to anything */
	atomic_store_explicit(&e->st[s], v, memory_order_relaxed);
}

/* A level's key, count and its first request's wait into three gauges. */
static void publish_level(kva_engine *e, const struct kva__level *l, enum kva__stat key,
                          enum kva__stat count, enum kva__stat wait)
{
	uint64_t since;
	memcpy(&since, &l->first->ev_main.node, sizeof(since)); /* kva__rec_wait_begins */
	gauge(e, key, (uint64_t)l->key);
	gauge(e, count, l->count);
	gauge(e, wait, e->now > since ? e->now - since : 0);
}

void kva__levels_publish(kva_engine *e)
{
	struct kva__levels *t = e->lv;
	gauge(e, ST_PRIO_LEVELS, t->n_order);
	if (!t->n_order) {
		for (enum kva__stat s = ST_URGENT_LEVEL; s <= ST_LAX_WAIT_NS; s++)
			gauge(e, s, 0);
		return;
	}
	publish_level(e, &t->lv[t->order[t->n_order - 1]], ST_URGENT_LEVEL, ST_URGENT_WAITING,
	              ST_URGENT_WAIT_NS);
	publish_level(e, &t->lv[t->order[0]], ST_LAX_LEVEL, ST_LAX_WAITING, ST_LAX_WAIT_NS);
}

void kva__levels_leave(kva_engine *e, struct kva__req *r)
{
	struct kva__levels *t = e->lv;
	uint32_t i = kva__prio(r)->at;
	if (i != KVA_IDMAP_NONE) {
		struct kva__level *l = &t->lv[i];
		if (--l->count == 0) {
			kva_idmap_remove(&t->by_key, (uint64_t)l->key);
			uint32_t at = order_pos(t, l->key);
			/* the head's level is the last: nothing moves */
			memmove(t->order + at, t->order + at + 1,
			        (t->n_order - at - 1) * sizeof(*t->order));
			t->n_order--;
			l->next_free = t->free_top;
			t->free_top = i + 1;
		} else if (r == l->first) {
			l->first = kva__req_of_wq(kva_waitq_next(&e->waitq, &r->wq));
		} else if (r == l->last) {
			l->last = prev_req(e, r);
			l->last_arrival = kva__prio(l->last)->arrival;
		}
	}
	kva_waitq_unlink(&e->waitq, &r->wq);
}
