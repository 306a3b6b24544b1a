/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Threaded stress tests for lockfree/capacity. Workers and a checker thread
 * record what they saw; the main thread asserts (cmocka is not thread-safe).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>

#include <kvadmit/lockfree/capacity.h>
#include "kva_test.h"

#define WORKERS 4
#define HELD_MAX 16

static struct kva_credits cr(uint32_t p, uint16_t s, uint16_t r)
{
	struct kva_credits c = {p, s, r};
	return c;
}

struct shared {
	struct kva_capacity cap;
	pthread_barrier_t start;
	atomic_int running; /* workers not yet finished */
	uint64_t iters;
	uint32_t floor;
	uint32_t unit; /* pages per slot in the paired test */
};

struct worker {
	struct shared *sh;
	int idx;
	uint64_t ok, refused;
};

struct checker {
	struct shared *sh;
	uint64_t samples;
	uint64_t violations;
	struct kva_credits bad; /* first bad snapshot */
	uint32_t min_pages;
};

static void run(struct shared *sh, void *(*work)(void *), struct worker *w, void *(*check)(void *),
		struct checker *c)
{
	pthread_t t[WORKERS], ct;

	pthread_barrier_init(&sh->start, NULL, WORKERS + (check ? 1 : 0));
	atomic_store(&sh->running, WORKERS);
	for (int i = 0; i < WORKERS; i++) {
		w[i].sh = sh;
		w[i].idx = i;
		w[i].ok = w[i].refused = 0;
		assert_int_equal(pthread_create(&t[i], NULL, work, &w[i]), 0);
	}
	if (check) {
		c->sh = sh;
		c->samples = c->violations = 0;
		c->min_pages = UINT32_MAX;
		assert_int_equal(pthread_create(&ct, NULL, check, c), 0);
	}
	for (int i = 0; i < WORKERS; i++)
		pthread_join(t[i], NULL);
	if (check)
		pthread_join(ct, NULL);
	pthread_barrier_destroy(&sh->start);
}

static void assert_no_violation(const struct checker *c)
{
	if (c->violations)
		print_message("first bad snapshot: pages %u slots %u runs %u\n", c->bad.pages,
			      c->bad.slots, c->bad.runs);
	assert_int_equal(c->violations, 0);
}

static void worker_done(struct shared *sh)
{
	atomic_fetch_sub_explicit(&sh->running, 1, memory_order_release);
}

static bool workers_running(struct shared *sh)
{
	return atomic_load_explicit(&sh->running, memory_order_acquire) > 0;
}

/* --- paired reservations: {k*unit, k, k} keep the lanes linked ---------- */

static void *paired_worker(void *arg)
{
	struct worker *w = arg;
	struct shared *sh = w->sh;
	uint64_t rng = 0x9e3779b97f4a7c15ULL * (w->idx + 1);
	uint16_t held[HELD_MAX];
	int nheld = 0;

	pthread_barrier_wait(&sh->start);
	for (uint64_t i = 0; i < sh->iters; i++) {
		uint64_t r = kva_test_rand(&rng);
		if (nheld < HELD_MAX && (nheld == 0 || (r & 1))) {
			uint16_t k = 1 + (uint16_t)((r >> 8) % 3);
			if (kva_capacity_try_reserve(&sh->cap, cr(k * sh->unit, k, k), 0)) {
				held[nheld++] = k;
				w->ok++;
			} else {
				w->refused++;
			}
		} else if (nheld > 0) {
			uint16_t k = held[--nheld];
			kva_capacity_release(&sh->cap, cr(k * sh->unit, k, k));
		}
	}
	while (nheld > 0) {
		uint16_t k = held[--nheld];
		kva_capacity_release(&sh->cap, cr(k * sh->unit, k, k));
	}
	worker_done(sh);
	return NULL;
}

static void *paired_checker(void *arg)
{
	struct checker *c = arg;
	struct shared *sh = c->sh;
	const struct kva_credits tot = sh->cap.total;

	pthread_barrier_wait(&sh->start);
	do {
		struct kva_credits f = kva_capacity_free(&sh->cap);
		uint32_t slots_taken = (uint32_t)(tot.slots - f.slots);
		uint32_t runs_taken = (uint32_t)(tot.runs - f.runs);
		uint32_t pages_taken = tot.pages - f.pages;
		c->samples++;
		if (f.pages > tot.pages || f.slots > tot.slots || f.runs > tot.runs ||
		    slots_taken * sh->unit != pages_taken || runs_taken != slots_taken) {
			if (c->violations++ == 0)
				c->bad = f;
		}
	} while (workers_running(sh));
	return NULL;
}

