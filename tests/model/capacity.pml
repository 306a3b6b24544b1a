/* SPDX-License-Identifier: Apache-2.0 */
/*
 * capacity.pml: the paired reservation on the packed capacity word
 * (lockfree/capacity.{h,c}). The word holds three lanes, as in C but narrower:
 * pages (4 bits, 6 credits), copy slots (2 bits, 2), run slots (2 bits, 2).
 * THREADS threads each pick one kind of reservation and run it once: a restore
 * reservation {3 pages, 1 slot, 1 run} above the decode watermark (admit.c
 * admit_head, rules paired-reservation and reservations-never-preempt), a
 * recompute {2, 0, 1} above it (admit.c admit_head, the first chunk), a decode
 * growth {1, 0, 0} with floor 0 (intake.c grow_owned, rule
 * decode-never-suppressed), or a slot-only reservation {0, 1, 0} (no pages: not
 * held back by the floor, as stated in capacity.h; no caller in the library
 * reserves one today, but admit.c make_ready gives the copy slot back alone). A
 * thread that got its credits gives exactly those back with one fetch_add
 * (capacity.c kva_capacity_release). try_reserve is modelled as in C: a relaxed
 * load, then a loop of fits() and a CAS of the whole word that refreshes the
 * expected value on failure.
 *
 * Properties (checked atomically with every update of the word):
 *   - all or nothing, no borrow between lanes: each lane of the word equals
 *     its total minus what the threads hold in that lane;
 *   - never below the watermark: a reservation with floor F that takes
 *     pages leaves at least F free pages when it succeeds;
 *   - never over-released: no lane exceeds its total.
 *
 * Memory model: the word is one atomic location and every write to it is an
 * RMW (CAS or fetch_add), so all writes are totally ordered and each RMW
 * reads the latest value: the properties are about that one location's
 * modification order, which SC models exactly. A1/R1 (acquire CAS / release
 * fetch_add) only carry what the releaser did before (page ids back in the
 * pool, pagepool.pml), not these properties; the relaxed first load is only
 * the CAS's first guess.
 *
 * Mutants: MUTANT_CHECK_THEN_SUB (fits() on the loaded value, then a
 * fetch_sub instead of the CAS: two reservations pass on the same snapshot,
 * the pages lane underflows into the slots lane or below the floor),
 * MUTANT_NO_SLOT_CHECK (fits() forgets the slots lane: a slot reservation
 * on an empty lane borrows from the runs lane).
 */

#ifndef THREADS
#define THREADS 3
#endif
#define PB 16           /* pages lane: 4 bits */
#define SB 4            /* slots lane: 2 bits; runs above */
#define TP 6
#define TS 2
#define TR 2
#define FLOOR 2
#define PAGES(w) ((w) % PB)
#define SLOTS(w) (((w) / PB) % SB)
#define RUNS(w) ((w) / (PB * SB))
#define PACK(p, s, r) ((p) + (s) * PB + (r) * PB * SB)

int word = PACK(TP, TS, TR);
byte hp, hs, hr;       /* credits the threads hold, per lane */

inline check_word()
{
	assert(PAGES(word) + hp == TP && SLOTS(word) + hs == TS && RUNS(word) + hr == TR);
	assert(word >= 0 && PAGES(word) <= TP && SLOTS(word) <= TS && RUNS(word) <= TR)
}

/* capacity.c fits */
inline fits(w, p, s, r, floor, ok)
{
#ifdef MUTANT_NO_SLOT_CHECK
	ok = PAGES(w) >= p && RUNS(w) >= r;
#else
	ok = PAGES(w) >= p && SLOTS(w) >= s && RUNS(w) >= r;
#endif
	ok = ok && (p == 0 || PAGES(w) - p >= floor)
}

proctype caller()
{
	byte p, s, r, floor;
	int old;
	bit ok, done;
	if
	:: p = 3; s = 1; r = 1; floor = FLOOR /* restore */
	:: p = 2; s = 0; r = 1; floor = FLOOR /* recompute */
	:: p = 1; s = 0; r = 0; floor = 0     /* decode growth */
	:: p = 0; s = 1; r = 0; floor = FLOOR /* a slot only */
	fi;
	/* capacity.c kva_capacity_try_reserve: relaxed load */
	old = word; /* relaxed */
	do
	:: fits(old, p, s, r, floor, ok);
		if
		:: !ok -> break
		:: else -> skip
		fi;
#ifdef MUTANT_CHECK_THEN_SUB
		d_step { word = word - PACK(p, s, r); hp = hp + p; hs = hs + s; hr = hr + r; done = 1 };
		break
#else
		/* capacity.c kva_capacity_try_reserve, A1: CAS */
		atomic {
			if
			:: word == old ->
				word = old - PACK(p, s, r);
				hp = hp + p; hs = hs + s; hr = hr + r;
				/* rule reservations-never-preempt */
				assert(p == 0 || PAGES(word) >= floor);
				check_word();
				done = 1
			:: else -> old = word
			fi
		};
		if
		:: done -> break
		:: else -> skip
		fi
#endif
	od;
	if
	:: done ->
#ifdef MUTANT_CHECK_THEN_SUB
		d_step { assert(p == 0 || PAGES(word) >= floor); check_word() };
#endif
		/* capacity.c kva_capacity_release, R1: fetch_add */
		d_step { word = word + PACK(p, s, r); hp = hp - p; hs = hs - s; hr = hr - r; check_word() }
	:: else -> skip
	fi
}

init
{
	byte i;
	atomic {
		do
		:: i < THREADS -> run caller(); i++
		:: else -> break
		od
	}
}
