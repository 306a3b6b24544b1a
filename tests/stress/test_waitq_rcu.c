/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Stress test for lockfree/waitq: reader threads traverse under RCU while
 * the single writer pushes at both ends, pops and unlinks, freeing unlinked
 * nodes with call_rcu.
 *
 * Every node carries a key that orders the whole history: push_back takes
 * the next positive key, push_front the next negative one, so the list is
 * always sorted by key and an unlinked node's `next` points to a larger key.
 * A traversal must therefore see strictly increasing keys (so no node twice,
 * no cycle), live magic and the payload its writer stored. Freed nodes get
 * poisoned magic; ASan turns any read of them into a failure.
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

#include "kva_test.h"
#include <kvadmit/lockfree/rcu_thread.h>
#include <kvadmit/lockfree/waitq.h>
#include "waitq_helpers.h"

#define READERS 2
#define MAXLEN 64
#define OPS_FULL 4000000ULL
#define MAGIC_LIVE 0x57a17e11u
#define MAGIC_DEAD 0xdeadbeefu

struct rec {
	struct kva_waitq_node node;
	uint32_t magic;
	int64_t key;
	uint64_t payload;
	size_t slot; /* writer's index into its array of queued records */
	struct rcu_head rcu;
};

struct shared {
	struct kva_waitq q;
	uint64_t ops;
	atomic_int done;
	atomic_ulong created;
	atomic_ulong freed;
	int writer_error;
};

struct reader_result {
	uint64_t traversals;
	uint64_t nodes_seen;
	uint64_t longest;
	uint64_t errors;
	char first_error[128];
};

struct reader_arg {
	struct shared *s;
	struct reader_result r;
};

static struct shared *g_shared; /* for the call_rcu callback */

static uint64_t payload_of(int64_t key)
{
	return (uint64_t)key * 0x9e3779b97f4a7c15ULL;
}

static void free_rec(struct rcu_head *h)
{
	struct rec *r = caa_container_of(h, struct rec, rcu);

	kva_rcu_reclaim_begin();
	r->magic = MAGIC_DEAD;
	free(r);
	atomic_fetch_add_explicit(&g_shared->freed, 1, memory_order_relaxed);
}

static void reader_fail(struct reader_result *r, const char *what, int64_t key)
{
	if (r->errors++ == 0)
		snprintf(r->first_error, sizeof r->first_error, "%s (key %lld)", what,
			 (long long)key);
}

static void *reader_main(void *p)
{
	struct reader_arg *a = p;
	struct shared *s = a->s;
	struct reader_result *r = &a->r;

	if (kva_rcu_enter() != 0) {
		reader_fail(r, "kva_rcu_enter failed", 0);
		return NULL;
	}
	do {
		struct kva_waitq_node *pos;
		int64_t prev = INT64_MIN;
		uint64_t n = 0;

		kva_rcu_read_lock();
		kva_waitq_for_each_rcu(&s->q, pos)
		{
			struct rec *x = caa_container_of(pos, struct rec, node);
			if (x->magic != MAGIC_LIVE) {
				reader_fail(r, "freed or garbage node reached", x->key);
				break;
			}
			if (x->payload != payload_of(x->key))
				reader_fail(r, "writer's stores not visible", x->key);
			if (x->key <= prev) {
				reader_fail(r, "keys not increasing: node twice or out of order",
					    x->key);
				break;
			}
			prev = x->key;
			n++;
		}
		kva_rcu_read_unlock();
		/* Acquire: pairs with the writer's release increment, so the bound
		 * covers every node the traversal could have reached. */
		if (n > atomic_load_explicit(&s->created, memory_order_acquire))
			reader_fail(r, "traversal longer than all nodes ever created", (int64_t)n);
		r->traversals++;
		r->nodes_seen += n;
		if (n > r->longest)
			r->longest = n;
	} while (!atomic_load_explicit(&s->done, memory_order_acquire) && r->errors == 0);
	return NULL;
}

static struct rec *new_rec(struct shared *s, int64_t key)
{
	struct rec *x = malloc(sizeof *x);

