/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lockstep: batches that start and end together on every thread (see
 * lockstep.h). Two pthread barriers per batch: the start one also waits for
 * thread 0's consume, the end one for the slowest producer.
 */
#include "lockstep.h"

#include <pthread.h>
#include <time.h>

#include "fixture.h"

static pthread_barrier_t barrier;

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void lockstep_run(gb_state *s, const struct lockstep *l)
{
	int tid = gb_thread_index(s);
	if (tid == 0) {
		/* before the start barrier of the first batch: the others wait */
		l->setup();
		pthread_barrier_init(&barrier, NULL, (unsigned)gb_thread_count(s));
	}
	uint64_t id = (uint64_t)(tid + 1) << 40, cpu = 0;
	size_t n;
	while ((n = gb_keep_running_batch(s, l->batch))) {
		pthread_barrier_wait(&barrier);
		uint64_t t0 = bx_clock_ns(), c0 = thread_cpu_ns();
		for (size_t i = 0; i < n; i++)
			l->produce(id++);
		cpu += thread_cpu_ns() - c0;
		pthread_barrier_wait(&barrier);
		gb_set_iteration_time(s, (double)(bx_clock_ns() - t0) / 1e9);
		if (tid == 0 && l->consume)
			l->consume();
	}
	int64_t it = gb_iterations_done(s);
	gb_set_items_processed(s, it);
	if (it > 0)
		gb_counter(s, "cpu_ns", (double)cpu / (double)it, GB_COUNTER_AVG_THREADS);
	if (tid == 0) {
		/* after the finish barrier: every thread is out of its loop */
		l->teardown();
		pthread_barrier_destroy(&barrier);
	}
}

static void bm_lockstep(gb_state *s, void *arg) { lockstep_run(s, arg); }

void lockstep_register(const char *name, const struct lockstep *l)
{
	gb_bench *b = gb_use_manual_time(gb_register(name, bm_lockstep, (void *)l));
	gb_threads(gb_threads(b, 1), 2);
}
