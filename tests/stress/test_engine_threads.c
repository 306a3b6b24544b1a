/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Threaded stress of the whole engine. Four host threads submit, cancel,
 * answer directory lookups, report copy ranks, grow / finish / preempt
 * running requests, evict checkpoints, reset the prefix cache and read
 * stats and queries, while the main thread is the scheduler and steps on the
 * real clock. The directory callback and both importers (world_size 2) run
 * on the scheduler thread and hand their work to the host threads through
 * small mutex queues; a copy's two ranks always go to two different threads.
 *
 * Each submission is stamped with a number dense from 1 (worker-major),
 * carried in its `user` pointer, so the main thread can prove from
 * plan.ended that every request reached exactly one terminal outcome, under
 * its own id. (Generations are per engine slot since ABI 0.2, so they no
 * longer number submissions.) At
 * quiescence every credit, copy slot and run slot is back; the sanitizer
 * builds add use-after-free, leak and race checking. Workers only count and
 * describe surprises; every assertion runs on the main thread.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvadmit/kvadmit.h"
#include "kva_test.h"

#define WORKERS 4
#define FULL_REQUESTS 1000000ull
#define MAX_INFLIGHT 3000 /* submitted but not yet reported ended */
#define RECENT 64	  /* a worker's recent handles, targets of cancels */
#define LOCAL_IDS 512	  /* local checkpoint ids, so evictions hit someone */
#define PAGES 4096
#define DEADLINE_S 240 /* fail rather than hang */

enum work_kind { W_LOOKUP = 1, W_COPY, W_RUN };

struct work {
	uint8_t kind;
	uint8_t rank;
	uint32_t prompt;
	union {
		kva_lookup_token lt;
		kva_copy_token ct;
		kva_handle h;
	} u;
};

/* Scheduler -> worker handoff; the worker swaps the whole array out. */
struct workq {
	pthread_mutex_t mu;
	struct work *v;
	size_t n, cap;
	atomic_uint_fast64_t oom;
};

struct worker {
	struct st *st;
	int idx;
	pthread_t tid;
	struct workq q;
	uint64_t rng;
	/* private to the worker */
	kva_handle recent[RECENT]; /* targets of cancels, queries, id reuse */
	size_t nrecent;
	uint64_t seq;
	kva_handle *run; /* running requests it owns (grow / finish / preempt) */
	size_t nrun, runcap;
	/* results, read by main after join */
	uint64_t submitted, cancels_ok, answers, answers_stale, copies, copy_failed, grows,
	    finishes, preempts, evictions, resets, queries, bad;
	char first_bad[200];
};

struct st {
	kva_engine *e;
	uint64_t quota;	     /* submissions per worker */
	uint64_t gens;	     /* WORKERS * quota */
	uint64_t *id_by_gen; /* written by the submitting worker */
	atomic_uint_fast64_t inflight;
	atomic_uint_fast64_t epoch; /* local checkpoint epochs */
	atomic_int stop;
	atomic_int submitting; /* workers still below their quota */
	struct worker w[WORKERS];
	/* scheduler-thread only */
	uint64_t logs, refused_imports, imports;
};

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Idle threads nap instead of spinning on sched_yield: on two cores the
 * spinning scheduler and workers would mostly steal time from each other. */
static void nap(void)
{
	struct timespec ts = {0, 20000};
	nanosleep(&ts, NULL);
}

static void workq_push(struct workq *q, struct work w)
{
	pthread_mutex_lock(&q->mu);
	if (q->n == q->cap) {
		size_t cap = q->cap ? q->cap * 2 : 256;
		struct work *v = realloc(q->v, cap * sizeof(*v));
		if (!v) {
			pthread_mutex_unlock(&q->mu);
			atomic_fetch_add(&q->oom, 1);
			return;
		}
		q->v = v;
		q->cap = cap;
	}
	q->v[q->n++] = w;
	pthread_mutex_unlock(&q->mu);
}

