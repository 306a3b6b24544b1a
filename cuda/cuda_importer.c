/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CUDA importer (see include/kvadmit/importer.h for the contract).
 *
 * Owns: K non-blocking import streams created below the decode stream's
 * priority, the intake inbox (the engine's scheduler thread pushes one record
 * per job and posts a semaphore — nothing else happens inside kva_step), the
 * done inbox filled by host functions, an event pool (event-polling mode),
 * the progress thread, and every job record until it has been reported.
 *
 * The progress loop (the internal thread, or the host through
 * kva_cuda_importer_progress) resolves a job's source, checks that it is
 * pinned, and enqueues its copies on one import stream: one cudaMemcpyAsync
 * per run of consecutive destination ids, or one cudaMemcpyBatchAsync for the
 * whole job. Then an event (cudaEventRecord) that carries the copies' real
 * completion status, and in host-function mode a completion marker:
 * cudaLaunchHostFunc, whose function only pushes the job onto the done
 * inbox and posts the semaphore (host functions must not call CUDA).
 * Results are reported from the progress loop, never from a CUDA callback,
 * with the status cudaEventQuery reads (an asynchronous copy error is
 * reported, not only the enqueue result). It never calls
 * cudaDeviceSynchronize and never enqueues on or waits for the decode
 * stream; only at destroy does it wait on its own import streams.
 *
 * When to report is completion.h's state machine (issued jobs in a FIFO per
 * import stream, markers, statuses). A sticky error (a corrupted context:
 * host functions stop running) reports every outstanding job as failed and
 * makes the importer dead: later submits are refused with -EIO, so the
 * engine retries and falls back as on any failed copy. In host-function
 * mode the loop wakes every millisecond (CLOCK_MONOTONIC) while jobs are
 * outstanding to look for one; event mode polls every 20 us.
 *
 * CUDA calls run in the device's primary context, made current with the
 * driver's cuCtxSetCurrent around them on a host thread (create, manual
 * progress, destroy), which then gets back exactly the context it had,
 * none included (see "the calling thread's context" below).
 *
 * tests/cuda/ runs this file on a CPU fake of the runtime and driver calls
 * it makes (fault injection, context bookkeeping), in every build.
 */
#define _GNU_SOURCE 1
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda.h> /* the driver's types only: its functions come through the runtime */
#include <cuda_runtime_api.h>

#include "import_common.h"

struct kva_cuda_importer {
	kva_cuda_importer_config cfg;
	/* producer side: the scheduler thread */
	alignas(64) struct kva_inbox intake;
	/* producers: host functions on CUDA's callback thread */
	alignas(64) struct kva_inbox done;
	alignas(64) sem_t wake; /* submit, host functions and destroy post it */
	_Atomic bool stop;
	_Atomic int cuda_err; /* last cudaError_t met */
	_Atomic int method;   /* resolved enum kva_cuda_copy_method */
	_Atomic bool dead;    /* a sticky CUDA error: submits are refused */
	CUcontext ctx;	      /* cfg.device's primary context, retained */
	CUdevice cudev;
	/* everything below: the progress loop only (one thread at a time) */
	cudaStream_t *streams;
	uint32_t nstreams, next_stream;
	cudaStream_t decode;
	bool own_decode;
	struct kva__cq_node **fifo_head, **fifo_tail; /* per stream, owned by cq */
	struct kva__cq cq;
	cudaEvent_t *ev_free;
	uint32_t ev_n, ev_cap;
	void **b_dst;
	const void **b_src;
	size_t *b_size;
	uint32_t b_cap;
	pthread_mutex_t progress_mtx; /* manual mode: serialises progress callers */
	pthread_t thread;
	bool has_thread;
	struct kva__idle idle;
	struct kva__imp_stats st;
};

/* ---- errors ------------------------------------------------------------------ */

static _Thread_local char last_msg[256];
static _Thread_local int last_cuda;

static int errno_of(cudaError_t e)
{
	switch (e) {
	case cudaSuccess:
		return 0;
	case cudaErrorNoDevice:
	case cudaErrorInsufficientDriver:
	case cudaErrorInvalidDevice:
	case cudaErrorDevicesUnavailable:
	case cudaErrorCallRequiresNewerDriver:
	case cudaErrorSystemDriverMismatch:
	case cudaErrorCompatNotSupportedOnDevice:
		return -ENODEV;
	case cudaErrorMemoryAllocation:
		return -ENOMEM;
	case cudaErrorInvalidValue:
	case cudaErrorInvalidResourceHandle:
		return -EINVAL;
	case cudaErrorNotSupported:
		return -ENOTSUP;
	default:
		return -EIO;
	}
}

/* Records a create failure for kva_cuda_importer_last_error(). */
static int create_fail(int rc, cudaError_t ce, const char *what)
{
	last_cuda = (int)ce;
	if (ce != cudaSuccess)
		snprintf(last_msg, sizeof(last_msg),
			 "kvadmit CUDA importer: %s: %s (%s, cudaError_t %d)", what,
			 cudaGetErrorString(ce), cudaGetErrorName(ce), (int)ce);
	else
		snprintf(last_msg, sizeof(last_msg), "kvadmit CUDA importer: %s", what);
	return rc;
}

const char *kva_cuda_importer_last_error(int *cuda_error)
{
	if (cuda_error)
		*cuda_error = last_cuda;
	return last_msg;
}

