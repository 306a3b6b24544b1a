/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lockstep: batches that start and end together on every thread (see
 * lockstep.h). Two barriers per batch: the start one also waits for
 * thread 0's consume, the end one for the slowest producer.
 *
 * The barrier spins. A sleeping one (pthread_barrier_t, a futex) puts the
 * waiter's vCPU to sleep, and waking it costs 100-250 us on a VM: more than
 * a whole batch of submits (4,096 x ~30 ns), so the batch's wall time was
 * mostly the second thread's wake-up, not the contention being measured.
 */
#include "lockstep.h"

#include <sched.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <time.h>
#include <urcu/arch.h>

#include "fixture.h"

static struct {
	alignas(64) atomic_uint arrived;
	alignas(64) atomic_uint generation;
	unsigned threads;
} barrier;

static void barrier_init(unsigned threads)
{
	atomic_store_explicit(&barrier.arrived, 0, memory_order_relaxed);
	atomic_store_explicit(&barrier.generation, 0, memory_order_relaxed);
	barrier.threads = threads;
}

/* Sense by generation: a thread reads the generation before it arrives (it
 * cannot advance until this thread has arrived), the last arrival resets the
 * count and advances it. Waiters spin; after 65,536 pauses (a few ms) they
 * yield, so an oversubscribed machine still makes progress. */
static void barrier_wait(void)
{
	unsigned gen = atomic_load_explicit(&barrier.generation, memory_order_acquire);
	/* acq_rel: pairs with the other arrivals' increments, so the last one
	 * sees everything the others did before arriving */
	if (atomic_fetch_add_explicit(&barrier.arrived, 1, memory_order_acq_rel) + 1 ==
	    barrier.threads) {
		atomic_store_explicit(&barrier.arrived, 0, memory_order_relaxed);
		/* release: pairs with the waiters' acquire load below */
		atomic_store_explicit(&barrier.generation, gen + 1, memory_order_release);
		return;
	}
	for (unsigned spins = 0;
	     atomic_load_explicit(&barrier.generation, memory_order_acquire) == gen; spins++) {
		if (spins >= (1u << 16))
			sched_yield();
		else
			caa_cpu_relax();
	}
}

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
		barrier_init((unsigned)gb_thread_count(s));
	}
	uint64_t id = (uint64_t)(tid + 1) << 40, cpu = 0;
	size_t n;
	while ((n = gb_keep_running_batch(s, l->batch))) {
		barrier_wait();
		uint64_t t0 = bx_clock_ns(), c0 = thread_cpu_ns();
		for (size_t i = 0; i < n; i++)
			l->produce(id++);
		cpu += thread_cpu_ns() - c0;
		barrier_wait();
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
	}
}

static void bm_lockstep(gb_state *s, void *arg) { lockstep_run(s, arg); }

void lockstep_register(const char *name, const struct lockstep *l)
{
	gb_bench *b = gb_use_manual_time(gb_register(name, bm_lockstep, (void *)l));
	gb_threads(gb_threads(b, 1), 2);
}
