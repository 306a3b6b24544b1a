/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CUDA importer (see include/kvadmit/importer.h for the contract): its
 * public API — create, destroy, the submit call the engine makes, manual
 * progress, wait_idle and the accessors. cuda_importer_state.h lists the
 * files below it.
 *
 * Owns: K non-blocking import streams created below the decode stream's
 * priority, the intake inbox (the engine's scheduler thread pushes one record
 * per job and posts a semaphore — nothing else happens inside kva_step), the
 * done inbox filled by host functions, an event pool (event-polling mode),
 * the progress thread, and every job record until it has been reported.
 *
 * The progress loop (cuda_progress.c: the internal thread, or the host
 * through kva_cuda_importer_progress) resolves a job's source, checks that
 * it is pinned, and enqueues its copies on one import stream (cuda_issue.c):
 * one cudaMemcpyAsync per run of consecutive destination ids, or one
 * cudaMemcpyBatchAsync for the whole job. Then an event (cudaEventRecord)
 * that carries the copies' real completion status, and in host-function mode
 * a completion marker: cudaLaunchHostFunc, whose function only pushes the job
 * onto the done inbox and posts the semaphore (host functions must not call
 * CUDA). Results are reported from the progress loop, never from a CUDA
 * callback, with the status cudaEventQuery reads (an asynchronous copy error
 * is reported, not only the enqueue result). It never calls
 * cudaDeviceSynchronize and never enqueues on or waits for the decode
 * stream; only at destroy does it wait on its own import streams.
 *
 * When to report is completion.h's state machine (issued jobs in a FIFO per
 * import stream, markers, statuses), queried through cuda_completion.c. A
 * sticky error (a corrupted context: host functions stop running) reports
 * every outstanding job as failed and makes the importer dead: later submits
 * are refused with -EIO, so the engine retries and falls back as on any
 * failed copy. In host-function mode the loop wakes every millisecond
 * (CLOCK_MONOTONIC) while jobs are outstanding to look for one; event mode
 * polls every 20 us.
 *
 * CUDA calls run in the device's primary context, made current with the
 * driver's cuCtxSetCurrent around them on a host thread (create, manual
 * progress, destroy), which then gets back exactly the context it had,
 * none included (cuda_context.c says why).
 *
 * Memory-order labels here: R2 (destroy sets stop) pairs with A2 of
 * cuda_importer_state.h; A3 (submit reads dead) with R3 of
 * cuda_progress.c.
 *
 * tests/cuda/ runs these files on a CPU fake of the runtime and driver calls
 * they make (fault injection, context bookkeeping), in every build.
 */
#define _GNU_SOURCE 1 /* pthread_setname_np */
#include <errno.h>
#include <stdalign.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <kvadmit/lockfree/thread_start.h>

#include "cuda_completion.h"
#include "cuda_context.h"
#include "cuda_errors.h"
#include "cuda_importer_state.h"
#include "cuda_progress.h"

/* ---- submit (the engine's scheduler thread) ---- */

static int cuda_submit(void *ctx, kva_engine *e, const kva_copy_job *job)
{
	kva_cuda_importer *imp = ctx;
	int rc;
	/* A3: pairs with R3 in kva__cuda_progress_once (cuda_progress.c) — a
	 * dead importer refuses at once (the engine counts the rank failed,
	 * retries, falls back). */
	if (atomic_load_explicit(&imp->dead, memory_order_acquire)) {
		kva__is_add(&imp->stats, KVA__IS_REFUSED, 1);
		return -EIO;
	}
	struct kva__imp_job *j = kva__imp_accept(&imp->stats, &imp->idle, kva__cuda_stopping(imp),
						 e, job, imp->cfg.rank, imp->cfg.dest_pages, &rc);
	if (!j)
		return rc;
	/* The push publishes the record to the progress loop (inbox R1/A1). */
	kva_inbox_push(&imp->intake, &j->node);
	if (!imp->cfg.manual_progress)
		sem_post(&imp->wake);
	return 0;
}

/* ---- create / destroy and the rest of the API ---- */

/* Beside create, so that a static link that uses the importer also brings
 * the answer to the core's weak KVA_FEATURE_CUDA_IMPORTER reference. */
bool kva_cuda_importer_supported(void)
{
	return true;
}

void kva_cuda_importer_config_default(kva_cuda_importer_config *cfg)
{
	if (!cfg)
		return;
	memset(cfg, 0, sizeof(*cfg));
	cfg->streams = 2;
	cfg->completion = KVA_CUDA_COMPLETE_HOSTFUNC;
	cfg->copy_method = KVA_CUDA_COPY_AUTO;
}

