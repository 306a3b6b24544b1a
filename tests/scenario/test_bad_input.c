/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Bad input, one test per public entry point: NULL, unknown, stale (ended
 * or retired incarnation) and out-of-range arguments, repeated calls and
 * malformed manifests. Each call must return the negative errno that
 * kvadmit.h documents for it, change nothing, and leave the engine working:
 * after the bad calls a plain submit -> admit -> finish round trip still
 * works and free + reserved + in_use + draining == total.
 */
#include <limits.h>

#include "scenario.h"

#define KEY 7
#define NOKEY_DIR 99 /* a key the scripted directory never answers */

static const kva_handle unknown_handle = {123456789, 1, 0};

/* Finishes running h; the next step reports it finished. */
static void finish_and_step(struct sc *s, kva_handle h)
{
	assert_int_equal(kva_finish(s->e, h), 0);
	sc_step(s, 0);
	const kva_ended *en = sc_ended(s, h);
	assert_non_null(en);
	assert_int_equal(en->state, KVA_STATE_FINISHED);
}

/* The engine still admits and finishes a fresh request, and conserves
 * credits before and after. Needs an unblocked waiting queue and 1 page. */
static void assert_still_works(struct sc *s)
{
	static uint64_t next_id = 1ull << 40;
	sc_assert_conserved(s);
	kva_handle h = sc_submit(s, next_id++, 0, 16);
	sc_step(s, 0);
	const kva_admission *a = sc_admitted(s, h);
	assert_non_null(a);
	assert_int_equal(a->how, KVA_ADMIT_RECOMPUTE);
	finish_and_step(s, h);
	sc_assert_conserved(s);
}

/* With nothing admitted, in flight or draining every credit is free. */
static void assert_all_free(struct sc *s)
{
	kva_stats st = sc_stats(s);
	assert_int_equal(st.free_pages, st.total_pages);
	assert_int_equal(st.reserved_pages + st.in_use_pages + st.draining_pages, 0);
	assert_int_equal(st.free_copy_slots, s->cfg.copy_slots);
	assert_int_equal(st.free_run_slots, s->cfg.max_running);
	assert_int_equal(st.waiting + st.importing + st.ready + st.running, 0);
}

/* Every test ends here: the bad calls before left a working, empty engine. */
static void end_recovered(struct sc *s)
{
	assert_still_works(s);
	assert_all_free(s);
	sc_free(s);
}

/* An importer that accepts every job and reports nothing (the test does). */
static int idle_import(void *ctx, kva_engine *e, const kva_copy_job *job)
{
	(void)ctx;
	(void)e;
	(void)job;
	return 0;
}

static void expect_create_einval(const kva_config *c)
{
	int err = 0;
	assert_null(kva_engine_create(c, &err));
	assert_int_equal(err, -EINVAL);
	assert_null(kva_engine_create(c, NULL)); /* err is optional */
}

static void create_rejects_null_and_malformed_configs(void **st)
{
	(void)st;
	kva_config_default(NULL); /* tolerated */
	expect_create_einval(NULL);
	kva_config good, c;
	sc_config(&good);
	c = good, c.total_pages = 0, expect_create_einval(&c);
	c = good, c.page_tokens = 0, expect_create_einval(&c);
	c = good, c.prefill_chunk_tokens = 0, expect_create_einval(&c);
	c = good, c.copy_slots = 0, expect_create_einval(&c);
	c = good, c.max_running = 0, expect_create_einval(&c);
	c = good, c.world_size = 0, expect_create_einval(&c);
	c = good, c.world_size = KVA_MAX_WORLD + 1, expect_create_einval(&c);
	c = good, c.world_size = UINT32_MAX, expect_create_einval(&c);
	c = good, c.decode_reserve_pages = c.total_pages, expect_create_einval(&c);
	c = good, c.decode_reserve_pages = c.total_pages + 1, expect_create_einval(&c);
	c = good, c.decode_reserve_pages = UINT32_MAX, expect_create_einval(&c);
	c = good, c.decode_headroom_pages = c.total_pages + 1, expect_create_einval(&c);
	c = good, c.decode_headroom_pages = UINT32_MAX, expect_create_einval(&c);
	c = good, c.policy = KVA_POLICY_COST + 1, expect_create_einval(&c);
	c = good, c.policy = KVA_POLICY_COST, c.cost.page_bytes = 0, expect_create_einval(&c);
	c = good, c.policy = -1, expect_create_einval(&c);
	c = good, c.policy = INT_MAX, expect_create_einval(&c);
	/* importers must cover every rank or none */
	c = good, c.world_size = 2, c.importers[0].submit = idle_import, expect_create_einval(&c);
	c = good, c.world_size = 2, c.importers[1].submit = idle_import, expect_create_einval(&c);
	c = good, c.world_size = 4,
	c.importers[0].submit = c.importers[1].submit = c.importers[3].submit = idle_import,
	expect_create_einval(&c);

	/* the boundaries themselves are accepted */
	int err = 1;
	c = good, c.world_size = KVA_MAX_WORLD, c.decode_reserve_pages = c.total_pages - 1;
	for (int i = 0; i < KVA_MAX_WORLD; i++)
		c.importers[i].submit = idle_import;
	kva_engine *e = kva_engine_create(&c, &err);
	assert_non_null(e);
	assert_int_equal(err, 0);
	kva_engine_destroy(e);
	c = good, c.policy = KVA_POLICY_LEGACY;
	e = kva_engine_create(&c, NULL);
	assert_non_null(e);
	kva_engine_destroy(e);
	c = good, c.decode_headroom_pages = c.total_pages; /* 0..total_pages */
	e = kva_engine_create(&c, &err);
	assert_non_null(e);
	assert_int_equal(err, 0);
	kva_engine_destroy(e);

	struct sc *s = sc_new(&good);
	end_recovered(s);
}

