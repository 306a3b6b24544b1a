/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for lockfree/slab_grower: the background thread, not the slab's
 * users, publishes the chunks and warms the slots a large slab keeps ready;
 * a small slab is left alone; remove stops it before fini.
 */
#include <setjmp.h>
#include <stdalign.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

#include <kvadmit/lockfree/rcu_thread.h>
#include <kvadmit/lockfree/slab.h>
#include <kvadmit/lockfree/slab_grower.h>

struct slot {
	struct kva_slab_hdr h;
	uint64_t stamp;
	union {
		struct kva_slab_rcu rcu;
		char pad[32];
	};
};

static _Atomic unsigned chunks_by_grower, chunks_by_others;
static _Atomic size_t warmed_by_grower, warmed_by_others;

static void *t_alloc(size_t n)
{
	atomic_fetch_add(kva_slab_grower_thread() ? &chunks_by_grower : &chunks_by_others, 1);
	return calloc(1, n);
}

static void t_free(void *p, size_t n)
{
	(void)n;
	free(p);
}

static void t_warm(void *p, size_t n)
{
	(void)p;
	atomic_fetch_add(kva_slab_grower_thread() ? &warmed_by_grower : &warmed_by_others, n);
}

/* Polls (the grower's own period is 1 to 16 ms) for at most 30 s. */
static bool eventually(bool (*cond)(struct kva_slab *), struct kva_slab *s)
{
	struct timespec tick = {0, 1000000};
	for (int i = 0; i < 30000; i++) {
		if (cond(s))
			return true;
		nanosleep(&tick, NULL);
	}
	return cond(s);
}

static uint32_t low_of(struct kva_slab *s, uint32_t most)
{
	uint32_t low = kva_slab_slots(s) / 4;
	return low < most ? low : most;
}

#define MOST 1000u

static bool ready_ahead(struct kva_slab *s)
{
	return kva_slab_fresh(s) >= low_of(s, MOST) &&
	       atomic_load(&warmed_by_grower) >= (size_t)low_of(s, MOST) * sizeof(struct slot);
}

static void reset_counts(void)
{
	atomic_store(&chunks_by_grower, 0);
	atomic_store(&chunks_by_others, 0);
	atomic_store(&warmed_by_grower, 0);
	atomic_store(&warmed_by_others, 0);
}

static struct kva_slab *slab_new(void)
{
	struct kva_slab *s = aligned_alloc(alignof(struct kva_slab), sizeof(*s)); /* alignas members */
	assert_non_null(s);
	assert_int_equal(
	    kva_slab_init(s, sizeof(struct slot), offsetof(struct slot, rcu), t_alloc, t_free), 0);
	kva_slab_set_warm(s, t_warm);
	return s;
}

/* A new slab the grower keeps ahead, `take` slots taken by this thread. */
static struct kva_slab *kept_slab(struct kva_slab_ahead *a, uint32_t take)
{
	reset_counts();
	struct kva_slab *s = slab_new();
	kva_slab_grower_add(a, s, MOST);
	uint32_t idx;
	for (uint32_t i = 0; i < take; i++)
		assert_non_null(kva_slab_alloc(s, &idx));
	return s;
}

static void kept_slab_free(struct kva_slab_ahead *a)
{
	struct kva_slab *s = a->slab;
	kva_slab_grower_remove(a);
	urcu_memb_barrier();
	kva_slab_fini(s);
	free(s);
}

/* Once the slab holds KVA_SLAB_GROWER_FROM slots and its producers have
 * taken most of them, the grower (not the producer) publishes the next chunk
 * and warms min(slots / 4, most) never-used slots. */
static void test_the_grower_keeps_a_large_slab_ahead(void **state)
{
	(void)state;
	struct kva_slab_ahead a;
	/* chunks 0..2 (1,792 slots) grow on demand here; all but 92 taken */
	struct kva_slab *s = kept_slab(&a, KVA_SLAB_GROWER_FROM - 92);
	assert_int_equal(kva_slab_slots(s), KVA_SLAB_GROWER_FROM);
	unsigned mine = atomic_load(&chunks_by_others);
	assert_true(eventually(ready_ahead, s));
	assert_true(kva_slab_slots(s) > KVA_SLAB_GROWER_FROM);
	assert_true(atomic_load(&chunks_by_grower) >= 1);
	/* the slot caches are malloc'd: every chunk after the first three is
	 * the grower's */
	assert_int_equal(atomic_load(&chunks_by_others), mine);
	assert_int_equal(atomic_load(&warmed_by_others), 0);
	kept_slab_free(&a);
}

/* A slab below KVA_SLAB_GROWER_FROM grows on its producers only, as it did
 * without a grower, whatever the grower's timing (fault-injection sweeps
 * count its allocations). */
static void test_a_small_slab_is_left_to_its_producers(void **state)
{
	(void)state;
	struct kva_slab_ahead a;
	struct kva_slab *s = kept_slab(&a, 700); /* chunks 0 and 1 taken, 68 left */
	struct timespec t = {0, 50000000}; /* a few of the grower's passes */
	nanosleep(&t, NULL);
	assert_int_equal(atomic_load(&chunks_by_grower), 0);
	assert_int_equal(atomic_load(&warmed_by_grower), 0);
	assert_int_equal(kva_slab_slots(s), 768);
	kept_slab_free(&a);
}

/* Removing and finishing slabs while the grower polls: each removed slab
 * is never touched again (ASan sees a use after free otherwise). */
static void test_remove_then_fini_while_the_grower_runs(void **state)
{
	(void)state;
	for (int round = 0; round < 50; round++) {
		struct kva_slab_ahead a;
		(void)kept_slab(&a, KVA_SLAB_GROWER_FROM);
		if (round & 1) {
			struct timespec t = {0, 1000000};
			nanosleep(&t, NULL);
		}
		kept_slab_free(&a);
	}
}

int main(void)
{
	assert_int_equal(kva_rcu_enter(), 0);
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_the_grower_keeps_a_large_slab_ahead),
	    cmocka_unit_test(test_a_small_slab_is_left_to_its_producers),
	    cmocka_unit_test(test_remove_then_fini_while_the_grower_runs),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
