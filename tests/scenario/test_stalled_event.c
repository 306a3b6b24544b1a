/* SPDX-License-Identifier: Apache-2.0 */
/*
 * An event that needs memory the step cannot get waits for the next step
 * (docs/design.md, "Memory"): e->stalled holds it. A step that stalled
 * must not handle other events that may stall too: a second stall in the
 * same step used to overwrite the first, which was then lost (its answer
 * leaked, its request waited for that lookup for ever). The rule-22 recheck
 * loop (62931b2) handles the lookup callback's answers again after
 * admission, so a step whose inbox stalled can stall a second time there.
 *
 * KVADMIT_FAULT_INJECTION builds only (skipped elsewhere): the checkpoint
 * index cannot grow while allocations fail, and fills up.
 */
#include "scenario.h"

#ifdef KVA_FAULT_INJECTION
#include "engine_state.h"

uint64_t kva__fault_arm(uint64_t k, int sticky); /* reservations/alloc.h */

enum { NF = 33, NW = 94, NY = 34 }; /* the index holds 127 ids (cap 128) */
#define KEY_F 7
#define KEY_W 8
#define KEY_Y 9
#define KEY_Z 10

static struct sc *S;
static bool failing; /* allocations fail (sticky) outside the host's own calls */
static kva_lookup_token ytok[NY], ztok;
static uint32_t ny, nf_asked;
static kva_lookup_token wtok[NW];
static uint32_t nw;

static void faults(bool on)
{
	kva__fault_arm(on ? 1 : 0, on);
}

/* The host's own allocations (answers) succeed; the engine's fail. */
static void answer(kva_lookup_token t, const kva_manifest *m)
{
	faults(false);
	assert_int_equal(kva_lookup_answer(S->e, t, m), 0);
	faults(failing);
}

static kva_manifest one(uint32_t pos, uint64_t id)
{
	kva_manifest m = {.count = 1};
	m.entries[0] = sc_ckpt(pos, id, 0);
	return m;
}

/* F requests (the forgotten heads) are answered at once with a miss; the
 * last one's lookup also brings the answers of every Y request. W, Y and Z
 * are answered by the test. */
static void lookup_cb(void *ctx, uint64_t key, uint32_t prompt, kva_lookup_token t)
{
	(void)ctx;
	(void)prompt;
	if (key == KEY_F) {
		kva_manifest miss = {0};
		answer(t, &miss);
		if (++nf_asked == NF)
			for (uint32_t i = 0; i < ny; i++) {
				kva_manifest m = one(160, 3000 + i);
				answer(ytok[i], &m);
			}
	} else if (key == KEY_W) {
		wtok[nw++] = t;
	} else if (key == KEY_Y) {
		ytok[ny++] = t;
	} else {
		ztok = t;
	}
}

/* S: an engine whose lookups wait for their answers (no timeout, no
 * bounded wait, no wait logs) and go to `cb`: these tests answer them. */
static void engine_answered_by(kva_lookup_fn cb)
{
	kva_config c;
	sc_config(&c);
	c.lookup_timeout_ns = 0;
	c.max_restore_wait_ns = 0;
	c.wait_log_interval_ns = 0;
	S = sc_new(&c);
	/* sc_new installed the scripted directory: replaced */
	kva_engine_destroy(S->e);
	S->cfg.lookup = cb;
	int err;
	S->e = kva_engine_create(&S->cfg, &err);
	assert_non_null(S->e);
}

