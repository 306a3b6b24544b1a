/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fake_cudart: a CPU fake of the CUDA runtime (and the few driver functions
 * it hands out through cudaGetDriverEntryPoint*) that the importer (cuda/cuda_*.c)
 * calls, linked instead of libcudart so that the real importer source runs
 * in every build without a GPU (tests/cuda/test_cuda_fake_runtime.c). It is
 * compiled against the toolkit's own headers, so each fake is checked
 * against the real prototype. Model and limits: fake_cudart.c.
 *
 * This header is the test's control panel. Every function here may be
 * called from the test's threads while an importer runs, unless it says
 * otherwise.
 */
#ifndef KVA_FAKE_CUDART_H
#define KVA_FAKE_CUDART_H

#include <stdbool.h>
#include <stdint.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#define FAKE_MAX_DEV 4

/* Calls whose n-th occurrence can be made to fail. */
enum fake_call {
	FAKE_MEMCPY,	   /* cudaMemcpyAsync and cudaMemcpyBatchAsync */
	FAKE_EVENT_CREATE, /* cudaEventCreateWithFlags */
	FAKE_EVENT_RECORD, /* cudaEventRecord */
	FAKE_HOSTFN,	   /* cudaLaunchHostFunc */
	FAKE_POINTER_ATTR, /* cudaPointerGetAttributes */
	FAKE_NCALLS
};

/* Forgets everything: ndev devices (<= FAKE_MAX_DEV), no context active
 * anywhere, the calling thread with no current context and runtime device
 * 0, no faults, no sticky error, the gate open, counters zero. No importer,
 * stream or event may be alive. */
void fake_cuda_reset(int ndev);

/* The nth call of that kind from now (1 = the next) returns code instead of
 * doing anything. sticky: the context also breaks with code at that moment
 * (fake_cuda_break). One pending fault per kind. */
void fake_cuda_fail(enum fake_call c, unsigned nth, cudaError_t code, bool sticky);

/* The nth event recorded from now completes with code: an asynchronous
 * error of the copies before it, read by cudaEventQuery (non-sticky). */
void fake_cuda_fail_event(unsigned nth, cudaError_t code);

/* A sticky error now: every call that needs the context returns code,
 * queued operations are dropped (no copy, no event completion, no host
 * function), cudaGetLastError cannot clear it. */
void fake_cuda_break(cudaError_t code);

/* How many more stream operations (copies, event records, host functions,
 * all streams together) may run; -1: any. 0 holds every stream: copies stay
 * in flight until the gate opens again. */
void fake_cuda_gate(long ops);

/* Calls of that kind made since the last reset. */
uint64_t fake_cuda_calls(enum fake_call c);

struct fake_cuda_counts {
	uint64_t primary_inits[FAKE_MAX_DEV]; /* a device's primary context became active */
	int primary_refs[FAKE_MAX_DEV];	      /* cuDevicePrimaryCtxRetain - ..Release */
	uint64_t implicit_binds; /* runtime calls with no current context (bound one) */
	uint64_t wrong_ctx;	 /* stream used while another context was current */
	uint64_t unpinned_src;	 /* copies whose source is not inside one pinned range */
	uint64_t bad_dst;	 /* copies whose destination is not inside one device range */
	uint64_t setdevice;	 /* cudaSetDevice calls */
	uint64_t ops_run;	 /* stream operations executed */
	uint64_t ops_dropped;	 /* stream operations dropped after a sticky error */
};
void fake_cuda_counts(struct fake_cuda_counts *out);

/* The calling thread's current context (NULL: none), and its runtime
 * device choice (what cudaGetDevice reads when no context is current). */
CUcontext fake_cuda_current(void);
int fake_cuda_runtime_device(void);
void fake_cuda_set_current(CUcontext ctx);

/* A context made with the driver API (not a primary one) on dev; only
 * ever made current by the test. Destroy it after every importer using
 * the thread is gone. */
CUcontext fake_cuda_ctx_create(int dev);
void fake_cuda_ctx_destroy(CUcontext ctx);

/* true: cudaGetDriverEntryPoint* finds no driver function (an old or
 * missing driver). */
void fake_cuda_hide_driver(bool hide);

#endif