static void note_error(kva_cuda_importer *imp, cudaError_t ce)
{
	/* a diagnostic value only */
	atomic_store_explicit(&imp->cuda_err, (int)ce, memory_order_relaxed);
	/* clears a non-sticky error so later calls are not blamed for it */
	(void)cudaGetLastError();
}

/* ---- the calling thread's context --------------------------------------------------- */

/*
 * importer.h promises that create, destroy and manual progress leave the
 * calling thread as they found it. A thread's CUDA state is its current
 * context, on which every runtime call works. cudaGetDevice/cudaSetDevice
 * cannot put that back: a thread that never chose a device reads 0, and
 * cudaSetDevice(0) then creates device 0's primary context (hundreds of MiB
 * of that GPU; refused in exclusive-process mode) and binds it; a driver-API
 * context the host had current would be replaced by a primary one. So the
 * importer retains cfg.device's primary context (cuDevicePrimaryCtxRetain,
 * after cudaInitDevice so that device errors come as cudaError_t), makes it
 * current with cuCtxSetCurrent around its own calls, and then restores what
 * cuCtxGetCurrent returned before, NULL included. It never calls
 * cudaSetDevice on a host thread, so the runtime's own per-thread device
 * choice is left alone too.
 *
 * The driver functions are found through the runtime
 * (cudaGetDriverEntryPoint*) instead of linking libcuda: libcuda.so.1 comes
 * with the NVIDIA driver, not with the toolkit, so a link to it would stop
 * libkvadmit-cuda from loading at all on a host without the driver, where
 * create must fail with -ENODEV instead (libcudart loads the driver only
 * when first called).
 */
#if CUDART_VERSION < 11030
#error "the CUDA importer needs CUDA 11.3 or newer (cudaGetDriverEntryPoint)"
#endif

static struct {
	CUresult(CUDAAPI *ctx_get)(CUcontext *);
	CUresult(CUDAAPI *ctx_set)(CUcontext);
	CUresult(CUDAAPI *dev_get)(CUdevice *, int);
	CUresult(CUDAAPI *retain)(CUcontext *, CUdevice);
	CUresult(CUDAAPI *release)(CUdevice);
	cudaError_t err; /* why a lookup failed; cudaSuccess when all were found */
} drv;
static pthread_once_t drv_once = PTHREAD_ONCE_INIT;

static void *drv_sym(const char *name)
{
	void *fn = NULL;
	cudaError_t ce;
	bool found = true;
#if CUDART_VERSION >= 12050
	enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
	/* 12.0: every driver that runs this runtime has it (a version newer
	 * than the driver fails), and it names these functions' current ABI
	 * (e.g. cuDevicePrimaryCtxRelease_v2) */
	ce = cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q);
	found = q == cudaDriverEntryPointSuccess;
#elif CUDART_VERSION >= 12000
	enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
	ce = cudaGetDriverEntryPoint(name, &fn, cudaEnableDefault, &q);
	found = q == cudaDriverEntryPointSuccess;
#else
	ce = cudaGetDriverEntryPoint(name, &fn, cudaEnableDefault);
#endif
	if (ce == cudaSuccess && found && fn)
		return fn;
	if (drv.err == cudaSuccess)
		drv.err = ce != cudaSuccess ? ce : cudaErrorSymbolNotFound;
	(void)cudaGetLastError();
	return NULL;
}

/* Once per process. The pointers are read only after create's
 * pthread_once returned, by its caller or by threads that got the importer
 * from it (which orders them after it). */
static void drv_load(void)
{
	drv.ctx_get = (CUresult(CUDAAPI *)(CUcontext *))drv_sym("cuCtxGetCurrent");
	drv.ctx_set = (CUresult(CUDAAPI *)(CUcontext))drv_sym("cuCtxSetCurrent");
	drv.dev_get = (CUresult(CUDAAPI *)(CUdevice *, int))drv_sym("cuDeviceGet");
	drv.retain = (CUresult(CUDAAPI *)(CUcontext *, CUdevice))drv_sym("cuDevicePrimaryCtxRetain");
	drv.release = (CUresult(CUDAAPI *)(CUdevice))drv_sym("cuDevicePrimaryCtxRelease");
}

/* What a host thread's context goes back to. */
struct ctx_saved {
	CUcontext prev;
	bool switched;
};

/* Makes imp's context current on the calling thread. false when the
 * driver cannot say which context is current or cannot switch (it is
 * shutting down): nothing was changed then. */
static bool ctx_enter(const kva_cuda_importer *imp, struct ctx_saved *sv)
{
	sv->prev = NULL;
	sv->switched = false;
	if (drv.ctx_get(&sv->prev) != CUDA_SUCCESS)
		return false;
	if (sv->prev == imp->ctx)
		return true;
	if (drv.ctx_set(imp->ctx) != CUDA_SUCCESS)
		return false;
	sv->switched = true;
	return true;
}

static void ctx_leave(struct ctx_saved *sv)
{
	if (sv->switched)
		(void)drv.ctx_set(sv->prev);
}

/* ---- events ---------------------------------------------------------------------- */

static cudaEvent_t event_get(kva_cuda_importer *imp)
{
	if (imp->ev_n)
		return imp->ev_free[--imp->ev_n];
	cudaEvent_t ev = NULL;
	cudaError_t ce = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
	if (ce != cudaSuccess) {
		note_error(imp, ce);
		return NULL;
	}
	return ev;
}

