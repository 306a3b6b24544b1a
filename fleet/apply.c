/* SPDX-License-Identifier: Apache-2.0 */
/*
 * apply: a decoded batch applied to the index. Its events store or remove
 * (block hash, location) entries, a location being (publisher, medium,
 * group); a removal of a watched entry has its watches checked (watch.c).
 * I/O thread only.
 */
#define _GNU_SOURCE
#include "apply.h"

#include <string.h>

#include "holders.h"
#include "score.h"
#include "watch.h"

/* The tier a medium's name says (kva_checkpoint.tier): vLLM's "GPU" and
 * "CPU", LMCache's and Mooncake's names for DRAM, disks and remote stores,
 * matched without case; anything else is unknown. */
uint8_t kvf_medium_tier(const char *name, size_t len)
{
	static const struct {
		const char *word;
		uint8_t tier;
	} words[] = {
		{"gpu", KVA_TIER_GPU},     {"hbm", KVA_TIER_GPU},       {"cuda", KVA_TIER_GPU},
		{"cpu", KVA_TIER_HOST},    {"dram", KVA_TIER_HOST},     {"host", KVA_TIER_HOST},
		{"disk", KVA_TIER_DISK},   {"ssd", KVA_TIER_DISK},      {"nvme", KVA_TIER_DISK},
		{"file", KVA_TIER_DISK},   {"remote", KVA_TIER_REMOTE}, {"redis", KVA_TIER_REMOTE},
		{"s3", KVA_TIER_REMOTE},   {"store", KVA_TIER_REMOTE},
	};
	for (size_t w = 0; w < sizeof(words) / sizeof(words[0]); w++) {
		size_t n = strlen(words[w].word);
		for (size_t i = 0; i + n <= len; i++) {
			size_t k = 0;
			while (k < n && (name[i + k] | 0x20) == words[w].word[k])
				k++;
			if (k == n)
				return words[w].tier;
		}
	}
	return KVA_TIER_UNKNOWN;
}

/* Names compare by their bytes and length (the wire allows NUL in them); an
 * absent medium is "GPU" (vLLM's MEDIUM_GPU). Past MAX_MEDIA names the
 * caller skips the event: a shared id would merge media (a BlockRemoved on
 * one deleting another's copies); a medium without an id has no entries, so
 * skipping its removals is exact. */
uint32_t kvf_medium_find(kva_fleet *f, const char **name, size_t *len)
{
	if (*len == 0)
		*name = "GPU", *len = 3;
	*len = *len > KVF_MEDIUM_MAX ? KVF_MEDIUM_MAX : *len; /* as the decoder keeps it */
	for (uint32_t i = 0; i < f->nmedia; i++)
		if (f->media_len[i] == *len && memcmp(f->media[i], *name, *len) == 0)
			return i;
	return NO_MEDIUM;
}

uint32_t kvf_medium_id(kva_fleet *f, const char *name, size_t len)
{
	uint32_t id = kvf_medium_find(f, &name, &len);
	if (id != NO_MEDIUM || f->nmedia == MAX_MEDIA)
		return id;
	memcpy(f->media[f->nmedia], name, len);
	f->media[f->nmedia][len] = 0;
	f->media_len[f->nmedia] = (uint8_t)len;
	f->media_tier[f->nmedia] = kvf_medium_tier(name, len);
	return f->nmedia++;
}

/* The medium id of an event of pub: a publisher names at most
 * max_media_per_publisher new media, so one cannot fill the fleet's table and
 * blind the others to theirs. */
static uint32_t event_medium(kva_fleet *f, struct publisher *pub, const struct kvf_event *ev)
{
	const char *name = ev->medium;
	size_t len = ev->medium_len;
	uint32_t id = kvf_medium_find(f, &name, &len);
	if (id != NO_MEDIUM || pub->media_named >= f->cfg.max_media_per_publisher)
		return id;
	id = kvf_medium_id(f, name, len);
	pub->media_named += id != NO_MEDIUM;
	return id;
}

/* Every entry of pub goes, and its watches are reported: O(1) in the
 * index (its generation moves on, index.h; or its column dies, score.h). */
static size_t drop_entries(kva_fleet *f, struct publisher *pub)
{
	size_t n = kvf_holders_drop(f, pub->id);
	kvf_watches_check(f, 0, pub->id);
	return n;
}

