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
 *
 * A host may end any registration (its own, or one kvadmit made) with
 * urcu_memb_unregister_thread: the fast path checks liburcu's own flag as
 * well as the cached state, so a section never runs on an unregistered
 * thread (it would protect nothing); the thread then becomes transient, and
 * foreign again if the host registers it once more.
 *
 * Fork: reg_lock serializes every registration and unregistration kvadmit
 * makes with the count of them (registered_now), and the prepare handler
 * holds it across the fork, so the count it reads is exact (see
 * kva_rcu_atfork_prepare). Lock order: reg_lock, then liburcu's
 * call_rcu_mutex (urcu_memb_call_rcu_before_fork), then the slab registry
 * lock (fork.c); under reg_lock no thread but the forking one takes any
 * other lock than liburcu's registry lock.
 */
/* Always: the registered check reads liburcu's per-thread reader state,
 * declared only by the static headers (this thread's own TLS, no race). */
#define _LGPL_SOURCE 1
#include <kvadmit/lockfree/rcu_thread.h>

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
 * good or inside a transient section), changed together with the
 * registration under reg_lock; a registration the host ended is counted
 * until kvadmit notices (the thread's next call, or its exit). */
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static long registered_now;
/* Set in a child forked while another thread was registered through
 * kvadmit (written before any other thread of the child exists). */
static bool fork_unsafe;
static long others_at_fork;

/* Test hook (rcu_thread.h): fail the next registrations' exit hook. */
static _Atomic int fail_hook_next;

void kva__rcu_fail_exit_hook(int n)
{
	atomic_store_explicit(&fail_hook_next, n, memory_order_relaxed);
}

/* The callers' own registrations, always with their count. Nothing else is
 * done under reg_lock (not kva_rcu_init, which takes liburcu's
 * call_rcu_mutex): the prepare handler holds it while it waits for the
 * call_rcu threads, and they must never wait for it. */
static void register_counted(void)
{
	pthread_mutex_lock(&reg_lock);
	urcu_memb_register_thread();
	registered_now++;
	pthread_mutex_unlock(&reg_lock);
}

/* urcu: whether the registration still stands (a host may have ended it). */
static void unregister_counted(bool urcu)
{
	pthread_mutex_lock(&reg_lock);
	if (urcu)
		urcu_memb_unregister_thread();
	registered_now--;
	pthread_mutex_unlock(&reg_lock);
}

static void unregister_at_exit(void *arg)
{
	(void)arg;
	/* Only a registration kvadmit made, and only if it still stands: a
	 * host that unregistered the thread itself must not see it unregistered
	 * twice (liburcu asserts, or corrupts its registry). */
	if (tls_reg == REG_OWNED)
		unregister_counted(URCU_TLS(urcu_memb_reader).registered);
	/* A later key destructor may still call kvadmit: from now on it only
	 * registers around each section (this hook will not run again), unless
	 * its host registered it again (foreign: its owner unregisters it). */
	if (tls_reg != REG_FOREIGN) {
		tls_reg = REG_TRANSIENT;
		tls_err = -ESRCH;
	}
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

static int enter_slow(void)
{
	/* Inside a transient section (registered by it): nested ones join it. */
	if (kva__rcu_transient_depth)
		return tls_err;
	if (URCU_TLS(urcu_memb_reader).registered) {
		/* Its owner's registration: seen first, or made again after the
		 * host ended one (then never kvadmit's to end). */
		tls_reg = REG_FOREIGN;
		return 0;
	}
	switch (tls_reg) {
	case REG_OWNED:
		/* The host ended kvadmit's registration (kvadmit.h allows it at
		 * the thread's end). The exit hook finds it transient. */
		unregister_counted(false);
		/* fallthrough */
	case REG_FOREIGN:
		/* A registration ended by its host: never trust the cached state
		 * again; register around each section, as after the exit hook. */
		tls_reg = REG_TRANSIENT;
		tls_err = -ESRCH;
		return tls_err;
	case REG_TRANSIENT:
		return tls_err;
	case REG_NONE:
		break;
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
	register_counted();
	tls_reg = REG_OWNED;
	return 0;
}

int kva_rcu_enter(void)
{
	/* One TLS load more than the cached state: liburcu's own flag, which a
	 * host's urcu_memb_unregister_thread clears behind kvadmit's back. */
	bool good = tls_reg == REG_OWNED || tls_reg == REG_FOREIGN;
	if (__builtin_expect(good && URCU_TLS(urcu_memb_reader).registered, 1))
		return 0;
	return enter_slow();
}

bool kva_rcu_registered(void)
{
	return (tls_reg == REG_OWNED || tls_reg == REG_FOREIGN) &&
	       URCU_TLS(urcu_memb_reader).registered;
}

bool kva__rcu_urcu_registered(void)
{
	return URCU_TLS(urcu_memb_reader).registered != 0;
}

void kva__rcu_transient_read_lock(void)
{
	if (kva__rcu_transient_depth++ == 0)
		register_counted();
	urcu_memb_read_lock();
}

void kva__rcu_transient_read_unlock(void)
{
	urcu_memb_read_unlock();
	if (--kva__rcu_transient_depth == 0)
		unregister_counted(true);
}

/*
 * liburcu's registry of urcu-memb readers lives in each reader's TLS. Only
 * the forking thread exists in a child: the nodes of every other registered
 * thread stay linked there, and glibc hands their stacks (TLS included) to
 * the child's new threads, which overwrites those nodes — the child's next
 * grace period then never ends or crashes (liburcu: every registration but
 * the forking thread's must be released before a fork without exec). So a
 * child forked while another thread was registered through kvadmit is marked
 * unsafe: kva_engine_create and kva_step refuse (-ENOTSUP), and only
 * kva_engine_destroy, which never waits for a grace period, is left.
 *
 * The count is exact only if no registration of kvadmit's starts or ends
 * between the prepare handler's read and the fork: reg_lock, taken here and
 * released by the parent and child handlers, holds them all off (a thread
 * registering meanwhile waits, and registers after the fork in the parent
 * only). Once the count is read, liburcu's call_rcu threads are paused
 * (polling in 1 ms sleeps): they register through liburcu, never through
 * kvadmit, and the batch they finish first needs no lock of kvadmit's held
 * here (its grace period waits only for read-side sections, which end
 * before a transient thread takes reg_lock to unregister; the slab registry
 * lock is taken after this handler, fork.c).
 */
static long mine_at_fork(void)
{
	/* counted: kvadmit's registration, also one its host ended unseen */
	return tls_reg == REG_OWNED || kva__rcu_transient_depth ? 1 : 0;
}

void kva_rcu_atfork_prepare(void)
{
	pthread_mutex_lock(&reg_lock);
	others_at_fork = registered_now - mine_at_fork();
	urcu_memb_call_rcu_before_fork();
}

bool kva_rcu_fork_unsafe(void)
{
	return fork_unsafe;
}

void kva_rcu_atfork_parent(void)
{
	urcu_memb_call_rcu_after_fork_parent();
	pthread_mutex_unlock(&reg_lock);
}

void kva_rcu_atfork_child(void)
{
	if (others_at_fork > 0)
		fork_unsafe = true;
	/* Only the forking thread is left: the count is its own. */
	registered_now = mine_at_fork();
	/* It starts a new default call_rcu thread in the child: signals
	 * blocked, as start_reclaimer. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	urcu_memb_call_rcu_after_fork_child();
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	/* The forking thread took it in prepare: it is the owner here too. */
	pthread_mutex_unlock(&reg_lock);
}

static _Thread_local unsigned tls_index = ~0u;
static _Atomic unsigned next_index;

unsigned kva_thread_index(void)
{
	if (__builtin_expect(tls_index == ~0u, 0))
		tls_index = atomic_fetch_add_explicit(&next_index, 1, memory_order_relaxed);
	return tls_index;
}