static void event_put(kva_cuda_importer *imp, cudaEvent_t ev)
{
	if (!ev)
		return;
	if (imp->ev_n == imp->ev_cap) {
		uint32_t cap = imp->ev_cap ? imp->ev_cap * 2 : 16;
		cudaEvent_t *p = realloc(imp->ev_free, cap * sizeof(*p));
		if (!p) {
			cudaEventDestroy(ev);
			return;
		}
		imp->ev_free = p;
		imp->ev_cap = cap;
	}
	imp->ev_free[imp->ev_n++] = ev;
}

/* ---- reporting ---------------------------------------------------------------------- */

/* Reports j (counts it, kva_copy_done or the override) and ends its
 * in-flight count; its record may live on until its marker comes. */
static void report(kva_cuda_importer *imp, struct kva__imp_job *j, int status, bool cancelled)
{
	if (status == 0 && !cancelled) {
		kva__is_add(&imp->st, KVA__IS_PAGES, j->job.npages);
		kva__is_add(&imp->st, KVA__IS_BYTES, j->bytes);
	}
	kva__imp_report(imp->cfg.report, imp->cfg.report_ctx, &imp->st, j,
			cancelled ? -ECANCELED : status, cancelled);
	kva__idle_done(&imp->idle);
}

static void release(kva_cuda_importer *imp, struct kva__imp_job *j)
{
	event_put(imp, j->event);
	kva__imp_job_free(j);
}

/* A job that never reached a stream (or waited for its own stream). */
static void finish(kva_cuda_importer *imp, struct kva__imp_job *j, bool cancelled)
{
	report(imp, j, j->status, cancelled);
	release(imp, j);
}

/* ---- completion (completion.h's callbacks) ------------------------------------------ */

static struct kva__imp_job *job_of(struct kva__cq_node *n)
{
	return caa_container_of(n, struct kva__imp_job, cq);
}

/* Errors after which nothing the importer queued can complete: every later
 * call fails the same way and host functions no longer run. The list is the
 * codes driver_types.h documents as corrupting the context ("the process must
 * be terminated and relaunched"), plus a context destroyed under the importer
 * and a runtime being unloaded. Transient ones (cudaErrorDevicesUnavailable:
 * "busy or unavailable at the current time") and undocumented ones
 * (cudaErrorUnknown) are not listed: they are sticky only if they survive
 * being cleared, else they fail one job and the importer goes on. */
static bool sticky(cudaError_t ce)
{
	/* by value: the newest codes are not named in older toolkits' headers */
	switch ((int)ce) {
	case cudaErrorIllegalAddress:
	case cudaErrorLaunchFailure:
	case cudaErrorHardwareStackError:
	case cudaErrorIllegalInstruction:
	case cudaErrorMisalignedAddress:
	case cudaErrorInvalidAddressSpace:
	case cudaErrorInvalidPc:
	case cudaErrorAssert:
	case cudaErrorLaunchTimeout:
	case cudaErrorMpsClientTerminated:
	case 226: /* cudaErrorContained */
	case 721: /* cudaErrorTensorMemoryLeak */
	case 911: /* cudaErrorExternalDevice */
	case cudaErrorContextIsDestroyed:
	case cudaErrorCudartUnloading:
		return true;
	default:
		/* not a known one: sticky if it survives being cleared */
		(void)cudaGetLastError();
		return cudaPeekAtLastError() != cudaSuccess;
	}
}

/* A job with neither event nor marker (both failed to be enqueued; it
 * reports failed): done once its copies can no longer write its pages,
 * i.e. its stream is idle, or a later job on that stream (n->next is the
 * rest of this stream's FIFO) shows the stream got past them: its event
 * completed, or its host function ran. A stream kept busy reaches that
 * without ever going idle. */
static cudaError_t fence_query(kva_cuda_importer *imp, struct kva__cq_node *n)
{
	cudaError_t ce = cudaStreamQuery(imp->streams[n->stream]);
	if (ce != cudaErrorNotReady)
		return ce;
	for (struct kva__cq_node *m = n->next; m; m = m->next) {
		struct kva__imp_job *k = job_of(m);
		if (m->marked && !m->nomarker)
			return cudaSuccess;
		if (!k->event)
			continue;
		cudaError_t ke = cudaEventQuery((cudaEvent_t)k->event);
		if (ke == cudaSuccess)
			return cudaSuccess;
		if (ke != cudaErrorNotReady)
			note_error(imp, ke); /* k's own query reports it */
		break;
	}
	return cudaErrorNotReady;
}

static int cq_query(void *ctx, struct kva__cq_node *n, int *err)
{
	kva_cuda_importer *imp = ctx;
	struct kva__imp_job *j = job_of(n);
	cudaError_t ce;
	if (j->event) {
		ce = cudaEventQuery((cudaEvent_t)j->event);
	} else if (n->nomarker) {
		ce = fence_query(imp, n);
	} else {
		/* Without an event (none could be created), the stream says at
		 * least whether the context still works; the marker says the
		 * copies ran. */
		ce = cudaStreamQuery(imp->streams[n->stream]);
		if (ce == cudaErrorNotReady && n->marked)
			return KVA__CQ_DONE;
	}
	if (ce == cudaErrorNotReady)
		return KVA__CQ_PENDING;
	if (ce == cudaSuccess)
		return KVA__CQ_DONE;
	bool st = sticky(ce);
	note_error(imp, ce);
	*err = errno_of(ce) ? errno_of(ce) : -EIO;
	return st ? KVA__CQ_STICKY : KVA__CQ_FAILED;
}

