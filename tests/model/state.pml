/* SPDX-License-Identifier: Apache-2.0 */
/*
 * state.pml: the request state word (kva__req.state) of one request.
 * kva_cancel, kva_finish / kva_preempt and kva_grow on other threads race
 * the scheduler's transitions (admit, copy done -> READY, READY -> RUNNING,
 * requeue after preemption) and its handling of their events.
 *
 * Threads: the scheduler (engine.c step), a host thread calling kva_finish
 * or kva_preempt twice (any order), a kva_grow thread, a kva_cancel thread.
 * Events travel in per-thread lanes with no order between them (fanin.c):
 * the scheduler takes from any non-empty lane. Credits: the request's held
 * credits (grant npages + reserved, one number) and the capacity word's free
 * pages (TOTAL). A reservation takes 2 above a floor; a grow takes 1 more
 * (floor 0, rule 6). ADMITS bounds how often the request is (re)admitted.
 *
 * Properties:
 *   - exactly one terminal outcome: kva__rec_end runs at most once
 *     (assert), and at quiescence the state is FINISHED or CANCELLED iff it
 *     ran;
 *   - credits returned exactly once: free never exceeds TOTAL (an
 *     over-release), and at quiescence an ended request holds nothing and
 *     free == TOTAL, a live one holds TOTAL - free;
 *   - an accepted cancel (kva_cancel returned 0) ends the request: at
 *     quiescence it is FINISHED or CANCELLED;
 * Quiescence = Spin's timeout: no thread can move, every lane and the
 * deferred queue are empty.
 *
 * Memory model: the argument needs only that the state word is one atomic
 * location whose RMWs (the CASes of take_running and handle_cancel) are
 * totally ordered (true for C11 RMWs at any order), plus R2 of record.c /
 * R4 / A4 of intake.c: the owner that wins the CAS (acquire) sees the page
 * list the previous owner released (the release store of the new state).
 * The credit count and the page list are touched only by the CAS owner, so
 * no other reordering is visible; cancel_requested is an exchange (one
 * location). SC is therefore enough for these properties.
 *
 * Mutants: MUTANT_CANCEL_NO_CAS (the step's cancel of a RUNNING request
 * loads the state and then stores CANCELLING instead of the CAS: a
 * concurrent kva_finish also gives back), MUTANT_PREEMPT_DROPS_CANCEL (the
 * requeue after preemption ignores cancel_requested, while the cancel event
 * on a PREEMPTED request is dropped as the code does: an accepted cancel is
 * lost), MUTANT_GROW_UNOWNED (kva_grow checks RUNNING with a load instead of
 * moving it to GROWING: a cancel or finish gives the pages back under it).
 */

#ifndef ADMITS
#define ADMITS 2
#endif
#define TOTAL 4
#define FLOOR 1

/* enum kva_state / KVA__STATE_* (record.h:38) */
#define WAITING 1
#define IMPORTING 2
#define READY 3
#define RUNNING 4
#define FINISHED 5
#define CANCELLED 6
#define GROWING 16
#define PREEMPTED 17
#define ENDING 18
#define CANCELLING 19

#define terminal(s) (s == FINISHED || s == CANCELLED || s == ENDING || s == CANCELLING)

byte state = WAITING;
bit cancel_requested;
bit cancel_accepted;
byte free = TOTAL;   /* capacity word, pages lane */
byte held;           /* the request's grant: npages + reserved */
byte ends;           /* kva__rec_end calls */
byte admits;
bit deferred;        /* the cancel event waits in e->deferred */

chan host_lane = [2] of { byte };   /* ev_main: EV_FINISHED / EV_PREEMPTED */
chan cancel_lane = [1] of { byte }; /* struct kva__cancel */

/* record.c:211 kva__rec_give_back: loads npages/reserved, zeroes them, then
 * puts the ids back and releases the credits (capacity.c:142). */
inline give_back()
{
	t = held;
	held = 0;
	d_step { free = free + t; assert(free <= TOTAL) }
}

/* record.c:233 kva__rec_end: the one terminal outcome */
inline rec_end(terminal_state)
{
	d_step { assert(ends == 0); ends++ };
	state = terminal_state /* record.c:201 R2 */
}

/* engine.c:259 handle_cancel; ok: handled (false: retried next step) */
inline handle_cancel(ok)
{
	s = state; /* engine.c:261, acquire */
	if
	:: s == WAITING -> rec_end(CANCELLED); ok = 1 /* admit_forget_waiting */
	:: s == IMPORTING || s == READY ->
		give_back(); rec_end(CANCELLED); ok = 1 /* copy.c:28 copy_cancel / engine.c:274 */
	:: s == RUNNING ->
#ifdef MUTANT_CANCEL_NO_CAS
		state = CANCELLING; won = 1;
#else
		/* engine.c:279 CAS RUNNING -> CANCELLING (A4 of intake.c) */
		atomic {
			if
			:: state == RUNNING -> state = CANCELLING; won = 1
			:: else -> won = 0; s = state
			fi
		};
#endif
		if
		:: won -> give_back(); rec_end(CANCELLED); ok = 1
		:: else -> ok = (s != GROWING) /* engine.c:287 */
		fi
	:: s == GROWING -> ok = 0 /* engine.c:289 */
	:: else -> ok = 1 /* PREEMPTED: handled with its requeue; terminal: nothing */
	fi
}

