/*
 * RCU flavour and thread registration for everything in kvadmit.
 *
 * Flavour: urcu-memb (membarrier-based; readers cost two thread-local
 * increments, no signals). Hosts call kvadmit from threads the library has
 * never seen, so registration is the library's job: kva_rcu_enter() registers
 * the calling thread on its first use (thread-local flag) and a pthread key
 * destructor unregisters it when the thread exits. urcu-bp would do the same
 * implicitly but pays a registration check plus a heavier read lock on every
 * call; measured in bench/ (BM_reserve_release / BM_submit use this path).
 *
 * Thread contract: any thread. kva_rcu_enter() is idempotent and cheap after
 * the first call (one thread-local load).
 */
#ifndef KVA_LOCKFREE_RCU_THREAD_H
#define KVA_LOCKFREE_RCU_THREAD_H

#ifndef _LGPL_SOURCE
#define _LGPL_SOURCE 1 /* inline read-side fast paths from urcu/static */
#endif
#include <stdbool.h>
#include <urcu/urcu-memb.h>

/* Registers the calling thread with urcu-memb if it is not yet registered.
 * Returns 0, or -EAGAIN if the pthread key could not be created (the thread
 * is still registered; it is then unregistered only at process exit). */
int kva_rcu_enter(void);

/* true when the calling thread is registered through kva_rcu_enter(). */
bool kva_rcu_registered(void);

/* Read-side critical section helpers (register on first use). */
static inline void kva_rcu_read_lock(void)
{
	(void)kva_rcu_enter();
	urcu_memb_read_lock();
}

static inline void kva_rcu_read_unlock(void) { urcu_memb_read_unlock(); }

#endif