/* Issue path: a sticky error met while enqueueing kills the importer too
 * (every outstanding job fails; later ones are refused). Returns the
 * reports that made. */
static uint32_t check_sticky(kva_cuda_importer *imp, cudaError_t ce)
{
	if (ce != cudaSuccess && ce != cudaErrorNotReady && !imp->cq.dead && sticky(ce))
		return kva__cq_kill(&imp->cq, errno_of(ce));
	return 0;
}

static void cq_report(void *ctx, struct kva__cq_node *n, int status)
{
	report(ctx, job_of(n), status, false);
}

static void cq_release(void *ctx, struct kva__cq_node *n)
{
	release(ctx, job_of(n));
}

/* ---- issuing copies --------------------------------------------------------------------- */

static void CUDART_CB host_done(void *arg)
{
	/* Runs on CUDA's callback thread: no CUDA calls here, only a wait-free
	 * push (the inbox publishes the record, R1/A1 in inbox.c) and a post. */
	struct kva__imp_job *j = arg;
	kva_cuda_importer *imp = j->owner;
	kva_inbox_push(&imp->done, &j->node);
	if (!imp->cfg.manual_progress)
		sem_post(&imp->wake);
}

static bool batch_room(kva_cuda_importer *imp, uint32_t n)
{
	if (n <= imp->b_cap)
		return true;
	void **d = realloc(imp->b_dst, n * sizeof(*d));
	if (d)
		imp->b_dst = d;
	const void **s = realloc((void *)imp->b_src, n * sizeof(*s));
	if (s)
		imp->b_src = s;
	size_t *z = realloc(imp->b_size, n * sizeof(*z));
	if (z)
		imp->b_size = z;
	if (!d || !s || !z)
		return false;
	imp->b_cap = n;
	return true;
}

static bool batch_unsupported(cudaError_t ce)
{
	return ce == cudaErrorNotSupported || ce == cudaErrorCallRequiresNewerDriver ||
	       ce == cudaErrorInvalidDeviceFunction;
}

/* Enqueues j's copies on stream s. Returns cudaSuccess or the first error;
 * copies enqueued before an error still run. */
static cudaError_t enqueue_copies(kva_cuda_importer *imp, struct kva__imp_job *j, const char *src,
				  size_t bytes, cudaStream_t s)
{
	const size_t pb = imp->cfg.page_bytes;
	char *dst = imp->cfg.dest_base;
	const uint32_t n = j->job.npages;
	uint32_t runs = 0;
	size_t total = 0;
	int method = atomic_load_explicit(&imp->method, memory_order_relaxed);
	bool batch = method == KVA_CUDA_COPY_BATCH && batch_room(imp, n);
	cudaError_t ce = cudaSuccess;
	for (uint32_t i = 0; i < n && ce == cudaSuccess;) {
		uint32_t run = kva__imp_run(j->ids, n, i);
		size_t off = (size_t)i * pb;
		size_t len = (size_t)run * pb;
		if (len > bytes - off)
			len = bytes - off; /* the share's last page may be partial */
		if (batch) {
			imp->b_dst[runs] = dst + (size_t)j->ids[i] * pb;
			imp->b_src[runs] = src + off;
			imp->b_size[runs] = len;
		} else {
			ce = cudaMemcpyAsync(dst + (size_t)j->ids[i] * pb, src + off, len,
					     cudaMemcpyHostToDevice, s);
			kva__is_add(&imp->st, KVA__IS_CALLS, 1);
		}
		runs++;
		total += len;
		i += run;
	}
#if CUDART_VERSION >= 12080
	if (batch && runs == 1) {
		ce = cudaMemcpyAsync(imp->b_dst[0], imp->b_src[0], imp->b_size[0],
				     cudaMemcpyHostToDevice, s);
		kva__is_add(&imp->st, KVA__IS_CALLS, 1);
	} else if (batch) {
		struct cudaMemcpyAttributes attr;
		memset(&attr, 0, sizeof(attr));
		attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
		attr.flags = cudaMemcpyFlagPreferOverlapWithCompute;
		size_t idx0 = 0;
#if CUDART_VERSION >= 13000
		ce = cudaMemcpyBatchAsync(imp->b_dst, imp->b_src, imp->b_size, runs, &attr, &idx0,
					  1, s);
#else
		size_t fail_idx = 0;
		ce = cudaMemcpyBatchAsync(imp->b_dst, (void **)imp->b_src, imp->b_size, runs, &attr,
					  &idx0, 1, &fail_idx, s);
#endif
		kva__is_add(&imp->st, KVA__IS_CALLS, 1);
		if (batch_unsupported(ce)) {
			/* this driver lacks batched copies: per-run copies from now on */
			note_error(imp, ce);
			atomic_store_explicit(&imp->method, KVA_CUDA_COPY_RUNS,
					      memory_order_relaxed);
			return enqueue_copies(imp, j, src, bytes, s);
		}
	}
#endif
	j->bytes = total;
	return ce;
}

