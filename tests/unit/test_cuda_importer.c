/* SPDX-License-Identifier: Apache-2.0 */
/* The CUDA importer. Without CUDA in the build, or without a usable device,
 * create must fail with -ENOTSUP / -ENODEV and a message (checked here), and
 * the executable exits 77 so ctest reports it SKIPPED. With a device:
 * imported pages hold the checkpoint bytes (engine end to end, and scattered
 * jobs in every completion mode and copy method), bad sources fail cleanly,
 * and a memory-bound "decode" kernel on the decode stream finishes while
 * imports are still in flight.
 *
 * The importer's progress thread only calls the resolve and report callbacks
 * below, which never call cmocka; everything is asserted on the main thread. */
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#include "scenario/scenario.h"
#include "kva_test.h"
#include "kvadmit/importer.h"

#ifdef KVADMIT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif
#ifdef KVA_TEST_DECODE_KERNEL
#include "decode_kernel.h"
#endif

#define SKIP 77

static int no_resolve(void *ctx, uint64_t id, uint64_t epoch, uint32_t rank, const void **src,
		      size_t *bytes)
{
	(void)ctx, (void)id, (void)epoch, (void)rank, (void)src, (void)bytes;
	return -ENOENT;
}

/* Returns 0 when a device is usable, SKIP when not (after checking that the
 * failure is reported as documented), 1 when the reporting is wrong. */
static int probe(void)
{
	kva_cuda_importer_config c;
	kva_cuda_importer_config_default(&c);
	char dummy[16];
	c.page_bytes = 4096;
	c.dest_base = dummy; /* never touched: create fails, or the importer sees no job */
	c.dest_pages = 1;
	c.resolve = no_resolve;
	int err = 1, cuda_err = -1;
	kva_cuda_importer *imp = kva_cuda_importer_create(&c, &err);
	if (imp) {
		kva_cuda_importer_destroy(imp);
		return err == 0 ? 0 : 1;
	}
	const char *msg = kva_cuda_importer_last_error(&cuda_err);
#ifdef KVADMIT_HAVE_CUDA
	if (err != -ENODEV || !msg || !*msg || cuda_err == 0) {
		fprintf(stderr,
			"create failed as %d (%s), cudaError_t %d: not the documented -ENODEV\n",
			err, msg ? msg : "(null)", cuda_err);
		return 1;
	}
#else
	if (err != -ENOTSUP || !msg || !*msg || cuda_err != 0) {
		fprintf(stderr, "create failed as %d without CUDA: not the documented -ENOTSUP\n",
			err);
		return 1;
	}
#endif
	printf("SKIPPED: no CUDA importer here: %s (%s)\n", msg, kva_strerror(err));
	return SKIP;
}

#ifdef KVADMIT_HAVE_CUDA

#define CU(call) assert_int_equal((int)(call), (int)cudaSuccess)

static uint64_t wall_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * SC_SEC + (uint64_t)ts.tv_nsec;
}

/* ---- a pinned checkpoint store: checkpoint k is pages [k*per, (k+1)*per) --- */
struct store {
	unsigned char *pinned; /* cudaHostAlloc */
	unsigned char *pageable;
	size_t page_bytes;
	uint32_t per;	      /* pages per checkpoint */
	uint32_t count;	      /* checkpoints */
	uint64_t pageable_id; /* this checkpoint resolves to pageable memory */
};

static void fill(unsigned char *p, size_t n, uint64_t seed)
{
	uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
	uint64_t *w = (uint64_t *)p;
	for (size_t i = 0; i < n / 8; i++)
		w[i] = kva_test_rand(&x);
}

static void store_init(struct store *s, size_t page_bytes, uint32_t per, uint32_t count)
{
	memset(s, 0, sizeof(*s));
	s->page_bytes = page_bytes;
	s->per = per;
	s->count = count;
	s->pageable_id = UINT64_MAX;
	size_t bytes = page_bytes * per * count;
	CU(cudaHostAlloc((void **)&s->pinned, bytes, cudaHostAllocDefault));
	fill(s->pinned, bytes, 7);
	s->pageable = malloc(page_bytes * per);
	assert_non_null(s->pageable);
	fill(s->pageable, page_bytes * per, 8);
}

static void store_fini(struct store *s)
{
	cudaFreeHost(s->pinned);
	free(s->pageable);
}

