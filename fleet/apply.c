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
uint32_t kvf_medium_id(kva_fleet *f, const char *name, size_t len)
{
	if (len == 0)
		name = "GPU", len = 3;
	len = len > KVF_MEDIUM_MAX ? KVF_MEDIUM_MAX : len; /* as the decoder keeps it */
	for (uint32_t i = 0; i < f->nmedia; i++)
		if (f->media_len[i] == len && memcmp(f->media[i], name, len) == 0)
			return i;
	if (f->nmedia == MAX_MEDIA)
		return NO_MEDIUM;
	memcpy(f->media[f->nmedia], name, len);
	f->media[f->nmedia][len] = 0;
	f->media_len[f->nmedia] = (uint8_t)len;
	f->media_tier[f->nmedia] = kvf_medium_tier(name, len);
	return f->nmedia++;
}

/* Every entry of pub goes, and its watches are reported. Finding them scans
 * the whole table (max_blocks entries), so a publisher without entries
 * (counted, nentries) skips that. */
static size_t drop_entries(kva_fleet *f, struct publisher *pub)
{
	size_t n = 0;
	if (pub->nentries) {
		n = kvf_index_del_matching(&f->index, (uint32_t)pub->id << 16, 16, NULL);
		pub->nentries = 0;
		stat_add(f, STAT(index_scans), 1);
	}
	kvf_watches_check(f, 0, pub->id);
	return n;
}

void kvf_drop_publisher(kva_fleet *f, struct publisher *pub, const char *why)
{
	size_t n = drop_entries(f, pub);
	stat_add(f, STAT(entries_dropped), n);
	stat_set(f, STAT(blocks), f->index.count); /* also when no batch follows */
	pub->media = 0;
	fleet_log(f, KVA_LOG_WARN, "kvadmit-fleet: publisher %s: %s, %zu entries dropped",
	          pub->endpoint, why, n);
}

void kvf_apply_batch(kva_fleet *f, struct publisher *pub, const uint8_t *data, size_t len)
{
	int rc = kvf_decode(&f->batch, data, len);
	if (rc) {
		uint64_t k =
		    atomic_fetch_add_explicit(&f->stats[STAT(malformed)], 1, memory_order_relaxed);
		if ((k & (k + 1)) == 0) /* 1st, 2nd, 4th ... */
			fleet_log(f, KVA_LOG_WARN,
			          "kvadmit-fleet: publisher %s: malformed batch (%d)",
			          pub->endpoint, rc);
		return;
	}
	stat_add(f, STAT(unknown_events), f->batch.unknown_events);
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
		uint32_t medium = kvf_medium_id(f, ev->medium, ev->medium_len);
		if (medium == NO_MEDIUM) {
			uint64_t k = atomic_fetch_add_explicit(&f->stats[STAT(ignored_media)],
			                                       ev->nhashes, memory_order_relaxed);
			if (k == 0)
				fleet_log(f, KVA_LOG_WARN,
				          "kvadmit-fleet: publisher %s: more than %d medium names, "
				          "events on new ones skipped",
				          pub->endpoint, MAX_MEDIA);
			continue;
		}
		uint32_t loc = KVF_LOC(pub->id, medium, ev->group_idx);
		if (ev->type == KVF_EV_STORED) {
			if (!f->cfg.block_size && !pub->block_size) {
				if (!ev->block_size) {
					stat_add(f, STAT(no_block_size), ev->nhashes);
					continue;
				}
				pub->block_size = ev->block_size;
			}
			pub->media |= 1ull << medium;
			for (uint32_t k = 0; k < ev->nhashes && !wiped; k++) {
				struct kvf_slot out;
				bool evicted;
				if (kvf_index_put(&f->index, hashes[k], loc, &out, &evicted))
					pub->nentries++;
				if (evicted) /* the cap took some publisher's entry */
					f->pubs[KVF_LOC_PUB(out.loc1 - 1)].nentries--;
			}
			stored += ev->nhashes;
		} else {
			bool watched = false;
			for (uint32_t k = 0; k < ev->nhashes && !wiped; k++) {
				/* flags + 1, 0 if absent */
				uint32_t flags1 = kvf_index_del(&f->index, hashes[k], loc);
				if (flags1)
					pub->nentries--;
				if (flags1 && ((flags1 - 1) & KVF_E_WATCHED))
					watched = true;
			}
			removed += ev->nhashes;
			if (watched)
				kvf_watches_check(f, KVF_LOC_PUB_MEDIUM(loc), -1);
		}
	}
	stat_add(f, STAT(blocks_stored), stored);
	stat_add(f, STAT(blocks_removed), removed);
	stat_set(f, STAT(blocks), f->index.count);
	stat_set(f, STAT(cap_evictions), f->index.evicted);
	/* Last, and release: a stats reader that sees the batch counted sees
	 * its blocks (its acquire loads, kva_fleet_stats_get). */
	atomic_fetch_add_explicit(&f->stats[STAT(batches)], 1, memory_order_release);
}
