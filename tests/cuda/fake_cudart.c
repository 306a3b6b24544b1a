/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A CPU fake of the CUDA runtime calls that the importer (cuda/cuda_*.c) makes, and
 * of the driver functions it gets through cudaGetDriverEntryPoint* (see
 * fake_cudart.h for the controls). Modelled on the CUDA 13 runtime API
 * documentation:
 *
 *   devices   ndev of them, each with a primary context that becomes active
 *             (counted per device: "a context was created on device d") on
 *             cudaInitDevice, cudaSetDevice, cuDevicePrimaryCtxRetain, or a
 *             runtime call made while the thread has no current context,
 *             which binds the primary context of the thread's runtime
 *             device ("the primary context for a device will be selected,
 *             made current to the calling thread, and initialized").
 *   threads   a current context (cuCtxGetCurrent / cuCtxSetCurrent) and the
 *             runtime's device choice (cudaSetDevice; 0 until then);
 *             cudaGetDevice reads the current context's device, else that
 *             choice, and creates nothing.
 *   streams   one thread each, running its operations in order: copies
 *             (memcpy), event records (the event completes), host
 *             functions (called there, with no context, like CUDA's own
 *             callback thread). A gate holds operations back on request.
 *             Using a stream while another context is current is counted.
 *   events    complete when their last record runs; cudaEventQuery reads
 *             the last record only; an injected asynchronous error makes
 *             the record complete with that status.
 *   errors    a per-thread last error (cudaGetLastError returns and clears
 *             it, cudaPeekAtLastError only returns it; cudaErrorNotReady is
 *             never recorded); injected failures of the n-th call of a
 *             kind; a sticky error, after which every call that needs the
 *             context returns it, nothing clears it, queued operations are
 *             dropped and host functions never run.
 *   memory    cudaHostAlloc / cudaHostRegister ranges are pinned, cudaMalloc
 *             ranges are "device" memory (host memory here);
 *             cudaPointerGetAttributes answers from those ranges
 *             (cudaMemoryTypeUnregistered elsewhere, as CUDA >= 11 does).
 *             Copies whose source is not inside one pinned range, or whose
 *             destination is not inside one device range, are counted. The
 *             memory calls need no context here (the real ones do).
 *
 * Not modelled: timing, copy engines, errors a real device raises on its
 * own, any call the importer does not make (it is not defined here, so a
 * new call in the importer shows up as a link error of this test).
 */
#define _GNU_SOURCE 1
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_cudart.h"

#define LEAST_PRIO 0
#define GREATEST_PRIO (-5)

struct CUctx_st {
	int dev;
	bool primary;
	_Atomic bool active;
};

struct CUevent_st {
	struct CUctx_st *ctx;
	_Atomic uint64_t recorded;  /* records enqueued (the caller's thread) */
	_Atomic uint64_t completed; /* the last record that ran */
	_Atomic int err;	    /* status of the last record that ran */
};

enum op_kind { OP_COPY, OP_EVENT, OP_HOSTFN };

struct op {
	struct op *next;
	enum op_kind kind;
	void *dst;
	const void *src;
	size_t n;
	struct CUevent_st *ev;
	uint64_t seq;
	int err;
	cudaHostFn_t fn;
	void *arg;
};

struct CUstream_st {
	struct CUctx_st *ctx;
	int prio;
	pthread_t thread;
	pthread_mutex_t mtx;
	pthread_cond_t cv; /* work queued, an operation finished, or quit */
	struct op *head, *tail;
	bool busy, quit;
};

enum { MEM_PINNED_ALLOC, MEM_PINNED_REG, MEM_DEVICE };

struct range {
	uintptr_t lo, hi;
	int kind;
};

static struct CUctx_st prim[FAKE_MAX_DEV];

/* Counters and knobs. Counters are statistics (relaxed): the test reads
 * them after the importer's threads are joined or its calls returned. */
static struct {
	_Atomic int ndev;
	_Atomic int sticky; /* cudaError_t of the sticky error; 0: none */
	_Atomic bool hide_driver;
	_Atomic uint64_t calls[FAKE_NCALLS];
	_Atomic uint64_t fail_at[FAKE_NCALLS]; /* absolute call number; 0: none */
	_Atomic int fail_code[FAKE_NCALLS];
	_Atomic bool fail_sticky[FAKE_NCALLS];
	_Atomic uint64_t events;	 /* event records so far */
	_Atomic uint64_t event_fail_at; /* absolute record number; 0: none */
	_Atomic int event_fail_code;
	_Atomic uint64_t primary_inits[FAKE_MAX_DEV];
	_Atomic int primary_refs[FAKE_MAX_DEV];
	_Atomic uint64_t implicit_binds, wrong_ctx, unpinned_src, bad_dst, setdevice, ops_run,
	    ops_dropped;
	pthread_mutex_t gate_mtx;
	pthread_cond_t gate_cv;
	long gate_left; /* under gate_mtx; -1: any */
	pthread_mutex_t mem_mtx;
	struct range mem[64]; /* under mem_mtx */
	int nmem;
} F = {.ndev = 2,
       .gate_mtx = PTHREAD_MUTEX_INITIALIZER,
       .gate_cv = PTHREAD_COND_INITIALIZER,
       .gate_left = -1,
       .mem_mtx = PTHREAD_MUTEX_INITIALIZER};

static _Thread_local struct CUctx_st *cur; /* the thread's current context */
static _Thread_local int rt_dev;	   /* the runtime's device choice */
static _Thread_local cudaError_t last_err;

static void stat_add(_Atomic uint64_t *c)
{
	atomic_fetch_add_explicit(c, 1, memory_order_relaxed); /* statistics only */
}

/* ---- errors --------------------------------------------------------------- */

static cudaError_t broken(void)
{
	/* a flag only: every wait that depends on it re-checks it under its
	 * own mutex after a broadcast (fake_cuda_break, stream_main) */
	return (cudaError_t)atomic_load_explicit(&F.sticky, memory_order_relaxed);
}

static cudaError_t ret(cudaError_t e)
{
	if (e != cudaSuccess && e != cudaErrorNotReady)
		last_err = e;
	return e;
}

static void activate(struct CUctx_st *c)
{
	/* statistics: whether this was the first activation */
	if (!atomic_exchange_explicit(&c->active, true, memory_order_relaxed))
		stat_add(&F.primary_inits[c->dev]);
}

/* The start of every call that needs a context: binds the primary context
 * of the thread's runtime device if none is current (as the runtime does),
 * then fails with the sticky error if there is one. */
static cudaError_t enter(void)
{
	if (!cur) {
		cur = &prim[rt_dev];
		activate(cur);
		stat_add(&F.implicit_binds);
	}
	cudaError_t e = broken();
	return e ? ret(e) : cudaSuccess;
}

/* Counts a call of kind c; an injected failure when it is the chosen one. */
static cudaError_t injected(enum fake_call c)
{
	uint64_t n = atomic_fetch_add_explicit(&F.calls[c], 1, memory_order_relaxed) + 1;
	/* A1: pairs with R1 in fake_cuda_fail: its code and sticky flag */
	if (atomic_load_explicit(&F.fail_at[c], memory_order_acquire) != n)
		return cudaSuccess;
	atomic_store_explicit(&F.fail_at[c], 0, memory_order_relaxed); /* once */
	cudaError_t code =
	    (cudaError_t)atomic_load_explicit(&F.fail_code[c], memory_order_relaxed);
	if (atomic_load_explicit(&F.fail_sticky[c], memory_order_relaxed))
		fake_cuda_break(code);
	return ret(code);
}

/* A runtime call of kind c: the context check, then the count and a
 * failure injected there. */
static cudaError_t enter_call(enum fake_call c)
{
	cudaError_t e = enter();
	return e ? e : injected(c);
}

static bool special_stream(cudaStream_t s)
{
	return s == NULL || s == cudaStreamLegacy || s == cudaStreamPerThread;
}

static void check_ctx(const struct CUstream_st *s)
{
	if (s->ctx != cur)
		stat_add(&F.wrong_ctx);
}

const char *cudaGetErrorName(cudaError_t e)
{
	switch (e) {
	case cudaSuccess:
		return "cudaSuccess";
	case cudaErrorInvalidValue:
		return "cudaErrorInvalidValue";
	case cudaErrorMemoryAllocation:
		return "cudaErrorMemoryAllocation";
	case cudaErrorDevicesUnavailable:
		return "cudaErrorDevicesUnavailable";
	case cudaErrorIllegalAddress:
		return "cudaErrorIllegalAddress";
	case cudaErrorNotReady:
		return "cudaErrorNotReady";
	case cudaErrorUnknown:
		return "cudaErrorUnknown";
	default:
		return "cudaError(fake)";
	}
}

const char *cudaGetErrorString(cudaError_t e)
{
	(void)e;
	return "an error of the fake CUDA runtime";
}

cudaError_t cudaGetLastError(void)
{
	cudaError_t e = broken();
	if (e)
		return e; /* sticky: cannot be cleared */
	e = last_err;
	last_err = cudaSuccess;
	return e;
}

cudaError_t cudaPeekAtLastError(void)
{
	cudaError_t e = broken();
	return e ? e : last_err;
}

/* ---- devices and contexts -------------------------------------------------- */

static bool valid_dev(int d)
{
	return d >= 0 && d < atomic_load_explicit(&F.ndev, memory_order_relaxed);
}

cudaError_t cudaGetDeviceCount(int *count)
{
	if (!count)
		return ret(cudaErrorInvalidValue);
	*count = atomic_load_explicit(&F.ndev, memory_order_relaxed);
	return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device)
{
	if (!device)
		return ret(cudaErrorInvalidValue);
	*device = cur ? cur->dev : rt_dev;
	return cudaSuccess;
}

cudaError_t cudaSetDevice(int device)
{
	if (!valid_dev(device))
		return ret(cudaErrorInvalidDevice);
	stat_add(&F.setdevice);
	activate(&prim[device]);
	cur = &prim[device];
	rt_dev = device;
	return cudaSuccess;
}

#if CUDART_VERSION >= 12000
cudaError_t cudaInitDevice(int device, unsigned int deviceFlags, unsigned int flags)
{
	(void)deviceFlags;
	(void)flags;
	if (!valid_dev(device))
		return ret(cudaErrorInvalidDevice);
	activate(&prim[device]); /* not made current */
	return cudaSuccess;
}
#endif

cudaError_t cudaDeviceGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
	cudaError_t e = enter();
	if (e)
		return e;
	*leastPriority = LEAST_PRIO;
	*greatestPriority = GREATEST_PRIO;
	return cudaSuccess;
}

