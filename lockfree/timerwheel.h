/* SPDX-License-Identifier: Apache-2.0 */
/*
 * timerwheel: hierarchical timing wheel for one owner thread.
 *
 * Intrusive timers; O(1) arm and cancel; advance costs O(levels + timers
 * expired + timers cascaded), skipping empty slots with per-level occupancy
 * bitmaps, so a large jump of time is as cheap as a small one. Two costs
 * come on top: the timers of one bucket that fire together are merge-sorted
 * by (expiry, arm order) — linear when they were armed in that order — and
 * an advance within the current tick re-examines that tick's not-yet-due
 * timers. Timers more than 2^48 ticks ahead wait on an overflow list that is
 * rescanned only when time crosses a 2^48-tick boundary.
 *
 * Cascading moves a whole slot at once: when time enters a level-2 slot
 * (about 4.3 s at a 1 ms tick), every timer due in it is re-placed in that
 * one advance. For a family of timers armed in expiry order (the same
 * timeout from a clock that never goes back, e.g. one deadline per request)
 * that is O(family) in one call, so such timers go on the ordered lane
 * instead (kva_timerwheel_arm_ordered): a list kept sorted by expiry, armed
 * at the tail in O(1), fired from the head in O(fired), never cascaded.
 *
 * Semantics are exact, not tick-rounded: a timer fires in the first
 * kva_timerwheel_advance() whose now_ns >= its expiry. Within one advance,
 * timers fire in ascending expiry, ties in the order they were armed. The
 * tick only sets the granularity of the buckets (efficiency, not results).
 * Time never goes backwards: an advance to an earlier now is a no-op. A
 * timer armed at KVA_TIMER_NEVER (UINT64_MAX, where saturated deadlines
 * land) stays armed and never fires, even once now reaches UINT64_MAX.
 *
 * The callback may arm or cancel any timer, including the one firing; a
 * timer armed from a callback fires no earlier than the next advance. A
 * callback must not call kva_timerwheel_advance (it would return 0).
 *
 * Synchronisation: none. Every call from the owner thread only.
 */
#ifndef KVA_LOCKFREE_TIMERWHEEL_H
#define KVA_LOCKFREE_TIMERWHEEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KVA_TIMERWHEEL_LEVELS 8
#define KVA_TIMER_NEVER UINT64_MAX
#define KVA_TIMERWHEEL_SLOTS 64 /* per level: 6 bits of ticks each */

struct kva_timer {
	struct kva_timer *next, *prev; /* prev == NULL: not armed */
	uint64_t expires;
	uint64_t seq; /* arm order, breaks ties */
};

struct kva_timer_list {
	struct kva_timer head; /* sentinel */
};

struct kva_timerwheel {
	uint64_t tick_ns;
	unsigned tick_shift; /* log2(tick_ns) when a power of two: no division */
	uint64_t now_ns;   /* last advance */
	uint64_t now_tick; /* now_ns / tick_ns */
	uint64_t seq;
	size_t count; /* armed timers */
	uint64_t occupied[KVA_TIMERWHEEL_LEVELS]; /* bit s: slot s may be non-empty (lazy) */
	struct kva_timer_list slot[KVA_TIMERWHEEL_LEVELS][KVA_TIMERWHEEL_SLOTS];
	struct kva_timer_list overflow; /* beyond the last level */
	struct kva_timer_list pending;  /* armed when due already: next advance */
	struct kva_timer_list ordered;  /* ascending (expires, seq): the ordered lane */
	bool in_advance;                /* callbacks running: advance refuses */
};

typedef void (*kva_timer_fn)(struct kva_timer *t, void *arg);

/* tick_ns > 0; a power of two spares a 64-bit division per advance. */
void kva_timerwheel_init(struct kva_timerwheel *w, uint64_t tick_ns, uint64_t now_ns);
static inline void kva_timer_init(struct kva_timer *t)
{
	t->next = t->prev = NULL;
	t->expires = 0;
	t->seq = 0;
}
static inline bool kva_timer_armed(const struct kva_timer *t) { return t->prev != NULL; }

/* Arms (or re-arms) t to fire at expires_ns. An expiry <= the wheel's now
 * fires at the next advance. */
void kva_timerwheel_arm(struct kva_timerwheel *w, struct kva_timer *t, uint64_t expires_ns);
/* The same, on the ordered lane: O(1) when expires_ns is not before the
 * lane's last expiry (the lane's purpose), else O(timers after it on the
 * lane). Firing order and exactness are the wheel's: the two merge. */
void kva_timerwheel_arm_ordered(struct kva_timerwheel *w, struct kva_timer *t,
                                uint64_t expires_ns);
/* No-op when t is not armed (on the wheel or the lane). */
void kva_timerwheel_cancel(struct kva_timerwheel *w, struct kva_timer *t);
/* Fires every timer due at now_ns (each is disarmed before its callback).
 * Returns how many fired. */
size_t kva_timerwheel_advance(struct kva_timerwheel *w, uint64_t now_ns, kva_timer_fn fn, void *arg);

static inline size_t kva_timerwheel_count(const struct kva_timerwheel *w) { return w->count; }

#endif
