/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Stress test for lockfree/inbox and lockfree/fanin: several producers push
 * stamped items while one consumer drains with splice (the inbox with the
 * blocking consumer, the fan-in with the non-blocking one the engine's step
 * uses, keeping what it could not detach for its next round). Every item
 * must arrive exactly once, with the fields its producer wrote, and each
 * producer's items in push order.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <kvadmit/lockfree/fanin.h>
#include <kvadmit/lockfree/inbox.h>
#include "kva_test.h"

#define PRODUCERS 3
#define ITEMS_FULL 1000000ULL

struct item {
	struct kva_inbox_node node;
	uint32_t producer;
	uint32_t check;
	uint64_t seq;
};

struct shared {
	struct kva_inbox q;
	struct kva_fanin f;
	bool fanin; /* producers push onto f, the consumer is non-blocking */
	struct item *items[PRODUCERS];
	uint64_t per_producer;
	atomic_int go;
};

struct producer_arg {
	struct shared *s;
	uint32_t id;
	uint64_t was_empty; /* how often push reported an empty queue */
};

struct consumer_result {
	uint64_t received;
	uint64_t drains;
	uint64_t errors;
	char first_error[160];
};

static uint32_t check_of(uint32_t producer, uint64_t seq)
{
	uint64_t x = (seq + 1) * 0x9e3779b97f4a7c15ULL ^ producer;
	return (uint32_t)(x >> 29);
}

static void *producer_main(void *p)
{
	struct producer_arg *a = p;
	struct shared *s = a->s;
	struct item *items = s->items[a->id];

	while (!atomic_load_explicit(&s->go, memory_order_acquire))
		;
	for (uint64_t i = 0; i < s->per_producer; i++) {
		struct item *it = &items[i];
		it->producer = a->id;
		it->seq = i;
		it->check = check_of(a->id, i);
		kva_inbox_node_init(&it->node);
		a->was_empty += s->fanin ? kva_fanin_push(&s->f, &it->node)
					 : kva_inbox_push(&s->q, &it->node);
	}
	return NULL;
}

static void note(struct consumer_result *r, const char *what, const struct item *it)
{
	if (r->errors++ == 0)
		snprintf(r->first_error, sizeof r->first_error, "%s (producer %u seq %llu)", what,
			 (unsigned)it->producer, (unsigned long long)it->seq);
}

static void consume(struct shared *s, struct consumer_result *r)
{
	uint64_t expect[PRODUCERS] = {0};
	uint64_t total = s->per_producer * PRODUCERS;
	struct kva_inbox_batch b;

	kva_inbox_batch_init(&b);
	while (r->received < total && r->errors == 0) {
		if (s->fanin) {
			r->drains += kva_fanin_splice_nonblocking(&s->f, &b);
		} else {
			if (!kva_inbox_drain_blocking(&s->q, &b))
				continue;
			r->drains++;
		}
		for (struct kva_inbox_node *n;
		     (n = s->fanin ? kva_inbox_batch_pop_nonblocking(&b) : kva_inbox_batch_pop_blocking(&b));) {
			struct item *it = caa_container_of(n, struct item, node);
			r->received++;
			if (it->producer >= PRODUCERS) {
				note(r, "bad producer", it);
				continue;
			}
			if (it->seq != expect[it->producer])
				note(r, "out of order, lost or duplicated", it);
			else if (it != &s->items[it->producer][it->seq])
				note(r, "wrong node for stamp", it);
			else if (it->check != check_of(it->producer, it->seq))
				note(r, "producer's writes not visible", it);
			expect[it->producer] = it->seq + 1;
		}
	}
	for (int p = 0; p < PRODUCERS && r->errors == 0; p++)
		if (expect[p] != s->per_producer) {
			r->errors++;
			snprintf(r->first_error, sizeof r->first_error, "producer %d: %llu of %llu",
				 p, (unsigned long long)expect[p],
				 (unsigned long long)s->per_producer);
		}
}

static void run(bool fanin)
{
	struct shared s = {.per_producer = kva_test_scaled(ITEMS_FULL), .fanin = fanin};
	struct producer_arg args[PRODUCERS];
	pthread_t th[PRODUCERS];
	struct consumer_result r = {0};
	struct timespec t0, t1;

	kva_inbox_init(&s.q);
	kva_fanin_init(&s.f);
	atomic_init(&s.go, 0);
	for (int p = 0; p < PRODUCERS; p++) {
		s.items[p] = calloc(s.per_producer, sizeof(struct item));
		assert_non_null(s.items[p]);
		args[p] = (struct producer_arg){.s = &s, .id = (uint32_t)p};
		assert_int_equal(pthread_create(&th[p], NULL, producer_main, &args[p]), 0);
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	atomic_store_explicit(&s.go, 1, memory_order_release);
	/* This thread is the single consumer; it only records, asserts below. */
	consume(&s, &r);
	for (int p = 0; p < PRODUCERS; p++)
		pthread_join(th[p], NULL);
	clock_gettime(CLOCK_MONOTONIC, &t1);

	uint64_t was_empty = 0;
	for (int p = 0; p < PRODUCERS; p++)
		was_empty += args[p].was_empty;
	printf("%s stress: %d x %llu items in %.3f s, %llu drains, %llu pushes found it empty\n",
	       fanin ? "fanin" : "inbox", PRODUCERS, (unsigned long long)s.per_producer,
	       (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9,
	       (unsigned long long)r.drains, (unsigned long long)was_empty);
	if (r.errors)
		fail_msg("%llu errors, first: %s", (unsigned long long)r.errors, r.first_error);
	assert_int_equal(r.received, s.per_producer * PRODUCERS);
	assert_true(kva_inbox_empty(&s.q));
	assert_true(kva_fanin_empty(&s.f));
	/* Every drain that found items was preceded by a push onto an empty
	 * queue, so the wakeup hint never undercounts. */
	assert_true(was_empty >= r.drains);
	kva_inbox_fini(&s.q);
	kva_fanin_fini(&s.f);
	for (int p = 0; p < PRODUCERS; p++)
		free(s.items[p]);
}

static void test_every_item_arrives_once_in_producer_order(void **state)
{
	(void)state;
	run(false);
}

static void test_fanin_nonblocking_consumer_gets_every_item_once_in_producer_order(void **state)
{
	(void)state;
	run(true);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_every_item_arrives_once_in_producer_order),
	    cmocka_unit_test(test_fanin_nonblocking_consumer_gets_every_item_once_in_producer_order),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
