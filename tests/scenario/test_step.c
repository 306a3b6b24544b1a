/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The step's own contract (core v2): it handles only the events enqueued
 * before it began (plus answers and copy reports its own callbacks produce),
 * never blocks, wakes an idle host through `wake` when the inbox goes from
 * empty to non-empty, and lets any thread walk the waiting queue in order.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <urcu/urcu-memb.h>

#include "scenario.h"

#define KEY 77

/* A directory that submits a new request every time it is asked, from
 * inside the step: without a bound, one step would never return. */
struct chain {
	struct sc *s;
	uint64_t next_id;
	uint32_t asked;
};

static void chain_lookup(void *ctx, uint64_t key, uint32_t prompt, kva_lookup_token t)
{
	struct chain *c = ctx;
	(void)key, (void)prompt, (void)t;
	c->asked++;
	kva_request r = {.id = c->next_id++, .prefix_key = KEY, .prompt_tokens = 32};
	kva_handle h;
	assert_int_equal(kva_submit(c->s->e, &r, &h), 0);
}

static void step_handles_only_events_present_when_it_began(void **st)
{
	(void)st;
	kva_config c;
	sc_config(&c);
	struct sc *s = sc_new(&c);
	struct chain ch = {s, 100, 0};
	/* swap in the chaining directory */
	kva_engine_destroy(s->e);
	s->cfg.lookup = chain_lookup;
	s->cfg.lookup_ctx = &ch;
	int err;
	s->e = kva_engine_create(&s->cfg, &err);
	assert_non_null(s->e);
	sc_submit(s, 1, KEY, 32);
	for (uint32_t i = 1; i <= 5; i++) {
		sc_step(s, SC_MS);
		/* each step ingests exactly the one request submitted before it */
		assert_int_equal(s->plan.events, 1);
		assert_int_equal(ch.asked, i);
	}
	assert_int_equal(sc_stats(s).waiting, 5);
	sc_free(s);
}

static void answer_from_the_lookup_callback_is_handled_in_the_same_step(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, KEY, sc_ckpt(16, 5, 1)); /* answered at once, local hit */
	kva_handle h = sc_submit(s, 1, KEY, 32);
	sc_step(s, SC_MS);
	assert_non_null(sc_admitted(s, h)); /* ingest, answer and admission: one step */
	assert_int_equal(s->plan.events, 2);
	sc_free(s);
}

struct wake_count {
	unsigned n;
};

static void count_wake(void *ctx)
{
	((struct wake_count *)ctx)->n++;
}

static void wake_fires_when_the_inbox_goes_from_empty_to_non_empty(void **st)
{
	(void)st;
	kva_config c;
	sc_config(&c);
	struct wake_count w = {0};
	c.wake = count_wake;
	c.wake_ctx = &w;
	struct sc *s = sc_new(&c);
	kva_handle a = sc_submit(s, 1, 0, 16);
	assert_int_equal(w.n, 1);
	sc_submit(s, 2, 0, 16);
	assert_int_equal(kva_cancel(s->e, a), 0);
	assert_int_equal(w.n, 1); /* not empty any more: no new wakeup */
	sc_step(s, SC_MS);
	assert_int_equal(w.n, 1); /* the step's own work wakes nobody */
	assert_int_equal(kva_reset_prefix_cache(s->e), 0);
	assert_int_equal(w.n, 2); /* drained, then a new event */
	sc_free(s);
}

struct wake_where {
	unsigned n, inside_rcu;
};

static void wake_checks_rcu(void *ctx)
{
	struct wake_where *w = ctx;
	w->n++;
	w->inside_rcu += urcu_memb_read_ongoing() != 0;
}

/* kvadmit.h: no callback runs inside an RCU read-side section. The calls on
 * a running or importing request find their record under one; their wake
 * comes after it ends. Each call below finds the inbox empty, so each wakes. */
