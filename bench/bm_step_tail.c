/* SPDX-License-Identifier: Apache-2.0 */
/*
 * BM_step_tail/N: the worst steps, not the mean one. N restores wait behind
 * a blocked head (bx_blocked) while tailload.h's load runs: two producer
 * threads each submit 8 restores and cancel 8 of their own every 100 us
 * (8,192 outstanding each), and a noisy host thread maps, touches, drops
 * (MADV_DONTNEED) and unmaps 64 MiB in a loop. The benchmark's thread is the
 * scheduler: it steps every 100 us (clock_nanosleep, untimed) and times
 * every step, its thread CPU time (what the targets use: on a shared VM any
 * thread may be descheduled) and its wall time. A step that maps, unmaps,
 * advises or faults memory, or waits for a lock or a futex, shows here as a
 * tail: the noisy host holds the process's mmap lock most of the time.
 *
 * One iteration is one step; manual time is the steps' wall time, so the
 * reported time is the mean step. Counters: cpu_ and wall_ p50 / p99 /
 * p9999 / max (us) and max_over_p50; steps over 50 and 200 us of CPU; the
 * scheduler thread's context switches and page faults inside steps
 * (getrusage, summed over steps: a voluntary switch inside a step is a
 * wait); events and producer submits per step; producer ticks skipped
 * because the scheduler fell behind (tailload.h); cpu_clock_overhead_us,
 * what reading the clocks around an empty step costs (in every CPU figure).
 * Runs once with a fixed step count whatever --benchmark_repetitions says:
 * the tail is that one run's. Untimed before it: the load runs until every
 * producer's window is full, then 1,000 more steps (tl_settle).
 * KVA_BENCH_SMALL caps N, the steps and the load.
 *
 * Two controls, timed by the same thread's CPU clock right after every step
 * under the same load: a fixed run of arithmetic (registers only) and a
 * dependent random walk over a 256 MiB ring (a cache and TLB miss per hop,
 * like a step's record accesses at 1M waiting), each sized to about a
 * median step. Neither calls kvadmit, so their tails are what this machine
 * adds to any short piece of work (the hypervisor taking the vCPU without
 * reporting steal time, interrupts, other threads' TLB shootdowns, memory
 * contention); counters control_ and memctl_ p50 ... max. A step's tail
 * above the memory control's is the step's own.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "bm.h"
#include "fixture.h"
#include "gbench.h"
#include "memwalk.h"
#include "tailload.h"

#define WAITING 1000000
#define STEPS 50000
#define SMALL_STEPS 300
#define CONTROL_NS 10000 /* each control's work, about a median step */

static size_t steps_to_run(void)
{
	return bx_small() ? SMALL_STEPS : STEPS;
}

/* The nearest-rank percentile of n sorted values, per million. */
static uint64_t rank(const uint64_t *sorted, size_t n, uint64_t ppm)
{
	size_t k = (size_t)(((uint64_t)n * ppm + 999999) / 1000000);
	return sorted[k ? (k > n ? n - 1 : k - 1) : 0];
}

static void report_tail(gb_state *s, const char *what, uint64_t *ns, size_t n)
{
	static const struct {
		const char *name;
		uint64_t ppm;
	} q[] = {{"p50", 500000}, {"p99", 990000}, {"p9999", 999900}, {"max", 1000000}};
	char name[48];
	qsort(ns, n, sizeof(*ns), bx_cmp_u64);
	for (size_t i = 0; i < sizeof(q) / sizeof(q[0]); i++) {
		snprintf(name, sizeof(name), "%s_%s_us", what, q[i].name);
		gb_counter(s, name, (double)rank(ns, n, q[i].ppm) / 1e3, GB_COUNTER_DEFAULT);
	}
	uint64_t p50 = rank(ns, n, 500000);
	snprintf(name, sizeof(name), "%s_max_over_p50", what);
	gb_counter(s, name, p50 ? (double)ns[n - 1] / (double)p50 : 0, GB_COUNTER_DEFAULT);
}

