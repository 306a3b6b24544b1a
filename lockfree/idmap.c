/* SPDX-License-Identifier: Apache-2.0 */
/*
 * idmap: single-owner open-addressing map (see idmap.h). Owns its tables,
 * and the incremental growth between two of them: an insert or remove does
 * one bounded quantum of it (advance), a reserve that asks for more than the
 * growth leaves room for completes it (finish).
 */
#include <kvadmit/lockfree/idmap.h>

#include <errno.h>
#include <stddef.h>
#include <string.h>

#define MIN_CAP 64u
#define NO_STOP UINT32_MAX

/* The entry whose value v points at. */
static struct kva_idmap_entry *entry_of(uint32_t *v)
{
	return (struct kva_idmap_entry *)((char *)v - offsetof(struct kva_idmap_entry, val));
}

static uint64_t key_of(const struct kva_idmap_entry *x)
{
	return (uint64_t)x->key_hi << 32 | x->key_lo;
}

/* Table primitives; h is an id's kva_hash64, which is what entries store. */

static void put(struct kva_idmap_entry *t, uint32_t mask, uint64_t h, uint32_t val)
{
	uint32_t i = (uint32_t)h & mask;
	while (t[i].val != KVA_IDMAP_NONE)
		i = (i + 1) & mask;
	t[i].key_lo = (uint32_t)h;
	t[i].key_hi = (uint32_t)(h >> 32);
	t[i].val = val;
}

static uint32_t *probe(struct kva_idmap_entry *t, uint32_t mask, uint64_t h)
{
	for (uint32_t i = (uint32_t)h & mask;; i = (i + 1) & mask) {
		if (t[i].val == KVA_IDMAP_NONE)
			return NULL;
		if (key_of(&t[i]) == h)
			return &t[i].val;
	}
}

static void unlink_at(struct kva_idmap_entry *t, uint32_t mask, uint32_t hole)
{
	/* Backward shift: move later entries of the run into the hole when
	 * their home does not lie cyclically in (hole, j]. */
	for (uint32_t j = (hole + 1) & mask; t[j].val != KVA_IDMAP_NONE; j = (j + 1) & mask) {
		uint32_t h = (uint32_t)key_of(&t[j]) & mask;
		bool stays = hole <= j ? (hole < h && h <= j) : (hole < h || h <= j);
		if (stays)
			continue;
		t[hole] = t[j];
		hole = j;
	}
	t[hole].val = KVA_IDMAP_NONE;
}

/* Growth. */

static bool new_in_use(const struct kva_idmap *m)
{
	return m->ready == m->cap;
}

/* Whether h may still sit in old: not if its home there was drained (an
 * entry is never stored past an empty slot of its run). Saves the miss. */
static bool maybe_old(const struct kva_idmap *m, uint64_t h)
{
	if (!m->old)
		return false;
	if (m->stop == NO_STOP)
		return true;
	uint32_t mask = m->ocap - 1, hh = (uint32_t)h & mask;
	return ((hh - m->scan) & mask) > ((m->stop - m->scan) & mask);
}

static void end_growth(struct kva_idmap *m)
{
	m->mem_free(m->old, (size_t)m->ocap * sizeof(*m->old));
	m->old = NULL;
	m->ocap = m->ocount = 0;
	m->scan = 0;
	m->stop = NO_STOP;
}

/* All-ones bytes make an empty slot (and a key nobody reads): one memset. */
_Static_assert(KVA_IDMAP_NONE == UINT32_MAX, "empty slots are all ones");

static void init_some(struct kva_idmap *m, uint32_t k)
{
	uint32_t end = m->cap - m->ready < k ? m->cap : m->ready + k;
	memset(&m->ents[m->ready], 0xff, (size_t)(end - m->ready) * sizeof(*m->ents));
	m->ready = end;
	if (m->old && new_in_use(m) && !m->ocount)
		end_growth(m);
}

/* Inserts and removes that still land in old (one init quantum each). */
static uint32_t init_quanta(const struct kva_idmap *m)
{
	return (m->cap - m->ready + KVA_IDMAP_INIT_STEP - 1) / KVA_IDMAP_INIT_STEP;
}

/* Examines up to `units` slots of old, moving their entries to ents. Old is
 * drained downwards from an empty slot (found first, one unit a slot), so
 * the slot above each one drained is empty: it is the last of its run, and
 * emptying it leaves every other entry reachable from its home. */
static void drain(struct kva_idmap *m, uint32_t units)
{
	/* locals: the entries' stores could alias the map's counters */
	struct kva_idmap_entry *old = m->old, *ents = m->ents;
	uint32_t omask = m->ocap - 1, mask = m->cap - 1;
	uint32_t scan = m->scan, stop = m->stop, left = m->ocount, moved = 0;
	for (; units && left; units--) {
		if (stop == NO_STOP) {
			if (old[scan].val == KVA_IDMAP_NONE)
				stop = scan;
			else
				scan = (scan + 1) & omask;
			continue;
		}
		uint32_t p = (scan - 1) & omask;
		if (old[p].val != KVA_IDMAP_NONE) {
			put(ents, mask, key_of(&old[p]), old[p].val);
			old[p].val = KVA_IDMAP_NONE;
			left--;
			moved++;
		}
		scan = p;
	}
	m->scan = scan;
	m->stop = stop;
	m->ocount = left;
	m->moved += moved;
	if (!left)
		end_growth(m);
}

/* One bounded quantum of the growth in progress, if any. */
static void advance(struct kva_idmap *m)
{
	if (!m->old)
		return;
	if (!new_in_use(m))
		init_some(m, KVA_IDMAP_INIT_STEP);
	else
		drain(m, KVA_IDMAP_MOVE_STEP);
}

