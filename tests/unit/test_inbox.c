/* Unit tests for lockfree/inbox: single-threaded FIFO and drain semantics. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "inbox.h"

struct item {
	struct kva_inbox_node node;
	int v;
};

static struct item *pop(struct kva_inbox_batch *b)
{
	struct kva_inbox_node *n = kva_inbox_batch_pop_blocking(b);

	return n ? caa_container_of(n, struct item, node) : NULL;
}

static void test_drain_returns_items_in_push_order(void **state)
{
	(void)state;
	struct kva_inbox q;
	struct kva_inbox_batch b;
	struct item it[8];

	kva_inbox_init(&q);
	for (int i = 0; i < 8; i++) {
		it[i].v = i;
		kva_inbox_node_init(&it[i].node);
		kva_inbox_push(&q, &it[i].node);
	}
	assert_true(kva_inbox_drain_blocking(&q, &b));
	assert_true(kva_inbox_empty(&q));
	for (int i = 0; i < 8; i++) {
		struct item *p = pop(&b);
		assert_non_null(p);
		assert_ptr_equal(p, &it[i]);
		assert_int_equal(p->v, i);
	}
	assert_null(pop(&b));
	kva_inbox_fini(&q);
}

static void test_drain_of_empty_inbox_moves_nothing(void **state)
{
	(void)state;
	struct kva_inbox q;
	struct kva_inbox_batch b;

	kva_inbox_init(&q);
	assert_true(kva_inbox_empty(&q));
	assert_false(kva_inbox_drain_blocking(&q, &b));
	assert_null(pop(&b));
	/* And again after a full drain. */
	struct item x;
	kva_inbox_node_init(&x.node);
	kva_inbox_push(&q, &x.node);
	assert_true(kva_inbox_drain_blocking(&q, &b));
	assert_ptr_equal(pop(&b), &x);
	assert_false(kva_inbox_drain_blocking(&q, &b));
	assert_null(pop(&b));
	kva_inbox_fini(&q);
}

static void test_push_reports_was_empty_only_for_first_push(void **state)
{
	(void)state;
	struct kva_inbox q;
	struct kva_inbox_batch b;
	struct item it[3];

	kva_inbox_init(&q);
	for (int i = 0; i < 3; i++)
		kva_inbox_node_init(&it[i].node);
	assert_true(kva_inbox_push(&q, &it[0].node));
	assert_false(kva_inbox_push(&q, &it[1].node));
	assert_false(kva_inbox_empty(&q));
	assert_true(kva_inbox_drain_blocking(&q, &b));
	/* Drained: the next push finds it empty again, while the earlier
	 * batch is still being consumed. */
	assert_true(kva_inbox_push(&q, &it[2].node));
	assert_ptr_equal(pop(&b), &it[0]);
	assert_ptr_equal(pop(&b), &it[1]);
	assert_null(pop(&b));
	assert_true(kva_inbox_drain_blocking(&q, &b));
	assert_ptr_equal(pop(&b), &it[2]);
	assert_null(pop(&b));
	kva_inbox_fini(&q);
}

static void test_nodes_can_be_pushed_again_after_pop(void **state)
{
	(void)state;
	struct kva_inbox q;
	struct kva_inbox_batch b;
	struct item x;

	kva_inbox_init(&q);
	for (int round = 0; round < 100; round++) {
		x.v = round;
		kva_inbox_node_init(&x.node);
		kva_inbox_push(&q, &x.node);
		assert_true(kva_inbox_drain_blocking(&q, &b));
		struct item *p = pop(&b);
		assert_ptr_equal(p, &x);
		assert_int_equal(p->v, round);
		assert_null(pop(&b));
	}
	kva_inbox_fini(&q);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_drain_returns_items_in_push_order),
	    cmocka_unit_test(test_drain_of_empty_inbox_moves_nothing),
	    cmocka_unit_test(test_push_reports_was_empty_only_for_first_push),
	    cmocka_unit_test(test_nodes_can_be_pushed_again_after_pop),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
