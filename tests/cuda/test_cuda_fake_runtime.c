/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The real CUDA importer, cuda/cuda_*.c compiled into this test, on
 * fake_cudart.c, a CPU fake of the CUDA runtime and driver calls it makes,
 * so that its issue, completion, context and error paths run in every
 * build without a GPU. Built wherever the toolkit's headers are found (no
 * nvcc, libcudart or device needed); without them it exits 77 (skipped).
 *
 * Checked here:
 *   - copies land, byte for byte, in every completion mode x progress mode
 *     x copy method, one copy call per job with batched copies;
 *   - destroy with copies in flight reports every job exactly once (copied,
 *     or -ECANCELED when never issued) and returns;
 *   - a non-sticky error, cudaErrorDevicesUnavailable and cudaErrorUnknown
 *     included, fails only the job that met it, and the importer goes on;
 *     an asynchronous error read from a job's event fails that job only;
 *   - a sticky error, found while copies are in flight or met while
 *     issuing, fails every job exactly once, later submits are refused or
 *     failed, and destroy returns;
 *   - the calling thread's context (none, a driver-API one, or a device it
 *     chose) is the same after create, progress and destroy, and no
 *     context is ever created on a device the importer does not use;
 *   - a source whose tail is not pinned is refused with -EFAULT;
 *   - manual progress never waits on the device when a job's completion
 *     marker or event cannot be enqueued, and such a job is reported only
 *     once its copies stopped (its stream idle, or a later event done);
 *   - the decode stream: NULL creates one; cudaStreamLegacy is accepted
 *     only with allow_equal_priority;
 *   - create fails with -ENODEV when the driver's functions are missing.
 *
 * The importer's threads only call resolve and report below, which touch
 * atomics and nothing else; every assertion runs on the test's thread.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifndef KVA_HAVE_CUDA_HEADERS

int main(void)
{
	printf("SKIPPED: the CUDA toolkit's headers were not found in this build\n");
	return 77;
}

#else

#include <sys/wait.h>

#include "kvadmit/importer.h"
#include "fake_cudart.h"

#define PB 256		      /* page bytes */
#define PER 8		      /* pages per checkpoint, the most a job copies */
#define NCK 64		      /* checkpoints; job k copies checkpoint k */
#define DEST_PAGES (NCK * PER) /* job k writes pages [k*PER, k*PER + np) */
#define WAIT_NS 5000000000ull

/* ---- the rig: a pinned checkpoint store and a device page pool ---------- */

struct rig {
	kva_cuda_importer *imp;
	kva_importer_ref ref;
	unsigned char *src; /* cudaHostAlloc: checkpoint k at src + k * PER * PB */
	unsigned char *dst; /* cudaMalloc */
	uint32_t np[NCK];
	uint32_t pages[NCK][PER];
	size_t bytes[NCK];
	const unsigned char *src_of[NCK]; /* resolve's answer where set */
	_Atomic int times[NCK];		  /* reports of job k */
	_Atomic int status[NCK];	  /* its last status */
};

static struct rig R;

/* Job k: 1 + k % PER pages, the last one partial when k % 3 == 0; the
 * first half of its destination pages consecutive (one run), the rest
 * descending (one run each). */
static void layout(uint32_t k)
{
	uint32_t np = 1 + k % PER, h = np / 2, base = k * PER;
	R.np[k] = np;
	R.bytes[k] = (size_t)np * PB - (k % 3 == 0 ? PB / 3 : 0);
	for (uint32_t i = 0; i < np; i++)
		R.pages[k][i] = i < h ? base + i : base + h + (np - 1 - i);
}

/* Copy calls job k takes with one cudaMemcpyAsync per run. */
static uint32_t runs_of(uint32_t k)
{
	uint32_t runs = 1;
	for (uint32_t i = 1; i < R.np[k]; i++)
		runs += R.pages[k][i] != R.pages[k][i - 1] + 1;
	return runs;
}

static int resolve(void *ctx, uint64_t id, uint64_t epoch, uint32_t rank, const void **src,
		   size_t *bytes)
{
	(void)ctx, (void)epoch, (void)rank;
	if (id >= NCK)
		return -ENOENT;
	*src = R.src_of[id] ? R.src_of[id] : R.src + id * PER * PB;
	*bytes = R.bytes[id];
	return 0;
}

static void report(void *ctx, kva_engine *e, const kva_copy_job *job, int status)
{
	(void)ctx, (void)e;
	uint64_t k = job->token.id;
	atomic_store_explicit(&R.status[k], status, memory_order_relaxed);
	/* R1: pairs with A1 in times(): the status and the copied pages are
	 * visible to a test thread that sees the report */
	atomic_fetch_add_explicit(&R.times[k], 1, memory_order_release);
}

static int times(uint32_t k)
{
	/* A1: pairs with R1 in report() */
	return atomic_load_explicit(&R.times[k], memory_order_acquire);
}

