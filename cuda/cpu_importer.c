/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CPU importer: a pool of worker threads carrying out copy jobs with
 * memcpy into a host page pool, with optional injected latency, bandwidth and
 * failures (see include/kvadmit/importer.h for the contract).
 *
 * Owns: the intake inbox (the engine's scheduler thread is the only
 * producer, inside kva_step; it pushes with one wait-free enqueue and posts a
 * semaphore, never takes a lock), the worker threads, and every job record
 * from submit until it has been reported.
 *
 * Workers are the inbox's consumers. The inbox is single-consumer, so they
 * take turns on a consumer-only mutex for the splice and the pop (a few
 * pointer moves; the copy itself runs outside it). The semaphore carries one
 * unit per job pushed, so a worker that got a unit always finds a job, and
 * destroy adds one unit per worker to let each see the stop flag.
 *
 * Failure decisions are taken at submit from a hash of (seed, token, rank)
 * (kva_cpu_importer_fails), never from timing, so a seeded run reproduces.
 */
#define _GNU_SOURCE 1
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <kvadmit/lockfree/thread_start.h>

#include "import_common.h"

struct kva_cpu_importer {
	kva_cpu_importer_config cfg;
	/* producer side: the scheduler thread */
	alignas(64) struct kva_inbox intake;
	/* fault injection, read at submit; written by set_failures (any thread) */
	_Atomic uint64_t fail_rate_bits, fail_seed;
	/* consumer side: the workers */
	alignas(64) sem_t work;
	pthread_mutex_t consumer;     /* guards batch and the intake's drain */
	struct kva_inbox_batch batch; /* drained, not yet popped */
	_Atomic bool stop;
	pthread_mutex_t sleep_mtx; /* stop-aware sleeps of the injected latency */
	pthread_cond_t sleep_cv;   /* CLOCK_MONOTONIC */
	struct kva__idle idle;
	struct kva__imp_stats st;
	uint32_t started;
	pthread_t threads[];
};

static uint64_t dbl_bits(double d)
{
	uint64_t u;
	memcpy(&u, &d, sizeof(u));
	return u;
}

static double bits_dbl(uint64_t u)
{
	double d;
	memcpy(&d, &u, sizeof(d));
	return d;
}

void kva_cpu_importer_config_default(kva_cpu_importer_config *cfg)
{
	if (!cfg)
		return;
	memset(cfg, 0, sizeof(*cfg));
	cfg->threads = 1;
}

static bool stopping(const kva_cpu_importer *imp)
{
	/* A2: pairs with R2 in kva_cpu_importer_destroy. */
	return atomic_load_explicit(&((kva_cpu_importer *)imp)->stop, memory_order_acquire);
}

/* Sleeps until deadline (CLOCK_MONOTONIC ns) or until destroy begins.
 * Returns false when cut short by destroy. */
static bool sleep_until(kva_cpu_importer *imp, uint64_t deadline)
{
	struct timespec ts = {(time_t)(deadline / 1000000000ull), (long)(deadline % 1000000000ull)};
	pthread_mutex_lock(&imp->sleep_mtx);
	while (!stopping(imp) && kva__imp_now_ns() < deadline)
		pthread_cond_timedwait(&imp->sleep_cv, &imp->sleep_mtx, &ts);
	bool ok = !stopping(imp);
	pthread_mutex_unlock(&imp->sleep_mtx);
	return ok;
}

/* Copies the first n pages of j's share, one memcpy per run of consecutive
 * destination ids, paced to the configured bandwidth. */
static void copy_pages(kva_cpu_importer *imp, const struct kva__imp_job *j, const char *src,
		       size_t bytes, uint32_t n)
{
	const size_t pb = imp->cfg.page_bytes;
	const uint64_t bw = imp->cfg.bandwidth_bytes_per_s;
	char *dst = imp->cfg.dest_base;
	uint64_t t0 = bw ? kva__imp_now_ns() : 0;
	size_t done = 0;
	bool paced = bw != 0;
	for (uint32_t i = 0; i < n;) {
		uint32_t run = kva__imp_run(j->ids, n, i);
		size_t off = (size_t)i * pb;
		size_t len = (size_t)run * pb;
		if (len > bytes - off)
			len = bytes - off; /* the share's last page may be partial */
		memcpy(dst + (size_t)j->ids[i] * pb, src + off, len);
		kva__is_add(&imp->st, KVA__IS_CALLS, 1);
		done += len;
		i += run;
		if (paced) {
			uint64_t due = t0 + (uint64_t)((double)done * 1e9 / (double)bw);
			/* sleeping is coarse; only bother when noticeably ahead */
			if (due > kva__imp_now_ns() + 20000)
				paced = sleep_until(imp, due);
		}
	}
}

