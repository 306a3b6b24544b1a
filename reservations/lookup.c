/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Lookups (see lookup.h): the directory, deadlines, retained manifests,
 * selection and refresh answers.
 *
 * lookup_word = seq << 1 | awaiting. Producers (kva_lookup_answer) read it
 * to refuse stale answers early; the scheduler re-checks when it handles the
 * answer, which is the decision that counts.
 *
 * Memory-order labels:
 *   R1  a new lookup's seq -> kva_lookup_answer (A3 of intake.c)
 */
#include <errno.h>
#include <string.h>

#include "checkpoint_index.h"
#include "held.h"
#include "lifecycle.h"
#include "lookup.h"
#include "stats.h"

/* The restores-waiting gauge: a waiting request with a selected checkpoint. */
static void restore_gauge(kva_engine *e, struct kva__req *r, bool on)
{
	if (on && !(r->flags & KVA__F_COUNTED) &&
	    atomic_load_explicit(&r->state, memory_order_relaxed) == KVA_STATE_WAITING) {
		r->flags |= KVA__F_COUNTED;
		kva__st_add_single_writer(e, ST_RESTORES_WAITING, 1);
	} else if (!on && (r->flags & KVA__F_COUNTED)) {
		r->flags &= (uint16_t)~KVA__F_COUNTED;
		kva__st_add_single_writer(e, ST_RESTORES_WAITING, (uint64_t)-1);
	}
}

/* A lookup still out (decisive or a refresh) is no longer awaited: its
 * answer is refused as stale (and counted late) from now on. */
static void lookup_abandon(kva_engine *e, struct kva__req *r)
{
	uint32_t w = atomic_load_explicit(&r->lookup_word, memory_order_relaxed);
	if (w & KVA__LW_AWAITING)
		atomic_store_explicit(&r->lookup_word, w & ~KVA__LW_AWAITING, memory_order_relaxed);
	r->flags &= (uint16_t)~KVA__F_REFRESH;
	kva_timerwheel_cancel(&e->wheel, &r->deadline);
}

void kva__lookup_forget(kva_engine *e, struct kva__req *r)
{
	lookup_abandon(e, r);
	kva__ckpt_unindex(e, r);
	restore_gauge(e, r, false);
}

void kva__manifest_drop(kva_engine *e, struct kva__req *r)
{
	kva__ckpt_unindex(e, r);
	restore_gauge(e, r, false);
	kva__held_drop_all(&e->held, r);
	if (r->nents > 1)
		kva__answer_free(r->manifest);
	r->nents = 0;
	r->sel = -1;
	r->flags &= (uint16_t) ~(KVA__F_RESTORE | KVA__F_HOSTLOCAL);
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
	kva__st_add_single_writer(e, (enum kva__stat)(ST_FALLBACK0 + reason), 1);
	plan_fallback(e, r, reason);
	kva__log(e, KVA_LOG_DEBUG, KVA_LOGEV_FALLBACK, r, reason, 0,
	         "kvadmit: request %llu takes the ordinary path (%s)", (unsigned long long)r->id,
	         kva_reason_name(reason));
}

void kva__lookup_issue(kva_engine *e, struct kva__req *r, bool decisive)
{
	if (r->prefix_key == 0 || !e->cfg.lookup) { /* nobody to ask */
		if (decisive) /* (a refresh of a host-local restore: nothing to do) */
			kva__fallback(e, r, r->prefix_key == 0 ? KVA_REASON_NO_KEY : KVA_REASON_MISS);
		return;
	}
	uint32_t seq = (atomic_load_explicit(&r->lookup_word, memory_order_relaxed) >> 1) + 1;
	/* R1: the new seq is visible to kva_lookup_answer (A3 of intake.c)
	 * before the directory can possibly answer it. */
	atomic_store_explicit(&r->lookup_word, seq << 1 | KVA__LW_AWAITING, memory_order_release);
	if (decisive) {
		r->flags &= (uint16_t) ~(KVA__F_DECIDED | KVA__F_REFRESH);
		/* one timeout from a clock that never goes back: deadlines are
		 * armed in expiry order, so the ordered lane holds them in O(1)
		 * and no step cascades every pending one at once */
		if (e->cfg.lookup_timeout_ns)
			kva_timerwheel_arm_ordered(&e->wheel, &r->deadline,
			                           kva__after(e->now, e->cfg.lookup_timeout_ns));
	} else {
		r->flags |= KVA__F_REFRESH;
	}
	uint8_t n = atomic_load_explicit(&r->lookups, memory_order_relaxed);
	if (n < UINT8_MAX)
		atomic_store_explicit(&r->lookups, n + 1, memory_order_relaxed);
	kva__st_add_single_writer(e, ST_LOOKUPS, 1);
	kva_lookup_token t = {r->id, atomic_load_explicit(&r->hdr.gen, memory_order_relaxed), seq,
	                      kva__rec_slot(r), 0};
	e->cfg.lookup(e->cfg.lookup_ctx, r->prefix_key, r->prompt_tokens, t);
}