static int status(uint32_t k)
{
	return atomic_load_explicit(&R.status[k], memory_order_relaxed); /* after times() */
}

static void rig_init(int ndev)
{
	fake_cuda_reset(ndev);
	memset(&R, 0, sizeof(R));
	assert_int_equal(cudaHostAlloc((void **)&R.src, (size_t)NCK * PER * PB, 0), cudaSuccess);
	assert_int_equal(cudaMalloc((void **)&R.dst, (size_t)DEST_PAGES * PB), cudaSuccess);
	for (size_t i = 0; i < (size_t)NCK * PER * PB; i++)
		R.src[i] = (unsigned char)(i * 131 + i / PB + 7);
	for (uint32_t k = 0; k < NCK; k++)
		layout(k);
}

static void rig_fini(void)
{
	assert_int_equal(cudaFreeHost(R.src), cudaSuccess);
	assert_int_equal(cudaFree(R.dst), cudaSuccess);
}

static kva_cuda_importer_config config(int completion, bool manual, int method)
{
	kva_cuda_importer_config c;
	kva_cuda_importer_config_default(&c);
	c.page_bytes = PB;
	c.dest_base = R.dst;
	c.dest_pages = DEST_PAGES;
	c.resolve = resolve;
	c.report = report;
	c.completion = completion;
	c.manual_progress = manual;
	c.copy_method = method;
	return c;
}

static void start(const kva_cuda_importer_config *c)
{
	int err = 1;
	R.imp = kva_cuda_importer_create(c, &err);
	if (!R.imp)
		fail_msg("create: %d: %s", err, kva_cuda_importer_last_error(NULL));
	assert_int_equal(err, 0);
	R.ref = kva_cuda_importer_ref(R.imp);
}

static int submit(uint32_t k)
{
	kva_copy_job job = {.token = {.id = k, .gen = 1, .attempt = 1},
			    .rank = 0,
			    .world_size = 1,
			    .checkpoint_id = k,
			    .npages = R.np[k],
			    .pages = R.pages[k]};
	return R.ref.submit(R.ref.ctx, NULL, &job);
}

/* Job k's destination pages hold checkpoint k. */
static bool landed(uint32_t k)
{
	const unsigned char *s = R.src_of[k] ? R.src_of[k] : R.src + (size_t)k * PER * PB;
	for (uint32_t i = 0; i < R.np[k]; i++) {
		size_t len = R.bytes[k] - (size_t)i * PB < PB ? R.bytes[k] - (size_t)i * PB : PB;
		if (memcmp(R.dst + (size_t)R.pages[k][i] * PB, s + (size_t)i * PB, len) != 0)
			return false;
	}
	return true;
}

static bool untouched(uint32_t k)
{
	for (uint32_t i = 0; i < R.np[k]; i++)
		for (size_t b = 0; b < PB; b++)
			if (R.dst[(size_t)R.pages[k][i] * PB + b])
				return false;
	return true;
}

static void sleep_us(long us)
{
	struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
	nanosleep(&ts, NULL);
}

/* ---- hang guards: a hang fails the test instead of stalling ctest -------- */

struct guarded {
	sem_t done;
	kva_cuda_importer *imp;
	int n; /* progress's return */
};

static void *destroy_main(void *arg)
{
	struct guarded *g = arg;
	kva_cuda_importer_destroy(g->imp);
	sem_post(&g->done);
	return NULL;
}

static void *progress_main(void *arg)
{
	struct guarded *g = arg;
	g->n = kva_cuda_importer_progress(g->imp);
	sem_post(&g->done);
	return NULL;
}

static bool wait_sem(sem_t *s, long ms)
{
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += ms / 1000;
	dl.tv_nsec += (ms % 1000) * 1000000L;
	if (dl.tv_nsec >= 1000000000L) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000L;
	}
	int rc;
	while ((rc = sem_timedwait(s, &dl)) != 0 && errno == EINTR)
		;
	return rc == 0;
}

/* Destroys R.imp on another thread. A destroy that does not return within
 * 10 s cannot be recovered from: the process exits with a failure. */
static void destroy_within(void)
{
	struct guarded g = {.imp = R.imp};
	pthread_t t;
	sem_init(&g.done, 0, 0);
	assert_int_equal(pthread_create(&t, NULL, destroy_main, &g), 0);
	if (!wait_sem(&g.done, 10000)) {
		fprintf(stderr, "FAIL: kva_cuda_importer_destroy did not return within 10 s\n");
		fflush(NULL);
		_exit(1);
	}
	pthread_join(t, NULL);
	sem_destroy(&g.done);
	R.imp = NULL;
}

/* One kva_cuda_importer_progress call that must return within 2 s while
 * the device holds every copy. If it does not, the gate opens (so that it
 * can finish) and the test fails. */
