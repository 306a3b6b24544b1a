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

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <kvadmit/lockfree/rcu_thread.h>

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

/* Item 9 of the hardening issue: a thread whose exit hook cannot be set
 * must not stay in liburcu's registry after it exits. */
struct transient_probe {
	int enter_rc, registered_api, urcu_outside, urcu_inside, urcu_after;
};

static void *transient_thread(void *p)
{
	struct transient_probe *r = p;
	r->enter_rc = kva_rcu_enter();
	r->registered_api = kva_rcu_registered();
	r->urcu_outside = kva__rcu_urcu_registered();
	kva_rcu_read_lock();
	kva_rcu_read_lock(); /* nested: registered once, for the outermost */
	r->urcu_inside = kva__rcu_urcu_registered();
	kva_rcu_read_unlock();
	kva_rcu_read_unlock();
	r->urcu_after = kva__rcu_urcu_registered();
	return NULL;
}

static void check_transient(const struct transient_probe *r, int rc)
{
	assert_int_equal(r->enter_rc, rc);
	assert_false(r->registered_api);
	assert_false(r->urcu_outside);
	assert_true(r->urcu_inside);
	assert_false(r->urcu_after);
}

static void test_failed_setspecific_leaves_no_exited_thread_registered(void **state)
{
	(void)state;
	for (int round = 0; round < 8; round++) {
		pthread_t th;
		struct transient_probe r = {0};
		kva__rcu_fail_exit_hook(1);
		assert_int_equal(pthread_create(&th, NULL, transient_thread, &r), 0);
		pthread_join(th, NULL);
		check_transient(&r, -ENOMEM);
		kva_rcu_synchronize(); /* walks the registry: no dangling reader */
	}
}

/* In a child process, so that kvadmit's key is not created yet there:
 * every pthread key is taken first, so pthread_key_create fails. */
static void test_failed_key_create_leaves_no_exited_thread_registered(void **state)
{
	(void)state;
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		pthread_key_t k;
		while (pthread_key_create(&k, NULL) == 0)
			;
		pthread_t th;
		struct transient_probe r = {0};
		if (pthread_create(&th, NULL, transient_thread, &r) != 0)
			_exit(3);
		pthread_join(th, NULL);
		if (r.enter_rc != -EAGAIN || r.registered_api || r.urcu_outside || !r.urcu_inside ||
		    r.urcu_after)
			_exit(1);
		kva_rcu_synchronize();
		_exit(0);
	}
	int st = 0;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
}

/* A later key destructor that calls kvadmit after kvadmit's own exit hook
 * ran: the thread is transient from then on, never registered again for
 * good (the hook would not run again to unregister it). */
static pthread_key_t late_key;
static struct transient_probe late_probe;
static int late_rounds;

static void late_destructor(void *v)
{
	(void)v;
	if (++late_rounds == 1) {
		/* run once more, in the next round: kvadmit's hook ran by then */
		(void)pthread_setspecific(late_key, (void *)1);
		return;
	}
	transient_thread(&late_probe);
}

static void *late_thread(void *p)
{
	(void)p;
	assert_int_equal(kva_rcu_enter(), 0);
	(void)pthread_setspecific(late_key, (void *)1);
	return NULL;
}

static void test_call_from_a_later_key_destructor_stays_transient(void **state)
{
	(void)state;
	assert_int_equal(pthread_key_create(&late_key, late_destructor), 0);
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, late_thread, NULL), 0);
	pthread_join(th, NULL);
	assert_int_equal(late_rounds, 2);
	check_transient(&late_probe, -ESRCH);
	kva_rcu_synchronize();
	pthread_key_delete(late_key);
}

/* The other order: kvadmit registered the thread first. The host may use
 * urcu-memb read-side sections on it as they are (it is registered), and if
 * it unregisters the thread itself before exiting, kvadmit's exit hook must
 * not unregister it a second time (liburcu asserts on that). */
