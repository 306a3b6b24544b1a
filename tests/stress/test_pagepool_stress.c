/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Threaded stress tests for lockfree/pagepool. Every take stamps the id in a
 * shared ownership array with an atomic exchange, every put clears it, so a
 * second hand-out of a held id is caught the moment it happens. Workers
 * count what they saw; the main thread asserts. Takes of more than
 * 64 ids (several map words) run against small ones: with credits they must
 * always get their ids or hear -EAGAIN (contended, nothing taken; never
 * -ENOSPC), and a large take must not starve.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include <kvadmit/lockfree/capacity.h>
#include <kvadmit/lockfree/pagepool.h>
#include "kva_test.h"

#define WORKERS 4
#define MAX_BATCH 16
#define BIG_BATCH 300 /* several 64-id map words */

struct shared {
	struct kva_pagepool pool;
	struct kva_capacity cap; /* only in the credits test */
	_Atomic uint32_t *owner; /* 0 = in the pool, else worker index + 1 */
	uint32_t n;
	uint32_t max_batch; /* ids per take or put */
	pthread_barrier_t start;
};

struct worker {
	struct shared *sh;
	uint32_t me;
	uint32_t *held;
	size_t nheld;
	uint32_t *batch; /* max_batch ids */
	uint64_t iters;
	uint64_t taken, refused;
	uint64_t double_handouts; /* took an id someone else held */
	uint64_t bad_ids;	  /* id out of range */
	uint64_t stolen;	  /* put an id that was no longer ours */
	uint64_t missing;	  /* credits held but -ENOSPC */
	uint64_t contended;	  /* credits held, -EAGAIN: tried again */
};

/* A take for credits held: 0 taken, -EAGAIN (counted) tried again, else
 * counted as missing ids. */
static bool take_held(struct worker *w, uint32_t *ids, size_t k)
{
	int rc;
	while ((rc = kva_pagepool_take_n(&w->sh->pool, ids, k)) == -EAGAIN)
		w->contended++;
	if (rc)
		w->missing++;
	return rc == 0;
}

static void own(struct worker *w, uint32_t id)
{
	if (id >= w->sh->n) {
		w->bad_ids++;
		return;
	}
	/* seq_cst: a plain witness, independent of the pool's own ordering. */
	if (atomic_exchange(&w->sh->owner[id], w->me) != 0)
		w->double_handouts++;
	w->held[w->nheld++] = id;
}

static void disown(struct worker *w, uint32_t id)
{
	if (atomic_exchange(&w->sh->owner[id], 0) != w->me)
		w->stolen++;
}

static void put_some(struct worker *w, size_t k)
{
	uint32_t *ids = w->held + w->nheld - k;
	for (size_t i = 0; i < k; i++)
		disown(w, ids[i]);
	if (k == 1)
		kva_pagepool_put(&w->sh->pool, ids[0]);
	else
		kva_pagepool_put_n(&w->sh->pool, ids, k);
	w->nheld -= k;
}

/* The mixed and credit workers run their iterations and, should every one
 * have been refused (a thread that ran only while the others held the pool
 * or its credits, e.g. on an overloaded machine), on until one take
 * succeeds: each worker must have taken part (check_and_free) and the others
 * finish and give everything back, so that ends. */
static void *mixed_worker(void *arg)
{
	struct worker *w = arg;
	struct shared *sh = w->sh;
	uint64_t rng = 0x9e3779b97f4a7c15ULL * w->me;
	uint32_t *batch = w->batch;

	pthread_barrier_wait(&sh->start);
	for (uint64_t i = 0; i < w->iters || !w->taken; i++) {
		uint64_t r = kva_test_rand(&rng);
		size_t k = 1 + (size_t)((r >> 8) % sh->max_batch);
		/* Bias towards taking so that the pool runs dry and take_n fails. */
		if ((r & 3) != 0 && w->nheld + k <= sh->n) {
			bool ok;
			if ((r >> 4) & 1) {
				k = 1;
				ok = kva_pagepool_take(&sh->pool, batch) == 0;
			} else {
				ok = kva_pagepool_take_n(&sh->pool, batch, k) == 0;
			}
			if (!ok) {
				w->refused++;
				continue;
			}
			w->taken += k;
			for (size_t j = 0; j < k; j++)
				own(w, batch[j]);
		} else if (w->nheld > 0) {
			put_some(w, k < w->nheld ? k : w->nheld);
		}
		/* Shuffle what we hold so puts return ids in a new order. */
		if (w->nheld > 1) {
			size_t a = (size_t)(r >> 24) % w->nheld, b = (size_t)(r >> 40) % w->nheld;
			uint32_t t = w->held[a];
			w->held[a] = w->held[b];
			w->held[b] = t;
		}
	}
	while (w->nheld > 0)
		put_some(w, w->nheld < sh->max_batch ? w->nheld : sh->max_batch);
	return NULL;
}

