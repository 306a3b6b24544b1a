/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_differential: the engine against a small reference scheduler written
 * to be obviously correct rather than fast (arrays, O(n) scans), fed the same
 * operation sequence; after every call and every step both must agree on
 * return codes, on every plan (admissions with how, reason, tokens and page
 * counts; copy jobs; fallbacks; terminal reports; all in order) and on the
 * free credits.
 *
 * The subset, chosen where docs/design.md's semantics are crisp:
 *   - submit with an immediate directory answer: the lookup callback answers
 *     from inside the step with the manifest fixed for its key (keys 1-4;
 *     key 0 = no lookup); ids are unique (no rejections);
 *   - finish, preempt (front of the queue, fresh immediate lookup), cancel
 *     in any state, grow (own reservation first, then free credits below the
 *     watermark);
 *   - copy results per rank, ok or failed (retries, shorter checkpoints,
 *     RETRIES_EXHAUSTED), with world_size 1 or 2 and the plan as the only
 *     copy channel (no importers);
 *   - step. No timers: lookup timeout, bounded wait, wait log and refresh are
 *     all disabled, so time does not matter; no evictions, no reset, no
 *     allocation failures (fuzz_engine covers those against invariants).
 * Policies wait, legacy and cost (the clock stays at 0: a copy takes no
 * time, so a tier's first completed copy makes its copies free; the choice
 * is computed the same way, in doubles, for whichever request heads the
 * sorted list); plan capacities may be tight (leftovers go to
 * the next step in order). FCFS or PRIORITY order (with or without aging):
 * under PRIORITY each submit has a priority and maybe a host arrival time,
 * kva_set_priority changes it, and the reference sorts its waiting list
 * every step by the documented key (docs/design.md, "Priority order");
 * after each step kva_preempt_candidate must name a running request of the
 * largest (priority, arrival).
 *
 * Input: 12 configuration bytes and four directory manifests, then
 * operations (selector byte + arguments).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "kvadmit/kvadmit.h"
#include "fuzz_input.h"

#define FZ_TARGET "fuzz_differential"
#define CHECK FZ_CHECK
#define TRACE FZ_TRACE

#define MAXR 128
#define NKEYS 5
#define CAP_BIG 512

/* ---- the reference scheduler ---------------------------------------------- */

enum { R_NEW = 0, R_WAITING, R_IMPORTING, R_READY, R_RUNNING, R_PREEMPTED, R_ENDING, R_ENDED };

struct ref_req {
	uint64_t key;
	uint32_t prompt;
	int state;
	uint8_t end_state; /* FINISHED / CANCELLED */
	bool cancel_requested;
	bool decided, restore;
	int sel;	/* manifest entry */
	uint8_t reason; /* why it recomputes */
	/* what it owns */
	uint32_t npages, reserved, import_pages;
	uint64_t queue_seq; /* order its import left the head (READY list order) */
	/* PRIORITY order: the sort key of a waiting request is (level, front
	 * first, then front ? -seq : (arrival, seq)), seq counting joins */
	int32_t priority;
	uint64_t arrival;
	bool front;
	uint64_t seq;
	/* copies */
	uint32_t attempts, retries, world_mask;
	uint32_t reported; /* ranks whose report the step has handled */
	uint32_t sent;	   /* ranks kva_copy_done was called for */
	bool any_failed, copying, queued, draining;
};

enum ev_type { EV_SUBMIT, EV_CANCEL, EV_FINISHED, EV_PREEMPTED, EV_COPY, EV_ANSWER, EV_PRIORITY };

struct ref_ev {
	uint8_t type, status;
	uint16_t rank;
	int r;
	int32_t priority; /* EV_PRIORITY */
};

struct ref {
	kva_config cfg;
	uint32_t usable;
	kva_manifest dir[NKEYS];
	struct ref_req q[MAXR];
	uint32_t nq;
	uint32_t free_pages, free_slots, free_runs;
	/* ordered lists of request indices */
	int waitq[MAXR], ready[MAXR], pending[MAXR], ended[MAXR];
	uint32_t nwait, nready, npending, nended;
	uint64_t import_seq;
	uint64_t join_seq; /* PRIORITY: joins of the waiting list */
	struct ref_ev ev[4 * MAXR + 64];
	uint32_t nev, evpos;
	/* the cost policy: tiers with a completed copy, copy-slot releases, and
	 * the head the choice was made for (request, selection; -1 none) */
	bool measured[KVA_TIER_COUNT];
	uint32_t releases;
	int cost_head, cost_sel;
	/* the plan the reference expects */
	kva_admission adm[CAP_BIG];
	uint32_t nadm, npages;
	kva_copy_job copies[CAP_BIG];
	uint32_t ncopies;
	kva_fallback fb[CAP_BIG];
	uint32_t nfb;
	kva_ended end[CAP_BIG];
	uint32_t nend;
};

static struct {
	struct fz in;
	kva_engine *e;
	kva_plan plan;
	kva_admission adm[CAP_BIG];
	uint32_t pages[4096];
	kva_copy_job copies[CAP_BIG];
	kva_fallback fb[CAP_BIG];
	kva_ended ended[CAP_BIG];
	kva_handle h[MAXR];
	struct ref m;
	bool in_step;
} S;

static uint32_t pages_for(uint64_t tokens)
{
	return (uint32_t)((tokens + S.m.cfg.page_tokens - 1) / S.m.cfg.page_tokens);
}

static void list_remove(int *list, uint32_t *n, int r)
{
	for (uint32_t k = 0; k < *n; k++)
		if (list[k] == r) {
			memmove(&list[k], &list[k + 1], (*n - k - 1) * sizeof(int));
			(*n)--;
			return;
		}
	CHECK(!"not listed");
}

