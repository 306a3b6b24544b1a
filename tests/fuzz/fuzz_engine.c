/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_engine: one engine per input, driven by an operation sequence decoded
 * from the input through the public API only, with docs/design.md's invariants
 * checked after every step against a shadow of what the host has seen:
 *
 *   - credits: free + reserved + in_use + draining == total, and each term
 *     equals what the host can account for (pages it holds, kva_query's
 *     reservations, destination pages of copies not yet drained);
 *   - FCFS with the READY bypass only: a request admitted without having
 *     imported (its current waiting spell saw no copy job) is never younger
 *     than a request still WAITING after the same step;
 *   - drain before reuse: no page handed out (plan pages, kva_grow ids, copy
 *     destinations) while a copy into it has a rank that has not reported,
 *     nor while a running request holds it;
 *   - stats agree with kva_query and with the plans; every request has
 *     exactly one terminal outcome, reported once in plan.ended — checked
 *     after a final drain (every copy reported, everything finished or
 *     cancelled, steps until quiet).
 *
 * Input: 16 configuration bytes (pool, page size, watermark, slots, ranks,
 * timeouts, policy, importer mode, plan capacities), then operations, one
 * selector byte each followed by their arguments (see the switch in
 * LLVMFuzzerTestOneInput). With KVA_FAULT_INJECTION an operation makes the
 * k-th next allocation fail; every API call then accepts -ENOMEM and the run
 * must stay consistent.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "kvadmit/kvadmit.h"
#include "fuzz_input.h"

#define FZ_TARGET "fuzz_engine"
#define CHECK FZ_CHECK
#define TRACE FZ_TRACE

#ifdef KVA_FAULT_INJECTION
uint64_t kva__fault_arm(uint64_t k, int sticky); /* reservations/alloc.h */
void kva__evict_step_records_set(uint32_t n);    /* reservations/evict_walk.h */
size_t kva__held_ids(const kva_engine *e);       /* reservations/lifecycle.h */
#endif

#define MAXH 160    /* handles per input */
#define MAXP 96	    /* pool size bound */
#define MAXC 192    /* copy attempts tracked at once */
#define MAXPEND 48  /* lookup tokens kept for (late) answers */
#define MAXSEEN 24  /* checkpoints answered to one handle */
#define NKEYS 6	    /* prefix keys 0 (none) .. 5 */
#define CAP_BIG 512 /* "room for everything" plan capacity */

struct hreq {
	kva_handle h;
	uint64_t key;
	uint32_t prompt;
	int64_t age;	      /* FCFS order key: smaller is older */
	uint8_t last_state;   /* kva_query state after the last step; 0 = not stepped */
	bool running;	      /* admitted, not finished / preempted / cancelled */
	bool cancel_ok;	      /* kva_cancel returned 0 */
	bool finish_ok;	      /* kva_finish returned 0 */
	bool preempted;	      /* kva_preempt returned 0 since the last settled step */
	uint32_t preempt_seq; /* call order of that preempt */
	bool front_pending;   /* back at the front in a step that stalled for memory */
	bool ended;	      /* reported in plan.ended */
	uint8_t end_state;
	bool had_copy; /* a copy job was seen since it last entered WAITING */
	bool ever_admitted;
	/* the host stated a local checkpoint of it (rule host-local-checkpoints) */
	bool host_local;
	uint32_t restore_pos; /* position of its last fully successful copy */
	uint32_t nheld;	      /* pages it holds as a running request */
	uint32_t nseen;
	bool seen_overflow;
	kva_checkpoint seen[MAXSEEN]; /* checkpoints the directory gave it */
};

struct hcopy {
	kva_copy_token tok;
	int hr;
	uint32_t listed, reported; /* rank masks */
	bool failed, done, processed;
	uint32_t position, npages;
	uint32_t pages[MAXP];
};

struct pend {
	kva_lookup_token t;
	int hr;
	bool answered;	      /* answered or known stale */
	uint32_t answered_at; /* S.steps then: answers are refused for sure after a
	                       * step that did not stall (do_step) */
};

struct dir_entry {
	bool immediate; /* answer from inside the lookup callback */
	kva_manifest m;
};

static struct {
	kva_engine *e;
	kva_config cfg;
	struct fz in;
	uint64_t now;
	bool importers, legacy, fault;
	bool cost; /* KVA_POLICY_COST */
	uint32_t usable, max_prompt, fit_prompt;
	kva_plan plan;
	kva_admission adm[CAP_BIG];
	uint32_t pages[4096];
	kva_copy_job copies[CAP_BIG];
	kva_fallback fb[CAP_BIG];
	kva_ended ended[CAP_BIG];
	struct hreq h[MAXH];
	uint32_t nh, nsubmitted;
	struct hcopy c[MAXC];
	uint32_t nc;
	int owner[MAXP];	/* handle index holding the page as running, -1 none */
	uint32_t copying[MAXP]; /* copies with unreported ranks writing the page */
	struct pend pend[MAXPEND];
	uint32_t npend;
	struct dir_entry dir[NKEYS];
	int64_t back_age, front_age;
	uint32_t preempt_seq;
	uint32_t steps;
	bool in_step;
	bool copy_after_cancel; /* this step listed a copy of a cancelled request */
	uint64_t budget_left; /* the step's prefill token budget, as the engine spends it */
	/* totals over all plans */
	uint64_t n_admitted, tok_admitted, tok_local, tok_restored, tok_recomputed;
} S;

/* ---- helpers -------------------------------------------------------------- */

static uint32_t pages_for(uint64_t tokens)
{
	return (uint32_t)((tokens + S.cfg.page_tokens - 1) / S.cfg.page_tokens);
}

static int find_h(uint64_t id, uint32_t gen, uint32_t slot)
{
	for (uint32_t i = 0; i < S.nh; i++)
		if (S.h[i].h.id == id && S.h[i].h.gen == gen && S.h[i].h.slot == slot)
			return (int)i;
	return -1;
}

static bool terminal(uint8_t s)
{
	return s == KVA_STATE_FINISHED || s == KVA_STATE_CANCELLED || s == KVA_STATE_REJECTED;
}

static void seen_add(int i, const kva_manifest *m)
{
	struct hreq *r = &S.h[i];
	for (uint32_t k = 0; k < m->count; k++) {
		const kva_checkpoint *c = &m->entries[k];
		bool dup = false;
		for (uint32_t j = 0; j < r->nseen && !dup; j++)
			dup = r->seen[j].id == c->id && r->seen[j].position == c->position &&
			      r->seen[j].location == c->location &&
			      r->seen[j].compatible == c->compatible;
		if (dup)
			continue;
		if (r->nseen == MAXSEEN)
			r->seen_overflow = true;
		else
			r->seen[r->nseen++] = *c;
	}
}

/* Whether the directory ever offered r a usable checkpoint (id, position, location). */
static bool seen_usable(const struct hreq *r, uint64_t id, uint32_t pos, uint8_t loc, bool any_id)
{
	if (r->seen_overflow)
		return true;
	for (uint32_t j = 0; j < r->nseen; j++) {
		const kva_checkpoint *c = &r->seen[j];
		if ((any_id || c->id == id) && c->position == pos && c->location == loc &&
		    c->compatible && c->position <= r->prompt)
			return true;
	}
	return false;
}