static int store_resolve(void *ctx, uint64_t id, uint64_t epoch, uint32_t rank, const void **src,
			 size_t *bytes)
{
	(void)epoch;
	(void)rank;
	struct store *s = ctx;
	*bytes = s->page_bytes * s->per;
	if (id == s->pageable_id) {
		*src = s->pageable;
		return 0;
	}
	if (id >= s->count)
		return -ENOENT;
	*src = s->pinned + id * *bytes;
	return 0;
}

/* Copies `np` device pages back and compares them with checkpoint `id`. */
static void assert_device_pages(const struct store *s, const unsigned char *dev_base,
				const uint32_t *pages, uint32_t np, uint64_t id)
{
	unsigned char *h = malloc(s->page_bytes);
	assert_non_null(h);
	for (uint32_t i = 0; i < np; i++) {
		CU(cudaMemcpy(h, dev_base + (size_t)pages[i] * s->page_bytes, s->page_bytes,
			      cudaMemcpyDeviceToHost));
		assert_memory_equal(h, s->pinned + (id * s->per + i) * s->page_bytes,
				    s->page_bytes);
	}
	free(h);
}

/* ---- direct jobs with a report override -------------------------------------- */
#define MAXJ 256

struct reports {
	_Atomic uint32_t count[MAXJ];
	_Atomic int status[MAXJ];
};

static void on_report(void *ctx, kva_engine *e, const kva_copy_job *job, int status)
{
	(void)e;
	struct reports *r = ctx;
	if (job->token.id < MAXJ) {
		atomic_store(&r->status[job->token.id], status);
		atomic_fetch_add(&r->count[job->token.id], 1);
	}
}

static void base_config(kva_cuda_importer_config *c, struct store *s, void *dev, uint32_t pages)
{
	kva_cuda_importer_config_default(c);
	c->page_bytes = s->page_bytes;
	c->dest_base = dev;
	c->dest_pages = pages;
	c->resolve = store_resolve;
	c->resolve_ctx = s;
}

/* A random permutation of [0, n): every job gets scattered, disjoint pages. */
static uint32_t *scatter(uint32_t n, uint64_t seed)
{
	uint32_t *p = malloc(n * sizeof(*p));
	assert_non_null(p);
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

static void cuda_scattered_jobs_hold_checkpoint_bytes_in_every_mode(void **state)
{
	(void)state;
	enum { PER = 16, JOBS = 32, PAGES = PER * JOBS };
	struct store s;
	store_init(&s, 64 << 10, PER, JOBS);
	void *dev = NULL;
	CU(cudaMalloc(&dev, (size_t)PAGES * s.page_bytes));
	uint32_t *perm = scatter(PAGES, 11);
	static const struct {
		int completion, method;
		bool manual;
	} modes[] = {
	    {KVA_CUDA_COMPLETE_HOSTFUNC, KVA_CUDA_COPY_RUNS, false},
	    {KVA_CUDA_COMPLETE_HOSTFUNC, KVA_CUDA_COPY_AUTO, false},
	    {KVA_CUDA_COMPLETE_EVENT, KVA_CUDA_COPY_RUNS, false},
	    {KVA_CUDA_COMPLETE_EVENT, KVA_CUDA_COPY_AUTO, true},
	};
	for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
		CU(cudaMemset(dev, 0xEE, (size_t)PAGES * s.page_bytes));
		struct reports *rep = calloc(1, sizeof(*rep));
		assert_non_null(rep);
		kva_cuda_importer_config c;
		base_config(&c, &s, dev, PAGES);
		c.streams = 3;
		c.completion = modes[m].completion;
		c.copy_method = modes[m].method;
		c.manual_progress = modes[m].manual;
		c.report = on_report;
		c.report_ctx = rep;
		int err = 1;
		kva_cuda_importer *imp = kva_cuda_importer_create(&c, &err);
		assert_int_equal(err, 0);
		kva_importer_ref ref = kva_cuda_importer_ref(imp);
		for (uint32_t k = 0; k < JOBS; k++) {
			kva_copy_job job = {.token = {k, 1, 1},
					    .rank = 0,
					    .world_size = 1,
					    .checkpoint_id = k,
					    .npages = PER,
					    .pages = perm + k * PER};
			assert_int_equal(ref.submit(ref.ctx, NULL, &job), 0);
		}
		assert_int_equal(kva_cuda_importer_wait_idle(imp, 60 * SC_SEC), 0);
		for (uint32_t k = 0; k < JOBS; k++) {
			assert_int_equal(atomic_load(&rep->count[k]), 1);
			assert_int_equal(atomic_load(&rep->status[k]), 0);
			assert_device_pages(&s, dev, perm + k * PER, PER, k);
		}
		kva_importer_stats st;
		kva_cuda_importer_stats(imp, &st);
		assert_int_equal(st.jobs_ok, JOBS);
		assert_int_equal(st.pages_copied, PAGES);
		assert_int_equal(st.bytes_copied, (uint64_t)PAGES * s.page_bytes);
		assert_int_equal(kva_cuda_importer_cuda_error(imp), 0);
		printf("  mode %zu: method %d, %llu copy calls for %u jobs\n", m,
		       kva_cuda_importer_copy_method(imp), (unsigned long long)st.copy_calls, JOBS);
		kva_cuda_importer_destroy(imp);
		free(rep);
	}
	free(perm);
	cudaFree(dev);
	store_fini(&s);
}

