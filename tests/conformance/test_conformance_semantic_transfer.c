/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Conformance: LMCache tests/v1/test_vllm_semantic_checkpoint_transfer.py
 * (local-inference-lab/LMCache @ 07e557d829ee17df56cd3bc8819b678660b811f7).
 * Collective copy completion, rank identity, refused submissions and
 * cancellation, translated to kvadmit's copy jobs and reports.
 */
#include "conf.h"

#define KEY 7

/* An importer (one per rank) that records every job handed to it and
 * refuses the calls listed in `refuse` (1-based call numbers). */
struct importer {
	uint32_t calls;
	uint32_t refuse[4];
	uint32_t n_refuse;
	kva_copy_job jobs[64];
	uint32_t n_jobs;
};

static int importer_submit(void *ctx, kva_engine *e, const kva_copy_job *job)
{
	(void)e;
	struct importer *im = ctx;
	uint32_t call = ++im->calls;
	for (uint32_t i = 0; i < im->n_refuse; i++)
		if (im->refuse[i] == call)
			return -EIO;
	if (im->n_jobs < 64)
		im->jobs[im->n_jobs++] = *job;
	return 0;
}

/* Original: per-rank acknowledgements merge without losing which rank said
 * what; the same rank twice is an error. */
static void worker_acknowledgements_preserve_rank_identity(void **st)
{
	(void)st;
	kva_config c;
	sc_config(&c);
	c.world_size = 2;
	struct sc *s = sc_new(&c);
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	kva_handle h = sc_submit(s, 1, KEY, 480);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 2);
	kva_copy_token t = s->copies[0].token;
	assert_int_equal(t.attempt, s->copies[1].token.attempt);
	assert_int_equal(kva_copy_done(s->e, t, 0, 0), 0);  /* rank 0: success */
	assert_int_equal(kva_copy_done(s->e, t, 0, 0), -EALREADY); /* duplicate rank 0 */
	assert_int_equal(kva_copy_done(s->e, t, 1, -1), 0); /* rank 1: failure */
	assert_int_equal(kva_copy_done(s->e, t, 1, 0), -EALREADY); /* its verdict stands */
	sc_step(s, 0);
	/* rank 1's failure was not masked by rank 0's success: a failed attempt */
	assert_null(sc_admitted(s, h));
	kva_stats stt = sc_stats(s);
	assert_int_equal(stt.copy_attempts_failed, 1);
	assert_int_equal(stt.copy_retries, 1);
	assert_int_equal(s->plan.n_copies, 2);
	assert_int_equal(s->copies[0].token.attempt, t.attempt + 1);
	assert_int_equal(s->copies[0].rank + s->copies[1].rank, 1); /* ranks 0 and 1 */
	/* the old attempt's reports are no longer current */
	assert_int_equal(kva_copy_done(s->e, t, 0, 0), -ESTALE);
	sc_copies_done(s, 0);
	sc_step(s, 0);
	const kva_admission *a = sc_admitted(s, h);
	assert_non_null(a);
	assert_int_equal(a->how, KVA_ADMIT_RESTORE);
	sc_assert_conserved(s);
	sc_free(s);
}

/* Original: a LoRA request's adapter id does not authenticate its bytes, so
 * it neither reads nor publishes the base-weight namespace. kvadmit: a host
 * that cannot name a trustworthy prefix passes no key; the engine then never
 * asks the directory and never restores, even when a checkpoint exists for
 * the same prompt under a key. */
static void lora_requests_do_not_read_or_publish_the_base_weight_namespace(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	kva_handle base = sc_submit(s, 1, KEY, 480);
	kva_handle lora = sc_submit(s, 2, 0, 480);
	sc_step(s, 0);
	assert_int_equal(s->n_lookups, 1); /* only the base request's */
	assert_int_equal(s->lookups[0].key, KEY);
	const kva_admission *a = sc_admitted(s, lora);
	assert_non_null(a);
	assert_int_equal(a->how, KVA_ADMIT_RECOMPUTE);
	assert_int_equal(a->reason, KVA_REASON_NO_KEY);
	assert_int_equal(a->restored_tokens, 0);
	assert_int_equal(a->local_tokens, 0);
	assert_int_equal(s->plan.n_copies, 1);
	assert_int_equal(s->copies[0].handle.id, base.id);
	assert_int_equal(sc_stats(s).fallbacks[KVA_REASON_NO_KEY], 1);
	sc_free(s);
}

