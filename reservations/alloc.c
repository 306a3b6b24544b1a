/* SPDX-License-Identifier: Apache-2.0 */
/* Owns kvadmit's memory: the dedicated jemalloc arena and its per-thread
 * tcaches, or plain malloc (a host without jemalloc, sanitizer builds); plus
 * fault injection.
 *
 * Which jemalloc: KVA_JEMALLOC_RUNTIME (the default build) never links it;
 * the first allocation looks up mallocx, rallocx, sdallocx and mallctl in
 * the host process (dlsym(RTLD_DEFAULT)) and, when all four are there, uses
 * them for kvadmit's own arena; otherwise malloc, for the process's whole
 * life. So the library never replaces the host's allocator and stays
 * dlopen-able (Debian's libjemalloc.so.2 cannot be dlopen'ed: "cannot
 * allocate memory in static TLS block"). Without KVA_JEMALLOC_RUNTIME,
 * KVA_WITH_JEMALLOC means linked (KVADMIT_LINK_JEMALLOC). The choice and
 * its measured cost: docs/embedding.md. */
#define _GNU_SOURCE 1 /* RTLD_DEFAULT */
#include "alloc.h"
#include <kvadmit/lockfree/slab_grower.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifdef KVA_FAULT_INJECTION
static _Atomic uint64_t fault_count;  /* allocations seen since arming */
static _Atomic uint64_t fault_at;     /* 0 = off */
static _Atomic int fault_sticky;

uint64_t kva__fault_arm(uint64_t k, int sticky)
{
	uint64_t seen = atomic_exchange_explicit(&fault_count, 0, memory_order_relaxed);
	atomic_store_explicit(&fault_sticky, sticky, memory_order_relaxed);
	atomic_store_explicit(&fault_at, k, memory_order_relaxed);
	return seen;
}

static int fault_now(void)
{
	if (kva_slab_grower_thread())
		return 0; /* its timing is not the test's */
	uint64_t n = atomic_fetch_add_explicit(&fault_count, 1, memory_order_relaxed) + 1;
	uint64_t at = atomic_load_explicit(&fault_at, memory_order_relaxed);
	if (!at)
		return 0;
	return n == at || (n > at && atomic_load_explicit(&fault_sticky, memory_order_relaxed));
}

int kva__fault_point(void) { return fault_now(); }
#else
uint64_t kva__fault_arm(uint64_t k, int sticky)
{
	(void)k;
	(void)sticky;
	return 0;
}
#define fault_now() 0
#endif

/* Slab chunks and the live-id map are large and read at random: at 1M
 * waiting requests every access is a DRAM miss, and with 4 KB pages a TLB
 * miss too (on this project's VM a dependent random load over 256 MB takes
 * 220 ns with 4 KB pages and 170 ns with 2 MB ones). Blocks of 2 MB and more
 * are aligned to 2 MB and marked MADV_HUGEPAGE, so the kernel backs them
 * with huge pages when transparent huge pages are "madvise" or "always"; a
 * kernel that cannot still backs them with small pages. */
static void hint_huge(void *p, size_t size)
{
#ifdef MADV_HUGEPAGE
	if (p)
		(void)madvise(p, size & ~(size_t)(KVA__HUGE - 1), MADV_HUGEPAGE);
#else
	(void)p;
	(void)size;
#endif
}

void kva__warm(void *p, size_t size)
{
#ifdef MADV_POPULATE_WRITE
	uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t lo = (uintptr_t)p & ~(pg - 1), hi = ((uintptr_t)p + size + pg - 1) & ~(pg - 1);
	(void)madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE); /* EINVAL before Linux 5.14 */
#else
	(void)p;
	(void)size;
#endif
}

/* malloc's flavour of a big block: aligned, hinted before it is touched.
 * calloc, not memset: calloc leaves memory fresh from the kernel untouched
 * (it is zero), so a slab chunk's pages are faulted in only as its slots
 * are used, not all 10 MiB in one call (lockfree/slab.h). calloc has no
 * alignment, so the block is 2 MB larger and keeps its start in the word
 * below the aligned address. */
static void *plain_big_alloc(size_t size, int zero)
{
	if (size > SIZE_MAX - KVA__HUGE)
		return NULL;
	char *raw = zero ? calloc(1, size + KVA__HUGE) : malloc(size + KVA__HUGE);
	if (!raw)
		return NULL;
	uintptr_t at = ((uintptr_t)raw + sizeof(raw) + KVA__HUGE - 1) & ~(uintptr_t)(KVA__HUGE - 1);
	char *p = raw + (at - (uintptr_t)raw);
	memcpy(p - sizeof(raw), &raw, sizeof(raw));
	hint_huge(p, size);
	return p;
}

