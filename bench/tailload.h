/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tailload: the load BM_step_tail (bm_step_tail.c) and kvadmit-step-syscalls
 * (step_syscalls.c) put around a scheduler thread, so that both look at the
 * same steps. On the fixture's blocked engine (bx_blocked: the head waits for
 * capacity, N restores behind it):
 *
 *   producers   threads that, every tick, submit a batch of restores and
 *               cancel as many of their own, the oldest first, once a window
 *               of outstanding ones is full: the queue stays at N + the
 *               windows, and every step has a steady stream of events. A
 *               producer skips its tick when the scheduler has not stepped
 *               for TL_AHEAD of its batches, so a slow scheduler (a
 *               sanitizer build, a starved core) sees a bounded load, not
 *               an inbox that grows for ever (counted: skipped_ticks);
 *   noisy host  a thread that maps an anonymous region, touches every page,
 *               drops them (madvise MADV_DONTNEED) and unmaps it, in a loop:
 *               the process-wide mmap lock and page faults a host's other
 *               threads cause, which a step that maps, unmaps, advises or
 *               faults waits behind.
 *
 * The scheduler thread is the caller's: it steps (tl_step times one step),
 * paced by tl_pace, until it has what it measures, then tl_stop ends the
 * load and steps until every producer request has ended, which leaves the
 * engine as bx_blocked built it. Untimed apart from tl_step.
 */
#ifndef KVA_BENCH_TAILLOAD_H
#define KVA_BENCH_TAILLOAD_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fixture.h"

#define TL_PRODUCERS 2
#define TL_AHEAD 4 /* a producer's batches per step at most */

struct tl_config {
	uint64_t tick_ns;      /* producers' period */
	uint32_t per_tick;     /* submits (and, once the window is full, cancels) per tick */
	uint32_t window;       /* outstanding requests per producer */
	size_t noisy_bytes;    /* the noisy host's region */
	uint64_t step_ns;      /* the scheduler's period (tl_step) */
	uint32_t warmup_steps; /* tl_settle's steps once the windows are full */
};

/* The standard load: 2 producers, each 8 submits + 8 cancels every 100 us
 * with 8,192 outstanding, a 64 MiB noisy region, a step every 100 us and
 * 1,000 steps of warm-up; KVA_BENCH_SMALL makes it small. */
void tl_config_default(struct tl_config *c);

struct tl_producer {
	pthread_t thread;
	struct tl_load *load;
	unsigned index;
	kva_handle *ring; /* window entries, oldest at ring[head] once full */
	uint32_t head, filled;
	/* written by the producer, read by the scheduler thread */
	_Atomic uint64_t submits, cancels, failures, skipped_ticks;
	atomic_bool warm; /* the window is full: every tick cancels too */
};

struct tl_load {
	struct bx *b;
	struct tl_config cfg;
	struct tl_producer prod[TL_PRODUCERS];
	pthread_t noisy;
	atomic_bool stop;
	_Atomic uint64_t steps; /* written by the scheduler thread (tl_step) */
	_Atomic uint64_t noisy_rounds, noisy_failures;
	uint64_t ended;	    /* reports of producer requests seen by tl_step / tl_stop */
	uint64_t next_step; /* when tl_step steps next (CLOCK_MONOTONIC ns) */
};

/* One step as the scheduler thread saw it. Context switches and faults are
 * getrusage(RUSAGE_THREAD) deltas around the step. */
struct tl_sample {
	uint64_t cpu_ns, wall_ns;
	uint64_t voluntary, involuntary; /* context switches */
	uint64_t minor_faults, major_faults;
};

/* Starts the producers and the noisy host on b (bx_blocked's engine; its
 * lookup callback answers at once). 0 or -errno. */
int tl_start(struct tl_load *l, struct bx *b, const struct tl_config *c);
/* Every producer's window is full (the load is steady from here). */
bool tl_warm(struct tl_load *l);
/* Steps (tl_step) until the load is warm and then cfg.warmup_steps more,
 * giving up after 60 s; returns tl_warm(). Scheduler thread. */
bool tl_settle(struct tl_load *l);
/* Sleeps until cfg.step_ns after the previous step (untimed; a late step
 * does not catch up), then one kva_step (bx_step): its CPU and wall time
 * and rusage deltas. Counts the producer requests it ended. Scheduler
 * thread. */
void tl_step(struct tl_load *l, struct tl_sample *out);
/* Stops the threads (each producer cancels what it still has out), then
 * steps until every producer request has ended and lets call_rcu free
 * them. 0, or -EPROTO when a cancel failed or the engine is not back in
 * its blocked state. */
int tl_stop(struct tl_load *l);

/* Sleeps until the next multiple of period_ns after *next (absolute,
 * CLOCK_MONOTONIC); a late caller starts a new period instead of catching
 * up. */
void tl_pace(uint64_t *next, uint64_t period_ns);

#endif
