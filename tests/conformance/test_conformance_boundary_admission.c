/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Conformance: vLLM tests/v1/core/test_boundary_admission.py
 * (local-inference-lab/vllm @ 17b1d42f675c51b0f48d7cf65bbdaa417b308b3f).
 * The paired reservation, capacity waiters, FCFS with READY imports passing
 * a blocked head, bounded waits, decode growth and resets, as the engine
 * decides them. vLLM's "policy" (fcfs/priority) and prefill "lanes"
 * parameters have no counterpart: kvadmit is FCFS only.
 */
#include "conf.h"

#define KEY 7

/* Original: other admissions cannot consume a restored request's remaining
 * suffix; the import's credits carry it through chunked prefill, whatever
 * the checkpoint length and chunk size, with one or two ranks; afterwards
 * every block is back. */
static void external_import_owns_execution_capacity_through_chunked_prefill(void **st)
{
	(void)st;
	static const uint32_t prefixes[] = {16, 100, 128};
	static const uint32_t chunks[] = {1, 16, 33, 127};
	for (uint32_t world = 1; world <= 2; world++)
		for (size_t pi = 0; pi < 3; pi++)
			for (size_t ci = 0; ci < 4; ci++) {
				uint32_t prefix = prefixes[pi], chunk = chunks[ci];
				kva_config c;
				sc_config(&c);
				c.world_size = world;
				c.decode_headroom_pages = 1;
				struct sc *s = sc_new(&c);
				sc_dir_set(s, KEY, sc_ckpt(prefix, 900, 0));
				kva_handle h = sc_submit(s, 1, KEY, 400); /* 25 pages + 1 headroom */
				sc_step(s, 0);
				assert_int_equal(s->plan.n_copies, world);
				uint32_t kp = (prefix + 15) / 16;
				kva_request_info info = conf_info(s, h);
				assert_int_equal(info.pages_held + info.pages_reserved, 26);
				struct conf_jobs jobs = conf_save_copies(s);
				/* every other page is taken by pressure */
				kva_handle hog = sc_occupy(s, 2, (uint32_t)sc_free_pages(s));
				assert_int_equal(sc_free_pages(s), 0);
				kva_handle competitor = sc_submit(s, 3, 0, 16);
				conf_report(s, &jobs, 0);
				sc_step(s, 0);
				assert_null(sc_admitted(s, competitor));
				const kva_admission *a = sc_admitted(s, h);
				assert_non_null(a);
				assert_int_equal(a->how, KVA_ADMIT_RESTORE);
				assert_int_equal(a->restored_tokens, prefix);
				assert_int_equal(a->npages, kp);
				assert_int_equal(a->reserved_pages, 26 - kp);
				/* chunked prefill from its own credits, then a decode page */
				uint32_t done = prefix, held = kp;
				while (done < 400) {
					done += done + chunk > 400 ? 400 - done : chunk;
					uint32_t need = (done + 15) / 16;
					if (need > held) {
						assert_int_equal(kva_grow(s->e, h, need - held, NULL), 0);
						held = need;
					}
					assert_int_equal(kva_grow(s->e, hog, 1, NULL), -ENOSPC);
				}
				assert_int_equal(kva_grow(s->e, h, 1, NULL), 0); /* the headroom */
				info = conf_info(s, h);
				assert_int_equal(info.pages_reserved, 0);
				assert_int_equal(info.pages_held, 26);
				assert_int_equal(kva_finish(s->e, h), 0);
				assert_int_equal(kva_finish(s->e, hog), 0);
				sc_step(s, 0);
				assert_non_null(sc_admitted(s, competitor));
				assert_int_equal(kva_finish(s->e, competitor), 0);
				kva_stats stt = sc_stats(s);
				assert_int_equal(stt.free_pages, stt.total_pages);
				assert_int_equal(stt.reserved_pages, 0);
				sc_free(s);
			}
}

/* Original (cancelled while copying, or when ready): the slot and the
 * credits are released at once; the pages only after the copy drained.
 * kvadmit: with one copy slot, the next restore gets the slot in the step
 * the cancel is handled; a copying import's pages drain first, a READY
 * one's come back at once. */