static void finish(struct kva_idmap *m)
{
	if (m->old && !new_in_use(m))
		init_some(m, m->cap - m->ready);
	if (m->old)
		drain(m, UINT32_MAX); /* ends: at most 2 * ocap units */
}

/* A first table, or a successor that takes over the entries gradually. */
static int grow(struct kva_idmap *m, uint32_t cap)
{
	struct kva_idmap_entry *t = m->mem_alloc((size_t)cap * sizeof(*t));
	if (!t)
		return -ENOMEM;
	if (m->ents) {
		m->old = m->ents;
		m->ocap = m->cap;
		m->ocount = m->count;
		m->scan = 0;
		m->stop = NO_STOP;
	}
	m->ents = t;
	m->cap = cap;
	m->ready = 0;
	if (!m->old)
		init_some(m, cap);
	return 0;
}

int kva_idmap_init(struct kva_idmap *m, kva_idmap_alloc_fn a, kva_idmap_free_fn f,
                   uint32_t initial)
{
	memset(m, 0, sizeof(*m));
	m->mem_alloc = a;
	m->mem_free = f;
	m->stop = NO_STOP;
	uint32_t cap = MIN_CAP;
	while (cap < (1u << 31) && (uint64_t)cap * 3 < (uint64_t)initial * 4)
		cap *= 2;
	return grow(m, cap);
}

void kva_idmap_fini(struct kva_idmap *m)
{
	if (m->old)
		end_growth(m);
	if (m->ents)
		m->mem_free(m->ents, (size_t)m->cap * sizeof(*m->ents));
	m->ents = NULL;
	m->cap = m->count = m->ready = 0;
}

int kva_idmap_reserve(struct kva_idmap *m, uint32_t n)
{
	uint64_t need = (uint64_t)m->count + n;
	/* A growth outruns the inserts it leaves room for (idmap.h): it ends
	 * before ents reaches 3/4. Asked for more, it ends now. */
	if (m->old && need * 4 > (uint64_t)m->cap * 3)
		finish(m);
	if (!m->old) {
		uint64_t cap = m->cap ? m->cap : MIN_CAP;
		while (need * 4 > cap * 3)
			cap *= 2;
		if (cap != m->cap && (cap > (1ull << 31) || grow(m, (uint32_t)cap) != 0))
			/* no larger table: fine while one entry stays empty (probes end there) */
			return need < m->cap ? 0 : -ENOMEM;
	}
	/* Old takes the inserts until ents is ready. If it could not keep an
	 * empty slot through them (it filled past 3/4 when memory ran out, or n
	 * is large), ents becomes ready now: cap slots written, no entry moved. */
	if (m->old && !new_in_use(m)) {
		uint32_t q = init_quanta(m);
		if ((uint64_t)m->ocount + (n < q ? n : q) >= m->ocap)
			init_some(m, m->cap - m->ready);
	}
	return 0;
}

/* Lookups and changes while a growth runs, off the common path. */

static __attribute__((noinline)) uint32_t *find_growing(const struct kva_idmap *m, uint64_t h)
{
	if (maybe_old(m, h)) {
		uint32_t *v = probe(m->old, m->ocap - 1, h);
		if (v)
			return v;
	}
	return new_in_use(m) ? probe(m->ents, m->cap - 1, h) : NULL;
}

static __attribute__((noinline)) int insert_growing(struct kva_idmap *m, uint64_t h, uint32_t val)
{
	int rc = kva_idmap_reserve(m, 1);
	if (rc)
		return rc;
	if (new_in_use(m)) {
		put(m->ents, m->cap - 1, h, val);
	} else {
		put(m->old, m->ocap - 1, h, val);
		m->ocount++;
	}
	m->count++;
	advance(m);
	return 0;
}

static __attribute__((noinline)) bool remove_growing(struct kva_idmap *m, uint64_t h)
{
	uint32_t *v = maybe_old(m, h) ? probe(m->old, m->ocap - 1, h) : NULL;
	if (v) {
		unlink_at(m->old, m->ocap - 1, (uint32_t)(entry_of(v) - m->old));
		m->ocount--;
	} else {
		v = new_in_use(m) ? probe(m->ents, m->cap - 1, h) : NULL;
		if (!v)
			return false;
		unlink_at(m->ents, m->cap - 1, (uint32_t)(entry_of(v) - m->ents));
	}
	m->count--;
	advance(m);
	return true;
}

/* The common path (no growth running) stays what it was before growth
 * became incremental: one table, one branch more. */

static inline uint32_t *find_h(const struct kva_idmap *m, uint64_t h)
{
	if (!m->count)
		return NULL;
	if (m->old)
		return find_growing(m, h);
	return probe(m->ents, m->cap - 1, h);
}

uint32_t *kva_idmap_find(const struct kva_idmap *m, uint64_t id)
{
	return find_h(m, kva_hash64(id));
}

int kva_idmap_insert(struct kva_idmap *m, uint64_t id, uint32_t val)
{
	uint64_t h = kva_hash64(id);
	if (find_h(m, h))
		return -EEXIST;
	if (m->old || ((uint64_t)m->count + 1) * 4 > (uint64_t)m->cap * 3)
		return insert_growing(m, h, val);
	put(m->ents, m->cap - 1, h, val);
	m->count++;
	return 0;
}

bool kva_idmap_remove(struct kva_idmap *m, uint64_t id)
{
	uint64_t h = kva_hash64(id);
	if (!m->count)
		return false;
	if (m->old)
		return remove_growing(m, h);
	uint32_t *v = probe(m->ents, m->cap - 1, h);
	if (!v)
		return false;
	unlink_at(m->ents, m->cap - 1, (uint32_t)(entry_of(v) - m->ents));
	m->count--;
	return true;
}
