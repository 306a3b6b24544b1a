/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A reference model of lockfree/pagepool for single-threaded tests (unit
 * test and fuzz_lockfree): a bool per id and the hint, taking ids in the
 * order pagepool.h documents: lowest first within a 64-id word, words
 * ascending from the hint, wrapping. The hint is the word of a put's first
 * id, or the last word a take took from.
 */
#ifndef KVA_TEST_PAGEPOOL_MODEL_H
#define KVA_TEST_PAGEPOOL_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define PPM_MAX 16384u

struct ppm {
	bool in[PPM_MAX];
	uint32_t n, words, count, hint;
};

/* n <= PPM_MAX */
static inline void ppm_init(struct ppm *m, uint32_t n)
{
	if (n > PPM_MAX)
		n = PPM_MAX;
	memset(m->in, 0, sizeof(m->in));
	for (uint32_t i = 0; i < n; i++)
		m->in[i] = true;
	m->n = m->count = n;
	m->words = (n + 63) / 64;
	m->hint = 0;
}

/* false (nothing taken) when fewer than k are in the pool. */
static inline bool ppm_take(struct ppm *m, uint32_t *ids, size_t k)
{
	if (k == 0)
		return true;
	if (k > m->count)
		return false;
	size_t got = 0;
	uint32_t start = m->hint < m->words ? m->hint : 0;
	for (uint32_t i = 0; got < k; i++) {
		uint32_t w = (start + i) % m->words;
		for (uint32_t id = w * 64; id < (w + 1) * 64 && id < m->n && got < k; id++)
			if (m->in[id]) {
				m->in[id] = false;
				ids[got++] = id;
				m->hint = w;
			}
	}
	m->count -= (uint32_t)k;
	return true;
}

static inline void ppm_put(struct ppm *m, const uint32_t *ids, size_t k)
{
	if (k == 0)
		return;
	for (size_t i = 0; i < k; i++)
		m->in[ids[i]] = true;
	m->hint = ids[0] / 64;
	m->count += (uint32_t)k;
}

#endif
