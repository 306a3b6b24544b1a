/* SPDX-License-Identifier: Apache-2.0 */
/*
 * index: the (block hash, location) table. See index.h. The home of an
 * entry is SipHash of both halves of its key under the index's key, so one
 * block stored on many nodes spreads over the table instead of clustering,
 * and nobody without the key can aim blocks at one run.
 */
#include "index.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

size_t kvf_index_home(const struct kvf_index *ix, uint64_t hash, uint32_t loc)
{
	return (size_t)kvf_siphash13(&ix->key, hash, loc, 4) & ix->mask;
}

int kvf_index_init(struct kvf_index *ix, size_t cap)
{
	memset(ix, 0, sizeof(*ix));
	if (cap == 0 || cap > ((size_t)1 << 40))
		return -EINVAL;
	size_t n = 16;
	while (n / 4 * 3 < cap)
		n *= 2;
	ix->slots = kvf_big_table_new(&ix->mem, n * sizeof(struct kvf_slot));
	ix->pubs = calloc(KVF_INDEX_PUBS, sizeof(*ix->pubs));
	if (!ix->slots || !ix->pubs) {
		kvf_index_fini(ix);
		return -ENOMEM;
	}
	ix->mask = n - 1;
	ix->cap = cap;
	ix->probe_max = KVF_PROBE_MAX;
	kvf_key_random(&ix->key);
	return 0;
}

void kvf_index_fini(struct kvf_index *ix)
{
	kvf_big_table_free(&ix->mem);
	free(ix->pubs);
	ix->slots = NULL;
	ix->pubs = NULL;
}

size_t kvf_index_bytes(const struct kvf_index *ix)
{
	return (ix->mask + 1) * sizeof(struct kvf_slot);
}

static inline struct kvf_index_pub *pub_of(const struct kvf_index *ix, const struct kvf_slot *s)
{
	return &ix->pubs[KVF_LOC_PUB(s->loc1 - 1) % KVF_INDEX_PUBS];
}

static inline bool is_dead(const struct kvf_index *ix, const struct kvf_slot *s)
{
	return (s->flags >> KVF_GEN_SHIFT) != pub_of(ix, s)->gen;
}

/* Backward-shift deletion at slot i: later entries of the run move up so
 * that no probe sequence is broken (no tombstones). Moving only brings an
 * entry closer to its home: probe_max still holds. */
static void del_at(struct kvf_index *ix, size_t i)
{
	size_t j = i;
	for (;;) {
		ix->slots[i].loc1 = 0;
		for (;;) {
			j = (j + 1) & ix->mask;
			struct kvf_slot *s = &ix->slots[j];
			if (!s->loc1) {
				ix->count--;
				return;
			}
			size_t h = kvf_index_home(ix, s->hash, s->loc1 - 1);
			/* s may move to i when its home is not in (i, j] cyclically */
			if (i <= j ? (h <= i || h > j) : (h <= i && h > j))
				break;
		}
		ix->slots[i] = ix->slots[j];
		i = j;
	}
}

static inline bool over_quota(const struct kvf_index *ix, const struct kvf_index_pub *p)
{
	return ix->quota && p->live >= ix->quota;
}

/* A publisher's live count moves by one (+1 or -1): nover follows. */
static void live_step(struct kvf_index *ix, struct kvf_index_pub *p, int d)
{
	bool was = over_quota(ix, p);
	p->live += (uint64_t)(int64_t)d;
	ix->live += (size_t)(ptrdiff_t)d;
	bool is = over_quota(ix, p);
	ix->nover += (uint32_t)((int)is - (int)was);
}

void kvf_index_set_quota(struct kvf_index *ix, size_t quota)
{
	ix->quota = quota;
	ix->nover = 0;
	for (uint32_t i = 0; i < KVF_INDEX_PUBS; i++)
		ix->nover += over_quota(ix, &ix->pubs[i]);
}

/* Removes the live entry at slot i, keeping the counts. */
static void del_live_at(struct kvf_index *ix, size_t i)
{
	live_step(ix, pub_of(ix, &ix->slots[i]), -1);
	del_at(ix, i);
}

/* Probes from the home of (hash, loc), freeing the dead entries it meets
 * (a deletion shifts the run back into slot i: it is looked at again).
 * Returns the entry's slot, or the first empty one (*empty set), or
 * SIZE_MAX when neither lies within probe_max. */
static size_t probe(struct kvf_index *ix, size_t i, uint64_t hash, uint32_t loc, bool *empty)
{
	for (size_t dist = 0; dist <= ix->probe_max;) {
		struct kvf_slot *s = &ix->slots[i];
		if (!s->loc1) {
			*empty = true;
			return i;
		}
		if (is_dead(ix, s)) {
			del_at(ix, i);
			ix->reclaimed++;
			continue;
		}
		if (s->hash == hash && s->loc1 == loc + 1) {
			*empty = false;
			return i;
		}
		i = (i + 1) & ix->mask;
		dist++;
	}
	return SIZE_MAX;
}

struct kvf_slot *kvf_index_find(struct kvf_index *ix, uint64_t hash, uint32_t loc)
{
	bool empty;
	size_t i = probe(ix, kvf_index_home(ix, hash, loc), hash, loc, &empty);
	return i == SIZE_MAX || empty ? NULL : &ix->slots[i];
}

