/* SPDX-License-Identifier: Apache-2.0 */
/*
 * slab: indexed slots with generations (see slab.h for the contract).
 *
 * Owns the chunks, the range of never-used slots, the shared free stack, the
 * per-thread caches and the process-wide registry of live slabs, which only
 * init, fini and the call_rcu callbacks lock (never a thread attaching to
 * or leaving a cache).
 *
 * Memory-order labels:
 *   R1/A1  chunk published (its zeroed memory) -> kva_slab_get, fresh_extend
 *   R2/A2  slot filled, generation made odd -> kva_slab_lookup
 *   R3/A3  a thread leaves its cache -> the thread that adopts it
 *   R4/A4  a chain pushed on the free stack -> the thread that pops it
 *   R5/A5  a cache linked into the slab's list -> a thread walking the list
 *   R6/A6  a ticket pushed on the ticket free list -> the thread that pops it
 *   R7/A7  a ticket segment published -> a thread reading a ticket by index
 *   R8/A8  a flush's grace period passed -> kva_slab_flush_done (slab.h)
 *   R9/A9  the fresh range moved over a published chunk -> a thread taking
 *          slots from it (their chunk is published, nchunks covers it)
 *   R10/A10 fini orphaned a cache a thread holds -> that thread, which
 *          frees it
 *   R11/A11 kvadmit's call_rcu data created -> a flush that uses it
 */
#include "slab.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

/* A cache's owner word (see "per-thread caches"). */
enum { CACHE_FREE, CACHE_OWNED, CACHE_ORPHAN };

struct kva_slab_cache {
	struct kva_slab_cache *next; /* the slab's list of caches, never unlinked */
	_Atomic int owned;           /* CACHE_*: who may use or free it */
	uint32_t n;
	uint32_t idx[KVA_SLAB_CACHE];
};

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct kva_slab *registry; /* live slabs */
static uint64_t registry_serial;

struct tls_cache {
	uint64_t serial; /* 0 = unused */
	struct kva_slab_cache *c;
};
/* Open addressing by serial, KVA_SLAB_TLS_PROBE entries from its home. */
static _Thread_local struct tls_cache tls_caches[KVA_SLAB_TLS_CACHES];
static _Thread_local unsigned tls_victim;
static pthread_once_t exit_key_once = PTHREAD_ONCE_INIT;
static pthread_key_t exit_key;
static int exit_key_err;

/* Under registry_lock: the live slab with this serial, or NULL. */
static struct kva_slab *slab_by_serial(uint64_t serial)
{
	for (struct kva_slab *x = registry; x; x = x->live_next)
		if (x->serial == serial)
			return x;
	return NULL;
}

/* ---- reclaim tickets ----------------------------------------------------------
 *
 * A flushed batch of retired slots travels through call_rcu on a ticket, not
 * in the slots' own memory, so a slab can be finished with callbacks still
 * queued: kva_slab_fini needs no urcu_memb_barrier (liburcu 0.13's call_rcu
 * thread sleeps 10 ms between batches, which made every engine teardown cost
 * 10 ms). A callback finds its slab by serial in the registry, under
 * registry_lock (fini unlinks it under the same lock before freeing), and
 * only hands its ticket back when the slab is gone.
 *
 * Tickets live in segments that are never freed (plain malloc: they outlive
 * every slab). The free list is a Treiber stack of ticket indices whose top
 * carries a 32-bit tag bumped by every pop: any retiring thread pops, call_rcu
 * threads push, and a pop whose top was popped and pushed again meanwhile
 * fails its CAS on the tag.
 */
#define TICKET_SEG_SHIFT 8u
#define TICKET_SEGS 4096u

struct ticket {
	struct rcu_head head;
	uint64_t serial;      /* the slab the batch returns to */
	uint64_t flush;       /* the flush's number (kva_slab_next_flush) */
	uint32_t first;       /* the chain's first slot, linked by hdr.next */
	uint32_t self;        /* index in the pool */
	_Atomic uint32_t next; /* free list: index + 1, 0 = none */
};

