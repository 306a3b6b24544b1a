/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Many engines on one thread (never-blocks issue, item 5): servers run one
 * engine per model, GPU or tenant on shared frontend threads. A thread's
 * slot caches must not thrash between engines, and no submit or cancel may
 * wait for a lock another thread holds: the slab registry lock, which
 * liburcu's call_rcu thread takes for every reclaimed batch, is held here by
 * the test while one thread submits to and cancels on eight engines.
 */
#include "scenario.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include <kvadmit/lockfree/slab.h>

#define ENGINES 8
#define PER_ENGINE 600 /* > 2 x 256: refills from the fresh range and chunk growth */

struct burst {
	struct sc *s[ENGINES];
	kva_handle h[ENGINES][PER_ENGINE];
	int submit_rc[ENGINES][PER_ENGINE], cancel_rc[ENGINES][PER_ENGINE];
	uint64_t detached_before, detached_after;
	_Atomic int done;
};

/* Round-robin over the engines: every call goes to another engine than the
 * one before it, the worst case for a small per-thread table. */
static void *burst_main(void *arg)
{
	struct burst *b = arg;
	b->detached_before = kva__slab_detached();
	for (int i = 0; i < PER_ENGINE; i++)
		for (int k = 0; k < ENGINES; k++) {
			kva_request r = {.id = (uint64_t)i + 1, .prompt_tokens = 16};
			b->submit_rc[k][i] = kva_submit(b->s[k]->e, &r, &b->h[k][i]);
		}
	for (int i = 0; i < PER_ENGINE; i += 2)
		for (int k = 0; k < ENGINES; k++)
			b->cancel_rc[k][i] = kva_cancel(b->s[k]->e, b->h[k][i]);
	b->detached_after = kva__slab_detached();
	atomic_store(&b->done, 1);
	return NULL;
}

static struct burst *burst_new(void)
{
	struct burst *b = calloc(1, sizeof(*b));
	assert_non_null(b);
	for (int k = 0; k < ENGINES; k++) {
		kva_config c;
		sc_config(&c);
		c.total_pages = 4; /* a blocked head: nothing is admitted */
		b->s[k] = sc_new(&c);
		sc_occupy(b->s[k], 1u << 30, 4);
	}
	return b;
}

/* Every submit and cancel went through, each engine ingested its own
 * requests, and the cancelled half ended cancelled. */
static void burst_check(struct burst *b)
{
	for (int k = 0; k < ENGINES; k++) {
		for (int i = 0; i < PER_ENGINE; i++) {
			assert_int_equal(b->submit_rc[k][i], 0);
			if (!(i & 1))
				assert_int_equal(b->cancel_rc[k][i], 0);
		}
		/* the cancelled ones end in the step that ingests them */
		sc_step(b->s[k], SC_MS);
		for (int i = 0; i < PER_ENGINE; i++) {
			const kva_ended *x = sc_ended(b->s[k], b->h[k][i]);
			if (i & 1) {
				assert_null(x);
				assert_int_equal(sc_state(b->s[k], b->h[k][i]), KVA_STATE_WAITING);
			} else {
				assert_non_null(x);
				assert_int_equal(x->state, KVA_STATE_CANCELLED);
			}
		}
		kva_stats st = sc_stats(b->s[k]);
		assert_int_equal(st.waiting, PER_ENGINE / 2);
		assert_int_equal(st.cancelled, PER_ENGINE / 2);
		sc_free(b->s[k]);
	}
	free(b);
}

/* With four caches a thread (the old table) evicted one on nearly every call
 * to a third engine: 9,600 calls here detached thousands. */
static void eight_engines_keep_their_caches(void **st)
{
	(void)st;
	struct burst *b = burst_new();
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, burst_main, b), 0);
	pthread_join(t, NULL);
	/* the thread attached to 16 slabs and detached none while it ran */
	assert_int_equal(b->detached_after - b->detached_before, 0);
	burst_check(b);
}

/* The old detach took the registry lock for every eviction: with the lock
 * held elsewhere the submitting thread stopped until it was released. A
 * thread that waited on it would not be done within the deadline (60 s; the
 * burst takes milliseconds), and would finish only after the release. */
static void submits_never_wait_for_the_reclaim_lock(void **st)
{
	(void)st;
	struct burst *b = burst_new();
	kva__slab_registry_hold(true);
	pthread_t t;
	if (pthread_create(&t, NULL, burst_main, b) != 0) {
		kva__slab_registry_hold(false);
		fail_msg("pthread_create");
	}
	struct timespec tick = {0, 1000000};
	for (int ms = 0; ms < 60000 && !atomic_load(&b->done); ms++)
		nanosleep(&tick, NULL);
	int done_while_held = atomic_load(&b->done);
	kva__slab_registry_hold(false);
	pthread_join(t, NULL);
	assert_true(done_while_held);
	burst_check(b);
}

/* A thread holds caches of engines another thread destroys: its entries
 * never match again, their orphaned caches are freed when the thread looks
 * at them (a new engine's attach) or exits; nothing leaks (LSan) and no
 * freed cache is touched (ASan). */
struct orphan_ctx {
	struct sc *s[3];
	int phase; /* 0: use engines 0, 1; 1: use engine 2 after 0, 1 died */
	pthread_mutex_t m;
	pthread_cond_t cv;
	int rc[2];
};

static void *orphan_main(void *arg)
{
	struct orphan_ctx *o = arg;
	kva_handle h;
	kva_request r = {.id = 1, .prompt_tokens = 16};
	o->rc[0] = kva_submit(o->s[0]->e, &r, &h) | kva_submit(o->s[1]->e, &r, &h);
	pthread_mutex_lock(&o->m);
	o->phase = 1;
	pthread_cond_broadcast(&o->cv);
	while (o->phase != 2)
		pthread_cond_wait(&o->cv, &o->m);
	pthread_mutex_unlock(&o->m);
	r.id = 2;
	o->rc[1] = kva_submit(o->s[2]->e, &r, &h);
	return NULL;
}

static void caches_of_destroyed_engines_are_freed_by_their_thread(void **st)
{
	(void)st;
	struct orphan_ctx o = {.m = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
	for (int k = 0; k < 3; k++)
		o.s[k] = sc_default();
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, orphan_main, &o), 0);
	pthread_mutex_lock(&o.m);
	while (o.phase != 1)
		pthread_cond_wait(&o.cv, &o.m);
	pthread_mutex_unlock(&o.m);
	sc_free(o.s[0]); /* the other thread still holds their caches */
	sc_free(o.s[1]);
	pthread_mutex_lock(&o.m);
	o.phase = 2;
	pthread_cond_broadcast(&o.cv);
	pthread_mutex_unlock(&o.m);
	pthread_join(t, NULL);
	assert_int_equal(o.rc[0], 0);
	assert_int_equal(o.rc[1], 0);
	sc_step(o.s[2], SC_MS);
	sc_free(o.s[2]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(eight_engines_keep_their_caches),
	    cmocka_unit_test(submits_never_wait_for_the_reclaim_lock),
	    cmocka_unit_test(caches_of_destroyed_engines_are_freed_by_their_thread),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
