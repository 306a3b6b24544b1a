/* SPDX-License-Identifier: Apache-2.0 */
// gbench: the C API of gbench.h over Google Benchmark (1.7). The only C++ in
// bench/: each gb_* call forwards to benchmark::State or to the registered
// benchmark::internal::Benchmark; gb_state and gb_bench are those objects
// under opaque C names. Registration copies the name and keeps the C
// function and its argument in a lambda.
#include "gbench.h"

#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

benchmark::State &st(gb_state *s) { return *reinterpret_cast<benchmark::State *>(s); }
const benchmark::State &st(const gb_state *s)
{
	return *reinterpret_cast<const benchmark::State *>(s);
}
benchmark::internal::Benchmark *bm(gb_bench *b)
{
	return reinterpret_cast<benchmark::internal::Benchmark *>(b);
}
gb_bench *out(benchmark::internal::Benchmark *b) { return reinterpret_cast<gb_bench *>(b); }

bool min_time_on_command_line;

} // namespace

extern "C" {

void gb_initialize(int *argc, char **argv)
{
	// Looked for before Initialize() removes the flags it recognises.
	for (int i = 1; i < *argc; i++)
		if (std::strncmp(argv[i], "--benchmark_min_time", 20) == 0)
			min_time_on_command_line = true;
	benchmark::Initialize(argc, argv);
}

bool gb_min_time_from_command_line(void) { return min_time_on_command_line; }

int gb_run(int argc, char **argv)
{
	if (benchmark::ReportUnrecognizedArguments(argc, argv))
		return -1;
	return static_cast<int>(benchmark::RunSpecifiedBenchmarks());
}

void gb_shutdown(void) { benchmark::Shutdown(); }

gb_bench *gb_register(const char *name, gb_fn fn, void *arg)
{
	// The Benchmark copies the name into a std::string of its own.
	return out(benchmark::RegisterBenchmark(name, [fn, arg](benchmark::State &s) {
		fn(reinterpret_cast<gb_state *>(&s), arg);
	}));
}

gb_bench *gb_arg(gb_bench *b, int64_t x) { return out(bm(b)->Arg(x)); }

gb_bench *gb_args(gb_bench *b, const int64_t *xs, size_t n)
{
	return out(bm(b)->Args(std::vector<int64_t>(xs, xs + n)));
}

gb_bench *gb_arg_name(gb_bench *b, const char *name) { return out(bm(b)->ArgName(name)); }
gb_bench *gb_range(gb_bench *b, int64_t lo, int64_t hi) { return out(bm(b)->Range(lo, hi)); }
gb_bench *gb_range_multiplier(gb_bench *b, int m) { return out(bm(b)->RangeMultiplier(m)); }
gb_bench *gb_threads(gb_bench *b, int n) { return out(bm(b)->Threads(n)); }
gb_bench *gb_use_real_time(gb_bench *b) { return out(bm(b)->UseRealTime()); }
gb_bench *gb_use_manual_time(gb_bench *b) { return out(bm(b)->UseManualTime()); }

gb_bench *gb_unit(gb_bench *b, enum gb_unit u)
{
	static const benchmark::TimeUnit units[] = {benchmark::kNanosecond, benchmark::kMicrosecond,
	                                            benchmark::kMillisecond, benchmark::kSecond};
	return out(bm(b)->Unit(units[u]));
}

gb_bench *gb_min_time(gb_bench *b, double seconds)
{
	return min_time_on_command_line ? b : out(bm(b)->MinTime(seconds));
}

gb_bench *gb_iterations(gb_bench *b, int64_t n) { return out(bm(b)->Iterations(n)); }
gb_bench *gb_repetitions(gb_bench *b, int n) { return out(bm(b)->Repetitions(n)); }

size_t gb_keep_running_batch(gb_state *s, size_t n)
{
	return st(s).KeepRunningBatch(static_cast<benchmark::IterationCount>(n)) ? n : 0;
}

int64_t gb_remaining(const gb_state *s)
{
	int64_t left = st(s).max_iterations - st(s).iterations();
	return left > 0 ? left : 0;
}

int64_t gb_iterations_done(const gb_state *s) { return st(s).iterations(); }
int64_t gb_range_arg(const gb_state *s, size_t i) { return st(s).range(i); }
int gb_thread_index(const gb_state *s) { return st(s).thread_index(); }
int gb_thread_count(const gb_state *s) { return st(s).threads(); }
void gb_pause(gb_state *s) { st(s).PauseTiming(); }
void gb_resume(gb_state *s) { st(s).ResumeTiming(); }
void gb_set_iteration_time(gb_state *s, double seconds) { st(s).SetIterationTime(seconds); }
void gb_set_items_processed(gb_state *s, int64_t items) { st(s).SetItemsProcessed(items); }
void gb_set_bytes_processed(gb_state *s, int64_t bytes) { st(s).SetBytesProcessed(bytes); }

void gb_counter(gb_state *s, const char *name, double value, unsigned flags)
{
	unsigned f = 0;
	if (flags & GB_COUNTER_RATE)
		f |= benchmark::Counter::kIsRate;
	if (flags & GB_COUNTER_AVG_THREADS)
		f |= benchmark::Counter::kAvgThreads;
	if (flags & GB_COUNTER_PER_ITERATION)
		f |= benchmark::Counter::kAvgIterations;
	st(s).counters[name] = benchmark::Counter(value, static_cast<benchmark::Counter::Flags>(f));
}

void gb_set_label(gb_state *s, const char *label) { st(s).SetLabel(label); }
void gb_skip_with_error(gb_state *s, const char *msg) { st(s).SkipWithError(msg); }

} // extern "C"
