/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for lockfree/slab: argument checks, handles (index +
 * generation), reuse only after a grace period, chunk geometry and growth,
 * allocation failure, and thread caches that outlive their thread.
 */
#include <setjmp.h>
#include <stdalign.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "kva_test.h"
#include <kvadmit/lockfree/rcu_thread.h>
#include <kvadmit/lockfree/slab.h>

struct slot {
	struct kva_slab_hdr h;
	uint64_t stamp;
	union {
		struct kva_slab_rcu rcu; /* retired: the slab's */
		char pad[32];		 /* live: owner-private */
	};
};

/* Memory through counting hooks: fini must give back every byte, and a
 * test can make the next allocations (or only the next chunks) fail. */
#define CHUNK_MIN 4096 /* smaller: a thread's cache */
static _Atomic size_t bytes_out;
static _Atomic int fail_next, fail_chunks;
static _Atomic unsigned chunks_made; /* chunk allocations that succeeded */

static void *t_alloc(size_t n)
{
	if (atomic_load(&fail_next) > 0) {
		atomic_fetch_sub(&fail_next, 1);
		return NULL;
	}
	if (n >= CHUNK_MIN && atomic_load(&fail_chunks) > 0) {
		atomic_fetch_sub(&fail_chunks, 1);
		return NULL;
	}
	void *p = calloc(1, n); /* the slab's contract: zeroed */
	if (p) {
		atomic_fetch_add(&bytes_out, n);
		if (n >= CHUNK_MIN)
			atomic_fetch_add(&chunks_made, 1);
	}
	return p;
}

static void t_free(void *p, size_t n)
{
	atomic_fetch_sub(&bytes_out, n);
	free(p);
}

static int setup(void **state)
{
	(void)state;
	assert_int_equal(kva_rcu_enter(), 0);
	atomic_store(&bytes_out, 0);
	atomic_store(&fail_next, 0);
	atomic_store(&fail_chunks, 0);
	atomic_store(&chunks_made, 0);
	return 0;
}

static struct kva_slab *slab_new(void)
{
	/* On the heap, so ASan sees a read past chunk[] (an index out of range). */
	struct kva_slab *s = aligned_alloc(alignof(struct kva_slab), sizeof(*s)); /* alignas members */
	assert_non_null(s);
	assert_int_equal(
	    kva_slab_init(s, sizeof(struct slot), offsetof(struct slot, rcu), t_alloc, t_free), 0);
	return s;
}

/* Every call_rcu done, then everything back to the allocator. */
static void slab_free(struct kva_slab *s)
{
	urcu_memb_barrier();
	kva_slab_fini(s);
	free(s);
	assert_int_equal(atomic_load(&bytes_out), 0);
}

static uint32_t chunk_of(uint32_t idx, uint32_t *off)
{
	return kva__slab_chunk_of(idx, off);
}

static void test_init_rejects_bad_arguments(void **state)
{
	(void)state;
	struct kva_slab s;
	const size_t sz = sizeof(struct slot), off = offsetof(struct slot, rcu);
	const size_t rcu = sizeof(struct kva_slab_rcu);

	assert_int_equal(kva_slab_init(NULL, sz, off, t_alloc, t_free), -EINVAL);
	assert_int_equal(kva_slab_init(&s, sz, off, NULL, t_free), -EINVAL);
	assert_int_equal(kva_slab_init(&s, sz, off, t_alloc, NULL), -EINVAL);
	assert_int_equal(kva_slab_init(&s, 0, off, t_alloc, t_free), -EINVAL);
	assert_int_equal(kva_slab_init(&s, sz + 4, off, t_alloc, t_free), -EINVAL); /* misaligned */
	assert_int_equal(kva_slab_init(&s, sz, 0, t_alloc, t_free), -EINVAL); /* over the header */
	assert_int_equal(kva_slab_init(&s, sz, off + 4, t_alloc, t_free), -EINVAL); /* misaligned */
	assert_int_equal(kva_slab_init(&s, sz, sz - rcu + 8, t_alloc, t_free),
			 -EINVAL); /* overruns */
	assert_int_equal(kva_slab_init(&s, (size_t)1 << 33, off, t_alloc, t_free), -EINVAL);
	/* The smallest valid layout: header, then the rcu area, nothing else. */
	assert_int_equal(kva_slab_init(&s, 8 + rcu, 8, t_alloc, t_free), 0);
	kva_slab_fini(&s);
	assert_int_equal(kva_slab_init(&s, sz, sz - rcu, t_alloc, t_free), 0);
	kva_slab_fini(&s);
	assert_int_equal(atomic_load(&bytes_out), 0);
}

static void test_alloc_hands_out_distinct_free_slots(void **state)
{
	(void)state;
	struct kva_slab *s = slab_new();
	enum { N = 1000 };
	static unsigned char seen[2 * N];
	memset(seen, 0, sizeof(seen));

	for (int i = 0; i < N; i++) {
		uint32_t idx = UINT32_MAX;
		struct slot *p = kva_slab_alloc(s, &idx);
		assert_non_null(p);
		assert_true(idx < 2 * N); /* chunks 0..2 hold 1792 */
		assert_int_equal(seen[idx]++, 0);
		assert_ptr_equal(kva_slab_get(s, idx), p);
		assert_int_equal(atomic_load(&p->h.gen) & 1, 0);
		p->stamp = idx; /* ours: writable, distinct memory (ASan) */
	}
	assert_true(kva_slab_slots(s) >= N);
	slab_free(s);
}

