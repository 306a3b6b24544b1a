/* SPDX-License-Identifier: Apache-2.0 */
/*
 * An agent's turn in the serving loop (serving.c): submitted on its event,
 * linked on its engine's running list while it runs, finished when its last
 * token is decoded, which writes its checkpoint and schedules the next turn
 * after the agent's think time.
 */
#include <errno.h>

#include "serving_parts.h"

/* ---- running list ------------------------------------------------------------ */

void sim_run_link(struct sim_node *n, struct sim_agent *a)
{
	sim_list_push_back(&n->run, a);
	a->running = true;
	n->n_running++;
}

void sim_run_unlink(struct sim_node *n, struct sim_agent *a)
{
	sim_list_unlink(&n->run, a);
	a->running = false;
	a->step_tokens = 0;
	n->n_running--;
}

/* An event for an idle engine wakes it now. */
void sim_wake(struct sim *s, struct sim_node *n)
{
	if (!n->in_step && n->wake_ns > s->now_ns)
		n->wake_ns = s->now_ns;
}

/* ---- turns ------------------------------------------------------------------- */

void sim_schedule_submit(struct sim *s, struct sim_agent *a, uint64_t at_ns)
{
	struct sim_event ev = {.t_ns = at_ns, .kind = SIM_EV_SUBMIT, .agent = a->index};
	if (sim_clock_push(&s->clock, ev) != 0)
		sim_fatal(s, "event queue", -ENOMEM);
}

void sim_on_submit(struct sim *s, struct sim_agent *a)
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
	a->stored_at_start =
	    a->session_turn > 0 && a->n_ext && a->hist_pos > 0 && a->ext_pos[0] >= a->hist_pos;
	kva_request r = {
	    .id = a->index + 1, .prefix_key = sim_key(a), .prompt_tokens = a->prompt, .user = a};
	int rc = kva_submit(sim_node_of(s, a)->e, &r, &a->h);
	if (rc != 0) {
		sim_fatal(s, "kva_submit", rc);
		return;
	}
	sim_wake(s, sim_node_of(s, a));
	a->live = true;
	a->submits++;
	a->decoded = 0;
	a->spec_acc = 0;
	a->has_first_token = false;
	a->recomputed_prefix = false;
	a->admitted_once = false;
	a->turn_local = a->turn_ext = 0;
	a->slot_wait_ns = 0;
	a->turn_start_ns = s->now_ns;
}

void sim_finish_turn(struct sim *s, struct sim_agent *a)
{
	struct sim_result *res = s->res;
	struct sim_node *n = sim_node_of(s, a);
	int rc = kva_finish(n->e, a->h);
	if (rc != 0) {
		sim_fatal(s, "kva_finish", rc);
		return;
	}
	sim_run_unlink(n, a);
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
	sim_schedule_submit(
	    s, a, s->now_ns + sim_ns_of(sim_draw_think_s(&s->sc->w, a->index, a->turn - 1)));
}
