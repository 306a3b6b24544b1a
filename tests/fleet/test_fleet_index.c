/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The fleet's (block hash, location) table (fleet/index.c) on its own: its
 * size for a cap, backward-shift deletion (entries sharing a home, runs
 * that wrap), CLOCK eviction by the cap, deletion by publisher, and random
 * operations checked against a plain reference. No sockets.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <urcu/urcu-memb.h>

#include "apply.h"
#include "index.h"
#include "score.h"
#include "score_reference.h"
#include "unhash.h"
#include <kvadmit/lockfree/hash.h>
#include "kva_test.h"

/* Where (hash, loc) sits in an empty table: its home. */
static size_t home_of(struct kvf_index *ix, uint64_t hash, uint32_t loc)
{
	assert_int_equal(ix->count, 0);
	assert_true(kvf_index_put(ix, hash, loc, NULL, NULL));
	size_t h = (size_t)(kvf_index_find(ix, hash, loc) - ix->slots);
	assert_int_equal(kvf_index_del(ix, hash, loc), KVF_E_REF + 1);
	return h;
}

/* The table holds its cap at no more than 3/4 load (a probe always meets an
 * empty slot, and runs stay short). */
static void table_holds_the_cap_at_three_quarters(void **st)
{
	(void)st;
	static const size_t caps[] = {1, 11, 12, 13, 16, 24, 25, 48, 100, 1000, 1 << 16};
	for (size_t k = 0; k < sizeof caps / sizeof caps[0]; k++) {
		struct kvf_index ix;
		assert_int_equal(kvf_index_init(&ix, caps[k]), 0);
		size_t slots = ix.mask + 1;
		assert_int_equal(slots & ix.mask, 0); /* a power of two */
		assert_true(slots >= 16);
		assert_true(slots / 4 * 3 >= caps[k]);
		assert_true(slots / 2 / 4 * 3 < caps[k] || slots == 16); /* the smallest such */
		assert_int_equal(kvf_index_bytes(&ix), slots * sizeof(struct kvf_slot));
		/* filled to the cap and past it (evicting): every probe still ends */
		for (uint64_t h = 0; h < caps[k] + 8 && h < 4096; h++)
			kvf_index_put(&ix, h, 0, NULL, NULL);
		assert_null(kvf_index_find(&ix, UINT64_MAX, 0));
		kvf_index_fini(&ix);
	}
}

/* Two entries with one home: removing the first moves the second into its
 * home slot (its home is the hole itself), so it is still found. Then the
 * same with a run that wraps past the table's last slot. */
static void removal_moves_an_entry_whose_home_is_the_hole(void **st)
{
	(void)st;
	struct kvf_index ix;
	assert_int_equal(kvf_index_init(&ix, 12), 0); /* 16 slots */
	size_t want[2] = {3, ix.mask}; /* a home inside, and the last slot */
	for (int c = 0; c < 2; c++) {
		uint64_t same[3];
		int n = 0;
		for (uint64_t h = 1; n < 3; h++)
			if (home_of(&ix, h, 7) == want[c])
				same[n++] = h;
		for (int i = 0; i < 3; i++)
			assert_true(kvf_index_put(&ix, same[i], 7, NULL, NULL));
		assert_int_equal(kvf_index_find(&ix, same[1], 7) - ix.slots,
		                 (want[c] + 1) & ix.mask);
		assert_int_not_equal(kvf_index_del(&ix, same[0], 7), 0);
		assert_null(kvf_index_find(&ix, same[0], 7));
		struct kvf_slot *s1 = kvf_index_find(&ix, same[1], 7);
		assert_non_null(s1);
		assert_int_equal(s1 - ix.slots, want[c]); /* moved back home */
		assert_non_null(kvf_index_find(&ix, same[2], 7));
		assert_int_equal(ix.count, 2);
		assert_int_not_equal(kvf_index_del(&ix, same[1], 7), 0);
		assert_int_not_equal(kvf_index_del(&ix, same[2], 7), 0);
		assert_int_equal(ix.count, 0);
	}
	kvf_index_fini(&ix);
}

/* CLOCK: the cap evicts an entry whose reference bit is clear; a store (new
 * or refreshed) sets the bit, and the hand clears bits as it passes. With
 * every entry but one referenced, that one goes, wherever the hand is. */
static void cap_evicts_the_entry_without_a_reference(void **st)
{
	(void)st;
	for (uint64_t spare = 0; spare < 4; spare++) {
		struct kvf_index ix;
		assert_int_equal(kvf_index_init(&ix, 4), 0);
		for (uint64_t h = 0; h < 4; h++)
			assert_true(kvf_index_put(&ix, 100 + h, 1, NULL, NULL));
		struct kvf_slot out;
		bool ev = false;
		/* every bit set: the hand clears them all, then takes one */
		assert_true(kvf_index_put(&ix, 200, 1, &out, &ev));
		assert_true(ev);
		assert_int_equal(ix.evicted, 1);
		assert_int_equal(ix.count, 4);
		uint64_t first = out.hash;
		/* refresh every survivor but one, the newest has its bit already */
		uint64_t left = UINT64_MAX;
		int k = 0;
		for (uint64_t h = 100; h < 104; h++) {
			if (h == first)
				continue;
			if (k++ == (int)(spare % 3))
				left = h;
			else
				assert_false(kvf_index_put(&ix, h, 1, NULL, NULL)); /* known: refreshed */
		}
		assert_true(kvf_index_put(&ix, 201, 1, &out, &ev));
		assert_true(ev);
		assert_int_equal(out.hash, left);
		assert_int_equal(out.loc1, 1 + 1);
		assert_null(kvf_index_find(&ix, left, 1));
		assert_non_null(kvf_index_find(&ix, 200, 1));
		assert_non_null(kvf_index_find(&ix, 201, 1));
		assert_int_equal(ix.count, 4);
		kvf_index_fini(&ix);
	}
}

/* Random puts, removals, finds and removals by publisher against a plain
 * reference, in a small table (runs meet, wrap and shift back) with a cap
 * (evictions: the reported entry was present and is gone). */
