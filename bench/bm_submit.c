/*
 * Submission from 1 and 2 threads against two baselines that do the same
 * allocation (a record of kvadmit's size from kvadmit's jemalloc arena,
 * zeroed, as kva_submit zeroes its record):
 *   BM_submit            kva_submit: allocation, id table insert, one
 *                        wait-free enqueue on the engine's inbox;
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
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "bm.h"
#include "record.h"
#include "fixture.h"
#include "gbench.h"
#include "inbox.h"
#include "lockstep.h"
#include "rcu_thread.h"

#define BATCH 4096 /* per thread per batch */

/* A request record as a baseline queues it: kvadmit's record size. */
struct rec {
	union {
		struct {
			struct kva_inbox_node node; /* BM_wfcq_enqueue_raw */
			struct rec *next;           /* BM_mutex_queue */
			uint64_t id;
		};
		char size_[sizeof(struct kva__req)];
	};
};

static struct rec *rec_new(uint64_t id)
{
	struct rec *r = kva__alloc(sizeof(*r));
	if (!r)
		bx_check(-ENOMEM, "record");
	memset(r, 0, sizeof(*r));
	r->id = id;
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

/* Ingests, admits, finishes and reports everything submitted so far, and
 * lets call_rcu free the records now rather than during the next batch
 * (the baselines free theirs here too). */
static void submit_consume(void)
{
	for (;;) {
		int n = bx_step(engine);
		if (n == 0 && engine->plan.events == 0)
			break;
		for (int i = 0; i < n; i++)
			bx_check(kva_finish(engine->e, engine->plan.admitted[i].handle), "kva_finish");
	}
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

void bm_register_submit(void)
{
	lockstep_register("BM_submit", &submit);
	lockstep_register("BM_wfcq_enqueue_raw", &wfcq);
	lockstep_register("BM_mutex_queue", &mutexq);
}