static void push_ev(uint8_t type, int r, uint16_t rank, uint8_t status)
{
	CHECK(S.m.nev < sizeof(S.m.ev) / sizeof(S.m.ev[0]));
	S.m.ev[S.m.nev++] = (struct ref_ev){type, status, rank, r, 0};
}

static bool by_priority(void)
{
	return S.m.cfg.order == KVA_ORDER_PRIORITY;
}

/* The level a request waits in: its priority, aged by its arrival. */
static int64_t level_of(const struct ref_req *q)
{
	uint64_t i = S.m.cfg.aging_interval_ns;
	return (int64_t)q->priority + (i ? (int64_t)(q->arrival / i) : 0);
}

/* Whether waiting request a goes before b under PRIORITY order. */
static bool ref_before(const struct ref_req *a, const struct ref_req *b)
{
	if (level_of(a) != level_of(b))
		return level_of(a) < level_of(b);
	if (a->front != b->front)
		return a->front;
	if (a->front)
		return a->seq > b->seq; /* the last to join the front first */
	return a->arrival != b->arrival ? a->arrival < b->arrival : a->seq < b->seq;
}

/* The slow, obvious way: the whole waiting list sorted again (insertion sort). */
static void ref_sort_waiting(void)
{
	struct ref *m = &S.m;
	for (uint32_t i = 1; i < m->nwait; i++) {
		int r = m->waitq[i];
		uint32_t j = i;
		while (j > 0 && ref_before(&m->q[r], &m->q[m->waitq[j - 1]])) {
			m->waitq[j] = m->waitq[j - 1];
			j--;
		}
		m->waitq[j] = r;
	}
}

/* r joins the waiting list (FCFS: at the back or the front). */
static void ref_join(int r, bool front)
{
	struct ref *m = &S.m;
	m->q[r].front = front;
	m->q[r].seq = ++m->join_seq;
	if (!front) {
		m->waitq[m->nwait++] = r;
		return;
	}
	memmove(&m->waitq[1], &m->waitq[0], m->nwait * sizeof(int));
	m->waitq[0] = r;
	m->nwait++;
}

static kva_handle hof(int r)
{
	return S.h[r];
}

static bool ref_plan_room(uint32_t pages)
{
	return S.m.nadm < S.plan.admitted_cap && S.plan.pages_cap - S.m.npages >= pages;
}

/* all or nothing, and never below the watermark (when pages are taken) */
static bool ref_reserve(uint32_t pages, uint32_t slots, uint32_t floor)
{
	struct ref *m = &S.m;
	if (m->free_pages < pages || m->free_slots < slots || m->free_runs < 1)
		return false;
	if (pages && m->free_pages - pages < floor)
		return false;
	m->free_pages -= pages;
	m->free_slots -= slots;
	m->free_runs -= 1;
	return true;
}

static void ref_fallback(int r, uint8_t reason)
{
	struct ref_req *q = &S.m.q[r];
	q->restore = false;
	q->sel = -1;
	q->reason = reason;
	q->decided = true;
	if (S.m.nfb < S.plan.fallbacks_cap)
		S.m.fb[S.m.nfb++] = (kva_fallback){hof(r), reason};
}

static void ref_end(int r, uint8_t st)
{
	S.m.q[r].state = R_ENDED;
	S.m.q[r].end_state = st;
	S.m.ended[S.m.nended++] = r;
}

/* longest compatible entry within the prompt and below `below` */
static int ref_select(const kva_manifest *mf, uint32_t prompt, uint32_t below)
{
	int best = -1;
	for (uint32_t k = 0; k < mf->count; k++) {
		const kva_checkpoint *c = &mf->entries[k];
		if (c->compatible && c->position <= prompt && c->position < below &&
		    (best < 0 || c->position > mf->entries[best].position))
			best = (int)k;
	}
	return best;
}

static void ref_lookup(int r)
{
	struct ref_req *q = &S.m.q[r];
	q->decided = false;
	q->restore = false;
	q->sel = -1;
	q->reason = KVA_REASON_NONE;
	if (q->key == 0)
		ref_fallback(r, KVA_REASON_NO_KEY);
	else
		push_ev(EV_ANSWER, r, 0, 0);
}

static void ref_answer(int r)
{
	struct ref_req *q = &S.m.q[r];
	if (q->state != R_WAITING || q->decided)
		return; /* ended (cancelled) before its answer was handled */
	const kva_manifest *mf = &S.m.dir[q->key];
	int sel = ref_select(mf, q->prompt, UINT32_MAX);
	if (sel < 0) {
		ref_fallback(r, mf->count ? KVA_REASON_INCOMPATIBLE : KVA_REASON_MISS);
	} else if (pages_for(q->prompt) + S.m.cfg.decode_headroom_pages > S.m.usable) {
		ref_fallback(r, KVA_REASON_TOO_LARGE);
	} else {
		q->decided = q->restore = true;
		q->sel = sel;
	}
}

static void ref_copy_start(int r)
{
	struct ref_req *q = &S.m.q[r];
	q->attempts++;
	q->reported = q->sent = 0;
	q->any_failed = false;
	q->copying = q->queued = true;
	S.m.pending[S.m.npending++] = r;
}

/* The READY list in queue order (rule reset-returns-ready): the order imports left the head. */
static void ref_make_ready(int r)
{
	S.m.free_slots++;
	S.m.releases++;
	S.m.q[r].state = R_READY;
	uint32_t at = S.m.nready;
	while (at > 0 && S.m.q[S.m.ready[at - 1]].queue_seq > S.m.q[r].queue_seq)
		at--;
	memmove(&S.m.ready[at + 1], &S.m.ready[at], (S.m.nready - at) * sizeof(int));
	S.m.ready[at] = r;
	S.m.nready++;
}