#define NH 40
#define NL 4
static const uint32_t LOCS[NL] = {KVF_LOC(0, 0, 0), KVF_LOC(0, 1, 0), KVF_LOC(1, 0, 0),
                                  KVF_LOC(1, 0, 1)};

/* A medium's name says its tier (kva_checkpoint.tier, for the cost policy):
 * vLLM's "GPU" and "CPU", other stores' words, without case; others unknown. */
static void medium_names_say_their_tier(void **st)
{
	(void)st;
	static const struct {
		const char *name;
		uint8_t tier;
	} cases[] = {
	    {"GPU", KVA_TIER_GPU},         {"cpu", KVA_TIER_HOST},    {"CPU_DRAM", KVA_TIER_HOST},
	    {"LocalDisk", KVA_TIER_DISK},  {"nvme0", KVA_TIER_DISK},  {"SSD", KVA_TIER_DISK},
	    {"redis", KVA_TIER_REMOTE},    {"S3", KVA_TIER_REMOTE},   {"tape", KVA_TIER_UNKNOWN},
	    {"", KVA_TIER_UNKNOWN},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		assert_int_equal(kvf_medium_tier(cases[i].name, strlen(cases[i].name)), cases[i].tier);
	assert_int_equal(kvf_medium_tier("GPUxx", 2), KVA_TIER_UNKNOWN); /* its len bytes only */
}

static void random_operations_match_a_reference(void **st)
{
	(void)st;
	struct kvf_index ix;
	assert_int_equal(kvf_index_init(&ix, 20), 0); /* 32 slots */
	bool ref[NH][NL];
	memset(ref, 0, sizeof ref);
	size_t live = 0;
	uint64_t s = 7;
	uint32_t ops = (uint32_t)kva_test_scaled(200000);
	for (uint32_t op = 0; op < ops; op++) {
		uint64_t r = kva_test_rand(&s);
		uint32_t h = (uint32_t)(r % NH), l = (uint32_t)(r >> 8) % NL;
		switch ((r >> 16) % 8) {
		case 0: case 1: case 2: { /* put */
			struct kvf_slot out;
			bool ev = false;
			bool added = kvf_index_put(&ix, h, LOCS[l], &out, &ev);
			assert_int_equal(added, !ref[h][l]);
			if (ev) {
				assert_true(added);
				assert_int_equal(live, 20);
				uint32_t el = 0;
				while (el < NL && LOCS[el] + 1 != out.loc1)
					el++;
				assert_true(el < NL && out.hash < NH);
				assert_true(ref[out.hash][el]);
				assert_false(out.hash == h && el == l);
				ref[out.hash][el] = false;
				live--;
			}
			if (added) {
				ref[h][l] = true;
				live++;
			}
			break;
		}
		case 3: case 4: /* remove */
			assert_int_equal(kvf_index_del(&ix, h, LOCS[l]) != 0, ref[h][l]);
			live -= ref[h][l];
			ref[h][l] = false;
			break;
		case 5: { /* every entry of a publisher, or of a (publisher, medium) */
			unsigned shift = r >> 20 & 1 ? 16 : 8;
			size_t want = 0;
			for (uint32_t i = 0; i < NH; i++)
				for (uint32_t j = 0; j < NL; j++)
					if (ref[i][j] && LOCS[j] >> shift == LOCS[l] >> shift) {
						ref[i][j] = false;
						want++;
					}
			assert_int_equal(kvf_index_del_matching(&ix, LOCS[l], shift, NULL), want);
			live -= want;
			break;
		}
		default:
			assert_int_equal(kvf_index_find(&ix, h, LOCS[l]) != NULL, ref[h][l]);
		}
		assert_int_equal(ix.count, live);
		if (op % 64 == 0)
			for (uint32_t i = 0; i < NH; i++)
				for (uint32_t j = 0; j < NL; j++)
					assert_int_equal(kvf_index_find(&ix, i, LOCS[j]) != NULL, ref[i][j]);
	}
	kvf_index_fini(&ix);
}

/* How far the entry (hash, loc) sits past its home. */
static size_t displacement(struct kvf_index *ix, uint64_t hash, uint32_t loc)
{
	struct kvf_slot *s = kvf_index_find(ix, hash, loc);
	assert_non_null(s);
	return ((size_t)(s - ix->slots) - kvf_index_home(ix, hash, loc)) & ix->mask;
}

/* 8,192 blocks crafted to share one home under the unkeyed mixer
 * (kva_hash64(hash ^ loc * golden) & mask, the index's home before it was
 * keyed): each store probed the whole run before it, quadratic in the
 * count. Keyed, they spread: no entry sits far from its home, none is
 * refused. */
static void crafted_keys_do_not_share_a_home(void **st)
{
	(void)st;
	struct kvf_index ix;
	assert_int_equal(kvf_index_init(&ix, 1 << 16), 0);
	const uint32_t loc = KVF_LOC(3, 0, 0);
	size_t far = 0;
	for (uint64_t k = 0; k < 8192; k++) {
		/* kva_hash64(x) & mask == 0 for x = kva_test_unhash64(k << 40) */
		uint64_t hash = kva_test_unhash64(k << 40) ^ ((uint64_t)loc * 0x9e3779b97f4a7c15ull);
		assert_int_equal(kva_hash64(hash ^ ((uint64_t)loc * 0x9e3779b97f4a7c15ull)) & ix.mask,
		                 0);
		assert_true(kvf_index_put(&ix, hash, loc, NULL, NULL));
	}
	for (uint64_t k = 0; k < 8192; k++) {
		uint64_t hash = kva_test_unhash64(k << 40) ^ ((uint64_t)loc * 0x9e3779b97f4a7c15ull);
		size_t d = displacement(&ix, hash, loc);
		far = d > far ? d : far;
	}
	assert_true(far < 64); /* about 6 expected at this load */
	assert_int_equal(ix.refused, 0);
	assert_int_equal(ix.live, 8192);
	kvf_index_fini(&ix);
}


/* The table's counts, by value. */
static struct kvf_score_counts sc_counts(const struct kvf_score *s)
{
	struct kvf_score_counts c;
	kvf_score_counts(s, &c);
	return c;
}

/* The router query's copy (score.c, with cfg.score) homes its entries as
 * the index does: blocks crafted to share one home under the unkeyed mixer
 * spread over the table, and none is refused. */
static void score_copy_crafted_keys_spread(void **st)
{
	(void)st;
	struct kvf_score *s = kvf_score_new(1, 1, 1 << 16, false);
	assert_non_null(s);
	const uint32_t loc = KVF_LOC(3, 0, 0);
	size_t at_zero = 0;
	for (uint64_t k = 0; k < 8192; k++) {
		uint64_t hash = kva_test_unhash64(k << 40); /* kva_hash64(hash): low bits 0 */
		at_zero += kvf_score_home(s, hash) == 0;
		kvf_score_add(s, hash, loc);
	}
	kvf_score_flush(s);
	assert_true(at_zero < 8); /* about 0.1 expected under a random key */
	assert_int_equal(sc_counts(s).refused, 0);
	kvf_score_free(s);
}

/* SipHash of many words at once (eight lanes where the CPU has AVX-512, the
 * rest one at a time) gives what one word at a time gives, for every count
 * around the lanes' width, without a tail and with one. */
static void siphash_of_many_matches_one_at_a_time(void **st)
{
	(void)st;
	struct kvf_key key = {0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull};
	uint64_t in[41], out[41];
	for (int i = 0; i < 41; i++)
		in[i] = 0x9e3779b97f4a7c15ull * (uint64_t)i ^ (uint64_t)i << 56;
	for (unsigned tail_len = 0; tail_len <= 4; tail_len += 4) /* the copy's, the index's */
		for (size_t n = 0; n <= 41; n++) {
			uint32_t tail = tail_len ? 0x00030201u : 0;
			memset(out, 0, sizeof out);
			kvf_siphash13_many(&key, in, tail, tail_len, out, n);
			for (size_t i = 0; i < 41; i++)
				assert_true(out[i] ==
				            (i < n ? kvf_siphash13(&key, in[i], tail, tail_len) : 0));
		}
}

/* The router's copy against a plain reference: random adds, removals and
 * publisher drops over publishers in several 64-id words, three media and
 * three groups (two of them full), on a table small enough that runs meet
 * and wrap; every few operations random chains are scored by both. */
#define SR_HASHES 12
static const uint32_t SR_PUBS[] = {0, 1, 63, 64, 65, 130, 4095};
#define SR_NPUBS (sizeof SR_PUBS / sizeof SR_PUBS[0])
static const uint32_t SR_MEDIA[] = {0, 1, 63};

struct sr_model {
	uint8_t held[SR_HASHES][SR_NPUBS][3][3]; /* [hash][pub][medium][group] */
};

static bool sr_holds(const struct sr_model *m, uint32_t h, uint32_t p, uint32_t md)
{
	return m->held[h][p][md][0] || m->held[h][p][md][1]; /* groups 0, 1 are full */
}

/* The copy's slots the model needs: one per (hash, medium, full group)
 * anyone holds. Columns are handed out lowest first and a free one goes
 * back on top, and at most 7 publishers' live and sweeping columns (8 each)
 * are out: all lie in the first id word. */
static size_t sr_entries(const struct sr_model *m)
{
	size_t n = 0;
	for (uint32_t h = 0; h < SR_HASHES; h++)
		for (uint32_t md = 0; md < 3; md++)
			for (uint32_t g = 0; g < 2; g++) {
				bool any = false;
				for (uint32_t p = 0; p < SR_NPUBS; p++)
					any |= m->held[h][p][md][g] != 0;
				n += any;
			}
	return n;
}

static uint32_t sr_reference(const struct sr_model *m, const uint32_t *chain, uint32_t n,
                             const char (*names)[KVF_MEDIUM_MAX + 1], kva_fleet_match *out)
{
	uint32_t k = 0;
	for (uint32_t p = 0; p < SR_NPUBS; p++)
		for (uint32_t md = 0; md < 3; md++) {
			uint32_t len = 0;
			while (len < n && sr_holds(m, chain[len], p, md))
				len++;
			if (!len)
				continue;
			kva_fleet_match o = {.publisher = SR_PUBS[p], .blocks = len, .tokens = len * 16};
			strcpy(o.medium, names[SR_MEDIA[md]]);
			score_ref_insert(out, &k, &o);
		}
	return k;
}

/* Medium names m00..m63, 16-token blocks: the queries' arguments. */
static char sr_names[64][KVF_MEDIUM_MAX + 1];
static uint32_t sr_bs[64];

static void sr_names_init(void)
{
	for (int md = 0; md < 64; md++) {
		snprintf(sr_names[md], sizeof sr_names[md], "m%02d", md);
		sr_bs[md] = 16;
	}
}

/* A random chain of 1..8 of the hashes, scored by the table and by the
 * model: the same matches. */
static void sr_score_random_chain(struct kvf_score *s, const struct sr_model *m,
                                  const uint64_t *hashes, uint64_t *seed)
{
	kva_fleet_match got[64], want[64];
	uint32_t chain[8], n = 1 + kva_test_rand(seed) % 8;
	uint64_t ch[8];
	for (uint32_t i = 0; i < n; i++) {
		chain[i] = kva_test_rand(seed) % SR_HASHES;
		ch[i] = hashes[chain[i]];
	}
	uint32_t nw = sr_reference(m, chain, n, (const char(*)[KVF_MEDIUM_MAX + 1])sr_names, want);
	int ng = kvf_score_query(s, (const char(*)[KVF_MEDIUM_MAX + 1])sr_names, sr_bs, ch, n, got,
	                         64);
	assert_int_equal(ng, (int)nw);
	score_ref_assert_equal(got, want, nw);
}

/* sweep_slots: 0 for the copy's own share per flush (a pass within one
 * flush on this table), else that many, so that passes span many flushes
 * and meet the adds, removals and wraps between them. */
static void score_copy_reference_run(size_t sweep_slots)
{
	struct kvf_score *s = kvf_score_new(0x3, 0x3, 300, false); /* 512 slots */
	assert_non_null(s);
	if (sweep_slots)
		kvf_score_set_sweep_slots(s, sweep_slots);
	sr_names_init();
	uint64_t hashes[SR_HASHES];
	for (int h = 0; h < SR_HASHES; h++)
		hashes[h] = 0x9e3779b97f4a7c15ull * (uint64_t)(h + 1);
	static struct sr_model m;
	memset(&m, 0, sizeof m);
	uint64_t seed = 35;
	for (int round = 0; round < 20000; round++) {
		uint32_t h = kva_test_rand(&seed) % SR_HASHES, p = kva_test_rand(&seed) % SR_NPUBS;
		uint32_t md = kva_test_rand(&seed) % 3, g = kva_test_rand(&seed) % 3;
		uint32_t op = kva_test_rand(&seed) % 100, loc = KVF_LOC(SR_PUBS[p], SR_MEDIA[md], g);
		if (op < 55 && !m.held[h][p][md][g]) { /* the index adds an entry once */
			kvf_score_add(s, hashes[h], loc);
			m.held[h][p][md][g] = 1;
		} else if (op < 98 && m.held[h][p][md][g]) {
			kvf_score_del(s, hashes[h], loc);
			m.held[h][p][md][g] = 0;
		} else if (op >= 98) {
			kvf_score_drop_publisher(s, SR_PUBS[p]);
			for (uint32_t x = 0; x < SR_HASHES; x++)
				memset(m.held[x][p], 0, sizeof m.held[x][p]);
			/* the grace periods of swept columns end (call_rcu's
			 * thread) well before a publisher drops again */
			urcu_memb_barrier();
		}
		if (kva_test_rand(&seed) % 4)
			continue;
		kvf_score_flush(s);
		sr_score_random_chain(s, &m, hashes, &seed);
	}
	assert_int_equal(sc_counts(s).refused, 0);
	assert_int_equal(sc_counts(s).uncopied, 0);
	/* dropped entries are out of answers at once and out of the table
	 * once a pass is over: the table holds what the model holds */
	for (int f = 0; f < 4096 && kvf_score_count(s) != sr_entries(&m); f++)
		kvf_score_flush(s);
	assert_int_equal(kvf_score_count(s), sr_entries(&m));
	assert_true(sc_counts(s).swept > 0);
	kvf_score_free(s);
}

static void score_copy_matches_a_reference(void **st)
{
	(void)st;
	score_copy_reference_run(0);
}

static void score_copy_matches_a_reference_mid_sweep(void **st)
{
	(void)st;
	score_copy_reference_run(5);
}

/* The same table as the fleet's index (cfg.score: fleet/holders.h), against
 * the model: an entry cap of 40 under CLOCK, a state group (2) that is
 * kept but never scored, and the I/O thread's own probes. At every check
 * each model entry is asked for: one the table no longer holds must have
 * been evicted (the model drops it, and the count of such must be the
 * table's eviction count), and the table holds nothing the model does not.
 * The live counts, in all and per publisher, are the model's. Removals and
 * drops come right after a check, so none can hide an eviction. */
struct si_model {
	struct sr_model m;
	uint8_t state[SR_HASHES][SR_NPUBS][3]; /* group 2 */
	uint64_t hashes[SR_HASHES];
	uint64_t evicted;
};

static uint8_t *si_held(struct si_model *x, uint32_t h, uint32_t p, uint32_t md, uint32_t g)
{
	return g < 2 ? &x->m.held[h][p][md][g] : &x->state[h][p][md];
}

static void si_check(struct kvf_score *s, struct si_model *x)
{
	kvf_score_flush(s);
	uint64_t live = 0, pub_live[SR_NPUBS] = {0};
	for (uint32_t h = 0; h < SR_HASHES; h++)
		for (uint32_t p = 0; p < SR_NPUBS; p++)
			for (uint32_t md = 0; md < 3; md++)
				for (uint32_t g = 0; g < 3; g++) {
					uint8_t *e = si_held(x, h, p, md, g);
					bool in = kvf_score_holds(
					    s, x->hashes[h], KVF_LOC(SR_PUBS[p], SR_MEDIA[md], g), false);
					assert_false(in && !*e); /* nothing the model lacks */
					if (*e && !in) {         /* the cap took it */
						*e = 0;
						x->evicted++;
					}
					live += *e;
					pub_live[p] += *e;
				}
	struct kvf_score_counts c;
	kvf_score_counts(s, &c);
	assert_int_equal(c.evicted, x->evicted);
	assert_int_equal(c.live, live);
	assert_true(c.live <= 40);
	for (uint32_t p = 0; p < SR_NPUBS; p++)
		assert_int_equal(kvf_score_pub_live(s, SR_PUBS[p]), pub_live[p]);
}

static void score_table_as_index_matches_a_reference(void **st)
{
	(void)st;
	struct kvf_score *s = kvf_score_new(0x3, 0x7, 40, true); /* 64 slots */
	assert_non_null(s);
	sr_names_init();
	static struct si_model x;
	memset(&x, 0, sizeof x);
	for (int h = 0; h < SR_HASHES; h++)
		x.hashes[h] = 0x9e3779b97f4a7c15ull * (uint64_t)(h + 1);
	uint64_t seed = 91;
	for (int round = 0; round < 20000; round++) {
		uint32_t h = kva_test_rand(&seed) % SR_HASHES, p = kva_test_rand(&seed) % SR_NPUBS;
		uint32_t md = kva_test_rand(&seed) % 3, g = kva_test_rand(&seed) % 3;
		uint32_t op = kva_test_rand(&seed) % 100, loc = KVF_LOC(SR_PUBS[p], SR_MEDIA[md], g);
		uint8_t *held = si_held(&x, h, p, md, g);
		if (*held || op >= 99) /* a removal or a drop */
			si_check(s, &x);
		if (op < 60 && !*held) {
			kvf_score_add(s, x.hashes[h], loc);
			*held = 1;
		} else if (op < 99 && *held) {
			kvf_score_del(s, x.hashes[h], loc);
			*held = 0;
		} else if (op >= 99) {
			kvf_score_drop_publisher(s, SR_PUBS[p]);
			for (uint32_t k = 0; k < SR_HASHES; k++) {
				memset(x.m.held[k][p], 0, sizeof x.m.held[k][p]);
				memset(x.state[k][p], 0, sizeof x.state[k][p]);
			}
			urcu_memb_barrier(); /* as in score_copy_reference_run */
		}
		if (kva_test_rand(&seed) % 4)
			continue;
		si_check(s, &x);
		sr_score_random_chain(s, &x.m, x.hashes, &seed);
	}
	assert_true(x.evicted > 1000); /* the cap was met all along */
	assert_int_equal(sc_counts(s).refused, 0);
	assert_int_equal(sc_counts(s).uncopied, 0);
	kvf_score_free(s);
}

/* As the index: a removal of a watched entry names its (publisher,
 * medium) pair once after the flush; the flag is the slot's, so the
 * removal of another holder in the same slot is named too (a check, not
 * an eviction); an entry never watched is not named. */
static void score_table_names_watched_removals(void **st)
{
	(void)st;
	struct kvf_score *s = kvf_score_new(1, 1, 1000, true);
	assert_non_null(s);
	uint32_t a = KVF_LOC(3, 2, 0), b = KVF_LOC(4, 2, 0), c = KVF_LOC(5, 1, 0);
	kvf_score_add(s, 77, a);
	kvf_score_add(s, 77, b);
	kvf_score_add(s, 78, c);
	kvf_score_add(s, 79, c);
	kvf_score_flush(s);
	assert_true(kvf_score_holds(s, 77, a, true));
	assert_true(kvf_score_holds(s, 78, c, true));
	assert_false(kvf_score_holds(s, 80, c, true));
	uint32_t pairs[64];
	bool overflow;
	kvf_score_del(s, 79, c); /* never watched */
	kvf_score_flush(s);
	assert_int_equal(kvf_score_watched_take(s, pairs, &overflow), 0);
	kvf_score_del(s, 77, b);
	kvf_score_del(s, 77, a);
	kvf_score_del(s, 78, c);
	kvf_score_del(s, 78, c); /* gone already: nothing */
	kvf_score_flush(s);
	assert_int_equal(kvf_score_watched_take(s, pairs, &overflow), 3);
	assert_false(overflow);
	assert_int_equal(pairs[0], 4u << 8 | 2);
	assert_int_equal(pairs[1], 3u << 8 | 2);
	assert_int_equal(pairs[2], 5u << 8 | 1);
	assert_int_equal(kvf_score_watched_take(s, pairs, &overflow), 0);
	struct kvf_score_counts k;
	kvf_score_counts(s, &k);
	assert_int_equal(k.live, 0);
	kvf_score_free(s);
}

/* The matches of chain[0..n) in got[8] (media unnamed, block size 0). */
static int sw_query(struct kvf_score *s, const uint64_t *chain, uint32_t n, kva_fleet_match *got)
{
	static char names[64][KVF_MEDIUM_MAX + 1];
	static const uint32_t bs[64];
	return kvf_score_query(s, (const char(*)[KVF_MEDIUM_MAX + 1])names, bs, chain, n, got, 8);
}

/* Is publisher pub answered for block hash h (a one-block chain)? */
static bool sw_answered(struct kvf_score *s, uint64_t h, uint32_t pub)
{
	kva_fleet_match got[8];
	int n = sw_query(s, &h, 1, got);
	for (int i = 0; i < n; i++)
		if (got[i].publisher == pub)
			return true;
	return false;
}

/* A 16-slot copy that sweeps one slot per flush, and twelve block hashes
 * homed at its slots 13, 14, 15, 0, 13, 14, ... */
static struct kvf_score *sw_table(uint64_t *h)
{
	struct kvf_score *s = kvf_score_new(1, 1, 12, false);
	assert_non_null(s);
	kvf_score_set_sweep_slots(s, 1);
	uint32_t nh = 0;
	for (uint64_t x = 1; nh < 12; x++)
		if (kvf_score_home(s, x) == (13 + nh % 4) % 16)
			h[nh++] = x;
	return s;
}

/* Once the grace period of the swept column has ended (and a flush saw
 * it), publisher 3's first add takes it. */
static void sw_reuse_column(struct kvf_score *s)
{
	urcu_memb_barrier();
	kvf_score_flush(s);
	kvf_score_add(s, 0xfeed, KVF_LOC(3, 0, 0));
	kvf_score_flush(s);
	assert_true(sw_answered(s, 0xfeed, 3));
}

/* A dead entry pushed round the table's end into slot 0, which the pass
 * has swept already, with only live entries before it in its run (nothing
 * pulls it back): swept there, so once the pass and its grace period are
 * over, publisher 3 given the dead column is not answered for it. */
static void score_sweep_catches_an_entry_wrapped_behind_it(void **st)
{
	(void)st;
	for (uint32_t start = 1; start < 13; start++) {
		uint64_t h[12];
		struct kvf_score *s = sw_table(h);
		kvf_score_add(s, h[0], KVF_LOC(2, 1, 0)); /* slot 13 */
		kvf_score_add(s, h[4], KVF_LOC(2, 1, 0)); /* slot 14 */
		kvf_score_add(s, h[1], KVF_LOC(1, 0, 0)); /* slot 15 */
		kvf_score_flush(s);
		kvf_score_drop_publisher(s, 1); /* its flush sweeps slot 0 */
		for (uint32_t f = 1; f < start; f++)
			kvf_score_flush(s); /* slots 0 .. start - 1 swept */
		kvf_score_add(s, h[8], KVF_LOC(2, 1, 0)); /* at 15: publisher 1's goes to 0 */
		for (int f = 0; f < 32; f++)
			kvf_score_flush(s);
		assert_int_equal(kvf_score_count(s), 3);
		sw_reuse_column(s); /* publisher 1's old column */
		assert_false(sw_answered(s, h[1], 3));
		assert_true(sw_answered(s, h[8], 2));
		kvf_score_free(s);
	}
}

/* The sweep at every slot of a 16-slot table while runs wrap around its
 * end: publisher 1's entries are dropped and swept one slot per flush;
 * between flushes publisher 2 (another medium: slots of its own) adds and
 * removes blocks homed at the table's last slots, so its runs shift
 * entries past the cursor, into slot 0 and back. Publisher 1 is never
 * answered again, publisher 2 always; once the pass and its grace period
 * are over only publisher 2's entries are left, and publisher 3, given
 * publisher 1's old column, is answered for none of its blocks. */
static void score_sweep_meets_wrapping_runs(void **st)
{
	(void)st;
	for (uint32_t start = 0; start < 20; start++) {
		uint64_t h[12];
		struct kvf_score *s = sw_table(h);
		for (uint32_t i = 0; i < 6; i++) /* publisher 1: homes 13..0 and 13, 14 */
			kvf_score_add(s, h[i], KVF_LOC(1, 0, 0));
		kvf_score_flush(s);
		kvf_score_drop_publisher(s, 1);
		for (uint32_t f = 0; f < start; f++) /* the cursor at `start` (mod 16) */
			kvf_score_flush(s);
		bool held2[12] = {0};
		uint64_t seed = 77 + start;
		for (int round = 0; round < 60; round++) {
			uint32_t i = kva_test_rand(&seed) % 12;
			if (held2[i])
				kvf_score_del(s, h[i], KVF_LOC(2, 1, 0));
			else
				kvf_score_add(s, h[i], KVF_LOC(2, 1, 0));
			held2[i] = !held2[i];
			kvf_score_flush(s); /* the op, then one slot of the sweep */
			for (uint32_t k = 0; k < 12; k++) {
				assert_false(sw_answered(s, h[k], 1));
				assert_int_equal(sw_answered(s, h[k], 2), held2[k]);
			}
		}
		size_t want = 0;
		for (uint32_t k = 0; k < 12; k++)
			want += held2[k];
		for (int f = 0; f < 64; f++)
			kvf_score_flush(s);
		assert_int_equal(kvf_score_count(s), want);
		sw_reuse_column(s);
		for (uint32_t k = 0; k < 12; k++)
			assert_false(sw_answered(s, h[k], 3));
		kvf_score_free(s);
	}
}

/* A publisher dropped again and again within one sweep pass: its ninth
 * column is refused (its adds counted, not copied) while another
 * publisher's adds go on; once the passes and their grace periods are over
 * it gets a column again. */
static void score_copy_bounds_a_publishers_dead_columns(void **st)
{
	(void)st;
	struct kvf_score *s = kvf_score_new(1, 1, 3000, false); /* 4,096 slots: a pass is 4,096 flushes */
	assert_non_null(s);
	kvf_score_set_sweep_slots(s, 1);
	for (uint64_t k = 1; k <= 8; k++) {
		kvf_score_add(s, k, KVF_LOC(1, 0, 0));
		kvf_score_flush(s);
		assert_true(sw_answered(s, k, 1));
		kvf_score_drop_publisher(s, 1);
		assert_false(sw_answered(s, k, 1));
	}
	assert_int_equal(sc_counts(s).uncopied, 0);
	kvf_score_add(s, 9, KVF_LOC(1, 0, 0)); /* eight columns in the sweep */
	kvf_score_add(s, 10, KVF_LOC(2, 0, 0));
	kvf_score_flush(s);
	assert_int_equal(sc_counts(s).uncopied, 1);
	assert_false(sw_answered(s, 9, 1));
	assert_true(sw_answered(s, 10, 2));
	for (int f = 0; f < 2 * 4096 + 2; f++) /* both passes end */
		kvf_score_flush(s);
	urcu_memb_barrier();
	kvf_score_flush(s); /* their grace period was seen: the columns are free */
	kvf_score_add(s, 11, KVF_LOC(1, 0, 0));
	kvf_score_flush(s);
	assert_true(sw_answered(s, 11, 1));
	assert_int_equal(sc_counts(s).uncopied, 1);
	assert_int_equal(kvf_score_count(s), 2); /* blocks 10 and 11 */
	kvf_score_free(s);
}

/* Column reuse under a reader: six publishers, each storing only blocks of
 * its own hash range, are added to, removed from and dropped at random on a
 * 512-slot copy that sweeps 3 slots per flush, so dead columns are swept
 * over many flushes and, once their grace periods end, handed to other
 * publishers; another thread scores each publisher's chain all along. A
 * match naming a publisher other than the chain's owner would be an old
 * column's bit read under its new owner: none may appear. */
#define CR_PUBS 6
#define CR_CHAIN 4 /* each publisher's blocks: one chain */
struct cr_reader {
	struct kvf_score *s;
	atomic_int stop;
	uint64_t wrong, matches, calls;
};

static uint64_t cr_hash(uint32_t pub, uint32_t k) { return (uint64_t)(pub + 1) << 32 | k; }

/* The publisher ids that hold a prefix of pub's chain: `wrong` counts the
 * others. */
static void cr_check(struct kvf_score *s, uint32_t pub, uint64_t *wrong, uint64_t *matches)
{
	uint64_t chain[CR_CHAIN];
	for (uint32_t k = 0; k < CR_CHAIN; k++)
		chain[k] = cr_hash(pub, k);
	kva_fleet_match got[8];
	int n = sw_query(s, chain, CR_CHAIN, got);
	for (int i = 0; i < n; i++) {
		*wrong += got[i].publisher != pub;
		*matches += 1;
	}
}

static void *cr_read(void *arg)
{
	struct cr_reader *r = arg;
	uint64_t seed = 3;
	while (!atomic_load_explicit(&r->stop, memory_order_acquire)) {
		cr_check(r->s, (uint32_t)(kva_test_rand(&seed) % CR_PUBS), &r->wrong, &r->matches);
		r->calls++;
	}
	return NULL;
}

/* max_blocks sizes the table (300: 512 slots); cap: it is also the entry
 * cap (the table as the fleet's index), so CLOCK evicts under the reader. */
static void cr_run(uint64_t max_blocks, bool cap)
{
	struct kvf_score *s = kvf_score_new(1, 1, max_blocks, cap);
	assert_non_null(s);
	kvf_score_set_sweep_slots(s, 3);
	static bool held[CR_PUBS][CR_CHAIN];
	memset(held, 0, sizeof held);
	struct cr_reader rd = {.s = s};
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, cr_read, &rd), 0);
	uint64_t seed = 41, ops = kva_test_scaled(20000);
	for (uint64_t i = 0; i < ops; i++) {
		uint32_t p = (uint32_t)(kva_test_rand(&seed) % CR_PUBS);
		uint32_t k = (uint32_t)(kva_test_rand(&seed) % CR_CHAIN);
		uint32_t op = (uint32_t)(kva_test_rand(&seed) % 100);
		if (op < 60 && !held[p][k]) {
			kvf_score_add(s, cr_hash(p, k), KVF_LOC(p, 0, 0));
			held[p][k] = true;
		} else if (op < 97 && held[p][k]) {
			kvf_score_del(s, cr_hash(p, k), KVF_LOC(p, 0, 0));
			held[p][k] = false;
		} else if (op >= 97) {
			kvf_score_drop_publisher(s, p);
			memset(held[p], 0, sizeof held[p]);
		}
		kvf_score_flush(s);
		if (i % 256 == 255)
			urcu_memb_barrier(); /* graces end: columns change owners */
	}
	atomic_store_explicit(&rd.stop, 1, memory_order_release);
	pthread_join(t, NULL);
	assert_int_equal(rd.wrong, 0);
	assert_true(rd.matches > 0);
	/* quiet now: every publisher's blocks, and only its own */
	for (int f = 0; f < 2 * 512; f++)
		kvf_score_flush(s);
	uint64_t wrong = 0, matches = 0;
	for (uint32_t p = 0; p < CR_PUBS; p++)
		cr_check(s, p, &wrong, &matches);
	assert_int_equal(wrong, 0);
	struct kvf_score_counts c;
	kvf_score_counts(s, &c);
	if (cap) {
		assert_true(c.live <= max_blocks);
		assert_true(c.evicted > 0);
	}
	print_message("columns under a reader: %llu scores, %llu matches, %llu adds not copied, "
	              "%llu evicted\n",
	              (unsigned long long)rd.calls, (unsigned long long)rd.matches,
	              (unsigned long long)c.uncopied, (unsigned long long)c.evicted);
	kvf_score_free(s);
}