/* An unpublished slot given back is the next one this thread takes, and
 * nothing is lost or handed out twice: after many alloc/unalloc pairs
 * between real allocations, the slots taken are still distinct and the
 * slab did not grow for the pairs. */
static void test_unalloc_returns_the_slot_to_the_thread(void **state)
{
	(void)state;
	struct kva_slab *s = slab_new();
	enum { N = 600 };
	static unsigned char seen[4 * N];
	memset(seen, 0, sizeof(seen));
	for (int i = 0; i < N; i++) {
		uint32_t a, b;
		assert_non_null(kva_slab_alloc(s, &a));
		kva_slab_unalloc(s, a);
		struct slot *p = kva_slab_alloc(s, &b);
		assert_non_null(p);
		assert_int_equal(b, a);
		assert_int_equal(atomic_load(&p->h.gen) & 1, 0);
		assert_true(b < 4 * N);
		assert_int_equal(seen[b]++, 0); /* kept: distinct from every earlier one */
	}
	/* 600 kept slots fit the first three chunks (256 + 512 + 1024) */
	assert_true(kva_slab_slots(s) <= 1792);
	slab_free(s);
}

static void test_publish_makes_the_handle_match_and_nothing_else(void **state)
{
	(void)state;
	struct kva_slab *s = slab_new();
	uint32_t idx, other;
	struct slot *p = kva_slab_alloc(s, &idx);
	assert_non_null(p);
	assert_non_null(kva_slab_alloc(s, &other));

	/* Allocated but not published: no generation matches, not even the
	 * slot's own (even, free) one: a zeroed handle names nothing. */
	assert_null(kva_slab_lookup(s, idx, 1));
	assert_int_equal(atomic_load(&p->h.gen), 0);
	assert_null(kva_slab_lookup(s, idx, 0));
	p->stamp = 42;
	uint32_t g = kva_slab_publish(s, p);
	assert_int_equal(g & 1, 1);
	assert_int_equal(atomic_load(&p->h.gen), g);

	kva_rcu_read_lock();
	struct slot *q = kva_slab_lookup(s, idx, g);
	assert_ptr_equal(q, p);
	assert_int_equal(q->stamp, 42);
	assert_null(kva_slab_lookup(s, idx, g + 1)); /* even */
	assert_null(kva_slab_lookup(s, idx, g - 1)); /* even, the free one */
	assert_null(kva_slab_lookup(s, idx, g + 2)); /* a later incarnation */
	assert_null(kva_slab_lookup(s, idx, 0));
	assert_null(kva_slab_lookup(s, other, g)); /* another slot, never published */
	/* In a chunk, never handed out: gen 0 matches no odd generation. */
	assert_null(kva_slab_lookup(s, 200, 1));
	assert_non_null(kva_slab_get(s, 200));
	/* Never handed out, no chunk: nothing at all. */
	assert_null(kva_slab_get(s, 256));
	assert_null(kva_slab_lookup(s, 256, 1));
	assert_null(kva_slab_lookup(s, KVA_SLAB_SMALL_TOTAL + 5, 1));
	/* Out of range: beyond the last chunk, or beyond the index space. */
	assert_null(kva_slab_get(s, KVA_SLAB_INDEX_END));
	assert_null(kva_slab_get(s, KVA_SLAB_MAX_SLOTS - 1));
	assert_null(kva_slab_get(s, KVA_SLAB_MAX_SLOTS));
	assert_null(kva_slab_get(s, UINT32_MAX));
	assert_null(kva_slab_lookup(s, UINT32_MAX, g));
	kva_rcu_read_unlock();

	/* Publishing again is a new incarnation: the old handle stops matching. */
	uint32_t g2 = kva_slab_publish(s, p);
	assert_int_equal(g2, g + 2);
	assert_null(kva_slab_lookup(s, idx, g));
	assert_ptr_equal(kva_slab_lookup(s, idx, g2), p);
	slab_free(s);
}

static void test_retire_stops_the_handle_matching_at_once(void **state)
{
	(void)state;
	struct kva_slab *s = slab_new();
	struct kva_slab_retired b = {0, 0, 0};
	uint32_t idx;
	struct slot *p = kva_slab_alloc(s, &idx);
	uint32_t g = kva_slab_publish(s, p);

	kva_rcu_read_lock();
	assert_ptr_equal(kva_slab_lookup(s, idx, g), p);
	kva_slab_retire(s, &b, idx);
	assert_null(kva_slab_lookup(s, idx, g));
	assert_int_equal(atomic_load(&p->h.gen), g + 1);
	assert_null(kva_slab_lookup(s, idx, g + 1)); /* the free generation matches nothing */
	/* A reader that matched before still has the slot's memory. */
	assert_int_equal(b.n, 1);
	kva_rcu_read_unlock();
	kva_slab_flush(s, &b);
	assert_int_equal(b.n, 0);
	kva_slab_flush(s, &b); /* empty: nothing */
	slab_free(s);
}

/* A retired slot is reused only after a grace period: while this thread is
 * inside a read-side section no callback can run, so nothing retired may
 * come back; after a barrier every retired slot is free again. */