static void ref_copy_report(int r, uint16_t rank, uint8_t status)
{
	struct ref_req *q = &S.m.q[r];
	CHECK(!(q->reported & (1u << rank)));
	q->reported |= 1u << rank;
	q->any_failed |= status != 0;
	if (q->reported != q->world_mask)
		return;
	q->copying = false;
	if (q->state == R_ENDED) { /* cancelled: drained, pages back */
		S.m.free_pages += q->import_pages;
		q->npages = q->import_pages = 0;
		q->draining = false;
		return;
	}
	const kva_manifest *mf = &S.m.dir[q->key];
	if (!q->any_failed) {
		S.m.measured[mf->entries[q->sel].tier] = true; /* took 0 ns: free from now on */
		ref_make_ready(r);
	} else if (q->retries < S.m.cfg.max_copy_retries) {
		q->retries++;
		ref_copy_start(r);
	} else {
		int sh = ref_select(mf, q->prompt, mf->entries[q->sel].position);
		if (sh >= 0) {
			uint32_t kp2 = pages_for(mf->entries[sh].position);
			q->reserved += q->npages - kp2;
			q->npages = q->import_pages = kp2;
			q->retries = 0;
			q->sel = sh;
			if (mf->entries[sh].location == KVA_LOC_LOCAL)
				ref_make_ready(r);
			else
				ref_copy_start(r);
		} else {
			ref_fallback(r, KVA_REASON_RETRIES_EXHAUSTED);
			ref_make_ready(r);
		}
	}
}

static void ref_cancel(int r)
{
	struct ref *m = &S.m;
	struct ref_req *q = &m->q[r];
	switch (q->state) {
	case R_WAITING:
		list_remove(m->waitq, &m->nwait, r);
		ref_end(r, KVA_STATE_CANCELLED);
		break;
	case R_IMPORTING:
		m->free_pages += q->reserved;
		m->free_slots++;
		m->free_runs++;
		q->reserved = 0;
		if (q->queued) {
			list_remove(m->pending, &m->npending, r);
			q->queued = q->copying = false;
			m->free_pages += q->npages;
			q->npages = 0;
		} else {
			q->draining = true;
		}
		ref_end(r, KVA_STATE_CANCELLED);
		break;
	case R_READY:
		list_remove(m->ready, &m->nready, r);
		/* fall through: gives back the same as a running request */
	case R_RUNNING:
		m->free_pages += q->npages + q->reserved;
		m->free_runs++;
		q->npages = q->reserved = 0;
		ref_end(r, KVA_STATE_CANCELLED);
		break;
	default:
		break; /* preempted: decided by its requeue; terminal: nothing */
	}
}

static void ref_event(const struct ref_ev *ev)
{
	struct ref *m = &S.m;
	struct ref_req *q = &m->q[ev->r];
	switch (ev->type) {
	case EV_SUBMIT:
		q->state = R_WAITING;
		ref_join(ev->r, false);
		ref_lookup(ev->r);
		break;
	case EV_PRIORITY: {
		int64_t was = level_of(q);
		q->priority = ev->priority;
		/* it becomes an arrival of the step's clock unless it arrived
		 * later: the clock is 0 here, so its arrival stays */
		/* a waiting request whose level changed joins its new one */
		if (q->state == R_WAITING && level_of(q) != was) {
			list_remove(m->waitq, &m->nwait, ev->r);
			ref_join(ev->r, false);
		}
		break;
	}
	case EV_ANSWER:
		ref_answer(ev->r);
		break;
	case EV_CANCEL:
		ref_cancel(ev->r);
		break;
	case EV_FINISHED:
		ref_end(ev->r, KVA_STATE_FINISHED);
		break;
	case EV_PREEMPTED:
		if (q->cancel_requested) {
			ref_end(ev->r, KVA_STATE_CANCELLED);
			break;
		}
		q->state = R_WAITING;
		ref_join(ev->r, true);
		ref_lookup(ev->r);
		break;
	case EV_COPY:
		ref_copy_report(ev->r, ev->rank, ev->status);
		break;
	}
}

static void ref_admit(int r, uint8_t how, uint32_t local, uint32_t restored)
{
	struct ref *m = &S.m;
	struct ref_req *q = &m->q[r];
	m->adm[m->nadm++] = (kva_admission){
	    .handle = hof(r),
	    .how = how,
	    .reason = how == KVA_ADMIT_RECOMPUTE ? q->reason : KVA_REASON_NONE,
	    .local_tokens = local,
	    .restored_tokens = restored,
	    .recompute_tokens = q->prompt - local - restored,
	    .pages_off = m->npages,
	    .npages = q->npages,
	    .reserved_pages = q->reserved,
	};
	m->npages += q->npages;
	q->state = R_RUNNING;
}

/* ---- the cost policy, the slow way (docs/design.md: cost policy) ---- */

static double ref_copy_ns(const kva_checkpoint *c)
{
	const kva_cost_config *k = &S.m.cfg.cost;
	if (S.m.measured[c->tier])
		return 0;
	double bytes = (double)pages_for(c->position) * (double)k->page_bytes;
	return (double)k->tier_setup_ns[c->tier] + bytes * (1e9 / (double)k->tier_bytes_per_s[c->tier]);
}

/* Prefill of positions [from, to), as the seeds say (nothing reports a prefill here). */
static double ref_prefill_ns(uint32_t from, uint32_t to)
{
	const kva_cost_config *k = &S.m.cfg.cost;
	double f = from, t = to;
	return 1e9 / (double)k->prefill_tokens_per_s * (t - f) +
	       (double)k->prefill_attn_ps / 1000 * (t * t - f * f);
}