/* Swaps the queue's array with *buf; returns how many items it holds. */
static size_t workq_take(struct workq *q, struct work **buf, size_t *bufcap)
{
	pthread_mutex_lock(&q->mu);
	size_t n = q->n;
	struct work *v = q->v;
	size_t cap = q->cap;
	q->v = *buf;
	q->cap = *bufcap;
	q->n = 0;
	pthread_mutex_unlock(&q->mu);
	*buf = v;
	*bufcap = cap;
	return n;
}

/* ---- scheduler-thread callbacks ------------------------------------------ */

static void dir_lookup(void *ctx, uint64_t key, uint32_t prompt, kva_lookup_token t)
{
	struct st *st = ctx;
	(void)key;
	struct work w = {.kind = W_LOOKUP, .prompt = prompt, .u.lt = t};
	workq_push(&st->w[(t.gen + t.seq) % WORKERS].q, w);
}

struct rank_ctx {
	struct st *st;
	uint32_t rank;
	uint64_t rng;
};
static struct rank_ctx rank_ctx[2];

static int import_rank(void *ctx, kva_engine *e, const kva_copy_job *job)
{
	struct rank_ctx *rc = ctx;
	(void)e;
	rc->st->imports++;
	if (kva_test_rand(&rc->rng) % 200 == 0) {
		rc->st->refused_imports++;
		return -EIO; /* the engine fails this rank itself */
	}
	struct work w = {.kind = W_COPY, .rank = (uint8_t)job->rank, .u.ct = job->token};
	/* consecutive workers: the two ranks of a job are reported by two threads */
	workq_push(&rc->st->w[(job->token.gen + job->rank) % WORKERS].q, w);
	return 0;
}

static void count_log(void *ctx, int level, const char *msg)
{
	(void)level;
	(void)msg;
	((struct st *)ctx)->logs++;
}

/* ---- host threads ---------------------------------------------------------- */

static void bad(struct worker *w, const char *call, int rc)
{
	if (!w->bad++)
		snprintf(w->first_bad, sizeof(w->first_bad), "worker %d: %s returned %d (%s)",
			 w->idx, call, rc, kva_strerror(rc));
}

static uint32_t pick_prompt(uint64_t *rng)
{
	uint64_t x = kva_test_rand(rng);
	unsigned p = (unsigned)(x % 1000);
	x >>= 10;
	if (p < 700)
		return 16 + (uint32_t)(x % 256);
	if (p < 950)
		return 256 + (uint32_t)(x % 1792);
	if (p < 995)
		return 2048 + (uint32_t)(x % 6144);
	return 70000; /* more than the usable pool: TOO_LARGE as a restore */
}

static kva_checkpoint ckpt(uint32_t pos, uint8_t loc, uint8_t compatible, uint64_t id,
			   uint64_t epoch)
{
	return (kva_checkpoint){
	    .position = pos, .location = loc, .compatible = compatible, .id = id, .epoch = epoch};
}

static void answer_lookup(struct worker *w, const struct work *it)
{
	struct st *st = w->st;
	uint64_t x = kva_test_rand(&w->rng);
	unsigned p = (unsigned)(x % 100);
	uint32_t pos = it->prompt / 2 / 16 * 16;
	if (pos == 0)
		pos = it->prompt;
	kva_manifest m;
	memset(&m, 0, sizeof(m));
	uint64_t epoch = atomic_load_explicit(&st->epoch, memory_order_relaxed);
	uint64_t ext_id = (uint64_t)it->u.lt.id << 8 | (it->u.lt.seq & 0xff);
	if (p < 4) {
		return; /* never answered: the lookup times out */
	} else if (p < 35) {
		m.count = 1;
		m.entries[0] = ckpt(pos, KVA_LOC_EXTERNAL, 1, ext_id, epoch);
	} else if (p < 50) {
		m.count = 1;
		m.entries[0] = ckpt(pos, KVA_LOC_LOCAL, 1, 1 + (x >> 8) % LOCAL_IDS, epoch);
	} else if (p < 65) {
		m.count = 0; /* miss */
	} else if (p < 75) {
		m.count = 1;
		m.entries[0] = ckpt(pos, KVA_LOC_EXTERNAL, 0, ext_id, epoch);
	} else {
		/* two external checkpoints: a shorter one to fall back to */
		m.count = 2;
		m.entries[0] =
		    ckpt(pos > 16 ? pos / 2 : pos, KVA_LOC_EXTERNAL, 1, ext_id ^ 1, epoch);
		m.entries[1] = ckpt(pos > 16 ? pos : pos + 16, KVA_LOC_EXTERNAL, 1, ext_id, epoch);
	}
	int rc = kva_lookup_answer(st->e, it->u.lt, &m);
	if (rc == 0)
		w->answers++;
	else if (rc == -ESTALE || rc == -ENOENT)
		w->answers_stale++;
	else
		bad(w, "kva_lookup_answer", rc);
	if (p >= 95) { /* a duplicate answer is late or superseded, never harmful */
		rc = kva_lookup_answer(st->e, it->u.lt, &m);
		if (rc != 0 && rc != -ESTALE && rc != -ENOENT)
			bad(w, "kva_lookup_answer (again)", rc);
	}
}