/* No upper limit for select_entry: above every 32-bit position, UINT32_MAX
 * included. */
#define ANY_POSITION ((uint64_t)UINT32_MAX + 1)

/* A host checkpoint stated before the last prefix-cache reset (rule
 * host-local-checkpoints):
 * its pages are gone. */
static bool host_stale(kva_engine *e, const kva_checkpoint *c)
{
	return (c->reserved_ & KVA__CK_HOST) && kva__ck_mark(c) != kva__host_mark(e);
}

/* A retained entry that can no longer be taken: a host checkpoint a reset
 * forgot, or a local checkpoint reported evicted (at an epoch newer than
 * this copy) while requests held it (held.c). */
static bool entry_gone(kva_engine *e, const kva_checkpoint *c)
{
	return host_stale(e, c) || kva__held_gone(&e->held, c);
}

/* The longest compatible checkpoint that does not extend past the prompt
 * and lies below below_pos; -1 if none. `held`: r's retained entries, so none
 * reported evicted since r held it is taken (rules retry-then-shorter,
 * host-local-checkpoints). A directory's answer is taken as it lists its
 * entries (`held` false): it is the news its directory had when it answered,
 * and the checkpoint index revalidates the one selected from it when its
 * eviction comes (rule eviction-revalidates). */
static int select_entry(kva_engine *e, const kva_checkpoint *ents, uint32_t count,
                        uint32_t prompt, uint64_t below_pos, bool held)
{
	for (int i = (int)count - 1; i >= 0; i--) {
		const kva_checkpoint *c = &ents[i];
		if (c->compatible && c->position <= prompt && c->position < below_pos &&
		    !host_stale(e, c) && !(held && kva__held_gone(&e->held, c)))
			return i;
	}
	return -1;
}

bool kva__lookup_usable(kva_engine *e, const struct kva__req *r, int i)
{
	const kva_checkpoint *c = &kva__manifest_entries(r)[i];
	return select_entry(e, c, 1, r->prompt_tokens, ANY_POSITION, true) == 0;
}

int kva__select_shorter(kva_engine *e, const struct kva__req *r)
{
	return select_entry(e, kva__manifest_entries(r), r->nents, r->prompt_tokens,
	                    kva__selected_checkpoint(r)->position, true);
}

void kva__select(kva_engine *e, struct kva__req *r, int sel)
{
	kva__ckpt_unindex(e, r);
	r->sel = (int8_t)sel;
	r->flags |= KVA__F_RESTORE | KVA__F_DECIDED;
	const kva_checkpoint *c = kva__selected_checkpoint(r);
	atomic_store_explicit(&r->pub_sel, c->position << 1 | (c->location == KVA_LOC_LOCAL),
	                      memory_order_relaxed);
	restore_gauge(e, r, true);
	/* rule eviction-revalidates: a waiting request is found by the
	 * checkpoint it selected,
	 * local or external, when that checkpoint is evicted */
	if (atomic_load_explicit(&r->state, memory_order_relaxed) == KVA_STATE_WAITING)
		kva__ckpt_index(e, r, c->id);
}

/* Adopts `a` as r's retained manifest with entry `sel` selected; a single
 * entry is kept in the record and the answer freed. Its entries are held
 * before the old ones are dropped (room: kva__lookup_on_answer), so an
 * entry in both keeps what its id's eviction record says. */
static void manifest_adopt(kva_engine *e, struct kva__req *r, struct kva__answer *a, int sel)
{
	bool host = r->flags & KVA__F_HOSTLOCAL; /* merged into a by the caller */
	if (r->flags & KVA__F_HELD)
		for (uint32_t i = 0; i < a->count; i++)
			kva__held_hold(&e->held, &a->entries[i]);
	kva__manifest_drop(e, r);
	if (host)
		r->flags |= KVA__F_HOSTLOCAL;
	r->nents = (uint8_t)a->count;
	if (a->count == 1) {
		r->one = a->entries[0];
		kva__answer_free(a);
	} else {
		r->manifest = a;
	}
	kva__select(e, r, sel);
}


