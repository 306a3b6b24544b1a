/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Requests that return to the front of the waiting queue (docs/design.md, rule
 * fcfs-ready-bypass, returning to the front): a preemption, a reset that finds
 * a request READY, the last report of a copy a reset overtook. Each goes to the
 * front when the step handles its event, so of those returning together the one
 * handled last goes first; a step that stalls for memory delays the events from
 * the stalled one on, and never reorders them.
 *
 * Each scenario runs without a stall, and in KVADMIT_FAULT_INJECTION builds
 * also with one: a directory answer ahead of the returns carries a local
 * checkpoint the engine has no memory to track yet (the step's first
 * allocation fails), so it waits for the next step, and what is behind it
 * with it. The steps hold admissions: the waiting queue shows the order.
 */
#include "scenario.h"

#ifdef KVA_FAULT_INJECTION
#include "engine_state.h"

uint64_t kva__fault_arm(uint64_t k, int sticky); /* reservations/alloc.h */
#endif

#define KEY_A 5 /* A's restore: an external checkpoint, answered at once */
#define KEY_X 6 /* X's lookup: answered by the test */

enum { A_ID = 1, B_ID = 2, X_ID = 3 };

/* Takes a request's first copy attempt and refuses the later ones: the
 * engine reports a refused rank failed itself, at the next step. */
static int first_attempt_only(void *ctx, kva_engine *e, const kva_copy_job *job)
{
	(void)ctx;
	(void)e;
	return job->token.attempt == 1 ? 0 : -EIO;
}

/* A importing (its first attempt out), B running, X waiting for its lookup. */
struct front {
	struct sc *s;
	kva_handle a, b;
	kva_copy_token a_copy;
	kva_lookup_token x_lookup;
};

static struct front start(void)
{
	kva_config c;
	sc_config(&c);
	c.importers[0].submit = first_attempt_only;
	struct front f = {.s = sc_new(&c)};
	struct sc *s = f.s;
	sc_dir_set(s, KEY_A, sc_ckpt(160, 9, 0));
	f.a = sc_submit(s, A_ID, KEY_A, 320);
	f.b = sc_submit(s, B_ID, 0, 16);
	sc_submit(s, X_ID, KEY_X, 64);
	sc_step(s, SC_MS);
	assert_int_equal(sc_state(s, f.a), KVA_STATE_IMPORTING);
	assert_int_equal(sc_state(s, f.b), KVA_STATE_RUNNING);
	assert_int_equal(s->plan.n_copies, 1);
	f.a_copy = s->copies[0].token;
	assert_int_equal(s->n_lookups, 2);
	assert_int_equal(s->lookups[1].key, KEY_X);
	f.x_lookup = s->lookups[1].token;
	s->plan.hold_admissions = true;
	return f;
}

/* The host's calls between the setup and the steps. */
enum call { RESET, FAIL_A_COPY, ANSWER_X, PREEMPT_B, CALLS_END };

static void call(struct front *f, enum call c)
{
	kva_engine *e = f->s->e;
	kva_manifest m = {.count = 1};
	switch (c) {
	case RESET:
		assert_int_equal(kva_reset_prefix_cache(e), 0);
		break;
	case FAIL_A_COPY:
		assert_int_equal(kva_copy_done(e, f->a_copy, 0, -EIO), 0);
		break;
	case ANSWER_X: /* a local checkpoint, which the engine tracks (an allocation) */
		m.entries[0] = sc_ckpt(32, 500, 1);
		assert_int_equal(kva_lookup_answer(e, f->x_lookup, &m), 0);
		break;
	default:
		assert_int_equal(kva_preempt(e, f->b), 0);
		break;
	}
}

/* The next step; with `stall`, X's answer (the step's first allocation)
 * waits for memory, and the events behind it with it. */
static void step(struct front *f, bool stall)
{
	struct sc *s = f->s;
#ifdef KVA_FAULT_INJECTION
	if (stall)
		kva__fault_arm(1, 0);
	sc_step(s, SC_MS);
	kva__fault_arm(0, 0);
	if (stall) {
		assert_non_null(s->e->stalled);
		assert_int_equal(s->e->stalled->type, KVA__EV_ANSWER);
	}
#else
	assert_false(stall);
	sc_step(s, SC_MS);
#endif
}

static int collect_id(void *ctx, const kva_waiting_info *w)
{
	uint64_t *ids = ctx;
	ids[w->position] = w->handle.id;
	return 0;
}

/* The host's `calls`, two steps (the first stalls at X's answer with
 * `stall`), then the waiting queue: `first`, `second`, then X (which waited
 * at the back all along); then all three run. */
static void returns(bool stall, const enum call *calls, uint64_t first, uint64_t second)
{
	struct front f = start();
	struct sc *s = f.s;
	for (; *calls != CALLS_END; calls++)
		call(&f, *calls);
	step(&f, stall);
	step(&f, false);
	uint64_t ids[4] = {0};
	assert_int_equal(kva_waiting_foreach(s->e, collect_id, ids, 4), 3);
	assert_int_equal(ids[0], first);
	assert_int_equal(ids[1], second);
	assert_int_equal(ids[2], X_ID);
	s->plan.hold_admissions = false;
	/* A's later attempts are refused too: it recomputes with what it owns */
	for (int i = 0; i < 8 && sc_stats(s).running < 3; i++)
		sc_step(s, SC_MS);
	assert_int_equal(sc_stats(s).running, 3);
	sc_assert_conserved(s);
	sc_free(s);
}

/* The issue-37 order: a reset, then A's copy fails (the reset overtook it:
 * A returns) and B is preempted, both handled in one step. B's event is
 * the later one: B goes first, whether or not a stall ahead of them made
 * them wait a step. */
static const enum call later_event[] = {ANSWER_X, RESET, FAIL_A_COPY, PREEMPT_B, CALLS_END};

/* A's failed copy is retried before the reset; the retry's rank is refused
 * when it is dispatched, at the end of the step, and that refusal, the
 * engine's own event, sends A back (the reset overtook the retry) at the
 * next step's start, after B's preemption, which the host called before
 * that step. Without a stall B returns in the first step and A in the
 * second: A first. A stall at X's answer delays B's preemption to the
 * second step; it used to be handled there after the refusal, which the
 * stalled step produced later: B first. */
static const enum call refusal_later[] = {FAIL_A_COPY, RESET, ANSWER_X, PREEMPT_B, CALLS_END};

static void returns_in_one_step_go_later_event_first(void **st)
{
	(void)st;
	returns(false, later_event, B_ID, A_ID);
}

static void a_refused_copy_returns_after_an_earlier_preemption(void **st)
{
	(void)st;
	returns(false, refusal_later, A_ID, B_ID);
}

#ifdef KVA_FAULT_INJECTION
static void a_stall_does_not_change_which_goes_first(void **st)
{
	(void)st;
	returns(true, later_event, B_ID, A_ID);
}

static void a_stall_does_not_reorder_a_preemption_and_a_refused_copy(void **st)
{
	(void)st;
	returns(true, refusal_later, A_ID, B_ID);
}
#endif

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(returns_in_one_step_go_later_event_first),
		cmocka_unit_test(a_refused_copy_returns_after_an_earlier_preemption),
#ifdef KVA_FAULT_INJECTION
		cmocka_unit_test(a_stall_does_not_change_which_goes_first),
		cmocka_unit_test(a_stall_does_not_reorder_a_preemption_and_a_refused_copy),
#endif
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
