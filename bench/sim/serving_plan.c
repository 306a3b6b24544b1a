/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the serving loop (serving.c) does with a kva_step's plan: the ended
 * reports first, then each admission takes its pages and joins the running
 * list (with --keep-local, legacy's kept local hit beside it).
 */
#include <errno.h>

#include "serving_parts.h"

/* Legacy with --keep-local: the pages of the local hit a recompute of a keeps
 * (vLLM's get_computed_blocks, found before the connector is asked): page-
 * aligned, at least one token left to compute, a recurrent bundle only whole
 * and only if it ends within what is recomputed. 0: none. */
uint32_t sim_kept_local_pages(const struct sim *s, const struct sim_agent *a)
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
		sim_check_fail(s, &f, "admission after cancel");
		s->res->all_terminal = false;
		return;
	}
	uint32_t local = ad->local_tokens, ext = ad->restored_tokens;
	uint32_t kept_pages = 0; /* a kept local hit's pages, taken beyond ad->npages */
	if (ad->how == KVA_ADMIT_RECOMPUTE && ad->reason == KVA_REASON_LEGACY &&
	    (kept_pages = sim_kept_local_pages(s, a)) != 0) {
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
		 * not drop it (sim_kept_local_pages). */
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
	sim_run_link(n, a);
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
		sim_check_fail(s, &res->reported_once, "a request reported ended twice");
	a->last_ended = en->handle;
	a->ended_reports++;
	if (en->state == KVA_STATE_REJECTED)
		sim_check_fail(s, &res->reported_once, "a request was rejected as a duplicate");
	if (en->handle.gen == a->h.gen && en->handle.slot == a->h.slot)
		a->live = false;
}

void sim_take_plan(struct sim_node *n)
{
	for (uint32_t i = 0; i < n->plan.n_ended; i++)
		take_ended(n->s, &n->plan.ended[i]);
	for (uint32_t i = 0; i < n->plan.n_admitted && !n->s->fatal; i++)
		take_admission(n, &n->plan.admitted[i]);
}