static void score_columns_change_owners_under_a_reader(void **st)
{
	(void)st;
	cr_run(300, false);
}

/* The same with the table as the index under an entry cap of 8 (of the 24
 * blocks the publishers may hold; a 16-slot table): CLOCK clears reference
 * bits and takes slots out while the reader scores, and still no match
 * names a publisher other than the chain's owner. */
static void score_evictions_under_a_reader(void **st)
{
	(void)st;
	cr_run(8, true);
}

/* Keys aimed at one home (found with the home function a test may call):
 * past probe_max an add is refused and counted, and the copy stays usable. */
static void score_copy_probe_cap_refuses(void **st)
{
	(void)st;
	struct kvf_score *s = kvf_score_new(1, 1, 3000, false); /* 4,096 slots */
	assert_non_null(s);
	kvf_score_set_probe_max(s, 8);
	const uint32_t loc = KVF_LOC(1, 0, 0);
	size_t target = kvf_score_home(s, 1);
	int n = 0;
	for (uint64_t h = 1; n < 16; h++)
		if (kvf_score_home(s, h) == target) {
			kvf_score_add(s, h, loc);
			n++;
		}
	kvf_score_flush(s);
	assert_int_equal(sc_counts(s).refused, 16 - 9); /* homes 0..8 slots away kept, as the index */
	kvf_score_free(s);
}

