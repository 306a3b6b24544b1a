/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fanin: multi-producer single-consumer intake with one lane per producer
 * thread. Each lane is an inbox (a cds_wfcq); a producer pushes onto its own
 * thread's lane, so two producer threads never write the same tail line. A
 * mask word has one bit per non-empty lane: a producer sets its lane's bit
 * only when its push found the lane empty (after linking its node), and the
 * consumer exchanges the mask and splices just those lanes. A step that
 * finds no bit set reads one line.
 *
 * Order: FIFO per lane (per producer thread, for the first 16 threads; later
 * threads share lanes, still FIFO per thread). Across threads there is no
 * order: an event a thread pushes after learning of another thread's push may
 * be spliced before it in the same batch.
 *
 * Synchronisation table:
 *   call                          | may run concurrently with
 *   ------------------------------+-------------------------------------------
 *   kva_fanin_push                | itself (any threads), the consumer calls
 *   kva_fanin_splice_nonblocking, | kva_fanin_push; NOT with each other or
 *   kva_fanin_drain_blocking      | themselves (one consumer)
 *   kva_fanin_empty               | anything (a hint)
 */
#ifndef KVA_LOCKFREE_FANIN_H
#define KVA_LOCKFREE_FANIN_H

#include <stdalign.h>
#include <stdatomic.h>

#include <kvadmit/lockfree/inbox.h>

#define KVA_FANIN_LANES 16

struct kva_fanin {
	alignas(64) _Atomic uint32_t mask; /* bit i: lane i may hold nodes */
	struct kva_inbox lane[KVA_FANIN_LANES];
};

void kva_fanin_init(struct kva_fanin *f);
void kva_fanin_fini(struct kva_fanin *f);

/* The calling thread's lane (assigned round-robin on first use; also a good
 * index for other per-thread shards). */
unsigned kva_fanin_lane(void);

/* Any thread, wait-free. Returns true when the whole fan-in was empty before
 * this push (the caller may use it to wake the consumer). */
bool kva_fanin_push(struct kva_fanin *f, struct kva_inbox_node *n);

/* Consumer only, never waits. Appends the nodes of every lane marked
 * non-empty to *batch, lane by lane. Returns true if anything was moved. */
bool kva_fanin_splice_nonblocking(struct kva_fanin *f, struct kva_inbox_batch *batch);

/* Any thread: a hint only. */
static inline bool kva_fanin_empty(struct kva_fanin *f)
{
	return atomic_load_explicit(&f->mask, memory_order_relaxed) == 0;
}

#endif
