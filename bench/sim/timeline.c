/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The run over time: per-bin counters a policy's run fills (serving.c) and
 * the two pictures drawn from them, a terminal sparkline per series and an
 * SVG file. The SVG is written here, in plain C, rather than by gnuplot
 * (what bench/plots.gp uses): `make run` installs only the demo's packages
 * on a fresh machine, and a file of polylines needs no plotting program.
 * Both pictures are pure functions of the results: same seed, same bytes.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

/* At most this many bins: a sparkline stays one terminal line. */
#define MAX_BINS 60u

int sim_timeline_init(struct sim_timeline *t, double duration_s)
{
	memset(t, 0, sizeof(*t));
	/* whole minutes per bin, as few as keep the bins under MAX_BINS */
	double minutes = ceil(duration_s / 60.0 / MAX_BINS);
	t->bin_s = 60.0 * (minutes < 1 ? 1 : minutes);
	t->duration_s = duration_s;
	t->n = (uint32_t)ceil(duration_s / t->bin_s);
	if (t->n < 1)
		t->n = 1;
	t->decode_tokens = calloc(t->n, sizeof(*t->decode_tokens));
	t->turn_prompt = calloc(t->n, sizeof(*t->turn_prompt));
	t->turn_cached = calloc(t->n, sizeof(*t->turn_cached));
	t->capacity = calloc(t->n, sizeof(*t->capacity));
	t->waiting = calloc(t->n, sizeof(*t->waiting));
	if (t->decode_tokens && t->turn_prompt && t->turn_cached && t->capacity && t->waiting)
		return 0;
	sim_timeline_free(t);
	return -1;
}

void sim_timeline_free(struct sim_timeline *t)
{
	free(t->decode_tokens);
	free(t->turn_prompt);
	free(t->turn_cached);
	free(t->capacity);
	free(t->waiting);
	memset(t, 0, sizeof(*t));
}

uint32_t sim_timeline_bin(const struct sim_timeline *t, uint64_t now_ns)
{
	double b = (double)now_ns / SIM_NS_PER_S / t->bin_s;
	return b < t->n ? (uint32_t)b : t->n - 1;
}

uint64_t sim_timeline_bin_end_ns(const struct sim_timeline *t, uint32_t bin)
{
	double end = (bin + 1) * t->bin_s;
	if (end > t->duration_s)
		end = t->duration_s;
	return (uint64_t)llround(end * SIM_NS_PER_S);
}

/* ---- the series ------------------------------------------------------------ */

enum { SERIES_DECODE, SERIES_CACHE, SERIES_CAPACITY, SERIES_WAITING, SERIES_COUNT };

static const char *const series_label[SERIES_COUNT] = {
    "decode tokens/s", "share of prompt from cache", "pool capacity in use", "requests waiting"};
static const char *const series_id[SERIES_COUNT] = {"decode", "cache", "capacity", "waiting"};

/* The value of series k in bin i; NAN where it has none (no turn ended). */
static double value(const struct sim_timeline *t, int k, uint32_t i)
{
	double w = fmin(t->bin_s, t->duration_s - i * t->bin_s);
	switch (k) {
	case SERIES_DECODE:
		return w > 0 ? (double)t->decode_tokens[i] / w : 0;
	case SERIES_CACHE:
		return t->turn_prompt[i] ? 100.0 * (double)t->turn_cached[i] / t->turn_prompt[i]
					 : NAN;
	case SERIES_CAPACITY:
		return 100.0 * t->capacity[i];
	default:
		return t->waiting[i];
	}
}

/* One scale per series for both policies: percentages up to 100, counts up
 * to the larger maximum. */
static double series_max(struct sim_result *r[2], int k)
{
	if (k == SERIES_CACHE || k == SERIES_CAPACITY)
		return 100.0;
	double m = 0;
	for (int p = 0; p < 2; p++)
		if (r[p])
			for (uint32_t i = 0; i < r[p]->tl.n; i++)
				m = fmax(m, value(&r[p]->tl, k, i));
	return m > 0 ? m : 1;
}

static const char *policy_label(int policy)
{
	return policy == SIM_POLICY_WAIT ? "wait" : "legacy";
}

/* ---- JSON: the series as arrays ------------------------------------------ */

void sim_timeline_json(FILE *f, const struct sim_timeline *t)
{
	static const char *const key[SERIES_COUNT] = {"decode_tok_s", "turn_cache_share",
						      "pool_in_use", "requests_waiting"};
	/* shares as fractions, like the rest of the JSON */
	static const double scale[SERIES_COUNT] = {1, 0.01, 0.01, 1};
	fprintf(f, "\"timeline\":{\"bin_s\":%.6g", t->bin_s);
	for (int k = 0; k < SERIES_COUNT; k++) {
		fprintf(f, ",\"%s\":[", key[k]);
		for (uint32_t i = 0; i < t->n; i++) {
			double v = value(t, k, i);
			fputs(i ? "," : "", f);
			if (isnan(v))
				fputs("null", f);
			else
				fprintf(f, "%.6g", v * scale[k]);
		}
		fputc(']', f);
	}
	fputc('}', f);
}

/* ---- terminal: one sparkline per series and policy ----------------------- */

