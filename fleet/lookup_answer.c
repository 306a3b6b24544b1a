/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lookup_answer: the manifest of a lookup. For each live publisher and
 * medium the prefix of the registered chain it holds is a candidate
 * checkpoint; the longest distinct positions (up to KVA_MAX_CHECKPOINTS)
 * are answered, and each answered one is watched (watch.c). I/O thread only.
 */
#define _GNU_SOURCE
#include "lookup_answer.h"

#include <errno.h>

#include "chain.h"
#include "quota.h"
#include "watch.h"

/* A checkpoint a lookup may be answered with. */
struct candidate {
	uint32_t position; /* tokens */
	uint32_t pair, nblocks;
	uint8_t local;
};

/* Keeps the longest distinct positions; at one position a local copy wins,
 * then the first publisher. One publisher holds at most per_pub of them
 * (its longest): claims it cannot back push out nobody else's. */
static void keep_candidate(struct candidate *best, uint32_t *nbest, struct candidate c,
                           uint32_t per_pub)
{
	uint32_t i, same = 0, shortest_same = 0;
	for (i = 0; i < *nbest && best[i].position != c.position; i++)
		;
	if (i < *nbest) {
		if (c.local && !best[i].local)
			best[i] = c;
		return;
	}
	for (i = 0; i < *nbest; i++)
		if (best[i].pair >> 8 == c.pair >> 8 &&
		    (same++ == 0 || best[i].position < best[shortest_same].position))
			shortest_same = i;
	if (same >= per_pub) {
		if (best[shortest_same].position < c.position)
			best[shortest_same] = c;
		return;
	}
	if (*nbest < KVA_MAX_CHECKPOINTS) {
		best[(*nbest)++] = c;
		return;
	}
	uint32_t shortest = 0;
	for (i = 1; i < *nbest; i++)
		if (best[i].position < best[shortest].position)
			shortest = i;
	if (best[shortest].position < c.position)
		best[shortest] = c;
}

/* Candidates from every live publisher's media, into best. */
static uint32_t find_candidates(kva_fleet *f, const struct chain *chain, uint32_t prompt_tokens,
                                struct candidate *best, uint64_t now)
{
	uint32_t nbest = 0;
	for (uint32_t id = 0; id < f->npubs; id++) {
		struct publisher *pub = &f->pubs[id];
		if (!pub->active || pub->down || pub->dropped)
			continue;
		for (uint32_t medium = 0; medium < MAX_MEDIA; medium++) {
			if (!(pub->media >> medium & 1))
				continue;
			uint32_t block_size = position_block_size(f, medium);
			if (!block_size)
				block_size = pub->block_size;
			if (!block_size)
				continue;
			uint32_t max_blocks = prompt_tokens / block_size < chain->nhashes
			                          ? prompt_tokens / block_size
			                          : chain->nhashes;
			uint32_t pair = pair_of(id, medium);
			if (f->nquarantine && kvf_quarantined(f, pair, now)) {
				stat_add(f, STAT(quarantine_skips), 1);
				continue;
			}
			uint32_t nblocks = 0;
			if (max_blocks)
				nblocks = kvf_prefix_held(f, chain, pair, max_blocks);
			if (!nblocks)
				continue;
			struct candidate c = {.position = nblocks * block_size, .pair = pair,
			                      .nblocks = nblocks,
			                      .local = pub->self && (f->local_media >> medium & 1)};
			keep_candidate(best, &nbest, c, f->cfg.max_manifest_per_publisher);
		}
	}
	/* ascending positions */
	for (uint32_t i = 1; i < nbest; i++)
		for (uint32_t j = i; j > 0 && best[j - 1].position > best[j].position; j--) {
			struct candidate t = best[j];
			best[j] = best[j - 1];
			best[j - 1] = t;
		}
	return nbest;
}

/* Answer latency histogram: the bucket of the first bound not below it. */
static void count_latency(kva_fleet *f, uint64_t latency_ns)
{
	static const uint64_t bounds[13] = {1000,   2000,   5000,    10000,   20000,
	                                    50000,  100000, 200000,  500000,  1000000,
	                                    2000000, 5000000, 10000000};
	uint32_t b = 0;
	while (b < 13 && latency_ns > bounds[b])
		b++;
	stat_add(f, STAT(answer_ns_buckets) + b, 1);
	stat_add(f, STAT(answer_ns_sum), latency_ns);
	if (latency_ns > atomic_load_explicit(&f->stats[STAT(answer_ns_max)], memory_order_relaxed))
		stat_set(f, STAT(answer_ns_max), latency_ns);
}

void kvf_lookup_answer(kva_fleet *f, const struct cmd *cmd, uint64_t now)
{
	kva_engine *e = atomic_load_explicit(&f->engine, memory_order_acquire); /* A2 */
	kva_manifest m = {0};
	stat_add(f, STAT(lookups), 1);
	struct chain **slot = kvf_chain_slot(f, cmd->prefix_key);
	struct chain *chain = slot ? *slot : NULL;
	struct candidate best[KVA_MAX_CHECKPOINTS];
	uint32_t nbest = 0;
	if (!chain) {
		stat_add(f, STAT(unregistered), 1);
	} else {
		nbest = find_candidates(f, chain, cmd->prompt_tokens, best, now);
		for (uint32_t i = 0; i < nbest; i++) {
			const struct candidate *c = &best[i];
			m.entries[i] = (kva_checkpoint){
			    .position = c->position,
			    .location = c->local ? KVA_LOC_LOCAL : KVA_LOC_EXTERNAL,
			    .compatible = 1,
			    .tier = f->media_tier[c->pair & 0xff], /* pair_of: medium low */
			    .id = checkpoint_id(chain->hashes[c->nblocks - 1], c->pair),
			    .epoch = f->epoch};
		}
		m.count = nbest;
	}
	if (!m.count)
		stat_add(f, STAT(misses), 1);
	int rc = e ? kva_lookup_answer(e, cmd->token, &m) : -ENOENT;
	uint64_t latency_ns = now_ns() - cmd->sent_ns;
	if (rc) {
		stat_add(f, STAT(answer_errors), 1);
	} else {
		stat_add(f, STAT(answered), 1);
		for (uint32_t i = 0; i < nbest; i++) {
			const struct candidate *c = &best[i];
			kvf_prefix_mark_watched(f, chain, c->pair, c->nblocks);
			kvf_watch_add(f, m.entries[i].id, c->pair, c->nblocks, chain, now);
		}
	}
	count_latency(f, latency_ns);
	atomic_fetch_add_explicit(&f->lookups_done, 1, memory_order_release); /* R3 */
}
