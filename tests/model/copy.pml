/* SPDX-License-Identifier: Apache-2.0 */
/*
 * copy.pml: collective copy completion (rules drain-before-reuse,
 * collective-completion): copy.c kva__copy_start, copy.c
 * kva__copy_dispatch_pending, copy.c kva__copy_on_report, copy.c
 * kva__copy_cancel (reservations/) and grant.c kva__grant_report. WORLD
 * importer ranks copy into the request's destination pages; each reports into
 * copy_word = attempt << 8 | mask with a CAS (the C word is attempt << 32 |
 * mask). A rank may report success or failure, report its attempt twice (a
 * duplicate), and report the previous attempt late (a stale report) after the
 * next one was handed out. A failed attempt is retried up to RETRIES times; a
 * cancel may arrive at any time. After a cancelled copy drained, the record is
 * retired: the handle stops matching and the grant leaves the record with
 * copy_word as the last attempt left it (a rank that matched the handle just
 * before may still report into it; the grant is reset only when it is reused, a
 * grace period later, after every such rank is done: grant.c grant_reuse).
 *
 * Properties:
 *   - destination pages go back only after every rank of the submitted
 *     attempt reported: when they return, no rank is writing (assert), and
 *     they return once;
 *   - a copy completes (READY) only when every rank reported: no rank is
 *     writing then;
 *   - duplicates and stale attempts are refused (-EALREADY / -ESTALE /
 *     -ENOENT), and the scheduler counts at most WORLD reports per attempt;
 *   - at quiescence a cancelled request holds no pages.
 *
 * Memory model: copy_word is one atomic location; every rank's claim is a
 * CAS (acq_rel), the scheduler publishes a new attempt with a release store
 * (R1 of copy.c) only after the previous one fully drained, so the word's
 * modification order is what SC shows. A rank's page writes happen before
 * its kva_copy_done (the importer's completion); its report reaches the
 * scheduler through the inbox (R1/A1 of inbox.c), whose handling is what
 * returns the pages: the happens-before chain is writes -> CAS -> push ->
 * pop -> return, each link release/acquire or stronger.
 *
 * Mutants: MUTANT_RETURN_BEFORE_DRAIN (a cancel returns the pages of a
 * dispatched attempt at once), MUTANT_NO_ATTEMPT_CHECK (grant_report
 * checks only the rank's bit, not the attempt: a late report of the
 * previous attempt counts for the current one while that rank still
 * writes).
 */

#ifndef WORLD
#define WORLD 2
#endif
#ifndef RETRIES
#define RETRIES 1
#endif
#define IMPORTING 2
#define READY 3
#define CANCELLED 6
#define ATT(w) ((w) / 256)

int copy_word;                 /* kva__grant.copy_word */
byte state = IMPORTING;
bit live = 1;                  /* the handle still matches (not retired) */
bit pages_out = 1;             /* destination pages held by the request */
bit writing[WORLD];
byte n_reported, attempts = 1, retries;
bit any_failed, copying = 1, copy_queued = 1;
bit quiet;

chan jobs[WORLD] = [1] of { byte };
chan reports = [2 * WORLD] of { byte, bit }; /* rank_ev[rank]: rank, failed */
chan cancel_lane = [1] of { bit };

inline pages_return()
{
	d_step {
		assert(pages_out);
		i = 0;
		do
		:: i < WORLD -> assert(!writing[i]); i++
		:: else -> break
		od;
		pages_out = 0
	}
}

/* grant.c kva__grant_report (after intake.c kva_copy_done's lookup) */
inline report(a, st, rc)
{
	if
	:: !live -> rc = 1 /* -ENOENT: intake.c kva_copy_done, kva__rec_find */
	:: else ->
		w = copy_word; /* grant.c kva__grant_report, A3 */
		do
		::
#ifdef MUTANT_NO_ATTEMPT_CHECK
			if
			:: ATT(w) == 0 -> rc = 2; break /* -ESTALE: none handed out */
#else
			if
			:: a == 0 || ATT(w) != a -> rc = 2; break /* -ESTALE */
#endif
			:: (w >> me) & 1 -> rc = 3; break /* -EALREADY */
			:: else ->
				atomic {
					if
					:: copy_word == w -> copy_word = w | (1 << me); rc = 0
					:: else -> w = copy_word; rc = 9
					fi
				};
				if
				:: rc == 0 -> reports ! me, st; break /* grant.c kva__grant_report: rank_ev */
				:: else -> skip
				fi
			fi
		od
	fi
}

proctype rank(byte me)
{
	byte a, rc;
	int w;
	bit st, stale_sent;
end:	do
	:: jobs[me] ? a ->
		if
		:: a > 1 && !stale_sent -> /* a late report of the previous attempt */
			stale_sent = 1;
			report(a - 1, 0, rc);
			assert(rc != 0)
		:: skip
		fi;
		writing[me] = 1; /* the rank copies into the pages */
		writing[me] = 0;
		if
		:: st = 0
		:: st = 1
		fi;
		report(a, st, rc);
		if
		:: report(a, st, rc); assert(rc != 0) /* a duplicate */
		:: skip
		fi
	od
}

active proctype scheduler()
{
	byte r, i;
	bit st, c;
	do
	:: copy_queued && state == IMPORTING -> /* copy.c kva__copy_dispatch_pending */
		copy_queued = 0;
		copy_word = attempts * 256; /* copy.c kva__copy_dispatch_pending, R1 */
		r = 0;
		do
		:: r < WORLD -> jobs[r] ! attempts; r++
		:: else -> break
		od
	:: reports ? r, st -> /* copy.c kva__copy_on_report */
		n_reported++;
		assert(n_reported <= WORLD);
		any_failed = any_failed || st;
		if
		:: n_reported < WORLD -> skip /* rule collective-completion */
		:: else ->
			copying = 0;
			if
			/* copy.c kva__copy_on_report: rule drain-before-reuse, drained */
			:: state == CANCELLED ->
				pages_return();
				live = 0 /* lifecycle.c kva__rec_retire */
			:: state == IMPORTING && any_failed && retries < RETRIES ->
				retries++; /* copy.c kva__copy_on_report: retry, copy.c kva__copy_start */
				attempts++;
				n_reported = 0;
				any_failed = 0;
				copying = 1;
				copy_queued = 1
			:: else ->
				/* ready (or fallback with the capacity it owns) */
				d_step {
					i = 0;
					do
					:: i < WORLD -> assert(!writing[i]); i++
					:: else -> break
					od
				};
				state = READY
			fi
		fi
	:: cancel_lane ? c -> /* copy.c kva__copy_cancel */
		if
		:: state == IMPORTING ->
			if
			:: copy_queued -> /* never dispatched: nothing to drain */
				copy_queued = 0;
				copying = 0;
				pages_return();
				state = CANCELLED;
				live = 0 /* retired once reported */
			:: else ->
#ifdef MUTANT_RETURN_BEFORE_DRAIN
				pages_return();
#endif
				state = CANCELLED /* pages after every rank reported */
			fi
		:: else -> skip
		fi
	:: timeout -> break
	od;
	assert(state != CANCELLED || !pages_out || copying)
}

active proctype canceller()
{
	if
	:: cancel_lane ! 1
	:: skip
	fi
}

init
{
	byte i;
	atomic {
		do
		:: i < WORLD -> run rank(i); i++
		:: else -> break
		od
	}
}
