/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvadmit-bench: registers every benchmark (C files behind gbench.h) and
 * runs the ones Google Benchmark's flags select. Order matters: the memory
 * benchmark builds the 1,000,000-waiting engine first, in a fresh process,
 * so its resident-set growth is not hidden by memory freed earlier; later
 * benchmarks reuse that engine. BM_churn re-executes this program with a
 * hidden flag (bm.h) for each of its processes.
 */
#include <stdio.h>
#include <string.h>

#include "bm.h"
#include "fixture.h"
#include "gbench.h"

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], BM_CHURN_CHILD_FLAG) == 0) {
		int rc = bm_churn_child(argv[2]);
		bx_cache_clear();
		return rc;
	}
	gb_initialize(&argc, argv);
	bm_register_memory();
	bm_register_step();
	bm_register_admit();
	bm_register_events();
	bm_register_submit();
	bm_register_capacity();
	bm_register_local();
	bm_register_lifecycle();
	bm_register_churn();
	bm_register_stalls();
	bm_register_step_tail();
	bm_register_priority();
	int ran = gb_run(argc, argv);
	bm_cleanup_step();
	bm_cleanup_events();
	bm_cleanup_priority();
	bx_cache_clear();
	gb_shutdown();
	return ran < 0 ? 1 : 0;
}
