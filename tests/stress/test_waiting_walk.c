/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kva_waiting_foreach against a live scheduler. The main thread is the
 * scheduler: it submits, cancels, admits (as running requests finish) and,
 * in the second phase, preempts running requests back to the front, while
 * reader threads walk the waiting queue without any lock.
 *
 * Every request carries its id in `user`, so a reader can tell a record it
 * reached from a torn or reused one: every listed request must have an odd
 * generation and user == id. While no preemption can happen (phase 0, read
 * before and after the walk), ids only ever join at the back, so a walk must
 * list strictly increasing ids: nothing twice, nothing out of order. Walks
 * must terminate (a cycle would hang the test). Readers count; the main
 * thread asserts.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "kva_test.h"
#include "kvadmit/kvadmit.h"

#define READERS 2
#define STEPS_FULL 20000ull
#define MAX_LIVE 4096

struct shared {
	kva_engine *e;
	atomic_int stop;
	atomic_int phase; /* 0: no preemption; 1: preemption */
};

struct reader {
	struct shared *sh;
	pthread_t t;
	uint64_t walks, listed, ordered_walks;
	uint64_t torn, out_of_order, bad_rc;
	uint64_t last_id; /* within the current walk */
	int check_order;
};

static int visit(void *ctx, const kva_waiting_info *w)
{
	struct reader *r = ctx;
	r->listed++;
	if (!(w->handle.gen & 1) || (uintptr_t)w->user != w->handle.id)
		r->torn++;
	if (r->check_order && w->handle.id <= r->last_id)
		r->out_of_order++;
	r->last_id = w->handle.id;
	return 0;
}

static void *reader_main(void *arg)
{
	struct reader *r = arg;
	while (!atomic_load(&r->sh->stop)) {
		int p0 = atomic_load(&r->sh->phase);
		r->check_order = p0 == 0;
		r->last_id = 0;
		uint64_t out0 = r->out_of_order;
		int n = kva_waiting_foreach(r->sh->e, visit, r, 0);
		if (n < 0)
			r->bad_rc++;
		r->walks++;
		if (atomic_load(&r->sh->phase) != p0)
			r->out_of_order = out0; /* a preemption may have overlapped */
		else if (p0 == 0)
			r->ordered_walks++;
	}
	return NULL;
}

static void waiting_walk_sees_only_live_requests_in_order(void **unused)
{
	(void)unused;
	kva_config c;
	kva_config_default(&c);
	c.total_pages = 256;
	c.page_tokens = 16;
	c.prefill_chunk_tokens = 64; /* 4 pages per admission */
	c.max_running = 64;
	struct shared sh = {0};
	int err;
	sh.e = kva_engine_create(&c, &err);
	assert_non_null(sh.e);
	static kva_admission adm[256];
	static uint32_t pages[4096];
	static kva_ended ended[1024];
	kva_plan plan = {.admitted = adm, .admitted_cap = 256, .pages = pages, .pages_cap = 4096,
			 .ended = ended, .ended_cap = 1024};
	struct reader rd[READERS];
	memset(rd, 0, sizeof(rd));
	for (int i = 0; i < READERS; i++) {
		rd[i].sh = &sh;
		assert_int_equal(pthread_create(&rd[i].t, NULL, reader_main, &rd[i]), 0);
	}
	static kva_handle waiting[MAX_LIVE], running[MAX_LIVE];
	uint32_t nw = 0, nr = 0;
	uint64_t rng = 0x5eed, next_id = 1, now = 0, steps = kva_test_scaled(STEPS_FULL);
	uint64_t submitted = 0, reported = 0;
	for (uint64_t s = 0; s < steps; s++) {
		if (s == steps / 2)
			atomic_store(&sh.phase, 1);
		uint64_t x = kva_test_rand(&rng);
		kva_request q = {.id = next_id, .prompt_tokens = 32 + (uint32_t)(x >> 40) % 96,
				 .user = (void *)(uintptr_t)next_id};
		next_id++;
		/* the last MAX_LIVE submissions are the cancel candidates */
		assert_int_equal(kva_submit(sh.e, &q, &waiting[nw++ % MAX_LIVE]), 0);
		submitted++;
		if (x % 3 == 0) { /* cancel one anywhere in the queue (or already gone) */
			uint32_t i = (uint32_t)(x >> 8) % (nw < MAX_LIVE ? nw : MAX_LIVE);
			int rc = kva_cancel(sh.e, waiting[i]);
			assert_true(rc == 0 || rc == -ENOENT || rc == -EALREADY);
		}
		if (nr && x % 2 == 0) { /* a running request ends or is preempted */
			uint32_t i = (uint32_t)(x >> 16) % nr;
			int rc = atomic_load(&sh.phase) && x % 8 == 0 ? kva_preempt(sh.e, running[i])
								     : kva_finish(sh.e, running[i]);
			assert_true(rc == 0 || rc == -ENOENT); /* or a cancel got it first */
			running[i] = running[--nr];
		}
		now += 1000000;
		assert_true(kva_step(sh.e, now, &plan) >= 0);
		for (uint32_t i = 0; i < plan.n_admitted && nr < MAX_LIVE; i++)
			running[nr++] = adm[i].handle;
		reported += plan.n_ended;
	}
	atomic_store(&sh.stop, 1);
	uint64_t walks = 0, ordered = 0, listed = 0;
	for (int i = 0; i < READERS; i++) {
		pthread_join(rd[i].t, NULL);
		walks += rd[i].walks;
		ordered += rd[i].ordered_walks;
		listed += rd[i].listed;
		assert_int_equal(rd[i].torn, 0);
		assert_int_equal(rd[i].out_of_order, 0);
		assert_int_equal(rd[i].bad_rc, 0);
	}
	print_message("waiting walk: %llu steps, %llu submitted, %llu ended; %llu walks (%llu "
		      "order-checked) listing %llu requests\n",
		      (unsigned long long)steps, (unsigned long long)submitted,
		      (unsigned long long)reported, (unsigned long long)walks,
		      (unsigned long long)ordered, (unsigned long long)listed);
	assert_true(walks > 0 && listed > 0);
	kva_engine_destroy(sh.e);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(waiting_walk_sees_only_live_requests_in_order),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
