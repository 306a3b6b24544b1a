/* SPDX-License-Identifier: Apache-2.0 */
/*
 * score: see score.h. The entries are a flat open-addressing table keyed by
 * block hash alone (linear probing, backward-shift deletion, at most 3/4
 * full, allocated once), each 16-byte slot guarded by its own sequence
 * number: the I/O thread makes it odd, writes the slot, makes it even
 * (release); a reader reads the number (acquire), the slot, the number
 * again, and takes the slot only if both were the same even number. No
 * allocation per entry and no pointer to follow; nothing is freed while the
 * fleet lives, so readers need no grace period for the entries. A reader
 * never waits: a slot it finds being written a few times in a row is
 * passed over (a score may then miss that entry, as a score taken a moment
 * earlier or later would). Identities are replaced under RCU.
 *
 * The I/O thread holds its adds and removals and applies them at the end of
 * a batch (kvf_score_flush), fetching the home slots of the next ones while
 * it applies one; a query fetches the home slots of the blocks ahead the
 * same way. The table lies on 2 MiB pages where the kernel gives them.
 */
#define _GNU_SOURCE
#include "score.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <kvadmit/lockfree/hash.h>
#include <kvadmit/lockfree/rcu_thread.h>

#include "index.h"

#define TOPIC_MAX 95u
#define MAX_PAIRS 1024u  /* (publisher, medium) pairs a query follows */
#define PAIR_SLOTS 2048u /* its open-addressing map: at most half full */
#define READ_TRIES 64    /* a slot still being written after these: passed over */
#define AHEAD 24         /* blocks ahead whose home slots a query fetches */
#define RING 32          /* their homes, kept until reached (> AHEAD, a power of two) */
#define PENDING 1024     /* writes the I/O thread holds before applying them */
#define FLUSH_AHEAD 16   /* pending writes ahead whose home slots a flush fetches */
#define HUGE_PAGE ((size_t)2 << 20)

struct slot {
	_Atomic uint32_t seq;  /* odd while the I/O thread writes the slot */
	_Atomic uint32_t loc1; /* location + 1; 0 empty */
	_Atomic uint64_t hash;
};

struct ident {
	struct rcu_head rcu;
	int64_t dp_rank;
	uint8_t topic_len;
	char topic[TOPIC_MAX + 1];
};

/* A write the I/O thread has not applied yet (kvf_score_flush). */
struct op {
	uint64_t hash;
	uint32_t loc1; /* location + 1 */
	uint32_t del;
};

struct kvf_score {
	/* read by every query, written once */
	struct slot *slots;
	size_t mask;
	struct kvf_key key; /* homes: keyed, as the index's (a publisher cannot aim) */
	uint32_t full_groups;
	void *map; /* the mapping slots lie in, and its length */
	size_t map_len;
	/* the I/O thread's, on lines of their own: its writes do not take the
	 * line above from the readers' caches */
	_Alignas(64) size_t count, cap;
	size_t probe_max; /* farthest an entry may sit from its home */
	uint64_t refused; /* adds past probe_max: not copied (the index's own cap) */
	uint32_t npending;
	struct op pending[PENDING];
	/* published with release stores (I/O thread), read with acquire loads
	 * (kvf_score_query) inside a read-side section */
	struct ident *_Atomic ident[KVA_FLEET_MAX_PUBLISHERS];
	_Atomic uint32_t block_size[KVA_FLEET_MAX_PUBLISHERS];
};

static void ident_free(struct rcu_head *head)
{
	kva_rcu_reclaim_begin();
	free(caa_container_of(head, struct ident, rcu));
}

static inline size_t home(const struct kvf_score *s, uint64_t hash)
{
	return (size_t)kvf_siphash13(&s->key, hash, 0, 0) & s->mask;
}

/* I/O thread: slot <- (hash, loc1). The odd number is stored before the
 * fields (the release fence), the even one after them (release): a reader
 * that saw the same even number before and after read neither half of a
 * write (pairs with the acquire load and fence in slot_read). */