/* rule too-large-at-once: a reservation that can never fit. */
static bool too_large(const kva_engine *e, const struct kva__req *r)
{
	uint64_t need = (uint64_t)kva__pages_for(e, r->prompt_tokens) + e->cfg.decode_headroom_pages;
	return need > e->usable_pages;
}

/* ---- the host's own local checkpoint (rule host-local-checkpoints) --------------------------- */

/* Index of r's KVA__CK_HOST entry, whatever its mark; -1 if none (there
 * is at most one: put_host replaces it). */
static int host_entry(const struct kva__req *r)
{
	if (!(r->flags & KVA__F_HOSTLOCAL))
		return -1;
	const kva_checkpoint *c = kva__manifest_entries(r);
	for (int i = r->nents - 1; i >= 0; i--)
		if (c[i].reserved_ & KVA__CK_HOST)
			return i;
	return -1;
}

/* The same, -1 also when it was stated before the last reset or was
 * reported evicted since it was stated. */
static int host_idx(kva_engine *e, const struct kva__req *r)
{
	int h = host_entry(r);
	return h >= 0 && entry_gone(e, &kva__manifest_entries(r)[h]) ? -1 : h;
}

uint32_t kva__host_position(kva_engine *e, const struct kva__req *r)
{
	int h = host_idx(e, r);
	return h < 0 ? 0 : kva__manifest_entries(r)[h].position;
}

bool kva__lookup_sel_forgotten(kva_engine *e, const struct kva__req *r)
{
	return host_stale(e, kva__selected_checkpoint(r));
}

/* r (WAITING) lost what it selected and looks up again; `keep`: the host's
 * own checkpoint stays (kva__lookup_requeue). */
static void relookup(kva_engine *e, struct kva__req *r, bool keep)
{
	kva__st_add_single_writer(e, ST_REVALIDATIONS, 1);
	kva__lookup_requeue(e, r, keep);
	lookup_abandon(e, r); /* a refresh still out */
	kva__lookup_begin(e, r, false);
}

bool kva__lookup_host_forgotten(kva_engine *e, struct kva__req *r)
{
	if (!kva__lookup_sel_forgotten(e, r))
		return false;
	relookup(e, r, false);
	return true;
}

/* Puts the host's checkpoint h into ents[0, n) (room for n + 1): it replaces
 * the previous host entry and an entry with its id (the host knows its own
 * cache best), and goes after entries of equal position so that it is the
 * one selected among them. Returns the new count. */
static uint32_t put_host(kva_checkpoint *ents, uint32_t n, const kva_checkpoint *h)
{
	uint32_t k = 0;
	for (uint32_t i = 0; i < n; i++)
		if (!(ents[i].reserved_ & KVA__CK_HOST) && ents[i].id != h->id)
			ents[k++] = ents[i];
	uint32_t at = k;
	while (at > 0 && ents[at - 1].position > h->position)
		at--;
	memmove(&ents[at + 1], &ents[at], (k - at) * sizeof(*ents));
	ents[at] = *h;
	return k + 1;
}

static int find_id(const struct kva__req *r, uint64_t id)
{
	const kva_checkpoint *c = kva__manifest_entries(r);
	for (int i = 0; i < r->nents; i++)
		if (c[i].id == id)
			return i;
	return -1;
}

void kva__lookup_requeue(kva_engine *e, struct kva__req *r, bool keep)
{
	int h = keep ? host_idx(e, r) : -1;
	kva_checkpoint host;
	if (h >= 0) {
		host = kva__manifest_entries(r)[h];
		if (r->flags & KVA__F_HELD) /* held already: no room needed */
			kva__held_hold(&e->held, &host);
	}
	kva__manifest_drop(e, r);
	if (h >= 0) {
		r->one = host;
		r->nents = 1;
		r->flags |= KVA__F_HOSTLOCAL;
	}
}

/* r (WAITING, in the queue) takes the host's checkpoint as its path, if it
 * has one and the checkpoint index has room. */
