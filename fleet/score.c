/* SPDX-License-Identifier: Apache-2.0 */
/*
 * score: see score.h. The entries are a flat open-addressing table keyed by
 * block hash (Robin Hood linear probing, backward-shift deletion, at most
 * 3/4 full, allocated once). A slot holds one block hash and one key of
 * its holders (medium, group, and a word of 64 publisher ids) with the
 * mask of the word's publishers that hold it: a block that eight
 * publishers hold is one slot, and a query reads one slot per block
 * instead of one per holder. Slots of a run lie in the order of their
 * homes (Robin Hood), each knowing its distance from home, so a probe
 * stops at the first slot whose home lies past its own instead of at the
 * run's end.
 *
 * Each 24-byte slot is guarded by its own sequence number: the I/O thread
 * makes it odd, writes the slot, makes it even (release); a reader reads
 * the number (acquire), the slot, the number again, and takes the slot
 * only if both were the same even number. No allocation per entry and no
 * pointer to follow; nothing is freed while the fleet lives, so readers
 * need no grace period for the entries. A reader never waits: a slot it
 * finds being written a few times in a row is passed over (a score may
 * then miss that entry, as a score taken a moment earlier or later would).
 * Identities are replaced under RCU.
 *
 * Dropping a publisher is O(1): a slot's bits are columns, not publisher
 * ids. A publisher takes a free column at its first add after a drop; the
 * drop marks its old column dead (readers mask dead columns out at once)
 * and a sweep, a bounded number of slots per flush, clears dead bits from
 * the table. A column whose pass is over is free again only after an RCU
 * grace period, so no query that could still read its old bits sees it
 * owned by another publisher.
 *
 * As the fleet's index (an entry cap given: holders.h), a slot also holds
 * CLOCK's reference bit and the watched bit of its holders, above its
 * distance from home; the cap counts (block, location) bits, in all and
 * per publisher; at the cap an add's CLOCK hand takes the live bits of the
 * first slot without a reference (while a publisher holds its share or
 * more, only such publishers' bits), and a removal from a watched slot
 * names its (publisher, medium) pair for the fleet to look at.
 *
 * The I/O thread holds its adds and removals and applies them at the end of
 * a batch (kvf_score_flush), fetching the home slots of the next ones while
 * it applies one; a query fetches the home slots of the blocks ahead the
 * same way. The table lies on 2 MiB pages where the kernel gives them
 * (big_table.h).
 */
#define _GNU_SOURCE
#include "score.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <kvadmit/lockfree/hash.h>
#include <kvadmit/lockfree/rcu_thread.h>

#include "big_table.h"
#include "index.h"

#define TOPIC_MAX 95u
#define MAX_PAIRS 1024u  /* (publisher, medium) pairs a query follows */
#define MAX_COMBOS 255u  /* (medium, id word) keys those pairs lie in */
#define READ_TRIES 64    /* a slot still being written after these: passed over */
#define CHUNK 16         /* blocks whose homes a query hashes and fetches together */
#define PENDING 1024     /* writes the I/O thread holds before applying them */
#define FLUSH_AHEAD 16   /* pending writes ahead whose home slots a flush fetches */
#define SWEEP_SLOTS 2048 /* slots a flush sweeps while dead columns remain */
#define COLUMNS KVA_FLEET_MAX_PUBLISHERS /* bits of the slots' 64 masks */
#define NO_COLUMN 0xffffu
#define SWEEPING_MAX 8   /* dead columns of one publisher still being swept */

/* A slot's key: which holders its mask is of. Publisher ids come in words
 * of 64 (KVA_FLEET_MAX_PUBLISHERS = 4,096: 64 words), media number at most
 * 64, and only groups 0..31 are copied (full_groups is 32 bits). */
#define TAG(medium, group, word) ((uint32_t)(medium) << 11 | (uint32_t)(group) << 6 | (word))
#define TAG_MEDIUM(t) ((t) >> 11)
#define TAG_WORD(t) ((t)&63)
#define TAG_GROUP(t) ((t) >> 6 & 31)
#define TAG_COMBO(t) (TAG_MEDIUM(t) << 6 | TAG_WORD(t)) /* the group left out */
#define TAG_BITS 17
#define DIST_MAX 4095u /* distances from home fit 12 bits above the tag */
#define META(tag, dist) ((uint32_t)(dist) << TAG_BITS | (tag))
#define META_TAG(m) ((m) & ((1u << TAG_BITS) - 1))
#define META_DIST(m) ((m) >> TAG_BITS & DIST_MAX)
/* The index's flags, one per slot (for all of its holders), above the
 * distance: CLOCK's reference bit, and "part of an answered checkpoint". */
#define META_REF (1u << 29)
#define META_WATCHED (1u << 30)
#define META_FLAGS(m) ((m) & (META_REF | META_WATCHED))

_Static_assert(KVA_FLEET_MAX_PUBLISHERS <= 64 * 64, "a word index fits 6 bits");

struct slot {
	_Atomic uint32_t seq;  /* odd while the I/O thread writes the slot */
	_Atomic uint32_t meta; /* META(tag, distance from home) */
	_Atomic uint64_t hash;
	_Atomic uint64_t mask; /* the word's publishers holding it; 0: empty */
};

struct ident {
	struct rcu_head rcu;
	int64_t dp_rank;
	uint8_t topic_len;
	char topic[TOPIC_MAX + 1];
};

/* The grace period a swept column waits for before it is free (one at a
 * time, running while kvf_score.grace_on; allocated with the table, freed by
 * whichever of kvf_score_free and the callback comes second). */
enum { GRACE_WAITING, GRACE_DONE, GRACE_ORPHANED };
struct grace {
	struct rcu_head rcu;
	_Atomic int state;
};