static void pend_add(kva_lookup_token t, int hr, bool answered)
{
	if (S.npend == MAXPEND) { /* forget the oldest */
		memmove(&S.pend[0], &S.pend[1], (MAXPEND - 1) * sizeof(S.pend[0]));
		S.npend--;
	}
	S.pend[S.npend++] = (struct pend){t, hr, answered, S.steps};
}

/* Decodes a valid manifest (ascending positions, unique ids) for prompts of
 * about `scale` tokens; positions may pass the prompt. */
static void manifest_decode(kva_manifest *m, uint32_t scale)
{
	memset(m, 0, sizeof(*m));
	uint8_t b = fz_u8(&S.in);
	m->count = b % 5;
	uint32_t pos = 0;
	uint64_t used = 0;
	for (uint32_t k = 0; k < m->count; k++) {
		kva_checkpoint *c = &m->entries[k];
		uint8_t x = fz_u8(&S.in);
		uint8_t y = fz_u8(&S.in);
		pos += 1 + fz_below(&S.in, scale / 2 + 2);
		c->position = pos;
		c->location = (x & 1) ? KVA_LOC_LOCAL : KVA_LOC_EXTERNAL;
		c->compatible = (x & 6) != 0;
		uint32_t id = 1 + (y & 7);
		while (used & (1u << id))
			id = id % 12 + 1;
		used |= 1u << id;
		c->id = id;
		c->epoch = (y >> 3) & 3;
	}
}

static void hold_page(uint32_t p, int i)
{
	CHECK(p < S.cfg.total_pages);
	CHECK(S.owner[p] == -1);  /* not held by a running request */
	CHECK(S.copying[p] == 0); /* no copy into it may still be running */
	S.owner[p] = i;
	S.h[i].nheld++;
}

static void release_pages(int i)
{
	for (uint32_t p = 0; p < S.cfg.total_pages; p++)
		if (S.owner[p] == i)
			S.owner[p] = -1;
	S.h[i].nheld = 0;
}

static int copy_find(kva_copy_token t)
{
	for (uint32_t k = 0; k < S.nc; k++)
		if (S.c[k].tok.id == t.id && S.c[k].tok.gen == t.gen && S.c[k].tok.slot == t.slot &&
		    S.c[k].tok.attempt == t.attempt)
			return (int)k;
	return -1;
}

static void copy_report(struct hcopy *c, uint32_t rank, bool failed)
{
	c->reported |= 1u << rank;
	c->failed |= failed;
	if (c->reported != (1u << S.cfg.world_size) - 1)
		return;
	c->done = true;
	for (uint32_t k = 0; k < c->npages; k++)
		S.copying[c->pages[k]]--;
	if (!c->failed)
		S.h[c->hr].restore_pos = c->position;
}

/* A copy job, from the plan or from the importer callback. */
static void job_seen(const kva_copy_job *job)
{
	uint32_t w = S.cfg.world_size;
	CHECK(job->world_size == w && job->rank < w);
	CHECK(job->token.id == job->handle.id && job->token.gen == job->handle.gen);
	int k = copy_find(job->token);
	if (k >= 0) {
		struct hcopy *c = &S.c[k];
		CHECK(!(c->listed & (1u << job->rank)));
		CHECK(job->npages == c->npages && job->position == c->position);
		CHECK(memcmp(job->pages, c->pages, c->npages * sizeof(uint32_t)) == 0);
		c->listed |= 1u << job->rank;
		return;
	}
	int i = find_h(job->handle.id, job->handle.gen, job->handle.slot);
	CHECK(i >= 0);
	struct hreq *r = &S.h[i];
	CHECK(!r->ended && !r->running);
	/* a cancelled request's copy (a retry): only while its cancel waits
	 * behind an event that stalled for memory (checked after the step) */
	S.copy_after_cancel |= r->cancel_ok;
	for (uint32_t j = 0; j < S.nc; j++)
		if (S.c[j].hr == i) {
			CHECK(S.c[j].done);				/* one attempt at a time */
			CHECK(S.c[j].tok.attempt < job->token.attempt); /* attempts only grow */
		}
	CHECK(job->position > 0 && job->position <= r->prompt);
	CHECK(job->npages == pages_for(job->position) && job->npages <= MAXP);
	CHECK(seen_usable(r, job->checkpoint_id, job->position, KVA_LOC_EXTERNAL, false));
	CHECK(S.nc < MAXC);
	struct hcopy *c = &S.c[S.nc++];
	memset(c, 0, sizeof(*c));
	c->tok = job->token;
	c->hr = i;
	c->position = job->position;
	c->npages = job->npages;
	c->listed = 1u << job->rank;
	for (uint32_t p = 0; p < job->npages; p++) {
		uint32_t id = job->pages[p];
		CHECK(id < S.cfg.total_pages);
		CHECK(S.owner[id] == -1 && S.copying[id] == 0); /* rule drain-before-reuse */
		for (uint32_t q = 0; q < p; q++)
			CHECK(job->pages[q] != id);
		c->pages[p] = id;
	}
	for (uint32_t p = 0; p < job->npages; p++)
		S.copying[job->pages[p]]++;
	r->had_copy = true;
	r->restore_pos = 0;
}

/* ---- callbacks (scheduler thread, inside kva_step) -------------------------- */

static void on_lookup(void *ctx, uint64_t key, uint32_t prompt, kva_lookup_token t)
{
	(void)ctx;
	CHECK(S.in_step);
	int i = find_h(t.id, t.gen, t.slot);
	CHECK(i >= 0);
	CHECK(key != 0 && S.h[i].key == key && S.h[i].prompt == prompt);
	CHECK(!S.h[i].ended && !S.h[i].running);
	struct dir_entry *d = &S.dir[key % NKEYS];
	if (d->immediate) {
		int rc = kva_lookup_answer(S.e, t, &d->m);
		TRACE("  lookup %llu.%u seq %u key %llu: immediate answer (%u entries) -> %d\n",
		      (unsigned long long)t.id, t.gen, t.seq, (unsigned long long)key, d->m.count,
		      rc);
		CHECK(rc == 0 || (S.fault && rc == -ENOMEM));
		if (rc == 0) {
			seen_add(i, &d->m);
			pend_add(t, i, true);
			return;
		}
	}
	TRACE("  lookup %llu.%u seq %u key %llu: pending\n", (unsigned long long)t.id, t.gen, t.seq,
	      (unsigned long long)key);
	pend_add(t, i, false);
}

static int on_import(void *ctx, kva_engine *e, const kva_copy_job *job)
{
	(void)ctx;
	CHECK(S.in_step && e == S.e);
	job_seen(job);
	if (fz_u8(&S.in) % 8 != 0)
		return 0;
	/* refused: the engine reports this rank as failed itself */
	TRACE("  importer refuses %llu.%u attempt %u rank %u\n", (unsigned long long)job->token.id,
	      job->token.gen, job->token.attempt, job->rank);
	copy_report(&S.c[copy_find(job->token)], job->rank, true);
	return -1;
}