static int progress_within(void)
{
	struct guarded g = {.imp = R.imp};
	pthread_t t;
	sem_init(&g.done, 0, 0);
	assert_int_equal(pthread_create(&t, NULL, progress_main, &g), 0);
	bool ok = wait_sem(&g.done, 2000);
	if (!ok)
		fake_cuda_gate(-1);
	pthread_join(t, NULL);
	sem_destroy(&g.done);
	if (!ok)
		fail_msg("kva_cuda_importer_progress waited on the device");
	return g.n;
}

/* Opens the gate after ms on another thread. */
static void *open_gate_main(void *arg)
{
	sleep_us((long)(intptr_t)arg * 1000);
	fake_cuda_gate(-1);
	return NULL;
}

/* Waits until n event records were made (thread mode: every job issued). */
static void wait_records(uint64_t n)
{
	for (int i = 0; i < 5000 && fake_cuda_calls(FAKE_EVENT_RECORD) < n; i++)
		sleep_us(1000);
	assert_true(fake_cuda_calls(FAKE_EVENT_RECORD) >= n);
}

/* Manual mode: progresses until job k was reported (or 2 s passed). */
static void progress_until(uint32_t k)
{
	for (int i = 0; i < 2000 && !times(k); i++) {
		(void)kva_cuda_importer_progress(R.imp);
		sleep_us(1000);
	}
}

static void assert_clean_run(void)
{
	struct fake_cuda_counts c;
	fake_cuda_counts(&c);
	assert_int_equal(c.unpinned_src, 0);
	assert_int_equal(c.bad_dst, 0);
	assert_int_equal(c.wrong_ctx, 0);
	assert_int_equal(c.implicit_binds, 0);
	for (int d = 0; d < FAKE_MAX_DEV; d++)
		assert_int_equal(c.primary_refs[d], 0); /* retained once, released once */
}

/* ---- modes ------------------------------------------------------------------ */

struct mode {
	int completion;
	bool manual;
	int method;
};

#define MODE(c, m, k) (&(struct mode){(c), (m), (k)})
#define HF KVA_CUDA_COMPLETE_HOSTFUNC
#define EV KVA_CUDA_COMPLETE_EVENT

/* ---- copies land ------------------------------------------------------------- */

static void copies_land(void **state)
{
	const struct mode *m = *state;
	rig_init(2);
	kva_cuda_importer_config c = config(m->completion, m->manual, m->method);
	c.streams = 3;
	start(&c);
#if CUDART_VERSION >= 12080
	int want = m->method == KVA_CUDA_COPY_RUNS ? KVA_CUDA_COPY_RUNS : KVA_CUDA_COPY_BATCH;
#else
	int want = KVA_CUDA_COPY_RUNS;
#endif
	assert_int_equal(kva_cuda_importer_copy_method(R.imp), want);
	const uint32_t n = 40;
	uint64_t calls = 0;
	for (uint32_t k = 0; k < n; k++) {
		assert_int_equal(submit(k), 0);
		calls += want == KVA_CUDA_COPY_BATCH ? 1 : runs_of(k);
	}
	assert_int_equal(kva_cuda_importer_wait_idle(R.imp, WAIT_NS), 0);
	for (uint32_t k = 0; k < n; k++) {
		assert_int_equal(times(k), 1);
		assert_int_equal(status(k), 0);
		assert_true(landed(k));
	}
	kva_importer_stats st;
	kva_cuda_importer_stats(R.imp, &st);
	assert_int_equal(st.jobs_submitted, n);
	assert_int_equal(st.jobs_ok, n);
	assert_int_equal(st.in_flight, 0);
	assert_int_equal(st.copy_calls, calls);
	assert_int_equal(fake_cuda_calls(FAKE_MEMCPY), calls);
	assert_int_equal(kva_cuda_importer_cuda_error(R.imp), 0);
	destroy_within();
	assert_clean_run();
	rig_fini();
}

/* ---- destroy with copies in flight ------------------------------------------------ */

static void destroy_in_flight(void **state)
{
	const struct mode *m = *state;
	rig_init(2);
	kva_cuda_importer_config c = config(m->completion, m->manual, KVA_CUDA_COPY_RUNS);
	start(&c);
	fake_cuda_gate(0); /* every copy stays in flight */
	const uint32_t issued = 24, queued = m->manual ? 6 : 0;
	for (uint32_t k = 0; k < issued; k++)
		assert_int_equal(submit(k), 0);
	if (m->manual)
		assert_int_equal(progress_within(), 0);
	else
		wait_records(issued);
	for (uint32_t k = issued; k < issued + queued; k++)
		assert_int_equal(submit(k), 0); /* manual: never issued */
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, open_gate_main, (void *)(intptr_t)30), 0);
	destroy_within();
	pthread_join(t, NULL);
	for (uint32_t k = 0; k < issued; k++) {
		assert_int_equal(times(k), 1);
		assert_int_equal(status(k), 0);
		assert_true(landed(k));
	}
	for (uint32_t k = issued; k < issued + queued; k++) {
		assert_int_equal(times(k), 1);
		assert_int_equal(status(k), -ECANCELED);
		assert_true(untouched(k));
	}
	assert_clean_run();
	rig_fini();
}

