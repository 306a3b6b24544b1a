/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kva_stats.submitted counts every accepted kva_submit, however many threads
 * the process has had. Producer threads map onto KVA_FANIN_LANES counter
 * shards by their process-wide thread index, so once more threads than
 * lanes submit, two threads share a shard: its increment must be an atomic
 * add (a load and a store lost thousands of counts with 20 threads on two
 * cores). Each round starts more threads than twice the lanes at one
 * barrier, all submitting at once, and checks submitted == ingested == the
 * number of accepted calls. Ten rounds: with a load and a store, every one
 * of six runs on two cores lost counts.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdlib.h>

#include <kvadmit/lockfree/fanin.h>
#include "kva_test.h"
#include "kvadmit/kvadmit.h"

#define THREADS (2 * KVA_FANIN_LANES + 4)
#define PER_THREAD_FULL 20000ull
#define ROUNDS 10

struct round {
	kva_engine *e;
	pthread_barrier_t go;
	uint64_t per_thread;
};

struct submitter {
	struct round *r;
	uint64_t first_id, accepted;
	pthread_t t;
};

static void *submitter_main(void *arg)
{
	struct submitter *s = arg;
	pthread_barrier_wait(&s->r->go);
	for (uint64_t i = 0; i < s->r->per_thread; i++) {
		kva_request q = {.id = s->first_id + i, .prompt_tokens = 16};
		kva_handle h;
		if (kva_submit(s->r->e, &q, &h) == 0)
			s->accepted++;
	}
	return NULL;
}

static void test_submitted_counts_every_thread(void **state)
{
	(void)state;
	uint64_t per = kva_test_scaled(PER_THREAD_FULL);
	for (int round = 0; round < ROUNDS; round++) {
		kva_config c;
		kva_config_default(&c);
		c.total_pages = 1000;
		int err = 1;
		struct round r = {.e = kva_engine_create(&c, &err), .per_thread = per};
		assert_int_equal(err, 0);
		assert_int_equal(pthread_barrier_init(&r.go, NULL, THREADS), 0);
		struct submitter *s = calloc(THREADS, sizeof(*s));
		assert_non_null(s);
		uint64_t accepted = 0;
		/* new threads every round: their thread indices keep climbing, so
		 * every lane is shared by two or three of them */
		for (int i = 0; i < THREADS; i++) {
			s[i] = (struct submitter){.r = &r, .first_id = 1 + (uint64_t)i * per};
			assert_int_equal(pthread_create(&s[i].t, NULL, submitter_main, &s[i]), 0);
		}
		for (int i = 0; i < THREADS; i++) {
			assert_int_equal(pthread_join(s[i].t, NULL), 0);
			accepted += s[i].accepted;
		}
		assert_int_equal(accepted, (uint64_t)THREADS * per);

		kva_plan p = {.hold_admissions = true}; /* ingest only */
		assert_int_equal(kva_step(r.e, 1, &p), 0);
		kva_stats st;
		kva_stats_get(r.e, &st);
		assert_int_equal(st.ingested, accepted);
		assert_int_equal(st.submitted, accepted);
		assert_int_equal(st.waiting, accepted);
		free(s);
		pthread_barrier_destroy(&r.go);
		kva_engine_destroy(r.e);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_submitted_counts_every_thread),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
