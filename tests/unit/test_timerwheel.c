/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for lockfree/timerwheel. The main test replays random
 * arm/cancel/advance schedules (with callbacks that arm and cancel) against a
 * plain reference model: at each advance the expected firings are every armed
 * timer with expires <= now (never one at KVA_TIMER_NEVER), sorted by
 * (expires, arm order), minus those a callback cancels or re-arms before
 * their turn.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvadmit/lockfree/timerwheel.h>
#include "kva_test.h"

/* ---- small fixtures ------------------------------------------------------ */

struct rec {
	struct kva_timer *order[64];
	size_t n;
};

static void record(struct kva_timer *t, void *arg)
{
	struct rec *r = arg;
	assert_false(kva_timer_armed(t));
	if (r->n < 64)
		r->order[r->n] = t;
	r->n++;
}

static void test_fires_in_first_advance_at_or_after_expiry(void **state)
{
	(void)state;
	struct kva_timerwheel w;
	struct kva_timer a;
	struct rec r = {0};

	kva_timerwheel_init(&w, 1000, 5000);
	kva_timer_init(&a);
	/* Sub-tick expiry: tick 7 is [7000, 8000). */
	kva_timerwheel_arm(&w, &a, 7400);
	assert_true(kva_timer_armed(&a));
	assert_int_equal(kva_timerwheel_count(&w), 1);
	assert_int_equal(kva_timerwheel_advance(&w, 7000, record, &r), 0);
	assert_int_equal(kva_timerwheel_advance(&w, 7399, record, &r), 0);
	assert_int_equal(kva_timerwheel_advance(&w, 7400, record, &r), 1);
	assert_ptr_equal(r.order[0], &a);
	assert_false(kva_timer_armed(&a));
	assert_int_equal(kva_timerwheel_count(&w), 0);
	assert_int_equal(kva_timerwheel_advance(&w, 100000, record, &r), 0);
}

/* A saturated deadline (hardening issue, item 1; found by fuzz_config with
 * start_ns = UINT64_MAX): armed at UINT64_MAX, it never fires, not even
 * when the clock reaches UINT64_MAX; it can still be cancelled. */
static void test_timer_at_uint64_max_never_fires(void **state)
{
	(void)state;
	struct kva_timerwheel w;
	struct kva_timer a, b;
	struct rec r = {0};

	kva_timerwheel_init(&w, 1u << 20, UINT64_MAX - 5);
	kva_timer_init(&a);
	kva_timer_init(&b);
	kva_timerwheel_arm(&w, &a, KVA_TIMER_NEVER);
	kva_timerwheel_arm(&w, &b, UINT64_MAX - 1);
	assert_int_equal(kva_timerwheel_advance(&w, UINT64_MAX - 1, record, &r), 1);
	assert_ptr_equal(r.order[0], &b);
	assert_int_equal(kva_timerwheel_advance(&w, UINT64_MAX, record, &r), 0);
	assert_true(kva_timer_armed(&a));
	assert_int_equal(kva_timerwheel_count(&w), 1);
	kva_timerwheel_cancel(&w, &a);
	assert_int_equal(kva_timerwheel_count(&w), 0);

	/* armed when the clock is already at its end */
	kva_timerwheel_init(&w, 1000, UINT64_MAX);
	kva_timerwheel_arm(&w, &a, KVA_TIMER_NEVER);
	assert_int_equal(kva_timerwheel_advance(&w, UINT64_MAX, record, &r), 0);
	assert_true(kva_timer_armed(&a));
	kva_timerwheel_cancel(&w, &a);
}

static void test_due_expiry_fires_at_next_advance_even_without_time_moving(void **state)
{
	(void)state;
	struct kva_timerwheel w;
	struct kva_timer a, b;
	struct rec r = {0};

	kva_timerwheel_init(&w, 10, 1000);
	kva_timer_init(&a);
	kva_timer_init(&b);
	kva_timerwheel_arm(&w, &a, 1000); /* == now */
	kva_timerwheel_arm(&w, &b, 3);	  /* long past */
	assert_int_equal(kva_timerwheel_advance(&w, 1000, record, &r), 2);
	assert_ptr_equal(r.order[0], &b);
	assert_ptr_equal(r.order[1], &a);
}

