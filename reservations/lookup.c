/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Lookups (see lookup.h): the directory, deadlines, retained manifests,
 * refresh answers and the checkpoint index.
 *
 * lookup_word = seq << 1 | awaiting. Producers (kva_lookup_answer) read it
 * to refuse stale answers early; the scheduler re-checks when it handles the
 * answer, which is the decision that counts.
 *
 * The checkpoint index (rule 15) is scheduler-private: a map from a local
 * checkpoint id to the first of the waiting records that selected it, the
 * rest linked through the records (ck.prev/ck.next), so k sharers cost O(1)
 * each to add and remove and an eviction walks only its own sharers.
 *
 * Memory-order labels:
 *   R1  a new lookup's seq -> kva_lookup_answer (A3 of intake.c)
 */
#include <errno.h>
#include <string.h>

#include "alloc.h"
#include "lookup.h"

static struct kva__req *at_slot(kva_engine *e, uint32_t slot_plus1)
{
	return slot_plus1 ? kva_slab_get(&e->slab, slot_plus1 - 1) : NULL;
}

static void ckpt_unindex(kva_engine *e, struct kva__req *r)
{
	if (!(r->flags & KVA__F_INDEXED))
		return;
	r->flags &= (uint16_t)~KVA__F_INDEXED;
	struct kva__req *prev = at_slot(e, r->ck.prev), *next = at_slot(e, r->ck.next);
	if (next)
		next->ck.prev = r->ck.prev;
	if (prev) {
		prev->ck.next = r->ck.next;
	} else {
		uint64_t id = kva__sel(r)->id;
		if (next)
			*kva_idmap_find(&e->ckpt, id) = r->ck.next - 1;
		else
			kva_idmap_remove(&e->ckpt, id);
	}
	r->ck.prev = r->ck.next = 0;
}

/* Room was reserved by the caller (kva__lookup_on_answer): cannot fail. */
static void ckpt_index(kva_engine *e, struct kva__req *r, uint64_t id)
{
	uint32_t me = kva__rec_slot(r);
	uint32_t *first = kva_idmap_find(&e->ckpt, id);
	r->ck.prev = 0;
	r->ck.next = 0;
	if (first) {
		struct kva__req *old = kva_slab_get(&e->slab, *first);
		old->ck.prev = me + 1;
		r->ck.next = *first + 1;
		*first = me;
	} else {
		(void)kva_idmap_insert(&e->ckpt, id, me);
	}
	r->flags |= KVA__F_INDEXED;
}

/* The restores-waiting gauge: a waiting request with a selected checkpoint. */
static void restore_gauge(kva_engine *e, struct kva__req *r, bool on)
{
	if (on && !(r->flags & KVA__F_COUNTED) &&
	    atomic_load_explicit(&r->state, memory_order_relaxed) == KVA_STATE_WAITING) {
		r->flags |= KVA__F_COUNTED;
		kva__st_sched(e, ST_RESTORES_WAITING, 1);
	} else if (!on && (r->flags & KVA__F_COUNTED)) {
		r->flags &= (uint16_t)~KVA__F_COUNTED;
		kva__st_sched(e, ST_RESTORES_WAITING, (uint64_t)-1);
	}
}

void kva__lookup_forget(kva_engine *e, struct kva__req *r)
{
	kva_timerwheel_cancel(&e->wheel, &r->deadline);
	ckpt_unindex(e, r);
	restore_gauge(e, r, false);
}

void kva__manifest_drop(kva_engine *e, struct kva__req *r)
{
	ckpt_unindex(e, r);
	restore_gauge(e, r, false);
	if (r->nents > 1)
		kva__answer_free(r->manifest);
	r->nents = 0;
	r->sel = -1;
	r->flags &= (uint16_t)~KVA__F_RESTORE;
	atomic_store_explicit(&r->pub_sel, 0, memory_order_relaxed);
}

/* Informational list; the admission carries the reason. */
static void plan_fallback(kva_engine *e, struct kva__req *r, uint8_t reason)
{
	kva_plan *p = e->plan;
	if (p && p->n_fallbacks < p->fallbacks_cap)
		p->fallbacks[p->n_fallbacks++] = (kva_fallback){kva__rec_handle(r), reason};
}