static void wake_never_runs_inside_an_rcu_read_side_section(void **st)
{
	(void)st;
	kva_config c;
	sc_config(&c);
	struct wake_where w = {0};
	c.wake = wake_checks_rcu;
	c.wake_ctx = &w;
	struct sc *s = sc_new(&c);
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	kva_handle imp = sc_submit(s, 1, KEY, 480);
	kva_handle a = sc_submit(s, 2, 0, 16), b = sc_submit(s, 3, 0, 16);
	sc_step(s, SC_MS);
	assert_int_equal(s->plan.n_copies, 1);
	kva_copy_job job = s->copies[0];
	assert_non_null(sc_admitted(s, a));
	unsigned before = w.n;
	assert_int_equal(kva_finish(s->e, a), 0);
	sc_step(s, SC_MS);
	assert_int_equal(kva_preempt(s->e, b), 0);
	sc_step(s, SC_MS);
	assert_int_equal(kva_copy_done(s->e, job.token, job.rank, 0), 0);
	sc_step(s, SC_MS);
	assert_int_equal(kva_cancel(s->e, imp), 0);
	sc_step(s, SC_MS);
	assert_int_equal(w.n, before + 4);
	assert_int_equal(w.inside_rcu, 0);
	sc_free(s);
}

static void backlog_says_work_is_left_for_the_next_step(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	kva_handle a = sc_submit(s, 1, 0, 16), b = sc_submit(s, 2, 0, 16);
	sc_step(s, SC_MS);
	assert_false(s->plan.backlog);
	assert_int_equal(kva_finish(s->e, a), 0);
	assert_int_equal(kva_finish(s->e, b), 0);
	s->plan.ended_cap = 1; /* room for one report: the other waits */
	sc_step(s, SC_MS);
	assert_int_equal(s->plan.n_ended, 1);
	assert_true(s->plan.backlog); /* no event will wake the host for it */
	sc_step(s, SC_MS);
	assert_int_equal(s->plan.n_ended, 1);
	assert_false(s->plan.backlog);
	s->plan.ended_cap = SC_MAX;
	sc_free(s);
}

/* Durations near UINT64_MAX mean never: deadlines saturate instead of
 * wrapping into the past (which timed lookups out at once and fired the log
 * and refresh timers every step). */
static void huge_durations_mean_never_instead_of_wrapping(void **st)
{
	(void)st;
	kva_config c;
	sc_config(&c);
	c.start_ns = 1000; /* so that now + UINT64_MAX would wrap */
	c.lookup_timeout_ns = UINT64_MAX;
	c.max_restore_wait_ns = UINT64_MAX - 5;
	c.wait_log_interval_ns = UINT64_MAX;
	c.lookup_refresh_ns = UINT64_MAX;
	struct sc *s = sc_new(&c);
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	sc_occupy(s, 1, 90);
	kva_handle blocked = sc_submit(s, 2, KEY, 480); /* answered: a blocked restore */
	sc_step(s, SC_MS);
	sc_dir_clear(s);
	kva_handle pending = sc_submit(s, 3, KEY + 1, 480); /* never answered */
	for (int i = 0; i < 50; i++)
		sc_step(s, 10 * SC_SEC);
	kva_stats stt = sc_stats(s);
	assert_int_equal(stt.lookups_timed_out, 0);
	assert_int_equal(stt.wait_expired, 0);
	assert_int_equal(stt.refreshes, 0);
	assert_int_equal(stt.wait_logs, 1); /* the wait's start only */
	kva_request_info info;
	assert_int_equal(kva_query(s->e, blocked, &info), 0);
	assert_true(info.has_selection);
	assert_int_equal(kva_query(s->e, pending, &info), 0);
	assert_int_equal(info.reason, KVA_REASON_NONE); /* still awaiting its answer */
	sc_free(s);
}

/* kvadmit.h: time going backwards is treated as no time passing. A step
 * whose clock reads earlier than the last one's leaves every measured wait
 * where it was (nothing wraps) and moves no timer. */
static void time_going_backwards_is_no_time_passing(void **st)
{
	(void)st;
	kva_config c;
	sc_config(&c);
	c.max_restore_wait_ns = 10 * SC_SEC;
	c.wait_log_interval_ns = 0;
	struct sc *s = sc_new(&c);
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	kva_handle hog = sc_occupy(s, 1, 90);
	kva_handle h = sc_submit(s, 2, KEY, 480); /* a restore of 30 pages: blocked */
	sc_step(s, 20 * SC_SEC);                    /* blocked since 20 s */
	sc_step(s, 2 * SC_SEC);                     /* 22 s */
	assert_int_equal(sc_stats(s).capacity_wait_ns, 2 * SC_SEC);
	assert_true(kva_step(s->e, SC_SEC, &s->plan) >= 0); /* back to 1 s */
	assert_true(s->plan.head_blocked);
	assert_int_equal(sc_stats(s).capacity_wait_ns, 2 * SC_SEC);
	/* the bound still counts from 20 s on the engine's clock: it has not
	 * passed at 29 s, and passes at 30 s */
	s->now = 29 * SC_SEC;
	sc_step(s, 0);
	assert_int_equal(sc_stats(s).wait_expired, 0);
	assert_int_equal(sc_stats(s).capacity_wait_ns, 9 * SC_SEC);
	sc_step(s, SC_SEC);
	assert_int_equal(sc_stats(s).wait_expired, 1);
	assert_int_equal(kva_finish(s->e, hog), 0);
	sc_step(s, 0);
	const kva_admission *a = sc_admitted(s, h);
	assert_non_null(a);
	assert_int_equal(a->reason, KVA_REASON_WAIT_EXPIRED);
	kva_stats x = sc_stats(s);
	/* its 10 s as a restore, then 0 s blocked as a recompute */
	assert_int_equal(x.capacity_wait.count, 2);
	assert_int_equal(x.capacity_wait.sum_ns, 10 * SC_SEC);
	sc_free(s);
}