/* ---- D1: a non-sticky error fails one job; a sticky one fails all ------------------ */

struct fault {
	int completion;
	cudaError_t code;
	int err; /* the errno its job reports */
};

#define FAULT(c, code, err) (&(struct fault){(c), (code), (err)})

/* Thread mode: the 5th copy call fails with a non-sticky code. Exactly one
 * job fails, with that code's errno; the others land; the importer takes
 * more jobs; destroy returns. */
static void nonsticky_fails_one(void **state)
{
	const struct fault *f = *state;
	rig_init(2);
	kva_cuda_importer_config c = config(f->completion, false, KVA_CUDA_COPY_RUNS);
	start(&c);
	fake_cuda_fail(FAKE_MEMCPY, 5, f->code, false);
	const uint32_t n = 16;
	for (uint32_t k = 0; k < n; k++)
		assert_int_equal(submit(k), 0);
	int idle = kva_cuda_importer_wait_idle(R.imp, WAIT_NS);
	int later = submit(n); /* the importer goes on */
	int idle2 = kva_cuda_importer_wait_idle(R.imp, WAIT_NS);
	int cuda_err = kva_cuda_importer_cuda_error(R.imp);
	destroy_within(); /* before any assertion: never leave it running */
	assert_int_equal(idle, 0);
	assert_int_equal(later, 0);
	assert_int_equal(idle2, 0);
	assert_int_equal(cuda_err, (int)f->code);
	int failed = 0;
	for (uint32_t k = 0; k <= n; k++) {
		assert_int_equal(times(k), 1);
		if (status(k) == 0) {
			assert_true(landed(k));
			continue;
		}
		assert_int_equal(status(k), f->err);
		failed++;
	}
	assert_int_equal(failed, 1);
	assert_clean_run();
	rig_fini();
}

/* An asynchronous error read from the 3rd job's event fails that job only. */
static void async_error_fails_one(void **state)
{
	const struct mode *m = *state;
	rig_init(2);
	kva_cuda_importer_config c = config(m->completion, m->manual, KVA_CUDA_COPY_RUNS);
	start(&c);
	fake_cuda_fail_event(3, cudaErrorInvalidValue);
	const uint32_t n = 12;
	for (uint32_t k = 0; k < n; k++)
		assert_int_equal(submit(k), 0);
	int idle = kva_cuda_importer_wait_idle(R.imp, WAIT_NS);
	destroy_within();
	assert_int_equal(idle, 0);
	for (uint32_t k = 0; k < n; k++) {
		assert_int_equal(times(k), 1);
		assert_int_equal(status(k), k == 2 ? -EINVAL : 0);
	}
	assert_clean_run();
	rig_fini();
}

/* The context breaks while every job's copies are in flight: every job
 * reports -EIO exactly once (host-function mode finds it with the
 * watchdog: no marker comes), later submits are refused or failed, and
 * destroy returns. */
static void sticky_in_flight(void **state)
{
	const struct mode *m = *state;
	rig_init(2);
	kva_cuda_importer_config c = config(m->completion, m->manual, KVA_CUDA_COPY_RUNS);
	start(&c);
	fake_cuda_gate(0);
	const uint32_t n = 16;
	for (uint32_t k = 0; k < n; k++)
		assert_int_equal(submit(k), 0);
	if (m->manual)
		assert_int_equal(progress_within(), 0);
	else
		wait_records(n);
	fake_cuda_break(cudaErrorIllegalAddress);
	int idle = kva_cuda_importer_wait_idle(R.imp, WAIT_NS);
	/* A submit after the death: refused, or (if the dead flag was not
	 * published yet) failed with the same error. */
	int later = submit(n);
	int idle2 = kva_cuda_importer_wait_idle(R.imp, WAIT_NS);
	int cuda_err = kva_cuda_importer_cuda_error(R.imp);
	destroy_within();
	assert_int_equal(idle, 0);
	assert_int_equal(idle2, 0);
	assert_int_equal(cuda_err, (int)cudaErrorIllegalAddress);
	for (uint32_t k = 0; k < n; k++) {
		assert_int_equal(times(k), 1);
		assert_int_equal(status(k), -EIO);
		assert_true(untouched(k));
	}
	if (later == 0) {
		assert_int_equal(times(n), 1);
		assert_int_equal(status(n), -EIO);
	} else {
		assert_int_equal(later, -EIO);
		assert_int_equal(times(n), 0);
	}
	struct fake_cuda_counts cnt;
	fake_cuda_counts(&cnt);
	assert_true(cnt.ops_dropped > 0);
	rig_fini();
}

/* Manual mode, the context breaks at the 4th copy call while issuing: the
 * jobs already issued, the one that met it and those after all report
 * -EIO exactly once, and destroy returns. */
