/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The error contract, both ways (hardening issue, item 6): every code the
 * header lists for an entry point is provoked here, and a random sweep of
 * calls with real, stale and bogus handles and arguments finds no code the
 * header does not list. -ENOMEM needs the fault-injection build (ASan run of
 * make test); elsewhere those checks are skipped.
 */
#include "scenario.h"

#ifdef KVA_FAULT_INJECTION
uint64_t kva__fault_arm(uint64_t k, int sticky); /* reservations/alloc.h */
#define FAULTS 1
#else
#define FAULTS 0
static uint64_t kva__fault_arm(uint64_t k, int sticky)
{
	(void)k;
	(void)sticky;
	return 0;
}
#endif

enum entry {
	E_CREATE, E_SUBMIT, E_CANCEL, E_ANSWER, E_LOCAL, E_COPY, E_EVICT, E_STEP, E_GROW,
	E_PREEMPT, E_FINISH, E_RESET, E_QUERY, E_WALK, E_MIN_SIZES, E_COUNT
};

/* What include/kvadmit/kvadmit.h documents for each, besides success. */
static const int documented[E_COUNT][8] = {
	[E_CREATE] = {-EINVAL, -ENOMEM},
	[E_SUBMIT] = {-EINVAL, -ERANGE, -ENOMEM},
	[E_CANCEL] = {-EINVAL, -ENOENT, -EALREADY, -ENOMEM},
	[E_ANSWER] = {-EINVAL, -ENOENT, -ESTALE, -ENOMEM},
	[E_LOCAL] = {-EINVAL, -ERANGE, -ENOENT, -ENOMEM},
	[E_COPY] = {-EINVAL, -ERANGE, -ENOENT, -ESTALE, -EALREADY},
	[E_EVICT] = {-EINVAL, -ENOMEM},
	[E_STEP] = {-EINVAL},
	[E_GROW] = {-EINVAL, -ENOSPC, -ENOENT, -EBUSY, -ERANGE, -ENOMEM},
	[E_PREEMPT] = {-EINVAL, -ENOENT, -EBUSY},
	[E_FINISH] = {-EINVAL, -ENOENT, -EALREADY, -EBUSY},
	[E_RESET] = {-EINVAL},
	[E_QUERY] = {-EINVAL, -ENOENT},
	[E_WALK] = {-EINVAL},
	[E_MIN_SIZES] = {-EINVAL},
};

static bool seen[E_COUNT][8];

/* Records rc for `entry`; fails on a code the header does not list. */
static int check(enum entry entry, int rc)
{
	if (rc >= 0)
		return rc;
	for (int i = 0; i < 8 && documented[entry][i]; i++)
		if (documented[entry][i] == rc) {
			seen[entry][i] = true;
			return rc;
		}
	fail_msg("entry %d returned undocumented %d (%s)", entry, rc, kva_strerror(rc));
	return rc;
}

#define EXPECT(entry, call, code) assert_int_equal(check(entry, (call)), (code))

static const kva_handle BOGUS = {999999, 1, 0};