/* Original: a transport failure before dispatch owns no worker copy and no
 * pin; after the request is cancelled nothing is left pending. kvadmit: an
 * importer that refuses the job fails that rank; cancelling the request then
 * returns every credit, the copy slot and the pages, with nothing draining. */
static void failed_begin_releases_source_pin_after_request_cancellation(void **st)
{
	(void)st;
	struct importer im = {.refuse = {1}, .n_refuse = 1};
	kva_config c;
	sc_config(&c);
	c.importers[0] = (kva_importer_ref){importer_submit, &im};
	struct sc *s = sc_new(&c);
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	kva_handle h = sc_submit(s, 1, KEY, 480);
	sc_step(s, 0);
	assert_int_equal(im.calls, 1);
	assert_int_equal(im.n_jobs, 0); /* refused: never dispatched */
	assert_int_equal(kva_cancel(s->e, h), 0);
	for (int i = 0; i < 3; i++)
		sc_step(s, SC_MS);
	assert_int_equal(sc_state(s, h), 0); /* ended and gone */
	kva_stats stt = sc_stats(s);
	assert_int_equal(stt.cancelled, 1);
	assert_int_equal(stt.draining_pages, 0);
	assert_int_equal(stt.reserved_pages, 0);
	assert_int_equal(stt.free_pages, stt.total_pages);
	assert_int_equal(stt.free_copy_slots, c.copy_slots);
	assert_int_equal(stt.admitted_restore + stt.admitted_recompute, 0);
	uint32_t calls = im.calls;
	sc_step(s, SC_MS);
	assert_int_equal(im.calls, calls); /* no copy pending any more */
	sc_free(s);
}

/* Original: when the executor rejects one submission, every task of the
 * step is still reported (the rejected one as failed), none is stranded. */
static void submission_exception_reports_each_unsent_task(void **st)
{
	(void)st;
	struct importer im = {.refuse = {2}, .n_refuse = 1};
	kva_config c;
	sc_config(&c);
	c.importers[0] = (kva_importer_ref){importer_submit, &im};
	struct sc *s = sc_new(&c);
	sc_dir_set(s, KEY, sc_ckpt(160, 900, 0));
	kva_handle h[3];
	for (int i = 0; i < 3; i++)
		h[i] = sc_submit(s, (uint64_t)i + 1, KEY, 320);
	sc_step(s, 0);
	assert_int_equal(im.calls, 3);
	assert_int_equal(im.n_jobs, 2); /* the second was refused */
	assert_int_equal(im.jobs[0].handle.id, h[0].id);
	assert_int_equal(im.jobs[1].handle.id, h[2].id);
	for (uint32_t i = 0; i < im.n_jobs; i++)
		assert_int_equal(kva_copy_done(s->e, im.jobs[i].token, 0, 0), 0);
	sc_step(s, 0);
	/* the two accepted ones complete; the refused one was reported failed
	 * and retried, not stranded */
	assert_non_null(sc_admitted(s, h[0]));
	assert_non_null(sc_admitted(s, h[2]));
	assert_null(sc_admitted(s, h[1]));
	kva_stats stt = sc_stats(s);
	assert_int_equal(stt.copy_attempts_failed, 1);
	assert_int_equal(stt.copy_retries, 1);
	assert_int_equal(im.calls, 4);
	assert_int_equal(im.jobs[2].handle.id, h[1].id);
	assert_int_equal(im.jobs[2].token.attempt, 2);
	assert_int_equal(kva_copy_done(s->e, im.jobs[2].token, 0, 0), 0);
	sc_step(s, 0);
	const kva_admission *a = sc_admitted(s, h[1]);
	assert_non_null(a);
	assert_int_equal(a->how, KVA_ADMIT_RESTORE);
	assert_int_equal(sc_stats(s).admitted_restore, 3);
	assert_int_equal(sc_stats(s).free_copy_slots, c.copy_slots);
	sc_free(s);
}