static void destroy_null_is_a_no_op_and_destroy_frees_work_in_flight(void **st)
{
	(void)st;
	kva_engine_destroy(NULL);
	/* One request in every state plus queued events of every kind; the
	 * sanitizer build's leak check proves destroy frees them all. */
	struct sc *s = sc_default();
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	sc_dir_set(s, KEY + 1, sc_ckpt(160, 901, 1));
	kva_handle importing = sc_submit(s, 1, KEY, 480);
	kva_handle ready = sc_submit(s, 2, KEY, 480);
	kva_handle draining = sc_submit(s, 3, KEY, 480);
	kva_handle running = sc_submit(s, 4, 0, 16);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 3);
	kva_copy_job jobs[3];
	memcpy(jobs, s->copies, sizeof(jobs));
	for (int i = 0; i < 3; i++)
		if (jobs[i].handle.id == ready.id)
			assert_int_equal(kva_copy_done(s->e, jobs[i].token, 0, 0), 0);
	s->plan.admitted_cap = 0; /* keep it READY: no room to admit */
	sc_step(s, 0);
	s->plan.admitted_cap = SC_MAX;
	assert_int_equal(sc_state(s, ready), KVA_STATE_READY);
	assert_int_equal(kva_cancel(s->e, draining), 0);
	sc_step(s, 0);
	assert_int_equal(sc_stats(s).draining_pages, 20);
	kva_handle waiting = sc_submit(s, 5, KEY + 1, 480); /* local restore, 19 pages free */
	kva_handle undecided = sc_submit(s, 6, NOKEY_DIR, 32);
	sc_step(s, 0);
	assert_true(s->plan.head_blocked);
	assert_int_equal(sc_state(s, importing), KVA_STATE_IMPORTING);
	assert_int_equal(sc_state(s, running), KVA_STATE_RUNNING);
	assert_int_equal(sc_state(s, undecided), KVA_STATE_WAITING);
	assert_int_equal(sc_state(s, waiting), KVA_STATE_WAITING);
	sc_assert_conserved(s);
	/* queued, never drained */
	kva_manifest m = {.count = 1, .entries = {sc_ckpt(16, 77, 1)}};
	assert_int_equal(kva_lookup_answer(s->e, s->lookups[s->n_lookups - 1].token, &m), 0);
	assert_int_equal(kva_checkpoint_evicted(s->e, 901, 9), 0);
	assert_int_equal(kva_reset_prefix_cache(s->e), 0);
	assert_int_equal(kva_cancel(s->e, running), 0);
	assert_int_equal(kva_grow(s->e, running, 2, NULL), 0);
	kva_handle unseen = sc_submit(s, 7, KEY, 480);
	(void)unseen;
	sc_free(s);
}

static void submit_rejects_null_and_zero_prompt(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	kva_request r = {.id = 1, .prefix_key = 0, .prompt_tokens = 16};
	kva_handle h = {77, 77, 77};
	assert_int_equal(kva_submit(NULL, &r, &h), -EINVAL);
	assert_int_equal(kva_submit(s->e, NULL, &h), -EINVAL);
	assert_int_equal(kva_submit(s->e, &r, NULL), -EINVAL);
	r.prompt_tokens = 0;
	assert_int_equal(kva_submit(s->e, &r, &h), -EINVAL);
	r.prompt_tokens = 16;
	r.flags = 1; /* reserved, must be 0 */
	assert_int_equal(kva_submit(s->e, &r, &h), -EINVAL);
	r.flags = 0x80000000u;
	assert_int_equal(kva_submit(s->e, &r, &h), -EINVAL);
	r.flags = 0;
	r.local = sc_ckpt(16, 70, 1);
	r.local.reserved_ = 0xEF; /* reserved, must be 0 (a byte since tier took the other) */
	assert_int_equal(kva_submit(s->e, &r, &h), -EINVAL);
	r.local = (kva_checkpoint){0};
	/* nothing was submitted and *out was not written */
	assert_int_equal(h.id, 77);
	assert_int_equal(h.gen, 77);
	assert_int_equal(sc_stats(s).submitted, 0);
	sc_step(s, 0);
	assert_int_equal(s->plan.events, 0);
	assert_still_works(s);
	assert_int_equal(sc_stats(s).submitted, 1);
	sc_free(s);
}

static void submit_duplicate_live_id_is_rejected_and_the_original_lives_on(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	kva_handle orig = sc_submit(s, 5, 0, 16);
	kva_handle dup = sc_submit(s, 5, 0, 16);
	assert_true(orig.slot != dup.slot || orig.gen != dup.gen); /* distinct incarnations */
	sc_step(s, 0);
	assert_non_null(sc_admitted(s, orig));
	assert_null(sc_admitted(s, dup));
	const kva_ended *en = sc_ended(s, dup);
	assert_non_null(en);
	assert_int_equal(en->state, KVA_STATE_REJECTED);
	assert_int_equal(s->plan.n_ended, 1);
	/* the rejected incarnation is gone; the original is untouched */
	assert_int_equal(kva_cancel(s->e, dup), -ENOENT);
	assert_int_equal(kva_finish(s->e, dup), -ENOENT);
	assert_int_equal(sc_state(s, orig), KVA_STATE_RUNNING);
	/* a duplicate that is cancelled before ingest is still reported once */
	kva_handle dup2 = sc_submit(s, 5, 0, 16);
	assert_int_equal(kva_cancel(s->e, dup2), 0);
	sc_step(s, 0);
	en = sc_ended(s, dup2);
	assert_non_null(en);
	assert_int_equal(en->state, KVA_STATE_REJECTED);
	assert_int_equal(s->plan.n_ended, 1);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_ended, 0);
	assert_int_equal(kva_finish(s->e, orig), 0);
	sc_step(s, 0);
	assert_int_equal(sc_stats(s).rejected, 2);
	/* an absurd prompt is classified, not trusted: too large to restore,
	 * so it recomputes starting with one chunk */
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	kva_handle huge = sc_submit(s, 6, KEY, UINT32_MAX);
	sc_step(s, 0);
	const kva_admission *a = sc_admitted(s, huge);
	assert_non_null(a);
	assert_int_equal(a->reason, KVA_REASON_TOO_LARGE);
	assert_int_equal(a->npages, 16);
	finish_and_step(s, huge);
	end_recovered(s);
}