static void test_paired_reservation_is_never_half_taken(void **state)
{
	(void)state;
	static struct shared sh;
	struct worker w[WORKERS];
	struct checker c;

	sh.unit = 7;
	sh.iters = kva_test_scaled(4000000);
	/* Room for about half of what the workers try to hold: many refusals. */
	kva_capacity_init(&sh.cap, cr(7 * 48, 48, 48));
	run(&sh, paired_worker, w, paired_checker, &c);

	assert_no_violation(&c);
	assert_true(c.samples > 0);
	uint64_t ok = 0, refused = 0;
	for (int i = 0; i < WORKERS; i++) {
		ok += w[i].ok;
		refused += w[i].refused;
	}
	assert_true(ok > 0);
	assert_true(refused > 0);
	struct kva_credits f = kva_capacity_free(&sh.cap);
	assert_int_equal(f.pages, 7 * 48);
	assert_int_equal(f.slots, 48);
	assert_int_equal(f.runs, 48);
	assert_int_equal(atomic_load(&sh.cap.overreleases), 0);
}

/* --- the floor ---------------------------------------------------------- */

static void *floor_worker(void *arg)
{
	struct worker *w = arg;
	struct shared *sh = w->sh;
	uint64_t rng = 0xda3e39cb94b95bdbULL * (w->idx + 1);
	uint32_t held[HELD_MAX];
	int nheld = 0;

	pthread_barrier_wait(&sh->start);
	for (uint64_t i = 0; i < sh->iters; i++) {
		uint64_t r = kva_test_rand(&rng);
		if (nheld < HELD_MAX && (nheld == 0 || (r & 3) != 0)) {
			uint32_t p = 1 + (uint32_t)((r >> 8) % 64);
			if (kva_capacity_try_reserve(&sh->cap, cr(p, 0, 0), sh->floor)) {
				held[nheld++] = p;
				w->ok++;
			} else {
				w->refused++;
			}
		} else if (nheld > 0) {
			kva_capacity_release(&sh->cap, cr(held[--nheld], 0, 0));
		}
	}
	while (nheld > 0)
		kva_capacity_release(&sh->cap, cr(held[--nheld], 0, 0));
	worker_done(sh);
	return NULL;
}

static void *floor_checker(void *arg)
{
	struct checker *c = arg;
	struct shared *sh = c->sh;

	pthread_barrier_wait(&sh->start);
	do {
		struct kva_credits f = kva_capacity_free(&sh->cap);
		c->samples++;
		if (f.pages < c->min_pages)
			c->min_pages = f.pages;
		if (f.pages < sh->floor || f.pages > sh->cap.total.pages) {
			if (c->violations++ == 0)
				c->bad = f;
		}
	} while (workers_running(sh));
	return NULL;
}

static void test_reservations_never_cross_the_floor(void **state)
{
	(void)state;
	static struct shared sh;
	struct worker w[WORKERS];
	struct checker c;

	sh.floor = 100;
	sh.iters = kva_test_scaled(4000000);
	/* Workers want up to 4 * 16 * 64 pages; 1000 - 100 are reservable. */
	kva_capacity_init(&sh.cap, cr(1000, 0, 0));
	run(&sh, floor_worker, w, floor_checker, &c);

	assert_no_violation(&c);
	assert_true(c.min_pages >= sh.floor);
	uint64_t refused = 0;
	for (int i = 0; i < WORKERS; i++)
		refused += w[i].refused;
	assert_true(refused > 0);
	assert_int_equal(kva_capacity_free(&sh.cap).pages, 1000);
}

/* --- last credits go to exactly one winner ------------------------------- */

static void *drain_worker(void *arg)
{
	struct worker *w = arg;
	struct shared *sh = w->sh;

	pthread_barrier_wait(&sh->start);
	/* Alternate shapes so that the lanes run out at different times. */
	while (kva_capacity_try_reserve(&sh->cap, w->idx & 1 ? cr(2, 1, 0) : cr(1, 1, 1), 0))
		w->ok++;
	worker_done(sh);
	return NULL;
}

static void test_contended_credits_are_granted_exactly_once(void **state)
{
	(void)state;
	static struct shared sh;
	struct worker w[WORKERS];
	uint64_t rounds = kva_test_scaled(2000);

	for (uint64_t round = 0; round < rounds; round++) {
		/* Slots are the scarce lane: exactly 500 reservations fit, each takes
		 * one slot; pages and runs are plentiful. */
		kva_capacity_init(&sh.cap, cr(1000, 500, 500));
		run(&sh, drain_worker, w, NULL, NULL);
		uint64_t ok = 0, pages = 0, runs = 0;
		for (int i = 0; i < WORKERS; i++) {
			ok += w[i].ok;
			pages += w[i].ok * (i & 1 ? 2 : 1);
			runs += i & 1 ? 0 : w[i].ok;
		}
		assert_int_equal(ok, 500);
		struct kva_credits f = kva_capacity_free(&sh.cap);
		assert_int_equal(f.slots, 0);
		assert_int_equal(f.pages, 1000 - pages);
		assert_int_equal(f.runs, 500 - runs);
	}
}

/* --- random reserve/release returns to the start --------------------------- */

