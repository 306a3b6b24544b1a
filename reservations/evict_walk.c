/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Eviction walks (see evict_walk.h). An eviction newer than k sharers' copies
 * needs k new decisions. The step looks at KVA__EVICT_STEP_RECORDS sharers at
 * most (rule step-never-walks-queue), so a checkpoint shared by a million
 * waiting requests is revalidated over many steps and their lookups go out
 * spread the same way: the eviction stays pending (e->evicting,
 * checkpoint_index.c) with a cursor into its list. Until the walk reaches a
 * sharer it waits behind the head; the queue's front is checked at every step
 * of a walk (admit.c), and admission asks every restore it is about to admit
 * whether a pending eviction is newer than its copy
 * (kva__evict_revalidate_sel), so none is admitted from a lost checkpoint.
 * Calls lookup.c (a sharer looks up again), checkpoint_index.c and held.c.
 */
#include <errno.h>

#include "alloc.h"
#include "checkpoint_index.h"
#include "evict_walk.h"
#include "held.h"
#include "lookup.h"

#ifdef KVA_FAULT_INJECTION
uint32_t kva__evict_step_records = KVA__EVICT_STEP_RECORDS;
void kva__evict_step_records_set(uint32_t n)
{
	kva__evict_step_records = n ? n : KVA__EVICT_STEP_RECORDS;
}
#endif

/* Looks at p's sharers from its cursor, at most *budget of them; true when
 * it reached the end of the list with no further pass due. */
static bool evict_walk(kva_engine *e, struct kva__evict *p, uint32_t *budget)
{
	for (;;) {
		while (p->cursor && *budget) {
			struct kva__req *r = kva_slab_get(&e->slab, p->cursor - 1);
			p->cursor = r->ck.next; /* before r leaves the list */
			(*budget)--;
			kva__touched(e);
			if (kva__selected_checkpoint(r)->epoch < p->epoch)
				kva__lookup_revalidate(e, r, p->checkpoint_id);
		}
		if (p->cursor || !p->again)
			return !p->cursor;
		/* one more pass, from the front: those this one passed before a
		 * newer eviction came, and those indexed since it began */
		p->again = false;
		p->joined_min = UINT64_MAX;
		p->cursor = kva__ckpt_first(e, p->checkpoint_id);
		if (!p->cursor)
			return true;
	}
}

/* p's walk is done. No sharer left selected an epoch below p's, but those
 * indexed since the walk began (ahead of its start): the list's floor. */
static void evict_done(kva_engine *e, struct kva__evict *p)
{
	uint32_t first = kva__ckpt_first(e, p->checkpoint_id);
	if (first) {
		struct kva__req *r = kva_slab_get(&e->slab, first - 1);
		uint64_t floor = p->epoch < p->joined_min ? p->epoch : p->joined_min;
		if (r->ck.epoch_floor < floor)
			r->ck.epoch_floor = floor;
	}
	kva__free(p, sizeof(*p));
}

/* Only the requests that selected this checkpoint, and only if their copy
 * of it is older than the eviction, look up again: as many as the step's
 * budget allows now, the rest in the next steps (the file comment). Any
 * number of walks may be pending: they share the budget. */
int kva__evict_walk_start(kva_engine *e, struct kva__evict *ev)
{
	if (kva__ckpt_walk_reserve(e) != 0)
		return -ENOMEM;
	/* requests holding it unselected: remembered for when they take it */
	kva__held_evicted(&e->held, ev->checkpoint_id, ev->epoch);
	uint32_t first = kva__ckpt_first(e, ev->checkpoint_id);
	struct kva__req *r = first ? kva_slab_get(&e->slab, first - 1) : NULL;
	struct kva__evict *p = kva__ckpt_walk_of(e, ev->checkpoint_id);
	if (r)
		kva__touched(e);
	/* A repeated or stale eviction (a directory resending its events)
	 * finds nothing older: one record read, not one per sharer. A pending
	 * walk as new covers it, unless a sharer joined behind its cursor with
	 * an older copy and no further pass is due. */
	if (!r || ev->epoch <= r->ck.epoch_floor ||
	    (p && ev->epoch <= p->epoch && (p->again || ev->epoch <= p->joined_min))) {
		kva__free(ev, sizeof(*ev));
		return 0;
	}
	if (p) {
		/* A newer one while walking: the rest of this pass looks at the
		 * newer epoch, and one more pass from the front follows for those
		 * it passed already (and those indexed since). Not a restart now:
		 * evictions coming faster than a pass would keep the walk from
		 * ever reaching the sharers past its first steps. */
		if (p->epoch < ev->epoch)
			p->epoch = ev->epoch;
		p->again = true;
		kva__free(ev, sizeof(*ev));
		return 0;
	}
	ev->cursor = first;
	ev->again = false;
	ev->joined_min = UINT64_MAX;
	if (evict_walk(e, ev, &e->evict_budget)) {
		evict_done(e, ev);
		return 0;
	}
	kva__ckpt_walk_add(e, ev); /* room reserved above */
	return 0;
}

bool kva__evict_walks_continue(kva_engine *e)
{
	bool walked = false;
	for (uint32_t i = 0; i < e->n_evicting && e->evict_budget;) {
		struct kva__evict *p = e->evicting[i];
		walked = true;
		if (evict_walk(e, p, &e->evict_budget)) {
			kva__ckpt_walk_remove(e, i);
			evict_done(e, p);
		} else {
			i++;
		}
	}
	return walked;
}

bool kva__evict_revalidate_sel(kva_engine *e, struct kva__req *r)
{
	const kva_checkpoint *c = kva__selected_checkpoint(r);
	struct kva__evict *p = kva__ckpt_walk_of(e, c->id);
	if (!p || c->epoch >= p->epoch)
		return false;
	uint64_t id = c->id; /* c goes with the manifest */
	kva__lookup_revalidate(e, r, id);
	return true;
}
