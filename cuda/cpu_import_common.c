/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Shared importer helpers (see import_common.h): job records, validation,
 * the in-flight count behind wait_idle, counters, reporting, and the
 * deterministic failure decision. Compiled in every build; the CUDA importer
 * uses it too.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <kvadmit/lockfree/hash.h>
#include "import_common.h"

uint64_t kva__imp_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

struct kva__imp_job *kva__imp_job_new(kva_engine *e, const kva_copy_job *job)
{
	struct kva__imp_job *j = malloc(sizeof(*j) + (size_t)job->npages * sizeof(uint32_t));
	if (!j)
		return NULL;
	memset(j, 0, sizeof(*j));
	kva_inbox_node_init(&j->node);
	j->e = e;
	j->job = *job;
	memcpy(j->ids, job->pages, (size_t)job->npages * sizeof(uint32_t));
	j->job.pages = j->ids;
	return j;
}

void kva__imp_job_free(struct kva__imp_job *j)
{
	free(j);
}

int kva__imp_job_check(const kva_copy_job *job, uint32_t rank, uint32_t dest_pages)
{
	if (job->rank != rank || job->npages == 0 || !job->pages)
		return -EINVAL;
	for (uint32_t i = 0; i < job->npages; i++)
		if (job->pages[i] >= dest_pages)
			return -ERANGE;
	return 0;
}

int kva__imp_src_check(uint32_t npages, size_t page_bytes, const void *src, size_t bytes)
{
	if (!src)
		return -EFAULT;
	/* every page but the last is full; the last holds at least one byte */
	if (bytes <= (size_t)(npages - 1) * page_bytes)
		return -ERANGE;
	return 0;
}

struct kva__imp_job *kva__imp_accept(struct kva__imp_stats *st, struct kva__idle *idle,
				     bool stopping, kva_engine *e, const kva_copy_job *job,
				     uint32_t rank, uint32_t dest_pages, int *rc)
{
	*rc = job ? kva__imp_job_check(job, rank, dest_pages) : -EINVAL;
	if (*rc == 0 && stopping)
		*rc = -ESHUTDOWN;
	struct kva__imp_job *j = *rc == 0 ? kva__imp_job_new(e, job) : NULL;
	if (*rc == 0 && !j)
		*rc = -ENOMEM;
	if (*rc) {
		kva__is_add(st, KVA__IS_REFUSED, 1);
		return NULL;
	}
	kva__idle_add(idle);
	kva__is_add(st, KVA__IS_SUBMITTED, 1);
	return j;
}

/* ---- in-flight count ------------------------------------------------------ */

int kva__idle_init(struct kva__idle *w)
{
	atomic_init(&w->in_flight, 0);
	pthread_condattr_t ca;
	if (pthread_condattr_init(&ca) != 0)
		return -ENOMEM;
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	int rc = pthread_cond_init(&w->cv, &ca);
	pthread_condattr_destroy(&ca);
	if (rc != 0)
		return -ENOMEM;
	if (pthread_mutex_init(&w->mtx, NULL) != 0) {
		pthread_cond_destroy(&w->cv);
		return -ENOMEM;
	}
	return 0;
}

void kva__idle_fini(struct kva__idle *w)
{
	pthread_cond_destroy(&w->cv);
	pthread_mutex_destroy(&w->mtx);
}

void kva__idle_add(struct kva__idle *w)
{
	/* ordering comes from the intake push that follows */
	atomic_fetch_add_explicit(&w->in_flight, 1, memory_order_relaxed);
}

void kva__idle_done(struct kva__idle *w)
{
	/* R1: pairs with A1 in kva__idle_wait — the report and the copied pages
	 * happen before a waiter returns. */
	if (atomic_fetch_sub_explicit(&w->in_flight, 1, memory_order_acq_rel) != 1)
		return;
	/* Broadcast under the mutex: a waiter between its check and its sleep
	 * holds it, so the wakeup cannot fall in that gap. */
	pthread_mutex_lock(&w->mtx);
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mtx);
}

int kva__idle_wait(struct kva__idle *w, uint64_t timeout_ns)
{
	struct timespec dl;
	clock_gettime(CLOCK_MONOTONIC, &dl);
	uint64_t ns = (uint64_t)dl.tv_nsec + timeout_ns % 1000000000ull;
	dl.tv_sec += (time_t)(timeout_ns / 1000000000ull + ns / 1000000000ull);
	dl.tv_nsec = (long)(ns % 1000000000ull);
	int rc = 0;
	pthread_mutex_lock(&w->mtx);
	/* A1: pairs with R1 in kva__idle_done. */
	while (atomic_load_explicit(&w->in_flight, memory_order_acquire) != 0) {
		if (!timeout_ns) {
			pthread_cond_wait(&w->cv, &w->mtx);
		} else if (pthread_cond_timedwait(&w->cv, &w->mtx, &dl) == ETIMEDOUT) {
			if (atomic_load_explicit(&w->in_flight, memory_order_acquire) != 0)
				rc = -ETIMEDOUT;
			break;
		}
	}
	pthread_mutex_unlock(&w->mtx);
	return rc;
}

/* ---- counters and reports -------------------------------------------------- */

void kva__imp_stats_read(const struct kva__imp_stats *s, const struct kva__idle *w,
			 kva_importer_stats *out)
{
	if (!out)
		return;
	memset(out, 0, sizeof(*out));
	if (!s || !w)
		return;
		/* statistics: each counter on its own, no snapshot across them */
#define GET(i) atomic_load_explicit(&((struct kva__imp_stats *)s)->v[i], memory_order_relaxed)
	out->jobs_submitted = GET(KVA__IS_SUBMITTED);
	out->jobs_refused = GET(KVA__IS_REFUSED);
	out->jobs_ok = GET(KVA__IS_OK);
	out->jobs_failed = GET(KVA__IS_FAILED);
	out->jobs_injected = GET(KVA__IS_INJECTED);
	out->jobs_cancelled = GET(KVA__IS_CANCELLED);
	out->pages_copied = GET(KVA__IS_PAGES);
	out->bytes_copied = GET(KVA__IS_BYTES);
	out->copy_calls = GET(KVA__IS_CALLS);
	out->busy_ns = GET(KVA__IS_BUSY_NS);
#undef GET
	out->in_flight =
	    atomic_load_explicit(&((struct kva__idle *)w)->in_flight, memory_order_relaxed);
}

void kva__imp_report(kva_report_fn fn, void *ctx, struct kva__imp_stats *s, struct kva__imp_job *j,
		     int status, bool cancelled)
{
	kva__is_add(s, cancelled ? KVA__IS_CANCELLED : status ? KVA__IS_FAILED : KVA__IS_OK, 1);
	if (fn)
		fn(ctx, j->e, &j->job, status);
	else
		(void)kva_copy_done(j->e, j->job.token, j->job.rank,
				    status); /* -ESTALE etc.: the
						engine counted it */
}

/* ---- deterministic failure injection ---------------------------------------- */

bool kva_cpu_importer_fails(uint64_t seed, double fail_rate, kva_copy_token t, uint32_t rank)
{
	if (!(fail_rate > 0.0))
		return false;
	if (fail_rate >= 1.0)
		return true;
	uint64_t h = kva_hash64(seed ^ 0x9e3779b97f4a7c15ull);
	h = kva_hash64(h ^ t.id);
	h = kva_hash64(h ^ ((uint64_t)t.gen << 32 | t.attempt));
	h = kva_hash64(h ^ rank);
	/* top 53 bits as a uniform double in [0, 1) */
	return (double)(h >> 11) * 0x1.0p-53 < fail_rate;
}
