/* Unit tests for lockfree/pagepool: single-threaded contract. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

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

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_init_holds_every_id_once),
	    cmocka_unit_test(test_take_n_is_all_or_nothing),
	    cmocka_unit_test(test_put_makes_ids_takeable_again_lifo),
	    cmocka_unit_test(test_put_n_stacks_on_existing_ids),
	    cmocka_unit_test(test_empty_pool),
	    cmocka_unit_test(test_random_sequence_matches_a_set),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
