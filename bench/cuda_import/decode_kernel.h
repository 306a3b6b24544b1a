/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A synthetic memory-bound "decode" kernel for the CUDA importer's test and
 * benchmark: it streams a device buffer through every SM and sums it, the
 * way a decode pass streams the KV cache. C-callable; built only with CUDA.
 */
#ifndef KVA_BENCH_DECODE_KERNEL_H
#define KVA_BENCH_DECODE_KERNEL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Enqueues on `stream` (a cudaStream_t): *out = 0, then *out += the sum of
 * the buffer's 32-bit words (bytes: a multiple of 16). Returns a cudaError_t. */
int kvab_decode_launch(const void *buf, size_t bytes, unsigned long long *out, void *stream);

/* Tests only: enqueues on `stream` a one-thread kernel that spins for about
 * spin_cycles clock cycles, then writes through an invalid address — a
 * sticky error that corrupts the process's CUDA context for good. Returns a
 * cudaError_t (of the launch). */
int kvab_fault_launch(unsigned long long spin_cycles, void *stream);

/* The sum the kernel must produce for a buffer memset to `byte`. */
static inline unsigned long long kvab_decode_expected(size_t bytes, unsigned char byte)
{
	return (unsigned long long)(bytes / 4) * (0x01010101ull * byte);
}

#ifdef __cplusplus
}
#endif
#endif
