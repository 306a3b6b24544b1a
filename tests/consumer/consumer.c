/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A host built against the installed package (tests/consumer/run.sh): the
 * headers it was compiled with must match the library it runs with, and the
 * engine and the CPU importer work end to end — one request whose prefix is
 * restored from a host-side checkpoint by the CPU importer.
 */
#include <stdio.h>
#include <string.h>

#include <kvadmit/importer.h>
#include <kvadmit/kvadmit.h>

#define PAGE_BYTES 64
#define POOL_PAGES 64

static unsigned char pool[POOL_PAGES * PAGE_BYTES];
static unsigned char checkpoint[16 * PAGE_BYTES];
static kva_engine *engine;

static void lookup(void *ctx, uint64_t key, uint32_t prompt_tokens, kva_lookup_token t)
{
	(void)ctx;
	(void)prompt_tokens;
	kva_manifest m = {.count = 1};
	m.entries[0] = (kva_checkpoint){.position = 256, .location = KVA_LOC_EXTERNAL,
	                                .compatible = 1, .id = key, .epoch = 1};
	kva_lookup_answer(engine, t, &m);
}

static int resolve(void *ctx, uint64_t id, uint64_t epoch, uint32_t rank, const void **src,
                   size_t *bytes)
{
	(void)ctx, (void)id, (void)epoch, (void)rank;
	*src = checkpoint;
	*bytes = sizeof(checkpoint);
	return 0;
}

int main(void)
{
	printf("kvadmit %s (library 0x%06x, headers 0x%06x)\n", kva_version_string(),
	       (unsigned)kva_version(), (unsigned)KVA_VERSION_NUMBER);
	if (kva_version() != KVA_VERSION_NUMBER || strcmp(kva_version_string(), KVA_VERSION_STRING))
		return 1;
	memset(checkpoint, 0xab, sizeof(checkpoint));

	kva_cpu_importer_config icfg;
	kva_cpu_importer_config_default(&icfg);
	icfg.page_bytes = PAGE_BYTES;
	icfg.dest_base = pool;
	icfg.dest_pages = POOL_PAGES;
	icfg.resolve = resolve;
	int err;
	kva_cpu_importer *imp = kva_cpu_importer_create(&icfg, &err);
	if (!imp) {
		fprintf(stderr, "importer: %s\n", kva_strerror(err));
		return 1;
	}
	kva_config cfg;
	kva_config_default(&cfg);
	cfg.total_pages = POOL_PAGES;
	cfg.page_tokens = 16;
	cfg.copy_slots = 2;
	cfg.max_running = 8;
	cfg.lookup = lookup;
	cfg.importers[0] = kva_cpu_importer_ref(imp);
	engine = kva_engine_create(&cfg, &err);
	if (!engine) {
		fprintf(stderr, "engine: %s\n", kva_strerror(err));
		return 1;
	}
	kva_request req = {.id = 7, .prefix_key = 99, .prompt_tokens = 300};
	kva_handle h;
	if (kva_submit(engine, &req, &h))
		return 1;
	kva_admission adm[4];
	uint32_t pages[POOL_PAGES];
	kva_plan plan = {.admitted = adm, .admitted_cap = 4, .pages = pages, .pages_cap = POOL_PAGES};
	int admitted = 0;
	for (uint64_t now = 1; !admitted && now < 100000; now++) {
		admitted = kva_step(engine, now * 1000000, &plan);
		if (!admitted)
			kva_cpu_importer_wait_idle(imp, 1000000);
	}
	int ok = admitted == 1 && adm[0].how == KVA_ADMIT_RESTORE && adm[0].restored_tokens == 256 &&
	         pool[(size_t)pages[adm[0].pages_off] * PAGE_BYTES] == 0xab;
	printf("admitted %d: how=%d restored=%u\n", admitted, admitted ? adm[0].how : 0,
	       admitted ? adm[0].restored_tokens : 0);
	kva_finish(engine, h);
	kva_cpu_importer_destroy(imp);
	kva_engine_destroy(engine);
	return ok ? 0 : 1;
}