void kva__fallback(kva_engine *e, struct kva__req *r, uint8_t reason)
{
	kva__manifest_drop(e, r);
	r->reason = reason;
	r->flags |= KVA__F_DECIDED;
	atomic_store_explicit(&r->pub_reason, reason, memory_order_relaxed);
	kva__st_sched(e, (enum kva__stat)(ST_FALLBACK0 + reason), 1);
	plan_fallback(e, r, reason);
}

void kva__lookup_issue(kva_engine *e, struct kva__req *r, bool decisive)
{
	if (decisive && (r->prefix_key == 0 || !e->cfg.lookup)) {
		kva__fallback(e, r, r->prefix_key == 0 ? KVA_REASON_NO_KEY : KVA_REASON_MISS);
		return;
	}
	uint32_t seq = (atomic_load_explicit(&r->lookup_word, memory_order_relaxed) >> 1) + 1;
	/* R1: the new seq is visible to kva_lookup_answer (A3 of intake.c)
	 * before the directory can possibly answer it. */
	atomic_store_explicit(&r->lookup_word, seq << 1 | KVA__LW_AWAITING, memory_order_release);
	if (decisive) {
		r->flags &= (uint16_t) ~(KVA__F_DECIDED | KVA__F_REFRESH);
		if (e->cfg.lookup_timeout_ns)
			kva_timerwheel_arm(&e->wheel, &r->deadline,
			                   kva__after(e->now, e->cfg.lookup_timeout_ns));
	} else {
		r->flags |= KVA__F_REFRESH;
	}
	uint8_t n = atomic_load_explicit(&r->lookups, memory_order_relaxed);
	if (n < UINT8_MAX)
		atomic_store_explicit(&r->lookups, n + 1, memory_order_relaxed);
	kva__st_sched(e, ST_LOOKUPS, 1);
	kva_lookup_token t = {r->id, atomic_load_explicit(&r->hdr.gen, memory_order_relaxed), seq,
	                      kva__rec_slot(r), 0};
	e->cfg.lookup(e->cfg.lookup_ctx, r->prefix_key, r->prompt_tokens, t);
}

/* The longest compatible checkpoint that does not extend past the prompt
 * and lies below below_pos; -1 if none. */
static int select_entry(const kva_checkpoint *ents, uint32_t count, uint32_t prompt,
                        uint32_t below_pos)
{
	for (int i = (int)count - 1; i >= 0; i--) {
		const kva_checkpoint *c = &ents[i];
		if (c->compatible && c->position <= prompt && c->position < below_pos)
			return i;
	}
	return -1;
}

int kva__select_shorter(const struct kva__req *r)
{
	return select_entry(kva__ents(r), r->nents, r->prompt_tokens, kva__sel(r)->position);
}

void kva__select(kva_engine *e, struct kva__req *r, int sel)
{
	ckpt_unindex(e, r);
	r->sel = (int8_t)sel;
	r->flags |= KVA__F_RESTORE | KVA__F_DECIDED;
	const kva_checkpoint *c = kva__sel(r);
	atomic_store_explicit(&r->pub_sel, c->position << 1 | (c->location == KVA_LOC_LOCAL),
	                      memory_order_relaxed);
	restore_gauge(e, r, true);
	if (c->location == KVA_LOC_LOCAL &&
	    atomic_load_explicit(&r->state, memory_order_relaxed) == KVA_STATE_WAITING)
		ckpt_index(e, r, c->id);
}

/* Adopts `a` as r's retained manifest with entry `sel` selected; a single
 * entry is kept in the record and the answer freed. */
static void manifest_adopt(kva_engine *e, struct kva__req *r, struct kva__answer *a, int sel)
{
	kva__manifest_drop(e, r);
	r->nents = (uint8_t)a->count;
	if (a->count == 1) {
		r->one = a->entries[0];
		kva__answer_free(a);
	} else {
		r->manifest = a;
	}
	kva__select(e, r, sel);
}

static bool any_local(const struct kva__answer *a)
{
	for (uint32_t i = 0; i < a->count; i++)
		if (a->entries[i].location == KVA_LOC_LOCAL)
			return true;
	return false;
}