static void cuda_bad_jobs_fail_cleanly(void **state)
{
	(void)state;
	struct store s;
	store_init(&s, 4096, 4, 2);
	s.pageable_id = 1; /* checkpoint 1 comes back in pageable memory */
	void *dev = NULL;
	CU(cudaMalloc(&dev, 64 * 4096));
	struct reports *rep = calloc(1, sizeof(*rep));
	kva_cuda_importer_config c;
	base_config(&c, &s, dev, 64);
	c.report = on_report;
	c.report_ctx = rep;
	int err = 1;
	kva_cuda_importer *imp = kva_cuda_importer_create(&c, &err);
	assert_int_equal(err, 0);
	kva_importer_ref ref = kva_cuda_importer_ref(imp);
	uint32_t pages[4] = {0, 1, 2, 3}, bad[4] = {0, 1, 2, 64};
	kva_copy_job job = {
	    .token = {1, 1, 1}, .world_size = 1, .checkpoint_id = 1, .npages = 4, .pages = pages};
	assert_int_equal(ref.submit(ref.ctx, NULL, &job), 0); /* pageable: -EFAULT */
	job.token.id = 2;
	job.checkpoint_id = 99; /* unknown: the resolver's -ENOENT */
	assert_int_equal(ref.submit(ref.ctx, NULL, &job), 0);
	job.pages = bad;
	assert_int_equal(ref.submit(ref.ctx, NULL, &job), -ERANGE);
	assert_int_equal(kva_cuda_importer_wait_idle(imp, 60 * SC_SEC), 0);
	assert_int_equal(atomic_load(&rep->status[1]), -EFAULT);
	assert_int_equal(atomic_load(&rep->status[2]), -ENOENT);
	kva_importer_stats st;
	kva_cuda_importer_stats(imp, &st);
	assert_int_equal(st.jobs_failed, 2);
	assert_int_equal(st.jobs_refused, 1);
	kva_cuda_importer_destroy(imp);

	/* a decode stream already at the lowest priority is refused unless allowed */
	cudaStream_t low;
	int least = 0, greatest = 0;
	CU(cudaDeviceGetStreamPriorityRange(&least, &greatest));
	CU(cudaStreamCreateWithPriority(&low, cudaStreamNonBlocking, least));
	c.decode_stream = low;
	assert_null(kva_cuda_importer_create(&c, &err));
	assert_int_equal(err, -EINVAL);
	c.allow_equal_priority = true;
	imp = kva_cuda_importer_create(&c, &err);
	assert_non_null(imp);
	assert_ptr_equal(kva_cuda_importer_decode_stream(imp), low);
	kva_cuda_importer_destroy(imp);
	cudaStreamDestroy(low);
	free(rep);
	cudaFree(dev);
	store_fini(&s);
}

/* The engine drives the CUDA importer: admissions arrive only once the
 * device pages hold the checkpoint bytes. */