static CUresult CUDAAPI drv_ctx_get(CUcontext *pctx)
{
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	*pctx = cur;
	return CUDA_SUCCESS;
}

static CUresult CUDAAPI drv_ctx_set(CUcontext ctx)
{
	cur = ctx;
	return CUDA_SUCCESS;
}

static CUresult CUDAAPI drv_dev_get(CUdevice *d, int ordinal)
{
	if (!d)
		return CUDA_ERROR_INVALID_VALUE;
	if (!valid_dev(ordinal))
		return CUDA_ERROR_INVALID_DEVICE;
	*d = ordinal;
	return CUDA_SUCCESS;
}

static CUresult CUDAAPI drv_retain(CUcontext *pctx, CUdevice d)
{
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	if (!valid_dev(d))
		return CUDA_ERROR_INVALID_DEVICE;
	activate(&prim[d]);
	atomic_fetch_add_explicit(&F.primary_refs[d], 1, memory_order_relaxed); /* a count only */
	*pctx = &prim[d];
	return CUDA_SUCCESS;
}

static CUresult CUDAAPI drv_release(CUdevice d)
{
	if (!valid_dev(d))
		return CUDA_ERROR_INVALID_DEVICE;
	atomic_fetch_sub_explicit(&F.primary_refs[d], 1, memory_order_relaxed); /* a count only */
	return CUDA_SUCCESS;
}