/* A write the I/O thread has not applied yet (kvf_score_flush). */
struct op {
	uint64_t hash;
	uint32_t tag;
	uint8_t bit; /* the column's bit in its word */
	uint8_t del;
};

struct kvf_score {
	/* read by every query, written once */
	struct slot *slots;
	size_t mask;
	struct kvf_key key; /* homes: keyed, as the index's (a publisher cannot aim) */
	uint32_t full_groups;
	struct kvf_big_table mem; /* the mapping slots lie in */
	/* the I/O thread's, on lines of their own: its writes do not take the
	 * line above from the readers' caches */
	_Alignas(64) size_t count, cap;
	size_t probe_max; /* farthest an entry may sit from its home */
	size_t sweep_slots; /* a flush's share of the sweep (SWEEP_SLOTS) */
	uint64_t refused; /* adds past probe_max, or at the cap with nothing to evict */
	uint32_t npending;
	struct op pending[PENDING];
	uint64_t pending_hash[PENDING], pending_home[PENDING]; /* kvf_score_flush's */
	/* Columns. A column's dead bits leave the table in a pass of the
	 * sweep that started after its drop: dead_this are those the pass at
	 * `cursor` clears, dead_next those dropped during it; a finished
	 * pass's wait in swept (then in graced, while the grace runs) before
	 * they are free. */
	uint16_t col_of[KVA_FLEET_MAX_PUBLISHERS]; /* NO_COLUMN: takes one at its next add */
	uint8_t sweeping[KVA_FLEET_MAX_PUBLISHERS]; /* its dead columns not yet free */
	uint16_t free_col[COLUMNS];
	uint32_t nfree;
	bool pass_on;
	size_t cursor; /* the pass: slots before it hold no dead_this bit */
	uint64_t dead_this[COLUMNS / 64], dead_next[COLUMNS / 64];
	uint64_t swept[COLUMNS / 64], graced[COLUMNS / 64];
	bool swept_any; /* a pass ended since the last grace began */
	bool grace_on;  /* graced's grace runs, or ended unseen */
	struct grace *grace;
	uint64_t swept_slots, no_column; /* for tests: the sweep's slots, adds without a column */
	/* The index's part (kvf_score_new with an entry cap; score.h): an
	 * entry is one (block, location) bit, live counts them, and at the
	 * cap CLOCK evicts a slot's bits. */
	uint64_t entry_cap; /* 0: none (the table's load bounds it) */
	uint64_t live, evicted;
	size_t hand;
	uint32_t keep_groups; /* groups the table takes (full and state) */
	uint64_t quota;       /* a publisher's share of the cap (0: none) */
	uint32_t nover;       /* publishers holding their share or more */
	uint64_t over[COLUMNS / 64]; /* their columns */
	uint64_t pub_live[KVA_FLEET_MAX_PUBLISHERS];
	/* (publisher, medium) pairs that lost a watched entry since the last
	 * kvf_score_watched_take; overflow: more than KVF_SCORE_WATCHED_PAIRS did */
	uint32_t nwatched;
	bool watched_overflow;
	uint32_t watched[KVF_SCORE_WATCHED_PAIRS];
	/* published with release stores (I/O thread), read with acquire loads
	 * (kvf_score_query) inside a read-side section */
	struct ident *_Atomic ident[KVA_FLEET_MAX_PUBLISHERS];
	_Atomic uint32_t block_size[KVA_FLEET_MAX_PUBLISHERS];
	/* Readers, relaxed: a column's dead bit is set before its pass and
	 * cleared only a grace period after it, so every query that may read
	 * its old bits runs wholly while it is set; and a column's owner
	 * changes only while it is dead. */
	_Atomic uint64_t dead[COLUMNS / 64];
	_Atomic uint16_t owner[COLUMNS];
};

static void ident_free(struct rcu_head *head)
{
	kva_rcu_reclaim_begin();
	free(caa_container_of(head, struct ident, rcu));
}

static inline size_t home(const struct kvf_score *s, uint64_t hash)
{
	return (size_t)kvf_siphash13(&s->key, hash, 0, 0) & s->mask;
}

/* I/O thread: slot <- (hash, meta, mask). The odd number is stored before
 * the fields (the release fence), the even one after them (release): a
 * reader that saw the same even number before and after read neither half
 * of a write (pairs with the acquire load and fence in slot_read). */
static void slot_write(struct slot *sl, uint64_t hash, uint32_t meta, uint64_t mask)
{
	uint32_t q = atomic_load_explicit(&sl->seq, memory_order_relaxed);
	atomic_store_explicit(&sl->seq, q + 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
	atomic_store_explicit(&sl->hash, hash, memory_order_relaxed);
	atomic_store_explicit(&sl->meta, meta, memory_order_relaxed);
	atomic_store_explicit(&sl->mask, mask, memory_order_relaxed);
	atomic_store_explicit(&sl->seq, q + 2, memory_order_release);
}

/* Any thread: false when the slot was being written READ_TRIES times. */
static bool slot_read(const struct slot *sl, uint64_t *hash, uint32_t *meta, uint64_t *mask)
{
	for (int t = 0; t < READ_TRIES; t++) {
		uint32_t q = atomic_load_explicit(&sl->seq, memory_order_acquire);
		if (q & 1)
			continue;
		*hash = atomic_load_explicit(&sl->hash, memory_order_relaxed);
		*meta = atomic_load_explicit(&sl->meta, memory_order_relaxed);
		*mask = atomic_load_explicit(&sl->mask, memory_order_relaxed);
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&sl->seq, memory_order_relaxed) == q)
			return true;
	}
	return false;
}

