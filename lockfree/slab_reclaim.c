/* SPDX-License-Identifier: Apache-2.0 */
/*
 * slab_reclaim: reclaim tickets and kvadmit's call_rcu thread (see
 * slab_reclaim.h).
 *
 * Tickets. A flushed batch of retired slots travels through call_rcu on a ticket, not
 * in the slots' own memory, so a slab can be finished with callbacks still
 * queued: kva_slab_fini needs no urcu_memb_barrier (liburcu 0.13's call_rcu
 * thread sleeps 10 ms between batches, which made every engine teardown cost
 * 10 ms). A callback finds its slab by serial in the registry, under
 * registry_lock (fini unlinks it under the same lock before freeing), and
 * only hands its ticket back when the slab is gone.
 *
 * Tickets live in segments that are never freed (plain malloc: they outlive
 * every slab). The free list is a Treiber stack of ticket indices whose top
 * carries a 32-bit tag bumped by every pop: any retiring thread pops, call_rcu
 * threads push, and a pop whose top was popped and pushed again meanwhile
 * fails its CAS on the tag.
 *
 * The call_rcu thread. Flushes go to a call_rcu thread of kvadmit's own, created real-time
 * (URCU_CALL_RCU_RT): it polls its queue (every 10 ms when idle) instead of
 * sleeping on a futex, so a flush on the scheduler thread is a wait-free
 * enqueue and never a futex wake. Created once by the first kva_slab_init
 * with every signal blocked (as the default one, rcu_thread.c); until then,
 * or if it could not be created, flushes use the thread's usual call_rcu
 * data. liburcu's fork handlers pause it; in a child liburcu frees it, and
 * the next kva_slab_init there creates another.
 *
 * Memory-order labels:
 *   R6/A6  a ticket pushed on the ticket free list -> the thread that pops it
 *   R7/A7  a ticket segment published -> a thread reading a ticket by index
 *   R11/A11 kvadmit's call_rcu data created -> a call that uses it
 */
#include <kvadmit/lockfree/slab_reclaim.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#include <kvadmit/lockfree/slab.h>

#define TICKET_SEG_SHIFT 8u
#define TICKET_SEGS 4096u

static _Atomic(struct kva__slab_ticket *) ticket_seg[TICKET_SEGS];
static _Atomic uint32_t ticket_nsegs;
static _Atomic uint64_t ticket_top; /* pop tag << 32 | (index + 1) */
/* Tickets on the free list (an estimate: pushes and pops count it apart
 * from the CAS that moves them). */
static _Atomic int64_t ticket_free_n;
/* Set once kva_slab_tickets_ahead ran: from then on a flush never grows the
 * pool itself (no malloc on the retiring thread), it waits for the grower. */
static _Atomic bool tickets_kept_ahead;

static struct kva__slab_ticket *ticket_at(uint32_t i)
{
	/* A7: pairs with R7 in ticket_grow — the segment's tickets are set up. */
	struct kva__slab_ticket *seg = atomic_load_explicit(&ticket_seg[i >> TICKET_SEG_SHIFT],
	                                          memory_order_acquire);
	return &seg[i & ((1u << TICKET_SEG_SHIFT) - 1)];
}

/* Pushes the chain first..last (linked by next, n tickets) on the free list. */
static void ticket_push(struct kva__slab_ticket *first, struct kva__slab_ticket *last, uint32_t n)
{
	atomic_fetch_add_explicit(&ticket_free_n, n, memory_order_relaxed);
	uint64_t top = atomic_load_explicit(&ticket_top, memory_order_relaxed), want;
	do {
		atomic_store_explicit(&last->next, (uint32_t)top, memory_order_relaxed);
		want = (top & ~(uint64_t)UINT32_MAX) | (first->self + 1u);
		/* R6: the tickets' links, and the callback's last reads of them, to
		 * the popper (A6). */
	} while (!atomic_compare_exchange_weak_explicit(&ticket_top, &top, want, memory_order_release,
	                                                memory_order_relaxed));
}

/* A new segment: its first ticket for the caller, the rest on the free list.
 * NULL when no segment is left or malloc fails (that segment stays a hole). */