static void sticky_while_issuing(void **state)
{
	const struct mode *m = *state;
	rig_init(2);
	kva_cuda_importer_config c = config(m->completion, true, KVA_CUDA_COPY_RUNS);
	start(&c);
	fake_cuda_gate(0);
	fake_cuda_fail(FAKE_MEMCPY, 4, cudaErrorIllegalAddress, true);
	const uint32_t n = 12;
	for (uint32_t k = 0; k < n; k++)
		assert_int_equal(submit(k), 0);
	int reported = progress_within();
	int idle = kva_cuda_importer_wait_idle(R.imp, WAIT_NS);
	destroy_within();
	assert_int_equal(reported, (int)n);
	assert_int_equal(idle, 0);
	for (uint32_t k = 0; k < n; k++) {
		assert_int_equal(times(k), 1);
		assert_int_equal(status(k), -EIO);
	}
	rig_fini();
}

/* ---- D2: the calling thread's context --------------------------------------------- */

enum start_ctx { CTX_NONE, CTX_DRIVER, CTX_CHOSE_1, CTX_CHOSE_0 };

struct ctx_case {
	enum start_ctx start;
	bool manual;
	/* results, read after the thread is joined */
	bool created, same_after_create, same_after_progress, same_after_destroy;
	bool all_landed;
	int rt_dev_before, rt_dev_after;
};

static void *ctx_thread(void *arg)
{
	struct ctx_case *cc = arg;
	CUcontext driver = NULL;
	if (cc->start == CTX_DRIVER) {
		driver = fake_cuda_ctx_create(0);
		fake_cuda_set_current(driver);
	} else if (cc->start == CTX_CHOSE_1 || cc->start == CTX_CHOSE_0) {
		(void)cudaSetDevice(cc->start == CTX_CHOSE_1 ? 1 : 0);
	}
	CUcontext before = fake_cuda_current();
	cc->rt_dev_before = fake_cuda_runtime_device();
	kva_cuda_importer_config c = config(HF, cc->manual, KVA_CUDA_COPY_AUTO);
	c.device = 1;
	int err = 1;
	kva_cuda_importer *imp = kva_cuda_importer_create(&c, &err);
	cc->created = imp != NULL;
	if (!imp)
		goto out;
	cc->same_after_create = fake_cuda_current() == before;
	kva_importer_ref ref = kva_cuda_importer_ref(imp);
	const uint32_t n = 8;
	for (uint32_t k = 0; k < n; k++) {
		kva_copy_job job = {.token = {.id = k, .gen = 1},
				    .world_size = 1,
				    .checkpoint_id = k,
				    .npages = R.np[k],
				    .pages = R.pages[k]};
		(void)ref.submit(ref.ctx, NULL, &job);
	}
	cc->same_after_progress = true;
	if (cc->manual) {
		for (int i = 0; i < 2000 && !times(n - 1); i++) {
			(void)kva_cuda_importer_progress(imp);
			cc->same_after_progress &= fake_cuda_current() == before;
			sleep_us(500);
		}
	}
	(void)kva_cuda_importer_wait_idle(imp, WAIT_NS);
	cc->same_after_progress &= fake_cuda_current() == before;
	cc->all_landed = true;
	for (uint32_t k = 0; k < n; k++)
		cc->all_landed &= times(k) == 1 && status(k) == 0 && landed(k);
	kva_cuda_importer_destroy(imp);
	cc->same_after_destroy = fake_cuda_current() == before;
	cc->rt_dev_after = fake_cuda_runtime_device();
out:
	fake_cuda_set_current(NULL);
	fake_cuda_ctx_destroy(driver);
	return NULL;
}

/* A fresh thread starts as cc->start says, then creates an importer on
 * device 1, imports, and destroys it. */
static void keeps_context(void **state)
{
	struct ctx_case *cc = *state;
	rig_init(2);
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, ctx_thread, cc), 0);
	pthread_join(t, NULL);
	assert_true(cc->created);
	assert_true(cc->same_after_create);
	assert_true(cc->same_after_progress);
	assert_true(cc->same_after_destroy);
	assert_int_equal(cc->rt_dev_after, cc->rt_dev_before);
	assert_true(cc->all_landed);
	struct fake_cuda_counts c;
	fake_cuda_counts(&c);
	/* device 0's primary context exists only when the thread chose it */
	assert_int_equal(c.primary_inits[0], cc->start == CTX_CHOSE_0 ? 1 : 0);
	assert_int_equal(c.primary_inits[1], 1);
	assert_int_equal(c.primary_refs[1], 0);
	assert_int_equal(c.wrong_ctx, 0);
	assert_int_equal(c.implicit_binds, 0);
	/* the thread's own choice, if any, and nothing from the importer */
	assert_int_equal(c.setdevice, cc->start == CTX_CHOSE_0 || cc->start == CTX_CHOSE_1);
	rig_fini();
}

/* ---- D3: the whole share must be pinned --------------------------------------------- */

/* Checkpoint 4 (5 pages) lives in a pageable buffer of which only a part is
 * registered. */