/* Frees the CUDA objects and memory; the current device is imp's. */
static void release_all(kva_cuda_importer *imp)
{
	for (uint32_t s = 0; s < imp->nstreams; s++)
		if (imp->import_streams[s])
			cudaStreamDestroy(imp->import_streams[s]);
	if (imp->owns_decode_stream && imp->decode_stream)
		cudaStreamDestroy(imp->decode_stream);
	kva__cuda_event_pool_destroy(imp);
	free(imp->import_streams);
	free(imp->stream_fifo_head);
	free(imp->stream_fifo_tail);
	free(imp->batch_args.dst);
	free((void *)imp->batch_args.src);
	free(imp->batch_args.size);
}

/* Streams at the lowest priority, which must be below the decode stream's. */
static int make_streams(kva_cuda_importer *imp)
{
	int least = 0, greatest = 0;
	cudaError_t ce = cudaDeviceGetStreamPriorityRange(&least, &greatest);
	if (ce != cudaSuccess)
		return kva__cuda_create_fail(kva__cuda_errno(ce), ce,
					     "cudaDeviceGetStreamPriorityRange");
	if (imp->cfg.decode_stream) {
		imp->decode_stream = (cudaStream_t)imp->cfg.decode_stream;
		int dp = 0;
		/* a query only: nothing is ever enqueued on the decode stream */
		ce = cudaStreamGetPriority(imp->decode_stream, &dp);
		if (ce != cudaSuccess)
			return kva__cuda_create_fail(-EINVAL, ce,
						     "cudaStreamGetPriority(decode stream)");
		/* numerically larger = lower priority */
		if (dp >= least && !imp->cfg.allow_equal_priority)
			return kva__cuda_create_fail(
			    -EINVAL, cudaSuccess,
			    "the decode stream already has the lowest priority; create it "
			    "with cudaStreamCreateWithPriority at a higher one, or set "
			    "allow_equal_priority");
	} else {
		ce = cudaStreamCreateWithPriority(&imp->decode_stream, cudaStreamNonBlocking,
						  greatest);
		if (ce != cudaSuccess)
			return kva__cuda_create_fail(kva__cuda_errno(ce), ce,
						     "creating the decode stream");
		imp->owns_decode_stream = true;
	}
	for (uint32_t s = 0; s < imp->nstreams; s++) {
		ce = cudaStreamCreateWithPriority(&imp->import_streams[s], cudaStreamNonBlocking,
						  least);
		if (ce != cudaSuccess)
			return kva__cuda_create_fail(kva__cuda_errno(ce), ce,
						     "creating an import stream");
	}
	return 0;
}

static int config_check(const kva_cuda_importer_config *c)
{
	if (!c || !c->streams || c->streams > 64 || !c->page_bytes || !c->dest_base ||
	    !c->dest_pages || !c->resolve)
		return -EINVAL;
	if (c->completion != KVA_CUDA_COMPLETE_HOSTFUNC && c->completion != KVA_CUDA_COMPLETE_EVENT)
		return -EINVAL;
	if (c->copy_method < KVA_CUDA_COPY_AUTO || c->copy_method > KVA_CUDA_COPY_BATCH)
		return -EINVAL;
	return 0;
}