static void cancellation_case(int at_ready)
{
	kva_config c;
	sc_config(&c);
	c.copy_slots = 1;
	struct sc *s = sc_new(&c);
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	kva_handle h = sc_submit(s, 1, KEY, 480);
	kva_handle other = sc_submit(s, 2, KEY, 480);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 1);
	kva_copy_job job = s->copies[0];
	assert_int_equal(job.handle.id, h.id);
	assert_int_equal(sc_stats(s).free_copy_slots, 0); /* other cannot start */
	if (at_ready)
		assert_int_equal(kva_copy_done(s->e, job.token, 0, 0), 0); /* READY in this step */
	assert_int_equal(kva_cancel(s->e, h), 0);
	sc_step(s, 0);
	assert_non_null(sc_ended(s, h));
	assert_null(sc_admitted(s, h));
	assert_int_equal(s->plan.n_copies, 1); /* the slot went to other at once */
	assert_int_equal(s->copies[0].handle.id, other.id);
	struct conf_jobs others = conf_save_copies(s);
	kva_stats stt = sc_stats(s);
	assert_int_equal(stt.draining_pages, at_ready ? 0 : 20);
	assert_int_equal(stt.free_pages, at_ready ? 70 : 50);
	if (!at_ready) {
		assert_int_equal(kva_copy_done(s->e, job.token, 0, 0), 0);
		sc_step(s, 0);
		assert_int_equal(sc_stats(s).draining_pages, 0);
		assert_int_equal(sc_free_pages(s), 70);
	}
	conf_report(s, &others, 0);
	sc_step(s, 0);
	assert_non_null(sc_admitted(s, other));
	assert_int_equal(kva_finish(s->e, other), 0);
	sc_step(s, 0);
	assert_int_equal(sc_free_pages(s), 100);
	sc_free(s);
}

static void external_import_cancellation_releases_only_pages_after_copy_drain(void **st)
{
	(void)st;
	cancellation_case(0);
	cancellation_case(1);
}

/* Original: two imports reserve at once (not one after the other); a third,
 * with no slot, is refused without taking anything, and the two keep going. */
static void external_imports_reserve_slots_without_serializing_available_imports(void **st)
{
	(void)st;
	kva_config c;
	sc_config(&c);
	c.copy_slots = 2;
	struct sc *s = sc_new(&c);
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	kva_handle h[3];
	for (int i = 0; i < 3; i++)
		h[i] = sc_submit(s, (uint64_t)i + 1, KEY, 480);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 2); /* both in one step */
	assert_int_equal(s->copies[0].handle.id, h[0].id);
	assert_int_equal(s->copies[1].handle.id, h[1].id);
	kva_copy_job first = s->copies[0];
	assert_int_equal(sc_free_pages(s), 40);
	kva_request_info third = conf_info(s, h[2]);
	assert_int_equal(third.state, KVA_STATE_WAITING);
	assert_int_equal(third.pages_held + third.pages_reserved, 0);
	sc_step(s, SC_MS);
	assert_int_equal(sc_free_pages(s), 40); /* still nothing taken */
	assert_int_equal(s->plan.n_copies, 0);
	/* the admitted imports keep going: the first completes and is admitted,
	 * and its slot goes to the third, which reserves only now */
	assert_int_equal(kva_copy_done(s->e, first.token, 0, 0), 0);
	sc_step(s, 0);
	assert_non_null(sc_admitted(s, h[0]));
	assert_int_equal(s->plan.n_copies, 1);
	assert_int_equal(s->copies[0].handle.id, h[2].id);
	assert_int_equal(sc_state(s, h[1]), KVA_STATE_IMPORTING);
	assert_int_equal(sc_free_pages(s), 10);
	sc_free(s);
}

/* Original: when execution needs every free block, an import's preflight is
 * refused without evicting anything. kvadmit: a refused reservation takes
 * nothing, preempts nothing and evicts nothing. */
static void external_import_preflight_does_not_evict_cache_on_execution_pressure(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	kva_handle run = sc_occupy(s, 1, 75); /* 25 free, the restore needs 30 */
	kva_stats before = sc_stats(s);
	kva_handle h = sc_submit(s, 2, KEY, 480);
	sc_step(s, 0);
	kva_stats after = sc_stats(s);
	assert_int_equal(after.free_pages, before.free_pages);
	assert_int_equal(after.reserved_pages, 0);
	assert_int_equal(after.preempted, 0);
	assert_int_equal(after.revalidations, 0);
	assert_int_equal(conf_info(s, run).pages_held, 75);
	assert_int_equal(sc_state(s, h), KVA_STATE_WAITING);
	assert_int_equal(s->plan.n_copies, 0);
	sc_free(s);
}

/* A full pool (three running requests of 40, 30 and 30 pages) with two
 * restores of 30 pages waiting, the older at the head. */
static struct sc *two_waiters(kva_handle run[3], kva_handle *older, kva_handle *newer)
{
	struct sc *s = sc_default();
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	run[0] = sc_occupy(s, 1, 40);
	run[1] = sc_occupy(s, 2, 30);
	run[2] = sc_occupy(s, 3, 30);
	*older = sc_submit(s, 4, KEY, 480);
	*newer = sc_submit(s, 5, KEY, 480);
	sc_step(s, 0);
	assert_true(s->plan.head_blocked);
	assert_int_equal(s->plan.n_copies, 0);
	return s;
}

/* Original (the waiter's space released, or twice that): a later restore
 * may use only the space beyond the waiter's need. */