static _Atomic(struct ticket *) ticket_seg[TICKET_SEGS];
static _Atomic uint32_t ticket_nsegs;
static _Atomic uint64_t ticket_top; /* pop tag << 32 | (index + 1) */
/* Tickets on the free list (an estimate: pushes and pops count it apart
 * from the CAS that moves them). */
static _Atomic int64_t ticket_free_n;
/* Set once kva_slab_tickets_ahead ran: from then on a flush never grows the
 * pool itself (no malloc on the retiring thread), it waits for the grower. */
static _Atomic bool tickets_kept_ahead;

static struct ticket *ticket_at(uint32_t i)
{
	/* A7: pairs with R7 in ticket_grow — the segment's tickets are set up. */
	struct ticket *seg = atomic_load_explicit(&ticket_seg[i >> TICKET_SEG_SHIFT],
	                                          memory_order_acquire);
	return &seg[i & ((1u << TICKET_SEG_SHIFT) - 1)];
}

/* Pushes the chain first..last (linked by next, n tickets) on the free list. */
static void ticket_push(struct ticket *first, struct ticket *last, uint32_t n)
{
	atomic_fetch_add_explicit(&ticket_free_n, n, memory_order_relaxed);
	uint64_t top = atomic_load_explicit(&ticket_top, memory_order_relaxed), want;
	do {
		atomic_store_explicit(&last->next, (uint32_t)top, memory_order_relaxed);
		want = (top & ~(uint64_t)UINT32_MAX) | (first->self + 1u);
		/* R6: the tickets' links, and the callback's last reads of them, to
		 * the popper (A6). */
	} while (!atomic_compare_exchange_weak_explicit(&ticket_top, &top, want, memory_order_release,
	                                                memory_order_relaxed));
}

/* A new segment: its first ticket for the caller, the rest on the free list.
 * NULL when no segment is left or malloc fails (that segment stays a hole). */
static struct ticket *ticket_grow(void)
{
	uint32_t k = atomic_load_explicit(&ticket_nsegs, memory_order_relaxed);
	do {
		if (k >= TICKET_SEGS)
			return NULL;
	} while (!atomic_compare_exchange_weak_explicit(&ticket_nsegs, &k, k + 1,
	                                                memory_order_relaxed, memory_order_relaxed));
	const uint32_t n = 1u << TICKET_SEG_SHIFT;
	struct ticket *seg = malloc(n * sizeof(*seg));
	if (!seg)
		return NULL;
	for (uint32_t i = 0; i < n; i++) {
		seg[i].self = (k << TICKET_SEG_SHIFT) + i;
		atomic_init(&seg[i].next, i + 1 < n ? seg[i].self + 2u : 0u);
	}
	/* R7: the tickets' indices, to ticket_at (A7). */
	atomic_store_explicit(&ticket_seg[k], seg, memory_order_release);
	ticket_push(&seg[1], &seg[n - 1], n - 1);
	return &seg[0];
}

/* Any thread: a free ticket, or NULL (none free and the grower keeps the
 * pool, or no memory). */
static struct ticket *ticket_get(void)
{
	/* A6: pairs with R6 in ticket_push. */
	uint64_t top = atomic_load_explicit(&ticket_top, memory_order_acquire);
	for (;;) {
		uint32_t i = (uint32_t)top;
		if (!i)
			return atomic_load_explicit(&tickets_kept_ahead, memory_order_relaxed)
			               ? NULL
			               : ticket_grow();
		struct ticket *t = ticket_at(i - 1);
		uint32_t nx = atomic_load_explicit(&t->next, memory_order_relaxed);
		uint64_t want = (((top >> 32) + 1u) << 32) | nx;
		if (atomic_compare_exchange_weak_explicit(&ticket_top, &top, want, memory_order_acquire,
		                                          memory_order_acquire)) {
			atomic_fetch_sub_explicit(&ticket_free_n, 1, memory_order_relaxed);
			return t;
		}
	}
}

