/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for lockfree/idmap: edge cases, then random insert / remove /
 * find sequences checked against a plain reference (an array of ids and
 * their values), with keys drawn from a small range so removals meet long
 * runs, wrap around the table's end and shift entries back; after every
 * operation count matches, and periodically every reference entry is found
 * and no entry of the table sits outside the run of its home.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "idmap.h"
#include "kva_test.h"

static void *mem_alloc(size_t n) { return malloc(n); }
static void mem_free(void *p, size_t n)
{
	(void)n;
	free(p);
}

/* An allocator that can be told to refuse: a growth the map cannot have. */
static int refuse_alloc;
static unsigned allocs;
static void *maybe_alloc(size_t n)
{
	if (refuse_alloc)
		return NULL;
	allocs++;
	return malloc(n);
}

/* Every occupied entry is reachable from its home: no empty slot lies
 * between the two (what lookups and the backward shift rely on). */
static void check_runs(const struct kva_idmap *m)
{
	uint32_t mask = m->cap - 1, n = 0;
	for (uint32_t i = 0; i < m->cap; i++) {
		if (m->ents[i].val == KVA_IDMAP_NONE)
			continue;
		n++;
		uint64_t h = (uint64_t)m->ents[i].key_hi << 32 | m->ents[i].key_lo;
		for (uint32_t j = (uint32_t)h & mask; j != i; j = (j + 1) & mask)
			assert_true(m->ents[j].val != KVA_IDMAP_NONE);
	}
	assert_int_equal(n, m->count);
}

static void test_edges(void **state)
{
	(void)state;
	struct kva_idmap m;
	assert_int_equal(kva_idmap_init(&m, mem_alloc, mem_free, 0), 0);
	assert_int_equal(m.cap, 64);
	assert_null(kva_idmap_find(&m, 0));
	assert_false(kva_idmap_remove(&m, 7));
	/* 0 and UINT64_MAX are ordinary ids */
	assert_int_equal(kva_idmap_insert(&m, 0, 10), 0);
	assert_int_equal(kva_idmap_insert(&m, UINT64_MAX, 11), 0);
	assert_int_equal(kva_idmap_insert(&m, 0, 12), -EEXIST);
	assert_int_equal(*kva_idmap_find(&m, 0), 10); /* unchanged by the refused insert */
	assert_int_equal(*kva_idmap_find(&m, UINT64_MAX), 11);
	*kva_idmap_find(&m, 0) = 13; /* the slot is the value's storage */
	assert_int_equal(*kva_idmap_find(&m, 0), 13);
	assert_true(kva_idmap_remove(&m, 0));
	assert_null(kva_idmap_find(&m, 0));
	assert_false(kva_idmap_remove(&m, 0));
	assert_int_equal(m.count, 1);
	/* growth keeps every entry: 3/4 of 64 fit, the 49th doubles */
	for (uint64_t id = 1; id <= 1000; id++)
		assert_int_equal(kva_idmap_insert(&m, id << 20, (uint32_t)id), 0);
	assert_true(m.cap >= 1024 && m.count * 4 <= m.cap * 3);
	for (uint64_t id = 1; id <= 1000; id++)
		assert_int_equal(*kva_idmap_find(&m, id << 20), (uint32_t)id);
	assert_int_equal(*kva_idmap_find(&m, UINT64_MAX), 11);
	check_runs(&m);
	/* reserve: room ahead, or the current table while it has a free slot */
	uint32_t cap = m.cap;
	assert_int_equal(kva_idmap_reserve(&m, 0), 0);
	assert_int_equal(m.cap, cap);
	assert_int_equal(kva_idmap_reserve(&m, 4 * cap), 0);
	assert_true(m.cap > cap);
	check_runs(&m);
	kva_idmap_fini(&m);
	assert_null(m.ents);
	assert_int_equal(m.count, 0);
}

/* kva_idmap_init(initial) leaves room for `initial` entries: they go in
 * without another allocation, the table at most 3/4 full. */
static void test_init_leaves_room_for_initial_entries(void **state)
{
	(void)state;
	static const uint32_t initial[] = {1, 48, 49, 100, 1000, 3000};
	for (size_t k = 0; k < sizeof initial / sizeof initial[0]; k++) {
		struct kva_idmap m;
		refuse_alloc = 0;
		allocs = 0;
		assert_int_equal(kva_idmap_init(&m, maybe_alloc, mem_free, initial[k]), 0);
		assert_int_equal(allocs, 1);
		for (uint32_t i = 0; i < initial[k]; i++)
			assert_int_equal(kva_idmap_insert(&m, (uint64_t)i * 7919, i), 0);
		assert_int_equal(allocs, 1); /* no growth on the way */
		assert_true((uint64_t)m.count * 4 <= (uint64_t)m.cap * 3);
		check_runs(&m);
		kva_idmap_fini(&m);
	}
}