static void plain_big_free(void *p)
{
	char *raw;
	memcpy(&raw, (char *)p - sizeof(raw), sizeof(raw));
	free(raw);
}

/* The system allocator's aligned block, zeroed: aligned_alloc wants a size
 * that is a multiple of the alignment. */
static void *plain_calloc_aligned(size_t size, size_t align)
{
	size_t n = size ? (size + align - 1) / align * align : align;
	void *p = aligned_alloc(align, n);
	if (p)
		memset(p, 0, n);
	return p;
}

#ifdef KVA_WITH_JEMALLOC
#include <jemalloc/jemalloc.h>

#ifdef KVA_JEMALLOC_RUNTIME
#include <dlfcn.h>

/* Written once inside arena_once (pthread_once orders it before every use). */
static void *(*kj_mallocx)(size_t, int);
static void *(*kj_rallocx)(void *, size_t, int);
static void (*kj_sdallocx)(void *, size_t, int);
static int (*kj_mallctl)(const char *, void *, size_t *, void *, size_t);
static int kj_present;

static void kj_lookup(void)
{
	/* Object-to-function-pointer casts through memcpy: ISO C has no direct one. */
	void *m = dlsym(RTLD_DEFAULT, "mallocx"), *r = dlsym(RTLD_DEFAULT, "rallocx");
	void *d = dlsym(RTLD_DEFAULT, "sdallocx"), *c = dlsym(RTLD_DEFAULT, "mallctl");
	if (!m || !r || !d || !c)
		return;
	memcpy(&kj_mallocx, &m, sizeof(m));
	memcpy(&kj_rallocx, &r, sizeof(r));
	memcpy(&kj_sdallocx, &d, sizeof(d));
	memcpy(&kj_mallctl, &c, sizeof(c));
	kj_present = 1;
}
#else
#define kj_mallocx mallocx
#define kj_rallocx rallocx
#define kj_sdallocx sdallocx
#define kj_mallctl mallctl
#define kj_present 1
#define kj_lookup() ((void)0)
#endif

static pthread_once_t arena_once = PTHREAD_ONCE_INIT;
static unsigned arena_ind;
static int arena_ok;
static pthread_key_t tcache_key;
static int tcache_key_ok;
static _Thread_local unsigned tl_tcache; /* explicit tcache index + 1; 0 = none yet */
static _Thread_local int tl_tcache_failed;

/* The thread is exiting. Its index goes back to jemalloc, which hands it to
 * the next tcache.create (another thread's): forget it here, and let a later
 * key destructor that calls into kvadmit allocate without a tcache rather
 * than create one that nothing would destroy. */
static void tcache_destroy(void *v)
{
	unsigned tc = (unsigned)(uintptr_t)v - 1;
	tl_tcache = 0;
	tl_tcache_failed = 1;
	kj_mallctl("tcache.destroy", NULL, NULL, &tc, sizeof(tc));
}

static void arena_create(void)
{
	kj_lookup();
	if (!kj_present)
		return;
	size_t sz = sizeof(arena_ind);
	arena_ok = kj_mallctl("arenas.create", &arena_ind, &sz, NULL, 0) == 0;
	tcache_key_ok = pthread_key_create(&tcache_key, tcache_destroy) == 0;
}

/* The calling thread's flags: our arena, and a tcache that holds only its
 * blocks (the automatic tcache would hand out blocks of other arenas). */
static int jflags(void)
{
	pthread_once(&arena_once, arena_create);
	if (!arena_ok)
		return 0;
	if (!tl_tcache && !tl_tcache_failed && tcache_key_ok) {
		unsigned tc;
		size_t sz = sizeof(tc);
		if (kj_mallctl("tcache.create", &tc, &sz, NULL, 0) == 0 &&
		    pthread_setspecific(tcache_key, (void *)(uintptr_t)(tc + 1)) == 0)
			tl_tcache = tc + 1;
		else
			tl_tcache_failed = 1;
	}
	return (int)MALLOCX_ARENA(arena_ind) |
	       (tl_tcache ? (int)MALLOCX_TCACHE(tl_tcache - 1) : (int)MALLOCX_TCACHE_NONE);
}

int kva__alloc_thread_tcache(void)
{
	return tl_tcache ? (int)(tl_tcache - 1) : -1;
}

/* jflags() first: it settles, once, whether jemalloc is there at all. */
void *kva__alloc(size_t size)
{
	if (fault_now())
		return NULL;
	int f = jflags();
	if (!kj_present)
		return malloc(size ? size : 1);
	return kj_mallocx(size ? size : 1, f);
}