static void cancel_rejects_null_unknown_stale_and_repeated(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	kva_handle h = sc_submit(s, 1, 0, 16);
	assert_int_equal(kva_cancel(NULL, h), -EINVAL);
	assert_int_equal(kva_cancel(s->e, unknown_handle), -ENOENT);
	assert_int_equal(kva_cancel(s->e, (kva_handle){h.id, h.gen + 1, h.slot}), -ENOENT);
	assert_int_equal(kva_cancel(s->e, (kva_handle){h.id, 0, 0}), -ENOENT);
	assert_int_equal(kva_cancel(s->e, h), 0);
	assert_int_equal(kva_cancel(s->e, h), -EALREADY);
	sc_step(s, 0);
	const kva_ended *en = sc_ended(s, h);
	assert_non_null(en);
	assert_int_equal(en->state, KVA_STATE_CANCELLED);
	assert_int_equal(kva_cancel(s->e, h), -ENOENT); /* ended and retired */

	/* cancel after finish: the finish stands, reported once as finished */
	kva_handle f = sc_submit(s, 2, 0, 16);
	sc_step(s, 0);
	assert_non_null(sc_admitted(s, f));
	assert_int_equal(kva_finish(s->e, f), 0);
	assert_int_equal(kva_cancel(s->e, f), -ENOENT);
	sc_step(s, 0);
	en = sc_ended(s, f);
	assert_non_null(en);
	assert_int_equal(en->state, KVA_STATE_FINISHED);
	assert_int_equal(s->plan.n_ended, 1);
	assert_int_equal(kva_cancel(s->e, f), -ENOENT);

	/* a stale incarnation of a reused id cancels nothing */
	kva_handle fresh = sc_submit(s, 2, 0, 16);
	sc_step(s, 0);
	assert_int_equal(kva_cancel(s->e, f), -ENOENT);
	sc_step(s, 0);
	assert_int_equal(sc_state(s, fresh), KVA_STATE_RUNNING);
	assert_int_equal(kva_finish(s->e, fresh), 0);
	sc_step(s, 0);

	kva_stats stt = sc_stats(s);
	assert_int_equal(stt.cancelled, 1);
	assert_int_equal(stt.finished, 2);
	end_recovered(s);
}

static kva_manifest one_entry(uint32_t pos, uint64_t id)
{
	kva_manifest m;
	memset(&m, 0, sizeof(m));
	m.count = 1;
	m.entries[0] = sc_ckpt(pos, id, 0);
	return m;
}

static void lookup_answer_rejects_malformed_manifests(void **st)
{
	(void)st;
	struct sc *s = sc_default(); /* no directory entries: we answer */
	kva_handle h = sc_submit(s, 1, KEY, 480);
	sc_step(s, 0);
	assert_int_equal(s->n_lookups, 1);
	kva_lookup_token t = s->lookups[0].token;
	kva_manifest good = one_entry(320, 900), m;
	assert_int_equal(kva_lookup_answer(NULL, t, &good), -EINVAL);
	assert_int_equal(kva_lookup_answer(s->e, t, NULL), -EINVAL);
	/* oversized */
	m = good, m.count = KVA_MAX_CHECKPOINTS + 1;
	assert_int_equal(kva_lookup_answer(s->e, t, &m), -EINVAL);
	m = good, m.count = UINT32_MAX;
	assert_int_equal(kva_lookup_answer(s->e, t, &m), -EINVAL);
	/* unsorted */
	m = good, m.count = 2, m.entries[1] = sc_ckpt(160, 901, 0);
	assert_int_equal(kva_lookup_answer(s->e, t, &m), -EINVAL);
	/* duplicate position */
	m = good, m.count = 2, m.entries[1] = sc_ckpt(320, 901, 0);
	assert_int_equal(kva_lookup_answer(s->e, t, &m), -EINVAL);
	/* duplicate id, also when not adjacent */
	m = good, m.count = 2, m.entries[1] = sc_ckpt(400, 900, 0);
	assert_int_equal(kva_lookup_answer(s->e, t, &m), -EINVAL);
	m = good, m.count = 3, m.entries[1] = sc_ckpt(400, 901, 0),
	m.entries[2] = sc_ckpt(440, 900, 1);
	assert_int_equal(kva_lookup_answer(s->e, t, &m), -EINVAL);
	/* position 0 */
	m = good, m.entries[0].position = 0;
	assert_int_equal(kva_lookup_answer(s->e, t, &m), -EINVAL);
	/* a reserved field set */
	m = good, m.entries[0].reserved_ = 1;
	assert_int_equal(kva_lookup_answer(s->e, t, &m), -EINVAL);
	/* bad location */
	m = good, m.entries[0].location = KVA_LOC_LOCAL + 1;
	assert_int_equal(kva_lookup_answer(s->e, t, &m), -EINVAL);
	m = good, m.entries[0].location = 0xff;
	assert_int_equal(kva_lookup_answer(s->e, t, &m), -EINVAL);
	/* a full manifest (KVA_MAX_CHECKPOINTS) with one bad entry at the end */
	memset(&m, 0, sizeof(m));
	m.count = KVA_MAX_CHECKPOINTS;
	for (uint32_t i = 0; i < KVA_MAX_CHECKPOINTS; i++)
		m.entries[i] = sc_ckpt(16 * (i + 1), 1000 + i, 0);
	m.entries[KVA_MAX_CHECKPOINTS - 1].position = m.entries[KVA_MAX_CHECKPOINTS - 2].position;
	assert_int_equal(kva_lookup_answer(s->e, t, &m), -EINVAL);

	/* none of that reached the engine: the lookup is still awaited */
	sc_step(s, 0);
	assert_int_equal(s->plan.events, 0);
	assert_true(s->plan.head_blocked);
	kva_stats stt = sc_stats(s);
	assert_int_equal(stt.lookups_answered, 0);
	assert_int_equal(stt.late_answers, 0);
	kva_request_info info;
	assert_int_equal(kva_query(s->e, h, &info), 0);
	assert_int_equal(info.state, KVA_STATE_WAITING);
	assert_false(info.has_selection);
	assert_int_equal(info.reason, KVA_REASON_NONE);

	/* the full-size manifest, valid, is accepted and its longest usable
	 * entry chosen */
	m.entries[KVA_MAX_CHECKPOINTS - 1].position = 320;
	assert_int_equal(kva_lookup_answer(s->e, t, &m), 0);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 1);
	assert_int_equal(s->copies[0].position, 320);
	sc_copies_done(s, 0);
	sc_step(s, 0);
	const kva_admission *a = sc_admitted(s, h);
	assert_non_null(a);
	assert_int_equal(a->how, KVA_ADMIT_RESTORE);
	finish_and_step(s, h);
	end_recovered(s);
}

