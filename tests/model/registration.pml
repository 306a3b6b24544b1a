/* SPDX-License-Identifier: Apache-2.0 */
/*
 * registration.pml: kvadmit's urcu-memb registration of the threads that
 * call it, and the fork handler's count of them (lockfree/rcu_thread.c).
 *
 * W worker threads and one forking thread. Each worker is registered
 * either by its host first (urcu_memb_register_thread: a "foreign"
 * registration) or by kvadmit on its first call (rcu_thread.c kva_rcu_enter,
 * rcu_thread.c enter_slow, rcu_thread.c register_counted); it makes kvadmit
 * calls, each one read-side section (rcu_thread.h kva_rcu_read_lock /
 * rcu_thread.h kva_rcu_read_unlock; transient sections:
 * rcu_thread.c kva__rcu_transient_read_lock,
 * rcu_thread.c kva__rcu_transient_read_unlock); its host may end the
 * registration between calls, kvadmit's or its own (at the thread's end,
 * as the public header allows; then a key destructor calls in), and a host
 * that registered the thread itself may register it again; kvadmit's exit
 * hook runs at the end (rcu_thread.c unregister_at_exit), and a later key
 * destructor may call in once more. With SETSPECIFIC_FAILS, a worker's
 * exit hook may fail to be set (it is transient from its first call).
 *
 * The forking thread is registered by kvadmit (its own registration is
 * subtracted) and forks once, at any point: the prepare handler
 * (rcu_thread.c kva_rcu_atfork_prepare) takes reg_lock, reads the count and
 * decides; the fork happens before the parent handler
 * (rcu_thread.c kva_rcu_atfork_parent) releases the lock. liburcu's
 * call_rcu_before_fork, between the decision and the fork, is a wait of any
 * length (1 ms polls) while the workers go on: every interleaving of the
 * workers between the two covers it.
 *
 * Properties:
 *   - fork: the child is accepted (kva_engine_create and kva_step allowed)
 *     only if, at the fork, no thread but the forking one stood registered
 *     with liburcu through kvadmit (for good or inside a transient section);
 *     registrations a host made are the host's to end before a fork;
 *   - sections: a read-side section runs only on a thread that liburcu has
 *     registered (otherwise a grace period does not wait for it);
 *   - at the end: every worker is unregistered, the count is the forking
 *     thread's alone, the lock is free; liburcu never sees a thread
 *     registered twice or unregistered when it is not registered.
 *
 * Memory model: the count and the registrations change only under reg_lock
 * (a pthread mutex: its lock and unlock order everything inside), and the
 * cached state, the depth and liburcu's "registered" flag are the thread's
 * own TLS, read and written by that thread only (the host's
 * urcu_memb_unregister_thread runs on the thread itself). So SC is exact
 * for these properties; the first one needs no ordering beyond the mutex.
 *
 * Mutants: MUTANT_READ_OUTSIDE_LOCK (the prepare handler reads the count
 * before it takes the lock, as it once read it before call_rcu_before_fork:
 * a thread registers in between and the child is accepted), MUTANT_COUNT_LAGS
 * (registrations under the lock but the count raised after it and lowered
 * before it, as the atomic count once lagged both sides),
 * MUTANT_STALE_FLAG (kva_rcu_enter trusts its cached state and never checks
 * liburcu's flag: a section after the host ended the registration protects
 * nothing).
 */

#ifndef W
#define W 2
#endif
#define F W /* the forking thread's slot */

#define NONE 0
#define OWNED 1
#define FOREIGN 2
#define TRANSIENT 3

/* Shared: liburcu's registry and kvadmit's count. A worker's TLS (kvadmit's
 * cached state tls_reg, kva__rcu_transient_depth, whether its exit hook is
 * set) is local to its proctype. */
bit urcu[W + 1];   /* liburcu's flag: URCU_TLS(urcu_memb_reader).registered */
bit by_kva[W + 1]; /* ghost: the registration standing now is kvadmit's */
byte count;        /* registered_now (rcu_thread.c) */
byte lk;           /* reg_lock (rcu_thread.c): 0 free, else the owner's _pid + 1 */
bit accepted, forked;

inline lock()
{
	atomic { lk == 0 -> lk = _pid + 1 }
}

inline unlock()
{
	assert(lk == _pid + 1);
	lk = 0
}

/* liburcu: urcu_memb_register_thread / urcu_memb_unregister_thread */
inline urcu_register(t, kva)
{
	assert(!urcu[t]); /* liburcu asserts, or links the thread twice */
	urcu[t] = 1;
	by_kva[t] = kva
}

inline urcu_unregister(t)
{
	assert(urcu[t]);
	urcu[t] = 0;
	by_kva[t] = 0
}

/* rcu_thread.c register_counted */
inline register_counted(t)
{
#ifdef MUTANT_COUNT_LAGS
	lock();
	d_step { urcu_register(t, 1) };
	unlock();
	count++
#else
	lock();
	d_step { urcu_register(t, 1); count++ };
	unlock()
#endif
}

