/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The demo's screen (`make run`): what ran, the four headline figures for
 * legacy and wait with their ratio, the quiet case in one line, the
 * timeline, then (--details) the full table of report.c. The headline's
 * labels and order are part of README.md's "two commands" section and
 * checked by the sim_headline test (headline_check.py): change both together.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "sim.h"

#define HL_LABEL_W 40
#define HL_COL_W 11

static void hl_row(FILE *f, struct sim_result *r[2], const char *label, char vals[3][48])
{
	fprintf(f, "%-*s", HL_LABEL_W, label);
	for (int i = 0; i < 2; i++)
		if (r[i])
			fprintf(f, "%*s", HL_COL_W, vals[i]);
	if (r[0] && r[1])
		fprintf(f, "   %s", vals[2]);
	fputc('\n', f);
}

static double later_share(const struct sim_result *x)
{
	return x->later_turns ? (double)x->later_turns_restored / x->later_turns : 0;
}

/* Fills the two policies' cells of a row with fmt applied to x0, x1. */
static void cells(struct sim_result *r[2], char v[3][48], const char *fmt, double x0, double x1)
{
	const double x[2] = {x0, x1};
	for (int i = 0; i < 2; i++)
		if (r[i])
			snprintf(v[i], sizeof(v[i]), fmt, x[i]);
}

static void headline(FILE *f, struct sim_result *r[2], struct sim_metrics m[2])
{
	char v[3][48];
	/* the ratio column reads wait against legacy */
	int li = r[0] && r[0]->policy == SIM_POLICY_LEGACY ? 0 : 1;
	const struct sim_metrics *l = &m[li], *w = &m[1 - li];
	snprintf(v[0], sizeof(v[0]), "legacy");
	snprintf(v[1], sizeof(v[1]), "wait");
	snprintf(v[2], sizeof(v[2]), "wait vs legacy");
	hl_row(f, r, "", v);
	cells(r, v, "%.1f", m[0].decode_tok_s, m[1].decode_tok_s);
	snprintf(v[2], sizeof(v[2]), "%.1fx", w->decode_tok_s / fmax(l->decode_tok_s, 1e-9));
	hl_row(f, r, "decode tokens/s", v);
	cells(r, v, "%.1f%%", 100 * m[0].turn_cache, 100 * m[1].turn_cache);
	snprintf(v[2], sizeof(v[2]), "%+.1f points", 100 * (w->turn_cache - l->turn_cache));
	hl_row(f, r, "share of each turn's prompt from cache", v);
	cells(r, v, "%.1f", m[0].mean_turn, m[1].mean_turn);
	snprintf(v[2], sizeof(v[2]), "%.1fx shorter", l->mean_turn / fmax(w->mean_turn, 1e-9));
	hl_row(f, r, "mean turn time (s)", v);
	for (int i = 0; i < 2; i++)
		if (r[i])
			snprintf(v[i], sizeof(v[i]), "%llu/%llu",
				 (unsigned long long)r[i]->later_turns_restored,
				 (unsigned long long)r[i]->later_turns);
	if (r[0] && r[1])
		snprintf(v[2], sizeof(v[2]), "%.0f%% vs %.0f%%", 100 * later_share(r[1 - li]),
			 100 * later_share(r[li]));
	hl_row(f, r, "later turns restored", v);
}

/* The same flags with contexts that fit the pool, in one line. */
static void quiet_line(FILE *f, const struct sim_scenario *sc, struct sim_result *q[2])
{
	struct sim_metrics l = sim_metrics(sc, q[0]), w = sim_metrics(sc, q[1]);
	if (!sim_under_pressure(q[0]) && !sim_under_pressure(q[1]))
		fprintf(f,
			"With contexts that fit the pool (--cold) both policies are identical: "
			"%.1f tok/s, %.1f%% cached, %.1f s a turn.\n",
			w.decode_tok_s, 100 * w.turn_cache, w.mean_turn);
	else /* say what it is, not what it usually is */
		fprintf(
		    f,
		    "With contexts that start small (--cold): legacy vs wait %.1f vs %.1f tok/s, "
		    "%.1f%% vs %.1f%%, %.1f vs %.1f s.\n",
		    l.decode_tok_s, w.decode_tok_s, 100 * l.turn_cache, 100 * w.turn_cache,
		    l.mean_turn, w.mean_turn);
}

int sim_print_table(FILE *f, const struct sim_scenario *sc, struct sim_result *r[SIM_N_POLICIES],
		    struct sim_result *quiet[SIM_N_POLICIES])
{
	struct sim_metrics m[2];
	memset(m, 0, sizeof(m));
	double end = 0;
	for (int i = 0; i < 2; i++)
		if (r[i]) {
			m[i] = sim_metrics(sc, r[i]);
			end = fmax(end, r[i]->ctx_to_pool_end);
		}
	fprintf(
	    f,
	    "kvadmit-sim: the real kvadmit engine deciding admissions for simulated LLM agents.\n"
	    "No GPU is used: the GPU, the checkpoint store and the directory are modelled on a\n"
	    "simulated clock (bench/sim/README.md); every admission is the engine's own decision.\n"
	    "  legacy      today's engines: a restore refused for capacity recomputes its prefix\n"
	    "  wait        kvadmit: that restore waits for capacity, then copies the stored KV in\n"
	    "  from cache  prompt tokens a turn did not recompute (still in the pool, or "
	    "restored)\n"
	    "  restored    a turn after a session's first that recomputed none of its history\n"
	    "Scenario: %u agents on %u engine%s, profile %s (--profile), %s;\n"
	    "their contexts are %.2fx the KV pool at the start, %.2fx at the end of %g min.\n\n",
	    sc->w.agents, sc->nodes, sc->nodes == 1 ? "" : "s", sc->m.profile,
	    sc->w.warm ? "sessions under way" : "sessions at their first turn (--cold)",
	    sim_ctx_to_pool_start(sc), end, sc->duration_s / 60);
	headline(f, r, m);
	fputc('\n', f);
	/* A ratio of 1.0 reads as "kvadmit does nothing" unless the reader
	 * learns that the pools never ran short in this window. */
	if ((!r[0] || !sim_under_pressure(r[0])) && (!r[1] || !sim_under_pressure(r[1])))
		fprintf(
		    f,
		    "The pools never ran short in this window: no restore was refused or waited\n"
		    "for capacity and nothing was preempted or evicted, so both policies made the\n"
		    "same decisions. Pressure comes with larger contexts (the default, sessions\n"
		    "under way) or more agents per engine; bench/sim/README.md, "
		    "\"Sensitivity\".\n\n");
	if (quiet[0] && quiet[1]) {
		quiet_line(f, sc, quiet);
		fputc('\n', f);
	}
	sim_timeline_print(f, r);
	int rc = 0;
	if (sc->svg_path) {
		if (sim_timeline_svg(sc->svg_path, sc, r) == 0) {
			fprintf(f, "The timeline as a picture: %s\n", sc->svg_path);
		} else {
			fprintf(stderr, "kvadmit-sim: --svg %s: %s\n", sc->svg_path,
				strerror(errno));
			rc = -1;
		}
	}
	if (sc->details) {
		fputc('\n', f);
		sim_print_details(f, sc, r);
	} else {
		fprintf(f,
			"Every counter: --details; one JSON object: --json; the flags: --help.\n");
	}
	return rc;
}