int kva_slab_tickets_ahead(uint32_t low)
{
	atomic_store_explicit(&tickets_kept_ahead, true, memory_order_relaxed);
	while (atomic_load_explicit(&ticket_free_n, memory_order_relaxed) < (int64_t)low) {
		struct ticket *t = ticket_grow();
		if (!t)
			return -ENOMEM;
		ticket_push(t, t, 1);
	}
	return 0;
}

/* ---- kvadmit's call_rcu thread ------------------------------------------------
 *
 * Flushes go to a call_rcu thread of kvadmit's own, created real-time
 * (URCU_CALL_RCU_RT): it polls its queue (every 10 ms when idle) instead of
 * sleeping on a futex, so a flush on the scheduler thread is a wait-free
 * enqueue and never a futex wake. Created once by the first kva_slab_init
 * with every signal blocked (as the default one, rcu_thread.c); until then,
 * or if it could not be created, flushes use the thread's usual call_rcu
 * data. liburcu's fork handlers pause it; in a child liburcu frees it, and
 * the next kva_slab_init there creates another.
 */
static _Atomic(struct call_rcu_data *) reclaimer;
/* The first slab init that wins this creates it; no lock, so a fork in the
 * middle leaves no lock taken (the child starts over). */
static _Atomic int reclaimer_claimed;

static void reclaimer_start(void)
{
	int no = 0;
	if (atomic_load_explicit(&reclaimer_claimed, memory_order_relaxed) ||
	    !atomic_compare_exchange_strong_explicit(&reclaimer_claimed, &no, 1,
	                                             memory_order_relaxed, memory_order_relaxed))
		return;
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	struct call_rcu_data *crdp = urcu_memb_create_call_rcu_data(URCU_CALL_RCU_RT, -1);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	/* R11: the call_rcu data, to every flush (A11). */
	atomic_store_explicit(&reclaimer, crdp, memory_order_release);
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
	reclaimer_start();
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
	struct kva_slab_cache *c = atomic_load_explicit(&s->caches, memory_order_acquire);
	while (c) {
		struct kva_slab_cache *next = c->next; /* before c may be freed */
		/* A cache a thread still holds is left to that thread, which frees
		 * it when it next looks at it (detach). R10: orphaned, to that
		 * thread's failed CAS (A10). */
		if (atomic_exchange_explicit(&c->owned, CACHE_ORPHAN, memory_order_acq_rel) ==
		    CACHE_FREE)
			free(c);
		c = next;
	}
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

/* ---- per-thread caches ------------------------------------------------------
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
 */

static _Atomic uint64_t detached; /* caches left by live threads (tests) */

/* The thread stops using a cache; its slots stay in it for the next thread
 * that attaches to the slab. Touches nothing of the slab, which may be gone. */
static void detach(struct tls_cache *t)
{
	atomic_fetch_add_explicit(&detached, 1, memory_order_relaxed);
	int o = CACHE_OWNED;
	/* R3: the cache's slots, to the thread that adopts it (A3). A10: pairs
	 * with R10 in kva_slab_fini — the slab is gone, the cache is ours. */
	if (!atomic_compare_exchange_strong_explicit(&t->c->owned, &o, CACHE_FREE,
	                                             memory_order_release, memory_order_acquire))
		free(t->c);
	t->serial = 0;
	t->c = NULL;
}

static void detach_all_at_exit(void *arg)
{
	(void)arg;
	for (unsigned i = 0; i < KVA_SLAB_TLS_CACHES; i++)
		if (tls_caches[i].serial)
			detach(&tls_caches[i]);
}

static void make_exit_key(void)
{
	exit_key_err = pthread_key_create(&exit_key, detach_all_at_exit);
}

static struct tls_cache *tls_entry(uint64_t serial, unsigned j)
{
	return &tls_caches[(serial + j) & (KVA_SLAB_TLS_CACHES - 1)];
}

/* An entry of s's probe window for a new cache: an empty one, else one
 * whose slab is gone (its orphan freed), else a victim detached. */
static struct tls_cache *tls_claim(const struct kva_slab *s)
{
	for (unsigned j = 0; j < KVA_SLAB_TLS_PROBE; j++)
		if (!tls_entry(s->serial, j)->serial)
			return tls_entry(s->serial, j);
	for (unsigned j = 0; j < KVA_SLAB_TLS_PROBE; j++) {
		struct tls_cache *t = tls_entry(s->serial, j);
		/* A10 (see detach) */
		if (atomic_load_explicit(&t->c->owned, memory_order_acquire) == CACHE_ORPHAN) {
			detach(t);
			return t;
		}
	}
	struct tls_cache *t = tls_entry(s->serial, tls_victim++ % KVA_SLAB_TLS_PROBE);
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
		atomic_init(&c->owned, CACHE_OWNED);
		c->next = atomic_load_explicit(&s->caches, memory_order_relaxed);
		/* R5: the cache, to threads walking the list (A5). */
		while (!atomic_compare_exchange_weak_explicit(&s->caches, &c->next, c,
		                                              memory_order_release, memory_order_relaxed))
			;
	}
	*tls_claim(s) = (struct tls_cache){s->serial, c};
	return c;
}

