/* SPDX-License-Identifier: Apache-2.0 */
/*
 * slab: fixed-size slots addressed by index, each with a generation, for
 * records that any thread reaches by handle {index, generation} with a bounds
 * check and one compare — no search, no hash table.
 *
 * Memory: slots live in chunks (256 slots first, doubling up to 64 Ki slots,
 * then 64 Ki each) that are never returned while the slab lives, so a stale
 * index always points at valid memory. Every slot starts with a
 * struct kva_slab_hdr owned by the slab. Chunk memory comes zeroed from the
 * allocator hook and the slab writes none of it up front: a zero header is a
 * free slot (generation 0, no link), so a slot never handed out matches no
 * handle, and its page is first touched by whoever fills it.
 *
 * Generations: even = free, odd = a live incarnation. kva_slab_publish()
 * makes a filled slot live (odd), kva_slab_retire() makes it free again
 * (even) and hands it back only after an RCU grace period, so a reader that
 * matched the old generation inside its read-side section never sees the
 * slot reused, and a handle never matches a slot in transit. A slot wraps
 * after 2^31 incarnations of that one slot. A flushed batch travels through
 * call_rcu on a ticket from a process-wide pool, not in the slots, so fini
 * never waits for call_rcu: callbacks still queued find the slab gone.
 *
 * Free slots: each thread allocates from its own cache (64 indices), refilled
 * with one batch of up to 32 (one CAS; the batch's first slot lists the
 * others, so a refill touches no other slot) from shared Treiber stacks — its own
 * thread index's first, so producer threads do not refill from the same
 * line; retired batches are spread over the stacks. The stacks have no ABA
 * by design, without a tag: each is popped only inside an RCU
 * read-side section and pushed only by call_rcu callbacks (retired slots),
 * so a slot a popper saw on top cannot come back to the top before that
 * popper's section ends. A thread that exits (or whose cache table has no
 * room left near a slab's entry: beyond about 128 slabs, 64 engines, at
 * once) leaves its cache, slots included, for the next thread to adopt:
 * nothing is lost, nothing passes through the shared stack early. Neither
 * taking nor leaving a cache takes a lock.
 *
 * Never-used slots never go on a stack: the published chunks' slots not yet
 * handed out are one range of indices, [next, end), in one word; a refill
 * that finds the stacks empty takes up to 32 from it with one CAS (a bump of
 * next), touching no slot. Chunks are published in order, and end moves over
 * each one published. A refill that finds the range empty too grows the slab
 * by a chunk on the calling thread (an allocation, no more); the slab's owner
 * avoids that by calling kva_slab_grow_ahead off the producers' path (a
 * background thread: slab_grower.h), which can also fault in the pages of the next never-used slots (a warm
 * hook), so that neither a chunk nor a page fault lands on a producer.
 *
 * Synchronisation table:
 *   call                         | may run concurrently with
 *   -----------------------------+---------------------------------------
 *   kva_slab_alloc(_near) / _publish | everything but init/fini (any threads)
 *   kva_slab_grow_ahead          | everything but init/fini (any threads)
 *   kva_slab_unalloc             | everything but init/fini (the allocating thread)
 *   kva_slab_lookup / _get       | everything but init/fini (RCU reader)
 *   kva_slab_retire / _flush     | everything but itself (one retirer)
 *   kva_slab_init / _fini        | nothing (no barrier needed before fini)
 */
#ifndef KVA_LOCKFREE_SLAB_H
#define KVA_LOCKFREE_SLAB_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <kvadmit/lockfree/rcu_thread.h>

#define KVA_SLAB_FIRST_SHIFT 8u  /* first chunk: 256 slots */
#define KVA_SLAB_DOUBLINGS 9u    /* chunks 0..8 double: 256 .. 64 Ki */
#define KVA_SLAB_BIG_SHIFT 16u   /* later chunks: 64 Ki slots each */
#define KVA_SLAB_SMALL_TOTAL (((1u << KVA_SLAB_DOUBLINGS) - 1) << KVA_SLAB_FIRST_SHIFT)
#define KVA_SLAB_MAX_SLOTS (1u << 28)
#define KVA_SLAB_MAX_CHUNKS                                                                        \
	(KVA_SLAB_DOUBLINGS + ((KVA_SLAB_MAX_SLOTS - KVA_SLAB_SMALL_TOTAL) >> KVA_SLAB_BIG_SHIFT))
