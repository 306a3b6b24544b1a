/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rcu_thread: urcu-memb registration of threads the library has never seen.
 *
 * Owns the thread-local "registered by kvadmit" flag and the pthread key
 * whose destructor unregisters a thread when it exits. A thread that was
 * already registered by someone else (the host, or liburcu's own call_rcu and
 * resize workers) is only marked as registered: registering it twice would
 * corrupt liburcu's registry, and unregistering it is its owner's job.
 */
/* Always: the registered check reads liburcu's per-thread reader state,
 * declared only by the static headers (this thread's own TLS, no race). */
#define _LGPL_SOURCE 1
#include "rcu_thread.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>

#ifdef KVA_TSAN
char kva__rcu_tsan_gp;
#endif

enum reg_state { REG_NONE, REG_OWNED, REG_FOREIGN };

static _Thread_local enum reg_state tls_reg;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static pthread_key_t exit_key;
static int key_err;

static void unregister_at_exit(void *arg)
{
	(void)arg;
	/* Another key's destructor may have re-entered kvadmit after we ran;
	 * kva_rcu_enter() then set the key again and we run once more. */
	if (tls_reg == REG_OWNED)
		urcu_memb_unregister_thread();
	tls_reg = REG_NONE;
}

static void make_key(void)
{
	key_err = pthread_key_create(&exit_key, unregister_at_exit);
}

int kva_rcu_enter(void)
{
	if (__builtin_expect(tls_reg != REG_NONE, 1))
		return 0;
	if (URCU_TLS(urcu_memb_reader).registered) {
		tls_reg = REG_FOREIGN;
		return 0;
	}
	urcu_memb_register_thread();
	tls_reg = REG_OWNED;
	/* key_err is written once inside pthread_once, which orders it for
	 * every caller that returns from pthread_once. */
	(void)pthread_once(&key_once, make_key);
	if (key_err)
		return -EAGAIN;
	/* Any non-NULL value: the destructor only runs for non-NULL values. */
	if (pthread_setspecific(exit_key, (void *)1))
		return -ENOMEM;
	return 0;
}

bool kva_rcu_registered(void)
{
	return tls_reg != REG_NONE;
}

static _Thread_local unsigned tls_index = ~0u;
static _Atomic unsigned next_index;

unsigned kva_thread_index(void)
{
	if (__builtin_expect(tls_index == ~0u, 0))
		tls_index = atomic_fetch_add_explicit(&next_index, 1, memory_order_relaxed);
	return tls_index;
}