/* Without memory to grow, inserts go on while one slot stays empty (every
 * probe ends there) and are refused after: the map stays whole, and a probe
 * for an absent id still ends. */
static void test_full_table_without_memory_keeps_one_slot_empty(void **state)
{
	(void)state;
	struct kva_idmap m;
	refuse_alloc = 0;
	assert_int_equal(kva_idmap_init(&m, maybe_alloc, mem_free, 0), 0);
	assert_int_equal(m.cap, 64);
	refuse_alloc = 1;
	for (uint64_t id = 0; id < 63; id++)
		assert_int_equal(kva_idmap_insert(&m, id, (uint32_t)id), 0);
	assert_int_equal(m.cap, 64);
	assert_int_equal(m.count, 63);
	assert_int_equal(kva_idmap_insert(&m, 63, 63), -ENOMEM);
	assert_int_equal(kva_idmap_reserve(&m, 1), -ENOMEM);
	assert_int_equal(m.count, 63);
	assert_null(kva_idmap_find(&m, 63)); /* ends at the empty slot */
	for (uint64_t id = 0; id < 63; id++)
		assert_int_equal(*kva_idmap_find(&m, id), (uint32_t)id);
	check_runs(&m);
	/* a removal makes room again */
	assert_true(kva_idmap_remove(&m, 5));
	assert_int_equal(kva_idmap_insert(&m, 63, 63), 0);
	assert_int_equal(kva_idmap_insert(&m, 64, 64), -ENOMEM);
	check_runs(&m);
	refuse_alloc = 0;
	kva_idmap_fini(&m);
}

/* Random operations against the reference; keys from [0, keys) so the
 * table fills, empties and refills, and its runs grow long. */
static void replay(uint64_t seed, uint32_t keys, uint32_t ops)
{
	struct kva_idmap m;
	assert_int_equal(kva_idmap_init(&m, mem_alloc, mem_free, 0), 0);
	uint32_t *ref = malloc(keys * sizeof(*ref)); /* value + 1, 0 = absent */
	assert_non_null(ref);
	memset(ref, 0, keys * sizeof(*ref));
	uint32_t live = 0;
	uint64_t s = seed;
	for (uint32_t op = 0; op < ops; op++) {
		uint64_t r = kva_test_rand(&s);
		uint32_t k = (uint32_t)(r % keys);
		uint64_t id = (uint64_t)k * 0x9e3779b97f4a7c15ull; /* spread over 64 bits */
		uint32_t val = (uint32_t)(r >> 40);
		switch ((r >> 32) % 4) {
		case 0:
		case 1:
			if (ref[k]) {
				assert_int_equal(kva_idmap_insert(&m, id, val), -EEXIST);
			} else {
				assert_int_equal(kva_idmap_insert(&m, id, val), 0);
				ref[k] = val + 1;
				live++;
			}
			break;
		case 2:
			assert_int_equal(kva_idmap_remove(&m, id), ref[k] != 0);
			live -= ref[k] != 0;
			ref[k] = 0;
			break;
		default: {
			uint32_t *v = kva_idmap_find(&m, id);
			if (ref[k]) {
				assert_non_null(v);
				assert_int_equal(*v, ref[k] - 1);
			} else {
				assert_null(v);
			}
		}
		}
		assert_int_equal(m.count, live);
		if (op % 4096 == 0) {
			check_runs(&m);
			for (uint32_t j = 0; j < keys; j++) {
				uint32_t *v = kva_idmap_find(&m, (uint64_t)j * 0x9e3779b97f4a7c15ull);
				assert_true(ref[j] ? v && *v == ref[j] - 1 : v == NULL);
			}
		}
	}
	check_runs(&m);
	free(ref);
	kva_idmap_fini(&m);
}

static void test_random_against_reference(void **state)
{
	(void)state;
	uint32_t ops = (uint32_t)kva_test_scaled(400000);
	replay(1, 48, ops);     /* under one growth: a 64-slot table, long runs */
	replay(2, 1000, ops);   /* grows and shrinks around a few thousand slots */
	replay(3, 100000, ops); /* mostly distinct keys */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_edges),
		cmocka_unit_test(test_init_leaves_room_for_initial_entries),
		cmocka_unit_test(test_full_table_without_memory_keeps_one_slot_empty),
		cmocka_unit_test(test_random_against_reference),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