/* ---- the step and its checks ------------------------------------------------ */

static void check_admission(const kva_admission *a, uint32_t *pages_next)
{
	int i = find_h(a->handle.id, a->handle.gen, a->handle.slot);
	CHECK(i >= 0);
	struct hreq *r = &S.h[i];
	CHECK(a->user == (void *)r);
	CHECK(!r->ended && !r->running && !r->cancel_ok);
	CHECK(a->how >= KVA_ADMIT_RESTORE && a->how <= KVA_ADMIT_RECOMPUTE);
	CHECK((uint64_t)a->local_tokens + a->restored_tokens + a->recompute_tokens == r->prompt);
	CHECK(a->pages_off == *pages_next && a->pages_off + a->npages <= S.plan.n_pages);
	*pages_next += a->npages;
	uint32_t total = pages_for(r->prompt) + S.cfg.decode_headroom_pages;
	switch (a->how) {
	case KVA_ADMIT_RESTORE:
		/* an import that completed on every rank: READY, owns everything;
		 * a shorter local checkpoint the host stated serves its own tokens
		 * (rule host-local-checkpoints), the import the rest */
		CHECK(r->had_copy && r->restore_pos > 0 &&
		      a->local_tokens + a->restored_tokens == r->restore_pos && a->restored_tokens > 0);
		CHECK(a->local_tokens == 0 ||
		      seen_usable(r, 0, a->local_tokens, KVA_LOC_LOCAL, true));
		CHECK(a->reason == KVA_REASON_NONE);
		CHECK(a->npages == pages_for(r->restore_pos) && a->npages + a->reserved_pages == total);
		break;
	case KVA_ADMIT_LOCAL:
		CHECK(a->restored_tokens == 0 && a->reason == KVA_REASON_NONE);
		CHECK(seen_usable(r, 0, a->local_tokens, KVA_LOC_LOCAL, true));
		CHECK(a->npages == pages_for(a->local_tokens) &&
		      a->npages + a->reserved_pages == total);
		break;
	case KVA_ADMIT_RECOMPUTE: {
		CHECK(a->local_tokens == 0 && a->restored_tokens == 0);
		CHECK(a->reason > KVA_REASON_NONE && a->reason < KVA_REASON_COUNT);
		/* no key: NO_KEY, unless a local checkpoint the host stated was
		 * its path (then TOO_LARGE or a wait that expired) */
		CHECK(a->reason != KVA_REASON_NO_KEY || r->key == 0);
		CHECK(r->key != 0 || a->reason == KVA_REASON_NO_KEY || r->host_local);
		CHECK(a->reason != KVA_REASON_LEGACY || S.legacy);
		CHECK(a->reason != KVA_REASON_COST || S.cost);
		CHECK(a->reason != KVA_REASON_LOOKUP_TIMEOUT || S.cfg.lookup_timeout_ns);
		CHECK(a->reason != KVA_REASON_WAIT_EXPIRED || S.cfg.max_restore_wait_ns);
		CHECK(a->reason != KVA_REASON_TOO_LARGE || total > S.usable);
		if (a->reason == KVA_REASON_RETRIES_EXHAUSTED) {
			/* an owned fallback from READY: keeps the whole reservation */
			CHECK(r->had_copy && a->npages + a->reserved_pages == total);
		} else {
			uint32_t chunk = r->prompt < S.cfg.prefill_chunk_tokens
					     ? r->prompt
					     : S.cfg.prefill_chunk_tokens;
			/* the first grant covers the first chunk cut to the budget */
			uint32_t first = pages_for(chunk < S.budget_left ? chunk : S.budget_left);
			if (first > S.usable)
				first = S.usable;
			/* under the cost policy it reserves its prompt and headroom
			 * too (capped at the usable pool), as a restore does */
			uint32_t owned = S.cost ? (total > S.usable ? S.usable : total) : first;
			CHECK(a->npages == first && a->reserved_pages == owned - first);
		}
		break;
	}
	}
	for (uint32_t k = 0; k < a->npages; k++)
		hold_page(S.plan.pages[a->pages_off + k], i);
	/* the budget: each admission costs its first chunk after the cached
	 * prefix (at least one token), cut to what is left */
	CHECK(S.budget_left > 0);
	uint32_t rest = r->prompt - a->local_tokens - a->restored_tokens;
	uint32_t cost = rest < S.cfg.prefill_chunk_tokens ? rest : S.cfg.prefill_chunk_tokens;
	cost = cost ? cost : 1;
	S.budget_left -= cost < S.budget_left ? cost : S.budget_left;
	S.tok_admitted += r->prompt;
	S.tok_local += a->local_tokens;
	S.tok_restored += a->restored_tokens;
	S.tok_recomputed += a->recompute_tokens;
	S.n_admitted++;
}

/* budget: prefill tokens the step may start (0 = unlimited); hold: the host
 * preempted, nothing new may be admitted. */
