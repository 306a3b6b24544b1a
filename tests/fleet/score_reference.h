/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The router score's brute-force references (test_fleet.c against the
 * fleet, test_fleet_index.c against the copy alone) share its order and
 * its comparison: header-only, for cmocka tests.
 */
#ifndef KVA_TEST_FLEET_SCORE_REFERENCE_H
#define KVA_TEST_FLEET_SCORE_REFERENCE_H

#include <stdint.h>
#include <string.h>

#include "kvadmit/fleet.h"

/* o into out[0..*k), in kva_fleet_score's order: blocks, longest first,
 * then publisher, then medium name. */
static inline void score_ref_insert(kva_fleet_match *out, uint32_t *k, const kva_fleet_match *o)
{
	uint32_t j = (*k)++;
	for (; j > 0; j--) {
		const kva_fleet_match *b = &out[j - 1];
		int before = b->blocks != o->blocks         ? b->blocks > o->blocks
		             : b->publisher != o->publisher ? b->publisher < o->publisher
		                                            : strcmp(b->medium, o->medium) < 0;
		if (before)
			break;
		out[j] = *b;
	}
	out[j] = *o;
}

/* got[0..n) is want[0..n): publisher, blocks, tokens and medium. */
static inline void score_ref_assert_equal(const kva_fleet_match *got, const kva_fleet_match *want,
                                          uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		assert_int_equal(got[i].publisher, want[i].publisher);
		assert_int_equal(got[i].blocks, want[i].blocks);
		assert_int_equal(got[i].tokens, want[i].tokens);
		assert_string_equal(got[i].medium, want[i].medium);
	}
}

#endif
