/* SPDX-License-Identifier: Apache-2.0 */
/* idmap: single-owner open-addressing map (see idmap.h). Owns its arrays. */
#include "idmap.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>

#define MIN_CAP 64u

static int resize(struct kva_idmap *m, uint32_t cap);

int kva_idmap_init(struct kva_idmap *m, kva_idmap_alloc_fn a, kva_idmap_free_fn f,
                   uint32_t initial)
{
	memset(m, 0, sizeof(*m));
	m->mem_alloc = a;
	m->mem_free = f;
	uint32_t cap = MIN_CAP;
	while (cap < (1u << 31) && (uint64_t)cap * 3 < (uint64_t)initial * 4)
		cap *= 2;
	return resize(m, cap);
}

void kva_idmap_fini(struct kva_idmap *m)
{
	if (m->ents)
		m->mem_free(m->ents, (size_t)m->cap * sizeof(*m->ents));
	m->ents = NULL;
	m->cap = m->count = 0;
}

/* The entry whose value v points at. */
static struct kva_idmap_entry *entry_of(uint32_t *v)
{
	return (struct kva_idmap_entry *)((char *)v - offsetof(struct kva_idmap_entry, val));
}

static uint64_t key_of(const struct kva_idmap_entry *x)
{
	return (uint64_t)x->key_hi << 32 | x->key_lo;
}

/* h: an id's kva_hash64, which is what entries store. */
static uint32_t home(const struct kva_idmap *m, uint64_t h)
{
	return (uint32_t)h & (m->cap - 1);
}

static void place(struct kva_idmap *m, uint64_t h, uint32_t val)
{
	uint32_t i = home(m, h);
	while (m->ents[i].val != KVA_IDMAP_NONE)
		i = (i + 1) & (m->cap - 1);
	m->ents[i].key_lo = (uint32_t)h;
	m->ents[i].key_hi = (uint32_t)(h >> 32);
	m->ents[i].val = val;
	m->count++;
}

static int resize(struct kva_idmap *m, uint32_t cap)
{
	struct kva_idmap_entry *ents = m->mem_alloc((size_t)cap * sizeof(*ents));
	if (!ents)
		return -ENOMEM;
	for (uint32_t i = 0; i < cap; i++)
		ents[i].val = KVA_IDMAP_NONE;
	struct kva_idmap_entry *old = m->ents;
	uint32_t ocap = m->cap;
	m->ents = ents;
	m->cap = cap;
	m->count = 0;
	for (uint32_t i = 0; i < ocap; i++)
		if (old[i].val != KVA_IDMAP_NONE)
			place(m, key_of(&old[i]), old[i].val);
	if (old)
		m->mem_free(old, (size_t)ocap * sizeof(*old));
	return 0;
}

int kva_idmap_reserve(struct kva_idmap *m, uint32_t n)
{
	uint64_t need = (uint64_t)m->count + n;
	uint64_t cap = m->cap ? m->cap : MIN_CAP;
	while (need * 4 > cap * 3)
		cap *= 2;
	if (cap == m->cap || (cap <= (1ull << 31) && resize(m, (uint32_t)cap) == 0))
		return 0;
	/* no larger table: fine while one entry stays empty (probes end there) */
	return need < m->cap ? 0 : -ENOMEM;
}

static uint32_t *find_h(const struct kva_idmap *m, uint64_t h)
{
	if (!m->count)
		return NULL;
	for (uint32_t i = home(m, h);; i = (i + 1) & (m->cap - 1)) {
		if (m->ents[i].val == KVA_IDMAP_NONE)
			return NULL;
		if (key_of(&m->ents[i]) == h)
			return &m->ents[i].val;
	}
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
	int rc = kva_idmap_reserve(m, 1);
	if (rc)
		return rc;
	place(m, h, val);
	return 0;
}

bool kva_idmap_remove(struct kva_idmap *m, uint64_t id)
{
	uint32_t *v = find_h(m, kva_hash64(id));
	if (!v)
		return false;
	uint32_t mask = m->cap - 1;
	struct kva_idmap_entry *x = entry_of(v);
	uint32_t hole = (uint32_t)(x - m->ents);
	/* Backward shift: move later entries of the run into the hole when
	 * their home does not lie cyclically in (hole, j]. */
	for (uint32_t j = (hole + 1) & mask; m->ents[j].val != KVA_IDMAP_NONE; j = (j + 1) & mask) {
		uint32_t h = home(m, key_of(&m->ents[j]));
		bool stays = hole <= j ? (hole < h && h <= j) : (hole < h || h <= j);
		if (stays)
			continue;
		m->ents[hole] = m->ents[j];
		hole = j;
	}
	m->ents[hole].val = KVA_IDMAP_NONE;
	m->count--;
	return true;
}
