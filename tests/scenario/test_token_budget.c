/* SPDX-License-Identifier: Apache-2.0 */
/* The per-step prefill token budget (kva_plan.token_budget, vLLM's
 * max_num_batched_tokens) and a step that admits nothing because the host
 * preempted (kva_plan.hold_admissions). FCFS and the READY bypass stay. */
#include "scenario.h"

static void budget_stops_admissions_and_cuts_the_last_first_chunk(void **st)
{
	(void)st;
	struct sc *s = sc_default(); /* chunk 256 tokens, 16-token pages */
	kva_handle h[4];
	for (int i = 0; i < 4; i++)
		h[i] = sc_submit(s, (uint64_t)i + 1, 0, 1000);
	s->plan.token_budget = 600;
	assert_int_equal(sc_step(s, 0), 3);
	assert_int_equal(sc_admitted(s, h[0])->npages, 16);
	assert_int_equal(sc_admitted(s, h[1])->npages, 16);
	/* 88 tokens of budget left: its first grant covers them (6 pages) */
	assert_int_equal(sc_admitted(s, h[2])->npages, 6);
	assert_int_equal(sc_admitted(s, h[2])->recompute_tokens, 1000);
	assert_null(sc_admitted(s, h[3]));
	assert_false(s->plan.head_blocked); /* not blocked on capacity: out of budget */
	assert_int_equal(sc_step(s, 0), 1); /* a new step, a new budget */
	assert_non_null(sc_admitted(s, h[3]));
	s->plan.token_budget = 0; /* unlimited */
	for (int i = 0; i < 4; i++)
		sc_submit(s, (uint64_t)i + 10, 0, 16);
	assert_int_equal(sc_step(s, 0), 4);
	sc_free(s);
}

static void an_import_costs_nothing_until_it_is_admitted(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, 7, sc_ckpt(256, 80, 0));
	kva_handle a = sc_submit(s, 1, 0, 256);
	kva_handle b = sc_submit(s, 2, 7, 512);
	s->plan.token_budget = 256;
	assert_int_equal(sc_step(s, 0), 1); /* a spends the budget */
	assert_non_null(sc_admitted(s, a));
	assert_int_equal(s->plan.n_copies, 1); /* b's import still starts */
	assert_int_equal(sc_state(s, b), KVA_STATE_IMPORTING);
	sc_copies_done(s, 0);
	s->plan.token_budget = 10; /* b would prefill 256 after its import: cut to 10 */
	kva_handle c = sc_submit(s, 3, 0, 64);
	assert_int_equal(sc_step(s, 0), 1);
	const kva_admission *x = sc_admitted(s, b);
	assert_non_null(x);
	assert_int_equal(x->how, KVA_ADMIT_RESTORE);
	assert_int_equal(x->restored_tokens, 256);
	assert_null(sc_admitted(s, c)); /* nothing left for c */
	sc_free(s);
}

static void ready_restores_pass_a_blocked_head_within_the_budget(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, 7, sc_ckpt(32, 80, 0));
	kva_handle r1 = sc_submit(s, 1, 7, 64);
	kva_handle r2 = sc_submit(s, 2, 7, 64);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 2);
	kva_copy_job j[2] = {s->copies[0], s->copies[1]};
	sc_occupy(s, 3, 90); /* 2 pages free */
	kva_handle head = sc_submit(s, 4, 0, 512); /* first chunk 16 pages: blocked */
	assert_int_equal(kva_copy_done(s->e, j[0].token, 0, 0), 0);
	assert_int_equal(kva_copy_done(s->e, j[1].token, 0, 0), 0);
	s->plan.token_budget = 1; /* one token: one READY restore, cut */
	assert_int_equal(sc_step(s, 0), 1);
	assert_non_null(sc_admitted(s, r1)); /* queue order */
	assert_null(sc_admitted(s, r2));
	assert_null(sc_admitted(s, head));
	assert_int_equal(sc_step(s, 0), 1);
	assert_non_null(sc_admitted(s, r2));
	s->plan.token_budget = 1000; /* budget to spare: the head blocks on capacity */
	assert_int_equal(sc_step(s, 0), 0);
	assert_true(s->plan.head_blocked);
	assert_int_equal(sc_state(s, head), KVA_STATE_WAITING);
	sc_free(s);
}