struct kvf_score *kvf_score_new(uint32_t full_groups, uint32_t keep_groups, uint64_t max_blocks,
                                bool cap_entries)
{
	if (kva_rcu_init()) /* liburcu's call_rcu thread with signals blocked */
		return NULL;
	/* aligned: the I/O thread's fields start a cache line of their own */
	struct kvf_score *s = aligned_alloc(_Alignof(struct kvf_score), sizeof(*s));
	if (!s)
		return NULL;
	memset(s, 0, sizeof(*s));
	size_t n = 16;
	while (n / 4 * 3 < max_blocks && n < ((size_t)1 << 40))
		n *= 2;
	s->slots = kvf_big_table_new(&s->mem, n * sizeof(*s->slots));
	if (!s->slots) {
		free(s);
		return NULL;
	}
	s->mask = n - 1;
	s->cap = n / 4 * 3;
	s->probe_max = KVF_PROBE_MAX;
	s->sweep_slots = SWEEP_SLOTS;
	kvf_key_random(&s->key);
	s->full_groups = full_groups;
	s->keep_groups = keep_groups | full_groups;
	s->entry_cap = cap_entries ? max_blocks : 0;
	if (!(s->grace = calloc(1, sizeof(*s->grace)))) {
		kvf_big_table_free(&s->mem);
		free(s);
		return NULL;
	}
	for (uint32_t p = 0; p < KVA_FLEET_MAX_PUBLISHERS; p++)
		s->col_of[p] = NO_COLUMN;
	for (uint32_t c = 0; c < COLUMNS; c++) /* taken from the top: column 0 first */
		s->free_col[c] = (uint16_t)(COLUMNS - 1 - c);
	s->nfree = COLUMNS;
	return s;
}

void kvf_score_free(struct kvf_score *s)
{
	if (!s)
		return;
	/* no reader is left (kva_fleet_destroy's contract); a grace still
	 * running frees its own memory when it ends (acq_rel: pairs with the
	 * callback's exchange) */
	if (!s->grace_on ||
	    atomic_exchange_explicit(&s->grace->state, GRACE_ORPHANED, memory_order_acq_rel) ==
	        GRACE_DONE)
		free(s->grace);
	kvf_big_table_free(&s->mem);
	for (uint32_t i = 0; i < KVA_FLEET_MAX_PUBLISHERS; i++)
		free(atomic_load_explicit(&s->ident[i], memory_order_relaxed));
	free(s);
}

/* The I/O thread's own reads of the table need no sequence check. */
static inline uint64_t mask_at(const struct kvf_score *s, size_t i)
{
	return atomic_load_explicit(&s->slots[i].mask, memory_order_relaxed);
}
static inline uint32_t meta_at(const struct kvf_score *s, size_t i)
{
	return atomic_load_explicit(&s->slots[i].meta, memory_order_relaxed);
}
static inline uint64_t hash_at(const struct kvf_score *s, size_t i)
{
	return atomic_load_explicit(&s->slots[i].hash, memory_order_relaxed);
}
static inline size_t next(const struct kvf_score *s, size_t i) { return (i + 1) & s->mask; }

static inline bool over_quota(const struct kvf_score *s, uint32_t pub)
{
	return s->quota && s->pub_live[pub] >= s->quota;
}

/* Column col's live entries move by d (+1 or -1); its publisher's count,
 * and whether it holds its share or more, follow. */
static void live_step(struct kvf_score *s, uint32_t col, int d)
{
	uint32_t pub = atomic_load_explicit(&s->owner[col], memory_order_relaxed);
	bool was = over_quota(s, pub);
	s->pub_live[pub] += (uint64_t)(int64_t)d;
	s->live += (uint64_t)(int64_t)d;
	if (over_quota(s, pub) != was) {
		s->nover += was ? (uint32_t)-1 : 1u;
		s->over[col >> 6] ^= 1ull << (col & 63);
	}
}

/* A removed entry was watched: its (publisher, medium) pair is looked at
 * after the flush (kvf_score_watched_take). */
static void watched_note(struct kvf_score *s, uint32_t col, uint32_t medium)
{
	uint32_t pair = (uint32_t)atomic_load_explicit(&s->owner[col], memory_order_relaxed) << 8 |
	                medium;
	for (uint32_t k = 0; k < s->nwatched; k++)
		if (s->watched[k] == pair)
			return;
	if (s->nwatched < KVF_SCORE_WATCHED_PAIRS)
		s->watched[s->nwatched++] = pair;
	else
		s->watched_overflow = true;
}

static void del_at(struct kvf_score *s, size_t i);

/* At the entry cap: the CLOCK hand clears reference bits until it meets a
 * slot without one and takes its live bits out (while some publisher holds
 * its share or more, only such publishers' bits: one publisher cannot
 * push out the others'). A slot is referenced for all of its holders.
 * False only if no live entry could be taken (the counts say one exists:
 * three turns of the hand are a bound, not a path). */
static bool evict_one(struct kvf_score *s)
{
	for (size_t n = 3 * (s->mask + 1); n; n--) {
		size_t i = s->hand;
		s->hand = next(s, i);
		uint64_t m = mask_at(s, i);
		if (!m)
			continue;
		uint32_t meta = meta_at(s, i);
		uint32_t w = TAG_WORD(META_TAG(meta));
		uint64_t take = m & ~atomic_load_explicit(&s->dead[w], memory_order_relaxed);
		if (s->nover)
			take &= s->over[w];
		if (!take)
			continue;
		if (meta & META_REF) {
			slot_write(&s->slots[i], hash_at(s, i), meta & ~META_REF, m);
			continue;
		}
		for (uint64_t b = take; b; b &= b - 1)
			live_step(s, w << 6 | (uint32_t)__builtin_ctzll(b), -1);
		s->evicted += (uint64_t)__builtin_popcountll(take);
		if (m & ~take) /* dead bits stay for the sweep */
			slot_write(&s->slots[i], hash_at(s, i), meta, m & ~take);
		else
			del_at(s, i);
		return true;
	}
	return false;
}

