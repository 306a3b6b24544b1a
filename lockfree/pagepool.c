/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pagepool: page ids as bits of a map, claimed through a counter.
 *
 * This file owns map[], summary[], avail and hint. Every write to them is an
 * atomic read-modify-write (or, for the hint, a relaxed store): no thread
 * ever holds ids that others need, so there is nothing to wait for.
 *
 * Memory-order labels:
 *   R1/A1  put_word's fetch_or on map[w] -> the take_word fetch_and that
 *          takes those ids (the previous owner is done with them)
 *   R2/A2  summary_set -> the summary_clear that erases that set bit (the
 *          clear's recheck then sees the put's bits in map[w])
 *   R3/A3  put_n's (or give_back's) count in avail -> the claim in claim
 *          that counts on those ids (their bits are set: the claimer's
 *          scan finds them)
 *
 * Why a take that comes up short was crowded out, and never loses an id:
 * let B be the ids whose bits are set and D the ids owed to takes that
 * have claimed. Then B >= avail + D: a put sets its bits before it adds to
 * avail (R3), a claim moves n from avail to D, a give-back (give_back) puts
 * its collected ids as a put does and moves the rest of its claim from D
 * to avail, and a fetch_and takes bits only for a take that is still owed
 * them (its mask has at most that many bits), moving them from B and D
 * alike. So while a take is owed ids, set bits exist, and puts only add
 * bits: a pass over every word that does not find them means other takes
 * took bits in the words it had not reached yet, each one it was owed.
 * The take then gives back and says -EAGAIN rather than pass again, so its
 * work is bounded (KVA_PAGEPOOL_CLAIM_TRIES, KVA_PAGEPOOL_PASSES) however
 * the others run, and another call completed meanwhile.
 *
 * The summary is a hint that may lag: a bit is set by the put that makes its
 * word non-empty, cleared by whoever sees the word empty, and a clear looks
 * at the word again afterwards and sets the bit back if a put slipped in
 * before it (R2/A2). A word with ids and a clear summary bit exists only
 * while some thread is between its clear and its recheck, so a take's first
 * pass trusts the summary and its second reads every word.
 */
#include <kvadmit/lockfree/pagepool.h>

#include <errno.h>
#include <stdlib.h>

#ifndef KVA_DEBUG
#define KVA_DEBUG 0
#endif

#define BITS 64u

#ifdef KVA_FAULT_INJECTION
static _Atomic uint32_t claim_faults; /* claim CASes still to fail */
static _Atomic uint64_t claim_tries, passes;

void kva__pagepool_fault_arm(uint32_t k, uint64_t *tries, uint64_t *pass)
{
	/* Relaxed throughout: test counters, read after the calls they count. */
	atomic_store_explicit(&claim_faults, k, memory_order_relaxed);
	*tries = atomic_exchange_explicit(&claim_tries, 0, memory_order_relaxed);
	*pass = atomic_exchange_explicit(&passes, 0, memory_order_relaxed);
}

/* Counts a claim CAS; true: it is to fail as if another thread won it. */
static bool claim_fault(void)
{
	atomic_fetch_add_explicit(&claim_tries, 1, memory_order_relaxed);
	uint32_t k = atomic_load_explicit(&claim_faults, memory_order_relaxed);
	while (k && k != UINT32_MAX &&
	       !atomic_compare_exchange_weak_explicit(&claim_faults, &k, k - 1, memory_order_relaxed,
						      memory_order_relaxed))
		;
	return k != 0;
}

static void count_pass(void)
{
	atomic_fetch_add_explicit(&passes, 1, memory_order_relaxed);
}
#else
#define claim_fault() false
#define count_pass() ((void)0)
#endif

static inline uint64_t bit(uint32_t i)
{
	return 1ull << (i % BITS);
}

/* The lowest k bits of a word set (k <= BITS). */
static inline uint64_t first_bits(uint32_t k)
{
	return k >= BITS ? ~0ull : (1ull << k) - 1;
}

int kva_pagepool_init(struct kva_pagepool *p, uint32_t n)
{
	p->n = n;
	p->words = (uint32_t)(((uint64_t)n + BITS - 1) / BITS);
	uint32_t sums = (p->words + BITS - 1) / BITS;
	p->map = NULL;
	p->summary = NULL;
	atomic_init(&p->avail, 0);
	atomic_init(&p->hint, 0);
	if (n == 0)
		return 0;
	p->map = malloc((size_t)p->words * sizeof(*p->map));
	p->summary = malloc((size_t)sums * sizeof(*p->summary));
	if (!p->map || !p->summary) {
		free(p->map);
		free(p->summary);
		p->map = NULL;
		p->summary = NULL;
		p->n = p->words = 0;
		return -ENOMEM;
	}
	for (uint32_t w = 0; w < p->words; w++)
		atomic_init(&p->map[w], first_bits(n - w * BITS));
	for (uint32_t s = 0; s < sums; s++)
		atomic_init(&p->summary[s], first_bits(p->words - s * BITS));
	atomic_init(&p->avail, n);
	return 0;
}

