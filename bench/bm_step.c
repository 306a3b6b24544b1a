/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The step with a blocked head: kvadmit's kva_step (BM_step_blocked) against
 * the rescanning waiting pass of today's engines (BM_rescan_step, rescan.h), as
 * the number of waiting requests grows. kvadmit should stay flat (rule
 * step-never-walks-queue: it looks at the head only); the rescan grows with the
 * queue. BM_step_blocked_cost: the same step under KVA_POLICY_COST (the
 * head's prediction and its copy-slot deadline), against BM_step_blocked
 * in the same run.
 */
#include <stdio.h>

#include "bm.h"
#include "fixture.h"
#include "gbench.h"
#include "rescan.h"

static void label_capped(gb_state *s, size_t asked, size_t n)
{
	char buf[64];
	if (n != asked) {
		snprintf(buf, sizeof(buf), "N capped to %zu (KVA_BENCH_SMALL)", n);
		gb_set_label(s, buf);
	}
}

static void bm_step_blocked(gb_state *s, void *arg)
{
	size_t asked = (size_t)gb_range_arg(s, 0);
	struct bx *b = bx_blocked_as(asked, arg ? *(const int *)arg : KVA_POLICY_WAIT);
	uint64_t touched = 0, events = 0, blocked = 0;
	size_t n;
	while ((n = gb_keep_running_batch(s, 256))) {
		for (size_t i = 0; i < n; i++) {
			bx_step(b);
			touched += b->plan.records_touched;
			events += b->plan.events + b->plan.timers_fired;
			blocked += b->plan.head_blocked;
		}
	}
	int64_t it = gb_iterations_done(s);
	if (blocked != (uint64_t)it || events != 0)
		gb_skip_with_error(s, "the head was not blocked, or the step had events");
	gb_counter(s, "records_touched", (double)touched, GB_COUNTER_PER_ITERATION);
	gb_counter(s, "waiting", (double)b->n_waiting, GB_COUNTER_DEFAULT);
	label_capped(s, asked, b->n_waiting);
}

static struct rs_sched *rescan;
static size_t rescan_n;

static void bm_rescan_step(gb_state *s, void *arg)
{
	(void)arg;
	size_t asked = (size_t)gb_range_arg(s, 0), want = bx_cap(asked);
	if (!rescan || rescan_n != want) {
		rs_free(rescan);
		rescan = rs_build(want);
		rescan_n = want;
	}
	size_t admitted = 0, n;
	while ((n = gb_keep_running_batch(s, 1)))
		admitted += rs_step(rescan);
	if (admitted)
		gb_skip_with_error(s, "the rescan admitted a request");
	gb_counter(s, "records_touched", (double)want, GB_COUNTER_DEFAULT);
	gb_counter(s, "waiting", (double)want, GB_COUNTER_DEFAULT);
	label_capped(s, asked, want);
}

void bm_register_step(void)
{
	static const int64_t kvadmit_n[] = {1000, 10000, 100000, 1000000};
	static const int64_t rescan_ns[] = {500, 1000, 10000, 100000};
	gb_bench *b = gb_register("BM_step_blocked", bm_step_blocked, NULL);
	for (size_t i = 0; i < sizeof(kvadmit_n) / sizeof(kvadmit_n[0]); i++)
		gb_arg(b, kvadmit_n[i]);
	static const int cost = KVA_POLICY_COST;
	gb_arg(gb_arg(gb_register("BM_step_blocked_cost", bm_step_blocked, (void *)&cost), 1000),
	       1000000);
	b = gb_unit(gb_register("BM_rescan_step", bm_rescan_step, NULL), GB_US);
	for (size_t i = 0; i < sizeof(rescan_ns) / sizeof(rescan_ns[0]); i++)
		gb_arg(b, rescan_ns[i]);
}

void bm_cleanup_step(void)
{
	rs_free(rescan);
	rescan = NULL;
}
