/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fork handlers (kvadmit.h, "threads, signals, fork"): liburcu's call_rcu
 * threads are paused before the fork and restarted in the child, and the
 * slab registry lock, which call_rcu callbacks take, is held across it so
 * the child never inherits it taken; the slab grower is held off (between
 * two passes) and the child starts its own on its next engine.
 *
 * Order: liburcu first (its paused call_rcu threads may need the registry
 * lock to finish the batch they are on), the registry lock last; the reverse
 * after the fork.
 */
#include "kvadmit/kvadmit.h"

#include "rcu_thread.h"
#include "slab.h"
#include "slab_grower.h"

void kva_atfork_prepare(void)
{
	kva_slab_grower_atfork_prepare(); /* needs no other lock: first */
	kva_rcu_atfork_prepare();
	kva_slab_atfork_prepare();
}

void kva_atfork_parent(void)
{
	kva_slab_atfork_parent();
	kva_rcu_atfork_parent();
	kva_slab_grower_atfork_parent();
}

void kva_atfork_child(void)
{
	kva_slab_atfork_child();
	kva_rcu_atfork_child();
	kva_slab_grower_atfork_child();
}