static size_t count_over(const uint64_t *ns, size_t n, uint64_t limit)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		k += ns[i] > limit;
	return k;
}

static uint64_t producer_submits(struct tl_load *l)
{
	uint64_t n = 0;
	for (unsigned i = 0; i < TL_PRODUCERS; i++)
		n += atomic_load_explicit(&l->prod[i].submits, memory_order_relaxed);
	return n;
}

static uint64_t producer_skipped(struct tl_load *l)
{
	uint64_t n = 0;
	for (unsigned i = 0; i < TL_PRODUCERS; i++)
		n += atomic_load_explicit(&l->prod[i].skipped_ticks, memory_order_relaxed);
	return n;
}

/* What the clocks around a step cost when the step is empty (tl_step's
 * order: CPU clock, wall clock, nothing, wall clock, CPU clock): the median
 * of 1,001 such intervals, CPU ns; the CPU figures include it. */
static uint64_t clock_overhead_ns(void)
{
	uint64_t v[1001];
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		uint64_t c0 = bx_cpu_ns();
		(void)bx_clock_ns();
		(void)bx_clock_ns();
		v[i] = bx_cpu_ns() - c0;
	}
	qsort(v, sizeof(v) / sizeof(v[0]), sizeof(v[0]), bx_cmp_u64);
	return v[sizeof(v) / sizeof(v[0]) / 2];
}

static uint64_t alu_work(uint64_t rounds)
{
	uint64_t x = 0x9e3779b97f4a7c15u;
	for (uint64_t i = 0; i < rounds; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		__asm__ volatile("" : "+r"(x)); /* keeps every round */
	}
	return x;
}

struct controls {
	struct mw_ring *ring; /* memwalk.h's shared ring */
	uint64_t alu_rounds, hops;
};

static uint64_t alu_run(struct controls *c, uint64_t rounds)
{
	uint64_t c0 = bx_cpu_ns();
	uint64_t x = alu_work(rounds);
	__asm__ volatile("" : : "r"(x) : "memory"); /* keeps the work between the reads */
	(void)c;
	return bx_cpu_ns() - c0;
}

static uint64_t walk_run(struct controls *c, uint64_t hops)
{
	uint64_t c0 = bx_cpu_ns();
	mw_walk(c->ring, hops);
	return bx_cpu_ns() - c0;
}

/* How many units of run() take CONTROL_NS here, before the load starts:
 * the median of 101 probes of `probe` units. */
static uint64_t calibrate(struct controls *c, uint64_t (*run)(struct controls *, uint64_t),
			  uint64_t probe)
{
	uint64_t v[101];
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
		v[i] = run(c, probe);
	qsort(v, sizeof(v) / sizeof(v[0]), sizeof(v[0]), bx_cmp_u64);
	uint64_t per = v[sizeof(v) / sizeof(v[0]) / 2];
	return per ? probe * CONTROL_NS / per : probe;
}

static void controls_init(struct controls *c)
{
	c->ring = mw_shared();
	c->alu_rounds = calibrate(c, alu_run, 4096);
	c->hops = calibrate(c, walk_run, 256);
}

static uint64_t noisy_rounds(struct tl_load *l)
{
	return atomic_load_explicit(&l->noisy_rounds, memory_order_relaxed);
}

