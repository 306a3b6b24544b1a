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
 * Each thread submits batches of BATCH; between batches (untimed) the
 * threads meet at a barrier and thread 0 consumes everything: for BM_submit
 * the scheduler ingests the requests (no prefix key: they are admitted to
 * recompute), finishes them and reports them, so the engine stays small.
 * Throughput is items_per_second (real time).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "bm.h"
#include "engine_internal.h"
#include "fixture.h"
#include "gbench.h"
#include "inbox.h"
#include "rcu_thread.h"

#define BATCH 1024

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

struct producer {
	void (*setup)(void);
	void (*produce)(uint64_t id);
	void (*consume)(void); /* thread 0, all producers paused */
	void (*teardown)(void);
};

static pthread_barrier_t barrier;

static struct rec *rec_new(uint64_t id)
{
	struct rec *r = kva__alloc(sizeof(*r));
	if (!r)
		bx_check(-ENOMEM, "record");
	memset(r, 0, sizeof(*r));
	r->id = id;
	return r;
}

static void run(gb_state *s, const struct producer *p)
{
	int tid = gb_thread_index(s);
	if (tid == 0) {
		/* before the start barrier: the other threads wait for this */
		p->setup();
		pthread_barrier_init(&barrier, NULL, (unsigned)gb_thread_count(s));
	}
	uint64_t id = (uint64_t)(tid + 1) << 40;
	size_t n;
	while ((n = gb_keep_running_batch(s, BATCH))) {
		for (size_t i = 0; i < n; i++)
			p->produce(id++);
		gb_pause(s);
		pthread_barrier_wait(&barrier);
		if (tid == 0)
			p->consume();
		pthread_barrier_wait(&barrier);
		gb_resume(s);
	}
	gb_set_items_processed(s, gb_iterations_done(s));
	if (tid == 0) {
		/* after the finish barrier: every thread is out of its loop */
		p->teardown();
		pthread_barrier_destroy(&barrier);
	}
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

static const struct producer submit = {submit_setup, submit_one, submit_consume, submit_teardown};

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
	if (!kva_inbox_drain(&inbox, &b))
		return;
	while ((n = kva_inbox_batch_pop(&b)))
		kva__free(caa_container_of(n, struct rec, node), sizeof(struct rec));
}

static void wfcq_teardown(void)
{
	wfcq_consume();
	kva_inbox_fini(&inbox);
}

static const struct producer wfcq = {wfcq_setup, wfcq_one, wfcq_consume, wfcq_teardown};

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

static const struct producer mutexq = {mutex_setup, mutex_one, mutex_consume, mutex_consume};

static void bm_producer(gb_state *s, void *arg) { run(s, arg); }

void bm_register_submit(void)
{
	static const struct {
		const char *name;
		const struct producer *p;
	} all[] = {{"BM_submit", &submit},
	           {"BM_wfcq_enqueue_raw", &wfcq},
	           {"BM_mutex_queue", &mutexq}};
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
		gb_bench *b = gb_register(all[i].name, bm_producer, (void *)all[i].p);
		gb_threads(gb_threads(gb_use_real_time(b), 1), 2);
	}
}