static inline struct kva_slab_cache *my_cache(struct kva_slab *s)
{
	for (unsigned j = 0; j < KVA_SLAB_TLS_PROBE; j++) {
		struct tls_cache *t = tls_entry(s->serial, j);
		if (t->serial == s->serial)
			return t->c;
	}
	return attach(s);
}

/* ---- allocation and retirement ------------------------------------------------ */

void *kva_slab_alloc(struct kva_slab *s, uint32_t *idx)
{
	struct kva_slab_cache *c = my_cache(s);
	if (!c)
		return NULL;
	if (!c->n) {
		kva_rcu_read_lock();
		c->n = pop_batch(s, c->idx);
		kva_rcu_read_unlock();
		/* Retired slots first (their pages are touched already), then
		 * never-used ones; a new chunk only when both are gone. */
		if (!c->n && !(c->n = refill_fresh(s, c)))
			return NULL;
	}
	*idx = c->idx[--c->n];
	return hdr(s, *idx);
}

void kva_slab_unalloc(struct kva_slab *s, uint32_t idx)
{
	struct kva_slab_cache *c = my_cache(s);
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
	struct ticket *t = caa_container_of(head, struct ticket, head);
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
	ticket_push(t, t, 1);
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
	struct ticket *t = ticket_get();
	if (!t)
		return; /* no ticket free: the chain waits for a later flush */
	t->serial = s->serial;
	t->flush = ++b->flushed;
	t->first = b->first - 1;
	*b = (struct kva_slab_retired){0, 0, 0, b->flushed};
	/* A11: pairs with R11 in reclaimer_start. */
	struct call_rcu_data *rt = atomic_load_explicit(&reclaimer, memory_order_acquire), *own = NULL;
	if (rt) {
		own = urcu_memb_get_thread_call_rcu_data();
		urcu_memb_set_thread_call_rcu_data(rt);
	}
	kva_rcu_call(&t->head, reclaim_ticket);
	if (rt)
		urcu_memb_set_thread_call_rcu_data(own);
}

uint64_t kva__slab_detached(void)
{
	return atomic_load_explicit(&detached, memory_order_relaxed);
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
	/* liburcu's child handler frees every call_rcu data but its default */
	atomic_store_explicit(&reclaimer, NULL, memory_order_relaxed);
	atomic_store_explicit(&reclaimer_claimed, 0, memory_order_relaxed);
}
