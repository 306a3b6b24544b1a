/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pagepool.pml: the free page list (lockfree/pagepool.{h,c}). One word
 * top = avail << 3 | (head id + 1) (C: avail << 32 | head + 1) holds the
 * chain's head and the ids no take has claimed; the chain moves whole off
 * and onto `top`, links are plain memory owned by whoever holds the chain.
 * NPAGES ids; TAKERS threads each take 1 or 2 ids (take_n, all or nothing),
 * then put them back (put_n), ROUNDS times. A take cuts at most ROUND ids
 * per hold (C: KVA_PAGEPOOL_ROUND = 64; here 1, so multi-round takes occur).
 *
 * Properties:
 *   - an id is owned by at most one thread (assert at every take);
 *   - avail never exceeds NPAGES;
 *   - a take that claimed always gets its ids: its wait for ids in transit
 *     is a blocking guard here, so a take that could wait forever shows as
 *     an invalid end state (deadlock);
 *   - nothing lost: at the end all ids are on one chain on `top`, avail ==
 *     NPAGES.
 *
 * Memory model: top is one atomic location written only by CAS, totally
 * ordered. The links are plain memory; R1 (install's release CAS) with
 * A1/A2/A3 (the acquire CASes that take a chain off top) hand them from one
 * holder to the next, so a holder reads the links the previous holder
 * wrote, as in SC. No CAS depends on anything read through an earlier value
 * of top (the file comment's no-ABA argument), so no reordering of the
 * relaxed first loads matters: they are only compared.
 *
 * Mutants: MUTANT_COUNT_REST_TWICE (a take gives the rest of the chain back
 * counting it in avail again: ids claimed twice, a take waits forever),
 * MUTANT_INSTALL_OVERWRITES (install puts its chain on top without taking
 * over a chain already there: that chain is lost).
 */

#ifndef NPAGES
#define NPAGES 3
#endif
#ifndef TAKERS
#define TAKERS 2
#endif
#ifndef ROUNDS
#define ROUNDS 1
#endif
#define ROUND 1
#ifdef MUTANT_COUNT_REST_TWICE
#define MUTANT_REST_COUNT (n - got)
#else
#define MUTANT_REST_COUNT 0
#endif
#ifdef MUTANT_INSTALL_OVERWRITES
#define MUTANT_OVERWRITE 1
#else
#define MUTANT_OVERWRITE 0
#endif
#define AVAIL(w) ((w) / 8)
#define HEAD(w) ((w) % 8)
#define WORD(a, h) ((a) * 8 + (h))

int top;
byte next[NPAGES + 1];   /* link[id].next, ids as id + 1 here */
byte lastl[NPAGES + 1];  /* link[id].last */
byte owner[NPAGES + 1];
byte finished;

/* pagepool.c install(first, last, count): R1 CAS onto an empty top; A2 takes
 * over a chain found there */
inline install(first, last0, count)
{
	lst = last0;
	next[lst] = 0;
	w = top;
	do
	:: HEAD(w) == 0 || MUTANT_OVERWRITE ->
		lastl[first] = lst;
		atomic {
			if
			:: top == w -> top = WORD(AVAIL(w) + count, first); assert(AVAIL(top) <= NPAGES); ok = 1
			:: else -> w = top; ok = 0
			fi
		};
		if
		:: ok -> break
		:: else -> skip
		fi
	:: else ->
		atomic { /* A2: take the other chain over */
			if
			:: top == w -> top = WORD(AVAIL(w), 0); ok = 1
			:: else -> w = top; ok = 0
			fi
		};
		if
		:: ok ->
			next[lst] = HEAD(w);
			lst = lastl[HEAD(w)];
			w = WORD(AVAIL(w), 0)
		:: else -> skip
		fi
	od
}

proctype taker(byte me)
{
	byte n, got, head, x, lst, k, rnd, i;
	byte ids[2];
	int w;
	bit ok;
	do
	:: rnd < ROUNDS ->
		rnd++;
		if
		:: n = 1
		:: n = 2
		fi;
		/* pagepool.c kva_pagepool_take_n, A1: claim n, take the chain if one is on top */
		w = top;
		do
		:: AVAIL(w) < n -> ok = 0; break
		:: else ->
			atomic {
				if
				:: top == w -> top = WORD(AVAIL(w) - n, 0); ok = 1
				:: else -> w = top; ok = 0
				fi
			};
			if
			:: ok -> break
			:: else -> skip
			fi
		od;
		if
		:: ok ->
			head = HEAD(w);
			got = 0;
			do
			:: head != 0 ->
				lst = lastl[head];
				x = head;
				k = 0;
				do
				:: k < ROUND && x != 0 && got < n ->
					d_step { assert(owner[x] == 0); owner[x] = me + 1 };
					ids[got] = x;
					got++;
					k++;
					x = next[x]
				:: else -> break
				od;
				if
				:: x != 0 -> install(x, lst, MUTANT_REST_COUNT) /* the rest, back at once */
				:: else -> skip
				fi;
				if
				:: got == n -> break
				:: else -> head = 0
				fi
			:: head == 0 ->
				/* pagepool.c kva_pagepool_take_n, A3: ids are on top or in
				 * transit: wait (pagepool.c wait_for_transit) */
				HEAD(top) != 0;
				w = top;
				atomic {
					if
					:: top == w && HEAD(w) != 0 -> top = WORD(AVAIL(w), 0); head = HEAD(w)
					:: else -> head = 0
					fi
				}
			od;
			/* used, then put back: pagepool.c kva_pagepool_put_n keeps the order */
			i = 0;
			do
			:: i < n -> owner[ids[i]] = 0; i++
			:: else -> break
			od;
			if
			:: n == 2 -> next[ids[0]] = ids[1]
			:: else -> skip
			fi;
			install(ids[0], ids[n - 1], n)
		:: else -> skip
		fi
	:: else -> break
	od;
	finished++
}

active proctype monitor()
{
	byte t, c;
	finished == TAKERS;
	assert(AVAIL(top) == NPAGES);
	t = HEAD(top);
	do
	:: t != 0 && c <= NPAGES -> assert(owner[t] == 0); c++; t = next[t]
	:: else -> break
	od;
	assert(c == NPAGES)
}

init
{
	byte i;
	atomic {
		i = 1;
		do
		:: i <= NPAGES ->
			next[i] = (i < NPAGES -> i + 1 : 0);
			lastl[i] = NPAGES;
			i++
		:: else -> break
		od;
		top = WORD(NPAGES, 1);
		i = 0;
		do
		:: i < TAKERS -> run taker(i); i++
		:: else -> break
		od
	}
}
