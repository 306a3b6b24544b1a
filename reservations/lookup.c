/*
 * Lookups: one directory lookup per request incarnation at ingest (rule 2),
 * a deadline per unanswered lookup (rule 3), the retained manifest and the
 * checkpoint it selects, refreshes during long waits (rule 18), and
 * revalidation of local selections when their checkpoint is evicted
 * (rule 15) through an index from checkpoint id to the requests that chose
 * it, so an eviction touches only those.
 *
 * lookup_word = seq << 1 | awaiting. Producers (kva_lookup_answer) read it
 * to refuse stale answers early; the scheduler re-checks when it drains the
 * answer, which is the decision that counts.
 */
#include <errno.h>
#include <string.h>

#include "alloc.h"
#include "engine_internal.h"

#define LW_AWAITING 1u

static void answer_free_rcu(struct rcu_head *h)
{
	kva_rcu_reclaim_begin();
	kva__answer_free(caa_container_of(h, struct kva__ckpt_ref, rcu)->owner);
}

/* Scheduler thread. Removes r's selection from the checkpoint index. */
void kva__ckpt_unindex(kva_engine *e, struct kva__req *r)
{
	struct kva__ckpt_ref *ref = kva__answer_ref(r->manifest);
	if (ref && ref->indexed) {
		kva_idtable_del(&e->ckpt, &ref->node);
		ref->indexed = false;
	}
}

/* Scheduler thread. Drops r's retained manifest and selection. */
void kva__manifest_drop(kva_engine *e, struct kva__req *r)
{
	struct kva__answer *a = r->manifest;
	kva__ckpt_unindex(e, r);
	r->manifest = NULL;
	r->sel = -1;
	r->flags &= (uint16_t)~KVA__F_RESTORE;
	atomic_store_explicit(&r->pub_sel, 0, memory_order_relaxed);
	struct kva__ckpt_ref *ref = kva__answer_ref(a);
	if (ref) /* the index may still be read until a grace period */
		kva_rcu_call(&ref->rcu, answer_free_rcu);
	else
		kva__answer_free(a);
}

/* Scheduler thread. r takes the ordinary (recompute) path for `reason`. */
void kva__fallback(kva_engine *e, struct kva__req *r, uint8_t reason)
{
	kva__manifest_drop(e, r);
	r->reason = reason;
	r->flags |= KVA__F_DECIDED;
	atomic_store_explicit(&r->pub_reason, reason, memory_order_relaxed);
	kva__st_add(e, (enum kva__stat)(ST_FALLBACK0 + reason), 1);
	kva__plan_fallback(e, r, reason);
}

/* Scheduler thread. Asks the directory about r. A decisive lookup decides
 * r's path (r blocks the head until it is answered or times out); a refresh
 * only may replace the retained manifest. */
void kva__lookup_issue(kva_engine *e, struct kva__req *r, bool decisive)
{
	if (decisive && (r->prefix_key == 0 || !e->cfg.lookup)) {
		kva__fallback(e, r, r->prefix_key == 0 ? KVA_REASON_NO_KEY : KVA_REASON_MISS);
		return;
	}
	uint32_t seq = (atomic_load_explicit(&r->lookup_word, memory_order_relaxed) >> 1) + 1;
	/* R6: the new seq is visible to kva_lookup_answer (A6) before the
	 * directory can possibly answer it. */
	atomic_store_explicit(&r->lookup_word, seq << 1 | LW_AWAITING, memory_order_release);
	if (decisive) {
		r->flags &= (uint16_t) ~(KVA__F_DECIDED | KVA__F_REFRESH);
		if (e->cfg.lookup_timeout_ns)
			kva_timerwheel_arm(&e->wheel, &r->deadline, e->now + e->cfg.lookup_timeout_ns);
	} else {
		r->flags |= KVA__F_REFRESH;
	}
	uint8_t n = atomic_load_explicit(&r->lookups, memory_order_relaxed);
	if (n < UINT8_MAX)
		atomic_store_explicit(&r->lookups, n + 1, memory_order_relaxed);
	kva__st_add(e, ST_LOOKUPS, 1);
	kva_lookup_token t = {r->idn.id, r->idn.gen, seq};
	e->cfg.lookup(e->cfg.lookup_ctx, r->prefix_key, r->prompt_tokens, t);
}

/* ---- answers (any thread) ---------------------------------------------- */