/* One past the last index the chunks can hold: MAX_SLOTS rounded down to
 * whole chunks (an index at or above would name chunk[KVA_SLAB_MAX_CHUNKS]). */
#define KVA_SLAB_INDEX_END                                                                         \
	(KVA_SLAB_SMALL_TOTAL + ((KVA_SLAB_MAX_CHUNKS - KVA_SLAB_DOUBLINGS) << KVA_SLAB_BIG_SHIFT))
#define KVA_SLAB_CACHE 64u       /* slot indices one thread keeps per slab */
#define KVA_SLAB_REFILL 32u      /* taken from the shared stack at once */
#define KVA_SLAB_RETIRE_BATCH 64u
/* Slabs one thread keeps a cache for: 64 engines of two slabs each, open
 * addressing by serial over a window of KVA_SLAB_TLS_PROBE (2 KiB of TLS). */
#define KVA_SLAB_TLS_CACHES 128u
#define KVA_SLAB_TLS_PROBE 4u
#define KVA_SLAB_STACKS 16u      /* shared free stacks: threads refill from their own first */
#define KVA_SLAB_LANES 64u       /* placement classes of kva_slab_alloc_near, per thread cache */

/* First member of every slot. */
struct kva_slab_hdr {
	_Atomic uint32_t gen;  /* even: free; odd: live */
	_Atomic uint32_t next; /* free-stack link: index + 1, 0 = none */
};

/* The area of a slot that the slab may write while the slot is free (a free
 * batch's list, from the header to the end of this area). The user places
 * it where no reader looks (a union with owner-private fields); the bytes
 * after it survive from one incarnation of the slot to the next. Its fields
 * are no longer used by name (a flushed batch travels on a ticket): the
 * struct keeps the area's size. */
struct kva_slab_rcu {
	struct rcu_head head;
	struct kva_slab *slab;
	uint32_t first, last; /* the batch this slot heads, linked by hdr.next */
};

/* Slots retired and not yet flushed: private to the one retiring thread. */
struct kva_slab_retired {
	uint32_t first, last; /* index + 1, 0 = empty */
	uint32_t n;
	uint64_t flushed; /* flushes handed to call_rcu so far (they are numbered 1, 2, ...) */
};

struct kva_slab_cache; /* a thread's free slots, in slab.c */

/* Chunk memory: zeroed, as calloc gives it (fresh pages untouched). */
typedef void *(*kva_slab_alloc_fn)(size_t bytes);
typedef void (*kva_slab_free_fn)(void *p, size_t bytes);
/* Makes chunk bytes resident without changing them (other threads may be
 * using the slots around them), e.g. madvise(MADV_POPULATE_WRITE). */
typedef void (*kva_slab_warm_fn)(void *p, size_t bytes);

struct kva_slab {
	uint32_t slot_size;
	uint32_t rcu_off; /* offset of the slot's struct kva_slab_rcu */
	uint32_t batch_cap; /* slots a free batch holds (its head's body lists them) */
	uint64_t serial;  /* unique per slab in the process: names it in thread caches */
	kva_slab_alloc_fn mem_alloc;
	kva_slab_free_fn mem_free;
	kva_slab_warm_fn warm;      /* optional (kva_slab_set_warm) */
	struct kva_slab *live_next; /* registry of live slabs (slab.c) */
	/* Never-used slots: end << 32 | next (R9/A9 of slab.c). Both halves
	 * only grow, so the word never takes a value twice: no ABA. */
	alignas(64) _Atomic uint64_t fresh;
	_Atomic uint32_t nchunks;                   /* chunks the fresh range has passed */
	_Atomic uint32_t warmed;                    /* never-used slots below it were warmed */
	_Atomic(struct kva_slab_cache *) caches;    /* every cache of this slab */
	struct {
		alignas(64) _Atomic uint32_t top; /* index + 1, 0 = empty */
	} stack[KVA_SLAB_STACKS];
	/* Written by the call_rcu thread after every flush's grace period: on
	 * its own line, away from the chunk table every slot access reads. */
	alignas(64) _Atomic uint64_t flush_gp;      /* highest flush whose grace period passed */
	alignas(64) _Atomic uint32_t slots;         /* slots in published chunks (statistic) */
	_Atomic(char *) chunk[KVA_SLAB_MAX_CHUNKS]; /* R1 of slab.c publishes each */
};

