/* idmap: single-owner open-addressing map (see idmap.h). Owns its arrays. */
#include "idmap.h"

#include <errno.h>
#include <string.h>

#define MIN_CAP 64u

void kva_idmap_init(struct kva_idmap *m, kva_idmap_alloc_fn a, kva_idmap_free_fn f)
{
	memset(m, 0, sizeof(*m));
	m->mem_alloc = a;
	m->mem_free = f;
}

static void free_arrays(struct kva_idmap *m, uint64_t *keys, uint32_t *vals, uint32_t cap)
{
	if (keys)
		m->mem_free(keys, (size_t)cap * sizeof(*keys));
	if (vals)
		m->mem_free(vals, (size_t)cap * sizeof(*vals));
}

void kva_idmap_fini(struct kva_idmap *m)
{
	free_arrays(m, m->keys, m->vals, m->cap);
	m->keys = NULL;
	m->vals = NULL;
	m->cap = m->count = 0;
}

static uint32_t home(const struct kva_idmap *m, uint64_t id)
{
	return (uint32_t)kva_hash64(id) & (m->cap - 1);
}

static void place(struct kva_idmap *m, uint64_t id, uint32_t val)
{
	uint32_t i = home(m, id);
	while (m->vals[i] != KVA_IDMAP_NONE)
		i = (i + 1) & (m->cap - 1);
	m->keys[i] = id;
	m->vals[i] = val;
	m->count++;
}

static int resize(struct kva_idmap *m, uint32_t cap)
{
	uint64_t *keys = m->mem_alloc((size_t)cap * sizeof(*keys));
	uint32_t *vals = m->mem_alloc((size_t)cap * sizeof(*vals));
	if (!keys || !vals) {
		free_arrays(m, keys, vals, cap);
		return -ENOMEM;
	}
	memset(vals, 0xff, (size_t)cap * sizeof(*vals)); /* KVA_IDMAP_NONE */
	uint64_t *ok = m->keys;
	uint32_t *ov = m->vals, ocap = m->cap;
	m->keys = keys;
	m->vals = vals;
	m->cap = cap;
	m->count = 0;
	for (uint32_t i = 0; i < ocap; i++)
		if (ov[i] != KVA_IDMAP_NONE)
			place(m, ok[i], ov[i]);
	free_arrays(m, ok, ov, ocap);
	return 0;
}

int kva_idmap_reserve(struct kva_idmap *m, uint32_t n)
{
	uint64_t need = (uint64_t)m->count + n;
	uint64_t cap = m->cap ? m->cap : MIN_CAP;
	while (need * 4 > cap * 3)
		cap *= 2;
	if (cap > (1ull << 31))
		return -ENOMEM;
	return cap == m->cap ? 0 : resize(m, (uint32_t)cap);
}

uint32_t *kva_idmap_find(const struct kva_idmap *m, uint64_t id)
{
	if (!m->count)
		return NULL;
	for (uint32_t i = home(m, id);; i = (i + 1) & (m->cap - 1)) {
		if (m->vals[i] == KVA_IDMAP_NONE)
			return NULL;
		if (m->keys[i] == id)
			return &m->vals[i];
	}
}

int kva_idmap_insert(struct kva_idmap *m, uint64_t id, uint32_t val)
{
	if (kva_idmap_find(m, id))
		return -EEXIST;
	int rc = kva_idmap_reserve(m, 1);
	if (rc)
		return rc;
	place(m, id, val);
	return 0;
}

bool kva_idmap_remove(struct kva_idmap *m, uint64_t id)
{
	uint32_t *v = kva_idmap_find(m, id);
	if (!v)
		return false;
	uint32_t mask = m->cap - 1, hole = (uint32_t)(v - m->vals);
	/* Backward shift: move later entries of the run into the hole when
	 * their home does not lie cyclically in (hole, j]. */
	for (uint32_t j = (hole + 1) & mask; m->vals[j] != KVA_IDMAP_NONE; j = (j + 1) & mask) {
		uint32_t h = home(m, m->keys[j]);
		bool stays = hole <= j ? (hole < h && h <= j) : (hole < h || h <= j);
		if (stays)
			continue;
		m->keys[hole] = m->keys[j];
		m->vals[hole] = m->vals[j];
		hole = j;
	}
	m->vals[hole] = KVA_IDMAP_NONE;
	m->count--;
	return true;
}
