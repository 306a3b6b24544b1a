/* SPDX-License-Identifier: Apache-2.0 */
/*
 * completion: when an issued CUDA import job may be reported, and with which
 * status — the CUDA importer's completion state machine, without CUDA, so
 * that it is unit-tested with injected statuses (tests/unit/
 * test_cuda_completion.c). Header-only: the CUDA importer is built only with
 * the toolkit, the test in every build.
 *
 * Each issued job sits in its stream's FIFO (completions of one stream come
 * in stream order). A job is reported when
 *   - its completion marker arrived (host-function mode: the host function
 *     ran; event mode needs none), and
 *   - the query of its real status (the event recorded after its copies, or
 *     the stream) says done or failed: the copies' own asynchronous errors
 *     are read there, not only the enqueue result.
 * A job that gets no marker (its cudaLaunchHostFunc, or in event mode its
 * event, could not be enqueued) is pushed with nomarker set: the query
 * alone decides when it is done.
 * A sticky error (the context is corrupted: CUDA runs no more host
 * functions, so markers stop) makes the importer dead: every outstanding
 * job of every stream is reported failed at once, and later jobs are
 * refused or failed by the caller, never pushed (a job pushed once dead
 * would never be reported). A job reported while its marker may
 * still come (host-function mode) is not released until the marker arrives
 * or the importer is destroyed (kva__cq_release_zombies), so a late host
 * function never touches freed memory. In host-function mode the caller
 * also polls with watchdog = true on a CLOCK_MONOTONIC timeout while jobs
 * are outstanding: a sticky error is found although no marker comes.
 *
 * Every call: the progress loop only (one thread at a time); kva__cq_marked
 * is called there too, for markers drained from the host functions' inbox.
 */
#ifndef KVA_CUDA_COMPLETION_H
#define KVA_CUDA_COMPLETION_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What a query says about one job. */
enum kva__cq_status {
	KVA__CQ_PENDING = 0, /* its copies have not finished */
	KVA__CQ_DONE = 1,    /* finished without error */
	KVA__CQ_FAILED = 2,  /* this job failed; the importer goes on */
	KVA__CQ_STICKY = 3,  /* the context is broken: every job fails, for good */
};

struct kva__cq_node {
	struct kva__cq_node *next; /* stream FIFO, then the zombie list */
	uint32_t stream;
	bool marked;   /* host-function mode: its host function ran */
	bool nomarker; /* set by the caller before the push: no marker will come */
	bool reported; /* reported while its marker may still come */
	int status;    /* an error already known at enqueue (negative errno), or 0 */
};

/* Returns enum kva__cq_status for n; for FAILED and STICKY *err receives
 * the negative errno to report. */
typedef int (*kva__cq_query_fn)(void *ctx, struct kva__cq_node *n, int *err);
/* Reports n's result (0 or a negative errno). */
typedef void (*kva__cq_report_fn)(void *ctx, struct kva__cq_node *n, int status);
/* n is no longer referenced by anything: free it. */
typedef void (*kva__cq_release_fn)(void *ctx, struct kva__cq_node *n);

struct kva__cq {
	struct kva__cq_node **head, **tail; /* per stream, nstreams each */
	uint32_t nstreams;
	bool hostfunc;           /* reports wait for the marker */
	bool dead;               /* a sticky error was seen */
	int dead_err;            /* what every job reports once dead */
	uint64_t outstanding;    /* jobs in the FIFOs */
	struct kva__cq_node *zombies; /* reported, marker still due */
	kva__cq_query_fn query;
	kva__cq_report_fn report;
	kva__cq_release_fn release;
	void *ctx;
};

/* head and tail: caller-owned arrays of nstreams pointers, zeroed. */
static inline void kva__cq_init(struct kva__cq *q, struct kva__cq_node **head,
				struct kva__cq_node **tail, uint32_t nstreams, bool hostfunc,
				kva__cq_query_fn query, kva__cq_report_fn report,
				kva__cq_release_fn release, void *ctx)
{
	*q = (struct kva__cq){.head = head, .tail = tail, .nstreams = nstreams,
			      .hostfunc = hostfunc, .query = query, .report = report,
			      .release = release, .ctx = ctx};
}

/* An issued job (its copies and completion marker are enqueued on stream
 * n->stream). The caller never pushes once the importer is dead. */
static inline void kva__cq_push(struct kva__cq *q, struct kva__cq_node *n)
{
	n->next = NULL;
	n->marked = n->nomarker; /* nothing to wait for: as if it had come */
	n->reported = false;
	if (q->tail[n->stream])
		q->tail[n->stream]->next = n;
	else
		q->head[n->stream] = n;
	q->tail[n->stream] = n;
	q->outstanding++;
}

static inline struct kva__cq_node *kva__cq_pop(struct kva__cq *q, uint32_t s)
{
	struct kva__cq_node *n = q->head[s];
	q->head[s] = n->next;
	if (!q->head[s])
		q->tail[s] = NULL;
	n->next = NULL;
	q->outstanding--;
	return n;
}

/* The context is broken: every outstanding job is reported failed with err;
 * those whose marker may still come wait on the zombie list. */
static inline uint32_t kva__cq_kill(struct kva__cq *q, int err)
{
	uint32_t n = 0;
	q->dead = true;
	q->dead_err = err;
	for (uint32_t s = 0; s < q->nstreams; s++)
		while (q->head[s]) {
			struct kva__cq_node *j = kva__cq_pop(q, s);
			bool keep = q->hostfunc && !j->marked;
			j->reported = true;
			q->report(q->ctx, j, j->status ? j->status : err);
			n++;
			if (keep) {
				j->next = q->zombies;
				q->zombies = j;
			} else {
				q->release(q->ctx, j);
			}
		}
	return n;
}

/* Reports what may be reported, oldest first per stream. watchdog: also
 * query heads whose marker has not come (host-function mode), for a sticky
 * error only: a job is never reported before its marker. Returns reports. */
static inline uint32_t kva__cq_poll(struct kva__cq *q, bool watchdog)
{
	uint32_t n = 0;
	for (uint32_t s = 0; s < q->nstreams && !q->dead; s++)
		while (q->head[s]) {
			struct kva__cq_node *j = q->head[s];
			bool unmarked = q->hostfunc && !j->marked;
			if (unmarked && !watchdog)
				break;
			int err = 0;
			int st = q->query(q->ctx, j, &err);
			if (st == KVA__CQ_STICKY)
				return n + kva__cq_kill(q, err ? err : -EIO);
			if (st == KVA__CQ_PENDING || unmarked)
				break;
			kva__cq_pop(q, s);
			int status = j->status;
			if (!status && st == KVA__CQ_FAILED)
				status = err ? err : -EIO;
			q->report(q->ctx, j, status);
			q->release(q->ctx, j);
			n++;
		}
	return n;
}

/* Host-function mode: j's host function ran. A job already reported (the
 * importer died meanwhile) is released now; others wait for kva__cq_poll. */
static inline void kva__cq_marked(struct kva__cq *q, struct kva__cq_node *j)
{
	j->marked = true;
	if (!j->reported)
		return;
	for (struct kva__cq_node **pp = &q->zombies; *pp; pp = &(*pp)->next)
		if (*pp == j) {
			*pp = j->next;
			break;
		}
	q->release(q->ctx, j);
}

/* Destroy, once no host function can run any more: releases the jobs
 * whose marker never came. */
static inline void kva__cq_release_zombies(struct kva__cq *q)
{
	while (q->zombies) {
		struct kva__cq_node *j = q->zombies;
		q->zombies = j->next;
		q->release(q->ctx, j);
	}
}

#endif