/* rcu_thread.c unregister_counted: u = whether the registration stands */
inline unregister_counted(t, u)
{
#ifdef MUTANT_COUNT_LAGS
	count--;
	lock();
	d_step {
		if
		:: u -> urcu_unregister(t)
		:: else -> skip
		fi
	};
	unlock()
#else
	lock();
	d_step {
		if
		:: u -> urcu_unregister(t)
		:: else -> skip
		fi;
		count--
	};
	unlock()
#endif
}

/* rcu_thread.c kva_rcu_enter (the fast path) and rcu_thread.c enter_slow:
 * rc 0 = registered for good, 1 = transient. (Sections are not nested
 * here, so depth > 0 is not reached; test_rcu_thread covers nesting.) */
inline enter(t, rc)
{
	if
#ifdef MUTANT_STALE_FLAG
	:: tls == OWNED || tls == FOREIGN -> rc = 0
#else
	:: (tls == OWNED || tls == FOREIGN) && urcu[t] -> rc = 0
#endif
	:: else ->
		if
		:: depth > 0 -> rc = 1
		:: else ->
			if
			:: urcu[t] -> tls = FOREIGN; rc = 0
			:: else ->
				if
				:: tls == OWNED ->
					/* the host ended kvadmit's registration */
					unregister_counted(t, 0);
					tls = TRANSIENT; rc = 1
				:: tls == FOREIGN -> tls = TRANSIENT; rc = 1
				:: tls == TRANSIENT -> rc = 1
				:: tls == NONE ->
					if
					:: hooked = 1;
						register_counted(t);
						tls = OWNED; rc = 0
#ifdef SETSPECIFIC_FAILS
					:: tls = TRANSIENT; rc = 1
#endif
					fi
				fi
			fi
		fi
	fi
}

/* One kvadmit call: one read-side section (rcu_thread.h kva_rcu_read_lock,
 * rcu_thread.h kva_rcu_read_unlock). */
inline kva_call(t)
{
	enter(t, rc);
	if
	:: rc -> /* rcu_thread.c kva__rcu_transient_read_lock */
		if
		:: depth == 0 -> register_counted(t)
		:: else -> skip
		fi;
		depth++
	:: else -> skip
	fi;
	/* urcu_memb_read_lock: a grace period waits only for registered readers */
	assert(urcu[t]);
	if
	:: depth > 0 -> /* rcu_thread.c kva__rcu_transient_read_unlock */
		depth--;
		if
		:: depth == 0 -> unregister_counted(t, 1)
		:: else -> skip
		fi
	:: else -> skip
	fi
}

/* rcu_thread.c unregister_at_exit */
inline exit_hook(t)
{
	if
	:: hooked ->
		if
		:: tls == OWNED -> unregister_counted(t, urcu[t])
		:: else -> skip
		fi;
		if
		:: tls != FOREIGN -> tls = TRANSIENT
		:: else -> skip
		fi
	:: else -> skip
	fi
}

proctype worker(byte t)
{
	byte tls = NONE, depth;
	bit hooked, rc, host_first;
	if
	:: host_first = 1; d_step { urcu_register(t, 0) }
	:: host_first = 0
	fi;
	kva_call(t);
	/* the host may end the registration (its own, or kvadmit's at the
	 * thread's end) and call in again, e.g. from a key destructor */
	if
	:: urcu[t] -> d_step { urcu_unregister(t) }; kva_call(t)
	:: skip
	fi;
	/* a host that registered the thread itself may register it again */
	if
	:: host_first && !urcu[t] -> d_step { urcu_register(t, 0) }; kva_call(t)
	:: skip
	fi;
	/* the host ends its own registration before the thread ends */
	if
	:: urcu[t] && !by_kva[t] -> d_step { urcu_unregister(t) }
	:: else -> skip
	fi;
	exit_hook(t);
	/* a later key destructor calls in */
	if
	:: kva_call(t)
	:: skip
	fi;
	assert(depth == 0 && !urcu[t])
}

/* rcu_thread.c kva_rcu_atfork_prepare, rcu_thread.c mine_at_fork, the fork,
 * rcu_thread.c kva_rcu_atfork_parent */
proctype forker()
{
	byte others, i;
#ifdef MUTANT_READ_OUTSIDE_LOCK
	others = count - 1;
	lock();
#else
	lock();
	others = count - 1; /* mine: its own registration */
#endif
	d_step {
		forked = 1;
		accepted = others == 0;
		if
		:: accepted ->
			i = 0;
			do
			:: i < W -> assert(!(urcu[i] && by_kva[i])); i++
			:: else -> break
			od
		:: else -> skip
		fi
	};
	unlock()
}

init
{
	byte i;
	atomic {
		/* the forking thread registered by kvadmit on an earlier call */
		urcu[F] = 1; by_kva[F] = 1; count = 1;
		i = 0;
		do
		:: i < W -> run worker(i); i++
		:: else -> break
		od;
		run forker()
	}
	_nr_pr == 1;
	d_step {
		assert(forked && lk == 0 && count == 1);
		i = 0;
		do
		:: i < W -> assert(!urcu[i]); i++
		:: else -> break
		od
	}
}