static void capacity_waiter_holds_back_only_admissions_that_would_take_its_space(void **st)
{
	(void)st;
	for (int both = 0; both <= 1; both++) {
		kva_handle run[3], older, newer;
		struct sc *s = two_waiters(run, &older, &newer);
		assert_int_equal(kva_finish(s->e, run[1]), 0); /* the waiter's 30 */
		if (both)
			assert_int_equal(kva_finish(s->e, run[2]), 0); /* and 30 more */
		sc_step(s, 0);
		assert_int_equal(s->plan.n_copies, both ? 2 : 1);
		assert_int_equal(s->copies[0].handle.id, older.id);
		if (both)
			assert_int_equal(s->copies[1].handle.id, newer.id);
		assert_int_equal(sc_state(s, newer), both ? KVA_STATE_IMPORTING : KVA_STATE_WAITING);
		sc_free(s);
	}
}

/* Original: space released in a new step goes to a request considered
 * before the waiter; the waiter is refused. kvadmit: a preempted request
 * returns to the front, ahead of the waiter, and takes the space first. */
static void capacity_waiter_does_not_hold_back_requests_considered_before_it(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	kva_handle a = sc_occupy(s, 1, 70);
	kva_handle b = sc_submit(s, 2, 0, 480); /* 480 tokens: first chunk 16 pages */
	sc_step(s, 0);
	assert_non_null(sc_admitted(s, b));
	assert_int_equal(kva_grow(s->e, b, 14, NULL), 0); /* 30 pages: the pool is full */
	kva_handle waiter = sc_submit(s, 3, KEY, 480);
	sc_step(s, 0);
	assert_true(s->plan.head_blocked);
	assert_int_equal(kva_preempt(s->e, b), 0); /* 30 pages back, b to the front */
	sc_step(s, 0);
	assert_int_equal(conf_queue_position(s, waiter), 0);
	assert_non_null(sc_admitted(s, b)); /* considered first */
	assert_int_equal(s->plan.n_copies, 0);
	assert_int_equal(sc_state(s, waiter), KVA_STATE_WAITING);
	(void)a;
	sc_free(s);
}

/* Original: cancelling a capacity waiter releases the barrier it held. */
static void cancelled_capacity_waiter_releases_admission_barrier(void **st)
{
	(void)st;
	kva_handle run[3], older, newer;
	struct sc *s = two_waiters(run, &older, &newer);
	assert_int_equal(kva_finish(s->e, run[1]), 0); /* one waiter's worth */
	assert_int_equal(kva_cancel(s->e, older), 0);
	sc_step(s, 0);
	assert_non_null(sc_ended(s, older));
	assert_int_equal(s->plan.n_copies, 1);
	assert_int_equal(s->copies[0].handle.id, newer.id);
	sc_free(s);
}

/* Original: a restore refused for 29 s keeps waiting, silently; at 30.5 s it
 * stops waiting, with one warning that says how long it waited; it then
 * recomputes and neither restores nor holds later requests back. */
static void capacity_waiter_stops_waiting_after_bounded_wait(void **st)
{
	(void)st;
	kva_config c;
	sc_config(&c);
	c.max_restore_wait_ns = 30 * SC_SEC;
	c.wait_log_interval_ns = 0;
	struct sc *s = sc_new(&c);
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	sc_dir_set(s, 8, sc_ckpt(320, 901, 0));
	kva_handle hog1 = sc_occupy(s, 1, 46);
	sc_occupy(s, 2, 54);
	kva_handle waiter = sc_submit(s, 3, KEY, 480);
	kva_handle later = sc_submit(s, 4, 8, 480);
	sc_step(s, 0);
	sc_step(s, 29 * SC_SEC);
	assert_int_equal(s->n_warn, 0);
	assert_int_equal(sc_stats(s).wait_expired, 0);
	assert_true(conf_info(s, waiter).has_selection);
	sc_step(s, 1500 * SC_MS);
	assert_int_equal(s->n_warn, 1);
	assert_non_null(strstr(s->last_log, "30.5 s"));
	assert_int_equal(sc_stats(s).wait_expired, 1);
	kva_request_info info = conf_info(s, waiter);
	assert_false(info.has_selection);
	assert_int_equal(info.reason, KVA_REASON_WAIT_EXPIRED);
	/* space returns: it recomputes (16 pages), the later restore follows */
	assert_int_equal(kva_finish(s->e, hog1), 0);
	sc_step(s, 0);
	const kva_admission *a = sc_admitted(s, waiter);
	assert_non_null(a);
	assert_int_equal(a->how, KVA_ADMIT_RECOMPUTE);
	assert_int_equal(a->reason, KVA_REASON_WAIT_EXPIRED);
	assert_int_equal(a->restored_tokens, 0);
	assert_int_equal(s->plan.n_copies, 1);
	assert_int_equal(s->copies[0].handle.id, later.id);
	sc_step(s, 60 * SC_SEC);
	assert_int_equal(s->n_warn, 1);
	sc_free(s);
}

/* Original: the preflight keeps the decode watermark (refused, nothing
 * taken) and admits once the last runnable request finished; a restore larger
 * than the pool is classified at once and takes nothing. kvadmit's watermark is
 * a fixed floor (rule reservations-never-preempt): it is not lifted when
 * nothing runs (deliberate difference, see CATALOGUE.md); here the restore fits
 * above it once the running request finished. */