struct submitter {
	kva_engine *e;
	uint64_t id;
	kva_handle h;
	int rc;
};

static void *submit_from_other_thread(void *arg)
{
	struct submitter *x = arg;
	kva_request r = {.id = x->id, .prompt_tokens = 16};
	x->rc = kva_submit(x->e, &r, &x->h);
	return NULL;
}

/* Producer threads push onto their own lanes, and lanes have no order among
 * them: a cancel from this thread may be spliced before the submit it names
 * (made on another thread, whose lane comes later). It must still cancel,
 * once, and in the step that ingests the submit: the early cancel marks the
 * record instead of waiting in a queue the step dispatched again every step
 * (which ended it a step later). New threads take successive lanes, so both
 * orders occur. */
static void cancel_from_another_thread_never_overtakes_its_submit(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_occupy(s, 1000, 100); /* nothing else fits: requests stay waiting */
	for (uint64_t k = 0; k < 20; k++) {
		struct submitter x = {s->e, 1 + k, {0}, 1};
		pthread_t t;
		assert_int_equal(pthread_create(&t, NULL, submit_from_other_thread, &x), 0);
		pthread_join(t, NULL);
		assert_int_equal(x.rc, 0);
		assert_int_equal(kva_cancel(s->e, x.h), 0);
		uint32_t reports = 0;
		for (int i = 0; i < 3; i++) {
			sc_step(s, SC_MS);
			const kva_ended *en = sc_ended(s, x.h);
			if (en) {
				assert_int_equal(en->state, KVA_STATE_CANCELLED);
				assert_int_equal(i, 0);
				reports++;
			}
			assert_false(s->plan.backlog);
		}
		assert_int_equal(reports, 1);
	}
	assert_int_equal(sc_stats(s).waiting, 0);
	sc_free(s);
}

enum end_op { END_FINISH, END_CANCEL, END_PREEMPT };

struct ender {
	kva_engine *e;
	kva_handle h;
	enum end_op op;
	int rc;
};

static void *end_from_other_thread(void *arg)
{
	struct ender *x = arg;
	x->rc = x->op == END_CANCEL    ? kva_cancel(x->e, x->h)
	        : x->op == END_FINISH  ? kva_finish(x->e, x->h)
	                               : kva_preempt(x->e, x->h);
	return NULL;
}

/* 20 rounds: a running request with id 7 ends through `op(round)` on a new
 * thread (a preemption is then cancelled on this one), and this thread
 * resubmits id 7 at once. The end came first for the host, so the old
 * incarnation ends (FINISHED, or CANCELLED) and the resubmission is
 * accepted — never REJECTED as a duplicate — whichever lane the step splices
 * first (the new threads' lanes rotate through every order over the rounds). */
static void resubmit_after_ends_elsewhere(enum end_op (*op)(uint64_t round))
{
	struct sc *s = sc_default();
	uint64_t finished = 0;
	for (uint64_t k = 0; k < 20; k++) {
		kva_handle old = sc_occupy(s, 7, 1);
		struct ender x = {s->e, old, op(k), 1};
		pthread_t t;
		assert_int_equal(pthread_create(&t, NULL, end_from_other_thread, &x), 0);
		pthread_join(t, NULL);
		assert_int_equal(x.rc, 0);
		if (x.op == END_PREEMPT)
			assert_int_equal(kva_cancel(s->e, old), 0);
		finished += x.op == END_FINISH;
		kva_handle again = sc_submit(s, 7, 0, 16);
		sc_step(s, SC_MS);
		assert_non_null(sc_admitted(s, again));
		const kva_ended *en = sc_ended(s, old);
		assert_non_null(en);
		assert_int_equal(en->state,
		                 x.op == END_FINISH ? KVA_STATE_FINISHED : KVA_STATE_CANCELLED);
		assert_null(sc_ended(s, again));
		sc_step(s, SC_MS); /* the old end's own event: nothing more */
		assert_null(sc_ended(s, old));
		assert_int_equal(kva_finish(s->e, again), 0);
		sc_step(s, SC_MS);
	}
	kva_stats x = sc_stats(s);
	assert_int_equal(x.rejected, 0);
	assert_int_equal(x.finished, 20 + finished);
	assert_int_equal(x.cancelled, 20 - finished);
	sc_assert_conserved(s);
	assert_int_equal(sc_free_pages(s), 100);
	sc_free(s);
}

