/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The engine the fleet tests put behind a directory: 100 pages of 16
 * tokens, no decode reserve, lookups answered by the fleet f, timeouts long
 * enough that only the fleet decides (test_fleet.c, test_fleet_hostile.c).
 */
#ifndef KVA_TESTS_FLEET_ENGINE_H
#define KVA_TESTS_FLEET_ENGINE_H

#include <kvadmit/fleet.h>
#include <kvadmit/kvadmit.h>

static inline void fleet_test_engine_config(kva_config *c, kva_fleet *f, uint32_t max_running,
                                            uint64_t start_ns)
{
	kva_config_default(c);
	c->total_pages = 100;
	c->page_tokens = 16;
	c->decode_reserve_pages = 0;
	c->decode_headroom_pages = 0;
	c->prefill_chunk_tokens = 256;
	c->copy_slots = 4;
	c->max_running = max_running;
	c->lookup_timeout_ns = 120ull * 1000000000ull;
	c->max_restore_wait_ns = 600ull * 1000000000ull;
	c->lookup_refresh_ns = 0;
	c->start_ns = start_ns;
	c->lookup = kva_fleet_lookup;
	c->lookup_ctx = f;
}

#endif
