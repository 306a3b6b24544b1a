/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for lockfree/pagepool: single-threaded contract. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#ifndef KVA_DEBUG
#define KVA_DEBUG 0
#endif

#include "pagepool.h"
#include "kva_test.h"

static void test_init_holds_every_id_once(void **state)
{
	(void)state;
	struct kva_pagepool p;
	enum { N = 1000 };
	uint32_t ids[N];
	unsigned char seen[N] = {0};

	assert_int_equal(kva_pagepool_init(&p, N), 0);
	assert_int_equal(kva_pagepool_count(&p), N);
	assert_true(kva_pagepool_take_n(&p, ids, N));
	for (int i = 0; i < N; i++) {
		assert_true(ids[i] < N);
		assert_int_equal(seen[ids[i]]++, 0);
	}
	assert_int_equal(kva_pagepool_count(&p), 0);
	uint32_t id;
	assert_false(kva_pagepool_take(&p, &id));
	kva_pagepool_fini(&p);
}

static void test_take_n_is_all_or_nothing(void **state)
{
	(void)state;
	struct kva_pagepool p;
	uint32_t ids[8], more[8];

	assert_int_equal(kva_pagepool_init(&p, 8), 0);
	assert_true(kva_pagepool_take_n(&p, ids, 5));
	assert_int_equal(kva_pagepool_count(&p), 3);
	assert_false(kva_pagepool_take_n(&p, more, 4));
	assert_int_equal(kva_pagepool_count(&p), 3);
	assert_false(kva_pagepool_take_n(&p, more, 9)); /* more than the pool */
	assert_true(kva_pagepool_take_n(&p, more, 3));
	assert_int_equal(kva_pagepool_count(&p), 0);
	assert_true(kva_pagepool_take_n(&p, more, 0)); /* nothing asked, nothing taken */
	kva_pagepool_fini(&p);
}

static void test_put_makes_ids_takeable_again_lifo(void **state)
{
	(void)state;
	struct kva_pagepool p;
	uint32_t ids[4], back[4], id;

	assert_int_equal(kva_pagepool_init(&p, 4), 0);
	assert_true(kva_pagepool_take_n(&p, ids, 4));
	kva_pagepool_put(&p, ids[2]);
	assert_int_equal(kva_pagepool_count(&p), 1);
	assert_true(kva_pagepool_take(&p, &id));
	assert_int_equal(id, ids[2]);

	/* put_n keeps the order given: ids[0] comes back first. */
	kva_pagepool_put_n(&p, ids, 4);
	assert_int_equal(kva_pagepool_count(&p), 4);
	assert_true(kva_pagepool_take_n(&p, back, 4));
	assert_memory_equal(back, ids, sizeof(ids));
	kva_pagepool_fini(&p);
}

static void test_put_n_stacks_on_existing_ids(void **state)
{
	(void)state;
	struct kva_pagepool p;
	uint32_t a[3], b[3], all[6];
	unsigned char seen[6] = {0};

	assert_int_equal(kva_pagepool_init(&p, 6), 0);
	assert_true(kva_pagepool_take_n(&p, a, 3));
	assert_true(kva_pagepool_take_n(&p, b, 3));
	kva_pagepool_put_n(&p, a, 3);
	kva_pagepool_put_n(&p, b, 3);
	assert_true(kva_pagepool_take_n(&p, all, 6));
	for (int i = 0; i < 6; i++)
		assert_int_equal(seen[all[i]]++, 0);
	kva_pagepool_fini(&p);
}

/* A take longer than one round gets its ids over several swaps of the
 * chain; with no one else around they come in put order all the same. */
static void test_take_n_over_several_rounds_keeps_put_order(void **state)
{
	(void)state;
	struct kva_pagepool p;
	enum { N = 5 * KVA_PAGEPOOL_ROUND + 7 };
	uint32_t ids[N], back[N];
	uint64_t rng = 99;

	assert_int_equal(kva_pagepool_init(&p, N), 0);
	assert_true(kva_pagepool_take_n(&p, ids, N));
	for (uint32_t i = 0; i < N; i++)
		assert_int_equal(ids[i], i);
	for (uint32_t i = N - 1; i > 0; i--) { /* shuffle */
		uint32_t j = (uint32_t)(kva_test_rand(&rng) % (i + 1)), t = ids[i];
		ids[i] = ids[j];
		ids[j] = t;
	}
	kva_pagepool_put_n(&p, ids, N);
	assert_true(kva_pagepool_take_n(&p, back, N));
	assert_memory_equal(back, ids, sizeof(ids));
	kva_pagepool_fini(&p);
}