void kva_pagepool_fini(struct kva_pagepool *p)
{
	free(p->map);
	free(p->summary);
	p->map = NULL;
	p->summary = NULL;
	p->n = p->words = 0;
	atomic_store_explicit(&p->avail, 0, memory_order_relaxed);
}

static void summary_set(struct kva_pagepool *p, uint32_t w)
{
	/* R2: pairs with A2 in summary_clear — orders our put's fetch_or on
	 * map[w] before a clear that erases this bit. */
	atomic_fetch_or_explicit(&p->summary[w / BITS], bit(w), memory_order_release);
}

/* map[w] was seen empty. A put may have refilled it and set its bit just
 * before this clear erases it, so look at the word again after clearing. */
static void summary_clear(struct kva_pagepool *p, uint32_t w)
{
	/* A2: pairs with R2 in summary_set — a put whose set bit we erase has
	 * its ids in map[w] visible to the load below. */
	atomic_fetch_and_explicit(&p->summary[w / BITS], ~bit(w), memory_order_acquire);
	/* Relaxed: ordered after that put's fetch_or by A2. */
	if (atomic_load_explicit(&p->map[w], memory_order_relaxed))
		summary_set(p, w);
}

/* Set bits in v. Without a popcount instruction in the target (x86-64
 * before -mpopcnt) the builtin is a call into libgcc, once per fetch_and:
 * a few inline operations cost less. */
static inline unsigned popcount64(uint64_t v)
{
#if defined(__POPCNT__) || !(defined(__x86_64__) || defined(__i386__))
	return (unsigned)__builtin_popcountll(v);
#else
	v -= (v >> 1) & 0x5555555555555555ull;
	v = (v & 0x3333333333333333ull) + ((v >> 2) & 0x3333333333333333ull);
	v = (v + (v >> 4)) & 0x0f0f0f0f0f0f0f0full;
	return (unsigned)((v * 0x0101010101010101ull) >> 56);
#endif
}

/* The lowest k set bits of v (all of v when it has no more than k). */
static inline uint64_t lowest_bits(uint64_t v, size_t k)
{
	if (popcount64(v) <= k)
		return v;
	uint64_t m = 0;
	while (k--) {
		uint64_t b = v & -v;
		m |= b;
		v ^= b;
	}
	return m;
}

/* Takes up to `want` ids from map[w], lowest first, into ids[]; returns how
 * many. `trusted`: the summary sent us here, so a word found empty had a
 * stale bit, which we clear; otherwise only a word we emptied clears it. */
static size_t take_word(struct kva_pagepool *p, uint32_t w, uint32_t *ids, size_t want,
			bool trusted)
{
	size_t got = 0;
	bool took = false;
	/* Relaxed: a guess for the fetch_and, which acquires what it takes. */
	uint64_t v = atomic_load_explicit(&p->map[w], memory_order_relaxed);
	while (v && got < want) {
		uint64_t m = lowest_bits(v, want - got);
		/* A1: pairs with R1 in put_word — these ids' previous owner
		 * put them back before we use them. */
		uint64_t old = atomic_fetch_and_explicit(&p->map[w], ~m, memory_order_acquire);
		for (uint64_t mine = old & m; mine; mine &= mine - 1)
			ids[got++] = w * BITS + (uint32_t)__builtin_ctzll(mine);
		v = old & ~m; /* the word as our fetch_and left it */
		took = true;
	}
	if (!v && (took || trusted))
		summary_clear(p, w);
	return got;
}

/* Collects from map[a .. b) in order until `n` ids are in ids[]. `trusted`:
 * visit only the words the summary names. *last: the last word visited. */
static size_t take_range(struct kva_pagepool *p, uint32_t a, uint32_t b, uint32_t *ids,
			 size_t got, size_t n, bool trusted, uint32_t *last)
{
	for (uint32_t w = a; w < b && got < n; w++) {
		if (trusted) {
			/* Relaxed: a hint; a later untrusted pass covers a lag. */
			uint64_t s = atomic_load_explicit(&p->summary[w / BITS],
							  memory_order_relaxed) >>
				     (w % BITS);
			if (!s) {
				w = (w / BITS + 1) * BITS - 1; /* the next summary word */
				continue;
			}
			w += (uint32_t)__builtin_ctzll(s);
			if (w >= b)
				break;
		}
		got += take_word(p, w, ids + got, n - got, trusted);
		*last = w;
	}
	return got;
}

