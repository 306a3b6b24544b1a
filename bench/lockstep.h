/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lockstep: runs a benchmark body on T threads (gb_threads) in batches that
 * start and end together, and reports each batch's wall time as manual time,
 * so a multi-threaded result is aggregate throughput: T threads' items over
 * the time the slowest took. A thread that could not run alongside the
 * others (an oversubscribed machine) shows up as lower throughput, not as
 * two uncontended halves. Between batches thread 0 runs `consume` while the
 * others wait (untimed).
 *
 * Counter cpu_ns: the calling thread's CPU time per item inside the timed
 * batches (CLOCK_THREAD_CPUTIME_ID), averaged over threads: the cost of one
 * item without the time other processes held the core.
 */
#ifndef KVA_BENCH_LOCKSTEP_H
#define KVA_BENCH_LOCKSTEP_H

#include <stdint.h>

#include "gbench.h"

struct lockstep {
	void (*setup)(void);              /* thread 0, before the first batch */
	void (*produce)(uint64_t id);     /* one item; ids are unique across threads */
	void (*consume)(void);            /* thread 0, after each batch; may be NULL */
	void (*teardown)(void);           /* thread 0, after the last batch */
	uint32_t batch;                   /* items per thread per batch */
};

void lockstep_run(gb_state *s, const struct lockstep *l);
/* Registers name with 1 and 2 threads and manual time. */
void lockstep_register(const char *name, const struct lockstep *l);

#endif
