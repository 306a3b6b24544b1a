/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for lockfree/rcu_thread: registration on first use, idempotence,
 * unregistration at thread exit, and threads registered by someone else.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>

#include "rcu_thread.h"

struct probe {
	int before, after_enter, after_second, enter_rc;
};

static void *short_lived(void *p)
{
	struct probe *r = p;

	r->before = kva_rcu_registered();
	r->enter_rc = kva_rcu_enter();
	r->after_enter = kva_rcu_registered();
	/* The read lock registers too and is idempotent. */
	kva_rcu_read_lock();
	kva_rcu_read_unlock();
	r->after_second = kva_rcu_enter() == 0 && kva_rcu_registered();
	return NULL;
}

static void test_thread_registers_on_first_use_and_unregisters_at_exit(void **state)
{
	(void)state;
	enum { ROUNDS = 20, THREADS = 8 };

	assert_int_equal(kva_rcu_enter(), 0);
	for (int round = 0; round < ROUNDS; round++) {
		pthread_t th[THREADS];
		struct probe r[THREADS] = {{0}};
		for (int i = 0; i < THREADS; i++)
			assert_int_equal(pthread_create(&th[i], NULL, short_lived, &r[i]), 0);
		for (int i = 0; i < THREADS; i++) {
			pthread_join(th[i], NULL);
			assert_false(r[i].before);
			assert_int_equal(r[i].enter_rc, 0);
			assert_true(r[i].after_enter);
			assert_true(r[i].after_second);
		}
		/* A grace period walks the registry: a thread that exited still
		 * registered would leave a dangling reader there. */
		kva_rcu_synchronize();
	}
}

static void *foreign(void *p)
{
	int *ok = p;

	urcu_memb_register_thread();
	/* Already registered by its owner: kvadmit must neither register it
	 * again nor unregister it at exit. */
	*ok = kva_rcu_enter() == 0 && kva_rcu_registered();
	kva_rcu_read_lock();
	kva_rcu_read_unlock();
	urcu_memb_unregister_thread();
	return NULL;
}

static void test_thread_registered_by_its_owner_is_left_alone(void **state)
{
	(void)state;
	pthread_t th;
	int ok = 0;

	assert_int_equal(pthread_create(&th, NULL, foreign, &ok), 0);
	pthread_join(th, NULL);
	assert_true(ok);
	kva_rcu_synchronize();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_thread_registers_on_first_use_and_unregisters_at_exit),
	    cmocka_unit_test(test_thread_registered_by_its_owner_is_left_alone),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
