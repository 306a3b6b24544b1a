/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pagepool.pml: the page pool (lockfree/pagepool.{h,c}). Ids are bits of
 * map[] (BITS ids a word here; C: 64), summary has one bit per map word
 * (one summary word here; C: one per 64 map words), avail counts the ids no
 * take has claimed. TAKERS threads each claim 1 .. MAXTAKE ids from avail
 * (pagepool.c claim: at most KVA_PAGEPOOL_CLAIM_TRIES CASes, modelled as
 * one step that may also fail, nothing taken, whenever ids are there: a
 * claim crowded out changes nothing, so any failure is allowed),
 * collect them by fetch_and from the map (pagepool.c take_word) in at most
 * two passes, the first trusting the summary, the second over every word
 * (pagepool.c kva_pagepool_take_n), starting at any word (the hint is only
 * a hint, so every start is explored), and, short after both, give back
 * what they collected and their claim (pagepool.c give_back); else put the
 * ids back (pagepool.c kva_pagepool_put_n: one fetch_or per id here, a
 * finer grain than C's one per word, so every C interleaving is one of
 * these), ROUNDS times.
 *
 * Properties:
 *   - an id is owned by at most one thread, and a take gets no more ids
 *     than it claimed (asserts at every take);
 *   - avail never exceeds NPAGES;
 *   - a take gives up its collect only when it was crowded out: another
 *     take's fetch_and took ids during its pass over every word (so a
 *     -EAGAIN means contention, never ids lost or out of reach);
 *   - nothing lost or counted twice, and the summary does not lag for
 *     good: at the end every id is in the map, avail == NPAGES and every
 *     summary bit is set;
 *   - bounded: every loop of a call is bounded (claim tries, passes, words
 *     and bits); with -l (non-progress cycles, pan built with -DNP) every
 *     infinite run passes a completed call (label `progress`) infinitely
 *     often, so no take spins on ids only a stopped thread could give it.
 *
 * Memory model: each map word, the summary word and avail are atomic
 * locations changed only by read-modify-writes, totally ordered. The
 * orderings that matter are R1/A1 (a put's fetch_or -> the take's
 * fetch_and), R2/A2 (summary set -> the clear that erases it: the clear's
 * recheck sees the put's map write) and R3/A3 (the bits are set before the
 * count; a give-back's too): each is a program order this model keeps
 * (sequential consistency), and pagepool.c's labels give the C11 pairs that
 * keep it. `crowded` is a ghost (no C counterpart), written in the same
 * atomic step as the fetch_and it records.
 *
 * Mutants: MUTANT_NO_RECHECK (summary_clear does not look at the word
 * again: a put that refilled it just before stays unnamed for good),
 * MUTANT_TRUST_ALWAYS (every pass trusts the summary: a take gives up,
 * crowded out by nobody, while a clearer is stopped between its clear and
 * its recheck), MUTANT_COUNT_FIRST (a put or give-back counts its ids
 * before setting their bits: a take that claimed them finds nothing and
 * gives up, crowded out by nobody), MUTANT_TAKE_WHOLE_WORD (a fetch_and
 * takes every id of the word, not only those still owed),
 * MUTANT_GIVE_BACK_UNCOLLECTED (a take that gives up returns only the part
 * of its claim it had not collected, and drops the ids it had: lost).
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
byte crowded; /* bit t: another take's fetch_and took ids since taker t looked */

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
		atomic { /* A1 */
			old = map[w];
			map[w] = old & ~m;
			if
			:: old & m -> crowded = crowded | (((1 << TAKERS) - 1) & ~(1 << me))
			:: else -> skip
			fi
		};
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

/* pagepool.c put_ids: the bits of ids[0 .. k) */
inline put_ids(k)
{
	i = 0;
	do
	:: i < k -> put_word(ids[i]); i++
	:: else -> break
	od
}

proctype taker(byte me)
{
	byte n, got, rnd, i, start, w, id, pw, c, b, pass;
	byte v, m, old;
	byte ids[MAXTAKE];
	bit ok, trusted, took;
	do
	:: rnd < ROUNDS ->
		rnd++;
		select(n : 1 .. MAXTAKE);
		/* pagepool.c claim, A3: claim n, all or nothing; or crowded
		 * out of the claim (-EAGAIN), or fewer than n (-ENOSPC) */
		atomic {
			if
			:: avail >= n -> avail = avail - n; ok = 1
			:: avail >= n -> ok = 0 /* others kept winning the CAS */
			:: else -> ok = 0
			fi
		};
		if
		:: ok ->
			select(start : 0 .. WORDS - 1); /* the hint: any word */
			got = 0;
			pass = 0;
			do
			:: got < n && pass < 2 ->
				trusted = pass == 0;
#ifdef MUTANT_TRUST_ALWAYS
				trusted = 1;
#endif
				atomic { crowded = crowded & ~(1 << me) }; /* from here */
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
				pass++
			:: else -> break
			od;
			if
			:: got < n ->
				/* crowded out: other takes collected during the
				 * pass over every word */
				assert(crowded & (1 << me));
				/* pagepool.c give_back: the collected ids as a
				 * put's (bits first), then the whole claim */
				i = 0;
				do
				:: i < got -> owner[ids[i]] = 0; i++
				:: else -> break
				od;
#ifdef MUTANT_GIVE_BACK_UNCOLLECTED
				atomic { avail = avail + n - got; assert(avail <= NPAGES) }
#else
#ifdef MUTANT_COUNT_FIRST
				atomic { avail = avail + n; assert(avail <= NPAGES) };
#endif
				put_ids(got);
#ifndef MUTANT_COUNT_FIRST
				atomic { avail = avail + n; assert(avail <= NPAGES) } /* R3 */
#endif
#endif
			:: else ->
				/* used, then put back: pagepool.c kva_pagepool_put_n */
				i = 0;
				do
				:: i < n -> owner[ids[i]] = 0; i++
				:: else -> break
				od;
#ifdef MUTANT_COUNT_FIRST
				atomic { avail = avail + n; assert(avail <= NPAGES) };
#endif
				put_ids(n);
#ifndef MUTANT_COUNT_FIRST
				atomic { avail = avail + n; assert(avail <= NPAGES) } /* R3 */
#endif
			fi
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
