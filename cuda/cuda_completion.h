/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cuda_completion.c's calls: the event pool, reporting a job that never
 * reached a stream's FIFO, completion.h set up with the CUDA queries, and
 * the sticky-error kill of the issue path.
 *
 * Every call: the progress loop only (create and destroy included, which
 * hold it).
 */
#ifndef KVA_CUDA_COMPLETION_CALLS_H
#define KVA_CUDA_COMPLETION_CALLS_H

#include <stdbool.h>
#include <stdint.h>

#include "cuda_importer_state.h"

/* kva__cuda_event_get - a spare event, or a new one.
 * Returns: the event, or NULL (the error noted) when none can be created. */
cudaEvent_t kva__cuda_event_get(kva_cuda_importer *imp);

/* kva__cuda_event_put - back to the pool; destroyed if the pool cannot
 * grow. NULL is ignored. */
void kva__cuda_event_put(kva_cuda_importer *imp, cudaEvent_t ev);

/* kva__cuda_event_pool_destroy - destroy the spare events, free the pool. */
void kva__cuda_event_pool_destroy(kva_cuda_importer *imp);

/* kva__cuda_completion_init - set up imp->completion (its FIFOs, its mode
 * from imp->cfg) with the CUDA queries behind it. */
void kva__cuda_completion_init(kva_cuda_importer *imp);

/* kva__cuda_job_finish - report and free a job that never reached a
 * stream's FIFO. */
void kva__cuda_job_finish(kva_cuda_importer *imp, struct kva__imp_job *j, bool cancelled);

/* kva__cuda_kill_if_sticky - a sticky error met while enqueueing kills the
 * importer too: every outstanding job fails, later ones are refused.
 * Returns: the reports that made. */
uint32_t kva__cuda_kill_if_sticky(kva_cuda_importer *imp, cudaError_t ce);

#endif
