/* SPDX-License-Identifier: Apache-2.0 */
/*
 * An idle scheduler that sleeps instead of polling: kvadmit calls the
 * config's `wake` callback on the producer's thread when the engine's inbox
 * goes from empty to non-empty; the scheduler thread waits on a condition
 * variable until then, steps, and sleeps again when a step found nothing to
 * do. Producers here submit requests; the scheduler runs each admitted one
 * for a moment and finishes it. Prints how many steps the work took.
 *
 * Build (installed package): cc wake_scheduler.c $(pkg-config --cflags --libs kvadmit) -lpthread
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>
#include <kvadmit/kvadmit.h>

#define PRODUCERS 2
#define PER_PRODUCER 20000 /* in bursts of 1000 */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int pending; /* wakeups not yet consumed by the scheduler */
static atomic_int gave_up; /* a producer stopped early: the scheduler must not wait for its work */

/* Producer's thread: must be cheap and must not call into kvadmit. */
static void wake(void *ctx)
{
	(void)ctx;
	pthread_mutex_lock(&mu);
	pending = 1;
	pthread_cond_signal(&cv);
	pthread_mutex_unlock(&mu);
}

static kva_engine *engine;

static void *producer(void *arg)
{
	uint64_t base = (uint64_t)(uintptr_t)arg * PER_PRODUCER;
	for (uint64_t i = 0; i < PER_PRODUCER; i++) {
		kva_request r = {.id = base + i + 1, .prompt_tokens = 64};
		kva_handle h;
		int rc = kva_submit(engine, &r, &h);
		if (rc != 0) {
			fprintf(stderr, "wake_scheduler: kva_submit: %s\n", kva_strerror(rc));
			atomic_store(&gave_up, 1);
			wake(NULL); /* the scheduler may be asleep waiting for this work */
			return (void *)1;
		}
		if (i % 1000 == 999) { /* bursts with quiet gaps: the scheduler sleeps */
			struct timespec gap = {0, 2000000};
			nanosleep(&gap, NULL);
		}
	}
	return NULL;
}

int main(void)
{
	kva_config cfg;
	kva_config_default(&cfg);
	cfg.total_pages = 4096;
	cfg.page_tokens = 16;
	cfg.max_running = 1024;
	cfg.wake = wake;
	int err;
	engine = kva_engine_create(&cfg, &err);
	if (!engine) {
		fprintf(stderr, "kvadmit: %s\n", kva_strerror(err));
		return 1;
	}
	static kva_admission adm[1024];
	static uint32_t pages[1 << 16];
	static kva_ended ended[4096];
	kva_plan plan = {.admitted = adm, .admitted_cap = 1024, .pages = pages,
	                 .pages_cap = 1 << 16, .ended = ended, .ended_cap = 4096};
	pthread_t t[PRODUCERS];
	for (int i = 0; i < PRODUCERS; i++)
		pthread_create(&t[i], NULL, producer, (void *)(uintptr_t)i);

	uint64_t now = 0, done = 0, steps = 0, sleeps = 0;
	int bad = 0;
	while (done < (uint64_t)PRODUCERS * PER_PRODUCER && !atomic_load(&gave_up)) {
		int n = kva_step(engine, now += 1000000, &plan);
		if (n < 0) {
			fprintf(stderr, "wake_scheduler: kva_step: %s\n", kva_strerror(n));
			bad = 1;
			break;
		}
		steps++;
		for (uint32_t i = 0; i < plan.n_admitted; i++)
			kva_finish(engine, adm[i].handle); /* "ran" */
		done += plan.n_ended;
		if (n == 0 && plan.events == 0 && plan.n_ended == 0 && !plan.backlog) {
			/* Nothing happened and nothing is left over: sleep until a
			 * producer wakes us. A wakeup that raced this check is kept in
			 * `pending`. (plan.backlog: events that arrive without a
			 * wakeup, e.g. one whose producer was still linking it.) */
			pthread_mutex_lock(&mu);
			while (!pending && !atomic_load(&gave_up))
				pthread_cond_wait(&cv, &mu);
			pending = 0;
			pthread_mutex_unlock(&mu);
			sleeps++;
		}
	}
	for (int i = 0; i < PRODUCERS; i++) {
		void *rc;
		pthread_join(t[i], &rc);
		bad |= rc != NULL;
	}
	kva_stats st;
	kva_stats_get(engine, &st);
	printf("wake_scheduler: %llu requests finished in %llu steps, slept %llu times\n",
	       (unsigned long long)st.finished, (unsigned long long)steps,
	       (unsigned long long)sleeps);
	kva_engine_destroy(engine);
	return bad || st.finished != (uint64_t)PRODUCERS * PER_PRODUCER;
}
