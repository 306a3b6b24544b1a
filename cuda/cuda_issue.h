/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_issue.c's call: issuing one job on an import stream. */
#ifndef KVA_CUDA_ISSUE_H
#define KVA_CUDA_ISSUE_H

#include "cuda_importer_state.h"

/* kva__cuda_issue - start one job, or report it at once if nothing could
 * be enqueued.
 * Thread: the progress loop only.
 * Returns: the reports it made (the job's own, and those of a sticky error
 * it met). */
int kva__cuda_issue(kva_cuda_importer *imp, struct kva__imp_job *j);

#endif