void sim_timeline_print(FILE *f, struct sim_result *r[2])
{
	static const char *const blocks[8] = {"\u2581", "\u2582", "\u2583", "\u2584",
					      "\u2585", "\u2586", "\u2587", "\u2588"};
	const struct sim_timeline *t0 = r[0] ? &r[0]->tl : &r[1]->tl;
	char per[32] = "a minute";
	if (t0->bin_s != 60)
		snprintf(per, sizeof(per), "per %.0f minutes", t0->bin_s / 60);
	fprintf(f,
		"Over time, one character %s from 0 to %g min (both policies on one scale\n"
		"per row, its top on the left; a blank: no turn ended):\n",
		per, t0->duration_s / 60);
	for (int k = 0; k < SERIES_COUNT; k++) {
		double top = series_max(r, k);
		char scale[32];
		if (k == SERIES_CACHE || k == SERIES_CAPACITY)
			snprintf(scale, sizeof(scale), "100%%");
		else
			snprintf(scale, sizeof(scale), "%.0f", top);
		for (int p = 0; p < 2; p++) {
			if (!r[p])
				continue;
			fprintf(f, "  %-28s %6s  %-6s ", p == 0 || !r[0] ? series_label[k] : "",
				p == 0 || !r[0] ? scale : "", policy_label(r[p]->policy));
			for (uint32_t i = 0; i < r[p]->tl.n; i++) {
				double v = value(&r[p]->tl, k, i);
				if (isnan(v)) {
					fputc(' ', f);
					continue;
				}
				int lvl = (int)floor(v / top * 8);
				fputs(blocks[lvl < 0 ? 0 : lvl > 7 ? 7 : lvl], f);
			}
			fputc('\n', f);
		}
	}
}

/* ---- SVG: four panels, two polylines each ------------------------------- */

#define SVG_W 800
#define PANEL_H 150
#define MARGIN_L 70
#define MARGIN_R 110
#define MARGIN_T 40
#define GAP 40

int sim_timeline_svg(const char *path, const struct sim_scenario *sc, struct sim_result *r[2])
{
	FILE *f = fopen(path, "w");
	if (!f)
		return -1;
	static const char *const color[2] = {"#d62728", "#1f77b4"}; /* legacy red, wait blue */
	const struct sim_timeline *t0 = r[0] ? &r[0]->tl : &r[1]->tl;
	int plot_w = SVG_W - MARGIN_L - MARGIN_R;
	int h = MARGIN_T + SERIES_COUNT * (PANEL_H + GAP);
	fprintf(f,
		"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
		"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
		"viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n",
		SVG_W, h, SVG_W, h);
	fprintf(f,
		"<title>kvadmit-sim: legacy vs wait over time (%s, %u agents, %s start, seed "
		"%llu)</title>\n",
		sc->m.profile, sc->w.agents, sc->w.warm ? "warm" : "cold",
		(unsigned long long)sc->w.seed);
	fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
	fprintf(f,
		"<text x=\"%d\" y=\"22\" font-size=\"15\">kvadmit-sim: %s, %u agents on %u "
		"engine%s, %s start, per %.0f min</text>\n",
		MARGIN_L, sc->m.profile, sc->w.agents, sc->nodes, sc->nodes == 1 ? "" : "s",
		sc->w.warm ? "warm" : "cold", t0->bin_s / 60);
	for (int k = 0; k < SERIES_COUNT; k++) {
		int y0 = MARGIN_T + k * (PANEL_H + GAP) + 10;
		double top = series_max(r, k);
		fprintf(f, "<g id=\"%s\">\n", series_id[k]);
		fprintf(f, "<text x=\"%d\" y=\"%d\" font-weight=\"bold\">%s</text>\n", MARGIN_L,
			y0 - 6, series_label[k]);
		fprintf(f,
			"<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" "
			"stroke=\"#888\"/>\n",
			MARGIN_L, y0, plot_w, PANEL_H);
		fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%.0f%s</text>\n",
			MARGIN_L - 6, y0 + 10, top,
			k == SERIES_CACHE || k == SERIES_CAPACITY ? "%" : "");
		fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">0</text>\n", MARGIN_L - 6,
			y0 + PANEL_H);
		fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%g min</text>\n",
			MARGIN_L + plot_w, y0 + PANEL_H + 16, t0->duration_s / 60);
		for (int p = 0; p < 2; p++) {
			if (!r[p])
				continue;
			const struct sim_timeline *t = &r[p]->tl;
			fprintf(f,
				"<polyline class=\"%s\" fill=\"none\" stroke=\"%s\" "
				"stroke-width=\"2\" points=\"",
				policy_label(r[p]->policy), color[r[p]->policy == SIM_POLICY_WAIT]);
			bool first = true;
			for (uint32_t i = 0; i < t->n; i++) {
				double v = value(t, k, i);
				if (isnan(v))
					continue; /* no turn ended in this bin */
				double mid = fmin((i + 0.5) * t->bin_s, t->duration_s);
				double x = MARGIN_L + plot_w * mid / t->duration_s;
				double y = y0 + PANEL_H * (1 - fmin(v / top, 1));
				fprintf(f, "%s%.1f,%.1f", first ? "" : " ", x, y);
				first = false;
			}
			fprintf(f, "\"/>\n");
			fprintf(f, "<text x=\"%d\" y=\"%d\" fill=\"%s\">%s</text>\n",
				MARGIN_L + plot_w + 10, y0 + 20 + 18 * p,
				color[r[p]->policy == SIM_POLICY_WAIT], policy_label(r[p]->policy));
		}
		fprintf(f, "</g>\n");
	}
	fprintf(f, "</svg>\n");
	return fclose(f) == 0 ? 0 : -1;
}