static void test_retired_slots_come_back_only_after_a_grace_period(void **state)
{
	(void)state;
	struct kva_slab *s = slab_new();
	struct kva_slab_retired b = {0, 0, 0};
	enum { N = 100 };
	uint32_t idx[N], gen[N];
	unsigned char retired[768] = {0};

	for (int i = 0; i < N; i++) {
		struct slot *p = kva_slab_alloc(s, &idx[i]);
		assert_non_null(p);
		assert_true(idx[i] < 256);
		gen[i] = kva_slab_publish(s, p);
	}
	assert_int_equal(kva_slab_slots(s), 256);

	kva_rcu_read_lock();
	for (int i = 0; i < N; i++) {
		kva_slab_retire(s, &b, idx[i]);
		retired[idx[i]] = 1;
	}
	kva_slab_flush(s, &b);
	/* Everything else the first chunk has, and more: a chunk grows. */
	for (int i = 0; i < 256 - N + 10; i++) {
		uint32_t k;
		assert_non_null(kva_slab_alloc(s, &k));
		assert_true(k >= 256 || !retired[k]);
	}
	kva_rcu_read_unlock();
	uint32_t grown = kva_slab_slots(s);
	assert_int_equal(grown, 256 + 512);

	urcu_memb_barrier();
	/* The 100 retired slots and the 502 the second chunk still has: all
	 * allocatable without growing, the retired ones among them. */
	unsigned char seen[768] = {0};
	int again = 0;
	for (int i = 0; i < N + 512 - 10; i++) {
		uint32_t k;
		assert_non_null(kva_slab_alloc(s, &k));
		assert_true(k < 768);
		assert_int_equal(seen[k]++, 0);
		again += retired[k];
	}
	assert_int_equal(again, N);
	assert_int_equal(kva_slab_slots(s), grown);
	for (int i = 0; i < N; i++)
		assert_null(kva_slab_lookup(s, idx[i], gen[i]));
	slab_free(s);
}

static void test_a_reused_slot_gets_a_new_generation(void **state)
{
	(void)state;
	struct kva_slab *s = slab_new();
	struct kva_slab_retired b = {0, 0, 0};
	uint32_t idx;
	struct slot *p = kva_slab_alloc(s, &idx);
	uint32_t g = kva_slab_publish(s, p);

	/* Retire and re-allocate until the same index comes back. */
	uint32_t k = UINT32_MAX, g2 = 0;
	kva_slab_retire(s, &b, idx);
	kva_slab_flush(s, &b);
	urcu_memb_barrier();
	for (int i = 0; i < 256 && k != idx; i++) {
		struct slot *q = kva_slab_alloc(s, &k);
		assert_non_null(q);
		if (k == idx) {
			assert_ptr_equal(q, p);
			assert_int_equal(atomic_load(&q->h.gen) & 1, 0);
			g2 = kva_slab_publish(s, q);
		}
	}
	assert_int_equal(k, idx);
	assert_int_not_equal(g2, g);
	assert_int_equal(g2 & 1, 1);
	assert_null(kva_slab_lookup(s, idx, g));
	assert_ptr_equal(kva_slab_lookup(s, idx, g2), p);
	assert_int_equal(kva_slab_slots(s), 256);
	slab_free(s);
}

/* kva_slab_flush_done: the retiring thread's own grace periods, numbered by
 * flush. Nothing counts as done while a reader that began before the flush
 * is still inside its section; an empty flush takes no number. */
static void test_flush_grace_periods_are_numbered(void **state)
{
	(void)state;
	struct kva_slab *s = slab_new();
	struct kva_slab_retired b = {0, 0, 0};
	uint32_t idx;

	assert_int_equal(kva_slab_next_flush(&b), 1);
	assert_false(kva_slab_flush_done(s, 1));
	kva_slab_flush(s, &b); /* nothing retired: no flush, no number */
	assert_int_equal(kva_slab_next_flush(&b), 1);

	kva_rcu_read_lock();
	uint64_t tag = kva_slab_next_flush(&b);
	kva_slab_publish(s, kva_slab_alloc(s, &idx));
	kva_slab_retire(s, &b, idx);
	kva_slab_flush(s, &b);
	assert_int_equal(kva_slab_next_flush(&b), 2);
	/* This thread's section holds the grace period back: give the
	 * call_rcu thread time to try. */
	struct timespec nap = {0, 30 * 1000 * 1000};
	nanosleep(&nap, NULL);
	assert_false(kva_slab_flush_done(s, tag));
	kva_rcu_read_unlock();

	urcu_memb_barrier();
	assert_true(kva_slab_flush_done(s, tag));
	assert_false(kva_slab_flush_done(s, tag + 1));

	/* A later flush covers what was unlinked before it. */
	kva_slab_publish(s, kva_slab_alloc(s, &idx));
	kva_slab_retire(s, &b, idx);
	kva_slab_flush(s, &b);
	urcu_memb_barrier();
	assert_true(kva_slab_flush_done(s, 2));
	assert_int_equal(kva_slab_next_flush(&b), 3);
	slab_free(s);
}

/* A retire batch is flushed when it holds KVA_SLAB_RETIRE_BATCH slots: the
 * retire that fills it hands it to call_rcu (flush number 1, whose grace
 * period passes), and the next retire starts a new batch. */
static void test_a_full_retire_batch_is_flushed(void **state)
{
	(void)state;
	struct kva_slab *s = slab_new();
	struct kva_slab_retired b = {0, 0, 0};
	enum { N = KVA_SLAB_RETIRE_BATCH };
	uint32_t idx[N + 1];
	for (int i = 0; i <= N; i++)
		kva_slab_publish(s, kva_slab_alloc(s, &idx[i]));
	for (int i = 0; i < N - 1; i++)
		kva_slab_retire(s, &b, idx[i]);
	assert_int_equal(b.n, N - 1);
	assert_int_equal(kva_slab_next_flush(&b), 1);
	kva_slab_retire(s, &b, idx[N - 1]); /* the batch is full */
	assert_int_equal(b.n, 0);
	assert_int_equal(b.first, 0);
	assert_int_equal(kva_slab_next_flush(&b), 2);
	kva_slab_retire(s, &b, idx[N]); /* a new batch */
	assert_int_equal(b.n, 1);
	urcu_memb_barrier();
	assert_true(kva_slab_flush_done(s, 1));
	assert_false(kva_slab_flush_done(s, 2));
	kva_slab_flush(s, &b);
	slab_free(s);
}

