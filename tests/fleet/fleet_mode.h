/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fleet_mode: the fleet suites run twice (fleet/CMakeLists.txt): as
 * configured, and with KVA_TEST_FLEET_SCORE=1, where every fleet has
 * cfg.score and so keeps its index in the routers' table (fleet/holders.h).
 */
#ifndef KVA_TEST_FLEET_MODE_H
#define KVA_TEST_FLEET_MODE_H

#include <stdbool.h>
#include <stdlib.h>

#include "kvadmit/fleet.h"

static inline bool fleet_mode_score(void)
{
	const char *v = getenv("KVA_TEST_FLEET_SCORE");
	return v && *v && *v != '0';
}

static inline void fleet_mode_apply(kva_fleet_config *c)
{
	if (fleet_mode_score())
		c->score = 1;
}

#endif
