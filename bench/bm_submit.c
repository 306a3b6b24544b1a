/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Submission from 1 and 2 threads against two baselines that allocate a
 * record of kvadmit's size from kvadmit's jemalloc arena and zero it (what
 * kva_submit's slot + field initialisation stands for):
 *   BM_submit            kva_submit: a slot from the thread's cache, its
 *                        fields, one wait-free enqueue on the thread's lane
 *                        of the engine's inbox;
 *   BM_wfcq_enqueue_raw  the allocation and the same liburcu cds_wfcq
 *                        enqueue (through lockfree/inbox), nothing else;
 *   BM_mutex_queue       the allocation and a pthread mutex around a list
 *                        append, the way a locked request queue does it.
 * Threads submit in lockstep batches (lockstep.h: time per item is the
 * batch's wall time over all threads' items; counter cpu_ns is one thread's
 * CPU time per item). Between batches, untimed, thread 0 consumes
 * everything: for BM_submit the scheduler ingests the requests (no prefix
 * key: they are admitted to recompute), finishes and reports them, so the
 * engine stays small.
 *
 * Filling one queue (BM_submit_fill/N against BM_wfcq_enqueue_raw/N): N
 * submits from one thread into a fresh engine (or queue) that keeps every
 * one, timed as one stretch (manual time, per submit; counter cpu_ns is the
 * thread's CPU time per submit), so the costs that grow with what is kept
 * (slab growth, cold memory) are in the figure; then the engine's
 * one step that ingests them all (counters ingest_ns, ingest_cpu_ns).
 *
 * One thread, many engines (BM_submit_engines/E): the same submits from one
 * thread spread round-robin over E engines (1, 3, 8); E = 8 against E = 1
 * is what a thread's per-engine caches cost when it serves several.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>

#include "alloc.h"
#include "bm.h"
#include "record.h"
#include "fixture.h"
#include "gbench.h"
#include <kvadmit/lockfree/inbox.h>
#include "lockstep.h"
#include <kvadmit/lockfree/rcu_thread.h>

#define BATCH 4096 /* per thread per batch */

/* A request record as a baseline queues it: kvadmit's record size. */
struct rec {
	union {
		struct {
			struct kva_inbox_node node; /* BM_wfcq_enqueue_raw */
			struct rec *next;           /* BM_mutex_queue */
			uint64_t id;
			kva_request req; /* the request, as kva_submit copies it */
		};
		char size_[sizeof(struct kva__req)];
	};
};

/* Writes the link, the id and the request itself, as kva_submit writes its
 * slot: no memset (slab memory comes zeroed), only the request's fields.
 * Zeroing the whole record, as this baseline once did, made it heavier than
 * what it is compared with. */
static struct rec *rec_new(uint64_t id)
{
	struct rec *r = kva__alloc(sizeof(*r));
	if (!r)
		bx_check(-ENOMEM, "record");
	kva_inbox_node_init(&r->node);
	r->next = NULL;
	r->id = id;
	r->req = (kva_request){.id = id, .prompt_tokens = BX_PAGE_TOKENS};
	return r;
}

/* ---- BM_submit ------------------------------------------------------------ */

static struct bx *engine;

static void submit_setup(void) { engine = bx_new(); }

static void submit_one(uint64_t id)
{
	kva_request r = {.id = id, .prefix_key = 0, .prompt_tokens = BX_PAGE_TOKENS};
	kva_handle h;
	bx_check(kva_submit(engine->e, &r, &h), "kva_submit");
}

/* Ingests, admits, finishes and reports everything submitted to b so far. */
static void drain(struct bx *b)
{
	for (;;) {
		int n = bx_step(b);
		if (n == 0 && b->plan.events == 0)
			break;
		for (int i = 0; i < n; i++)
			bx_check(kva_finish(b->e, b->plan.admitted[i].handle), "kva_finish");
	}
}

/* drain, and lets call_rcu free the records now rather than during the next
 * batch (the baselines free theirs here too). */
static void submit_consume(void)
{
	drain(engine);
	urcu_memb_barrier();
}

static void submit_teardown(void)
{
	submit_consume();
	bx_free(engine);
	engine = NULL;
}

static const struct lockstep submit = {submit_setup, submit_one, submit_consume, submit_teardown,
                                       BATCH};

/* ---- BM_wfcq_enqueue_raw ---------------------------------------------------- */

static struct kva_inbox inbox;

static void wfcq_setup(void) { kva_inbox_init(&inbox); }

static void wfcq_one(uint64_t id)
{
	struct rec *r = rec_new(id);
	kva_inbox_node_init(&r->node);
	kva_inbox_push(&inbox, &r->node);
}

static void wfcq_consume(void)
{
	struct kva_inbox_batch b;
	struct kva_inbox_node *n;
	if (!kva_inbox_drain_blocking(&inbox, &b))
		return;
	while ((n = kva_inbox_batch_pop_blocking(&b)))
		kva__free(caa_container_of(n, struct rec, node), sizeof(struct rec));
}

static void wfcq_teardown(void)
{
	wfcq_consume();
	kva_inbox_fini(&inbox);
}

static const struct lockstep wfcq = {wfcq_setup, wfcq_one, wfcq_consume, wfcq_teardown, BATCH};

/* ---- BM_mutex_queue ----------------------------------------------------------- */

static struct {
	pthread_mutex_t lock;
	struct rec *head, **tail;
} mq = {PTHREAD_MUTEX_INITIALIZER, NULL, NULL};

static void mutex_setup(void) { mq.tail = &mq.head; }

static void mutex_one(uint64_t id)
{
	struct rec *r = rec_new(id);
	pthread_mutex_lock(&mq.lock);
	*mq.tail = r;
	mq.tail = &r->next;
	pthread_mutex_unlock(&mq.lock);
}

static void mutex_consume(void)
{
	pthread_mutex_lock(&mq.lock);
	struct rec *r = mq.head;
	mq.head = NULL;
	mq.tail = &mq.head;
	pthread_mutex_unlock(&mq.lock);
	while (r) {
		struct rec *next = r->next;
		kva__free(r, sizeof(*r));
		r = next;
	}
}

static const struct lockstep mutexq = {mutex_setup, mutex_one, mutex_consume, mutex_consume,
                                       BATCH};

/* ---- filling one queue: BM_submit_fill, BM_wfcq_enqueue_raw/N -------------- */

struct fill_time {
	uint64_t wall, cpu;
};

static void fill_timed(gb_state *s, struct fill_time *t, uint64_t w0, uint64_t c0)
{
	uint64_t c1 = bx_cpu_ns(), w1 = bx_clock_ns();
	t->wall += w1 - w0;
	t->cpu += c1 - c0;
	gb_set_iteration_time(s, (double)(w1 - w0) / 1e9);
}

static void fill_report(gb_state *s, const struct fill_time *t, size_t n)
{
	double it = (double)gb_iterations_done(s);
	gb_set_items_processed(s, gb_iterations_done(s));
	gb_counter(s, "cpu_ns", it > 0 ? (double)t->cpu / it : 0, GB_COUNTER_DEFAULT);
	gb_counter(s, "kept", (double)n, GB_COUNTER_DEFAULT);
}

/* N kva_submit into one fresh engine that keeps them all (no step between
 * them), then the one step that ingests all N: each request has a prefix key
 * and the directory queues the lookup without answering (as a directory
 * client hands it to its RPC), so the step is ingest + lookup issue only and
 * the undecided head admits nothing. Engine built and destroyed untimed. */
static void bm_submit_fill(gb_state *s, void *arg)
{
	(void)arg;
	size_t n = bx_cap((size_t)gb_range_arg(s, 0));
	struct fill_time t = {0, 0}, ingest = {0, 0};
	while (gb_keep_running_batch(s, n)) {
		struct bx *b = bx_new();
		b->answer_now = false;
		bx_pending_reserve(b, n);
		uint64_t id0 = b->next_id;
		kva_handle h;
		uint64_t w0 = bx_clock_ns(), c0 = bx_cpu_ns();
		for (uint64_t id = id0 + 1; id <= id0 + n; id++) {
			kva_request r = {.id = id, .prefix_key = id, .prompt_tokens = BX_PROMPT};
			if (kva_submit(b->e, &r, &h) != 0)
				bx_check(-ENOMEM, "kva_submit");
		}
		fill_timed(s, &t, w0, c0);
		b->next_id = id0 + n;

		w0 = bx_clock_ns();
		c0 = bx_cpu_ns();
		bx_step(b);
		uint64_t c1 = bx_cpu_ns(), w1 = bx_clock_ns();
		ingest.wall += w1 - w0;
		ingest.cpu += c1 - c0;
		if (b->plan.events != n || b->plan.n_admitted || b->n_pending != n)
			bx_check(-EPROTO, "the ingest step");
		bx_free(b);
		urcu_memb_barrier();
	}
	fill_report(s, &t, n);
	double it = (double)gb_iterations_done(s);
	if (it > 0) {
		gb_counter(s, "ingest_ns", (double)ingest.wall / it, GB_COUNTER_DEFAULT);
		gb_counter(s, "ingest_cpu_ns", (double)ingest.cpu / it, GB_COUNTER_DEFAULT);
	}
}

/* The baseline for BM_submit_fill: N records allocated and enqueued as
 * BM_wfcq_enqueue_raw does it, into one queue that keeps them all; the queue
 * is emptied and freed untimed. */
static void bm_wfcq_fill(gb_state *s, void *arg)
{
	(void)arg;
	size_t n = bx_cap((size_t)gb_range_arg(s, 0));
	struct fill_time t = {0, 0};
	while (gb_keep_running_batch(s, n)) {
		wfcq_setup();
		uint64_t w0 = bx_clock_ns(), c0 = bx_cpu_ns();
		for (uint64_t id = 1; id <= n; id++)
			wfcq_one(id);
		fill_timed(s, &t, w0, c0);
		wfcq_teardown();
	}
	fill_report(s, &t, n);
}

/* ---- one thread, many engines: BM_submit_engines/E ------------------------ */

#define ENGINES_MAX 8

/* BATCH submits per timed batch from one thread, round-robin over E fresh
 * engines (submit i to engine i % E), as a frontend thread that serves one
 * engine per model, GPU or tenant hands them out; per submit (manual time;
 * counter cpu_ns, the thread's CPU time per submit, is what the target
 * compares: E = 8 against E = 1, the same requests in the same batches).
 * Between batches, untimed, every engine ingests, admits and finishes its
 * share and call_rcu frees the records. One untimed batch first, so every
 * engine's slab has its first chunk. */
static void bm_submit_engines(gb_state *s, void *arg)
{
	(void)arg;
	size_t n_engines = (size_t)gb_range_arg(s, 0);
	struct bx *eng[ENGINES_MAX];
	if (n_engines < 1 || n_engines > ENGINES_MAX) {
		gb_skip_with_error(s, "1 to ENGINES_MAX engines");
		gb_keep_running_batch(s, 1);
		return;
	}
	for (size_t i = 0; i < n_engines; i++)
		eng[i] = bx_new();
	struct fill_time t = {0, 0};
	uint64_t id = 0;
	kva_handle h;
	for (bool timed = false;; timed = true) {
		if (timed && !gb_keep_running_batch(s, BATCH))
			break;
		uint64_t w0 = bx_clock_ns(), c0 = bx_cpu_ns();
		for (size_t i = 0; i < BATCH; i++) {
			kva_request r = {.id = ++id, .prompt_tokens = BX_PAGE_TOKENS};
			bx_check(kva_submit(eng[i % n_engines]->e, &r, &h), "kva_submit");
		}
		if (timed)
			fill_timed(s, &t, w0, c0);
		for (size_t i = 0; i < n_engines; i++)
			drain(eng[i]);
		urcu_memb_barrier();
	}
	double it = (double)gb_iterations_done(s);
	gb_set_items_processed(s, gb_iterations_done(s));
	gb_counter(s, "cpu_ns", it > 0 ? (double)t.cpu / it : 0, GB_COUNTER_DEFAULT);
	gb_counter(s, "engines", (double)n_engines, GB_COUNTER_DEFAULT);
	for (size_t i = 0; i < n_engines; i++)
		bx_free(eng[i]);
}

void bm_register_submit(void)
{
	lockstep_register("BM_submit", &submit);
	lockstep_register("BM_wfcq_enqueue_raw", &wfcq);
	lockstep_register("BM_mutex_queue", &mutexq);
	gb_arg(gb_use_manual_time(gb_register("BM_submit_fill", bm_submit_fill, NULL)), 1000000);
	gb_arg(gb_use_manual_time(gb_register("BM_wfcq_enqueue_raw", bm_wfcq_fill, NULL)), 1000000);
	gb_bench *b = gb_use_manual_time(gb_register("BM_submit_engines", bm_submit_engines, NULL));
	gb_arg(gb_arg(gb_arg(b, 1), 3), ENGINES_MAX);
}
