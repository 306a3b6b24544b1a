/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Big blocks (reservations/alloc.c): slab chunks and the live-id map of
 * 2 MB and more are 2 MB-aligned, zeroed where asked, and marked for huge
 * pages (the VMA's "hg" flag in /proc/self/smaps) where the kernel offers
 * transparent huge pages. Whether the kernel then finds free huge pages is
 * its business, so the test checks the hint, not AnonHugePages.
 */
#include "scenario.h"

#include <stdbool.h>
#include <sys/mman.h>
#include <unistd.h>

#include "alloc.h"
#include "engine_state.h"

static bool aligned(const void *p)
{
	return ((uintptr_t)p & (KVA__HUGE - 1)) == 0;
}

/* Whether the kernel has transparent huge pages in a mode that honours
 * MADV_HUGEPAGE ("always" or "madvise" selected). */
static bool thp_offered(void)
{
	FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
	if (!f)
		return false;
	char line[128] = "";
	bool ok = fgets(line, sizeof(line), f) && !strstr(line, "[never]");
	fclose(f);
	return ok;
}

/* The VmFlags of the mapping that holds p contain "hg" (MADV_HUGEPAGE). */
static bool marked_huge(const void *p)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	if (!f)
		return false;
	char line[512];
	bool inside = false, hg = false;
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
			inside = (uintptr_t)p >= lo && (uintptr_t)p < hi;
		else if (inside && !strncmp(line, "VmFlags:", 8)) {
			hg = strstr(line, " hg") != NULL;
			break;
		}
	}
	fclose(f);
	return hg;
}

static void small_blocks_are_ordinary(void **state)
{
	(void)state;
	uint8_t *p = kva__calloc_big(4096);
	assert_non_null(p);
	for (size_t i = 0; i < 4096; i++)
		assert_int_equal(p[i], 0);
	kva__free_big(p, 4096);
	p = kva__alloc_big(KVA__HUGE - 1);
	assert_non_null(p);
	p[KVA__HUGE - 2] = 1;
	kva__free_big(p, KVA__HUGE - 1);
}

static void big_blocks_are_aligned_zeroed_and_hinted(void **state)
{
	(void)state;
	size_t n = 3 * KVA__HUGE + 4096; /* not a multiple of 2 MB */
	for (int round = 0; round < 3; round++) {
		/* dirty a block first, so a recycled one must be zeroed again */
		uint8_t *d = kva__alloc_big(n);
		assert_non_null(d);
		assert_true(aligned(d));
		memset(d, 0xa5, n);
		kva__free_big(d, n);

		uint8_t *p = kva__calloc_big(n);
		assert_non_null(p);
		assert_true(aligned(p));
		for (size_t i = 0; i < n; i += 997)
			assert_int_equal(p[i], 0);
		assert_int_equal(p[n - 1], 0);
		if (thp_offered())
			assert_true(marked_huge(p));
		kva__free_big(p, n);
	}
}

/* An engine's big slab chunks and its live-id map come from big blocks. */
static void engine_tables_use_big_blocks(void **state)
{
	(void)state;
	struct sc *s = sc_default();
	for (uint64_t id = 1; id <= 100000; id++)
		sc_submit(s, id, 0, 16);
	sc_step(s, 0);
	unsigned big = 0;
	for (uint32_t c = 0; c < KVA_SLAB_MAX_CHUNKS; c++) {
		char *base = atomic_load(&s->e->slab.chunk[c]);
		if (!base)
			continue;
		size_t bytes = (size_t)kva__slab_chunk_base(c + 1) - kva__slab_chunk_base(c);
		if (bytes * s->e->slab.slot_size >= KVA__HUGE) {
			assert_true(aligned(base));
			if (thp_offered())
				assert_true(marked_huge(base));
			big++;
		}
	}
	assert_true(big > 0);
	size_t map_bytes = (size_t)s->e->live_ids.cap * sizeof(*s->e->live_ids.ents);
	assert_true(map_bytes >= KVA__HUGE);
	assert_true(aligned(s->e->live_ids.ents));
	sc_free(s);
}

/* kva__warm, the slabs' warm hook, makes a range of a block resident
 * without changing it: a zeroed block stays zero. Where the kernel has no
 * MADV_POPULATE_WRITE (before 5.14) it does nothing. */
static void warm_faults_in_without_writing(void **state)
{
	(void)state;
	size_t pg = (size_t)sysconf(_SC_PAGESIZE), n = 3 * KVA__HUGE;
	uint8_t *p = kva__calloc_big(n);
	assert_non_null(p);
	uint8_t *from = p + KVA__HUGE + 5, *to = from + 100 * pg;
	kva__warm(from, (size_t)(to - from));
	uintptr_t lo = (uintptr_t)from & ~(pg - 1);
	size_t len = (((uintptr_t)to + pg - 1) & ~(pg - 1)) - lo;
	unsigned char *v = malloc(len / pg);
	assert_non_null(v);
	assert_int_equal(mincore((void *)lo, len, v), 0);
	size_t in = 0;
	for (size_t i = 0; i < len / pg; i++)
		in += v[i] & 1;
	free(v);
#ifdef MADV_POPULATE_WRITE
	void *probe = mmap(NULL, pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(probe != MAP_FAILED);
	bool supported = madvise(probe, pg, MADV_POPULATE_WRITE) == 0;
	munmap(probe, pg);
	if (supported)
		assert_int_equal(in, len / pg);
#endif
	for (uint8_t *q = p; q < p + n; q += 509)
		assert_int_equal(*q, 0);
	kva__free_big(p, n);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(small_blocks_are_ordinary),
	    cmocka_unit_test(big_blocks_are_aligned_zeroed_and_hinted),
	    cmocka_unit_test(engine_tables_use_big_blocks),
	    cmocka_unit_test(warm_faults_in_without_writing),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