kva_cuda_importer *kva_cuda_importer_create(const kva_cuda_importer_config *cfg, int *err)
{
	kva__cuda_create_error_clear();
	kva_cuda_importer *imp = NULL;
	struct kva__cuda_ctx_saved sv = {NULL, false};
	CUdevice cudev = 0;
	CUcontext ctx = NULL;
	int rc = config_check(cfg);
	if (rc) {
		kva__cuda_create_fail(rc, cudaSuccess, "invalid configuration");
		goto out;
	}
	int ndev = 0;
	cudaError_t ce = cudaGetDeviceCount(&ndev);
	if (ce != cudaSuccess) {
		rc = kva__cuda_create_fail(-ENODEV, ce,
					   "no usable CUDA device (cudaGetDeviceCount)");
		(void)cudaGetLastError();
		goto out;
	}
	if (ndev == 0 || cfg->device < 0 || cfg->device >= ndev) {
		rc = kva__cuda_create_fail(-ENODEV,
					   ndev ? cudaErrorInvalidDevice : cudaErrorNoDevice,
					   ndev ? "device ordinal out of range" : "no CUDA device");
		goto out;
	}
	cudaError_t why = cudaSuccess;
	if (!kva__cuda_driver_load(&why)) {
		rc = kva__cuda_create_fail(
		    -ENODEV, why, "the driver's context functions (cudaGetDriverEntryPoint)");
		goto out;
	}
#if CUDART_VERSION >= 12000
	/* The device's own refusals (exclusive-process, prohibited) as a
	 * cudaError_t; initialises its primary context without making it
	 * current anywhere. */
	ce = cudaInitDevice(cfg->device, 0, 0);
	if (ce != cudaSuccess) {
		rc = kva__cuda_create_fail(kva__cuda_errno(ce), ce, "cudaInitDevice");
		(void)cudaGetLastError();
		goto out;
	}
#endif
	CUresult cr = kva__cuda_primary_ctx_retain(cfg->device, &cudev, &ctx);
	if (cr != CUDA_SUCCESS) {
		rc = cr == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -ENODEV;
		kva__cuda_create_fail_driver(rc, cr, "cuDevicePrimaryCtxRetain");
		goto out;
	}

	rc = -ENOMEM;
	/* aligned: alignas(64) members (as the CPU importer) */
	size_t size = (sizeof(*imp) + alignof(kva_cuda_importer) - 1) / alignof(kva_cuda_importer) *
	              alignof(kva_cuda_importer);
	imp = aligned_alloc(alignof(kva_cuda_importer), size);
	if (imp)
		memset(imp, 0, size);
	if (!imp) {
		kva__cuda_create_fail(rc, cudaSuccess, "out of memory");
		goto out_release;
	}
	imp->primary_ctx = ctx;
	imp->cu_device = cudev;
	if (!kva__cuda_ctx_enter(imp->primary_ctx, &sv)) {
		rc = kva__cuda_create_fail(-EIO, cudaErrorDeviceUninitialized, "cuCtxSetCurrent");
		free(imp);
		imp = NULL;
		goto out_release;
	}
	imp->cfg = *cfg;
	imp->nstreams = cfg->streams;
	imp->import_streams = calloc(cfg->streams, sizeof(*imp->import_streams));
	imp->stream_fifo_head = calloc(cfg->streams, sizeof(*imp->stream_fifo_head));
	imp->stream_fifo_tail = calloc(cfg->streams, sizeof(*imp->stream_fifo_tail));
	if (!imp->import_streams || !imp->stream_fifo_head || !imp->stream_fifo_tail) {
		kva__cuda_create_fail(rc, cudaSuccess, "out of memory");
		goto out_free;
	}
	int method = cfg->copy_method;
#if CUDART_VERSION >= 12080
	if (method == KVA_CUDA_COPY_AUTO)
		method = KVA_CUDA_COPY_BATCH;
#else
	if (method == KVA_CUDA_COPY_BATCH) {
		rc = kva__cuda_create_fail(-ENOTSUP, cudaSuccess, "batched copies need CUDA 12.8");
		goto out_free;
	}
	method = KVA_CUDA_COPY_RUNS;
#endif
	atomic_init(&imp->copy_method, method);
	atomic_init(&imp->stop, false);
	atomic_init(&imp->dead, false);
	kva__cuda_completion_init(imp);
	atomic_init(&imp->last_cuda_error, 0);
	kva_inbox_init(&imp->intake);
	kva_inbox_init(&imp->done);
	rc = make_streams(imp);
	if (rc)
		goto out_free;
	rc = -ENOMEM;
	if (sem_init(&imp->wake, 0, 0) != 0) {
		kva__cuda_create_fail(rc, cudaSuccess, "sem_init");
		goto out_free;
	}
	if (pthread_mutex_init(&imp->progress_mtx, NULL) != 0) {
		kva__cuda_create_fail(rc, cudaSuccess, "pthread_mutex_init");
		goto out_sem;
	}
	if (kva__idle_init(&imp->idle) != 0) {
		kva__cuda_create_fail(rc, cudaSuccess, "idle tracker");
		goto out_mtx;
	}
	if (!cfg->manual_progress) {
		int prc = kva_thread_start(&imp->progress_thread, NULL,
					   kva__cuda_progress_thread_main, imp);
		if (prc != 0) {
			rc = kva__cuda_create_fail(-EAGAIN, cudaSuccess,
						   "cannot start the progress thread");
			goto out_idle;
		}
		imp->has_progress_thread = true;
		pthread_setname_np(imp->progress_thread, "kva-cuda-import");
	}
	kva__cuda_ctx_leave(&sv);
	if (err)
		*err = 0;
	return imp;

out_idle:
	kva__idle_fini(&imp->idle);
out_mtx:
	pthread_mutex_destroy(&imp->progress_mtx);
out_sem:
	sem_destroy(&imp->wake);
out_free:
	release_all(imp);
	free(imp);
	imp = NULL;
	kva__cuda_ctx_leave(&sv);
out_release:
	kva__cuda_primary_ctx_release(cudev);
out:
	if (err)
		*err = rc;
	return NULL;
}