static void stalled_answer_is_never_dropped_by_a_second_stall(void **st)
{
	(void)st;
	engine_answered_by(lookup_cb);

	/* F: full local hits of 2 pages, running */
	kva_handle f[NF];
	for (int i = 0; i < NF; i++) {
		kva_request r = {.id = 1 + (uint64_t)i, .prefix_key = KEY_F, .prompt_tokens = 32,
		                 .local = sc_ckpt(32, 500 + (uint64_t)i, 1)};
		assert_int_equal(kva_submit(S->e, &r, &f[i]), 0);
	}
	assert_int_equal(sc_step(S, 0), NF);
	kva_handle hog = sc_occupy(S, 100, 100 - 2 * NF);
	/* W: restores of their own checkpoint each; Y and Z: lookups out */
	for (int i = 0; i < NW; i++)
		sc_submit(S, 200 + (uint64_t)i, KEY_W, 480);
	for (int i = 0; i < NY; i++)
		sc_submit(S, 400 + (uint64_t)i, KEY_Y, 480);
	kva_handle z = sc_submit(S, 500, KEY_Z, 480);
	sc_step(S, 0);
	assert_int_equal(nw, NW);
	assert_int_equal(ny, NY);
	const uint32_t before_growth = 96 - NF; /* the index grows at 97 ids */
	for (uint32_t i = 0; i < before_growth; i++) {
		kva_manifest m = one(160, 2000 + i);
		answer(wtok[i], &m);
	}
	sc_step(S, 0);
	/* F preempted: back to the front, resumed from their local checkpoints
	 * (they hold their grants), blocked: the hog took their pages */
	for (int i = NF - 1; i >= 0; i--)
		assert_int_equal(kva_preempt(S->e, f[i]), 0);
	assert_int_equal(kva_grow(S->e, hog, 2 * NF, NULL), 0);
	sc_step(S, 0);
	assert_true(S->plan.head_blocked);
	assert_int_equal(S->e->ckpt.count, 96);

	/* memory runs out: the index can no longer grow and fills up */
	failing = true;
	faults(true);
	for (uint32_t i = before_growth; i < NW; i++) {
		kva_manifest m = one(160, 2000 + i);
		answer(wtok[i], &m);
	}
	sc_step(S, 0);
	assert_int_equal(S->e->ckpt.count, 127);

	/* A reset forgets the F checkpoints; the hog ends; Z's answer arrives
	 * and finds no room in the index: it stalls, to be handled first next
	 * step. The recheck of the forgotten heads then admits F (their grants
	 * need no memory) and its last answer brings Y's answers, the last of
	 * which stalls as well. */
	assert_int_equal(kva_reset_prefix_cache(S->e), 0);
	assert_int_equal(kva_finish(S->e, hog), 0);
	kva_manifest zm = one(160, 4000);
	answer(ztok, &zm);
	sc_step(S, 0);
	assert_true(sc_stats(S).alloc_failures > 0);
	/* the first event that stalled is the one kept for the next step */
	assert_non_null(S->e->stalled);
	assert_int_equal(S->e->stalled->type, KVA__EV_ANSWER);
	struct kva__answer *kept = caa_container_of(S->e->stalled, struct kva__answer, ev);
	assert_int_equal(kept->token.id, 500); /* Z's */

	/* memory is back */
	failing = false;
	faults(false);
	for (int i = 0; i < 10; i++)
		sc_step(S, SC_MS);
	for (int i = 0; i < NF; i++)
		assert_int_equal(sc_state(S, f[i]), KVA_STATE_RUNNING);
	/* the directory answered Z: its answer was handled, not dropped */
	kva_request_info info;
	assert_int_equal(kva_query(S->e, z, &info), 0);
	assert_true(info.has_selection);
	assert_int_equal(info.selected_position, 160);
	assert_int_equal(sc_stats(S).lookups_answered, sc_stats(S).lookups_issued);
	sc_assert_conserved(S);
	sc_free(S);
}

/* A cancel behind an event that stalled waits with it in the inbox, but its
 * request is not admitted meanwhile: a cancel takes effect at the next
 * step (kvadmit.h). W (no key, a recompute) waits at the head while the host
 * holds admissions; then X's answer, with a local checkpoint the engine has
 * no memory to track yet, stalls, and W's cancel sits behind it. */
static void cancel_behind_a_stalled_event_is_not_admitted(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	kva_handle w = sc_submit(s, 1, 0, 16);
	kva_handle x = sc_submit(s, 2, KEY_F, 64); /* answered by the test */
	s->plan.hold_admissions = true;
	sc_step(s, SC_MS);
	assert_int_equal(s->plan.n_admitted, 0);
	assert_int_equal(s->n_lookups, 1);
	kva_manifest m = {.count = 1};
	m.entries[0] = sc_ckpt(32, 500, 1);
	assert_int_equal(kva_lookup_answer(s->e, s->lookups[0].token, &m), 0);
	assert_int_equal(kva_cancel(s->e, w), 0);
	s->plan.hold_admissions = false;
	kva__fault_arm(1, 0); /* the step's first allocation: for X's answer */
	sc_step(s, SC_MS);
	kva__fault_arm(0, 0);
	assert_true(s->plan.backlog); /* the answer waits for memory, the cancel behind it */
	assert_null(sc_admitted(s, w));
	sc_step(s, SC_MS);
	assert_null(sc_admitted(s, w));
	const kva_ended *end = sc_ended(s, w);
	assert_non_null(end);
	assert_int_equal(end->state, KVA_STATE_CANCELLED);
	assert_non_null(sc_admitted(s, x)); /* LOCAL, from its answer */
	sc_assert_conserved(s);
	sc_free(s);
}

/* kva_local_checkpoint() "takes effect at the next step" (kvadmit.h), and
 * an event that needs memory waits for the next step (docs/design.md,
 * "Memory"). A statement whose checkpoint the engine has no room to track yet
 * (the held local checkpoints, reservations/held.c) used to be dropped, with a
 * log saying it would be retried: the running request it was stated for,
 * preempted, looked up again and recomputed instead of resuming from it (rule
 * host-local-checkpoints). */