active proctype scheduler()
{
	byte s, t, ev;
	bit ok, won;
	do
	:: host_lane ? ev -> /* engine.c:298 handle_life_event */
		if
		:: ev == FINISHED -> rec_end(FINISHED) /* engine.c:302 */
		:: else ->
#ifndef MUTANT_PREEMPT_DROPS_CANCEL
			if
			:: cancel_requested -> rec_end(CANCELLED) /* engine.c:313 */
			:: else ->
#endif
				state = WAITING /* engine.c:317 admit_requeue_front */
#ifndef MUTANT_PREEMPT_DROPS_CANCEL
			fi
#endif
		fi
	:: cancel_lane ? ev -> /* engine.c:334 EV_CANCEL */
		handle_cancel(ok);
		if
		:: !ok -> deferred = 1 /* engine.c:338 */
		:: else -> skip
		fi
	:: deferred -> /* engine.c:503 the deferred cancel, once per step */
		deferred = 0;
		handle_cancel(ok);
		if
		:: !ok -> deferred = 1
		:: else -> skip
		fi
	:: state == WAITING && admits < ADMITS -> /* admit.c:252 rules 4, 5 */
		atomic {
			if
			:: free >= 2 + FLOOR -> free = free - 2; held = held + 2; ok = 1
			:: else -> ok = 0
			fi
		};
		if
		:: ok ->
			admits++;
			if
			:: state = RUNNING /* admit.c:59 plan_admit */
			:: state = IMPORTING /* admit.c:269 */
			fi
		:: else -> skip
		fi
	:: state == IMPORTING -> state = READY /* admit.c:383 make_ready */
	:: state == READY -> state = RUNNING /* admit.c:59 via the READY bypass */
	:: timeout -> break
	od;
	/* quiescent */
	assert(ends == (state == FINISHED || state == CANCELLED));
	assert(!cancel_accepted || state == FINISHED || state == CANCELLED);
	if
	:: ends -> assert(held == 0 && free == TOTAL)
	:: else -> assert(held + free == TOTAL)
	fi
}

/* intake.c:263 take_running: the CAS out of RUNNING */
inline take_running(to, won, s)
{
	atomic {
		if
		:: state == RUNNING -> state = to; won = 1
		:: else -> won = 0; s = state
		fi
	}
}

/* kva_finish / kva_preempt (intake.c:332 release_running), twice */
active proctype host()
{
	byte calls, to, s, t;
	bit won;
	do
	:: calls < 2 ->
		calls++;
		if
		:: to = ENDING
		:: to = PREEMPTED
		fi;
		take_running(to, won, s);
		if
		:: won ->
			give_back(); /* intake.c:341 */
			host_lane ! (to == ENDING -> FINISHED : PREEMPTED) /* intake.c:345 */
		:: else -> skip /* -EALREADY, -EBUSY (GROWING; CANCELLING: the step cancels it), -ENOENT */
		fi
	:: break
	od
}

/* kva_grow (intake.c:312) of one page */
active proctype grower()
{
	byte s, t;
	bit won, ok;
#ifdef MUTANT_GROW_UNOWNED
	won = (state == RUNNING);
#else
	take_running(GROWING, won, s);
#endif
	if
	:: won ->
		t = held; /* intake.c:286 grow_owned: loads npages / reserved */
		atomic { /* intake.c:296: growth may dip below the watermark (floor 0) */
			if
			:: free >= 1 -> free--; ok = 1
			:: else -> ok = 0
			fi
		};
		if
		:: ok -> held = t + 1 /* intake.c:304 */
		:: else -> skip
		fi;
#ifndef MUTANT_GROW_UNOWNED
		state = RUNNING /* intake.c:324 R4 */
#endif
	:: else -> skip
	fi
}

/* kva_cancel (intake.c:99) */
active proctype canceller()
{
	byte s;
	bit old;
	s = state; /* intake.c:108 A2 */
	if
	:: terminal(s) -> skip /* -ENOENT */
	:: else ->
		atomic { old = cancel_requested; cancel_requested = 1 }; /* intake.c:115 */
		if
		:: old -> skip /* -EALREADY */
		:: else -> cancel_accepted = 1; cancel_lane ! 1 /* intake.c:126 */
		fi
	fi
}
