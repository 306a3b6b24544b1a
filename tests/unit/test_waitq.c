/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for lockfree/waitq: the queue against an array model under a
 * long random sequence of push_back / push_front / pop_head / unlink, checking
 * the exact order through both the writer view and the RCU reader traversal.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "kva_test.h"
#include <kvadmit/lockfree/rcu_thread.h>
#include <kvadmit/lockfree/waitq.h>
#include "waitq_helpers.h"

#define POOL 200
#define OPS 100000
#define BATCH 50

struct rec {
	struct kva_waitq_node node;
	int id;
	int queued;
};

static struct rec pool[POOL];
static int model[POOL];
static int model_len;

static struct rec *rec_of(struct kva_waitq_node *n)
{
	return n ? caa_container_of(n, struct rec, node) : NULL;
}

static void check_against_model(struct kva_waitq *q)
{
	int i = 0;

	assert_int_equal(waitq_count(q), model_len);
	assert_int_equal(kva_waitq_empty(q), model_len == 0);
	for (struct kva_waitq_node *n = kva_waitq_first(q); n; n = kva_waitq_next(q, n), i++) {
		assert_true(i < model_len);
		assert_int_equal(rec_of(n)->id, model[i]);
	}
	assert_int_equal(i, model_len);

	struct kva_waitq_node *pos;
	i = 0;
	kva_rcu_read_lock();
	kva_waitq_for_each_rcu(q, pos)
	{
		if (i >= model_len || rec_of(pos)->id != model[i])
			break;
		i++;
	}
	kva_rcu_read_unlock();
	assert_int_equal(i, model_len);
}

static int pick_unqueued(uint64_t *rng)
{
	int start = (int)(kva_test_rand(rng) % POOL);
	for (int k = 0; k < POOL; k++) {
		int i = (start + k) % POOL;
		if (!pool[i].queued)
			return i;
	}
	return -1;
}

static void test_matches_array_model_under_random_ops(void **state)
{
	(void)state;
	struct kva_waitq q;
	uint64_t rng = 0x1234567ULL;
	int counts[4] = {0};

	assert_int_equal(kva_rcu_enter(), 0);
	kva_waitq_init(&q);
	for (int i = 0; i < POOL; i++)
		pool[i] = (struct rec){.id = i};
	model_len = 0;
	check_against_model(&q);

	for (int op = 0; op < OPS; op++) {
		/* Bias towards pushes while short, removals while long, so the
		 * length wanders over the whole range. */
		unsigned r = (unsigned)(kva_test_rand(&rng) % 100);
		int want_push = r < (unsigned)(100 - model_len * 100 / POOL);
		int kind =
		    want_push ? (int)(kva_test_rand(&rng) & 1) : 2 + (int)(kva_test_rand(&rng) & 1);

		if (kind <= 1 && model_len == POOL)
			kind = 2;
		if (kind >= 2 && model_len == 0)
			kind = 0;
		counts[kind]++;
		switch (kind) {
		case 0: {
			int i = pick_unqueued(&rng);
			assert_true(i >= 0);
			kva_waitq_push_back(&q, &pool[i].node);
			pool[i].queued = 1;
			model[model_len++] = i;
			break;
		}
		case 1: {
			int i = pick_unqueued(&rng);
			assert_true(i >= 0);
			kva_waitq_push_front(&q, &pool[i].node);
			pool[i].queued = 1;
			memmove(&model[1], &model[0], (size_t)model_len * sizeof model[0]);
			model[0] = i;
			model_len++;
			break;
		}
		case 2: {
			struct rec *h = rec_of(pop_head(&q));
			assert_non_null(h);
			assert_int_equal(h->id, model[0]);
			h->queued = 0;
			memmove(&model[0], &model[1], (size_t)(model_len - 1) * sizeof model[0]);
			model_len--;
			break;
		}
		default: {
			int at = (int)(kva_test_rand(&rng) % (uint64_t)model_len);
			struct rec *x = &pool[model[at]];
			kva_waitq_unlink(&q, &x->node);
			x->queued = 0;
			memmove(&model[at], &model[at + 1],
				(size_t)(model_len - at - 1) * sizeof model[0]);
			model_len--;
			break;
		}
		}
		if (op % BATCH == BATCH - 1)
			check_against_model(&q);
	}
	check_against_model(&q);
	for (int k = 0; k < 4; k++)
		assert_true(counts[k] > OPS / 10);
}

static void test_pop_head_of_empty_queue_returns_null(void **state)
{
	(void)state;
	struct kva_waitq q;
	struct rec a = {.id = 1};

	kva_waitq_init(&q);
	assert_null(pop_head(&q));
	assert_null(kva_waitq_first(&q));
	kva_waitq_push_front(&q, &a.node);
	assert_ptr_equal(pop_head(&q), &a.node);
	assert_null(pop_head(&q));
	assert_int_equal(waitq_count(&q), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_matches_array_model_under_random_ops),
	    cmocka_unit_test(test_pop_head_of_empty_queue_returns_null),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