static void share_pinned(void **state)
{
	const struct mode *m = *state;
	rig_init(2);
	kva_cuda_importer_config c = config(m->completion, m->manual, KVA_CUDA_COPY_RUNS);
	start(&c);
	const uint32_t k = 4;
	size_t span = R.bytes[k] + 2 * PB; /* the share, then bytes it does not copy */
	unsigned char *buf = malloc(span);
	assert_non_null(buf);
	for (size_t i = 0; i < span; i++)
		buf[i] = (unsigned char)(i * 17 + 3);
	R.src_of[k] = buf;

	/* the tail is pageable: refused */
	assert_int_equal(cudaHostRegister(buf, R.bytes[k] - PB, 0), cudaSuccess);
	uint64_t calls = fake_cuda_calls(FAKE_MEMCPY);
	assert_int_equal(submit(k), 0);
	assert_int_equal(kva_cuda_importer_wait_idle(R.imp, WAIT_NS), 0);
	assert_int_equal(times(k), 1);
	assert_int_equal(status(k), -EFAULT);
	assert_int_equal(fake_cuda_calls(FAKE_MEMCPY), calls);
	assert_true(untouched(k));
	assert_int_equal(cudaHostUnregister(buf), cudaSuccess);

	/* the head is pageable: refused */
	assert_int_equal(cudaHostRegister(buf + PB, span - PB, 0), cudaSuccess);
	assert_int_equal(submit(k), 0);
	assert_int_equal(kva_cuda_importer_wait_idle(R.imp, WAIT_NS), 0);
	assert_int_equal(times(k), 2);
	assert_int_equal(status(k), -EFAULT);
	assert_int_equal(fake_cuda_calls(FAKE_MEMCPY), calls);
	assert_true(untouched(k));
	assert_int_equal(cudaHostUnregister(buf + PB), cudaSuccess);

	/* exactly the bytes it copies are pinned, what follows is not: taken */
	R.bytes[k] = span; /* the resolved share is longer than the job */
	assert_int_equal(cudaHostRegister(buf, (size_t)R.np[k] * PB, 0), cudaSuccess);
	assert_int_equal(submit(k), 0);
	assert_int_equal(kva_cuda_importer_wait_idle(R.imp, WAIT_NS), 0);
	assert_int_equal(times(k), 3);
	assert_int_equal(status(k), 0);
	R.bytes[k] = (size_t)R.np[k] * PB;
	assert_true(landed(k));

	destroy_within();
	assert_int_equal(cudaHostUnregister(buf), cudaSuccess);
	free(buf);
	assert_clean_run();
	rig_fini();
}

/* ---- D4: manual progress never waits on the device -------------------------------------- */

/* Manual mode, host-function completion: the job's cudaLaunchHostFunc
 * fails (and, with no_event, its cudaEventRecord too). Progress returns
 * while its copies are held; the job is not reported before they ran; it
 * then reports its event's status, or fails without an event. */
static void no_marker(int completion, bool no_event)
{
	rig_init(2);
	kva_cuda_importer_config c = config(completion, true, KVA_CUDA_COPY_RUNS);
	start(&c);
	fake_cuda_gate(0);
	if (completion == HF)
		fake_cuda_fail(FAKE_HOSTFN, 1, cudaErrorMemoryAllocation, false);
	if (no_event)
		fake_cuda_fail(FAKE_EVENT_RECORD, 1, cudaErrorMemoryAllocation, false);
	const uint32_t k = 5;
	assert_int_equal(submit(k), 0);
	assert_int_equal(progress_within(), 0);
	for (int i = 0; i < 5; i++)
		assert_int_equal(progress_within(), 0); /* its copies are held */
	assert_int_equal(times(k), 0);
	fake_cuda_gate(-1);
	progress_until(k);
	assert_int_equal(times(k), 1);
	if (no_event) {
		assert_int_equal(status(k), -ENOMEM);
	} else {
		assert_int_equal(status(k), 0);
		assert_true(landed(k));
	}
	destroy_within();
	assert_int_equal(times(k), 1);
	assert_clean_run();
	rig_fini();
}

static void no_marker_event_status(void **state)
{
	(void)state;
	no_marker(HF, false);
}

static void no_marker_no_event(void **state)
{
	(void)state;
	no_marker(HF, true);
}

static void event_mode_no_event(void **state)
{
	(void)state;
	no_marker(EV, true);
}

/* One stream, manual mode: job A gets neither event nor marker, B and C
 * are issued after it. With A's and B's operations run and C's held, the
 * stream is never idle, yet A is reported (failed) once B shows the stream
 * got past it: it does not wait for an idle stream, which a busy importer
 * may never have. by_marker: B has no event either (its record fails), so
 * its host function is what shows it. */
