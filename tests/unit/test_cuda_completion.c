/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for cuda/completion.h, the CUDA importer's completion state
 * machine, with injected statuses instead of a device (hardening issue,
 * item 14): a job is reported only after its marker and its real status,
 * in stream order; an asynchronous copy error is reported although the
 * enqueue succeeded; a sticky error fails every outstanding job at once and
 * kills the importer, also when no marker comes (the watchdog poll); a job
 * whose marker may still come is released only when it comes or at destroy.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "completion.h"

#define NJ 16

struct world {
	struct kva__cq q;
	struct kva__cq_node *head[3], *tail[3];
	struct kva__cq_node job[NJ];
	int status[NJ];   /* injected: enum kva__cq_status */
	int err[NJ];      /* injected errno for FAILED / STICKY */
	int reported[NJ]; /* times reported */
	int result[NJ];   /* the status it was reported with */
	int released[NJ]; /* times released */
	int order[NJ], norder;
	int queries;
};

static int idx(struct world *w, struct kva__cq_node *n)
{
	return (int)(n - w->job);
}

static int query(void *ctx, struct kva__cq_node *n, int *err)
{
	struct world *w = ctx;
	w->queries++;
	*err = w->err[idx(w, n)];
	return w->status[idx(w, n)];
}

static void report(void *ctx, struct kva__cq_node *n, int status)
{
	struct world *w = ctx;
	int i = idx(w, n);
	assert_int_equal(w->released[i], 0);
	w->reported[i]++;
	w->result[i] = status;
	w->order[w->norder++] = i;
}

static void release(void *ctx, struct kva__cq_node *n)
{
	struct world *w = ctx;
	int i = idx(w, n);
	assert_int_equal(w->reported[i], 1); /* never released unreported */
	w->released[i]++;
}

static struct world *world(bool hostfunc, uint32_t streams)
{
	static struct world w;
	memset(&w, 0, sizeof(w));
	kva__cq_init(&w.q, w.head, w.tail, streams, hostfunc, query, report, release, &w);
	return &w;
}

static void push(struct world *w, int i, uint32_t stream)
{
	w->job[i].stream = stream;
	w->job[i].status = 0;
	kva__cq_push(&w->q, &w->job[i]);
}

static void test_hostfunc_reports_after_marker_and_real_status_in_stream_order(void **st)
{
	(void)st;
	struct world *w = world(true, 2);
	for (int i = 0; i < 4; i++)
		push(w, i, (uint32_t)i % 2); /* 0, 2 on stream 0; 1, 3 on stream 1 */
	for (int i = 0; i < 4; i++)
		w->status[i] = KVA__CQ_DONE;
	/* no marker yet: nothing is reported, nothing is even queried */
	assert_int_equal(kva__cq_poll(&w->q, false), 0);
	assert_int_equal(w->queries, 0);
	/* job 2's marker before job 0's: stream order holds */
	kva__cq_marked(&w->q, &w->job[2]);
	assert_int_equal(kva__cq_poll(&w->q, false), 0);
	kva__cq_marked(&w->q, &w->job[0]);
	kva__cq_marked(&w->q, &w->job[1]);
	w->status[1] = KVA__CQ_PENDING; /* marker seen, event not yet: wait */
	assert_int_equal(kva__cq_poll(&w->q, false), 2);
	assert_int_equal(w->order[0], 0);
	assert_int_equal(w->order[1], 2);
	w->status[1] = KVA__CQ_DONE;
	kva__cq_marked(&w->q, &w->job[3]);
	assert_int_equal(kva__cq_poll(&w->q, false), 2);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(w->reported[i], 1);
		assert_int_equal(w->released[i], 1);
		assert_int_equal(w->result[i], 0);
	}
	assert_int_equal(w->q.outstanding, 0);
	assert_false(w->q.dead);
}

static void test_async_copy_error_is_reported_although_enqueue_succeeded(void **st)
{
	(void)st;
	struct world *w = world(true, 1);
	push(w, 0, 0);
	push(w, 1, 0);
	push(w, 2, 0);
	w->job[2].status = -EINVAL; /* its enqueue already failed */
	w->status[0] = KVA__CQ_FAILED;
	w->err[0] = -EFAULT;
	w->status[1] = KVA__CQ_DONE;
	w->status[2] = KVA__CQ_DONE;
	for (int i = 0; i < 3; i++)
		kva__cq_marked(&w->q, &w->job[i]);
	assert_int_equal(kva__cq_poll(&w->q, false), 3);
	assert_int_equal(w->result[0], -EFAULT); /* read from the event */
	assert_int_equal(w->result[1], 0);
	assert_int_equal(w->result[2], -EINVAL); /* the known error wins */
	assert_false(w->q.dead);
}