static double ref_restore_ns(const kva_checkpoint *c, uint32_t prompt)
{
	double rest = ref_prefill_ns(c->position, prompt);
	return c->location == KVA_LOC_LOCAL ? rest : ref_copy_ns(c) + rest;
}

static double ref_with_queue(const kva_checkpoint *c, uint32_t prompt)
{
	double t = ref_restore_ns(c, prompt);
	if (c->location == KVA_LOC_LOCAL || S.m.free_slots)
		return t;
	return t + (S.m.releases > 1 ? 0 : ref_copy_ns(c) / S.m.cfg.copy_slots);
}

static double ref_margin(void) { return S.m.cfg.cost.margin_pct / 100.0; }

static double ref_recompute_ns(uint32_t prompt)
{
	return ref_prefill_ns(0, prompt);
}

/* The head's source: maybe another entry, or recomputing (fallen back,
 * KVA_REASON_COST), once per head and selection. */
static void ref_cost_choose(int r)
{
	struct ref *m = &S.m;
	struct ref_req *q = &m->q[r];
	if (m->cost_head == r && m->cost_sel == q->sel)
		return;
	const kva_manifest *mf = &m->dir[q->key];
	int best = q->sel;
	double cur_t = ref_with_queue(&mf->entries[q->sel], q->prompt), best_t = cur_t;
	for (int i = 0; i < (int)mf->count; i++) {
		const kva_checkpoint *c = &mf->entries[i];
		if (i == q->sel || !c->compatible || c->position > q->prompt)
			continue;
		double t = ref_with_queue(c, q->prompt);
		if (t < best_t) {
			best = i;
			best_t = t;
		}
	}
	if (best != q->sel && best_t * (1 + ref_margin()) >= cur_t) {
		best = q->sel;
		best_t = cur_t;
	}
	if (ref_recompute_ns(q->prompt) * (1 + ref_margin()) < best_t) {
		m->cost_head = -1;
		ref_fallback(r, KVA_REASON_COST);
		return;
	}
	q->sel = best;
	m->cost_head = r;
	m->cost_sel = best;
}

/* A restore refused while its pages and a running slot are free but no copy
 * slot is: at clock 0 it recomputes once its slack is under 1 ns. */
static bool ref_cost_wait_over(int r, const kva_checkpoint *c, uint32_t total)
{
	struct ref *m = &S.m;
	struct ref_req *q = &m->q[r];
	if (c->location == KVA_LOC_LOCAL || m->free_slots || !m->free_runs ||
	    m->free_pages < total + m->cfg.decode_reserve_pages)
		return false;
	double slack = ref_recompute_ns(q->prompt) * (1 + ref_margin()) - ref_restore_ns(c, q->prompt);
	if (slack > 0 && (uint64_t)slack > 0)
		return false;
	m->cost_head = -1;
	ref_fallback(r, KVA_REASON_COST);
	return true;
}

/* 1 admitted, 0 blocked, -1 the plan is full */
static int ref_admit_head(int r)
{
	struct ref *m = &S.m;
	struct ref_req *q = &m->q[r];
	if (!q->decided)
		return 0;
	uint32_t floor = m->cfg.decode_reserve_pages;
	bool legacy = false;
	bool cost = m->cfg.policy == KVA_POLICY_COST;
	if (cost && q->restore)
		ref_cost_choose(r);
	if (q->restore) {
		const kva_checkpoint *c = &m->dir[q->key].entries[q->sel];
		bool local = c->location == KVA_LOC_LOCAL;
		uint32_t total = pages_for(q->prompt) + m->cfg.decode_headroom_pages;
		uint32_t kp = pages_for(c->position);
		if (local && !ref_plan_room(kp))
			return -1;
		if (ref_reserve(total, local ? 0 : 1, floor)) {
			q->npages = q->import_pages = kp;
			q->reserved = total - kp;
			q->retries = 0; /* a new reservation: a fresh retry budget */
			list_remove(m->waitq, &m->nwait, r);
			if (local) {
				ref_admit(r, KVA_ADMIT_LOCAL, c->position, 0);
			} else {
				q->state = R_IMPORTING;
				q->queue_seq = ++m->import_seq;
				ref_copy_start(r);
			}
			return 1;
		}
		/* rule restore-waits-for-capacity: wait, don't recompute; legacy
		 * gives up on imports only
		 * (a local prefix hit waited for capacity in legacy engines too) */
		if (cost && ref_cost_wait_over(r, c, total)) {
			/* recomputes: the ordinary path below */
		} else if (m->cfg.policy != KVA_POLICY_LEGACY || local) {
			return 0;
		} else {
			/* rule legacy-decides-at-admission: recompute only if that fits now */
			legacy = true;
		}
	}
	uint32_t first = pages_for(
	    q->prompt < m->cfg.prefill_chunk_tokens ? q->prompt : m->cfg.prefill_chunk_tokens);
	if (first > m->usable)
		first = m->usable;
	if (!ref_plan_room(first))
		return -1;
	/* the cost policy's recompute reserves its prompt and headroom, as a restore */
	uint32_t total = first;
	if (cost) {
		total = pages_for(q->prompt) + m->cfg.decode_headroom_pages;
		if (total > m->usable)
			total = m->usable;
	}
	if (!ref_reserve(total, 0, floor))
		return 0;
	if (legacy)
		ref_fallback(r, KVA_REASON_LEGACY);
	q->npages = q->import_pages = first;
	q->reserved = total - first;
	list_remove(m->waitq, &m->nwait, r);
	ref_admit(r, KVA_ADMIT_RECOMPUTE, 0, 0);
	return 1;
}