/* The sweep of dead columns (below): slot i, and a budget of the pass. */
static bool sweep_at(struct kvf_score *s, size_t i);
static void sweep(struct kvf_score *s, size_t budget);

/* Slot i holds the entry (hash, tag) (any of its bits). */
static inline bool is_entry(const struct kvf_score *s, size_t i, uint64_t hash, uint32_t tag)
{
	return mask_at(s, i) && hash_at(s, i) == hash && META_TAG(meta_at(s, i)) == tag;
}

/* Where (hash, tag) is, or where it would go: the first slot from its home
 * that holds it, is empty, or holds an entry whose home lies past hash's
 * (Robin Hood: a run's entries lie in the order of their homes). *d: that
 * slot's distance from hash's home. */
static size_t find(const struct kvf_score *s, size_t i, uint64_t hash, uint32_t tag, size_t *d)
{
	for (*d = 0;; (*d)++, i = next(s, i)) {
		if (!mask_at(s, i))
			return i;
		uint32_t m = meta_at(s, i);
		if (META_DIST(m) < *d || (hash_at(s, i) == hash && META_TAG(m) == tag))
			return i;
	}
}

/* Adds publisher bit `bit` to (hash, tag), whose probe starts at home i. */
static void add_at(struct kvf_score *s, size_t home_i, uint64_t hash, uint32_t tag, unsigned bit)
{
	/* entries only the sweep will remove take room: at the cap it runs on
	 * (at most its pass and the next) before an add is turned away */
	while (s->count >= s->cap && s->pass_on)
		sweep(s, s->sweep_slots);
	size_t d, i = find(s, home_i, hash, tag, &d);
	uint64_t m = mask_at(s, i);
	bool there = is_entry(s, i, hash, tag);
	if (there && (m >> bit & 1)) { /* stored again: referenced */
		uint32_t meta = meta_at(s, i);
		if (!(meta & META_REF))
			slot_write(&s->slots[i], hash, meta | META_REF, m);
		return;
	}
	if (s->entry_cap && s->live >= s->entry_cap) {
		/* a new entry at the cap: CLOCK frees one first, which may move
		 * this run (a backward shift): probe again */
		if (!evict_one(s)) {
			s->refused++;
			return;
		}
		i = find(s, home_i, hash, tag, &d);
		m = mask_at(s, i);
		there = is_entry(s, i, hash, tag);
	}
	uint32_t col = TAG_WORD(tag) << 6 | bit;
	if (there) {
		slot_write(&s->slots[i], hash, meta_at(s, i) | META_REF, m | 1ull << bit);
		live_step(s, col, +1);
		return;
	}
	/* a run longer than probe_max only forms from keys aimed at one home
	 * (and a reader would walk it): refused and counted, as the index does */
	if (d > s->probe_max || s->count >= s->cap) { /* the cap: the index keeps below it */
		s->refused += d > s->probe_max;
		return;
	}
	/* The entries from i to the run's end move one slot on, each one a
	 * step farther from home, none past probe_max. */
	size_t end = i;
	for (; mask_at(s, end); end = next(s, end))
		if (META_DIST(meta_at(s, end)) + 1 > s->probe_max) {
			s->refused++;
			return;
		}
	/* From the run's end back: an entry is in two slots for a moment,
	 * never in none, and the order of homes holds (a reader that passes a
	 * slot not yet moved finds the entry in the next one). */
	bool wrapped = false;
	for (size_t j = end; j != i;) {
		size_t k = (j - 1) & s->mask;
		uint32_t km = meta_at(s, k);
		slot_write(&s->slots[j], hash_at(s, k),
		           META(META_TAG(km), META_DIST(km) + 1) | META_FLAGS(km), mask_at(s, k));
		wrapped |= j == 0;
		j = k;
	}
	slot_write(&s->slots[i], hash, META(tag, d) | META_REF, 1ull << bit);
	s->count++;
	live_step(s, col, +1);
	/* the table's last entry, not yet swept, wrapped into slot 0, which
	 * the pass has: swept there */
	if (wrapped && s->pass_on && s->cursor)
		while (sweep_at(s, 0))
			;
}

/* Backward-shift deletion at slot i: the later entries of the run that are
 * not at home move up one by one, each slot overwritten (never emptied)
 * but the last, so a reader's probe never stops early at a hole that is
 * not one. */
static void del_at(struct kvf_score *s, size_t i)
{
	for (size_t j = next(s, i);; i = j, j = next(s, j)) {
		uint32_t m = meta_at(s, j);
		if (!mask_at(s, j) || !META_DIST(m)) {
			slot_write(&s->slots[i], 0, 0, 0);
			s->count--;
			return;
		}
		slot_write(&s->slots[i], hash_at(s, j),
		           META(META_TAG(m), META_DIST(m) - 1) | META_FLAGS(m), mask_at(s, j));
		/* the entry at the sweep's cursor moved behind it: look again */
		if (s->pass_on && j == s->cursor && j)
			s->cursor = i;
	}
}

/* Slot i without its dead bits; true when that emptied it (deleted: the
 * run's next entry, if any, moved into i). */
static bool sweep_at(struct kvf_score *s, size_t i)
{
	uint64_t m = mask_at(s, i);
	if (!m)
		return false;
	uint32_t meta = meta_at(s, i);
	uint64_t dead = atomic_load_explicit(&s->dead[TAG_WORD(META_TAG(meta))], memory_order_relaxed);
	if (!(m & dead))
		return false;
	if (m & ~dead) {
		slot_write(&s->slots[i], hash_at(s, i), meta, m & ~dead);
		return false;
	}
	del_at(s, i);
	return true;
}