static void cuda_engine_restores_hold_checkpoint_bytes(void **state)
{
	(void)state;
	enum { PER = 8, N = 12, POOL = 512 };
	struct store s;
	store_init(&s, 32 << 10, PER, N);
	void *dev = NULL;
	CU(cudaMalloc(&dev, (size_t)POOL * s.page_bytes));
	kva_cuda_importer_config ic;
	base_config(&ic, &s, dev, POOL);
	int err = 1;
	kva_cuda_importer *imp = kva_cuda_importer_create(&ic, &err);
	assert_int_equal(err, 0);
	kva_config c;
	sc_config(&c);
	c.total_pages = POOL;
	c.importers[0] = kva_cuda_importer_ref(imp);
	struct sc *e = sc_new(&c);
	kva_handle h[N];
	for (uint32_t i = 0; i < N; i++) {
		/* partial use of a checkpoint's pages is fine: position < PER * 16 */
		sc_dir_set(e, 50 + i, sc_ckpt(PER * 16, i, 0));
		h[i] = sc_submit(e, i + 1, 50 + i, PER * 16 + 40);
	}
	uint32_t done = 0;
	uint64_t end = wall_ns() + 60 * SC_SEC;
	while (done < N && wall_ns() < end) {
		sc_step(e, SC_MS);
		for (uint32_t a = 0; a < e->plan.n_admitted; a++) {
			const kva_admission *ad = &e->admitted[a];
			assert_int_equal(ad->how, KVA_ADMIT_RESTORE);
			assert_int_equal(ad->npages, PER);
			assert_device_pages(&s, dev, e->pages + ad->pages_off, PER,
					    ad->handle.id - 1);
			assert_int_equal(kva_finish(e->e, ad->handle), 0);
			done++;
		}
		(void)kva_cuda_importer_wait_idle(imp, SC_MS);
	}
	assert_int_equal(done, N);
	(void)h;
	kva_cuda_importer_destroy(imp); /* importers before the engine */
	sc_free(e);
	cudaFree(dev);
	store_fini(&s);
}

#ifdef KVA_TEST_DECODE_KERNEL
static void cuda_decode_kernel_keeps_running_while_importing(void **state)
{
	(void)state;
	enum { PER = 128, JOBS = 128, PAGES = PER * JOBS }; /* 2 GiB of 128 KiB pages */
	struct store s;
	store_init(&s, 128 << 10, PER, JOBS);
	void *dev = NULL, *kv = NULL;
	unsigned long long *out = NULL, sum = 0;
	const size_t kv_bytes = 512ull << 20;
	CU(cudaMalloc(&dev, (size_t)PAGES * s.page_bytes));
	CU(cudaMalloc(&kv, kv_bytes));
	CU(cudaMalloc((void **)&out, sizeof(*out)));
	CU(cudaMemset(kv, 0x01, kv_bytes));
	uint32_t *perm = scatter(PAGES, 5);
	struct reports *rep = calloc(1, sizeof(*rep));
	kva_cuda_importer_config c;
	base_config(&c, &s, dev, PAGES);
	c.report = on_report;
	c.report_ctx = rep;
	int err = 1;
	kva_cuda_importer *imp = kva_cuda_importer_create(&c, &err); /* creates the decode stream */
	assert_int_equal(err, 0);
	cudaStream_t decode = kva_cuda_importer_decode_stream(imp);
	assert_non_null(decode);
	CU(cudaDeviceSynchronize()); /* the test's own setup, before any import */

	kva_importer_ref ref = kva_cuda_importer_ref(imp);
	for (uint32_t k = 0; k < JOBS; k++) {
		kva_copy_job job = {.token = {k, 1, 1},
				    .world_size = 1,
				    .checkpoint_id = k,
				    .npages = PER,
				    .pages = perm + k * PER};
		assert_int_equal(ref.submit(ref.ctx, NULL, &job), 0);
	}
	/* wait until copies are on the import streams */
	kva_importer_stats st;
	uint64_t end = wall_ns() + 10 * SC_SEC;
	do
		kva_cuda_importer_stats(imp, &st);
	while (st.copy_calls == 0 && wall_ns() < end);
	assert_true(st.copy_calls > 0);

	uint64_t t0 = wall_ns();
	for (int i = 0; i < 20; i++)
		assert_int_equal(kvab_decode_launch(kv, kv_bytes, out, decode), 0);
	CU(cudaStreamSynchronize(decode));
	uint64_t decode_ns = wall_ns() - t0;
	kva_cuda_importer_stats(imp, &st);
	uint64_t pending = st.in_flight;
	CU(cudaMemcpy(&sum, out, sizeof(sum), cudaMemcpyDeviceToHost));
	assert_int_equal(kva_cuda_importer_wait_idle(imp, 60 * SC_SEC), 0);
	uint64_t import_ns = wall_ns() - t0;
	printf("  decode x20: %.2f ms with %llu of %u import jobs still in flight at its end; "
	       "imports done after %.2f ms\n",
	       decode_ns / 1e6, (unsigned long long)pending, JOBS, import_ns / 1e6);
	assert_int_equal(sum, kvab_decode_expected(kv_bytes, 0x01));
	/* decode finished while imports were still in flight: not serialised behind them */
	assert_true(pending > 0);
	kva_cuda_importer_stats(imp, &st);
	assert_int_equal(st.jobs_ok, JOBS);
	for (uint32_t k = 0; k < JOBS; k += 17)
		assert_device_pages(&s, dev, perm + k * PER, PER, k);
	kva_cuda_importer_destroy(imp);
	free(rep);
	free(perm);
	cudaFree(out);
	cudaFree(kv);
	cudaFree(dev);
	store_fini(&s);
}
#endif

