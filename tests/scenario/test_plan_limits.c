/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A plan too small for what the step must list, and a step that cannot get
 * memory, are impossible to miss (hardening issue, items 2 and 8): a flag on
 * the plan, a counter, one log line per run of such steps, and nothing
 * dropped — what did not fit waits for a plan that can hold it.
 */
#include "scenario.h"

#ifdef KVA_FAULT_INJECTION
uint64_t kva__fault_arm(uint64_t k, int sticky); /* reservations/alloc.h */
#endif

static void min_sizes_follow_the_config(void **st)
{
	(void)st;
	kva_config c;
	sc_config(&c);
	c.decode_reserve_pages = 10;
	c.world_size = 4;
	kva_plan_sizes z;
	assert_int_equal(kva_plan_min_sizes(&c, &z), 0);
	assert_int_equal(z.admitted, 1);
	assert_int_equal(z.pages, 90);
	assert_int_equal(z.copies, 4);
	assert_int_equal(kva_plan_min_sizes(NULL, &z), -EINVAL);
	c.world_size = 0;
	assert_int_equal(kva_plan_min_sizes(&c, &z), -EINVAL);
}

/* The README's own mistake: a 4096-page plan and a prompt needing more. */
static void ready_restore_larger_than_the_plan_is_flagged_not_silent(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	sc_dir_set(s, 8, sc_ckpt(320, 900, 0));
	kva_handle h = sc_submit(s, 1, 8, 480); /* imports 20 pages */
	sc_step(s, 0);
	sc_copies_done(s, 0);
	s->plan.pages_cap = 8;
	for (int i = 0; i < 3; i++) {
		sc_step(s, 0);
		assert_null(sc_admitted(s, h));
		assert_true(s->plan.too_small);
	}
	assert_int_equal(sc_state(s, h), KVA_STATE_READY); /* holds its pages, waits */
	assert_int_equal(sc_stats(s).plan_too_small, 3);
	assert_int_equal(s->n_logs, 1); /* once per run of such steps */
	assert_non_null(strstr(s->last_log, "kva_plan_min_sizes"));
	kva_plan_sizes z;
	assert_int_equal(kva_plan_min_sizes(&s->cfg, &z), 0);
	s->plan.pages_cap = z.pages;
	assert_int_equal(sc_step(s, 0), 1);
	assert_false(s->plan.too_small);
	assert_int_equal(sc_admitted(s, h)->npages, 20);
	sc_free(s);
}

static void first_chunk_larger_than_the_plan_is_flagged(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	s->plan.pages_cap = 4; /* a 256-token chunk is 16 pages */
	kva_handle h = sc_submit(s, 1, 0, 1000);
	sc_step(s, 0);
	assert_null(sc_admitted(s, h));
	assert_true(s->plan.too_small);
	assert_int_equal(sc_stats(s).plan_too_small, 1);
	s->plan.pages_cap = 100;
	assert_int_equal(sc_step(s, 0), 1);
	sc_free(s);
}

/* The boundary of the plan's room: an admission whose pages exactly fill
 * what is left of pages_cap fits. */
static void admission_exactly_filling_the_plan_fits(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	s->plan.pages_cap = 16; /* a 256-token chunk is 16 pages */
	kva_handle h = sc_submit(s, 1, 0, 1000);
	assert_int_equal(sc_step(s, 0), 1);
	assert_non_null(sc_admitted(s, h));
	assert_int_equal(s->plan.n_pages, 16);
	assert_false(s->plan.too_small);
	sc_free(s);
}

/* Without importers the plan is the only channel to the host's copier. */
static void copy_job_wider_than_the_plan_waits_and_is_flagged(void **st)
{
	(void)st;
	kva_config c;
	sc_config(&c);
	c.world_size = 2;
	struct sc *s = sc_new(&c);
	sc_dir_set(s, 8, sc_ckpt(32, 900, 0));
	s->plan.copies_cap = 1;
	kva_handle h = sc_submit(s, 1, 8, 64);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 0);
	assert_true(s->plan.too_small);
	assert_int_equal(sc_state(s, h), KVA_STATE_IMPORTING);
	s->plan.copies_cap = 2;
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 2); /* both ranks, nothing lost */
	assert_false(s->plan.too_small);
	sc_free(s);
}

static uint32_t handed;
static int count_import(void *ctx, kva_engine *e, const kva_copy_job *job)
{
	(void)ctx;
	(void)e;
	(void)job;
	handed++;
	return 0;
}

/* With importers the list is optional (cap 0: not listed) but never
 * partial: a job is listed whole or waits. */
static void importers_never_lose_a_listed_copy_job(void **st)
{
	(void)st;
	kva_config c;
	sc_config(&c);
	c.world_size = 2;
	c.importers[0] = (kva_importer_ref){count_import, NULL};
	c.importers[1] = (kva_importer_ref){count_import, NULL};
	struct sc *s = sc_new(&c);
	sc_dir_set(s, 8, sc_ckpt(32, 900, 0));
	handed = 0;
	s->plan.copies_cap = 3; /* room for one job of two ranks */
	sc_submit(s, 1, 8, 64);
	sc_submit(s, 2, 8, 64);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 2);
	assert_int_equal(handed, 2); /* the second job waits, listed next step */
	assert_false(s->plan.too_small);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 2);
	assert_int_equal(handed, 4);
	s->plan.copies_cap = 0; /* not listed at all: importers only */
	sc_submit(s, 3, 8, 64);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_copies, 0);
	assert_int_equal(handed, 6);
	assert_false(s->plan.too_small);
	sc_free(s);
}

static void head_without_memory_holds_the_line_visibly(void **st)
{
	(void)st;
#ifdef KVA_FAULT_INJECTION
	struct sc *s = sc_default();
	kva_handle h = sc_submit(s, 1, 0, 16);
	sc_step(s, 0);
	assert_int_equal(kva_finish(s->e, h), 0);
	sc_step(s, 0); /* the slot is retired; its grant stays with it */
	kva_handle big = sc_submit(s, 2, 0, 800); /* first chunk: needs a bigger page list */
	kva__fault_arm(1, 1);
	for (int i = 0; i < 2; i++) {
		sc_step(s, 0);
		assert_null(sc_admitted(s, big));
		assert_true(s->plan.head_blocked);
	}
	kva__fault_arm(0, 0);
	assert_true(sc_stats(s).alloc_failures >= 2);
	assert_int_equal(s->n_warn, 1);
	assert_int_equal(sc_step(s, 0), 1);
	sc_assert_conserved(s);
	sc_free(s);
#else
	skip();
#endif
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(min_sizes_follow_the_config),
		cmocka_unit_test(ready_restore_larger_than_the_plan_is_flagged_not_silent),
		cmocka_unit_test(first_chunk_larger_than_the_plan_is_flagged),
		cmocka_unit_test(admission_exactly_filling_the_plan_fits),
		cmocka_unit_test(copy_job_wider_than_the_plan_waits_and_is_flagged),
		cmocka_unit_test(importers_never_lose_a_listed_copy_job),
		cmocka_unit_test(head_without_memory_holds_the_line_visibly),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
