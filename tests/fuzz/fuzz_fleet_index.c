/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_fleet_index: the readers' table as the fleet's index (fleet/score.c
 * with an entry cap, what a fleet with cfg.score keeps: fleet/holders.h)
 * driven from bytes, as a hostile publisher's stores, removals and restarts
 * would, and checked against a model of the (block, location) entries:
 *   - the table holds nothing the model does not;
 *   - an entry the model holds and the table does not was lost to the cap
 *     (CLOCK), to the probe bound or for want of a column: the model counts
 *     them, and the count must be the table's evicted + refused + uncopied;
 *   - the live counts, in all and per publisher, are the model's, and never
 *     above the cap;
 *   - a query answers exactly the (publisher, medium) pairs the model says
 *     hold a prefix of the chain, each with the model's length (full groups
 *     0 and 1; group 2 is kept as a state group and never scored);
 *   - watched removals name only pairs that exist;
 * and no crash, no undefined behaviour, no leak (ASan+UBSan, LeakSanitizer).
 * The table's key is fixed (kvf_score_set_key), so homes replay; a mode bit
 * uses 16 blocks that share one home, to meet the probe bound. Columns
 * freed by a grace period (call_rcu) may free earlier or later from run to
 * run; every check holds either way.
 *
 * Input: a config byte (bits 0-3: cap 1 + 3k; 4-6: probe bound 2 + k, and
 * with bits 4-5 the sweep's slots per flush 1 + k; 7: aimed blocks), then
 * operations of 5 bytes: what, block, publisher, medium, group (a share
 * and a query read more). FUZZ_TRACE=1 prints them and the counts.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <urcu/urcu-memb.h>

#include "fuzz_input.h"
#include "index.h"
#include "score.h"

#define FZ_TARGET "fuzz_fleet_index"

#define NH 16
#define NP 8
static const uint32_t PUBS[NP] = {0, 1, 63, 64, 65, 130, 4095, 7};
static const uint32_t MEDIA[3] = {0, 1, 63};

struct model {
	uint8_t held[NH][NP][3][3]; /* [block][publisher][medium][group] */
	uint64_t hashes[NH];
	uint64_t cap, lost;
};

static char names[64][KVF_MEDIUM_MAX + 1];
static uint32_t block_size[64];

static uint64_t model_live(const struct model *m, int pub)
{
	uint64_t n = 0;
	for (int h = 0; h < NH; h++)
		for (int p = 0; p < NP; p++)
			for (int md = 0; md < 3; md++)
				for (int g = 0; g < 3; g++)
					n += (pub < 0 || pub == p) && m->held[h][p][md][g];
	return n;
}

/* The longest prefix of chain that (p, md) holds in a full group. */
static uint32_t model_prefix(const struct model *m, const uint32_t *chain, uint32_t n, int p,
                             int md)
{
	uint32_t i = 0;
	while (i < n && (m->held[chain[i]][p][md][0] || m->held[chain[i]][p][md][1]))
		i++;
	return i;
}

/* The table flushed and asked for every model entry: it learns what the
 * table lost, and checks the counts. */
static void sync_check(struct kvf_score *s, struct model *m)
{
	kvf_score_flush(s);
	for (int h = 0; h < NH; h++)
		for (int p = 0; p < NP; p++)
			for (int md = 0; md < 3; md++)
				for (int g = 0; g < 3; g++) {
					uint8_t *e = &m->held[h][p][md][g];
					bool in = kvf_score_holds(s, m->hashes[h],
					                          KVF_LOC(PUBS[p], MEDIA[md], (uint32_t)g),
					                          false);
					FZ_CHECK(!in || *e);
					if (*e && !in) {
						*e = 0;
						m->lost++;
					}
				}
	struct kvf_score_counts c;
	kvf_score_counts(s, &c);
	FZ_CHECK(c.live == model_live(m, -1));
	FZ_CHECK(c.live <= m->cap);
	FZ_CHECK(m->lost == c.evicted + c.refused + c.uncopied);
	for (int p = 0; p < NP; p++)
		FZ_CHECK(kvf_score_pub_live(s, PUBS[p]) == model_live(m, p));
}

static void query_check(struct kvf_score *s, const struct model *m, struct fz *in)
{
	uint32_t chain[8], n = 1 + fz_below(in, 8);
	uint64_t hashes[8];
	for (uint32_t i = 0; i < n; i++) {
		chain[i] = fz_below(in, NH);
		hashes[i] = m->hashes[chain[i]];
	}
	kva_fleet_match got[64];
	int ng = kvf_score_query(s, (const char(*)[KVF_MEDIUM_MAX + 1])names, block_size, hashes, n,
	                         got, 64);
	int want = 0;
	for (int p = 0; p < NP; p++)
		for (int md = 0; md < 3; md++) {
			uint32_t len = model_prefix(m, chain, n, p, md);
			if (!len)
				continue;
			want++;
			bool found = false;
			for (int k = 0; k < ng; k++)
				found |= got[k].publisher == PUBS[p] &&
				         strcmp(got[k].medium, names[MEDIA[md]]) == 0 &&
				         got[k].blocks == len;
			FZ_CHECK(found);
		}
	FZ_CHECK(ng == want);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz in;
	fz_init(&in, data, size);
	bool trace = getenv("FUZZ_TRACE") != NULL;
	for (int md = 0; md < 64; md++) {
		snprintf(names[md], sizeof names[md], "m%02d", md);
		block_size[md] = 16;
	}
	uint8_t cfg = fz_u8(&in);
	static struct model m;
	memset(&m, 0, sizeof m);
	m.cap = 1 + 3 * (uint64_t)(cfg & 15); /* 1..46 entries */
	struct kvf_score *s = kvf_score_new(0x3, 0x7, m.cap, true);
	FZ_CHECK(s != NULL);
	kvf_score_set_key(s, 0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull);
	kvf_score_set_probe_max(s, 2 + (cfg >> 4 & 7));
	kvf_score_set_sweep_slots(s, 1 + (cfg >> 4 & 3));
	if (cfg & 0x80) { /* 16 blocks aimed at one home, as a publisher with the key could */
		size_t target = kvf_score_home(s, 1);
		int k = 0;
		for (uint64_t h = 1; k < NH; h++)
			if (kvf_score_home(s, h) == target)
				m.hashes[k++] = h;
	} else {
		for (int h = 0; h < NH; h++)
			m.hashes[h] = 0x9e3779b97f4a7c15ull * (uint64_t)(h + 1);
	}
	while (fz_more(&in)) {
		uint32_t op = fz_u8(&in) % 10, h = fz_below(&in, NH), p = fz_below(&in, NP);
		uint32_t md = fz_below(&in, 3), g = fz_below(&in, 3);
		uint32_t loc = KVF_LOC(PUBS[p], MEDIA[md], g);
		uint8_t *held = &m.held[h][p][md][g];
		if (trace)
			fprintf(stderr, "op %u block %u pub %u medium %u group %u\n", op, h, PUBS[p],
			        MEDIA[md], g);
		switch (op) {
		case 0:
		case 1:
		case 2: /* a store: held from now on, unless the table loses it */
			if (!*held) {
				kvf_score_add(s, m.hashes[h], loc);
				*held = 1;
			}
			break;
		case 3: /* a removal: after a check, so that it hides no loss */
			sync_check(s, &m);
			if (*held) {
				kvf_score_del(s, m.hashes[h], loc);
				*held = 0;
			}
			break;
		case 4: /* a clear, a restart, a removed publisher */
			sync_check(s, &m);
			kvf_score_drop_publisher(s, PUBS[p]);
			for (int x = 0; x < NH; x++)
				memset(m.held[x][p], 0, sizeof m.held[x][p]);
			break;
		case 5: { /* a lookup answered with the block: watched */
			sync_check(s, &m);
			FZ_CHECK(kvf_score_holds(s, m.hashes[h], loc, true) == (*held != 0));
			break;
		}
		case 6: /* the publishers' shares move */
			kvf_score_set_quota(s, fz_below(&in, (uint32_t)m.cap + 1));
			break;
		case 7: { /* the batch ends: watched removals are named */
			kvf_score_flush(s);
			uint32_t pairs[KVF_SCORE_WATCHED_PAIRS];
			bool overflow;
			uint32_t n = kvf_score_watched_take(s, pairs, &overflow);
			FZ_CHECK(n <= KVF_SCORE_WATCHED_PAIRS);
			for (uint32_t k = 0; k < n; k++) {
				bool known = false;
				for (int q = 0; q < NP; q++)
					for (int d = 0; d < 3; d++)
						known |= pairs[k] == (PUBS[q] << 8 | MEDIA[d]);
				FZ_CHECK(known);
			}
			break;
		}
		case 8: /* time passes: grace periods end, columns come free */
			urcu_memb_barrier();
			kvf_score_flush(s);
			break;
		default:
			sync_check(s, &m);
			query_check(s, &m, &in);
			break;
		}
	}
	sync_check(s, &m);
	if (trace) {
		struct kvf_score_counts c;
		kvf_score_counts(s, &c);
		fprintf(stderr, "live %llu of %llu, evicted %llu, refused %llu, uncopied %llu\n",
		        (unsigned long long)c.live, (unsigned long long)m.cap,
		        (unsigned long long)c.evicted, (unsigned long long)c.refused,
		        (unsigned long long)c.uncopied);
	}
	kvf_score_free(s);
	return 0;
}