static void report_copy(struct worker *w, const struct work *it)
{
	int status = kva_test_rand(&w->rng) % 100 < 6 ? -EIO : 0;
	/* every handed-out rank is current until it reports: nothing else is ok */
	int rc = kva_copy_done(w->st->e, it->u.ct, it->rank, status);
	if (rc)
		bad(w, "kva_copy_done", rc);
	w->copies++;
	w->copy_failed += status != 0;
}

/* One visit to a running request the worker owns; false when it let go. */
static bool visit_running(struct worker *w, kva_handle h)
{
	kva_engine *e = w->st->e;
	uint64_t x = kva_test_rand(&w->rng);
	unsigned p = (unsigned)(x % 100);
	int rc;
	if (p < 35) {
		uint32_t ids[8];
		rc = kva_grow(e, h, 1 + (uint32_t)((x >> 8) % 8), ids);
		if (rc == 0)
			w->grows++;
		else if (rc == -ENOENT || rc == -EBUSY)
			return false; /* cancelled under us (-EBUSY: the step is at it now) */
		else if (rc != -ENOSPC)
			bad(w, "kva_grow", rc);
		return true;
	}
	if (p < 60)
		return true;
	if (p < 63) {
		rc = kva_preempt(e, h);
		if (rc == 0)
			w->preempts++;
		else if (rc != -ENOENT && rc != -EBUSY) /* -EBUSY: being cancelled */
			bad(w, "kva_preempt", rc);
		return false;
	}
	if (p < 66) {
		/* cancel our own running request, then race it with a finish:
		 * the cancel acts at the next step, so either may win */
		rc = kva_cancel(e, h);
		if (rc != 0 && rc != -ENOENT && rc != -EALREADY)
			bad(w, "kva_cancel (own)", rc);
	}
	rc = kva_finish(e, h);
	if (rc == 0)
		w->finishes++;
	else if (rc != -ENOENT && rc != -EBUSY) /* cancelled, or the step is cancelling it */
		bad(w, "kva_finish", rc);
	return false;
}

/* A random one of the worker's recent handles (there is at least one). */
static kva_handle recent_pick(const struct worker *w, uint64_t x)
{
	return w->recent[x % (w->nrecent < RECENT ? w->nrecent : RECENT)];
}

/* Reads and rare global events that ride along with submissions. */
static void side_calls(struct worker *w, uint64_t x)
{
	kva_engine *e = w->st->e;
	int rc;
	/* cancels of recent handles race everything the others do */
	if (x % 100 >= 94) {
		rc = kva_cancel(e, recent_pick(w, x >> 24));
		if (rc == 0)
			w->cancels_ok++;
		else if (rc != -ENOENT && rc != -EALREADY)
			bad(w, "kva_cancel", rc);
	}
	if (x % 4096 == 7) {
		kva_handle q = recent_pick(w, x >> 20);
		kva_request_info info;
		rc = kva_query(e, q, &info);
		w->queries++;
		if (rc == 0 && (info.state < KVA_STATE_WAITING || info.state > KVA_STATE_REJECTED ||
				info.handle.gen != q.gen))
			bad(w, "kva_query state", info.state);
		else if (rc != 0 && rc != -ENOENT)
			bad(w, "kva_query", rc);
		kva_stats s;
		kva_stats_get(e, &s);
		if (s.total_pages != PAGES)
			bad(w, "kva_stats_get total", (int)s.total_pages);
	}
	if (x % 1000 == 11) {
		uint64_t ep = atomic_fetch_add(&w->st->epoch, 1) + 1;
		rc = kva_checkpoint_evicted(e, 1 + (x >> 12) % LOCAL_IDS, ep);
		w->evictions++;
		if (rc)
			bad(w, "kva_checkpoint_evicted", rc);
	}
	if (x % 40000 == 13) {
		rc = kva_reset_prefix_cache(e);
		w->resets++;
		if (rc)
			bad(w, "kva_reset_prefix_cache", rc);
	}
}