static void test_chunk_geometry(void **state)
{
	(void)state;
	uint32_t off;
	assert_int_equal(chunk_of(0, &off), 0);
	assert_int_equal(off, 0);
	assert_int_equal(chunk_of(255, &off), 0);
	assert_int_equal(off, 255);
	assert_int_equal(chunk_of(256, &off), 1);
	assert_int_equal(off, 0);
	assert_int_equal(chunk_of(767, &off), 1);
	assert_int_equal(off, 511);
	assert_int_equal(chunk_of(768, &off), 2);
	assert_int_equal(off, 0);
	assert_int_equal(chunk_of(KVA_SLAB_SMALL_TOTAL - 1, &off), KVA_SLAB_DOUBLINGS - 1);
	assert_int_equal(off, (1u << (KVA_SLAB_FIRST_SHIFT + KVA_SLAB_DOUBLINGS - 1)) - 1);
	assert_int_equal(chunk_of(KVA_SLAB_SMALL_TOTAL, &off), KVA_SLAB_DOUBLINGS);
	assert_int_equal(off, 0);
	assert_int_equal(chunk_of(KVA_SLAB_SMALL_TOTAL + 65535, &off), KVA_SLAB_DOUBLINGS);
	assert_int_equal(off, 65535);
	assert_int_equal(chunk_of(KVA_SLAB_SMALL_TOTAL + 65536, &off), KVA_SLAB_DOUBLINGS + 1);
	assert_int_equal(off, 0);
	assert_int_equal(chunk_of(KVA_SLAB_INDEX_END - 1, &off), KVA_SLAB_MAX_CHUNKS - 1);
	assert_int_equal(off, 65535);
	assert_true(KVA_SLAB_INDEX_END <= KVA_SLAB_MAX_SLOTS);

	/* Every chunk starts where the previous one ended. */
	uint32_t start = 0;
	for (uint32_t c = 0; c < KVA_SLAB_DOUBLINGS + 3; c++) {
		assert_int_equal(kva__slab_chunk_base(c), start);
		assert_int_equal(chunk_of(start, &off), c);
		assert_int_equal(off, 0);
		start += c < KVA_SLAB_DOUBLINGS ? 1u << (KVA_SLAB_FIRST_SHIFT + c) : 1u << 16;
		assert_int_equal(chunk_of(start - 1, &off), c);
	}
	assert_int_equal(kva__slab_chunk_base(KVA_SLAB_MAX_CHUNKS), KVA_SLAB_INDEX_END);
}

/* Past the doubling chunks into the 64 Ki ones; everything retired comes
 * back, so the same number again needs no new chunk. */
static void test_growth_then_full_reuse_does_not_grow(void **state)
{
	(void)state;
	struct kva_slab *s = slab_new();
	struct kva_slab_retired b = {0, 0, 0};
	enum { N = 200000 };
	uint32_t *idx = malloc(N * sizeof(*idx));
	unsigned char *seen = calloc(KVA_SLAB_SMALL_TOTAL + 2 * 65536, 1);
	assert_non_null(idx);
	assert_non_null(seen);

	for (int i = 0; i < N; i++) {
		struct slot *p = kva_slab_alloc(s, &idx[i]);
		assert_non_null(p);
		assert_true(idx[i] < KVA_SLAB_SMALL_TOTAL + 2 * 65536);
		assert_int_equal(seen[idx[i]]++, 0);
		p->stamp = i;
		kva_slab_publish(s, p);
	}
	uint32_t slots = kva_slab_slots(s);
	assert_int_equal(slots, KVA_SLAB_SMALL_TOTAL + 2 * 65536);
	assert_int_equal(kva_slab_end(s), slots);
	for (int i = 0; i < N; i += 997)
		assert_int_equal(((struct slot *)kva_slab_get(s, idx[i]))->stamp, (uint64_t)i);

	for (int i = 0; i < N; i++)
		kva_slab_retire(s, &b, idx[i]);
	kva_slab_flush(s, &b);
	urcu_memb_barrier();

	memset(seen, 0, KVA_SLAB_SMALL_TOTAL + 2 * 65536);
	for (int i = 0; i < N; i++) {
		uint32_t k;
		assert_non_null(kva_slab_alloc(s, &k));
		assert_int_equal(seen[k]++, 0);
	}
	assert_int_equal(kva_slab_slots(s), slots);
	free(idx);
	free(seen);
	slab_free(s);
}

/* A chunk whose memory cannot be had is not claimed: alloc says NULL, the
 * slab stays usable and the next grow publishes that same chunk, so no
 * range of indices is ever a hole. */
static void test_allocation_failure_leaves_a_usable_slab(void **state)
{
	(void)state;
	struct kva_slab *s = slab_new();
	uint32_t idx;

	atomic_store(&fail_next, 1); /* this thread's cache */
	assert_null(kva_slab_alloc(s, &idx));
	atomic_store(&fail_chunks, 1); /* chunk 0 */
	assert_null(kva_slab_alloc(s, &idx));
	assert_int_equal(atomic_load(&fail_chunks), 0);
	assert_int_equal(kva_slab_slots(s), 0);
	assert_int_equal(kva_slab_end(s), 0);
	atomic_store(&fail_chunks, 1); /* grow_ahead fails alike */
	assert_int_equal(kva_slab_grow_ahead(s, 1), -ENOMEM);
	assert_int_equal(kva_slab_slots(s), 0);
	struct slot *p = kva_slab_alloc(s, &idx);
	assert_non_null(p);
	assert_int_equal(idx, 0);
	assert_int_equal(kva_slab_slots(s), 256);
	assert_int_equal(kva_slab_end(s), 256);
	uint32_t g = kva_slab_publish(s, p);
	assert_ptr_equal(kva_slab_lookup(s, idx, g), p);
	assert_int_equal(atomic_load(&chunks_made), 1);
	slab_free(s);
}