/* Frees one slot: the first dead entry or entry without a reference bit
 * the hand meets; while a publisher holds its quota or more, only such a
 * publisher's entries are candidates (one exists, so the hand finds it
 * within two sweeps). Returns true if that was a live entry (*out: it). */
static bool evict_one(struct kvf_index *ix, struct kvf_slot *out)
{
	for (;;) {
		size_t i = ix->hand;
		ix->hand = (ix->hand + 1) & ix->mask;
		struct kvf_slot *s = &ix->slots[i];
		if (!s->loc1)
			continue;
		if (is_dead(ix, s)) {
			del_at(ix, i);
			ix->reclaimed++;
			return false;
		}
		if (ix->nover && !over_quota(ix, pub_of(ix, s)))
			continue; /* within its share: spared while others are over */
		if (s->flags & KVF_E_REF) {
			s->flags &= ~KVF_E_REF;
			continue;
		}
		if (out)
			*out = *s;
		del_live_at(ix, i);
		ix->evicted++;
		return true;
	}
}

void kvf_index_fetch(const struct kvf_index *ix, const uint64_t *hashes, uint32_t loc, size_t n,
                     size_t *homes)
{
	uint64_t h[KVF_INDEX_FETCH];
	kvf_siphash13_many(&ix->key, hashes, loc, 4, h, n);
	for (size_t k = 0; k < n; k++) {
		homes[k] = (size_t)h[k] & ix->mask;
		__builtin_prefetch(&ix->slots[homes[k]], 1);
	}
}

bool kvf_index_put(struct kvf_index *ix, uint64_t hash, uint32_t loc, struct kvf_slot *evicted,
                   bool *did_evict)
{
	return kvf_index_put_from(ix, kvf_index_home(ix, hash, loc), hash, loc, evicted, did_evict);
}

bool kvf_index_put_from(struct kvf_index *ix, size_t home, uint64_t hash, uint32_t loc,
                        struct kvf_slot *evicted, bool *did_evict)
{
	if (did_evict)
		*did_evict = false;
	bool empty;
	size_t i = probe(ix, home, hash, loc, &empty);
	if (i != SIZE_MAX && !empty) {
		ix->slots[i].flags |= KVF_E_REF;
		return false;
	}
	if (i == SIZE_MAX) {
		ix->refused++;
		return false;
	}
	if (ix->count >= ix->cap) {
		/* occupied slots, dead ones too: the table's load stays <= 3/4 */
		bool live = evict_one(ix, evicted);
		if (did_evict)
			*did_evict = live;
		/* the eviction may have shifted our run: probe again (it only
		 * got shorter) */
		i = probe(ix, home, hash, loc, &empty);
	}
	struct kvf_index_pub *p = &ix->pubs[KVF_LOC_PUB(loc) % KVF_INDEX_PUBS];
	ix->slots[i] = (struct kvf_slot){.hash = hash, .loc1 = loc + 1,
	                                 .flags = KVF_E_REF | p->gen << KVF_GEN_SHIFT};
	ix->count++;
	live_step(ix, p, +1);
	return true;
}

uint32_t kvf_index_del(struct kvf_index *ix, uint64_t hash, uint32_t loc)
{
	return kvf_index_del_from(ix, kvf_index_home(ix, hash, loc), hash, loc);
}

uint32_t kvf_index_del_from(struct kvf_index *ix, size_t home, uint64_t hash, uint32_t loc)
{
	bool empty;
	size_t i = probe(ix, home, hash, loc, &empty);
	if (i == SIZE_MAX || empty)
		return 0;
	uint32_t f = (ix->slots[i].flags & KVF_E_FLAGS) + 1;
	del_live_at(ix, i);
	return f;
}

size_t kvf_index_del_matching(struct kvf_index *ix, uint32_t key, unsigned shift, bool *watched)
{
	size_t n = 0;
	/* A deletion may shift a later (or wrapped) entry into slot i: look at
	 * i again before moving on. Two passes cover entries that wrapped. */
	for (int pass = 0; pass < 2; pass++)
		for (size_t i = 0; i <= ix->mask;) {
			struct kvf_slot *s = &ix->slots[i];
			if (s->loc1 && ((s->loc1 - 1) >> shift) == (key >> shift)) {
				if (is_dead(ix, s)) {
					del_at(ix, i);
					ix->reclaimed++;
					continue;
				}
				if (watched && (s->flags & KVF_E_WATCHED))
					*watched = true;
				del_live_at(ix, i);
				n++;
				continue;
			}
			i++;
		}
	return n;
}

size_t kvf_index_drop_pub(struct kvf_index *ix, uint32_t pub)
{
	struct kvf_index_pub *p = &ix->pubs[pub % KVF_INDEX_PUBS];
	size_t n = p->live;
	if (p->gen == KVF_GEN_MASK) {
		/* the next generation would be 0 again, which dead entries of
		 * 2^24 drops ago may still carry: remove every entry first */
		kvf_index_del_matching(ix, pub << 16, 16, NULL);
		p->gen = 0;
		ix->gen_wraps++;
		return n;
	}
	bool was = over_quota(ix, p);
	ix->live -= n;
	p->live = 0;
	ix->nover -= was && !over_quota(ix, p);
	p->gen++;
	return n;
}
