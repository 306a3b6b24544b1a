/*
 * kvadmit-bench: registers every benchmark (C files behind gbench.h) and
 * runs the ones Google Benchmark's flags select. Order matters: the memory
 * benchmark builds the 1,000,000-waiting engine first, in a fresh process,
 * so its resident-set growth is not hidden by memory freed earlier; later
 * benchmarks reuse that engine.
 */
#include <stdio.h>

#include "bm.h"
#include "fixture.h"
#include "gbench.h"

int main(int argc, char **argv)
{
	gb_initialize(&argc, argv);
	bm_register_memory();
	bm_register_step();
	bm_register_admit();
	bm_register_events();
	bm_register_submit();
	bm_register_capacity();
	int ran = gb_run(argc, argv);
	bm_cleanup_step();
	bm_cleanup_events();
	bx_cache_clear();
	gb_shutdown();
	return ran < 0 ? 1 : 0;
}