static void *driver_fn(const char *symbol)
{
	static const struct {
		const char *name;
		void *fn;
	} tab[] = {
	    {"cuCtxGetCurrent", (void *)drv_ctx_get},
	    {"cuCtxSetCurrent", (void *)drv_ctx_set},
	    {"cuDeviceGet", (void *)drv_dev_get},
	    {"cuDevicePrimaryCtxRetain", (void *)drv_retain},
	    {"cuDevicePrimaryCtxRelease", (void *)drv_release},
	};
	if (!symbol || atomic_load_explicit(&F.hide_driver, memory_order_relaxed))
		return NULL;
	for (size_t i = 0; i < sizeof(tab) / sizeof(tab[0]); i++)
		if (strcmp(tab[i].name, symbol) == 0)
			return tab[i].fn;
	return NULL;
}

#if CUDART_VERSION >= 12050
cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr,
					     unsigned int cudaVersion, unsigned long long flags,
					     enum cudaDriverEntryPointQueryResult *driverStatus)
{
	(void)flags;
	if (!funcPtr)
		return ret(cudaErrorInvalidValue);
	if (cudaVersion > CUDART_VERSION)
		return ret(cudaErrorInvalidValue); /* newer than this "driver" */
	*funcPtr = driver_fn(symbol);
	if (driverStatus)
		*driverStatus = *funcPtr ? cudaDriverEntryPointSuccess
					 : cudaDriverEntryPointSymbolNotFound;
	return cudaSuccess;
}
#endif

