/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Every thread kvadmit starts blocks every signal (docs/embedding.md,
 * "Threads, signals, RCU registration and fork"): the slab grower, the
 * call_rcu threads, the CPU importer's workers. The creating thread here
 * blocks none, so a thread that inherited its mask would show. (The fleet's
 * threads are checked in tests/fleet/test_fleet.c.)
 */
#include "scenario.h"

#include <pthread.h>

#include "kvadmit/importer.h"
#include "thread_signals.h"

static int never_resolves(void *ctx, uint64_t id, uint64_t epoch, uint32_t rank,
                          const void **src, size_t *bytes)
{
	(void)ctx, (void)id, (void)epoch, (void)rank, (void)src, (void)bytes;
	return -ENOENT;
}

static void engine_and_importer_threads_block_every_signal(void **st)
{
	(void)st;
	sigset_t none, old;
	sigemptyset(&none);
	pthread_sigmask(SIG_SETMASK, &none, &old);
	static unsigned char pool[4 * 64];
	kva_cpu_importer_config ic;
	kva_cpu_importer_config_default(&ic);
	ic.threads = 2;
	ic.page_bytes = 64;
	ic.dest_base = pool;
	ic.dest_pages = 4;
	ic.resolve = never_resolves;
	int err = 1;
	kva_cpu_importer *imp = kva_cpu_importer_create(&ic, &err);
	assert_non_null(imp);
	struct sc *s = sc_default(); /* starts the slab grower and the reclaimer */
	kva_handle h = sc_submit(s, 1, 0, 16);
	sc_step(s, 0);
	assert_int_equal(kva_finish(s->e, h), 0);
	sc_step(s, 0);
	int others = 0;
	assert_int_equal(threads_taking_signals(&others), 0);
	assert_true(others >= 3); /* two workers and the grower, at least */
	sc_free(s);
	kva_cpu_importer_destroy(imp);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(engine_and_importer_threads_block_every_signal),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
