/* SPDX-License-Identifier: Apache-2.0 */
/*
 * slab_cache: per-thread caches of a slab's free slots (see slab_cache.h).
 *
 * A thread reaches its cache of a slab through its TLS table, by serial (a
 * serial is never reused, so an entry of a finished slab never matches
 * again). No lock on this path: a thread that uses many slabs (many engines)
 * only ever detaches a cache with one CAS, and the registry lock, which the
 * call_rcu thread holds for every reclaimed batch, is never taken here.
 *
 * A cache's owner word decides who frees it: FREE (in the slab's list, for
 * any thread to adopt; fini frees it), OWNED (a thread's TLS holds it) or
 * ORPHAN (its slab finished while a thread held it: that thread frees it).
 * fini's exchange and the holder's CAS OWNED -> FREE race on the word, and
 * exactly one of them frees the cache. Caches come from malloc, not the
 * slab's allocator hook, since they may outlive the slab.
 *
 * Memory-order labels:
 *   R3/A3  a thread leaves its cache -> the thread that adopts it
 *   R5/A5  a cache linked into the slab's list -> a thread walking the list
 *   R10/A10 fini orphaned a cache a thread holds -> that thread, which
 *          frees it
 */
#include <kvadmit/lockfree/slab_cache.h>

#include <pthread.h>
#include <stdlib.h>

_Thread_local struct kva__slab_tls kva__slab_tls_caches[KVA_SLAB_TLS_CACHES];
static _Thread_local unsigned tls_victim;
static pthread_once_t exit_key_once = PTHREAD_ONCE_INIT;
static pthread_key_t exit_key;
static int exit_key_err;

static _Atomic uint64_t detached; /* caches left by live threads (tests) */

/* A cache and its lanes. */
static void cache_free(struct kva_slab_cache *c)
{
	free(c->lanes);
	free(c);
}

/* The thread stops using a cache; its slots stay in it for the next thread
 * that attaches to the slab. Touches nothing of the slab, which may be gone. */
static void detach(struct kva__slab_tls *t)
{
	atomic_fetch_add_explicit(&detached, 1, memory_order_relaxed);
	int o = CACHE_OWNED;
	/* R3: the cache's slots and lanes, to the thread that adopts it (A3). A10: pairs
	 * with R10 in kva_slab_fini — the slab is gone, the cache is ours. */
	if (!atomic_compare_exchange_strong_explicit(&t->c->owned, &o, CACHE_FREE,
	                                             memory_order_release, memory_order_acquire))
		cache_free(t->c);
	t->serial = 0;
	t->c = NULL;
}

static void detach_all_at_exit(void *arg)
{
	(void)arg;
	for (unsigned i = 0; i < KVA_SLAB_TLS_CACHES; i++)
		if (kva__slab_tls_caches[i].serial)
			detach(&kva__slab_tls_caches[i]);
}

static void make_exit_key(void)
{
	exit_key_err = pthread_key_create(&exit_key, detach_all_at_exit);
}

static struct kva__slab_tls *tls_entry(uint64_t serial, unsigned j)
{
	return &kva__slab_tls_caches[(serial + j) & (KVA_SLAB_TLS_CACHES - 1)];
}

/* An entry of s's probe window for a new cache: an empty one, else one
 * whose slab is gone (its orphan freed), else a victim detached. */
static struct kva__slab_tls *tls_claim(const struct kva_slab *s)
{
	for (unsigned j = 0; j < KVA_SLAB_TLS_PROBE; j++)
		if (!tls_entry(s->serial, j)->serial)
			return tls_entry(s->serial, j);
	for (unsigned j = 0; j < KVA_SLAB_TLS_PROBE; j++) {
		struct kva__slab_tls *t = tls_entry(s->serial, j);
		/* A10 (see detach) */
		if (atomic_load_explicit(&t->c->owned, memory_order_acquire) == CACHE_ORPHAN) {
			detach(t);
			return t;
		}
	}
	struct kva__slab_tls *t = tls_entry(s->serial, tls_victim++ % KVA_SLAB_TLS_PROBE);
	detach(t);
	return t;
}

static struct kva_slab_cache *attach(struct kva_slab *s)
{
	(void)pthread_once(&exit_key_once, make_exit_key);
	/* Without the exit hook a thread's slots would stay owned forever. */
	if (exit_key_err || pthread_setspecific(exit_key, (void *)1))
		return NULL;
	struct kva_slab_cache *c;
	/* A5: pairs with R5 below — the cache's next link. */
	for (c = atomic_load_explicit(&s->caches, memory_order_acquire); c; c = c->next) {
		int free_ = CACHE_FREE;
		/* A3: pairs with R3 in detach — adopts its slots. */
		if (atomic_load_explicit(&c->owned, memory_order_relaxed) == CACHE_FREE &&
		    atomic_compare_exchange_strong_explicit(&c->owned, &free_, CACHE_OWNED,
		                                            memory_order_acquire, memory_order_relaxed))
			break;
	}
	if (!c) {
		c = malloc(sizeof(*c));
		if (!c)
			return NULL;
		c->n = 0;
		c->lanes = NULL;
		atomic_init(&c->owned, CACHE_OWNED);
		c->next = atomic_load_explicit(&s->caches, memory_order_relaxed);
		/* R5: the cache, to threads walking the list (A5). */
		while (!atomic_compare_exchange_weak_explicit(&s->caches, &c->next, c,
		                                              memory_order_release, memory_order_relaxed))
			;
	}
	*tls_claim(s) = (struct kva__slab_tls){s->serial, c};
	return c;
}

struct kva_slab_cache *kva__slab_my_cache_slow(struct kva_slab *s)
{
	for (unsigned j = 1; j < KVA_SLAB_TLS_PROBE; j++) {
		struct kva__slab_tls *t = tls_entry(s->serial, j);
		if (t->serial == s->serial)
			return t->c;
	}
	return attach(s);
}

void kva__slab_caches_orphan(struct kva_slab *s)
{
	struct kva_slab_cache *c = atomic_load_explicit(&s->caches, memory_order_acquire);
	while (c) {
		struct kva_slab_cache *next = c->next; /* before c may be freed */
		/* A cache a thread still holds is left to that thread, which frees
		 * it when it next looks at it (detach). R10: orphaned, to that
		 * thread's failed CAS (A10). */
		if (atomic_exchange_explicit(&c->owned, CACHE_ORPHAN, memory_order_acq_rel) ==
		    CACHE_FREE)
			cache_free(c);
		c = next;
	}
}

struct kva_slab_lane *kva__slab_lane(struct kva_slab_cache *c, uint32_t near)
{
	/* From malloc, as the cache: both may outlive the slab. */
	if (!c->lanes && !(c->lanes = calloc(KVA_SLAB_LANES, sizeof(*c->lanes))))
		return NULL;
	return &c->lanes[near % KVA_SLAB_LANES];
}

uint64_t kva__slab_detached(void)
{
	return atomic_load_explicit(&detached, memory_order_relaxed);
}
