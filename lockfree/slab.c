/* SPDX-License-Identifier: Apache-2.0 */
/*
 * slab: indexed slots with generations (see slab.h for the contract).
 *
 * Owns the chunks, the range of never-used slots, the shared free stacks,
 * retirement, and the process-wide registry of live slabs, which only init,
 * fini and the call_rcu callbacks lock. The per-thread caches are
 * slab_cache.c's; the tickets and the call_rcu thread that carry retired
 * batches, slab_reclaim.c's.
 *
 * Why the free stacks and the never-used slots stay here (475 lines):
 * kva_slab_alloc and retirement call into both, and both work on struct
 * kva_slab and the inline lookups of slab.h, this file's header; in files of
 * their own, they and this one would depend on each other. The Spin models
 * (fresh.pml, freelist.pml) name their functions by this file.
 *
 * Memory-order labels:
 *   R1/A1  chunk published (its zeroed memory) -> kva_slab_get, fresh_extend
 *   R2/A2  slot filled, generation made odd -> kva_slab_lookup
 *   R4/A4  a chain pushed on the free stack -> the thread that pops it
 *   R8/A8  a flush's grace period passed -> kva_slab_flush_done (slab.h)
 *   R9/A9  the fresh range moved over a published chunk -> a thread taking
 *          slots from it (their chunk is published, nchunks covers it)
 */
#include <kvadmit/lockfree/slab.h>
#include <kvadmit/lockfree/slab_cache.h>
#include <kvadmit/lockfree/slab_reclaim.h>

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct kva_slab *registry; /* live slabs */
static uint64_t registry_serial;

/* Under registry_lock: the live slab with this serial, or NULL. */
static struct kva_slab *slab_by_serial(uint64_t serial)
{
	for (struct kva_slab *x = registry; x; x = x->live_next)
		if (x->serial == serial)
			return x;
	return NULL;
}

static uint32_t chunk_slots(uint32_t c)
{
	return c < KVA_SLAB_DOUBLINGS ? 1u << (KVA_SLAB_FIRST_SHIFT + c) : 1u << KVA_SLAB_BIG_SHIFT;
}


static struct kva_slab_hdr *hdr(const struct kva_slab *s, uint32_t idx)
{
	return kva_slab_get(s, idx);
}

int kva_slab_init(struct kva_slab *s, size_t slot_size, size_t rcu_off, kva_slab_alloc_fn a,
                  kva_slab_free_fn f)
{
	if (!s || !a || !f || slot_size % alignof(struct kva_slab_rcu) ||
	    rcu_off < sizeof(struct kva_slab_hdr) || rcu_off % alignof(struct kva_slab_rcu) ||
	    rcu_off + sizeof(struct kva_slab_rcu) > slot_size || slot_size > UINT32_MAX)
		return -EINVAL;
	int rc = kva_rcu_init(); /* exit hooks for reader threads, the call_rcu thread */
	if (rc)
		return rc;
	kva__slab_reclaimer_start();
	memset(s, 0, sizeof(*s));
	s->slot_size = (uint32_t)slot_size;
	s->rcu_off = (uint32_t)rcu_off;
	/* a free batch's head lists the others after its header, up to the end
	 * of the rcu area (what follows survives reuse): count + indices */
	size_t body = rcu_off + sizeof(struct kva_slab_rcu) - sizeof(struct kva_slab_hdr);
	size_t cap = (body - sizeof(uint32_t)) / sizeof(uint32_t) + 1;
	s->batch_cap = cap < KVA_SLAB_REFILL ? (uint32_t)cap : KVA_SLAB_REFILL;
	s->mem_alloc = a;
	s->mem_free = f;
	pthread_mutex_lock(&registry_lock);
	s->serial = ++registry_serial;
	s->live_next = registry;
	registry = s;
	pthread_mutex_unlock(&registry_lock);
	return 0;
}