static void local_statement_without_memory_waits_for_the_next_step(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	kva_manifest miss = {0};
	s->dir[s->n_dir++] = (struct sc_dir_entry){KEY_F, miss};
	kva_handle h = sc_submit(s, 1, KEY_F, 256);
	sc_step(s, SC_MS);
	assert_non_null(sc_admitted(s, h)); /* a recompute: the directory missed */
	kva_checkpoint loc = sc_ckpt(160, 70, 1);
	assert_int_equal(kva_local_checkpoint(s->e, h, &loc), 0);
	kva__fault_arm(1, 0); /* the step's first allocation: the tracker's */
	sc_step(s, SC_MS);
	kva__fault_arm(0, 0);
	assert_true(sc_stats(s).alloc_failures > 0);
	assert_true(s->plan.backlog); /* the statement waits for memory */
	sc_step(s, SC_MS);
	assert_int_equal(sc_stats(s).local_stated, 1);
	uint32_t lookups = s->n_lookups;
	assert_int_equal(kva_preempt(s->e, h), 0);
	sc_step(s, SC_MS);
	const kva_admission *a = sc_admitted(s, h);
	assert_non_null(a);
	assert_int_equal(a->how, KVA_ADMIT_LOCAL); /* resumed from the stated checkpoint */
	assert_int_equal(a->local_tokens, 160);
	assert_int_equal(s->n_lookups, lookups);
	sc_assert_conserved(s);
	sc_free(s);
}

/* Lookups the test answers itself, in the order they were issued. */
static kva_lookup_token ltok[160];
static uint32_t nltok;

static void record_cb(void *ctx, uint64_t key, uint32_t prompt, kva_lookup_token t)
{
	(void)ctx;
	(void)key;
	(void)prompt;
	ltok[nltok++] = t;
}

/* While an event waits for memory, the step still admits what needs none:
 * here the admission is what gives the waiting event its room. The index
 * is full and cannot grow; the last answer waits for an entry. The head, a
 * preempted request resuming from its local checkpoint with the pages list
 * of its first admission, needs no allocation, and once it is admitted its
 * index entry is free for that answer. (A step that admitted nothing while
 * an event waited never got there: no admission, no room, for ever.) */
static void a_waiting_event_does_not_stop_admissions_that_need_no_memory(void **st)
{
	(void)st;
	engine_answered_by(record_cb);
	nltok = 0;
	kva_request r = {.id = 1, .prompt_tokens = 32, .local = sc_ckpt(32, 500, 1)};
	kva_handle f;
	assert_int_equal(kva_submit(S->e, &r, &f), 0);
	assert_int_equal(sc_step(S, 0), 1);
	kva_handle hog = sc_occupy(S, 100, 98);
	assert_int_equal(kva_preempt(S->e, f), 0);
	assert_int_equal(kva_grow(S->e, hog, 2, NULL), 0);
	sc_step(S, 0);
	assert_int_equal(sc_state(S, f), KVA_STATE_WAITING); /* blocked: the hog has its pages */
	for (int i = 0; i < 127; i++)
		sc_submit(S, 200 + (uint64_t)i, KEY_W, 480);
	sc_step(S, 0);
	assert_int_equal(nltok, 127);
	for (int i = 0; i < 95; i++) {
		kva_manifest m = one(160, 2000 + (uint64_t)i);
		answer(ltok[i], &m);
	}
	sc_step(S, 0);
	failing = true; /* the index can no longer grow and fills up */
	faults(true);
	for (int i = 95; i < 126; i++) {
		kva_manifest m = one(160, 2000 + (uint64_t)i);
		answer(ltok[i], &m);
	}
	sc_step(S, 0);
	assert_int_equal(S->e->ckpt.count, 127);
	assert_int_equal(kva_finish(S->e, hog), 0);
	kva_manifest last = one(160, 4000);
	answer(ltok[126], &last);
	for (int i = 0; i < 3; i++)
		sc_step(S, SC_MS);
	assert_int_equal(sc_state(S, f), KVA_STATE_RUNNING); /* admitted meanwhile */
	assert_null(S->e->stalled); /* and the answer got the entry f left */
	failing = false;
	faults(false);
	sc_free(S);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(stalled_answer_is_never_dropped_by_a_second_stall),
		cmocka_unit_test(cancel_behind_a_stalled_event_is_not_admitted),
		cmocka_unit_test(a_waiting_event_does_not_stop_admissions_that_need_no_memory),
		cmocka_unit_test(local_statement_without_memory_waits_for_the_next_step),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
#else
int main(void)
{
	printf("test_stalled_event: needs -DKVADMIT_FAULT_INJECTION=ON; skipped\n");
	return 77;
}
#endif
