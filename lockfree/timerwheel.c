/* SPDX-License-Identifier: Apache-2.0 */
/*
 * timerwheel: placement, cascading and ordered expiry of intrusive timers.
 *
 * This file owns every list a timer can be on: the wheel slots, the
 * overflow list, the pending list (due already when armed), the ordered
 * lane and, during an advance, the on-stack list of timers about to fire.
 *
 * Placement is relative to the current tick (now_tick): a timer whose tick
 * differs from now_tick in 6-bit group L (group 0 = the low 6 bits) and in
 * no higher group sits at level L, slot = its group-L digit; a timer in the
 * current tick sits at level 0 in slot now_tick's digit; a difference above
 * group 7 puts it on the overflow list. So a timer at level L shares
 * now_tick's digits above L and has a larger digit at L (at level 0: not
 * smaller), which orders the buckets: all of level 0 < all of level 1 < ...
 * < overflow, and within a level the slots ascend.
 *
 * Advancing from tick c to tick n, let H be the highest group where c and n
 * differ: every level below H is due, level H is due below n's digit, the
 * timers in level H's slot at n's digit (or the overflow list when H >= 8)
 * are re-placed relative to n (due ones fire, the rest drop to a lower
 * level), and everything above stays put. A re-placement out of a level
 * strictly lowers the timer's level, so it is cascaded at most LEVELS times
 * in its life; the overflow list is rescanned only when time crosses a
 * 2^48-tick boundary. A jump of any size thus visits one bitmap word per
 * level plus the slots it empties.
 *
 * Bitmaps are cleared lazily: cancel leaves a slot's bit set, and the
 * advance that reaches the slot finds it empty and clears it (amortised
 * against the cancel).
 *
 * Exactness: due timers are gathered slot by slot in ascending tick ranges,
 * each slot's timers sorted by (expires, seq), and fired from one list after
 * the wheel is already at the new time. A callback therefore sees a
 * consistent wheel: arming places relative to the new time (a due expiry
 * goes to the pending list, fired by the next advance), and arming or
 * cancelling a timer that is waiting to fire simply unlinks it from the
 * firing list.
 */
#include <kvadmit/lockfree/timerwheel.h>

#define GROUP_BITS 6
#define SLOT_MASK (KVA_TIMERWHEEL_SLOTS - 1)

_Static_assert(KVA_TIMERWHEEL_SLOTS == 1 << GROUP_BITS, "one bitmap word per level");
_Static_assert(64 > KVA_TIMERWHEEL_LEVELS * GROUP_BITS, "levels must fit in a 64-bit tick");

static void list_init(struct kva_timer_list *l)
{
	l->head.next = l->head.prev = &l->head;
}

static bool list_empty(const struct kva_timer_list *l)
{
	return l->head.next == &l->head;
}

static void list_append(struct kva_timer_list *l, struct kva_timer *t)
{
	t->prev = l->head.prev;
	t->next = &l->head;
	l->head.prev->next = t;
	l->head.prev = t;
}

static void list_unlink(struct kva_timer *t)
{
	t->prev->next = t->next;
	t->next->prev = t->prev;
}

/* Empties l into a NULL-terminated chain linked by `next`. The timers keep
 * a non-NULL prev, so they still count as armed while no callback can run. */
static struct kva_timer *list_take(struct kva_timer_list *l)
{
	if (list_empty(l))
		return NULL;
	struct kva_timer *first = l->head.next;
	l->head.prev->next = NULL;
	list_init(l);
	return first;
}

static inline bool fires_before(const struct kva_timer *a, const struct kva_timer *b)
{
	return a->expires < b->expires || (a->expires == b->expires && a->seq < b->seq);
}

static struct kva_timer *merge(struct kva_timer *a, struct kva_timer *b)
{
	struct kva_timer head, *tail = &head;

	while (a && b) {
		if (fires_before(b, a)) {
			tail->next = b;
			b = b->next;
		} else {
			tail->next = a;
			a = a->next;
		}
		tail = tail->next;
	}
	tail->next = a ? a : b;
	return head.next;
}

/* Natural merge sort of a chain: ascending runs go into power-of-two bins
 * (as in Linux's list_sort). One pass when the chain is already sorted,
 * which is the usual case: timers of one bucket tend to be armed in expiry
 * order. (expires, seq) is unique, so stability does not matter. */
static struct kva_timer *sort_chain(struct kva_timer *list)
{
	unsigned i;