static void fenced(bool by_marker)
{
	rig_init(2);
	kva_cuda_importer_config c = config(HF, true, KVA_CUDA_COPY_RUNS);
	c.streams = 1;
	start(&c);
	fake_cuda_gate(0);
	fake_cuda_fail(FAKE_HOSTFN, 1, cudaErrorMemoryAllocation, false); /* A's */
	if (by_marker) {
		fake_cuda_fail(FAKE_EVENT_CREATE, 1, cudaErrorMemoryAllocation, false); /* A's */
		fake_cuda_fail(FAKE_EVENT_RECORD, 1, cudaErrorMemoryAllocation, false); /* B's */
	} else {
		fake_cuda_fail(FAKE_EVENT_RECORD, 1, cudaErrorMemoryAllocation, false); /* A's */
	}
	const uint32_t a = 0, b = 8, cc = 16; /* one page, one copy each */
	assert_int_equal(R.np[a] + R.np[b] + R.np[cc], 3);
	assert_int_equal(submit(a), 0);
	assert_int_equal(submit(b), 0);
	assert_int_equal(submit(cc), 0);
	assert_int_equal(progress_within(), 0);
	/* A's copy; B's copy, (event,) host function */
	fake_cuda_gate(by_marker ? 1 + 2 : 1 + 3);
	progress_until(b);
	assert_int_equal(times(a), 1);
	assert_int_equal(status(a), -ENOMEM);
	assert_int_equal(times(b), 1);
	assert_int_equal(status(b), 0);
	assert_true(landed(b));
	assert_int_equal(times(cc), 0); /* still held */
	fake_cuda_gate(-1);
	progress_until(cc);
	assert_int_equal(times(cc), 1);
	assert_int_equal(status(cc), 0);
	assert_true(landed(cc));
	destroy_within();
	assert_clean_run();
	rig_fini();
}

static void no_marker_fenced_by_later_event(void **state)
{
	(void)state;
	fenced(false);
}

static void no_marker_fenced_by_later_marker(void **state)
{
	(void)state;
	fenced(true);
}

/* ---- D5: the decode stream ---------------------------------------------------------------- */

static void decode_stream(void **state)
{
	(void)state;
	rig_init(2);
	kva_cuda_importer_config c = config(HF, true, KVA_CUDA_COPY_AUTO);
	start(&c);
	void *own = kva_cuda_importer_decode_stream(R.imp);
	assert_non_null(own);
	assert_true(own != (void *)cudaStreamLegacy && own != (void *)cudaStreamPerThread);
	destroy_within();

	c.decode_stream = (void *)cudaStreamLegacy; /* priority 0, the lowest */
	int err = 0;
	assert_null(kva_cuda_importer_create(&c, &err));
	assert_int_equal(err, -EINVAL);
	c.allow_equal_priority = true;
	start(&c);
	assert_ptr_equal(kva_cuda_importer_decode_stream(R.imp), (void *)cudaStreamLegacy);
	destroy_within();
	assert_null(fake_cuda_current());
	rig_fini();
}

/* ---- create without the driver's functions (first: the lookup is once per process) ---- */

static void no_driver_functions(void **state)
{
	(void)state;
	/* In a child, so that this process's one lookup stays to be done. */
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		rig_init(2);
		fake_cuda_hide_driver(true);
		kva_cuda_importer_config c = config(HF, true, KVA_CUDA_COPY_AUTO);
		int err = 0, cuda_err = 0;
		kva_cuda_importer *imp = kva_cuda_importer_create(&c, &err);
		const char *msg = kva_cuda_importer_last_error(&cuda_err);
		_exit(!imp && err == -ENODEV && msg && *msg && cuda_err != 0 ? 0 : 1);
	}
	int ws = 0;
	assert_int_equal(waitpid(pid, &ws, 0), pid);
	assert_true(WIFEXITED(ws));
	assert_int_equal(WEXITSTATUS(ws), 0);
}

static void bad_ordinal(void **state)
{
	(void)state;
	rig_init(2);
	kva_cuda_importer_config c = config(HF, true, KVA_CUDA_COPY_AUTO);
	c.device = 2;
	int err = 0, cuda_err = 0;
	assert_null(kva_cuda_importer_create(&c, &err));
	assert_int_equal(err, -ENODEV);
	(void)kva_cuda_importer_last_error(&cuda_err);
	assert_int_equal(cuda_err, (int)cudaErrorInvalidDevice);
	assert_null(fake_cuda_current());
	assert_clean_run();
	rig_fini();
}

/* A named case of a parametrised test. */
#define T(name, f, s) {(name), (f), NULL, NULL, (void *)(s)}