void kva_slab_fini(struct kva_slab *s)
{
	if (!s)
		return;
	/* Callbacks still queued for this slab find it unlinked below and touch
	 * nothing; one running now holds registry_lock until it is done. */
	kva_rcu_reclaim_begin();
	pthread_mutex_lock(&registry_lock);
	for (struct kva_slab **p = &registry; *p; p = &(*p)->live_next)
		if (*p == s) {
			*p = s->live_next;
			break;
		}
	pthread_mutex_unlock(&registry_lock);
	/* Threads may still name this slab's serial in their TLS: serials are
	 * never reused, so those entries never match again. */
	kva__slab_caches_orphan(s);
	/* Published chunks are a prefix: each is published only after those
	 * before it (grow). */
	for (uint32_t i = 0; i < KVA_SLAB_MAX_CHUNKS; i++) {
		char *base = atomic_load_explicit(&s->chunk[i], memory_order_relaxed);
		if (!base)
			break;
		s->mem_free(base, (size_t)chunk_slots(i) * s->slot_size);
	}
}

/* ---- the shared free stack ------------------------------------------------ */

static _Atomic uint32_t *stack_top(struct kva_slab *s, unsigned k)
{
	return &s->stack[k % KVA_SLAB_STACKS].top;
}

/*
 * A free stack's nodes are batches: a batch's first slot (its head) holds the
 * count and the other slots' indices in its body, so a refill takes up to
 * batch_cap slots with one CAS and one or two cache lines, never walking the
 * slots themselves. Heads are linked by hdr.next.
 */
static uint32_t *batch_body(struct kva_slab *s, uint32_t head)
{
	return (uint32_t *)((char *)hdr(s, head) + sizeof(struct kva_slab_hdr));
}

/* Makes a batch of idx[0..n) (the caller owns those slots, n <= batch_cap)
 * whose head is idx[0], linked before `next_head` (index + 1, 0 = none). */
static void batch_make(struct kva_slab *s, const uint32_t *idx, uint32_t n, uint32_t next_head)
{
	uint32_t *body = batch_body(s, idx[0]);
	body[0] = n;
	memcpy(body + 1, idx + 1, (size_t)(n - 1) * sizeof(uint32_t));
	atomic_store_explicit(&hdr(s, idx[0])->next, next_head, memory_order_relaxed);
}

/* A private chain of batches first..last (heads linked by hdr.next) goes on
 * stack k. */
static void push_batches(struct kva_slab *s, unsigned k, uint32_t first, uint32_t last)
{
	_Atomic uint32_t *t = stack_top(s, k);
	struct kva_slab_hdr *tail = hdr(s, last);
	uint32_t top = atomic_load_explicit(t, memory_order_relaxed);
	do
		atomic_store_explicit(&tail->next, top, memory_order_relaxed);
	/* R4: the batches' links and bodies, to the popper (A4). */
	while (!atomic_compare_exchange_weak_explicit(t, &top, first + 1, memory_order_release,
	                                              memory_order_relaxed));
}

/* Inside an RCU read-side section. Pops one batch with one CAS (O(1)
 * between load and CAS). No ABA (slab.h): while this section lasts, a head
 * seen on top cannot be pushed again. */
static uint32_t pop_stack(struct kva_slab *s, unsigned k, uint32_t *out)
{
	_Atomic uint32_t *t = stack_top(s, k);
	/* A4: pairs with R4 in push_batches. */
	uint32_t top = atomic_load_explicit(t, memory_order_acquire);
	for (;;) {
		if (!top)
			return 0;
		uint32_t nx = atomic_load_explicit(&hdr(s, top - 1)->next, memory_order_relaxed);
		if (atomic_compare_exchange_weak_explicit(t, &top, nx, memory_order_acquire,
		                                          memory_order_acquire)) {
			const uint32_t *body = batch_body(s, top - 1);
			uint32_t n = body[0];
			out[0] = top - 1;
			memcpy(out + 1, body + 1, (size_t)(n - 1) * sizeof(uint32_t));
			return n;
		}
	}
}

/* Inside an RCU read-side section: one batch, from the calling thread's own
 * stack first, then the others. */
static uint32_t pop_batch(struct kva_slab *s, uint32_t *out)
{
	unsigned me = kva_thread_index();
	for (unsigned i = 0; i < KVA_SLAB_STACKS; i++) {
		uint32_t n = pop_stack(s, me + i, out);
		if (n)
			return n;
	}
	return 0;
}

/* ---- never-used slots -------------------------------------------------------- */

static uint32_t fresh_next(uint64_t f)
{
	return (uint32_t)f;
}

