/* Unit tests for lockfree/idtable: single-threaded semantics of (id, gen). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>

#include "idtable.h"

struct rec {
	struct kva_idtable_node node;
	int tag;
};

static struct rec *rec_of(struct kva_idtable_node *n)
{
	return n ? caa_container_of(n, struct rec, node) : NULL;
}

/* The records live on the test's stack: wait until no lookup (nor cds_lfht's
 * resize worker) can still be reading them before it returns. */
static void quiesce(void)
{
	kva_rcu_synchronize();
}

static void rec_set(struct rec *r, uint64_t id, uint32_t gen, int tag)
{
	r->node.id = id;
	r->node.gen = gen;
	r->tag = tag;
}

static int setup(void **state)
{
	struct kva_idtable *t = malloc(sizeof *t);

	if (!t || kva_rcu_enter() != 0 || kva_idtable_init(t, 8) != 0)
		return -1;
	*state = t;
	return 0;
}

static int teardown(void **state)
{
	struct kva_idtable *t = *state;
	int err = kva_idtable_fini(t);

	free(t);
	return err;
}

static void test_lookup_finds_added_record_until_deleted(void **state)
{
	struct kva_idtable *t = *state;
	struct rec a;

	rec_set(&a, 42, 1, 7);
	kva_rcu_read_lock();
	assert_null(kva_idtable_lookup(t, 42, 1));
	kva_idtable_add(t, &a.node);
	assert_int_equal(kva_idtable_count(t), 1);
	struct rec *f = rec_of(kva_idtable_lookup(t, 42, 1));
	assert_ptr_equal(f, &a);
	assert_int_equal(f->tag, 7);
	assert_null(kva_idtable_lookup(t, 43, 1));
	assert_int_equal(kva_idtable_del(t, &a.node), 0);
	assert_null(kva_idtable_lookup(t, 42, 1));
	assert_int_equal(kva_idtable_del(t, &a.node), -ENOENT);
	assert_int_equal(kva_idtable_count(t), 0);
	kva_rcu_read_unlock();
	quiesce();
}

static void test_stale_generation_is_rejected(void **state)
{
	struct kva_idtable *t = *state;
	struct rec old, cur;

	rec_set(&old, 5, 1, 1);
	rec_set(&cur, 5, 2, 2);
	kva_rcu_read_lock();
	kva_idtable_add(t, &old.node);
	assert_int_equal(kva_idtable_del(t, &old.node), 0);
	kva_idtable_add(t, &cur.node);
	assert_null(kva_idtable_lookup(t, 5, 1));
	assert_null(kva_idtable_lookup(t, 5, 3));
	assert_ptr_equal(rec_of(kva_idtable_lookup(t, 5, 2)), &cur);
	assert_int_equal(kva_idtable_del(t, &cur.node), 0);
	kva_rcu_read_unlock();
	quiesce();
}

static void test_duplicate_ids_are_told_apart_by_generation(void **state)
{
	struct kva_idtable *t = *state;
	struct rec r[4];

	kva_rcu_read_lock();
	for (int g = 0; g < 4; g++) {
		rec_set(&r[g], 99, (uint32_t)g + 10, g);
		kva_idtable_add(t, &r[g].node);
	}
	assert_int_equal(kva_idtable_count(t), 4);
	for (int g = 0; g < 4; g++)
		assert_ptr_equal(rec_of(kva_idtable_lookup(t, 99, (uint32_t)g + 10)), &r[g]);
	/* Deleting one incarnation leaves the others. */
	assert_int_equal(kva_idtable_del(t, &r[1].node), 0);
	assert_null(kva_idtable_lookup(t, 99, 11));
	assert_ptr_equal(rec_of(kva_idtable_lookup(t, 99, 12)), &r[2]);
	for (int g = 0; g < 4; g++)
		if (g != 1)
			assert_int_equal(kva_idtable_del(t, &r[g].node), 0);
	kva_rcu_read_unlock();
	quiesce();
}