static enum end_op finish_or_cancel(uint64_t round) { return round & 1 ? END_CANCEL : END_FINISH; }
static enum end_op preempt(uint64_t round) { (void)round; return END_PREEMPT; }

/* A host finishes or cancels a request on one thread and then resubmits its
 * id on another: the resubmission may be spliced before the end it follows
 * (hardening issue, item 7). */
static void id_freed_on_another_thread_is_free_for_a_resubmit(void **st)
{
	(void)st;
	resubmit_after_ends_elsewhere(finish_or_cancel);
}

/* The same for a request preempted on one thread (its pages given back, its
 * requeue event queued), then cancelled and resubmitted on another. */
static void id_preempted_elsewhere_then_cancelled_is_free_for_a_resubmit(void **st)
{
	(void)st;
	resubmit_after_ends_elsewhere(preempt);
}

struct walk {
	uint32_t n, stop_at;
	kva_waiting_info seen[64];
};

static int record_walk(void *ctx, const kva_waiting_info *wi)
{
	struct walk *w = ctx;
	w->seen[w->n++] = *wi;
	return w->stop_at && w->n == w->stop_at;
}

static void waiting_foreach_walks_the_queue_in_admission_order(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_occupy(s, 1000, 100); /* nothing else fits: everyone waits */
	kva_handle h[5];
	for (int i = 0; i < 5; i++)
		h[i] = sc_submit(s, 10 + (uint64_t)i, 0, 32);
	sc_step(s, SC_MS);
	assert_int_equal(kva_cancel(s->e, h[2]), 0);
	sc_step(s, SC_MS);
	struct walk w = {0};
	assert_int_equal(kva_waiting_foreach(s->e, record_walk, &w, 0), 4);
	const int order[4] = {0, 1, 3, 4};
	for (int i = 0; i < 4; i++) {
		assert_int_equal(w.seen[i].handle.id, h[order[i]].id);
		assert_int_equal(w.seen[i].handle.gen, h[order[i]].gen);
		assert_int_equal(w.seen[i].handle.slot, h[order[i]].slot);
		assert_int_equal(w.seen[i].position, i);
		assert_int_equal(w.seen[i].prompt_tokens, 32);
		kva_request_info info;
		assert_int_equal(kva_query(s->e, w.seen[i].handle, &info), 0); /* usable handles */
		assert_int_equal(info.state, KVA_STATE_WAITING);
	}
	struct walk capped = {0};
	assert_int_equal(kva_waiting_foreach(s->e, record_walk, &capped, 2), 2);
	struct walk stopped = {.stop_at = 3};
	assert_int_equal(kva_waiting_foreach(s->e, record_walk, &stopped, 0), 3);
	assert_int_equal(kva_waiting_foreach(NULL, record_walk, &w, 0), -EINVAL);
	assert_int_equal(kva_waiting_foreach(s->e, NULL, &w, 0), -EINVAL);
	sc_free(s);
}