	if (!list || !list->next)
		return list; /* before zeroing bin[]: the common, empty case is free */
	struct kva_timer *bin[64] = {NULL};
	while (list) {
		struct kva_timer *run = list, *t = list;
		while (t->next && !fires_before(t->next, t))
			t = t->next;
		list = t->next;
		t->next = NULL;
		for (i = 0; bin[i]; i++) {
			run = merge(bin[i], run);
			bin[i] = NULL;
		}
		bin[i] = run;
	}
	struct kva_timer *out = NULL;
	for (i = 0; i < 64; i++)
		if (bin[i])
			out = merge(bin[i], out);
	return out;
}

static void append_chain(struct kva_timer_list *due, struct kva_timer *chain)
{
	while (chain) {
		struct kva_timer *next = chain->next;
		list_append(due, chain);
		chain = next;
	}
}

/* Sorts a chain and appends it to the firing list. */
static void append_sorted(struct kva_timer_list *due, struct kva_timer *chain)
{
	append_chain(due, sort_chain(chain));
}

/* Puts an armed, unlinked timer where it belongs relative to now. */
static inline uint64_t tick_of(const struct kva_timerwheel *w, uint64_t ns)
{
	return w->tick_shift || w->tick_ns == 1 ? ns >> w->tick_shift : ns / w->tick_ns;
}

static void place(struct kva_timerwheel *w, struct kva_timer *t)
{
	if (t->expires == KVA_TIMER_NEVER) { /* armed, never due: where nothing fires */
		list_append(&w->overflow, t);
		return;
	}
	if (t->expires <= w->now_ns) {
		list_append(&w->pending, t);
		return;
	}
	/* expires > now_ns, so tick >= now_tick. */
	uint64_t tick = tick_of(w, t->expires);
	uint64_t diff = tick ^ w->now_tick;
	unsigned level = diff ? (unsigned)(63 - __builtin_clzll(diff)) / GROUP_BITS : 0;

	if (level >= KVA_TIMERWHEEL_LEVELS) {
		list_append(&w->overflow, t);
		return;
	}
	unsigned s = (unsigned)(tick >> (GROUP_BITS * level)) & SLOT_MASK;
	list_append(&w->slot[level][s], t);
	w->occupied[level] |= UINT64_C(1) << s;
}

void kva_timerwheel_init(struct kva_timerwheel *w, uint64_t tick_ns, uint64_t now_ns)
{
	w->tick_ns = tick_ns ? tick_ns : 1; /* no abort on bad input */
	w->tick_shift = (w->tick_ns & (w->tick_ns - 1)) ? 0 : (unsigned)__builtin_ctzll(w->tick_ns);
	w->now_ns = now_ns;
	w->now_tick = tick_of(w, now_ns);
	w->seq = 0;
	w->count = 0;
	for (unsigned l = 0; l < KVA_TIMERWHEEL_LEVELS; l++) {
		w->occupied[l] = 0;
		for (unsigned s = 0; s < KVA_TIMERWHEEL_SLOTS; s++)
			list_init(&w->slot[l][s]);
	}
	list_init(&w->overflow);
	list_init(&w->pending);
	list_init(&w->ordered);
	w->in_advance = false;
}

void kva_timerwheel_arm(struct kva_timerwheel *w, struct kva_timer *t, uint64_t expires_ns)
{
	if (kva_timer_armed(t))
		list_unlink(t);
	else
		w->count++;
	t->expires = expires_ns;
	t->seq = w->seq++;
	place(w, t);
}

void kva_timerwheel_arm_ordered(struct kva_timerwheel *w, struct kva_timer *t,
                                uint64_t expires_ns)
{
	if (kva_timer_armed(t))
		list_unlink(t);
	else
		w->count++;
	t->expires = expires_ns;
	t->seq = w->seq++; /* the largest: after every equal expiry */
	struct kva_timer *at = w->ordered.head.prev;
	while (at != &w->ordered.head && at->expires > expires_ns)
		at = at->prev;
	t->prev = at;
	t->next = at->next;
	at->next->prev = t;
	at->next = t;
}

void kva_timerwheel_cancel(struct kva_timerwheel *w, struct kva_timer *t)
{
	if (!kva_timer_armed(t))
		return;
	list_unlink(t);
	t->next = t->prev = NULL;
	w->count--;
}

/* Moves the slots of `level` selected by mask, in ascending order, onto the
 * firing list. */
static void drain_slots(struct kva_timerwheel *w, struct kva_timer_list *due, unsigned level,
			uint64_t mask)
{
	w->occupied[level] &= ~mask;
	while (mask) {
		unsigned s = (unsigned)__builtin_ctzll(mask);
		mask &= mask - 1;
		append_sorted(due, list_take(&w->slot[level][s]));
	}
}

