/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvadmit-cuda-import-bench: what the importers cost, against baselines
 * measured in the same run. Timing is reported, never asserted.
 *
 * CUDA mode (default; exits 77 with a SKIPPED line without a device):
 *   1. one contiguous cudaMemcpyAsync of T bytes, pinned host -> device;
 *   2. the same T bytes imported through the CUDA importer as jobs whose
 *      destination pages are a random permutation (no two consecutive), per
 *      page size and copy method: GB/s and the ratio to (1) — target >= 80%;
 *   3. a memory-bound "decode" kernel on the decode stream, alone and with
 *      imports kept in flight for its whole duration — target slowdown <= 5%.
 * CPU mode (--cpu, no device needed): the CPU importer's memcpy GB/s against
 *   one plain memcpy of the same bytes, and its job rate with one-page jobs.
 *
 * Usage: kvadmit-cuda-import-bench [--cpu] [--total-mib N] [--reps N]
 *                                  [--streams K] [--completion hostfunc|event]
 */
#define _GNU_SOURCE 1
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvadmit/importer.h"
#include "kva_test.h"

#ifdef KVADMIT_HAVE_CUDA
#include <cuda_runtime_api.h>
#include "decode_kernel.h"
#endif

static size_t total_mib = 1024;
static int reps = 5;
static uint32_t nstreams = 2;
static int completion = KVA_CUDA_COMPLETE_HOSTFUNC;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_dbl);
	return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static uint32_t *permutation(uint32_t n, uint64_t seed)
{
	uint32_t *p = malloc(n * sizeof(*p));
	if (!p)
		return NULL;
	for (uint32_t i = 0; i < n; i++)
		p[i] = i;
	for (uint32_t i = n - 1; i > 0; i--) {
		uint32_t k = (uint32_t)(kva_test_rand(&seed) % (i + 1));
		uint32_t t = p[i];
		p[i] = p[k];
		p[k] = t;
	}
	return p;
}

/* ---- one source for every job: job k is pages [k*per, (k+1)*per) -------- */
struct src {
	const unsigned char *base;
	size_t page_bytes;
	uint32_t per, jobs;
};

static int src_resolve(void *ctx, uint64_t id, uint64_t epoch, uint32_t rank, const void **out,
		       size_t *bytes)
{
	(void)epoch, (void)rank;
	const struct src *s = ctx;
	if (id >= s->jobs)
		return -ENOENT;
	*bytes = s->page_bytes * s->per;
	*out = s->base + id * *bytes;
	return 0;
}

struct done {
	_Atomic uint64_t ok, failed;
};

static void on_report(void *ctx, kva_engine *e, const kva_copy_job *job, int status)
{
	(void)e, (void)job;
	struct done *d = ctx;
	atomic_fetch_add_explicit(status ? &d->failed : &d->ok, 1, memory_order_relaxed);
}

static void submit_all(kva_importer_ref ref, const uint32_t *perm, uint32_t per, uint32_t jobs,
		       uint32_t attempt)
{
	for (uint32_t k = 0; k < jobs; k++) {
		kva_copy_job job = {.token = {k, 1, attempt},
				    .world_size = 1,
				    .checkpoint_id = k,
				    .npages = per,
				    .pages = perm + (size_t)k * per};
		if (ref.submit(ref.ctx, NULL, &job) != 0) {
			fprintf(stderr, "submit refused\n");
			exit(1);
		}
	}
}

/* ---- CPU mode ---------------------------------------------------------------- */

static kva_cpu_importer *make_cpu_importer(const struct src *s, void *dst, uint32_t pages,
					   uint32_t threads, struct done *d)
{
	kva_cpu_importer_config c;
	kva_cpu_importer_config_default(&c);
	c.threads = threads;
	c.page_bytes = s->page_bytes;
	c.dest_base = dst;
	c.dest_pages = pages;
	c.resolve = src_resolve;
	c.resolve_ctx = (void *)s;
	c.report = on_report;
	c.report_ctx = d;
	int err = 0;
	kva_cpu_importer *imp = kva_cpu_importer_create(&c, &err);
	if (!imp) {
		fprintf(stderr, "cpu importer: %s\n", kva_strerror(err));
		exit(1);
	}
	return imp;
}