static void do_step(uint64_t dt, uint32_t budget, bool hold)
{
	kva_plan *p = &S.plan;
	p->token_budget = budget;
	p->hold_admissions = hold;
	S.budget_left = budget ? budget : UINT64_MAX;
	/* Reports in before this step are drained by it. */
	for (uint32_t k = 0; k < S.nc; k++)
		if (S.c[k].done)
			S.c[k].processed = true;
	/* Cancels accepted before the step are handled first in it — unless
	 * an event ahead of one stalls for memory: the rest of the inbox waits
	 * for the next step. Their pages are free to the step; kept aside to be
	 * held again if the cancel waits (below). */
	static int limbo[MAXP];
	bool any_limbo = false;
	for (uint32_t q = 0; q < S.cfg.total_pages; q++)
		limbo[q] = -1;
	for (uint32_t i = 0; i < S.nh; i++)
		if (S.h[i].cancel_ok && S.h[i].running) {
			for (uint32_t q = 0; q < S.cfg.total_pages; q++)
				if (S.owner[q] == (int)i)
					limbo[q] = (int)i;
			release_pages((int)i);
			S.h[i].running = false;
			any_limbo = true;
		}
	/* Ids live before the step: a new incarnation of one must be rejected. */
	static bool must_reject[MAXH], was_ended[MAXH], admitted_nb[MAXH];
	for (uint32_t i = 0; i < S.nh; i++) {
		was_ended[i] = S.h[i].ended;
		admitted_nb[i] = false;
		must_reject[i] = false;
		if (S.h[i].last_state != 0)
			continue; /* ingested already */
		for (uint32_t j = 0; j < S.nh; j++) {
			const struct hreq *o = &S.h[j];
			if (j != i && o->h.id == S.h[i].h.id && o->last_state != 0 &&
			    !terminal(o->last_state) && !o->ended && !o->cancel_ok && !o->finish_ok)
				must_reject[i] = true;
		}
	}

	S.now += dt;
	TRACE("step +%llu ms\n", (unsigned long long)(dt / 1000000));
	S.in_step = true;
	int n = kva_step(S.e, S.now, p);
	S.in_step = false;
	S.steps++;
	/* The step stalled for memory: the events behind the one that needed
	 * it (cancels, finishes, preemptions, answers, copy reports) wait for
	 * the next step. */
	bool stalled = S.fault && p->backlog;
	/* A cancel behind a stalled event: still RUNNING, and its pages, which
	 * the step cannot have handed out, are its own again. */
	for (uint32_t i = 0; any_limbo && stalled && i < S.nh; i++) {
		kva_request_info info;
		struct hreq *r = &S.h[i];
		if (!r->cancel_ok || r->running || r->ended ||
		    kva_query(S.e, r->h, &info) != 0 || info.state != KVA_STATE_RUNNING)
			continue;
		for (uint32_t q = 0; q < S.cfg.total_pages; q++)
			if (limbo[q] == (int)i)
				hold_page(q, (int)i);
		r->running = true;
	}
	/* A step that stalled for memory may keep an answer it took for the
	 * next one: until a step drains it, the same answer may be taken again
	 * (the producer's refusal is early only, op_answer). */
	if (stalled)
		for (uint32_t k = 0; k < S.npend; k++)
			if (S.pend[k].answered)
				S.pend[k].answered_at = S.steps;
	for (uint32_t k = 0; k < p->n_ended; k++)
		TRACE("  ended %llu.%u state %u\n", (unsigned long long)p->ended[k].handle.id,
		      p->ended[k].handle.gen, p->ended[k].state);
	for (uint32_t k = 0; k < p->n_admitted; k++)
		TRACE("  admitted %llu.%u how %u reason %u npages %u reserved %u\n",
		      (unsigned long long)p->admitted[k].handle.id, p->admitted[k].handle.gen,
		      p->admitted[k].how, p->admitted[k].reason, p->admitted[k].npages,
		      p->admitted[k].reserved_pages);
	for (uint32_t k = 0; k < p->n_copies; k++)
		TRACE("  copy %llu.%u attempt %u rank %u pos %u npages %u\n",
		      (unsigned long long)p->copies[k].token.id, p->copies[k].token.gen,
		      p->copies[k].token.attempt, p->copies[k].rank, p->copies[k].position,
		      p->copies[k].npages);
	for (uint32_t k = 0; k < p->n_fallbacks; k++)
		TRACE("  fallback %llu.%u reason %u\n",
		      (unsigned long long)p->fallbacks[k].handle.id, p->fallbacks[k].handle.gen,
		      p->fallbacks[k].reason);
	CHECK(n >= 0 && (uint32_t)n == p->n_admitted);
	CHECK(!hold || n == 0);
	CHECK(p->n_admitted <= p->admitted_cap && p->n_pages <= p->pages_cap);
	CHECK(p->n_copies <= p->copies_cap && p->n_fallbacks <= p->fallbacks_cap &&
	      p->n_ended <= p->ended_cap);

	/* terminal outcomes, each exactly once */
	for (uint32_t k = 0; k < p->n_ended; k++) {
		const kva_ended *en = &p->ended[k];
		int i = find_h(en->handle.id, en->handle.gen, en->handle.slot);
		CHECK(i >= 0);
		struct hreq *r = &S.h[i];
		CHECK(en->user == (void *)r);
		CHECK(!r->ended && !r->running);
		CHECK(terminal(en->state));
		CHECK(en->state != KVA_STATE_FINISHED || r->finish_ok);
		CHECK(en->state != KVA_STATE_CANCELLED || r->cancel_ok);
		CHECK(en->state != KVA_STATE_REJECTED || !r->ever_admitted);
		r->ended = true;
		r->end_state = en->state;
	}

	/* admissions: READY first, then FCFS from the head */
	static int nonbypass[CAP_BIG];
	uint32_t nnb = 0, pages_next = 0;
	for (uint32_t k = 0; k < p->n_admitted; k++) {
		const kva_admission *a = &p->admitted[k];
		int i = find_h(a->handle.id, a->handle.gen, a->handle.slot);
		check_admission(a, &pages_next);
		struct hreq *r = &S.h[i];
		/* Past a blocked head only READY restores: a completed import, an
		 * owned fallback after failed copies, or a local shorter
		 * checkpoint after failed copies. */
		bool bypass =
		    a->how == KVA_ADMIT_RESTORE ||
		    (a->how == KVA_ADMIT_RECOMPUTE && a->reason == KVA_REASON_RETRIES_EXHAUSTED) ||
		    (a->how == KVA_ADMIT_LOCAL && r->had_copy);
		if (!bypass) {
			nonbypass[nnb++] = i;
			admitted_nb[i] = true;
		}
		r->running = true;
		r->ever_admitted = true;
		r->had_copy = false;
		r->restore_pos = 0;
		CHECK(!must_reject[i]);
	}
	CHECK(pages_next == p->n_pages);

	if (!S.importers)
		for (uint32_t k = 0; k < p->n_copies; k++)
			job_seen(&p->copies[k]);
	CHECK(!S.copy_after_cancel || stalled);
	S.copy_after_cancel = false;
	for (uint32_t k = 0; k < p->n_copies; k++)
		CHECK(copy_find(p->copies[k].token) >= 0);
	if (!S.importers) /* the plan is the only channel: all ranks listed at once */
		for (uint32_t k = 0; k < S.nc; k++)
			CHECK(S.c[k].listed == (1u << S.cfg.world_size) - 1);

	for (uint32_t k = 0; k < p->n_fallbacks; k++) {
		const kva_fallback *f = &p->fallbacks[k];
		int i = find_h(f->handle.id, f->handle.gen, f->handle.slot);
		CHECK(i >= 0);
		CHECK(f->reason > KVA_REASON_NONE && f->reason < KVA_REASON_COUNT);
		CHECK(f->reason != KVA_REASON_LEGACY || S.legacy);
		CHECK(f->reason != KVA_REASON_COST || S.cost);
		CHECK(f->reason != KVA_REASON_NO_KEY || S.h[i].key == 0);
		CHECK(S.h[i].key != 0 || f->reason == KVA_REASON_NO_KEY || S.h[i].host_local);
	}

	/* Every request as the engine sees it now. */
	uint64_t g_wait = 0, g_imp = 0, g_ready = 0, g_run = 0, n_fin = 0, n_can = 0, n_rej = 0;
	uint64_t reserved = 0, in_use = 0, draining = 0;
	static uint8_t state[MAXH];
	bool front_mixed = false;
	uint32_t nfront = 0;
	static int front[MAXH];
	for (uint32_t i = 0; i < S.nh; i++) {
		struct hreq *r = &S.h[i];
		kva_request_info info;
		int rc = kva_query(S.e, r->h, &info);
		state[i] = 0;
		if (rc == -ENOENT) {
			CHECK(r->ended); /* retired only after its outcome was reported */
		} else {
			CHECK(rc == 0);
			CHECK(info.user == (void *)r && info.prompt_tokens == r->prompt);
			state[i] = info.state;
			CHECK(!r->ended || terminal(info.state));
			CHECK(!r->ended || info.state == r->end_state);
			CHECK((info.state == KVA_STATE_RUNNING) == r->running);
			/* (an event ahead of its submit that needed memory holds the
			 * rest of the inbox for the next step) */
			CHECK(!must_reject[i] || info.state == KVA_STATE_REJECTED ||
			      stalled);
			if (stalled && info.state == KVA_STATE_WAITING &&
			    r->last_state == 0)
				continue; /* maybe not ingested yet: nothing to check */
			switch (info.state) {
			case KVA_STATE_WAITING:
				g_wait++;
				CHECK(info.pages_held == 0);
				break;
			case KVA_STATE_IMPORTING:
				g_imp++;
				reserved += info.pages_held + info.pages_reserved;
				break;
			case KVA_STATE_READY:
				g_ready++;
				reserved += info.pages_held + info.pages_reserved;
				break;
			case KVA_STATE_RUNNING:
				g_run++;
				CHECK(info.pages_held == r->nheld);
				reserved += info.pages_reserved;
				in_use += info.pages_held;
				break;
			case KVA_STATE_FINISHED:
				n_fin += !r->ended;
				break;
			case KVA_STATE_CANCELLED:
				n_can += !r->ended;
				break;
			case KVA_STATE_REJECTED:
				n_rej += !r->ended;
				break;
			default:
				CHECK(!"unknown state");
			}
			if (info.state == KVA_STATE_REJECTED && r->last_state == 0) {
				/* rule id-reuse: rejected only for an older incarnation still
				 * live */
				bool older_live = false;
				for (uint32_t j = 0; j < i; j++)
					older_live |= S.h[j].h.id == r->h.id && !was_ended[j];
				CHECK(older_live);
			}
			/* Back at the front of the queue in this step: preempted, or
			 * requeued by a reset (seen waiting, or admitted from the head,
			 * after owning capacity), or in a step that stalled since. */
			bool was_owning = r->last_state == KVA_STATE_IMPORTING ||
					  r->last_state == KVA_STATE_READY;
			if ((r->preempted && !terminal(info.state)) || r->front_pending ||
			    (info.state == KVA_STATE_WAITING && was_owning) ||
			    (admitted_nb[i] && was_owning)) {
				front[nfront++] = (int)i;
				front_mixed |= !r->preempted;
				if (info.state == KVA_STATE_WAITING) {
					r->had_copy = false;
					r->restore_pos = 0;
				}
			}
			r->last_state = info.state;
		}
		if (r->ended) {
			n_fin += r->end_state == KVA_STATE_FINISHED;
			n_can += r->end_state == KVA_STATE_CANCELLED;
			n_rej += r->end_state == KVA_STATE_REJECTED;
		}
	}
	/* Front pushes of one step: preempts in call order (the last one ends up
	 * first); mixed with reset requeues their relative order is left open
	 * (rule fcfs-ready-bypass: each goes to the front as its event is
	 * handled). A step that stalled for memory handles the events behind
	 * the stalled one in the next step, in order: whether its preempts and
	 * requeues were handled before the stall or after it, they are placed
	 * with the next settled step's, and their call order is kept until
	 * then. */
	if (stalled) {
		for (uint32_t k = 0; k < nfront; k++)
			S.h[front[k]].front_pending = true;
	} else {
		if (nfront)
			S.front_age -= 1 << 20;
		for (uint32_t k = 0; k < nfront; k++) {
			struct hreq *r = &S.h[front[k]];
			r->age = front_mixed ? S.front_age : S.front_age - r->preempt_seq;
		}
		for (uint32_t i = 0; i < S.nh; i++)
			S.h[i].preempted = S.h[i].front_pending = false;
		S.preempt_seq = 0;
	}

	/* rule fcfs-ready-bypass: nothing admitted from the head while an older
	 * request waits
	 * (not checked in a step that stalled for memory: a preemption behind
	 * the stalled event is not back at the queue's front yet, and the
	 * requests its event will put behind it may be admitted meanwhile) */
	for (uint32_t k = 0; k < nnb && !stalled; k++) {
		int64_t a = S.h[nonbypass[k]].age;
		for (uint32_t i = 0; i < S.nh; i++)
			if (state[i] == KVA_STATE_WAITING)
				CHECK(S.h[i].age >= a);
	}

	for (uint32_t k = 0; k < S.nc; k++) {
		const struct hcopy *c = &S.c[k];
		if (!c->processed && state[c->hr] == KVA_STATE_CANCELLED)
			draining += c->npages;
	}

	kva_stats st;
	kva_stats_get(S.e, &st);
	CHECK(st.total_pages == S.cfg.total_pages);
	CHECK(st.free_pages <= st.total_pages && st.reserved_pages <= st.total_pages &&
	      st.in_use_pages <= st.total_pages && st.draining_pages <= st.total_pages);
	CHECK(st.free_pages + st.reserved_pages + st.in_use_pages + st.draining_pages ==
	      st.total_pages);
	uint64_t held = 0;
	for (uint32_t q = 0; q < S.cfg.total_pages; q++)
		held += S.owner[q] >= 0;
	CHECK(st.in_use_pages == in_use && in_use == held);
	CHECK(st.reserved_pages == reserved);
	/* An event that needed memory holds the rest of the inbox for the next
	 * step: submits behind it are not ingested yet (kva_query says WAITING,
	 * the gauges do not count them), copy reports behind it not drained.
	 * Checked again once nothing is held. */
	bool settled = !stalled;
	CHECK(settled ? st.draining_pages == draining : st.draining_pages >= draining);
	CHECK(!settled || st.waiting == g_wait);
	CHECK(st.importing == g_imp && st.ready == g_ready && st.running == g_run);
	CHECK(st.free_copy_slots + g_imp == S.cfg.copy_slots);
	CHECK(st.free_run_slots + g_imp + g_ready + g_run == S.cfg.max_running);
	CHECK(st.submitted == S.nsubmitted && (!settled || st.ingested == S.nsubmitted));
	/* (a finish or cancel behind the stalled event: its state is terminal,
	 * counted when the step gets to its event) */
	CHECK(settled ? st.finished == n_fin && st.cancelled == n_can && st.rejected == n_rej
		      : st.finished <= n_fin && st.cancelled <= n_can && st.rejected <= n_rej);
	CHECK(st.admitted_restore + st.admitted_local + st.admitted_recompute == S.n_admitted);
	CHECK(st.prompt_tokens_admitted == S.tok_admitted && st.tokens_local == S.tok_local &&
	      st.tokens_restored == S.tok_restored && st.tokens_recomputed == S.tok_recomputed);
	uint64_t fb = 0;
	for (int k = 0; k < KVA_REASON_COUNT; k++)
		fb += st.fallbacks[k];
	CHECK(st.fallbacks[KVA_REASON_NONE] == 0 && fb >= st.admitted_recompute);
	/* the text rendering of live stats, every 64th step: under ASan its
	 * vsnprintf calls cost more than the rest of a step, and tests/metrics
	 * checks the text itself */
	if ((S.steps & 63) == 0) {
		char text[4096];
		(void)kva_stats_format(&st, text, sizeof(text));
	}

	/* forget drained copies once there are many */
	if (S.nc > MAXC / 2) {
		uint32_t w = 0;
		for (uint32_t k = 0; k < S.nc; k++)
			if (!(S.c[k].done && S.c[k].processed))
				S.c[w++] = S.c[k];
		S.nc = w;
	}
}

