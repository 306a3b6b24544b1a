/* SPDX-License-Identifier: Apache-2.0 */
/*
 * BM_dram_miss: what one dependent random load over 256 MiB costs on this
 * machine (memwalk.h), per hop, CPU time. The 1M-waiting rows are bound by
 * such misses (a cancel reads its record, unlinks it between two neighbours
 * and drops its id: each a line no cache holds at a million waiting), so
 * their absolute targets depend on the machine as much as on the code: the
 * table reads those rows in this unit too. No kvadmit call.
 */
#include "bm.h"
#include "gbench.h"
#include "memwalk.h"

static void bm_dram_miss(gb_state *s, void *arg)
{
	(void)arg;
	struct mw_ring *r = mw_shared();
	mw_walk(r, 4096); /* leave wherever the last user stopped */
	size_t n;
	while ((n = gb_keep_running_batch(s, 4096)))
		mw_walk(r, n);
	gb_set_items_processed(s, gb_iterations_done(s));
}

void bm_register_machine(void)
{
	gb_register("BM_dram_miss", bm_dram_miss, NULL);
}