static bool decide_host(kva_engine *e, struct kva__req *r)
{
	int h = host_idx(e, r);
	if (h < 0 || kva__ckpt_reserve(e) != 0)
		return false;
	if (too_large(e, r))
		kva__fallback(e, r, KVA_REASON_TOO_LARGE);
	else
		kva__select(e, r, h);
	return true;
}

void kva__lookup_begin(kva_engine *e, struct kva__req *r, bool resume)
{
	/* rule host-local-checkpoints: a full local hit needs no directory, nor
	 * does a request
	 * the directory cannot be asked about; a preempted request resumes
	 * from the local checkpoint the host keeps for it */
	bool ask = r->prefix_key != 0 && e->cfg.lookup;
	if ((resume || !ask || kva__host_position(e, r) == r->prompt_tokens) && decide_host(e, r))
		return;
	kva__lookup_issue(e, r, true);
}

/* A decided waiting request may take a longer checkpoint than its current
 * path: a restore a longer one, a recompute any (unless no restore could ever
 * fit or its bounded wait already expired). A recompute decided without a
 * selection (a miss, a timeout) never met rule too-large-at-once's check: a
 * request too large for any reservation stays a recompute, or it would block
 * the head for good. */
static void upgrade(kva_engine *e, struct kva__req *r, int cur)
{
	const kva_checkpoint *ents = kva__manifest_entries(r);
	int best = select_entry(e, ents, r->nents, r->prompt_tokens, ANY_POSITION, true);
	if (best < 0)
		return;
	if (cur >= 0) {
		if (ents[best].position <= ents[cur].position)
			best = cur;
		/* Unchanged (the directory's entry, still indexed): it keeps its
		 * place in the index. Indexed again it would go to the list's
		 * front, behind a pending walk's cursor (rule
		 * eviction-revalidates), which would then never look at its
		 * copy. */
		if (best == cur && (r->flags & KVA__F_INDEXED) &&
		    !(ents[cur].reserved_ & KVA__CK_HOST))
			return;
	} else if (r->reason == KVA_REASON_TOO_LARGE || r->reason == KVA_REASON_WAIT_EXPIRED ||
	           too_large(e, r)) {
		return;
	} else {
		r->reason = KVA_REASON_NONE;
		atomic_store_explicit(&r->pub_reason, 0, memory_order_relaxed);
	}
	if (best != cur)
		kva__st_add_single_writer(e, ST_LOCAL_UPGRADES, 1);
	kva__select(e, r, best);
}

int kva__lookup_on_local(kva_engine *e, struct kva__req *r, const kva_checkpoint *cp,
                         struct kva__answer **spare)
{
	uint32_t st = atomic_load_explicit(&r->state, memory_order_relaxed);
	int h = host_idx(e, r);
	if (kva__state_is_terminal(st) ||
	    (h >= 0 && kva__manifest_entries(r)[h].position >= cp->position) ||
	    host_stale(e, cp))
		return 0; /* ended meanwhile, no news, or stated before a reset called since */
	bool held = r->flags & KVA__F_HELD; /* else held at its ingest, still to come */
	if (held && kva__held_reserve(&e->held, 1) != 0)
		return -ENOMEM; /* room to remember its eviction first: nothing changed */
	bool restore = r->flags & KVA__F_RESTORE;
	uint64_t sel_id = restore ? kva__selected_checkpoint(r)->id : 0;
	/* The index is keyed by the selected checkpoint's id: a selected host
	 * entry about to be replaced (also one a reset forgot) leaves it now
	 * (nothing else changes ids). */
	if (restore && (kva__selected_checkpoint(r)->reserved_ & KVA__CK_HOST))
		kva__ckpt_unindex(e, r);

	/* room for one more entry: the spare the producer allocated (at most
	 * KVA_MAX_CHECKPOINTS + 1 entries ever: the directory's and the host's) */
	uint32_t n = r->nents, need = n + (h < 0);
	if (need > 1 && (n <= 1 || r->manifest->cap < need)) {
		struct kva__answer *grow = *spare;
		*spare = NULL;
		memcpy(grow->entries, kva__manifest_entries(r), n * sizeof(kva_checkpoint));
		if (n > 1)
			kva__answer_free(r->manifest);
		r->manifest = grow;
	}
	kva_checkpoint *ents = need > 1 ? r->manifest->entries : &r->one;
	if (held) { /* cp in, the entries put_host replaces out */
		kva__held_hold(&e->held, cp);
		for (uint32_t i = 0; i < n; i++)
			if ((ents[i].reserved_ & KVA__CK_HOST) || ents[i].id == cp->id)
				kva__held_drop(&e->held, &ents[i]);
	}
	uint32_t cnt = put_host(ents, n, cp);
	if (need > 1 && cnt == 1) { /* it replaced the only other entry */
		struct kva__answer *m = r->manifest;
		r->one = m->entries[0];
		kva__answer_free(m);
	} else if (need > 1) {
		r->manifest->count = cnt;
	}
	r->nents = (uint8_t)cnt;
	r->flags |= KVA__F_HOSTLOCAL;
	kva__st_add_single_writer(e, ST_LOCAL_STATED, 1);

