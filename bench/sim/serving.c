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
 *
 * This file holds the run: setup, the loop, each engine's step and the
 * drain. Its parts: serving_turns.c (turns, the running list),
 * serving_plan.c (taking kva_step's plan), serving_gpu.c (the GPU step),
 * serving_events.c (events), serving_checks.c (the invariants).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "serving_parts.h"

#define PLAN_CAP 4096

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

/* Moves the clock; the window's context-to-pool average integrates here. */
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
	ADD(cost_restores);
	ADD(cost_other_checkpoint);
	ADD(cost_recomputes);
	for (int k = 0; k < KVA_REASON_COUNT; k++)
		ADD(fallbacks[k]);
#undef ADD
	/* the learned rates: the last engine's (--nodes 1: its own) */
	d->prefill_tokens_per_s = x->prefill_tokens_per_s;
	d->prefill_attn_ps = x->prefill_attn_ps;
	for (int t = 0; t < KVA_TIER_COUNT; t++) {
		d->tier_bytes_per_s[t] = x->tier_bytes_per_s[t];
		d->tier_setup_ns[t] = x->tier_setup_ns[t];
	}
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
			sim_run_unlink(n, a);
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
		sim_policy_name(s->policy), bar, pct,
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
	c.policy = s->policy == SIM_POLICY_WAIT   ? KVA_POLICY_WAIT
		   : s->policy == SIM_POLICY_COST ? KVA_POLICY_COST
						  : KVA_POLICY_LEGACY;
	/* the cost policy's seeds: what the scenario says of its GPU and tiers (the
	 * engine learns the rest from the copies and the prefill steps it sees) */
	c.cost.page_bytes = (uint64_t)llround(sc->m.kv_bytes_per_token * sc->page_tokens);
	c.cost.prefill_tokens_per_s = (uint64_t)llround(sc->m.prefill_tok_s);
	c.cost.prefill_attn_ps = (uint64_t)llround(sc->m.attn_s_per_tok2 * 1e12);
	for (int t = 0; t < KVA_TIER_COUNT; t++) {
		c.cost.tier_bytes_per_s[t] = (uint64_t)llround(sc->tier[0].bytes_s * sc->world_size);
		c.cost.tier_setup_ns[t] = (uint64_t)llround(sc->tier[0].setup_s * SIM_NS_PER_S);
	}
	for (int i = 0; i < 2; i++) {
		c.cost.tier_bytes_per_s[sc->tier[i].kind] =
		    (uint64_t)llround(sc->tier[i].bytes_s * sc->world_size);
		c.cost.tier_setup_ns[sc->tier[i].kind] =
		    (uint64_t)llround(sc->tier[i].setup_s * SIM_NS_PER_S);
	}
	c.cost.margin_pct = (uint32_t)llround(sc->cost_margin * 100);
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
			a->ext_tier[0] = sim_store_tier(s, a);
			a->n_ext = a->ext_pos[0] ? 1 : 0;
		} else {
			/* cold: the session begins at its first turn */
			a->ctx = sim_draw_first(&sc->w, i, 0);
			a->session_turn = 0;
			a->n_ext = 0;
			a->fresh = true;
		}
		s->sum_ctx += a->ctx;
		sim_schedule_submit(s, a, sim_ns_of(sim_draw_start_s(&sc->w, i)));
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
	uint32_t kept = sim_kept_local_pages(s, a);
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
	uint64_t need = (uint64_t)kept + sim_pages_for(s, chunk) + sim_decode_reserve_pages(s->sc);
	return st.free_pages < need;
}

/* The copy-slot saturation check (README "Store tiers"): the time each turn
 * waited at the head for a copy slot alone (its pages were free), against
 * the engine's predicted recompute time (kva_query) plus the margin. One
 * head a step: O(1). */