#if CUDART_VERSION >= 12000
cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **funcPtr, unsigned long long flags,
				    enum cudaDriverEntryPointQueryResult *driverStatus)
{
	(void)flags;
	if (!funcPtr)
		return ret(cudaErrorInvalidValue);
	*funcPtr = driver_fn(symbol);
	if (driverStatus)
		*driverStatus = *funcPtr ? cudaDriverEntryPointSuccess
					 : cudaDriverEntryPointSymbolNotFound;
	return cudaSuccess;
}
#else
cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **funcPtr, unsigned long long flags)
{
	(void)flags;
	if (!funcPtr)
		return ret(cudaErrorInvalidValue);
	*funcPtr = driver_fn(symbol);
	return *funcPtr ? cudaSuccess : ret(cudaErrorSymbolNotFound);
}
#endif

/* ---- streams ------------------------------------------------------------------ */

/* Waits for the gate; false when the operation is to be dropped (sticky). */
static bool gate_take(void)
{
	pthread_mutex_lock(&F.gate_mtx);
	while (F.gate_left == 0 && !broken())
		pthread_cond_wait(&F.gate_cv, &F.gate_mtx);
	bool run = !broken();
	if (run && F.gate_left > 0)
		F.gate_left--;
	pthread_mutex_unlock(&F.gate_mtx);
	return run;
}

static void run_op(struct op *o)
{
	if (!gate_take()) {
		stat_add(&F.ops_dropped);
		return;
	}
	switch (o->kind) {
	case OP_COPY:
		memcpy(o->dst, o->src, o->n);
		break;
	case OP_EVENT:
		atomic_store_explicit(&o->ev->err, o->err, memory_order_relaxed);
		/* R2: pairs with A2 in cudaEventQuery: the copies before the
		 * record (and its status) are visible to whoever sees it done */
		atomic_store_explicit(&o->ev->completed, o->seq, memory_order_release);
		break;
	case OP_HOSTFN:
		o->fn(o->arg);
		break;
	}
	stat_add(&F.ops_run);
}

static void *stream_main(void *arg)
{
	struct CUstream_st *s = arg;
	pthread_mutex_lock(&s->mtx);
	for (;;) {
		while (!s->head && !s->quit)
			pthread_cond_wait(&s->cv, &s->mtx);
		if (!s->head)
			break;
		struct op *o = s->head;
		s->head = o->next;
		if (!s->head)
			s->tail = NULL;
		s->busy = true;
		pthread_mutex_unlock(&s->mtx);
		run_op(o);
		free(o);
		pthread_mutex_lock(&s->mtx);
		s->busy = false;
		pthread_cond_broadcast(&s->cv);
	}
	pthread_mutex_unlock(&s->mtx);
	return NULL;
}

/* A zeroed operation of `kind`, or NULL (out of memory). */
static struct op *new_op(enum op_kind kind)
{
	struct op *o = calloc(1, sizeof(*o));
	if (o)
		o->kind = kind;
	return o;
}

static cudaError_t push(struct CUstream_st *s, struct op *o)
{
	o->next = NULL;
	pthread_mutex_lock(&s->mtx);
	if (s->tail)
		s->tail->next = o;
	else
		s->head = o;
	s->tail = o;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mtx);
	return cudaSuccess;
}

cudaError_t cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags, int priority)
{
	(void)flags;
	cudaError_t e = enter();
	if (e)
		return e;
	struct CUstream_st *s = calloc(1, sizeof(*s));
	if (!s)
		return ret(cudaErrorMemoryAllocation);
	s->ctx = cur;
	s->prio = priority > LEAST_PRIO	     ? LEAST_PRIO
		  : priority < GREATEST_PRIO ? GREATEST_PRIO
					     : priority;
	pthread_mutex_init(&s->mtx, NULL);
	pthread_cond_init(&s->cv, NULL);
	if (pthread_create(&s->thread, NULL, stream_main, s) != 0) {
		pthread_cond_destroy(&s->cv);
		pthread_mutex_destroy(&s->mtx);
		free(s);
		return ret(cudaErrorMemoryAllocation);
	}
	*pStream = s;
	return cudaSuccess;
}

