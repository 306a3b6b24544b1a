/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvadmit importers: the two ready-made executors of the engine's copy jobs.
 *
 * The engine hands each rank's share of a copy job to the importer registered
 * for that rank (kva_config.importers[rank]); the importer copies checkpoint
 * page i of that rank's share into destination page job->pages[i] and reports
 * the rank's result with kva_copy_done(). Two implementations:
 *
 *   CPU importer   a pool of worker threads doing memcpy into a host page
 *                  pool, with optional injected latency, bandwidth limit and
 *                  failure rate (deterministic under a seed). For tests, the
 *                  simulator's real-copy mode and machines without a GPU.
 *   CUDA importer  its own non-blocking streams, at a lower priority than the
 *                  host's decode stream, copying from pinned (or
 *                  cudaHostRegister'ed) host memory into device pages. It
 *                  never synchronises the device and never enqueues anything
 *                  on the decode stream.
 *
 * Both take job intake through a lock-free inbox: the submit callback the
 * engine calls inside kva_step() allocates one record and pushes it, and never
 * blocks. Checkpoint sources are found by the host's resolve callback, called
 * on an importer thread (never on the scheduler thread unless the host drives
 * a CUDA importer with kva_cuda_importer_progress() from it).
 *
 * Shutdown order (the engine's destroy contract): stop calling kva_step();
 * destroy every importer — each reports every job it accepted with
 * kva_copy_done() before its destroy returns (a job that had not started is
 * reported as failed); then kva_engine_destroy(). An importer must never
 * outlive its engine, and the engine must not call an importer's submit after
 * that importer's destroy has begun.
 *
 * Thread contract per call:
 *   *_create / *_destroy          nothing else may run on that importer
 *   *_ref().submit                the engine's scheduler thread (kva_step)
 *   *_wait_idle, *_stats          any thread
 *   kva_cpu_importer_set_failures any thread; applies to jobs submitted later
 *   kva_cuda_importer_progress    one thread at a time, manual mode only
 */
#ifndef KVADMIT_IMPORTER_H
#define KVADMIT_IMPORTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvadmit/kvadmit.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Finds the host memory of one rank's share of a checkpoint: checkpoint page
 * i starts at *src + i * page_bytes and the share is *bytes long (the last
 * page may be partial). Returns 0, or a negative errno: the job then fails
 * (the engine retries or falls back). Called on an importer thread; it may
 * block briefly (a checkpoint store may have to pin or fetch), and it must
 * stay valid (not be freed or evicted) until that job has been reported. */
typedef int (*kva_resolve_fn)(void *ctx, uint64_t checkpoint_id, uint64_t epoch, uint32_t rank,
			      const void **src, size_t *bytes);

/* Optional replacement for kva_copy_done(): the importer calls it instead,
 * on an importer thread, with the engine pointer the job came with (which may
 * be NULL when a host or benchmark submits jobs directly). */
typedef void (*kva_report_fn)(void *ctx, kva_engine *e, const kva_copy_job *job, int status);

/* Counters of one importer; any thread, atomics only. Once idle:
 * jobs_submitted == jobs_ok + jobs_failed + jobs_cancelled. */
typedef struct kva_importer_stats {
	uint64_t jobs_submitted; /* accepted by submit */
	uint64_t jobs_refused;	 /* submit returned an error (not counted above) */
	uint64_t jobs_ok;	 /* reported with status 0 */
	uint64_t jobs_failed;	 /* reported failed: injected, resolve or CUDA errors */
	uint64_t jobs_injected;	 /* of jobs_failed: injected failures (CPU importer) */
	uint64_t jobs_cancelled; /* reported failed by destroy before they ran */
	uint64_t pages_copied;	 /* pages of successful jobs */
	uint64_t bytes_copied;	 /* bytes of successful jobs */
	uint64_t copy_calls;	 /* memcpy / cudaMemcpyAsync / batch calls issued */
	uint64_t busy_ns;	 /* worker time spent on jobs (CPU importer) */
	uint64_t in_flight;	 /* accepted, not yet reported */
} kva_importer_stats;

/* ====================================================================== *
 * CPU importer
 * ====================================================================== */
typedef struct kva_cpu_importer kva_cpu_importer;

typedef struct kva_cpu_importer_config {
	uint32_t threads;    /* worker threads, >= 1 */
	uint32_t rank;	     /* the rank it serves; jobs for another rank are refused */
	size_t page_bytes;   /* bytes per page, > 0 */
	void *dest_base;     /* host page pool: page p at dest_base + p * page_bytes */
	uint32_t dest_pages; /* pages in the pool; a job naming a page >= this fails */
	kva_resolve_fn resolve;
	void *resolve_ctx;
	kva_report_fn report; /* NULL: kva_copy_done() */
	void *report_ctx;
	/* fault and speed injection */
	uint64_t latency_ns;		/* added to every job before it copies */
	uint64_t bandwidth_bytes_per_s; /* copy pace per worker; 0 = memcpy speed */
	double fail_rate;		/* 0..1: share of jobs that fail */
	uint64_t seed;			/* failure decisions: kva_cpu_importer_fails() */
} kva_cpu_importer_config;

/* Fills *cfg with defaults: 1 thread, rank 0, no injection. The page pool,
 * page_bytes and resolve still have to be set. */
KVA_API void kva_cpu_importer_config_default(kva_cpu_importer_config *cfg);

/* Starts the workers. Returns NULL and *err < 0 on failure: -EINVAL (bad
 * config), -ENOMEM, -EAGAIN (threads). */
KVA_API kva_cpu_importer *kva_cpu_importer_create(const kva_cpu_importer_config *cfg, int *err);

/* Drains: jobs already copying finish (their remaining injected latency is
 * cut short), jobs not started are reported failed (-ECANCELED); every
 * accepted job is reported before this returns. Frees everything. */
KVA_API void kva_cpu_importer_destroy(kva_cpu_importer *imp);

/* The reference to put in kva_config.importers[rank]. */
KVA_API kva_importer_ref kva_cpu_importer_ref(kva_cpu_importer *imp);

/* Blocks until every accepted job has been reported, or timeout_ns passed
 * (0 = forever). 0 or -ETIMEDOUT. */
KVA_API int kva_cpu_importer_wait_idle(kva_cpu_importer *imp, uint64_t timeout_ns);

KVA_API void kva_cpu_importer_stats(const kva_cpu_importer *imp, kva_importer_stats *out);

/* Changes the injected failure rate and seed for jobs submitted from now on
 * (the decision is taken at submit, on the scheduler thread). */
KVA_API void kva_cpu_importer_set_failures(kva_cpu_importer *imp, double fail_rate, uint64_t seed);

/* The failure decision, a pure function of (seed, token, rank): true when a
 * job with this token for this rank fails under (fail_rate, seed). Independent
 * of thread timing, so runs are reproducible and tests can predict them.
 * An injected failure copies the first half of the job's pages (rounded
 * down) and then reports -EIO, so a retry must overwrite stale bytes. */
KVA_API bool kva_cpu_importer_fails(uint64_t seed, double fail_rate, kva_copy_token token, uint32_t rank);

/* ====================================================================== *
 * CUDA importer
 *
 * Defined by its own library, libkvadmit-cuda (CMake kvadmit::cuda,
 * pkg-config kvadmit-cuda), which a host links beside libkvadmit when it
 * imports with CUDA; the core library never depends on libcudart. The
 * library exists in every build: built without CUDA, create returns
 * -ENOTSUP. Without a usable device create returns -ENODEV; the message and
 * the raw cudaError_t of the failure stay retrievable with
 * kva_cuda_importer_last_error() on the calling thread.
 * ====================================================================== */
typedef struct kva_cuda_importer kva_cuda_importer;

/* True when this libkvadmit-cuda was built with the CUDA toolkit (create can
 * succeed given a device), false in a build without CUDA. The core's
 * kva_has_feature(KVA_FEATURE_CUDA_IMPORTER) asks it through a weak
 * reference: false when no CUDA library is linked or loaded with the core. */
KVA_API bool kva_cuda_importer_supported(void);

/* In both modes a job's status is its copies' real completion status (the
 * event recorded after them, read with cudaEventQuery), not only the result
 * of enqueueing them: an asynchronous copy error reports the job failed. A
 * sticky CUDA error (the context is corrupted; host functions stop running)
 * reports every outstanding job failed at once and makes the importer dead:
 * later submits return -EIO (the engine counts the rank failed, retries,
 * then falls back), kva_cuda_importer_cuda_error() names the error, destroy
 * still returns. Sticky means one that driver_types.h documents as
 * corrupting the context, or one that cudaGetLastError() cannot clear;
 * any other error (cudaErrorDevicesUnavailable, cudaErrorUnknown, ...)
 * fails only the job that met it. The progress thread's waits use
 * CLOCK_MONOTONIC. */
enum kva_cuda_completion {
	/* cudaEventRecord, then cudaLaunchHostFunc after a job's copies; the
	 * host function only pushes the job onto a lock-free inbox and posts a
	 * semaphore, and the job is reported with its event's status. While
	 * jobs are outstanding the progress thread also wakes every 1 ms to
	 * look for a sticky error (after one, no host function comes). */
	KVA_CUDA_COMPLETE_HOSTFUNC = 0,
	/* cudaEventRecord after a job's copies; the progress loop polls
	 * cudaEventQuery every 20 us, oldest first per stream. */
	KVA_CUDA_COMPLETE_EVENT = 1,
};

enum kva_cuda_copy_method {
	KVA_CUDA_COPY_AUTO = 0,	 /* BATCH where the runtime and driver have it, else RUNS */
	KVA_CUDA_COPY_RUNS = 1,	 /* one cudaMemcpyAsync per run of consecutive page ids */
	KVA_CUDA_COPY_BATCH = 2, /* one cudaMemcpyBatchAsync per job (CUDA >= 12.8) */
};

/* decode_stream: the importer only reads its priority (cudaStreamGetPriority)
 * to create its import streams below it, and never enqueues on it. NULL does
 * NOT mean the legacy default stream (cudaStream_t 0): it makes the importer
 * create an unused decode stream of its own at the highest priority (for
 * tests and benchmarks; kva_cuda_importer_decode_stream() returns it). A host
 * that decodes on a default stream passes its explicit handle,
 * cudaStreamLegacy or cudaStreamPerThread; a default stream has priority 0,
 * the lowest on current GPUs, so create then also needs
 * allow_equal_priority (and fails with -EINVAL where the runtime does not
 * answer the priority query for that handle).
 *
 * resolve: each share must lie in pinned memory, one cudaHostAlloc
 * allocation or one cudaHostRegister registration covering all of it. The
 * importer checks the first and the last byte it copies
 * (cudaPointerGetAttributes) and fails the job with -EFAULT when either is
 * pageable, device or managed memory; a share split over several
 * registrations is not detected, and its copies may then be staged through
 * pageable memory or fail. */
typedef struct kva_cuda_importer_config {
	int device;		   /* CUDA device ordinal */
	uint32_t streams;	   /* import streams K, >= 1; jobs are spread round-robin */
	void *decode_stream;	   /* the host's decode cudaStream_t; NULL: the importer
				      creates one (see above; not the legacy stream) */
	bool allow_equal_priority; /* accept a decode stream already at the lowest
				      priority (imports then run at the same one) */
	uint32_t rank;		   /* the rank it serves */
	size_t page_bytes;	   /* bytes per page, > 0 */
	void *dest_base;	   /* device page pool: page p at dest_base + p * page_bytes */
	uint32_t dest_pages;
	kva_resolve_fn resolve; /* pinned memory, one allocation or registration per
				   share (see above) */
	void *resolve_ctx;
	kva_report_fn report; /* NULL: kva_copy_done() */
	void *report_ctx;
	int completion;	      /* enum kva_cuda_completion */
	int copy_method;      /* enum kva_cuda_copy_method */
	bool manual_progress; /* true: no internal thread; call kva_cuda_importer_progress() */
} kva_cuda_importer_config;

/* Defaults: device 0, 2 streams, host-function completion, AUTO copies,
 * an internal progress thread. */
KVA_API void kva_cuda_importer_config_default(kva_cuda_importer_config *cfg);

/* NULL and *err < 0 on failure: -ENOTSUP (built without CUDA), -ENODEV (no
 * device / driver too old / bad ordinal), -EINVAL (bad config, or a decode
 * stream that already has the lowest priority), -ENOMEM, -EIO (other CUDA
 * errors).
 *
 * The importer's CUDA work runs in cfg->device's primary context, which it
 * retains until destroy. create, destroy and kva_cuda_importer_progress
 * leave the calling thread's current context as they found it: the same
 * context (a driver-API one too), or none. They never call cudaSetDevice,
 * so a thread that never chose a device gets no context, on device 0 or
 * any other. */
KVA_API kva_cuda_importer *kva_cuda_importer_create(const kva_cuda_importer_config *cfg, int *err);

/* Waits for the copies already issued (on the import streams only), reports
 * them, reports jobs not yet issued as failed, frees streams and events.
 * Every accepted job is reported exactly once before it returns, and it
 * returns also after a sticky CUDA error. */
KVA_API void kva_cuda_importer_destroy(kva_cuda_importer *imp);

KVA_API kva_importer_ref kva_cuda_importer_ref(kva_cuda_importer *imp);

/* Manual mode: issues queued jobs and reports finished ones; never blocks on
 * the device: it only queries events and streams (a job whose completion
 * marker or event could not be enqueued is reported once a query shows its
 * copies stopped). Returns the number of jobs reported, -EINVAL (not
 * manual), or -EIO when the importer's context cannot be made current on
 * this thread (the driver is shutting down); nothing was done then. */
KVA_API int kva_cuda_importer_progress(kva_cuda_importer *imp);

/* As kva_cpu_importer_wait_idle (in manual mode it progresses itself). */
KVA_API int kva_cuda_importer_wait_idle(kva_cuda_importer *imp, uint64_t timeout_ns);

KVA_API void kva_cuda_importer_stats(const kva_cuda_importer *imp, kva_importer_stats *out);

/* The decode stream the importer was given or created (a cudaStream_t). */
KVA_API void *kva_cuda_importer_decode_stream(const kva_cuda_importer *imp);

/* The copy method in use after AUTO was resolved (enum kva_cuda_copy_method). */
KVA_API int kva_cuda_importer_copy_method(const kva_cuda_importer *imp);

/* Last CUDA error an importer met (a cudaError_t value, 0 if none). */
KVA_API int kva_cuda_importer_cuda_error(const kva_cuda_importer *imp);

/* Why the last kva_cuda_importer_create() on this thread failed (a static
 * or thread-local string, "" after a success); *cuda_error (may be NULL)
 * receives the raw cudaError_t, 0 when the failure was not a CUDA one (the
 * driver's CUresult when retaining the primary context failed; the message
 * says so). */
KVA_API const char *kva_cuda_importer_last_error(int *cuda_error);

#ifdef __cplusplus
}
#endif
#endif
