/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CUDA importer's completion side: the pool of events recorded after a
 * job's copies, reporting a job (counters, the report call, the in-flight
 * count) and freeing it, and completion.h's callbacks, which ask CUDA
 * whether a job in a stream's FIFO is done: its event, or, without one,
 * its stream and the jobs queued after it. completion.h decides when to
 * report; this file only queries.
 *
 * Every call: the progress loop only (one thread at a time).
 */
#include <errno.h>
#include <stdlib.h>

#include "cuda_completion.h"
#include "cuda_errors.h"

/* ---- events ---- */

cudaEvent_t kva__cuda_event_get(kva_cuda_importer *imp)
{
	if (imp->event_pool.n)
		return imp->event_pool.spare[--imp->event_pool.n];
	cudaEvent_t ev = NULL;
	cudaError_t ce = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
	if (ce != cudaSuccess) {
		kva__cuda_note_error(imp, ce);
		return NULL;
	}
	return ev;
}

void kva__cuda_event_put(kva_cuda_importer *imp, cudaEvent_t ev)
{
	if (!ev)
		return;
	if (imp->event_pool.n == imp->event_pool.cap) {
		uint32_t cap = imp->event_pool.cap ? imp->event_pool.cap * 2 : 16;
		cudaEvent_t *p = realloc(imp->event_pool.spare, cap * sizeof(*p));
		if (!p) {
			cudaEventDestroy(ev);
			return;
		}
		imp->event_pool.spare = p;
		imp->event_pool.cap = cap;
	}
	imp->event_pool.spare[imp->event_pool.n++] = ev;
}

void kva__cuda_event_pool_destroy(kva_cuda_importer *imp)
{
	for (uint32_t i = 0; i < imp->event_pool.n; i++)
		cudaEventDestroy(imp->event_pool.spare[i]);
	free(imp->event_pool.spare);
}

/* ---- reporting ---- */

/* Reports j (counts it, kva_copy_done or the override) and ends its
 * in-flight count; its record may live on until its marker comes. */
static void report(kva_cuda_importer *imp, struct kva__imp_job *j, int status, bool cancelled)
{
	if (status == 0 && !cancelled) {
		kva__is_add(&imp->stats, KVA__IS_PAGES, j->job.npages);
		kva__is_add(&imp->stats, KVA__IS_BYTES, j->bytes);
	}
	kva__imp_report(imp->cfg.report, imp->cfg.report_ctx, &imp->stats, j,
			cancelled ? -ECANCELED : status, cancelled);
	kva__idle_done(&imp->idle);
}

static void release(kva_cuda_importer *imp, struct kva__imp_job *j)
{
	kva__cuda_event_put(imp, j->event);
	kva__imp_job_free(j);
}

/* A job that never reached a stream (or waited for its own stream). */
void kva__cuda_job_finish(kva_cuda_importer *imp, struct kva__imp_job *j, bool cancelled)
{
	report(imp, j, j->status, cancelled);
	release(imp, j);
}

/* ---- completion.h's callbacks ---- */

static struct kva__imp_job *job_of(struct kva__cq_node *n)
{
	return caa_container_of(n, struct kva__imp_job, cq);
}

/* A job with neither event nor marker (both failed to be enqueued; it
 * reports failed): done once its copies can no longer write its pages,
 * i.e. its stream is idle, or a later job on that stream (n->next is the
 * rest of this stream's FIFO) shows the stream got past them: its event
 * completed, or its host function ran. A stream kept busy reaches that
 * without ever going idle. */
static cudaError_t fence_query(kva_cuda_importer *imp, struct kva__cq_node *n)
{
	cudaError_t ce = cudaStreamQuery(imp->import_streams[n->stream]);
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
			kva__cuda_note_error(imp, ke); /* k's own query reports it */
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
		ce = cudaStreamQuery(imp->import_streams[n->stream]);
		if (ce == cudaErrorNotReady && n->marked)
			return KVA__CQ_DONE;
	}
	if (ce == cudaErrorNotReady)
		return KVA__CQ_PENDING;
	if (ce == cudaSuccess)
		return KVA__CQ_DONE;
	bool sticky = kva__cuda_error_is_sticky(ce);
	kva__cuda_note_error(imp, ce);
	*err = kva__cuda_errno(ce) ? kva__cuda_errno(ce) : -EIO;
	return sticky ? KVA__CQ_STICKY : KVA__CQ_FAILED;
}

uint32_t kva__cuda_kill_if_sticky(kva_cuda_importer *imp, cudaError_t ce)
{
	if (ce != cudaSuccess && ce != cudaErrorNotReady && !imp->completion.dead &&
	    kva__cuda_error_is_sticky(ce))
		return kva__cq_kill(&imp->completion, kva__cuda_errno(ce));
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

void kva__cuda_completion_init(kva_cuda_importer *imp)
{
	kva__cq_init(&imp->completion, imp->stream_fifo_head, imp->stream_fifo_tail, imp->nstreams,
		     imp->cfg.completion != KVA_CUDA_COMPLETE_EVENT, cq_query, cq_report,
		     cq_release, imp);
}