static void ref_step(void)
{
	struct ref *m = &S.m;
	m->nadm = m->npages = m->ncopies = m->nfb = m->nend = 0;
	while (m->evpos < m->nev) {
		struct ref_ev ev = m->ev[m->evpos++];
		ref_event(&ev);
	}
	m->nev = m->evpos = 0;
	uint32_t k = 0;
	for (; k < m->nended && m->nend < S.plan.ended_cap; k++)
		m->end[m->nend++] =
		    (kva_ended){hof(m->ended[k]), NULL, m->q[m->ended[k]].end_state};
	memmove(m->ended, m->ended + k, (m->nended - k) * sizeof(int));
	m->nended -= k;
	/* READY first, in queue order */
	while (m->nready) {
		int r = m->ready[0];
		struct ref_req *q = &m->q[r];
		if (!ref_plan_room(q->npages))
			break;
		list_remove(m->ready, &m->nready, r);
		if (q->restore) {
			const kva_checkpoint *c = &m->dir[q->key].entries[q->sel];
			if (c->location == KVA_LOC_LOCAL)
				ref_admit(r, KVA_ADMIT_LOCAL, c->position, 0);
			else
				ref_admit(r, KVA_ADMIT_RESTORE, 0, c->position);
		} else {
			ref_admit(r, KVA_ADMIT_RECOMPUTE, 0, 0);
		}
	}
	/* then from the head, stopping at the first that cannot go */
	if (by_priority())
		ref_sort_waiting();
	while (m->nwait && ref_admit_head(m->waitq[0]) > 0)
		;
	/* copy jobs, whole (every rank) or not at all */
	uint32_t w = m->cfg.world_size;
	while (m->npending && S.plan.copies_cap - m->ncopies >= w) {
		int r = m->pending[0];
		struct ref_req *q = &m->q[r];
		list_remove(m->pending, &m->npending, r);
		q->queued = false;
		const kva_checkpoint *c = &m->dir[q->key].entries[q->sel];
		for (uint32_t rank = 0; rank < w; rank++)
			m->copies[m->ncopies++] = (kva_copy_job){
			    .token = {hof(r).id, hof(r).gen, q->attempts},
			    .handle = hof(r),
			    .rank = rank,
			    .world_size = w,
			    .checkpoint_id = c->id,
			    .checkpoint_epoch = c->epoch,
			    .position = c->position,
			    .npages = q->import_pages,
			};
	}
}

/* ---- the engine side -------------------------------------------------------- */

static void on_lookup(void *ctx, uint64_t key, uint32_t prompt, kva_lookup_token t)
{
	(void)ctx;
	(void)prompt;
	CHECK(S.in_step && key > 0 && key < NKEYS);
	CHECK(kva_lookup_answer(S.e, t, &S.m.dir[key]) == 0);
}

static bool same_handle(kva_handle a, kva_handle b)
{
	return a.id == b.id && a.gen == b.gen && a.slot == b.slot;
}

static void check_candidate(void);

static void compare_step(void)
{
	kva_plan *p = &S.plan;
	struct ref *m = &S.m;
	S.in_step = true;
	int n = kva_step(S.e, 0, p);
	S.in_step = false;
	ref_step();
	TRACE("step: engine admitted %u, reference %u\n", p->n_admitted, m->nadm);
	for (uint32_t k = 0; k < p->n_admitted; k++)
		TRACE("  engine    %llu how %u reason %u tokens %u/%u/%u pages %u+%u\n",
		      (unsigned long long)p->admitted[k].handle.id, p->admitted[k].how,
		      p->admitted[k].reason, p->admitted[k].local_tokens,
		      p->admitted[k].restored_tokens, p->admitted[k].recompute_tokens,
		      p->admitted[k].npages, p->admitted[k].reserved_pages);
	for (uint32_t k = 0; k < m->nadm; k++)
		TRACE("  reference %llu how %u reason %u tokens %u/%u/%u pages %u+%u\n",
		      (unsigned long long)m->adm[k].handle.id, m->adm[k].how, m->adm[k].reason,
		      m->adm[k].local_tokens, m->adm[k].restored_tokens, m->adm[k].recompute_tokens,
		      m->adm[k].npages, m->adm[k].reserved_pages);
	for (uint32_t k = 0; k < p->n_copies; k++)
		TRACE("  engine copy %llu attempt %u rank %u pos %u\n",
		      (unsigned long long)p->copies[k].handle.id, p->copies[k].token.attempt,
		      p->copies[k].rank, p->copies[k].position);
	for (uint32_t k = 0; k < m->ncopies; k++)
		TRACE("  reference copy %llu attempt %u rank %u pos %u\n",
		      (unsigned long long)m->copies[k].handle.id, m->copies[k].token.attempt,
		      m->copies[k].rank, m->copies[k].position);
	for (uint32_t k = 0; k < p->n_ended; k++)
		TRACE("  engine ended %llu state %u\n", (unsigned long long)p->ended[k].handle.id,
		      p->ended[k].state);
	for (uint32_t r = 0; r < m->nq && fz_trace > 0; r++) {
		kva_request_info info;
		if (kva_query(S.e, hof((int)r), &info) == 0)
			TRACE("  %llu: engine state %u sel %u@%u reason %u | reference state %d "
			      "restore %d "
			      "reason %u\n",
			      (unsigned long long)hof((int)r).id, info.state, info.has_selection,
			      info.selected_position, info.reason, m->q[r].state, m->q[r].restore,
			      m->q[r].reason);
	}
	{
		kva_stats st;
		kva_stats_get(S.e, &st);
		TRACE("  free pages/slots/runs: engine %llu/%llu/%llu reference %u/%u/%u\n",
		      (unsigned long long)st.free_pages, (unsigned long long)st.free_copy_slots,
		      (unsigned long long)st.free_run_slots, m->free_pages, m->free_slots,
		      m->free_runs);
	}
	CHECK(n >= 0 && (uint32_t)n == p->n_admitted);
	CHECK(p->n_ended == m->nend);
	for (uint32_t k = 0; k < m->nend; k++)
		CHECK(same_handle(p->ended[k].handle, m->end[k].handle) &&
		      p->ended[k].state == m->end[k].state);
	CHECK(p->n_admitted == m->nadm && p->n_pages == m->npages);
	for (uint32_t k = 0; k < m->nadm; k++) {
		const kva_admission *a = &p->admitted[k], *b = &m->adm[k];
		CHECK(same_handle(a->handle, b->handle));
		CHECK(a->how == b->how && a->reason == b->reason);
		CHECK(a->local_tokens == b->local_tokens &&
		      a->restored_tokens == b->restored_tokens &&
		      a->recompute_tokens == b->recompute_tokens);
		CHECK(a->pages_off == b->pages_off && a->npages == b->npages &&
		      a->reserved_pages == b->reserved_pages);
	}
	CHECK(p->n_copies == m->ncopies);
	for (uint32_t k = 0; k < m->ncopies; k++) {
		const kva_copy_job *a = &p->copies[k], *b = &m->copies[k];
		CHECK(same_handle(a->handle, b->handle) && a->token.attempt == b->token.attempt);
		CHECK(a->rank == b->rank && a->world_size == b->world_size);
		CHECK(a->checkpoint_id == b->checkpoint_id && a->position == b->position &&
		      a->npages == b->npages);
	}
	CHECK(p->n_fallbacks == m->nfb);
	for (uint32_t k = 0; k < m->nfb; k++)
		CHECK(same_handle(p->fallbacks[k].handle, m->fb[k].handle) &&
		      p->fallbacks[k].reason == m->fb[k].reason);
	kva_stats st;
	kva_stats_get(S.e, &st);
	CHECK(st.free_pages == m->free_pages && st.free_copy_slots == m->free_slots &&
	      st.free_run_slots == m->free_runs);
	check_candidate();
}

