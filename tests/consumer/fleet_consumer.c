/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A host that points kvadmit at a fleet's KV-event endpoints links
 * libkvadmit-fleet beside libkvadmit (docs/fleet.md): a fleet subscribed to
 * a publisher that is not there yet (ZeroMQ connects when it appears) is
 * created, attached as the engine's directory, given a chain and destroyed.
 */
#include <stdio.h>

#include <kvadmit/fleet.h>
#include <kvadmit/kvadmit.h>

int main(void)
{
	kva_fleet_publisher pub = {.endpoint = "tcp://127.0.0.1:1", .self = 1};
	kva_fleet_config fc;
	kva_fleet_config_default(&fc);
	fc.publishers = &pub;
	fc.npublishers = 1;
	fc.block_size = 16;
	int err = 0;
	kva_fleet *f = kva_fleet_create(&fc, &err);
	if (!f) {
		printf("kva_fleet_create: %d\n", err);
		return 1;
	}
	kva_config c;
	kva_config_default(&c);
	c.total_pages = 64;
	c.page_tokens = 16;
	c.lookup = kva_fleet_lookup;
	c.lookup_ctx = f;
	kva_engine *e = kva_engine_create(&c, &err);
	const uint64_t chain[2] = {1, 2};
	int rc = e ? kva_fleet_attach(f, e) : err;
	if (!rc)
		rc = kva_fleet_chain_register(f, 42, chain, 2);
	kva_fleet_destroy(f); /* before the engine */
	kva_engine_destroy(e);
	printf(rc ? "fleet: %d\n" : "fleet: OK\n", rc);
	return rc ? 1 : 0;
}