static void lookup_answer_rejects_unknown_stale_and_repeated_tokens(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	kva_handle h = sc_submit(s, 1, KEY, 480);
	sc_step(s, 0);
	kva_lookup_token t = s->lookups[0].token;
	kva_manifest miss = {.count = 0};
	assert_int_equal(kva_lookup_answer(s->e, (kva_lookup_token){999, t.gen, t.seq, t.slot}, &miss),
			 -ENOENT);
	assert_int_equal(kva_lookup_answer(s->e, (kva_lookup_token){t.id, t.gen + 2, t.seq, t.slot}, &miss),
			 -ENOENT);
	assert_int_equal(kva_lookup_answer(s->e, (kva_lookup_token){t.id, t.gen, t.seq + 1, t.slot}, &miss),
			 -ESTALE);
	assert_int_equal(kva_lookup_answer(s->e, (kva_lookup_token){t.id, t.gen, 0, t.slot}, &miss),
			 -ESTALE);
	assert_int_equal(kva_lookup_answer(s->e, t, &miss), 0);
	sc_step(s, 0);
	const kva_admission *a = sc_admitted(s, h);
	assert_non_null(a);
	assert_int_equal(a->reason, KVA_REASON_MISS);
	/* answered already: a second answer is late, and changes nothing */
	kva_manifest hit = one_entry(320, 900);
	assert_int_equal(kva_lookup_answer(s->e, t, &hit), -ESTALE);
	sc_step(s, 0);
	assert_int_equal(sc_state(s, h), KVA_STATE_RUNNING);

	/* timed out: the late answer is refused */
	kva_handle late = sc_submit(s, 2, KEY, 480);
	sc_step(s, 0);
	kva_lookup_token t2 = s->lookups[1].token;
	sc_step(s, 2 * SC_SEC);
	a = sc_admitted(s, late);
	assert_non_null(a);
	assert_int_equal(a->reason, KVA_REASON_LOOKUP_TIMEOUT);
	assert_int_equal(kva_lookup_answer(s->e, t2, &hit), -ESTALE);

	/* ended and retired: unknown */
	assert_int_equal(kva_finish(s->e, h), 0);
	assert_int_equal(kva_finish(s->e, late), 0);
	sc_step(s, 0);
	assert_int_equal(kva_lookup_answer(s->e, t, &hit), -ENOENT);
	assert_int_equal(kva_lookup_answer(s->e, t2, &hit), -ENOENT);
	sc_step(s, 0);
	assert_int_equal(s->plan.events, 0);
	kva_stats stt = sc_stats(s);
	assert_int_equal(stt.lookups_answered, 1);
	assert_int_equal(stt.lookups_timed_out, 1);
	assert_true(stt.late_answers >= 4);
	end_recovered(s);
}

static void copy_done_rejects_null_unknown_stale_and_out_of_range(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	kva_handle h = sc_submit(s, 1, KEY, 480);
	kva_handle plain = sc_submit(s, 2, 0, 16);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 1);
	kva_copy_token t = s->copies[0].token;
	assert_int_equal(kva_copy_done(NULL, t, 0, 0), -EINVAL);
	assert_int_equal(kva_copy_done(s->e, t, 1, 0), -ERANGE);
	assert_int_equal(kva_copy_done(s->e, t, UINT32_MAX, 0), -ERANGE);
	assert_int_equal(kva_copy_done(s->e, (kva_copy_token){999, t.gen, t.attempt, t.slot}, 0, 0),
			 -ENOENT);
	assert_int_equal(kva_copy_done(s->e, (kva_copy_token){t.id, t.gen + 8, t.attempt, t.slot}, 0, 0),
			 -ENOENT);
	assert_int_equal(kva_copy_done(s->e, (kva_copy_token){t.id, t.gen, t.attempt + 1, t.slot}, 0, 0),
			 -ESTALE);
	assert_int_equal(kva_copy_done(s->e, (kva_copy_token){t.id, t.gen, 0, t.slot}, 0, 0), -ESTALE);
	/* a request that never copied has no attempt to report on */
	assert_non_null(sc_admitted(s, plain));
	assert_int_equal(kva_copy_done(s->e, (kva_copy_token){plain.id, plain.gen, 0, plain.slot}, 0, 0),
			 -ESTALE);
	assert_int_equal(kva_copy_done(s->e, (kva_copy_token){plain.id, plain.gen, 1, plain.slot}, 0, 1),
			 -ESTALE);
	sc_step(s, 0);
	assert_int_equal(s->plan.events, 0);
	assert_int_equal(sc_state(s, h), KVA_STATE_IMPORTING);
	assert_int_equal(sc_state(s, plain), KVA_STATE_RUNNING);
	assert_true(sc_stats(s).stale_copy_reports >= 4);
	sc_assert_conserved(s);

	assert_int_equal(kva_copy_done(s->e, t, 0, 0), 0);
	assert_int_equal(kva_copy_done(s->e, t, 0, 1), -EALREADY); /* reported twice */
	sc_step(s, 0);
	assert_non_null(sc_admitted(s, h));
	assert_int_equal(kva_copy_done(s->e, t, 0, 0), -EALREADY); /* attempt complete */
	sc_step(s, 0);
	assert_int_equal(sc_state(s, h), KVA_STATE_RUNNING);
	assert_int_equal(sc_stats(s).copy_attempts_failed, 0);
	assert_int_equal(kva_finish(s->e, h), 0);
	assert_int_equal(kva_finish(s->e, plain), 0);
	sc_step(s, 0);
	assert_int_equal(kva_copy_done(s->e, t, 0, 0), -ENOENT); /* retired */
	end_recovered(s);

	/* world_size 2: ranks are range-checked and each reports once */
	kva_config c;
	sc_config(&c);
	c.world_size = 2;
	s = sc_new(&c);
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	h = sc_submit(s, 1, KEY, 480);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 2);
	t = s->copies[0].token;
	assert_int_equal(kva_copy_done(s->e, t, 2, 0), -ERANGE);
	assert_int_equal(kva_copy_done(s->e, t, KVA_MAX_WORLD, 0), -ERANGE);
	assert_int_equal(kva_copy_done(s->e, t, 1, 0), 0);
	assert_int_equal(kva_copy_done(s->e, t, 1, 0), -EALREADY);
	sc_step(s, 0);
	assert_int_equal(sc_state(s, h), KVA_STATE_IMPORTING); /* rank 0 outstanding */
	assert_int_equal(kva_copy_done(s->e, t, 0, 0), 0);
	sc_step(s, 0);
	assert_non_null(sc_admitted(s, h));
	finish_and_step(s, h);
	end_recovered(s);
}