static void run_job(kva_cpu_importer *imp, struct kva__imp_job *j)
{
	uint64_t t0 = kva__imp_now_ns();
	int status = 0;
	bool cancelled = false;
	if (stopping(imp)) {
		/* destroy began before it started: report it failed, copy nothing */
		status = -ECANCELED;
		cancelled = true;
		goto report;
	}
	const void *src = NULL;
	size_t bytes = 0;
	status = imp->cfg.resolve(imp->cfg.resolve_ctx, j->job.checkpoint_id,
				  j->job.checkpoint_epoch, j->job.rank, &src, &bytes);
	if (status == 0)
		status = kva__imp_src_check(j->job.npages, imp->cfg.page_bytes, src, bytes);
	if (status != 0) {
		if (status > 0)
			status = -EIO;
		goto report;
	}
	if (imp->cfg.latency_ns)
		(void)sleep_until(imp, t0 + imp->cfg.latency_ns); /* cut short by destroy */
	if (j->inject_fail) {
		/* a failure part-way: half the pages landed, the rest did not */
		copy_pages(imp, j, src, bytes, j->job.npages / 2);
		kva__is_add(&imp->st, KVA__IS_INJECTED, 1);
		status = -EIO;
		goto report;
	}
	copy_pages(imp, j, src, bytes, j->job.npages);
	kva__is_add(&imp->st, KVA__IS_PAGES, j->job.npages);
	kva__is_add(&imp->st, KVA__IS_BYTES,
		    bytes < (size_t)j->job.npages * imp->cfg.page_bytes
			? bytes
			: (size_t)j->job.npages * imp->cfg.page_bytes);
report:
	kva__imp_report(imp->cfg.report, imp->cfg.report_ctx, &imp->st, j, status, cancelled);
	kva__is_add(&imp->st, KVA__IS_BUSY_NS, kva__imp_now_ns() - t0);
	kva__imp_job_free(j);
	kva__idle_done(&imp->idle);
}

static struct kva__imp_job *pop_job(kva_cpu_importer *imp)
{
	pthread_mutex_lock(&imp->consumer);
	struct kva_inbox_node *n = kva_inbox_batch_pop_blocking(&imp->batch);
	if (!n && kva_inbox_drain_blocking(&imp->intake, &imp->batch))
		n = kva_inbox_batch_pop_blocking(&imp->batch);
	pthread_mutex_unlock(&imp->consumer);
	return n ? caa_container_of(n, struct kva__imp_job, node) : NULL;
}

static void *worker_main(void *arg)
{
	kva_cpu_importer *imp = arg;
	for (;;) {
		while (sem_wait(&imp->work) != 0)
			; /* EINTR */
		struct kva__imp_job *j = pop_job(imp);
		if (j) {
			run_job(imp, j);
			continue;
		}
		/* Units beyond the jobs pushed are only destroy's, posted after
		 * the stop flag; every job pushed before it is popped by someone. */
		if (stopping(imp))
			break;
	}
	return NULL;
}

static int cpu_submit(void *ctx, kva_engine *e, const kva_copy_job *job)
{
	kva_cpu_importer *imp = ctx;
	int rc;
	struct kva__imp_job *j = kva__imp_accept(&imp->st, &imp->idle, stopping(imp), e, job,
						 imp->cfg.rank, imp->cfg.dest_pages, &rc);
	if (!j)
		return rc;
	double rate = bits_dbl(atomic_load_explicit(&imp->fail_rate_bits, memory_order_relaxed));
	uint64_t seed = atomic_load_explicit(&imp->fail_seed, memory_order_relaxed);
	j->inject_fail = kva_cpu_importer_fails(seed, rate, job->token, job->rank);
	/* The push publishes the record to the worker that pops it (inbox R1/A1). */
	kva_inbox_push(&imp->intake, &j->node);
	sem_post(&imp->work);
	return 0;
}

static int config_check(const kva_cpu_importer_config *c)
{
	if (!c || !c->threads || c->threads > 1024 || !c->page_bytes || !c->dest_base ||
	    !c->dest_pages || !c->resolve)
		return -EINVAL;
	if (!(c->fail_rate >= 0.0 && c->fail_rate <= 1.0))
		return -EINVAL;
	return 0;
}

static void stop_workers(kva_cpu_importer *imp)
{
	/* R2: pairs with A2 in stopping() — workers see the flag after waking. */
	atomic_store_explicit(&imp->stop, true, memory_order_release);
	pthread_mutex_lock(&imp->sleep_mtx);
	pthread_cond_broadcast(&imp->sleep_cv);
	pthread_mutex_unlock(&imp->sleep_mtx);
	for (uint32_t i = 0; i < imp->started; i++)
		sem_post(&imp->work);
	for (uint32_t i = 0; i < imp->started; i++)
		pthread_join(imp->threads[i], NULL);
}

