/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Issuing a CUDA import job (the progress loop): resolve its source, check
 * that the source is pinned, enqueue its copies on the next import stream
 * (one cudaMemcpyAsync per run of consecutive destination ids, or one
 * cudaMemcpyBatchAsync for the whole job), record an event after them
 * (their real status) and, in host-function mode, launch the completion
 * marker, whose host function pushes the job onto the done inbox. The job
 * then waits in its stream's FIFO (completion.h); a job nothing could be
 * enqueued for is reported at once.
 *
 * Every call: the progress loop only, except host_done (CUDA's callback
 * thread).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_issue.h"
#include "cuda_completion.h"
#include "cuda_errors.h"

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
	if (n <= imp->batch_args.cap)
		return true;
	void **d = realloc(imp->batch_args.dst, n * sizeof(*d));
	if (d)
		imp->batch_args.dst = d;
	const void **s = realloc((void *)imp->batch_args.src, n * sizeof(*s));
	if (s)
		imp->batch_args.src = s;
	size_t *z = realloc(imp->batch_args.size, n * sizeof(*z));
	if (z)
		imp->batch_args.size = z;
	if (!d || !s || !z)
		return false;
	imp->batch_args.cap = n;
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
	int method = atomic_load_explicit(&imp->copy_method, memory_order_relaxed);
	bool batch = method == KVA_CUDA_COPY_BATCH && batch_room(imp, n);
	cudaError_t ce = cudaSuccess;
	for (uint32_t i = 0; i < n && ce == cudaSuccess;) {
		uint32_t run = kva__imp_run(j->ids, n, i);
		size_t off = (size_t)i * pb;
		size_t len = (size_t)run * pb;
		if (len > bytes - off)
			len = bytes - off; /* the share's last page may be partial */
		if (batch) {
			imp->batch_args.dst[runs] = dst + (size_t)j->ids[i] * pb;
			imp->batch_args.src[runs] = src + off;
			imp->batch_args.size[runs] = len;
		} else {
			ce = cudaMemcpyAsync(dst + (size_t)j->ids[i] * pb, src + off, len,
					     cudaMemcpyHostToDevice, s);
			kva__is_add(&imp->stats, KVA__IS_CALLS, 1);
		}
		runs++;
		total += len;
		i += run;
	}
#if CUDART_VERSION >= 12080
	if (batch && runs == 1) {
		ce = cudaMemcpyAsync(imp->batch_args.dst[0], imp->batch_args.src[0],
				     imp->batch_args.size[0], cudaMemcpyHostToDevice, s);
		kva__is_add(&imp->stats, KVA__IS_CALLS, 1);
	} else if (batch) {
		struct cudaMemcpyAttributes attr;
		memset(&attr, 0, sizeof(attr));
		attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
		attr.flags = cudaMemcpyFlagPreferOverlapWithCompute;
		size_t idx0 = 0;
#if CUDART_VERSION >= 13000
		ce = cudaMemcpyBatchAsync(imp->batch_args.dst, imp->batch_args.src,
					  imp->batch_args.size, runs, &attr, &idx0, 1, s);
#else
		size_t fail_idx = 0;
		ce =
		    cudaMemcpyBatchAsync(imp->batch_args.dst, (void **)imp->batch_args.src,
					 imp->batch_args.size, runs, &attr, &idx0, 1, &fail_idx, s);
#endif
		kva__is_add(&imp->stats, KVA__IS_CALLS, 1);
		if (batch_unsupported(ce)) {
			/* this driver lacks batched copies: per-run copies from now on */
			kva__cuda_note_error(imp, ce);
			atomic_store_explicit(&imp->copy_method, KVA_CUDA_COPY_RUNS,
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
			*reports += (int)kva__cuda_kill_if_sticky(imp, ce);
			kva__cuda_note_error(imp, ce);
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
	kva__cq_push(&imp->completion, &j->cq);
}

int kva__cuda_issue(kva_cuda_importer *imp, struct kva__imp_job *j)
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
		kva__cuda_job_finish(imp, j, false);
		return n + 1;
	}
	j->cq.stream = imp->next_stream;
	imp->next_stream = (imp->next_stream + 1) % imp->nstreams;
	cudaStream_t s = imp->import_streams[j->cq.stream];
	cudaError_t ce = enqueue_copies(imp, j, src, bytes, s);
	if (ce != cudaSuccess) {
		n += (int)kva__cuda_kill_if_sticky(imp, ce);
		kva__cuda_note_error(imp, ce);
		j->status = kva__cuda_errno(ce);
	}
	if (imp->completion.dead) {
		/* A sticky error: nothing more runs on this context, so no copy
		 * of this job writes its pages and no marker would come. Report
		 * it now; it never enters a FIFO (completion.h: no push once
		 * dead), where nothing would ever report it. */
		if (!j->status)
			j->status = imp->completion.dead_err;
		kva__cuda_job_finish(imp, j, false);
		return n + 1;
	}
	/* Even a failed job waits for its marker: copies enqueued before the
	 * error may still be writing its pages (rule drain-before-reuse). */
	j->owner = imp;
	kva_inbox_node_init(&j->node); /* reused: intake, then done */
	/* The event carries the copies' real status, in both modes. */
	j->event = kva__cuda_event_get(imp);
	ce = j->event ? cudaEventRecord((cudaEvent_t)j->event, s) : cudaErrorMemoryAllocation;
	if (ce != cudaSuccess) {
		/* never query an event that was not recorded: it reads as done */
		n += (int)kva__cuda_kill_if_sticky(imp, ce);
		kva__cuda_note_error(imp, ce);
		kva__cuda_event_put(imp, j->event);
		j->event = NULL;
		if (!imp->completion.dead && imp->cfg.completion == KVA_CUDA_COMPLETE_EVENT) {
			/* no status to read: it fails once its copies stopped */
			if (!j->status)
				j->status = kva__cuda_errno(ce);
			push_nomarker(imp, j);
			return n;
		}
		/* host-function mode goes on with the marker and the stream */
	}
	if (!imp->completion.dead && imp->cfg.completion != KVA_CUDA_COMPLETE_EVENT) {
		ce = cudaLaunchHostFunc(s, host_done, j);
		if (ce == cudaSuccess) {
			j->cq.status = j->status;
			kva__cq_push(&imp->completion, &j->cq);
			return n;
		}
		n += (int)kva__cuda_kill_if_sticky(imp, ce);
		kva__cuda_note_error(imp, ce);
		if (!imp->completion.dead) {
			/* With its event, the job reports the copies' real status;
			 * without, it fails once they stopped. */
			if (!j->event && !j->status)
				j->status = kva__cuda_errno(ce);
			push_nomarker(imp, j);
			return n;
		}
	} else if (!imp->completion.dead) {
		/* event mode, event recorded */
		j->cq.status = j->status;
		kva__cq_push(&imp->completion, &j->cq);
		return n;
	}
	/* dead while enqueueing its event or marker: as above */
	if (!j->status)
		j->status = imp->completion.dead_err;
	kva__cuda_job_finish(imp, j, false);
	return n + 1;
}