static void *host_after(void *p)
{
	int *ok = p;
	*ok = kva_rcu_enter() == 0 && kva_rcu_registered() && kva__rcu_urcu_registered();
	urcu_memb_read_lock();
	urcu_memb_read_unlock();
	urcu_memb_unregister_thread();
	return NULL;
}

static void test_thread_registered_by_kvadmit_then_unregistered_by_its_host(void **state)
{
	(void)state;
	pthread_t th;
	int ok = 0;

	assert_int_equal(pthread_create(&th, NULL, host_after, &ok), 0);
	pthread_join(th, NULL);
	assert_true(ok);
	kva_rcu_synchronize();
}

/* Issue 28, item 4: a host ends a registration (its own, or kvadmit's)
 * with urcu_memb_unregister_thread and calls kvadmit again (a key destructor
 * at its end): every read-side section is real, registered only for its
 * length; once the host registers the thread again it is left alone. */
struct ended_probe {
	int before, inside, nested_inside, outer_after_nested, after, api_after;
	int again_api, again_after_section;
};

static void section_after_end(struct ended_probe *r)
{
	r->before = kva__rcu_urcu_registered();
	kva_rcu_read_lock();
	r->inside = kva__rcu_urcu_registered();
	kva_rcu_read_lock();
	r->nested_inside = kva__rcu_urcu_registered();
	kva_rcu_read_unlock();
	r->outer_after_nested = kva__rcu_urcu_registered();
	kva_rcu_read_unlock();
	r->after = kva__rcu_urcu_registered();
	r->api_after = kva_rcu_registered();
}

static void *ended_by_host(void *p)
{
	struct ended_probe *r = p;
	bool own = r->before; /* in: the host registers the thread itself */
	if (own)
		urcu_memb_register_thread();
	if (kva_rcu_enter() != 0 || !kva_rcu_registered())
		return NULL;
	kva_rcu_read_lock();
	kva_rcu_read_unlock();
	urcu_memb_unregister_thread(); /* the host's end of the registration */
	section_after_end(r);
	/* the host registers it again: its registration, kvadmit's sections
	 * use it and never end it (liburcu asserts on a double unregister) */
	urcu_memb_register_thread();
	r->again_api = kva_rcu_enter() == 0 && kva_rcu_registered();
	kva_rcu_read_lock();
	kva_rcu_read_unlock();
	r->again_after_section = kva__rcu_urcu_registered();
	urcu_memb_unregister_thread();
	return NULL;
}

static void test_section_after_the_host_ended_the_registration_is_real(void **state)
{
	(void)state;
	for (int own = 0; own < 2; own++) {
		pthread_t th;
		struct ended_probe r = {.before = own};
		assert_int_equal(pthread_create(&th, NULL, ended_by_host, &r), 0);
		pthread_join(th, NULL);
		assert_false(r.before);
		assert_true(r.inside);
		assert_true(r.nested_inside);
		assert_true(r.outer_after_nested);
		assert_false(r.after);
		assert_false(r.api_after);
		assert_true(r.again_api);
		assert_true(r.again_after_section);
		kva_rcu_synchronize(); /* walks the registry: no dangling reader */
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    /* first: forks before this process created kvadmit's key */
	    cmocka_unit_test(test_failed_key_create_leaves_no_exited_thread_registered),
	    cmocka_unit_test(test_failed_setspecific_leaves_no_exited_thread_registered),
	    cmocka_unit_test(test_call_from_a_later_key_destructor_stays_transient),
	    cmocka_unit_test(test_thread_registered_by_kvadmit_then_unregistered_by_its_host),
	    cmocka_unit_test(test_thread_registers_on_first_use_and_unregisters_at_exit),
	    cmocka_unit_test(test_thread_registered_by_its_owner_is_left_alone),
	    cmocka_unit_test(test_section_after_the_host_ended_the_registration_is_real),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
