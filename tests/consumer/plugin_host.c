/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A host linked with libkvadmit.so that loads a plug-in embedding
 * libkvadmit.a (static_plugin.c) with dlopen(RTLD_LOCAL) and runs it.
 * tests/consumer/run.sh runs it under LD_DEBUG=bindings: none of the
 * plug-in's kva_* calls may bind to the host's libkvadmit.so.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include <kvadmit/kvadmit.h>

int main(int argc, char **argv)
{
	if (argc != 2)
		return 2;
	printf("host runs %s; ", kva_version_string());
	void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		printf("dlopen: %s\n", dlerror());
		return 1;
	}
	int (*run)(void);
	void *p = dlsym(h, "static_plugin_run");
	if (!p)
		return 1;
	memcpy(&run, &p, sizeof(p));
	int rc = run();
	printf("plug-in engine: %d\n", rc);
	return rc == 0 ? 0 : 1;
}
