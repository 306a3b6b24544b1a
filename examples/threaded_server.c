/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A threaded server shaped like a serving engine's, end to end:
 *   - frontend threads submit requests (some share a prefix that a checkpoint
 *     store holds) and cancel a few of them, as clients disconnect;
 *   - a directory thread answers lookups asynchronously: the engine's lookup
 *     callback only queues the token (it must not block);
 *   - the CPU importer copies checkpoint bytes into the host's page pool on
 *     its own worker threads and reports each job;
 *   - the scheduler thread steps, "runs" each admitted request for a moment
 *     and finishes it, and sleeps on the wake callback when there is nothing
 *     to do.
 * At the end every request has ended exactly once and every page is back.
 * Prints one summary line; exits non-zero on any inconsistency.
 *
 * Build (installed package):
 *   cc threaded_server.c $(pkg-config --cflags --libs kvadmit) -lpthread
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <kvadmit/importer.h>
#include <kvadmit/kvadmit.h>

#define FRONTENDS 3
#define PER_FRONTEND 400
#define TOTAL (FRONTENDS * PER_FRONTEND)
#define PAGES 2048
#define PAGE_TOKENS 16
#define PAGE_BYTES 256
#define SHARED_KEY 42       /* the prefix every third request shares */
#define CKPT_TOKENS 512     /* the store's checkpoint of that prefix */

static kva_engine *engine;

/* ---- the scheduler's sleep: wake callback + condition variable ------------- */

static pthread_mutex_t wake_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake_cv = PTHREAD_COND_INITIALIZER;
static int woken;

static void on_wake(void *ctx) /* producer threads: cheap, no kvadmit calls */
{
	(void)ctx;
	pthread_mutex_lock(&wake_mu);
	woken = 1;
	pthread_cond_signal(&wake_cv);
	pthread_mutex_unlock(&wake_mu);
}

static void sleep_until_woken(int ms)
{
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_nsec += (long)ms * 1000000L;
	until.tv_sec += until.tv_nsec / 1000000000L;
	until.tv_nsec %= 1000000000L;
	pthread_mutex_lock(&wake_mu);
	while (!woken && pthread_cond_timedwait(&wake_cv, &wake_mu, &until) == 0)
		;
	woken = 0;
	pthread_mutex_unlock(&wake_mu);
}

/* ---- the directory: lookups queued by the callback, answered on its thread -- */

struct lookup {
	uint64_t key;
	kva_lookup_token token;
};
static struct lookup lq[TOTAL * 2];
static unsigned lq_head, lq_tail;
static pthread_mutex_t lq_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t lq_cv = PTHREAD_COND_INITIALIZER;
static int directory_stop;

/* Scheduler thread, inside kva_step: queue and return at once. */
static void on_lookup(void *ctx, uint64_t key, uint32_t prompt, kva_lookup_token t)
{
	(void)ctx;
	(void)prompt;
	pthread_mutex_lock(&lq_mu);
	if (lq_tail - lq_head < sizeof(lq) / sizeof(lq[0]))
		lq[lq_tail++ % (sizeof(lq) / sizeof(lq[0]))] = (struct lookup){key, t};
	/* a full queue drops the lookup: its deadline makes it recompute */
	pthread_cond_signal(&lq_cv);
	pthread_mutex_unlock(&lq_mu);
}

static void *directory(void *arg)
{
	(void)arg;
	for (;;) {
		pthread_mutex_lock(&lq_mu);
		while (lq_head == lq_tail && !directory_stop)
			pthread_cond_wait(&lq_cv, &lq_mu);
		if (lq_head == lq_tail) {
			pthread_mutex_unlock(&lq_mu);
			return NULL;
		}
		struct lookup l = lq[lq_head++ % (sizeof(lq) / sizeof(lq[0]))];
		pthread_mutex_unlock(&lq_mu);
		kva_manifest m = {0};
		if (l.key == SHARED_KEY)
			m = (kva_manifest){1, {{.position = CKPT_TOKENS, .location = KVA_LOC_EXTERNAL,
			                          .compatible = 1, .id = 7, .epoch = 1}}};
		int rc = kva_lookup_answer(engine, l.token, &m);
		if (rc != 0 && rc != -ESTALE && rc != -ENOENT) /* late or cancelled: fine */
			fprintf(stderr, "lookup_answer: %s\n", kva_strerror(rc));
	}
}

