/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The checkpoint index (see checkpoint_index.h). Scheduler-private: a map
 * from a checkpoint id (local or external) to the first of the waiting
 * records that selected it, the rest linked through the records
 * (ck.prev/ck.next), so k sharers cost O(1) each to add and remove and an
 * eviction walks only its own sharers (evict_walk.c). The pending walks'
 * registry is here too: removing a record from a list must move the
 * cursor of the walk that was about to look at it. Calls only alloc.c.
 */
#include <errno.h>

#include "alloc.h"
#include "checkpoint_index.h"

static struct kva__req *at_slot(kva_engine *e, uint32_t slot_plus1)
{
	return slot_plus1 ? kva_slab_get(&e->slab, slot_plus1 - 1) : NULL;
}

int kva__ckpt_reserve(kva_engine *e)
{
	return kva_idmap_reserve(&e->ckpt, 1);
}

uint32_t kva__ckpt_first(kva_engine *e, uint64_t id)
{
	uint32_t *first = kva_idmap_find(&e->ckpt, id);
	return first ? *first + 1 : 0;
}

/* ---- pending eviction walks ----------------------------------------------------- */

/* One map probe, however many walks are pending. */
struct kva__evict *kva__ckpt_walk_of(kva_engine *e, uint64_t id)
{
	if (!e->n_evicting)
		return NULL;
	uint32_t *i = kva_idmap_find(&e->evict_at, id);
	return i ? e->evicting[*i] : NULL;
}

int kva__ckpt_walks_init(kva_engine *e)
{
	e->evicting = NULL;
	e->n_evicting = e->evicting_cap = 0;
	return kva_idmap_init(&e->evict_at, kva__alloc, kva__free, 64);
}

int kva__ckpt_walk_reserve(kva_engine *e)
{
	if (e->n_evicting == e->evicting_cap) {
		uint32_t cap = e->evicting_cap ? 2 * e->evicting_cap : 8;
		struct kva__evict **a = kva__realloc(e->evicting, e->evicting_cap * sizeof(*a),
		                                     cap * sizeof(*a));
		if (!a)
			return -ENOMEM;
		e->evicting = a;
		e->evicting_cap = cap;
	}
	return kva_idmap_reserve(&e->evict_at, 1);
}

void kva__ckpt_walk_remove(kva_engine *e, uint32_t i)
{
	kva_idmap_remove(&e->evict_at, e->evicting[i]->checkpoint_id);
	struct kva__evict *last = e->evicting[--e->n_evicting];
	if (i < e->n_evicting) {
		e->evicting[i] = last;
		*kva_idmap_find(&e->evict_at, last->checkpoint_id) = i;
	}
}

void kva__ckpt_walk_add(kva_engine *e, struct kva__evict *ev)
{
	/* room reserved by kva__ckpt_walk_reserve: neither can fail */
	(void)kva_idmap_insert(&e->evict_at, ev->checkpoint_id, e->n_evicting);
	e->evicting[e->n_evicting++] = ev;
}

void kva__ckpt_walks_free(kva_engine *e)
{
	while (e->n_evicting)
		kva__free(e->evicting[--e->n_evicting], sizeof(struct kva__evict));
	kva__free(e->evicting, e->evicting_cap * sizeof(*e->evicting));
	kva_idmap_fini(&e->evict_at);
}

/* ---- the index -------------------------------------------------------------------- */

void kva__ckpt_unindex(kva_engine *e, struct kva__req *r)
{
	if (!(r->flags & KVA__F_INDEXED))
		return;
	r->flags &= (uint16_t)~KVA__F_INDEXED;
	/* a pending walk about to look at r goes on with the next one: only
	 * the walk of r's own checkpoint can be (its list is r's) */
	struct kva__evict *p = kva__ckpt_walk_of(e, kva__selected_checkpoint(r)->id);
	if (p && p->cursor == kva__rec_slot(r) + 1)
		p->cursor = r->ck.next;
	struct kva__req *prev = at_slot(e, r->ck.prev), *next = at_slot(e, r->ck.next);
	if (next)
		next->ck.prev = r->ck.prev;
	if (prev) {
		prev->ck.next = r->ck.next;
	} else {
		uint64_t id = kva__selected_checkpoint(r)->id;
		if (next) {
			*kva_idmap_find(&e->ckpt, id) = r->ck.next - 1;
			next->ck.epoch_floor = r->ck.epoch_floor; /* fewer records: still a floor */
		} else {
			kva_idmap_remove(&e->ckpt, id);
		}
	}
	r->ck.prev = r->ck.next = 0;
}

/* Room was reserved by the caller (kva__ckpt_reserve): cannot fail. */
void kva__ckpt_index(kva_engine *e, struct kva__req *r, uint64_t id)
{
	uint32_t me = kva__rec_slot(r);
	uint32_t *first = kva_idmap_find(&e->ckpt, id);
	r->ck.prev = 0;
	r->ck.next = 0;
	r->ck.epoch_floor = kva__selected_checkpoint(r)->epoch;
	struct kva__evict *p = kva__ckpt_walk_of(e, id);
	if (p && p->joined_min > r->ck.epoch_floor)
		/* ahead of the cursor: evict_walk.c, evict_done */
		p->joined_min = r->ck.epoch_floor;
	if (first) {
		struct kva__req *old = kva_slab_get(&e->slab, *first);
		old->ck.prev = me + 1;
		r->ck.next = *first + 1;
		if (old->ck.epoch_floor < r->ck.epoch_floor)
			r->ck.epoch_floor = old->ck.epoch_floor;
		*first = me;
	} else {
		(void)kva_idmap_insert(&e->ckpt, id, me);
	}
	r->flags |= KVA__F_INDEXED;
}