#endif /* KVADMIT_HAVE_CUDA */

#ifdef KVA_TEST_DECODE_KERNEL
/* Hardening issue, item 14: a sticky error while jobs are in flight (host
 * functions stop running) must not leave them unreported. Every job is
 * reported once, those the fault caught as failed; the importer is dead
 * (submits refused with -EIO, the engine falls back) and destroy returns.
 * Runs last: it corrupts this process's CUDA context for good. */
static void cuda_sticky_error_fails_outstanding_jobs_and_kills_the_importer(void **state)
{
	(void)state;
	enum { PER = 2, N = 6 };
	struct store s;
	store_init(&s, (size_t)64 << 20, PER, N); /* 128 MiB a job: copies in flight */
	void *dev = NULL;
	CU(cudaMalloc(&dev, (size_t)PER * N * s.page_bytes));
	struct reports *rep = calloc(1, sizeof(*rep));
	kva_cuda_importer_config c;
	base_config(&c, &s, dev, PER * N);
	c.report = on_report;
	c.report_ctx = rep;
	c.completion = KVA_CUDA_COMPLETE_HOSTFUNC;
	int err = 1;
	kva_cuda_importer *imp = kva_cuda_importer_create(&c, &err);
	assert_int_equal(err, 0);
	kva_importer_ref ref = kva_cuda_importer_ref(imp);
	/* the fault comes a few milliseconds into the copies */
	assert_int_equal(kvab_fault_launch(4000000ull, kva_cuda_importer_decode_stream(imp)), 0);
	uint32_t pages[N][PER];
	for (uint32_t k = 0; k < N; k++) {
		for (uint32_t i = 0; i < PER; i++)
			pages[k][i] = k * PER + i;
		kva_copy_job job = {.token = {1 + k, 1, 1}, .world_size = 1, .checkpoint_id = k,
				    .npages = PER, .pages = pages[k]};
		int rc = ref.submit(ref.ctx, NULL, &job);
		assert_true(rc == 0 || rc == -EIO); /* -EIO: already dead */
		if (rc)
			atomic_fetch_add(&rep->count[1 + k], 1); /* refused counts as its report */
	}
	assert_int_equal(kva_cuda_importer_wait_idle(imp, 30 * SC_SEC), 0);
	uint32_t failed = 0;
	for (uint32_t k = 0; k < N; k++) {
		assert_int_equal(atomic_load(&rep->count[1 + k]), 1);
		failed += atomic_load(&rep->status[1 + k]) != 0;
	}
	assert_true(failed >= 1);
	assert_int_not_equal(kva_cuda_importer_cuda_error(imp), 0);
	kva_copy_job late = {.token = {100, 1, 1}, .world_size = 1, .checkpoint_id = 0,
			     .npages = PER, .pages = pages[0]};
	assert_int_equal(ref.submit(ref.ctx, NULL, &late), -EIO);
	kva_cuda_importer_destroy(imp);
	free(rep);
}
#endif

int main(void)
{
	int p = probe();
	if (p)
		return p;
#ifdef KVADMIT_HAVE_CUDA
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(cuda_scattered_jobs_hold_checkpoint_bytes_in_every_mode),
	    cmocka_unit_test(cuda_bad_jobs_fail_cleanly),
	    cmocka_unit_test(cuda_engine_restores_hold_checkpoint_bytes),
#ifdef KVA_TEST_DECODE_KERNEL
	    cmocka_unit_test(cuda_decode_kernel_keeps_running_while_importing),
	    /* last: it breaks the process's CUDA context */
	    cmocka_unit_test(cuda_sticky_error_fails_outstanding_jobs_and_kills_the_importer),
#endif
	};
	return cmocka_run_group_tests_name("cuda_importer", tests, NULL, NULL);
#else
	return SKIP;
#endif
}