static void import_preflight_preserves_watermark_and_classifies_impossible_restore(void **st)
{
	(void)st;
	kva_config c;
	sc_config(&c);
	c.decode_reserve_pages = 10;
	struct sc *s = sc_new(&c);
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	kva_handle run = sc_occupy(s, 1, 61); /* 39 free: 30 needed, 29 above the mark */
	kva_handle h = sc_submit(s, 2, KEY, 480);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 0);
	assert_int_equal(sc_free_pages(s), 39);
	assert_int_equal(sc_stats(s).reserved_pages, 0);
	assert_int_equal(kva_finish(s->e, run), 0); /* the last runnable request */
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 1);
	assert_int_equal(s->copies[0].handle.id, h.id);
	sc_free(s);

	c.total_pages = 16;
	c.decode_reserve_pages = 0;
	s = sc_new(&c);
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	h = sc_submit(s, 1, KEY, 480); /* 30 pages > 16 */
	sc_step(s, 0);
	const kva_admission *a = sc_admitted(s, h);
	assert_non_null(a);
	assert_int_equal(a->how, KVA_ADMIT_RECOMPUTE);
	assert_int_equal(a->reason, KVA_REASON_TOO_LARGE);
	assert_int_equal(s->plan.n_copies, 0);
	assert_int_equal(sc_stats(s).restores_waiting, 0);
	sc_free(s);
}

/* Original: eight sessions whose checkpoints together exceed the pool each
 * restore in turn (no cold prefill), in order, and no block leaks. */
static void eight_external_sessions_rotate_without_cold_prefill_or_leaked_blocks(void **st)
{
	(void)st;
	kva_config c;
	sc_config(&c);
	c.total_pages = 64;
	c.world_size = 2;
	c.copy_slots = 8;
	c.decode_headroom_pages = 1;
	struct sc *s = sc_new(&c);
	kva_handle h[8];
	for (uint64_t i = 0; i < 8; i++) {
		sc_dir_set(s, 100 + i, sc_ckpt(400, 900 + i, 0));
		h[i] = sc_submit(s, i + 1, 100 + i, 400); /* 26 pages each, 208 > 64 */
	}
	uint32_t completed = 0;
	for (int round = 0; round < 32 && completed < 8; round++) {
		sc_step(s, SC_MS);
		uint32_t progressed = sc_copies_done(s, 0);
		for (uint32_t i = 0; i < s->plan.n_admitted; i++) {
			const kva_admission *a = &s->admitted[i];
			assert_int_equal(a->how, KVA_ADMIT_RESTORE);
			assert_int_equal(a->restored_tokens, 400);
			assert_int_equal(a->handle.id, h[completed].id); /* in order */
			assert_int_equal(kva_grow(s->e, a->handle, 1, NULL), 0);
			assert_int_equal(kva_finish(s->e, a->handle), 0);
			completed++;
			progressed++;
		}
		assert_true(progressed > 0 || sc_stats(s).importing > 0);
	}
	assert_int_equal(completed, 8);
	sc_step(s, SC_MS);
	kva_stats stt = sc_stats(s);
	assert_int_equal(stt.admitted_recompute, 0);
	assert_int_equal(stt.admitted_restore, 8);
	assert_int_equal(stt.free_pages, stt.total_pages);
	assert_int_equal(stt.reserved_pages, 0);
	sc_free(s);
}

/* Original (the new checkpoint replaces the old, or is discarded): the pins
 * of a pending copy survive the reader's release and the reuse of its id.
 * kvadmit: a cancelled import's destination pages stay pinned while its copy
 * is in flight; the same id, submitted again, restores into other pages and
 * is not completed by the old copy's reports; all pages return in the end. */
static void pending_copy_pins_survive_reader_release_and_id_reuse(void **st)
{
	(void)st;
	for (int status = 0; status <= 1; status++) { /* replace: success; discard: failure */
		struct sc *s = sc_default();
		sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
		kva_handle old = sc_submit(s, 1, KEY, 480);
		sc_step(s, 0);
		kva_copy_job job = s->copies[0];
		uint32_t pinned[32];
		memcpy(pinned, job.pages, job.npages * sizeof(uint32_t));
		assert_int_equal(kva_cancel(s->e, old), 0);
		sc_step(s, 0);
		assert_non_null(sc_ended(s, old));
		kva_handle reused = sc_submit(s, 1, KEY, 480);
		sc_step(s, 0);
		assert_int_equal(s->plan.n_copies, 1);
		kva_copy_job mine = s->copies[0];
		assert_int_equal(mine.handle.gen, reused.gen);
		for (uint32_t k = 0; k < mine.npages; k++)
			assert_false(conf_has_page(pinned, job.npages, mine.pages[k]));
		assert_int_equal(sc_stats(s).draining_pages, 20);
		/* the old copy finishes: it drains, it does not complete the new one */
		assert_int_equal(kva_copy_done(s->e, job.token, 0, status), 0);
		sc_step(s, 0);
		assert_int_equal(sc_state(s, reused), KVA_STATE_IMPORTING);
		assert_int_equal(sc_stats(s).draining_pages, 0);
		assert_int_equal(kva_copy_done(s->e, mine.token, 0, 0), 0);
		sc_step(s, 0);
		assert_non_null(sc_admitted(s, reused));
		assert_int_equal(kva_finish(s->e, reused), 0);
		sc_step(s, 0);
		kva_stats stt = sc_stats(s);
		assert_int_equal(stt.free_pages, stt.total_pages);
		assert_int_equal(stt.copy_attempts_failed, 0);
		sc_free(s);
	}
}