/* The job's source must be pinned memory (cudaHostAlloc or
 * cudaHostRegister): a pageable source makes every copy a synchronous staged
 * one, which would block this loop, and device or managed memory is not what
 * the copy kind says. cudaPointerGetAttributes describes one address, not a
 * range, so the first and the last byte the copies read are both checked:
 * a registration that ends before the share does is refused. (A share that
 * spans several registrations with both ends pinned is not detected;
 * importer.h asks for one allocation or registration per share.) */
static int src_pinned(kva_cuda_importer *imp, const struct kva__imp_job *j, const char *src,
		      size_t bytes, int *reports)
{
	size_t end = (size_t)j->job.npages * imp->cfg.page_bytes;
	if (end > bytes)
		end = bytes; /* the last page may be partial */
	const char *at[2] = {src, src + end - 1};
	for (int k = 0; k < (end > 1 ? 2 : 1); k++) {
		struct cudaPointerAttributes pa;
		cudaError_t ce = cudaPointerGetAttributes(&pa, at[k]);
		if (ce != cudaSuccess) {
			*reports += (int)check_sticky(imp, ce);
			note_error(imp, ce);
			return -EFAULT;
		}
		if (pa.type != cudaMemoryTypeHost)
			return -EFAULT;
	}
	return 0;
}

/* A job whose copies are enqueued but that gets no completion marker: it
 * waits in its stream's FIFO like the others (never for the stream here,
 * so that manual progress never blocks on the device), and its query
 * alone says when it is done: its event's status, or, without an event,
 * fence_query. */
static void push_nomarker(kva_cuda_importer *imp, struct kva__imp_job *j)
{
	j->cq.status = j->status;
	j->cq.nomarker = true;
	kva__cq_push(&imp->cq, &j->cq);
}

/* Starts one job, or reports it at once if nothing could be enqueued.
 * Returns the reports it made (the job's own, and those of a sticky error
 * it met). */
static int issue(kva_cuda_importer *imp, struct kva__imp_job *j)
{
	int n = 0;
	const void *src = NULL;
	size_t bytes = 0;
	int rc = imp->cfg.resolve(imp->cfg.resolve_ctx, j->job.checkpoint_id,
				  j->job.checkpoint_epoch, j->job.rank, &src, &bytes);
	if (rc == 0)
		rc = kva__imp_src_check(j->job.npages, imp->cfg.page_bytes, src, bytes);
	if (rc == 0)
		rc = src_pinned(imp, j, src, bytes, &n);
	if (rc != 0) {
		j->status = rc > 0 ? -EIO : rc;
		finish(imp, j, false);
		return n + 1;
	}
	j->cq.stream = imp->next_stream;
	imp->next_stream = (imp->next_stream + 1) % imp->nstreams;
	cudaStream_t s = imp->streams[j->cq.stream];
	cudaError_t ce = enqueue_copies(imp, j, src, bytes, s);
	if (ce != cudaSuccess) {
		n += (int)check_sticky(imp, ce);
		note_error(imp, ce);
		j->status = errno_of(ce);
	}
	if (imp->cq.dead) {
		/* A sticky error: nothing more runs on this context, so no copy
		 * of this job writes its pages and no marker would come. Report
		 * it now; it never enters a FIFO (completion.h: no push once
		 * dead), where nothing would ever report it. */
		if (!j->status)
			j->status = imp->cq.dead_err;
		finish(imp, j, false);
		return n + 1;
	}
	/* Even a failed job waits for its marker: copies enqueued before the
	 * error may still be writing its pages (rule 12). */
	j->owner = imp;
	kva_inbox_node_init(&j->node); /* reused: intake, then done */
	/* The event carries the copies' real status, in both modes. */
	j->event = event_get(imp);
	ce = j->event ? cudaEventRecord((cudaEvent_t)j->event, s) : cudaErrorMemoryAllocation;
	if (ce != cudaSuccess) {
		/* never query an event that was not recorded: it reads as done */
		n += (int)check_sticky(imp, ce);
		note_error(imp, ce);
		event_put(imp, j->event);
		j->event = NULL;
		if (!imp->cq.dead && imp->cfg.completion == KVA_CUDA_COMPLETE_EVENT) {
			/* no status to read: it fails once its copies stopped */
			if (!j->status)
				j->status = errno_of(ce);
			push_nomarker(imp, j);
			return n;
		}
		/* host-function mode goes on with the marker and the stream */
	}
	if (!imp->cq.dead && imp->cfg.completion != KVA_CUDA_COMPLETE_EVENT) {
		ce = cudaLaunchHostFunc(s, host_done, j);
		if (ce == cudaSuccess) {
			j->cq.status = j->status;
			kva__cq_push(&imp->cq, &j->cq);
			return n;
		}
		n += (int)check_sticky(imp, ce);
		note_error(imp, ce);
		if (!imp->cq.dead) {
			/* With its event, the job reports the copies' real status;
			 * without, it fails once they stopped. */
			if (!j->event && !j->status)
				j->status = errno_of(ce);
			push_nomarker(imp, j);
			return n;
		}
	} else if (!imp->cq.dead) {
		/* event mode, event recorded */
		j->cq.status = j->status;
		kva__cq_push(&imp->cq, &j->cq);
		return n;
	}
	/* dead while enqueueing its event or marker: as above */
	if (!j->status)
		j->status = imp->cq.dead_err;
	finish(imp, j, false);
	return n + 1;
}