/* One submission, stamped in `user`; false when over the bound. */
static bool submit_one(struct worker *w)
{
	struct st *st = w->st;
	if (atomic_load_explicit(&st->inflight, memory_order_relaxed) >= MAX_INFLIGHT)
		return false;
	uint64_t x = kva_test_rand(&w->rng);
	kva_request r = {.id = (uint64_t)(w->idx + 1) << 48 | ++w->seq,
			 .prefix_key = x % 20 ? 1 + (x >> 32) : 0,
			 .prompt_tokens = pick_prompt(&w->rng)};
	uint64_t stamp = (uint64_t)w->idx * st->quota + w->submitted + 1;
	r.user = (void *)(uintptr_t)stamp;
	/* some ids again: live (rejected at ingest) or ended (reused) */
	if (x % 100 < 2 && w->nrecent)
		r.id = recent_pick(w, x >> 16).id;
	atomic_fetch_add_explicit(&st->inflight, 1, memory_order_relaxed);
	kva_handle h;
	int rc = kva_submit(st->e, &r, &h);
	if (rc) {
		atomic_fetch_sub_explicit(&st->inflight, 1, memory_order_relaxed);
		bad(w, "kva_submit", rc);
		return true;
	}
	w->submitted++;
	if (!(h.gen & 1) || h.id != r.id || stamp > st->gens)
		bad(w, "kva_submit handle", (int)h.gen);
	else
		st->id_by_gen[stamp] = h.id;
	w->recent[w->nrecent++ % RECENT] = h;
	side_calls(w, x);
	return true;
}

static void run_add(struct worker *w, kva_handle h)
{
	if (w->nrun == w->runcap) {
		size_t cap = w->runcap ? w->runcap * 2 : 64;
		kva_handle *v = realloc(w->run, cap * sizeof(*v));
		if (!v) {
			bad(w, "realloc", -ENOMEM);
			return;
		}
		w->run = v;
		w->runcap = cap;
	}
	w->run[w->nrun++] = h;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct st *st = w->st;
	struct work *buf = NULL;
	size_t bufcap = 0;
	bool submitting = true;

	for (;;) {
		bool stop = atomic_load(&st->stop);
		bool did = false;
		for (int k = 0; k < 4 && !stop && w->submitted < st->quota; k++)
			if (!(did = submit_one(w)))
				break;
		if (submitting && w->submitted >= st->quota) {
			submitting = false;
			atomic_fetch_sub(&st->submitting, 1);
		}
		size_t n = workq_take(&w->q, &buf, &bufcap);
		for (size_t i = 0; i < n; i++) {
			did = true;
			if (buf[i].kind == W_COPY)
				report_copy(w, &buf[i]); /* also after stop: pages must drain */
			else if (stop)
				continue;
			else if (buf[i].kind == W_LOOKUP)
				answer_lookup(w, &buf[i]);
			else
				run_add(w, buf[i].u.h);
		}
		if (stop && n == 0)
			break;
		for (size_t i = 0; i < w->nrun && !stop;) {
			if (visit_running(w, w->run[i])) {
				i++;
			} else {
				w->run[i] = w->run[--w->nrun];
				did = true;
			}
		}
		if (!did)
			nap();
	}
	free(buf);
	free(w->run);
	return NULL;
}