/* ---- operations ---------------------------------------------------------------- */

static int pick_running(uint8_t b)
{
	uint32_t n = 0;
	for (uint32_t i = 0; i < S.nh; i++)
		n += S.h[i].running;
	if (!n)
		return S.nh ? (int)(b % S.nh) : -1;
	uint32_t k = b % n;
	for (uint32_t i = 0; i < S.nh; i++)
		if (S.h[i].running && k-- == 0)
			return (int)i;
	return -1;
}

/* A local checkpoint the host states (rule host-local-checkpoints): its own
 * cache, local and
 * compatible; positions up to a little past the prompt (-ERANGE). */
static kva_checkpoint host_local(uint32_t prompt)
{
	uint8_t b = fz_u8(&S.in);
	kva_checkpoint c = {.position = 1 + fz_below(&S.in, prompt + prompt / 8 + 1),
			    .location = KVA_LOC_LOCAL,
			    .compatible = 1,
			    .id = 20 + (b & 3),
			    .epoch = b >> 6};
	return c;
}

static void op_submit(bool with_local)
{
	uint8_t a = fz_u8(&S.in);
	/* mostly prompts that fit the pool; bit 7: anything up to beyond it */
	uint32_t prompt = 1 + fz_below(&S.in, (a & 0x80) ? S.max_prompt : S.fit_prompt);
	if (S.nh == MAXH)
		return;
	struct hreq *r = &S.h[S.nh];
	memset(r, 0, sizeof(*r));
	kva_request q = {.id = (a & 7) % 6,
			 .prefix_key = ((a >> 3) & 15) % NKEYS,
			 .prompt_tokens = prompt,
			 .user = r};
	if (with_local) {
		q.local = host_local(prompt);
		if (q.local.position > prompt) {
			CHECK(kva_submit(S.e, &q, &r->h) == -ERANGE);
			q.local.position = prompt;
		}
		kva_manifest m = {.count = 1, .entries = {q.local}};
		seen_add((int)S.nh, &m);
		r->host_local = true;
	}
	int rc = kva_submit(S.e, &q, &r->h);
	TRACE("submit id %llu key %llu prompt %u -> %d gen %u\n", (unsigned long long)q.id,
	      (unsigned long long)q.prefix_key, prompt, rc, r->h.gen);
	if (S.fault && rc == -ENOMEM)
		return;
	CHECK(rc == 0 && r->h.id == q.id);
	CHECK(find_h(r->h.id, r->h.gen, r->h.slot) < 0); /* generations tell incarnations apart */
	r->key = q.prefix_key;
	r->prompt = prompt;
	r->age = ++S.back_age;
	S.nh++;
	S.nsubmitted++;
}

