/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvadmit-step-syscalls [STEPS]: the driver scripts/step-syscalls.sh runs
 * under strace to count the system calls a steady-state step makes on the
 * scheduler thread. It builds BM_step_tail's state (bx_blocked with
 * 1,000,000 waiting, tailload.h's producers and noisy host), steps until the
 * load is steady, then marks a window of STEPS steps (default 10,000; 100 us
 * apart) with two write(2) calls to /dev/null carrying MARK_BEGIN and
 * MARK_END. Inside the window the scheduler thread makes no system call of
 * its own but those markers, clock_nanosleep (the pacing between steps),
 * clock_gettime (thread CPU time) and getrusage: every other call of that
 * thread inside the window comes from kva_step or the callbacks it runs.
 *
 * Also prints, without strace, what getrusage(RUSAGE_THREAD) saw inside the
 * steps (context switches, page faults) and the steps' CPU time. Exit
 * status 0 when the load ran and the engine went back to its state, 1
 * otherwise. KVA_BENCH_SMALL caps the waiting count and the load.
 */
#define _GNU_SOURCE 1 /* gettid */

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fixture.h"
#include "tailload.h"

#define WAITING 1000000
#define DEFAULT_STEPS 10000
#define MARK_BEGIN "kvadmit-step-window-begin"
#define MARK_END "kvadmit-step-window-end"

static void mark(int fd, const char *what)
{
	if (write(fd, what, strlen(what)) < 0)
		perror("kvadmit-step-syscalls: marker");
}

int main(int argc, char **argv)
{
	long steps = argc > 1 ? strtol(argv[1], NULL, 10) : DEFAULT_STEPS;
	if (argc > 2 || steps <= 0) {
		fprintf(stderr, "usage: %s [STEPS]\n", argv[0]);
		return 2;
	}
	int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
	if (fd < 0) {
		perror("kvadmit-step-syscalls: /dev/null");
		return 1;
	}
	struct bx *b = bx_blocked(WAITING);
	struct tl_config cfg;
	tl_config_default(&cfg);
	static struct tl_load l;
	tl_start(&l, b, &cfg);

	struct tl_sample x, sum = {0};
	uint64_t max_cpu = 0;
	bool warm = tl_settle(&l);
	printf("scheduler tid %d, %zu waiting, %ld steps\n", (int)gettid(), b->n_waiting, steps);
	fflush(stdout);

	mark(fd, MARK_BEGIN);
	for (long i = 0; i < steps; i++) {
		tl_step(&l, &x);
		sum.cpu_ns += x.cpu_ns;
		sum.voluntary += x.voluntary;
		sum.involuntary += x.involuntary;
		sum.minor_faults += x.minor_faults;
		sum.major_faults += x.major_faults;
		max_cpu = x.cpu_ns > max_cpu ? x.cpu_ns : max_cpu;
	}
	mark(fd, MARK_END);

	uint64_t submits = 0, skipped = 0;
	for (unsigned i = 0; i < TL_PRODUCERS; i++) {
		submits += atomic_load_explicit(&l.prod[i].submits, memory_order_relaxed);
		skipped += atomic_load_explicit(&l.prod[i].skipped_ticks, memory_order_relaxed);
	}
	int rc = tl_stop(&l);
	printf("inside the steps (getrusage): %llu voluntary and %llu involuntary context "
	       "switches, %llu minor and %llu major page faults\n",
	       (unsigned long long)sum.voluntary, (unsigned long long)sum.involuntary,
	       (unsigned long long)sum.minor_faults, (unsigned long long)sum.major_faults);
	printf("step CPU time: mean %.1f us, max %.1f us; %llu producer submits in all (%llu "
	       "ticks skipped: the scheduler fell behind), %llu noisy-host rounds\n",
	       (double)sum.cpu_ns / 1e3 / (double)steps, (double)max_cpu / 1e3,
	       (unsigned long long)submits, (unsigned long long)skipped,
	       (unsigned long long)atomic_load_explicit(&l.noisy_rounds, memory_order_relaxed));
	close(fd);
	bx_cache_clear();
	if (!warm || rc) {
		fprintf(stderr, "kvadmit-step-syscalls: the load did not reach a steady state, or "
				"the engine did not go back to its blocked state\n");
		return 1;
	}
	return 0;
}