/* ---- the scheduler (main thread) ------------------------------------------- */

static void engine_threads_every_request_ends_exactly_once(void **unused)
{
	(void)unused;
	struct st *st = calloc(1, sizeof(*st));
	assert_non_null(st);
	uint64_t total = kva_test_scaled(FULL_REQUESTS);
	st->quota = (total + WORKERS - 1) / WORKERS;
	st->gens = st->quota * WORKERS;
	st->id_by_gen = calloc(st->gens + 1, sizeof(uint64_t));
	uint64_t *ended_id = calloc(st->gens + 1, sizeof(uint64_t));
	uint8_t *ended_seen = calloc(st->gens + 1, 1);
	assert_non_null(st->id_by_gen);
	assert_non_null(ended_id);
	assert_non_null(ended_seen);
	atomic_init(&st->epoch, 1);
	atomic_init(&st->submitting, WORKERS);

	kva_config c;
	kva_config_default(&c);
	c.total_pages = PAGES;
	c.page_tokens = 16;
	c.decode_reserve_pages = 64;
	c.decode_headroom_pages = 2;
	c.prefill_chunk_tokens = 512;
	c.copy_slots = 16;
	c.max_running = 128;
	c.world_size = 2;
	c.max_copy_retries = 1;
	/* real time: ms deadlines so that unanswered lookups, long waits,
	 * logs and refreshes all happen within the run */
	c.lookup_timeout_ns = 2000000;
	c.max_restore_wait_ns = 20000000;
	c.wait_log_interval_ns = 10000000;
	c.lookup_refresh_ns = 7000000;
	c.lookup = dir_lookup;
	c.lookup_ctx = st;
	c.log = count_log;
	c.log_ctx = st;
	for (uint32_t r = 0; r < 2; r++) {
		rank_ctx[r] = (struct rank_ctx){st, r, 0x9e3779b97f4a7c15ull * (r + 1)};
		c.importers[r] = (kva_importer_ref){import_rank, &rank_ctx[r]};
	}
	uint64_t t0 = mono_ns();
	c.start_ns = 0;
	int err = 1;
	st->e = kva_engine_create(&c, &err);
	assert_int_equal(err, 0);
	assert_non_null(st->e);

	for (int i = 0; i < WORKERS; i++) {
		struct worker *w = &st->w[i];
		w->st = st;
		w->idx = i;
		w->rng = 0x243f6a8885a308d3ull ^ (uint64_t)(i + 1) * 0x13198a2e03707344ull;
		pthread_mutex_init(&w->q.mu, NULL);
		assert_int_equal(pthread_create(&w->tid, NULL, worker_main, w), 0);
	}

	static kva_admission adm[1024];
	static uint32_t pages[1 << 18];
	static kva_fallback fb[1024];
	static kva_ended ended[1024];
	kva_plan plan = {.admitted = adm,
			 .admitted_cap = 1024,
			 .pages = pages,
			 .pages_cap = 1 << 18,
			 .fallbacks = fb,
			 .fallbacks_cap = 1024,
			 .ended = ended,
			 .ended_cap = 1024};
	uint64_t n_ended = 0, by_state[8] = {0}, step_errors = 0, bad_ended = 0, dup_ended = 0,
		 bad_pages = 0, admissions = 0, steps = 0, rr = 0;
	int first_step_error = 0;
	bool timed_out = false;
	for (;;) {
		uint64_t now = mono_ns() - t0;
		int n = kva_step(st->e, now, &plan);
		steps++;
		if (n < 0) {
			if (!step_errors++)
				first_step_error = n;
			continue;
		}
		admissions += (uint64_t)n;
		for (uint32_t i = 0; i < plan.n_admitted; i++) {
			for (uint32_t k = 0; k < adm[i].npages; k++)
				bad_pages += pages[adm[i].pages_off + k] >= PAGES;
			struct work w = {.kind = W_RUN, .u.h = adm[i].handle};
			workq_push(&st->w[rr++ % WORKERS].q, w);
		}
		for (uint32_t i = 0; i < plan.n_ended; i++) {
			kva_handle h = ended[i].handle;
			uint64_t stamp = (uintptr_t)ended[i].user;
			if (stamp == 0 || stamp > st->gens || ended[i].state < KVA_STATE_FINISHED ||
			    ended[i].state > KVA_STATE_REJECTED) {
				bad_ended++;
				continue;
			}
			if (ended_seen[stamp]++)
				dup_ended++;
			ended_id[stamp] = h.id;
			by_state[ended[i].state]++;
		}
		n_ended += plan.n_ended;
		atomic_fetch_sub_explicit(&st->inflight, plan.n_ended, memory_order_relaxed);
		if (!atomic_load(&st->submitting) && n_ended >= st->gens)
			break;
		if (now > (uint64_t)DEADLINE_S * 1000000000ull) {
			timed_out = true;
			break;
		}
		if (n == 0 && plan.events == 0 && plan.n_ended == 0)
			nap();
	}
	atomic_store(&st->stop, 1);
	for (int i = 0; i < WORKERS; i++)
		pthread_join(st->w[i].tid, NULL);
	/* the workers' last copy reports drain; nothing else may happen */
	for (int i = 0; i < 3; i++) {
		int n = kva_step(st->e, mono_ns() - t0, &plan);
		assert_int_equal(n, 0);
		assert_int_equal(plan.n_ended, 0);
		assert_int_equal(plan.n_admitted, 0);
	}
	double secs = (double)(mono_ns() - t0) / 1e9;

	kva_stats s;
	kva_stats_get(st->e, &s);
	uint64_t submitted = 0, bad_total = 0;
	for (int i = 0; i < WORKERS; i++) {
		struct worker *w = &st->w[i];
		submitted += w->submitted;
		bad_total += w->bad;
		if (w->bad)
			fprintf(stderr, "%s (and %llu more)\n", w->first_bad,
				(unsigned long long)w->bad - 1);
		assert_int_equal(atomic_load(&w->q.oom), 0);
	}
	printf("engine_threads: %llu requests in %.1f s, %llu steps: finished %llu cancelled %llu "
	       "rejected %llu preempted %llu | admitted restore %llu local %llu recompute %llu | "
	       "lookups %llu answered %llu timed out %llu late %llu refreshes %llu revalidations "
	       "%llu | copies %llu failed %llu retries %llu shorter %llu refused %llu | "
	       "wait expired %llu logs %llu\n",
	       (unsigned long long)submitted, secs, (unsigned long long)steps,
	       (unsigned long long)s.finished, (unsigned long long)s.cancelled,
	       (unsigned long long)s.rejected, (unsigned long long)s.preempted,
	       (unsigned long long)s.admitted_restore, (unsigned long long)s.admitted_local,
	       (unsigned long long)s.admitted_recompute, (unsigned long long)s.lookups_issued,
	       (unsigned long long)s.lookups_answered, (unsigned long long)s.lookups_timed_out,
	       (unsigned long long)s.late_answers, (unsigned long long)s.refreshes,
	       (unsigned long long)s.revalidations, (unsigned long long)s.copy_jobs,
	       (unsigned long long)s.copy_attempts_failed, (unsigned long long)s.copy_retries,
	       (unsigned long long)s.shorter_fallbacks, (unsigned long long)st->refused_imports,
	       (unsigned long long)s.wait_expired, (unsigned long long)st->logs);
	if (timed_out)
		fprintf(stderr,
			"deadline: %llu of %llu ended, %llu waiting %llu importing %llu ready "
			"%llu running\n",
			(unsigned long long)n_ended, (unsigned long long)st->gens,
			(unsigned long long)s.waiting, (unsigned long long)s.importing,
			(unsigned long long)s.ready, (unsigned long long)s.running);
	assert_false(timed_out);
	assert_int_equal(bad_total, 0);
	assert_int_equal(step_errors, 0);
	(void)first_step_error;

	/* exactly one terminal outcome per submission, under its own id */
	assert_int_equal(submitted, st->gens);
	assert_true(submitted >= total);
	assert_int_equal(s.submitted, submitted);
	assert_int_equal(bad_ended, 0);
	assert_int_equal(dup_ended, 0);
	assert_int_equal(n_ended, submitted);
	uint64_t missing = 0, wrong_id = 0;
	for (uint64_t g = 1; g <= st->gens; g++) {
		missing += ended_seen[g] != 1;
		wrong_id += ended_id[g] != st->id_by_gen[g];
	}
	assert_int_equal(missing, 0);
	assert_int_equal(wrong_id, 0);
	assert_int_equal(by_state[KVA_STATE_FINISHED], s.finished);
	assert_int_equal(by_state[KVA_STATE_CANCELLED], s.cancelled);
	assert_int_equal(by_state[KVA_STATE_REJECTED], s.rejected);
	assert_int_equal(s.finished + s.cancelled + s.rejected, submitted);
	assert_int_equal(s.ingested, submitted);

	/* quiescent: every credit, slot and run back; nobody left anywhere */
	assert_int_equal(s.free_pages + s.reserved_pages + s.in_use_pages + s.draining_pages,
			 s.total_pages);
	assert_int_equal(s.free_pages, PAGES);
	assert_int_equal(s.reserved_pages + s.in_use_pages + s.draining_pages, 0);
	assert_int_equal(s.free_copy_slots, c.copy_slots);
	assert_int_equal(s.free_run_slots, c.max_running);
	assert_int_equal(s.waiting + s.importing + s.ready + s.running, 0);
	assert_int_equal(bad_pages, 0);
	assert_int_equal(s.tokens_local + s.tokens_restored + s.tokens_recomputed,
			 s.prompt_tokens_admitted);
	assert_int_equal(s.admitted_restore + s.admitted_local + s.admitted_recompute, admissions);

	/* the run exercised what it claims to */
	assert_true(s.admitted_restore > 0);
	assert_true(s.admitted_local > 0);
	assert_true(s.admitted_recompute > 0);
	assert_true(s.lookups_answered > 0);
	assert_true(s.lookups_timed_out > 0);
	assert_true(s.copy_attempts_failed > 0);
	assert_true(s.cancelled > 0);
	assert_true(s.preempted > 0);
	assert_true(s.rejected > 0);
	assert_true(s.fallbacks[KVA_REASON_MISS] > 0);
	assert_true(s.fallbacks[KVA_REASON_INCOMPATIBLE] > 0);
	assert_true(s.fallbacks[KVA_REASON_NO_KEY] > 0);

	kva_engine_destroy(st->e);
	for (int i = 0; i < WORKERS; i++) {
		free(st->w[i].q.v);
		pthread_mutex_destroy(&st->w[i].q.mu);
	}
	free(ended_seen);
	free(ended_id);
	free(st->id_by_gen);
	free(st);
}

