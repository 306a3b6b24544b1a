/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Threads cancel the same waiting requests at once. Each kva_cancel takes
 * its event from the engine's slab of cancel events before it claims the
 * request; a call that loses the claim gives its event back unused
 * (kva_slab_unalloc). Per round: exactly one call per request returns 0,
 * every other -EALREADY, and the next step ends each request once, as
 * cancelled. Once handled events have come back (a grace period), the slab
 * of cancel events must not grow from round to round (white-box: its slot
 * count). A lost claim needs two threads between the cancel_requested check
 * and the exchange at once, which is rare here, so this test would not see
 * a leak on that path; test_slab's test_unalloc_returns_the_slot_to_the_thread
 * pins kva_slab_unalloc itself.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "engine_state.h"
#include "kva_test.h"
#include "kvadmit/kvadmit.h"
#include <urcu/urcu-memb.h>

#define THREADS 3
#define K 512 /* requests per round */
#define ROUNDS_FULL 50ull
#define PHASE2_ROUNDS 100

struct shared {
	kva_handle h[K];
	pthread_barrier_t go, done;
	kva_engine *e;
	atomic_int stop;
	_Atomic uint32_t wins[K];
	atomic_int bad_rc;
};

struct canceller {
	struct shared *sh;
	pthread_t t;
};

static void *canceller_main(void *arg)
{
	struct canceller *c = arg;
	struct shared *sh = c->sh;
	for (;;) {
		pthread_barrier_wait(&sh->go);
		if (atomic_load(&sh->stop))
			return NULL;
		/* the same order in every thread, so they reach each request
		 * together and often all pass the cancel_requested check before
		 * one claims it: the losers then hold an event they give back */
		for (uint32_t j = 0; j < K; j++) {
			int rc = kva_cancel(sh->e, sh->h[j]);
			if (rc == 0)
				atomic_fetch_add(&sh->wins[j], 1);
			else if (rc != -EALREADY)
				atomic_store(&sh->bad_rc, rc);
		}
		pthread_barrier_wait(&sh->done);
	}
}

/* K new waiting requests, all cancelled by every thread at once. */
static void one_round(struct shared *sh, kva_plan *plan, uint64_t *id, uint64_t *now)
{
	for (uint32_t i = 0; i < K; i++) {
		kva_request q = {.id = (*id)++, .prompt_tokens = 16};
		assert_int_equal(kva_submit(sh->e, &q, &sh->h[i]), 0);
		atomic_store(&sh->wins[i], 0);
	}
	assert_int_equal(kva_step(sh->e, (*now)++, plan), 0); /* ingested, waiting */
	pthread_barrier_wait(&sh->go);
	pthread_barrier_wait(&sh->done);
	assert_int_equal(atomic_load(&sh->bad_rc), 0);
	for (uint32_t i = 0; i < K; i++)
		assert_int_equal(atomic_load(&sh->wins[i]), 1);
	assert_int_equal(kva_step(sh->e, (*now)++, plan), 0);
	assert_int_equal(plan->n_ended, K);
	for (uint32_t i = 0; i < K; i++)
		assert_int_equal(plan->ended[i].state, KVA_STATE_CANCELLED);
}

static void racing_cancels_end_each_request_once(void **state)
{
	(void)state;
	static struct shared sh;
	memset(&sh, 0, sizeof(sh));
	kva_config cfg;
	kva_config_default(&cfg);
	cfg.total_pages = 64;
	cfg.page_tokens = 16;
	int err = 0;
	sh.e = kva_engine_create(&cfg, &err);
	assert_non_null(sh.e);
	kva_admission adm[4];
	uint32_t pages[64];
	kva_ended ended[K];
	kva_plan plan = {.admitted = adm, .admitted_cap = 4, .pages = pages, .pages_cap = 64,
	                 .ended = ended, .ended_cap = K};
	/* a running request holds every page, so the waiting ones stay waiting */
	kva_request big = {.id = 1, .prompt_tokens = 64 * 16};
	kva_handle bh;
	assert_int_equal(kva_submit(sh.e, &big, &bh), 0);
	assert_int_equal(kva_step(sh.e, 1, &plan), 1);

	pthread_barrier_init(&sh.go, NULL, THREADS + 1);
	pthread_barrier_init(&sh.done, NULL, THREADS + 1);
	struct canceller c[THREADS];
	for (unsigned t = 0; t < THREADS; t++) {
		c[t] = (struct canceller){.sh = &sh};
		assert_int_equal(pthread_create(&c[t].t, NULL, canceller_main, &c[t]), 0);
	}
	uint64_t id = 2, now = 2;
	/* Phase 1: rounds back to back; handled events come back to the slab
	 * only after grace periods, so it grows to what is in flight. A
	 * barrier every 16 rounds bounds that: under CPU load grace periods
	 * lag, and the slab grew past the bound below without any leak. */
	uint64_t rounds = kva_test_scaled(ROUNDS_FULL);
	for (uint64_t round = 0; round < rounds; round++) {
		one_round(&sh, &plan, &id, &now);
		if (round % 16 == 15)
			urcu_memb_barrier();
	}
	urcu_memb_barrier(); /* every retired event back on the free stacks */
	uint32_t before = kva_slab_slots(&sh.e->cancels);
	/* Phase 2: every round's events come back before the next. The losers'
	 * (THREADS - 1) * K events a round, were they lost, would outgrow the
	 * slots phase 1 left within these rounds. */
	for (uint64_t round = 0; round < PHASE2_ROUNDS; round++) {
		one_round(&sh, &plan, &id, &now);
		urcu_memb_barrier();
	}
	uint32_t after = kva_slab_slots(&sh.e->cancels);
	print_message("cancel-event slots: %u after %llu rounds, %u after %d more\n", before,
	              (unsigned long long)rounds, after, PHASE2_ROUNDS);
	assert_true((uint64_t)before < (uint64_t)PHASE2_ROUNDS * (THREADS - 1) * K);
	assert_int_equal(after, before);

	atomic_store(&sh.stop, 1);
	pthread_barrier_wait(&sh.go);
	for (unsigned t = 0; t < THREADS; t++)
		pthread_join(c[t].t, NULL);
	pthread_barrier_destroy(&sh.go);
	pthread_barrier_destroy(&sh.done);
	kva_engine_destroy(sh.e);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(racing_cancels_end_each_request_once),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