static int run_cpu(void)
{
	const size_t T = total_mib << 20, pb = 64 << 10;
	const uint32_t pages = (uint32_t)(T / pb), per = 256, jobs = pages / per;
	unsigned char *src = malloc(T), *dst = malloc(T);
	uint32_t *perm = permutation(pages, 3);
	if (!src || !dst || !perm)
		return 1;
	memset(src, 0x5a, T);
	memset(dst, 0, T); /* fault the pages in before timing */
	double v[16];
	for (int r = 0; r < reps; r++) {
		uint64_t t0 = now_ns();
		memcpy(dst, src, T);
		v[r] = (double)T / (double)(now_ns() - t0);
	}
	double base = median(v, reps);
	printf("CPU importer, %zu MiB, pages of %zu KiB, jobs of %u scattered pages\n", total_mib,
	       pb >> 10, per);
	printf("| %-28s | %8s | %8s |\n", "copy", "GB/s", "vs memcpy");
	printf("| %-28s | %8.2f | %8s |\n", "one memcpy (1 thread)", base, "1.00");
	for (int r = 0; r < reps; r++) {
		uint64_t t0 = now_ns();
		for (uint32_t i = 0; i < pages; i++)
			memcpy(dst + (size_t)perm[i] * pb, src + (size_t)i * pb, pb);
		v[r] = (double)T / (double)(now_ns() - t0);
	}
	double scat = median(v, reps);
	printf("| %-28s | %8.2f | %8.2f |\n", "memcpy per page, scattered", scat, scat / base);
	struct src s = {src, pb, per, jobs};
	for (uint32_t th = 1; th <= 4; th *= 2) {
		struct done d = {0};
		kva_cpu_importer *imp = make_cpu_importer(&s, dst, pages, th, &d);
		kva_importer_ref ref = kva_cpu_importer_ref(imp);
		for (int r = 0; r < reps; r++) {
			uint64_t t0 = now_ns();
			submit_all(ref, perm, per, jobs, (uint32_t)r + 1);
			kva_cpu_importer_wait_idle(imp, 0);
			v[r] = (double)(jobs * (size_t)per * pb) / (double)(now_ns() - t0);
		}
		double gbs = median(v, reps);
		char name[64];
		snprintf(name, sizeof(name), "importer, %u thread%s", th, th > 1 ? "s" : "");
		printf("| %-28s | %8.2f | %8.2f |\n", name, gbs, gbs / base);
		kva_cpu_importer_destroy(imp);
	}
	/* job rate: one 4 KiB page per job, submit through report */
	const uint32_t small = 4096, njobs = 200000;
	struct src s1 = {src, small, 1, (uint32_t)(T / small)};
	printf("\n| %-28s | %12s | %10s |\n", "one-page jobs (4 KiB)", "jobs/s", "ns/job");
	for (uint32_t th = 1; th <= 2; th++) {
		struct done d = {0};
		kva_cpu_importer *imp = make_cpu_importer(&s1, dst, s1.jobs, th, &d);
		kva_importer_ref ref = kva_cpu_importer_ref(imp);
		for (int r = 0; r < reps; r++) {
			uint64_t t0 = now_ns();
			for (uint32_t k = 0; k < njobs; k++) {
				uint32_t page = perm[k % pages] % s1.jobs;
				kva_copy_job job = {.token = {k % s1.jobs, 1, (uint32_t)r + 1},
						    .world_size = 1,
						    .checkpoint_id = k % s1.jobs,
						    .npages = 1,
						    .pages = &page};
				ref.submit(ref.ctx, NULL, &job);
			}
			kva_cpu_importer_wait_idle(imp, 0);
			v[r] = (double)njobs * 1e9 / (double)(now_ns() - t0);
		}
		double rate = median(v, reps);
		char name[64];
		snprintf(name, sizeof(name), "importer, %u thread%s", th, th > 1 ? "s" : "");
		printf("| %-28s | %12.0f | %10.0f |\n", name, rate, 1e9 / rate);
		kva_cpu_importer_destroy(imp);
	}
	free(perm);
	free(src);
	free(dst);
	return 0;
}