static void op_local(void)
{
	uint8_t b = fz_u8(&S.in);
	if (!S.nh)
		return;
	int i = b % S.nh;
	struct hreq *r = &S.h[i];
	kva_checkpoint c = host_local(r->prompt);
	int rc = kva_local_checkpoint(S.e, r->h, &c);
	TRACE("local %llu.%u pos %u id %llu -> %d\n", (unsigned long long)r->h.id, r->h.gen,
	      c.position, (unsigned long long)c.id, rc);
	if (c.position > r->prompt && rc != -ENOENT) {
		CHECK(rc == -ERANGE);
		return;
	}
	/* ended, or about to be: -ENOENT; its event needs memory: -ENOMEM */
	CHECK(rc == 0 || rc == -ENOENT || (S.fault && rc == -ENOMEM));
	CHECK(rc == -ENOENT || !r->ended);
	if (rc == 0) {
		kva_manifest m = {.count = 1, .entries = {c}};
		seen_add(i, &m);
		r->host_local = true;
	}
}

static void op_cancel(void)
{
	uint8_t b = fz_u8(&S.in);
	if (!S.nh)
		return;
	struct hreq *r = &S.h[b % S.nh];
	int rc = kva_cancel(S.e, r->h);
	TRACE("cancel %llu.%u -> %d\n", (unsigned long long)r->h.id, r->h.gen, rc);
	if (r->ended || r->finish_ok)
		CHECK(rc == -ENOENT);
	else if (r->cancel_ok)
		CHECK(rc == -EALREADY || rc == -ENOENT);
	else /* -ENOENT: rejected, its report still queued; -ENOMEM: its event */
		CHECK(rc == 0 || (rc == -ENOENT && r->last_state == KVA_STATE_REJECTED) ||
		      (S.fault && rc == -ENOMEM));
	if (rc == 0) {
		CHECK(!r->cancel_ok);
		r->cancel_ok = true;
	}
}

static void op_answer(void)
{
	uint8_t b = fz_u8(&S.in);
	kva_manifest m;
	manifest_decode(&m, S.fit_prompt);
	if (!S.npend)
		return;
	struct pend *pd = &S.pend[b % S.npend];
	if ((b & 0xf0) == 0xf0) {
		/* malformed: positions not ascending */
		m.count = 2;
		m.entries[0] = (kva_checkpoint){.position = 8, .compatible = 1, .id = 1};
		m.entries[1] = (kva_checkpoint){.position = 8, .compatible = 1, .id = 2};
		CHECK(kva_lookup_answer(S.e, pd->t, &m) == -EINVAL);
		return;
	}
	int rc = kva_lookup_answer(S.e, pd->t, &m);
	TRACE("answer %llu.%u seq %u (%u entries) -> %d\n", (unsigned long long)pd->t.id, pd->t.gen,
	      pd->t.seq, m.count, rc);
	if (rc == -ENOENT)
		CHECK(S.h[pd->hr].ended);
	/* The producer's staleness check is early refusal only: until a step
	 * drains the first answer, a second one may be taken (and dropped). */
	if (pd->answered && pd->answered_at != S.steps)
		CHECK(rc == -ESTALE || rc == -ENOENT);
	else
		CHECK(rc == 0 || rc == -ESTALE || rc == -ENOENT || (S.fault && rc == -ENOMEM));
	if (rc == 0 && !pd->answered)
		seen_add(pd->hr, &m);
	if ((rc == 0 || rc == -ESTALE || rc == -ENOENT) && !pd->answered) {
		pd->answered = true;
		pd->answered_at = S.steps;
	}
}