/* ---- operations ----------------------------------------------------------------- */

/* The k-th request (mod count) whose reference state is `state`, or -1. */
static int pick(uint8_t b, int state)
{
	uint32_t n = 0;
	for (uint32_t r = 0; r < S.m.nq; r++)
		n += state < 0 ? S.m.q[r].state != R_ENDED : S.m.q[r].state == state;
	if (!n)
		return -1;
	uint32_t k = b % n;
	for (uint32_t r = 0; r < S.m.nq; r++)
		if ((state < 0 ? S.m.q[r].state != R_ENDED : S.m.q[r].state == state) && k-- == 0)
			return (int)r;
	return -1;
}

static void op_submit(uint32_t max_prompt)
{
	uint8_t b = fz_u8(&S.in);
	uint32_t prompt = 1 + fz_below(&S.in, max_prompt);
	if (S.m.nq == MAXR)
		return;
	int r = (int)S.m.nq;
	/* under PRIORITY: priority 0..3, host arrival 0 (the step's clock, 0) or 1..3 */
	kva_request q = {.id = 1000 + (uint64_t)r,
	                 .prefix_key = b % NKEYS,
	                 .prompt_tokens = prompt,
	                 .priority = (int32_t)(b / NKEYS % 4),
	                 .arrival_ns = b / (4 * NKEYS) % 4};
	CHECK(kva_submit(S.e, &q, &S.h[r]) == 0);
	TRACE("submit %llu key %llu prompt %u\n", (unsigned long long)q.id,
	      (unsigned long long)q.prefix_key, prompt);
	S.m.nq++;
	struct ref_req *x = &S.m.q[r];
	memset(x, 0, sizeof(*x));
	x->key = q.prefix_key;
	x->prompt = prompt;
	x->sel = -1;
	x->world_mask = (1u << S.m.cfg.world_size) - 1;
	x->priority = q.priority;
	x->arrival = q.arrival_ns;
	push_ev(EV_SUBMIT, r, 0, 0);
}

static void release(int r, bool finish)
{
	struct ref_req *q = &S.m.q[r];
	TRACE("%s %llu\n", finish ? "finish" : "preempt", (unsigned long long)hof(r).id);
	CHECK((finish ? kva_finish(S.e, hof(r)) : kva_preempt(S.e, hof(r))) == 0);
	S.m.free_pages += q->npages + q->reserved;
	S.m.free_runs++;
	q->npages = q->reserved = 0;
	q->state = finish ? R_ENDING : R_PREEMPTED;
	push_ev(finish ? EV_FINISHED : EV_PREEMPTED, r, 0, 0);
	/* a second release of the same request is refused */
	int rc = finish ? kva_finish(S.e, hof(r)) : kva_preempt(S.e, hof(r));
	CHECK(rc == (finish ? -EALREADY : -EBUSY));
}

static void op_release(uint8_t b, bool finish)
{
	int r = pick(b, R_RUNNING);
	if (r >= 0)
		release(r, finish);
}

static void copy_report(int r, uint16_t rank, bool fail)
{
	struct ref_req *q = &S.m.q[r];
	kva_copy_token t = {hof(r).id, hof(r).gen, q->attempts, hof(r).slot};
	TRACE("copy_done %llu attempt %u rank %u %s\n", (unsigned long long)t.id, t.attempt, rank,
	      fail ? "FAIL" : "ok");
	CHECK(kva_copy_done(S.e, t, rank, fail ? -5 : 0) == 0);
	CHECK(kva_copy_done(S.e, t, rank, 0) == -EALREADY);
	q->sent |= 1u << rank;
	push_ev(EV_COPY, r, rank, fail);
}