/* A take that needs part of the chain gives the rest back intact, also
 * when the chain is made of several puts. */
static void test_a_partial_take_leaves_the_rest_in_order(void **state)
{
	(void)state;
	struct kva_pagepool p;
	enum { N = 200 };
	uint32_t a[70], b[130], c[N], id;

	assert_int_equal(kva_pagepool_init(&p, N), 0);
	assert_true(kva_pagepool_take_n(&p, a, 70));
	assert_int_equal(kva_pagepool_count(&p), N - 70);
	assert_true(kva_pagepool_take_n(&p, b, 130));
	for (uint32_t i = 0; i < 70; i++)
		assert_int_equal(a[i], i);
	for (uint32_t i = 0; i < 130; i++)
		assert_int_equal(b[i], 70 + i);
	assert_false(kva_pagepool_take(&p, &id));
	assert_int_equal(kva_pagepool_count(&p), 0);

	/* Three chains stacked: b[100..129] on top, then a, then b[0..99]. */
	kva_pagepool_put_n(&p, b, 100);
	kva_pagepool_put_n(&p, a, 70);
	kva_pagepool_put_n(&p, b + 100, 30);
	assert_true(kva_pagepool_take_n(&p, c, 50)); /* through the first chain into a */
	assert_memory_equal(c, b + 100, 30 * sizeof(uint32_t));
	assert_memory_equal(c + 30, a, 20 * sizeof(uint32_t));
	assert_true(kva_pagepool_take_n(&p, c + 50, 150));
	assert_memory_equal(c + 50, a + 20, 50 * sizeof(uint32_t));
	assert_memory_equal(c + 100, b, 100 * sizeof(uint32_t));
	assert_false(kva_pagepool_take_n(&p, c, 1));
	kva_pagepool_fini(&p);
}

static void test_empty_pool(void **state)
{
	(void)state;
	struct kva_pagepool p;
	uint32_t id;

	assert_int_equal(kva_pagepool_init(&p, 0), 0);
	assert_int_equal(kva_pagepool_count(&p), 0);
	assert_false(kva_pagepool_take(&p, &id));
	assert_false(kva_pagepool_take_n(&p, &id, 1));
	assert_true(kva_pagepool_take_n(&p, &id, 0));
	kva_pagepool_fini(&p);
}

static void test_random_sequence_matches_a_set(void **state)
{
	(void)state;
	struct kva_pagepool p;
	enum { N = 257 };
	uint32_t held[N], tmp[N];
	size_t nheld = 0;
	unsigned char in_pool[N];
	uint64_t rng = 12345;

	memset(in_pool, 1, sizeof(in_pool));
	assert_int_equal(kva_pagepool_init(&p, N), 0);
	for (int op = 0; op < 100000; op++) {
		uint64_t r = kva_test_rand(&rng);
		size_t k = 1 + (size_t)((r >> 8) % 17);
		if (((r >> 20) & 7) == 0) /* now and then more than a round */
			k = 1 + (size_t)((r >> 24) % 200);
		if (r & 1) {
			bool ok = kva_pagepool_take_n(&p, tmp, k);
			assert_int_equal(ok, N - nheld >= k);
			if (!ok)
				continue;
			for (size_t i = 0; i < k; i++) {
				assert_true(tmp[i] < N);
				assert_int_equal(in_pool[tmp[i]], 1);
				in_pool[tmp[i]] = 0;
				held[nheld++] = tmp[i];
			}
		} else {
			if (k > nheld)
				k = nheld;
			nheld -= k;
			for (size_t i = 0; i < k; i++)
				in_pool[held[nheld + i]] = 1;
			kva_pagepool_put_n(&p, held + nheld, k);
		}
		assert_int_equal(kva_pagepool_count(&p), N - nheld);
	}
	kva_pagepool_fini(&p);
}