static void test_ties_fire_in_arm_order(void **state)
{
	(void)state;
	struct kva_timerwheel w;
	struct kva_timer t[5];
	struct rec r = {0};

	kva_timerwheel_init(&w, 100, 0);
	for (int i = 0; i < 5; i++)
		kva_timer_init(&t[i]);
	kva_timerwheel_arm(&w, &t[3], 550);
	kva_timerwheel_arm(&w, &t[1], 550);
	kva_timerwheel_arm(&w, &t[4], 510); /* same tick, earlier */
	kva_timerwheel_arm(&w, &t[0], 550);
	kva_timerwheel_arm(&w, &t[2], 900);
	kva_timerwheel_arm(&w, &t[1], 550); /* re-arm: now last of the ties */
	assert_int_equal(kva_timerwheel_count(&w), 5);
	assert_int_equal(kva_timerwheel_advance(&w, 1000, record, &r), 5);
	assert_ptr_equal(r.order[0], &t[4]);
	assert_ptr_equal(r.order[1], &t[3]);
	assert_ptr_equal(r.order[2], &t[0]);
	assert_ptr_equal(r.order[3], &t[1]);
	assert_ptr_equal(r.order[4], &t[2]);
}

static void test_cancel_disarms_and_is_idempotent(void **state)
{
	(void)state;
	struct kva_timerwheel w;
	struct kva_timer a, b;
	struct rec r = {0};

	kva_timerwheel_init(&w, 1, 0);
	kva_timer_init(&a);
	kva_timer_init(&b);
	kva_timerwheel_cancel(&w, &a); /* never armed */
	kva_timerwheel_arm(&w, &a, 1ULL << 40);
	kva_timerwheel_arm(&w, &b, 1ULL << 60); /* overflow list */
	kva_timerwheel_cancel(&w, &a);
	kva_timerwheel_cancel(&w, &a);
	kva_timerwheel_cancel(&w, &b);
	assert_false(kva_timer_armed(&a));
	assert_int_equal(kva_timerwheel_count(&w), 0);
	assert_int_equal(kva_timerwheel_advance(&w, UINT64_MAX, record, &r), 0);
}

static void test_backwards_advance_is_a_noop(void **state)
{
	(void)state;
	struct kva_timerwheel w;
	struct kva_timer a;
	struct rec r = {0};

	kva_timerwheel_init(&w, 10, 500);
	kva_timer_init(&a);
	kva_timerwheel_arm(&w, &a, 100); /* due: waits for the next advance */
	assert_int_equal(kva_timerwheel_advance(&w, 400, record, &r), 0);
	assert_true(kva_timer_armed(&a));
	assert_int_equal(kva_timerwheel_advance(&w, 500, record, &r), 1);
}

struct order {
	uint64_t last_exp, n, bad;
};

static void check_order(struct kva_timer *x, void *arg)
{
	struct order *o = arg;
	if (x->expires < o->last_exp)
		o->bad++;
	o->last_exp = x->expires;
	o->n++;
}

static void test_huge_jump_fires_everything_in_order(void **state)
{
	(void)state;
	struct kva_timerwheel w;
	enum { N = 2000 };
	static struct kva_timer t[N];
	struct order o = {0, 0, 0};
	uint64_t rng = 99;

	/* tick 1 ns: 2^62 ticks, far beyond the 2^48 of the levels. A per-tick
	 * advance would never finish. */
	kva_timerwheel_init(&w, 1, 0);
	for (int i = 0; i < N; i++) {
		kva_timer_init(&t[i]);
		unsigned e = (unsigned)(kva_test_rand(&rng) % 62);
		kva_timerwheel_arm(&w, &t[i], 1 + kva_test_rand(&rng) % (1ULL << e));
	}
	assert_int_equal(kva_timerwheel_advance(&w, 1ULL << 62, check_order, &o), N);
	assert_int_equal(o.n, N);
	assert_int_equal(o.bad, 0);
	assert_int_equal(kva_timerwheel_count(&w), 0);
}

/* Approach a deadline by halving the distance: the timer is cascaded down
 * through every level (and out of the overflow list) before it fires. */