/* ---- CUDA mode ----------------------------------------------------------------- */
#ifdef KVADMIT_HAVE_CUDA

#define CK(call)                                                                                   \
	do {                                                                                       \
		cudaError_t ce_ = (call);                                                          \
		if (ce_ != cudaSuccess) {                                                          \
			fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call,               \
				cudaGetErrorString(ce_));                                          \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

static kva_cuda_importer *make_importer(const struct src *s, void *dev, uint32_t pages, int method,
					struct done *d)
{
	kva_cuda_importer_config c;
	kva_cuda_importer_config_default(&c);
	c.streams = nstreams;
	c.completion = completion;
	c.copy_method = method;
	c.page_bytes = s->page_bytes;
	c.dest_base = dev;
	c.dest_pages = pages;
	c.resolve = src_resolve;
	c.resolve_ctx = (void *)s;
	c.report = on_report;
	c.report_ctx = d;
	int err = 0;
	kva_cuda_importer *imp = kva_cuda_importer_create(&c, &err);
	if (!imp) {
		fprintf(stderr, "create: %s\n", kva_cuda_importer_last_error(NULL));
		exit(1);
	}
	return imp;
}

static int run_cuda(void)
{
	const size_t T = total_mib << 20;
	unsigned char *host = NULL;
	void *dev = NULL, *kv = NULL;
	unsigned long long *out = NULL;
	const size_t kv_bytes = 1ull << 30;
	CK(cudaHostAlloc((void **)&host, T, cudaHostAllocDefault));
	memset(host, 0x5a, T);
	CK(cudaMalloc(&dev, T));
	CK(cudaMalloc(&kv, kv_bytes));
	CK(cudaMalloc((void **)&out, sizeof(*out)));
	CK(cudaMemset(kv, 0x01, kv_bytes));
	int least = 0, greatest = 0;
	CK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
	cudaStream_t cs;
	CK(cudaStreamCreateWithPriority(&cs, cudaStreamNonBlocking, least));
	cudaEvent_t e0, e1;
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	struct cudaDeviceProp prop;
	CK(cudaGetDeviceProperties(&prop, 0));
	printf("device: %s, %d SMs; %zu MiB per import; %u import streams; %s completion\n\n",
	       prop.name, prop.multiProcessorCount, total_mib, nstreams,
	       completion == KVA_CUDA_COMPLETE_EVENT ? "event" : "host-function");

	/* 1. contiguous baseline */
	double v[32];
	CK(cudaMemcpyAsync(dev, host, T, cudaMemcpyHostToDevice, cs)); /* warm-up */
	CK(cudaStreamSynchronize(cs));
	for (int r = 0; r < reps; r++) {
		uint64_t t0 = now_ns();
		CK(cudaMemcpyAsync(dev, host, T, cudaMemcpyHostToDevice, cs));
		CK(cudaStreamSynchronize(cs));
		v[r] = (double)T / (double)(now_ns() - t0);
	}
	double contiguous = median(v, reps);
	printf("| %-34s | %9s | %8s | %10s |\n", "import (same bytes)", "GB/s", "vs contig",
	       "copy calls");
	printf("|%s|%s|%s|%s|\n", "------------------------------------", "-----------",
	       "----------", "------------");
	printf("| %-34s | %9.2f | %8.2f | %10d |\n", "one contiguous cudaMemcpyAsync", contiguous,
	       1.0, 1);

	/* 2. scattered pages through the importer */
	static const size_t page_kib[] = {16, 64, 256, 1024};
	static const struct {
		int method;
		const char *name;
	} methods[] = {{KVA_CUDA_COPY_RUNS, "memcpy/run"}, {KVA_CUDA_COPY_BATCH, "batch"}};
	double best64 = 0;
	for (size_t p = 0; p < sizeof(page_kib) / sizeof(page_kib[0]); p++) {
		size_t pb = page_kib[p] << 10;
		uint32_t pages = (uint32_t)(T / pb);
		uint32_t per = pages >= 256 * 8 ? 256 : pages / 8; /* >= 8 jobs */
		uint32_t jobs = pages / per;
		uint32_t *perm = permutation(pages, 17 + p);
		struct src s = {host, pb, per, jobs};
		for (size_t m = 0; m < sizeof(methods) / sizeof(methods[0]); m++) {
			struct done d = {0};
			kva_cuda_importer *imp =
			    make_importer(&s, dev, pages, methods[m].method, &d);
			kva_importer_ref ref = kva_cuda_importer_ref(imp);
			submit_all(ref, perm, per, jobs, 1); /* warm-up */
			kva_cuda_importer_wait_idle(imp, 0);
			kva_importer_stats st0, st1;
			kva_cuda_importer_stats(imp, &st0);
			for (int r = 0; r < reps; r++) {
				uint64_t t0 = now_ns();
				submit_all(ref, perm, per, jobs, (uint32_t)r + 2);
				kva_cuda_importer_wait_idle(imp, 0);
				v[r] = (double)((size_t)jobs * per * pb) / (double)(now_ns() - t0);
			}
			kva_cuda_importer_stats(imp, &st1);
			double gbs = median(v, reps);
			if (pb == (64 << 10) && gbs > best64)
				best64 = gbs;
			char name[64];
			snprintf(name, sizeof(name), "%4zu KiB pages, %s%s", page_kib[p],
				 methods[m].name,
				 kva_cuda_importer_copy_method(imp) != methods[m].method
				     ? " (fell back)"
				     : "");
			printf("| %-34s | %9.2f | %8.2f | %10llu |\n", name, gbs, gbs / contiguous,
			       (unsigned long long)((st1.copy_calls - st0.copy_calls) /
						    (uint64_t)reps));
			if (atomic_load(&d.failed))
				printf("  !! %llu failed jobs (cudaError_t %d)\n",
				       (unsigned long long)atomic_load(&d.failed),
				       kva_cuda_importer_cuda_error(imp));
			kva_cuda_importer_destroy(imp);
		}
		free(perm);
	}

	/* 3. decode alone and with imports in flight */
	const size_t pb = 64 << 10;
	const uint32_t pages = (uint32_t)(T / pb), per = 256, jobs = pages / per;
	uint32_t *perm = permutation(pages, 99);
	struct src s = {host, pb, per, jobs};
	struct done d = {0};
	kva_cuda_importer *imp = make_importer(&s, dev, pages, KVA_CUDA_COPY_AUTO, &d);
	cudaStream_t decode = kva_cuda_importer_decode_stream(imp);
	kva_importer_ref ref = kva_cuda_importer_ref(imp);
	const int iters = 40;
	for (int i = 0; i < 3; i++)
		CK((cudaError_t)kvab_decode_launch(kv, kv_bytes, out, decode));
	CK(cudaStreamSynchronize(decode));
	double alone[32], with[32], imp_gbs[32];
	uint32_t attempt = 1;
	for (int r = 0; r < reps; r++) {
		float ms = 0;
		CK(cudaEventRecord(e0, decode));
		for (int i = 0; i < iters; i++)
			CK((cudaError_t)kvab_decode_launch(kv, kv_bytes, out, decode));
		CK(cudaEventRecord(e1, decode));
		CK(cudaEventSynchronize(e1));
		CK(cudaEventElapsedTime(&ms, e0, e1));
		alone[r] = ms / iters;

		/* imports first, so they are running when decode starts; then keep
		 * them coming until the last decode kernel ends */
		uint64_t ok0 = atomic_load(&d.ok);
		submit_all(ref, perm, per, jobs / 2 ? jobs / 2 : 1, attempt++);
		CK(cudaEventRecord(e0, decode));
		for (int i = 0; i < iters; i++)
			CK((cudaError_t)kvab_decode_launch(kv, kv_bytes, out, decode));
		CK(cudaEventRecord(e1, decode));
		uint64_t t0 = now_ns();
		while (cudaEventQuery(e1) == cudaErrorNotReady) {
			kva_importer_stats st;
			kva_cuda_importer_stats(imp, &st);
			if (st.in_flight < jobs / 4 + 1)
				submit_all(ref, perm, per, jobs / 4 ? jobs / 4 : 1, attempt++);
		}
		double window = (double)(now_ns() - t0);
		uint64_t moved = (atomic_load(&d.ok) - ok0) * per * pb;
		CK(cudaEventElapsedTime(&ms, e0, e1));
		with[r] = ms / iters;
		imp_gbs[r] = (double)moved / window;
		kva_cuda_importer_wait_idle(imp, 0);
	}
	double a = median(alone, reps), w = median(with, reps), ig = median(imp_gbs, reps);
	double slowdown = (w / a - 1.0) * 100.0;
	printf("\n| %-34s | %9s | %14s |\n", "decode kernel (1 GiB read)", "ms/iter",
	       "import GB/s");
	printf("|%s|%s|%s|\n", "------------------------------------", "-----------",
	       "----------------");
	printf("| %-34s | %9.3f | %14s |\n", "alone", a, "-");
	printf("| %-34s | %9.3f | %14.2f |\n", "with imports in flight", w, ig);
	kva_cuda_importer_destroy(imp);
	free(perm);

	printf("\ntargets: scattered 64 KiB import %.0f%% of contiguous (>= 80%%): %s; "
	       "decode slowdown %.1f%% (<= 5%%): %s\n",
	       100.0 * best64 / contiguous, best64 >= 0.8 * contiguous ? "met" : "NOT met",
	       slowdown, slowdown <= 5.0 ? "met" : "NOT met");
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	cudaStreamDestroy(cs);
	cudaFree(out);
	cudaFree(kv);
	cudaFree(dev);
	cudaFreeHost(host);
	return 0;
}
#endif

static int probe_device(void)
{
	static char dummy[16];
	kva_cuda_importer_config c;
	kva_cuda_importer_config_default(&c);
	c.page_bytes = 4096;
	c.dest_base = dummy;
	c.dest_pages = 1;
	c.resolve = src_resolve;
	int err = 0, ce = 0;
	kva_cuda_importer *imp = kva_cuda_importer_create(&c, &err);
	if (imp) {
		kva_cuda_importer_destroy(imp);
		return 0;
	}
	const char *why = kva_cuda_importer_last_error(&ce);
	printf("cuda_import: SKIPPED: %s [%s]\n", why, kva_strerror(err));
	return 77;
}

int main(int argc, char **argv)
{
	bool cpu = false;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--cpu"))
			cpu = true;
		else if (!strcmp(argv[i], "--total-mib") && i + 1 < argc)
			total_mib = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
			reps = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--streams") && i + 1 < argc)
			nstreams = (uint32_t)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--completion") && i + 1 < argc)
			completion = !strcmp(argv[++i], "event") ? KVA_CUDA_COMPLETE_EVENT
								 : KVA_CUDA_COMPLETE_HOSTFUNC;
		else {
			fprintf(stderr,
				"usage: %s [--cpu] [--total-mib N] [--reps N] [--streams K] "
				"[--completion hostfunc|event]\n",
				argv[0]);
			return 2;
		}
	}
	if (reps < 1 || reps > 16 || total_mib < 64) {
		fprintf(stderr, "reps 1..16, total-mib >= 64\n");
		return 2;
	}
	if (cpu)
		return run_cpu();
	int p = probe_device();
	if (p)
		return p;
#ifdef KVADMIT_HAVE_CUDA
	return run_cuda();
#else
	return 77;
#endif
}
