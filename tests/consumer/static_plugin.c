/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A plug-in (a Python extension, a custom op) that embeds libkvadmit.a: a
 * MODULE linked with kvadmit::kvadmit_static. tests/consumer/run.sh checks
 * that it exports none of kvadmit's functions (KVA_API is empty in the
 * archives), so a libkvadmit.so elsewhere in the process neither receives
 * its calls nor is shadowed by it.
 */
#include <kvadmit/kvadmit.h>

__attribute__((visibility("default"))) int static_plugin_run(void);

int static_plugin_run(void)
{
	kva_config c;
	kva_config_default(&c);
	c.total_pages = 64;
	c.page_tokens = 16;
	int err = 0;
	kva_engine *e = kva_engine_create(&c, &err);
	if (!e)
		return err ? err : -1;
	kva_engine_destroy(e);
	return 0;
}