/* With the key known (a test's), blocks aimed at one home: past probe_max
 * slots a store is refused and counted, the table stays whole, and every
 * entry stored is found within probe_max of its home. */
static void probe_cap_refuses_and_counts(void **st)
{
	(void)st;
	struct kvf_index ix;
	assert_int_equal(kvf_index_init(&ix, 96), 0); /* 128 slots */
	ix.key = (struct kvf_key){1, 2};
	ix.probe_max = 8;
	uint64_t same[16];
	int n = 0;
	for (uint64_t h = 1; n < 16; h++)
		if (kvf_index_home(&ix, h, 5) == 7)
			same[n++] = h;
	for (int i = 0; i < 16; i++)
		assert_int_equal(kvf_index_put(&ix, same[i], 5, NULL, NULL), i <= 8);
	assert_int_equal(ix.refused, 16 - 9);
	assert_int_equal(ix.live, 9);
	for (int i = 0; i < 16; i++) {
		struct kvf_slot *s = kvf_index_find(&ix, same[i], 5);
		assert_int_equal(s != NULL, i <= 8);
		if (s)
			assert_true(displacement(&ix, same[i], 5) <= 8);
	}
	/* removing one makes room again */
	assert_int_not_equal(kvf_index_del(&ix, same[0], 5), 0);
	assert_true(kvf_index_put(&ix, same[9], 5, NULL, NULL));
	assert_true(displacement(&ix, same[9], 5) <= 8);
	kvf_index_fini(&ix);
}