static void test_iteration_visits_every_record_of_an_id_once(void **state)
{
	struct kva_idtable *t = *state;
	enum { N = 5 };
	struct rec r[N], other[3];
	struct kva_idtable_iter it;
	int seen[N] = {0};
	int n = 0;

	kva_rcu_read_lock();
	assert_null(kva_idtable_first(t, 7, &it));
	assert_null(kva_idtable_next(t, &it)); /* exhausted iterator stays exhausted */
	for (int i = 0; i < 3; i++) {
		rec_set(&other[i], 6 + (uint64_t)i * 2, 1, -1); /* ids 6, 8, 10 */
		kva_idtable_add(t, &other[i].node);
	}
	for (int i = 0; i < N; i++) {
		rec_set(&r[i], 7, (uint32_t)i, i);
		kva_idtable_add(t, &r[i].node);
	}
	for (struct kva_idtable_node *x = kva_idtable_first(t, 7, &it); x;
	     x = kva_idtable_next(t, &it)) {
		assert_int_equal(x->id, 7);
		assert_true(x->gen < N);
		assert_ptr_equal(rec_of(x), &r[x->gen]);
		seen[x->gen]++;
		n++;
	}
	assert_int_equal(n, N);
	for (int i = 0; i < N; i++)
		assert_int_equal(seen[i], 1);
	for (int i = 0; i < N; i++)
		assert_int_equal(kva_idtable_del(t, &r[i].node), 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(kva_idtable_del(t, &other[i].node), 0);
	kva_rcu_read_unlock();
	quiesce();
}

static void test_many_ids_survive_resize(void **state)
{
	struct kva_idtable *t = *state;
	enum { N = 20000 };
	struct rec *r = calloc(N, sizeof *r);

	assert_non_null(r);
	kva_rcu_read_lock();
	for (int i = 0; i < N; i++) {
		/* Sequential ids and ids differing only in high bits. */
		rec_set(&r[i], (i & 1) ? (uint64_t)i : (uint64_t)i << 40, 3, i);
		kva_idtable_add(t, &r[i].node);
	}
	kva_rcu_read_unlock();
	assert_int_equal(kva_idtable_count(t), N);
	kva_rcu_read_lock();
	for (int i = 0; i < N; i++) {
		struct rec *f = rec_of(kva_idtable_lookup(t, r[i].node.id, 3));
		assert_ptr_equal(f, &r[i]);
		assert_null(kva_idtable_lookup(t, r[i].node.id, 4));
	}
	for (int i = 0; i < N; i++)
		assert_int_equal(kva_idtable_del(t, &r[i].node), 0);
	kva_rcu_read_unlock();
	assert_int_equal(kva_idtable_count(t), 0);
	/* Lookups of deleted records may run until a grace period. */
	kva_rcu_synchronize();
	free(r);
}

static void test_fini_refuses_non_empty_table(void **state)
{
	(void)state;
	struct kva_idtable t;
	struct rec a;

	assert_int_equal(kva_idtable_init(&t, 0), 0);
	rec_set(&a, 1, 1, 1);
	kva_rcu_read_lock();
	kva_idtable_add(&t, &a.node);
	kva_rcu_read_unlock();
	assert_int_equal(kva_idtable_fini(&t), -EBUSY);
	/* Still fully usable after the refusal. */
	kva_rcu_read_lock();
	assert_ptr_equal(rec_of(kva_idtable_lookup(&t, 1, 1)), &a);
	assert_int_equal(kva_idtable_del(&t, &a.node), 0);
	kva_rcu_read_unlock();
	assert_int_equal(kva_idtable_fini(&t), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_lookup_finds_added_record_until_deleted, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_stale_generation_is_rejected, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_duplicate_ids_are_told_apart_by_generation, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_iteration_visits_every_record_of_an_id_once, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_many_ids_survive_resize, setup, teardown),
	    cmocka_unit_test(test_fini_refuses_non_empty_table),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
