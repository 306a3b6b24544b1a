/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Single calls that stall. The other benchmarks report means, which hide a
 * call that does O(N) work once in a while: a map doubling inside a step, a
 * slab chunk built inside a submit, a timer wheel re-placing every pending
 * deadline. Each benchmark here runs one pattern a serving engine runs and
 * times every call; it reports the median and the worst call of the same
 * run, and worst_over_p50 is the figure to watch (a flat engine keeps it
 * near what the machine's own noise gives).
 *
 *   BM_stall_lookups_out/N  N waiting requests whose lookups are all out (a
 *       slow directory), stepped 1 ms apart for 4.5 s of engine time: past
 *       the 4.3 s point where a timing wheel moves a whole slot of
 *       deadlines, before any deadline (5 s) fires.
 *   BM_stall_submit/N  N submits from one thread, a step (ingest) after
 *       every 64: every slab chunk and every doubling of the live-id map
 *       happens inside this run.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "bm.h"
#include "fixture.h"
#include "gbench.h"

/* Times of one run's calls (thread CPU ns). */
struct calls {
	uint64_t *ns;
	size_t n, cap;
};

static void calls_init(struct calls *c, size_t cap)
{
	c->ns = malloc((cap ? cap : 1) * sizeof(*c->ns));
	if (!c->ns)
		bx_check(-ENOMEM, "stall timings");
	c->n = 0;
	c->cap = cap;
}

static void calls_add(struct calls *c, uint64_t ns)
{
	if (c->n < c->cap)
		c->ns[c->n++] = ns;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Median and worst as counters named <what>_p50_us and <what>_worst_us, and
 * their ratio <what>_worst_over_p50. Frees the timings. */
static void calls_report(gb_state *s, struct calls *c, const char *what)
{
	char name[64];
	if (c->n) {
		qsort(c->ns, c->n, sizeof(*c->ns), cmp_u64);
		double p50 = (double)c->ns[c->n / 2] / 1e3, worst = (double)c->ns[c->n - 1] / 1e3;
		snprintf(name, sizeof(name), "%s_p50_us", what);
		gb_counter(s, name, p50, GB_COUNTER_DEFAULT);
		snprintf(name, sizeof(name), "%s_worst_us", what);
		gb_counter(s, name, worst, GB_COUNTER_DEFAULT);
		snprintf(name, sizeof(name), "%s_worst_over_p50", what);
		gb_counter(s, name, p50 > 0 ? worst / p50 : 0, GB_COUNTER_DEFAULT);
	}
	free(c->ns);
}

#define LOOKUPS_OUT_STEPS 4500 /* 1 ms each */

static void bm_stall_lookups_out(gb_state *s, void *arg)
{
	(void)arg;
	size_t n = bx_cap((size_t)gb_range_arg(s, 0));
	struct bx *b = bx_new();
	b->answer_now = false; /* the directory is slow: every lookup stays out */
	bx_pending_reserve(b, n);
	for (size_t i = 0; i < n; i++)
		bx_submit(b, true);
	bx_step(b); /* ingest: N lookups issued, N deadlines armed */
	struct calls steps;
	calls_init(&steps, LOOKUPS_OUT_STEPS);
	uint64_t fired = 0;
	while (gb_keep_running_batch(s, 1)) { /* one iteration: the whole run */
		for (size_t i = 0; i < LOOKUPS_OUT_STEPS; i++) {
			uint64_t t0 = bx_cpu_ns();
			bx_step(b);
			calls_add(&steps, bx_cpu_ns() - t0);
			fired += b->plan.timers_fired;
		}
	}
	if (fired)
		gb_skip_with_error(s, "a lookup deadline fired: the run must end before 5 s");
	calls_report(s, &steps, "step");
	gb_counter(s, "lookups_out", (double)b->n_pending, GB_COUNTER_DEFAULT);
	bx_free(b);
}

#define SUBMIT_INGEST_EVERY 64

static void bm_stall_submit(gb_state *s, void *arg)
{
	(void)arg;
	size_t n = bx_cap((size_t)gb_range_arg(s, 0));
	struct bx *b = bx_new();
	b->answer_now = false; /* all stay waiting: the map and the slab only grow */
	bx_pending_reserve(b, n);
	struct calls submits, steps;
	calls_init(&submits, n);
	calls_init(&steps, n / SUBMIT_INGEST_EVERY + 1);
	while (gb_keep_running_batch(s, 1)) { /* one iteration: the whole run */
		for (size_t done = 0; done < n; done += SUBMIT_INGEST_EVERY) {
			for (size_t i = done; i < n && i < done + SUBMIT_INGEST_EVERY; i++) {
				uint64_t t0 = bx_cpu_ns();
				bx_submit(b, true);
				calls_add(&submits, bx_cpu_ns() - t0);
			}
			uint64_t t0 = bx_cpu_ns();
			bx_step(b);
			calls_add(&steps, bx_cpu_ns() - t0);
		}
	}
	calls_report(s, &submits, "submit");
	calls_report(s, &steps, "ingest_step");
	bx_free(b);
}

void bm_register_stalls(void)
{
	gb_bench *b = gb_register("BM_stall_lookups_out", bm_stall_lookups_out, NULL);
	gb_iterations(gb_unit(gb_arg(b, 1000000), GB_MS), 1);
	b = gb_register("BM_stall_submit", bm_stall_submit, NULL);
	gb_iterations(gb_unit(gb_arg(b, 1000000), GB_MS), 1);
}
