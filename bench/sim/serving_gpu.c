/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GPU step of the serving loop (serving.c): the running requests take
 * their tokens (decode first, then prefill chunks), growing their pages and
 * preempting the newest running request while the pool is full; when the
 * step's modelled time has passed its tokens are written and sampled and
 * finished turns end.
 */
#include <errno.h>
#include <string.h>

#include "serving_parts.h"

static void preempt(struct sim_node *n, struct sim_agent *v)
{
	struct sim *s = n->s;
	int rc = kva_preempt(n->e, v->h);
	if (rc != 0) {
		sim_fatal(s, "kva_preempt", rc);
		return;
	}
	sim_run_unlink(n, v);
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
	uint32_t want = sim_pages_for(s, (uint64_t)a->kv + tokens);
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
void sim_schedule_from(struct sim_node *n, struct sim_agent *from, struct sim_batch *b,
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
void sim_gpu_complete(struct sim_node *n)
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
			sim_finish_turn(s, a);
	}
}
