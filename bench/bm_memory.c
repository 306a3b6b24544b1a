/* SPDX-License-Identifier: Apache-2.0 */
/*
 * BM_memory_per_request: bytes per waiting request at 1,000,000 waiting
 * restores, each answered with a one-checkpoint manifest (the retained
 * manifest stays with the request). Measured while the engine is built
 * (fixture.c), between a snapshot taken after the running requests exist
 * and one after the last waiting request was ingested:
 *   arena_bytes_per_request  growth of kvadmit's jemalloc arena (exact: the
 *                            records and manifests; only when the process
 *                            has jemalloc, which this benchmark links when
 *                            KVADMIT_WITH_JEMALLOC is on);
 *   rss_bytes_per_request    growth of the resident set (also counts the id
 *                            table's buckets, which liburcu allocates with
 *                            malloc, and allocator overhead).
 * bytes_per_request is the arena figure where there is one, else the RSS
 * figure; the label says which. The timed loop is kva_stats_get on that
 * engine, which is cheap and not the point.
 */
#include <stdio.h>

#include "bm.h"
#include "fixture.h"
#include "gbench.h"

#define WAITING 1000000

static void bm_memory_per_request(gb_state *s, void *arg)
{
	(void)arg;
	struct bx *b = bx_blocked((size_t)gb_range_arg(s, 0));
	kva_stats st;
	size_t n;
	while ((n = gb_keep_running_batch(s, 64)))
		for (size_t i = 0; i < n; i++)
			kva_stats_get(b->e, &st);
	bool arena = b->arena_bytes_per_request > 0;
	gb_counter(s, "bytes_per_request",
	           arena ? b->arena_bytes_per_request : b->rss_bytes_per_request, GB_COUNTER_DEFAULT);
	gb_counter(s, "arena_bytes_per_request", b->arena_bytes_per_request, GB_COUNTER_DEFAULT);
	gb_counter(s, "rss_bytes_per_request", b->rss_bytes_per_request, GB_COUNTER_DEFAULT);
	gb_counter(s, "waiting", (double)b->n_waiting, GB_COUNTER_DEFAULT);
	gb_counter(s, "build_s", b->build_seconds, GB_COUNTER_DEFAULT);
	gb_set_label(s, arena ? "bytes_per_request: jemalloc arena stats"
	                      : "bytes_per_request: RSS growth (no jemalloc in the process)");
}

void bm_register_memory(void)
{
	gb_arg(gb_register("BM_memory_per_request", bm_memory_per_request, NULL), WAITING);
}