static uint32_t fresh_end(uint64_t f)
{
	return (uint32_t)(f >> 32);
}

/* Moves the fresh range's end over the chunks published after it, in order,
 * and returns the range as last seen. Any thread helps: each move is one CAS
 * that only raises end, so no publisher has to wait for another. */
static uint64_t fresh_extend(struct kva_slab *s, uint64_t f)
{
	for (;;) {
		uint32_t end = fresh_end(f), off;
		if (end >= KVA_SLAB_INDEX_END)
			return f;
		uint32_t c = kva__slab_chunk_of(end, &off); /* end is a chunk's base: off 0 */
		/* A1: pairs with R1 in grow() — chunk c is there. */
		if (!atomic_load_explicit(&s->chunk[c], memory_order_acquire))
			return f;
		/* Walks at fini (kva_slab_end) cover chunk c before any of its slots
		 * is handed out. */
		uint32_t n = atomic_load_explicit(&s->nchunks, memory_order_relaxed);
		while (n <= c && !atomic_compare_exchange_weak_explicit(&s->nchunks, &n, c + 1,
		                                                        memory_order_relaxed,
		                                                        memory_order_relaxed))
			;
		uint64_t want = (uint64_t)(end + chunk_slots(c)) << 32 | fresh_next(f);
		/* R9: chunk c published and nchunks past it, to the takers (A9). */
		if (atomic_compare_exchange_weak_explicit(&s->fresh, &f, want, memory_order_acq_rel,
		                                          memory_order_acquire))
			f = want;
	}
}

/* Up to KVA_SLAB_REFILL never-used slots into the empty cache c, with one
 * CAS and no slot touched; 0 when none is left. */
static uint32_t take_fresh(struct kva_slab *s, struct kva_slab_cache *c)
{
	/* A9: pairs with R9 in fresh_extend — the range's chunks are published. */
	uint64_t f = atomic_load_explicit(&s->fresh, memory_order_acquire);
	for (;;) {
		if (fresh_next(f) == fresh_end(f)) {
			f = fresh_extend(s, f); /* a chunk its publisher has not passed yet */
			if (fresh_next(f) == fresh_end(f))
				return 0;
		}
		uint32_t next = fresh_next(f), m = fresh_end(f) - next;
		if (m > KVA_SLAB_REFILL)
			m = KVA_SLAB_REFILL;
		/* A9 (see above). */
		if (atomic_compare_exchange_weak_explicit(&s->fresh, &f, f + m, memory_order_acquire,
		                                          memory_order_acquire)) {
			/* the lowest index first (alloc takes from the top): pages
			 * are touched in order */
			for (uint32_t j = 0; j < m; j++)
				c->idx[j] = next + m - 1 - j;
			return m;
		}
	}
}

/* Publishes the next chunk, zeroed and untouched, and moves the fresh range
 * over it. Lock-free: of two threads that grow at once, the one whose CAS
 * publishes the chunk wins and the other frees its memory (both return 0: a
 * chunk was added). 0 or -ENOMEM; a failure claims nothing, so no chunk
 * number is ever a hole. */
static int grow(struct kva_slab *s)
{
	/* Where to look only: the CAS below decides. */
	uint32_t k = atomic_load_explicit(&s->nchunks, memory_order_relaxed);
	while (k < KVA_SLAB_MAX_CHUNKS && atomic_load_explicit(&s->chunk[k], memory_order_relaxed))
		k++;
	if (k >= KVA_SLAB_MAX_CHUNKS)
		return -ENOMEM;
	size_t bytes = (size_t)chunk_slots(k) * s->slot_size;
	char *mem = s->mem_alloc(bytes), *none = NULL;
	if (!mem)
		return -ENOMEM;
	/* R1: the chunk's memory, zeroed by the allocator, to every reader of
	 * this chunk (A1). */
	if (atomic_compare_exchange_strong_explicit(&s->chunk[k], &none, mem, memory_order_release,
	                                            memory_order_relaxed))
		atomic_fetch_add_explicit(&s->slots, chunk_slots(k), memory_order_relaxed);
	else
		s->mem_free(mem, bytes);
	/* A9: pairs with R9 in fresh_extend. */
	fresh_extend(s, atomic_load_explicit(&s->fresh, memory_order_acquire));
	return 0;
}