void kvf_index_stats(kva_fleet *f)
{
	if (f->score) {
		struct kvf_score_counts c;
		kvf_score_counts(f->score, &c);
		stat_set(f, STAT(blocks), c.live);
		stat_set(f, STAT(cap_evictions), c.evicted);
		stat_set(f, STAT(index_refused), c.refused);
		stat_set(f, STAT(score_uncopied), c.uncopied);
		return;
	}
	stat_set(f, STAT(blocks), f->index.live);
	stat_set(f, STAT(cap_evictions), f->index.evicted);
	stat_set(f, STAT(index_refused), f->index.refused);
	stat_set(f, STAT(index_reclaimed), f->index.reclaimed);
	stat_set(f, STAT(index_scans), f->index.gen_wraps);
}

void kvf_drop_publisher(kva_fleet *f, struct publisher *pub, const char *why)
{
	size_t n = drop_entries(f, pub);
	stat_add(f, STAT(entries_dropped), n);
	kvf_index_stats(f); /* also when no batch follows */
	pub->media = 0;
	fleet_log(f, KVA_LOG_WARN, "kvadmit-fleet: publisher %s: %s, %zu entries dropped",
	          pub->endpoint, why, n);
}

/* The decode buffers a large batch grew go back after it: a batch of
 * max_message_bytes takes several times that decoded, and it would stay. */
#define BATCH_KEEP_EVENTS 4096u
#define BATCH_KEEP_HASHES 65536u

static void batch_shrink(kva_fleet *f)
{
	if (f->batch.events_cap > BATCH_KEEP_EVENTS || f->batch.hashes_cap > BATCH_KEEP_HASHES)
		kvf_batch_fini(&f->batch); /* the next decode grows them again */
}

static void apply_decoded(kva_fleet *f, struct publisher *pub);

void kvf_apply_batch(kva_fleet *f, struct publisher *pub, const uint8_t *data, size_t len)
{
	int rc = kvf_decode(&f->batch, data, len);
	if (rc == 0)
		apply_decoded(f, pub);
	batch_shrink(f);
	if (rc == 0)
		return;
	uint64_t k = atomic_fetch_add_explicit(&f->stats[STAT(malformed)], 1, memory_order_relaxed);
	if ((k & (k + 1)) == 0) /* 1st, 2nd, 4th ... */
		fleet_log(f, KVA_LOG_WARN, "kvadmit-fleet: publisher %s: malformed batch (%d)",
		          pub->endpoint, rc);
}

/* The index's homes of an event's hashes [k, k + KVF_INDEX_FETCH) (fewer
 * at its end), their slots fetched together so that their misses overlap. */
static void fetch(kva_fleet *f, const uint64_t *hashes, uint32_t n, uint32_t k, uint32_t loc,
                  size_t *home)
{
	uint32_t m = n - k < KVF_INDEX_FETCH ? n - k : KVF_INDEX_FETCH;
	kvf_index_fetch(&f->index, hashes + k, loc, m, home);
}

/* The events' hashes into the index (without cfg.score), their probes
 * overlapping. */
static void index_put(kva_fleet *f, const uint64_t *hashes, uint32_t n, uint32_t loc)
{
	size_t home[KVF_INDEX_FETCH];
	for (uint32_t k = 0; k < n; k++) {
		if (k % KVF_INDEX_FETCH == 0)
			fetch(f, hashes, n, k, loc, home);
		kvf_index_put_from(&f->index, home[k % KVF_INDEX_FETCH], hashes[k], loc, NULL, NULL);
	}
}

/* ... and out of it; true if a watched entry went. */
static bool index_del(kva_fleet *f, const uint64_t *hashes, uint32_t n, uint32_t loc)
{
	bool watched = false;
	size_t home[KVF_INDEX_FETCH];
	for (uint32_t k = 0; k < n; k++) {
		if (k % KVF_INDEX_FETCH == 0)
			fetch(f, hashes, n, k, loc, home);
		/* flags + 1, 0 if absent */
		uint32_t flags1 = kvf_index_del_from(&f->index, home[k % KVF_INDEX_FETCH], hashes[k], loc);
		watched |= flags1 && ((flags1 - 1) & KVF_E_WATCHED);
	}
	return watched;
}

/* With cfg.score: the batch's held writes applied, then the pairs that
 * lost a watched entry looked at (all of pub's, if too many did). */