kva_cpu_importer *kva_cpu_importer_create(const kva_cpu_importer_config *cfg, int *err)
{
	int rc = config_check(cfg);
	kva_cpu_importer *imp = NULL;
	if (rc)
		goto out;
	rc = -ENOMEM;
	/* aligned: the struct has alignas(64) members, which calloc's 16
	 * bytes do not honour (UBSan's alignment check, make test-ubsan) */
	size_t size = sizeof(*imp) + cfg->threads * sizeof(pthread_t);
	size = (size + alignof(kva_cpu_importer) - 1) / alignof(kva_cpu_importer) *
	       alignof(kva_cpu_importer);
	imp = aligned_alloc(alignof(kva_cpu_importer), size);
	if (!imp)
		goto out;
	memset(imp, 0, size);
	imp->cfg = *cfg;
	atomic_init(&imp->fail_rate_bits, dbl_bits(cfg->fail_rate));
	atomic_init(&imp->fail_seed, cfg->seed);
	atomic_init(&imp->stop, false);
	kva_inbox_init(&imp->intake);
	(void)kva_inbox_drain_blocking(&imp->intake, &imp->batch); /* initialises the empty batch */
	if (sem_init(&imp->work, 0, 0) != 0)
		goto out_free;
	if (pthread_mutex_init(&imp->consumer, NULL) != 0)
		goto out_sem;
	if (pthread_mutex_init(&imp->sleep_mtx, NULL) != 0)
		goto out_consumer;
	pthread_condattr_t ca;
	if (pthread_condattr_init(&ca) != 0)
		goto out_sleep_mtx;
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	int crc = pthread_cond_init(&imp->sleep_cv, &ca);
	pthread_condattr_destroy(&ca);
	if (crc != 0)
		goto out_sleep_mtx;
	if (kva__idle_init(&imp->idle) != 0)
		goto out_sleep_cv;

	/* Workers block every signal: the host's go to its own threads. */
	for (; imp->started < cfg->threads; imp->started++)
		if (kva_thread_start(&imp->threads[imp->started], NULL, worker_main, imp) != 0)
			break;
	if (imp->started < cfg->threads) {
		rc = -EAGAIN;
		stop_workers(imp);
		goto out_idle;
	}
	for (uint32_t i = 0; i < imp->started; i++)
		pthread_setname_np(imp->threads[i], "kva-cpu-import");
	if (err)
		*err = 0;
	return imp;

out_idle:
	kva__idle_fini(&imp->idle);
out_sleep_cv:
	pthread_cond_destroy(&imp->sleep_cv);
out_sleep_mtx:
	pthread_mutex_destroy(&imp->sleep_mtx);
out_consumer:
	pthread_mutex_destroy(&imp->consumer);
out_sem:
	sem_destroy(&imp->work);
out_free:
	free(imp);
	imp = NULL;
out:
	if (err)
		*err = rc;
	return NULL;
}

void kva_cpu_importer_destroy(kva_cpu_importer *imp)
{
	if (!imp)
		return;
	/* Every job pushed before this point is popped by a worker and reported
	 * before the workers exit (see worker_main), so after the joins nothing
	 * is in flight and nothing is left in the intake. */
	stop_workers(imp);
	kva__idle_fini(&imp->idle);
	pthread_cond_destroy(&imp->sleep_cv);
	pthread_mutex_destroy(&imp->sleep_mtx);
	pthread_mutex_destroy(&imp->consumer);
	sem_destroy(&imp->work);
	kva_inbox_fini(&imp->intake);
	free(imp);
}

kva_importer_ref kva_cpu_importer_ref(kva_cpu_importer *imp)
{
	return (kva_importer_ref){imp ? cpu_submit : NULL, imp};
}

int kva_cpu_importer_wait_idle(kva_cpu_importer *imp, uint64_t timeout_ns)
{
	if (!imp)
		return -EINVAL;
	return kva__idle_wait(&imp->idle, timeout_ns);
}

void kva_cpu_importer_stats(const kva_cpu_importer *imp, kva_importer_stats *out)
{
	kva__imp_stats_read(imp ? &imp->st : NULL, imp ? &imp->idle : NULL, out);
}

void kva_cpu_importer_set_failures(kva_cpu_importer *imp, double fail_rate, uint64_t seed)
{
	if (!imp || !(fail_rate >= 0.0 && fail_rate <= 1.0))
		return;
	/* read by the next submit; no other data rides on these */
	atomic_store_explicit(&imp->fail_rate_bits, dbl_bits(fail_rate), memory_order_relaxed);
	atomic_store_explicit(&imp->fail_seed, seed, memory_order_relaxed);
}
