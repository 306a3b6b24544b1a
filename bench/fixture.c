/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fixture: builds, caches and steps the engines of fixture.h; also the
 * small process helpers every benchmark uses (clock, RSS, the small-run cap).
 */
#include "fixture.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "alloc.h"
#include <kvadmit/lockfree/rcu_thread.h>

#define SMALL_CAP 1000u
#define CACHE_SLOTS 8
#define RECLAIM_EVERY 4096

bool bx_small(void)
{
	static int small = -1;
	if (small < 0) {
		const char *v = getenv("KVA_BENCH_SMALL");
		small = v && *v && strcmp(v, "0") != 0;
	}
	return small;
}

size_t bx_cap(size_t n) { return bx_small() && n > SMALL_CAP ? SMALL_CAP : n; }

uint64_t bx_clock_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t bx_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int bx_cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

uint64_t bx_rss_bytes(void)
{
	unsigned long size = 0, resident = 0;
	FILE *f = fopen("/proc/self/statm", "r");
	if (!f)
		return 0;
	if (fscanf(f, "%lu %lu", &size, &resident) != 2)
		resident = 0;
	fclose(f);
	return (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

void bx_check(int rc, const char *msg)
{
	if (rc != 0) {
		fprintf(stderr, "kvadmit-bench: %s: %s\n", msg, kva_strerror(rc));
		abort();
	}
}

static void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size);
	if (!p) {
		fprintf(stderr, "kvadmit-bench: out of memory\n");
		abort();
	}
	return p;
}

const kva_manifest *bx_manifest(void)
{
	static const kva_manifest m = {
		.count = 1,
		.entries = {{.position = BX_CKPT, .location = KVA_LOC_EXTERNAL, .compatible = 1,
		             .id = 42, .epoch = 1}},
	};
	return &m;
}

static void directory(void *ctx, uint64_t key, uint32_t prompt, kva_lookup_token t)
{
	struct bx *b = ctx;
	(void)key;
	(void)prompt;
	if (b->answer_now) {
		bx_check(kva_lookup_answer(b->e, t, bx_manifest()), "lookup answer");
		return;
	}
	if (b->n_pending == b->pending_cap)
		bx_check(-ENOSPC, "pending lookups");
	b->pending[b->n_pending++] = t;
}

/* enum kva_policy `policy`; `levels` as in struct bx */
static struct bx *new_engine(int policy, uint32_t levels)
{
	struct bx *b = xcalloc(1, sizeof(*b));
	b->levels = levels;
	kva_config c;
	kva_config_default(&c);
	c.policy = policy; /* COST: kva_config_default's seeds */
	c.order = levels ? KVA_ORDER_PRIORITY : KVA_ORDER_FCFS;
	c.total_pages = BX_TOTAL_PAGES;
	c.page_tokens = BX_PAGE_TOKENS;
	c.decode_reserve_pages = 0;
	c.decode_headroom_pages = 0;
	c.prefill_chunk_tokens = BX_PROMPT;
	c.copy_slots = UINT16_MAX;
	c.max_running = UINT16_MAX;
	/* no timers in a blocked engine: see fixture.h */
	c.max_restore_wait_ns = 0;
	c.wait_log_interval_ns = 0;
	c.lookup_refresh_ns = 0;
	c.lookup = directory;
	c.lookup_ctx = b;
	c.start_ns = b->now = 1;
	int err = 0;
	b->e = kva_engine_create(&c, &err);
	bx_check(err, "engine create");
	b->answer_now = true;
	b->pending = xcalloc(BX_MAX_BATCH, sizeof(*b->pending));
	b->pending_cap = BX_MAX_BATCH;
	b->running = xcalloc(BX_RUNNERS + BX_MAX_BATCH, sizeof(*b->running));
	b->plan = (kva_plan){
		.admitted = xcalloc(BX_MAX_BATCH, sizeof(kva_admission)),
		.admitted_cap = BX_MAX_BATCH,
		.pages = xcalloc((size_t)BX_MAX_BATCH * BX_NEED, sizeof(uint32_t)),
		.pages_cap = BX_MAX_BATCH * BX_NEED,
		.copies = xcalloc(BX_MAX_BATCH, sizeof(kva_copy_job)),
		.copies_cap = BX_MAX_BATCH,
		.fallbacks = xcalloc(BX_MAX_BATCH, sizeof(kva_fallback)),
		.fallbacks_cap = BX_MAX_BATCH,
		.ended = xcalloc(BX_MAX_BATCH, sizeof(kva_ended)),
		.ended_cap = BX_MAX_BATCH,
	};
	return b;
}