static void slot_wait_track(struct sim_node *n)
{
	struct sim *s = n->s;
	const struct sim_scenario *sc = s->sc;
	struct sim_agent *a = n->slot_head;
	if (a) {
		a->slot_wait_ns += s->now_ns - n->slot_seen_ns;
		double w = (double)a->slot_wait_ns / SIM_NS_PER_S;
		double over = w - (double)a->pred_recompute_ns / SIM_NS_PER_S * (1 + sc->cost_margin);
		if (w > s->res->slot_wait_max_s)
			s->res->slot_wait_max_s = w;
		if (a->pred_recompute_ns && over > s->res->slot_over_max_s)
			s->res->slot_over_max_s = over;
	}
	n->slot_head = NULL;
	a = NULL;
	kva_waiting_foreach(n->e, head_of, &a, 1);
	kva_request_info q;
	if (!a || kva_query(n->e, a->h, &q) != 0 || !q.has_selection ||
	    q.selected_location != KVA_LOC_EXTERNAL)
		return;
	kva_stats st;
	kva_stats_get(n->e, &st);
	uint64_t need = (uint64_t)sim_pages_for(s, a->prompt) + sim_headroom_pages(sc) +
			sim_decode_reserve_pages(sc);
	if (st.free_copy_slots || st.free_pages < need)
		return;
	n->slot_head = a;
	n->slot_seen_ns = s->now_ns;
	a->pred_recompute_ns = q.predicted_recompute_ns;
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
		sim_gpu_complete(n);
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
	sim_schedule_from(n, n->run.head, &b, &prefill_budget);
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
	sim_take_plan(n);
	sim_cache_fit(n);
	sim_check_running(n);
	slot_wait_track(n);
	if (s->fatal)
		return;
	struct sim_agent *first_new = old_tail ? sim_list_next(&n->run, old_tail) : n->run.head;
	uint64_t preempted_before = s->res->preempt_calls;
	if (first_new)
		sim_schedule_from(n, first_new, &b, &prefill_budget);
	/* every admission owns the pages of its first chunk: one preempted
	 * here was admitted in vain (counted: the scenario tests expect 0) */
	s->res->preempted_at_admission += s->res->preempt_calls - preempted_before;
	if (s->fatal)
		return;
	if (b.n_decode || b.prefill_tokens) {
		double dt = sim_gpu_step_s(&sc->m, &b);
		/* what vLLM knows of its step: its time, its prefill tokens and their
		 * positions (sum of end^2 - start^2 over its chunks). Only steps that
		 * prefilled at least half a chunk: how fast a recompute's prefill
		 * advances now (a step with a few tokens of a restore's rest would
		 * charge the whole step's decoding to them) */
		if (b.prefill_tokens * 2 >= sc->m.step_token_budget && s->policy == SIM_POLICY_COST)
			kva_prefill_observed_span(n->e, b.prefill_tokens, (uint64_t)llround(b.attn_tok2),
						  sim_ns_of(dt));
		double left = (double)(s->end_ns - s->now_ns) / SIM_NS_PER_S;
		s->res->gpu_busy_s += dt < left ? dt : left;
		s->res->gpu_steps++;
		n->in_step = true;
		n->wake_ns = s->now_ns + sim_ns_of(dt);
		return;
	}
	/* idle: sleep until an event for it, polling while requests wait */
	kva_stats st;
	kva_stats_get(n->e, &st);
	if (st.waiting + st.importing + st.ready > 0 || n->plan.backlog) {
		n->wake_ns = s->now_ns + sim_ns_of(sc->m.idle_poll_s);
		s->res->idle_polls++;
	} else {
		n->wake_ns = UINT64_MAX;
	}
}

static void loop(struct sim *s)
{
	const struct sim_scenario *sc = s->sc;
	uint64_t poll_ns = sim_ns_of(sc->m.idle_poll_s);
	int shown = -1;
	/* the progress line appears only once the command has run a while */
	double quiet_until = sc->progress_after_s;
	uint32_t iter = 0;
	bool show = false;
	while (!s->fatal) {
		if (!s->draining && s->now_ns >= s->end_ns)
			start_drain(s);
		sim_deliver_due(s);
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
				sim_take_plan(n);
				sim_cache_fit(n);
				sim_check_running(n);
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
	res->slot_over_max_s = -INFINITY; /* no turn waited for a slot */
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
		sim_check_end(&s);
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
			sim_policy_name(policy), s.fatal_msg);
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