/* Removes publisher bit `bit` from (hash, tag), whose probe starts at i. */
static void del_from(struct kvf_score *s, size_t i, uint64_t hash, uint32_t tag, unsigned bit)
{
	size_t d;
	i = find(s, i, hash, tag, &d);
	uint64_t m = mask_at(s, i);
	if (!is_entry(s, i, hash, tag) || !(m >> bit & 1))
		return;
	uint32_t col = TAG_WORD(tag) << 6 | bit;
	live_step(s, col, -1);
	if (meta_at(s, i) & META_WATCHED)
		watched_note(s, col, TAG_MEDIUM(tag));
	if (m & ~(1ull << bit))
		slot_write(&s->slots[i], hash, meta_at(s, i), m & ~(1ull << bit));
	else
		del_at(s, i);
}

/* Slot i's line and the next into the cache, to be written (a 24-byte slot
 * may end on it, and a probe reads on). */
static inline void fetch_slot_for_write(const struct kvf_score *s, size_t i)
{
	__builtin_prefetch(&s->slots[i], 1);
	__builtin_prefetch((const char *)&s->slots[i] + 64, 1);
}

static void grace_end(struct rcu_head *head)
{
	kva_rcu_reclaim_begin();
	struct grace *g = caa_container_of(head, struct grace, rcu);
	/* acq_rel: pairs with grace_poll's acquire load and kvf_score_free's exchange */
	if (atomic_exchange_explicit(&g->state, GRACE_DONE, memory_order_acq_rel) == GRACE_ORPHANED)
		free(g);
}

/* The columns whose grace ended are free; the swept ones start theirs.
 * Nothing to look at, in every flush without drops. */
static void grace_poll(struct kvf_score *s)
{
	if (s->grace_on) {
		/* acquire: pairs with grace_end's exchange (the grace period ended) */
		if (atomic_load_explicit(&s->grace->state, memory_order_acquire) != GRACE_DONE)
			return;
		s->grace_on = false;
		for (uint32_t w = 0; w < COLUMNS / 64; w++) {
			for (uint64_t b = s->graced[w]; b; b &= b - 1) {
				uint32_t c = w * 64 + (uint32_t)__builtin_ctzll(b);
				s->sweeping[atomic_load_explicit(&s->owner[c], memory_order_relaxed)]--;
				s->free_col[s->nfree++] = (uint16_t)c;
			}
			if (s->graced[w])
				atomic_fetch_and_explicit(&s->dead[w], ~s->graced[w], memory_order_relaxed);
			s->graced[w] = 0;
		}
	}
	if (!s->swept_any)
		return;
	s->swept_any = false;
	for (uint32_t w = 0; w < COLUMNS / 64; w++) {
		s->graced[w] = s->swept[w];
		s->swept[w] = 0;
	}
	atomic_store_explicit(&s->grace->state, GRACE_WAITING, memory_order_relaxed);
	s->grace_on = true;
	kva_rcu_call(&s->grace->rcu, grace_end);
}

/* The pass is over: its columns wait for a grace period, those dropped
 * meanwhile get a pass of their own. */
static void pass_end(struct kvf_score *s)
{
	bool any = false;
	for (uint32_t w = 0; w < COLUMNS / 64; w++) {
		s->swept[w] |= s->dead_this[w];
		s->dead_this[w] = s->dead_next[w];
		any |= s->dead_next[w] != 0;
		s->dead_next[w] = 0;
	}
	s->swept_any = true; /* a pass starts with a column dropped */
	s->cursor = 0;
	s->pass_on = any;
}

/* budget slots of the pass, if one is on; then the graces. */
static void sweep(struct kvf_score *s, size_t budget)
{
	for (; s->pass_on && budget; budget--) {
		s->swept_slots++;
		if (!sweep_at(s, s->cursor) && ++s->cursor > s->mask)
			pass_end(s);
	}
	grace_poll(s);
}

/* The pending writes, in their order. Each is a probe at a random slot of a
 * table too large for the caches: their homes are hashed together first
 * (kvf_siphash13_many), and the home slots of the next FLUSH_AHEAD are
 * fetched while one is applied, so their misses overlap. */
void kvf_score_flush(struct kvf_score *s)
{
	uint32_t n = s->npending;
	for (uint32_t k = 0; k < n; k++)
		s->pending_hash[k] = s->pending[k].hash;
	kvf_siphash13_many(&s->key, s->pending_hash, 0, 0, s->pending_home, n);
	for (uint32_t k = 0; k < n; k++)
		s->pending_home[k] &= s->mask;
	for (uint32_t k = 0; k < n && k < FLUSH_AHEAD; k++)
		fetch_slot_for_write(s, s->pending_home[k]);
	for (uint32_t k = 0; k < n; k++) {
		if (k + FLUSH_AHEAD < n)
			fetch_slot_for_write(s, s->pending_home[k + FLUSH_AHEAD]);
		const struct op *op = &s->pending[k];
		if (op->del)
			del_from(s, s->pending_home[k], op->hash, op->tag, op->bit);
		else
			add_at(s, s->pending_home[k], op->hash, op->tag, op->bit);
	}
	s->npending = 0;
	sweep(s, s->sweep_slots);
}

/* Groups the table does not take (readers score full groups only; the
 * index also keeps state groups) are left out. */