struct bx *bx_new(void) { return new_engine(KVA_POLICY_WAIT, 0); }

struct bx *bx_new_as(int policy) { return new_engine(policy, 0); }

struct bx *bx_new_levels(uint32_t levels) { return new_engine(KVA_POLICY_WAIT, levels); }

void bx_pending_reserve(struct bx *b, size_t n)
{
	if (n <= b->pending_cap)
		return;
	kva_lookup_token *p = xcalloc(n, sizeof(*p));
	memcpy(p, b->pending, b->n_pending * sizeof(*p));
	free(b->pending);
	b->pending = p;
	b->pending_cap = n;
}

void bx_free(struct bx *b)
{
	if (!b)
		return;
	kva_engine_destroy(b->e);
	free(b->plan.admitted);
	free(b->plan.pages);
	free(b->plan.copies);
	free(b->plan.fallbacks);
	free(b->plan.ended);
	free(b->pending);
	free(b->running);
	free(b->win);
	free(b);
}

int bx_step(struct bx *b)
{
	b->now += BX_STEP_NS;
	int n = kva_step(b->e, b->now, &b->plan);
	if (n < 0)
		bx_check(n, "kva_step");
	return n;
}

kva_handle bx_submit(struct bx *b, bool restore)
{
	uint64_t id = ++b->next_id, run = b->run ? b->run : 1;
	kva_request r = {.id = id, .prefix_key = restore ? id : 0, .prompt_tokens = BX_PROMPT,
	                 .priority = b->levels ? (int32_t)(id / run % b->levels) : 0};
	kva_handle h;
	bx_check(kva_submit(b->e, &r, &h), "kva_submit");
	return h;
}

void bx_reclaim(struct bx *b, size_t retired)
{
	b->unreclaimed += retired;
	if (b->unreclaimed >= RECLAIM_EVERY) {
		urcu_memb_barrier(); /* every call_rcu callback queued so far has run */
		b->unreclaimed = 0;
	}
}

void bx_copies_done(struct bx *b)
{
	for (uint32_t i = 0; i < b->plan.n_copies; i++)
		bx_check(kva_copy_done(b->e, b->plan.copies[i].token, b->plan.copies[i].rank, 0),
		         "kva_copy_done");
}

static void win_init(struct bx *b, size_t n)
{
	size_t cap = 1024;
	while (cap < 2 * n)
		cap <<= 1;
	b->win = xcalloc(cap, sizeof(*b->win));
	/* resident now, so that the RSS growth measured while the waiting
	 * requests are built is the engine's, not this array's */
	memset(b->win, 0, cap * sizeof(*b->win));
	b->win_mask = cap - 1;
	b->win_lo = b->next_id + 1;
}

void bx_waiting_add(struct bx *b, kva_handle h)
{
	if (h.id - b->win_lo > b->win_mask) {
		/* the window of live ids outgrew the array: double it */
		size_t cap = 2 * (b->win_mask + 1);
		while (h.id - b->win_lo >= cap)
			cap *= 2;
		kva_handle *w = xcalloc(cap, sizeof(*w));
		for (uint64_t id = b->win_lo; id < h.id; id++)
			w[id & (cap - 1)] = b->win[id & b->win_mask];
		free(b->win);
		b->win = w;
		b->win_mask = cap - 1;
	}
	b->win[h.id & b->win_mask] = h;
	b->n_waiting++;
}

