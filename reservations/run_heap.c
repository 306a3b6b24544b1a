/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The run heap (PRIORITY order): RUNNING requests, largest (priority,
 * arrival) on top — the request vLLM's priority policy preempts first. A
 * request's index is in its trailer (prio.h: `at`) so it leaves in O(log R).
 * At most max_running entries: allocated once, never grows. Calls nothing.
 */
#include <errno.h>

#include "alloc.h"
#include "prio.h"
#include "run_heap.h"

int kva__run_heap_init(kva_engine *e)
{
	if (e->cfg.order != KVA_ORDER_PRIORITY)
		return 0;
	e->run = kva__alloc(e->cfg.max_running * sizeof(*e->run));
	return e->run ? 0 : -ENOMEM;
}

void kva__run_heap_fini(kva_engine *e)
{
	kva__free(e->run, e->cfg.max_running * sizeof(*e->run));
	e->run = NULL;
}

static bool above(const struct kva__run_ent *a, const struct kva__run_ent *b)
{
	return a->priority != b->priority ? a->priority > b->priority : a->arrival > b->arrival;
}

static void put(kva_engine *e, uint32_t i, struct kva__run_ent x)
{
	e->run[i] = x;
	kva__prio(x.r)->at = i;
}

static void sift_up(kva_engine *e, uint32_t i, struct kva__run_ent x)
{
	while (i > 0 && above(&x, &e->run[(i - 1) / 2])) {
		put(e, i, e->run[(i - 1) / 2]);
		i = (i - 1) / 2;
	}
	put(e, i, x);
}

static void sift_down(kva_engine *e, uint32_t i, struct kva__run_ent x)
{
	for (;;) {
		uint32_t c = 2 * i + 1;
		if (c >= e->n_run)
			break;
		if (c + 1 < e->n_run && above(&e->run[c + 1], &e->run[c]))
			c++;
		if (!above(&e->run[c], &x))
			break;
		put(e, i, e->run[c]);
		i = c;
	}
	put(e, i, x);
}

/* The entry at i is replaced by x (sifted either way). */
static void replace(kva_engine *e, uint32_t i, struct kva__run_ent x)
{
	if (i > 0 && above(&x, &e->run[(i - 1) / 2]))
		sift_up(e, i, x);
	else
		sift_down(e, i, x);
}

static struct kva__run_ent entry(struct kva__req *r)
{
	const struct kva__prio *p = kva__prio(r);
	return (struct kva__run_ent){p->priority, p->arrival, r};
}

void kva__run_heap_on_state(kva_engine *e, struct kva__req *r, uint32_t to)
{
	bool in = r->flags & KVA__F_RUNHEAP;
	if (to == KVA_STATE_RUNNING && !in && e->n_run < e->cfg.max_running) {
		r->flags |= KVA__F_RUNHEAP;
		sift_up(e, e->n_run++, entry(r));
	} else if (to != KVA_STATE_RUNNING && in) {
		r->flags &= (uint16_t)~KVA__F_RUNHEAP;
		uint32_t i = kva__prio(r)->at;
		struct kva__run_ent last = e->run[--e->n_run];
		if (i < e->n_run)
			replace(e, i, last);
	}
}

void kva__run_heap_update(kva_engine *e, struct kva__req *r)
{
	if (r->flags & KVA__F_RUNHEAP)
		replace(e, kva__prio(r)->at, entry(r));
}

void kva__run_heap_hint(kva_engine *e)
{
	struct kva_waitq_node *n = kva_waitq_first(&e->waitq);
	if (!e->run || !e->n_run || !e->plan->head_blocked || !n)
		return;
	const struct kva__req *h = kva__req_of_wq(n);
	if (!(h->flags & KVA__F_DECIDED))
		return; /* it waits for its lookup, not for capacity */
	int64_t d = (int64_t)e->run[0].priority - kva__prio(h)->priority;
	e->plan->preempt_hint = d > 0 && d >= e->cfg.preempt_threshold;
}

int kva_preempt_candidate(kva_engine *e, kva_handle *out)
{
	if (!e || !out || !e->run)
		return -EINVAL;
	if (!e->n_run)
		return -ENOENT;
	*out = kva__rec_handle(e->run[0].r);
	return 0;
}