/* ---- the checkpoint store the importer reads from ------------------------------ */

static unsigned char store[(CKPT_TOKENS / PAGE_TOKENS) * PAGE_BYTES];

static int resolve(void *ctx, uint64_t id, uint64_t epoch, uint32_t rank, const void **src,
                   size_t *bytes)
{
	(void)ctx;
	(void)epoch;
	(void)rank;
	if (id != 7)
		return -ENOENT;
	*src = store;
	*bytes = sizeof(store);
	return 0;
}

/* ---- frontends ------------------------------------------------------------------- */

static kva_handle handles[TOTAL];
static atomic_int frontend_failed; /* its remaining requests never come: stop waiting for them */

static void *frontend(void *arg)
{
	uintptr_t f = (uintptr_t)arg;
	for (unsigned i = 0; i < PER_FRONTEND; i++) {
		unsigned k = (unsigned)f * PER_FRONTEND + i;
		kva_request r = {.id = k + 1,
		                 .prefix_key = k % 3 == 0 ? SHARED_KEY : 1000 + k,
		                 .prompt_tokens = 600 + 16 * (k % 8),
		                 .user = &handles[k]};
		int rc = kva_submit(engine, &r, &handles[k]);
		if (rc != 0) {
			fprintf(stderr, "threaded_server: kva_submit: %s\n", kva_strerror(rc));
			atomic_store(&frontend_failed, 1);
			return (void *)1;
		}
		if (k % 17 == 5) /* a client goes away */
			kva_cancel(engine, handles[k]);
		if (i % 50 == 49) {
			struct timespec gap = {0, 1000000};
			nanosleep(&gap, NULL);
		}
	}
	return NULL;
}

/* ---- the scheduler ------------------------------------------------------------------ */

static uint64_t mono_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

