/* SPDX-License-Identifier: Apache-2.0 */
/*
 * inbox.pml: submit -> inbox -> ingest. Producers push onto per-thread lanes
 * (lockfree/fanin.c, over lockfree/inbox.c, over liburcu's cds_wfcq); the
 * scheduler's step splices the marked lanes without waiting and pops its
 * private batch without waiting; the host sleeps until `wake` when the step
 * reports no backlog (engine.c kva_step, plan->backlog; the producer's wake:
 * event_queue.c kva__event_enqueue, then event_queue.c kva__wake).
 *
 * Modelled: lanes 0 and 1; producers A and B share lane 0 (threads beyond
 * KVA_FANIN_LANES share lanes), C uses lane 1. Each pushes PUSHES nodes (A)
 * or one node (B, C). Every wfcq step is its own atomic Promela step: the
 * tail exchange, the link store, the head exchange of a splice, the loads of
 * a pop. The batch's head and tail are the consumer's alone.
 *
 * Properties (assertions):
 *   - nothing seen twice, FIFO per producer (assert in consume);
 *   - nothing lost and no lost wake-up: whenever every producer has returned
 *     and the host sleeps with no wake pending, every node was consumed
 *     (monitor);
 *   - the step never waits: the consumer's step has no blocking statement
 *     (every guard in it has an else); a node whose predecessor link is not
 *     stored yet stays in the batch (WOULDBLOCK), and the step reports
 *     backlog so the host steps again.
 *
 * Memory model: Spin is sequentially consistent. The argument uses (1)
 * liburcu's uatomic_xchg as a full barrier (tail exchange before the link
 * store; the splice's head exchange before its tail exchange), (2) R1/A1 of
 * fanin.c: the lane bit is set with a release fetch_or after the link store
 * and taken with an acquire exchange, so a consumer that sees the bit sees
 * the link; (3) per-location coherence for `next`, `tail`, `mask`. A node's
 * contents are published by the same full-barrier exchange (R1/A1 of
 * inbox.c, dependency-ordered pointer loads as in liburcu). The fanin's
 * first mask load is relaxed but only a hint: a stale 0 skips one step, and
 * the wake callback orders the producer's fetch_or before the next step.
 * Under those orders every execution's outcome is that of some interleaving
 * of the steps below, so SC is enough.
 *
 * State space (spin 6.5.2, -DSAFETY -DCOLLAPSE): make test (PUSHES=1):
 * 3 nodes; make verify (PUSHES=3, tests/model/check.sh VERIFY_DEFS):
 * 5 nodes. States and times: docs/model-checking.md.
 *
 * Mutants: MUTANT_CLEAR_AFTER_SPLICE (the consumer clears the lane bits
 * after splicing instead of exchanging them first: a push that finds its
 * lane empty in between loses its bit), MUTANT_POP_UNCHECKED (a pop takes
 * a node whose next link is NULL as the last one without the tail CAS: the
 * late link of the next producer is lost).
 */

#ifndef PUSHES
#define PUSHES 1
#endif
#define NN (PUSHES + 2)     /* nodes: A's 1..PUSHES, B's, C's */
#define D0 (NN + 1)         /* lane 0's head node */
#define D1 (NN + 2)         /* lane 1's head node */
#define DB (NN + 3)         /* the batch's head node */
#define NPROD 3

byte next[NN + 4];          /* cds_wfcq_node.next, 0 = NULL */
byte tail[2];               /* lanes' cds_wfcq_tail.p */
byte btail;                 /* the batch's tail (consumer's) */
byte mask;                  /* kva_fanin.mask */
bit wake;                   /* the host's wake flag (wake_scheduler.c) */
bit sleeping;
byte done;                  /* producers returned */
byte consumed;
bit seen[NN + 1];
byte expect[NPROD];         /* next node expected from each producer */

inline lane_empty(D, l, res)
{
	/* cds_wfcq_empty: head.next == NULL && tail == &head */
	res = (next[D] == 0);
	res = res && (tail[l] == D)
}

proctype producer(byte l; byte first; byte count)
{
	byte n = first, old, oldmask;
	do
	:: n < first + count ->
		/* inbox.c kva_inbox_push: cds_wfcq_node_init */
		next[n] = 0;
		/* inbox.c kva_inbox_push, R1: cds_wfcq_enqueue's uatomic_xchg(&tail->p, node) */
		atomic { old = tail[l]; tail[l] = n };
		/* the link store CMM_STORE_SHARED(old_tail->next, node) */
		next[old] = n;
		if
		:: old == D0 || old == D1 ->
			/* fanin.c kva_fanin_push, R1: release fetch_or of the lane's bit */
			atomic { oldmask = mask; mask = mask | (1 << l) };
			/* event_queue.c kva__event_enqueue: wake the host when the fan-in was empty */
			if
			:: oldmask == 0 -> wake = 1
			:: else -> skip
			fi
		:: else -> skip /* fanin.c kva_fanin_push: lane not empty, its bit is set or being set */
		fi;
		n++
	:: else -> break
	od;
	done++
}

