/* SPDX-License-Identifier: Apache-2.0 */
/*
 * BM_lifecycle/N: the whole life of a restore, per request, with N restores
 * waiting behind a blocked head (the standard engine of fixture.h).
 *
 * FCFS decides the design: a request submitted now joins the tail, behind
 * the N waiting, and nothing may overtake a blocked head except a READY
 * restore, which got there by being admitted at the head. So no freshly
 * submitted request can be cycled in front of the N; the honest steady state
 * is the queue itself: each round B new restores join the tail and the B
 * oldest are admitted from the head, the waiting count stays N and the head
 * is blocked again at the end of every step. Every request goes through the
 * same phases once, so the round's time over B is the cost of one life; the
 * record admitted is the one submitted N requests earlier, cold in the cache,
 * as in a server with that backlog.
 *
 * One round, all timed (manual time, per request = round / B):
 *   kva_finish        B running requests (the oldest: the running set is a
 *                     ring), returning exactly B restores' capacity;
 *   kva_submit        B new restores (prefix key, directory answers later);
 *   step 1            drains the B finishes (reports, retirement) and the B
 *                     submits (ingest, lookup issued), admits B restores at
 *                     the head (paired reservation, copy job) and blocks;
 *   kva_lookup_answer B answers (one external checkpoint each);
 *   kva_copy_done     the B copy jobs of step 1;
 *   step 2            adopts the B manifests, completes the B copies (READY)
 *                     and admits the B READY restores past the blocked head.
 * Counters split the round into those phases (wall); cpu_ns is the thread's
 * CPU time per request over the whole round. Untimed: bookkeeping, and the
 * retired records are reclaimed (call_rcu) between rounds as in the other
 * benchmarks. The B admitted replace the B
 * finished in the running ring, holding the same capacity.
 */
#include <errno.h>
#include <stdio.h>

#include "bm.h"
#include "fixture.h"
#include "gbench.h"

#define WAITING 1000000
#define BATCH 1024

enum { PH_FINISH, PH_SUBMIT, PH_STEP1, PH_ANSWER, PH_COPY, PH_STEP2, PH_COUNT };
static const char *const phase_name[PH_COUNT] = {"finish_ns", "submit_ns",    "step1_ns",
                                                 "answer_ns", "copy_done_ns", "step2_ns"};

static size_t ring_head; /* next running request to finish (b->running as a ring) */

static void bm_lifecycle(gb_state *s, void *arg)
{
	(void)arg;
	struct bx *b = bx_blocked((size_t)gb_range_arg(s, 0));
	size_t batch = bx_small() ? 64 : BATCH;
	if (batch > b->n_waiting / 4)
		batch = b->n_waiting / 4;
	if (batch > b->n_running)
		bx_check(-ERANGE, "fewer running requests than a batch");
	size_t nr = b->n_running;
	kva_handle fresh[BATCH];
	uint64_t admitted_ids[BATCH];
	uint64_t ph[PH_COUNT] = {0}, cpu = 0;
	b->answer_now = false;
	b->n_pending = 0;
	while (gb_keep_running_batch(s, batch)) {
		uint64_t t[PH_COUNT + 1];
		ring_head %= nr;
		uint64_t c0 = bx_cpu_ns();
		t[0] = bx_clock_ns();
		for (size_t i = 0; i < batch; i++)
			bx_check(kva_finish(b->e, b->running[(ring_head + i) % nr]), "kva_finish");
		t[1] = bx_clock_ns();
		for (size_t i = 0; i < batch; i++)
			fresh[i] = bx_submit(b, true);
		t[2] = bx_clock_ns();
		bx_step(b);
		t[3] = bx_clock_ns();
		bool ok1 = b->plan.n_copies == batch && !b->plan.n_admitted &&
		           b->plan.n_ended == batch && b->n_pending == batch &&
		           b->plan.head_blocked;
		for (size_t i = 0; i < b->n_pending; i++)
			bx_check(kva_lookup_answer(b->e, b->pending[i], bx_manifest()),
			         "kva_lookup_answer");
		t[4] = bx_clock_ns();
		/* the host reads the plan's copy jobs (and notes who was admitted)
		 * and reports each one done */
		for (uint32_t i = 0; i < b->plan.n_copies; i++) {
			admitted_ids[i] = b->plan.copies[i].handle.id;
			bx_check(kva_copy_done(b->e, b->plan.copies[i].token, 0, 0),
			         "kva_copy_done");
		}
		t[5] = bx_clock_ns();
		bx_step(b);
		t[6] = bx_clock_ns();
		cpu += bx_cpu_ns() - c0;
		gb_set_iteration_time(s, (double)(t[6] - t[0]) / 1e9);
		for (int p = 0; p < PH_COUNT; p++)
			ph[p] += t[p + 1] - t[p];
		if (!ok1)
			bx_check(-EPROTO, "step 1: finishes, ingest and B admissions at the head");
		if (b->plan.n_admitted != batch || b->plan.events != 2 * batch ||
		    !b->plan.head_blocked)
			bx_check(-EPROTO, "step 2: B answers and B READY restores admitted");

		/* untimed: the admitted take the finished ones' places in the ring */
		for (size_t i = 0; i < batch; i++) {
			b->running[(ring_head + i) % nr] = b->plan.admitted[i].handle;
			bx_waiting_del(b, admitted_ids[i]);
			bx_waiting_add(b, fresh[i]);
		}
		ring_head += batch;
		b->n_pending = 0;
		bx_reclaim(b, batch);
	}
	b->answer_now = true;
	double it = (double)gb_iterations_done(s);
	gb_set_items_processed(s, gb_iterations_done(s));
	if (it > 0) {
		for (int p = 0; p < PH_COUNT; p++)
			gb_counter(s, phase_name[p], (double)ph[p] / it, GB_COUNTER_DEFAULT);
		gb_counter(s, "cpu_ns", (double)cpu / it, GB_COUNTER_DEFAULT);
	}
	gb_counter(s, "batch", (double)batch, GB_COUNTER_DEFAULT);
	gb_counter(s, "waiting", (double)b->n_waiting, GB_COUNTER_DEFAULT);
}

void bm_register_lifecycle(void)
{
	gb_arg(gb_use_manual_time(gb_register("BM_lifecycle", bm_lifecycle, NULL)), WAITING);
}
