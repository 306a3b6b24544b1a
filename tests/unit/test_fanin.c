/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for lockfree/fanin: lanes, the non-empty mask, the wake hint. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>

#include <kvadmit/lockfree/fanin.h>

struct item {
	struct kva_inbox_node node;
	int v;
};

static struct item *pop(struct kva_inbox_batch *b)
{
	struct kva_inbox_node *n = kva_inbox_batch_pop_nonblocking(b);
	return n ? caa_container_of(n, struct item, node) : NULL;
}

static void test_push_reports_empty_only_when_the_whole_fanin_was(void **state)
{
	(void)state;
	struct kva_fanin f;
	struct kva_inbox_batch b;
	struct item it[3];
	kva_fanin_init(&f);
	kva_inbox_batch_init(&b);
	assert_true(kva_fanin_empty(&f));
	assert_false(kva_fanin_splice_nonblocking(&f, &b));
	assert_true(kva_fanin_push(&f, &it[0].node));
	assert_false(kva_fanin_push(&f, &it[1].node));
	assert_false(kva_fanin_empty(&f));
	unsigned lane = kva_fanin_lane();
	assert_int_equal(atomic_load(&f.mask), 1u << lane); /* one thread, one lane */
	assert_true(kva_fanin_splice_nonblocking(&f, &b));
	assert_true(kva_fanin_empty(&f));
	assert_ptr_equal(pop(&b), &it[0]);
	assert_true(kva_fanin_push(&f, &it[2].node)); /* drained: empty again */
	assert_true(kva_fanin_splice_nonblocking(&f, &b)); /* appends behind it[1] */
	assert_ptr_equal(pop(&b), &it[1]);
	assert_ptr_equal(pop(&b), &it[2]);
	assert_null(pop(&b));
	kva_fanin_fini(&f);
}

struct other {
	struct kva_fanin *f;
	struct item *it;
	unsigned lane;
	bool was_empty;
};

static void *push_from_other_thread(void *arg)
{
	struct other *o = arg;
	o->lane = kva_fanin_lane();
	o->was_empty = kva_fanin_push(o->f, &o->it->node);
	return NULL;
}

static void test_threads_push_onto_their_own_lanes(void **state)
{
	(void)state;
	struct kva_fanin f;
	struct kva_inbox_batch b;
	struct item mine, theirs;
	kva_fanin_init(&f);
	kva_inbox_batch_init(&b);
	assert_true(kva_fanin_push(&f, &mine.node));
	struct other o = {&f, &theirs, 0, true};
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, push_from_other_thread, &o), 0);
	pthread_join(t, NULL);
	assert_int_not_equal(o.lane, kva_fanin_lane());
	assert_false(o.was_empty); /* its lane was empty, the fan-in was not */
	assert_int_equal(atomic_load(&f.mask), 1u << o.lane | 1u << kva_fanin_lane());
	assert_true(kva_fanin_splice_nonblocking(&f, &b));
	int got = 0;
	for (struct item *x; (x = pop(&b));)
		got += x == &mine ? 1 : x == &theirs ? 2 : 100;
	assert_int_equal(got, 3);
	kva_fanin_fini(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_push_reports_empty_only_when_the_whole_fanin_was),
	    cmocka_unit_test(test_threads_push_onto_their_own_lanes),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