static void every_documented_code_occurs(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	kva_engine *e = s->e;
	kva_config bad = s->cfg;
	bad.total_pages = 0;
	int err = 0;
	assert_null(kva_engine_create(NULL, &err));
	EXPECT(E_CREATE, err, -EINVAL);
	assert_null(kva_engine_create(&bad, &err));
	EXPECT(E_CREATE, err, -EINVAL);
	kva_plan_sizes sz;
	EXPECT(E_MIN_SIZES, kva_plan_min_sizes(&bad, &sz), -EINVAL);
	EXPECT(E_MIN_SIZES, kva_plan_min_sizes(&s->cfg, &sz), 0);

	kva_request q = {.id = 1, .prefix_key = 7, .prompt_tokens = 0};
	kva_handle h;
	EXPECT(E_SUBMIT, kva_submit(e, &q, &h), -EINVAL);
	q.prompt_tokens = 64;
	q.local = sc_ckpt(65, 1, 1);
	EXPECT(E_SUBMIT, kva_submit(e, &q, &h), -ERANGE);
	q.local = (kva_checkpoint){0};
	EXPECT(E_SUBMIT, kva_submit(e, &q, &h), 0);

	EXPECT(E_CANCEL, kva_cancel(NULL, h), -EINVAL);
	EXPECT(E_CANCEL, kva_cancel(e, BOGUS), -ENOENT);

	kva_manifest m = {.count = 1, .entries = {sc_ckpt(32, 5, 0)}};
	kva_manifest unsorted = {.count = 2, .entries = {sc_ckpt(32, 5, 0), sc_ckpt(16, 6, 0)}};
	sc_step(s, 0); /* key 7 is not in the directory: the lookup waits */
	kva_lookup_token t = s->lookups[0].token, tb = t;
	tb.id = 999999;
	EXPECT(E_ANSWER, kva_lookup_answer(e, t, NULL), -EINVAL);
	EXPECT(E_ANSWER, kva_lookup_answer(e, t, &unsorted), -EINVAL);
	EXPECT(E_ANSWER, kva_lookup_answer(e, tb, &m), -ENOENT);
	EXPECT(E_ANSWER, kva_lookup_answer(e, t, &m), 0);
	sc_step(s, 0);
	EXPECT(E_ANSWER, kva_lookup_answer(e, t, &m), -ESTALE);

	kva_checkpoint loc = sc_ckpt(16, 9, 1);
	EXPECT(E_LOCAL, kva_local_checkpoint(e, h, NULL), -EINVAL);
	EXPECT(E_LOCAL, kva_local_checkpoint(e, BOGUS, &loc), -ENOENT);
	loc.position = 65;
	EXPECT(E_LOCAL, kva_local_checkpoint(e, h, &loc), -ERANGE);

	/* h imports key 7's checkpoint: copy reports */
	assert_int_equal(s->plan.n_copies, 1);
	kva_copy_job job = s->copies[0];
	kva_copy_token stale = job.token, unknown = job.token;
	stale.attempt++;
	unknown.id = 999999;
	EXPECT(E_COPY, kva_copy_done(NULL, job.token, 0, 0), -EINVAL);
	EXPECT(E_COPY, kva_copy_done(e, job.token, 1, 0), -ERANGE);
	EXPECT(E_COPY, kva_copy_done(e, unknown, 0, 0), -ENOENT);
	EXPECT(E_COPY, kva_copy_done(e, stale, 0, 0), -ESTALE);
	EXPECT(E_COPY, kva_copy_done(e, job.token, 0, 0), 0);
	EXPECT(E_COPY, kva_copy_done(e, job.token, 0, 0), -EALREADY);
	sc_step(s, 0);
	assert_int_equal(sc_state(s, h), KVA_STATE_RUNNING);

	EXPECT(E_EVICT, kva_checkpoint_evicted(NULL, 1, 1), -EINVAL);
	EXPECT(E_STEP, kva_step(e, 0, NULL), -EINVAL);
	kva_plan hollow = {.admitted_cap = 4}; /* claims room behind a NULL array */
	EXPECT(E_STEP, kva_step(e, 0, &hollow), -EINVAL);

	kva_handle w = sc_submit(s, 2, 0, 16 * 200); /* needs more than the pool: waits */
	EXPECT(E_GROW, kva_grow(e, h, 0, NULL), -EINVAL);
	EXPECT(E_GROW, kva_grow(e, h, 101, NULL), -ERANGE);
	EXPECT(E_GROW, kva_grow(e, h, 100, NULL), -ENOSPC);
	EXPECT(E_GROW, kva_grow(e, BOGUS, 1, NULL), -ENOENT);
	EXPECT(E_GROW, kva_grow(e, w, 1, NULL), -EBUSY);
	EXPECT(E_PREEMPT, kva_preempt(NULL, h), -EINVAL);
	EXPECT(E_PREEMPT, kva_preempt(e, BOGUS), -ENOENT);
	EXPECT(E_PREEMPT, kva_preempt(e, w), -EBUSY);
	EXPECT(E_FINISH, kva_finish(NULL, h), -EINVAL);
	EXPECT(E_FINISH, kva_finish(e, BOGUS), -ENOENT);
	EXPECT(E_FINISH, kva_finish(e, w), -EBUSY);
	EXPECT(E_FINISH, kva_finish(e, h), 0);
	EXPECT(E_FINISH, kva_finish(e, h), -EALREADY);
	EXPECT(E_CANCEL, kva_cancel(e, w), 0);
	EXPECT(E_CANCEL, kva_cancel(e, w), -EALREADY);
	EXPECT(E_RESET, kva_reset_prefix_cache(NULL), -EINVAL);
	kva_request_info info;
	EXPECT(E_QUERY, kva_query(NULL, h, &info), -EINVAL);
	EXPECT(E_QUERY, kva_query(e, BOGUS, &info), -ENOENT);
	EXPECT(E_WALK, kva_waiting_foreach(e, NULL, NULL, 0), -EINVAL);
	sc_step(s, 0);

	if (FAULTS) {
		/* -ENOMEM: each call's own allocation fails, nothing changes */
		kva__fault_arm(1, 0);
		EXPECT(E_CREATE, (kva_engine_create(&s->cfg, &err), err), -ENOMEM);
		kva_handle x = sc_submit(s, 3, 0, 16);
		sc_step(s, 0);
		kva__fault_arm(1, 0);
		EXPECT(E_CANCEL, kva_cancel(e, x), -ENOMEM);
		kva__fault_arm(1, 0);
		EXPECT(E_EVICT, kva_checkpoint_evicted(e, 1, 1), -ENOMEM);
		loc = sc_ckpt(16, 9, 1);
		kva__fault_arm(1, 0);
		EXPECT(E_LOCAL, kva_local_checkpoint(e, x, &loc), -ENOMEM);
		kva__fault_arm(1, 1); /* the page array outgrows its inline room */
		EXPECT(E_GROW, kva_grow(e, x, 60, NULL), -ENOMEM);
		kva__fault_arm(0, 0);
		kva_handle y = sc_submit(s, 4, 7, 64);
		sc_step(s, 0);
		kva__fault_arm(1, 0);
		EXPECT(E_ANSWER, kva_lookup_answer(e, s->lookups[s->n_lookups - 1].token, &m), -ENOMEM);
		kva__fault_arm(0, 0);
		(void)y;
		/* a fresh engine has no slots cached: its first submit allocates */
		kva_engine *fresh = kva_engine_create(&s->cfg, &err);
		assert_non_null(fresh);
		kva__fault_arm(1, 1);
		EXPECT(E_SUBMIT, kva_submit(fresh, &q, &h), -ENOMEM);
		kva__fault_arm(0, 0);
		kva_engine_destroy(fresh);
	}

	for (int entry = 0; entry < E_COUNT; entry++)
		for (int i = 0; i < 8 && documented[entry][i]; i++)
			if (!seen[entry][i] && (FAULTS || documented[entry][i] != -ENOMEM))
				fail_msg("entry %d: documented %d never occurred", entry,
				         documented[entry][i]);
	sc_free(s);
}

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(uint32_t n)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng % n);
}

