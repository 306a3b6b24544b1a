/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The run heap (PRIORITY order): RUNNING requests, largest (priority,
 * arrival) on top — the request vLLM's priority policy preempts first.
 *
 * Deletion is lazy, so that a request's start and end never write another
 * record: an entry names its request's run stamp (prio.h: `at`, set anew
 * each time the request starts running or its priority changes while it
 * runs) and generation, and is stale once the request stopped running
 * (KVA__F_RUNHEAP clear) or has a newer stamp. Stale entries leave when they
 * reach the top, and when they are half the heap (or it holds twice
 * max_running entries) it keeps only the live ones: a rebuild in O(n) that
 * drops at least n / 2 stale entries, O(1) amortized over the ends and
 * changes that made them stale. Each start counts the admission by
 * priority class. Calls alloc.c and stats.c.
 */
#include <errno.h>

#include "alloc.h"
#include "prio.h"
#include "run_heap.h"
#include "stats.h"

static uint32_t heap_cap(const kva_engine *e)
{
	return 2u * e->cfg.max_running + 1;
}

int kva__run_heap_init(kva_engine *e)
{
	if (e->cfg.order != KVA_ORDER_PRIORITY)
		return 0;
	e->run = kva__alloc(heap_cap(e) * sizeof(*e->run));
	return e->run ? 0 : -ENOMEM;
}

void kva__run_heap_fini(kva_engine *e)
{
	if (e->run)
		kva__free(e->run, heap_cap(e) * sizeof(*e->run));
	e->run = NULL;
}

/* kva_stats.admitted_by_priority's classes: < 0, 0, 1, 2-3, 4-7, 8-15, 16-255, 256+. */
static unsigned priority_class(int32_t p)
{
	if (p < 0)
		return 0;
	if (p < 16)
		return 1 + (p ? 32u - (unsigned)__builtin_clz((unsigned)p) : 0u);
	return p < 256 ? 6 : 7;
}

static bool above(const struct kva__run_ent *a, const struct kva__run_ent *b)
{
	return a->priority != b->priority ? a->priority > b->priority : a->arrival > b->arrival;
}

static void sift_up(struct kva__run_ent *h, uint32_t i, struct kva__run_ent x)
{
	while (i > 0 && above(&x, &h[(i - 1) / 2])) {
		h[i] = h[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	h[i] = x;
}

static void sift_down(struct kva__run_ent *h, uint32_t n, uint32_t i, struct kva__run_ent x)
{
	for (;;) {
		uint32_t c = 2 * i + 1;
		if (c >= n)
			break;
		if (c + 1 < n && above(&h[c + 1], &h[c]))
			c++;
		if (!above(&h[c], &x))
			break;
		h[i] = h[c];
		i = c;
	}
	h[i] = x;
}

/* The generation first: a retired record's body belongs to the slab (its
 * free batches are written on the reclaim thread), and only the scheduler,
 * this thread, retires records, so the generation it reads is its own. */
static bool live(const struct kva__run_ent *x)
{
	return atomic_load_explicit(&x->r->hdr.gen, memory_order_relaxed) == x->gen &&
	       (x->r->flags & KVA__F_RUNHEAP) && kva__prio(x->r)->at == x->stamp;
}

/* Only the live entries stay, heapified (Floyd: O(R)). */
static void rebuild(kva_engine *e)
{
	uint32_t n = 0;
	for (uint32_t i = 0; i < e->n_run; i++)
		if (live(&e->run[i]))
			e->run[n++] = e->run[i];
	e->n_run = n;
	for (uint32_t i = n / 2; i-- > 0;)
		sift_down(e->run, n, i, e->run[i]);
}

/* Entries below which a heap is never rebuilt for its stale ones. */
#define REBUILD_MIN 64u

static void push(kva_engine *e, struct kva__req *r)
{
	/* Full (at most max_running live: room for one more), or at least
	 * half stale: a rebuild's O(n) is then at most twice the stale
	 * entries it drops, each paid once by the end that made it stale.
	 * Kept near the running count, the heap stays small in the cache,
	 * where waiting for the cap (2 x max_running) let an engine of 9,000
	 * running and a cap of 65,535 sift through 130,000 entries. */
	if (e->n_run == heap_cap(e) || e->n_run >= 2 * e->n_run_live + REBUILD_MIN)
		rebuild(e);
	struct kva__prio *p = kva__prio(r);
	p->at = ++e->run_stamp;
	sift_up(e->run, e->n_run++,
	        (struct kva__run_ent){p->priority, p->at, p->arrival, r,
	                              atomic_load_explicit(&r->hdr.gen, memory_order_relaxed)});
}

void kva__run_heap_on_state(kva_engine *e, struct kva__req *r, uint32_t to)
{
	bool in = r->flags & KVA__F_RUNHEAP;
	if (to == KVA_STATE_RUNNING && !in) { /* an admission (kva__rec_set_state) */
		r->flags |= KVA__F_RUNHEAP;
		e->n_run_live++;
		push(e, r);
		kva__st_add_single_writer(e, (enum kva__stat)(ST_ADMIT_PRIO0 +
		                                              priority_class(kva__prio(r)->priority)),
		                          1);
	} else if (to != KVA_STATE_RUNNING && in) {
		r->flags &= (uint16_t)~KVA__F_RUNHEAP; /* its entry is stale from now on */
		e->n_run_live--;
	}
}

void kva__run_heap_update(kva_engine *e, struct kva__req *r)
{
	if (r->flags & KVA__F_RUNHEAP)
		push(e, r); /* the new stamp makes the old entry stale */
}

/* The live top, stale entries above it popped; NULL when none runs. */
static struct kva__req *top(kva_engine *e)
{
	while (e->n_run && !live(&e->run[0])) {
		struct kva__run_ent last = e->run[--e->n_run];
		if (e->n_run)
			sift_down(e->run, e->n_run, 0, last);
	}
	return e->n_run ? e->run[0].r : NULL;
}

void kva__run_heap_hint(kva_engine *e)
{
	struct kva_waitq_node *n = kva_waitq_first(&e->waitq);
	if (!e->run || !e->plan->head_blocked || !n)
		return;
	const struct kva__req *h = kva__req_of_wq(n);
	const struct kva__req *v = (h->flags & KVA__F_DECIDED) ? top(e) : NULL;
	if (!v) /* nothing runs, or the head waits for its lookup, not for capacity */
		return;
	int64_t d = (int64_t)kva__prio(v)->priority - kva__prio(h)->priority;
	e->plan->preempt_hint = d > 0 && d >= e->cfg.preempt_threshold;
}

int kva_preempt_candidate(kva_engine *e, kva_handle *out)
{
	if (!e || !out || !e->run)
		return -EINVAL;
	struct kva__req *r = top(e);
	if (!r)
		return -ENOENT;
	*out = kva__rec_handle(r);
	return 0;
}
