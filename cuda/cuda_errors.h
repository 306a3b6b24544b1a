/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CUDA importer's errors: how a cudaError_t maps to a negative errno,
 * which errors are sticky (the context is broken for good), and the
 * calling thread's message about a failed create that
 * kva_cuda_importer_last_error() returns.
 *
 * Every call: any thread; the create message is thread-local.
 */
#ifndef KVA_CUDA_ERRORS_H
#define KVA_CUDA_ERRORS_H

#include <stdbool.h>

#include <cuda.h> /* CUresult only */
#include <cuda_runtime_api.h>

/* kva__cuda_errno - the negative errno a CUDA error is reported as.
 * Returns: 0 for cudaSuccess; -ENODEV, -ENOMEM, -EINVAL, -ENOTSUP; else -EIO. */
int kva__cuda_errno(cudaError_t ce);

/* kva__cuda_error_is_sticky - whether nothing queued can complete after ce.
 * Effect: for a code not known either way, clears the runtime's last error
 * and reads it again (sticky if it survives). */
bool kva__cuda_error_is_sticky(cudaError_t ce);

/* kva__cuda_create_error_clear - forget the calling thread's last create
 * failure (create starts with it). */
void kva__cuda_create_error_clear(void);

/* kva__cuda_create_fail - record why create failed, with ce's name and text
 * unless ce is cudaSuccess.  Returns: rc. */
int kva__cuda_create_fail(int rc, cudaError_t ce, const char *what);

/* kva__cuda_create_fail_driver - the same for a driver call, whose CUresult
 * is recorded as the error code (importer.h says so).  Returns: rc. */
int kva__cuda_create_fail_driver(int rc, CUresult cr, const char *what);

#endif
