/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gbench: a C API over Google Benchmark, so that kvadmit's benchmarks are C
 * files like the library they measure. gbench.cc (the only C++ in bench/)
 * implements it with benchmark::RegisterBenchmark and forwards each call to
 * benchmark::State or benchmark::internal::Benchmark.
 *
 * Keep-running is batched: the C side asks for a batch of n iterations with
 * gb_keep_running_batch() and runs them in its own loop, so the C/C++
 * boundary is crossed once per batch, not once per iteration. A batch may
 * overshoot the iteration count Google Benchmark chose (it accounts for
 * that: reported times stay per iteration).
 *
 * Typical use:
 *
 *	static void bm_x(gb_state *s, void *arg)
 *	{
 *		size_t n;
 *		while ((n = gb_keep_running_batch(s, 64)))
 *			for (size_t i = 0; i < n; i++)
 *				work();
 *		gb_set_items_processed(s, gb_iterations(s));
 *	}
 *	gb_arg(gb_register("BM_x", bm_x, NULL), 1000);
 *
 * Threads: a benchmark registered with gb_threads(b, T) runs its function
 * on T threads at once, each with its own gb_state; gb_thread_index() tells
 * them apart. Every thread's first and last gb_keep_running_batch() call
 * meet at a barrier, so thread 0 may set up shared state before its first
 * call and tear it down after its last.
 */
#ifndef KVA_BENCH_GBENCH_H
#define KVA_BENCH_GBENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gb_state gb_state; /* a benchmark::State */
typedef struct gb_bench gb_bench; /* a registered benchmark family */
typedef void (*gb_fn)(gb_state *s, void *arg);

enum gb_unit { GB_NS = 0, GB_US, GB_MS, GB_S };

/* Counter flags, as benchmark::Counter::Flags. */
enum gb_counter_flags {
	GB_COUNTER_DEFAULT = 0,
	GB_COUNTER_RATE = 1 << 0,         /* divided by the run's seconds */
	GB_COUNTER_AVG_THREADS = 1 << 1,  /* averaged over threads, not summed */
	GB_COUNTER_PER_ITERATION = 1 << 2 /* divided by the iterations */
};

/* ---- process ------------------------------------------------------------ */
/* Parses Google Benchmark's flags (and removes them from argv). Call first. */
void gb_initialize(int *argc, char **argv);
/* true when the command line set --benchmark_min_time: per-benchmark
 * gb_min_time() values are then ignored, so a smoke run stays short. */
bool gb_min_time_from_command_line(void);
/* Runs every registered benchmark that the filter selects; returns how many
 * ran. Reports unrecognised arguments on stderr and returns -1. */
int gb_run(int argc, char **argv);
void gb_shutdown(void);

/* ---- registration (before gb_run) -------------------------------------- */
/* name is copied. arg is handed to fn unchanged. */
gb_bench *gb_register(const char *name, gb_fn fn, void *arg);
gb_bench *gb_arg(gb_bench *b, int64_t x);
gb_bench *gb_args(gb_bench *b, const int64_t *xs, size_t n); /* one tuple of n args */
gb_bench *gb_arg_name(gb_bench *b, const char *name);
gb_bench *gb_range(gb_bench *b, int64_t lo, int64_t hi);     /* lo, lo*m, ..., hi */
gb_bench *gb_range_multiplier(gb_bench *b, int m);
gb_bench *gb_threads(gb_bench *b, int n);
gb_bench *gb_use_real_time(gb_bench *b);
gb_bench *gb_use_manual_time(gb_bench *b); /* times come from gb_set_iteration_time */
gb_bench *gb_unit(gb_bench *b, enum gb_unit u);
gb_bench *gb_min_time(gb_bench *b, double seconds); /* see gb_min_time_from_command_line */
gb_bench *gb_iterations(gb_bench *b, int64_t n);
gb_bench *gb_repetitions(gb_bench *b, int n);

/* ---- running (inside a benchmark function) ----------------------------- */
/* Starts (first call) or continues the timed loop: returns n, the caller
 * runs n iterations; 0 when the loop is over (the caller then returns soon,
 * without another call). n > 0. */
size_t gb_keep_running_batch(gb_state *s, size_t n);
/* Iterations still to run before Google Benchmark's target (0 once it is
 * reached); lets a caller trim its last batch. */
int64_t gb_remaining(const gb_state *s);
int64_t gb_iterations_done(const gb_state *s);
int64_t gb_range_arg(const gb_state *s, size_t i); /* the i-th argument */
int gb_thread_index(const gb_state *s);
int gb_thread_count(const gb_state *s);

/* Timer control; paused time is not measured. */
void gb_pause(gb_state *s);
void gb_resume(gb_state *s);
/* Manual time (gb_use_manual_time): the seconds the last batch took. */
void gb_set_iteration_time(gb_state *s, double seconds);

void gb_set_items_processed(gb_state *s, int64_t items);
void gb_set_bytes_processed(gb_state *s, int64_t bytes);
void gb_counter(gb_state *s, const char *name, double value, unsigned flags);
void gb_set_label(gb_state *s, const char *label);
/* Marks the run failed: the next gb_keep_running_batch() returns 0 (call it
 * once more, also before the loop started, so threads meet their barrier). */
void gb_skip_with_error(gb_state *s, const char *msg);

#ifdef __cplusplus
}
#endif
#endif
