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
 *   BM_stall_pool_take/N  N page takes by the scheduler's thread (16 ids,
 *       an admission's) while more threads than the machine has cores take
 *       and put 1-4 ids (kva_grow runs on the host's threads): a pool whose
 *       take can wait for another thread waits here for a descheduled one.
 *       Times are wall time (a wait for another thread is), so this
 *       thread's own preemption shows too: the baseline, timed in the same
 *       loop, is a credit reservation on a capacity word the other threads
 *       also hit, a call that waits for no one.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "bm.h"
#include <kvadmit/lockfree/capacity.h>
#include "fixture.h"
#include "gbench.h"
#include <kvadmit/lockfree/pagepool.h>

/* Times of one run's calls (ns: thread CPU time, or wall time where a
 * benchmark says so). */
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

/* Median and worst as counters named <what>_p50_us and <what>_worst_us, and
 * their ratio <what>_worst_over_p50. Frees the timings; returns the worst
 * (us). */
static double calls_report(gb_state *s, struct calls *c, const char *what)
{
	char name[64];
	double worst = 0;
	if (c->n) {
		qsort(c->ns, c->n, sizeof(*c->ns), bx_cmp_u64);
		double p50 = (double)c->ns[c->n / 2] / 1e3;
		worst = (double)c->ns[c->n - 1] / 1e3;
		snprintf(name, sizeof(name), "%s_p50_us", what);
		gb_counter(s, name, p50, GB_COUNTER_DEFAULT);
		snprintf(name, sizeof(name), "%s_worst_us", what);
		gb_counter(s, name, worst, GB_COUNTER_DEFAULT);
		snprintf(name, sizeof(name), "%s_worst_over_p50", what);
		gb_counter(s, name, p50 > 0 ? worst / p50 : 0, GB_COUNTER_DEFAULT);
	}
	free(c->ns);
	return worst;
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

#define POOL_PAGES 65536
#define POOL_TAKE 16

struct pool_load {
	struct kva_pagepool pool;
	struct kva_capacity cap;
	atomic_bool stop;
	atomic_int failed; /* a take or reservation refused: never, there is room */
	atomic_int contended; /* takes crowded out (-EAGAIN, nothing taken): counted */
};

static void *pool_grower(void *arg)
{
	struct pool_load *l = arg;
	uint32_t ids[4];
	const struct kva_credits one = {1, 0, 0};
	uint64_t x = (uint64_t)(uintptr_t)&ids; /* a per-thread seed */
	/* Relaxed: a stop flag; the join orders the rest. */
	while (!atomic_load_explicit(&l->stop, memory_order_relaxed)) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		size_t n = 1 + (size_t)(x >> 62);
		int rc = kva_pagepool_take_n(&l->pool, ids, n);
		if (rc == -EAGAIN) { /* Relaxed: a count read after the join. */
			atomic_fetch_add_explicit(&l->contended, 1, memory_order_relaxed);
			continue;
		}
		if (rc != 0 || !kva_capacity_try_reserve(&l->cap, one, 0)) {
			atomic_store_explicit(&l->failed, 1, memory_order_relaxed);
			break;
		}
		kva_capacity_release(&l->cap, one);
		kva_pagepool_put_n(&l->pool, ids, n);
	}
	return NULL;
}

static void bm_stall_pool_take(gb_state *s, void *arg)
{
	(void)arg;
	size_t n = bx_cap((size_t)gb_range_arg(s, 0));
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	int growers = cores > 0 && cores < 32 ? 2 * (int)cores : 8;
	struct pool_load *l = calloc(1, sizeof(*l));
	pthread_t *t = calloc((size_t)growers, sizeof(*t));
	if (!l || !t || kva_pagepool_init(&l->pool, POOL_PAGES) != 0)
		bx_check(-ENOMEM, "pool stall set-up");
	kva_capacity_init(&l->cap, (struct kva_credits){POOL_PAGES, 1, 1});
	for (int i = 0; i < growers; i++)
		if (pthread_create(&t[i], NULL, pool_grower, l) != 0)
			bx_check(-EAGAIN, "pool stall threads");
	const struct kva_credits take = {POOL_TAKE, 0, 0};
	uint32_t ids[POOL_TAKE];
	struct calls takes, base;
	calls_init(&takes, n);
	calls_init(&base, n);
	size_t takes_over = 0, base_over = 0; /* calls over 50 us */
	while (gb_keep_running_batch(s, 1)) { /* one iteration: the whole run */
		for (size_t i = 0; i < n; i++) {
			uint64_t t0 = bx_clock_ns();
			int rc = kva_pagepool_take_n(&l->pool, ids, POOL_TAKE);
			bool ok = rc == 0;
			uint64_t t1 = bx_clock_ns();
			if (ok)
				kva_pagepool_put_n(&l->pool, ids, POOL_TAKE);
			uint64_t t2 = bx_clock_ns();
			bool got = kva_capacity_try_reserve(&l->cap, take, 0);
			uint64_t t3 = bx_clock_ns();
			if (got)
				kva_capacity_release(&l->cap, take);
			if (rc == -EAGAIN)
				atomic_fetch_add_explicit(&l->contended, 1, memory_order_relaxed);
			else if (!ok || !got)
				atomic_store_explicit(&l->failed, 1, memory_order_relaxed);
			calls_add(&takes, t1 - t0);
			calls_add(&base, t3 - t2);
			takes_over += t1 - t0 > 50000;
			base_over += t3 - t2 > 50000;
		}
	}
	atomic_store_explicit(&l->stop, true, memory_order_relaxed);
	for (int i = 0; i < growers; i++)
		pthread_join(t[i], NULL);
	if (atomic_load_explicit(&l->failed, memory_order_relaxed))
		gb_skip_with_error(s, "a take or a reservation was refused with room left");
	double worst_take = calls_report(s, &takes, "take");
	double worst_base = calls_report(s, &base, "base");
	gb_counter(s, "take_worst_over_base_worst", worst_base > 0 ? worst_take / worst_base : 0,
		   GB_COUNTER_DEFAULT);
	gb_counter(s, "takes_over_50us", (double)takes_over, GB_COUNTER_DEFAULT);
	gb_counter(s, "base_over_50us", (double)base_over, GB_COUNTER_DEFAULT);
	gb_counter(s, "growers", growers, GB_COUNTER_DEFAULT);
	gb_counter(s, "takes_contended",
		   atomic_load_explicit(&l->contended, memory_order_relaxed), GB_COUNTER_DEFAULT);
	kva_pagepool_fini(&l->pool);
	free(t);
	free(l);
}

void bm_register_stalls(void)
{
	gb_bench *b = gb_register("BM_stall_lookups_out", bm_stall_lookups_out, NULL);
	gb_iterations(gb_unit(gb_arg(b, 1000000), GB_MS), 1);
	b = gb_register("BM_stall_submit", bm_stall_submit, NULL);
	gb_iterations(gb_unit(gb_arg(b, 1000000), GB_MS), 1);
	b = gb_register("BM_stall_pool_take", bm_stall_pool_take, NULL);
	gb_iterations(gb_use_real_time(gb_unit(gb_arg(b, 2000000), GB_MS)), 1);
}