/* Re-places a chain relative to the (already updated) now: due timers are
 * sorted onto the firing list, the others drop to their new level. */
static void replace_chain(struct kva_timerwheel *w, struct kva_timer_list *due,
			  struct kva_timer *chain)
{
	struct kva_timer *fire = NULL, **fire_tail = &fire;

	while (chain) {
		struct kva_timer *t = chain;
		chain = chain->next;
		if (t->expires <= w->now_ns && t->expires != KVA_TIMER_NEVER) {
			*fire_tail = t;
			fire_tail = &t->next;
		} else {
			place(w, t);
		}
	}
	*fire_tail = NULL;
	append_sorted(due, fire);
}

/* Gathers, in firing order, every wheel timer due at now_ns onto `due` and
 * moves the wheel to now_ns. */
static void collect_wheel(struct kva_timerwheel *w, struct kva_timer_list *due, uint64_t now_ns)
{
	const uint64_t cur = w->now_tick, nt = tick_of(w, now_ns);

	/* Due before the previous now: earlier than anything in the wheel. */
	append_sorted(due, list_take(&w->pending));

	if (nt == cur) {
		/* Within the same tick only the current slot can hold due timers;
		 * its not-yet-due ones go straight back (place() picks the same
		 * slot, since their tick is still now_tick). */
		unsigned s = (unsigned)cur & SLOT_MASK;
		struct kva_timer *chain = list_take(&w->slot[0][s]);
		w->occupied[0] &= ~(UINT64_C(1) << s);
		w->now_ns = now_ns;
		replace_chain(w, due, chain);
		return;
	}

	unsigned h = (unsigned)(63 - __builtin_clzll(cur ^ nt)) / GROUP_BITS;
	unsigned below = h < KVA_TIMERWHEEL_LEVELS ? h : KVA_TIMERWHEEL_LEVELS;
	struct kva_timer *rest;

	for (unsigned l = 0; l < below; l++)
		drain_slots(w, due, l, w->occupied[l]);
	if (h < KVA_TIMERWHEEL_LEVELS) {
		/* Slots below n's digit are wholly before nt (slots below cur's digit
		 * are empty by the placement rule); n's own slot straddles nt. */
		unsigned n = (unsigned)(nt >> (GROUP_BITS * h)) & SLOT_MASK;
		drain_slots(w, due, h, w->occupied[h] & ((UINT64_C(1) << n) - 1));
		rest = list_take(&w->slot[h][n]);
		w->occupied[h] &= ~(UINT64_C(1) << n);
	} else {
		rest = list_take(&w->overflow);
	}
	w->now_ns = now_ns;
	w->now_tick = nt;
	replace_chain(w, due, rest);
}

/* The wheel's due timers, and the lane's due head merged into them: both
 * are sorted by (expires, seq), so the merge keeps the firing order exact.
 * O(due timers) for the lane, however many wait on it. */
static void collect(struct kva_timerwheel *w, struct kva_timer_list *due, uint64_t now_ns)
{
	collect_wheel(w, due, now_ns);
	struct kva_timer *first = w->ordered.head.next, *last = NULL;
	for (struct kva_timer *t = first; t != &w->ordered.head; t = t->next) {
		if (t->expires > now_ns || t->expires == KVA_TIMER_NEVER)
			break;
		last = t;
	}
	if (!last)
		return;
	/* cut [first, last] off the lane into a NULL-terminated chain */
	w->ordered.head.next = last->next;
	last->next->prev = &w->ordered.head;
	last->next = NULL;
	append_chain(due, merge(list_take(due), first));
}

size_t kva_timerwheel_advance(struct kva_timerwheel *w, uint64_t now_ns, kva_timer_fn fn, void *arg)
{
	struct kva_timer_list due;
	size_t fired = 0;

	if (now_ns < w->now_ns || w->in_advance)
		return 0;
	if (!w->count) { /* nothing armed anywhere: only the clock moves */
		w->now_ns = now_ns;
		w->now_tick = tick_of(w, now_ns);
		return 0;
	}
	list_init(&due);
	collect(w, &due, now_ns);

	/* Callbacks may unlink anything from `due` (cancel, re-arm), so always
	 * take the current head. */
	w->in_advance = true;
	while (!list_empty(&due)) {
		struct kva_timer *t = due.head.next;
		list_unlink(t);
		t->next = t->prev = NULL;
		w->count--;
		fired++;
		fn(t, arg);
	}
	w->in_advance = false;
	return fired;
}
