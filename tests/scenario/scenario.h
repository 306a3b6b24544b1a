/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Scenario harness: one engine, a scripted directory and a plan with room
 * for everything, driven step by step on a simulated clock. Header-only so
 * every scenario executable stays one file.
 */
#ifndef KVA_TEST_SCENARIO_H
#define KVA_TEST_SCENARIO_H

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kvadmit/kvadmit.h"

#define SC_MS 1000000ull
#define SC_SEC (1000ull * SC_MS)
#define SC_MAX 4096

struct sc_lookup {
	uint64_t key;
	uint32_t prompt;
	kva_lookup_token token;
};

struct sc_dir_entry {
	uint64_t key;
	kva_manifest m;
};

struct sc {
	kva_engine *e;
	kva_config cfg;
	uint64_t now;
	kva_plan plan;
	kva_admission admitted[SC_MAX];
	uint32_t pages[1 << 16];
	kva_copy_job copies[SC_MAX];
	kva_fallback fallbacks[SC_MAX];
	kva_ended ended[SC_MAX];
	/* directory: every lookup is recorded; keys in `dir` are answered at once */
	struct sc_lookup lookups[SC_MAX];
	uint32_t n_lookups;
	struct sc_dir_entry dir[64];
	uint32_t n_dir;
	/* log callback */
	uint32_t n_logs, n_warn;
	char last_log[256];
	/* totals over all steps */
	uint32_t total_admitted, total_ended;
};

static void sc_lookup_cb(void *ctx, uint64_t key, uint32_t prompt, kva_lookup_token t)
{
	struct sc *s = ctx;
	if (s->n_lookups < SC_MAX)
		s->lookups[s->n_lookups++] = (struct sc_lookup){key, prompt, t};
	for (uint32_t i = 0; i < s->n_dir; i++)
		if (s->dir[i].key == key) {
			assert_int_equal(kva_lookup_answer(s->e, t, &s->dir[i].m), 0);
			return;
		}
}

static void sc_log_cb(void *ctx, int level, const char *msg)
{
	struct sc *s = ctx;
	s->n_logs++;
	if (level >= KVA_LOG_WARN)
		s->n_warn++;
	snprintf(s->last_log, sizeof(s->last_log), "%s", msg);
}

/* Defaults for scenarios: 100 pages of 16 tokens, no watermark or headroom,
 * 4 copy slots, 64 running, chunk 256 tokens (16 pages). */
static inline void sc_config(kva_config *c)
{
	kva_config_default(c);
	c->total_pages = 100;
	c->page_tokens = 16;
	c->decode_reserve_pages = 0;
	c->decode_headroom_pages = 0;
	c->prefill_chunk_tokens = 256;
	c->copy_slots = 4;
	c->max_running = 64;
	c->lookup_timeout_ns = 1 * SC_SEC;
	c->max_restore_wait_ns = 60 * SC_SEC;
	c->wait_log_interval_ns = 30 * SC_SEC;
	c->lookup_refresh_ns = 0;
}

static inline struct sc *sc_new(const kva_config *cfg)
{
	struct sc *s = calloc(1, sizeof(*s));
	assert_non_null(s);
	s->cfg = *cfg;
	/* The same scenario under PRIORITY order, every request at one
	 * priority, must behave as FCFS (tests/CMakeLists.txt runs each
	 * scenario and conformance test both ways). */
	if (getenv("KVA_TEST_ORDER_PRIORITY"))
		s->cfg.order = KVA_ORDER_PRIORITY;
	s->cfg.lookup = sc_lookup_cb;
	s->cfg.lookup_ctx = s;
	s->cfg.log = sc_log_cb;
	s->cfg.log_ctx = s;
	s->now = s->cfg.start_ns;
	int err = 1;
	s->e = kva_engine_create(&s->cfg, &err);
	assert_int_equal(err, 0);
	assert_non_null(s->e);
	s->plan = (kva_plan){
		.admitted = s->admitted, .admitted_cap = SC_MAX,
		.pages = s->pages, .pages_cap = 1 << 16,
		.copies = s->copies, .copies_cap = SC_MAX,
		.fallbacks = s->fallbacks, .fallbacks_cap = SC_MAX,
		.ended = s->ended, .ended_cap = SC_MAX,
	};
	return s;
}

static inline struct sc *sc_default(void)
{
	kva_config c;
	sc_config(&c);
	return sc_new(&c);
}

static inline void sc_free(struct sc *s)
{
	kva_engine_destroy(s->e);
	free(s);
}

/* One step after advancing the clock by dt_ns; returns admissions. */
static inline int sc_step(struct sc *s, uint64_t dt_ns)
{
	s->now += dt_ns;
	int n = kva_step(s->e, s->now, &s->plan);
	assert_true(n >= 0);
	s->total_admitted += (uint32_t)n;
	s->total_ended += s->plan.n_ended;
	return n;
}