/* Original (limit: running slots or blocks): a reserved import stays
 * reachable behind a blocked cold request; it gets its first step with every
 * prompt token restored and none computed, the cold request keeps waiting. */
static void ready_case(int limit_slots)
{
	kva_config c;
	sc_config(&c);
	c.max_running = limit_slots ? 2 : 3;
	struct sc *s = sc_new(&c);
	sc_dir_set(s, KEY, sc_ckpt(32, 900, 0));
	kva_handle running = sc_occupy(s, 1, 2);
	kva_handle consumer = sc_submit(s, 2, KEY, 32);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 1);
	struct conf_jobs jobs = conf_save_copies(s);
	if (!limit_slots)
		sc_occupy(s, 3, (uint32_t)sc_free_pages(s)); /* no block left */
	kva_handle cold = sc_submit(s, 4, 0, 160);
	sc_step(s, 0);
	assert_true(s->plan.head_blocked);
	assert_null(sc_admitted(s, cold));
	conf_report(s, &jobs, 0);
	sc_step(s, 0);
	const kva_admission *a = sc_admitted(s, consumer);
	assert_non_null(a);
	assert_int_equal(a->how, KVA_ADMIT_RESTORE);
	assert_int_equal(a->restored_tokens, 32);
	assert_int_equal(a->recompute_tokens, 0);
	assert_int_equal(s->plan.n_admitted, 1);
	assert_int_equal(sc_state(s, cold), KVA_STATE_WAITING);
	assert_int_equal(sc_state(s, running), KVA_STATE_RUNNING);
	sc_free(s);
}

static void ready_import_behind_blocked_head_gets_saved_logits_step(void **st)
{
	(void)st;
	ready_case(1);
	ready_case(0);
}

/* Original: a streaming session that owns its capacity resumes ahead of a
 * restore waiting for capacity. kvadmit: a waiting restore holds nothing, so
 * a running owner keeps growing into free pages while the restore waits. */
static void streaming_owner_can_resume_ahead_of_capacity_waiter(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	kva_handle session = sc_occupy(s, 1, 80);
	kva_handle waiter = sc_submit(s, 2, KEY, 480); /* needs 30, 20 free */
	sc_step(s, 0);
	assert_true(s->plan.head_blocked);
	assert_int_equal(sc_stats(s).restores_waiting, 1);
	assert_int_equal(kva_grow(s->e, session, 1, NULL), 0); /* the next chunk */
	sc_step(s, 0);
	assert_int_equal(conf_info(s, session).pages_held, 81);
	assert_int_equal(sc_state(s, waiter), KVA_STATE_WAITING);
	assert_int_equal(sc_stats(s).preempted, 0);
	sc_free(s);
}

/* Original (import copying, or ready): ordinary requests keep their order
 * behind a blocked head; only a restored import passes it. */
static void blocked_queue_head_admits_only_restored_imports_past_it(void **st)
{
	(void)st;
	for (int ready = 0; ready <= 1; ready++) {
		struct sc *s = sc_default();
		sc_dir_set(s, KEY, sc_ckpt(32, 900, 0));
		kva_handle importer = sc_submit(s, 1, KEY, 48);
		sc_step(s, 0);
		assert_int_equal(s->plan.n_copies, 1);
		struct conf_jobs jobs = conf_save_copies(s);
		kva_handle hog = sc_occupy(s, 2, (uint32_t)sc_free_pages(s));
		kva_handle big = sc_submit(s, 3, 0, 2000);
		kva_handle small = sc_submit(s, 4, 0, 16);
		if (ready)
			conf_report(s, &jobs, 0);
		sc_step(s, 0);
		assert_int_equal(s->plan.n_admitted, ready ? 1 : 0);
		if (ready)
			assert_non_null(sc_admitted(s, importer));
		assert_int_equal(sc_state(s, big), KVA_STATE_WAITING);
		assert_int_equal(sc_state(s, small), KVA_STATE_WAITING);
		(void)hog;
		sc_free(s);
	}
}

/* Original: with a copying import, a blocked 500-request queue still costs
 * one lookup a step, as without it, and about the same time. kvadmit: a
 * blocked step touches the same (constant) number of records with or
 * without the import and issues no lookup at all. */
