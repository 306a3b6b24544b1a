/* SPDX-License-Identifier: Apache-2.0 */
/* thread_start: threads that start with every signal blocked (thread_start.h). */
#include <kvadmit/lockfree/thread_start.h>

void kva_signals_block_all(sigset_t *old)
{
	sigset_t all;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, old);
}

void kva_signals_restore(const sigset_t *old) { pthread_sigmask(SIG_SETMASK, old, NULL); }

int kva_thread_start(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
	/* A new thread inherits its creator's mask: block all around the create. */
	sigset_t old;
	kva_signals_block_all(&old);
	int rc = pthread_create(t, attr, fn, arg);
	kva_signals_restore(&old);
	return rc;
}
