/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Writes kvadmit's metrics for check_metrics.py to parse with the Prometheus
 * client library's own parsers:
 *   DIR/run.prom, DIR/run.om       an engine after a small mixed workload
 *   DIR/fields.prom, DIR/fields.om  a kva_stats whose every field holds a
 *                                   distinct value, listed in DIR/fields.txt,
 *                                   so a field left out of the text is found
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvadmit/kvadmit.h"

#define SEC 1000000000ull

static kva_engine *E;

static void lookup(void *ctx, uint64_t key, uint32_t prompt, kva_lookup_token t)
{
	(void)ctx;
	(void)prompt;
	if (key == 3)
		return; /* never answered: times out */
	kva_manifest m = {.count = 1};
	m.entries[0] = (kva_checkpoint){.position = 64, .location = key == 2, .compatible = 1,
	                                .id = key, .epoch = 1};
	kva_lookup_answer(E, t, &m);
}

static int write_file(const char *dir, const char *name, const kva_stats *s, int format)
{
	size_t need = kva_stats_format_as(s, format, NULL, 0);
	char *buf = malloc(need + 1);
	if (!buf || kva_stats_format_as(s, format, buf, need + 1) != need)
		return -1;
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "w");
	if (!f)
		return -1;
	fputs(buf, f);
	fclose(f);
	free(buf);
	return 0;
}

static int run(kva_stats *out)
{
	kva_config c;
	kva_config_default(&c);
	c.total_pages = 64;
	c.page_tokens = 16;
	c.prefill_chunk_tokens = 64;
	c.lookup = lookup;
	c.lookup_timeout_ns = SEC;
	int err;
	E = kva_engine_create(&c, &err);
	if (!E)
		return err;
	static kva_admission adm[64];
	static uint32_t pages[4096];
	static kva_copy_job copies[64];
	static kva_ended ended[64];
	kva_plan p = {.admitted = adm, .admitted_cap = 64, .pages = pages, .pages_cap = 4096,
	              .copies = copies, .copies_cap = 64, .ended = ended, .ended_cap = 64};
	kva_handle h[8];
	uint64_t now = 0;
	for (int i = 0; i < 8; i++) {
		kva_request q = {.id = (uint64_t)i + 1, .prefix_key = (uint64_t)(i % 4),
		                 .prompt_tokens = 128};
		kva_submit(E, &q, &h[i]);
	}
	for (int step = 0; step < 6; step++) {
		now += SEC / 2;
		if (kva_step(E, now, &p) < 0)
			return -EINVAL;
		for (uint32_t k = 0; k < p.n_copies; k++)
			kva_copy_done(E, copies[k].token, copies[k].rank, 0);
		for (uint32_t k = 0; k < p.n_admitted; k++)
			kva_finish(E, adm[k].handle);
	}
	kva_stats_get(E, out);
	kva_engine_destroy(E);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 2)
		return 2;
	const char *dir = argv[1];
	kva_stats s;
	if (run(&s) != 0 || write_file(dir, "run.prom", &s, KVA_METRICS_PROMETHEUS) ||
	    write_file(dir, "run.om", &s, KVA_METRICS_OPENMETRICS))
		return 1;
	if (s.admitted_restore == 0 || s.lookups_timed_out == 0 || s.copy_duration.count == 0 ||
	    s.time_to_admission.count == 0)
		return 3; /* the workload must reach what the checker looks at */

	/* every scalar field distinct; histograms consistent (cumulative) */
	memset(&s, 0, sizeof(s));
	uint64_t *w = (uint64_t *)&s;
	size_t scalars = offsetof(kva_stats, capacity_wait) / sizeof(uint64_t);
	size_t skip = offsetof(kva_stats, fallbacks) / sizeof(uint64_t); /* reason NONE */
	char path[512];
	snprintf(path, sizeof(path), "%s/fields.txt", dir);
	FILE *f = fopen(path, "w");
	if (!f)
		return 1;
	for (size_t i = 0; i < scalars; i++) {
		if (i == skip)
			continue;
		w[i] = 1000003 + 1000 * i;
		fprintf(f, "%llu\n", (unsigned long long)w[i]);
	}
	kva_histogram *hs[] = {&s.capacity_wait, &s.lookup_latency, &s.copy_duration,
	                       &s.time_to_admission};
	for (size_t k = 0; k < 4; k++) {
		for (unsigned b = 0; b < KVA_HIST_BUCKETS; b++)
			hs[k]->buckets[b] = 10 * (k + 1) + b;
		hs[k]->count = hs[k]->buckets[KVA_HIST_BUCKETS - 1];
		hs[k]->sum_ns = 123456789ull * (k + 1);
		fprintf(f, "%llu\n", (unsigned long long)hs[k]->count);
	}
	fclose(f);
	if (write_file(dir, "fields.prom", &s, KVA_METRICS_PROMETHEUS) ||
	    write_file(dir, "fields.om", &s, KVA_METRICS_OPENMETRICS))
		return 1;
	return 0;
}
