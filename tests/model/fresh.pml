/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fresh.pml: the slab's never-used slots (slab.c grow, slab.c fresh_extend,
 * slab.c take_fresh, slab.c refill_fresh, slab.c kva_slab_grow_ahead).
 * Chunks are published by a CAS on their
 * table entry (the claim is the publish: a failed allocation claims nothing);
 * the never-used slots are one range [next, end) in one word; any thread
 * moves end over the chunks published after it, in order; a refill takes
 * up to REFILL slots with a CAS on next. THREADS producers allocate ALLOCS
 * slots each (refill from the range, else grow, as kva_slab_alloc); an
 * owner calls grow_ahead(LOW) OWNER times. One chunk allocation may fail.
 * Chunks hold SLOTS slots each (their sizes do not matter to the protocol).
 *
 * Properties:
 *   - a slot is handed out at most once;
 *   - a slot handed out lies in a published chunk, and nchunks (the walks'
 *     end, kva_slab_end) covers it;
 *   - published chunks are a prefix of the table (fini frees up to the first
 *     empty entry);
 *   - an allocation fails only when every chunk number is published and every
 *     slot was handed out ("succeeds when memory allows"), or when the one
 *     allocation failure hit it;
 *   - at the end, end has passed every published chunk (none is lost).
 *
 * Memory model: the fresh word's CASes are acq_rel/acquire (R9/A9 of
 * slab.c), the chunk entry's CAS release and its loads acquire (R1/A1); the
 * argument is the SC interleaving modelled here, as in slab.pml.
 *
 * Mutants: EXTEND_UNCHECKED (end moves over a chunk without checking that
 * it is published: a slot of an unpublished chunk is handed out),
 * TAKE_NO_CAS (a refill stores the next it loaded plus m, no CAS: two
 * refills take the same slots), CLAIM_ON_FAILURE (a chunk number is claimed before its
 * allocation, as the eager slab did, and stays a hole when it fails: end
 * never passes it, and the chunks after it are never handed out),
 * NO_RETAKE (an alloc whose grow found no chunk number left returns NULL
 * without looking at the range again: the last chunk, published by a racer
 * after this alloc's refill found the range empty, still had slots).
 */

#ifndef THREADS
#define THREADS 2
#endif
#ifndef ALLOCS
#define ALLOCS 3
#endif
#ifndef OWNER
#define OWNER 1
#endif
#ifndef CHUNKS
#define CHUNKS 3
#endif
#define SLOTS 2
#define REFILL 2
#define LOW 2
#define NSLOTS (CHUNKS * SLOTS)

byte end, next;            /* the fresh word: [next, end) */
byte nchunks;              /* chunks end has passed (kva_slab_end) */
bit published[CHUNKS];     /* chunk[k] != NULL */
bit claimed[CHUNKS];       /* CLAIM_ON_FAILURE only */
bit taken[NSLOTS];
byte fail_left = 1;        /* one chunk allocation may fail */
byte done;

/* slab.c fresh_extend: one CAS per chunk passed, each only raising end. */
inline extend()
{
	do
	:: atomic { e = end; n = next };
		c = e / SLOTS;
		if
		:: c >= CHUNKS -> break
		:: else -> skip
		fi;
#ifndef MUTANT_EXTEND_UNCHECKED
		if
		:: !published[c] -> break /* A1 (slab.c fresh_extend) */
		:: else -> skip
		fi;
#endif
		atomic { if :: nchunks <= c -> nchunks = c + 1 :: else -> skip fi };
		atomic { if :: end == e && next == n -> end = e + SLOTS :: else -> skip fi } /* R9 (slab.c fresh_extend) */
	od
}

/* slab.c grow: publish the first chunk not yet published; 1 if a chunk was
 * added (by us or a racer), 0 on failure (rc). */
inline grow(rc)
{
	k = nchunks; /* a hint */
	do
#ifdef MUTANT_CLAIM_ON_FAILURE
	:: k < CHUNKS && (published[k] || claimed[k]) -> k++
#else
	:: k < CHUNKS && published[k] -> k++
#endif
	:: else -> break
	od;
	if
	:: k >= CHUNKS -> rc = 0; oom = 1
	:: else ->
#ifdef MUTANT_CLAIM_ON_FAILURE
		atomic { if :: !claimed[k] -> claimed[k] = 1; won = 1 :: else -> won = 0 fi };
#endif
		if
		:: atomic { fail_left > 0 -> fail_left-- }; rc = 0 /* no memory: nothing claimed */
		:: rc = 1;
#ifdef MUTANT_CLAIM_ON_FAILURE
			if :: won -> published[k] = 1 :: else -> skip fi;
#else
			atomic { if :: !published[k] -> published[k] = 1 :: else -> skip fi }; /* R1 (slab.c grow); the loser frees */
#endif
			extend()
		fi
	fi
}

/* slab.c take_fresh: got = slots taken into the cache (0: the range is empty
 * even after extending it). */
inline take(got)
{
	got = 0;
	do
	:: atomic { e = end; n = next };
		if
		:: e == n -> extend(); atomic { e = end; n = next }
		:: else -> skip
		fi;
		if
		:: e == n -> break
		:: else -> skip
		fi;
		m = (e - n > REFILL -> REFILL : e - n);
		atomic {
#ifdef MUTANT_TAKE_NO_CAS
			next = n + m; /* stores what it loaded above, plus m */
			got = m;
#else
			if
			:: end == e && next == n -> next = n + m; got = m
			:: else -> skip
			fi;
#endif
			/* ghost: the slots the CAS handed out, checked as it takes them */
			i = 0;
			do
			:: i < got ->
				assert(!taken[n + i]);
				assert(published[(n + i) / SLOTS]);
				assert(nchunks > (n + i) / SLOTS);
				taken[n + i] = 1;
				i++
			:: else -> break
			od
		};
		if
		:: got > 0 -> break
		:: else -> skip
		fi
	od
}

proctype producer()
{
	byte have, a, i, e, n, c, k, m, rc;
	bit oom, won;
	do
	:: a < ALLOCS ->
		d_step { i = 0; e = 0; n = 0; c = 0; k = 0; m = 0; rc = 0; oom = 0; won = 0 }; /* dead: fewer states */
		if
		:: have > 0 -> have--; a++ /* from the cache */
		:: else ->
			/* slab.c kva_slab_alloc -> slab.c refill_fresh */
			do
			:: take(have);
				if
				:: have > 0 -> break
				:: else -> skip
				fi;
				grow(rc);
				if
				:: !rc ->
#ifndef MUTANT_NO_RETAKE
					take(have); /* a racer's chunk may have come meanwhile */
#endif
					if
					:: have == 0 && oom ->
						/* no chunk number left: every slot was handed out */
						d_step {
							i = 0;
							do
							:: i < NSLOTS -> assert(taken[i]); i++
							:: else -> break
							od
						};
						a = ALLOCS /* the alloc returns NULL */
					:: have == 0 && !oom -> a = ALLOCS /* the one allocation failure */
					:: else -> skip
					fi;
					break
				:: else -> skip
				fi
			od
		fi
	:: else -> break
	od;
	atomic { done++ }
}

/* slab.c kva_slab_grow_ahead(LOW) */
proctype owner()
{
	byte r, e, n, c, k, rc;
	bit oom, won;
	do
	:: r < OWNER ->
		d_step { e = 0; n = 0; c = 0; k = 0; rc = 0; oom = 0; won = 0 };
		extend();
		do
		:: atomic { e = end; n = next };
			if
			:: e - n >= LOW -> break
			:: else ->
				oom = 0;
				grow(rc);
				if :: !rc -> break :: else -> skip fi
			fi
		od;
		r++
	:: else -> break
	od;
	atomic { done++ }
}

init
{
	byte i;
	atomic {
		do
		:: i < THREADS -> run producer(); i++
		:: else -> break
		od;
		if :: OWNER > 0 -> run owner() :: else -> done++ fi
	};
	done == THREADS + 1;
	/* quiescent: prefix, every published chunk passed */
	i = 0;
	do
	:: i + 1 < CHUNKS -> assert(!published[i + 1] || published[i]); i++
	:: else -> break
	od;
	i = 0;
	do
	:: i < CHUNKS -> assert(published[i] == (end > i * SLOTS)); i++
	:: else -> break
	od
}