static void a_full_local_hit_still_costs_one_token(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	kva_request q = {.id = 1, .prefix_key = 7, .prompt_tokens = 64, .local = sc_ckpt(64, 9, 1)};
	kva_handle h, h2;
	assert_int_equal(kva_submit(s->e, &q, &h), 0);
	q.id = 2;
	assert_int_equal(kva_submit(s->e, &q, &h2), 0);
	s->plan.token_budget = 1;
	assert_int_equal(sc_step(s, 0), 1);
	assert_int_equal(sc_admitted(s, h)->how, KVA_ADMIT_LOCAL);
	assert_null(sc_admitted(s, h2));
	sc_free(s);
}

static void a_step_that_preempted_admits_nothing_new(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, 7, sc_ckpt(32, 80, 0));
	kva_handle run = sc_occupy(s, 1, 4);
	kva_handle r = sc_submit(s, 2, 7, 64);
	sc_step(s, 0); /* r imports */
	sc_copies_done(s, 0);
	kva_handle w = sc_submit(s, 3, 0, 16);
	kva_handle gone = sc_submit(s, 4, 0, 16);
	assert_int_equal(kva_cancel(s->e, gone), 0);
	assert_int_equal(kva_preempt(s->e, run), 0);
	s->plan.hold_admissions = true;
	assert_int_equal(sc_step(s, 0), 0);
	assert_int_equal(sc_state(s, r), KVA_STATE_READY); /* READY waits too */
	assert_int_equal(sc_state(s, w), KVA_STATE_WAITING);
	assert_non_null(sc_ended(s, gone)); /* events are still handled */
	s->plan.hold_admissions = false;
	assert_int_equal(sc_step(s, 0), 3); /* r (READY), run (requeued at the front), w */
	sc_free(s);
}

/* A host that passes what is left of its budget: 0 left admits nothing
 * that prefills (a full local hit costs one token too), while the old
 * meaning of 0 (unlimited) stays for plans that do not say exact, and
 * KVA_TOKEN_BUDGET_UNLIMITED is no budget in either mode. */
static void an_exact_budget_of_zero_admits_nothing_that_prefills(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	assert_true(kva_has_feature(KVA_FEATURE_EXACT_BUDGET));
	kva_handle h[3];
	for (int i = 0; i < 3; i++)
		h[i] = sc_submit(s, (uint64_t)i + 1, 0, 64);
	kva_handle hit = sc_submit_local(s, 9, 0, 64, sc_ckpt(64, 90, 1));
	s->plan.token_budget_exact = true;
	s->plan.token_budget = 0;
	for (int i = 0; i < 3; i++)
		assert_int_equal(sc_step(s, SC_MS), 0);
	assert_int_equal(sc_stats(s).waiting, 4);
	assert_false(s->plan.head_blocked); /* out of budget, not of capacity */
	s->plan.token_budget = 64; /* exactly one first chunk */
	assert_int_equal(sc_step(s, SC_MS), 1);
	assert_non_null(sc_admitted(s, h[0]));
	s->plan.token_budget = KVA_TOKEN_BUDGET_UNLIMITED;
	assert_int_equal(sc_step(s, SC_MS), 3);
	assert_non_null(sc_admitted(s, hit));
	s->plan.token_budget_exact = false; /* 0 means unlimited again */
	s->plan.token_budget = 0;
	for (int i = 0; i < 3; i++)
		sc_submit(s, (uint64_t)i + 20, 0, 64);
	assert_int_equal(sc_step(s, SC_MS), 3);
	sc_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(budget_stops_admissions_and_cuts_the_last_first_chunk),
		cmocka_unit_test(an_import_costs_nothing_until_it_is_admitted),
		cmocka_unit_test(ready_restores_pass_a_blocked_head_within_the_budget),
		cmocka_unit_test(a_full_local_hit_still_costs_one_token),
		cmocka_unit_test(a_step_that_preempted_admits_nothing_new),
		cmocka_unit_test(an_exact_budget_of_zero_admits_nothing_that_prefills),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