static void *random_worker(void *arg)
{
	struct worker *w = arg;
	struct shared *sh = w->sh;
	uint64_t rng = 0x2545f4914f6cdd1dULL * (w->idx + 3);
	struct kva_credits held[HELD_MAX];
	int nheld = 0;

	pthread_barrier_wait(&sh->start);
	for (uint64_t i = 0; i < sh->iters; i++) {
		uint64_t r = kva_test_rand(&rng);
		if (nheld < HELD_MAX && (nheld == 0 || (r & 1))) {
			struct kva_credits want =
			    cr((uint32_t)(r >> 8) % 300, (uint16_t)((r >> 24) % 3),
			       (uint16_t)((r >> 32) % 4));
			uint32_t floor = (r >> 40) & 1 ? 50 : 0;
			if (kva_capacity_try_reserve(&sh->cap, want, floor)) {
				held[nheld++] = want;
				w->ok++;
			} else {
				w->refused++;
			}
		} else if (nheld > 0) {
			/* Release a random one, sometimes in two parts. */
			int k = (int)((r >> 8) % (uint64_t)nheld);
			struct kva_credits c = held[k];
			held[k] = held[--nheld];
			if ((r >> 20) & 1) {
				struct kva_credits half = cr(c.pages / 2, c.slots / 2, c.runs / 2);
				kva_capacity_release(&sh->cap, half);
				c.pages -= half.pages;
				c.slots -= half.slots;
				c.runs -= half.runs;
			}
			kva_capacity_release(&sh->cap, c);
		}
	}
	while (nheld > 0)
		kva_capacity_release(&sh->cap, held[--nheld]);
	worker_done(sh);
	return NULL;
}

static void *bounds_checker(void *arg)
{
	struct checker *c = arg;
	struct shared *sh = c->sh;
	const struct kva_credits tot = sh->cap.total;

	pthread_barrier_wait(&sh->start);
	do {
		struct kva_credits f = kva_capacity_free(&sh->cap);
		c->samples++;
		/* A wrapped lane would show up as more than the total. */
		if (f.pages > tot.pages || f.slots > tot.slots || f.runs > tot.runs) {
			if (c->violations++ == 0)
				c->bad = f;
		}
	} while (workers_running(sh));
	return NULL;
}

static void test_random_reserve_release_returns_to_start(void **state)
{
	(void)state;
	static struct shared sh;
	struct worker w[WORKERS];
	struct checker c;
	const struct kva_credits tot = cr(4000, 24, 40);

	sh.iters = kva_test_scaled(4000000);
	kva_capacity_init(&sh.cap, tot);
	run(&sh, random_worker, w, bounds_checker, &c);

	assert_no_violation(&c);
	for (int i = 0; i < WORKERS; i++) {
		assert_true(w[i].ok > 0);
		assert_true(w[i].refused > 0);
	}
	struct kva_credits f = kva_capacity_free(&sh.cap);
	assert_int_equal(f.pages, tot.pages);
	assert_int_equal(f.slots, tot.slots);
	assert_int_equal(f.runs, tot.runs);
	assert_int_equal(atomic_load(&sh.cap.overreleases), 0);
}

/* --- credits hand over what their releaser wrote (A1/R1) -------------------
 *
 * One slot of credit passes between two threads; whoever holds it owns a
 * plain buffer: it checks what the other wrote, writes its own, and gives
 * the credit back. Only the reserve's acquire and the release's release
 * order these plain accesses (ThreadSanitizer reports a race without them;
 * other builds check the values). */
struct handoff {
	struct kva_capacity cap;
	uint64_t rounds;
	uint64_t buf[8]; /* plain: owned by the credit's holder */
	atomic_int turn; /* whose turn, relaxed: it orders nothing */
	uint64_t bad;
};

static void handoff_side(struct handoff *h, int me)
{
	for (uint64_t i = 0; i < h->rounds; i++) {
		while (atomic_load_explicit(&h->turn, memory_order_relaxed) != me)
			sched_yield(); /* the other side may need this CPU */
		while (!kva_capacity_try_reserve(&h->cap, cr(0, 1, 0), 0))
			sched_yield();
		uint64_t want = 2 * i + (uint64_t)me; /* what the other side wrote last */
		for (int k = 0; k < 8; k++)
			if (h->buf[k] != want)
				h->bad++;
		for (int k = 0; k < 8; k++)
			h->buf[k] = want + 1;
		atomic_store_explicit(&h->turn, !me, memory_order_relaxed);
		kva_capacity_release(&h->cap, cr(0, 1, 0));
	}
}

static void *handoff_other(void *arg)
{
	handoff_side(arg, 1);
	return NULL;
}

static void test_credits_hand_over_the_releasers_writes(void **state)
{
	(void)state;
	static struct handoff h;
	memset(&h, 0, sizeof(h));
	h.rounds = kva_test_scaled(20000);
	kva_capacity_init(&h.cap, cr(0, 1, 0));
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, handoff_other, &h), 0);
	handoff_side(&h, 0);
	pthread_join(t, NULL);
	assert_int_equal(h.bad, 0);
	assert_int_equal(h.buf[0], 2 * h.rounds);
	assert_int_equal(kva_capacity_free(&h.cap).slots, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_paired_reservation_is_never_half_taken),
	    cmocka_unit_test(test_reservations_never_cross_the_floor),
	    cmocka_unit_test(test_contended_credits_are_granted_exactly_once),
	    cmocka_unit_test(test_random_reserve_release_returns_to_start),
	    cmocka_unit_test(test_credits_hand_over_the_releasers_writes),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
