/* SPDX-License-Identifier: Apache-2.0 */
/*
 * freelist.pml: the free-slot lists as built (lockfree/slab.c), two
 * Treiber stacks of indices (top = index + 1, 0 = empty; links in the
 * nodes' hdr.next / ticket.next), 3 nodes, POPPERS threads each popping a
 * node, using it, and giving it back, ROUNDS times.
 *
 * Default: the slab's shared free stacks (slab.c push_batches,
 * slab.c pop_stack), which have no tag by design: a pop runs inside an
 * RCU read-side section (slab.c refill, around pop_batch), and a
 * node is pushed back only by a call_rcu callback, a grace period after it
 * was retired (slab.c reclaim_ticket, then slab.c reclaim_chain; modelled
 * as a synchronize_rcu before the push).
 *
 * -DTICKETS (tickets.pml): the reclaim-ticket free list
 * (slab_reclaim.c ticket_push, slab_reclaim.c kva__slab_ticket_get), whose top carries a tag bumped by
 * every pop (C: 32 bits; here TAG_BITS, 4 by default, more than the model's
 * pops between one popper's load and its CAS can wrap) and no RCU.
 *
 * Properties: a node is owned by at most one thread (assert at every pop),
 * nothing is lost (at the end every node is back on the stack).
 *
 * Memory model: top is one atomic location written only by CAS, so its
 * modification order is total; the one cross-location dependency is the
 * popper's load of next[t] before its CAS, made safe by the RCU guarantee
 * (slab) or by the tag (tickets), not by any ordering: a stale next is
 * harmless exactly when the CAS fails. R4/A4 (R6/A6) make the pushed
 * node's link visible to the popper that takes it, so its load of next is
 * the latest, which SC assumes.
 *
 * Mutants: MUTANT_PUSH_BEFORE_GRACE (slab: a retired node is pushed back
 * at once, as a thread giving its cache straight to the shared stack would:
 * ABA, a node handed to two threads), MUTANT_TAG_WRAPS (tickets: a 1-bit
 * tag wraps after two pops: ABA).
 */

#ifndef POPPERS
#define POPPERS 3
#endif
#ifndef ROUNDS
#define ROUNDS 1
#endif
#define N 3
#ifdef MUTANT_TAG_WRAPS
#define TAG_BITS 1
#endif
#ifndef TAG_BITS
#define TAG_BITS 4
#endif
#define TAGS (1 << TAG_BITS)
#define IDX(w) ((w) % 8)
#define TAG(w) ((w) / 8)

int top;              /* slab: index + 1; tickets: tag * 8 | index + 1 */
byte next[N + 1];
byte owner[N + 1];    /* 0: free, else the popper's number + 1 */
byte rcu_ctr[POPPERS];
byte finished;

proctype popper(byte me)
{
	byte k, t, nx, r, s;
	int w;
	bit got;
	do
	:: k < ROUNDS ->
		k++;
		got = 0;
#ifndef TICKETS
		rcu_ctr[me]++; /* slab.c refill: kva_rcu_read_lock */
#endif
		w = top; /* slab.c pop_stack, A4 / slab_reclaim.c kva__slab_ticket_get, A6 */
		do
		:: IDX(w) == 0 -> break
		:: else ->
			nx = next[IDX(w)]; /* slab.c pop_stack / slab_reclaim.c kva__slab_ticket_get: relaxed load of next */
			atomic {
				if
				:: top == w ->
#ifdef TICKETS
					top = ((TAG(w) + 1) % TAGS) * 8 + nx; /* slab_reclaim.c kva__slab_ticket_get: tag + 1 */
#else
					top = nx;
#endif
					t = IDX(w);
					assert(owner[t] == 0);
					owner[t] = me + 1;
					got = 1
				:: else -> w = top
				fi
			};
			if
			:: got -> break
			:: else -> skip
			fi
		od;
#ifndef TICKETS
		rcu_ctr[me]++; /* slab.c kva_slab_alloc: kva_rcu_read_unlock */
#endif
		if
		:: got ->
			/* in use; then given back */
			owner[t] = 0;
#if !defined(TICKETS) && !defined(MUTANT_PUSH_BEFORE_GRACE)
			/* retired: call_rcu -> the callback runs after a grace period */
			r = 0;
			do
			:: r < POPPERS ->
				s = rcu_ctr[r];
				if
				:: s & 1 -> rcu_ctr[r] != s
				:: else -> skip
				fi;
				r++
			:: else -> break
			od;
#endif
			/* slab.c push_batches, R4 / slab_reclaim.c ticket_push, R6 */
			w = top;
			do
			:: next[t] = IDX(w);
				atomic {
					if
					:: top == w ->
#ifdef TICKETS
						top = TAG(w) * 8 + t;
#else
						top = t;
#endif
						got = 0
					:: else -> w = top
					fi
				};
				if
				:: !got -> break
				:: else -> skip
				fi
			od
		:: else -> skip
		fi
	:: else -> break
	od;
	finished++
}

/* Nothing lost: once every popper is done, all N nodes are on the stack. */
active proctype monitor()
{
	byte i, t, c;
	finished == POPPERS;
	t = IDX(top);
	do
	:: t != 0 && c <= N -> assert(owner[t] == 0); c++; t = next[t]
	:: else -> break
	od;
	assert(c == N)
}

init
{
	byte i;
	atomic {
		next[1] = 2; next[2] = 3; next[3] = 0;
		top = 1;
		do
		:: i < POPPERS -> run popper(i); i++
		:: else -> break
		od
	}
}
