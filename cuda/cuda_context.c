/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The calling thread's context (cuda_context.h): the driver's context
 * functions, looked up once per process, and the save / switch / restore
 * around the importer's calls on a host thread.
 *
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
#include <pthread.h>
#include <stddef.h>

#include "cuda_context.h"

#if CUDART_VERSION < 11030
#error "the CUDA importer needs CUDA 11.3 or newer (cudaGetDriverEntryPoint)"
#endif

static struct {
	CUresult(CUDAAPI *ctx_get_current)(CUcontext *);
	CUresult(CUDAAPI *ctx_set_current)(CUcontext);
	CUresult(CUDAAPI *device_get)(CUdevice *, int);
	CUresult(CUDAAPI *primary_ctx_retain)(CUcontext *, CUdevice);
	CUresult(CUDAAPI *primary_ctx_release)(CUdevice);
	cudaError_t lookup_error; /* why a lookup failed; cudaSuccess when all were found */
} driver;
static pthread_once_t driver_once = PTHREAD_ONCE_INIT;

static void *driver_symbol(const char *name)
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
	if (driver.lookup_error == cudaSuccess)
		driver.lookup_error = ce != cudaSuccess ? ce : cudaErrorSymbolNotFound;
	(void)cudaGetLastError();
	return NULL;
}

/* Once per process. The pointers are read only after create's
 * pthread_once returned, by its caller or by threads that got the importer
 * from it (which orders them after it). */
static void driver_lookup(void)
{
	driver.ctx_get_current = (CUresult(CUDAAPI *)(CUcontext *))driver_symbol("cuCtxGetCurrent");
	driver.ctx_set_current = (CUresult(CUDAAPI *)(CUcontext))driver_symbol("cuCtxSetCurrent");
	driver.device_get = (CUresult(CUDAAPI *)(CUdevice *, int))driver_symbol("cuDeviceGet");
	driver.primary_ctx_retain =
	    (CUresult(CUDAAPI *)(CUcontext *, CUdevice))driver_symbol("cuDevicePrimaryCtxRetain");
	driver.primary_ctx_release =
	    (CUresult(CUDAAPI *)(CUdevice))driver_symbol("cuDevicePrimaryCtxRelease");
}

bool kva__cuda_driver_load(cudaError_t *why)
{
	pthread_once(&driver_once, driver_lookup);
	if (!driver.ctx_get_current || !driver.ctx_set_current || !driver.device_get ||
	    !driver.primary_ctx_retain || !driver.primary_ctx_release) {
		*why = driver.lookup_error;
		return false;
	}
	return true;
}

CUresult kva__cuda_primary_ctx_retain(int ordinal, CUdevice *dev, CUcontext *ctx)
{
	CUresult cr = driver.device_get(dev, ordinal);
	if (cr == CUDA_SUCCESS)
		cr = driver.primary_ctx_retain(ctx, *dev);
	return cr;
}

void kva__cuda_primary_ctx_release(CUdevice dev)
{
	(void)driver.primary_ctx_release(dev);
}

CUresult kva__cuda_ctx_set(CUcontext ctx)
{
	return driver.ctx_set_current(ctx);
}

bool kva__cuda_ctx_enter(CUcontext ctx, struct kva__cuda_ctx_saved *saved)
{
	saved->prev = NULL;
	saved->switched = false;
	if (driver.ctx_get_current(&saved->prev) != CUDA_SUCCESS)
		return false;
	if (saved->prev == ctx)
		return true;
	if (driver.ctx_set_current(ctx) != CUDA_SUCCESS)
		return false;
	saved->switched = true;
	return true;
}

void kva__cuda_ctx_leave(struct kva__cuda_ctx_saved *saved)
{
	if (saved->switched)
		(void)driver.ctx_set_current(saved->prev);
}