static void test_cascades_through_every_level_exactly(void **state)
{
	(void)state;
	static const uint64_t ticks[] = {1, 1000, 7, 1ULL << 20};

	for (size_t ti = 0; ti < sizeof(ticks) / sizeof(ticks[0]); ti++) {
		for (unsigned level = 0; level <= KVA_TIMERWHEEL_LEVELS; level++) {
			struct kva_timerwheel w;
			struct kva_timer a, b;
			struct rec r = {0};
			uint64_t tick = ticks[ti], now = 123456789;
			uint64_t dist = tick * ((1ULL << (6 * level)) * 3 + 5) + tick / 3;

			kva_timerwheel_init(&w, tick, now);
			kva_timer_init(&a);
			kva_timer_init(&b);
			kva_timerwheel_arm(&w, &a, now + dist);
			kva_timerwheel_arm(&w, &b, now + dist + 1);
			uint64_t exp = now + dist;
			size_t steps = 0;
			while (exp - now > 1) {
				now += (exp - now) / 2;
				assert_int_equal(kva_timerwheel_advance(&w, now, record, &r), 0);
				steps++;
			}
			assert_true(kva_timer_armed(&a));
			assert_int_equal(kva_timerwheel_advance(&w, exp - 1, record, &r), 0);
			assert_int_equal(kva_timerwheel_advance(&w, exp, record, &r), 1);
			assert_ptr_equal(r.order[0], &a);
			assert_int_equal(kva_timerwheel_advance(&w, exp + 1, record, &r), 1);
			assert_ptr_equal(r.order[1], &b);
			assert_true(steps > 0 || level == 0);
		}
	}
}

/* ---- callbacks that arm and cancel ---------------------------------------- */

struct periodic {
	struct kva_timerwheel *w;
	struct kva_timer t, victim, late;
	uint64_t period;
	size_t fires, victim_fires, late_fires;
	uint64_t now;
};

static void periodic_fn(struct kva_timer *t, void *arg)
{
	struct periodic *p = arg;
	if (t == &p->victim) {
		p->victim_fires++;
		return;
	}
	if (t == &p->late) {
		p->late_fires++;
		return;
	}
	p->fires++;
	/* Re-arm self one period on from the old deadline: may be due already,
	 * which must wait for the next advance. */
	kva_timerwheel_arm(p->w, t, t->expires + p->period);
	/* Cancel a timer due in this same advance: it must not fire. */
	kva_timerwheel_cancel(p->w, &p->victim);
	/* Arm one with a past deadline: fires at the next advance, not now. */
	if (!kva_timer_armed(&p->late))
		kva_timerwheel_arm(p->w, &p->late, 0);
}

static void test_rearm_and_cancel_from_callback(void **state)
{
	(void)state;
	struct kva_timerwheel w;
	struct periodic p = {.w = &w, .period = 100};

	kva_timerwheel_init(&w, 10, 0);
	kva_timer_init(&p.t);
	kva_timer_init(&p.victim);
	kva_timer_init(&p.late);
	kva_timerwheel_arm(&w, &p.t, 100);
	kva_timerwheel_arm(&w, &p.victim, 150);

	/* At 1000 the periodic timer is nine periods behind; it fires once per
	 * advance, not nine times. */
	assert_int_equal(kva_timerwheel_advance(&w, 1000, periodic_fn, &p), 1);
	assert_int_equal(p.fires, 1);
	assert_int_equal(p.victim_fires, 0);
	assert_int_equal(p.late_fires, 0);
	assert_true(kva_timer_armed(&p.t));
	assert_true(kva_timer_armed(&p.late));
	assert_int_equal(p.t.expires, 200);
	assert_int_equal(kva_timerwheel_count(&w), 2);

	/* Next advance at the same now: late fires first (deadline 0), then t. */
	assert_int_equal(kva_timerwheel_advance(&w, 1000, periodic_fn, &p), 2);
	assert_int_equal(p.fires, 2);
	assert_int_equal(p.late_fires, 1);
	/* The callback re-armed late (it had fired), so it is pending again. */
	assert_true(kva_timer_armed(&p.late));
}

struct reentry {
	struct kva_timerwheel *w;
	size_t inner;
};

static void reentry_fn(struct kva_timer *t, void *arg)
{
	struct reentry *re = arg;
	(void)t;
	re->inner += kva_timerwheel_advance(re->w, UINT64_MAX, reentry_fn, re);
}

