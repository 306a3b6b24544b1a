/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fanin: per-thread lanes of inboxes and their non-empty mask (see fanin.h).
 *
 * Memory-order labels:
 *   R1/A1  a lane's bit set after its first node is linked -> the consumer's
 *          exchange, so a marked lane's first node is always linked
 */
#include <kvadmit/lockfree/fanin.h>
#include <kvadmit/lockfree/rcu_thread.h>

unsigned kva_fanin_lane(void)
{
	return kva_thread_index() % KVA_FANIN_LANES;
}

void kva_fanin_init(struct kva_fanin *f)
{
	atomic_init(&f->mask, 0);
	for (unsigned i = 0; i < KVA_FANIN_LANES; i++)
		kva_inbox_init(&f->lane[i]);
}

void kva_fanin_fini(struct kva_fanin *f)
{
	for (unsigned i = 0; i < KVA_FANIN_LANES; i++)
		kva_inbox_fini(&f->lane[i]);
}

bool kva_fanin_push(struct kva_fanin *f, struct kva_inbox_node *n)
{
	unsigned lane = kva_fanin_lane();
	if (!kva_inbox_push(&f->lane[lane], n))
		return false; /* the lane was not empty: its bit is set or being set */
	/* R1: the lane's first node is linked; pairs with A1 in the splice. */
	uint32_t old = atomic_fetch_or_explicit(&f->mask, 1u << lane, memory_order_release);
	return old == 0;
}

bool kva_fanin_splice_nonblocking(struct kva_fanin *f, struct kva_inbox_batch *batch)
{
	if (!atomic_load_explicit(&f->mask, memory_order_relaxed))
		return false;
	/* A1: pairs with R1 in kva_fanin_push. */
	uint32_t m = atomic_exchange_explicit(&f->mask, 0, memory_order_acquire);
	bool moved = false;
	while (m) {
		unsigned lane = (unsigned)__builtin_ctz(m);
		m &= m - 1;
		if (kva_inbox_splice_nonblocking(&f->lane[lane], batch))
			moved = true;
		else if (!kva_inbox_empty(&f->lane[lane]))
			/* not linked yet (cannot happen after R1, but never lose a
			 * lane): look again next time */
			atomic_fetch_or_explicit(&f->mask, 1u << lane, memory_order_relaxed);
	}
	return moved;
}