static uint32_t blocked_cost(int with_import, uint32_t *lookups_per_step)
{
	kva_config c;
	sc_config(&c);
	c.total_pages = 256;
	struct sc *s = sc_new(&c);
	sc_dir_set(s, KEY, sc_ckpt(32, 900, 0));
	kva_manifest miss = {0};
	s->dir[s->n_dir++] = (struct sc_dir_entry){9, miss};
	if (with_import) {
		sc_submit(s, 1, KEY, 64);
		sc_step(s, 0);
		assert_int_equal(s->plan.n_copies, 1);
	}
	sc_occupy(s, 2, (uint32_t)sc_free_pages(s));
	for (uint64_t i = 0; i < 500; i++)
		sc_submit(s, 100 + i, 9, 2048);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_admitted, 0);
	uint32_t lookups = s->n_lookups, touched = 0;
	for (int i = 0; i < 20; i++) {
		sc_step(s, SC_MS);
		assert_true(s->plan.head_blocked);
		assert_int_equal(s->plan.n_admitted, 0);
		if (s->plan.records_touched > touched)
			touched = s->plan.records_touched;
	}
	*lookups_per_step = (s->n_lookups - lookups) / 20;
	sc_free(s);
	return touched;
}

static void pending_import_step_cost_does_not_scale_with_blocked_queue(void **st)
{
	(void)st;
	uint32_t base_lookups, lookups;
	uint32_t base = blocked_cost(0, &base_lookups);
	uint32_t with = blocked_cost(1, &lookups);
	assert_int_equal(with, base);
	assert_true(base <= 2);
	assert_int_equal(lookups, 0);
	assert_int_equal(base_lookups, 0);
}

/* Original (import copying, ready, or ready but not yet reported ready):
 * running decodes keep running; a ready import and an older request behind
 * which it was queued are both served; nobody is preempted. kvadmit's
 * "ready but skipped" is an import that only some ranks reported. */
static void ready_import_behind_older_request_keeps_running_decode(void **st)
{
	(void)st;
	for (int state = 0; state < 3; state++) { /* copying, ready, ready_but_skipped */
		kva_config c;
		sc_config(&c);
		c.world_size = 2;
		struct sc *s = sc_new(&c);
		sc_dir_set(s, KEY, sc_ckpt(32, 900, 0));
		kva_handle running = sc_occupy(s, 1, 1);
		kva_handle importer = sc_submit(s, 2, KEY, 32);
		sc_step(s, 0);
		assert_int_equal(s->plan.n_copies, 2);
		kva_copy_token t = s->copies[0].token;
		kva_handle older = sc_submit(s, 3, 0, 16);
		if (state == 1) {
			sc_copies_done(s, 0);
		} else if (state == 2) {
			assert_int_equal(kva_copy_done(s->e, t, 0, 0), 0);
		}
		sc_step(s, 0);
		assert_int_equal(kva_grow(s->e, running, 1, NULL), 0); /* decode goes on */
		assert_non_null(sc_admitted(s, older));
		if (state == 1) {
			const kva_admission *a = sc_admitted(s, importer);
			assert_non_null(a);
			assert_int_equal(a->restored_tokens, 32);
		} else {
			assert_null(sc_admitted(s, importer));
			assert_int_equal(sc_state(s, importer), KVA_STATE_IMPORTING);
		}
		assert_int_equal(sc_state(s, running), KVA_STATE_RUNNING);
		assert_int_equal(sc_stats(s).preempted, 0);
		sc_free(s);
	}
}

/* Original: an unadmitted import's credits never preempt a running decode;
 * the decode that crosses a block boundary with only those credits free gets
 * its block. DELIBERATE DIFFERENCE (rule decode-never-suppressed): kvadmit's
 * decode growth may dip below the watermark but never into another request's
 * reservation, so the grow is refused (-ENOSPC) and the import keeps its
 * credits; the engine still preempts nobody (whether to preempt is the host's
 * choice). */
static void unadmitted_import_credits_do_not_preempt_running_decode(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, KEY, sc_ckpt(16, 900, 0));
	kva_handle running = sc_occupy(s, 1, 1);
	kva_handle importer = sc_submit(s, 2, KEY, 64); /* 4 pages of credits */
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 1);
	struct conf_jobs jobs = conf_save_copies(s);
	sc_occupy(s, 3, (uint32_t)sc_free_pages(s)); /* only the import's credits left */
	assert_int_equal(kva_grow(s->e, running, 1, NULL), -ENOSPC);
	kva_request_info info = conf_info(s, importer);
	assert_int_equal(info.pages_held + info.pages_reserved, 4);
	conf_report(s, &jobs, 0);
	sc_step(s, 0);
	assert_non_null(sc_admitted(s, importer));
	assert_int_equal(sc_state(s, running), KVA_STATE_RUNNING);
	assert_int_equal(sc_stats(s).preempted, 0);
	assert_int_equal(kva_grow(s->e, running, 1, NULL), -ENOSPC); /* still its credits */
	assert_int_equal(kva_grow(s->e, importer, 3, NULL), 0);
	sc_assert_conserved(s);
	sc_free(s);
}

/* Original: a restore waiting for capacity cannot overtake (or block) the
 * request ordered before it: space for that one admits it. */
