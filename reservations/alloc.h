/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Allocation for request records, answers and grants.
 *
 * With jemalloc (in the host process, found at run time, or linked by an
 * explicit build option): one dedicated arena for the whole library (created
 * once) and an explicit per-thread tcache that only ever holds blocks of that
 * arena, so records never mix with the host's heap and the fast path takes no
 * lock. Without jemalloc (a host without it, sanitizer builds): malloc/free,
 * so sanitizers see all. A thread's tcache is destroyed when it exits (a
 * pthread key destructor); a later destructor of that thread that calls
 * kvadmit allocates without a tcache, never through the destroyed index
 * (which jemalloc hands to the next thread that creates one).
 *
 * Fault injection (KVA_FAULT_INJECTION builds): allocation number K fails,
 * for the allocation-failure sweep in tests/.
 */
#ifndef KVA_RESERVATIONS_ALLOC_H
#define KVA_RESERVATIONS_ALLOC_H

#include <stddef.h>
#include <stdint.h>

void *kva__alloc(size_t size);
void *kva__calloc(size_t size);
/* Returns NULL and leaves p untouched on failure. */
void *kva__realloc(void *p, size_t old_size, size_t new_size);
void kva__free(void *p, size_t size);

/* A zeroed block aligned to align (a power of two, at most a page): for
 * structs with alignas members, which malloc's 16 bytes do not honour.
 * Free with kva__free_aligned and the same size and align. */
void *kva__calloc_aligned(size_t size, size_t align);
void kva__free_aligned(void *p, size_t size, size_t align);

/* Large tables (slab chunks, maps): blocks of KVA__HUGE bytes or more are
 * 2 MB-aligned and offered to the kernel for huge pages; smaller ones are
 * ordinary. Free with kva__free_big and the same size. */
#define KVA__HUGE ((size_t)2 << 20)
void *kva__alloc_big(size_t size);
void *kva__calloc_big(size_t size);
void kva__free_big(void *p, size_t size);
/* Faults in the pages of [p, p + size), part of a block from the functions
 * above, without changing a byte (MADV_POPULATE_WRITE; nothing where the
 * kernel lacks it): the slabs' warm hook, so the scheduler takes the faults
 * (and any huge-page compaction) instead of the submitting threads. */
void kva__warm(void *p, size_t size);

/* Tests: the calling thread's explicit tcache index, -1 when it has none
 * (never created, destroyed at thread exit, or no jemalloc). */
int kva__alloc_thread_tcache(void);

/* Bytes currently allocated in kvadmit's arena (0 without jemalloc). */
uint64_t kva__alloc_arena_bytes(void);

/* Fault injection: the next allocation counted as number k (1-based) fails,
 * and so does every one after it when sticky. k == 0 disables. Returns the
 * number of allocations counted since the last call (no-op builds: 0). */
uint64_t kva__fault_arm(uint64_t k, int sticky);
/* Counts as one allocation for fault injection, true if it is to fail: for
 * memory taken from the library's own pools rather than the heap (always
 * false outside fault-injection builds). */
#ifdef KVA_FAULT_INJECTION
int kva__fault_point(void);
#else
#define kva__fault_point() 0
#endif

#endif
