/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The serving loop of one policy: a discrete-event simulation in which the
 * engine decides every admission and the simulator plays the GPU.
 *
 * --nodes N runs N engines (each its own pool, GPU, local cache and copy
 * links) on one clock; they share the checkpoint store and the directory,
 * and agent i is served by engine i mod N.
 *
 * Each engine step, in vLLM v1's order (vllm/v1/core/sched/scheduler.py,
 * Scheduler.schedule): first the running requests take their tokens from the
 * step's token budget — every decoding request its verify tokens, then
 * prefill chunks in admission order (decode-first: vLLM itself takes running
 * requests in list order). Pages come from kva_grow; when it fails the newest
 * running request is preempted (kva_preempt) until it succeeds or the request
 * preempted itself. Then kva_step admits waiting requests within what is left
 * of the budget (kva_plan.token_budget), and nothing new in a step that
 * preempted (kva_plan.hold_admissions) — vLLM schedules waiting requests
 * only `if not preempted_reqs` and `while token_budget > 0`. The new
 * admissions prefill with the rest of the budget. The step's modelled time
 * passes; idle engines wake on their next event (polling every idle_poll_s
 * while requests wait, so the engine's timers fire on time).
 *
 * At the end of the measured window every live request is cancelled and the
 * loop runs on until each is reported ended and every copy has drained; the
 * invariants are then checked on the engine's own statistics.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sim.h"

#define PLAN_CAP 4096

static uint64_t ns_of(double sec)
{
	double ns = ceil(sec * SIM_NS_PER_S);
	return ns < 1 ? 1 : (uint64_t)ns;
}

/* Moves the clock; the window's context-to-pool average integrates here. */
/* The timeline's end-of-bin state: what the engines hold between now and
 * the next event, which is what they held when each boundary passed. */
static void timeline_sample(struct sim *s, uint64_t t_ns)
{
	struct sim_timeline *tl = &s->res->tl;
	while (tl->sampled < tl->n && t_ns >= sim_timeline_bin_end_ns(tl, tl->sampled)) {
		uint64_t total = 0, busy = 0, waiting = 0;
		for (uint32_t i = 0; i < s->n_nodes; i++) {
			kva_stats st;
			kva_stats_get(s->nodes[i].e, &st);
			total += st.total_pages;
			busy += st.total_pages - st.free_pages;
			waiting += st.waiting + st.importing + st.ready;
		}
		tl->capacity[tl->sampled] = total ? (double)busy / (double)total : 0;
		tl->waiting[tl->sampled] = (uint32_t)waiting;
		tl->sampled++;
	}
}

static void advance_to(struct sim *s, uint64_t t_ns)
{
	if (t_ns <= s->now_ns)
		t_ns = s->now_ns + 1;
	if (!s->draining) {
		s->ctx_integral += (double)s->sum_ctx * (double)(t_ns - s->now_ns) / SIM_NS_PER_S;
		timeline_sample(s, t_ns);
	}
	s->now_ns = t_ns;
}

static uint32_t pages_for(const struct sim *s, uint64_t tokens)
{
	return (uint32_t)((tokens + s->sc->page_tokens - 1) / s->sc->page_tokens);
}

static void check_fail(struct sim *s, bool *flag, const char *msg)
{
	if (*flag && !s->res->check_msg[0])
		snprintf(s->res->check_msg, sizeof(s->res->check_msg), "%s at t=%.6f s", msg,
			 (double)s->now_ns / SIM_NS_PER_S);
	*flag = false;
}

/* ---- running list ------------------------------------------------------------ */

static void run_link(struct sim_node *n, struct sim_agent *a)
{
	sim_list_push_back(&n->run, a);
	a->running = true;
	n->n_running++;
}

static void run_unlink(struct sim_node *n, struct sim_agent *a)
{
	sim_list_unlink(&n->run, a);
	a->running = false;
	a->step_tokens = 0;
	n->n_running--;
}

/* An event for an idle engine wakes it now. */
static void wake(struct sim *s, struct sim_node *n)
{
	if (!n->in_step && n->wake_ns > s->now_ns)
		n->wake_ns = s->now_ns;
}

/* ---- turns ------------------------------------------------------------------- */

static void schedule_submit(struct sim *s, struct sim_agent *a, uint64_t at_ns)
{
	struct sim_event ev = {.t_ns = at_ns, .kind = SIM_EV_SUBMIT, .agent = a->index};
	if (sim_clock_push(&s->clock, ev) != 0)
		sim_fatal(s, "event queue", -ENOMEM);
}

static void on_submit(struct sim *s, struct sim_agent *a)
{
	const struct sim_workload *w = &s->sc->w;
	if (s->draining)
		return;
	uint32_t t = a->turn++;
	uint32_t tool = a->fresh ? 0 : sim_draw_tool(w, a->index, t);
	a->decode_total = sim_draw_decode(w, a->index, t);
	if ((uint64_t)a->ctx + tool + a->decode_total > s->sc->m.max_context) {
		/* the window is full: the agent compacts its history into a new
		 * session, which nothing stored covers yet */
		a->session++;
		a->session_turn = 0;
		a->n_ext = 0;
		sim_cache_drop(s, a, true);
		s->sum_ctx -= a->ctx;
		a->ctx = sim_draw_compact(w, a->index, t);
		s->sum_ctx += a->ctx;
		a->prompt = a->ctx;
		s->res->compactions++;
	} else {
		a->prompt = a->ctx + tool;
	}
	a->fresh = false;
	/* README's later turn: the history was stored when the turn began: the
	 * newest stored checkpoint holds all the page-aligned KV the previous
	 * turn left (hist_pos; its last sampled token has no KV, so a history
	 * ending on a page boundary leaves one page less than ctx) */
	a->stored_at_start = a->session_turn > 0 && a->n_ext && a->hist_pos > 0 &&
			     a->ext_pos[0] >= a->hist_pos;
	kva_request r = {
	    .id = a->index + 1, .prefix_key = sim_key(a), .prompt_tokens = a->prompt, .user = a};
	int rc = kva_submit(sim_node_of(s, a)->e, &r, &a->h);
	if (rc != 0) {
		sim_fatal(s, "kva_submit", rc);
		return;
	}
	wake(s, sim_node_of(s, a));
	a->live = true;
	a->submits++;
	a->decoded = 0;
	a->spec_acc = 0;
	a->has_first_token = false;
	a->recomputed_prefix = false;
	a->admitted_once = false;
	a->turn_local = a->turn_ext = 0;
	a->turn_start_ns = s->now_ns;
}

static void finish_turn(struct sim *s, struct sim_agent *a)
{
	struct sim_result *res = s->res;
	struct sim_node *n = sim_node_of(s, a);
	int rc = kva_finish(n->e, a->h);
	if (rc != 0) {
		sim_fatal(s, "kva_finish", rc);
		return;
	}
	run_unlink(n, a);
	uint32_t pt = s->sc->page_tokens;
	sim_cache_put(s, a, a->kv / pt);
	sim_store_write(s, a, a->kv / pt * pt);
	uint32_t hist = a->hist_pos < a->prompt ? a->hist_pos : a->prompt;
	a->hist_pos = a->kv / pt * pt;
	s->sum_ctx += a->prompt + a->decode_total - a->ctx;
	a->ctx = a->prompt + a->decode_total;
	res->turns_completed++;
	if (sim_samples_add(&res->turn_s, (double)(s->now_ns - a->turn_start_ns) / SIM_NS_PER_S))
		sim_fatal(s, "samples", -ENOMEM);
	res->turn_prompt_tokens += a->prompt;
	res->turn_local_tokens += a->turn_local;
	res->turn_ext_tokens += a->turn_ext;
	uint32_t bin = sim_timeline_bin(&res->tl, s->now_ns);
	res->tl.turn_prompt[bin] += a->prompt;
	res->tl.turn_cached[bin] += a->turn_local + a->turn_ext;
	/* where the turn's uncached tokens are */
	uint32_t miss = a->prompt - a->turn_local - a->turn_ext;
	if (a->session_turn == 0) {
		res->first_turns++;
		res->miss_first += miss;
	} else {
		uint32_t fresh = a->prompt - hist; /* the tool output, the page's rest */
		uint32_t nw = miss < fresh ? miss : fresh;
		res->miss_new += nw;
		res->miss_other += miss - nw;
		res->later_prompt_tokens += a->prompt;
		res->later_cached_tokens += a->prompt - miss;
		res->later_turns++;
		if (!a->recomputed_prefix)
			res->later_turns_restored++;
	}
	if (a->stored_at_start) {
		res->later_stored++;
		if (!a->recomputed_prefix)
			res->later_stored_restored++;
	}
	a->session_turn++;
	schedule_submit(s, a,
			s->now_ns + ns_of(sim_draw_think_s(&s->sc->w, a->index, a->turn - 1)));
}

/* ---- the engine's plan --------------------------------------------------------- */

/* Legacy with --keep-local: the pages of the local hit a recompute of a keeps
 * (vLLM's get_computed_blocks, found before the connector is asked): page-
 * aligned, at least one token left to compute, a recurrent bundle only whole
 * and only if it ends within what is recomputed. 0: none. */
static uint32_t kept_local_pages(const struct sim *s, const struct sim_agent *a)
{
	uint32_t pt = s->sc->page_tokens;
	if (s->policy != SIM_POLICY_LEGACY || !s->sc->keep_local || !a->in_lru)
		return 0;
	uint64_t cap = ((uint64_t)a->prompt + a->decoded - 1) / pt * pt;
	uint64_t have = (uint64_t)a->local_pages * pt;
	if (s->sc->local_boundary && have > cap)
		return 0;
	return (uint32_t)((have < cap ? have : cap) / pt);
}

static void take_admission(struct sim_node *n, const kva_admission *ad)
{
	struct sim *s = n->s;
	struct sim_agent *a = ad->user;
	uint32_t pt = s->sc->page_tokens;
	if (!a || ad->handle.id != a->h.id || ad->handle.gen != a->h.gen ||
	    ad->handle.slot != a->h.slot || !a->live || a->node != n->index) {
		sim_fatal(s, "admission of an unknown or ended request", -EINVAL);
		return;
	}
	if (s->draining) {
		bool f = true;
		check_fail(s, &f, "admission after cancel");
		s->res->all_terminal = false;
		return;
	}
	uint32_t local = ad->local_tokens, ext = ad->restored_tokens;
	uint32_t kept_pages = 0; /* a kept local hit's pages, taken beyond ad->npages */
	if (ad->how == KVA_ADMIT_RECOMPUTE && ad->reason == KVA_REASON_LEGACY &&
	    (kept_pages = kept_local_pages(s, a)) != 0) {
		/* The engine granted a recompute's first chunk only; the kept
		 * prefix needs its own pages on top (node_step held admissions
		 * while they did not fit). Taken now, or, if this step's other
		 * admissions took them, the engine's recompute from 0 stands:
		 * the admission must not preempt itself before it ran a token. */
		kva_stats st;
		kva_stats_get(n->e, &st);
		uint32_t reserve = sim_decode_reserve_pages(s->sc);
		int rc = st.free_pages >= (uint64_t)kept_pages + reserve
			     ? kva_grow(n->e, a->h, kept_pages, NULL)
			     : -ENOSPC;
		if (rc == -ENOSPC)
			kept_pages = 0;
		else if (rc != 0) {
			sim_fatal(s, "kva_grow", rc);
			return;
		}
	}
	if (ad->how == KVA_ADMIT_LOCAL) {
		uint64_t have = a->in_lru ? (uint64_t)a->local_pages * pt : 0;
		if (have < local) {
			/* the engine reused a local checkpoint the cache no longer
			 * holds: only what is still there counts for the GPU */
			s->res->stale_local++;
			local = (uint32_t)have;
		}
		sim_cache_drop(s, a, false); /* its pages are this request's now */
	} else if (kept_pages) {
		/* vLLM: the local prefix-cache hit (get_computed_blocks) is found
		 * before the connector is asked; refusing the external part does
		 * not drop it (kept_local_pages). */
		local = kept_pages * pt;
		s->res->kept_local++;
		s->res->kept_local_tokens += local;
		sim_cache_drop(s, a, false);
	} else {
		sim_cache_drop(s, a, true); /* a stale duplicate of what it rebuilds */
	}
	if (ad->how == KVA_ADMIT_RECOMPUTE && a->session_turn > 0)
		a->recomputed_prefix = true;
	if (!a->admitted_once) {
		/* counted once per turn, at its first admission, as vLLM's
		 * num_cached_tokens (the API's cached_tokens) is */
		uint32_t cap = a->prompt;
		a->turn_local = local < cap ? local : cap;
		a->turn_ext = ext < cap - a->turn_local ? ext : cap - a->turn_local;
	}
	a->admitted_once = true;
	a->kv = local + ext;
	a->admit_pos = a->kv;
	a->held_pages = ad->npages + kept_pages;
	/* after a preemption the tokens decoded so far are prefilled again */
	a->prefill_left = a->prompt + a->decoded - a->kv;
	run_link(n, a);
}

static void take_ended(struct sim *s, const kva_ended *en)
{
	struct sim_agent *a = en->user;
	struct sim_result *res = s->res;
	if (!a) {
		sim_fatal(s, "ended report without its request", -EINVAL);
		return;
	}
	/* an agent's requests run one after another: a repeat is a double report */
	if (a->ended_reports && en->handle.slot == a->last_ended.slot &&
	    en->handle.gen == a->last_ended.gen)
		check_fail(s, &res->reported_once, "a request reported ended twice");
	a->last_ended = en->handle;
	a->ended_reports++;
	if (en->state == KVA_STATE_REJECTED)
		check_fail(s, &res->reported_once, "a request was rejected as a duplicate");
	if (en->handle.gen == a->h.gen && en->handle.slot == a->h.slot)
		a->live = false;
}

static void take_plan(struct sim_node *n)
{
	for (uint32_t i = 0; i < n->plan.n_ended; i++)
		take_ended(n->s, &n->plan.ended[i]);
	for (uint32_t i = 0; i < n->plan.n_admitted && !n->s->fatal; i++)
		take_admission(n, &n->plan.admitted[i]);
}

/* ---- the GPU step ------------------------------------------------------------ */

static void preempt(struct sim_node *n, struct sim_agent *v)
{
	struct sim *s = n->s;
	int rc = kva_preempt(n->e, v->h);
	if (rc != 0) {
		sim_fatal(s, "kva_preempt", rc);
		return;
	}
	run_unlink(n, v);
	n->preempted = true;
	s->res->preempt_calls++;
	/* its pages return to the pool still holding its KV. A recurrent
	 * model has state only at request boundaries: its prompt's end once
	 * the prompt is prefilled, else the bundle it was admitted from */
	uint32_t keep = v->kv;
	if (s->sc->local_boundary)
		keep = v->kv >= v->prompt ? v->prompt : v->admit_pos;
	sim_cache_put(s, v, keep / s->sc->page_tokens);
}

/* Pages for `tokens` more tokens of a; preempts from the newest running
 * request on while the pool is full. false when a preempted itself. */
static bool grow_for(struct sim_node *n, struct sim_agent *a, uint32_t tokens)
{
	struct sim *s = n->s;
	uint32_t want = pages_for(s, (uint64_t)a->kv + tokens);
	if (want <= a->held_pages)
		return true;
	uint32_t need = want - a->held_pages;
	for (;;) {
		int rc = kva_grow(n->e, a->h, need, NULL);
		if (rc == 0) {
			a->held_pages += need;
			return true;
		}
		if (rc != -ENOSPC) {
			sim_fatal(s, "kva_grow", rc);
			return false;
		}
		struct sim_agent *victim = n->run.tail;
		preempt(n, victim);
		if (s->fatal || victim == a)
			return false;
	}
}

/* Gives the running requests from `from` on their tokens of this step:
 * decoding ones their verify tokens (reserved first, decode-first), then
 * prefill chunks in admission order within `*prefill_budget`. */
static void schedule_from(struct sim_node *n, struct sim_agent *from, struct sim_batch *b,
			  uint32_t *prefill_budget)
{
	struct sim *s = n->s;
	uint32_t verify = s->sc->m.spec_verify ? s->sc->m.spec_verify : 1;
	for (struct sim_agent *a = from; a && !s->fatal;) {
		uint32_t tok;
		if (a->prefill_left)
			tok = a->prefill_left < *prefill_budget ? a->prefill_left : *prefill_budget;
		else {
			uint32_t left = a->decode_total - a->decoded;
			tok = left < verify ? left : verify;
		}
		a->step_tokens = 0;
		if (!tok) {
			a = sim_list_next(&n->run, a);
			continue;
		}
		if (!grow_for(n, a, tok))
			break; /* a was the newest: nothing after it */
		a->step_tokens = tok;
		if (a->prefill_left) {
			*prefill_budget -= tok;
			b->prefill_tokens += tok;
			double p0 = a->kv, p1 = (double)a->kv + tok;
			b->attn_tok2 += p1 * p1 - p0 * p0;
		} else {
			b->n_decode++;
			b->decode_tokens += tok;
			b->decode_ctx += a->kv;
		}
		a = sim_list_next(&n->run, a);
	}
}

/* The step's work is done at s->now_ns: KV written, tokens sampled. */
static void gpu_complete(struct sim_node *n)
{
	struct sim *s = n->s;
	struct sim_result *res = s->res;
	uint32_t accept = s->sc->m.spec_accept_milli ? s->sc->m.spec_accept_milli : 1000;
	for (struct sim_agent *a = n->run.head, *next; a && !s->fatal; a = next) {
		next = sim_list_next(&n->run, a);
		uint32_t tok = a->step_tokens;
		if (!tok)
			continue;
		a->step_tokens = 0;
		uint32_t out = 1;
		if (a->prefill_left) {
			a->kv += tok;
			a->prefill_left -= tok;
			if (a->prefill_left)
				continue;
		} else {
			/* speculative decoding keeps spec_accept tokens a step on
			 * average (carried in thousandths, deterministic) */
			a->spec_acc += accept;
			out = a->spec_acc / 1000;
			a->spec_acc %= 1000;
			if (out > tok)
				out = tok;
			if (out < 1)
				out = 1;
			a->kv += out;
		}
		/* a decode step, or the step that completed the prefill */
		a->decoded += out;
		res->decode_tokens += out;
		res->tl.decode_tokens[sim_timeline_bin(&res->tl, s->now_ns)] += out;
		if (!a->has_first_token) {
			a->has_first_token = true;
			if (sim_samples_add(&res->ttft_s,
					    (double)(s->now_ns - a->turn_start_ns) / SIM_NS_PER_S))
				sim_fatal(s, "samples", -ENOMEM);
		}
		if (a->decoded >= a->decode_total)
			finish_turn(s, a);
	}
}

/* ---- events ------------------------------------------------------------------- */

static void deliver_due(struct sim *s)
{
	struct sim_event ev;
	while (!s->fatal && sim_clock_pop_due(&s->clock, s->now_ns, &ev)) {
		switch (ev.kind) {
		case SIM_EV_SUBMIT:
			on_submit(s, &s->agents[ev.agent]);
			break;
		case SIM_EV_ANSWER: {
			uint32_t idx = (uint32_t)(ev.u.lookup.key & 0xffffffffu) - 1;
			sim_dir_answer(s, &ev);
			if (idx < s->sc->w.agents)
				wake(s, sim_node_of(s, &s->agents[idx]));
			break;
		}
		case SIM_EV_COPY: {
			struct sim_node *n = &s->nodes[ev.node];
			int rc =
			    kva_copy_done(n->e, ev.u.copy.token, ev.u.copy.rank, ev.u.copy.status);
			if (rc != 0)
				sim_fatal(s, "kva_copy_done", rc);
			wake(s, n);
			break;
		}
		case SIM_EV_WRITE:
			sim_store_written(s, &ev);
			break;
		}
	}
}

/* ---- checks -------------------------------------------------------------------- */

static void check_running(struct sim_node *n)
{
	struct sim *s = n->s;
	kva_stats st;
	kva_stats_get(n->e, &st);
	if (st.free_pages + st.reserved_pages + st.in_use_pages + st.draining_pages !=
	    st.total_pages)
		check_fail(s, &s->res->credits_conserved, "free+reserved+in_use+draining != total");
	uint64_t held = 0;
	for (struct sim_agent *a = n->run.head; a; a = sim_list_next(&n->run, a))
		held += a->held_pages;
	if (!s->draining && held != st.in_use_pages)
		check_fail(s, &s->res->page_accounting, "pages held by running requests != in_use");
}

static void check_end(struct sim *s)
{
	struct sim_result *res = s->res;
	uint64_t submitted = 0, terminal = 0;
	bool busy = false;
	for (uint32_t i = 0; i < s->n_nodes; i++) {
		kva_stats st;
		kva_stats_get(s->nodes[i].e, &st);
		if (st.free_pages + st.reserved_pages + st.in_use_pages + st.draining_pages !=
		    st.total_pages)
			check_fail(s, &res->credits_conserved, "credits not conserved at the end");
		if (st.free_pages != st.total_pages || st.draining_pages || st.reserved_pages ||
		    st.in_use_pages || st.free_copy_slots != s->sc->copy_slots ||
		    st.free_run_slots != s->sc->m.max_running)
			check_fail(s, &res->no_leaked_pages,
				   "pages, copy slots or run slots not all free");
		busy |= st.waiting || st.importing || st.ready || st.running;
		if (st.finished + st.cancelled + st.rejected != st.submitted)
			busy = true;
		submitted += st.submitted;
		terminal += st.finished + st.cancelled + st.rejected;
	}
	uint64_t submits = 0, reports = 0;
	bool live = false;
	for (uint32_t i = 0; i < s->sc->w.agents; i++) {
		submits += s->agents[i].submits;
		reports += s->agents[i].ended_reports;
		live |= s->agents[i].live;
	}
	if (live || busy || terminal != submitted || submitted != submits)
		check_fail(s, &res->all_terminal, "a request is not terminal");
	if (reports != submits)
		check_fail(s, &res->reported_once, "ended reports != submissions");
}

/* ---- the run --------------------------------------------------------------------- */

/* The engines' statistics, summed over nodes (the fields the report reads). */
static void stats_add(kva_stats *d, const kva_stats *x)
{
#define ADD(f) d->f += x->f
	ADD(prompt_tokens_admitted);
	ADD(tokens_local);
	ADD(tokens_restored);
	ADD(tokens_recomputed);
	ADD(preempted);
	ADD(admitted_restore);
	ADD(admitted_local);
	ADD(admitted_recompute);
	ADD(steps);
	ADD(lookups_issued);
	ADD(lookups_timed_out);
	ADD(late_answers);
	ADD(refreshes);
	ADD(revalidations);
	ADD(copy_jobs);
	ADD(copy_attempts_failed);
	ADD(copy_retries);
	ADD(shorter_fallbacks);
	ADD(restore_blocked_steps);
	ADD(wait_expired);
	for (int k = 0; k < KVA_REASON_COUNT; k++)
		ADD(fallbacks[k]);
#undef ADD
}

static void start_drain(struct sim *s)
{
	struct sim_result *res = s->res;
	memset(&res->st, 0, sizeof(res->st));
	for (uint32_t i = 0; i < s->n_nodes; i++) {
		kva_stats st;
		kva_stats_get(s->nodes[i].e, &st);
		stats_add(&res->st, &st);
	}
	double pool = (double)s->sc->pool_pages * s->sc->page_tokens * s->n_nodes;
	res->ctx_to_pool_end = (double)s->sum_ctx / pool;
	res->ctx_to_pool_mean = s->ctx_integral / s->sc->duration_s / pool;
	double age = 0;
	for (uint32_t i = 0; i < s->sc->w.agents; i++)
		if (s->agents[i].live) {
			res->in_flight++;
			age += (double)(s->now_ns - s->agents[i].turn_start_ns) / SIM_NS_PER_S;
		}
	res->in_flight_age_s = res->in_flight ? age / res->in_flight : 0;
	s->draining = true;
	for (uint32_t i = 0; i < s->sc->w.agents && !s->fatal; i++) {
		struct sim_agent *a = &s->agents[i];
		struct sim_node *n = sim_node_of(s, a);
		if (a->running)
			run_unlink(n, a);
		if (!a->live)
			continue;
		int rc = kva_cancel(n->e, a->h);
		/* -ENOENT: finished a moment ago, its report is on the way */
		if (rc != 0 && rc != -ENOENT)
			sim_fatal(s, "kva_cancel", rc);
	}
	for (uint32_t i = 0; i < s->n_nodes; i++)
		s->nodes[i].in_step = false;
}

static bool drained(struct sim *s)
{
	if (s->clock.n_copies)
		return false;
	for (uint32_t i = 0; i < s->sc->w.agents; i++)
		if (s->agents[i].live)
			return false;
	return true;
}

static void progress(struct sim *s, int *shown)
{
	int pct = (int)(100.0 * (double)s->now_ns / (double)s->end_ns);
	if (pct > 100)
		pct = 100;
	if (pct == *shown)
		return;
	*shown = pct;
	char bar[41];
	int fill = pct * 40 / 100;
	for (int i = 0; i < 40; i++)
		bar[i] = i < fill ? '#' : '.';
	bar[40] = '\0';
	fprintf(stderr, "\rkvadmit-sim %-6s [%s] %3d%%  t=%.0f/%.0f s",
		s->policy == SIM_POLICY_WAIT ? "wait" : "legacy", bar, pct,
		(double)s->now_ns / SIM_NS_PER_S, s->sc->duration_s);
	fflush(stderr);
}

static int engine_create(struct sim_node *n)
{
	struct sim *s = n->s;
	const struct sim_scenario *sc = s->sc;
	kva_config c;
	kva_config_default(&c);
	c.total_pages = sc->pool_pages;
	c.page_tokens = sc->page_tokens;
	c.decode_reserve_pages = sim_decode_reserve_pages(sc);
	c.decode_headroom_pages = sim_headroom_pages(sc);
	c.prefill_chunk_tokens = sc->m.step_token_budget;
	c.copy_slots = (uint16_t)sc->copy_slots;
	c.max_running = sc->m.max_running;
	c.world_size = sc->world_size;
	c.max_copy_retries = sc->m.max_copy_retries;
	c.lookup_timeout_ns = (uint64_t)llround(sc->lookup_timeout_s * SIM_NS_PER_S);
	c.max_restore_wait_ns = (uint64_t)llround(sc->max_restore_wait_s * SIM_NS_PER_S);
	c.policy = s->policy == SIM_POLICY_WAIT ? KVA_POLICY_WAIT : KVA_POLICY_LEGACY;
	c.lookup = sim_dir_lookup_cb;
	c.lookup_ctx = n;
	for (uint32_t r = 0; r < sc->world_size; r++)
		c.importers[r] = (kva_importer_ref){sim_import_cb, n};
	c.start_ns = 0;
	int err = 0;
	n->e = kva_engine_create(&c, &err);
	if (!n->e)
		sim_fatal(s, "kva_engine_create", err);
	return n->e ? 0 : err;
}

static int plan_alloc(struct sim_node *n)
{
	kva_plan *p = &n->plan;
	uint32_t pool = n->s->sc->pool_pages;
	memset(p, 0, sizeof(*p));
	p->admitted = calloc(PLAN_CAP, sizeof(*p->admitted));
	p->pages = calloc(pool, sizeof(*p->pages));
	p->copies = calloc(PLAN_CAP, sizeof(*p->copies));
	p->fallbacks = calloc(PLAN_CAP, sizeof(*p->fallbacks));
	p->ended = calloc(PLAN_CAP, sizeof(*p->ended));
	p->admitted_cap = p->copies_cap = p->fallbacks_cap = p->ended_cap = PLAN_CAP;
	p->pages_cap = pool;
	return p->admitted && p->pages && p->copies && p->fallbacks && p->ended ? 0 : -ENOMEM;
}

static void plan_free(kva_plan *p)
{
	free(p->admitted);
	free(p->pages);
	free(p->copies);
	free(p->fallbacks);
	free(p->ended);
}

static void agents_init(struct sim *s)
{
	const struct sim_scenario *sc = s->sc;
	uint32_t pt = sc->page_tokens;
	for (uint32_t i = 0; i < sc->w.agents; i++) {
		struct sim_agent *a = &s->agents[i];
		a->index = i;
		a->node = i % s->n_nodes;
		a->session = 1;
		if (sc->w.warm) {
			/* a warm session: its history was checkpointed before t = 0 */
			a->ctx = sim_draw_init_ctx(&sc->w, i);
			a->session_turn = 1;
			a->ext_pos[0] = a->ctx / pt * pt;
			a->hist_pos = a->ext_pos[0];
			a->ext_id[0] = (uint64_t)(i + 1) << 32 | ++a->ext_seq;
			a->n_ext = a->ext_pos[0] ? 1 : 0;
		} else {
			/* cold: the session begins at its first turn */
			a->ctx = sim_draw_first(&sc->w, i, 0);
			a->session_turn = 0;
			a->n_ext = 0;
			a->fresh = true;
		}
		s->sum_ctx += a->ctx;
		schedule_submit(s, a, ns_of(sim_draw_start_s(&sc->w, i)));
	}
}

static double wall_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int head_of(void *ctx, const kva_waiting_info *w)
{
	*(struct sim_agent **)ctx = w->user;
	return 1;
}

/* Legacy with --keep-local: vLLM schedules a waiting request with a local
 * hit only when the pool holds the hit's pages and its first chunk
 * (allocate_slots counts the hit's evictable cached blocks among those it
 * allocates) and otherwise admits nothing more this step; the engine's
 * legacy recompute checks its first chunk from token 0 only. When the FCFS
 * head would keep a hit that does not fit, hold this step's admissions. (A
 * restore or local admission of the head would need its whole prompt, more
 * than that: none is lost. Not while restores own pages: a hold would stop
 * READY ones too.) */
static bool kept_local_waits(struct sim_node *n, uint32_t prefill_budget)
{
	struct sim *s = n->s;
	struct sim_agent *a = NULL;
	if (s->policy != SIM_POLICY_LEGACY || !s->sc->keep_local)
		return false;
	if (kva_waiting_foreach(n->e, head_of, &a, 1) != 1 || !a)
		return false;
	uint32_t kept = kept_local_pages(s, a);
	if (!kept)
		return false;
	uint32_t pt = s->sc->page_tokens;
	uint64_t rest = (uint64_t)a->prompt + a->decoded - (uint64_t)kept * pt;
	uint64_t chunk = s->sc->m.step_token_budget;
	if (chunk > prefill_budget)
		chunk = prefill_budget;
	if (rest < chunk)
		chunk = rest;
	kva_stats st;
	kva_stats_get(n->e, &st);
	if (st.importing || st.ready)
		return false; /* a hold would keep them from the pages they own */
	uint64_t need = (uint64_t)kept + pages_for(s, chunk) + sim_decode_reserve_pages(s->sc);
	return st.free_pages < need;
}

/* One scheduler iteration of engine n at s->now_ns: the GPU step that ends
 * now completes, the running requests take their tokens, the engine admits
 * within the rest, and the next GPU step starts (or the engine idles). */
static void node_step(struct sim_node *n)
{
	struct sim *s = n->s;
	const struct sim_scenario *sc = s->sc;
	if (n->in_step) {
		n->in_step = false;
		gpu_complete(n);
		sim_cache_fit(n);
		if (s->fatal)
			return;
	}
	struct sim_batch b;
	memset(&b, 0, sizeof(b));
	n->preempted = false;
	uint32_t verify = sc->m.spec_verify ? sc->m.spec_verify : 1;
	uint32_t decode_cost = 0;
	for (struct sim_agent *a = n->run.head; a; a = sim_list_next(&n->run, a))
		decode_cost += a->prefill_left == 0 ? verify : 0;
	uint32_t budget = sc->m.step_token_budget;
	uint32_t prefill_budget = budget > decode_cost ? budget - decode_cost : 0;
	schedule_from(n, n->run.head, &b, &prefill_budget);
	if (s->fatal)
		return;
	struct sim_agent *old_tail = n->run.tail;
	/* vLLM: waiting requests only within the budget left, none in a step
	 * that preempted (token_budget 0 would mean unlimited: hold instead) */
	n->plan.token_budget = prefill_budget;
	n->plan.hold_admissions = n->preempted || prefill_budget == 0;
	if (n->preempted)
		s->res->hold_steps++;
	else if (!prefill_budget)
		s->res->budget_steps++;
	else if (kept_local_waits(n, prefill_budget))
		n->plan.hold_admissions = true;
	/* the grows above took free credits: cached pages they reached are
	 * gone before the engine admits anything from them */
	sim_cache_fit(n);
	if (s->fatal)
		return;
	sim_fleetdir_before_step(s, n);
	int rc = kva_step(n->e, s->now_ns, &n->plan);
	if (rc < 0) {
		sim_fatal(s, "kva_step", rc);
		return;
	}
	take_plan(n);
	sim_cache_fit(n);
	check_running(n);
	if (s->fatal)
		return;
	struct sim_agent *first_new = old_tail ? sim_list_next(&n->run, old_tail) : n->run.head;
	uint64_t preempted_before = s->res->preempt_calls;
	if (first_new)
		schedule_from(n, first_new, &b, &prefill_budget);
	/* every admission owns the pages of its first chunk: one preempted
	 * here was admitted in vain (counted: the scenario tests expect 0) */
	s->res->preempted_at_admission += s->res->preempt_calls - preempted_before;
	if (s->fatal)
		return;
	if (b.n_decode || b.prefill_tokens) {
		double dt = sim_gpu_step_s(&sc->m, &b);
		double left = (double)(s->end_ns - s->now_ns) / SIM_NS_PER_S;
		s->res->gpu_busy_s += dt < left ? dt : left;
		s->res->gpu_steps++;
		n->in_step = true;
		n->wake_ns = s->now_ns + ns_of(dt);
		return;
	}
	/* idle: sleep until an event for it, polling while requests wait */
	kva_stats st;
	kva_stats_get(n->e, &st);
	if (st.waiting + st.importing + st.ready > 0 || n->plan.backlog) {
		n->wake_ns = s->now_ns + ns_of(sc->m.idle_poll_s);
		s->res->idle_polls++;
	} else {
		n->wake_ns = UINT64_MAX;
	}
}

static void loop(struct sim *s)
{
	const struct sim_scenario *sc = s->sc;
	uint64_t poll_ns = ns_of(sc->m.idle_poll_s);
	int shown = -1;
	/* the progress line appears only once the command has run a while */
	double quiet_until = sc->progress_after_s;
	uint32_t iter = 0;
	bool show = false;
	while (!s->fatal) {
		if (!s->draining && s->now_ns >= s->end_ns)
			start_drain(s);
		deliver_due(s);
		if (sc->progress && !show && (++iter & 1023) == 0)
			show = wall_now() >= quiet_until;
		if (show && !s->draining)
			progress(s, &shown);
		if (s->draining) {
			for (uint32_t i = 0; i < s->n_nodes && !s->fatal; i++) {
				struct sim_node *n = &s->nodes[i];
				n->plan.token_budget = 0;
				n->plan.hold_admissions = false;
				sim_fleetdir_before_step(s, n);
				int rc = kva_step(n->e, s->now_ns, &n->plan);
				if (rc < 0) {
					sim_fatal(s, "kva_step", rc);
					break;
				}
				take_plan(n);
				sim_cache_fit(n);
				check_running(n);
			}
			if (s->fatal || drained(s))
				break;
			/* copies still draining: their reports are events; cancels
			 * take effect at the next step */
			uint64_t next = sim_clock_next(&s->clock);
			advance_to(s, next < s->now_ns + poll_ns ? next : s->now_ns + poll_ns);
			continue;
		}
		for (uint32_t i = 0; i < s->n_nodes && !s->fatal; i++)
			if (s->nodes[i].wake_ns <= s->now_ns)
				node_step(&s->nodes[i]);
		uint64_t next = sim_clock_next(&s->clock);
		for (uint32_t i = 0; i < s->n_nodes; i++)
			if (s->nodes[i].wake_ns < next)
				next = s->nodes[i].wake_ns;
		advance_to(s, next < s->end_ns ? next : s->end_ns);
	}
	if (show)
		fprintf(stderr, "\r\033[K");
}

int sim_run_policy(const struct sim_scenario *sc, int policy, struct sim_result *res)
{
	memset(res, 0, sizeof(*res));
	res->policy = policy;
	if (sim_timeline_init(&res->tl, sc->duration_s) != 0) {
		fprintf(stderr, "kvadmit-sim: out of memory\n");
		return -ENOMEM;
	}
	res->credits_conserved = res->no_leaked_pages = res->all_terminal = res->reported_once =
	    res->page_accounting = true;
	struct sim s;
	memset(&s, 0, sizeof(s));
	s.sc = sc;
	s.policy = policy;
	s.res = res;
	s.end_ns = (uint64_t)llround(sc->duration_s * SIM_NS_PER_S);
	double t0 = wall_now();
	int rc = -ENOMEM;
	s.n_nodes = sc->nodes;
	s.agents = calloc(sc->w.agents, sizeof(*s.agents));
	s.nodes = calloc(s.n_nodes, sizeof(*s.nodes));
	if (!s.agents || !s.nodes || sim_clock_init(&s.clock) != 0) {
		sim_fatal(&s, "allocation", -ENOMEM);
		goto out;
	}
	for (uint32_t i = 0; i < s.n_nodes; i++) {
		struct sim_node *n = &s.nodes[i];
		n->s = &s;
		n->index = i;
		n->run.which = SIM_LIST_RUN;
		n->lru.which = SIM_LIST_LRU;
		n->wake_ns = UINT64_MAX;
		if (plan_alloc(n) != 0) {
			sim_fatal(&s, "allocation", -ENOMEM);
			goto out;
		}
		if ((rc = engine_create(n)) != 0)
			goto out;
	}
	agents_init(&s);
	if (sc->directory == SIM_DIR_FLEET && (rc = sim_fleetdir_create(&s)) != 0) {
		sim_fatal(&s, "fleet directory", rc);
		goto out;
	}
	loop(&s);
	if (!s.fatal)
		check_end(&s);
out:
	sim_fleetdir_destroy(&s); /* before the engines it answers */
	if (s.nodes)
		for (uint32_t i = 0; i < s.n_nodes; i++) {
			if (s.nodes[i].e)
				kva_engine_destroy(s.nodes[i].e);
			plan_free(&s.nodes[i].plan);
		}
	res->wall_s = wall_now() - t0;
	sim_clock_fini(&s.clock);
	free(s.agents);
	free(s.nodes);
	if (s.fatal) {
		fprintf(stderr, "kvadmit-sim: %s policy: %s\n",
			policy == SIM_POLICY_WAIT ? "wait" : "legacy", s.fatal_msg);
		return s.fatal;
	}
	return 0;
}

void sim_result_free(struct sim_result *r)
{
	sim_samples_free(&r->turn_s);
	sim_samples_free(&r->ttft_s);
	sim_timeline_free(&r->tl);
}
