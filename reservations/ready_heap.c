/* SPDX-License-Identifier: Apache-2.0 */
/*
 * READY restores (their copy done, their capacity owned): a min-heap on
 * queue_seq, the order they left the waiting queue (e->ready, e->n_ready;
 * each record's ready_at is its place). Calls nothing. Scheduler thread only.
 */
#include <stdlib.h>

#include "ready_heap.h"

/* Admission and reset take READY restores in the order they left the queue
 * (rule reset-returns-ready), whatever order their copies finish in. Copies on
 * different streams and ranks finish out of order, so a sorted list (insertion
 * from its tail) was quadratic: 65,535 completions in random order took one 18
 * s step. The heap is O(log R) per completion, admission and cancel. */
static void ready_put(kva_engine *e, uint32_t at, struct kva__ready_ent x)
{
	e->ready[at] = x;
	x.r->ready_at = at;
}

static void ready_sift_up(kva_engine *e, uint32_t at, struct kva__ready_ent x)
{
	while (at > 0 && e->ready[(at - 1) / 2].seq > x.seq) {
		ready_put(e, at, e->ready[(at - 1) / 2]);
		at = (at - 1) / 2;
	}
	ready_put(e, at, x);
}

static void ready_sift_down(kva_engine *e, uint32_t at, struct kva__ready_ent x)
{
	for (;;) {
		uint32_t c = 2 * at + 1;
		if (c >= e->n_ready)
			break;
		if (c + 1 < e->n_ready && e->ready[c + 1].seq < e->ready[c].seq)
			c++;
		if (e->ready[c].seq >= x.seq)
			break;
		ready_put(e, at, e->ready[c]);
		at = c;
	}
	ready_put(e, at, x);
}

void kva__ready_heap_push(kva_engine *e, struct kva__req *r)
{
	/* never full: a READY request holds one of max_running's credits */
	ready_sift_up(e, e->n_ready++, (struct kva__ready_ent){kva__grant(r)->queue_seq, r});
}

void kva__ready_heap_remove(kva_engine *e, struct kva__req *r)
{
	uint32_t at = r->ready_at;
	struct kva__ready_ent last = e->ready[--e->n_ready];
	if (at == e->n_ready)
		return;
	if (at > 0 && e->ready[(at - 1) / 2].seq > last.seq)
		ready_sift_up(e, at, last);
	else
		ready_sift_down(e, at, last);
}

struct kva__req *kva__ready_heap_first(const kva_engine *e)
{
	return e->n_ready ? e->ready[0].r : NULL;
}

static int ready_by_seq(const void *a, const void *b)
{
	uint64_t x = ((const struct kva__ready_ent *)a)->seq, y = ((const struct kva__ready_ent *)b)->seq;
	return x < y ? -1 : x > y;
}

void kva__ready_heap_sort(kva_engine *e)
{
	qsort(e->ready, e->n_ready, sizeof(*e->ready), ready_by_seq);
}

struct kva__req *kva__ready_heap_pop_last(kva_engine *e)
{
	return e->n_ready ? e->ready[--e->n_ready].r : NULL;
}