/* A holder of credits always finds ids: reserve k credits, take_n(k) must
 * succeed; put the ids back before releasing the credits. */
static void *credit_worker(void *arg)
{
	struct worker *w = arg;
	struct shared *sh = w->sh;
	uint64_t rng = 0xda3e39cb94b95bdbULL * w->me;
	uint32_t *batch = w->batch;

	pthread_barrier_wait(&sh->start);
	for (uint64_t i = 0; i < w->iters || !w->taken; i++) {
		uint64_t r = kva_test_rand(&rng);
		uint32_t k = 1 + (uint32_t)((r >> 8) % sh->max_batch);
		struct kva_credits c = {k, 0, 0};
		if (!kva_capacity_try_reserve(&sh->cap, c, 0)) {
			w->refused++;
			continue;
		}
		if (!take_held(w, batch, k)) {
			kva_capacity_release(&sh->cap, c);
			continue;
		}
		w->taken += k;
		for (uint32_t j = 0; j < k; j++)
			own(w, batch[j]);
		put_some(w, k);
		kva_capacity_release(&sh->cap, c);
	}
	return NULL;
}

/* Worker 0 takes half the pool at a time, with credits, while the others
 * take and put a few ids each with theirs: the large take collects its ids
 * from many words while they change under it and must neither fail nor
 * starve (a pool that restarted a take on every concurrent change would). */
static void *big_worker(void *arg)
{
	struct worker *w = arg;
	struct shared *sh = w->sh;
	const uint32_t k = sh->n / 2;
	struct kva_credits c = {k, 0, 0};

	pthread_barrier_wait(&sh->start);
	for (uint64_t i = 0; i < w->iters; i++) {
		while (!kva_capacity_try_reserve(&sh->cap, c, 0))
			w->refused++; /* the small ones hold credits this instant */
		if (!take_held(w, w->batch, k)) {
			kva_capacity_release(&sh->cap, c);
			continue;
		}
		w->taken += k;
		for (uint32_t j = 0; j < k; j++)
			own(w, w->batch[j]);
		put_some(w, k);
		kva_capacity_release(&sh->cap, c);
	}
	return NULL;
}

static void run_with(struct shared *sh, uint32_t n, uint32_t max_batch, uint64_t iters,
		     void *(*fn0)(void *), uint64_t iters0, void *(*fn)(void *), struct worker *w)
{
	pthread_t t[WORKERS];

	sh->n = n;
	sh->max_batch = max_batch;
	sh->owner = calloc(n, sizeof(*sh->owner));
	assert_non_null(sh->owner);
	assert_int_equal(kva_pagepool_init(&sh->pool, n), 0);
	pthread_barrier_init(&sh->start, NULL, WORKERS);
	for (uint32_t i = 0; i < WORKERS; i++) {
		w[i] = (struct worker){.sh = sh, .me = i + 1, .iters = i == 0 ? iters0 : iters};
		w[i].held = malloc(n * sizeof(uint32_t));
		w[i].batch = malloc(n * sizeof(uint32_t));
		assert_non_null(w[i].held);
		assert_non_null(w[i].batch);
	}
	for (uint32_t i = 0; i < WORKERS; i++)
		assert_int_equal(pthread_create(&t[i], NULL, i == 0 ? fn0 : fn, &w[i]), 0);
	for (int i = 0; i < WORKERS; i++)
		pthread_join(t[i], NULL);
	pthread_barrier_destroy(&sh->start);
}

static void run(struct shared *sh, uint32_t n, uint32_t max_batch, uint64_t iters,
		void *(*fn)(void *), struct worker *w)
{
	run_with(sh, n, max_batch, iters, fn, iters, fn, w);
}

