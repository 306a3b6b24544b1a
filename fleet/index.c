/* SPDX-License-Identifier: Apache-2.0 */
/*
 * index: the (block hash, location) table. See index.h. The home of an
 * entry mixes both halves of its key, so one block stored on many nodes
 * spreads over the table instead of clustering.
 */
#include "index.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <kvadmit/lockfree/hash.h>

static inline size_t home(const struct kvf_index *ix, uint64_t hash, uint32_t loc)
{
	return (size_t)kva_hash64(hash ^ ((uint64_t)loc * 0x9e3779b97f4a7c15ull)) & ix->mask;
}

int kvf_index_init(struct kvf_index *ix, size_t cap)
{
	memset(ix, 0, sizeof(*ix));
	if (cap == 0 || cap > ((size_t)1 << 40))
		return -EINVAL;
	size_t n = 16;
	while (n / 4 * 3 < cap)
		n *= 2;
	ix->slots = calloc(n, sizeof(struct kvf_slot));
	if (!ix->slots)
		return -ENOMEM;
	ix->mask = n - 1;
	ix->cap = cap;
	return 0;
}

void kvf_index_fini(struct kvf_index *ix)
{
	free(ix->slots);
	ix->slots = NULL;
}

size_t kvf_index_bytes(const struct kvf_index *ix)
{
	return (ix->mask + 1) * sizeof(struct kvf_slot);
}

struct kvf_slot *kvf_index_find(struct kvf_index *ix, uint64_t hash, uint32_t loc)
{
	for (size_t i = home(ix, hash, loc);; i = (i + 1) & ix->mask) {
		struct kvf_slot *s = &ix->slots[i];
		if (!s->loc1)
			return NULL;
		if (s->hash == hash && s->loc1 == loc + 1)
			return s;
	}
}

/* Backward-shift deletion at slot i: later entries of the run move up so
 * that no probe sequence is broken (no tombstones). */
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
			size_t h = home(ix, s->hash, s->loc1 - 1);
			/* s may move to i when its home is not in (i, j] cyclically */
			if (i <= j ? (h <= i || h > j) : (h <= i && h > j))
				break;
		}
		ix->slots[i] = ix->slots[j];
		i = j;
	}
}

static void evict_one(struct kvf_index *ix, struct kvf_slot *out)
{
	for (;;) {
		size_t i = ix->hand;
		ix->hand = (ix->hand + 1) & ix->mask;
		struct kvf_slot *s = &ix->slots[i];
		if (!s->loc1)
			continue;
		if (s->flags & KVF_E_REF) {
			s->flags &= ~KVF_E_REF;
			continue;
		}
		if (out)
			*out = *s;
		del_at(ix, i);
		ix->evicted++;
		return;
	}
}

bool kvf_index_put(struct kvf_index *ix, uint64_t hash, uint32_t loc, struct kvf_slot *evicted,
                   bool *did_evict)
{
	if (did_evict)
		*did_evict = false;
	struct kvf_slot *s = kvf_index_find(ix, hash, loc);
	if (s) {
		s->flags |= KVF_E_REF;
		return false;
	}
	if (ix->count >= ix->cap) {
		evict_one(ix, evicted);
		if (did_evict)
			*did_evict = true;
	}
	size_t i = home(ix, hash, loc);
	while (ix->slots[i].loc1)
		i = (i + 1) & ix->mask;
	ix->slots[i] = (struct kvf_slot){.hash = hash, .loc1 = loc + 1, .flags = KVF_E_REF};
	ix->count++;
	return true;
}

uint32_t kvf_index_del(struct kvf_index *ix, uint64_t hash, uint32_t loc)
{
	struct kvf_slot *s = kvf_index_find(ix, hash, loc);
	if (!s)
		return 0;
	uint32_t f = s->flags + 1;
	del_at(ix, (size_t)(s - ix->slots));
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
				if (watched && (s->flags & KVF_E_WATCHED))
					*watched = true;
				del_at(ix, i);
				n++;
				continue;
			}
			i++;
		}
	return n;
}
