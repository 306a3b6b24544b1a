/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Ingestion cost per event, from the producer's call to the state change
 * the scheduler makes when it drains the event: time per event is the K
 * calls plus the one step that handles them, divided by K (manual time);
 * counters split it into the call and the step's share.
 *
 * BM_lookup_answer: K waiting requests have an unanswered lookup, behind a
 * blocked head with 10,000 waiting; kva_lookup_answer for each (one
 * external checkpoint), then the step adopts the manifests (the requests
 * become restores waiting for capacity). Untimed: they are cancelled and K
 * new requests submitted, whose lookups stay unanswered.
 *
 * BM_copy_done: K imports are in flight on an engine with free capacity;
 * kva_copy_done for each (world size 1), then the step completes them
 * (copy slot back, READY). That step's plan has no room for admissions, so
 * only the event is measured, not admitting the READY requests. Untimed:
 * they are admitted, run and finish; K new restores start their imports.
 */
#include <errno.h>
#include <stdio.h>

#include "bm.h"
#include "fixture.h"
#include "gbench.h"

#define BACKLOG 10000
#define EVENT_BATCH 1024

struct split {
	uint64_t call_ns, step_ns;
};

/* Times calls(b, ctx) then one step; returns the batch's seconds. */
static double timed_batch(struct bx *b, struct split *sp, void (*calls)(struct bx *, void *),
                          void *ctx)
{
	uint64_t t0 = bx_clock_ns();
	calls(b, ctx);
	uint64_t t1 = bx_clock_ns();
	bx_step(b);
	uint64_t t2 = bx_clock_ns();
	sp->call_ns += t1 - t0;
	sp->step_ns += t2 - t1;
	return (double)(t2 - t0) / 1e9;
}

static size_t event_batch(void) { return bx_small() ? 64 : EVENT_BATCH; }

static void report_split(gb_state *s, const struct split *sp)
{
	double it = (double)gb_iterations_done(s);
	gb_set_items_processed(s, gb_iterations_done(s));
	if (it > 0) {
		gb_counter(s, "call_ns", (double)sp->call_ns / it, GB_COUNTER_DEFAULT);
		gb_counter(s, "step_ns", (double)sp->step_ns / it, GB_COUNTER_DEFAULT);
	}
}

static void answer_pending(struct bx *b, void *ctx)
{
	(void)ctx;
	for (size_t i = 0; i < b->n_pending; i++)
		bx_check(kva_lookup_answer(b->e, b->pending[i], bx_manifest()), "kva_lookup_answer");
}

static void bm_lookup_answer(gb_state *s, void *arg)
{
	(void)arg;
	struct bx *b = bx_blocked(BACKLOG);
	size_t batch = event_batch();
	kva_handle mine[EVENT_BATCH];
	struct split sp = {0, 0};
	while (gb_keep_running_batch(s, batch)) {
		b->answer_now = false;
		b->n_pending = 0;
		for (size_t i = 0; i < batch; i++)
			mine[i] = bx_submit(b, true);
		bx_step(b);
		if (b->n_pending != batch)
			bx_check(-EPROTO, "lookups issued");

		gb_set_iteration_time(s, timed_batch(b, &sp, answer_pending, NULL));
		if (b->plan.events != batch || b->plan.n_admitted || !b->plan.head_blocked)
			bx_check(-EPROTO, "answer step");

		for (size_t i = 0; i < batch; i++)
			bx_check(kva_cancel(b->e, mine[i]), "kva_cancel");
		bx_step(b);
		if (b->plan.n_ended != batch)
			bx_check(-EPROTO, "cancel step");
		bx_reclaim(b, batch);
		b->answer_now = true;
	}
	report_split(s, &sp);
}

static struct bx *importing; /* free capacity, no backlog */

struct copies {
	kva_copy_token token[EVENT_BATCH];
	size_t n;
};

static void report_copies(struct bx *b, void *ctx)
{
	const struct copies *c = ctx;
	for (size_t i = 0; i < c->n; i++)
		bx_check(kva_copy_done(b->e, c->token[i], 0, 0), "kva_copy_done");
}

static void bm_copy_done(gb_state *s, void *arg)
{
	(void)arg;
	if (!importing)
		importing = bx_new();
	struct bx *b = importing;
	size_t batch = event_batch();
	struct copies c;
	struct split sp = {0, 0};
	uint32_t admitted_cap = b->plan.admitted_cap;
	while (gb_keep_running_batch(s, batch)) {
		for (size_t i = 0; i < batch; i++)
			bx_submit(b, true);
		bx_step(b);
		if (b->plan.n_copies != batch)
			bx_check(-EPROTO, "imports started");
		for (size_t i = 0; i < batch; i++)
			c.token[i] = b->plan.copies[i].token;
		c.n = batch;

		b->plan.admitted_cap = 0; /* the READY requests wait for the next step */
		gb_set_iteration_time(s, timed_batch(b, &sp, report_copies, &c));
		b->plan.admitted_cap = admitted_cap;
		if (b->plan.events != batch || b->plan.n_admitted)
			bx_check(-EPROTO, "copy step");

		if (bx_step(b) != (int)batch)
			bx_check(-EPROTO, "ready requests admitted");
		for (uint32_t i = 0; i < b->plan.n_admitted; i++)
			bx_check(kva_finish(b->e, b->plan.admitted[i].handle), "kva_finish");
		bx_step(b);
		if (b->plan.n_ended != batch)
			bx_check(-EPROTO, "finish step");
		bx_reclaim(b, batch);
	}
	report_split(s, &sp);
}

void bm_register_events(void)
{
	gb_use_manual_time(gb_register("BM_lookup_answer", bm_lookup_answer, NULL));
	gb_use_manual_time(gb_register("BM_copy_done", bm_copy_done, NULL));
}

void bm_cleanup_events(void)
{
	bx_free(importing);
	importing = NULL;
}
