/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvadmit importers: the two ready-made executors of the engine's copy jobs. Each copies
 * checkpoint page i of one rank's share into destination page job->pages[i] and reports the rank
 * with kva_copy_done(). CPU importer: worker threads doing memcpy, with injectable latency,
 * bandwidth and failures. CUDA importer: its own streams below the host's decode stream.
 * Usage: docs/importers.md; modes, memory rules, sticky errors, contexts: docs/embedding.md.
 *
 * Shutdown: stop calling kva_step(); destroy every importer (each reports every job it accepted
 * before it returns); then kva_engine_destroy(). An importer never outlives its engine.
 *
 * Synchronisation:
 *   *_create / *_destroy          nothing else may run on that importer
 *   *_ref().submit                the engine's scheduler thread (kva_step); never blocks
 *   *_wait_idle, *_stats          any thread
 *   kva_cpu_importer_set_failures any thread; applies to jobs submitted later
 *   kva_cuda_importer_progress    one thread at a time, manual mode only
 */
#ifndef KVADMIT_IMPORTER_H
#define KVADMIT_IMPORTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <kvadmit/kvadmit.h>

#ifdef __cplusplus
extern "C" {
#endif

/* kva_resolve_fn - find the host memory of one rank's share of a checkpoint: page i at
 * *src + i * page_bytes, *bytes long (the last page may be partial).
 * Thread: an importer's; may block briefly. The memory stays valid until the job is reported.
 * Returns: 0, or -errno: the job fails (the engine retries or falls back). */
typedef int (*kva_resolve_fn)(void *ctx, uint64_t checkpoint_id, uint64_t epoch, uint32_t rank,
			      const void **src, size_t *bytes);

/* kva_report_fn - called instead of kva_copy_done(), on an importer thread, with the job's
 * engine (NULL for jobs a host or benchmark submitted directly). */
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

/* kva_cpu_importer_config_default - 1 thread, rank 0, no injection; the page pool, page_bytes
 * and resolve are the host's to set. */
KVA_API void kva_cpu_importer_config_default(kva_cpu_importer_config *cfg);

/* kva_cpu_importer_create - start the workers.
 * Returns: the importer, or NULL and *err: -EINVAL (bad config), -ENOMEM, -EAGAIN (threads). */
KVA_API kva_cpu_importer *kva_cpu_importer_create(const kva_cpu_importer_config *cfg, int *err);

/* kva_cpu_importer_destroy - drain and free: jobs copying finish (injected latency cut short),
 * jobs not started are reported -ECANCELED; every accepted job is reported before it returns. */
KVA_API void kva_cpu_importer_destroy(kva_cpu_importer *imp);

/* kva_cpu_importer_ref - the reference to put in kva_config.importers[rank]. */
KVA_API kva_importer_ref kva_cpu_importer_ref(kva_cpu_importer *imp);

/* kva_cpu_importer_wait_idle - block until every accepted job was reported, or timeout_ns
 * passed (0 = forever).  Returns: 0, -ETIMEDOUT. */
KVA_API int kva_cpu_importer_wait_idle(kva_cpu_importer *imp, uint64_t timeout_ns);

KVA_API void kva_cpu_importer_stats(const kva_cpu_importer *imp, kva_importer_stats *out);

/* kva_cpu_importer_set_failures - injected failure rate and seed for jobs submitted from now on
 * (decided at submit, on the scheduler thread). */
KVA_API void kva_cpu_importer_set_failures(kva_cpu_importer *imp, double fail_rate, uint64_t seed);

/* kva_cpu_importer_fails - true when a job with this token for this rank fails under
 * (fail_rate, seed): a pure function, so runs are reproducible. A failing job copies the first
 * half of its pages, then reports -EIO. */
KVA_API bool kva_cpu_importer_fails(uint64_t seed, double fail_rate, kva_copy_token token, uint32_t rank);

/* ====================================================================== *
 * CUDA importer: in libkvadmit-cuda (kvadmit::cuda, pkg-config kvadmit-cuda), never in the
 * core. Built without CUDA, create returns -ENOTSUP; docs/embedding.md.
 * ====================================================================== */
typedef struct kva_cuda_importer kva_cuda_importer;

/* kva_cuda_importer_supported - true when this libkvadmit-cuda was built with CUDA (create can
 * succeed given a device). kva_has_feature(KVA_FEATURE_CUDA_IMPORTER) asks it. */
KVA_API bool kva_cuda_importer_supported(void);

/* How a job's completion is found; either way its status is the copies' real completion status
 * (their event), and a sticky CUDA error fails every outstanding job and kills the importer. */
enum kva_cuda_completion {
	/* cudaEventRecord + cudaLaunchHostFunc after the copies; the host function pushes the
	 * job and posts a semaphore (the progress thread also checks every 1 ms). */
	KVA_CUDA_COMPLETE_HOSTFUNC = 0,
	/* cudaEventRecord after the copies; the progress loop polls every 20 us. */
	KVA_CUDA_COMPLETE_EVENT = 1,
};

enum kva_cuda_copy_method {
	KVA_CUDA_COPY_AUTO = 0,	 /* BATCH where the runtime and driver have it, else RUNS */
	KVA_CUDA_COPY_RUNS = 1,	 /* one cudaMemcpyAsync per run of consecutive page ids */
	KVA_CUDA_COPY_BATCH = 2, /* one cudaMemcpyBatchAsync per job (CUDA >= 12.8) */
};

/* decode_stream and resolve's pinned memory: docs/importers.md, docs/embedding.md. */
typedef struct kva_cuda_importer_config {
	int device;		   /* CUDA device ordinal */
	uint32_t streams;	   /* import streams K, >= 1; jobs are spread round-robin */
	void *decode_stream;	   /* the host's decode cudaStream_t, only its priority is read;
				      NULL: the importer creates one (not the legacy stream) */
	bool allow_equal_priority; /* accept a decode stream already at the lowest
				      priority (imports then run at the same one) */
	uint32_t rank;		   /* the rank it serves */
	size_t page_bytes;	   /* bytes per page, > 0 */
	void *dest_base;	   /* device page pool: page p at dest_base + p * page_bytes */
	uint32_t dest_pages;
	kva_resolve_fn resolve; /* pinned memory, one allocation or registration per
				   share; otherwise the job fails -EFAULT */
	void *resolve_ctx;
	kva_report_fn report; /* NULL: kva_copy_done() */
	void *report_ctx;
	int completion;	      /* enum kva_cuda_completion */
	int copy_method;      /* enum kva_cuda_copy_method */
	bool manual_progress; /* true: no internal thread; call kva_cuda_importer_progress() */
} kva_cuda_importer_config;

/* kva_cuda_importer_config_default - device 0, 2 streams, host-function completion, AUTO
 * copies, an internal progress thread. */
KVA_API void kva_cuda_importer_config_default(kva_cuda_importer_config *cfg);

/* kva_cuda_importer_create - retain cfg->device's primary context (the thread's current one is
 * left as it was).  Returns: the importer, or NULL and *err (why: kva_cuda_importer_last_error):
 * -ENOTSUP, -ENODEV, -EINVAL (also a decode stream at the lowest priority), -ENOMEM, -EIO. */
KVA_API kva_cuda_importer *kva_cuda_importer_create(const kva_cuda_importer_config *cfg, int *err);

/* kva_cuda_importer_destroy - wait for issued copies and report them, report the rest failed,
 * free everything; every accepted job is reported once, also after a sticky CUDA error. */
KVA_API void kva_cuda_importer_destroy(kva_cuda_importer *imp);

KVA_API kva_importer_ref kva_cuda_importer_ref(kva_cuda_importer *imp);

/* kva_cuda_importer_progress - manual mode: issue queued jobs, report finished ones.
 * Thread: one at a time.  Cost: never blocks on the device (queries only).
 * Returns: jobs reported, -EINVAL (not manual), -EIO (context not current: nothing done). */
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

/* kva_cuda_importer_last_error - why this thread's last create failed ("" after a success);
 * *cuda_error (may be NULL) gets the raw cudaError_t, 0 when not a CUDA failure. */
KVA_API const char *kva_cuda_importer_last_error(int *cuda_error);

#ifdef __cplusplus
}
#endif
#endif