static void test_advance_from_callback_is_refused(void **state)
{
	(void)state;
	struct kva_timerwheel w;
	struct kva_timer a, b;
	struct reentry re = {&w, 0};

	kva_timerwheel_init(&w, 1, 0);
	kva_timer_init(&a);
	kva_timer_init(&b);
	kva_timerwheel_arm(&w, &a, 5);
	kva_timerwheel_arm(&w, &b, 1000);
	assert_int_equal(kva_timerwheel_advance(&w, 10, reentry_fn, &re), 1);
	assert_int_equal(re.inner, 0);
	assert_true(kva_timer_armed(&b));
}

/* ---- random schedules against a reference ---------------------------------- */

#define NT 512

struct rtimer {
	struct kva_timer t; /* first: container_of by cast */
	bool armed;
	bool due; /* expected to fire in the advance in progress */
	uint64_t expires, seq;
};

struct model {
	struct kva_timerwheel w;
	struct rtimer tm[NT];
	uint64_t tick, now, seq;
	size_t armed;
	uint64_t rng;
	/* the advance in progress */
	struct rtimer *expect[NT];
	size_t nexpect, pos, fired;
	/* results */
	uint64_t errors, total_fired, cb_arms, cb_cancels, far_arms;
	char first_error[160];
};

static void model_error(struct model *m, const char *what, size_t i)
{
	if (m->errors++ == 0)
		snprintf(m->first_error, sizeof(m->first_error), "%s (timer %zu, now %llu)", what,
			 i, (unsigned long long)m->now);
}

static uint64_t sat_add(uint64_t a, uint64_t b)
{
	return a + b < a ? UINT64_MAX : a + b;
}

/* Deadlines of every kind: past, near, within each level, beyond the levels,
 * ties with another timer, the very end of time. */
static uint64_t random_deadline(struct model *m, uint64_t now)
{
	uint64_t r = kva_test_rand(&m->rng), x = kva_test_rand(&m->rng);
	unsigned kind = (unsigned)(r % 100);

	if (kind < 10)
		return now - (x % 1000 < now ? x % 1000 : now);
	if (kind < 20) /* later in the current tick, or in the next one */
		return sat_add(now, x % (2 * m->tick - now % m->tick));
	if (kind < 45)
		return sat_add(now, x % (m->tick * 70));
	if (kind < 80) {
		unsigned e = (unsigned)((r >> 8) % 64);
		m->far_arms++;
		return sat_add(now, e == 63 ? x : x % (1ULL << e));
	}
	if (kind < 97) {
		struct rtimer *o = &m->tm[(r >> 8) % NT];
		if (o->armed && o->expires > now)
			return o->expires;
		return sat_add(now, x % (m->tick * 4));
	}
	return UINT64_MAX - x % 3;
}

static void model_arm(struct model *m, size_t i, uint64_t exp)
{
	struct rtimer *rt = &m->tm[i];
	/* every other arm on the ordered lane: the same reference holds */
	if (m->seq & 2)
		kva_timerwheel_arm_ordered(&m->w, &rt->t, exp);
	else
		kva_timerwheel_arm(&m->w, &rt->t, exp);
	if (!rt->armed)
		m->armed++;
	rt->armed = true;
	rt->due = false; /* re-armed: not in this advance any more */
	rt->expires = exp;
	rt->seq = m->seq++;
}

static void model_cancel(struct model *m, size_t i)
{
	struct rtimer *rt = &m->tm[i];
	kva_timerwheel_cancel(&m->w, &rt->t);
	if (rt->armed)
		m->armed--;
	rt->armed = false;
	rt->due = false;
}