void kva_cuda_importer_destroy(kva_cuda_importer *imp)
{
	if (!imp)
		return;
	/* R2: pairs with A2 in kva__cuda_stopping (cuda_importer_state.h). */
	atomic_store_explicit(&imp->stop, true, memory_order_release);
	if (imp->has_progress_thread) {
		sem_post(&imp->wake);
		pthread_join(imp->progress_thread, NULL);
	}
	/* Goes on even if the context cannot be made current (the driver is
	 * shutting down): every call then fails, drain_issued fails what is
	 * left, and destroy still returns. */
	struct kva__cuda_ctx_saved sv;
	(void)kva__cuda_ctx_enter(imp->primary_ctx, &sv);
	if (!imp->has_progress_thread) {
		pthread_mutex_lock(&imp->progress_mtx);
		kva__cuda_drain_issued(imp);
		(void)kva__cuda_progress_once(imp, true);
		pthread_mutex_unlock(&imp->progress_mtx);
	}
	/* Every job has been reported, but the last host function may still be
	 * between its push and its sem_post: a host function is a stream
	 * operation, so syncing the import streams waits for it to return. */
	for (uint32_t s = 0; s < imp->nstreams; s++)
		(void)cudaStreamSynchronize(imp->import_streams[s]);
	/* jobs failed by a sticky error whose host function never ran */
	kva__cq_release_zombies(&imp->completion);
	release_all(imp);
	kva__cuda_ctx_leave(&sv);
	kva__cuda_primary_ctx_release(imp->cu_device);
	kva__idle_fini(&imp->idle);
	pthread_mutex_destroy(&imp->progress_mtx);
	sem_destroy(&imp->wake);
	free(imp);
}

kva_importer_ref kva_cuda_importer_ref(kva_cuda_importer *imp)
{
	return (kva_importer_ref){imp ? cuda_submit : NULL, imp};
}

int kva_cuda_importer_progress(kva_cuda_importer *imp)
{
	if (!imp || !imp->cfg.manual_progress)
		return -EINVAL;
	if (pthread_mutex_trylock(&imp->progress_mtx) != 0)
		return 0; /* another thread is progressing it right now */
	struct kva__cuda_ctx_saved sv;
	int n = -EIO; /* no CUDA call in a context that is not the importer's */
	if (kva__cuda_ctx_enter(imp->primary_ctx, &sv)) {
		n = kva__cuda_progress_once(imp, true);
		kva__cuda_ctx_leave(&sv);
	}
	pthread_mutex_unlock(&imp->progress_mtx);
	return n;
}

int kva_cuda_importer_wait_idle(kva_cuda_importer *imp, uint64_t timeout_ns)
{
	if (!imp)
		return -EINVAL;
	if (!imp->cfg.manual_progress)
		return kva__idle_wait(&imp->idle, timeout_ns);
	uint64_t end = kva__imp_now_ns() + timeout_ns;
	kva_importer_stats st;
	for (;;) {
		(void)kva_cuda_importer_progress(imp);
		kva__imp_stats_read(&imp->stats, &imp->idle, &st);
		if (!st.in_flight)
			return 0;
		if (timeout_ns && kva__imp_now_ns() >= end)
			return -ETIMEDOUT;
		struct timespec ts = {0, 20000};
		nanosleep(&ts, NULL);
	}
}

void kva_cuda_importer_stats(const kva_cuda_importer *imp, kva_importer_stats *out)
{
	kva__imp_stats_read(imp ? &imp->stats : NULL, imp ? &imp->idle : NULL, out);
}

void *kva_cuda_importer_decode_stream(const kva_cuda_importer *imp)
{
	return imp ? (void *)imp->decode_stream : NULL;
}

int kva_cuda_importer_copy_method(const kva_cuda_importer *imp)
{
	return imp ? atomic_load_explicit(&((kva_cuda_importer *)imp)->copy_method,
					  memory_order_relaxed)
		   : KVA_CUDA_COPY_AUTO;
}

int kva_cuda_importer_cuda_error(const kva_cuda_importer *imp)
{
	return imp ? atomic_load_explicit(&((kva_cuda_importer *)imp)->last_cuda_error,
					  memory_order_relaxed)
		   : 0;
}