static void slot_write(struct slot *sl, uint64_t hash, uint32_t loc1)
{
	uint32_t q = atomic_load_explicit(&sl->seq, memory_order_relaxed);
	atomic_store_explicit(&sl->seq, q + 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
	atomic_store_explicit(&sl->hash, hash, memory_order_relaxed);
	atomic_store_explicit(&sl->loc1, loc1, memory_order_relaxed);
	atomic_store_explicit(&sl->seq, q + 2, memory_order_release);
}

/* Any thread: false when the slot was being written READ_TRIES times. */
static bool slot_read(const struct slot *sl, uint64_t *hash, uint32_t *loc1)
{
	for (int t = 0; t < READ_TRIES; t++) {
		uint32_t q = atomic_load_explicit(&sl->seq, memory_order_acquire);
		if (q & 1)
			continue;
		*hash = atomic_load_explicit(&sl->hash, memory_order_relaxed);
		*loc1 = atomic_load_explicit(&sl->loc1, memory_order_relaxed);
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&sl->seq, memory_order_relaxed) == q)
			return true;
	}
	return false;
}

struct kvf_score *kvf_score_new(uint32_t full_groups, uint64_t max_blocks)
{
	if (kva_rcu_init()) /* liburcu's call_rcu thread with signals blocked */
		return NULL;
	/* aligned: the I/O thread's fields start a cache line of their own */
	struct kvf_score *s = aligned_alloc(_Alignof(struct kvf_score), sizeof(*s));
	if (!s)
		return NULL;
	memset(s, 0, sizeof(*s));
	size_t n = 16;
	while (n / 4 * 3 < max_blocks && n < ((size_t)1 << 40))
		n *= 2;
	/* Anonymous memory (zeroed: every slot empty) on 2 MiB pages where the
	 * kernel gives them: a probe is a random access into a table as large
	 * as the index, and with 4 KiB pages each one would also miss the TLB. */
	size_t bytes = n * sizeof(*s->slots);
	s->map_len = bytes + (bytes >= HUGE_PAGE ? HUGE_PAGE : 0); /* room to align */
	s->map = mmap(NULL, s->map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (s->map == MAP_FAILED) {
		free(s);
		return NULL;
	}
	uintptr_t at = (uintptr_t)s->map;
	if (bytes >= HUGE_PAGE)
		at = (at + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1);
	s->slots = (struct slot *)at;
	(void)madvise(s->slots, bytes, MADV_HUGEPAGE); /* a hint: 4 KiB pages work too */
	s->mask = n - 1;
	s->cap = n / 4 * 3;
	s->probe_max = KVF_PROBE_MAX;
	kvf_key_random(&s->key);
	s->full_groups = full_groups;
	return s;
}

void kvf_score_free(struct kvf_score *s)
{
	if (!s)
		return;
	/* no reader is left (kva_fleet_destroy's contract) */
	munmap(s->map, s->map_len);
	for (uint32_t i = 0; i < KVA_FLEET_MAX_PUBLISHERS; i++)
		free(atomic_load_explicit(&s->ident[i], memory_order_relaxed));
	free(s);
}

/* The I/O thread's own reads of the table need no sequence check. */
static inline uint32_t loc1_at(const struct kvf_score *s, size_t i)
{
	return atomic_load_explicit(&s->slots[i].loc1, memory_order_relaxed);
}
static inline uint64_t hash_at(const struct kvf_score *s, size_t i)
{
	return atomic_load_explicit(&s->slots[i].hash, memory_order_relaxed);
}

static void add_at(struct kvf_score *s, size_t i, uint64_t hash, uint32_t loc1)
{
	if (s->count >= s->cap)
		return; /* the index's cap keeps below it: not reached */
	/* a run longer than probe_max only forms from keys aimed at one home
	 * (and a reader would walk it): refused and counted, as the index does */
	for (size_t d = 0; loc1_at(s, i); d++, i = (i + 1) & s->mask)
		if (d >= s->probe_max) {
			s->refused++;
			return;
		}
	slot_write(&s->slots[i], hash, loc1);
	s->count++;
}

/* Backward-shift deletion at slot i: the later entries of the run move up
 * one by one, each slot overwritten (never emptied) but the run's last, so
 * a reader's probe never stops early at a hole that is not one. */
static void del_at(struct kvf_score *s, size_t i)
{
	size_t j = i;
	for (;;) {
		uint64_t h;
		uint32_t l;
		for (;;) {
			j = (j + 1) & s->mask;
			l = loc1_at(s, j);
			if (!l) {
				slot_write(&s->slots[i], 0, 0);
				s->count--;
				return;
			}
			h = hash_at(s, j);
			size_t k = home(s, h);
			/* j's entry may move to i when its home is not in (i, j] */
			if (i <= j ? (k <= i || k > j) : (k <= i && k > j))
				break;
		}
		slot_write(&s->slots[i], h, l);
		i = j;
	}
}

static void del_from(struct kvf_score *s, size_t i, uint64_t hash, uint32_t loc1)
{
	for (; loc1_at(s, i); i = (i + 1) & s->mask)
		if (loc1_at(s, i) == loc1 && hash_at(s, i) == hash) {
			del_at(s, i);
			return;
		}
}

/* The pending writes, in their order. Each is a probe at a random slot of a
 * table too large for the caches: the home slots of the next FLUSH_AHEAD
 * are fetched while one is applied, so their misses overlap. */
void kvf_score_flush(struct kvf_score *s)
{
	uint32_t n = s->npending;
	size_t ring[RING];
	for (uint32_t k = 0; k < n && k < FLUSH_AHEAD; k++) {
		ring[k] = home(s, s->pending[k].hash);
		__builtin_prefetch(&s->slots[ring[k]], 1);
	}
	for (uint32_t k = 0; k < n; k++) {
		if (k + FLUSH_AHEAD < n) {
			size_t h = home(s, s->pending[k + FLUSH_AHEAD].hash);
			ring[(k + FLUSH_AHEAD) & (RING - 1)] = h;
			__builtin_prefetch(&s->slots[h], 1);
		}
		const struct op *op = &s->pending[k];
		if (op->del)
			del_from(s, ring[k & (RING - 1)], op->hash, op->loc1);
		else
			add_at(s, ring[k & (RING - 1)], op->hash, op->loc1);
	}
	s->npending = 0;
}

/* Readers score full groups only: other groups' entries are not copied. */
static void push(struct kvf_score *s, uint64_t hash, uint32_t loc, uint32_t del)
{
	uint32_t group = loc & 0xff;
	if (group > 31 || !(s->full_groups >> group & 1))
		return;
	if (s->npending == PENDING)
		kvf_score_flush(s);
	s->pending[s->npending++] = (struct op){.hash = hash, .loc1 = loc + 1, .del = del};
}

void kvf_score_add(struct kvf_score *s, uint64_t hash, uint32_t loc) { push(s, hash, loc, 0); }
void kvf_score_del(struct kvf_score *s, uint64_t hash, uint32_t loc) { push(s, hash, loc, 1); }

size_t kvf_score_home(const struct kvf_score *s, uint64_t hash) { return home(s, hash); }
uint64_t kvf_score_refused(const struct kvf_score *s) { return s->refused; }
void kvf_score_set_probe_max(struct kvf_score *s, size_t probe_max) { s->probe_max = probe_max; }

void kvf_score_drop_publisher(struct kvf_score *s, uint32_t pub)
{
	kvf_score_flush(s); /* an entry still pending would come back after the scan */
	/* a deletion may shift a later (or wrapped) entry into slot i: look at
	 * i again; two passes cover the entries that wrapped */
	for (int pass = 0; pass < 2; pass++)
		for (size_t i = 0; i <= s->mask;) {
			uint32_t l = loc1_at(s, i);
			if (l && KVF_LOC_PUB(l - 1) == pub) {
				del_at(s, i);
				continue;
			}
			i++;
		}
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

/* A query's probe of hash: its home slot, fetched into the cache now. */
static inline size_t fetch_home(const struct kvf_score *s, uint64_t hash)
{
	size_t k = home(s, hash);
	__builtin_prefetch(&s->slots[k]);
	return k;
}

/* A query's (publisher, medium) pairs: a small open-addressing map whose
 * slots hold the pair and its prefix length side by side (one access a
 * lookup), and the slots in the order the pairs were met; the pairs come
 * from block 0's entries only. */
struct walk {
	uint32_t npairs;
	uint16_t used[MAX_PAIRS]; /* slots taken, in order */
	struct {
		uint32_t pair1; /* pair + 1; 0 empty */
		uint32_t len;
	} map[PAIR_SLOTS];
};

static uint32_t *walk_len(struct walk *w, uint32_t pair, bool add)
{
	/* multiplicative hashing: pairs are small, distinct integers */
	for (uint32_t i = (uint32_t)((pair * 0x9e3779b1u) >> 21) & (PAIR_SLOTS - 1);;
	     i = (i + 1) & (PAIR_SLOTS - 1)) {
		uint32_t p1 = w->map[i].pair1;
		if (p1 == pair + 1)
			return &w->map[i].len;
		if (!p1) {
			if (!add || w->npairs == MAX_PAIRS)
				return NULL;
			w->map[i].pair1 = pair + 1;
			w->map[i].len = 0;
			w->used[w->npairs++] = (uint16_t)i;
			return &w->map[i].len;
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
	struct walk walk, *w = &walk; /* 18 KiB of stack: no allocation on this path */
	w->npairs = 0;
	memset(w->map, 0, sizeof w->map);
	kva_rcu_read_lock(); /* for the identities */
	/* The chain is known ahead and its probes depend on nothing found: the
	 * home slots of the next AHEAD blocks are fetched while one is probed,
	 * so the table's cache misses overlap instead of adding up. One line
	 * each: a second (where a run of several holders goes on) measured
	 * slower, the misses in flight being what bounds a query. */
	size_t ring[RING];
	for (uint32_t i = 0; i < n && i < AHEAD; i++)
		ring[i] = fetch_home(s, hashes[i]);
	for (uint32_t i = 0; i < n; i++) {
		uint32_t advanced = 0;
		uint64_t want = hashes[i];
		if (i + AHEAD < n)
			ring[(i + AHEAD) & (RING - 1)] = fetch_home(s, hashes[i + AHEAD]);
		for (size_t k = ring[i & (RING - 1)];; k = (k + 1) & s->mask) {
			/* Most slots of a run hold other blocks: only a match has its
			 * sequence number checked again. A location never reads 0 but
			 * in an empty slot (a write replaces one nonzero value with
			 * another); a slot caught mid-write that reads as another
			 * block is passed over, as one still written after
			 * READ_TRIES is. */
			const struct slot *sl = &s->slots[k];
			/* acquire: pairs with the release store of slot_write */
			uint32_t q = atomic_load_explicit(&sl->seq, memory_order_acquire);
			uint32_t l = atomic_load_explicit(&sl->loc1, memory_order_relaxed);
			if (!l)
				break;
			uint64_t h = atomic_load_explicit(&sl->hash, memory_order_relaxed);
			if (h != want)
				continue;
			atomic_thread_fence(memory_order_acquire); /* as in slot_read */
			if ((q & 1) || atomic_load_explicit(&sl->seq, memory_order_relaxed) != q) {
				if (!slot_read(sl, &h, &l))
					continue; /* being written: passed over */
				if (!l)
					break;
				if (h != want)
					continue;
			}
			uint32_t group = (l - 1) & 0xff;
			if (group > 31 || !(s->full_groups >> group & 1))
				continue;
			uint32_t *len = walk_len(w, KVF_LOC_PUB_MEDIUM(l - 1), i == 0);
			if (len && *len == i) { /* several full groups, or a moved copy: once */
				*len = i + 1;
				advanced++;
			}
		}
		if (!advanced) /* nobody holds block i: no prefix goes further */
			break;
	}
	uint32_t nout = 0;
	for (uint32_t k = 0; k < w->npairs; k++) {
		uint32_t pair = w->map[w->used[k]].pair1 - 1;
		kva_fleet_match o = {.publisher = pair >> 8, .blocks = w->map[w->used[k]].len};
		uint32_t medium = pair & 0xff;
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
