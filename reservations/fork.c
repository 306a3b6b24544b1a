/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fork handlers (kvadmit.h, "threads, signals, fork"): liburcu's call_rcu
 * threads are paused before the fork and restarted in the child; kvadmit's
 * registration lock is held across it, so no thread registers or
 * unregisters between the count that decides whether the child may run
 * grace periods and the fork (rcu_thread.c kva_rcu_atfork_prepare); the
 * slab registry lock, which call_rcu callbacks take, is held across it so
 * the child never inherits it taken; the slab grower is held off (between
 * two passes) and the child starts its own on its next engine.
 *
 * Order: the grower, then the registration lock and liburcu (both in the
 * rcu handler: the call_rcu threads it pauses never take the registration
 * lock, and may need the registry lock to finish the batch they are on),
 * the registry lock last; the reverse after the fork. No other thread holds
 * the registration lock while it waits for any of the others.
 */
#include "kvadmit/kvadmit.h"

#include <kvadmit/lockfree/rcu_thread.h>
#include <kvadmit/lockfree/slab.h>
#include <kvadmit/lockfree/slab_grower.h>

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