static void test_sticky_error_without_markers_fails_everything_and_kills(void **st)
{
	(void)st;
	struct world *w = world(true, 3);
	for (int i = 0; i < 6; i++)
		push(w, i, (uint32_t)i % 3);
	kva__cq_marked(&w->q, &w->job[0]); /* one marker came before the fault */
	w->status[0] = KVA__CQ_PENDING;
	for (int i = 1; i < 6; i++)
		w->status[i] = KVA__CQ_PENDING;
	/* the ordinary poll never looks at unmarked heads */
	assert_int_equal(kva__cq_poll(&w->q, false), 0);
	/* the watchdog does; pending unmarked heads stay */
	assert_int_equal(kva__cq_poll(&w->q, true), 0);
	/* a done but unmarked head is not reported by the watchdog either:
	 * its host function still holds it */
	w->status[1] = KVA__CQ_DONE;
	assert_int_equal(kva__cq_poll(&w->q, true), 0);
	assert_int_equal(w->reported[1], 0);
	/* now the context breaks: no marker will ever come */
	w->status[2] = KVA__CQ_STICKY;
	w->err[2] = -EIO;
	w->status[0] = KVA__CQ_STICKY;
	w->err[0] = -EIO;
	assert_int_equal(kva__cq_poll(&w->q, true), 6);
	assert_true(w->q.dead);
	assert_int_equal(w->q.outstanding, 0);
	for (int i = 0; i < 6; i++) {
		assert_int_equal(w->reported[i], 1);
		assert_int_equal(w->result[i], -EIO);
	}
	/* job 0 had its marker: released at once; the others wait */
	assert_int_equal(w->released[0], 1);
	for (int i = 1; i < 6; i++)
		assert_int_equal(w->released[i], 0);
	/* a late marker releases its job, destroy releases the rest, once each */
	kva__cq_marked(&w->q, &w->job[4]);
	assert_int_equal(w->released[4], 1);
	kva__cq_release_zombies(&w->q);
	for (int i = 0; i < 6; i++) {
		assert_int_equal(w->released[i], 1);
		assert_int_equal(w->reported[i], 1);
	}
	/* dead: polling reports nothing more */
	assert_int_equal(kva__cq_poll(&w->q, true), 0);
}

static void test_sticky_error_on_a_marked_job_in_the_ordinary_poll(void **st)
{
	(void)st;
	struct world *w = world(true, 2);
	push(w, 0, 0);
	push(w, 1, 1);
	push(w, 2, 1);
	kva__cq_marked(&w->q, &w->job[0]);
	w->status[0] = KVA__CQ_STICKY;
	w->err[0] = 0; /* no errno given: -EIO */
	w->job[2].status = -ENOMEM;
	assert_int_equal(kva__cq_poll(&w->q, false), 3);
	assert_true(w->q.dead);
	assert_int_equal(w->result[0], -EIO);
	assert_int_equal(w->result[1], -EIO);
	assert_int_equal(w->result[2], -ENOMEM); /* its own error first */
	kva__cq_release_zombies(&w->q);
	for (int i = 0; i < 3; i++)
		assert_int_equal(w->released[i], 1);
}

static void test_event_mode_needs_no_marker_and_streams_are_independent(void **st)
{
	(void)st;
	struct world *w = world(false, 2);
	push(w, 0, 0);
	push(w, 1, 0);
	push(w, 2, 1);
	w->status[0] = KVA__CQ_PENDING;
	w->status[1] = KVA__CQ_DONE;
	w->status[2] = KVA__CQ_DONE;
	assert_int_equal(kva__cq_poll(&w->q, false), 1); /* stream 1 only */
	assert_int_equal(w->order[0], 2);
	assert_int_equal(w->reported[1], 0); /* behind job 0 in its stream */
	w->status[0] = KVA__CQ_DONE;
	assert_int_equal(kva__cq_poll(&w->q, false), 2);
	assert_int_equal(w->order[1], 0);
	assert_int_equal(w->order[2], 1);
	/* sticky in event mode: nothing waits for a marker */
	push(w, 3, 0);
	push(w, 4, 1);
	w->status[3] = KVA__CQ_STICKY;
	w->err[3] = -EIO;
	assert_int_equal(kva__cq_poll(&w->q, false), 2);
	assert_int_equal(w->released[3], 1);
	assert_int_equal(w->released[4], 1);
	assert_null(w->q.zombies);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_hostfunc_reports_after_marker_and_real_status_in_stream_order),
	    cmocka_unit_test(test_async_copy_error_is_reported_although_enqueue_succeeded),
	    cmocka_unit_test(test_sticky_error_without_markers_fails_everything_and_kills),
	    cmocka_unit_test(test_sticky_error_on_a_marked_job_in_the_ordinary_poll),
	    cmocka_unit_test(test_event_mode_needs_no_marker_and_streams_are_independent),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