static void model_fn(struct kva_timer *t, void *arg)
{
	struct model *m = arg;
	struct rtimer *rt = (struct rtimer *)t;
	size_t i = (size_t)(rt - m->tm);

	while (m->pos < m->nexpect && !m->expect[m->pos]->due)
		m->pos++;
	if (m->pos >= m->nexpect || m->expect[m->pos] != rt) {
		model_error(m, "fired out of order or not due", i);
	} else {
		m->pos++;
	}
	if (kva_timer_armed(t))
		model_error(m, "armed inside its callback", i);
	if (rt->armed)
		m->armed--;
	rt->armed = false;
	rt->due = false;
	m->fired++;
	if (kva_timerwheel_count(&m->w) != m->armed)
		model_error(m, "count wrong inside callback", i);

	uint64_t r = kva_test_rand(&m->rng);
	switch (r % 8) {
	case 0: /* periodic: re-arm self, possibly due already */
	case 1:
		m->cb_arms++;
		model_arm(m, i, random_deadline(m, m->now));
		break;
	case 2: /* arm another, possibly one waiting to fire now */
		m->cb_arms++;
		model_arm(m, (size_t)(r >> 8) % NT, random_deadline(m, m->now));
		break;
	case 3: /* cancel another, possibly one waiting to fire now */
		m->cb_cancels++;
		model_cancel(m, (size_t)(r >> 8) % NT);
		break;
	default:
		break;
	}
}

