/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rescan: the rescanning waiting pass of rescan.h. Plain single-threaded C
 * with the data layout of the Python original: a deque of request objects,
 * a dict from block hash to cached block, a dict from request id to the
 * connector's lookup result object, and an integer count of free blocks.
 * Dicts are open-addressing tables of (key, object) as CPython's are;
 * objects are separate allocations from kvadmit's allocator, made in the
 * order a serving engine makes them (request at arrival, lookup result when
 * its answer arrives).
 */
#include "rescan.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <urcu/list.h>

#include "alloc.h"
#include "record.h"
#include "fixture.h"

enum rs_status { RS_WAITING = 0, RS_WAITING_FOR_REMOTE_KVS = 1 };

/* A waiting request; padded to the size of kvadmit's record. */
struct rs_req {
	union {
		struct {
			struct cds_list_head link; /* in the waiting deque */
			uint64_t request_id;
			uint64_t first_block_hash; /* request.block_hashes[0] */
			uint32_t status;
			uint32_t num_prompt_tokens;
			uint32_t num_computed_tokens;
			uint32_t num_external_computed_tokens;
			uint32_t lookups; /* connector polls */
		};
		char size_[sizeof(struct kva__req)];
	};
};

/* The connector's answer for one request (an LMCache lookup future). */
struct rs_lookup {
	uint64_t request_id;
	int32_t matched_tokens; /* -1: not decided yet */
	uint32_t polls;
};

struct rs_slot {
	uint64_t key; /* 0 = empty */
	void *obj;
};

struct rs_dict {
	struct rs_slot *slots;
	size_t mask;
};

struct rs_sched {
	struct cds_list_head waiting;
	size_t n;
	struct rs_dict prefix_cache; /* block hash -> cached block (the running requests') */
	struct rs_dict lookups;      /* request id -> struct rs_lookup */
	uint32_t free_blocks;
	uint32_t block_tokens;
	struct rs_req **reqs; /* for rs_free only */
	struct rs_lookup **results;
};

static uint64_t mix(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static void dict_init(struct rs_dict *d, size_t entries)
{
	size_t cap = 8;
	while (cap < entries * 3 / 2 + 1) /* CPython keeps dicts at most 2/3 full */
		cap <<= 1;
	d->slots = calloc(cap, sizeof(*d->slots));
	if (!d->slots)
		abort();
	d->mask = cap - 1;
}

static void dict_put(struct rs_dict *d, uint64_t key, void *obj)
{
	size_t i = mix(key) & d->mask;
	while (d->slots[i].key)
		i = (i + 1) & d->mask;
	d->slots[i] = (struct rs_slot){key, obj};
}

static void *dict_get(const struct rs_dict *d, uint64_t key)
{
	for (size_t i = mix(key) & d->mask;; i = (i + 1) & d->mask) {
		if (d->slots[i].key == key)
			return d->slots[i].obj;
		if (!d->slots[i].key)
			return NULL;
	}
}

size_t rs_record_bytes(void) { return sizeof(struct rs_req); }

struct rs_sched *rs_build(size_t n)
{
	struct rs_sched *s = calloc(1, sizeof(*s));
	if (!s)
		abort();
	CDS_INIT_LIST_HEAD(&s->waiting);
	s->n = n;
	s->block_tokens = BX_PAGE_TOKENS;
	s->free_blocks = BX_NEED - 1; /* as kvadmit's blocked state */
	s->reqs = calloc(n, sizeof(*s->reqs));
	s->results = calloc(n, sizeof(*s->results));
	if (!s->reqs || !s->results)
		abort();
	/* the running requests' blocks are what the prefix cache holds */
	dict_init(&s->prefix_cache, (size_t)BX_RUNNERS * BX_NEED);
	for (uint64_t b = 1; b <= (uint64_t)BX_RUNNERS * BX_NEED; b++)
		dict_put(&s->prefix_cache, mix(b << 1), s);
	dict_init(&s->lookups, n);
	for (size_t i = 0; i < n; i++) {
		struct rs_req *r = kva__calloc(sizeof(*r));
		struct rs_lookup *l = kva__alloc(sizeof(*l));
		if (!r || !l)
			abort();
		r->request_id = i + 1;
		r->first_block_hash = mix((i + 1) << 1 | 1); /* not cached locally */
		r->status = RS_WAITING;
		r->num_prompt_tokens = BX_PROMPT;
		*l = (struct rs_lookup){r->request_id, BX_CKPT, 0};
		dict_put(&s->lookups, r->request_id, l);
		cds_list_add_tail(&r->link, &s->waiting);
		s->reqs[i] = r;
		s->results[i] = l;
	}
	return s;
}

void rs_free(struct rs_sched *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n; i++) {
		kva__free(s->reqs[i], sizeof(struct rs_req));
		kva__free(s->results[i], sizeof(struct rs_lookup));
	}
	free(s->reqs);
	free(s->results);
	free(s->prefix_cache.slots);
	free(s->lookups.slots);
	free(s);
}

/* get_computed_blocks: local prefix-cache hit length in tokens. */
static uint32_t local_computed_tokens(const struct rs_sched *s, const struct rs_req *r)
{
	return dict_get(&s->prefix_cache, r->first_block_hash) ? s->block_tokens : 0;
}

/* get_num_new_matched_tokens: polls the lookup; -1 while undecided. */
static int32_t connector_matched(const struct rs_sched *s, struct rs_req *r)
{
	struct rs_lookup *l = dict_get(&s->lookups, r->request_id);
	r->lookups++;
	if (!l)
		return -1;
	l->polls++;
	return l->matched_tokens;
}

/* pop_request + prepend_request onto skipped_waiting_requests */
static void skip(struct rs_req *r, struct cds_list_head *skipped)
{
	cds_list_del(&r->link);
	cds_list_add_tail(&r->link, skipped);
}

size_t rs_step(struct rs_sched *s)
{
	struct cds_list_head skipped;
	size_t admitted = 0;
	CDS_INIT_LIST_HEAD(&skipped);
	while (!cds_list_empty(&s->waiting)) {
		struct rs_req *r = caa_container_of(s->waiting.next, struct rs_req, link);
		if (r->status == RS_WAITING_FOR_REMOTE_KVS) { /* a load in flight: not ready */
			skip(r, &skipped);
			continue;
		}
		uint32_t local = local_computed_tokens(s, r);
		int32_t ext = connector_matched(s, r);
		if (ext >= 0) {
			r->num_external_computed_tokens = (uint32_t)ext;
			/* allocate_slots: a restore reserves its whole prompt, less
			 * the blocks already cached locally */
			uint32_t need = (r->num_prompt_tokens - local + s->block_tokens - 1) /
			                s->block_tokens;
			if (need <= s->free_blocks) {
				s->free_blocks -= need;
				r->status = RS_WAITING_FOR_REMOTE_KVS; /* its import starts */
				cds_list_del(&r->link);
				admitted++;
				continue;
			}
		}
		/* not admissible this step: skipped, put back after the loop */
		skip(r, &skipped);
	}
	cds_list_splice(&skipped, &s->waiting);
	return admitted;
}
