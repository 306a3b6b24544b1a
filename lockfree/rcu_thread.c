/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rcu_thread: urcu-memb registration of threads the library has never seen.
 *
 * Owns the thread-local "registered by kvadmit" flag and the pthread key
 * whose destructor unregisters a thread when it exits. A thread that was
 * already registered by someone else (the host, or liburcu's own call_rcu and
 * resize workers) is only marked as registered: registering it twice would
 * corrupt liburcu's registry, and unregistering it is its owner's job.
 *
 * A thread is registered for good only once its exit hook is in place (the
 * key exists and is set for it): otherwise, and after the exit hook ran (a
 * later key destructor calling kvadmit), the thread is "transient": it
 * registers for each outermost read-side section and call_rcu and
 * unregisters right after, so no exited thread is ever left in liburcu's
 * registry. Also owns the start of liburcu's default call_rcu thread with
 * every signal blocked, and the call_rcu fork handlers.
 */
/* Always: the registered check reads liburcu's per-thread reader state,
 * declared only by the static headers (this thread's own TLS, no race). */
#define _LGPL_SOURCE 1
#include "rcu_thread.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>

#ifdef KVA_TSAN
char kva__rcu_tsan_gp;
#endif

enum reg_state { REG_NONE, REG_OWNED, REG_FOREIGN, REG_TRANSIENT };

static _Thread_local enum reg_state tls_reg;
static _Thread_local int tls_err; /* why the thread is transient */
_Thread_local unsigned kva__rcu_transient_depth;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static pthread_key_t exit_key;
static int key_err;

/* Threads kvadmit registered with urcu-memb that are registered now (for
 * good or inside a transient section). Relaxed: read only by the forking
 * thread in the prepare handler, where it is an estimate of the others'
 * state anyway (see kva_rcu_atfork_prepare). */
static _Atomic long registered_now;
/* Set in a child forked while another thread kvadmit registered was alive
 * (written before any other thread of the child exists). */
static bool fork_unsafe;
static long others_at_fork;

/* Test hook (rcu_thread.h): fail the next registrations' exit hook. */
static _Atomic int fail_hook_next;

void kva__rcu_fail_exit_hook(int n)
{
	atomic_store_explicit(&fail_hook_next, n, memory_order_relaxed);
}

static void unregister_at_exit(void *arg)
{
	(void)arg;
	/* Only a registration kvadmit made, and only if it still stands: a
	 * host that unregistered the thread itself must not see it unregistered
	 * twice (liburcu asserts, or corrupts its registry). */
	if (tls_reg == REG_OWNED) {
		/* counted until now, also if the thread unregistered itself */
		atomic_fetch_sub_explicit(&registered_now, 1, memory_order_relaxed);
		if (URCU_TLS(urcu_memb_reader).registered)
			urcu_memb_unregister_thread();
	}
	/* A later key destructor may still call kvadmit: from now on it only
	 * registers around each section (this hook will not run again). */
	tls_reg = REG_TRANSIENT;
	tls_err = -ESRCH;
}

/* liburcu's default call_rcu thread inherits the signal mask of the thread
 * that creates it (0.13 does not block signals itself): create it here with
 * every signal blocked, so a host's handler never runs on it. */
static void start_reclaimer(void)
{
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	(void)urcu_memb_get_default_call_rcu_data();
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static void make_key(void)
{
	key_err = pthread_key_create(&exit_key, unregister_at_exit);
	start_reclaimer();
}

int kva_rcu_init(void)
{
	/* key_err is written once inside pthread_once, which orders it for
	 * every caller that returns from pthread_once. */
	(void)pthread_once(&key_once, make_key);
	return key_err ? -EAGAIN : 0;
}

int kva_rcu_enter(void)
{
	if (__builtin_expect(tls_reg == REG_OWNED || tls_reg == REG_FOREIGN, 1))
		return 0;
	if (tls_reg == REG_TRANSIENT)
		return tls_err;
	if (URCU_TLS(urcu_memb_reader).registered) {
		tls_reg = REG_FOREIGN;
		return 0;
	}
	int rc = kva_rcu_init();
	if (!rc && atomic_load_explicit(&fail_hook_next, memory_order_relaxed) > 0 &&
	    atomic_fetch_sub_explicit(&fail_hook_next, 1, memory_order_relaxed) > 0)
		rc = -ENOMEM;
	/* Any non-NULL value: the destructor only runs for non-NULL values. */
	if (!rc && pthread_setspecific(exit_key, (void *)1))
		rc = -ENOMEM;
	if (rc) {
		tls_reg = REG_TRANSIENT;
		tls_err = rc;
		return rc;
	}
	urcu_memb_register_thread();
	atomic_fetch_add_explicit(&registered_now, 1, memory_order_relaxed);
	tls_reg = REG_OWNED;
	return 0;
}

bool kva_rcu_registered(void)
{
	return tls_reg == REG_OWNED || tls_reg == REG_FOREIGN;
}

bool kva__rcu_urcu_registered(void)
{
	return URCU_TLS(urcu_memb_reader).registered != 0;
}

void kva__rcu_transient_read_lock(void)
{
	if (kva__rcu_transient_depth++ == 0) {
		urcu_memb_register_thread();
		atomic_fetch_add_explicit(&registered_now, 1, memory_order_relaxed);
	}
	urcu_memb_read_lock();
}

void kva__rcu_transient_read_unlock(void)
{
	urcu_memb_read_unlock();
	if (--kva__rcu_transient_depth == 0) {
		urcu_memb_unregister_thread();
		atomic_fetch_sub_explicit(&registered_now, 1, memory_order_relaxed);
	}
}

/*
 * liburcu's registry of urcu-memb readers lives in each reader's TLS. Only
 * the forking thread exists in a child: the nodes of every other registered
 * thread stay linked there, and glibc hands their stacks (TLS included) to
 * the child's new threads, which overwrites those nodes — the child's next
 * grace period then never ends or crashes (liburcu: every registration but
 * the forking thread's must be released before a fork without exec). So a
 * child forked while another thread kvadmit registered was alive is marked
 * unsafe: kva_engine_create and kva_step refuse (-ENOTSUP), and only
 * kva_engine_destroy, which never waits for a grace period, is left.
 */
void kva_rcu_atfork_prepare(void)
{
	long mine = (tls_reg == REG_OWNED || kva__rcu_transient_depth) ? 1 : 0;
	others_at_fork = atomic_load_explicit(&registered_now, memory_order_relaxed) - mine;
	urcu_memb_call_rcu_before_fork();
}

bool kva_rcu_fork_unsafe(void)
{
	return fork_unsafe;
}

void kva_rcu_atfork_parent(void)
{
	urcu_memb_call_rcu_after_fork_parent();
}

void kva_rcu_atfork_child(void)
{
	/* It starts a new default call_rcu thread in the child: signals
	 * blocked, as start_reclaimer. */
	if (others_at_fork > 0) {
		fork_unsafe = true;
		/* only the forking thread is left: the count is its own */
		atomic_store_explicit(&registered_now,
		                      (tls_reg == REG_OWNED || kva__rcu_transient_depth) ? 1 : 0,
		                      memory_order_relaxed);
	}
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	urcu_memb_call_rcu_after_fork_child();
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static _Thread_local unsigned tls_index = ~0u;
static _Atomic unsigned next_index;

unsigned kva_thread_index(void)
{
	if (__builtin_expect(tls_index == ~0u, 0))
		tls_index = atomic_fetch_add_explicit(&next_index, 1, memory_order_relaxed);
	return tls_index;
}
