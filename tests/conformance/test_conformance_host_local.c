/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Conformance, rule host-local-checkpoints (local checkpoints the host knows):
 * vLLM tests/v1/core/test_boundary_admission.py (local-inference-lab/vllm @
 * 17b1d42f675c51b0f48d7cf65bbdaa417b308b3f).
 */
#include "conf.h"

#define KEY 7

static kva_handle submit_local(struct sc *s, uint64_t id, uint32_t prompt, kva_checkpoint local)
{
	kva_request r = {.id = id, .prefix_key = KEY, .prompt_tokens = prompt, .local = local};
	kva_handle h;
	assert_int_equal(kva_submit(s->e, &r, &h), 0);
	return h;
}

/* Original (the producer stopped, or hit its length cap): the checkpoint a
 * finished request published at the end of its response stays reusable, and
 * the next turn, whose prompt appends to it, hits 142 of its tokens. kvadmit
 * does not publish checkpoints; the host's prefix cache holds the response,
 * and the next turn states it: as kva_request.local at submit, or with
 * kva_local_checkpoint while it waits. Either way it is admitted from the
 * local checkpoint, without a copy, every prompt token counted once. */
static void response_checkpoint_remains_reusable_after_stop_or_length_cap(void **st)
{
	(void)st;
	for (int later = 0; later <= 1; later++) {
		struct sc *s = sc_default();
		kva_manifest miss = {0};
		s->dir[s->n_dir++] = (struct sc_dir_entry){KEY, miss}; /* the store has nothing */
		kva_handle producer = sc_submit(s, 1, 0, 140);
		sc_step(s, 0);
		assert_non_null(sc_admitted(s, producer));
		assert_int_equal(kva_finish(s->e, producer), 0); /* stop or length cap alike */
		sc_step(s, 0);
		kva_checkpoint response = sc_ckpt(142, 4242, 1);
		kva_handle next;
		if (!later) {
			next = submit_local(s, 2, 160, response);
		} else {
			kva_handle hog = sc_occupy(s, 3, 95); /* next waits behind the pool */
			next = submit_local(s, 2, 160, (kva_checkpoint){0});
			sc_step(s, 0);
			assert_null(sc_admitted(s, next));
			assert_int_equal(conf_info(s, next).reason, KVA_REASON_MISS);
			assert_int_equal(kva_local_checkpoint(s->e, next, &response), 0);
			assert_int_equal(kva_finish(s->e, hog), 0);
		}
		uint32_t lookups = s->n_lookups;
		sc_step(s, 0);
		const kva_admission *a = sc_admitted(s, next);
		assert_non_null(a);
		assert_int_equal(a->how, KVA_ADMIT_LOCAL);
		assert_int_equal(a->local_tokens, 142);
		assert_int_equal(a->restored_tokens, 0);
		assert_int_equal(a->recompute_tokens, 18);
		assert_int_equal(s->plan.n_copies, 0);
		/* at submit a partial local still asks the directory once; stated
		 * later it upgrades the waiting request without a new lookup */
		assert_int_equal(s->n_lookups, lookups + (later ? 0 : 1));
		kva_stats stt = sc_stats(s);
		assert_int_equal(stt.copy_jobs, 0);
		assert_int_equal(stt.local_stated, later ? 1 : 0);
		assert_int_equal(stt.local_upgrades, later ? 1 : 0);
		assert_int_equal(stt.tokens_local, 142);
		assert_int_equal(kva_finish(s->e, next), 0);
		sc_step(s, 0);
		assert_int_equal(sc_free_pages(s), 100);
		sc_free(s);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(response_checkpoint_remains_reusable_after_stop_or_length_cap),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