/* Original: a worker that is not bound to a rank cannot emit a report.
 * kvadmit: a report for a rank outside the world is refused and changes
 * nothing; the attempt still waits for its real ranks. */
static void worker_metadata_requires_bound_rank(void **st)
{
	(void)st;
	kva_config c;
	sc_config(&c);
	c.world_size = 2;
	struct sc *s = sc_new(&c);
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	kva_handle h = sc_submit(s, 1, KEY, 480);
	sc_step(s, 0);
	kva_copy_token t = s->copies[0].token;
	assert_int_equal(kva_copy_done(s->e, t, 2, 0), -ERANGE);
	assert_int_equal(kva_copy_done(s->e, t, UINT32_MAX, 0), -ERANGE);
	assert_int_equal(kva_copy_done(s->e, t, 0, 0), 0);
	sc_step(s, 0);
	assert_int_equal(sc_state(s, h), KVA_STATE_IMPORTING); /* rank 1 still owes */
	assert_int_equal(kva_copy_done(s->e, t, 1, 0), 0);
	sc_step(s, 0);
	assert_non_null(sc_admitted(s, h));
	sc_free(s);
}

/* Original (parametrized over five outcomes): a restore of a checkpoint
 * copied by four ranks becomes visible only when every rank acknowledged;
 * a rank miss or a cancellation restores nothing; the destination pages
 * return only after every rank reported; reusing a request id (of a store
 * the server rejected, or of a cancelled producer whose copy is still in
 * flight) neither cancels nor feeds the independent import. */
enum outcome { SUCCESS, RANK_MISS, CANCELLED, REJECTED_REUSED_ID, INFLIGHT_REUSED_ID };

#define CONSUMER 5
#define PROMPT 176 /* 11 pages, the whole prompt checkpointed */