inline consume(node)
{
	d_step {
		assert(!seen[node]);
		seen[node] = 1;
		consumed++;
		if
		:: node <= PUSHES -> assert(node == expect[0] + 1); expect[0] = node
		:: node == PUSHES + 1 -> expect[1] = node
		:: else -> expect[2] = node
		fi
	}
}

/* inbox.c kva_inbox_splice_nonblocking (lane l -> batch), i.e.
 * ___cds_wfcq_splice(..., blocking = 0). moved: anything appended. */
inline splice(D, l, moved)
{
	lane_empty(D, l, e);
	if
	:: e -> moved = 0 /* CDS_WFCQ_RET_SRC_EMPTY */
	:: else ->
		atomic { h = next[D]; next[D] = 0 }; /* uatomic_xchg(&src_head.next, NULL) */
		if
		:: h == 0 -> moved = 0 /* SRC_EMPTY or WOULDBLOCK: not linked yet */
		:: else ->
			atomic { t = tail[l]; tail[l] = D }; /* uatomic_xchg(&src_tail->p, &src_head) */
			/* ___cds_wfcq_append to the batch: no producer links
			 * the batch's tail (it was a lane tail before t) */
			d_step { old = btail; btail = t; next[old] = h };
			moved = 1
		fi
	fi
}

/* inbox.c kva_inbox_batch_pop_nonblocking, i.e.
 * ___cds_wfcq_dequeue_with_state(batch, blocking = 0). got: node or 0. */
inline pop(got)
{
	got = 0;
	if
	:: next[DB] == 0 && btail == DB -> skip /* empty */
	:: else ->
		node = next[DB];
		if
		:: node == 0 -> skip /* WOULDBLOCK (head link pending) */
		:: else ->
			nx = next[node]; /* CMM_LOAD_SHARED(node->next) */
			if
			:: nx == 0 ->
#ifdef MUTANT_POP_UNCHECKED
				d_step { next[DB] = 0; btail = DB; got = node }
#else
				next[DB] = 0;
				if
				:: btail == node -> btail = DB; got = node /* cmpxchg(tail, node, head) */
				:: else ->
					nx = next[node]; /* sync_next, nonblocking */
					if
					:: nx == 0 -> next[DB] = node /* WOULDBLOCK: node stays */
					:: else -> next[DB] = nx; got = node
					fi
				fi
#endif
			:: else -> next[DB] = nx; got = node
			fi
		fi
	fi
}

proctype host()
{
	byte m, l, h, t, old, node, nx, got;
	bit moved, e;
	do
	:: /* one kva_step: step_events.c kva__step_events_handle calls
	    * fanin.c kva_fanin_splice_nonblocking */
		if
		:: mask == 0 -> skip /* fanin.c kva_fanin_splice_nonblocking: relaxed hint, nothing marked */
		:: else ->
#ifdef MUTANT_CLEAR_AFTER_SPLICE
			m = mask;
#else
			atomic { m = mask; mask = 0 }; /* fanin.c kva_fanin_splice_nonblocking, A1: exchange */
#endif
			l = 0;
			do
			:: l < 2 ->
				if
				:: (m >> l) & 1 ->
					if
					:: l == 0 -> splice(D0, 0, moved)
					:: else -> splice(D1, 1, moved)
					fi;
					if
					:: !moved ->
						/* fanin.c kva_fanin_splice_nonblocking: never lose a lane */
						if
						:: l == 0 -> lane_empty(D0, 0, e)
						:: else -> lane_empty(D1, 1, e)
						fi;
						if
						:: !e -> atomic { mask = mask | (1 << l) }
						:: else -> skip
						fi
					:: else -> skip
					fi
				:: else -> skip
				fi;
				l++
			:: else -> break
			od;
#ifdef MUTANT_CLEAR_AFTER_SPLICE
			atomic { mask = mask & ~m }
#endif
		fi;
		/* step_events.c handle_batch: pop until NULL (empty or WOULDBLOCK) */
		do
		:: pop(got);
			if
			:: got != 0 -> consume(got)
			:: else -> break
			fi
		od;
		/* engine.c kva_step: plan->backlog when the batch still holds nodes */
		if
		:: next[DB] != 0 || btail != DB -> skip /* step again */
		:: else ->
			sleeping = 1;
end_sleep:		atomic { wake == 1 -> wake = 0; sleeping = 0 }
		fi
	od
}

/* Every producer returned, the host sleeps and nobody will wake it: the
 * system can do nothing more, so every node must have been consumed. */
active proctype monitor()
{
end_mon:
	atomic { done == NPROD && sleeping && wake == 0 -> assert(consumed == NN) }
}

init
{
	atomic {
		tail[0] = D0;
		tail[1] = D1;
		btail = DB;
		run host();
		run producer(0, 1, PUSHES);
		run producer(0, PUSHES + 1, 1);
		run producer(1, PUSHES + 2, 1)
	}
}