static void copy_done_for_an_attempt_not_yet_handed_out_is_stale(void **st)
{
	(void)st;
	/* No importer and no room for copy jobs in the plan: the attempt is
	 * started but its token was never given to anyone. */
	struct sc *s = sc_default();
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	s->plan.copies_cap = 0;
	kva_handle h = sc_submit(s, 1, KEY, 480);
	sc_step(s, 0);
	assert_int_equal(sc_state(s, h), KVA_STATE_IMPORTING);
	kva_copy_token guess = {h.id, h.gen, 1, h.slot};
	assert_int_equal(kva_copy_done(s->e, guess, 0, 0), -ESTALE);
	sc_step(s, 0);
	assert_int_equal(sc_state(s, h), KVA_STATE_IMPORTING);
	/* cancelled while still queued: pages return at once, and a report
	 * for that attempt is refused rather than draining them twice */
	assert_int_equal(kva_cancel(s->e, h), 0);
	assert_int_equal(kva_copy_done(s->e, guess, 0, 0), -ESTALE);
	sc_step(s, 0);
	assert_non_null(sc_ended(s, h));
	s->plan.copies_cap = SC_MAX;
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 0);
	assert_still_works(s);
	assert_all_free(s);

	/* once handed out, the same token is accepted */
	h = sc_submit(s, 2, KEY, 480);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 1);
	assert_int_equal(kva_copy_done(s->e, s->copies[0].token, 0, 0), 0);
	sc_step(s, 0);
	assert_non_null(sc_admitted(s, h));
	assert_int_equal(kva_finish(s->e, h), 0);
	sc_step(s, 0);
	assert_all_free(s);
	sc_free(s);
}

static void checkpoint_evicted_rejects_null_and_ignores_unknown_ids(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	kva_checkpoint c = sc_ckpt(160, 901, 1);
	c.epoch = 5;
	sc_dir_set(s, KEY, c);
	kva_handle hog = sc_occupy(s, 1, 95);
	kva_handle h = sc_submit(s, 2, KEY, 200); /* local selection, waits for 13 pages */
	sc_step(s, 0);
	assert_int_equal(sc_state(s, h), KVA_STATE_WAITING);
	assert_int_equal(kva_checkpoint_evicted(NULL, 901, 6), -EINVAL);
	assert_int_equal(kva_checkpoint_evicted(s->e, 12345, 6), 0);
	assert_int_equal(kva_checkpoint_evicted(s->e, 0, 0), 0);
	assert_int_equal(kva_checkpoint_evicted(s->e, UINT64_MAX, UINT64_MAX), 0);
	assert_int_equal(kva_checkpoint_evicted(s->e, 901, 5), 0); /* not newer */
	assert_int_equal(kva_checkpoint_evicted(s->e, 901, 0), 0);
	sc_step(s, 0);
	assert_int_equal(sc_stats(s).revalidations, 0);
	assert_int_equal(s->n_lookups, 1); /* h's only (the hog has no key): none new */
	kva_request_info info;
	assert_int_equal(kva_query(s->e, h, &info), 0);
	assert_true(info.has_selection);
	assert_int_equal(info.selected_location, KVA_LOC_LOCAL);
	/* eviction of a request's checkpoint after it ended touches nothing */
	assert_int_equal(kva_finish(s->e, hog), 0);
	sc_step(s, 0);
	const kva_admission *a = sc_admitted(s, h);
	assert_non_null(a);
	assert_int_equal(a->how, KVA_ADMIT_LOCAL);
	assert_int_equal(kva_checkpoint_evicted(s->e, 901, 99), 0);
	sc_step(s, 0);
	assert_int_equal(sc_stats(s).revalidations, 0);
	finish_and_step(s, h);
	end_recovered(s);
}

/* Directory and importer that try to re-enter kva_step. */
struct reentry {
	kva_engine *e;
	kva_plan plan;
	kva_admission adm[4];
	int lookup_calls, import_calls;
	int lookup_step_rc, import_step_rc, answer_rc;
	bool silent; /* leave lookups unanswered */
	kva_copy_token copy;
};

static void reentrant_lookup(void *ctx, uint64_t key, uint32_t prompt, kva_lookup_token t)
{
	struct reentry *x = ctx;
	(void)prompt;
	x->lookup_calls++;
	x->lookup_step_rc = kva_step(x->e, 0, &x->plan);
	if (x->silent)
		return;
	/* answering re-entrantly is allowed */
	kva_manifest m = {.count = key == KEY ? 1 : 0, .entries = {sc_ckpt(320, 900, 0)}};
	x->answer_rc = kva_lookup_answer(x->e, t, &m);
}

static int reentrant_import(void *ctx, kva_engine *e, const kva_copy_job *job)
{
	struct reentry *x = ctx;
	x->import_calls++;
	x->import_step_rc = kva_step(e, 0, &x->plan);
	x->copy = job->token;
	return 0;
}

