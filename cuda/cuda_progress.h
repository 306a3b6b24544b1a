/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_progress.c's calls: one pass of the progress loop, the drain at
 * destroy, and the progress thread. */
#ifndef KVA_CUDA_PROGRESS_H
#define KVA_CUDA_PROGRESS_H

#include <stdbool.h>

#include "cuda_importer_state.h"

/* kva__cuda_progress_once - one pass: issue what arrived, take the markers
 * that came, report what finished. @watchdog: also look for a sticky error
 * behind markers that have not come (host-function mode).
 * Thread: the progress loop only (one thread at a time).
 * Returns: the reports it made. */
int kva__cuda_progress_once(kva_cuda_importer *imp, bool watchdog);

/* kva__cuda_drain_issued - report every issued job, waiting on the import
 * streams only (destroy). Thread: the progress loop only. */
void kva__cuda_drain_issued(kva_cuda_importer *imp);

/* kva__cuda_progress_thread_main - the progress thread (automatic
 * progress): passes until the stop flag, then the drain. */
void *kva__cuda_progress_thread_main(void *arg);

#endif