static void slots_are_reused_with_a_new_generation_and_old_handles_stay_dead(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	static kva_handle by_slot[1 << 16];
	static bool seen[1 << 16];
	memset(seen, 0, sizeof(seen));
	/* run requests to the end until one lands in a slot used before (after
	 * its grace period) */
	kva_handle old = {0}, again = {0};
	for (uint64_t id = 1; id < 1000000; id++) {
		again = sc_submit(s, id, 0, 16);
		assert_true(again.slot < (1u << 16));
		if (seen[again.slot]) {
			old = by_slot[again.slot];
			break;
		}
		seen[again.slot] = true;
		by_slot[again.slot] = again;
		sc_step(s, SC_MS);
		assert_int_equal(kva_finish(s->e, again), 0);
		sc_step(s, SC_MS);
		/* Retired slots come back after a grace period, whenever liburcu's
		 * call_rcu thread runs (late under valgrind's serialised threads):
		 * now and then wait for it, so reuse is bounded by the test, not
		 * by the scheduler of the machine. */
		if (id % 64 == 0)
			urcu_memb_barrier();
	}
	assert_int_equal(again.slot, old.slot);
	assert_true(again.gen & 1);
	assert_int_not_equal(again.gen, old.gen);
	kva_request_info info;
	assert_int_equal(kva_query(s->e, old, &info), -ENOENT);
	assert_int_equal(kva_cancel(s->e, old), -ENOENT);
	assert_int_equal(kva_finish(s->e, old), -ENOENT);
	assert_int_equal(kva_query(s->e, again, &info), 0);
	assert_int_equal(kva_query(s->e, (kva_handle){1, old.gen, 1u << 30}, &info), -ENOENT);
	sc_free(s);
}

/* ---- one step at a time: a second, concurrent kva_step gets -EBUSY ---- */

/* A directory that holds the step inside its callback until released. */
struct held_step {
	struct sc *s;
	atomic_int inside, go;
	int rc;
};

static void holding_lookup(void *ctx, uint64_t key, uint32_t prompt, kva_lookup_token t)
{
	struct held_step *x = ctx;
	(void)key, (void)prompt, (void)t;
	atomic_store_explicit(&x->inside, 1, memory_order_release);
	while (!atomic_load_explicit(&x->go, memory_order_acquire))
		sched_yield();
}

static void *step_on_other_thread(void *arg)
{
	struct held_step *x = arg;
	x->rc = kva_step(x->s->e, SC_MS, &x->s->plan);
	return NULL;
}

static void second_concurrent_step_gets_ebusy_and_changes_nothing(void **st)
{
	(void)st;
	kva_config c;
	sc_config(&c);
	struct sc *s = sc_new(&c);
	struct held_step x = {.s = s};
	kva_engine_destroy(s->e);
	s->cfg.lookup = holding_lookup;
	s->cfg.lookup_ctx = &x;
	int err;
	s->e = kva_engine_create(&s->cfg, &err);
	assert_non_null(s->e);
	sc_submit(s, 2, 0, 32);   /* no key: admitted */
	sc_submit(s, 1, KEY, 32); /* looked up: the step holds in the directory */
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, step_on_other_thread, &x), 0);
	while (!atomic_load_explicit(&x.inside, memory_order_acquire))
		sched_yield();
	/* the second caller's own plan: left exactly as it was */
	kva_admission adm[4];
	uint32_t pages[128];
	kva_plan p2 = {.admitted = adm, .admitted_cap = 4, .pages = pages, .pages_cap = 128,
	               .n_admitted = 777, .n_pages = 778, .events = 779};
	assert_int_equal(kva_step(s->e, 2 * SC_MS, &p2), -EBUSY);
	assert_int_equal(kva_step(s->e, 2 * SC_MS, &p2), -EBUSY);
	assert_int_equal(p2.n_admitted, 777);
	assert_int_equal(p2.n_pages, 778);
	assert_int_equal(p2.events, 779);
	atomic_store_explicit(&x.go, 1, memory_order_release);
	assert_int_equal(pthread_join(t, NULL), 0);
	/* the held step ingested both and admitted the unkeyed one, once */
	assert_int_equal(x.rc, 1);
	assert_int_equal(s->plan.events, 2);
	assert_int_equal(s->plan.admitted[0].handle.id, 2);
	/* the scheduler's role passes to this thread: the next step continues it */
	kva_stats before = sc_stats(s);
	assert_int_equal(before.steps, 1);
	assert_int_equal(before.running, 1);
	assert_int_equal(before.waiting, 1);
	assert_int_equal(kva_step(s->e, 3 * SC_MS, &p2), 0);
	assert_int_equal(sc_stats(s).steps, 2);
	sc_assert_conserved(s);
	sc_free(s);
}

/* Two threads each submit, step and finish in a loop: whichever step runs
 * admits each request once; the other caller is turned away. */
#define RACE_ROUNDS 4000u
struct racer {
	kva_engine *e;
	atomic_uint_fast64_t *clock;
	uint64_t first_id;
	uint32_t admitted, busy;
	uint8_t *seen; /* by id - 1, shared: each admission counts once */
};