/* Against a reference chain kept as an array (top first): every take must
 * return exactly the ids the chain holds on top, in chain order, whatever
 * mix of batch sizes, joins and partial takes built it (puts of ids picked
 * from anywhere, in shuffled order). */
static void test_takes_follow_the_chain_exactly(void **state)
{
	(void)state;
	struct kva_pagepool p;
	enum { N = 600 };
	uint32_t chain[N], held[N], got[N];
	size_t nchain = N, nheld = 0;
	uint64_t rng = 777;
	for (uint32_t i = 0; i < N; i++)
		chain[i] = i; /* init: 0 on top */
	assert_int_equal(kva_pagepool_init(&p, N), 0);
	for (int op = 0; op < 200000; op++) {
		uint64_t r = kva_test_rand(&rng);
		size_t k = 1 + (size_t)((r >> 8) % 40);
		if (((r >> 20) & 15) == 0) /* now and then more than a round */
			k = 1 + (size_t)((r >> 24) % 300);
		if (r & 1) {
			bool ok = kva_pagepool_take_n(&p, got, k);
			assert_int_equal(ok, nchain >= k);
			if (!ok)
				continue;
			for (size_t i = 0; i < k; i++)
				assert_int_equal(got[i], chain[i]);
			memmove(chain, chain + k, (nchain - k) * sizeof(chain[0]));
			nchain -= k;
			memcpy(held + nheld, got, k * sizeof(got[0]));
			nheld += k;
		} else {
			if (k > nheld)
				k = nheld;
			/* put back k held ids, picked from anywhere, in shuffled order */
			uint32_t put[N];
			for (size_t i = 0; i < k; i++) {
				size_t at = (size_t)(kva_test_rand(&rng) % nheld);
				put[i] = held[at];
				held[at] = held[--nheld];
			}
			kva_pagepool_put_n(&p, put, k);
			memmove(chain + k, chain, nchain * sizeof(chain[0]));
			memcpy(chain, put, k * sizeof(put[0]));
			nchain += k;
		}
		assert_int_equal(kva_pagepool_count(&p), nchain);
	}
	kva_pagepool_fini(&p);
}

/* Debug builds drop a put of an id outside 0 .. n-1 whole (a caller bug that
 * would write past the link array): the pool is unchanged, and its ids
 * still come out exactly once. Release builds do not check. */
static void test_put_of_an_id_out_of_range_is_dropped_in_debug_builds(void **state)
{
	(void)state;
	if (!KVA_DEBUG)
		skip();
	struct kva_pagepool p;
	uint32_t ids[4], id;
	assert_int_equal(kva_pagepool_init(&p, 4), 0);
	assert_true(kva_pagepool_take(&p, &id));
	kva_pagepool_put(&p, 4); /* one past the last id */
	assert_int_equal(kva_pagepool_count(&p), 3);
	const uint32_t mixed[2] = {id, 4};
	kva_pagepool_put_n(&p, mixed, 2); /* the whole call goes */
	assert_int_equal(kva_pagepool_count(&p), 3);
	kva_pagepool_put(&p, id);
	assert_int_equal(kva_pagepool_count(&p), 4);
	assert_true(kva_pagepool_take_n(&p, ids, 4));
	unsigned char seen[4] = {0};
	for (int i = 0; i < 4; i++) {
		assert_true(ids[i] < 4);
		assert_int_equal(seen[ids[i]]++, 0);
	}
	kva_pagepool_fini(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_init_holds_every_id_once),
	    cmocka_unit_test(test_take_n_is_all_or_nothing),
	    cmocka_unit_test(test_put_makes_ids_takeable_again_lifo),
	    cmocka_unit_test(test_put_n_stacks_on_existing_ids),
	    cmocka_unit_test(test_take_n_over_several_rounds_keeps_put_order),
	    cmocka_unit_test(test_a_partial_take_leaves_the_rest_in_order),
	    cmocka_unit_test(test_empty_pool),
	    cmocka_unit_test(test_random_sequence_matches_a_set),
	    cmocka_unit_test(test_takes_follow_the_chain_exactly),
	    cmocka_unit_test(test_put_of_an_id_out_of_range_is_dropped_in_debug_builds),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
