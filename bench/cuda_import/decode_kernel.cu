/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The synthetic decode kernel (see decode_kernel.h): a grid-stride sum over
 * 16-byte loads, a warp reduction, one atomic per warp. Enough blocks to
 * cover every SM several times, so it is bound by HBM bandwidth.
 */
#include <cuda_runtime.h>

#include "decode_kernel.h"

static __global__ void decode_sum(const uint4 *buf, size_t n4, unsigned long long *out)
{
	unsigned long long acc = 0;
	size_t stride = (size_t)gridDim.x * blockDim.x;
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
		uint4 v = buf[i];
		acc += (unsigned long long)v.x + v.y + v.z + v.w;
	}
	for (int o = 16; o; o >>= 1)
		acc += __shfl_down_sync(0xffffffffu, acc, o);
	if ((threadIdx.x & 31) == 0)
		atomicAdd(out, acc);
}

extern "C" int kvab_decode_launch(const void *buf, size_t bytes, unsigned long long *out,
				  void *stream)
{
	cudaStream_t s = (cudaStream_t)stream;
	int dev = 0, sms = 0;
	cudaError_t ce = cudaGetDevice(&dev);
	if (ce == cudaSuccess)
		ce = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
	if (ce != cudaSuccess)
		return (int)ce;
	ce = cudaMemsetAsync(out, 0, sizeof(*out), s);
	if (ce != cudaSuccess)
		return (int)ce;
	decode_sum<<<sms * 4, 512, 0, s>>>((const uint4 *)buf, bytes / 16, out);
	return (int)cudaGetLastError();
}

__global__ void spin_then_fault(unsigned long long spin_cycles, int *bad)
{
	long long t0 = clock64();
	while ((unsigned long long)(clock64() - t0) < spin_cycles)
		;
	*bad = 1;
}

extern "C" int kvab_fault_launch(unsigned long long spin_cycles, void *stream)
{
	spin_then_fault<<<1, 1, 0, (cudaStream_t)stream>>>(spin_cycles, (int *)(uintptr_t)16);
	return (int)cudaGetLastError();
}