void bx_waiting_del(struct bx *b, uint64_t id)
{
	if (id < b->win_lo || b->win[id & b->win_mask].id != id)
		bx_check(-ENOENT, "untracked waiting request");
	b->win[id & b->win_mask].id = 0;
	b->n_waiting--;
	while (b->win_lo <= b->next_id && b->win[b->win_lo & b->win_mask].id != b->win_lo)
		b->win_lo++;
}

kva_handle bx_waiting_take_random(struct bx *b, uint64_t *rng)
{
	if (!b->n_waiting)
		bx_check(-ENOENT, "no waiting request");
	for (;;) {
		/* xorshift64*: cheap, and any sequence will do */
		*rng ^= *rng >> 12;
		*rng ^= *rng << 25;
		*rng ^= *rng >> 27;
		uint64_t id = b->win_lo + (*rng * 0x2545f4914f6cdd1dull) % (b->next_id + 1 - b->win_lo);
		kva_handle h = b->win[id & b->win_mask];
		if (h.id == id) {
			bx_waiting_del(b, id);
			return h; /* as the engine gave it: never build a handle */
		}
	}
}

/* n already through bx_cap */
static struct bx *build_blocked(size_t n, int policy, uint32_t levels, uint32_t run)
{
	struct bx *b = new_engine(policy, levels);
	b->run = run;
	kva_stats st;
	for (uint32_t i = 0; i < BX_RUNNERS; i++)
		b->running[i] = bx_submit(b, false);
	if (bx_step(b) != (int)BX_RUNNERS)
		bx_check(-EAGAIN, "filling the pool with running requests");
	b->n_running = BX_RUNNERS;
	win_init(b, n);

	/* only the waiting requests are allocated between the two snapshots */
	uint64_t arena0 = kva__alloc_arena_bytes(), rss0 = bx_rss_bytes(), t0 = bx_clock_ns();
	while (b->n_waiting < n) {
		size_t chunk = n - b->n_waiting < BX_MAX_BATCH ? n - b->n_waiting : BX_MAX_BATCH;
		for (size_t i = 0; i < chunk; i++)
			bx_waiting_add(b, bx_submit(b, true));
		if (bx_step(b) != 0)
			bx_check(-EAGAIN, "a waiting restore was admitted");
	}
	b->build_seconds = (double)(bx_clock_ns() - t0) / 1e9;
	uint64_t arena1 = kva__alloc_arena_bytes(), rss1 = bx_rss_bytes();
	b->arena_bytes_per_request = (double)(arena1 - arena0) / (double)n;
	b->rss_bytes_per_request = rss1 > rss0 ? (double)(rss1 - rss0) / (double)n : 0;

	kva_stats_get(b->e, &st);
	if (st.waiting != n || st.free_pages != BX_NEED - 1 || !b->plan.head_blocked)
		bx_check(-EPROTO, "blocked state");
	return b;
}

struct bx *bx_blocked_levels(size_t n, uint32_t levels)
{
	return bx_blocked_runs(n, levels, 1);
}

struct bx *bx_blocked_runs(size_t n, uint32_t levels, uint32_t run)
{
	return build_blocked(bx_cap(n), KVA_POLICY_WAIT, levels, run);
}

static struct {
	size_t n;
	int policy;
	struct bx *b;
} cache[CACHE_SLOTS];

struct bx *bx_blocked(size_t n) { return bx_blocked_as(n, KVA_POLICY_WAIT); }

struct bx *bx_blocked_as(size_t n, int policy)
{
	n = bx_cap(n);
	for (int i = 0; i < CACHE_SLOTS; i++)
		if (cache[i].b && cache[i].n == n && cache[i].policy == policy)
			return cache[i].b;
	for (int i = 0; i < CACHE_SLOTS; i++)
		if (!cache[i].b) {
			cache[i].n = n;
			cache[i].policy = policy;
			cache[i].b = build_blocked(n, policy, 0, 1);
			return cache[i].b;
		}
	bx_check(-ENOSPC, "fixture cache");
	return NULL;
}

void bx_cache_clear(void)
{
	for (int i = 0; i < CACHE_SLOTS; i++) {
		bx_free(cache[i].b);
		cache[i].b = NULL;
	}
}