cudaError_t cudaStreamGetPriority(cudaStream_t hStream, int *priority)
{
	cudaError_t e = enter();
	if (e)
		return e;
	*priority = special_stream(hStream) ? 0 : hStream->prio;
	return cudaSuccess;
}

/* Frees it in every case (no leak after a sticky error); operations still
 * queued run or are dropped first. */
cudaError_t cudaStreamDestroy(cudaStream_t s)
{
	cudaError_t e = enter();
	if (special_stream(s))
		return ret(cudaErrorInvalidResourceHandle);
	check_ctx(s);
	pthread_mutex_lock(&s->mtx);
	s->quit = true;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mtx);
	pthread_join(s->thread, NULL);
	pthread_cond_destroy(&s->cv);
	pthread_mutex_destroy(&s->mtx);
	free(s);
	return e;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
	cudaError_t e = enter();
	if (e)
		return e;
	if (special_stream(s))
		return ret(cudaErrorInvalidResourceHandle);
	check_ctx(s);
	pthread_mutex_lock(&s->mtx);
	while ((s->head || s->busy) && !broken())
		pthread_cond_wait(&s->cv, &s->mtx);
	pthread_mutex_unlock(&s->mtx);
	e = broken();
	return e ? ret(e) : cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t s)
{
	cudaError_t e = enter();
	if (e)
		return e;
	if (special_stream(s))
		return ret(cudaErrorInvalidResourceHandle);
	check_ctx(s);
	pthread_mutex_lock(&s->mtx);
	bool busy = s->head || s->busy;
	pthread_mutex_unlock(&s->mtx);
	return busy ? cudaErrorNotReady : cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void *userData)
{
	cudaError_t e = enter_call(FAKE_HOSTFN);
	if (e)
		return e;
	if (special_stream(s) || !fn)
		return ret(cudaErrorInvalidValue);
	check_ctx(s);
	struct op *o = new_op(OP_HOSTFN);
	if (!o)
		return ret(cudaErrorMemoryAllocation);
	o->fn = fn;
	o->arg = userData;
	return push(s, o);
}

/* ---- events ----------------------------------------------------------------- */

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
	(void)flags;
	cudaError_t e = enter_call(FAKE_EVENT_CREATE);
	if (e)
		return e;
	struct CUevent_st *ev = calloc(1, sizeof(*ev));
	if (!ev)
		return ret(cudaErrorMemoryAllocation);
	ev->ctx = cur;
	*event = ev;
	return cudaSuccess;
}

/* Frees it in every case, like cudaStreamDestroy. */
cudaError_t cudaEventDestroy(cudaEvent_t event)
{
	cudaError_t e = enter();
	free(event);
	return e;
}

cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t s)
{
	cudaError_t e = enter_call(FAKE_EVENT_RECORD);
	if (e)
		return e;
	if (special_stream(s) || !ev)
		return ret(cudaErrorInvalidResourceHandle);
	check_ctx(s);
	struct op *o = new_op(OP_EVENT);
	if (!o)
		return ret(cudaErrorMemoryAllocation);
	o->ev = ev;
	/* the recording thread's own count: it alone writes it */
	o->seq = atomic_fetch_add_explicit(&ev->recorded, 1, memory_order_relaxed) + 1;
	uint64_t n = atomic_fetch_add_explicit(&F.events, 1, memory_order_relaxed) + 1;
	/* A3: pairs with R3 in fake_cuda_fail_event: its code */
	if (atomic_load_explicit(&F.event_fail_at, memory_order_acquire) == n) {
		atomic_store_explicit(&F.event_fail_at, 0, memory_order_relaxed);
		o->err = atomic_load_explicit(&F.event_fail_code, memory_order_relaxed);
	}
	return push(s, o);
}