static int manifest_valid(const kva_manifest *m)
{
	if (m->count > KVA_MAX_CHECKPOINTS)
		return -EINVAL;
	for (uint32_t i = 0; i < m->count; i++) {
		const kva_checkpoint *c = &m->entries[i];
		if (c->position == 0 || c->location > KVA_LOC_LOCAL)
			return -EINVAL;
		if (i && c->position <= m->entries[i - 1].position)
			return -EINVAL; /* unsorted or duplicate position */
		for (uint32_t j = 0; j < i; j++)
			if (m->entries[j].id == c->id)
				return -EINVAL; /* duplicate checkpoint id */
	}
	return 0;
}

int kva_lookup_answer(kva_engine *e, kva_lookup_token t, const kva_manifest *m)
{
	if (!e || !m)
		return -EINVAL;
	int rc = manifest_valid(m);
	if (rc)
		return rc;
	kva_rcu_read_lock();
	struct kva__req *r = kva__req_find(e, (kva_handle){t.id, t.gen, 0});
	/* A6: pairs with R6 in kva__lookup_issue. */
	uint32_t w = r ? atomic_load_explicit(&r->lookup_word, memory_order_acquire) : 0;
	if (!r) {
		rc = -ENOENT;
	} else if (w != (t.seq << 1 | LW_AWAITING) ||
	           /* ended (A4, R4 in kva__req_set_state): awaits no lookup */
	           kva__state_is_terminal(atomic_load_explicit(&r->state, memory_order_acquire))) {
		kva__st_add(e, ST_LATE_ANSWERS, 1);
		rc = -ESTALE;
	} else {
		bool any_local = false;
		for (uint32_t i = 0; i < m->count; i++)
			any_local |= m->entries[i].location == KVA_LOC_LOCAL;
		size_t bytes = kva__answer_bytes(m->count, any_local);
		struct kva__answer *a = kva__alloc(bytes);
		if (!a) {
			rc = -ENOMEM;
		} else {
			kva_inbox_node_init(&a->ev.node);
			a->ev.type = KVA__EV_ANSWER;
			a->token = t;
			a->count = m->count;
			memcpy(a->entries, m->entries, m->count * sizeof(kva_checkpoint));
			a->has_ref = any_local;
			struct kva__ckpt_ref *ref = kva__answer_ref(a);
			if (ref) {
				memset(ref, 0, sizeof(*ref));
				ref->owner = a;
			}
			kva_inbox_push(&e->inbox, &a->ev.node);
		}
	}
	kva_rcu_read_unlock();
	return rc;
}

/* ---- scheduler side ------------------------------------------------------ */

/* The longest compatible checkpoint that does not extend past the prompt;
 * -1 if none. *any_compatible tells a miss from an incompatible answer. */
static int select_entry(const struct kva__answer *a, uint32_t prompt, uint32_t below_pos)
{
	for (int i = (int)a->count - 1; i >= 0; i--) {
		const kva_checkpoint *c = &a->entries[i];
		if (c->compatible && c->position <= prompt && c->position < below_pos)
			return i;
	}
	return -1;
}

int kva__select_shorter(const struct kva__req *r)
{
	return select_entry(r->manifest, r->prompt_tokens,
	                    r->manifest->entries[r->sel].position);
}

/* Adopts `a` as r's retained manifest with entry `sel` selected. */
void kva__manifest_adopt(kva_engine *e, struct kva__req *r, struct kva__answer *a, int sel)
{
	kva__manifest_drop(e, r);
	r->manifest = a;
	kva__select(e, r, sel);
}

/* Scheduler thread. Points r at manifest entry `sel` (indexing a local one
 * while r waits, so an eviction finds it). */
void kva__select(kva_engine *e, struct kva__req *r, int sel)
{
	struct kva__answer *a = r->manifest;
	const kva_checkpoint *c = &a->entries[sel];
	kva__ckpt_unindex(e, r);
	r->sel = (int8_t)sel;
	r->flags |= KVA__F_RESTORE | KVA__F_DECIDED;
	atomic_store_explicit(&r->pub_sel, c->position << 1 | (c->location == KVA_LOC_LOCAL),
	                      memory_order_relaxed);
	if (c->location == KVA_LOC_LOCAL &&
	    atomic_load_explicit(&r->state, memory_order_relaxed) == KVA_STATE_WAITING) {
		struct kva__ckpt_ref *ref = kva__answer_ref(a);
		ref->node.id = c->id;
		ref->node.gen = r->idn.gen;
		ref->req = r;
		ref->indexed = true;
		kva_idtable_add(&e->ckpt, &ref->node);
	}
}