int kva__lookup_on_answer(kva_engine *e, struct kva__answer *a)
{
	struct kva__req *r = kva__rec_find(e, a->token.slot, a->token.gen, a->token.id);
	uint32_t w = r ? atomic_load_explicit(&r->lookup_word, memory_order_relaxed) : 0;
	if (!r || w != (a->token.seq << 1 | KVA__LW_AWAITING) ||
	    atomic_load_explicit(&r->state, memory_order_relaxed) != KVA_STATE_WAITING) {
		/* timed out, superseded or ended since the producer checked */
		kva__st_add(e, ST_LATE_ANSWERS, 1);
		kva__answer_free(a);
		return 0;
	}
	/* An index entry must not fail halfway: make room first. */
	if (any_local(a) && kva_idmap_reserve(&e->ckpt, 1) != 0)
		return -ENOMEM;
	atomic_store_explicit(&r->lookup_word, a->token.seq << 1, memory_order_relaxed);
	kva__st_sched(e, ST_ANSWERED, 1);
	int sel = select_entry(a->entries, a->count, r->prompt_tokens, UINT32_MAX);

	if (r->flags & KVA__F_REFRESH) {
		/* rule 18: the refresh's answer replaces the retained manifest —
		 * still listed: keep waiting; another compatible checkpoint:
		 * reselect; unlisted or incompatible: leave the restore wait now
		 * (never copy what the directory just said is gone). An
		 * unanswered refresh changed nothing. */
		r->flags &= (uint16_t)~KVA__F_REFRESH;
		if (!(r->flags & KVA__F_RESTORE)) { /* fell back meanwhile */
			kva__answer_free(a);
		} else if (sel >= 0) {
			manifest_adopt(e, r, a, sel);
		} else {
			bool any = a->count > 0;
			kva__answer_free(a);
			kva__fallback(e, r, any ? KVA_REASON_INCOMPATIBLE : KVA_REASON_MISS);
		}
		return 0;
	}

	kva_timerwheel_cancel(&e->wheel, &r->deadline);
	if (sel < 0) {
		bool any = a->count > 0;
		kva__answer_free(a);
		kva__fallback(e, r, any ? KVA_REASON_INCOMPATIBLE : KVA_REASON_MISS);
		return 0;
	}
	/* rule 9: a reservation that can never fit is classified at once */
	uint64_t need = (uint64_t)kva__pages_for(e, r->prompt_tokens) + e->cfg.decode_headroom_pages;
	if (need > e->usable_pages) {
		kva__answer_free(a);
		kva__fallback(e, r, KVA_REASON_TOO_LARGE);
		return 0;
	}
	manifest_adopt(e, r, a, sel);
	return 0;
}

void kva__lookup_on_deadline(kva_engine *e, struct kva__req *r)
{
	uint32_t w = atomic_load_explicit(&r->lookup_word, memory_order_relaxed);
	if (!(w & KVA__LW_AWAITING) || (r->flags & KVA__F_REFRESH))
		return;
	atomic_store_explicit(&r->lookup_word, w & ~KVA__LW_AWAITING, memory_order_relaxed);
	kva__st_sched(e, ST_LOOKUP_TIMEOUTS, 1);
	kva__fallback(e, r, KVA_REASON_LOOKUP_TIMEOUT);
}

/* Only the requests that selected this checkpoint, and only if their copy
 * of it is older than the eviction, look up again. */
void kva__lookup_on_evict(kva_engine *e, struct kva__evict *ev)
{
	uint32_t *first = kva_idmap_find(&e->ckpt, ev->checkpoint_id);
	struct kva__req *r = first ? kva_slab_get(&e->slab, *first) : NULL;
	while (r) {
		struct kva__req *next = at_slot(e, r->ck.next);
		kva__touched(e);
		if (kva__sel(r)->epoch < ev->epoch) {
			kva__st_sched(e, ST_REVALIDATIONS, 1);
			kva__manifest_drop(e, r);
			kva__lookup_issue(e, r, true);
		}
		r = next;
	}
	kva__free(ev, sizeof(*ev));
}