static void push(struct kvf_score *s, uint64_t hash, uint32_t loc, uint8_t del)
{
	uint32_t group = loc & 0xff, pub = KVF_LOC_PUB(loc), medium = loc >> 8 & 0xff;
	if (group > 31 || !(s->keep_groups >> group & 1) || pub >= KVA_FLEET_MAX_PUBLISHERS ||
	    medium >= KVF_SCORE_MEDIA)
		return;
	uint32_t col = s->col_of[pub];
	if (col == NO_COLUMN) {
		if (del)
			return; /* its entries left with its column */
		if (!s->nfree || s->sweeping[pub] >= SWEEPING_MAX) {
			s->no_column++;
			return;
		}
		col = s->col_of[pub] = s->free_col[--s->nfree];
		/* relaxed: readers reach it through a slot written after (the
		 * slot's release), and it was dead until now */
		atomic_store_explicit(&s->owner[col], (uint16_t)pub, memory_order_relaxed);
	}
	if (s->npending == PENDING)
		kvf_score_flush(s);
	s->pending[s->npending++] = (struct op){
		.hash = hash, .tag = TAG(medium, group, col >> 6), .bit = (uint8_t)(col & 63), .del = del};
}

void kvf_score_add(struct kvf_score *s, uint64_t hash, uint32_t loc) { push(s, hash, loc, 0); }
void kvf_score_del(struct kvf_score *s, uint64_t hash, uint32_t loc) { push(s, hash, loc, 1); }

size_t kvf_score_home(const struct kvf_score *s, uint64_t hash) { return home(s, hash); }
size_t kvf_score_bytes(const struct kvf_score *s) { return (s->mask + 1) * sizeof(struct slot); }
void kvf_score_set_sweep_slots(struct kvf_score *s, size_t n) { s->sweep_slots = n ? n : 1; }
void kvf_score_set_key(struct kvf_score *s, uint64_t k0, uint64_t k1)
{
	if (!s->count && !s->npending) /* homes of entries already in would move */
		s->key = (struct kvf_key){k0, k1};
}
void kvf_score_set_probe_max(struct kvf_score *s, size_t probe_max)
{
	s->probe_max = probe_max < DIST_MAX ? probe_max : DIST_MAX;
}

size_t kvf_score_count(const struct kvf_score *s) { return s->count; }

uint64_t kvf_score_drop_publisher(struct kvf_score *s, uint32_t pub)
{
	if (pub >= KVA_FLEET_MAX_PUBLISHERS)
		return 0;
	kvf_score_flush(s); /* its pending adds name the column about to die */
	uint32_t c = s->col_of[pub];
	if (c == NO_COLUMN)
		return 0;
	uint64_t n = s->pub_live[pub];
	if (over_quota(s, pub)) {
		s->nover--;
		s->over[c >> 6] &= ~(1ull << (c & 63));
	}
	s->live -= n; /* its bits are dead: the sweep takes them uncounted */
	s->pub_live[pub] = 0;
	s->col_of[pub] = NO_COLUMN;
	s->sweeping[pub]++;
	uint64_t bit = 1ull << (c & 63);
	/* relaxed: a query that does not see it yet answers as one taken a
	 * moment earlier would (the column's owner stays until it is free) */
	atomic_fetch_or_explicit(&s->dead[c >> 6], bit, memory_order_relaxed);
	if (s->pass_on) {
		s->dead_next[c >> 6] |= bit;
	} else {
		s->dead_this[c >> 6] |= bit;
		s->pass_on = true;
		s->cursor = 0;
	}
	return n;
}

void kvf_score_set_quota(struct kvf_score *s, uint64_t quota)
{
	s->quota = quota;
	s->nover = 0;
	memset(s->over, 0, sizeof s->over);
	for (uint32_t p = 0; p < KVA_FLEET_MAX_PUBLISHERS; p++)
		if (s->col_of[p] != NO_COLUMN && over_quota(s, p)) {
			s->nover++;
			s->over[s->col_of[p] >> 6] |= 1ull << (s->col_of[p] & 63);
		}
}

bool kvf_score_holds(struct kvf_score *s, uint64_t hash, uint32_t loc, bool watch)
{
	uint32_t group = loc & 0xff, pub = KVF_LOC_PUB(loc), medium = loc >> 8 & 0xff;
	if (group > 31 || pub >= KVA_FLEET_MAX_PUBLISHERS || medium >= KVF_SCORE_MEDIA ||
	    s->col_of[pub] == NO_COLUMN)
		return false;
	if (s->npending)
		kvf_score_flush(s);
	uint32_t col = s->col_of[pub], tag = TAG(medium, group, col >> 6);
	size_t d, i = find(s, home(s, hash), hash, tag, &d);
	uint64_t m = mask_at(s, i);
	uint32_t meta = meta_at(s, i);
	if (!is_entry(s, i, hash, tag) || !(m >> (col & 63) & 1))
		return false;
	if (watch && (meta & (META_REF | META_WATCHED)) != (META_REF | META_WATCHED))
		slot_write(&s->slots[i], hash, meta | META_REF | META_WATCHED, m);
	return true;
}

uint32_t kvf_score_watched_take(struct kvf_score *s, uint32_t *pairs, bool *overflow)
{
	uint32_t n = s->nwatched;
	memcpy(pairs, s->watched, n * sizeof(*pairs));
	*overflow = s->watched_overflow;
	s->nwatched = 0;
	s->watched_overflow = false;
	return n;
}

void kvf_score_counts(const struct kvf_score *s, struct kvf_score_counts *c)
{
	*c = (struct kvf_score_counts){.live = s->live,
	                               .cap = s->entry_cap,
	                               .evicted = s->evicted,
	                               .refused = s->refused,
	                               .uncopied = s->no_column,
	                               .swept = s->swept_slots};
}

uint64_t kvf_score_pub_live(const struct kvf_score *s, uint32_t pub)
{
	return pub < KVA_FLEET_MAX_PUBLISHERS && s->col_of[pub] != NO_COLUMN ? s->pub_live[pub] : 0;
}