static void capacity_waiter_does_not_block_requests_ahead_of_it(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, KEY, sc_ckpt(384, 900, 0));
	sc_occupy(s, 1, 99);
	kva_handle one = sc_occupy(s, 2, 1);
	kva_handle earlier = sc_submit(s, 3, 5, 16); /* its lookup is still out */
	kva_handle waiter = sc_submit(s, 4, KEY, 400);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_admitted, 0);
	assert_int_equal(s->plan.n_copies, 0);
	assert_int_equal(kva_finish(s->e, one), 0); /* space for earlier, not the restore */
	kva_manifest miss = {0};
	assert_int_equal(s->n_lookups, 2);
	assert_int_equal(s->lookups[0].key, 5);
	assert_int_equal(kva_lookup_answer(s->e, s->lookups[0].token, &miss), 0);
	sc_step(s, 0);
	const kva_admission *a = sc_admitted(s, earlier);
	assert_non_null(a);
	assert_int_equal(a->recompute_tokens, 16);
	assert_int_equal(s->plan.n_admitted, 1);
	assert_int_equal(sc_state(s, waiter), KVA_STATE_WAITING);
	sc_free(s);
}

/* Original: the connector keeps deferring a refused restore; past its
 * bounded wait the scheduler admits it to recompute its first chunk, with
 * one warning. */
static void restore_past_its_bounded_wait_is_admitted_to_recompute(void **st)
{
	(void)st;
	kva_config c;
	sc_config(&c);
	c.max_restore_wait_ns = 30 * SC_SEC;
	c.wait_log_interval_ns = 0;
	c.prefill_chunk_tokens = 64;
	struct sc *s = sc_new(&c);
	sc_dir_set(s, KEY, sc_ckpt(384, 900, 0));
	sc_occupy(s, 1, 80);
	kva_handle part = sc_occupy(s, 2, 20);
	kva_handle waiter = sc_submit(s, 3, KEY, 400); /* needs 25 */
	sc_step(s, 0);
	assert_int_equal(kva_finish(s->e, part), 0); /* a first chunk fits, the restore not */
	sc_step(s, 0);
	assert_int_equal(s->plan.n_admitted, 0);
	sc_step(s, 31 * SC_SEC);
	const kva_admission *a = sc_admitted(s, waiter);
	assert_non_null(a);
	assert_int_equal(a->how, KVA_ADMIT_RECOMPUTE);
	assert_int_equal(a->reason, KVA_REASON_WAIT_EXPIRED);
	assert_int_equal(a->npages, 4); /* 64 tokens */
	assert_int_equal(s->n_warn, 1);
	assert_non_null(strstr(s->last_log, "31.0 s"));
	assert_int_equal(s->plan.n_copies, 0);
	sc_free(s);
}

/* Original (running slots full, or free): decodes on a full pool still
 * preempt while restores wait; the restores keep waiting, bounded. */
static void decodes_on_a_full_pool_preempt_while_restores_wait(void **st)
{
	(void)st;
	for (int full = 0; full <= 1; full++) {
		kva_config c;
		sc_config(&c);
		c.max_running = full ? 2 : 3;
		struct sc *s = sc_new(&c);
		sc_dir_set(s, KEY, sc_ckpt(640, 900, 0));
		kva_handle first = sc_occupy(s, 1, 50);
		kva_handle second = sc_occupy(s, 2, 50);
		kva_handle ra = sc_submit(s, 3, KEY, 960); /* 60 pages each */
		kva_handle rb = sc_submit(s, 4, KEY, 960);
		sc_step(s, 0);
		assert_int_equal(kva_grow(s->e, first, 1, NULL), -ENOSPC);
		assert_int_equal(kva_preempt(s->e, second), 0); /* the host's decode turn */
		assert_int_equal(kva_grow(s->e, first, 1, NULL), 0);
		for (int i = 0; i < 8; i++)
			sc_step(s, 10 * SC_MS);
		assert_int_equal(sc_state(s, first), KVA_STATE_RUNNING);
		assert_int_equal(conf_info(s, first).pages_held, 51);
		assert_int_equal(sc_stats(s).preempted, 1);
		assert_int_equal(sc_state(s, second), KVA_STATE_RUNNING); /* back, at the front */
		assert_int_equal(sc_state(s, ra), KVA_STATE_WAITING);
		assert_int_equal(sc_state(s, rb), KVA_STATE_WAITING);
		assert_int_equal(sc_stats(s).restores_waiting, 2);
		assert_int_equal(sc_stats(s).copy_jobs, 0);
		sc_free(s);
	}
}

/* Original: a reset with running requests drops a finished (ready) import
 * that was not admitted; the request then recomputes, and the blocks are
 * back. kvadmit: the reset gives a READY import's pages back and sends it to
 * the front with a fresh lookup (the host preempts its running requests
 * itself); with the checkpoint gone it recomputes its 32 tokens. */
