/* SPDX-License-Identifier: Apache-2.0 */
/*
 * slab.pml: slot retirement and reuse with generations (lockfree/slab.{h,c},
 * reservations/lifecycle.c kva__rec_find, reservations/intake.c). One slot goes
 * through INCARNATIONS incarnations of the same request id (rule id-reuse: an
 * id may be submitted again), each alloc -> fill -> publish -> retire -> grace
 * period -> free again. READERS threads hold the handle of the first
 * incarnation and use it late, as kva_cancel / kva_query / kva_copy_done /
 * kva_lookup_answer do: inside an RCU read-side section they look the slot up
 * (bounds, generation, id), then read and write the record they matched, and
 * may hand the scheduler an event naming the handle, which the step looks up
 * again (step_events.c dispatch_event, lifecycle.c kva__rec_find).
 *
 * Properties:
 *   - a stale handle never touches a later incarnation: whatever a reader
 *     (or the step, for its event) does after a match happens to the
 *     incarnation the handle names (assert inc == 1);
 *   - the old caller gets its documented error: a lookup that does not
 *     match happens only once that incarnation was retired (-ENOENT);
 *   - a slot is reused only after every read-side section that could have
 *     matched it ended (the same assertions, with the grace period).
 *
 * RCU is modelled by its guarantee, as liburcu states it (and proves with
 * its own Spin models): a reader section that began before a grace period
 * started ends before it ends. Each reader has a counter, odd inside a
 * section; the grace period waits, for each reader seen inside, until its
 * counter moves.
 *
 * Memory model: the argument uses R2/A2 of slab.c (publish is a release
 * store of the odd generation, lookup an acquire load: a matching reader
 * sees the filled record), the release store of the even generation at
 * retire (lifecycle.c kva__rec_retire, slab.c kva_slab_retire) followed by
 * call_rcu (slab.c kva_slab_flush), and the RCU
 * guarantee above (urcu-memb: read_lock/unlock with smp_mb vs
 * synchronize_rcu's membarrier). A reader that loads the old odd
 * generation inside its section is one whose section started before the
 * grace period did (otherwise it would read the even value or later, by
 * coherence of `gen` and the grace period's ordering), so it is one the
 * grace period waits for; that is exactly the SC interleaving modelled.
 *
 * A slot's first incarnation starts from a never-used slot: chunk memory
 * comes zeroed and the slab writes none of it (fresh.pml models how such
 * slots are handed out), so its generation is 0 and the slot free, which is
 * this model's initial state (gen = 0, slot_free = 1).
 *
 * Mutants: MUTANT_NO_GEN_CHECK (lookup compares only the id: a stale
 * handle matches the next incarnation of the same id), MUTANT_NO_GRACE_PERIOD
 * (retired slots are reusable at once: a reader that matched sees the slot
 * refilled), MUTANT_GEN_WRAPS (a 2-bit generation: after two reuses a stale
 * handle's generation comes back; the C generation is 32 bits, 2^31
 * incarnations of one slot).
 */

#ifndef INCARNATIONS
#define INCARNATIONS 3
#endif
#ifndef READERS
#define READERS 1
#endif
#ifdef MUTANT_GEN_WRAPS
#define GEN_MASK 3
#else
#define GEN_MASK 255
#endif

byte gen;            /* kva_slab_hdr.gen: even free, odd live */
byte inc;            /* which incarnation's record the slot holds */
byte retired_upto;   /* incarnations retired so far */
byte h1gen;          /* the first incarnation's handle (gen), 0: not yet */
byte rcu_ctr[READERS];
bit slot_free = 1;
byte pending;        /* events naming the first handle, not yet handled */
bit cancel_requested[INCARNATIONS + 1];

inline lookup(g, found)
{
	/* slab.h kva_slab_lookup, A2: (gen & 1) && hdr.gen == gen, then
	 * lifecycle.c kva__rec_find: r->id == id; every incarnation has the same id here */
#ifdef MUTANT_NO_GEN_CHECK
	found = (gen & 1)
#else
	found = (g & 1) && (gen == g)
#endif
}

proctype reader(byte me)
{
	byte k, g;
	bit found, old;
	h1gen != 0;
	g = h1gen;
	do
	:: k < 2 ->
		k++;
		rcu_ctr[me]++; /* kva_rcu_read_lock */
		lookup(g, found);
		if
		:: found ->
			/* intake.c kva_cancel, A2: reads the matched record's state... */
			assert(inc == 1);
			/* ...and intake.c kva_cancel writes to it (cancel_requested) */
			d_step { assert(inc == 1); old = cancel_requested[inc]; cancel_requested[inc] = 1 };
			if
			:: !old -> pending++ /* intake.c kva_cancel: an event naming the handle */
			:: else -> skip
			fi
		:: else -> assert(retired_upto >= 1) /* -ENOENT: it was retired */
		fi;
		rcu_ctr[me]++ /* kva_rcu_read_unlock */
	:: else -> break
	od
}

active proctype owner()
{
	byte k = 1, r, s, g;
	bit found;
	do
	:: k <= INCARNATIONS ->
		slot_free; /* slab.c kva_slab_alloc: a free slot (from a free stack; the first time from the never-used range) */
		slot_free = 0;
		inc = k; /* the submitter fills the record */
		/* slab.c kva_slab_publish, R2: next odd generation */
		g = (gen + ((gen & 1) -> 2 : 1)) & GEN_MASK;
		gen = g;
		if
		:: k == 1 -> h1gen = g
		:: else -> skip
		fi;
		/* the request lives; the step handles events naming the old handle */
		do
		:: pending > 0 ->
			pending--;
			lookup(h1gen, found); /* step_events.c dispatch_event: lifecycle.c kva__rec_find */
			if
			:: found -> assert(inc == 1) /* admit.c kva__admit_cancel on the named record */
			:: else -> skip
			fi
		:: break
		od;
		/* lifecycle.c kva__rec_retire -> slab.c kva_slab_retire: even generation, release */
		atomic { gen = (gen + (gen & 1)) & GEN_MASK; retired_upto = k };
		/* slab.c kva_slab_flush -> call_rcu; slab.c reclaim_ticket after a grace period */
#ifndef MUTANT_NO_GRACE_PERIOD
		r = 0;
		do
		:: r < READERS ->
			s = rcu_ctr[r];
			if
			:: s & 1 -> rcu_ctr[r] != s /* wait for that section to end */
			:: else -> skip
			fi;
			r++
		:: else -> break
		od;
#endif
		slot_free = 1; /* slab.c reclaim_chain -> push_batches: on a free stack again */
		k++
	:: else -> break
	od;
	/* drain the events still queued */
	do
	:: pending > 0 ->
		pending--;
		lookup(h1gen, found);
		if
		:: found -> assert(inc == 1)
		:: else -> skip
		fi
	:: else -> break
	od
}

init
{
	byte i;
	atomic {
		do
		:: i < READERS -> run reader(i); i++
		:: else -> break
		od
	}
}