cudaError_t cudaEventQuery(cudaEvent_t ev)
{
	cudaError_t e = enter();
	if (e)
		return e;
	/* A2: pairs with R2 in run_op */
	uint64_t done = atomic_load_explicit(&ev->completed, memory_order_acquire);
	if (done != atomic_load_explicit(&ev->recorded, memory_order_relaxed))
		return cudaErrorNotReady;
	int err = atomic_load_explicit(&ev->err, memory_order_relaxed);
	return err ? ret((cudaError_t)err) : cudaSuccess;
}

/* ---- memory ------------------------------------------------------------------ */

static const struct range *find(uintptr_t p, size_t n)
{
	for (int i = 0; i < F.nmem; i++)
		if (p >= F.mem[i].lo && p < F.mem[i].hi && n <= F.mem[i].hi - p)
			return &F.mem[i];
	return NULL;
}

static cudaError_t add_range(void *p, size_t n, int kind)
{
	cudaError_t e = cudaSuccess;
	pthread_mutex_lock(&F.mem_mtx);
	uintptr_t lo = (uintptr_t)p;
	for (int i = 0; i < F.nmem; i++)
		if (lo < F.mem[i].hi && F.mem[i].lo < lo + n)
			e = cudaErrorHostMemoryAlreadyRegistered;
	if (!e && F.nmem == (int)(sizeof(F.mem) / sizeof(F.mem[0])))
		e = cudaErrorMemoryAllocation;
	if (!e)
		F.mem[F.nmem++] = (struct range){lo, lo + n, kind};
	pthread_mutex_unlock(&F.mem_mtx);
	return e ? ret(e) : cudaSuccess;
}

static bool del_range(void *p, int kind)
{
	bool found = false;
	pthread_mutex_lock(&F.mem_mtx);
	for (int i = 0; i < F.nmem; i++)
		if (F.mem[i].lo == (uintptr_t)p && F.mem[i].kind == kind) {
			F.mem[i] = F.mem[--F.nmem];
			found = true;
			break;
		}
	pthread_mutex_unlock(&F.mem_mtx);
	return found;
}

/* A copy's ranges: counted when the source is not pinned or the
 * destination not device memory, each as one range. */
static void check_copy(void *dst, const void *src, size_t n)
{
	pthread_mutex_lock(&F.mem_mtx);
	const struct range *s = find((uintptr_t)src, n);
	const struct range *d = find((uintptr_t)dst, n);
	bool bad_src = !s || s->kind == MEM_DEVICE;
	bool bad_dst = !d || d->kind != MEM_DEVICE;
	pthread_mutex_unlock(&F.mem_mtx);
	if (bad_src)
		stat_add(&F.unpinned_src);
	if (bad_dst)
		stat_add(&F.bad_dst);
}

/* Zeroed memory of one kind, recorded for the pointer checks. */
static cudaError_t fake_alloc(void **out, size_t size, int kind)
{
	void *p = calloc(1, size ? size : 1);
	if (!p)
		return ret(cudaErrorMemoryAllocation);
	cudaError_t e = add_range(p, size, kind);
	if (e) {
		free(p);
		return e;
	}
	*out = p;
	return cudaSuccess;
}

static cudaError_t fake_free(void *p, int kind)
{
	if (!p)
		return cudaSuccess;
	if (!del_range(p, kind))
		return ret(cudaErrorInvalidValue);
	free(p);
	return cudaSuccess;
}

cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
	(void)flags;
	return fake_alloc(pHost, size, MEM_PINNED_ALLOC);
}

cudaError_t cudaFreeHost(void *ptr)
{
	return fake_free(ptr, MEM_PINNED_ALLOC);
}

cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags)
{
	(void)flags;
	if (!ptr || !size)
		return ret(cudaErrorInvalidValue);
	return add_range(ptr, size, MEM_PINNED_REG);
}

cudaError_t cudaHostUnregister(void *ptr)
{
	return del_range(ptr, MEM_PINNED_REG) ? cudaSuccess : ret(cudaErrorHostMemoryNotRegistered);
}

cudaError_t cudaMalloc(void **devPtr, size_t size)
{
	return fake_alloc(devPtr, size, MEM_DEVICE);
}