int main(void)
{
	for (size_t i = 0; i < sizeof(store); i++)
		store[i] = (unsigned char)(i * 31 + 7);
	static unsigned char pool[(size_t)PAGES * PAGE_BYTES];
	kva_cpu_importer_config icfg;
	kva_cpu_importer_config_default(&icfg);
	icfg.threads = 2;
	icfg.page_bytes = PAGE_BYTES;
	icfg.dest_base = pool;
	icfg.dest_pages = PAGES;
	icfg.resolve = resolve;
	int err;
	kva_cpu_importer *imp = kva_cpu_importer_create(&icfg, &err);
	if (!imp) {
		fprintf(stderr, "importer: %s\n", kva_strerror(err));
		return 1;
	}

	kva_config cfg;
	kva_config_default(&cfg);
	cfg.total_pages = PAGES;
	cfg.page_tokens = PAGE_TOKENS;
	cfg.prefill_chunk_tokens = 256;
	cfg.max_running = 64;
	cfg.lookup = on_lookup;
	cfg.importers[0] = kva_cpu_importer_ref(imp);
	cfg.wake = on_wake;
	cfg.start_ns = mono_ns();
	engine = kva_engine_create(&cfg, &err);
	if (!engine) {
		fprintf(stderr, "engine: %s\n", kva_strerror(err));
		return 1;
	}
	kva_plan_sizes z;
	kva_plan_min_sizes(&cfg, &z);
	static kva_admission adm[256];
	static uint32_t pages[PAGES];
	static kva_ended ended[256];
	kva_plan plan = {.admitted = adm, .admitted_cap = 256, .pages = pages, .pages_cap = PAGES,
	                 .ended = ended, .ended_cap = 256};
	if (plan.pages_cap < z.pages)
		return 1;

	pthread_t dir, fe[FRONTENDS];
	pthread_create(&dir, NULL, directory, NULL);
	for (uintptr_t i = 0; i < FRONTENDS; i++)
		pthread_create(&fe[i], NULL, frontend, (void *)i);

	/* running requests "decode" for a few steps, then finish */
	static kva_handle running[256];
	static int ttl[256];
	unsigned n_running = 0, ended_n = 0, restored = 0, bad_bytes = 0;
	unsigned char *ended_seen = calloc(TOTAL, 1);
	uint64_t deadline = mono_ns() + 60ull * 1000000000ull;
	int failed = 0;
	while (ended_n < TOTAL && mono_ns() < deadline && !atomic_load(&frontend_failed)) {
		int n = kva_step(engine, mono_ns(), &plan);
		if (n < 0) {
			fprintf(stderr, "threaded_server: kva_step: %s\n", kva_strerror(n));
			failed = 1;
			break;
		}
		for (uint32_t i = 0; i < plan.n_admitted; i++) {
			const kva_admission *a = &adm[i];
			if (a->how == KVA_ADMIT_RESTORE) {
				restored++;
				/* the imported pages hold the checkpoint's bytes */
				for (uint32_t p = 0; p < CKPT_TOKENS / PAGE_TOKENS; p++)
					if (memcmp(pool + (size_t)pages[a->pages_off + p] * PAGE_BYTES,
					           store + (size_t)p * PAGE_BYTES, PAGE_BYTES) != 0)
						bad_bytes++;
			}
			running[n_running] = a->handle;
			ttl[n_running++] = 3;
		}
		for (unsigned i = 0; i < n_running;) {
			if (--ttl[i] > 0) {
				i++;
				continue;
			}
			kva_finish(engine, running[i]); /* -ENOENT if a cancel won: fine */
			running[i] = running[--n_running];
			ttl[i] = ttl[n_running];
		}
		for (uint32_t i = 0; i < plan.n_ended; i++) {
			kva_handle *h = ended[i].user;
			unsigned k = (unsigned)(h - handles);
			if (ended_seen[k]++)
				bad_bytes++; /* reported twice */
			ended_n++;
		}
		if (!n && !plan.n_ended && !plan.backlog && !n_running)
			sleep_until_woken(5);
	}
	if (ended_n < TOTAL && !failed && !atomic_load(&frontend_failed))
		fprintf(stderr, "threaded_server: %u of %u requests ended in 60 s\n", ended_n, TOTAL);
	for (int i = 0; i < FRONTENDS; i++) {
		void *rc;
		pthread_join(fe[i], &rc);
		failed |= rc != NULL;
	}
	pthread_mutex_lock(&lq_mu);
	directory_stop = 1;
	pthread_cond_signal(&lq_cv);
	pthread_mutex_unlock(&lq_mu);
	pthread_join(dir, NULL);

	kva_stats st;
	kva_stats_get(engine, &st);
	/* shutdown order (importer.h): no more steps, directory stopped, then the
	 * importer, whose destroy reports every job it accepted to the engine (a
	 * cancelled import's copy may still be draining), then the engine */
	kva_cpu_importer_destroy(imp);
	kva_engine_destroy(engine);
	free(ended_seen);
	printf("threaded_server: %u requests ended (%llu finished, %llu cancelled), %u restored, "
	       "%llu steps, pages free %llu/%llu\n",
	       ended_n, (unsigned long long)st.finished, (unsigned long long)st.cancelled, restored,
	       (unsigned long long)st.steps, (unsigned long long)st.free_pages,
	       (unsigned long long)st.total_pages);
	return !failed && ended_n == TOTAL && !bad_bytes && restored > 0 && st.free_pages == st.total_pages &&
	               st.finished + st.cancelled == TOTAL
	           ? 0
	           : 1;
}