/* Dropping a publisher touches no slot: its entries are dead at once (not
 * found, not counted live), the other publishers' stay, and the dead ones
 * are reclaimed as probes and the CLOCK hand meet them, never counted as
 * evictions. Storing them again works at once. */
static void dropping_a_publisher_is_constant_time(void **st)
{
	(void)st;
	struct kvf_index ix;
	assert_int_equal(kvf_index_init(&ix, 64), 0);
	for (uint64_t h = 0; h < 32; h++) {
		assert_true(kvf_index_put(&ix, h, KVF_LOC(1, 0, 0), NULL, NULL));
		assert_true(kvf_index_put(&ix, h, KVF_LOC(2, 0, 0), NULL, NULL));
	}
	assert_int_equal(kvf_index_pub_live(&ix, 1), 32);
	assert_int_equal(kvf_index_drop_pub(&ix, 1), 32);
	assert_int_equal(ix.count, 64); /* nothing touched yet */
	assert_int_equal(ix.live, 32);
	assert_int_equal(kvf_index_pub_live(&ix, 1), 0);
	for (uint64_t h = 0; h < 32; h++) {
		assert_null(kvf_index_find(&ix, h, KVF_LOC(1, 0, 0)));
		assert_non_null(kvf_index_find(&ix, h, KVF_LOC(2, 0, 0)));
	}
	assert_int_equal(kvf_index_del(&ix, 5, KVF_LOC(1, 0, 0)), 0);
	assert_true(ix.reclaimed > 0); /* the finds freed what they met */
	/* at the cap, dead entries go first and are no evictions */
	for (uint64_t h = 100; h < 132; h++) {
		bool ev = true;
		assert_true(kvf_index_put(&ix, h, KVF_LOC(1, 0, 0), NULL, &ev));
		assert_false(ev);
	}
	assert_int_equal(ix.evicted, 0);
	assert_int_equal(ix.live, 64);
	assert_true(ix.count <= ix.cap);
	for (uint64_t h = 0; h < 32; h++)
		assert_non_null(kvf_index_find(&ix, h, KVF_LOC(2, 0, 0)));
	kvf_index_fini(&ix);
}