static void op_cancel(uint8_t b)
{
	int r = pick(b, -1);
	if (r < 0)
		return;
	struct ref_req *q = &S.m.q[r];
	int want = q->state == R_ENDING ? -ENOENT : q->cancel_requested ? -EALREADY : 0;
	TRACE("cancel %llu (want %d)\n", (unsigned long long)hof(r).id, want);
	CHECK(kva_cancel(S.e, hof(r)) == want);
	if (want == 0) {
		q->cancel_requested = true;
		push_ev(EV_CANCEL, r, 0, 0);
	}
}

/* kva_set_priority on any request the host still holds (PRIORITY order). */
static void op_set_priority(uint8_t b, uint8_t c)
{
	int r = pick(b, -1);
	if (r < 0)
		return;
	const struct ref_req *q = &S.m.q[r];
	int32_t p = (int32_t)(c % 5) - 1;
	int want = q->state == R_ENDING ? -ENOENT : 0;
	TRACE("set_priority %llu %d (want %d)\n", (unsigned long long)hof(r).id, p, want);
	CHECK(kva_set_priority(S.e, hof(r), p) == want);
	if (want == 0) {
		push_ev(EV_PRIORITY, r, 0, 0);
		S.m.ev[S.m.nev - 1].priority = p;
	}
}

/* After a step: the victim is a running request of the largest (priority, arrival). */
static void check_candidate(void)
{
	kva_handle h;
	int rc = kva_preempt_candidate(S.e, &h);
	if (!by_priority()) {
		CHECK(rc == -EINVAL);
		return;
	}
	const struct ref_req *best = NULL;
	int found = -1;
	for (uint32_t r = 0; r < S.m.nq; r++) {
		const struct ref_req *q = &S.m.q[r];
		if (q->state != R_RUNNING)
			continue;
		if (!best || q->priority > best->priority ||
		    (q->priority == best->priority && q->arrival > best->arrival))
			best = q;
		if (rc == 0 && same_handle(h, hof((int)r)))
			found = (int)r;
	}
	CHECK(best ? rc == 0 : rc == -ENOENT);
	if (best) {
		CHECK(found >= 0);
		CHECK(S.m.q[found].priority == best->priority && S.m.q[found].arrival == best->arrival);
	}
}

static void op_grow(uint8_t b, uint8_t c)
{
	int r = pick(b, R_RUNNING);
	if (r < 0)
		return;
	struct ref_req *q = &S.m.q[r];
	uint32_t pages = 1 + c % 6;
	uint32_t own = q->reserved < pages ? q->reserved : pages;
	uint32_t extra = pages - own;
	int want = pages > S.m.cfg.total_pages ? -ERANGE : extra > S.m.free_pages ? -ENOSPC : 0;
	TRACE("grow %llu +%u: own %u, free %u (want %d)\n", (unsigned long long)hof(r).id, pages,
	      q->reserved, S.m.free_pages, want);
	CHECK(kva_grow(S.e, hof(r), pages, NULL) == want);
	if (want == 0) {
		S.m.free_pages -= extra;
		q->reserved -= own;
		q->npages += pages;
	}
}

static void op_copy(uint8_t b, uint8_t c)
{
	/* attempts handed out (not queued) with a rank still to report */
	uint32_t n = 0;
	for (uint32_t r = 0; r < S.m.nq; r++) {
		const struct ref_req *q = &S.m.q[r];
		n += q->copying && !q->queued && q->sent != q->world_mask;
	}
	if (!n)
		return;
	uint32_t k = b % n;
	for (uint32_t r = 0; r < S.m.nq; r++) {
		const struct ref_req *q = &S.m.q[r];
		if (!(q->copying && !q->queued && q->sent != q->world_mask) || k-- != 0)
			continue;
		uint16_t rank = (c >> 2) % S.m.cfg.world_size;
		while (q->sent & (1u << rank))
			rank = (uint16_t)((rank + 1) % S.m.cfg.world_size);
		copy_report((int)r, rank, (c & 3) == 0);
		return;
	}
}

