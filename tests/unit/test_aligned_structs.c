/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The engine's struct has alignas(64) members (its statistics, its queues):
 * it must come from an aligned allocation. Without jemalloc it came from
 * calloc, whose 16-byte alignment put those members off their cache lines
 * (undefined behaviour, UBSan's alignment check). Engines of a few sizes,
 * created and destroyed in turn, so the allocator hands out many addresses.
 * The fleet's struct: tests/fleet/test_fleet_hostile.c.
 */
#include <setjmp.h>
#include <stdalign.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include <kvadmit/kvadmit.h>

#include "engine_state.h"

static void engines_are_aligned(void **st)
{
	(void)st;
	kva_engine *keep[16];
	for (int i = 0; i < 16; i++) {
		void *spacer = malloc((size_t)16 * (i + 1)); /* moves the heap's next address */
		kva_config c;
		kva_config_default(&c);
		c.total_pages = 64 + (uint32_t)i;
		int err = 1;
		keep[i] = kva_engine_create(&c, &err);
		assert_int_equal(err, 0);
		assert_non_null(keep[i]);
		assert_int_equal((uintptr_t)keep[i] % alignof(struct kva_engine), 0);
		free(spacer);
	}
	for (int i = 0; i < 16; i++)
		kva_engine_destroy(keep[i]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(engines_are_aligned),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