static struct kva__slab_ticket *ticket_grow(void)
{
	uint32_t k = atomic_load_explicit(&ticket_nsegs, memory_order_relaxed);
	do {
		if (k >= TICKET_SEGS)
			return NULL;
	} while (!atomic_compare_exchange_weak_explicit(&ticket_nsegs, &k, k + 1,
	                                                memory_order_relaxed, memory_order_relaxed));
	const uint32_t n = 1u << TICKET_SEG_SHIFT;
	struct kva__slab_ticket *seg = malloc(n * sizeof(*seg));
	if (!seg)
		return NULL;
	for (uint32_t i = 0; i < n; i++) {
		seg[i].self = (k << TICKET_SEG_SHIFT) + i;
		atomic_init(&seg[i].next, i + 1 < n ? seg[i].self + 2u : 0u);
	}
	/* R7: the tickets' indices, to ticket_at (A7). */
	atomic_store_explicit(&ticket_seg[k], seg, memory_order_release);
	ticket_push(&seg[1], &seg[n - 1], n - 1);
	return &seg[0];
}

struct kva__slab_ticket *kva__slab_ticket_get(void)
{
	/* A6: pairs with R6 in ticket_push. */
	uint64_t top = atomic_load_explicit(&ticket_top, memory_order_acquire);
	for (;;) {
		uint32_t i = (uint32_t)top;
		if (!i)
			return atomic_load_explicit(&tickets_kept_ahead, memory_order_relaxed)
			               ? NULL
			               : ticket_grow();
		struct kva__slab_ticket *t = ticket_at(i - 1);
		uint32_t nx = atomic_load_explicit(&t->next, memory_order_relaxed);
		uint64_t want = (((top >> 32) + 1u) << 32) | nx;
		if (atomic_compare_exchange_weak_explicit(&ticket_top, &top, want, memory_order_acquire,
		                                          memory_order_acquire)) {
			atomic_fetch_sub_explicit(&ticket_free_n, 1, memory_order_relaxed);
			return t;
		}
	}
}

void kva__slab_ticket_put(struct kva__slab_ticket *t)
{
	ticket_push(t, t, 1);
}

int kva_slab_tickets_ahead(uint32_t low)
{
	while (atomic_load_explicit(&ticket_free_n, memory_order_relaxed) < (int64_t)low) {
		struct kva__slab_ticket *t = ticket_grow();
		if (!t)
			return -ENOMEM;
		ticket_push(t, t, 1);
	}
	/* Only now: a flush between the grower's start and its first fill grows
	 * tickets itself rather than finding none (test_retire_flush saw that). */
	atomic_store_explicit(&tickets_kept_ahead, true, memory_order_relaxed);
	return 0;
}

static _Atomic(struct call_rcu_data *) reclaimer;
/* The first slab init that wins this creates it; no lock, so a fork in the
 * middle leaves no lock taken (the child starts over). */
static _Atomic int reclaimer_claimed;

void kva__slab_reclaimer_start(void)
{
	int no = 0;
	if (atomic_load_explicit(&reclaimer_claimed, memory_order_relaxed) ||
	    !atomic_compare_exchange_strong_explicit(&reclaimer_claimed, &no, 1,
	                                             memory_order_relaxed, memory_order_relaxed))
		return;
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	struct call_rcu_data *crdp = urcu_memb_create_call_rcu_data(URCU_CALL_RCU_RT, -1);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	/* R11: the call_rcu data, to every call (A11). */
	atomic_store_explicit(&reclaimer, crdp, memory_order_release);
}

void kva__slab_call_rcu(struct rcu_head *head, void (*func)(struct rcu_head *head))
{
	/* A11: pairs with R11 in kva__slab_reclaimer_start. */
	struct call_rcu_data *rt = atomic_load_explicit(&reclaimer, memory_order_acquire), *own = NULL;
	if (rt) {
		own = urcu_memb_get_thread_call_rcu_data();
		urcu_memb_set_thread_call_rcu_data(rt);
	}
	kva_rcu_call(head, func);
	if (rt)
		urcu_memb_set_thread_call_rcu_data(own);
}

void kva__slab_reclaimer_atfork_child(void)
{
	/* liburcu's child handler frees every call_rcu data but its default */
	atomic_store_explicit(&reclaimer, NULL, memory_order_relaxed);
	atomic_store_explicit(&reclaimer_claimed, 0, memory_order_relaxed);
}
