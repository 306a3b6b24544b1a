/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the CUDA importer's files share: the importer's state, and the two
 * helpers every layer uses (noting a CUDA error, reading the stop flag).
 * The files, from the top (each one's calls in its own header):
 *   cuda_importer.c    the public API: create, destroy, submit, progress, stats
 *   cuda_progress.c    the progress loop and thread, the drain at destroy
 *   cuda_issue.c       issuing a job: source checks, copies, event, marker
 *   cuda_completion.c  the event pool, reporting a job, completion.h's
 *                      callbacks (the CUDA queries behind its state machine)
 *   cuda_context.c     the driver's context functions; the calling thread's
 *                      context saved and restored (cuda_context.h)
 *   cuda_errors.c      errno and sticky-error mapping, create's message
 *                      (cuda_errors.h)
 * cuda_importer.c's top comment describes the importer as a whole.
 *
 * Memory-order labels of the importer (each pair spans two files):
 *   R2 kva_cuda_importer_destroy (cuda_importer.c) / A2 kva__cuda_stopping (here):
 *      the stop flag
 *   R3 kva__cuda_progress_once (cuda_progress.c) / A3 cuda_submit (cuda_importer.c):
 *      the dead flag, a hint to refuse early
 */
#ifndef KVA_CUDA_IMPORTER_STATE_H
#define KVA_CUDA_IMPORTER_STATE_H

#include <pthread.h>
#include <semaphore.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <cuda.h> /* the driver's types only: its functions come through the runtime */
#include <cuda_runtime_api.h>

#include <kvadmit/importer.h>
#include "completion.h"
#include "import_common.h"

struct kva_cuda_importer {
	kva_cuda_importer_config cfg;
	/* producer side: the scheduler thread */
	alignas(64) struct kva_inbox intake;
	/* producers: host functions on CUDA's callback thread */
	alignas(64) struct kva_inbox done;
	alignas(64) sem_t wake; /* submit, host functions and destroy post it */
	_Atomic bool stop;
	_Atomic int last_cuda_error; /* last cudaError_t met */
	_Atomic int copy_method;     /* resolved enum kva_cuda_copy_method */
	_Atomic bool dead;	     /* a sticky CUDA error: submits are refused */
	CUcontext primary_ctx;	     /* cfg.device's primary context, retained */
	CUdevice cu_device;
	/* everything below: the progress loop only (one thread at a time) */
	cudaStream_t *import_streams;
	uint32_t nstreams, next_stream;
	cudaStream_t decode_stream;
	bool owns_decode_stream;
	/* per import stream, owned by completion */
	struct kva__cq_node **stream_fifo_head, **stream_fifo_tail;
	struct kva__cq completion;
	struct {
		cudaEvent_t *spare; /* created, not recorded by any job */
		uint32_t n, cap;
	} event_pool;
	/* cudaMemcpyBatchAsync's arrays, reused */
	struct {
		void **dst;
		const void **src;
		size_t *size;
		uint32_t cap;
	} batch_args;
	pthread_mutex_t progress_mtx; /* manual mode: serialises progress callers */
	pthread_t progress_thread;
	bool has_progress_thread;
	struct kva__idle idle;
	struct kva__imp_stats stats;
};

static inline void kva__cuda_note_error(kva_cuda_importer *imp, cudaError_t ce)
{
	/* a diagnostic value only */
	atomic_store_explicit(&imp->last_cuda_error, (int)ce, memory_order_relaxed);
	/* clears a non-sticky error so later calls are not blamed for it */
	(void)cudaGetLastError();
}

static inline bool kva__cuda_stopping(kva_cuda_importer *imp)
{
	/* A2: pairs with R2 in kva_cuda_importer_destroy (cuda_importer.c). */
	return atomic_load_explicit(&imp->stop, memory_order_acquire);
}

#endif
