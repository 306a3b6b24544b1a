/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CUDA importer's errors (cuda_errors.h): the cudaError_t -> errno map,
 * the list of sticky errors, and the thread-local create message behind
 * kva_cuda_importer_last_error().
 */
#include <errno.h>
#include <stdio.h>

#include "kvadmit/importer.h"
#include "cuda_errors.h"

static _Thread_local char create_error_msg[256];
static _Thread_local int create_error_code; /* cudaError_t, or CUresult */

int kva__cuda_errno(cudaError_t ce)
{
	switch (ce) {
	case cudaSuccess:
		return 0;
	case cudaErrorNoDevice:
	case cudaErrorInsufficientDriver:
	case cudaErrorInvalidDevice:
	case cudaErrorDevicesUnavailable:
	case cudaErrorCallRequiresNewerDriver:
	case cudaErrorSystemDriverMismatch:
	case cudaErrorCompatNotSupportedOnDevice:
		return -ENODEV;
	case cudaErrorMemoryAllocation:
		return -ENOMEM;
	case cudaErrorInvalidValue:
	case cudaErrorInvalidResourceHandle:
		return -EINVAL;
	case cudaErrorNotSupported:
		return -ENOTSUP;
	default:
		return -EIO;
	}
}

/* Errors after which nothing the importer queued can complete: every later
 * call fails the same way and host functions no longer run. The list is the
 * codes driver_types.h documents as corrupting the context ("the process must
 * be terminated and relaunched"), plus a context destroyed under the importer
 * and a runtime being unloaded. Transient ones (cudaErrorDevicesUnavailable:
 * "busy or unavailable at the current time") and undocumented ones
 * (cudaErrorUnknown) are not listed: they are sticky only if they survive
 * being cleared, else they fail one job and the importer goes on. */
bool kva__cuda_error_is_sticky(cudaError_t ce)
{
	/* by value: the newest codes are not named in older toolkits' headers */
	switch ((int)ce) {
	case cudaErrorIllegalAddress:
	case cudaErrorLaunchFailure:
	case cudaErrorHardwareStackError:
	case cudaErrorIllegalInstruction:
	case cudaErrorMisalignedAddress:
	case cudaErrorInvalidAddressSpace:
	case cudaErrorInvalidPc:
	case cudaErrorAssert:
	case cudaErrorLaunchTimeout:
	case cudaErrorMpsClientTerminated:
	case 226: /* cudaErrorContained */
	case 721: /* cudaErrorTensorMemoryLeak */
	case 911: /* cudaErrorExternalDevice */
	case cudaErrorContextIsDestroyed:
	case cudaErrorCudartUnloading:
		return true;
	default:
		/* not a known one: sticky if it survives being cleared */
		(void)cudaGetLastError();
		return cudaPeekAtLastError() != cudaSuccess;
	}
}

void kva__cuda_create_error_clear(void)
{
	create_error_msg[0] = 0;
	create_error_code = 0;
}

int kva__cuda_create_fail(int rc, cudaError_t ce, const char *what)
{
	create_error_code = (int)ce;
	if (ce != cudaSuccess)
		snprintf(create_error_msg, sizeof(create_error_msg),
			 "kvadmit CUDA importer: %s: %s (%s, cudaError_t %d)", what,
			 cudaGetErrorString(ce), cudaGetErrorName(ce), (int)ce);
	else
		snprintf(create_error_msg, sizeof(create_error_msg), "kvadmit CUDA importer: %s",
			 what);
	return rc;
}

int kva__cuda_create_fail_driver(int rc, CUresult cr, const char *what)
{
	create_error_code = (int)cr;
	snprintf(create_error_msg, sizeof(create_error_msg),
		 "kvadmit CUDA importer: %s: CUresult %d", what, (int)cr);
	return rc;
}

const char *kva_cuda_importer_last_error(int *cuda_error)
{
	if (cuda_error)
		*cuda_error = create_error_code;
	return create_error_msg;
}
