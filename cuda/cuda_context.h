/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The calling thread's CUDA context: the driver functions the importer
 * needs (found through the runtime, never linked), the device's primary
 * context, and making it current around the importer's calls so that the
 * calling thread gets back exactly the context it had, none included.
 * cuda_context.c says why.
 *
 * Every call: any thread, after kva__cuda_driver_load returned true (on
 * that thread, or on one that handed the importer over).
 */
#ifndef KVA_CUDA_CONTEXT_H
#define KVA_CUDA_CONTEXT_H

#include <stdbool.h>

#include <cuda.h> /* the driver's types only: its functions come through the runtime */
#include <cuda_runtime_api.h>

/* What a host thread's context goes back to. */
struct kva__cuda_ctx_saved {
	CUcontext prev;
	bool switched;
};

/* kva__cuda_driver_load - find the driver's context functions, once per
 * process.  Returns: true when all were found; else false with *why, the
 * runtime's reason for the first one missing. */
bool kva__cuda_driver_load(cudaError_t *why);

/* kva__cuda_primary_ctx_retain - retain device ordinal @ordinal's primary
 * context.  Returns: CUDA_SUCCESS with *dev and *ctx, or the driver's error. */
CUresult kva__cuda_primary_ctx_retain(int ordinal, CUdevice *dev, CUcontext *ctx);
void kva__cuda_primary_ctx_release(CUdevice dev);

/* kva__cuda_ctx_set - make ctx current, with nothing to restore (the
 * importer's own thread).  Returns: the driver's result. */
CUresult kva__cuda_ctx_set(CUcontext ctx);

/* kva__cuda_ctx_enter - make ctx current on the calling thread, saving what
 * kva__cuda_ctx_leave puts back.  Returns: false when the driver cannot say
 * which context is current or cannot switch (it is shutting down): nothing
 * was changed then. */
bool kva__cuda_ctx_enter(CUcontext ctx, struct kva__cuda_ctx_saved *saved);
void kva__cuda_ctx_leave(struct kva__cuda_ctx_saved *saved);

#endif