struct producer_arg {
	struct kva_slab *s;
	uint32_t n;
	uint32_t *idx;
	unsigned chunks; /* chunk allocations while this producer allocated */
	int nulls;
};

static void *produce(void *arg)
{
	struct producer_arg *a = arg;
	unsigned before = atomic_load(&chunks_made);
	for (uint32_t i = 0; i < a->n; i++) {
		struct slot *p = kva_slab_alloc(a->s, &a->idx[i]);
		if (!p) {
			a->nulls++;
			continue;
		}
		p->stamp = a->idx[i];
		kva_slab_publish(a->s, p);
	}
	a->chunks = atomic_load(&chunks_made) - before;
	return NULL;
}

/* The owner grows ahead between batches, as the engine's step does: a
 * producer thread then never allocates a chunk itself, also past the
 * doubling chunks into the 64 Ki ones, and every slot it takes is distinct.
 * Counted, not timed: the producer's batches see no chunk allocation. */
static void test_grow_ahead_keeps_producers_from_growing(void **state)
{
	(void)state;
	struct kva_slab *s = slab_new();
	enum { STEPS = 300, BATCH = 700, LOW = 1024 };
	uint32_t *idx = malloc(STEPS * BATCH * sizeof(*idx));
	unsigned char *seen = calloc(KVA_SLAB_SMALL_TOTAL + 2 * 65536, 1);
	assert_non_null(idx);
	assert_non_null(seen);

	unsigned grown = 0;
	for (int step = 0; step < STEPS; step++) {
		unsigned c0 = atomic_load(&chunks_made);
		assert_int_equal(kva_slab_grow_ahead(s, LOW), 0);
		assert_true(kva_slab_fresh(s) >= LOW);
		grown += atomic_load(&chunks_made) - c0;
		/* enough ready: a second call allocates nothing */
		c0 = atomic_load(&chunks_made);
		assert_int_equal(kva_slab_grow_ahead(s, LOW), 0);
		assert_int_equal(atomic_load(&chunks_made), c0);

		struct producer_arg a = {.s = s, .n = BATCH, .idx = idx + step * BATCH};
		pthread_t t;
		assert_int_equal(pthread_create(&t, NULL, produce, &a), 0);
		pthread_join(t, NULL);
		assert_int_equal(a.nulls, 0);
		if (a.chunks)
			fail_msg("step %d: the producer allocated %u chunks", step, a.chunks);
	}
	/* 210 000 slots: chunks 0..8 and two of 64 Ki, all grown by the owner */
	assert_int_equal(grown, KVA_SLAB_DOUBLINGS + 2);
	assert_int_equal(kva_slab_slots(s), KVA_SLAB_SMALL_TOTAL + 2 * 65536);
	for (int i = 0; i < STEPS * BATCH; i++) {
		assert_true(idx[i] < KVA_SLAB_SMALL_TOTAL + 2 * 65536);
		assert_int_equal(seen[idx[i]]++, 0);
		assert_int_equal(((struct slot *)kva_slab_get(s, idx[i]))->stamp, idx[i]);
	}
	free(idx);
	free(seen);
	slab_free(s);
}

/* Without grow_ahead the allocating thread still grows the slab on demand,
 * one chunk whenever no free or never-used slot is left, and all of it is
 * handed out before the next chunk (as before grow_ahead existed). */
static void test_alloc_grows_on_demand_without_grow_ahead(void **state)
{
	(void)state;
	struct kva_slab *s = slab_new();
	uint32_t n = KVA_SLAB_SMALL_TOTAL + 65536 + 1;
	uint32_t *idx = malloc(n * sizeof(*idx));
	assert_non_null(idx);
	struct producer_arg a = {.s = s, .n = n, .idx = idx};
	pthread_t t;

	assert_int_equal(pthread_create(&t, NULL, produce, &a), 0);
	pthread_join(t, NULL);
	assert_int_equal(a.nulls, 0);
	assert_int_equal(a.chunks, KVA_SLAB_DOUBLINGS + 2);
	assert_int_equal(kva_slab_slots(s), KVA_SLAB_SMALL_TOTAL + 2 * 65536);
	unsigned char *seen = calloc(kva_slab_slots(s), 1);
	assert_non_null(seen);
	for (uint32_t i = 0; i < n; i++) {
		assert_true(idx[i] < kva_slab_slots(s));
		assert_int_equal(seen[idx[i]]++, 0);
	}
	free(seen);
	free(idx);
	slab_free(s);
}

/* Chunk memory straight from mmap, so that mincore() tells which pages were
 * touched; no huge pages, so a touch faults in one page. */
static size_t page_round(size_t n)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	return (n + pg - 1) & ~(pg - 1);
}

