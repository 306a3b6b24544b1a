/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A host with its own liburcu flavour (qsbr), looked up as
 * pkg_check_modules(URCU ... liburcu-qsbr) before or after
 * find_package(kvadmit), and libkvadmit.a (urcu-memb) in one program: the
 * package's lookups (kvadmit_URCU) must leave the host's URCU alone.
 */
#include <stdio.h>
#include <urcu/urcu-qsbr.h>

#include <kvadmit/kvadmit.h>

int main(void)
{
	urcu_qsbr_register_thread();
	urcu_qsbr_read_lock();
	urcu_qsbr_read_unlock();
	urcu_qsbr_quiescent_state();
	urcu_qsbr_unregister_thread();

	kva_config c;
	kva_config_default(&c);
	c.total_pages = 64;
	c.page_tokens = 16;
	int err = 0;
	kva_engine *e = kva_engine_create(&c, &err);
	if (!e) {
		printf("kva_engine_create: %d\n", err);
		return 1;
	}
	kva_engine_destroy(e);
	printf("qsbr and kvadmit ok\n");
	return 0;
}