/* Replaces pub's identity with *next (a copy), the old one freed after a
 * grace period. */
static void ident_set(struct kvf_score *s, uint32_t pub, const struct ident *next)
{
	struct ident *copy = malloc(sizeof(*copy));
	if (!copy)
		return; /* the old identity stays */
	*copy = *next;
	/* release: a reader's acquire load sees the new ident's fields */
	struct ident *old = atomic_exchange_explicit(&s->ident[pub], copy, memory_order_acq_rel);
	if (old)
		kva_rcu_call(&old->rcu, ident_free);
}

void kvf_score_topic(struct kvf_score *s, uint32_t pub, const void *topic, size_t len)
{
	/* the I/O thread is the only writer: its own pointer, read relaxed */
	const struct ident *cur = atomic_load_explicit(&s->ident[pub], memory_order_relaxed);
	len = len > TOPIC_MAX ? TOPIC_MAX : len;
	if (cur && cur->topic_len == len && memcmp(cur->topic, topic, len) == 0)
		return;
	struct ident next = {.dp_rank = cur ? cur->dp_rank : -1, .topic_len = (uint8_t)len};
	memcpy(next.topic, topic, len);
	next.topic[len] = 0;
	ident_set(s, pub, &next);
}

void kvf_score_rank(struct kvf_score *s, uint32_t pub, int64_t dp_rank)
{
	const struct ident *cur = atomic_load_explicit(&s->ident[pub], memory_order_relaxed);
	if (cur ? cur->dp_rank == dp_rank : dp_rank < 0)
		return;
	struct ident next = {.dp_rank = dp_rank};
	if (cur) {
		next.topic_len = cur->topic_len;
		memcpy(next.topic, cur->topic, sizeof next.topic);
	}
	ident_set(s, pub, &next);
}

void kvf_score_block_size(struct kvf_score *s, uint32_t pub, uint32_t block_size)
{
	atomic_store_explicit(&s->block_size[pub], block_size, memory_order_relaxed);
}

/* A query's homes of hashes[from, from + CHUNK) (fewer at the chain's end),
 * hashed together, and their slots fetched into the cache now with the
 * line after (a 24-byte slot may end on it, and a probe reads on). */
static void fetch_homes(const struct kvf_score *s, const uint64_t *hashes, uint32_t n,
                        uint32_t from, size_t *homes)
{
	uint64_t h[CHUNK];
	uint32_t m = n - from < CHUNK ? n - from : CHUNK;
	kvf_siphash13_many(&s->key, hashes + from, 0, 0, h, m);
	for (uint32_t k = 0; k < m; k++) {
		homes[k] = (size_t)h[k] & s->mask;
		__builtin_prefetch(&s->slots[homes[k]]);
		__builtin_prefetch((const char *)&s->slots[homes[k]] + 64);
	}
}

/* A query's walk: the (medium, id word) keys of the pairs that held every
 * block so far, each with the mask of those still holding (alive) and of
 * those found at the current block; combo[key] is a key's index + 1. */
struct walk {
	uint32_t nlive, npairs;
	uint8_t combo[64 * 64];
	struct {
		uint16_t key;
		uint64_t alive, found;
	} live[MAX_COMBOS];
};

static void copy_name(char *dst, size_t cap, const char *src, size_t n)
{
	n = n >= cap ? cap - 1 : n;
	memcpy(dst, src, n);
	dst[n] = 0;
}

/* Identity fields of out from pub's published ident (inside the section). */
static void fill_ident(struct kvf_score *s, kva_fleet_match *o)
{
	/* acquire: pairs with the release in ident_set; the ident is not freed
	 * before this read-side section ends */
	const struct ident *id = atomic_load_explicit(&s->ident[o->publisher], memory_order_acquire);
	o->dp_rank = id ? (int32_t)id->dp_rank : -1;
	if (!id)
		return;
	copy_name(o->topic, sizeof o->topic, id->topic, id->topic_len);
	/* "kv@pod@model": the pod and the model after the first two '@' */
	const char *a = memchr(id->topic, '@', id->topic_len);
	const char *end = id->topic + id->topic_len;
	const char *b = a ? memchr(a + 1, '@', (size_t)(end - a - 1)) : NULL;
	if (a && b) {
		copy_name(o->pod, sizeof o->pod, a + 1, (size_t)(b - a - 1));
		copy_name(o->model, sizeof o->model, b + 1, (size_t)(end - b - 1));
	}
}

static int by_blocks(const void *pa, const void *pb)
{
	const kva_fleet_match *a = pa, *b = pb;
	if (a->blocks != b->blocks)
		return a->blocks > b->blocks ? -1 : 1;
	if (a->publisher != b->publisher)
		return a->publisher < b->publisher ? -1 : 1;
	return strcmp(a->medium, b->medium);
}

/* The pairs of word `key` in `bits` hold a prefix of `blocks` blocks: into
 * out (past cap, the longest stay). */
static void emit(struct kvf_score *s, const char (*media)[KVF_MEDIUM_MAX + 1],
                 const uint32_t *block_size, uint32_t key, uint64_t bits, uint32_t blocks,
                 kva_fleet_match *out, uint32_t cap, uint32_t *nout)
{
	for (; bits; bits &= bits - 1) {
		uint32_t medium = key >> 6;
		uint32_t col = (key & 63) << 6 | (uint32_t)__builtin_ctzll(bits);
		/* relaxed: the owner is stable while its column is not dead (the
		 * slot's acquire ordered its store before) */
		kva_fleet_match o = {
		    .publisher = atomic_load_explicit(&s->owner[col], memory_order_relaxed),
		    .blocks = blocks};
		copy_name(o.medium, sizeof o.medium, media[medium], strlen(media[medium]));
		uint32_t bs = block_size[medium] ? block_size[medium]
		                                 : atomic_load_explicit(&s->block_size[o.publisher],
		                                                        memory_order_relaxed);
		o.tokens = o.blocks * bs;
		fill_ident(s, &o);
		if (*nout < cap) {
			out[(*nout)++] = o;
			continue;
		}
		uint32_t shortest = 0;
		for (uint32_t j = 1; j < *nout; j++)
			if (by_blocks(&out[j], &out[shortest]) > 0)
				shortest = j;
		if (cap && by_blocks(&o, &out[shortest]) < 0)
			out[shortest] = o;
	}
}