static void *m_alloc(size_t n)
{
	void *p =
	    mmap(NULL, page_round(n), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
#ifdef MADV_NOHUGEPAGE
	(void)madvise(p, page_round(n), MADV_NOHUGEPAGE);
#endif
	atomic_fetch_add(&bytes_out, n);
	return p;
}

static void m_free(void *p, size_t n)
{
	atomic_fetch_sub(&bytes_out, n);
	munmap(p, page_round(n));
}

static size_t resident_pages(const struct kva_slab *s)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE), in = 0;
	for (uint32_t c = 0; c < KVA_SLAB_MAX_CHUNKS; c++) {
		char *base = atomic_load(&((struct kva_slab *)s)->chunk[c]);
		if (!base)
			break;
		size_t len = page_round(
		    (size_t)(kva__slab_chunk_base(c + 1) - kva__slab_chunk_base(c)) * s->slot_size);
		unsigned char *v = malloc(len / pg);
		assert_non_null(v);
		assert_int_equal(mincore(base, len, v), 0);
		for (size_t i = 0; i < len / pg; i++)
			in += v[i] & 1;
		free(v);
	}
	return in;
}

/* Slots are handed out lazily: neither growing nor allocating writes a
 * slot, so only the pages of slots their owners filled are resident (the
 * eager grow wrote every header of a chunk when it was added). A slot never
 * handed out, in a published chunk, is free under generation 0 and matches
 * no handle; one handed out starts at generation 0 and counts up as
 * before. */
static void test_fresh_slots_are_touched_only_by_their_owner(void **state)
{
	(void)state;
	struct kva_slab *s = aligned_alloc(alignof(struct kva_slab), sizeof(*s)); /* alignas members */
	assert_non_null(s);
	assert_int_equal(
	    kva_slab_init(s, sizeof(struct slot), offsetof(struct slot, rcu), m_alloc, m_free), 0);
	const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	enum { N = KVA_SLAB_SMALL_TOTAL + 100 }; /* into the first 64 Ki chunk */
	uint32_t idx = 0, *order = malloc(N * sizeof(*order));
	assert_non_null(order);

	for (uint32_t i = 0; i < N; i++) {
		struct slot *p = kva_slab_alloc(s, &order[i]);
		assert_non_null(p);
		if (i >= N - 100)
			p->stamp = i; /* the owners of the last 100 fill theirs */
	}
	assert_int_equal(kva_slab_slots(s), KVA_SLAB_SMALL_TOTAL + 65536);
	/* the pages of the last 100 slots (one more where they straddle) */
	size_t want = (100 * sizeof(struct slot) + pg - 1) / pg + 1, in = resident_pages(s);
	if (in > want)
		fail_msg("%zu pages resident after %u allocations, 100 filled (%zu pages): %zu in "
			 "the chunks",
			 in, (unsigned)N, want,
			 page_round((size_t)kva_slab_slots(s) * sizeof(struct slot)) / pg);

	/* One thread, nothing retired: the lowest index first, so pages are
	 * touched in order. */
	for (uint32_t i = 0; i < N; i++)
		assert_int_equal(order[i], i);
	free(order);

	/* The rest of the 64 Ki chunk: in a published chunk, never handed out. */
	kva_rcu_read_lock();
	for (uint32_t i = N; i < kva_slab_slots(s); i += 97) {
		struct slot *q = kva_slab_get(s, i);
		assert_non_null(q);
		assert_int_equal(atomic_load(&q->h.gen), 0);
		assert_null(kva_slab_lookup(s, i, 1));
		assert_null(kva_slab_lookup(s, i, 3));
		assert_null(kva_slab_lookup(s, i, 0));
	}
	kva_rcu_read_unlock();
	/* A slot handed out lazily counts its generations as any other. */
	struct slot *p = kva_slab_alloc(s, &idx);
	assert_int_equal(idx, N);
	assert_int_equal(atomic_load(&p->h.gen), 0);
	assert_null(kva_slab_lookup(s, idx, 1));
	uint32_t g = kva_slab_publish(s, p);
	assert_int_equal(g, 1);
	assert_ptr_equal(kva_slab_lookup(s, idx, 1), p);
	struct kva_slab_retired b = {0, 0, 0};
	kva_slab_retire(s, &b, idx);
	assert_int_equal(atomic_load(&p->h.gen), 2);
	assert_null(kva_slab_lookup(s, idx, 1));
	kva_slab_flush(s, &b);
	urcu_memb_barrier();
	kva_slab_fini(s);
	free(s);
	assert_int_equal(atomic_load(&bytes_out), 0);
}

struct thread_arg {
	struct kva_slab *s;
	uint32_t n;
	uint32_t classes; /* 0: kva_slab_alloc; else alloc_near, slot i of class i % classes */
	uint32_t idx[300];
	int nulls;
};

static void *alloc_n(void *arg)
{
	struct thread_arg *a = arg;
	for (uint32_t i = 0; i < a->n; i++)
		if (!(a->classes ? kva_slab_alloc_near(a->s, i % a->classes, &a->idx[i])
		                 : kva_slab_alloc(a->s, &a->idx[i])))
			a->nulls++;
	return NULL;
}

/* Thread A takes one slot and exits with the other 63 of its cache; thread
 * B then allocates everything the first chunk has left: A's cache must be
 * adopted (the shared stack alone holds only 192). */
