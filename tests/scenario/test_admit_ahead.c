/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The admission scout's look-ahead hints (reservations/admit.c, "ahead"):
 * each request pushed to the back of the queue leaves its slot in the
 * request pushed KVA__AHEAD before it, so a run of admissions fetches
 * records that far ahead without walking the queue. The hint shares its
 * bytes with a blocked head's wait start, which it must never overwrite.
 * White-box: the test reads the records' hints.
 */
#include "scenario.h"

#include "engine_state.h"
#include "lifecycle.h"

#define KEY 7
#define N 20

static struct kva__req *rec(struct sc *s, kva_handle h)
{
	struct kva__req *r = kva__rec_find(s->e, h.slot, h.gen, h.id);
	if (!r) {
		fail_msg("no record for request %llu", (unsigned long long)h.id);
		/* cmocka's fail jumps out; said so, GCC's link-time inlining no
		 * longer warns about a NULL record's fields */
		__builtin_unreachable();
	}
	return r;
}

static void each_push_leaves_its_slot_KVA_AHEAD_places_back(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	kva_handle hog = sc_occupy(s, 1, 100);
	kva_handle h[N];
	for (int i = 0; i < N; i++)
		h[i] = sc_submit(s, 100 + (uint64_t)i, 0, 16);
	sc_step(s, 0);
	/* the first waits at the head, blocked by the hog: its bytes hold its
	 * wait start now, not a hint; the rest wait behind it */
	assert_true(s->plan.head_blocked);
	for (int i = 1; i < N; i++)
		assert_int_equal(rec(s, h[i])->ahead,
		                 i + KVA__AHEAD < N ? h[i + KVA__AHEAD].slot + 1 : 0);

	/* hints are only hints: a cancelled target changes nothing, and the
	 * queue is admitted in order once capacity frees */
	assert_int_equal(kva_cancel(s->e, h[1 + KVA__AHEAD]), 0);
	sc_step(s, 0);
	assert_int_equal(kva_finish(s->e, hog), 0);
	sc_step(s, SC_MS);
	assert_int_equal(s->plan.n_admitted, N - 1);
	for (int i = 0, k = 0; i < N; i++) {
		if (i == 1 + KVA__AHEAD)
			continue;
		assert_int_equal(s->admitted[k++].handle.id, h[i].id);
	}
	sc_free(s);
}

static void a_hint_never_overwrites_a_blocked_heads_wait_start(void **st)
{
	(void)st;
	kva_config c;
	sc_config(&c);
	c.max_restore_wait_ns = 0;
	struct sc *s = sc_new(&c);
	sc_dir_set(s, KEY, sc_ckpt(320, 900, 0));
	kva_handle hog = sc_occupy(s, 1, 90);
	sc_step(s, 7 * SC_SEC);
	kva_handle head = sc_submit(s, 2, KEY, 480);
	sc_step(s, 0); /* blocked: its wait starts now */
	assert_true(s->plan.head_blocked);
	assert_true(rec(s, head)->flags & KVA__F_BLOCKED);
	uint64_t since = rec(s, head)->blocked_since;
	assert_int_equal(since, s->now);
	/* KVA__AHEAD and more pushes later: the head is the one a hint would
	 * go to */
	for (int i = 0; i < 2 * KVA__AHEAD; i++) {
		sc_submit(s, 10 + (uint64_t)i, 0, 16);
		sc_step(s, SC_SEC);
	}
	assert_int_equal(rec(s, head)->blocked_since, since);
	assert_int_equal(sc_stats(s).capacity_wait_ns, 2 * KVA__AHEAD * SC_SEC);
	assert_int_equal(kva_finish(s->e, hog), 0);
	sc_step(s, SC_MS);
	assert_int_equal(s->plan.n_copies, 1);
	sc_copies_done(s, 0);
	sc_step(s, 0);
	assert_non_null(sc_admitted(s, head));
	kva_stats stt = sc_stats(s); /* observed at its reservation: the whole wait */
	assert_int_equal(stt.capacity_wait.count, 1);
	assert_int_equal(stt.capacity_wait.sum_ns, 2 * KVA__AHEAD * SC_SEC + SC_MS);
	sc_free(s);
}

static void a_requeued_request_carries_no_stale_hint(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	/* the directory knows KEY but holds nothing for it: ordinary requests */
	s->dir[s->n_dir++] = (struct sc_dir_entry){.key = KEY};
	kva_handle h[N];
	for (int i = 0; i < N; i++)
		h[i] = sc_submit(s, 100 + (uint64_t)i, KEY, 16);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_admitted, N);
	/* preempted, it waits at the front for a fresh lookup nobody answers */
	sc_dir_clear(s);
	assert_int_equal(kva_preempt(s->e, h[0]), 0);
	sc_step(s, 0);
	assert_int_equal(s->plan.n_admitted, 0);
	assert_true(s->plan.head_blocked);
	struct kva__req *r = rec(s, h[0]);
	assert_int_equal(atomic_load(&r->state), KVA_STATE_WAITING);
	assert_false(r->flags & KVA__F_BLOCKED);
	assert_int_equal(r->ahead, 0); /* not h[KVA__AHEAD]'s slot, left from its first wait */
	sc_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(each_push_leaves_its_slot_KVA_AHEAD_places_back),
		cmocka_unit_test(a_hint_never_overwrites_a_blocked_heads_wait_start),
		cmocka_unit_test(a_requeued_request_carries_no_stale_hint),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