/* Block i's holders, from its slots (the probe starting at home k): their
 * masks, ORed into their keys' found masks (any group: all are full); at
 * block 0, the keys are taken (at most MAX_PAIRS pairs). */
static void probe(struct kvf_score *s, struct walk *w, size_t k, uint64_t want, bool first)
{
	for (size_t d = 0;; d++, k = next(s, k)) {
		/* Most slots of a run hold other blocks: only a match has its
		 * sequence number checked again. A mask never reads 0 but in an
		 * empty slot (a write replaces one nonzero value with another); a
		 * slot caught mid-write that reads as another block is passed
		 * over, as one still written after READ_TRIES is. */
		const struct slot *sl = &s->slots[k];
		/* acquire: pairs with the release store of slot_write */
		uint32_t q = atomic_load_explicit(&sl->seq, memory_order_acquire);
		uint64_t m = atomic_load_explicit(&sl->mask, memory_order_relaxed);
		if (!m)
			return;
		uint32_t meta = atomic_load_explicit(&sl->meta, memory_order_relaxed);
		if (META_DIST(meta) < d)
			return; /* Robin Hood: the block would lie before this slot */
		uint64_t h = atomic_load_explicit(&sl->hash, memory_order_relaxed);
		if (h != want)
			continue;
		atomic_thread_fence(memory_order_acquire); /* as in slot_read */
		if ((q & 1) || atomic_load_explicit(&sl->seq, memory_order_relaxed) != q) {
			if (!slot_read(sl, &h, &meta, &m))
				continue; /* being written: passed over */
			if (!m)
				return;
			if (h != want)
				continue;
		}
		/* dead columns' bits wait for the sweep: left out; so are the
		 * index's state groups (a prefix is made of full groups) */
		m &= ~atomic_load_explicit(&s->dead[TAG_WORD(META_TAG(meta))], memory_order_relaxed);
		if (!m || !(s->full_groups >> TAG_GROUP(META_TAG(meta)) & 1))
			continue;
		uint32_t key = TAG_COMBO(META_TAG(meta));
		uint32_t c = w->combo[key];
		if (!c && first && w->nlive < MAX_COMBOS) {
			w->live[w->nlive].key = (uint16_t)key;
			w->live[w->nlive].found = 0;
			c = w->combo[key] = (uint8_t)++w->nlive;
		}
		if (c)
			w->live[c - 1].found |= m;
	}
}

int kvf_score_query(struct kvf_score *s, const char (*media)[KVF_MEDIUM_MAX + 1],
                    const uint32_t *block_size, const uint64_t *hashes, uint32_t n,
                    kva_fleet_match *out, uint32_t cap)
{
	struct walk walk, *w = &walk; /* 10 KiB of stack: no allocation on this path */
	w->nlive = w->npairs = 0;
	memset(w->combo, 0, sizeof w->combo);
	uint32_t nout = 0;
	kva_rcu_read_lock(); /* for the identities */
	/* The chain is known ahead and its probes depend on nothing found: the
	 * homes of the next chunk of blocks are hashed and their slots fetched
	 * while one chunk is probed, so the table's cache misses overlap
	 * instead of adding up. */
	size_t ring[2 * CHUNK];
	if (n)
		fetch_homes(s, hashes, n, 0, ring);
	uint32_t i = 0;
	for (; i < n; i++) {
		if (i % CHUNK == 0 && i + CHUNK < n)
			fetch_homes(s, hashes, n, i + CHUNK, &ring[(i / CHUNK + 1) % 2 * CHUNK]);
		probe(s, w, ring[i % (2 * CHUNK)], hashes[i], i == 0);
		/* the pairs not found at block i hold a prefix of i blocks */
		uint32_t kept = 0;
		for (uint32_t c = 0; c < w->nlive; c++) {
			uint64_t alive = i ? w->live[c].alive & w->live[c].found : w->live[c].found;
			uint32_t key = w->live[c].key;
			for (; !i && alive && w->npairs + (uint32_t)__builtin_popcountll(alive) > MAX_PAIRS;)
				alive &= alive - 1; /* past MAX_PAIRS at block 0: the lowest ids dropped */
			w->npairs += i ? 0 : (uint32_t)__builtin_popcountll(alive);
			if (i && (w->live[c].alive & ~alive))
				emit(s, media, block_size, key, w->live[c].alive & ~alive, i, out, cap,
				     &nout);
			if (!alive) {
				w->combo[key] = 0;
				continue;
			}
			w->live[kept] = w->live[c];
			w->live[kept].alive = alive;
			w->live[kept].found = 0;
			w->combo[key] = (uint8_t)++kept;
		}
		w->nlive = kept;
		if (!kept) /* nobody holds block i: no prefix goes further */
			break;
	}
	for (uint32_t c = 0; c < w->nlive; c++) /* the whole chain */
		emit(s, media, block_size, w->live[c].key, w->live[c].alive, i, out, cap, &nout);
	kva_rcu_read_unlock();
	qsort(out, nout, sizeof(*out), by_blocks);
	return (int)nout;
}