/* Random calls on a live engine: real handles (any state), ended ones,
 * bogus ones, odd arguments. Every code returned must be documented. */
static void random_calls_return_only_documented_codes(void **st)
{
	(void)st;
	struct sc *s = sc_default();
	kva_engine *e = s->e;
	kva_handle hs[64];
	uint32_t nh = 0;
	uint32_t nl_done = 0;
	for (int i = 0; i < 20000; i++) {
		kva_handle h = nh && rnd(8) ? hs[rnd(nh)] : BOGUS;
		if (rnd(16) == 0)
			h.gen += 2; /* stale generation */
		switch (rnd(12)) {
		case 0: {
			kva_request q = {.id = rnd(40), .prefix_key = rnd(3) ? 7 + rnd(2) : 0,
			                 .prompt_tokens = rnd(600), .flags = rnd(20) == 0};
			if (rnd(4) == 0)
				q.local = sc_ckpt(1 + rnd(600), rnd(5), rnd(5) != 0);
			kva_handle out;
			if (check(E_SUBMIT, kva_submit(e, &q, &out)) == 0 && nh < 64)
				hs[nh++] = out;
			break;
		}
		case 1: check(E_CANCEL, kva_cancel(e, h)); break;
		case 2:
			if (nl_done < s->n_lookups) {
				kva_manifest m = {.count = rnd(3)};
				for (uint32_t k = 0; k < m.count; k++)
					m.entries[k] = sc_ckpt(16 * (k + 1) + rnd(8), k + 1, rnd(2));
				check(E_ANSWER, kva_lookup_answer(e, s->lookups[rnd(s->n_lookups)].token, &m));
				nl_done += rnd(2);
			}
			break;
		case 3: {
			kva_checkpoint c = sc_ckpt(rnd(600), rnd(4), rnd(6) != 0);
			c.compatible = rnd(8) != 0;
			check(E_LOCAL, kva_local_checkpoint(e, h, &c));
			break;
		}
		case 4:
			if (s->plan.n_copies) {
				kva_copy_job *j = &s->copies[rnd(s->plan.n_copies)];
				check(E_COPY, kva_copy_done(e, j->token, rnd(3), rnd(2)));
			}
			break;
		case 5: check(E_EVICT, kva_checkpoint_evicted(e, rnd(4), rnd(3))); break;
		case 6: check(E_GROW, kva_grow(e, h, rnd(120), NULL)); break;
		case 7: check(E_PREEMPT, kva_preempt(e, h)); break;
		case 8: check(E_FINISH, kva_finish(e, h)); break;
		case 9:
			if (rnd(10) == 0)
				check(E_RESET, kva_reset_prefix_cache(e));
			break;
		case 10: {
			kva_request_info info;
			check(E_QUERY, kva_query(e, h, &info));
			break;
		}
		default:
			s->now += rnd(3) * SC_SEC / 2;
			check(E_STEP, kva_step(e, s->now, &s->plan));
			break;
		}
	}
	sc_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(every_documented_code_occurs),
		cmocka_unit_test(random_calls_return_only_documented_codes),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