static void put_word(struct kva_pagepool *p, uint32_t w, uint64_t m)
{
	/* R1: pairs with A1 in take_word — we are done with these ids. */
	if (!atomic_fetch_or_explicit(&p->map[w], m, memory_order_release))
		summary_set(p, w); /* the word was empty: name it again */
}

void kva_pagepool_put(struct kva_pagepool *p, uint32_t id)
{
	kva_pagepool_put_n(p, &id, 1);
}

/* Sets the ids' bits: one fetch_or per run of ids in the same word. */
static void put_ids(struct kva_pagepool *p, const uint32_t *ids, size_t n)
{
	uint32_t w = ids[0] / BITS;
	uint64_t m = 0;
	for (size_t i = 0; i < n; i++) {
		if (ids[i] / BITS != w) {
			put_word(p, w, m);
			w = ids[i] / BITS;
			m = 0;
		}
		m |= bit(ids[i]);
	}
	put_word(p, w, m);
}

int kva_pagepool_take(struct kva_pagepool *p, uint32_t *id)
{
	return kva_pagepool_take_n(p, id, 1);
}

/* Moves n from avail to this take's claim: 0, -ENOSPC (fewer than n), or
 * -EAGAIN after KVA_PAGEPOOL_CLAIM_TRIES failed CASes. */
static int claim(struct kva_pagepool *p, size_t n)
{
	/* Relaxed: only a guess for the CAS. */
	uint64_t a = atomic_load_explicit(&p->avail, memory_order_relaxed);
	for (uint32_t tries = 0; tries < KVA_PAGEPOOL_CLAIM_TRIES; tries++) {
		if (a < n)
			return -ENOSPC;
		if (claim_fault()) {
			a = atomic_load_explicit(&p->avail, memory_order_relaxed);
			continue;
		}
		/* A3: pairs with R3 in put_n and give_back — the bits of the
		 * ids we count on are set before we scan for them. */
		if (atomic_compare_exchange_weak_explicit(&p->avail, &a, a - n, memory_order_acquire,
							  memory_order_relaxed))
			return 0;
	}
	return -EAGAIN;
}

/* A take crowded out of its claim: the `got` ids it collected go back as a
 * put's do (bits first), and the whole claim, collected or not, back into
 * avail, so count and map are as if the take had never run. */
static void give_back(struct kva_pagepool *p, const uint32_t *ids, size_t got, size_t n)
{
	if (got)
		put_ids(p, ids, got);
	/* R3: pairs with A3 in claim — the bits are set before the ids count. */
	atomic_fetch_add_explicit(&p->avail, n, memory_order_release);
}

int kva_pagepool_take_n(struct kva_pagepool *p, uint32_t *ids, size_t n)
{
	if (n == 0)
		return 0;
	if (n > p->n)
		return -ENOSPC;
	int rc = claim(p, n);
	if (rc)
		return rc;
	/* Relaxed: where to start looking, nothing more. */
	uint32_t start = atomic_load_explicit(&p->hint, memory_order_relaxed);
	if (start >= p->words)
		start = 0;
	uint32_t last = start;
	size_t got = 0;
	/* The first pass follows the summary, the second reads every word
	 * (the file comment: a summary bit may lag while its clearer runs). */
	for (uint32_t pass = 0; got < n && pass < KVA_PAGEPOOL_PASSES; pass++) {
		bool trusted = pass == 0;
		count_pass();
		got = take_range(p, start, p->words, ids, got, n, trusted, &last);
		got = take_range(p, 0, start, ids, got, n, trusted, &last);
	}
	if (got < n) { /* other takes took what we were owed (file comment) */
		give_back(p, ids, got, n);
		return -EAGAIN;
	}
	if (last != start) /* Relaxed: a hint (see above). */
		atomic_store_explicit(&p->hint, last, memory_order_relaxed);
	return 0;
}

void kva_pagepool_put_n(struct kva_pagepool *p, const uint32_t *ids, size_t n)
{
	if (n == 0)
		return;
	/* An id out of range would write outside map[]: drop the whole call
	 * rather than corrupt memory (a caller bug, checked in debug builds). */
	if (KVA_DEBUG) {
		for (size_t i = 0; i < n; i++)
			if (ids[i] >= p->n)
				return;
	}
	put_ids(p, ids, n);
	/* Relaxed: a hint, so the next take starts among these ids. */
	atomic_store_explicit(&p->hint, ids[0] / BITS, memory_order_relaxed);
	/* R3: pairs with A3 in claim — the bits are set before the ids count. */
	atomic_fetch_add_explicit(&p->avail, n, memory_order_release);
}

size_t kva_pagepool_count(const struct kva_pagepool *p)
{
	/* Relaxed: a snapshot. */
	return (size_t)atomic_load_explicit(&p->avail, memory_order_relaxed);
}