static void op_copy_done(bool bogus, bool all)
{
	uint8_t b = fz_u8(&S.in);
	uint8_t c8 = fz_u8(&S.in);
	uint32_t w = S.cfg.world_size;
	if (bogus) {
		if (!S.nc)
			return;
		struct hcopy *c = &S.c[b % S.nc];
		uint32_t rank = c8 % (w + 1);
		int rc = kva_copy_done(S.e, c->tok, rank, 0);
		if (rank == w)
			CHECK(rc == -ERANGE);
		else if (c->reported & (1u << rank))
			CHECK(c->processed ? (rc == -EALREADY || rc == -ESTALE || rc == -ENOENT)
					   : rc == -EALREADY);
		else if (rc == 0) /* not a bogus report after all */
			copy_report(c, rank, false);
		else
			CHECK(!"an unreported rank was refused");
		kva_copy_token fut = c->tok;
		fut.attempt += 1000;
		rc = kva_copy_done(S.e, fut, 0, 0);
		CHECK(rc == -ESTALE || rc == -ENOENT);
		return;
	}
	uint32_t nact = 0;
	for (uint32_t k = 0; k < S.nc; k++)
		nact += !S.c[k].done;
	if (!nact)
		return;
	uint32_t pick = b % nact;
	struct hcopy *c = NULL;
	for (uint32_t k = 0; k < S.nc; k++)
		if (!S.c[k].done && pick-- == 0)
			c = &S.c[k];
	uint32_t rank = c8 % w;
	do {
		while (c->reported & (1u << rank))
			rank = (rank + 1) % w;
		CHECK(c->listed & (1u << rank));
		/* one report: fails 1 in 8; all ranks: rank 0 fails 1 in 4 */
		bool fail = all ? rank == 0 && (c8 >> 6) == 0 : (c8 >> 5) == 0;
		TRACE("copy_done %llu.%u attempt %u rank %u %s\n", (unsigned long long)c->tok.id,
		      c->tok.gen, c->tok.attempt, rank, fail ? "FAIL" : "ok");
		CHECK(kva_copy_done(S.e, c->tok, rank, fail ? -5 : 0) == 0);
		copy_report(c, rank, fail);
	} while (all && !c->done);
}

static void op_grow(void)
{
	uint8_t b = fz_u8(&S.in);
	uint8_t c8 = fz_u8(&S.in);
	int i = pick_running(b);
	if (i < 0)
		return;
	struct hreq *r = &S.h[i];
	uint32_t pages = 1 + c8 % 4;
	if (c8 == 0xff) {
		CHECK(kva_grow(S.e, r->h, S.cfg.total_pages + 1, NULL) == -ERANGE);
		return;
	}
	kva_request_info before, after;
	kva_stats s0, s1;
	int q0 = kva_query(S.e, r->h, &before);
	kva_stats_get(S.e, &s0);
	uint32_t ids[8];
	int rc = kva_grow(S.e, r->h, pages, ids);
	TRACE("grow %llu.%u +%u -> %d\n", (unsigned long long)r->h.id, r->h.gen, pages, rc);
	kva_stats_get(S.e, &s1);
	if (!r->running) {
		CHECK(rc == -EBUSY || rc == -ENOENT);
		return;
	}
	CHECK(q0 == 0 && kva_query(S.e, r->h, &after) == 0);
	uint32_t own = before.pages_reserved < pages ? before.pages_reserved : pages;
	if (rc == 0) {
		CHECK(pages - own <= s0.free_pages);
		for (uint32_t k = 0; k < pages; k++)
			hold_page(ids[k], i);
		CHECK(after.pages_held == before.pages_held + pages);
		CHECK(after.pages_reserved == before.pages_reserved - own);
		CHECK(s1.free_pages == s0.free_pages - (pages - own));
		return;
	}
	/* -ENOSPC only when the credits are really not there; nothing changed */
	CHECK(rc == -ENOSPC || (S.fault && rc == -ENOMEM));
	CHECK(rc != -ENOSPC || pages - own > s0.free_pages);
	CHECK(after.pages_held == before.pages_held &&
	      after.pages_reserved == before.pages_reserved);
	CHECK(s1.free_pages == s0.free_pages);
}

static void op_preempt_finish(bool finish)
{
	int i = pick_running(fz_u8(&S.in));
	if (i < 0)
		return;
	struct hreq *r = &S.h[i];
	int rc = finish ? kva_finish(S.e, r->h) : kva_preempt(S.e, r->h);
	TRACE("%s %llu.%u -> %d\n", finish ? "finish" : "preempt", (unsigned long long)r->h.id,
	      r->h.gen, rc);
	if (r->running) {
		CHECK(rc == 0);
		release_pages(i);
		r->running = false;
		if (finish) {
			r->finish_ok = true;
		} else {
			r->preempted = true;
			r->preempt_seq = ++S.preempt_seq;
			r->had_copy = false;
		}
	} else if (finish && r->finish_ok) {
		CHECK(rc == -EALREADY || rc == -ENOENT);
	} else {
		CHECK(rc == -EBUSY || rc == -ENOENT);
	}
}

static void op_dir_set(void)
{
	uint8_t b = fz_u8(&S.in);
	struct dir_entry *d = &S.dir[1 + b % (NKEYS - 1)];
	d->immediate = (b >> 4) & 1;
	manifest_decode(&d->m, S.fit_prompt);
}

static void configure(void)
{
	struct fz *in = &S.in;
	kva_config *c = &S.cfg;
	kva_config_default(c);
	c->total_pages = 4 + fz_below(in, MAXP - 3);
	c->page_tokens = 1u << (fz_u8(in) % 5);
	c->decode_reserve_pages = fz_below(in, c->total_pages / 4 + 1);
	uint8_t b = fz_u8(in);
	c->decode_headroom_pages = b % 3;
	c->copy_slots = (uint16_t)(1 + (b >> 2) % 3);
	c->max_copy_retries = (b >> 4) % 3;
	S.legacy = (b >> 6) == 3;
	S.cost = (b >> 6) == 2;
	c->policy = S.legacy ? KVA_POLICY_LEGACY : S.cost ? KVA_POLICY_COST : KVA_POLICY_WAIT;
	c->prefill_chunk_tokens = 1 + fz_below(in, 16 * c->page_tokens);
	b = fz_u8(in);
	c->max_running = (uint16_t)(1 + b % 8);
	c->world_size = 1 + (b >> 3) % 3;
	S.importers = (b >> 5) % 3 == 0;
	b = fz_u8(in);
	static const uint64_t lookup_to[4] = {0, 1000000000ull, 5000000000ull, 300000000ull};
	static const uint64_t wait_max[4] = {0, 2000000000ull, 60000000000ull, 500000000ull};
	static const uint64_t log_iv[4] = {0, 1000000000ull, 30000000000ull, 250000000ull};
	static const uint64_t refresh[4] = {0, 2000000000ull, 20000000000ull, 700000000ull};
	c->lookup_timeout_ns = lookup_to[b & 3];
	c->max_restore_wait_ns = wait_max[(b >> 2) & 3];
	c->wait_log_interval_ns = log_iv[(b >> 4) & 3];
	c->lookup_refresh_ns = refresh[(b >> 6) & 3];
	c->start_ns = (uint64_t)fz_u8(in) << 32;
	c->lookup = on_lookup;
	for (uint32_t k = 0; k < c->world_size && S.importers; k++)
		c->importers[k].submit = on_import;
	S.usable = c->total_pages - c->decode_reserve_pages;
	S.max_prompt = (c->total_pages + 4) * c->page_tokens;
	S.fit_prompt = S.usable * c->page_tokens;

	/* plan capacities: sometimes tight, to exercise "the rest next step" */
	b = fz_u8(in);
	uint8_t b2 = fz_u8(in);
	kva_plan *p = &S.plan;
	*p = (kva_plan){
	    .admitted = S.adm,
	    .admitted_cap = (b & 1) ? CAP_BIG : 1 + (b >> 1) % 4,
	    .pages = S.pages,
	    .pages_cap = (b & 0x20) ? 4096 : 1 + (b2 % 48),
	    .copies = S.copies,
	    .copies_cap = (b & 0x40) ? CAP_BIG : c->world_size + (b2 >> 6),
	    .fallbacks = S.fb,
	    .fallbacks_cap = (b & 0x80) ? CAP_BIG : (b2 >> 4) % 3,
	    .ended = S.ended,
	    .ended_cap = (b2 & 8) ? CAP_BIG : 1 + (b2 & 7) % 3,
	};
	for (uint32_t k = 1; k < NKEYS; k++) {
		S.dir[k].immediate = (fz_u8(in) & 1) != 0;
		manifest_decode(&S.dir[k].m, S.fit_prompt);
	}
}