cudaError_t cudaFree(void *devPtr)
{
	return fake_free(devPtr, MEM_DEVICE);
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attr, const void *ptr)
{
	cudaError_t e = enter_call(FAKE_POINTER_ATTR);
	if (e)
		return e;
	if (!attr)
		return ret(cudaErrorInvalidValue);
	memset(attr, 0, sizeof(*attr));
	attr->device = -2;
	pthread_mutex_lock(&F.mem_mtx);
	const struct range *r = find((uintptr_t)ptr, 1);
	int kind = r ? r->kind : -1;
	pthread_mutex_unlock(&F.mem_mtx);
	if (kind < 0) {
		attr->type = cudaMemoryTypeUnregistered;
	} else if (kind == MEM_DEVICE) {
		attr->type = cudaMemoryTypeDevice;
		attr->device = cur->dev;
		attr->devicePointer = (void *)ptr;
	} else {
		attr->type = cudaMemoryTypeHost;
		attr->device = cur->dev;
		attr->hostPointer = (void *)ptr;
		attr->devicePointer = (void *)ptr;
	}
	return cudaSuccess;
}

/* ---- copies --------------------------------------------------------------------- */

static cudaError_t copy_op(struct CUstream_st *s, void *dst, const void *src, size_t n)
{
	check_copy(dst, src, n);
	struct op *o = new_op(OP_COPY);
	if (!o)
		return ret(cudaErrorMemoryAllocation);
	o->dst = dst;
	o->src = src;
	o->n = n;
	return push(s, o);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
			    cudaStream_t s)
{
	cudaError_t e = enter_call(FAKE_MEMCPY);
	if (e)
		return e;
	if (kind != cudaMemcpyHostToDevice || special_stream(s))
		return ret(cudaErrorInvalidValue); /* all the importer ever asks */
	check_ctx(s);
	return copy_op(s, dst, src, count);
}

#if CUDART_VERSION >= 12080
static cudaError_t batch(void *const *dsts, const void *const *srcs, const size_t *sizes,
			 size_t count, const struct cudaMemcpyAttributes *attrs, size_t numAttrs,
			 cudaStream_t s)
{
	cudaError_t e = enter_call(FAKE_MEMCPY);
	if (e)
		return e;
	/* the documented refusals the importer must avoid: the legacy stream,
	 * and a zeroed (invalid) source access order */
	if (special_stream(s) || !count || !numAttrs || !attrs ||
	    attrs->srcAccessOrder == cudaMemcpySrcAccessOrderInvalid)
		return ret(cudaErrorInvalidValue);
	check_ctx(s);
	for (size_t i = 0; i < count; i++)
		if ((e = copy_op(s, dsts[i], srcs[i], sizes[i])) != cudaSuccess)
			return e;
	return cudaSuccess;
}
#endif

#if CUDART_VERSION >= 13000
cudaError_t cudaMemcpyBatchAsync(void *const *dsts, const void *const *srcs, const size_t *sizes,
				 size_t count, struct cudaMemcpyAttributes *attrs, size_t *attrsIdxs,
				 size_t numAttrs, cudaStream_t stream)
{
	(void)attrsIdxs;
	return batch(dsts, srcs, sizes, count, attrs, numAttrs, stream);
}
#elif CUDART_VERSION >= 12080
cudaError_t cudaMemcpyBatchAsync(void **dsts, void **srcs, size_t *sizes, size_t count,
				 struct cudaMemcpyAttributes *attrs, size_t *attrsIdxs,
				 size_t numAttrs, size_t *failIdx, cudaStream_t stream)
{
	(void)attrsIdxs;
	if (failIdx)
		*failIdx = SIZE_MAX;
	return batch(dsts, (const void *const *)srcs, sizes, count, attrs, numAttrs, stream);
}
#endif

/* ---- the test's controls ------------------------------------------------------------- */

void fake_cuda_reset(int ndev)
{
	atomic_store_explicit(&F.ndev, ndev, memory_order_relaxed);
	atomic_store_explicit(&F.sticky, 0, memory_order_relaxed);
	atomic_store_explicit(&F.hide_driver, false, memory_order_relaxed);
	for (int c = 0; c < FAKE_NCALLS; c++) {
		atomic_store_explicit(&F.calls[c], 0, memory_order_relaxed);
		atomic_store_explicit(&F.fail_at[c], 0, memory_order_relaxed);
	}
	atomic_store_explicit(&F.events, 0, memory_order_relaxed);
	atomic_store_explicit(&F.event_fail_at, 0, memory_order_relaxed);
	for (int d = 0; d < FAKE_MAX_DEV; d++) {
		prim[d].dev = d;
		prim[d].primary = true;
		atomic_store_explicit(&prim[d].active, false, memory_order_relaxed);
		atomic_store_explicit(&F.primary_inits[d], 0, memory_order_relaxed);
		atomic_store_explicit(&F.primary_refs[d], 0, memory_order_relaxed);
	}
	_Atomic uint64_t *z[] = {&F.implicit_binds, &F.wrong_ctx, &F.unpinned_src, &F.bad_dst,
				 &F.setdevice,	    &F.ops_run,	  &F.ops_dropped};
	for (size_t i = 0; i < sizeof(z) / sizeof(z[0]); i++)
		atomic_store_explicit(z[i], 0, memory_order_relaxed);
	fake_cuda_gate(-1);
	cur = NULL;
	rt_dev = 0;
	last_err = cudaSuccess;
}