/* Once per 2^24 drops a publisher's generation wraps: that drop scans, so
 * an entry dead since 2^24 drops ago never comes back. */
static void generation_wrap_scans_once(void **st)
{
	(void)st;
	struct kvf_index ix;
	assert_int_equal(kvf_index_init(&ix, 64), 0);
	ix.pubs[4].gen = 0; /* the entries a wrap could revive */
	for (uint64_t h = 0; h < 8; h++)
		kvf_index_put(&ix, h, KVF_LOC(4, 0, 0), NULL, NULL);
	ix.pubs[4].gen = KVF_GEN_MASK - 1; /* as after 2^24 - 2 drops: they are dead */
	assert_null(kvf_index_find(&ix, 100, KVF_LOC(4, 0, 0)));
	ix.live -= 8, ix.pubs[4].live = 0;
	kvf_index_put(&ix, 50, KVF_LOC(4, 0, 0), NULL, NULL);
	assert_int_equal(kvf_index_drop_pub(&ix, 4), 1); /* to the last generation */
	assert_int_equal(ix.gen_wraps, 0);
	assert_int_equal(kvf_index_drop_pub(&ix, 4), 0); /* wraps: a scan */
	assert_int_equal(ix.gen_wraps, 1);
	assert_int_equal(ix.pubs[4].gen, 0);
	for (uint64_t h = 0; h < 8; h++)
		assert_null(kvf_index_find(&ix, h, KVF_LOC(4, 0, 0)));
	assert_int_equal(ix.count, 0);
	assert_int_equal(ix.live, 0);
	kvf_index_fini(&ix);
}

