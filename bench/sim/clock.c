/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The simulated clock's event queue: a binary min-heap ordered by (time,
 * insertion sequence), so events at the same instant come out in the order
 * they were scheduled and every run is reproducible. And the run's one
 * failure record, stamped with the simulated instant (every file reports
 * into it; the serving loop stops on it).
 */
#include <stdio.h>
#include <stdlib.h>

#include "sim.h"

void sim_fatal(struct sim *s, const char *what, int rc)
{
	if (s->fatal)
		return;
	s->fatal = rc ? rc : -1;
	snprintf(s->fatal_msg, sizeof(s->fatal_msg), "%s: %s (%d) at t=%.6f s", what,
		 kva_strerror(rc), rc, (double)s->now_ns / SIM_NS_PER_S);
}

static bool before(const struct sim_event *a, const struct sim_event *b)
{
	return a->t_ns < b->t_ns || (a->t_ns == b->t_ns && a->seq < b->seq);
}

int sim_clock_init(struct sim_clock *c)
{
	c->n = 0;
	c->cap = 256;
	c->next_seq = 0;
	c->n_copies = 0;
	c->heap = malloc(c->cap * sizeof(*c->heap));
	return c->heap ? 0 : -1;
}

void sim_clock_fini(struct sim_clock *c)
{
	free(c->heap);
	c->heap = NULL;
	c->n = c->cap = 0;
}

int sim_clock_push(struct sim_clock *c, struct sim_event ev)
{
	if (c->n == c->cap) {
		struct sim_event *h = realloc(c->heap, 2 * (size_t)c->cap * sizeof(*h));
		if (!h)
			return -1;
		c->heap = h;
		c->cap *= 2;
	}
	ev.seq = c->next_seq++;
	if (ev.kind == SIM_EV_COPY)
		c->n_copies++;
	uint32_t i = c->n++;
	while (i > 0) {
		uint32_t p = (i - 1) / 2;
		if (!before(&ev, &c->heap[p]))
			break;
		c->heap[i] = c->heap[p];
		i = p;
	}
	c->heap[i] = ev;
	return 0;
}

uint64_t sim_clock_next(const struct sim_clock *c)
{
	return c->n ? c->heap[0].t_ns : UINT64_MAX;
}

bool sim_clock_pop_due(struct sim_clock *c, uint64_t now_ns, struct sim_event *out)
{
	if (!c->n || c->heap[0].t_ns > now_ns)
		return false;
	*out = c->heap[0];
	if (out->kind == SIM_EV_COPY)
		c->n_copies--;
	struct sim_event last = c->heap[--c->n];
	uint32_t i = 0;
	for (;;) {
		uint32_t l = 2 * i + 1, r = l + 1, m = i;
		const struct sim_event *best = &last;
		if (l < c->n && before(&c->heap[l], best)) {
			m = l;
			best = &c->heap[l];
		}
		if (r < c->n && before(&c->heap[r], best))
			m = r;
		if (m == i)
			break;
		c->heap[i] = c->heap[m];
		i = m;
	}
	if (c->n)
		c->heap[i] = last;
	return true;
}
