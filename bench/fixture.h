/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fixture: kvadmit engines in the states the benchmarks measure, built once
 * and reused by every benchmark (and every run of one) that needs the same
 * state, because building 1,000,000 waiting requests takes about a second.
 *
 * The standard engine: pages of 16 tokens; every waiting request is a
 * 256-token prompt (16 pages) whose directory answer names one external
 * checkpoint of 192 tokens (12 pages imported + 4 continuation), so each
 * restore reserves exactly BX_NEED pages, one copy slot and one run slot.
 * Bounded wait, wait logs and lookup refresh are off, so a blocked engine
 * fires no timers: a step with no events has nothing to do but look at the
 * head. The simulated clock advances BX_STEP_NS per step.
 *
 * The blocked state (bx_blocked): running recompute requests of exactly
 * BX_NEED credits each hold all but BX_NEED - 1 pages, and N restores wait
 * behind a head that cannot reserve. Benchmarks that change the engine
 * (admit, cancel, answers) bring it back to that state before they return.
 */
#ifndef KVA_BENCH_FIXTURE_H
#define KVA_BENCH_FIXTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvadmit/kvadmit.h"

#define BX_PAGE_TOKENS 16u
#define BX_PROMPT 256u  /* tokens per request */
#define BX_CKPT 192u    /* checkpoint tokens */
#define BX_NEED 16u     /* pages one restore (or one first prefill chunk) takes */
#define BX_RUNNERS 8192u /* running requests in the blocked state */
#define BX_TOTAL_PAGES (BX_RUNNERS * BX_NEED + BX_NEED - 1)
#define BX_MAX_BATCH 16384u /* admissions / copies / reports one step may list */
#define BX_STEP_NS 1000000ull

struct bx {
	kva_engine *e;
	/* 0: FCFS; else KVA_ORDER_PRIORITY with submit id's priority
	 * (id / run) % levels: run 0 or 1 interleaves the levels request by
	 * request, a larger run sends bursts of `run` requests of one priority */
	uint32_t levels, run;
	uint64_t now;
	uint64_t next_id;
	kva_plan plan;
	/* directory: answers at once from its callback, or records the token
	 * in pending[] (pending_cap entries; bx_pending_reserve grows it) */
	bool answer_now;
	kva_lookup_token *pending;
	size_t n_pending, pending_cap;
	/* The waiting requests the benchmarks track, by id: win[id & win_mask]
	 * is the handle the engine gave waiting request `id` (id 0 for any
	 * other id: ids start at 1). Ids are given out in submission order and
	 * the queue is FCFS, so no tracked request has an id below win_lo. */
	kva_handle *win;
	size_t win_mask;
	uint64_t win_lo;
	size_t n_waiting;
	/* handles of running requests, each holding BX_NEED credits */
	kva_handle *running;
	size_t n_running;
	/* measured while building the waiting requests */
	double arena_bytes_per_request; /* 0 without jemalloc */
	double rss_bytes_per_request;
	double build_seconds;
	size_t unreclaimed; /* retired since the last bx_reclaim barrier */
};

/* KVA_BENCH_SMALL=1 in the environment: caps every waiting count and batch,
 * so the smoke run stays short under sanitizers. */
bool bx_small(void);
size_t bx_cap(size_t n);

uint64_t bx_clock_ns(void);  /* CLOCK_MONOTONIC */
uint64_t bx_cpu_ns(void);    /* CLOCK_THREAD_CPUTIME_ID: the calling thread's CPU time */
uint64_t bx_rss_bytes(void);
/* qsort comparator for uint64_t, ascending. */
int bx_cmp_u64(const void *a, const void *b);

/* A standard engine with all capacity free and nothing in it. Not cached. */
struct bx *bx_new(void);
/* The same under enum kva_policy `policy` (bx_new: KVA_POLICY_WAIT). */
struct bx *bx_new_as(int policy);
/* bx_new under KVA_ORDER_PRIORITY over `levels` priorities (0: FCFS). */
struct bx *bx_new_levels(uint32_t levels);
/* The blocked state with n waiting restores over `levels` priorities (0:
 * FCFS); not cached: the caller frees it (bx_free). */
struct bx *bx_blocked_levels(size_t n, uint32_t levels);
/* The same with priorities in bursts of `run` submits (struct bx, run). */
struct bx *bx_blocked_runs(size_t n, uint32_t levels, uint32_t run);
void bx_free(struct bx *b);

/* The cached blocked engine with n waiting restores (n is taken through
 * bx_cap). Cached engines are freed by bx_cache_clear. */
struct bx *bx_blocked(size_t n);
/* The same under enum kva_policy `policy` (bx_blocked: KVA_POLICY_WAIT), cached apart. */
struct bx *bx_blocked_as(size_t n, int policy);
void bx_cache_clear(void);

/* One scheduler step BX_STEP_NS later; aborts the process on an error (a
 * benchmark that cannot reproduce its state must not report numbers). */
int bx_step(struct bx *b);
/* Submits a restore (the directory knows its key) or, with restore false,
 * a request without a prefix key (recompute, BX_NEED pages first chunk). */
kva_handle bx_submit(struct bx *b, bool restore);
/* The one-checkpoint manifest every restore gets. */
const kva_manifest *bx_manifest(void);
/* Makes room for n unanswered lookups in b->pending. */
void bx_pending_reserve(struct bx *b, size_t n);
/* Tracks h (a restore just submitted) as waiting. */
void bx_waiting_add(struct bx *b, kva_handle h);
/* Stops tracking id (admitted or cancelled). */
void bx_waiting_del(struct bx *b, uint64_t id);
/* A uniformly chosen tracked waiting request, no longer tracked. */
kva_handle bx_waiting_take_random(struct bx *b, uint64_t *rng);
/* Reports every copy job of the last step as done. */
void bx_copies_done(struct bx *b);
/* Counts `retired` records the last step handed to call_rcu and, once
 * enough are pending, waits for them to be freed, so that reclamation runs
 * between timed steps instead of overlapping the next one. Untimed only. */
void bx_reclaim(struct bx *b, size_t retired);
/* Aborts with msg when rc != 0. */
void bx_check(int rc, const char *msg);

#endif