static void roundtrip(enum outcome outcome)
{
	kva_config c;
	sc_config(&c);
	c.world_size = 4;
	c.max_copy_retries = 0;
	struct sc *s = sc_new(&c);
	sc_dir_set(s, KEY, sc_ckpt(PROMPT, 900, 0));
	sc_dir_set(s, 8, sc_ckpt(PROMPT, 901, 0)); /* the predecessor's different prompt */
	kva_handle old = {0};
	kva_copy_job pred[4];
	uint32_t n_pred = 0;
	if (outcome == REJECTED_REUSED_ID) {
		/* an earlier incarnation with the consumer's id ended before */
		old = sc_submit(s, CONSUMER, 0, 16);
		assert_int_equal(kva_cancel(s->e, old), 0);
		sc_step(s, 0);
		assert_non_null(sc_ended(s, old));
	} else if (outcome == INFLIGHT_REUSED_ID) {
		/* a cancelled predecessor with the same id whose copy still runs */
		old = sc_submit(s, CONSUMER, 8, PROMPT);
		sc_step(s, 0);
		n_pred = conf_jobs_of(s, old, pred, 4);
		assert_int_equal(n_pred, 4);
		assert_int_equal(kva_cancel(s->e, old), 0);
		sc_step(s, 0);
		assert_non_null(sc_ended(s, old));
		assert_int_equal(sc_stats(s).draining_pages, 11);
	}
	uint64_t before = sc_free_pages(s);
	kva_handle h = sc_submit(s, CONSUMER, KEY, PROMPT);
	sc_step(s, 0);
	kva_copy_job jobs[4];
	assert_int_equal(conf_jobs_of(s, h, jobs, 4), 4);
	if (outcome == REJECTED_REUSED_ID || outcome == INFLIGHT_REUSED_ID)
		assert_int_equal(kva_cancel(s->e, old), -ENOENT); /* cannot reach the new one */
	if (outcome == INFLIGHT_REUSED_ID)
		for (uint32_t i = 0; i < 4; i++) /* never the predecessor's pages */
			for (uint32_t k = 0; k < jobs[0].npages; k++)
				assert_false(conf_has_page(pred[i].pages, pred[i].npages, jobs[0].pages[k]));
	if (outcome == CANCELLED)
		assert_int_equal(kva_cancel(s->e, h), 0);
	for (uint32_t rank = 0; rank < 4; rank++) {
		int status = outcome == RANK_MISS && rank == 2 ? -1 : 0;
		assert_int_equal(kva_copy_done(s->e, jobs[rank].token, rank, status), 0);
		if (outcome == INFLIGHT_REUSED_ID && rank == 1) { /* the predecessor drains meanwhile */
			for (uint32_t i = 0; i < n_pred; i++)
				assert_int_equal(kva_copy_done(s->e, pred[i].token, pred[i].rank, 0), 0);
			before += 11; /* its pages are back */
		}
		sc_step(s, 0);
		if (rank < 3) {
			assert_int_equal(s->plan.n_admitted, 0); /* not visible before every rank */
			assert_true(sc_free_pages(s) < before);
			if (outcome != CANCELLED)
				assert_int_equal(sc_state(s, h), KVA_STATE_IMPORTING);
		}
	}
	const kva_admission *a = sc_admitted(s, h);
	uint32_t expected = outcome == RANK_MISS || outcome == CANCELLED ? 0 : PROMPT;
	if (outcome == CANCELLED) {
		assert_null(a);
		assert_int_equal(sc_stats(s).cancelled, 1);
	} else {
		assert_non_null(a);
		assert_int_equal(a->restored_tokens, expected);
		assert_int_equal(a->how, expected ? KVA_ADMIT_RESTORE : KVA_ADMIT_RECOMPUTE);
		if (!expected)
			assert_int_equal(a->reason, KVA_REASON_RETRIES_EXHAUSTED);
		assert_int_equal(kva_finish(s->e, h), 0);
		sc_step(s, 0);
	}
	kva_stats stt = sc_stats(s);
	assert_int_equal(stt.free_pages, before);
	assert_int_equal(stt.free_pages, stt.total_pages);
	assert_int_equal(stt.draining_pages, 0);
	assert_int_equal(stt.free_copy_slots, c.copy_slots);
	assert_int_equal(stt.tokens_restored, expected);
	sc_free(s);
}

static void semantic_roundtrip_collective_visibility_and_cancellation_success(void **st)
{
	(void)st;
	roundtrip(SUCCESS);
}
static void semantic_roundtrip_collective_visibility_and_cancellation_rank_miss(void **st)
{
	(void)st;
	roundtrip(RANK_MISS);
}
static void semantic_roundtrip_collective_visibility_and_cancellation_cancelled(void **st)
{
	(void)st;
	roundtrip(CANCELLED);
}
static void semantic_roundtrip_collective_visibility_and_cancellation_rejected_reused_id(void **st)
{
	(void)st;
	roundtrip(REJECTED_REUSED_ID);
}
static void semantic_roundtrip_collective_visibility_and_cancellation_inflight_reused_id(void **st)
{
	(void)st;
	roundtrip(INFLIGHT_REUSED_ID);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(worker_acknowledgements_preserve_rank_identity),
		cmocka_unit_test(lora_requests_do_not_read_or_publish_the_base_weight_namespace),
		cmocka_unit_test(failed_begin_releases_source_pin_after_request_cancellation),
		cmocka_unit_test(submission_exception_reports_each_unsent_task),
		cmocka_unit_test(worker_metadata_requires_bound_rank),
		cmocka_unit_test(semantic_roundtrip_collective_visibility_and_cancellation_success),
		cmocka_unit_test(semantic_roundtrip_collective_visibility_and_cancellation_rank_miss),
		cmocka_unit_test(semantic_roundtrip_collective_visibility_and_cancellation_cancelled),
		cmocka_unit_test(
			semantic_roundtrip_collective_visibility_and_cancellation_rejected_reused_id),
		cmocka_unit_test(
			semantic_roundtrip_collective_visibility_and_cancellation_inflight_reused_id),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
