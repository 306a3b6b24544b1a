/* SPDX-License-Identifier: Apache-2.0 */
/*
 * RCU flavour and thread registration for everything in kvadmit.
 *
 * Flavour: urcu-memb (membarrier-based; readers cost two thread-local
 * increments, no signals). Hosts call kvadmit from threads the library has
 * never seen, so registration is the library's job: kva_rcu_enter() registers
 * the calling thread on its first use (thread-local flag) and a pthread key
 * destructor unregisters it when the thread exits (or, when that hook cannot
 * be set, registers it only around each read-side section: never is an
 * exited thread left registered). urcu-bp would do the same
 * implicitly but pays a registration check plus a heavier read lock on every
 * call; measured in bench/ (BM_reserve_release / BM_submit use this path).
 *
 * Thread contract: any thread. kva_rcu_enter() is idempotent and cheap after
 * the first call (two thread-local loads: kvadmit's state and liburcu's own
 * "registered" flag, which a host may clear behind kvadmit's back).
 */
#ifndef KVA_LOCKFREE_RCU_THREAD_H
#define KVA_LOCKFREE_RCU_THREAD_H

/* Inline read-side fast paths from urcu/static. Not under ThreadSanitizer:
 * their volatile accesses to the grace-period state look like races to it,
 * while the library's out-of-line copies of the same code are not
 * instrumented (see also tsan_hb.h). */
#if !defined(_LGPL_SOURCE) && !defined(KVA_TSAN)
#define _LGPL_SOURCE 1
#endif
#include <stdbool.h>
#include <urcu/urcu-memb.h>
#include <kvadmit/lockfree/tsan_hb.h>

/* Once per process (any thread; idempotent): creates the exit-hook key and
 * liburcu's default call_rcu thread with every signal blocked. 0, or -EAGAIN
 * when the key could not be created. kva_slab_init calls it. */
int kva_rcu_init(void);

/* Registers the calling thread with urcu-memb if it is not yet registered,
 * together with the exit hook that unregisters it. Returns 0, or -EAGAIN if
 * the pthread key could not be created, -ENOMEM if it could not be set for
 * this thread, -ESRCH if the thread's exit hook already ran (a later key
 * destructor calling in): the thread is then "transient", registered only
 * inside each outermost kva_rcu_read_lock section and kva_rcu_call (slower,
 * still correct), so no exited thread stays registered. A thread that liburcu
 * or the host already registered is left alone (and never unregistered by
 * kvadmit). A registration its host ended (urcu_memb_unregister_thread,
 * kvadmit's or its own) is noticed on the next call, which returns -ESRCH:
 * the thread is transient from then on, and left alone again once its host
 * registers it again. Serialized with the fork handlers' count (reg_lock). */
int kva_rcu_enter(void);

/* true when the calling thread is registered for good (kvadmit's or its
 * owner's registration, still standing in liburcu), false when unregistered
 * or transient. */
bool kva_rcu_registered(void);

/* Fork handlers for liburcu's call_rcu threads (urcu-memb's
 * call_rcu_before_fork / after_fork_parent / after_fork_child); the child's
 * new call_rcu thread starts with every signal blocked. prepare also takes
 * the lock every registration kvadmit makes or ends takes (reg_lock), and
 * parent / child release it: the count of other registered threads it reads
 * is exact at the fork. Lock order: reg_lock, then liburcu's (in
 * call_rcu_before_fork), then the slab registry lock. */
void kva_rcu_atfork_prepare(void);
void kva_rcu_atfork_parent(void);
void kva_rcu_atfork_child(void);
/* true in a child forked while another thread kvadmit had registered with
 * urcu-memb was registered: no grace period may run there (rcu_thread.c). */
bool kva_rcu_fork_unsafe(void);

/* Transient threads (see kva_rcu_enter). */
extern _Thread_local unsigned kva__rcu_transient_depth;
void kva__rcu_transient_read_lock(void);
void kva__rcu_transient_read_unlock(void);
/* Tests: the exit hook of the next n registrations fails as if
 * pthread_setspecific had returned ENOMEM. */
void kva__rcu_fail_exit_hook(int n);
/* Tests: liburcu's own "registered" flag of the calling thread. */
bool kva__rcu_urcu_registered(void);

/* A small number for the calling thread, assigned round-robin on its first
 * call (0, 1, 2, ...): an index for per-thread shards (inbox lanes, free-slot
 * stacks, counters), so the first threads of a process get distinct ones. */
unsigned kva_thread_index(void);

/* Read-side critical section helpers (register on first use). */
static inline void kva_rcu_read_lock(void)
{
	if (__builtin_expect(kva_rcu_enter() != 0, 0)) {
		kva__rcu_transient_read_lock();
		return;
	}
	urcu_memb_read_lock();
}

/*
 * Grace periods under ThreadSanitizer: liburcu's are invisible to it, so
 * kva__rcu_tsan_gp stands for "a grace period elapsed". Every read-side
 * unlock and every kva_rcu_call() releases it; kva_rcu_reclaim_begin() and
 * kva_rcu_synchronize() acquire it. This orders every finished read-side
 * section before a reclaim (a superset of what RCU promises), but an access
 * made after its unlock, or by a section that began after the unlink, is
 * still reported. No-ops in other builds.
 */
#ifdef KVA_TSAN
extern char kva__rcu_tsan_gp;
#endif

static inline void kva_rcu_read_unlock(void)
{
	KVA__TSAN_RELEASE(&kva__rcu_tsan_gp);
	if (__builtin_expect(kva__rcu_transient_depth != 0, 0)) {
		kva__rcu_transient_read_unlock();
		return;
	}
	urcu_memb_read_unlock();
}

/* Any registered thread, inside a read-side section or not.
 * urcu_memb_call_rcu() that TSan can follow: func runs after a grace period
 * and must start with kva_rcu_reclaim_begin(). */
static inline void kva_rcu_call(struct rcu_head *head, void (*func)(struct rcu_head *head))
{
	KVA__TSAN_RELEASE(&kva__rcu_tsan_gp);
	if (__builtin_expect(kva_rcu_enter() != 0, 0)) {
		kva__rcu_transient_read_lock(); /* call_rcu wants a registered caller */
		urcu_memb_call_rcu(head, func);
		kva__rcu_transient_read_unlock();
		return;
	}
	urcu_memb_call_rcu(head, func);
}

/* First statement of every call_rcu callback that frees or reuses memory
 * readers may have seen. */
static inline void kva_rcu_reclaim_begin(void)
{
	KVA__TSAN_ACQUIRE(&kva__rcu_tsan_gp);
}

/* Registered thread, not inside a read-side section: waits for a grace
 * period (urcu_memb_synchronize_rcu) in a way TSan can follow. */
static inline void kva_rcu_synchronize(void)
{
	KVA__TSAN_RELEASE(&kva__rcu_tsan_gp);
	urcu_memb_synchronize_rcu();
	KVA__TSAN_ACQUIRE(&kva__rcu_tsan_gp);
}

#endif