/* ---- a cancel deferred by a grow, then overtaken by the finish ------------ *
 * The scheduler defers a cancel that finds the request mid-kva_grow. If the
 * host's kva_finish lands in the same step, the request ends and is retired
 * while its cancel event still sits in the deferred queue; the next step
 * must not touch freed memory. The interleaving is forced: a huge grow keeps
 * the request GROWING while the step handles the cancel, and a directory
 * callback of that same step waits until the host has finished (a slow
 * scheduler thread, as any host may have). */

struct defer_race {
	kva_engine *e;
	kva_handle h;
	uint32_t grow_pages;
	atomic_int growing, done;
	int rc_grow, rc_finish;
	int waited; /* the callback saw the finish land inside the step */
};

static void *defer_grower(void *arg)
{
	struct defer_race *x = arg;
	atomic_store(&x->growing, 1);
	x->rc_grow = kva_grow(x->e, x->h, x->grow_pages, NULL);
	x->rc_finish = kva_finish(x->e, x->h);
	atomic_store(&x->done, 1);
	return NULL;
}

static void defer_wait_lookup(void *ctx, uint64_t key, uint32_t prompt, kva_lookup_token t)
{
	struct defer_race *x = ctx;
	(void)key, (void)prompt, (void)t;
	uint64_t until = mono_ns() + 20ull * 1000000000ull;
	while (!atomic_load(&x->done) && mono_ns() < until)
		nap();
	x->waited = atomic_load(&x->done);
}

