/* SPDX-License-Identifier: Apache-2.0 */
/*
 * caches.pml: a slab's per-thread slot caches (lockfree/slab_cache.c):
 * THREADS threads attach to a slab (slab_cache.c attach: adopt a FREE cache
 * of the slab's list by CAS FREE -> OWNED, or add a new one), take and put
 * back slots in it, and leave it (slab_cache.c detach: CAS OWNED -> FREE,
 * or free it when the CAS finds ORPHAN), ROUNDS times, then once more at
 * their exit; the slab's owner finishes it (slab.c kva_slab_fini, through
 * slab_cache.c kva__slab_caches_orphan: exchange every cache's word to
 * ORPHAN, free it if it was FREE) once no thread uses the slab any more
 * (the contract), while threads may still be leaving.
 * Meanwhile the call_rcu thread holds the registry lock for a reclaimed
 * batch (slab.c reclaim_ticket) until every thread is done.
 *
 * Properties: a cache is used by one thread at a time; nothing touches a
 * freed cache; each cache is freed exactly once (at the end none is left,
 * none was freed twice); a cache's slots are never lost: a thread that
 * adopts a cache sees the slots its last holder left; no thread waits for
 * the registry lock (a thread that did would never finish while the
 * reclaimer waits for it: an invalid end state).
 *
 * Memory model: each owner word is one atomic location written by CAS or
 * exchange (total modification order). R3/A3 (detach -> adopter) carry the
 * slot count, which SC gives the adopter; R10/A10 (fini's exchange -> the
 * holder's failed CAS) order fini's last access before the holder's free.
 *
 * Mutants: MUTANT_FINI_FREES_OWNED (fini frees every cache, as it did when
 * detach checked the slab under the registry lock: the holder's detach
 * touches freed memory), MUTANT_DETACH_STORE (detach stores FREE without a
 * CAS: a cache orphaned meanwhile is never freed, or freed twice),
 * MUTANT_THRASH_LOCK (detach takes the registry lock again, as the old
 * 4-entry table did on nearly every call to a third engine: it waits for
 * the reclaimer).
 */

#ifndef THREADS
#define THREADS 2
#endif
#ifndef ROUNDS
#define ROUNDS 1
#endif
#define NC (THREADS + 1) /* caches: at most one per thread attached at once, + 1 slack */
#define FREE 0
#define OWNED 1
#define ORPHAN 2

byte owned[NC];
bit listed[NC];   /* in the slab's list (never unlinked while the slab lives) */
bit freed[NC];
byte holder[NC];  /* the thread using it + 1, 0 = none */
byte slots[NC];   /* slots the cache holds */
byte nlisted;
bool lock;        /* the registry lock */
byte using;       /* threads that may still attach or allocate */
byte done;        /* threads that returned */
bool finished;    /* fini ran */

inline touch(c)
{
	assert(!freed[c])
}

proctype thread(byte me)
{
	byte k, c, i, o;
	bool got, orphan;
	do
	:: k < ROUNDS ->
		k++;
		/* slab_cache.c attach: adopt a FREE cache of the list, A3 */
		got = 0;
		i = 0;
		do
		:: i < nlisted && !got ->
			atomic {
				if
				:: owned[i] == FREE -> owned[i] = OWNED; got = 1; c = i
				:: else -> skip
				fi
			};
			i++
		:: else -> break
		od;
		if
		:: !got ->
			atomic { /* a new cache, linked with a CAS (R5) */
				c = nlisted;
				nlisted++;
				listed[c] = 1;
				owned[c] = OWNED
			}
		:: else -> skip
		fi;
		touch(c);
		assert(holder[c] == 0);
		holder[c] = me + 1;
		/* kva_slab_alloc / kva_slab_unalloc: a slot out and back, and one
		 * more left in the cache */
		o = slots[c];
		slots[c] = o + 1;
		holder[c] = 0;
		if
		:: k == ROUNDS -> atomic { using-- } /* from here on it only leaves */
		:: else -> skip
		fi;
		/* slab_cache.c detach (an eviction, or the exit hook at the end), R3 */
#ifdef MUTANT_THRASH_LOCK
		atomic { !lock -> lock = 1 };
		lock = 0;
#endif
#ifdef MUTANT_DETACH_STORE
		touch(c);
		owned[c] = FREE;
#else
		atomic {
			touch(c);
			if
			:: owned[c] == OWNED -> owned[c] = FREE; orphan = 0
			:: else -> assert(owned[c] == ORPHAN); orphan = 1
			fi
		};
		if
		:: orphan -> /* its slab is gone, A10 */
			touch(c);
			freed[c] = 1
		:: else -> skip
		fi;
#endif
	:: else -> break
	od;
	atomic { done++ }
}

/* slab_cache.c kva__slab_caches_orphan (kva_slab_fini), once no thread uses the slab */
proctype owner()
{
	byte i, o;
	using == 0;
	i = 0;
	do
	:: i < nlisted ->
		atomic {
			touch(i);
			o = owned[i];
			owned[i] = ORPHAN /* R10 */
		};
#ifdef MUTANT_FINI_FREES_OWNED
		freed[i] = 1;
#else
		if
		:: o == FREE -> touch(i); freed[i] = 1
		:: else -> skip
		fi;
#endif
		i++
	:: else -> break
	od;
	finished = 1
}

/* slab.c reclaim_ticket: holds the registry lock until the threads are done */
proctype reclaimer()
{
	atomic { !lock -> lock = 1 };
	done == THREADS;
	lock = 0
}

init {
	byte t, c;
	atomic {
		using = THREADS;
		t = 0;
		do
		:: t < THREADS -> run thread(t); t++
		:: else -> break
		od;
		run owner();
		run reclaimer()
	}
	(done == THREADS && finished);
	/* every cache freed exactly once (a second free would have hit touch),
	 * and the slots each left in its cache are all there */
	c = 0;
	t = 0;
	do
	:: c < nlisted -> assert(freed[c]); t = t + slots[c]; c++
	:: else -> break
	od;
	assert(t == THREADS * ROUNDS)
}
