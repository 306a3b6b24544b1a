/* SPDX-License-Identifier: Apache-2.0 */
/* Credits only (KVA_CONFIG_CREDITS_ONLY): the host keeps its own block pool.
 * kvadmit reserves, counts and orders exactly as it does with page ids, but
 * hands none out: admissions and growth say how many pages, copy jobs carry
 * npages and no ids, plans need no page array. Through a whole lifecycle:
 * recompute, growth, a restore whose first copy fails, preemption, finish. */
#include "scenario.h"

#define KEY 7

static struct sc *credits_engine(void)
{
	kva_config c;
	sc_config(&c); /* 100 pages of 16 tokens, chunk 256 */
	c.flags = KVA_CONFIG_CREDITS_ONLY;
	struct sc *s = sc_new(&c);
	s->plan.pages_cap = 0; /* no page array needed: kva_plan_min_sizes says 0 */
	s->plan.pages = NULL;
	return s;
}

static void config_and_plan_sizes(void **st)
{
	(void)st;
	assert_true(kva_has_feature(KVA_FEATURE_CREDITS_ONLY));
	kva_config c;
	sc_config(&c);
	c.flags = KVA_CONFIG_CREDITS_ONLY;
	kva_plan_sizes z;
	assert_int_equal(kva_plan_min_sizes(&c, &z), 0);
	assert_int_equal(z.pages, 0);
	c.flags = 0;
	assert_int_equal(kva_plan_min_sizes(&c, &z), 0);
	assert_int_equal(z.pages, 100);
	int err = 0;
	c.flags = 1u << 5; /* unknown bits are refused */
	assert_null(kva_engine_create(&c, &err));
	assert_int_equal(err, -EINVAL);
	c.flags = KVA_CONFIG_CREDITS_ONLY; /* importers copy into kvadmit's ids: refused */
	c.importers[0].submit = (kva_import_fn)(void (*)(void))sc_log_cb;
	assert_null(kva_engine_create(&c, &err));
	assert_int_equal(err, -EINVAL);
}

static void a_whole_lifecycle_hands_out_counts_not_ids(void **st)
{
	(void)st;
	struct sc *s = credits_engine();
	sc_dir_set(s, KEY, sc_ckpt(64, 80, 0)); /* 4 pages of checkpoint */
	kva_handle a = sc_submit(s, 1, 0, 1000); /* recompute: first chunk 256 = 16 pages */
	kva_handle b = sc_submit(s, 2, KEY, 100); /* restore of 64 tokens */
	assert_int_equal(sc_step(s, SC_MS), 1);
	const kva_admission *x = sc_admitted(s, a);
	assert_non_null(x);
	assert_int_equal(x->npages, 16);
	assert_int_equal(x->pages_off, 0);
	assert_int_equal(s->plan.n_pages, 0);
	/* b's copy: a count of the host's own pages, no ids */
	assert_int_equal(s->plan.n_copies, 1);
	assert_null(s->copies[0].pages);
	assert_int_equal(s->copies[0].npages, 4);
	kva_stats t = sc_stats(s);
	assert_int_equal(t.in_use_pages, 16);
	/* growth: counted, no ids written */
	uint32_t ids[8] = {0xdead, 0xdead, 0xdead, 0xdead, 0xdead, 0xdead, 0xdead, 0xdead};
	assert_int_equal(kva_grow(s->e, a, 8, ids), 0);
	for (int i = 0; i < 8; i++)
		assert_int_equal(ids[i], 0xdead);
	assert_int_equal(sc_stats(s).in_use_pages, 24);
	assert_int_equal(kva_grow(s->e, a, 80, NULL), -ENOSPC); /* still bounded by credits */
	/* the first copy fails: the same checkpoint again, a new attempt, still no ids */
	uint32_t first = s->copies[0].token.attempt;
	sc_copies_done(s, -EIO);
	sc_step(s, SC_MS);
	assert_int_equal(s->plan.n_copies, 1);
	assert_int_equal(s->copies[0].token.attempt, first + 1);
	assert_null(s->copies[0].pages);
	assert_int_equal(s->copies[0].npages, 4);
	sc_copies_done(s, 0);
	sc_step(s, SC_MS);
	x = sc_expect_admitted(s, b, KVA_ADMIT_RESTORE, 0, 64);
	assert_int_equal(x->npages, 4);
	assert_int_equal(x->pages_off, 0);
	assert_int_equal(s->plan.n_pages, 0);
	/* preemption gives a's 24 pages back at once; it is admitted again */
	uint64_t free_before = sc_free_pages(s);
	assert_int_equal(kva_preempt(s->e, a), 0);
	assert_int_equal(sc_free_pages(s), free_before + 24);
	sc_step(s, SC_MS);
	x = sc_admitted(s, a);
	assert_non_null(x);
	assert_int_equal(x->npages, 16);
	assert_int_equal(sc_stats(s).preempted, 1);
	assert_int_equal(kva_finish(s->e, a), 0);
	assert_int_equal(kva_finish(s->e, b), 0);
	sc_step(s, SC_MS);
	t = sc_stats(s);
	assert_int_equal(t.free_pages, t.total_pages);
	assert_int_equal(t.finished, 2);
	assert_int_equal(t.copy_attempts_failed, 1);
	sc_assert_conserved(s);
	sc_free(s);
}

/* Without the flag the same plan (no page array) is too small: the flag is
 * what lets a host drop it. */
static void without_the_flag_a_plan_without_pages_is_too_small(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	s->plan.pages_cap = 0;
	s->plan.pages = NULL;
	sc_submit(s, 1, 0, 100);
	assert_int_equal(sc_step(s, SC_MS), 0);
	assert_true(s->plan.too_small);
	sc_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(config_and_plan_sizes),
		cmocka_unit_test(a_whole_lifecycle_hands_out_counts_not_ids),
		cmocka_unit_test(without_the_flag_a_plan_without_pages_is_too_small),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