static inline kva_handle sc_submit(struct sc *s, uint64_t id, uint64_t key, uint32_t prompt)
{
	kva_request r = {.id = id, .prefix_key = key, .prompt_tokens = prompt};
	kva_handle h;
	assert_int_equal(kva_submit(s->e, &r, &h), 0);
	return h;
}

/* A request that carries the host's own local checkpoint (rule host-local-checkpoints). */
static inline kva_handle sc_submit_local(struct sc *s, uint64_t id, uint64_t key, uint32_t prompt,
                                         kva_checkpoint local)
{
	kva_request r = {.id = id, .prefix_key = key, .prompt_tokens = prompt, .local = local};
	kva_handle h;
	assert_int_equal(kva_submit(s->e, &r, &h), 0);
	return h;
}

static inline kva_checkpoint sc_ckpt(uint32_t pos, uint64_t id, int local)
{
	kva_checkpoint c = {.position = pos, .location = local ? KVA_LOC_LOCAL : KVA_LOC_EXTERNAL,
	                    .compatible = 1, .id = id, .epoch = 1};
	return c;
}

/* The directory answers `key` at once with one checkpoint. */
static inline void sc_dir_set(struct sc *s, uint64_t key, kva_checkpoint c)
{
	struct sc_dir_entry *d = &s->dir[s->n_dir++];
	d->key = key;
	memset(&d->m, 0, sizeof(d->m));
	d->m.count = 1;
	d->m.entries[0] = c;
}

static inline void sc_dir_add(struct sc *s, uint64_t key, kva_checkpoint c)
{
	for (uint32_t i = 0; i < s->n_dir; i++)
		if (s->dir[i].key == key) {
			s->dir[i].m.entries[s->dir[i].m.count++] = c;
			return;
		}
	sc_dir_set(s, key, c);
}

static inline void sc_dir_clear(struct sc *s) { s->n_dir = 0; }

/* The admission of h in the last step, or NULL. */
static inline const kva_admission *sc_admitted(struct sc *s, kva_handle h)
{
	for (uint32_t i = 0; i < s->plan.n_admitted; i++)
		if (s->admitted[i].handle.id == h.id && s->admitted[i].handle.gen == h.gen &&
		    s->admitted[i].handle.slot == h.slot)
			return &s->admitted[i];
	return NULL;
}

/* h was admitted in the last step, `how`, with these local and restored tokens. */
static inline const kva_admission *sc_expect_admitted(struct sc *s, kva_handle h, int how,
                                                      uint32_t local, uint32_t restored)
{
	const kva_admission *a = sc_admitted(s, h);
	assert_non_null(a);
	assert_int_equal(a->how, how);
	assert_int_equal(a->local_tokens, local);
	assert_int_equal(a->restored_tokens, restored);
	return a;
}

static inline const kva_ended *sc_ended(struct sc *s, kva_handle h)
{
	for (uint32_t i = 0; i < s->plan.n_ended; i++)
		if (s->ended[i].handle.id == h.id && s->ended[i].handle.gen == h.gen &&
		    s->ended[i].handle.slot == h.slot)
			return &s->ended[i];
	return NULL;
}

/* Reports every copy job of the last step's plan with `status` from every rank. */
static inline uint32_t sc_copies_done(struct sc *s, int status)
{
	uint32_t n = s->plan.n_copies;
	for (uint32_t i = 0; i < n; i++)
		assert_int_equal(kva_copy_done(s->e, s->copies[i].token, s->copies[i].rank, status), 0);
	return n;
}

static inline uint8_t sc_state(struct sc *s, kva_handle h)
{
	kva_request_info info;
	if (kva_query(s->e, h, &info) != 0)
		return 0;
	return info.state;
}

static inline kva_stats sc_stats(struct sc *s)
{
	kva_stats st;
	kva_stats_get(s->e, &st);
	return st;
}

/* Credit conservation at quiescence. */
static inline void sc_assert_conserved(struct sc *s)
{
	kva_stats st = sc_stats(s);
	assert_int_equal(st.free_pages + st.reserved_pages + st.in_use_pages + st.draining_pages,
	                 st.total_pages);
}

static inline uint64_t sc_free_pages(struct sc *s) { return sc_stats(s).free_pages; }

/* Occupies `pages` credits with a running recompute request (no key). */
static inline kva_handle sc_occupy(struct sc *s, uint64_t id, uint32_t pages)
{
	kva_handle h = sc_submit(s, id, 0, 16);
	sc_step(s, 0);
	assert_non_null(sc_admitted(s, h));
	if (pages > 1)
		assert_int_equal(kva_grow(s->e, h, pages - 1, NULL), 0);
	return h;
}

#endif