/* Random puts, removals, finds and drops of a publisher against a plain
 * reference, with the cap evicting: live counts, per publisher too. */
static void random_drops_match_a_reference(void **st)
{
	(void)st;
	struct kvf_index ix;
	assert_int_equal(kvf_index_init(&ix, 20), 0);
	bool ref[NH][NL];
	memset(ref, 0, sizeof ref);
	uint64_t s = 11;
	uint32_t ops = (uint32_t)kva_test_scaled(200000);
	for (uint32_t op = 0; op < ops; op++) {
		uint64_t r = kva_test_rand(&s);
		uint32_t h = (uint32_t)(r % NH), l = (uint32_t)(r >> 8) % NL;
		switch ((r >> 16) % 8) {
		case 0: case 1: case 2: { /* put */
			struct kvf_slot out;
			bool ev = false;
			assert_int_equal(kvf_index_put(&ix, h, LOCS[l], &out, &ev), !ref[h][l]);
			if (ev) {
				uint32_t el = 0;
				while (el < NL && LOCS[el] + 1 != out.loc1)
					el++;
				assert_true(el < NL && ref[out.hash][el]);
				ref[out.hash][el] = false;
			}
			ref[h][l] = true;
			break;
		}
		case 3: case 4:
			assert_int_equal(kvf_index_del(&ix, h, LOCS[l]) != 0, ref[h][l]);
			ref[h][l] = false;
			break;
		case 5: { /* a publisher dropped */
			size_t want = 0;
			for (uint32_t i = 0; i < NH; i++)
				for (uint32_t j = 0; j < NL; j++)
					if (ref[i][j] && KVF_LOC_PUB(LOCS[j]) == KVF_LOC_PUB(LOCS[l])) {
						ref[i][j] = false;
						want++;
					}
			assert_int_equal(kvf_index_drop_pub(&ix, KVF_LOC_PUB(LOCS[l])), want);
			break;
		}
		default:
			assert_int_equal(kvf_index_find(&ix, h, LOCS[l]) != NULL, ref[h][l]);
		}
		size_t live = 0, live1 = 0;
		for (uint32_t i = 0; i < NH; i++)
			for (uint32_t j = 0; j < NL; j++) {
				live += ref[i][j];
				live1 += ref[i][j] && KVF_LOC_PUB(LOCS[j]) == 1;
			}
		assert_int_equal(ix.live, live);
		assert_int_equal(kvf_index_pub_live(&ix, 1), live1);
		assert_true(ix.count >= live && ix.count <= ix.cap);
	}
	kvf_index_fini(&ix);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(table_holds_the_cap_at_three_quarters),
		cmocka_unit_test(removal_moves_an_entry_whose_home_is_the_hole),
		cmocka_unit_test(cap_evicts_the_entry_without_a_reference),
		cmocka_unit_test(random_operations_match_a_reference),
		cmocka_unit_test(crafted_keys_do_not_share_a_home),
		cmocka_unit_test(probe_cap_refuses_and_counts),
		cmocka_unit_test(score_copy_crafted_keys_spread),
		cmocka_unit_test(score_copy_probe_cap_refuses),
		cmocka_unit_test(score_copy_matches_a_reference),
		cmocka_unit_test(score_copy_matches_a_reference_mid_sweep),
		cmocka_unit_test(score_sweep_meets_wrapping_runs),
		cmocka_unit_test(score_sweep_catches_an_entry_wrapped_behind_it),
		cmocka_unit_test(score_copy_bounds_a_publishers_dead_columns),
		cmocka_unit_test(score_columns_change_owners_under_a_reader),
		cmocka_unit_test(score_evictions_under_a_reader),
		cmocka_unit_test(siphash_of_many_matches_one_at_a_time),
		cmocka_unit_test(score_table_as_index_matches_a_reference),
		cmocka_unit_test(score_table_names_watched_removals),
		cmocka_unit_test(dropping_a_publisher_is_constant_time),
		cmocka_unit_test(generation_wrap_scans_once),
		cmocka_unit_test(random_drops_match_a_reference),
		cmocka_unit_test(medium_names_say_their_tier),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