static void bm_step_tail(gb_state *s, void *arg)
{
	(void)arg;
	static struct tl_load l;
	struct bx *b = bx_blocked((size_t)gb_range_arg(s, 0));
	struct tl_config cfg;
	tl_config_default(&cfg);
	size_t cap = steps_to_run();
	uint64_t *cpu = malloc(cap * sizeof(*cpu)), *wall = malloc(cap * sizeof(*wall));
	uint64_t *alu = malloc(cap * sizeof(*alu)), *mem = malloc(cap * sizeof(*mem));
	if (!cpu || !wall || !alu || !mem)
		bx_check(-ENOMEM, "step times");
	uint64_t overhead = clock_overhead_ns();
	struct controls ctl;
	controls_init(&ctl);
	tl_start(&l, b, &cfg);

	struct tl_sample x;
	if (!tl_settle(&l)) {
		tl_stop(&l);
		free(cpu);
		free(wall);
		free(alu);
		free(mem);
		gb_skip_with_error(s, "the producers never filled their windows");
		gb_keep_running_batch(s, 1);
		return;
	}

	uint64_t voluntary = 0, involuntary = 0, minor = 0, major = 0, events = 0;
	uint64_t submits0 = producer_submits(&l), skipped0 = producer_skipped(&l);
	uint64_t rounds0 = noisy_rounds(&l), begin = bx_clock_ns();
	size_t k = 0, n;
	while ((n = gb_keep_running_batch(s, cap))) {
		uint64_t batch_ns = 0;
		for (size_t i = 0; i < n; i++) {
			tl_step(&l, &x);
			batch_ns += x.wall_ns;
			if (k < cap) {
				alu[k] = alu_run(&ctl, ctl.alu_rounds);
				mem[k] = walk_run(&ctl, ctl.hops);
				cpu[k] = x.cpu_ns;
				wall[k++] = x.wall_ns;
			}
			voluntary += x.voluntary;
			involuntary += x.involuntary;
			minor += x.minor_faults;
			major += x.major_faults;
			events += b->plan.events;
		}
		gb_set_iteration_time(s, (double)batch_ns / 1e9);
	}
	uint64_t elapsed = bx_clock_ns() - begin, submits = producer_submits(&l) - submits0;
	uint64_t rounds = noisy_rounds(&l) - rounds0, skipped = producer_skipped(&l) - skipped0;
	if (tl_stop(&l) != 0)
		gb_skip_with_error(s, "a producer's submit or cancel failed, or the engine did not "
				      "go back to its blocked state");
	if (k) {
		double steps = (double)k;
		gb_counter(s, "cpu_steps_over_50us", (double)count_over(cpu, k, 50000),
			   GB_COUNTER_DEFAULT);
		gb_counter(s, "cpu_steps_over_200us", (double)count_over(cpu, k, 200000),
			   GB_COUNTER_DEFAULT);
		report_tail(s, "cpu", cpu, k);
		report_tail(s, "wall", wall, k);
		report_tail(s, "control", alu, k);
		report_tail(s, "memctl", mem, k);
		gb_counter(s, "cpu_clock_overhead_us", (double)overhead / 1e3, GB_COUNTER_DEFAULT);
		gb_counter(s, "steps", steps, GB_COUNTER_DEFAULT);
		gb_counter(s, "step_period_us", (double)elapsed / 1e3 / steps, GB_COUNTER_DEFAULT);
		gb_counter(s, "events_per_step", (double)events / steps, GB_COUNTER_DEFAULT);
		gb_counter(s, "submits_per_step", (double)submits / steps, GB_COUNTER_DEFAULT);
		gb_counter(s, "step_voluntary_switches", (double)voluntary, GB_COUNTER_DEFAULT);
		gb_counter(s, "step_involuntary_switches", (double)involuntary, GB_COUNTER_DEFAULT);
		gb_counter(s, "step_minor_faults", (double)minor, GB_COUNTER_DEFAULT);
		gb_counter(s, "step_major_faults", (double)major, GB_COUNTER_DEFAULT);
		gb_counter(s, "noisy_rounds", (double)rounds, GB_COUNTER_DEFAULT);
		gb_counter(s, "producer_skipped_ticks", (double)skipped, GB_COUNTER_DEFAULT);
		gb_counter(s, "waiting", (double)b->n_waiting, GB_COUNTER_DEFAULT);
	}
	gb_set_items_processed(s, gb_iterations_done(s));
	free(cpu);
	free(wall);
	free(alu);
	free(mem);
}

void bm_register_step_tail(void)
{
	gb_bench *b = gb_register("BM_step_tail", bm_step_tail, NULL);
	gb_arg(b, WAITING);
	gb_unit(gb_use_manual_time(b), GB_US);
	/* one run of exactly this many steps: the tail belongs to one run */
	gb_repetitions(gb_iterations(b, (int64_t)steps_to_run()), 1);
}
