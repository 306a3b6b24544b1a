/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Many waiting requests sharing one local checkpoint (rule
 * eviction-revalidates's index): N requests behind a blocked head (the standard
 * engine with 10,000 restores waiting) have their lookups outstanding; the
 * directory answers every one with the same local checkpoint (KVA_LOC_LOCAL,
 * one id, one epoch).
 *
 * BM_shared_local_ingest/N: the N kva_lookup_answer calls plus the step that
 * adopts the manifests (each selection is indexed under the checkpoint id),
 * per request. Untimed between rounds: the checkpoint is evicted with a newer
 * epoch and a step re-issues the N lookups, ready for the next round.
 *
 * BM_shared_local_evict/N: in that state (N requests indexed under one
 * checkpoint), one kva_checkpoint_evicted(id, newer epoch) plus the steps
 * that handle it: every affected request is unindexed, drops its manifest
 * and asks the directory again (a new lookup and deadline each), per
 * affected request. A step looks at 1,024 sharers at most, so the steps
 * until the walk is done (plan.backlog clear) are timed; counters steps (per
 * eviction) and round_worst_step_us, the median over rounds of each round's
 * longest step: what one step of a host pays (the longest of all rounds
 * would mostly time the machine's own rare hiccups). Untimed
 * between rounds: the N new lookups are answered with the checkpoint's new
 * epoch and adopted.
 *
 * Both should be flat in N: indexing and unindexing one selection is O(1)
 * however many requests chose the same checkpoint (docs/design.md, "Cost
 * model"). Counters: call_ns and step_ns split the time, cpu_ns is the
 * thread's CPU time over the same stretch. Afterwards the N requests are
 * cancelled, so the shared engine is back in its standard state.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bm.h"
#include "fixture.h"
#include "gbench.h"

#define BACKLOG 10000
#define LOCAL_ID 0x10ca1u /* the shared checkpoint; not the external one (42) */

static uint64_t epoch = 1; /* the shared checkpoint's current epoch */

static kva_manifest local_manifest(void)
{
	return (kva_manifest){
		.count = 1,
		.entries = {{.position = BX_CKPT, .location = KVA_LOC_LOCAL, .compatible = 1,
		             .id = LOCAL_ID, .epoch = epoch}},
	};
}

struct shared {
	struct bx *b;
	size_t n;
	kva_handle *mine;
};

/* N new requests behind the blocked head, their lookups outstanding. */
static struct shared shared_begin(size_t n)
{
	struct shared sh = {bx_blocked(BACKLOG), n, calloc(n, sizeof(kva_handle))};
	if (!sh.mine)
		bx_check(-ENOMEM, "handles");
	struct bx *b = sh.b;
	b->answer_now = false;
	bx_pending_reserve(b, n);
	b->n_pending = 0;
	for (size_t i = 0; i < n; i++)
		sh.mine[i] = bx_submit(b, true);
	bx_step(b);
	if (b->n_pending != n || b->plan.n_admitted || !b->plan.head_blocked)
		bx_check(-EPROTO, "lookups issued behind the blocked head");
	return sh;
}

/* Cancels the N requests: the shared engine is in its standard state again. */
static void shared_end(struct shared *sh)
{
	struct bx *b = sh->b;
	for (size_t i = 0; i < sh->n; i++)
		bx_check(kva_cancel(b->e, sh->mine[i]), "kva_cancel");
	size_t ended = 0;
	while (ended < sh->n) {
		bx_step(b);
		ended += b->plan.n_ended;
		if (!b->plan.n_ended)
			bx_check(-EPROTO, "cancel step");
	}
	bx_reclaim(b, sh->n);
	b->n_pending = 0;
	b->answer_now = true;
	free(sh->mine);
}

/* Answers every outstanding lookup with the shared checkpoint. */
static void answer_all(struct bx *b)
{
	kva_manifest m = local_manifest();
	for (size_t i = 0; i < b->n_pending; i++)
		bx_check(kva_lookup_answer(b->e, b->pending[i], &m), "kva_lookup_answer");
	b->n_pending = 0;
}

static void check_adopted(struct bx *b, size_t n)
{
	if (b->plan.events != n || b->plan.n_admitted || b->plan.n_fallbacks ||
	    !b->plan.head_blocked)
		bx_check(-EPROTO, "answer step");
}

/* Evicts the shared checkpoint (a newer epoch than every selection). */
static void evict(struct bx *b)
{
	epoch++;
	bx_check(kva_checkpoint_evicted(b->e, LOCAL_ID, epoch), "kva_checkpoint_evicted");
}

static void check_relooked(struct bx *b, size_t n)
{
	if (b->n_pending != n || b->plan.n_admitted || b->plan.n_fallbacks || !b->plan.head_blocked)
		bx_check(-EPROTO, "eviction steps: not every request looked up again");
}

/* Steps until the eviction's walk is done; the longest step's wall ns into
 * *worst. Returns the steps. */
static uint64_t eviction_steps(struct bx *b, uint64_t *worst)
{
	uint64_t steps = 0;
	do {
		uint64_t t0 = bx_clock_ns();
		bx_step(b);
		uint64_t t = bx_clock_ns() - t0;
		if (t > *worst)
			*worst = t;
		if (b->plan.n_admitted || b->plan.n_fallbacks || ++steps > 1000000)
			bx_check(-EPROTO, "eviction step");
	} while (b->plan.backlog);
	return steps;
}

#define MAX_ROUNDS 4096 /* eviction rounds whose longest step is kept */

struct split {
	uint64_t call_ns, step_ns, cpu_ns;
	uint64_t steps, rounds; /* eviction rounds only */
	uint64_t worst_ns[MAX_ROUNDS]; /* each round's longest step */
};

static void report(gb_state *s, size_t n, struct split *sp)
{
	double it = (double)gb_iterations_done(s);
	gb_set_items_processed(s, gb_iterations_done(s));
	if (it > 0) {
		gb_counter(s, "call_ns", (double)sp->call_ns / it, GB_COUNTER_DEFAULT);
		gb_counter(s, "step_ns", (double)sp->step_ns / it, GB_COUNTER_DEFAULT);
		gb_counter(s, "cpu_ns", (double)sp->cpu_ns / it, GB_COUNTER_DEFAULT);
	}
	gb_counter(s, "sharing", (double)n, GB_COUNTER_DEFAULT);
	if (sp->rounds) {
		size_t kept = sp->rounds < MAX_ROUNDS ? sp->rounds : MAX_ROUNDS;
		qsort(sp->worst_ns, kept, sizeof(sp->worst_ns[0]), bx_cmp_u64);
		gb_counter(s, "steps", (double)sp->steps / (double)sp->rounds, GB_COUNTER_DEFAULT);
		gb_counter(s, "round_worst_step_us", (double)sp->worst_ns[kept / 2] / 1e3,
		           GB_COUNTER_DEFAULT);
	}
}

/* Times calls(b) and the step after it (all the steps of an eviction's
 * walk when `walk`), into sp and as the iteration time. */
static void timed(gb_state *s, struct bx *b, struct split *sp, void (*calls)(struct bx *),
                  bool walk)
{
	uint64_t c0 = bx_cpu_ns(), t0 = bx_clock_ns();
	calls(b);
	uint64_t t1 = bx_clock_ns();
	if (walk) {
		uint64_t worst = 0;
		sp->steps += eviction_steps(b, &worst);
		if (sp->rounds < MAX_ROUNDS)
			sp->worst_ns[sp->rounds] = worst;
		sp->rounds++;
	} else {
		bx_step(b);
	}
	uint64_t t2 = bx_clock_ns(), c1 = bx_cpu_ns();
	gb_set_iteration_time(s, (double)(t2 - t0) / 1e9);
	sp->call_ns += t1 - t0;
	sp->step_ns += t2 - t1;
	sp->cpu_ns += c1 - c0;
}

static void bm_shared_local_ingest(gb_state *s, void *arg)
{
	(void)arg;
	struct shared sh = shared_begin(bx_cap((size_t)gb_range_arg(s, 0)));
	struct bx *b = sh.b;
	static struct split sp;
	memset(&sp, 0, sizeof(sp));
	while (gb_keep_running_batch(s, sh.n)) {
		timed(s, b, &sp, answer_all, false);
		check_adopted(b, sh.n);

		/* untimed: lookups outstanding again for the next round */
		evict(b);
		uint64_t worst = 0;
		eviction_steps(b, &worst);
		check_relooked(b, sh.n);
		bx_reclaim(b, sh.n); /* the dropped manifests */
	}
	report(s, sh.n, &sp);
	shared_end(&sh);
}

static void bm_shared_local_evict(gb_state *s, void *arg)
{
	(void)arg;
	struct shared sh = shared_begin(bx_cap((size_t)gb_range_arg(s, 0)));
	struct bx *b = sh.b;
	static struct split sp;
	memset(&sp, 0, sizeof(sp));
	while (gb_keep_running_batch(s, sh.n)) {
		/* untimed: every request selects the shared checkpoint */
		answer_all(b);
		bx_step(b);
		check_adopted(b, sh.n);

		timed(s, b, &sp, evict, true);
		check_relooked(b, sh.n);
		bx_reclaim(b, sh.n);
	}
	report(s, sh.n, &sp);
	shared_end(&sh);
}

void bm_register_local(void)
{
	gb_bench *b = gb_use_manual_time(
		gb_register("BM_shared_local_ingest", bm_shared_local_ingest, NULL));
	gb_arg(gb_arg(b, 1000), 16000);
	b = gb_use_manual_time(gb_register("BM_shared_local_evict", bm_shared_local_evict, NULL));
	gb_arg(gb_arg(gb_arg(b, 1000), 16000), 1000000);
}