/* Never-used slots into the empty cache c, growing the slab when none is
 * left (as often as others drain the new chunk first); 0 when no memory or
 * no chunk number is left. */
static uint32_t refill_fresh(struct kva_slab *s, struct kva_slab_cache *c)
{
	for (;;) {
		uint32_t n = take_fresh(s, c);
		if (n)
			return n;
		if (grow(s) != 0)
			return take_fresh(s, c); /* a racer's chunk may have come meanwhile */
	}
}

/* Warms the never-used slots [next, next + want) of range f that no call
 * warmed before; a CAS on `warmed` gives each slot to one warmer. */
static void warm_ahead(struct kva_slab *s, uint64_t f, uint32_t want)
{
	uint32_t from = fresh_next(f), to = fresh_end(f);
	if (to - from > want)
		to = from + want;
	uint32_t w = atomic_load_explicit(&s->warmed, memory_order_relaxed);
	do {
		if (w >= to)
			return;
		if (w > from)
			from = w;
	} while (!atomic_compare_exchange_weak_explicit(&s->warmed, &w, to, memory_order_relaxed,
	                                                memory_order_relaxed));
	while (from < to) {
		uint32_t off, c = kva__slab_chunk_of(from, &off);
		uint32_t n = chunk_slots(c) - off;
		if (n > to - from)
			n = to - from;
		/* a chunk the range has passed: published (A9 of the caller) */
		s->warm((char *)hdr(s, from), (size_t)n * s->slot_size);
		from += n;
	}
}

int kva_slab_grow_ahead(struct kva_slab *s, uint32_t low)
{
	/* A9: pairs with R9 in fresh_extend. */
	uint64_t f = fresh_extend(s, atomic_load_explicit(&s->fresh, memory_order_acquire));
	while (fresh_end(f) - fresh_next(f) < low) {
		int rc = grow(s);
		if (rc)
			return rc;
		/* A9 (see above). */
		f = atomic_load_explicit(&s->fresh, memory_order_acquire);
	}
	if (s->warm)
		warm_ahead(s, f, low);
	return 0;
}

void kva_slab_set_warm(struct kva_slab *s, kva_slab_warm_fn warm)
{
	s->warm = warm;
}

/* ---- allocation and retirement ------------------------------------------------ */

/* The empty cache c refilled: retired slots first (their pages are touched
 * already), then never-used ones; a new chunk only when both are gone. 0:
 * no memory. */
static uint32_t refill(struct kva_slab *s, struct kva_slab_cache *c)
{
	kva_rcu_read_lock();
	c->n = pop_batch(s, c->idx);
	kva_rcu_read_unlock();
	if (!c->n)
		c->n = refill_fresh(s, c);
	return c->n;
}

void *kva_slab_alloc(struct kva_slab *s, uint32_t *idx)
{
	struct kva_slab_cache *c = kva__slab_my_cache(s);
	if (!c || (!c->n && !refill(s, c)))
		return NULL;
	*idx = c->idx[--c->n];
	return hdr(s, *idx);
}

void *kva_slab_alloc_near(struct kva_slab *s, uint32_t near, uint32_t *idx)
{
	struct kva_slab_cache *c = kva__slab_my_cache(s);
	if (!c)
		return NULL;
	struct kva_slab_lane *l = kva__slab_lane(c, near);
	if (!l)
		return kva_slab_alloc(s, idx);
	if (!l->n) {
		/* The cache's top batch, whole: a refill's is one run of
		 * never-used slots or one retired batch. Order kept, so the lane
		 * hands out the lowest index first as the cache does. */
		if (!c->n && !refill(s, c))
			return NULL;
		uint32_t m = c->n < KVA_SLAB_REFILL ? c->n : KVA_SLAB_REFILL;
		c->n -= m;
		memcpy(l->idx, &c->idx[c->n], m * sizeof(l->idx[0]));
		l->n = m;
	}
	*idx = l->idx[--l->n];
	return hdr(s, *idx);
}

void kva_slab_unalloc(struct kva_slab *s, uint32_t idx)
{
	struct kva_slab_cache *c = kva__slab_my_cache(s);
	c->idx[c->n++] = idx; /* the alloc it undoes left room */
}