static void score_flush(kva_fleet *f, struct publisher *pub)
{
	kvf_score_flush(f->score);
	uint32_t pairs[KVF_SCORE_WATCHED_PAIRS];
	bool overflow;
	uint32_t n = kvf_score_watched_take(f->score, pairs, &overflow);
	for (uint32_t k = 0; k < n; k++)
		kvf_watches_check(f, pairs[k], -1);
	for (uint64_t m = overflow ? pub->media : 0; m; m &= m - 1)
		kvf_watches_check(f, pub->id << 8 | (uint32_t)__builtin_ctzll(m), -1);
}

static void apply_decoded(kva_fleet *f, struct publisher *pub)
{
	stat_add(f, STAT(unknown_events), f->batch.unknown_events);
	stat_add(f, STAT(undecodable_events), f->batch.undecodable_events);
	if (f->score)
		kvf_score_rank(f->score, pub->id, f->batch.dp_rank);
	/* Only the batch's last AllBlocksCleared touches the index: it wipes
	 * whatever the events before it would store or remove there, and each
	 * clear may scan the whole table. They are still counted. */
	uint32_t last_clear = UINT32_MAX;
	for (uint32_t i = 0; i < f->batch.nevents; i++)
		if (f->batch.events[i].type == KVF_EV_CLEARED)
			last_clear = i;
	uint32_t groups = f->cfg.full_groups | f->cfg.state_groups;
	uint64_t stored = 0, removed = 0;
	for (uint32_t i = 0; i < f->batch.nevents; i++) {
		const struct kvf_event *ev = &f->batch.events[i];
		const uint64_t *hashes = &f->batch.hashes[ev->first_hash];
		bool wiped = last_clear != UINT32_MAX && i < last_clear;
		if (ev->type == KVF_EV_CLEARED) {
			if (!wiped)
				drop_entries(f, pub);
			stat_add(f, STAT(clears), 1);
			continue;
		}
		if (ev->group_idx > 31 || !(groups >> ev->group_idx & 1)) {
			stat_add(f, STAT(ignored_groups), ev->nhashes);
			continue;
		}
		uint32_t medium = event_medium(f, pub, ev);
		if (medium == NO_MEDIUM) {
			uint64_t k = atomic_fetch_add_explicit(&f->stats[STAT(ignored_media)],
			                                       ev->nhashes, memory_order_relaxed);
			if (k == 0)
				fleet_log(f, KVA_LOG_WARN,
				          "kvadmit-fleet: publisher %s: past %d medium names (%u "
				          "a publisher), events on new ones skipped",
				          pub->endpoint, MAX_MEDIA, f->cfg.max_media_per_publisher);
			continue;
		}
		uint32_t loc = KVF_LOC(pub->id, medium, ev->group_idx);
		uint32_t n = wiped ? 0 : ev->nhashes; /* counted, not applied */
		if (ev->type == KVF_EV_STORED) {
			uint32_t want = configured_block_size(f, medium, ev->group_idx);
			if (want && ev->block_size && ev->block_size != want) {
				/* its positions would be wrong: not indexed */
				stat_add(f, STAT(block_size_mismatch), ev->nhashes);
				continue;
			}
			if (!want && !pub->block_size) {
				if (!ev->block_size) {
					stat_add(f, STAT(no_block_size), ev->nhashes);
					continue;
				}
				pub->block_size = ev->block_size;
				if (f->score)
					kvf_score_block_size(f->score, pub->id, ev->block_size);
			}
			pub->media |= 1ull << medium;
			if (f->score) /* held and applied at the batch's end */
				for (uint32_t k = 0; k < n; k++)
					kvf_score_add(f->score, hashes[k], loc);
			else
				index_put(f, hashes, n, loc);
			stored += ev->nhashes;
		} else {
			if (f->score)
				for (uint32_t k = 0; k < n; k++)
					kvf_score_del(f->score, hashes[k], loc);
			else if (index_del(f, hashes, n, loc))
				kvf_watches_check(f, KVF_LOC_PUB_MEDIUM(loc), -1);
			removed += ev->nhashes;
		}
	}
	if (f->score) /* before the batch is counted (the release below) */
		score_flush(f, pub);
	stat_add(f, STAT(blocks_stored), stored);
	stat_add(f, STAT(blocks_removed), removed);
	kvf_index_stats(f);
	/* Last, and release: a stats reader that sees the batch counted sees
	 * its blocks (its acquire loads, kva_fleet_stats_get). */
	atomic_fetch_add_explicit(&f->stats[STAT(batches)], 1, memory_order_release);
}