void kva__lookup_on_answer(kva_engine *e, struct kva__answer *a)
{
	struct kva__req *r = kva__req_find(e, (kva_handle){a->token.id, a->token.gen, 0});
	uint32_t w = r ? atomic_load_explicit(&r->lookup_word, memory_order_relaxed) : 0;
	if (!r || w != (a->token.seq << 1 | LW_AWAITING) ||
	    atomic_load_explicit(&r->state, memory_order_relaxed) != KVA_STATE_WAITING) {
		/* timed out, superseded or ended since the producer checked */
		kva__st_add(e, ST_LATE_ANSWERS, 1);
		kva__answer_free(a);
		return;
	}
	atomic_store_explicit(&r->lookup_word, a->token.seq << 1, memory_order_relaxed);
	kva__st_add(e, ST_ANSWERED, 1);
	int sel = select_entry(a, r->prompt_tokens, UINT32_MAX);

	if (r->flags & KVA__F_REFRESH) {
		/* A refresh only improves on the retained manifest; an empty or
		 * unusable refresh keeps it (rule 18). */
		r->flags &= (uint16_t)~KVA__F_REFRESH;
		if (sel >= 0 && (r->flags & KVA__F_RESTORE))
			kva__manifest_adopt(e, r, a, sel);
		else
			kva__answer_free(a);
		return;
	}

	kva_timerwheel_cancel(&e->wheel, &r->deadline);
	if (sel < 0) {
		bool any = a->count > 0;
		kva__answer_free(a);
		kva__fallback(e, r, any ? KVA_REASON_INCOMPATIBLE : KVA_REASON_MISS);
		return;
	}
	/* rule 9: a reservation that can never fit is classified at once */
	uint64_t need = (uint64_t)kva__pages_for(e, r->prompt_tokens) + e->cfg.decode_headroom_pages;
	if (need > e->usable_pages) {
		kva__answer_free(a);
		kva__fallback(e, r, KVA_REASON_TOO_LARGE);
		return;
	}
	kva__manifest_adopt(e, r, a, sel);
}

void kva__lookup_on_deadline(kva_engine *e, struct kva__req *r)
{
	uint32_t w = atomic_load_explicit(&r->lookup_word, memory_order_relaxed);
	if (!(w & LW_AWAITING) || (r->flags & KVA__F_REFRESH))
		return;
	atomic_store_explicit(&r->lookup_word, w & ~LW_AWAITING, memory_order_relaxed);
	kva__st_add(e, ST_LOOKUP_TIMEOUTS, 1);
	kva__fallback(e, r, KVA_REASON_LOOKUP_TIMEOUT);
}

int kva_checkpoint_evicted(kva_engine *e, uint64_t checkpoint_id, uint64_t epoch)
{
	if (!e)
		return -EINVAL;
	struct kva__evict *ev = kva__alloc(sizeof(*ev));
	if (!ev)
		return -ENOMEM;
	kva_inbox_node_init(&ev->ev.node);
	ev->ev.type = KVA__EV_EVICT;
	ev->checkpoint_id = checkpoint_id;
	ev->epoch = epoch;
	kva_inbox_push(&e->inbox, &ev->ev.node);
	return 0;
}

/* Scheduler thread: only the requests that selected this checkpoint, and
 * only if their copy of it is older than the eviction, look up again. */
void kva__lookup_on_evict(kva_engine *e, struct kva__evict *ev)
{
	struct kva_idtable_iter it;
	struct kva_idtable_node *n = kva_idtable_first(&e->ckpt, ev->checkpoint_id, &it);
	while (n) {
		struct kva__ckpt_ref *ref = caa_container_of(n, struct kva__ckpt_ref, node);
		n = kva_idtable_next(&e->ckpt, &it);
		struct kva__req *r = ref->req;
		const kva_checkpoint *c = &r->manifest->entries[r->sel];
		if (e->plan)
			e->plan->records_touched++;
		if (c->epoch >= ev->epoch)
			continue;
		kva__st_add(e, ST_REVALIDATIONS, 1);
		kva__manifest_drop(e, r);
		kva__lookup_issue(e, r, true);
	}
	kva__free(ev, sizeof(*ev));
}