static void reset_with_running_requests_releases_ready_unadmitted_import(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, KEY, sc_ckpt(16, 900, 0));
	kva_handle running = sc_occupy(s, 1, 1);
	kva_handle importer = sc_submit(s, 2, KEY, 32);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 1);
	sc_copies_done(s, 0);                              /* ready ... */
	assert_int_equal(kva_reset_prefix_cache(s->e), 0); /* ... and reset before admission */
	assert_int_equal(kva_preempt(s->e, running), 0);
	sc_dir_clear(s);
	kva_manifest miss = {0};
	s->dir[s->n_dir++] = (struct sc_dir_entry){KEY, miss};
	const kva_admission *a = conf_step_until_admitted(s, importer, 0, 3);
	assert_int_equal(a->how, KVA_ADMIT_RECOMPUTE);
	assert_int_equal(a->reason, KVA_REASON_MISS);
	assert_int_equal(a->recompute_tokens, 32);
	assert_int_equal(a->restored_tokens, 0);
	assert_int_equal(conf_info(s, importer).lookups, 2);
	kva_stats stt = sc_stats(s);
	assert_int_equal(stt.admitted_restore, 0);
	assert_int_equal(stt.preempted, 1);
	assert_int_equal(stt.copy_jobs, 1);
	sc_assert_conserved(s);
	sc_free(s);
}

/* Original: a prefill turn that schedules nothing still lets decodes
 * preempt; otherwise every later step is empty. kvadmit: two requests fill
 * the pool and the running slots, two wait; a decode refused a page makes
 * the host preempt the younger, which returns to the head of the queue and
 * is admitted again before the requests that were waiting. */
static void decodes_on_a_full_pool_preempt_in_an_empty_prefill_turn(void **st)
{
	(void)st;
	kva_config c;
	sc_config(&c);
	c.max_running = 2;
	struct sc *s = sc_new(&c);
	kva_handle first = sc_occupy(s, 1, 50);
	kva_handle second = sc_occupy(s, 2, 50);
	kva_handle wa = sc_submit(s, 3, 0, 40);
	kva_handle wb = sc_submit(s, 4, 0, 40);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_admitted, 0);
	assert_int_equal(kva_grow(s->e, first, 1, NULL), -ENOSPC);
	assert_int_equal(kva_preempt(s->e, second), 0);
	assert_int_equal(kva_grow(s->e, first, 1, NULL), 0);
	assert_int_equal(conf_queue_position(s, wa), 0);
	sc_step(s, 0);
	assert_non_null(sc_admitted(s, second)); /* from the front, before wa and wb */
	assert_int_equal(s->plan.n_admitted, 1); /* two running slots */
	assert_int_equal(conf_queue_position(s, wa), 0);
	assert_int_equal(sc_state(s, first), KVA_STATE_RUNNING);
	assert_int_equal(sc_state(s, wa), KVA_STATE_WAITING);
	assert_int_equal(sc_state(s, wb), KVA_STATE_WAITING);
	assert_int_equal(sc_stats(s).preempted, 1);
	sc_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(external_import_owns_execution_capacity_through_chunked_prefill),
		cmocka_unit_test(external_import_cancellation_releases_only_pages_after_copy_drain),
		cmocka_unit_test(external_imports_reserve_slots_without_serializing_available_imports),
		cmocka_unit_test(external_import_preflight_does_not_evict_cache_on_execution_pressure),
		cmocka_unit_test(capacity_waiter_holds_back_only_admissions_that_would_take_its_space),
		cmocka_unit_test(capacity_waiter_does_not_hold_back_requests_considered_before_it),
		cmocka_unit_test(cancelled_capacity_waiter_releases_admission_barrier),
		cmocka_unit_test(capacity_waiter_stops_waiting_after_bounded_wait),
		cmocka_unit_test(import_preflight_preserves_watermark_and_classifies_impossible_restore),
		cmocka_unit_test(eight_external_sessions_rotate_without_cold_prefill_or_leaked_blocks),
		cmocka_unit_test(pending_copy_pins_survive_reader_release_and_id_reuse),
		cmocka_unit_test(ready_import_behind_blocked_head_gets_saved_logits_step),
		cmocka_unit_test(streaming_owner_can_resume_ahead_of_capacity_waiter),
		cmocka_unit_test(blocked_queue_head_admits_only_restored_imports_past_it),
		cmocka_unit_test(pending_import_step_cost_does_not_scale_with_blocked_queue),
		cmocka_unit_test(ready_import_behind_older_request_keeps_running_decode),
		cmocka_unit_test(unadmitted_import_credits_do_not_preempt_running_decode),
		cmocka_unit_test(capacity_waiter_does_not_block_requests_ahead_of_it),
		cmocka_unit_test(restore_past_its_bounded_wait_is_admitted_to_recompute),
		cmocka_unit_test(decodes_on_a_full_pool_preempt_while_restores_wait),
		cmocka_unit_test(reset_with_running_requests_releases_ready_unadmitted_import),
		cmocka_unit_test(decodes_on_a_full_pool_preempt_in_an_empty_prefill_turn),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
