/* SPDX-License-Identifier: Apache-2.0 */
/*
 * slab_cache: each thread's caches of free slots, one per slab it uses, for
 * slab.c only.
 *
 * Synchronisation table:
 *   call                     | may run concurrently with
 *   -------------------------+------------------------------------------
 *   kva__slab_my_cache       | everything but init/fini of that slab
 *   kva__slab_caches_orphan  | threads leaving its caches (slab.c fini)
 */
#ifndef KVA_LOCKFREE_SLAB_CACHE_H
#define KVA_LOCKFREE_SLAB_CACHE_H

#include <stdint.h>

#include <kvadmit/lockfree/slab.h>

/* A cache's owner word (slab_cache.c). */
enum { CACHE_FREE, CACHE_OWNED, CACHE_ORPHAN };

/* One placement class's batch (kva_slab_alloc_near). */
struct kva_slab_lane {
	uint32_t n;
	uint32_t idx[KVA_SLAB_REFILL];
};

struct kva_slab_cache {
	struct kva_slab_cache *next; /* the slab's list of caches, never unlinked */
	_Atomic int owned;           /* CACHE_*: who may use or free it */
	uint32_t n;
	uint32_t idx[KVA_SLAB_CACHE];
	struct kva_slab_lane *lanes; /* KVA_SLAB_LANES, made by the first alloc_near */
};

/* A thread's table of its caches: open addressing by the slab's serial,
 * KVA_SLAB_TLS_PROBE entries from its home (slab_cache.c). */
struct kva__slab_tls {
	uint64_t serial; /* 0 = unused */
	struct kva_slab_cache *c;
};
extern _Thread_local struct kva__slab_tls kva__slab_tls_caches[KVA_SLAB_TLS_CACHES];

/* The rest of the probe window, then attach (slab_cache.c). */
struct kva_slab_cache *kva__slab_my_cache_slow(struct kva_slab *s);

/* The calling thread's cache of s, attached (adopted or new) on first use;
 * NULL when none could be made (no memory, no exit hook). Inline: the
 * home entry is one compare on every alloc. */
static inline struct kva_slab_cache *kva__slab_my_cache(struct kva_slab *s)
{
	struct kva__slab_tls *t = &kva__slab_tls_caches[s->serial & (KVA_SLAB_TLS_CACHES - 1)];
	if (__builtin_expect(t->serial == s->serial, 1))
		return t->c;
	return kva__slab_my_cache_slow(s);
}
/* The lane of class `near` in the calling thread's cache c, the lanes made
 * at the first call; NULL when there is no memory for them. */
struct kva_slab_lane *kva__slab_lane(struct kva_slab_cache *c, uint32_t near);
/* fini: frees s's caches no thread holds and leaves the others to their
 * threads. */
void kva__slab_caches_orphan(struct kva_slab *s);

#endif
