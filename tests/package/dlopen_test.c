/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Loads the shared library with dlopen(), as a plug-in loader or an
 * interpreter does, and calls it through dlsym(): the library must load
 * (no static-TLS dependency such as libjemalloc.so.2), report the version the
 * headers were generated with, and run an engine (its allocator falls back
 * to malloc: this process has no jemalloc), and stay loaded after dlclose.
 *
 *   dlopen_test core LIBKVADMIT_SO        the core alone: no CUDA importer
 *                                         in the process, so the feature
 *                                         KVA_FEATURE_CUDA_IMPORTER is false
 *   dlopen_test cuda LIBKVADMIT_CUDA_SO   the CUDA library (bringing the core
 *                                         as its dependency): the feature
 *                                         equals kva_cuda_importer_supported()
 *   dlopen_test fleet LIBKVADMIT_FLEET_SO the fleet library (bringing the core
 *                                         as its dependency, as core)
 *
 * tests/consumer/run.sh also loads the installed CUDA and fleet libraries
 * by path from a prefix off the loader's paths: their RUNPATH ($ORIGIN)
 * finds the core beside them.
 *
 * This program links neither library.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "kvadmit/kvadmit.h"

#define SYM(h, name) load(h, #name)

static void *load(void *h, const char *name)
{
	void *p = dlsym(h, name);
	if (!p)
		fprintf(stderr, "dlsym(%s): %s\n", name, dlerror());
	return p;
}

int main(int argc, char **argv)
{
	if (argc != 3 || (strcmp(argv[1], "core") && strcmp(argv[1], "cuda") &&
			  strcmp(argv[1], "fleet"))) {
		fprintf(stderr, "usage: %s core|cuda|fleet LIBRARY\n", argv[0]);
		return 2;
	}
	void *h = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		fprintf(stderr, "dlopen(%s): %s\n", argv[2], dlerror());
		return 1;
	}
	uint32_t (*version)(void);
	const char *(*version_string)(void);
	bool (*has_feature)(int);
	void (*config_default)(kva_config *);
	kva_engine *(*create)(const kva_config *, int *);
	void (*destroy)(kva_engine *);
	int (*submit)(kva_engine *, const kva_request *, kva_handle *);
	int (*step)(kva_engine *, uint64_t, kva_plan *);
	/* POSIX: dlsym's object pointer converts to a function pointer by copy. */
	void *p;
#define GET(var, name)                                                                             \
	do {                                                                                       \
		if (!(p = SYM(h, name)))                                                           \
			return 1;                                                                  \
		memcpy(&var, &p, sizeof(p));                                                       \
	} while (0)
	GET(version, kva_version);
	GET(version_string, kva_version_string);
	GET(has_feature, kva_has_feature);
	GET(config_default, kva_config_default);
	GET(create, kva_engine_create);
	GET(destroy, kva_engine_destroy);
	GET(submit, kva_submit);
	GET(step, kva_step);

	printf("dlopen(%s): kva_version() = 0x%06x (%s), headers 0x%06x (%s)\n", argv[2],
	       (unsigned)version(), version_string(), (unsigned)KVA_VERSION_NUMBER, KVA_VERSION_STRING);
	if (version() != KVA_VERSION_NUMBER || strcmp(version_string(), KVA_VERSION_STRING) != 0)
		return 1;
	if (!has_feature(KVA_FEATURE_RESTORE_RESERVATION))
		return 1;

	bool cuda_feature = has_feature(KVA_FEATURE_CUDA_IMPORTER);
	if (!strcmp(argv[1], "fleet")) {
		void (*fleet_config_default)(void *);
		GET(fleet_config_default, kva_fleet_config_default);
		(void)fleet_config_default;
		printf("fleet library: kva_fleet_config_default found\n");
	}
	if (strcmp(argv[1], "cuda")) {
		printf("%s: KVA_FEATURE_CUDA_IMPORTER = %d\n", argv[1], cuda_feature);
		if (cuda_feature)
			return 1;
	} else {
		bool (*supported)(void);
		GET(supported, kva_cuda_importer_supported);
		printf("with libkvadmit-cuda: KVA_FEATURE_CUDA_IMPORTER = %d, "
		       "kva_cuda_importer_supported() = %d\n",
		       cuda_feature, supported());
		if (cuda_feature != supported())
			return 1;
	}

	kva_config cfg;
	config_default(&cfg);
	cfg.total_pages = 64;
	cfg.page_tokens = 16;
	cfg.copy_slots = 2;
	cfg.max_running = 8;
	int err = 0;
	kva_engine *e = create(&cfg, &err);
	if (!e) {
		fprintf(stderr, "kva_engine_create: %d\n", err);
		return 1;
	}
	kva_handle hd;
	kva_admission adm[4];
	uint32_t pages[64];
	kva_plan plan = {.admitted = adm, .admitted_cap = 4, .pages = pages, .pages_cap = 64};
	kva_request req = {.id = 1, .prompt_tokens = 32};
	int admitted = submit(e, &req, &hd) == 0 ? step(e, 1000, &plan) : -1;
	destroy(e);
	printf("engine through dlsym: %d admitted\n", admitted);
	if (admitted != 1)
		return 1;

	/* dlclose must not unmap the library or liburcu: liburcu's call_rcu
	 * thread and queued callbacks outlive the engine (an interpreter that
	 * unloads at exit crashed in them). The old function pointers must
	 * still run an engine. */
	dlclose(h);
	void *still = dlopen(argv[2], RTLD_NOW | RTLD_NOLOAD);
	void *urcu = dlopen("liburcu-memb.so.8", RTLD_NOW | RTLD_NOLOAD);
	printf("after dlclose: library %s, liburcu-memb %s\n", still ? "loaded" : "UNLOADED",
	       urcu ? "loaded" : "UNLOADED");
	if (!still || !urcu)
		return 1;
	e = create(&cfg, &err);
	if (!e)
		return 1;
	req.id = 2;
	admitted = submit(e, &req, &hd) == 0 ? step(e, 1000, &plan) : -1;
	destroy(e);
	dlclose(still);
	dlclose(urcu);
	return admitted == 1 ? 0 : 1;
}