void fake_cuda_fail(enum fake_call c, unsigned nth, cudaError_t code, bool sticky)
{
	atomic_store_explicit(&F.fail_code[c], (int)code, memory_order_relaxed);
	atomic_store_explicit(&F.fail_sticky[c], sticky, memory_order_relaxed);
	uint64_t at = atomic_load_explicit(&F.calls[c], memory_order_relaxed) + nth;
	/* R1: pairs with A1 in injected() */
	atomic_store_explicit(&F.fail_at[c], at, memory_order_release);
}

void fake_cuda_fail_event(unsigned nth, cudaError_t code)
{
	atomic_store_explicit(&F.event_fail_code, (int)code, memory_order_relaxed);
	uint64_t at = atomic_load_explicit(&F.events, memory_order_relaxed) + nth;
	/* R3: pairs with A3 in cudaEventRecord */
	atomic_store_explicit(&F.event_fail_at, at, memory_order_release);
}

void fake_cuda_break(cudaError_t code)
{
	atomic_store_explicit(&F.sticky, (int)code, memory_order_relaxed);
	/* wakes operations held at the gate: they are dropped now */
	pthread_mutex_lock(&F.gate_mtx);
	pthread_cond_broadcast(&F.gate_cv);
	pthread_mutex_unlock(&F.gate_mtx);
}

void fake_cuda_gate(long ops)
{
	pthread_mutex_lock(&F.gate_mtx);
	F.gate_left = ops;
	pthread_cond_broadcast(&F.gate_cv);
	pthread_mutex_unlock(&F.gate_mtx);
}

uint64_t fake_cuda_calls(enum fake_call c)
{
	return atomic_load_explicit(&F.calls[c], memory_order_relaxed);
}

void fake_cuda_counts(struct fake_cuda_counts *out)
{
	memset(out, 0, sizeof(*out));
	for (int d = 0; d < FAKE_MAX_DEV; d++) {
		out->primary_inits[d] =
		    atomic_load_explicit(&F.primary_inits[d], memory_order_relaxed);
		out->primary_refs[d] = atomic_load_explicit(&F.primary_refs[d], memory_order_relaxed);
	}
	out->implicit_binds = atomic_load_explicit(&F.implicit_binds, memory_order_relaxed);
	out->wrong_ctx = atomic_load_explicit(&F.wrong_ctx, memory_order_relaxed);
	out->unpinned_src = atomic_load_explicit(&F.unpinned_src, memory_order_relaxed);
	out->bad_dst = atomic_load_explicit(&F.bad_dst, memory_order_relaxed);
	out->setdevice = atomic_load_explicit(&F.setdevice, memory_order_relaxed);
	out->ops_run = atomic_load_explicit(&F.ops_run, memory_order_relaxed);
	out->ops_dropped = atomic_load_explicit(&F.ops_dropped, memory_order_relaxed);
}

CUcontext fake_cuda_current(void)
{
	return cur;
}

int fake_cuda_runtime_device(void)
{
	return rt_dev;
}

void fake_cuda_set_current(CUcontext ctx)
{
	cur = ctx;
}

CUcontext fake_cuda_ctx_create(int dev)
{
	struct CUctx_st *c = calloc(1, sizeof(*c));
	if (c) {
		c->dev = dev;
		atomic_init(&c->active, true);
	}
	return c;
}

void fake_cuda_ctx_destroy(CUcontext ctx)
{
	free(ctx);
}

void fake_cuda_hide_driver(bool hide)
{
	atomic_store_explicit(&F.hide_driver, hide, memory_order_relaxed);
}
