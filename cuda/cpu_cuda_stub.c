/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CUDA importer's entry points in a build without the CUDA toolkit:
 * they exist so that hosts link the same way everywhere, and create reports
 * -ENOTSUP with a message saying why. With KVADMIT_HAVE_CUDA the real ones
 * live in cuda_importer.c (kva_cuda_importer_last_error in cuda_errors.c)
 * and this file is empty.
 */
#include <errno.h>
#include <string.h>

#include "kvadmit/importer.h"

#ifndef KVADMIT_HAVE_CUDA

bool kva_cuda_importer_supported(void) { return false; }

void kva_cuda_importer_config_default(kva_cuda_importer_config *cfg)
{
	if (!cfg)
		return;
	memset(cfg, 0, sizeof(*cfg));
	cfg->streams = 2;
}

kva_cuda_importer *kva_cuda_importer_create(const kva_cuda_importer_config *cfg, int *err)
{
	(void)cfg;
	if (err)
		*err = -ENOTSUP;
	return NULL;
}

void kva_cuda_importer_destroy(kva_cuda_importer *imp)
{
	(void)imp;
}

kva_importer_ref kva_cuda_importer_ref(kva_cuda_importer *imp)
{
	(void)imp;
	return (kva_importer_ref){NULL, NULL};
}

int kva_cuda_importer_progress(kva_cuda_importer *imp)
{
	(void)imp;
	return -ENOTSUP;
}

int kva_cuda_importer_wait_idle(kva_cuda_importer *imp, uint64_t timeout_ns)
{
	(void)imp;
	(void)timeout_ns;
	return -ENOTSUP;
}

void kva_cuda_importer_stats(const kva_cuda_importer *imp, kva_importer_stats *out)
{
	(void)imp;
	if (out)
		memset(out, 0, sizeof(*out));
}

void *kva_cuda_importer_decode_stream(const kva_cuda_importer *imp)
{
	(void)imp;
	return NULL;
}

int kva_cuda_importer_copy_method(const kva_cuda_importer *imp)
{
	(void)imp;
	return KVA_CUDA_COPY_AUTO;
}

int kva_cuda_importer_cuda_error(const kva_cuda_importer *imp)
{
	(void)imp;
	return 0;
}

const char *kva_cuda_importer_last_error(int *cuda_error)
{
	if (cuda_error)
		*cuda_error = 0;
	return "kvadmit was built without CUDA (KVADMIT_WITH_CUDA=OFF or no toolkit found)";
}

#else
typedef int kva__cuda_stub_unused; /* ISO C wants a non-empty file */
#endif
