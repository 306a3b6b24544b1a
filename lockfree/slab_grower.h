/* SPDX-License-Identifier: Apache-2.0 */
/*
 * slab_grower: one background thread per process that keeps slabs' memory
 * ready ahead of need, so that neither the threads that allocate slots nor
 * the one that retires them ever maps, faults in or mallocs it themselves.
 *
 * What it keeps ready, polling (no wake-up call from the slabs' users, so a
 * scheduler step makes no system call for it): for every slab added, never-
 * used slots published and their pages warmed up to min(slots / 4, most)
 * ahead once it holds KVA_SLAB_GROWER_FROM slots (kva_slab_grow_ahead: an
 * engine that holds few requests keeps few ready, one that holds a million
 * keeps `most`); and free tickets for
 * flushes (kva_slab_tickets_ahead). It polls every 1 ms after a pass that
 * did work and backs off to every 16 ms while nothing needs it; it sleeps
 * without polling while no slab is added. A burst that drains a slab
 * between two polls makes its producers grow it themselves, as without a
 * grower (kva_slab_alloc).
 *
 * The thread starts on the first add (every signal blocked, not registered
 * with RCU: it never reads under RCU, and so never makes a forked child
 * unsafe). If it cannot start, nothing is kept ahead and the add still
 * succeeds: producers grow on demand and flushes allocate their tickets.
 *
 * Synchronisation table:
 *   call                          | may run concurrently with
 *   ------------------------------+------------------------------------
 *   kva_slab_grower_add / _remove | each other, the slab's users
 *   (the grower thread)           | everything but kva_slab_fini of an
 *                                 | added slab (remove it first)
 */
#ifndef KVA_LOCKFREE_SLAB_GROWER_H
#define KVA_LOCKFREE_SLAB_GROWER_H

#include <stdbool.h>
#include <stdint.h>

#include <kvadmit/lockfree/slab.h>

/* Tickets kept free for flushes (each carries up to a whole retired chain). */
#define KVA_SLAB_GROWER_TICKETS 1024u
/* Slabs smaller than this (their first three chunks) are left to grow on
 * their producers: small engines (tests, fuzzing, short-lived ones) then
 * grow the same way every run, whatever the grower's timing. */
#define KVA_SLAB_GROWER_FROM 1792u

struct kva_slab_ahead {
	struct kva_slab *slab;
	uint32_t most;                /* never-used slots kept ready, at most */
	struct kva_slab_ahead *next;  /* the grower's list (under its lock) */
};

/* Keeps a->slab ready from now on. Blocks while the grower is on a pass (a
 * cold path: engine create). */
void kva_slab_grower_add(struct kva_slab_ahead *a, struct kva_slab *s, uint32_t most);
/* Stops: once it returns the grower no longer touches a->slab (waits for a
 * pass in progress). Needed before kva_slab_fini. */
void kva_slab_grower_remove(struct kva_slab_ahead *a);

/* true on the grower thread: allocation fault injection (tests) leaves its
 * allocations alone, so where an armed fault lands never depends on its
 * timing. */
bool kva_slab_grower_thread(void);

/* Fork (kva_atfork_*): prepare waits for a pass in progress and holds the
 * grower off until parent or child; the child has no grower thread, and
 * its next add starts one. */
void kva_slab_grower_atfork_prepare(void);
void kva_slab_grower_atfork_parent(void);
void kva_slab_grower_atfork_child(void);

#endif
