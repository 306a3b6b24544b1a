/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for lockfree/capacity: all-or-nothing, floor, lane packing. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>

#include <kvadmit/lockfree/capacity.h>

#ifndef KVA_DEBUG
#define KVA_DEBUG 0
#endif

static struct kva_credits cr(uint32_t p, uint16_t s, uint16_t r)
{
	struct kva_credits c = {p, s, r};
	return c;
}

static void assert_free(const struct kva_capacity *c, uint32_t p, uint16_t s, uint16_t r)
{
	struct kva_credits f = kva_capacity_free(c);
	assert_int_equal(f.pages, p);
	assert_int_equal(f.slots, s);
	assert_int_equal(f.runs, r);
}

static void test_init_makes_all_credits_free(void **state)
{
	(void)state;
	struct kva_capacity c;
	kva_capacity_init(&c, cr(1000, 8, 64));
	assert_free(&c, 1000, 8, 64);
	assert_int_equal(c.total.pages, 1000);
	assert_int_equal(atomic_load(&c.overreleases), 0);
}

static void test_pack_unpack_roundtrip_at_lane_limits(void **state)
{
	(void)state;
	struct kva_credits in = cr(UINT32_MAX, UINT16_MAX, UINT16_MAX);
	struct kva_credits out = kva_credits_unpack(kva_credits_pack(in));
	assert_int_equal(out.pages, UINT32_MAX);
	assert_int_equal(out.slots, UINT16_MAX);
	assert_int_equal(out.runs, UINT16_MAX);
	out = kva_credits_unpack(kva_credits_pack(cr(0, 1, 0)));
	assert_int_equal(out.pages, 0);
	assert_int_equal(out.slots, 1);
	assert_int_equal(out.runs, 0);
}

static void test_reserve_takes_all_lanes_or_none(void **state)
{
	(void)state;
	struct kva_capacity c;
	kva_capacity_init(&c, cr(100, 2, 3));

	assert_true(kva_capacity_try_reserve(&c, cr(40, 1, 1), 0));
	assert_free(&c, 60, 1, 2);
	/* Pages suffice, slots do not: nothing is taken. */
	assert_false(kva_capacity_try_reserve(&c, cr(10, 2, 0), 0));
	assert_free(&c, 60, 1, 2);
	/* Slots suffice, pages do not. */
	assert_false(kva_capacity_try_reserve(&c, cr(61, 1, 0), 0));
	assert_free(&c, 60, 1, 2);
	/* Runs short. */
	assert_false(kva_capacity_try_reserve(&c, cr(0, 0, 3), 0));
	assert_free(&c, 60, 1, 2);
	/* Exactly everything. */
	assert_true(kva_capacity_try_reserve(&c, cr(60, 1, 2), 0));
	assert_free(&c, 0, 0, 0);
	assert_false(kva_capacity_try_reserve(&c, cr(1, 0, 0), 0));
}

static void test_reserve_never_leaves_fewer_pages_than_floor(void **state)
{
	(void)state;
	struct kva_capacity c;
	kva_capacity_init(&c, cr(100, 4, 4));

	assert_false(kva_capacity_try_reserve(&c, cr(91, 0, 0), 10));
	assert_true(kva_capacity_try_reserve(&c, cr(90, 0, 0), 10));
	assert_free(&c, 10, 4, 4);
	assert_false(kva_capacity_try_reserve(&c, cr(1, 0, 0), 10));
	/* Floor 0 may take the protected pages (kva_grow's path). */
	assert_true(kva_capacity_try_reserve(&c, cr(5, 0, 0), 0));
	assert_free(&c, 5, 4, 4);
	/* Below the floor already: a page-less reservation is not held back. */
	assert_true(kva_capacity_try_reserve(&c, cr(0, 1, 1), 10));
	assert_free(&c, 5, 3, 3);
	/* A floor larger than the pool refuses every page. */
	assert_false(kva_capacity_try_reserve(&c, cr(1, 0, 0), UINT32_MAX));
}

static void test_release_restores_exactly(void **state)
{
	(void)state;
	struct kva_capacity c;
	kva_capacity_init(&c, cr(UINT32_MAX, UINT16_MAX, UINT16_MAX));

	assert_true(kva_capacity_try_reserve(&c, cr(UINT32_MAX, UINT16_MAX, UINT16_MAX), 0));
	assert_free(&c, 0, 0, 0);
	/* Lanes are independent: a full release of one lane does not carry. */
	kva_capacity_release(&c, cr(UINT32_MAX, 0, 0));
	assert_free(&c, UINT32_MAX, 0, 0);
	kva_capacity_release(&c, cr(0, UINT16_MAX, 0));
	assert_free(&c, UINT32_MAX, UINT16_MAX, 0);
	kva_capacity_release(&c, cr(0, 0, UINT16_MAX));
	assert_free(&c, UINT32_MAX, UINT16_MAX, UINT16_MAX);
	assert_int_equal(atomic_load(&c.overreleases), 0);
}

static void test_zero_reservation_always_succeeds(void **state)
{
	(void)state;
	struct kva_capacity c;
	kva_capacity_init(&c, cr(0, 0, 0));
	assert_true(kva_capacity_try_reserve(&c, cr(0, 0, 0), 5));
	kva_capacity_release(&c, cr(0, 0, 0));
	assert_free(&c, 0, 0, 0);
}

