/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A retired request's grant is reused only after a grace period
 * (reservations/grant.c, "grant reuse"). White-box: the test reads the
 * engine's grant pointers, and a helper thread holds an RCU read-side
 * section the way a kva_query or kva_copy_done that found the record just
 * before its retirement would.
 */
#include "scenario.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <urcu/urcu-memb.h>

#include "engine_state.h"
#include <kvadmit/lockfree/rcu_thread.h>
#include "lifecycle.h"

#define KEY 7

static struct kva__grant *grant_of(struct sc *s, kva_handle h)
{
	struct kva__req *r = kva__rec_find(s->e, h.slot, h.gen, h.id);
	assert_non_null(r);
	return kva__grant(r);
}

/* Submits a restore and runs it: lookup, copy, READY, admitted. */
static kva_handle run_restore(struct sc *s, uint64_t id)
{
	kva_handle h = sc_submit(s, id, KEY, 480);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 1);
	sc_copies_done(s, 0);
	sc_step(s, 0);
	assert_non_null(sc_admitted(s, h));
	return h;
}

static struct {
	atomic_int inside, leave;
} reader;

static void *hold_reader(void *unused)
{
	(void)unused;
	kva_rcu_read_lock();
	atomic_store(&reader.inside, 1);
	while (!atomic_load(&reader.leave)) {
		struct timespec ms = {0, 1000000};
		nanosleep(&ms, NULL);
	}
	kva_rcu_read_unlock();
	return NULL;
}

static void a_grant_waits_for_readers_before_it_is_reused(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	kva_handle a = run_restore(s, 1);
	struct kva__grant *ga = grant_of(s, a);
	assert_non_null(ga);

	/* A reader inside its section from before a's retirement. */
	pthread_t t;
	atomic_store(&reader.inside, 0);
	atomic_store(&reader.leave, 0);
	assert_int_equal(pthread_create(&t, NULL, hold_reader, NULL), 0);
	while (!atomic_load(&reader.inside))
		;
	assert_int_equal(kva_finish(s->e, a), 0);
	sc_step(s, 0);
	assert_non_null(sc_ended(s, a)); /* retired: its grant left the record */
	struct timespec nap = {0, 30 * 1000 * 1000}; /* time for call_rcu to try */
	nanosleep(&nap, NULL);
	kva_handle b = run_restore(s, 2);
	assert_true(grant_of(s, b) != ga); /* the reader may still read a's */

	atomic_store(&reader.leave, 1);
	pthread_join(t, NULL);
	urcu_memb_barrier(); /* a's grace period is over */
	kva_handle c = run_restore(s, 3);
	assert_ptr_equal(grant_of(s, c), ga); /* now it is reused */

	assert_int_equal(kva_finish(s->e, b), 0);
	assert_int_equal(kva_finish(s->e, c), 0);
	sc_step(s, 0);
	sc_assert_conserved(s);
	sc_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(a_grant_waits_for_readers_before_it_is_reused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