static int by_expiry(const void *a, const void *b)
{
	const struct rtimer *x = *(struct rtimer *const *)a, *y = *(struct rtimer *const *)b;
	if (x->expires != y->expires)
		return x->expires < y->expires ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static void model_advance(struct model *m, uint64_t now)
{
	m->nexpect = m->pos = m->fired = 0;
	if (now >= m->now) {
		for (size_t i = 0; i < NT; i++) {
			struct rtimer *rt = &m->tm[i];
			rt->due = rt->armed && rt->expires <= now && rt->expires != KVA_TIMER_NEVER;
			if (rt->due)
				m->expect[m->nexpect++] = rt;
		}
		qsort(m->expect, m->nexpect, sizeof(m->expect[0]), by_expiry);
		m->now = now;
	}
	size_t got = kva_timerwheel_advance(&m->w, now, model_fn, m);
	if (got != m->fired)
		model_error(m, "advance returned a wrong count", 0);
	for (size_t k = 0; k < m->nexpect; k++)
		if (m->expect[k]->due)
			model_error(m, "due timer did not fire", (size_t)(m->expect[k] - m->tm));
	m->total_fired += m->fired;
}

/* Time mostly creeps (so current-tick and low-level cases are common), but
 * also lands exactly on deadlines and makes jumps of every size. Jumps stop
 * once now passes 2^62, so time does not saturate before the run ends. */
static uint64_t random_now(struct model *m)
{
	uint64_t r = kva_test_rand(&m->rng), x = kva_test_rand(&m->rng);
	unsigned kind = (unsigned)(r % 100);
	bool may_jump = m->now < (1ULL << 62);

	if (kind < 30)
		return sat_add(m->now, x % (m->tick * 4));
	if (kind < 45) /* within the current tick, or into the next one */
		return sat_add(m->now, x % (2 * m->tick - m->now % m->tick));
	if (kind < 65)
		return sat_add(m->now, x % (m->tick * 64 * 64 * 8));
	if (kind < 72)
		return m->now;
	if (kind < 90) { /* exactly at, or just before, some armed deadline */
		struct rtimer *o = &m->tm[(r >> 8) % NT];
		if (o->armed && o->expires > m->now &&
		    (o->expires - m->now < (1ULL << 36) || (may_jump && o->expires < (1ULL << 62))))
			return o->expires - ((r >> 20) & 1);
		return m->now;
	}
	if (kind < 97 && may_jump) { /* a jump of up to 2^54 */
		unsigned e = 20 + (unsigned)((r >> 8) % 35);
		return m->now + x % (1ULL << e);
	}
	if (kind < 98 && may_jump) /* a jump across 2^48-tick boundaries */
		return m->now + x % (1ULL << 61);
	if (kind < 99)
		return m->now > 0 ? m->now - 1 - x % m->now : 0; /* backwards: a no-op */
	return sat_add(m->now, x % m->tick);
}

static void run_model(uint64_t tick, uint64_t start, uint64_t seed, size_t ops)
{
	struct model *m = calloc(1, sizeof(*m));
	assert_non_null(m);
	m->tick = tick;
	m->now = start;
	m->rng = seed;
	kva_timerwheel_init(&m->w, tick, start);
	for (size_t i = 0; i < NT; i++)
		kva_timer_init(&m->tm[i].t);

	for (size_t op = 0; op < ops && m->errors == 0; op++) {
		uint64_t r = kva_test_rand(&m->rng);
		size_t i = (size_t)(r >> 16) % NT;
		switch (r % 10) {
		case 0:
		case 1:
		case 2:
		case 3:
			model_arm(m, i, random_deadline(m, m->now));
			break;
		case 4:
		case 5:
			model_cancel(m, i);
			break;
		default:
			model_advance(m, random_now(m));
			break;
		}
		if (kva_timerwheel_count(&m->w) != m->armed)
			model_error(m, "count differs from the reference", i);
	}
	/* Drain: the end of time fires everything still armed, in order. */
	for (int k = 0; k < 3 && m->errors == 0; k++)
		model_advance(m, UINT64_MAX);

	if (m->errors)
		print_message("tick %llu: %s\n", (unsigned long long)tick, m->first_error);
	assert_int_equal(m->errors, 0);
	assert_true(m->total_fired > ops / 20);
	assert_true(m->cb_arms > 0 && m->cb_cancels > 0 && m->far_arms > 0);
	free(m);
}

static void test_random_schedules_match_sorted_reference(void **state)
{
	(void)state;
	/* 5 x 25,000 operations, plus the arms and cancels of callbacks. */
	run_model(1, 0, 1, 25000);
	run_model(1000, 1ULL << 40, 2, 25000);
	run_model(7, 3, 3, 25000);
	run_model(1ULL << 20, (1ULL << 48) - 5000, 4, 25000);
	run_model(3, (1ULL << 48) * 3 - 100, 5, 25000);
}

/* Per-request deadlines (one timeout, a clock that only moves forward) on
 * the ordered lane: they never enter a wheel slot, so no advance cascades
 * them, and they fire exactly, merged in order with wheel timers. */
static void test_ordered_lane_never_cascades_and_merges_with_the_wheel(void **state)
{
	(void)state;
	enum { N = 20000 };
	const uint64_t timeout = 5000000000ull, tick = 1ull << 20;
	struct kva_timerwheel w;
	static struct kva_timer t[N];
	struct kva_timer head_bound, head_log;
	kva_timerwheel_init(&w, tick, 0);
	kva_timer_init(&head_bound);
	kva_timer_init(&head_log);
	struct order o = {0};
	uint64_t now = 0;
	for (unsigned i = 0; i < N; i++) {
		kva_timer_init(&t[i]);
		now += 1000000; /* one submit per 1 ms step */
		kva_timerwheel_arm_ordered(&w, &t[i], now + timeout);
		if (i == 100)
			kva_timerwheel_arm(&w, &head_bound, now + 2 * timeout); /* on the wheel */
		if (i == 200)
			kva_timerwheel_arm(&w, &head_log, now + timeout); /* ties t[200] */
		if (i % 64 == 0)
			kva_timerwheel_advance(&w, now, check_order, &o);
	}
	for (unsigned l = 0; l < KVA_TIMERWHEEL_LEVELS; l++)
		if (l > 0) /* only the two wheel timers were ever placed in slots */
			assert_true(__builtin_popcountll(w.occupied[l]) <= 2);
	assert_int_equal(kva_timerwheel_count(&w), N + 2 - o.n);
	while (kva_timerwheel_count(&w))
		kva_timerwheel_advance(&w, now += 250000000ull, check_order, &o);
	assert_int_equal(o.n, N + 2);
	assert_int_equal(o.bad, 0);
	assert_false(kva_timer_armed(&t[N - 1]));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_fires_in_first_advance_at_or_after_expiry),
	    cmocka_unit_test(test_due_expiry_fires_at_next_advance_even_without_time_moving),
	    cmocka_unit_test(test_ties_fire_in_arm_order),
	    cmocka_unit_test(test_cancel_disarms_and_is_idempotent),
	    cmocka_unit_test(test_backwards_advance_is_a_noop),
	    cmocka_unit_test(test_huge_jump_fires_everything_in_order),
	    cmocka_unit_test(test_cascades_through_every_level_exactly),
	    cmocka_unit_test(test_rearm_and_cancel_from_callback),
	    cmocka_unit_test(test_advance_from_callback_is_refused),
	    cmocka_unit_test(test_random_schedules_match_sorted_reference),
	    cmocka_unit_test(test_timer_at_uint64_max_never_fires),
	    cmocka_unit_test(test_ordered_lane_never_cascades_and_merges_with_the_wheel),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