static void step_rejects_null_plan_and_reentry(void **st)
{
	(void)st;
	struct reentry x;
	memset(&x, 0, sizeof(x));
	x.plan.admitted = x.adm;
	x.plan.admitted_cap = 4;
	x.lookup_step_rc = x.import_step_rc = x.answer_rc = 1;
	kva_config c;
	sc_config(&c);
	c.lookup = reentrant_lookup;
	c.lookup_ctx = &x;
	c.importers[0] = (kva_importer_ref){reentrant_import, &x};
	int err = 1;
	x.e = kva_engine_create(&c, &err);
	assert_non_null(x.e);
	kva_engine *e = x.e;

	kva_admission adm[8];
	uint32_t pages[256];
	kva_plan plan = {.admitted = adm, .admitted_cap = 8, .pages = pages, .pages_cap = 256};
	assert_int_equal(kva_step(NULL, 0, &plan), -EINVAL);
	assert_int_equal(kva_step(e, 0, NULL), -EINVAL);
	/* arrays that are NULL but claim room are malformed */
	kva_plan bad = plan;
	bad.admitted = NULL;
	assert_int_equal(kva_step(e, 0, &bad), -EINVAL);
	bad = plan, bad.pages = NULL;
	assert_int_equal(kva_step(e, 0, &bad), -EINVAL);
	bad = plan, bad.copies_cap = 1;
	assert_int_equal(kva_step(e, 0, &bad), -EINVAL);
	bad = plan, bad.fallbacks_cap = 1;
	assert_int_equal(kva_step(e, 0, &bad), -EINVAL);
	bad = plan, bad.ended_cap = 1;
	assert_int_equal(kva_step(e, 0, &bad), -EINVAL);
	kva_stats stt;
	kva_stats_get(e, &stt);
	assert_int_equal(stt.steps, 0);

	kva_request r = {.id = 1, .prefix_key = KEY, .prompt_tokens = 480};
	kva_handle h;
	assert_int_equal(kva_submit(e, &r, &h), 0);
	assert_int_equal(kva_step(e, 0, &plan), 0);
	assert_int_equal(x.lookup_calls, 1);
	assert_int_equal(x.lookup_step_rc, -EINVAL);
	assert_int_equal(x.answer_rc, 0);
	assert_int_equal(x.import_calls, 1);
	assert_int_equal(x.import_step_rc, -EINVAL);
	kva_stats_get(e, &stt);
	assert_int_equal(stt.steps, 1);
	assert_int_equal(stt.importing, 1);
	/* the step that refused re-entry finished normally: the next works */
	assert_int_equal(kva_copy_done(e, x.copy, 0, 0), 0);
	assert_int_equal(kva_step(e, 1, &plan), 1);
	assert_int_equal(adm[0].how, KVA_ADMIT_RESTORE);
	assert_int_equal(kva_finish(e, h), 0);
	/* time going backwards is no time passing: the 1 s lookup deadline
	 * armed at 10 s fires at 11 s, not earlier */
	x.silent = true;
	r = (kva_request){.id = 2, .prefix_key = KEY + 1, .prompt_tokens = 16};
	assert_int_equal(kva_submit(e, &r, &h), 0);
	assert_int_equal(kva_step(e, 10 * SC_SEC, &plan), 0);
	assert_int_equal(kva_step(e, 0, &plan), 0);
	assert_int_equal(kva_step(e, 10 * SC_SEC + 999 * SC_MS, &plan), 0);
	kva_stats_get(e, &stt);
	assert_int_equal(stt.lookups_timed_out, 0);
	assert_int_equal(kva_step(e, 5, &plan), 0);
	assert_int_equal(kva_step(e, 11 * SC_SEC, &plan), 1);
	assert_int_equal(adm[0].reason, KVA_REASON_LOOKUP_TIMEOUT);
	assert_int_equal(kva_finish(e, h), 0);
	assert_int_equal(kva_step(e, 11 * SC_SEC, &plan), 0);
	kva_stats_get(e, &stt);
	assert_int_equal(stt.lookups_timed_out, 1);
	assert_int_equal(stt.finished, 2);
	assert_int_equal(stt.free_pages, stt.total_pages);
	assert_int_equal(stt.reserved_pages + stt.in_use_pages + stt.draining_pages, 0);
	kva_engine_destroy(e);
}

/* One request RUNNING (1 page), one IMPORTING (a 30-page restore) and an
 * undecided one WAITING at the head behind them. */
struct trio {
	kva_handle run, imp, wait;
	kva_copy_token imp_copy;
};

static struct trio three_states(struct sc *s)
{
	struct trio t;
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	t.run = sc_submit(s, 1, 0, 16);
	t.imp = sc_submit(s, 2, KEY, 480);
	t.wait = sc_submit(s, 3, NOKEY_DIR, 16);
	sc_step(s, 0);
	assert_int_equal(sc_state(s, t.run), KVA_STATE_RUNNING);
	assert_int_equal(sc_state(s, t.imp), KVA_STATE_IMPORTING);
	assert_int_equal(sc_state(s, t.wait), KVA_STATE_WAITING);
	assert_int_equal(s->plan.n_copies, 1);
	t.imp_copy = s->copies[0].token;
	return t;
}

static void grow_rejects_bad_handles_zero_and_oversized_requests(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	struct trio t = three_states(s);
	kva_handle run = t.run, imp = t.imp, wait = t.wait;
	uint32_t ids[100];
	assert_int_equal(kva_grow(NULL, run, 1, ids), -EINVAL);
	assert_int_equal(kva_grow(s->e, run, 0, ids), -EINVAL);
	assert_int_equal(kva_grow(s->e, run, 101, ids), -ERANGE);
	assert_int_equal(kva_grow(s->e, run, UINT32_MAX, ids), -ERANGE);
	assert_int_equal(kva_grow(s->e, unknown_handle, 1, ids), -ENOENT);
	assert_int_equal(kva_grow(s->e, (kva_handle){run.id, run.gen + 9, run.slot}, 1, ids), -ENOENT);
	assert_int_equal(kva_grow(s->e, wait, 1, ids), -EBUSY); /* waiting */
	assert_int_equal(kva_grow(s->e, imp, 1, ids), -EBUSY);	/* importing */
	kva_stats before = sc_stats(s);
	assert_int_equal(before.free_pages, 100 - 1 - 30);
	assert_int_equal(kva_grow(s->e, run, 70, ids), -ENOSPC);
	kva_stats after = sc_stats(s);
	assert_int_equal(after.free_pages, before.free_pages); /* -ENOSPC changed nothing */
	assert_int_equal(after.in_use_pages, before.in_use_pages);
	kva_request_info info;
	assert_int_equal(kva_query(s->e, run, &info), 0);
	assert_int_equal(info.pages_held, 1);
	assert_int_equal(info.state, KVA_STATE_RUNNING);
	/* exactly the rest fits, with distinct ids */
	assert_int_equal(kva_grow(s->e, run, 69, ids), 0);
	for (int i = 0; i < 69; i++)
		for (int j = 0; j < i; j++)
			assert_int_not_equal(ids[i], ids[j]);
	assert_int_equal(kva_grow(s->e, run, 1, NULL), -ENOSPC);
	assert_int_equal(sc_free_pages(s), 0);
	sc_assert_conserved(s);
	/* finished: gone */
	assert_int_equal(kva_finish(s->e, run), 0);
	assert_int_equal(kva_grow(s->e, run, 1, NULL), -ENOENT);
	sc_step(s, 0);
	assert_int_equal(kva_grow(s->e, run, 1, NULL), -ENOENT);
	assert_int_equal(sc_free_pages(s), 70);
	/* clean up: the undecided head goes, the import completes */
	assert_int_equal(kva_cancel(s->e, wait), 0);
	assert_int_equal(kva_copy_done(s->e, t.imp_copy, 0, 0), 0);
	sc_step(s, 0);
	assert_non_null(sc_admitted(s, imp));
	assert_int_equal(kva_grow(s->e, imp, 5, NULL), 0); /* from its own reservation */
	finish_and_step(s, imp);
	end_recovered(s);
}

