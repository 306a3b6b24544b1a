/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for lockfree/inbox: single-threaded FIFO and drain semantics. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <urcu/uatomic.h>

#include <kvadmit/lockfree/inbox.h>

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

/* A producer between its tail exchange and its link store (the first half of
 * cds_wfcq_enqueue, done by hand): the non-blocking consumer must hand out
 * what is linked, return NULL for the rest without waiting, and deliver it,
 * in order, once the link lands. */
static struct cds_wfcq_node *half_push(struct kva_inbox *q, struct item *it)
{
	cds_wfcq_node_init(&it->node.wfcq);
	return uatomic_xchg(&q->tail.p, &it->node.wfcq); /* the predecessor, not yet linked */
}

static struct item *pop_nb(struct kva_inbox_batch *b)
{
	struct kva_inbox_node *n = kva_inbox_batch_pop_nonblocking(b);
	return n ? caa_container_of(n, struct item, node) : NULL;
}

static void test_nonblocking_consumer_never_waits_for_a_half_linked_producer(void **state)
{
	(void)state;
	struct kva_inbox q;
	struct kva_inbox_batch b;
	struct item it[4];
	kva_inbox_init(&q);
	kva_inbox_batch_init(&b);
	kva_inbox_push(&q, &it[0].node);
	kva_inbox_push(&q, &it[1].node);
	struct cds_wfcq_node *pred = half_push(&q, &it[2]);
	assert_ptr_equal(pred, &it[1].node.wfcq);
	kva_inbox_push(&q, &it[3].node); /* behind the half-linked one */
	assert_true(kva_inbox_splice_nonblocking(&q, &b));
	assert_ptr_equal(pop_nb(&b), &it[0]);
	assert_null(pop_nb(&b)); /* it[1]'s successor is not linked: stop, do not wait */
	assert_null(pop_nb(&b));
	assert_false(kva_inbox_batch_empty(&b));
	uatomic_set(&pred->next, &it[2].node.wfcq); /* the producer finishes */
	for (int i = 1; i < 4; i++)
		assert_ptr_equal(pop_nb(&b), &it[i]);
	assert_null(pop_nb(&b));
	assert_true(kva_inbox_batch_empty(&b));

	/* the very first node half-linked: the splice itself moves nothing */
	pred = half_push(&q, &it[0]);
	assert_false(kva_inbox_splice_nonblocking(&q, &b));
	assert_true(kva_inbox_batch_empty(&b));
	uatomic_set(&pred->next, &it[0].node.wfcq);
	assert_true(kva_inbox_splice_nonblocking(&q, &b));
	assert_ptr_equal(pop_nb(&b), &it[0]);
	assert_null(pop_nb(&b));
	kva_inbox_fini(&q);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_drain_returns_items_in_push_order),
	    cmocka_unit_test(test_drain_of_empty_inbox_moves_nothing),
	    cmocka_unit_test(test_push_reports_was_empty_only_for_first_push),
	    cmocka_unit_test(test_nodes_can_be_pushed_again_after_pop),
	    cmocka_unit_test(test_nonblocking_consumer_never_waits_for_a_half_linked_producer),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