uint32_t kva_slab_publish(struct kva_slab *s, void *slot)
{
	(void)s;
	struct kva_slab_hdr *h = slot;
	uint32_t g = atomic_load_explicit(&h->gen, memory_order_relaxed);
	g += (g & 1u) ? 2u : 1u; /* free slots are even: the next odd value */
	/* R2: everything the owner wrote, to whoever matches g (A2). */
	atomic_store_explicit(&h->gen, g, memory_order_release);
	return g;
}

/* After the grace period: the retired chain (linked by hdr.next) becomes
 * batches — walked here, on the call_rcu thread, so refills never walk. */
static void reclaim_chain(struct kva_slab *s, uint32_t first)
{
	uint32_t idx[KVA_SLAB_REFILL], m = 0, next_head = 0, last_head = first;
	unsigned k = first; /* spread batches over the stacks by index */
	for (uint32_t i = first + 1; i;) {
		uint32_t nx = atomic_load_explicit(&hdr(s, i - 1)->next, memory_order_relaxed);
		idx[m++] = i - 1;
		if (m == s->batch_cap || !nx) {
			batch_make(s, idx, m, next_head);
			next_head = idx[0] + 1;
			m = 0;
		}
		i = nx;
	}
	push_batches(s, k, next_head - 1, last_head);
}

static void reclaim_ticket(struct rcu_head *head)
{
	kva_rcu_reclaim_begin();
	struct kva__slab_ticket *t = caa_container_of(head, struct kva__slab_ticket, head);
	pthread_mutex_lock(&registry_lock);
	struct kva_slab *s = slab_by_serial(t->serial);
	if (s) {
		reclaim_chain(s, t->first);
		/* Callbacks may run out of order (per-CPU call_rcu threads): keep
		 * the highest. R8: a grace period passed since that flush, to the
		 * retiring thread's kva_slab_flush_done (A8). */
		uint64_t done = atomic_load_explicit(&s->flush_gp, memory_order_relaxed);
		while (done < t->flush &&
		       !atomic_compare_exchange_weak_explicit(&s->flush_gp, &done, t->flush,
		                                              memory_order_release,
		                                              memory_order_relaxed))
			;
	}
	/* For TSan: this callback's use of the slab, to kva_slab_fini (the
	 * mutex orders them too) and to whoever waits in urcu_memb_barrier. */
	KVA__TSAN_RELEASE(&kva__rcu_tsan_gp);
	pthread_mutex_unlock(&registry_lock);
	kva__slab_ticket_put(t);
}

void kva_slab_retire(struct kva_slab *s, struct kva_slab_retired *b, uint32_t idx)
{
	struct kva_slab_hdr *h = hdr(s, idx);
	uint32_t g = atomic_load_explicit(&h->gen, memory_order_relaxed);
	/* Even: from now on no lookup matches this incarnation (A2 loads). */
	atomic_store_explicit(&h->gen, g + (g & 1u), memory_order_release);
	atomic_store_explicit(&h->next, b->first, memory_order_relaxed);
	b->first = idx + 1;
	if (!b->last)
		b->last = idx + 1;
	if (++b->n >= KVA_SLAB_RETIRE_BATCH)
		kva_slab_flush(s, b);
}

void kva_slab_flush(struct kva_slab *s, struct kva_slab_retired *b)
{
	if (!b->n)
		return;
	struct kva__slab_ticket *t = kva__slab_ticket_get();
	if (!t)
		return; /* no ticket free: the chain waits for a later flush */
	t->serial = s->serial;
	t->flush = ++b->flushed;
	t->first = b->first - 1;
	*b = (struct kva_slab_retired){0, 0, 0, b->flushed};
	kva__slab_call_rcu(&t->head, reclaim_ticket);
}

void kva__slab_registry_hold(bool on)
{
	if (on)
		pthread_mutex_lock(&registry_lock);
	else
		pthread_mutex_unlock(&registry_lock);
}

void kva_slab_atfork_prepare(void)
{
	pthread_mutex_lock(&registry_lock);
}

void kva_slab_atfork_parent(void)
{
	pthread_mutex_unlock(&registry_lock);
}

void kva_slab_atfork_child(void)
{
	/* The forking thread took it in prepare: it is the owner here too. */
	pthread_mutex_unlock(&registry_lock);
	kva__slab_reclaimer_atfork_child();
}