/* Every worker put everything back: the pool holds each id exactly once. */
static void check_and_free(struct shared *sh, struct worker *w)
{
	for (int i = 0; i < WORKERS; i++) {
		assert_int_equal(w[i].double_handouts, 0);
		assert_int_equal(w[i].bad_ids, 0);
		assert_int_equal(w[i].stolen, 0);
		assert_int_equal(w[i].missing, 0);
		assert_int_equal(w[i].nheld, 0);
		assert_true(w[i].taken > 0);
		free(w[i].held);
		free(w[i].batch);
	}
	assert_int_equal(kva_pagepool_count(&sh->pool), sh->n);
	uint32_t *all = malloc(sh->n * sizeof(uint32_t));
	unsigned char *seen = calloc(sh->n, 1);
	assert_non_null(all);
	assert_non_null(seen);
	assert_int_equal(kva_pagepool_take_n(&sh->pool, all, sh->n), 0);
	for (uint32_t i = 0; i < sh->n; i++) {
		assert_true(all[i] < sh->n);
		assert_int_equal(seen[all[i]]++, 0);
		assert_int_equal(atomic_load(&sh->owner[all[i]]), 0);
	}
	uint32_t extra;
	assert_int_equal(kva_pagepool_take(&sh->pool, &extra), -ENOSPC);
	free(all);
	free(seen);
	free(sh->owner);
	kva_pagepool_fini(&sh->pool);
}

static void test_concurrent_take_put_never_hands_an_id_out_twice(void **state)
{
	(void)state;
	static struct shared sh;
	struct worker w[WORKERS];

	run(&sh, 4096, MAX_BATCH, kva_test_scaled(2000000), mixed_worker, w);
	check_and_free(&sh, w);
}

static void test_tiny_pool_under_contention_keeps_every_id(void **state)
{
	(void)state;
	static struct shared sh;
	struct worker w[WORKERS];

	/* Fewer ids than the workers want: take_n fails often, the stack is
	 * emptied and refilled constantly (the ABA-prone regime). */
	run(&sh, 24, MAX_BATCH, kva_test_scaled(2000000), mixed_worker, w);
	uint64_t refused = 0;
	for (int i = 0; i < WORKERS; i++)
		refused += w[i].refused;
	assert_true(refused > 0);
	check_and_free(&sh, w);
}

static void test_credit_holders_always_find_ids(void **state)
{
	(void)state;
	static struct shared sh;
	struct worker w[WORKERS];
	const uint32_t n = 40;
	struct kva_credits total = {n, 0, 0};

	kva_capacity_init(&sh.cap, total);
	run(&sh, n, MAX_BATCH, kva_test_scaled(2000000), credit_worker, w);
	assert_int_equal(kva_capacity_free(&sh.cap).pages, n);
	check_and_free(&sh, w);
}

/* Takes of up to BIG_BATCH ids collect them from several words while small
 * takes and puts change those words; every holder of credits gets its ids. */
static void test_credit_holders_find_ids_in_takes_across_words(void **state)
{
	(void)state;
	static struct shared sh;
	struct worker w[WORKERS];
	const uint32_t n = 2 * BIG_BATCH;
	struct kva_credits total = {n, 0, 0};

	kva_capacity_init(&sh.cap, total);
	run(&sh, n, BIG_BATCH, kva_test_scaled(100000), credit_worker, w);
	assert_int_equal(kva_capacity_free(&sh.cap).pages, n);
	check_and_free(&sh, w);
}

static void test_a_large_take_is_not_starved_by_small_ones(void **state)
{
	(void)state;
	static struct shared sh;
	struct worker w[WORKERS];
	const uint32_t n = 4096;
	const uint64_t big = kva_test_scaled(1000);
	struct kva_credits total = {n, 0, 0};

	kva_capacity_init(&sh.cap, total);
	run_with(&sh, n, MAX_BATCH, kva_test_scaled(2000000), big_worker, big, credit_worker, w);
	assert_int_equal(w[0].taken, big * (n / 2));
	assert_int_equal(kva_capacity_free(&sh.cap).pages, n);
	check_and_free(&sh, w);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_concurrent_take_put_never_hands_an_id_out_twice),
	    cmocka_unit_test(test_tiny_pool_under_contention_keeps_every_id),
	    cmocka_unit_test(test_credit_holders_always_find_ids),
	    cmocka_unit_test(test_credit_holders_find_ids_in_takes_across_words),
	    cmocka_unit_test(test_a_large_take_is_not_starved_by_small_ones),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
