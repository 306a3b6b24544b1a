/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_fleet_wire: the fleet's KV-event decoder (fleet/wire.c) on arbitrary
 * payloads. Checks: no crash, no read past the payload (ASan), no undefined
 * behaviour (UBSan); a decoded batch is self-consistent (every event's
 * hashes inside the batch's hash array, known types, medium NUL-terminated);
 * decoding is deterministic; with limits, -E2BIG instead of growth.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wire.h"

#define CHECK(c)                                                                             \
	do {                                                                                 \
		if (!(c))                                                                    \
			__builtin_trap();                                                    \
	} while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kvf_batch a, b;
	kvf_batch_init(&a, 0, 0);
	kvf_batch_init(&b, 64, 256);
	int ra = kvf_decode(&a, data, size);
	CHECK(ra == 0 || ra == -EBADMSG || ra == -ENOMEM);
	if (ra == 0) {
		uint64_t sum = 0;
		for (uint32_t i = 0; i < a.nevents; i++) {
			const struct kvf_event *e = &a.events[i];
			CHECK(e->type >= KVF_EV_STORED && e->type <= KVF_EV_CLEARED);
			CHECK((uint64_t)e->first_hash + e->nhashes <= a.nhashes);
			CHECK(e->medium_len <= KVF_MEDIUM_MAX && e->medium[e->medium_len] == 0);
			CHECK(e->type != KVF_EV_CLEARED || e->nhashes == 0);
			sum += e->nhashes;
		}
		CHECK(sum == a.nhashes);
		int rb = kvf_decode(&b, data, size);
		CHECK(rb == 0 || rb == -E2BIG);
		if (rb == 0) {
			CHECK(b.nevents == a.nevents && b.nhashes == a.nhashes);
			CHECK(b.unknown_events == a.unknown_events &&
			      b.undecodable_events == a.undecodable_events);
			CHECK(a.nhashes == 0 ||
			      memcmp(a.hashes, b.hashes, a.nhashes * sizeof(uint64_t)) == 0);
		}
	}
	kvf_batch_fini(&a);
	kvf_batch_fini(&b);
	return 0;
}