/* ---- the progress loop -------------------------------------------------------------------- */

static bool stopping(kva_cuda_importer *imp)
{
	/* A2: pairs with R2 in kva_cuda_importer_destroy. */
	return atomic_load_explicit(&imp->stop, memory_order_acquire);
}

/* One pass: issue what arrived, take the markers that came, report what
 * finished. watchdog: also look for a sticky error behind markers that have
 * not come (host-function mode). Returns reports. */
static int progress_once(kva_cuda_importer *imp, bool watchdog)
{
	int n = 0;
	struct kva_inbox_batch b;
	struct kva_inbox_node *nd;
	if (kva_inbox_drain_blocking(&imp->intake, &b)) {
		bool stop = stopping(imp);
		while ((nd = kva_inbox_batch_pop_blocking(&b))) {
			struct kva__imp_job *j = caa_container_of(nd, struct kva__imp_job, node);
			if (stop) {
				finish(imp, j, true); /* destroy began: never started */
				n++;
			} else if (imp->cq.dead) {
				j->status = imp->cq.dead_err; /* submitted before it died */
				finish(imp, j, false);
				n++;
			} else {
				n += issue(imp, j);
			}
		}
	}
	if (imp->cfg.completion != KVA_CUDA_COMPLETE_EVENT &&
	    kva_inbox_drain_blocking(&imp->done, &b)) {
		while ((nd = kva_inbox_batch_pop_blocking(&b)))
			kva__cq_marked(&imp->cq, &caa_container_of(nd, struct kva__imp_job, node)->cq);
	}
	n += (int)kva__cq_poll(&imp->cq, watchdog);
	/* R3: pairs with A3 in cuda_submit — only a hint to refuse early; jobs
	 * that arrive anyway are failed above. */
	if (imp->cq.dead)
		atomic_store_explicit(&imp->dead, true, memory_order_release);
	return n;
}

/* Destroy: waits on the import streams (never the device, never the decode
 * stream) until every issued job has reported, and always returns. Once
 * every import stream has been synchronized, every host function on them
 * has returned and every event recorded on them has completed, so the pass
 * after it reports every job. A job still outstanding then, or while the
 * importer is dead, or when a stream cannot be synchronized (a broken
 * context runs no more host functions), would never be reported by its
 * marker or its query: it is failed instead. */
static void drain_issued(kva_cuda_importer *imp)
{
	(void)progress_once(imp, true);
	for (int fruitless = 0; imp->cq.outstanding;) {
		if (imp->cq.dead) {
			(void)kva__cq_kill(&imp->cq, imp->cq.dead_err);
			break;
		}
		bool broken = false;
		for (uint32_t s = 0; s < imp->nstreams; s++) {
			cudaError_t ce = cudaStreamSynchronize(imp->streams[s]);
			if (ce != cudaSuccess) {
				note_error(imp, ce);
				broken = true;
			}
		}
		int n = progress_once(imp, true);
		/* one more synchronized pass before giving up: cheap insurance */
		if (broken || (n == 0 && ++fruitless == 2)) {
			(void)kva__cq_kill(&imp->cq, -EIO);
			break;
		}
	}
}

static void *thread_main(void *arg)
{
	kva_cuda_importer *imp = arg;
	/* Its own thread: nothing to restore when it ends, and cudaSetDevice
	 * (the same primary context) is harmless here as a fallback. */
	if (drv.ctx_set(imp->ctx) != CUDA_SUCCESS) {
		cudaError_t ce = cudaSetDevice(imp->cfg.device);
		note_error(imp, ce != cudaSuccess ? ce : cudaErrorDeviceUninitialized);
	}
	bool watchdog = false;
	for (;;) {
		int n = progress_once(imp, watchdog);
		watchdog = false;
		if (stopping(imp)) {
			drain_issued(imp);
			(void)progress_once(imp, true); /* jobs submitted before the stop flag */
			break;
		}
		if (n)
			continue;
		if (imp->cq.outstanding) {
			/* event mode polls every 20 us; host-function mode wakes on
			 * markers, and every 1 ms to look for a sticky error (no
			 * marker comes after one). Wakes at once on a new job. The
			 * monotonic clock: a wall-clock step never stretches it. */
			long step = imp->cfg.completion == KVA_CUDA_COMPLETE_EVENT ? 20000L : 1000000L;
			struct timespec ts;
			clock_gettime(CLOCK_MONOTONIC, &ts);
			ts.tv_nsec += step;
			if (ts.tv_nsec >= 1000000000L) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000L;
			}
			watchdog = sem_clockwait(&imp->wake, CLOCK_MONOTONIC, &ts) != 0;
		} else {
			while (sem_wait(&imp->wake) != 0)
				; /* EINTR */
		}
	}
	return NULL;
}

/* ---- submit (the engine's scheduler thread) ------------------------------------------------ */

static int cuda_submit(void *ctx, kva_engine *e, const kva_copy_job *job)
{
	kva_cuda_importer *imp = ctx;
	int rc;
	/* A3: pairs with R3 in progress_once — a dead importer refuses at once
	 * (the engine counts the rank failed, retries, falls back). */
	if (atomic_load_explicit(&imp->dead, memory_order_acquire)) {
		kva__is_add(&imp->st, KVA__IS_REFUSED, 1);
		return -EIO;
	}
	struct kva__imp_job *j = kva__imp_accept(&imp->st, &imp->idle, stopping(imp), e, job,
						 imp->cfg.rank, imp->cfg.dest_pages, &rc);
	if (!j)
		return rc;
	/* The push publishes the record to the progress loop (inbox R1/A1). */
	kva_inbox_push(&imp->intake, &j->node);
	if (!imp->cfg.manual_progress)
		sem_post(&imp->wake);
	return 0;
}