	/* the selection follows its checkpoint; the host's replaced one is
	 * followed by the host's new one (longer) */
	int cur = -1;
	if (restore) {
		cur = find_id(r, sel_id);
		if (cur < 0) /* the entry just written: a reset called since it
		              * was checked leaves it stale, for the head recheck,
		              * but selected (never -1 with KVA__F_RESTORE set) */
			cur = host_entry(r);
		r->sel = (int8_t)cur;
	}
	bool waiting = st == KVA_STATE_WAITING && (r->flags & KVA__F_INGESTED);
	/* importing, ready: admission counts it; running: kept for a
	 * preemption. An index without room (memory) leaves the path as it is. */
	if (!waiting || kva__ckpt_reserve(e) != 0)
		return 0;
	if (!(r->flags & KVA__F_DECIDED)) {
		/* the decisive lookup is out: only a full hit decides before it */
		if (cp->position == r->prompt_tokens) {
			lookup_abandon(e, r);
			decide_host(e, r);
		}
		return 0;
	}
	upgrade(e, r, cur);
	return 0;
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
	/* An index entry must not fail halfway: make room first, also for
	 * the answer's local entries among the held ones (held.c; the
	 * host's, merged below, is held already). */
	uint32_t locals = 0;
	for (uint32_t i = 0; i < a->count; i++)
		locals += a->entries[i].location == KVA_LOC_LOCAL;
	if (kva__ckpt_reserve(e) != 0 || (locals && kva__held_reserve(&e->held, locals) != 0))
		return -ENOMEM;
	atomic_store_explicit(&r->lookup_word, a->token.seq << 1, memory_order_relaxed);
	kva__st_add_single_writer(e, ST_ANSWERED, 1);
	/* rule host-local-checkpoints: the directory does not know the host's cache */
	int h = host_idx(e, r);
	if (h >= 0)
		a->count = put_host(a->entries, a->count, /* room: cap */
		                    &kva__manifest_entries(r)[h]);
	int sel = select_entry(e, a->entries, a->count, r->prompt_tokens, ANY_POSITION, false);

	if (r->flags & KVA__F_REFRESH) {
		/* rule wait-logs-and-refreshes: the refresh's answer replaces
		 * the retained manifest —
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

	/* lookup latency: the deadline marks when the lookup began */
	if (kva_timer_armed(&r->deadline) && r->deadline.expires != UINT64_MAX)
		kva__observe(e, H_LOOKUP, e->now - (r->deadline.expires - e->cfg.lookup_timeout_ns));
	kva_timerwheel_cancel(&e->wheel, &r->deadline);
	if (sel < 0) {
		bool any = a->count > 0;
		kva__answer_free(a);
		kva__fallback(e, r, any ? KVA_REASON_INCOMPATIBLE : KVA_REASON_MISS);
		return 0;
	}
	/* rule too-large-at-once: a reservation that can never fit is classified at once */
	if (too_large(e, r)) {
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
	kva__st_add_single_writer(e, ST_LOOKUP_TIMEOUTS, 1);
	kva__log(e, KVA_LOG_INFO, KVA_LOGEV_LOOKUP_TIMEOUT, r, KVA_REASON_LOOKUP_TIMEOUT,
	         e->cfg.lookup_timeout_ns, "kvadmit: lookup of request %llu timed out",
	         (unsigned long long)r->id);
	if (!decide_host(e, r)) /* rule host-local-checkpoints: what the host knows still holds */
		kva__fallback(e, r, KVA_REASON_LOOKUP_TIMEOUT);
}

void kva__lookup_revalidate(kva_engine *e, struct kva__req *r, uint64_t id)
{
	int h = host_idx(e, r); /* another local checkpoint the host knows stays */
	relookup(e, r, h >= 0 && kva__manifest_entries(r)[h].id != id);
}