/* 0, -EINVAL (slot_size too small for the header or rcu_off misplaced),
 * -EAGAIN (kva_rcu_init: no pthread key for reader threads' exit hook). The
 * allocator hooks provide chunk memory (e.g. a dedicated arena), zeroed. */
int kva_slab_init(struct kva_slab *s, size_t slot_size, size_t rcu_off, kva_slab_alloc_fn a,
                  kva_slab_free_fn f);
/* Frees every chunk. No other thread may use the slab; retired slots not yet
 * flushed are simply dropped. No barrier is needed: callbacks of earlier
 * flushes still queued in call_rcu find the slab gone and do nothing (they
 * never touch its memory), so fini never waits for the call_rcu thread. */
void kva_slab_fini(struct kva_slab *s);

/* Any thread. A free slot (its generation even), its index in *idx; NULL
 * when no memory is left for a new chunk. Owned by the caller until it is
 * published or retired. From the thread's cache; a refill takes a batch of
 * retired slots, else never-used ones, else grows the slab by a chunk. */
void *kva_slab_alloc(struct kva_slab *s, uint32_t *idx);
/* Any thread. As kva_slab_alloc, but the slots one thread takes with the
 * same `near` (mod KVA_SLAB_LANES) come from one refill batch of up to
 * KVA_SLAB_REFILL slots while it lasts: neighbours in memory when the batch
 * is never-used or was retired together. For an owner that uses its records
 * by class (an engine admits one priority level's requests together), so
 * that records used together share cache lines and prefetch streams instead
 * of lying a class count apart. A thread's cache keeps at most
 * KVA_SLAB_LANES batches aside this way (its lanes, made at its first call;
 * without memory for them this is kva_slab_alloc), and they go with the
 * cache to the next thread when it exits. Not to be undone with
 * kva_slab_unalloc. */
void *kva_slab_alloc_near(struct kva_slab *s, uint32_t near, uint32_t *idx);
/* Any thread; meant for a thread off the allocating threads' path (the
 * slab grower). It maps and faults in memory, so not for a scheduler's
 * step. Publishes chunks until at least
 * `low` never-used slots are ready, so that kva_slab_alloc does not have to
 * grow, and with a warm hook warms the next `low` of them (only those not
 * warmed before). Retired slots are not counted: they are reused first, and
 * a ready chunk nobody needs is address space only, its pages never
 * touched. 0, or -ENOMEM (no memory, or no chunk number left): alloc grows
 * as before. */
int kva_slab_grow_ahead(struct kva_slab *s, uint32_t low);
/* Any thread (meant for a grower, lockfree/slab_grower.h): keeps at least
 * `low` tickets free in the process-wide pool that carries flushed batches
 * to call_rcu. From its first call on, a flush that finds the pool empty no
 * longer allocates one itself: its batch waits for a later flush. 0 or
 * -ENOMEM. */
int kva_slab_tickets_ahead(uint32_t low);
/* Before the slab is shared: the hook kva_slab_grow_ahead warms with. */
void kva_slab_set_warm(struct kva_slab *s, kva_slab_warm_fn warm);
/* Gives back a slot the calling thread took with kva_slab_alloc and never
 * published, before it takes another from s: straight back into the
 * thread's cache (the alloc made room there). No grace period: no
 * generation of this incarnation was ever handed out. */
void kva_slab_unalloc(struct kva_slab *s, uint32_t idx);
/* The owner filled the slot: it becomes live under a new odd generation,
 * which is returned. Everything written before is visible to whoever
 * matches that generation (R2 of slab.c). */
uint32_t kva_slab_publish(struct kva_slab *s, void *slot);

static inline uint32_t kva__slab_chunk_of(uint32_t idx, uint32_t *off)
{
	if (idx < KVA_SLAB_SMALL_TOTAL) {
		uint32_t c = 31u - (uint32_t)__builtin_clz((idx >> KVA_SLAB_FIRST_SHIFT) + 1);
		*off = idx - (((1u << c) - 1) << KVA_SLAB_FIRST_SHIFT);
		return c;
	}
	uint32_t rel = idx - KVA_SLAB_SMALL_TOTAL;
	*off = rel & ((1u << KVA_SLAB_BIG_SHIFT) - 1);
	return KVA_SLAB_DOUBLINGS + (rel >> KVA_SLAB_BIG_SHIFT);
}

static inline uint32_t kva__slab_chunk_base(uint32_t c)
{
	return c < KVA_SLAB_DOUBLINGS
	               ? ((1u << c) - 1) << KVA_SLAB_FIRST_SHIFT
	               : KVA_SLAB_SMALL_TOTAL + ((c - KVA_SLAB_DOUBLINGS) << KVA_SLAB_BIG_SHIFT);
}