/* ---- create / destroy ----------------------------------------------------------------------- */

/* Beside create, so that a static link that uses the importer also brings
 * the answer to the core's weak KVA_FEATURE_CUDA_IMPORTER reference. */
bool kva_cuda_importer_supported(void) { return true; }

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
		if (imp->streams[s])
			cudaStreamDestroy(imp->streams[s]);
	if (imp->own_decode && imp->decode)
		cudaStreamDestroy(imp->decode);
	for (uint32_t i = 0; i < imp->ev_n; i++)
		cudaEventDestroy(imp->ev_free[i]);
	free(imp->ev_free);
	free(imp->streams);
	free(imp->fifo_head);
	free(imp->fifo_tail);
	free(imp->b_dst);
	free((void *)imp->b_src);
	free(imp->b_size);
}

/* Streams at the lowest priority, which must be below the decode stream's. */
static int make_streams(kva_cuda_importer *imp)
{
	int least = 0, greatest = 0;
	cudaError_t ce = cudaDeviceGetStreamPriorityRange(&least, &greatest);
	if (ce != cudaSuccess)
		return create_fail(errno_of(ce), ce, "cudaDeviceGetStreamPriorityRange");
	if (imp->cfg.decode_stream) {
		imp->decode = (cudaStream_t)imp->cfg.decode_stream;
		int dp = 0;
		/* a query only: nothing is ever enqueued on the decode stream */
		ce = cudaStreamGetPriority(imp->decode, &dp);
		if (ce != cudaSuccess)
			return create_fail(-EINVAL, ce, "cudaStreamGetPriority(decode stream)");
		/* numerically larger = lower priority */
		if (dp >= least && !imp->cfg.allow_equal_priority)
			return create_fail(
			    -EINVAL, cudaSuccess,
			    "the decode stream already has the lowest priority; create it "
			    "with cudaStreamCreateWithPriority at a higher one, or set "
			    "allow_equal_priority");
	} else {
		ce = cudaStreamCreateWithPriority(&imp->decode, cudaStreamNonBlocking, greatest);
		if (ce != cudaSuccess)
			return create_fail(errno_of(ce), ce, "creating the decode stream");
		imp->own_decode = true;
	}
	for (uint32_t s = 0; s < imp->nstreams; s++) {
		ce = cudaStreamCreateWithPriority(&imp->streams[s], cudaStreamNonBlocking, least);
		if (ce != cudaSuccess)
			return create_fail(errno_of(ce), ce, "creating an import stream");
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
	last_msg[0] = 0;
	last_cuda = 0;
	kva_cuda_importer *imp = NULL;
	struct ctx_saved sv = {NULL, false};
	CUdevice cudev = 0;
	CUcontext ctx = NULL;
	int rc = config_check(cfg);
	if (rc) {
		create_fail(rc, cudaSuccess, "invalid configuration");
		goto out;
	}
	int ndev = 0;
	cudaError_t ce = cudaGetDeviceCount(&ndev);
	if (ce != cudaSuccess) {
		rc = create_fail(-ENODEV, ce, "no usable CUDA device (cudaGetDeviceCount)");
		(void)cudaGetLastError();
		goto out;
	}
	if (ndev == 0 || cfg->device < 0 || cfg->device >= ndev) {
		rc = create_fail(-ENODEV, ndev ? cudaErrorInvalidDevice : cudaErrorNoDevice,
				 ndev ? "device ordinal out of range" : "no CUDA device");
		goto out;
	}
	pthread_once(&drv_once, drv_load);
	if (!drv.ctx_get || !drv.ctx_set || !drv.dev_get || !drv.retain || !drv.release) {
		rc = create_fail(-ENODEV, drv.err,
				 "the driver's context functions (cudaGetDriverEntryPoint)");
		goto out;
	}
#if CUDART_VERSION >= 12000
	/* The device's own refusals (exclusive-process, prohibited) as a
	 * cudaError_t; initialises its primary context without making it
	 * current anywhere. */
	ce = cudaInitDevice(cfg->device, 0, 0);
	if (ce != cudaSuccess) {
		rc = create_fail(errno_of(ce), ce, "cudaInitDevice");
		(void)cudaGetLastError();
		goto out;
	}
#endif
	CUresult cr = drv.dev_get(&cudev, cfg->device);
	if (cr == CUDA_SUCCESS)
		cr = drv.retain(&ctx, cudev);
	if (cr != CUDA_SUCCESS) {
		/* a CUresult, not a cudaError_t (importer.h says so) */
		last_cuda = (int)cr;
		snprintf(last_msg, sizeof(last_msg),
			 "kvadmit CUDA importer: cuDevicePrimaryCtxRetain: CUresult %d", (int)cr);
		rc = cr == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -ENODEV;
		goto out;
	}

	rc = -ENOMEM;
	imp = calloc(1, sizeof(*imp));
	if (!imp) {
		create_fail(rc, cudaSuccess, "out of memory");
		goto out_release;
	}
	imp->ctx = ctx;
	imp->cudev = cudev;
	if (!ctx_enter(imp, &sv)) {
		rc = create_fail(-EIO, cudaErrorDeviceUninitialized, "cuCtxSetCurrent");
		free(imp);
		imp = NULL;
		goto out_release;
	}
	imp->cfg = *cfg;
	imp->nstreams = cfg->streams;
	imp->streams = calloc(cfg->streams, sizeof(*imp->streams));
	imp->fifo_head = calloc(cfg->streams, sizeof(*imp->fifo_head));
	imp->fifo_tail = calloc(cfg->streams, sizeof(*imp->fifo_tail));
	if (!imp->streams || !imp->fifo_head || !imp->fifo_tail) {
		create_fail(rc, cudaSuccess, "out of memory");
		goto out_free;
	}
	int method = cfg->copy_method;
#if CUDART_VERSION >= 12080
	if (method == KVA_CUDA_COPY_AUTO)
		method = KVA_CUDA_COPY_BATCH;
#else
	if (method == KVA_CUDA_COPY_BATCH) {
		rc = create_fail(-ENOTSUP, cudaSuccess, "batched copies need CUDA 12.8");
		goto out_free;
	}
	method = KVA_CUDA_COPY_RUNS;
#endif
	atomic_init(&imp->method, method);
	atomic_init(&imp->stop, false);
	atomic_init(&imp->dead, false);
	kva__cq_init(&imp->cq, imp->fifo_head, imp->fifo_tail, imp->nstreams,
		     cfg->completion != KVA_CUDA_COMPLETE_EVENT, cq_query, cq_report, cq_release, imp);
	atomic_init(&imp->cuda_err, 0);
	kva_inbox_init(&imp->intake);
	kva_inbox_init(&imp->done);
	rc = make_streams(imp);
	if (rc)
		goto out_free;
	rc = -ENOMEM;
	if (sem_init(&imp->wake, 0, 0) != 0) {
		create_fail(rc, cudaSuccess, "sem_init");
		goto out_free;
	}
	if (pthread_mutex_init(&imp->progress_mtx, NULL) != 0) {
		create_fail(rc, cudaSuccess, "pthread_mutex_init");
		goto out_sem;
	}
	if (kva__idle_init(&imp->idle) != 0) {
		create_fail(rc, cudaSuccess, "idle tracker");
		goto out_mtx;
	}
	if (!cfg->manual_progress) {
		sigset_t all, old;
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		int prc = pthread_create(&imp->thread, NULL, thread_main, imp);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		if (prc != 0) {
			rc = create_fail(-EAGAIN, cudaSuccess, "cannot start the progress thread");
			goto out_idle;
		}
		imp->has_thread = true;
		pthread_setname_np(imp->thread, "kva-cuda-import");
	}
	ctx_leave(&sv);
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
	ctx_leave(&sv);
out_release:
	(void)drv.release(cudev);
out:
	if (err)
		*err = rc;
	return NULL;
}

void kva_cuda_importer_destroy(kva_cuda_importer *imp)
{
	if (!imp)
		return;
	/* R2: pairs with A2 in stopping(). */
	atomic_store_explicit(&imp->stop, true, memory_order_release);
	if (imp->has_thread) {
		sem_post(&imp->wake);
		pthread_join(imp->thread, NULL);
	}
	/* Goes on even if the context cannot be made current (the driver is
	 * shutting down): every call then fails, drain_issued fails what is
	 * left, and destroy still returns. */
	struct ctx_saved sv;
	(void)ctx_enter(imp, &sv);
	if (!imp->has_thread) {
		pthread_mutex_lock(&imp->progress_mtx);
		drain_issued(imp);
		(void)progress_once(imp, true);
		pthread_mutex_unlock(&imp->progress_mtx);
	}
	/* Every job has been reported, but the last host function may still be
	 * between its push and its sem_post: a host function is a stream
	 * operation, so syncing the import streams waits for it to return. */
	for (uint32_t s = 0; s < imp->nstreams; s++)
		(void)cudaStreamSynchronize(imp->streams[s]);
	/* jobs failed by a sticky error whose host function never ran */
	kva__cq_release_zombies(&imp->cq);
	release_all(imp);
	ctx_leave(&sv);
	(void)drv.release(imp->cudev);
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
	struct ctx_saved sv;
	int n = -EIO; /* no CUDA call in a context that is not the importer's */
	if (ctx_enter(imp, &sv)) {
		n = progress_once(imp, true);
		ctx_leave(&sv);
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
		kva__imp_stats_read(&imp->st, &imp->idle, &st);
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
	kva__imp_stats_read(imp ? &imp->st : NULL, imp ? &imp->idle : NULL, out);
}

void *kva_cuda_importer_decode_stream(const kva_cuda_importer *imp)
{
	return imp ? (void *)imp->decode : NULL;
}

int kva_cuda_importer_copy_method(const kva_cuda_importer *imp)
{
	return imp ? atomic_load_explicit(&((kva_cuda_importer *)imp)->method, memory_order_relaxed)
		   : KVA_CUDA_COPY_AUTO;
}

int kva_cuda_importer_cuda_error(const kva_cuda_importer *imp)
{
	return imp ? atomic_load_explicit(&((kva_cuda_importer *)imp)->cuda_err,
					  memory_order_relaxed)
		   : 0;
}