static void preempt_rejects_bad_handles_and_non_running_requests(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	kva_handle run = sc_submit(s, 1, 0, 16);
	kva_handle wait = sc_submit(s, 2, NOKEY_DIR, 16);
	sc_step(s, 0);
	assert_int_equal(kva_preempt(NULL, run), -EINVAL);
	assert_int_equal(kva_preempt(s->e, unknown_handle), -ENOENT);
	assert_int_equal(kva_preempt(s->e, (kva_handle){run.id, run.gen + 1, run.slot}), -ENOENT);
	assert_int_equal(kva_preempt(s->e, wait), -EBUSY);
	assert_int_equal(kva_preempt(s->e, run), 0);
	assert_int_equal(kva_preempt(s->e, run), -EBUSY); /* already on its way back */
	assert_int_equal(kva_finish(s->e, run), -EBUSY);
	assert_int_equal(kva_grow(s->e, run, 1, NULL), -EBUSY);
	sc_assert_conserved(s);
	assert_int_equal(sc_free_pages(s), 100);
	sc_step(s, 0);
	/* back at the front, ahead of the undecided head, admitted again */
	assert_non_null(sc_admitted(s, run));
	assert_int_equal(sc_stats(s).preempted, 1);
	assert_int_equal(kva_finish(s->e, run), 0);
	assert_int_equal(kva_preempt(s->e, run), -ENOENT); /* finishing */
	sc_step(s, 0);
	assert_int_equal(kva_preempt(s->e, run), -ENOENT); /* retired */
	assert_int_equal(kva_cancel(s->e, wait), 0);
	sc_step(s, 0);
	assert_int_equal(kva_preempt(s->e, wait), -ENOENT);
	assert_int_equal(sc_stats(s).preempted, 1);
	end_recovered(s);
}

static void finish_twice_is_ealready_and_reported_once(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	struct trio t = three_states(s);
	kva_handle run = t.run, imp = t.imp, wait = t.wait;
	assert_int_equal(kva_finish(NULL, run), -EINVAL);
	assert_int_equal(kva_finish(s->e, unknown_handle), -ENOENT);
	assert_int_equal(kva_finish(s->e, (kva_handle){run.id, run.gen + 1, run.slot}), -ENOENT);
	assert_int_equal(kva_finish(s->e, wait), -EBUSY);
	assert_int_equal(kva_finish(s->e, imp), -EBUSY);
	assert_int_equal(kva_grow(s->e, run, 3, NULL), 0);
	assert_int_equal(kva_finish(s->e, run), 0);
	assert_int_equal(kva_finish(s->e, run), -EALREADY);
	assert_int_equal(sc_free_pages(s), 100 - 30); /* pages back once, not twice */
	sc_assert_conserved(s);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_ended, 1);
	assert_int_equal(sc_ended(s, run)->state, KVA_STATE_FINISHED);
	assert_int_equal(kva_finish(s->e, run), -ENOENT); /* retired */
	sc_step(s, 0);
	assert_int_equal(s->plan.n_ended, 0);
	/* a cancelled running request cannot be finished afterwards */
	assert_int_equal(kva_cancel(s->e, wait), 0);
	assert_int_equal(kva_copy_done(s->e, t.imp_copy, 0, 0), 0);
	sc_step(s, 0);
	assert_non_null(sc_admitted(s, imp));
	assert_int_equal(kva_cancel(s->e, imp), 0);
	sc_step(s, 0);
	assert_int_equal(sc_ended(s, imp)->state, KVA_STATE_CANCELLED);
	assert_int_equal(kva_finish(s->e, imp), -ENOENT);
	kva_stats stt = sc_stats(s);
	assert_int_equal(stt.finished, 1);
	assert_int_equal(stt.cancelled, 2);
	end_recovered(s);
}

static void reset_prefix_cache_rejects_null_and_coalesces_repeats(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	assert_int_equal(kva_reset_prefix_cache(NULL), -EINVAL);
	for (int i = 0; i < 5; i++)
		assert_int_equal(kva_reset_prefix_cache(s->e), 0);
	sc_step(s, 0);
	assert_int_equal(s->plan.events, 1); /* one reset covers them all */
	sc_step(s, 0);
	assert_int_equal(s->plan.events, 0);
	assert_int_equal(kva_reset_prefix_cache(s->e), 0); /* re-armed */
	sc_step(s, 0);
	assert_int_equal(s->plan.events, 1);
	end_recovered(s);
}

static void stats_get_tolerates_null_engine_and_output(void **st)
{
	(void)st;
	kva_stats stt;
	memset(&stt, 0xa5, sizeof(stt));
	kva_stats_get(NULL, &stt);
	kva_stats zero;
	memset(&zero, 0, sizeof(zero));
	assert_memory_equal(&stt, &zero, sizeof(stt));
	struct sc *s = sc_default();
	kva_stats_get(s->e, NULL);
	kva_stats_get(NULL, NULL);
	stt = sc_stats(s);
	assert_int_equal(stt.total_pages, 100);
	assert_int_equal(stt.free_pages, 100);
	assert_still_works(s);
	sc_free(s);
}