static void test_an_exited_threads_cache_goes_to_the_next_thread(void **state)
{
	(void)state;
	struct kva_slab *s = slab_new();
	struct thread_arg a = {.s = s, .n = 1}, b = {.s = s, .n = 255};
	pthread_t t;

	assert_int_equal(pthread_create(&t, NULL, alloc_n, &a), 0);
	pthread_join(t, NULL);
	assert_int_equal(a.nulls, 0);
	assert_int_equal(kva_slab_slots(s), 256);

	assert_int_equal(pthread_create(&t, NULL, alloc_n, &b), 0);
	pthread_join(t, NULL);
	assert_int_equal(b.nulls, 0);
	assert_int_equal(kva_slab_slots(s), 256);
	unsigned char seen[256] = {0};
	seen[a.idx[0]] = 1;
	for (uint32_t i = 0; i < b.n; i++) {
		assert_true(b.idx[i] < 256);
		assert_int_equal(seen[b.idx[i]]++, 0);
	}
	slab_free(s);
}

/* Two classes taken in turn (the second past KVA_SLAB_LANES, which wraps
 * to a lane): each gets runs of neighbouring slots (one refill batch per
 * lane), and no slot is handed out twice. */
static void test_alloc_near_keeps_a_class_together(void **state)
{
	(void)state;
	struct kva_slab *s = slab_new();
	enum { PER = 2 * KVA_SLAB_REFILL };
	uint32_t idx[2][PER];
	unsigned char seen[256] = {0};
	for (uint32_t i = 0; i < PER; i++)
		for (uint32_t k = 0; k < 2; k++) {
			assert_non_null(kva_slab_alloc_near(s, 7 + k * KVA_SLAB_LANES + k, &idx[k][i]));
			assert_true(idx[k][i] < 256);
			assert_int_equal(seen[idx[k][i]]++, 0);
		}
	for (uint32_t k = 0; k < 2; k++)
		for (uint32_t i = 1; i < PER; i++)
			if (i % KVA_SLAB_REFILL)
				assert_int_equal(idx[k][i], idx[k][i - 1] + 1);
	/* plain allocations beside them: still distinct */
	for (uint32_t i = 0; i < 32; i++) {
		uint32_t x;
		assert_non_null(kva_slab_alloc(s, &x));
		assert_true(x < 256);
		assert_int_equal(seen[x]++, 0);
	}
	slab_free(s);
}

/* A thread exits with three lanes part used (31 slots each): the next
 * thread adopts its cache, lanes included, and gets exactly those slots
 * for the same classes, none of them new. */
static void test_an_exited_threads_lanes_go_to_the_next_thread(void **state)
{
	(void)state;
	struct kva_slab *s = slab_new();
	struct thread_arg a = {.s = s, .n = 3, .classes = 3},
	                  b = {.s = s, .n = 3 * (KVA_SLAB_REFILL - 1), .classes = 3};
	pthread_t t;

	assert_int_equal(pthread_create(&t, NULL, alloc_n, &a), 0);
	pthread_join(t, NULL);
	assert_int_equal(a.nulls, 0);
	assert_int_equal(pthread_create(&t, NULL, alloc_n, &b), 0);
	pthread_join(t, NULL);
	assert_int_equal(b.nulls, 0);
	unsigned char seen[256] = {0};
	for (uint32_t i = 0; i < a.n; i++)
		seen[a.idx[i]]++;
	for (uint32_t i = 0; i < b.n; i++) {
		assert_true(b.idx[i] < 3 * KVA_SLAB_REFILL); /* A's three batches */
		assert_int_equal(seen[b.idx[i]]++, 0);
	}
	slab_free(s);
}

/* More slabs than a thread keeps caches for, and a slab re-created at the
 * same address: the thread's stale entry must never be used (its cache was
 * freed with the old slab; ASan would see the use). */
static void test_many_slabs_and_a_recreated_slab_per_thread(void **state)
{
	(void)state;
	enum { NS = KVA_SLAB_TLS_CACHES + 2 };
	struct kva_slab *s[NS];
	uint32_t idx;

	for (int r = 0; r < 3; r++)
		for (int i = 0; i < NS; i++) {
			if (!r)
				s[i] = slab_new();
			for (int k = 0; k < 100; k++)
				assert_non_null(kva_slab_alloc(s[i], &idx));
		}
	/* 300 from each: chunks 0 and 1 (768) suffice as no cache was lost. */
	for (int i = 0; i < NS; i++)
		assert_int_equal(kva_slab_slots(s[i]), 768);

	struct kva_slab *x = s[0];
	urcu_memb_barrier();
	kva_slab_fini(x);
	assert_int_equal(
	    kva_slab_init(x, sizeof(struct slot), offsetof(struct slot, rcu), t_alloc, t_free), 0);
	assert_non_null(kva_slab_alloc(x, &idx));
	assert_true(idx < 256);
	assert_int_equal(kva_slab_slots(x), 256);
	for (int i = 1; i < NS; i++) {
		kva_slab_fini(s[i]);
		free(s[i]);
	}
	slab_free(x);
}

/* fini does not wait for call_rcu (hardening issue, item 16): a slab
 * finished with flushed batches still queued frees its chunks at once; the
 * callbacks run later, find the slab gone and touch none of its memory
 * (ASan sees it if they did), and a slab created meanwhile is not fed
 * slots of the dead one. */
static void test_fini_with_callbacks_pending_needs_no_barrier(void **state)
{
	(void)state;
	for (int round = 0; round < 20; round++) {
		struct kva_slab *s = slab_new();
		struct kva_slab_retired b = {0, 0, 0};
		for (int i = 0; i < 200; i++) {
			uint32_t k;
			struct slot *p = kva_slab_alloc(s, &k);
			assert_non_null(p);
			kva_slab_publish(s, p);
			kva_slab_retire(s, &b, k); /* flushes every 64 */
		}
		kva_slab_flush(s, &b);
		kva_slab_fini(s); /* no barrier: four batches are queued */
		free(s);
		assert_int_equal(atomic_load(&bytes_out), 0);
		struct kva_slab *x = slab_new();
		urcu_memb_barrier(); /* the dead slab's callbacks run now */
		uint32_t k;
		assert_non_null(kva_slab_alloc(x, &k));
		/* only its own first chunk: nothing of the dead slab joined it */
		assert_int_equal(kva_slab_slots(x), 256);
		slab_free(x);
	}
}