static void configure(uint32_t *max_prompt)
{
	struct fz *in = &S.in;
	kva_config *c = &S.m.cfg;
	kva_config_default(c);
	c->total_pages = 2 + fz_below(in, 63);
	c->page_tokens = 1u << (fz_u8(in) % 5);
	c->decode_reserve_pages = fz_below(in, c->total_pages / 4 + 1);
	uint8_t b = fz_u8(in);
	c->decode_headroom_pages = b % 3;
	c->copy_slots = (uint16_t)(1 + (b >> 2) % 3);
	c->max_copy_retries = (b >> 4) % 3;
	c->policy = (b >> 6) == 3   ? KVA_POLICY_LEGACY
		    : (b >> 6) == 2 ? KVA_POLICY_COST
				    : KVA_POLICY_WAIT;
	/* 1 MiB pages: a disk copy (1.5 GB/s seed) of a small page loses to its
	 * recompute (8,000 tokens/s), a GPU one (25 GB/s) wins */
	c->cost.page_bytes = 1u << 20;
	c->prefill_chunk_tokens = 1 + fz_below(in, 16 * c->page_tokens);
	b = fz_u8(in);
	c->max_running = (uint16_t)(1 + (b & 7) % 6);
	c->world_size = 1 + (b >> 3) % 2;
	c->order = (b >> 4) & 1 ? KVA_ORDER_PRIORITY : KVA_ORDER_FCFS;
	c->aging_interval_ns = (b >> 5) & 1 ? 2 : 0; /* host arrivals are 0..3 */
	c->lookup_timeout_ns = c->max_restore_wait_ns = 0;
	c->wait_log_interval_ns = c->lookup_refresh_ns = 0;
	c->lookup = on_lookup;
	S.m.usable = c->total_pages - c->decode_reserve_pages;
	*max_prompt = (c->total_pages + 4) * c->page_tokens;
	/* an attention term 8x the linear one (125 us a token) at the longest prompt: it
	 * moves choices between a disk restore and recomputing */
	c->cost.prefill_attn_ps = (b >> 6) & 1 ? 1000000000ull / *max_prompt : 0;

	b = fz_u8(in);
	uint8_t b2 = fz_u8(in);
	S.plan = (kva_plan){
	    .admitted = S.adm,
	    .admitted_cap = (b & 1) ? CAP_BIG : 1 + (b >> 1) % 3,
	    .pages = S.pages,
	    .pages_cap = (b & 0x10) ? 4096 : 1 + b2 % 40,
	    .copies = S.copies,
	    .copies_cap = (b & 0x20) ? CAP_BIG : c->world_size + (b2 >> 6),
	    .fallbacks = S.fb,
	    .fallbacks_cap = (b & 0x40) ? CAP_BIG : (b2 >> 3) % 3,
	    .ended = S.ended,
	    .ended_cap = (b & 0x80) ? CAP_BIG : 1 + (b2 & 7) % 3,
	};
	for (uint32_t k = 1; k < NKEYS; k++) {
		kva_manifest *mf = &S.m.dir[k];
		memset(mf, 0, sizeof(*mf));
		mf->count = fz_u8(in) % 5;
		uint32_t pos = 0;
		for (uint32_t j = 0; j < mf->count; j++) {
			uint8_t x = fz_u8(in);
			pos += 1 + fz_below(in, *max_prompt / 2 + 2);
			mf->entries[j] =
			    (kva_checkpoint){.position = pos,
					     .location = (x & 1) ? KVA_LOC_LOCAL : KVA_LOC_EXTERNAL,
					     .compatible = (x & 6) != 0,
					     .tier = (uint8_t)((x >> 3) % KVA_TIER_COUNT),
					     .id = 10 * k + j,
					     .epoch = x >> 4};
		}
	}
	S.m.free_pages = c->total_pages;
	S.m.free_slots = c->copy_slots;
	S.m.free_runs = c->max_running;
	S.m.cost_head = -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	memset(&S, 0, sizeof(S));
	fz_init(&S.in, data, size);
	uint32_t max_prompt;
	configure(&max_prompt);
	const kva_config *c = &S.m.cfg;
	TRACE(
	    "config: pages %u x %u tok, watermark %u, headroom %u, chunk %u, slots %u, running %u, "
	    "world %u, retries %u, %s\n",
	    c->total_pages, c->page_tokens, c->decode_reserve_pages, c->decode_headroom_pages,
	    c->prefill_chunk_tokens, c->copy_slots, c->max_running, c->world_size,
	    c->max_copy_retries,
	    c->policy == KVA_POLICY_LEGACY ? "legacy" : c->policy == KVA_POLICY_COST ? "cost" : "wait");
	for (uint32_t k = 1; k < NKEYS; k++)
		for (uint32_t j = 0; j < S.m.dir[k].count; j++)
			TRACE("  key %u: pos %u %s%s\n", k, S.m.dir[k].entries[j].position,
			      S.m.dir[k].entries[j].location ? "local" : "external",
			      S.m.dir[k].entries[j].compatible ? "" : " incompatible");
	int err = 1;
	S.e = kva_engine_create(&S.m.cfg, &err);
	CHECK(S.e && err == 0);
	while (fz_more(&S.in)) {
		uint8_t op = fz_u8(&S.in);
		uint8_t b = fz_u8(&S.in);
		switch (op % 10) {
		case 0:
		case 1:
			op_submit(max_prompt);
			break;
		case 2:
			op_release(b, true);
			break;
		case 3:
			op_copy(b, fz_u8(&S.in));
			break;
		case 5:
			op_cancel(b);
			break;
		case 6:
			op_release(b, false);
			break;
		case 7:
			op_grow(b, fz_u8(&S.in));
			break;
		case 4: /* FCFS: a step, as before this operation existed */
			if (by_priority()) {
				op_set_priority(b, fz_u8(&S.in));
				break;
			}
			compare_step();
			break;
		default:
			compare_step();
			break;
		}
	}
	/* drain: report every copy, finish / cancel everything, until both are quiet */
	for (uint32_t round = 0;; round++) {
		CHECK(round < 4 * MAXR + 16);
		bool busy = S.m.nended != 0;
		for (uint32_t r = 0; r < S.m.nq; r++) {
			struct ref_req *q = &S.m.q[r];
			busy |= q->state != R_ENDED || q->copying;
			if (q->copying && !q->queued)
				for (uint16_t rank = 0; rank < S.m.cfg.world_size; rank++)
					if (!(q->sent & (1u << rank)))
						copy_report((int)r, rank, false);
			if (q->state == R_RUNNING)
				release((int)r, true);
			else if (q->state != R_ENDED && q->state != R_ENDING &&
				 !q->cancel_requested) {
				CHECK(kva_cancel(S.e, hof((int)r)) == 0);
				q->cancel_requested = true;
				push_ev(EV_CANCEL, (int)r, 0, 0);
			}
		}
		if (!busy)
			break;
		compare_step();
	}
	for (uint32_t r = 0; r < S.m.nq; r++)
		CHECK(S.m.q[r].state == R_ENDED && !S.m.q[r].copying);
	CHECK(S.m.free_pages == S.m.cfg.total_pages && S.m.free_slots == S.m.cfg.copy_slots &&
	      S.m.free_runs == S.m.cfg.max_running);
	kva_engine_destroy(S.e);
	S.e = NULL;
	return 0;
}
