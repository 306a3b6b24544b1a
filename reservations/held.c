/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The held local checkpoints (see held.h).
 *
 * The checkpoint index (checkpoint_index.c) finds a waiting request by the
 * checkpoint it selected. A request also holds entries it has not selected: the
 * shorter ones of its manifest (rule retry-then-shorter takes one when copies
 * fail), the host's own (rule host-local-checkpoints: a lookup's miss or timeout, a
 * preemption's resume, the local tokens of an import's admission). An external
 * entry taken later is copied, and its copy finds out; a local one is not, so its
 * eviction must not be forgotten while a request holds it. The engine counts the
 * local entries of live records' manifests per id and keeps, while the count is not
 * 0, the newest epoch an eviction of that id reported: O(1) per eviction and per
 * entry held or dropped (a manifest has at most KVA_MAX_CHECKPOINTS + 1), memory
 * for the distinct local ids live requests hold (12 + 16 bytes each, trackers in
 * chunks that are reused, never moved), nothing for external entries. An id nobody
 * holds remembers nothing, and a directory's answer is taken as it lists its
 * entries (the news its directory had when it answered; lookup.c, select_entry):
 * what is checked is an entry retained and taken later.
 */
#include <errno.h>
#include <string.h>

#include "alloc.h"
#include "held.h"

static struct kva__held *held_at(const struct kva__held_map *m, uint32_t i)
{
	return &m->chunks[i / KVA__HELD_CHUNK][i % KVA__HELD_CHUNK];
}

int kva__held_init(struct kva__held_map *m)
{
	m->chunks = NULL;
	m->n_chunks = m->chunks_cap = 0;
	m->free = m->n_free = 0;
	return kva_idmap_init(&m->ids, kva__alloc, kva__free, 64);
}

void kva__held_fini(struct kva__held_map *m)
{
	for (uint32_t i = 0; i < m->n_chunks; i++)
		kva__free(m->chunks[i], KVA__HELD_CHUNK * sizeof(struct kva__held));
	if (m->chunks)
		kva__free(m->chunks, m->chunks_cap * sizeof(*m->chunks));
	kva_idmap_fini(&m->ids);
}

static void held_free_push(struct kva__held_map *m, uint32_t i)
{
	held_at(m, i)->next_free = m->free;
	m->free = i + 1;
	m->n_free++;
}

int kva__held_reserve(struct kva__held_map *m, uint32_t n)
{
	if (kva_idmap_reserve(&m->ids, n) != 0)
		return -ENOMEM;
	while (m->n_free < n) {
		if (m->n_chunks == m->chunks_cap) {
			/* the chunk list: a pointer per 1,024 ids, doubled */
			uint32_t cap = m->chunks_cap ? 2 * m->chunks_cap : 4;
			struct kva__held **c = kva__alloc(cap * sizeof(*c));
			if (!c)
				return -ENOMEM;
			if (m->chunks) {
				memcpy(c, m->chunks, m->n_chunks * sizeof(*c));
				kva__free(m->chunks, m->chunks_cap * sizeof(*c));
			}
			m->chunks = c;
			m->chunks_cap = cap;
		}
		struct kva__held *chunk = kva__alloc(KVA__HELD_CHUNK * sizeof(*chunk));
		if (!chunk)
			return -ENOMEM;
		uint32_t base = m->n_chunks * KVA__HELD_CHUNK;
		m->chunks[m->n_chunks++] = chunk;
		for (uint32_t i = KVA__HELD_CHUNK; i-- > 0;)
			held_free_push(m, base + i);
	}
	return 0;
}

static struct kva__held *held_find(const struct kva__held_map *m, uint64_t id)
{
	const uint32_t *i = kva_idmap_find(&m->ids, id);
	return i ? held_at(m, *i) : NULL;
}

void kva__held_hold(struct kva__held_map *m, const kva_checkpoint *cp)
{
	if (cp->location != KVA_LOC_LOCAL)
		return;
	struct kva__held *t = held_find(m, cp->id);
	if (t) {
		t->refs++;
		return;
	}
	uint32_t i = m->free - 1; /* reserved: the list is not empty */
	t = held_at(m, i);
	m->free = t->next_free;
	m->n_free--;
	t->refs = 1;
	t->evicted = 0;
	(void)kva_idmap_insert(&m->ids, cp->id, i); /* reserved: cannot fail */
}

void kva__held_drop(struct kva__held_map *m, const kva_checkpoint *cp)
{
	if (cp->location != KVA_LOC_LOCAL)
		return;
	uint32_t *i = kva_idmap_find(&m->ids, cp->id);
	if (!i)
		return; /* cannot happen: every held entry counted */
	uint32_t at = *i;
	if (--held_at(m, at)->refs)
		return;
	kva_idmap_remove(&m->ids, cp->id);
	held_free_push(m, at);
}

void kva__held_evicted(struct kva__held_map *m, uint64_t id, uint64_t epoch)
{
	struct kva__held *t = held_find(m, id);
	if (t && t->evicted < epoch)
		t->evicted = epoch;
}

bool kva__held_gone(const struct kva__held_map *m, const kva_checkpoint *cp)
{
	if (cp->location != KVA_LOC_LOCAL || !m->ids.count)
		return false;
	const struct kva__held *t = held_find(m, cp->id);
	return t && t->evicted > cp->epoch;
}

static void held_each(struct kva__held_map *m, struct kva__req *r,
                      void (*fn)(struct kva__held_map *, const kva_checkpoint *))
{
	if (!(r->flags & KVA__F_HELD))
		return;
	const kva_checkpoint *c = kva__manifest_entries(r);
	for (uint32_t i = 0; i < r->nents; i++)
		fn(m, &c[i]);
}

void kva__held_hold_all(struct kva__held_map *m, struct kva__req *r)
{
	held_each(m, r, kva__held_hold);
}

void kva__held_drop_all(struct kva__held_map *m, struct kva__req *r)
{
	held_each(m, r, kva__held_drop);
}