void *kva__calloc(size_t size)
{
	if (fault_now())
		return NULL;
	int f = jflags();
	if (!kj_present)
		return calloc(1, size ? size : 1);
	return kj_mallocx(size ? size : 1, f | MALLOCX_ZERO);
}

void *kva__realloc(void *p, size_t old_size, size_t new_size)
{
	(void)old_size;
	if (fault_now())
		return NULL;
	int f = jflags();
	if (!kj_present)
		return realloc(p, new_size ? new_size : 1);
	if (!p)
		return kj_mallocx(new_size ? new_size : 1, f);
	return kj_rallocx(p, new_size ? new_size : 1, f);
}

void kva__free(void *p, size_t size)
{
	if (!p)
		return;
	int f = jflags();
	if (!kj_present)
		free(p);
	else
		kj_sdallocx(p, size ? size : 1, f);
}

void *kva__calloc_aligned(size_t size, size_t align)
{
	if (fault_now())
		return NULL;
	int f = jflags();
	if (!kj_present)
		return plain_calloc_aligned(size, align);
	return kj_mallocx(size ? size : 1, f | MALLOCX_ALIGN(align) | MALLOCX_ZERO);
}

void kva__free_aligned(void *p, size_t size, size_t align)
{
	if (!p)
		return;
	int f = jflags();
	if (!kj_present)
		free(p);
	else
		kj_sdallocx(p, size ? size : 1, f | MALLOCX_ALIGN(align));
}

/* Big blocks (>= KVA__HUGE): aligned to 2 MB so the kernel can back them
 * with huge pages; see hint_huge. */
static void *big_alloc(size_t size, int zero)
{
	if (fault_now())
		return NULL;
	int f = jflags();
	if (!kj_present)
		return plain_big_alloc(size, zero);
	void *p = kj_mallocx(size, f | MALLOCX_ALIGN(KVA__HUGE) | (zero ? MALLOCX_ZERO : 0));
	hint_huge(p, size);
	return p;
}

void kva__free_big(void *p, size_t size)
{
	if (!p)
		return;
	if (size < KVA__HUGE) {
		kva__free(p, size);
		return;
	}
	int f = jflags();
	if (!kj_present)
		plain_big_free(p);
	else
		kj_sdallocx(p, size, f | MALLOCX_ALIGN(KVA__HUGE));
}

uint64_t kva__alloc_arena_bytes(void)
{
	pthread_once(&arena_once, arena_create);
	if (!arena_ok)
		return 0;
	uint64_t epoch = 1;
	size_t sz = sizeof(epoch);
	kj_mallctl("epoch", &epoch, &sz, &epoch, sz); /* refresh the stats snapshot */
	char name[64];
	size_t small = 0, large = 0;
	sz = sizeof(size_t);
	snprintf(name, sizeof(name), "stats.arenas.%u.small.allocated", arena_ind);
	if (kj_mallctl(name, &small, &sz, NULL, 0) != 0)
		small = 0;
	snprintf(name, sizeof(name), "stats.arenas.%u.large.allocated", arena_ind);
	if (kj_mallctl(name, &large, &sz, NULL, 0) != 0)
		large = 0;
	return small + large;
}
#else
void *kva__calloc_aligned(size_t size, size_t align)
{
	return fault_now() ? NULL : plain_calloc_aligned(size, align);
}
void kva__free_aligned(void *p, size_t size, size_t align)
{
	(void)size, (void)align;
	free(p);
}
void *kva__alloc(size_t size) { return fault_now() ? NULL : malloc(size ? size : 1); }
void *kva__calloc(size_t size) { return fault_now() ? NULL : calloc(1, size ? size : 1); }
void *kva__realloc(void *p, size_t old_size, size_t new_size)
{
	(void)old_size;
	return fault_now() ? NULL : realloc(p, new_size ? new_size : 1);
}
void kva__free(void *p, size_t size)
{
	(void)size;
	free(p);
}
static void *big_alloc(size_t size, int zero)
{
	return fault_now() ? NULL : plain_big_alloc(size, zero);
}
void kva__free_big(void *p, size_t size)
{
	if (!p)
		return;
	if (size < KVA__HUGE)
		free(p);
	else
		plain_big_free(p);
}
uint64_t kva__alloc_arena_bytes(void) { return 0; }
int kva__alloc_thread_tcache(void) { return -1; }
#endif

void *kva__alloc_big(size_t size)
{
	return size < KVA__HUGE ? kva__alloc(size) : big_alloc(size, 0);
}

void *kva__calloc_big(size_t size)
{
	return size < KVA__HUGE ? kva__calloc(size) : big_alloc(size, 1);
}
