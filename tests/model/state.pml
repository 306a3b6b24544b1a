/* SPDX-License-Identifier: Apache-2.0 */
/*
 * state.pml: the request state word (kva__req.state) of one request.
 * kva_cancel, kva_finish / kva_preempt and kva_grow on other threads race
 * the scheduler's transitions (admit, copy done -> READY, READY -> RUNNING,
 * requeue after preemption) and its handling of their events.
 *
 * Threads: the scheduler (engine.c kva_step), a host thread calling kva_finish
 * or kva_preempt twice (any order), a kva_grow thread, a kva_cancel thread.
 * Events travel in per-thread lanes with no order between them
 * (lockfree/fanin.c): the scheduler takes from any non-empty lane. Credits: the
 * request's held credits (grant npages + reserved, one number) and the capacity
 * word's free pages (TOTAL). A reservation takes 2 above a floor; a grow takes
 * 1 more (floor 0, rule decode-never-suppressed). ADMITS bounds how often the
 * request is (re)admitted.
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
 * location whose RMWs (the CASes of take_running and of the step's cancel,
 * handle_cancel here) are totally ordered (true for C11 RMWs at any order),
 * plus R2 of lifecycle.c / R4 / A4 of intake.c: the owner that wins the CAS
 * (acquire) sees the page list the previous owner released (the release
 * store of the new state).
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

/* enum kva_state (include/kvadmit/kvadmit.h) and KVA__STATE_* (record.h) */
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

/* grant.c kva__rec_give_back: loads npages/reserved, zeroes them, then
 * puts the ids back and releases the credits (grant.c kva__pages_return,
 * capacity.c kva_capacity_release). */
inline give_back()
{
	t = held;
	held = 0;
	d_step { free = free + t; assert(free <= TOTAL) }
}

/* lifecycle.c kva__rec_end: the one terminal outcome */
inline rec_end(terminal_state)
{
	d_step { assert(ends == 0); ends++ };
	state = terminal_state /* lifecycle.c kva__rec_set_state, R2 */
}

/* admit.c kva__admit_cancel; ok: handled (false: retried next step) */
inline handle_cancel(ok)
{
	s = state; /* admit.c kva__admit_cancel: acquire load */
	if
	:: s == WAITING -> rec_end(CANCELLED); ok = 1 /* waiting_queue.c kva__waiting_queue_forget */
	:: s == IMPORTING || s == READY ->
		/* copy.c kva__copy_cancel (IMPORTING) / admit.c kva__admit_cancel:
		 * grant.c kva__rec_give_back (READY) */
		give_back(); rec_end(CANCELLED); ok = 1
	:: s == RUNNING ->
#ifdef MUTANT_CANCEL_NO_CAS
		state = CANCELLING; won = 1;
#else
		/* admit.c kva__admit_cancel: CAS RUNNING -> CANCELLING (acquire, pairs with R4 of intake.c) */
		atomic {
			if
			:: state == RUNNING -> state = CANCELLING; won = 1
			:: else -> won = 0; s = state
			fi
		};
#endif
		if
		:: won -> give_back(); rec_end(CANCELLED); ok = 1
		:: else -> ok = (s != GROWING) /* admit.c kva__admit_cancel: retry only under a grow */
		fi
	:: s == GROWING -> ok = 0 /* admit.c kva__admit_cancel: KVA__STATE_GROWING, retry */
	:: else -> ok = 1 /* PREEMPTED: handled with its requeue; terminal: nothing */
	fi
}

active proctype scheduler()
{
	byte s, t, ev;
	bit ok, won;
	do
	:: host_lane ? ev -> /* step_events.c handle_life_event */
		if
		:: ev == FINISHED -> rec_end(FINISHED) /* step_events.c handle_life_event: EV_FINISHED */
		:: else ->
#ifndef MUTANT_PREEMPT_DROPS_CANCEL
			if
			:: cancel_requested -> rec_end(CANCELLED) /* step_events.c handle_life_event: cancelled */
			:: else ->
#endif
				state = WAITING /* waiting_queue.c kva__waiting_queue_requeue_front */
#ifndef MUTANT_PREEMPT_DROPS_CANCEL
			fi
#endif
		fi
	:: cancel_lane ? ev -> /* step_events.c dispatch_event: KVA__EV_CANCEL */
		handle_cancel(ok);
		if
		:: !ok -> deferred = 1 /* step_events.c dispatch_event: pushed on e->deferred */
		:: else -> skip
		fi
	:: deferred -> /* step_events.c kva__step_events_handle: the deferred cancel, once per step */
		deferred = 0;
		handle_cancel(ok);
		if
		:: !ok -> deferred = 1
		:: else -> skip
		fi
	/* admit.c admit_head: rules paired-reservation, reservations-never-preempt */
	:: state == WAITING && admits < ADMITS ->
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
			:: state = RUNNING /* admit.c plan_admit */
			:: state = IMPORTING /* admit.c admit_head: copy.c kva__copy_start */
			fi
		:: else -> skip
		fi
	:: state == IMPORTING -> state = READY /* admit.c kva__admit_on_copy -> make_ready */
	:: state == READY -> state = RUNNING /* admit.c admit_ready -> plan_admit (the READY bypass) */
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

/* intake.c take_running, A4: the CAS out of RUNNING */
inline take_running(to, won, s)
{
	atomic {
		if
		:: state == RUNNING -> state = to; won = 1
		:: else -> won = 0; s = state
		fi
	}
}

/* kva_finish / kva_preempt (intake.c release_running), twice */
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
			give_back(); /* intake.c release_running: kva__rec_give_back */
			host_lane ! (to == ENDING -> FINISHED : PREEMPTED) /* release_running: ev_main */
		:: else -> skip /* -EALREADY, -EBUSY (GROWING; CANCELLING: the step cancels it), -ENOENT */
		fi
	:: break
	od
}

/* intake.c kva_grow of one page */
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
		t = held; /* intake.c grow_owned: loads npages / reserved */
		atomic { /* intake.c grow_owned: growth may dip below the watermark (floor 0) */
			if
			:: free >= 1 -> free--; ok = 1
			:: else -> ok = 0
			fi
		};
		if
		:: ok -> held = t + 1 /* intake.c grow_owned: stores npages / reserved */
		:: else -> skip
		fi;
#ifndef MUTANT_GROW_UNOWNED
		state = RUNNING /* intake.c kva_grow, R4 */
#endif
	:: else -> skip
	fi
}

/* intake.c kva_cancel */
active proctype canceller()
{
	byte s;
	bit old;
	s = state; /* intake.c kva_cancel, A2 */
	if
	:: terminal(s) -> skip /* -ENOENT */
	:: else ->
		atomic { old = cancel_requested; cancel_requested = 1 }; /* intake.c kva_cancel: exchange */
		if
		:: old -> skip /* -EALREADY */
		:: else -> cancel_accepted = 1; cancel_lane ! 1 /* intake.c kva_cancel: kva__event_push */
		fi
	fi
}
