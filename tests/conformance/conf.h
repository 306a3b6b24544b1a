/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Conformance suite helpers: small additions to the scenario harness used by
 * the ports of the original vLLM / LMCache tests (tests/conformance/CATALOGUE.md).
 */
#ifndef KVA_TEST_CONF_H
#define KVA_TEST_CONF_H

#include "scenario/scenario.h"

static inline kva_request_info conf_info(struct sc *s, kva_handle h)
{
	kva_request_info i;
	assert_int_equal(kva_query(s->e, h, &i), 0);
	return i;
}

/* Steps (dt between steps) until h is admitted; fails after `max` steps. */
static inline const kva_admission *conf_step_until_admitted(struct sc *s, kva_handle h,
                                                            uint64_t dt, int max)
{
	for (int i = 0; i < max; i++) {
		sc_step(s, dt);
		const kva_admission *a = sc_admitted(s, h);
		if (a)
			return a;
	}
	fail_msg("request %llu not admitted within %d steps", (unsigned long long)h.id, max);
	return NULL;
}

/* The copy jobs of the last step that belong to h (all ranks). */
static inline uint32_t conf_jobs_of(struct sc *s, kva_handle h, kva_copy_job *out, uint32_t cap)
{
	uint32_t n = 0;
	for (uint32_t i = 0; i < s->plan.n_copies; i++)
		if (s->copies[i].handle.id == h.id && s->copies[i].handle.gen == h.gen &&
		    s->copies[i].handle.slot == h.slot && n < cap)
			out[n++] = s->copies[i];
	return n;
}

/* The copy jobs of the last step, kept across later steps (sc_occupy steps). */
struct conf_jobs {
	kva_copy_job job[64];
	uint32_t n;
};

static inline struct conf_jobs conf_save_copies(struct sc *s)
{
	struct conf_jobs j = {.n = 0};
	for (uint32_t i = 0; i < s->plan.n_copies && j.n < 64; i++)
		j.job[j.n++] = s->copies[i];
	return j;
}

/* Every rank of every saved job reports `status`. */
static inline void conf_report(struct sc *s, const struct conf_jobs *j, int status)
{
	for (uint32_t i = 0; i < j->n; i++)
		assert_int_equal(kva_copy_done(s->e, j->job[i].token, j->job[i].rank, status), 0);
}

/* Whether page p appears in the first n entries of pages. */
static inline int conf_has_page(const uint32_t *pages, uint32_t n, uint32_t p)
{
	for (uint32_t i = 0; i < n; i++)
		if (pages[i] == p)
			return 1;
	return 0;
}

/* Position of h in the waiting queue (0 = head), -1 if not listed. */
struct conf_pos {
	kva_handle h;
	int pos;
};

static int conf_pos_cb(void *ctx, const kva_waiting_info *w)
{
	struct conf_pos *p = ctx;
	if (w->handle.id == p->h.id && w->handle.gen == p->h.gen && w->handle.slot == p->h.slot) {
		p->pos = (int)w->position;
		return 1;
	}
	return 0;
}

static inline int conf_queue_position(struct sc *s, kva_handle h)
{
	struct conf_pos p = {h, -1};
	assert_true(kva_waiting_foreach(s->e, conf_pos_cb, &p, 0) >= 0);
	return p.pos;
}

#endif