int main(void)
{
	struct ctx_case ctx_cases[] = {
	    {.start = CTX_NONE, .manual = true},     {.start = CTX_NONE, .manual = false},
	    {.start = CTX_DRIVER, .manual = true},   {.start = CTX_DRIVER, .manual = false},
	    {.start = CTX_CHOSE_1, .manual = true},  {.start = CTX_CHOSE_0, .manual = true},
	    {.start = CTX_CHOSE_0, .manual = false},
	};
	const struct CMUnitTest tests[] = {
	    T("no_driver_functions", no_driver_functions, NULL), /* first: see there */
	    T("copies_land/hostfunc/thread/runs", copies_land, MODE(HF, false, KVA_CUDA_COPY_RUNS)),
	    T("copies_land/hostfunc/thread/auto", copies_land, MODE(HF, false, KVA_CUDA_COPY_AUTO)),
	    T("copies_land/hostfunc/manual/runs", copies_land, MODE(HF, true, KVA_CUDA_COPY_RUNS)),
	    T("copies_land/hostfunc/manual/batch", copies_land, MODE(HF, true, KVA_CUDA_COPY_BATCH)),
	    T("copies_land/event/thread/runs", copies_land, MODE(EV, false, KVA_CUDA_COPY_RUNS)),
	    T("copies_land/event/thread/batch", copies_land, MODE(EV, false, KVA_CUDA_COPY_BATCH)),
	    T("copies_land/event/manual/runs", copies_land, MODE(EV, true, KVA_CUDA_COPY_RUNS)),
	    T("copies_land/event/manual/auto", copies_land, MODE(EV, true, KVA_CUDA_COPY_AUTO)),
	    T("destroy_in_flight/hostfunc/thread", destroy_in_flight, MODE(HF, false, 0)),
	    T("destroy_in_flight/hostfunc/manual", destroy_in_flight, MODE(HF, true, 0)),
	    T("destroy_in_flight/event/thread", destroy_in_flight, MODE(EV, false, 0)),
	    T("destroy_in_flight/event/manual", destroy_in_flight, MODE(EV, true, 0)),
	    T("nonsticky_fails_one/hostfunc/InvalidValue", nonsticky_fails_one,
	      FAULT(HF, cudaErrorInvalidValue, -EINVAL)),
	    T("nonsticky_fails_one/event/InvalidValue", nonsticky_fails_one,
	      FAULT(EV, cudaErrorInvalidValue, -EINVAL)),
	    T("nonsticky_fails_one/hostfunc/DevicesUnavailable", nonsticky_fails_one,
	      FAULT(HF, cudaErrorDevicesUnavailable, -ENODEV)),
	    T("nonsticky_fails_one/event/DevicesUnavailable", nonsticky_fails_one,
	      FAULT(EV, cudaErrorDevicesUnavailable, -ENODEV)),
	    T("nonsticky_fails_one/hostfunc/Unknown", nonsticky_fails_one,
	      FAULT(HF, cudaErrorUnknown, -EIO)),
	    T("nonsticky_fails_one/event/Unknown", nonsticky_fails_one,
	      FAULT(EV, cudaErrorUnknown, -EIO)),
	    T("async_error_fails_one/hostfunc/thread", async_error_fails_one, MODE(HF, false, 0)),
	    T("async_error_fails_one/event/manual", async_error_fails_one, MODE(EV, true, 0)),
	    T("sticky_in_flight/hostfunc/thread", sticky_in_flight, MODE(HF, false, 0)),
	    T("sticky_in_flight/hostfunc/manual", sticky_in_flight, MODE(HF, true, 0)),
	    T("sticky_in_flight/event/thread", sticky_in_flight, MODE(EV, false, 0)),
	    T("sticky_in_flight/event/manual", sticky_in_flight, MODE(EV, true, 0)),
	    T("sticky_while_issuing/hostfunc", sticky_while_issuing, MODE(HF, true, 0)),
	    T("sticky_while_issuing/event", sticky_while_issuing, MODE(EV, true, 0)),
	    T("keeps_context/none/manual", keeps_context, &ctx_cases[0]),
	    T("keeps_context/none/thread", keeps_context, &ctx_cases[1]),
	    T("keeps_context/driver_ctx/manual", keeps_context, &ctx_cases[2]),
	    T("keeps_context/driver_ctx/thread", keeps_context, &ctx_cases[3]),
	    T("keeps_context/chose_1/manual", keeps_context, &ctx_cases[4]),
	    T("keeps_context/chose_0/manual", keeps_context, &ctx_cases[5]),
	    T("keeps_context/chose_0/thread", keeps_context, &ctx_cases[6]),
	    T("share_pinned/hostfunc/thread", share_pinned, MODE(HF, false, 0)),
	    T("share_pinned/event/manual", share_pinned, MODE(EV, true, 0)),
	    T("no_marker_event_status", no_marker_event_status, NULL),
	    T("no_marker_no_event", no_marker_no_event, NULL),
	    T("event_mode_no_event", event_mode_no_event, NULL),
	    T("no_marker_fenced_by_later_event", no_marker_fenced_by_later_event, NULL),
	    T("no_marker_fenced_by_later_marker", no_marker_fenced_by_later_marker, NULL),
	    T("decode_stream", decode_stream, NULL),
	    T("bad_ordinal", bad_ordinal, NULL),
	};
	/* KVA_TEST_FILTER=pattern (cmocka's * and ?) runs only matching cases */
	if (getenv("KVA_TEST_FILTER"))
		cmocka_set_test_filter(getenv("KVA_TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}

#endif