	if (!x)
		return NULL;
	x->magic = MAGIC_LIVE;
	x->key = key;
	x->payload = payload_of(key);
	/* Release: pairs with the reader's acquire of `created`. */
	atomic_fetch_add_explicit(&s->created, 1, memory_order_release);
	return x;
}

static void retire(struct rec *x)
{
	kva_rcu_call(&x->rcu, free_rec);
}

static void *writer_main(void *p)
{
	struct shared *s = p;
	struct rec *queued[MAXLEN];
	size_t len = 0;
	int64_t back_key = 0, front_key = 0;
	uint64_t rng = 0xfeedULL;

	if (kva_rcu_enter() != 0) {
		s->writer_error = 1;
		goto out;
	}
	for (uint64_t op = 0; op < s->ops; op++) {
		unsigned kind = (unsigned)(kva_test_rand(&rng) % 4);
		if (kind < 2 && len == MAXLEN)
			kind = 2 + kind;
		if (kind >= 2 && len == 0)
			kind -= 2;
		if (kind < 2) {
			struct rec *x = new_rec(s, kind == 0 ? ++back_key : --front_key);
			if (!x) {
				s->writer_error = 1;
				break;
			}
			x->slot = len;
			queued[len++] = x;
			if (kind == 0)
				kva_waitq_push_back(&s->q, &x->node);
			else
				kva_waitq_push_front(&s->q, &x->node);
			continue;
		}
		struct rec *x;
		if (kind == 2) {
			x = caa_container_of(pop_head(&s->q), struct rec, node);
		} else {
			x = queued[kva_test_rand(&rng) % len];
			kva_waitq_unlink(&s->q, &x->node);
		}
		/* Swap-remove from the writer's own index. */
		queued[x->slot] = queued[--len];
		queued[x->slot]->slot = x->slot;
		retire(x);
	}
	for (struct kva_waitq_node *n; (n = pop_head(&s->q));)
		retire(caa_container_of(n, struct rec, node));
	if (waitq_count(&s->q) != 0)
		s->writer_error = 2;
out:
	atomic_store_explicit(&s->done, 1, memory_order_release);
	return NULL;
}

static void test_readers_see_well_formed_list_while_writer_mutates(void **state)
{
	(void)state;
	struct shared s = {.ops = kva_test_scaled(OPS_FULL)};
	struct reader_arg ra[READERS];
	pthread_t rt[READERS], wt;
	struct timespec t0, t1;

	assert_int_equal(kva_rcu_enter(), 0);
	g_shared = &s;
	kva_waitq_init(&s.q);
	atomic_init(&s.done, 0);
	atomic_init(&s.created, 0);
	atomic_init(&s.freed, 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < READERS; i++) {
		ra[i] = (struct reader_arg){.s = &s};
		assert_int_equal(pthread_create(&rt[i], NULL, reader_main, &ra[i]), 0);
	}
	assert_int_equal(pthread_create(&wt, NULL, writer_main, &s), 0);
	pthread_join(wt, NULL);
	for (int i = 0; i < READERS; i++)
		pthread_join(rt[i], NULL);
	/* Every retired node's callback has run once this returns. */
	urcu_memb_barrier();
	clock_gettime(CLOCK_MONOTONIC, &t1);

	uint64_t trav = 0, seen = 0, longest = 0;
	for (int i = 0; i < READERS; i++) {
		if (ra[i].r.errors)
			fail_msg("reader %d: %llu errors, first: %s", i,
				 (unsigned long long)ra[i].r.errors, ra[i].r.first_error);
		trav += ra[i].r.traversals;
		seen += ra[i].r.nodes_seen;
		if (ra[i].r.longest > longest)
			longest = ra[i].r.longest;
	}
	printf("waitq rcu stress: %llu writer ops, %llu traversals (%llu nodes, longest %llu) in "
	       "%.3f s\n",
	       (unsigned long long)s.ops, (unsigned long long)trav, (unsigned long long)seen,
	       (unsigned long long)longest,
	       (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
	assert_int_equal(s.writer_error, 0);
	assert_true(trav >= READERS);
	assert_int_equal(atomic_load_explicit(&s.freed, memory_order_relaxed),
			 atomic_load_explicit(&s.created, memory_order_relaxed));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_readers_see_well_formed_list_while_writer_mutates),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