static void test_overrelease_is_counted_in_debug_builds(void **state)
{
	(void)state;
	struct kva_capacity c;
	kva_capacity_init(&c, cr(10, 2, 2));
	assert_true(kva_capacity_try_reserve(&c, cr(5, 1, 0), 0));
	kva_capacity_release(&c, cr(5, 1, 0));
	assert_int_equal(atomic_load(&c.overreleases), 0);
	kva_capacity_release(&c, cr(0, 1, 0)); /* caller bug: slot not held */
	assert_int_equal(atomic_load(&c.overreleases), KVA_DEBUG ? 1 : 0);
}

/* Every lane is checked, each against its own total: an over-release in
 * any one of them is counted, a release that fills a lane exactly is not. */
static void test_overrelease_is_counted_in_every_lane(void **state)
{
	(void)state;
	struct kva_capacity c;
	kva_capacity_init(&c, cr(10, 2, 2));
	assert_true(kva_capacity_try_reserve(&c, cr(10, 2, 2), 0));
	kva_capacity_release(&c, cr(10, 2, 2)); /* exactly back to the totals */
	assert_int_equal(atomic_load(&c.overreleases), 0);
	kva_capacity_release(&c, cr(1, 0, 0)); /* pages not held */
	assert_int_equal(atomic_load(&c.overreleases), KVA_DEBUG ? 1 : 0);
	kva_capacity_init(&c, cr(10, 2, 2));
	kva_capacity_release(&c, cr(0, 0, 1)); /* a run not held */
	assert_int_equal(atomic_load(&c.overreleases), KVA_DEBUG ? 1 : 0);
	kva_capacity_init(&c, cr(10, 2, 2));
	kva_capacity_release(&c, cr(0, 1, 0)); /* a slot not held */
	assert_int_equal(atomic_load(&c.overreleases), KVA_DEBUG ? 1 : 0);
}

/* The scheduler's bounded reserve: "does not fit" is decided before any
 * CAS; with no attempt left it reports contention and takes nothing. */
static void test_bounded_reserve_reports_contention_and_takes_nothing(void **state)
{
	(void)state;
	struct kva_capacity c;
	kva_capacity_init(&c, cr(100, 2, 4));
	assert_int_equal(kva_capacity_reserve_bounded(&c, cr(10, 1, 1), 0, 0), -EAGAIN);
	assert_free(&c, 100, 2, 4);
	assert_int_equal(kva_capacity_reserve_bounded(&c, cr(101, 0, 1), 0, 0), 0);
	assert_int_equal(kva_capacity_reserve_bounded(&c, cr(95, 0, 1), 10, 5), 0); /* floor */
	assert_int_equal(kva_capacity_reserve_bounded(&c, cr(10, 1, 1), 0, 1), 1);
	assert_free(&c, 90, 1, 3);
}

struct hammer {
	struct kva_capacity *c;
	_Atomic int stop;
};

static void *hammer_main(void *arg)
{
	struct hammer *h = arg;
	while (!atomic_load_explicit(&h->stop, memory_order_relaxed))
		if (kva_capacity_try_reserve(h->c, cr(1, 0, 0), 0))
			kva_capacity_release(h->c, cr(1, 0, 0));
	return NULL;
}

/* Under another thread's reserve/release churn, bounded reserves of one
 * try each succeed, fail to fit or give up, and never lose or make up a
 * credit: once everything is released, every lane is whole again. */
static void test_bounded_reserve_under_churn_conserves_credits(void **state)
{
	(void)state;
	struct kva_capacity c;
	kva_capacity_init(&c, cr(64, 8, 8));
	struct hammer h = {&c, 0};
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, hammer_main, &h), 0);
	uint32_t held = 0, took = 0, gave_up = 0;
	for (int i = 0; i < 200000; i++) {
		int got = kva_capacity_reserve_bounded(&c, cr(2, 1, 1), 0, 1);
		if (got > 0) {
			held++;
			took++;
		} else if (got < 0) {
			gave_up++;
		}
		if (held == 8 || (got <= 0 && held)) {
			kva_capacity_release(&c, cr(2 * held, (uint16_t)held, (uint16_t)held));
			held = 0;
		}
	}
	atomic_store(&h.stop, 1);
	pthread_join(t, NULL);
	kva_capacity_release(&c, cr(2 * held, (uint16_t)held, (uint16_t)held));
	assert_free(&c, 64, 8, 8);
	assert_true(took > 0);
	print_message("bounded reserves: %u taken, %u gave up to contention\n", took, gave_up);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_init_makes_all_credits_free),
	    cmocka_unit_test(test_pack_unpack_roundtrip_at_lane_limits),
	    cmocka_unit_test(test_reserve_takes_all_lanes_or_none),
	    cmocka_unit_test(test_reserve_never_leaves_fewer_pages_than_floor),
	    cmocka_unit_test(test_release_restores_exactly),
	    cmocka_unit_test(test_zero_reservation_always_succeeds),
	    cmocka_unit_test(test_overrelease_is_counted_in_debug_builds),
	    cmocka_unit_test(test_overrelease_is_counted_in_every_lane),
	    cmocka_unit_test(test_bounded_reserve_reports_contention_and_takes_nothing),
	    cmocka_unit_test(test_bounded_reserve_under_churn_conserves_credits),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