/* One past the highest index ever handed out (and never-used slots after
 * it: zero, generation even). For walks at fini. */
static inline uint32_t kva_slab_end(const struct kva_slab *s)
{
	uint32_t n = atomic_load_explicit(&((struct kva_slab *)s)->nchunks, memory_order_relaxed);
	return kva__slab_chunk_base(n < KVA_SLAB_MAX_CHUNKS ? n : KVA_SLAB_MAX_CHUNKS);
}

/* Any thread. The slot at idx, live or not; NULL if no published chunk
 * holds idx (so it was never handed out). */
static inline void *kva_slab_get(const struct kva_slab *s, uint32_t idx)
{
	if (idx >= KVA_SLAB_INDEX_END)
		return NULL;
	uint32_t off, c = kva__slab_chunk_of(idx, &off);
	/* A1: pairs with R1 in grow() — the chunk's (zeroed) memory. */
	char *base = atomic_load_explicit(&((struct kva_slab *)s)->chunk[c], memory_order_acquire);
	return base ? base + (size_t)off * s->slot_size : NULL;
}

/* RCU reader (or the slot's owner). The slot at idx if it is live under
 * generation gen, else NULL. Inside the read-side section the slot stays
 * that incarnation's memory even if it is retired meanwhile. */
static inline void *kva_slab_lookup(const struct kva_slab *s, uint32_t idx, uint32_t gen)
{
	struct kva_slab_hdr *h = kva_slab_get(s, idx);
	/* A2: pairs with R2 in kva_slab_publish — sees the filled slot. */
	if (!h || !(gen & 1) || atomic_load_explicit(&h->gen, memory_order_acquire) != gen)
		return NULL;
	return h;
}

/* The one retiring thread. The slot stops matching its generation now and
 * joins *batch; the batch is flushed (handed to call_rcu) when full. */
void kva_slab_retire(struct kva_slab *s, struct kva_slab_retired *batch, uint32_t idx);
/* The one retiring thread: hands a partial batch to call_rcu (on a ticket;
 * when no ticket memory is left the batch stays for a later flush). */
void kva_slab_flush(struct kva_slab *s, struct kva_slab_retired *batch);

/* Grace periods for the retiring thread's own memory (lockfree/slab.c R8):
 * something it unlinks from every reader's reach now, together with
 * retiring slots or not, may be reused once kva_slab_flush_done(s,
 * kva_slab_next_flush(batch)) is true: a grace period has passed since a
 * flush made after the unlink. Never blocks, adds no call_rcu. */
static inline uint64_t kva_slab_next_flush(const struct kva_slab_retired *batch)
{
	return batch->flushed + 1;
}

static inline bool kva_slab_flush_done(const struct kva_slab *s, uint64_t flush)
{
	/* A8: pairs with R8 in slab.c's reclaim callback. */
	return atomic_load_explicit(&((struct kva_slab *)s)->flush_gp, memory_order_acquire) >= flush;
}

/* Fork (kva_atfork_* in kvadmit.h): prepare takes the registry lock that
 * call_rcu callbacks and thread attach/exit take; parent and child release
 * it. Call prepare after liburcu's call_rcu_before_fork (its callbacks need
 * the lock to finish) and release before the after_fork ones. */
void kva_slab_atfork_prepare(void);
void kva_slab_atfork_parent(void);
void kva_slab_atfork_child(void);

/* Tests: caches threads detached so far (a thread leaving a cache while it
 * lives, or at its exit); the registry lock that call_rcu callbacks, init
 * and fini take, held (on) or released by the calling thread. */
uint64_t kva__slab_detached(void);
void kva__slab_registry_hold(bool on);

/* Slots in published chunks (a statistic). */
static inline uint32_t kva_slab_slots(const struct kva_slab *s)
{
	return atomic_load_explicit(&((struct kva_slab *)s)->slots, memory_order_relaxed);
}

/* Never-used slots the fresh range holds now (a statistic: chunks
 * published but not yet passed by the range are not counted). */
static inline uint32_t kva_slab_fresh(const struct kva_slab *s)
{
	uint64_t f = atomic_load_explicit(&((struct kva_slab *)s)->fresh, memory_order_relaxed);
	return (uint32_t)(f >> 32) - (uint32_t)f;
}

#endif
