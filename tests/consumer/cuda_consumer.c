/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A host that imports with CUDA links libkvadmit-cuda beside libkvadmit.
 * Whatever the machine: create either works (a device), or fails with
 * -ENODEV (CUDA build, no device) or -ENOTSUP (build without CUDA), and
 * the core's KVA_FEATURE_CUDA_IMPORTER equals kva_cuda_importer_supported().
 */
#include <errno.h>
#include <stdio.h>

#include <kvadmit/importer.h>
#include <kvadmit/kvadmit.h>

static int no_resolve(void *ctx, uint64_t id, uint64_t epoch, uint32_t rank, const void **src,
                      size_t *bytes)
{
	(void)ctx, (void)id, (void)epoch, (void)rank, (void)src, (void)bytes;
	return -ENOENT;
}

int main(void)
{
	kva_cuda_importer_config c;
	kva_cuda_importer_config_default(&c);
	char dummy[16];
	c.page_bytes = 4096;
	c.dest_base = dummy;
	c.dest_pages = 1;
	c.resolve = no_resolve;
	int err = 0;
	kva_cuda_importer *imp = kva_cuda_importer_create(&c, &err);
	bool supported = kva_cuda_importer_supported();
	bool feature = kva_has_feature(KVA_FEATURE_CUDA_IMPORTER);
	printf("CUDA importer: supported=%d feature=%d create=%s (%s)\n", supported, feature,
	       imp ? "ok" : kva_strerror(err), imp ? "" : kva_cuda_importer_last_error(NULL));
	if (imp)
		kva_cuda_importer_destroy(imp);
	if (feature != supported)
		return 1;
	if (!imp && err != (supported ? -ENODEV : -ENOTSUP))
		return 1;
	return 0;
}