static void query_rejects_null_unknown_and_stale_handles(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	kva_handle h = sc_submit(s, 1, 0, 16);
	kva_request_info info;
	assert_int_equal(kva_query(NULL, h, &info), -EINVAL);
	assert_int_equal(kva_query(s->e, h, NULL), -EINVAL);
	assert_int_equal(kva_query(s->e, unknown_handle, &info), -ENOENT);
	assert_int_equal(kva_query(s->e, (kva_handle){h.id, h.gen + 1, h.slot}, &info), -ENOENT);
	assert_int_equal(kva_query(s->e, h, &info), 0); /* known before ingest */
	assert_int_equal(info.state, KVA_STATE_WAITING);
	sc_step(s, 0);
	assert_int_equal(kva_finish(s->e, h), 0);
	sc_step(s, 0);
	assert_int_equal(kva_query(s->e, h, &info), -ENOENT); /* retired */
	kva_handle again = sc_submit(s, 1, 0, 16);
	sc_step(s, 0);
	assert_int_equal(kva_query(s->e, h, &info), -ENOENT); /* stale incarnation */
	assert_int_equal(kva_query(s->e, again, &info), 0);
	assert_int_equal(info.state, KVA_STATE_RUNNING);
	assert_int_equal(info.handle.gen, again.gen);
	finish_and_step(s, again);
	end_recovered(s);
}

static void strerror_and_reason_name_cover_every_code_and_tolerate_garbage(void **st)
{
	(void)st;
	const int codes[] = {-EINVAL, -ENOENT, -ESTALE, -EALREADY, -EEXIST,
			     -EBUSY,  -ENOSPC, -ERANGE, -ENOMEM,   -ENODEV};
	const size_t n = sizeof(codes) / sizeof(codes[0]);
	const char *unknown = kva_strerror(-123456);
	assert_non_null(unknown);
	assert_non_null(kva_strerror(0));
	for (size_t i = 0; i < n; i++) {
		const char *m = kva_strerror(codes[i]);
		assert_non_null(m);
		assert_true(strlen(m) > 0);
		assert_string_not_equal(m, unknown);
		for (size_t j = 0; j < i; j++)
			assert_string_not_equal(m, kva_strerror(codes[j]));
	}
	const int garbage[] = {EINVAL, 1, INT_MAX, INT_MIN, -INT_MAX, -4095, -100000};
	for (size_t i = 0; i < sizeof(garbage) / sizeof(garbage[0]); i++)
		assert_non_null(kva_strerror(garbage[i]));

	const char *unk = kva_reason_name(-1);
	assert_non_null(unk);
	for (int r = 0; r < KVA_REASON_COUNT; r++) {
		const char *m = kva_reason_name(r);
		assert_non_null(m);
		assert_string_not_equal(m, unk);
		for (int q = 0; q < r; q++)
			assert_string_not_equal(m, kva_reason_name(q));
	}
	assert_string_equal(kva_reason_name(KVA_REASON_COUNT), unk);
	assert_string_equal(kva_reason_name(INT_MAX), unk);
	assert_string_equal(kva_reason_name(INT_MIN), unk);
}

static void stats_format_with_tiny_buffers_writes_a_terminated_prefix(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	assert_still_works(s);
	kva_stats stt = sc_stats(s);
	assert_int_equal(kva_stats_format(NULL, NULL, 0), 0);
	char guard = 'Z';
	assert_int_equal(kva_stats_format(NULL, &guard, 1), 0);
	assert_int_equal(guard, 'Z');
	size_t need = kva_stats_format(&stt, NULL, 0);
	assert_true(need > 0);
	assert_int_equal(kva_stats_format(&stt, NULL, 100), need); /* NULL buf: size only */
	char *full = malloc(need + 1);
	assert_non_null(full);
	assert_int_equal(kva_stats_format(&stt, full, need + 1), need);
	assert_int_equal(strlen(full), need);
	assert_non_null(strstr(full, "kvadmit_pool_pages 100\n"));
	/* every length from 0 up: never writes past len, always terminates
	 * (len > 0) and always writes a prefix of the full text */
	char *buf = malloc(need + 16);
	assert_non_null(buf);
	for (size_t len = 0; len <= need + 1; len++) {
		memset(buf, 'X', need + 16);
		assert_int_equal(kva_stats_format(&stt, buf, len), need);
		for (size_t i = len; i < need + 16; i++)
			assert_int_equal(buf[i], 'X');
		if (len == 0)
			continue;
		size_t got = strnlen(buf, len);
		assert_true(got < len);
		assert_memory_equal(buf, full, got);
	}
	free(buf);
	free(full);
	sc_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(create_rejects_null_and_malformed_configs),
	    cmocka_unit_test(destroy_null_is_a_no_op_and_destroy_frees_work_in_flight),
	    cmocka_unit_test(submit_rejects_null_and_zero_prompt),
	    cmocka_unit_test(submit_duplicate_live_id_is_rejected_and_the_original_lives_on),
	    cmocka_unit_test(cancel_rejects_null_unknown_stale_and_repeated),
	    cmocka_unit_test(lookup_answer_rejects_malformed_manifests),
	    cmocka_unit_test(lookup_answer_rejects_unknown_stale_and_repeated_tokens),
	    cmocka_unit_test(copy_done_rejects_null_unknown_stale_and_out_of_range),
	    cmocka_unit_test(copy_done_for_an_attempt_not_yet_handed_out_is_stale),
	    cmocka_unit_test(checkpoint_evicted_rejects_null_and_ignores_unknown_ids),
	    cmocka_unit_test(step_rejects_null_plan_and_reentry),
	    cmocka_unit_test(grow_rejects_bad_handles_zero_and_oversized_requests),
	    cmocka_unit_test(preempt_rejects_bad_handles_and_non_running_requests),
	    cmocka_unit_test(finish_twice_is_ealready_and_reported_once),
	    cmocka_unit_test(reset_prefix_cache_rejects_null_and_coalesces_repeats),
	    cmocka_unit_test(stats_get_tolerates_null_engine_and_output),
	    cmocka_unit_test(query_rejects_null_unknown_and_stale_handles),
	    cmocka_unit_test(strerror_and_reason_name_cover_every_code_and_tolerate_garbage),
	    cmocka_unit_test(stats_format_with_tiny_buffers_writes_a_terminated_prefix),
	};
	return cmocka_run_group_tests_name("bad_input", tests, NULL, NULL);
}