static _Atomic size_t warmed_bytes;

/* MADV_POPULATE_WRITE (Linux 5.14) works here. */
static bool populate_supported(void)
{
#ifdef MADV_POPULATE_WRITE
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	void *p = mmap(NULL, pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(p != MAP_FAILED);
	bool ok = madvise(p, pg, MADV_POPULATE_WRITE) == 0;
	munmap(p, pg);
	return ok;
#else
	return false;
#endif
}

static void count_warm(void *p, size_t n)
{
	atomic_fetch_add(&warmed_bytes, n);
#ifdef MADV_POPULATE_WRITE
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	uintptr_t lo = (uintptr_t)p & ~(pg - 1), hi = ((uintptr_t)p + n + pg - 1) & ~(pg - 1);
	(void)madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE);
#endif
}

/* With a warm hook, grow_ahead warms the next `low` never-used slots, each
 * slot once however often it is called: their pages are resident before a
 * producer fills them, and what producers took meanwhile is not warmed
 * again. */
static void test_grow_ahead_warms_the_next_slots_once(void **state)
{
	(void)state;
	struct kva_slab *s = aligned_alloc(alignof(struct kva_slab), sizeof(*s)); /* alignas members */
	assert_non_null(s);
	assert_int_equal(
	    kva_slab_init(s, sizeof(struct slot), offsetof(struct slot, rcu), m_alloc, m_free), 0);
	kva_slab_set_warm(s, count_warm);
	atomic_store(&warmed_bytes, 0);
	enum { LOW = 3000 }; /* across chunks 0..3 */
	const size_t sz = sizeof(struct slot);

	assert_int_equal(kva_slab_grow_ahead(s, LOW), 0);
	assert_int_equal(atomic_load(&warmed_bytes), LOW * sz);
	assert_int_equal(kva_slab_grow_ahead(s, LOW), 0); /* nothing new to warm */
	assert_int_equal(atomic_load(&warmed_bytes), LOW * sz);
	if (populate_supported()) {
		/* the pages of slots 0..LOW-1 are resident, nothing written */
		size_t pg = (size_t)sysconf(_SC_PAGESIZE);
		for (uint32_t i = 0; i < LOW; i += 37) {
			struct slot *q = kva_slab_get(s, i);
			unsigned char v = 0;
			assert_int_equal(mincore((void *)((uintptr_t)q & ~(pg - 1)), pg, &v), 0);
			assert_int_equal(v & 1, 1);
			assert_int_equal(atomic_load(&q->h.gen), 0);
		}
	}
	uint32_t idx;
	for (int i = 0; i < 500; i++)
		assert_non_null(kva_slab_alloc(s, &idx));
	assert_int_equal(kva_slab_grow_ahead(s, LOW), 0);
	/* warmed up to next + LOW, next being what the refills (of 32) took */
	size_t taken = (500 + KVA_SLAB_REFILL - 1) / KVA_SLAB_REFILL * KVA_SLAB_REFILL;
	assert_int_equal(atomic_load(&warmed_bytes), (taken + LOW) * sz);
	urcu_memb_barrier();
	kva_slab_fini(s);
	free(s);
	assert_int_equal(atomic_load(&bytes_out), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup(test_init_rejects_bad_arguments, setup),
	    cmocka_unit_test_setup(test_alloc_hands_out_distinct_free_slots, setup),
	    cmocka_unit_test_setup(test_unalloc_returns_the_slot_to_the_thread, setup),
	    cmocka_unit_test_setup(test_publish_makes_the_handle_match_and_nothing_else, setup),
	    cmocka_unit_test_setup(test_retire_stops_the_handle_matching_at_once, setup),
	    cmocka_unit_test_setup(test_retired_slots_come_back_only_after_a_grace_period, setup),
	    cmocka_unit_test_setup(test_a_reused_slot_gets_a_new_generation, setup),
	    cmocka_unit_test_setup(test_flush_grace_periods_are_numbered, setup),
	    cmocka_unit_test_setup(test_a_full_retire_batch_is_flushed, setup),
	    cmocka_unit_test_setup(test_chunk_geometry, setup),
	    cmocka_unit_test_setup(test_growth_then_full_reuse_does_not_grow, setup),
	    cmocka_unit_test_setup(test_allocation_failure_leaves_a_usable_slab, setup),
	    cmocka_unit_test_setup(test_grow_ahead_keeps_producers_from_growing, setup),
	    cmocka_unit_test_setup(test_alloc_grows_on_demand_without_grow_ahead, setup),
	    cmocka_unit_test_setup(test_alloc_near_keeps_a_class_together, setup),
	    cmocka_unit_test_setup(test_an_exited_threads_lanes_go_to_the_next_thread, setup),
	    cmocka_unit_test_setup(test_fresh_slots_are_touched_only_by_their_owner, setup),
	    cmocka_unit_test_setup(test_grow_ahead_warms_the_next_slots_once, setup),
	    cmocka_unit_test_setup(test_an_exited_threads_cache_goes_to_the_next_thread, setup),
	    cmocka_unit_test_setup(test_many_slabs_and_a_recreated_slab_per_thread, setup),
	    cmocka_unit_test_setup(test_fini_with_callbacks_pending_needs_no_barrier, setup),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