/* Reports every copy, finishes and cancels everything, steps until quiet. */
static void final_drain(void)
{
#ifdef KVA_FAULT_INJECTION
	kva__fault_arm(0, 0);
#endif
	S.fault = false;
	for (uint32_t round = 0;; round++) {
		CHECK(round < 4 * MAXH + 64);
		for (uint32_t k = 0; k < S.nc; k++) {
			struct hcopy *c = &S.c[k];
			for (uint32_t rank = 0; rank < S.cfg.world_size && !c->done; rank++)
				if (!(c->reported & (1u << rank))) {
					CHECK(kva_copy_done(S.e, c->tok, rank, 0) == 0);
					copy_report(c, rank, false);
				}
		}
		bool quiet = true;
		for (uint32_t i = 0; i < S.nh; i++) {
			struct hreq *r = &S.h[i];
			if (r->ended)
				continue;
			quiet = false;
			if (r->running) {
				CHECK(kva_finish(S.e, r->h) == 0);
				release_pages((int)i);
				r->running = false;
				r->finish_ok = true;
			} else if (!r->cancel_ok && !r->finish_ok) {
				int rc = kva_cancel(S.e, r->h);
				CHECK(rc == 0 || rc == -ENOENT);
				r->cancel_ok |= rc == 0;
			}
		}
		for (uint32_t k = 0; k < S.nc; k++)
			quiet &= S.c[k].processed;
		if (quiet)
			break;
		do_step(1000000, 0, false);
	}
	kva_stats st;
	kva_stats_get(S.e, &st);
	CHECK(st.free_pages == st.total_pages && st.reserved_pages == 0 && st.in_use_pages == 0 &&
	      st.draining_pages == 0);
	CHECK(st.free_copy_slots == S.cfg.copy_slots && st.free_run_slots == S.cfg.max_running);
	CHECK(st.waiting == 0 && st.importing == 0 && st.ready == 0 && st.running == 0);
	CHECK(st.finished + st.cancelled + st.rejected == S.nsubmitted);
	for (uint32_t i = 0; i < S.nh; i++)
		CHECK(S.h[i].ended);
#ifdef KVA_FAULT_INJECTION
	/* every local entry a manifest held was let go (held.c, held local
	 * checkpoints): a count off by one would keep an id for ever */
	do_step(1000000, 0, false);
	CHECK(kva__held_ids(S.e) == 0);
#endif
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	memset(&S, 0, sizeof(S));
#ifdef KVA_FAULT_INJECTION
	kva__fault_arm(0, 0);
	/* an eviction's walk over several steps, with an input's few sharers */
	kva__evict_step_records_set(1 + (uint32_t)(size % 3));
#endif
	fz_init(&S.in, data, size);
	configure();
	TRACE(
	    "config: pages %u x %u tok, watermark %u, headroom %u, chunk %u, slots %u, running %u, "
	    "world %u, retries %u, %s%s\n",
	    S.cfg.total_pages, S.cfg.page_tokens, S.cfg.decode_reserve_pages,
	    S.cfg.decode_headroom_pages, S.cfg.prefill_chunk_tokens, S.cfg.copy_slots,
	    S.cfg.max_running, S.cfg.world_size, S.cfg.max_copy_retries,
	    S.legacy ? "legacy" : S.cost ? "cost" : "wait", S.importers ? ", importers" : "");
	for (uint32_t q = 0; q < MAXP; q++)
		S.owner[q] = -1;
	S.now = S.cfg.start_ns;
	int err = 1;
	S.e = kva_engine_create(&S.cfg, &err);
	CHECK(S.e && err == 0);

	while (fz_more(&S.in)) {
		uint8_t op = fz_u8(&S.in);
		switch (op % 16) {
		case 0:
			op_submit(false);
			break;
		case 1:
			op_submit(true);
			break;
		case 2:
			op_cancel();
			break;
		case 3:
			op_answer();
			break;
		case 4:
			op_copy_done(false, false);
			break;
		case 5:
			op_copy_done(false, true);
			break;
		case 6:
			op_copy_done(true, false);
			break;
		case 7: {
			uint8_t b = fz_u8(&S.in);
			uint32_t id = 1 + (b & 15) % 12;
			int rc = kva_checkpoint_evicted(S.e, id, b >> 4);
			TRACE("evict ckpt %u epoch %u -> %d\n", id, b >> 4, rc);
			CHECK(rc == 0 || (S.fault && rc == -ENOMEM));
			break;
		}
		case 8:
			op_grow();
			break;
		case 9:
			op_preempt_finish(false);
			break;
		case 10:
			op_preempt_finish(true);
			break;
		case 11:
			TRACE("reset\n");
			CHECK(kva_reset_prefix_cache(S.e) == 0);
			break;
		case 12:
			if (op & 0x80) {
#ifdef KVA_FAULT_INJECTION
				kva__fault_arm(1 + (op >> 4) % 4, 0);
				TRACE("fault: allocation %u from now fails\n", 1 + (op >> 4) % 4);
				S.fault = true;
#endif
			} else if (op & 0x40) {
				op_local();
			} else {
				op_dir_set();
			}
			break;
		default: {
			static const uint64_t dt[8] = {0,
						       1000000ull,
						       10000000ull,
						       200000000ull,
						       1000000000ull,
						       3000000000ull,
						       20000000000ull,
						       70000000000ull};
			uint32_t budget = 0;
			bool hold = false;
			if (op & 0x80) { /* bit 7: a budget, or a step that preempted */
				uint8_t b = fz_u8(&S.in);
				budget = (b & 0x7f) * 8u;
				hold = (b & 0x80) && !budget;
			}
			do_step(dt[(op >> 4) & 7], budget, hold);
			break;
		}
		}
	}
	final_drain();
	kva_engine_destroy(S.e);
	S.e = NULL;
	return 0;
}
