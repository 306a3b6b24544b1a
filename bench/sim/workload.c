/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The agents' workload: seeded, counter-based draws. Every value is a pure
 * function of (seed, agent, turn, kind), so both policies see exactly the
 * same sequence of turns however differently their runs are timed, and a
 * run never depends on the order in which things happen to be drawn.
 *
 * Distributions (bench/sim/README.md says why these):
 *   initial history   uniform [init_ctx_min, init_ctx_max)
 *   tool output       lognormal(median, sigma), clamped
 *   decode length     lognormal(median, sigma), clamped
 *   think time        lognormal(median, sigma), clamped
 *   compacted session uniform [compact_min, compact_max)
 */
#include <math.h>

#include "sim.h"

enum {
	K_INIT = 1,
	K_START = 2,
	K_TOOL = 3,   /* + 1 used by the normal draw */
	K_DECODE = 5, /* + 1 */
	K_THINK = 7,  /* + 1 */
	K_COMPACT = 9,
	K_FIRST = 10,
};

uint64_t sim_mix(uint64_t x)
{
	/* splitmix64 finaliser: a bijection with full avalanche */
	x += 0x9E3779B97F4A7C15ull;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

double sim_uniform(uint64_t seed, uint64_t a, uint64_t b, uint64_t c)
{
	uint64_t h = sim_mix(sim_mix(sim_mix(sim_mix(seed) ^ a) ^ b) ^ c);
	return (double)(h >> 11) * 0x1.0p-53;
}

static double draw(const struct sim_workload *w, uint32_t agent, uint32_t turn, uint32_t kind)
{
	return sim_uniform(w->seed, agent, turn, kind);
}

/* Box-Muller from two independent uniforms; u1 kept away from 0. */
static double normal(const struct sim_workload *w, uint32_t agent, uint32_t turn, uint32_t kind)
{
	double u1 = draw(w, agent, turn, kind) + 0x1.0p-54;
	double u2 = draw(w, agent, turn, kind + 1);
	return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

static double lognormal(const struct sim_workload *w, uint32_t agent, uint32_t turn, uint32_t kind,
			double median, double sigma)
{
	return median * exp(sigma * normal(w, agent, turn, kind));
}

static uint32_t clamp_u32(double x, uint32_t lo, uint32_t hi)
{
	if (!(x >= lo))
		return lo;
	if (x >= hi)
		return hi;
	return (uint32_t)llround(x);
}

static double clamp_d(double x, double lo, double hi)
{
	return x < lo ? lo : x > hi ? hi : x;
}

static uint32_t uniform_u32(const struct sim_workload *w, uint32_t agent, uint32_t turn,
			    uint32_t kind, uint32_t lo, uint32_t hi)
{
	if (hi <= lo)
		return lo;
	return lo + (uint32_t)(draw(w, agent, turn, kind) * (double)(hi - lo));
}

uint32_t sim_draw_init_ctx(const struct sim_workload *w, uint32_t agent)
{
	return uniform_u32(w, agent, 0, K_INIT, w->init_ctx_min, w->init_ctx_max);
}

/* Agents do not all start at once: the first turn begins within one
 * median think time. */
double sim_draw_start_s(const struct sim_workload *w, uint32_t agent)
{
	return draw(w, agent, 0, K_START) * w->think_median_s;
}

uint32_t sim_draw_tool(const struct sim_workload *w, uint32_t agent, uint32_t turn)
{
	return clamp_u32(lognormal(w, agent, turn, K_TOOL, w->tool_median, w->tool_sigma),
			 w->tool_min, w->tool_max);
}

uint32_t sim_draw_decode(const struct sim_workload *w, uint32_t agent, uint32_t turn)
{
	return clamp_u32(lognormal(w, agent, turn, K_DECODE, w->decode_median, w->decode_sigma),
			 w->decode_min, w->decode_max);
}

double sim_draw_think_s(const struct sim_workload *w, uint32_t agent, uint32_t turn)
{
	return clamp_d(lognormal(w, agent, turn, K_THINK, w->think_median_s, w->think_sigma),
		       w->think_min_s, w->think_max_s);
}

uint32_t sim_draw_compact(const struct sim_workload *w, uint32_t agent, uint32_t turn)
{
	return uniform_u32(w, agent, turn, K_COMPACT, w->compact_min, w->compact_max);
}

/* Cold start: a session's first prompt (system prompt, tool definitions and
 * the task), uniform [first_min, first_max). */
uint32_t sim_draw_first(const struct sim_workload *w, uint32_t agent, uint32_t turn)
{
	return uniform_u32(w, agent, turn, K_FIRST, w->first_min, w->first_max);
}