static void *race_steps(void *arg)
{
	struct racer *r = arg;
	static _Thread_local kva_admission adm[64];
	static _Thread_local uint32_t pages[200];
	static _Thread_local kva_ended ended[128];
	kva_plan p = {.admitted = adm, .admitted_cap = 64, .pages = pages, .pages_cap = 200,
	              .ended = ended, .ended_cap = 128};
	for (uint32_t i = 0; i < RACE_ROUNDS; i++) {
		kva_request q = {.id = r->first_id + i, .prompt_tokens = 16};
		kva_handle h;
		assert_int_equal(kva_submit(r->e, &q, &h), 0);
		uint64_t now = atomic_fetch_add_explicit(r->clock, 1000, memory_order_relaxed);
		int n = kva_step(r->e, now, &p);
		if (n == -EBUSY) {
			r->busy++;
			continue;
		}
		assert_true(n >= 0);
		for (int k = 0; k < n; k++) {
			uint64_t id = adm[k].handle.id;
			assert_int_equal(r->seen[id - 1]++, 0);
			assert_int_equal(kva_finish(r->e, adm[k].handle), 0);
		}
		r->admitted += (uint32_t)n;
		sched_yield(); /* let the other thread's step in */
	}
	return NULL;
}

static void two_threads_stepping_at_once_admit_each_request_once(void **st)
{
	(void)st;
	kva_config c;
	sc_config(&c);
	c.max_running = 256;
	struct sc *s = sc_new(&c);
	uint8_t *seen = calloc(2 * RACE_ROUNDS, 1);
	assert_non_null(seen);
	atomic_uint_fast64_t clock = 1;
	struct racer a = {s->e, &clock, 1, 0, 0, seen}, b = {s->e, &clock, 1 + RACE_ROUNDS, 0, 0, seen};
	pthread_t ta, tb;
	assert_int_equal(pthread_create(&ta, NULL, race_steps, &a), 0);
	assert_int_equal(pthread_create(&tb, NULL, race_steps, &b), 0);
	assert_int_equal(pthread_join(ta, NULL), 0);
	assert_int_equal(pthread_join(tb, NULL), 0);
	/* what the racing loops left: admitted by the last steps here */
	uint32_t rest = 0;
	for (int i = 0; i < 1000 && a.admitted + b.admitted + rest < 2 * RACE_ROUNDS; i++) {
		int n = sc_step(s, SC_MS);
		for (int k = 0; k < n; k++) {
			assert_int_equal(seen[s->plan.admitted[k].handle.id - 1]++, 0);
			assert_int_equal(kva_finish(s->e, s->plan.admitted[k].handle), 0);
		}
		rest += (uint32_t)n;
	}
	assert_int_equal(a.admitted + b.admitted + rest, 2 * RACE_ROUNDS);
	for (uint32_t i = 0; i < 2 * RACE_ROUNDS; i++)
		assert_int_equal(seen[i], 1);
	sc_step(s, SC_MS); /* the last finishes are counted by a step */
	kva_stats t = sc_stats(s);
	assert_int_equal(t.finished, 2 * RACE_ROUNDS);
	assert_int_equal(t.running + t.waiting, 0);
	assert_int_equal(t.free_pages, t.total_pages);
	sc_assert_conserved(s);
	free(seen);
	sc_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(step_handles_only_events_present_when_it_began),
	    cmocka_unit_test(answer_from_the_lookup_callback_is_handled_in_the_same_step),
	    cmocka_unit_test(wake_fires_when_the_inbox_goes_from_empty_to_non_empty),
	    cmocka_unit_test(wake_never_runs_inside_an_rcu_read_side_section),
	    cmocka_unit_test(backlog_says_work_is_left_for_the_next_step),
	    cmocka_unit_test(huge_durations_mean_never_instead_of_wrapping),
	    cmocka_unit_test(time_going_backwards_is_no_time_passing),
	    cmocka_unit_test(cancel_from_another_thread_never_overtakes_its_submit),
	    cmocka_unit_test(id_freed_on_another_thread_is_free_for_a_resubmit),
	    cmocka_unit_test(id_preempted_elsewhere_then_cancelled_is_free_for_a_resubmit),
	    cmocka_unit_test(waiting_foreach_walks_the_queue_in_admission_order),
	    cmocka_unit_test(slots_are_reused_with_a_new_generation_and_old_handles_stay_dead),
	    cmocka_unit_test(second_concurrent_step_gets_ebusy_and_changes_nothing),
	    cmocka_unit_test(two_threads_stepping_at_once_admit_each_request_once),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
