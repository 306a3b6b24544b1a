/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pagepool.pml: the page pool (lockfree/pagepool.{h,c}). Ids are bits of
 * map[] (BITS ids a word here; C: 64), summary has one bit per map word
 * (one summary word here; C: one per 64 map words), avail counts the ids no
 * take has claimed. TAKERS threads each claim 1 .. MAXTAKE ids from avail
 * (pagepool.c kva_pagepool_take_n), collect them by fetch_and from the map
 * (pagepool.c take_word), starting at any word (the hint is only a hint, so
 * every start is explored), then put them back (pagepool.c
 * kva_pagepool_put_n: one fetch_or per id here, a finer grain than C's one
 * per word, so every C interleaving is one of these), ROUNDS times.
 *
 * Properties:
 *   - an id is owned by at most one thread, and a take gets no more ids
 *     than it claimed (asserts at every take);
 *   - avail never exceeds NPAGES;
 *   - nothing lost, and the summary does not lag for good: at the end every
 *     id is in the map, avail == NPAGES and every summary bit is set;
 *   - lock-free: no thread ever waits for another. A take has no blocking
 *     statement; with -l (non-progress cycles, pan built with -DNP) every
 *     infinite run passes a completed call (label `progress`) infinitely
 *     often, so a take cannot spin on ids that only a stopped thread could
 *     give it (what the previous chain pool did, pagepool.h).
 *
 * Memory model: each map word, the summary word and avail are atomic
 * locations changed only by read-modify-writes, totally ordered. The
 * orderings that matter are R1/A1 (a put's fetch_or -> the take's
 * fetch_and), R2/A2 (summary set -> the clear that erases it: the clear's
 * recheck sees the put's map write) and R3/A3 (the bits are set before the
 * count): each is a program order this model keeps (sequential
 * consistency), and pagepool.c's labels give the C11 pairs that keep it.
 *
 * Mutants: MUTANT_NO_RECHECK (summary_clear does not look at the word
 * again: a put that refilled it just before stays unnamed for good),
 * MUTANT_TRUST_ALWAYS (every pass trusts the summary: a take spins while a
 * clearer is stopped between its clear and its recheck), MUTANT_COUNT_FIRST
 * (a put counts its ids before setting their bits: a take that claimed them
 * spins until the put runs again), MUTANT_TAKE_WHOLE_WORD (a fetch_and
 * takes every id of the word, not only those still owed).
 */

#ifndef NPAGES
#define NPAGES 4
#endif
#ifndef TAKERS
#define TAKERS 2
#endif
#ifndef ROUNDS
#define ROUNDS 1
#endif
#ifndef MAXTAKE
#define MAXTAKE 3 /* ids a take claims: 1 .. MAXTAKE */
#endif
#define BITS 2 /* ids per map word (C: 64) */
#define WORDS ((NPAGES + BITS - 1) / BITS)
#ifdef MUTANT_TAKE_WHOLE_WORD
#define MUTANT_WHOLE 1
#else
#define MUTANT_WHOLE 0
#endif

byte map[WORDS];
byte summary; /* bit w: map[w] may hold ids */
byte avail = NPAGES;
byte owner[NPAGES];
byte finished;

/* pagepool.c summary_set, R2 */
inline summary_set(sw)
{
	atomic { summary = summary | (1 << sw) }
}

/* pagepool.c summary_clear, A2: clear, then look at the word again */
inline summary_clear(sw)
{
	atomic { summary = summary & ~(1 << sw) };
#ifndef MUTANT_NO_RECHECK
	if
	:: map[sw] != 0 -> summary_set(sw)
	:: else -> skip
	fi
#endif
}

/* pagepool.c take_word: up to n - got ids from map[w], lowest first */
inline take_word(w, trusted)
{
	took = 0;
	v = map[w];
	do
	:: v != 0 && got < n ->
		/* pagepool.c lowest_bits */
		m = 0;
		c = 0;
		b = 0;
		do
		:: b < BITS ->
			if
			:: (v & (1 << b)) && (c < n - got || MUTANT_WHOLE) -> m = m | (1 << b); c++
			:: else -> skip
			fi;
			b++
		:: else -> break
		od;
		atomic { old = map[w]; map[w] = old & ~m }; /* A1 */
		b = 0;
		do
		:: b < BITS ->
			if
			:: old & m & (1 << b) ->
				d_step {
					id = w * BITS + b;
					assert(owner[id] == 0);
					owner[id] = me + 1;
					assert(got < n);
					ids[got] = id;
					got++
				}
			:: else -> skip
			fi;
			b++
		:: else -> break
		od;
		v = old & ~m;
		took = 1
	:: else -> break
	od;
	if
	:: v == 0 && (took || trusted) -> summary_clear(w)
	:: else -> skip
	fi
}

/* pagepool.c put_word, R1 (one id at a time, see the top) */
inline put_word(pput)
{
	pw = pput / BITS;
	atomic { old = map[pw]; map[pw] = old | (1 << (pput % BITS)) };
	if
	:: old == 0 -> summary_set(pw)
	:: else -> skip
	fi
}

proctype taker(byte me)
{
	byte n, got, rnd, i, start, w, id, pw, c, b;
	byte v, m, old;
	byte ids[MAXTAKE];
	bit ok, trusted, took;
	do
	:: rnd < ROUNDS ->
		rnd++;
		select(n : 1 .. MAXTAKE);
		/* pagepool.c kva_pagepool_take_n, A3: claim n, all or nothing */
		atomic {
			if
			:: avail >= n -> avail = avail - n; ok = 1
			:: else -> ok = 0
			fi
		};
		if
		:: ok ->
			select(start : 0 .. WORDS - 1); /* the hint: any word */
			got = 0;
			trusted = 1;
			do
			:: got < n ->
				i = 0;
				do
				:: i < WORDS && got < n ->
					w = (start + i) % WORDS;
					if
					:: !trusted || (summary & (1 << w)) -> take_word(w, trusted)
					:: else -> skip
					fi;
					i++
				:: else -> break
				od;
#ifndef MUTANT_TRUST_ALWAYS
				trusted = 0
#endif
			:: else -> break
			od;
			/* used, then put back: pagepool.c kva_pagepool_put_n */
			i = 0;
			do
			:: i < n -> owner[ids[i]] = 0; i++
			:: else -> break
			od;
#ifdef MUTANT_COUNT_FIRST
			atomic { avail = avail + n; assert(avail <= NPAGES) };
#endif
			i = 0;
			do
			:: i < n -> put_word(ids[i]); i++
			:: else -> break
			od;
#ifndef MUTANT_COUNT_FIRST
			atomic { avail = avail + n; assert(avail <= NPAGES) }; /* R3 */
#endif
		:: else -> skip
		fi;
progress:
		skip
	:: else -> break
	od;
	finished++
}

active proctype monitor()
{
	byte w, id;
	finished == TAKERS;
	assert(avail == NPAGES);
	do
	:: id < NPAGES -> assert(owner[id] == 0 && (map[id / BITS] & (1 << (id % BITS)))); id++
	:: else -> break
	od;
	do
	:: w < WORDS -> assert(summary & (1 << w)); w++
	:: else -> break
	od
}

init
{
	byte i, w;
	atomic {
		do
		:: i < NPAGES -> map[i / BITS] = map[i / BITS] | (1 << (i % BITS)); i++
		:: else -> break
		od;
		do
		:: w < WORDS -> summary = summary | (1 << w); w++
		:: else -> break
		od;
		i = 0;
		do
		:: i < TAKERS -> run taker(i); i++
		:: else -> break
		od
	}
}