static void cancel_deferred_by_grow_never_outlives_its_record(void **unused)
{
	(void)unused;
	struct defer_race x;
	memset(&x, 0, sizeof(x));
	kva_config c;
	kva_config_default(&c);
	c.total_pages = 1u << 23; /* a grow of all of them takes milliseconds */
	c.prefill_chunk_tokens = 16;
	c.copy_slots = 1;
	c.max_running = 4;
	c.lookup_timeout_ns = 0;
	c.lookup = defer_wait_lookup;
	c.lookup_ctx = &x;
	int err = 1;
	x.e = kva_engine_create(&c, &err);
	assert_non_null(x.e);
	static kva_admission adm[4];
	static kva_ended ended[4];
	static uint32_t pages[16];
	kva_plan plan = {.admitted = adm,
			 .admitted_cap = 4,
			 .pages = pages,
			 .pages_cap = 16,
			 .ended = ended,
			 .ended_cap = 4};
	uint64_t now = 0;
	int deferred_rounds = 0;
	for (int round = 0; round < 5 && deferred_rounds == 0; round++) {
		kva_request r = {.id = 1, .prefix_key = 0, .prompt_tokens = 16};
		assert_int_equal(kva_submit(x.e, &r, &x.h), 0);
		assert_int_equal(kva_step(x.e, ++now, &plan), 1);
		atomic_store(&x.growing, 0);
		atomic_store(&x.done, 0);
		x.waited = 0;
		x.grow_pages = c.total_pages - 1;
		pthread_t g;
		assert_int_equal(pthread_create(&g, NULL, defer_grower, &x), 0);
		while (!atomic_load(&x.growing))
			nap();
		struct timespec ts = {0, 2000000}; /* well inside the grow's CAS window */
		nanosleep(&ts, NULL);
		assert_int_equal(kva_cancel(x.e, x.h), 0);
		kva_request probe = {.id = 2, .prefix_key = 5, .prompt_tokens = 16};
		kva_handle ph;
		assert_int_equal(kva_submit(x.e, &probe, &ph), 0);
		assert_true(kva_step(x.e, ++now, &plan) >= 0); /* cancel, then the slow callback */
		uint32_t reports = plan.n_ended;
		uint8_t state = reports ? ended[0].state : 0;
		pthread_join(g, NULL);
		assert_true(x.waited);
		/* let a grace period pass: a retired record is really freed now */
		ts.tv_nsec = 50000000;
		nanosleep(&ts, NULL);
		assert_true(kva_step(x.e, ++now, &plan) >= 0);
		/* The deferred cancel came back, with the finish: a step handles only
		 * the events enqueued before it began, so the finish pushed during
		 * the last step's callback is handled in this one. */
		bool deferred = plan.events == 2;
		reports += plan.n_ended;
		if (plan.n_ended)
			state = ended[0].state;
		assert_int_equal(reports, 1); /* exactly one outcome */
		if (deferred) {
			deferred_rounds++;
			assert_int_equal(x.rc_grow, 0);
			assert_int_equal(x.rc_finish, 0);
			assert_int_equal(state, KVA_STATE_FINISHED);
		}
		assert_int_equal(kva_cancel(x.e, ph), 0);
		assert_true(kva_step(x.e, ++now, &plan) >= 0);
		assert_int_equal(plan.n_ended, 1);
		assert_true(kva_step(x.e, ++now, &plan) >= 0);
		kva_stats s;
		kva_stats_get(x.e, &s);
		assert_int_equal(s.free_pages, c.total_pages);
		assert_int_equal(s.reserved_pages + s.in_use_pages + s.draining_pages, 0);
		assert_int_equal(s.free_run_slots, c.max_running);
	}
	assert_true(deferred_rounds > 0); /* the interleaving really happened */
	kva_engine_destroy(x.e);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(engine_threads_every_request_ends_exactly_once),
	    cmocka_unit_test(cancel_deferred_by_grow_never_outlives_its_record),
	};
	return cmocka_run_group_tests_name("engine_threads", tests, NULL, NULL);
}
