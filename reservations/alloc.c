/* SPDX-License-Identifier: Apache-2.0 */
/* Owns kvadmit's memory: the dedicated jemalloc arena and its per-thread
 * tcaches, or plain malloc in sanitizer builds; plus fault injection. */
#include "alloc.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
	uint64_t n = atomic_fetch_add_explicit(&fault_count, 1, memory_order_relaxed) + 1;
	uint64_t at = atomic_load_explicit(&fault_at, memory_order_relaxed);
	if (!at)
		return 0;
	return n == at || (n > at && atomic_load_explicit(&fault_sticky, memory_order_relaxed));
}
#else
uint64_t kva__fault_arm(uint64_t k, int sticky)
{
	(void)k;
	(void)sticky;
	return 0;
}
#define fault_now() 0
#endif

#ifdef KVA_WITH_JEMALLOC
#include <jemalloc/jemalloc.h>

static pthread_once_t arena_once = PTHREAD_ONCE_INIT;
static unsigned arena_ind;
static int arena_ok;
static pthread_key_t tcache_key;
static int tcache_key_ok;
static _Thread_local unsigned tl_tcache; /* explicit tcache index + 1; 0 = none yet */
static _Thread_local int tl_tcache_failed;

static void tcache_destroy(void *v)
{
	unsigned tc = (unsigned)(uintptr_t)v - 1;
	mallctl("tcache.destroy", NULL, NULL, &tc, sizeof(tc));
}

static void arena_create(void)
{
	size_t sz = sizeof(arena_ind);
	arena_ok = mallctl("arenas.create", &arena_ind, &sz, NULL, 0) == 0;
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
		if (mallctl("tcache.create", &tc, &sz, NULL, 0) == 0 &&
		    pthread_setspecific(tcache_key, (void *)(uintptr_t)(tc + 1)) == 0)
			tl_tcache = tc + 1;
		else
			tl_tcache_failed = 1;
	}
	return (int)MALLOCX_ARENA(arena_ind) |
	       (tl_tcache ? (int)MALLOCX_TCACHE(tl_tcache - 1) : (int)MALLOCX_TCACHE_NONE);
}

void *kva__alloc(size_t size)
{
	if (fault_now())
		return NULL;
	return mallocx(size ? size : 1, jflags());
}

void *kva__calloc(size_t size)
{
	if (fault_now())
		return NULL;
	return mallocx(size ? size : 1, jflags() | MALLOCX_ZERO);
}

void *kva__realloc(void *p, size_t old_size, size_t new_size)
{
	(void)old_size;
	if (fault_now())
		return NULL;
	if (!p)
		return mallocx(new_size ? new_size : 1, jflags());
	return rallocx(p, new_size ? new_size : 1, jflags());
}

void kva__free(void *p, size_t size)
{
	if (p)
		sdallocx(p, size ? size : 1, jflags());
}

uint64_t kva__alloc_arena_bytes(void)
{
	pthread_once(&arena_once, arena_create);
	if (!arena_ok)
		return 0;
	uint64_t epoch = 1;
	size_t sz = sizeof(epoch);
	mallctl("epoch", &epoch, &sz, &epoch, sz); /* refresh the stats snapshot */
	char name[64];
	size_t small = 0, large = 0;
	sz = sizeof(size_t);
	snprintf(name, sizeof(name), "stats.arenas.%u.small.allocated", arena_ind);
	if (mallctl(name, &small, &sz, NULL, 0) != 0)
		small = 0;
	snprintf(name, sizeof(name), "stats.arenas.%u.large.allocated", arena_ind);
	if (mallctl(name, &large, &sz, NULL, 0) != 0)
		large = 0;
	return small + large;
}
#else
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
uint64_t kva__alloc_arena_bytes(void) { return 0; }
#endif
