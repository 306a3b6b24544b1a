/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_config: every kva_config field from an edge-value class (0, 1, 2, the
 * field's limits and one past them, UINT32_MAX / UINT64_MAX and their
 * neighbours, a few bytes of the input), then a short run with a few
 * requests (hardening issue, item 17). Checks:
 *
 *   - kva_engine_create succeeds exactly when the configuration lies inside
 *     the ranges kvadmit.h documents, and fails with -EINVAL otherwise;
 *   - every step returns >= 0; credits are conserved after every step;
 *   - time fields never fire early (item 1): no lookup times out, no
 *     refresh is issued and no bounded wait expires before its duration has
 *     passed since the first ingest (durations whose deadline would pass
 *     UINT64_MAX never fire), and wait logs stay within one per head plus
 *     one per interval;
 *   - INCOMPATIBLE is never the reason when every answered checkpoint was
 *     compatible and within its prompt (item 4: a checkpoint at position
 *     UINT32_MAX);
 *   - under KVA_ORDER_PRIORITY (order, preempt_threshold and aging
 *     interval from their classes too), kva_set_priority and
 *     kva_preempt_candidate answer only their documented codes; under FCFS
 *     both are refused (-EINVAL);
 *   - KVA_POLICY_COST with the seeds of kva_config_default, a margin from
 *     its class, or a broken cost config (read only under COST);
 *   - after a final drain (copies reported, everything finished or
 *     cancelled, plans with room), every request ended exactly once and
 *     every credit is back.
 *
 * total_pages stays at or below 2^20: the engine allocates 4 bytes a page
 * at create, and a 16 GiB pool is no bug.
 *
 * Input: the configuration (one class byte per field, some followed by value
 * bytes), plan capacities, then at most 48 operations of one selector byte
 * and their arguments.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "kvadmit/kvadmit.h"
#include "fuzz_input.h"

#define FZ_TARGET "fuzz_config"
#define CHECK FZ_CHECK
#define TRACE FZ_TRACE

#define MAXH 24
#define MAXJ 4096 /* > 48 steps x 64 copies: every job is kept */
#define MAXL 32
#define CAP 64
#define PAGES_CAP 8192
#define MAX_POOL (1u << 20)
#define SLACK (1ull << 22) /* timer-wheel granularity: a deadline fires up to a tick late */

struct hreq {
	kva_handle h;
	uint32_t prompt;
	bool running, ended, cancel_ok, finish_ok;
};

static struct {
	struct fz in;
	kva_engine *e;
	kva_config cfg;
	uint64_t now;
	bool ingested;    /* a step ran after the first submit */
	uint64_t t_first; /* that step's now */
	struct hreq h[MAXH];
	uint32_t nh;
	kva_lookup_token pend[MAXL];
	uint32_t pend_prompt[MAXL];
	uint32_t npend;
	kva_copy_job jobs[MAXJ];
	bool job_done[MAXJ];
	uint32_t nj;
	bool refuse;     /* the importer stub refuses */
	bool bad_answer; /* an incompatible or too long checkpoint was answered */
	kva_admission adm[CAP];
	uint32_t pages[PAGES_CAP];
	kva_copy_job copies[CAP];
	kva_fallback fb[CAP];
	kva_ended ended[CAP];
	kva_plan plan;
	uint32_t caps[5];
} S;

/* ---- value classes ------------------------------------------------------------ */

static uint32_t u32_class(uint32_t lim)
{
	uint8_t c = fz_u8(&S.in);
	switch (c % 12) {
	case 0: return 0;
	case 1: return 1;
	case 2: return 2;
	case 3: return lim;
	case 4: return lim - 1;
	case 5: return lim + 1;
	case 6: return UINT32_MAX;
	case 7: return UINT32_MAX - 1;
	case 8: return 1u << 31;
	case 9: return fz_u8(&S.in);
	case 10: return fz_u16(&S.in);
	default: return (uint32_t)fz_u16(&S.in) | (uint32_t)fz_u16(&S.in) << 16;
	}
}

/* A duration or a time: the edges that wrap when added to a clock. */
static uint64_t u64_class(void)
{
	uint8_t c = fz_u8(&S.in);
	switch (c % 12) {
	case 0: return 0;
	case 1: return 1;
	case 2: return UINT64_MAX;
	case 3: return UINT64_MAX - 1;
	case 4: return UINT64_MAX / 2 + 1;
	case 5: return 1ull << 32;
	case 6: return (uint64_t)fz_u8(&S.in) * 1000000ull; /* ms */
	case 7: return (uint64_t)fz_u8(&S.in) * 1000000000ull; /* s */
	case 8: return UINT64_MAX - (uint64_t)fz_u8(&S.in) * 1000000000ull;
	case 9: return 1ull << 20; /* one timer tick */
	case 10: return (uint64_t)fz_u16(&S.in) << 24;
	default: {
		uint64_t v = 0;
		for (int i = 0; i < 8; i++)
			v = v << 8 | fz_u8(&S.in);
		return v;
	}
	}
}

/* ---- callbacks ----------------------------------------------------------------- */

static void lookup_cb(void *ctx, uint64_t key, uint32_t prompt, kva_lookup_token t)
{
	(void)ctx;
	(void)key;
	if (S.npend < MAXL) {
		S.pend_prompt[S.npend] = prompt;
		S.pend[S.npend++] = t;
	}
}

static int import_cb(void *ctx, kva_engine *e, const kva_copy_job *job)
{
	(void)ctx;
	(void)e;
	if (S.refuse || S.nj == MAXJ)
		return -EBUSY;
	S.jobs[S.nj] = *job;
	S.jobs[S.nj].pages = NULL; /* valid only until reported: not kept */
	S.job_done[S.nj++] = false;
	return 0;
}

static void log_cb(void *ctx, int level, const char *msg)
{
	(void)ctx;
	TRACE("log %d: %s\n", level, msg);
}

static void wake_cb(void *ctx)
{
	(void)ctx;
}

/* ---- configuration --------------------------------------------------------------- */

/* The documented ranges (kvadmit.h, kva_config). */
static bool config_valid(const kva_config *c)
{
	if (!c->total_pages || !c->page_tokens || !c->prefill_chunk_tokens || !c->copy_slots ||
	    !c->max_running || !c->world_size || c->world_size > KVA_MAX_WORLD)
		return false;
	if (c->decode_reserve_pages >= c->total_pages || c->decode_headroom_pages > c->total_pages)
		return false;
	if (c->policy != KVA_POLICY_WAIT && c->policy != KVA_POLICY_LEGACY &&
	    c->policy != KVA_POLICY_COST)
		return false;
	if ((c->order != KVA_ORDER_FCFS && c->order != KVA_ORDER_PRIORITY) ||
	    c->preempt_threshold < 0)
		return false;
	const kva_cost_config *k = &c->cost;
	if (c->policy == KVA_POLICY_COST) {
		if (!k->page_bytes || !k->prefill_tokens_per_s || !k->half_life ||
		    k->half_life > 65535 || k->margin_pct > 1000)
			return false;
		for (int t = 0; t < KVA_TIER_COUNT; t++)
			if (!k->tier_bytes_per_s[t])
				return false;
	}
	bool first = c->importers[0].submit != NULL;
	for (uint32_t i = 1; i < c->world_size; i++)
		if ((c->importers[i].submit != NULL) != first)
			return false;
	return true;
}

static void configure(void)
{
	kva_config *c = &S.cfg;
	kva_config_default(c);
	c->total_pages = u32_class(64);
	if (c->total_pages > MAX_POOL)
		c->total_pages = MAX_POOL - (c->total_pages & 1);
	c->page_tokens = u32_class(16);
	c->decode_reserve_pages = u32_class(c->total_pages);
	c->decode_headroom_pages = u32_class(c->total_pages);
	c->prefill_chunk_tokens = u32_class(256);
	c->copy_slots = (uint16_t)u32_class(UINT16_MAX);
	c->max_running = (uint16_t)u32_class(UINT16_MAX);
	c->world_size = u32_class(KVA_MAX_WORLD);
	c->max_copy_retries = u32_class(2);
	c->lookup_timeout_ns = u64_class();
	c->max_restore_wait_ns = u64_class();
	c->wait_log_interval_ns = u64_class();
	c->lookup_refresh_ns = u64_class();
	c->start_ns = u64_class();
	uint8_t b = fz_u8(&S.in);
	/* 2 and 3: unknown policies, as before COST existed (COST: the cap
	 * byte's extension below, so that older inputs keep their meaning) */
	static const int policies[4] = {KVA_POLICY_WAIT, KVA_POLICY_LEGACY, KVA_POLICY_COST + 1,
					-1};
	c->policy = policies[b & 3];
	if (!(b & 4))
		c->lookup = lookup_cb;
	if (b & 8)
		c->log = log_cb;
	if (b & 16)
		c->wake = wake_cb;
	/* importers: none, every rank, or one rank short (invalid when world > 1) */
	uint32_t nimp = 0;
	switch ((b >> 5) & 3) {
	case 1: nimp = c->world_size; break;
	case 2: nimp = c->world_size ? c->world_size - 1 : 0; break;
	case 3: nimp = 1; break;
	}
	for (uint32_t i = 0; i < nimp && i < KVA_MAX_WORLD; i++)
		c->importers[i] = (kva_importer_ref){import_cb, NULL};
	S.refuse = b >> 7;
	uint8_t cap0 = 0;
	for (int i = 0; i < 5; i++) {
		uint8_t k = fz_u8(&S.in);
		cap0 = i ? cap0 : k;
		k %= 4;
		S.caps[i] = k == 0 ? 0 : k == 1 ? 1 : k == 2 ? 2 : CAP;
	}
	/* The priority fields follow when the first cap byte's bit 2 says so
	 * (inputs written before them stay FCFS and keep their meaning). */
	if (cap0 & 4) {
		static const int orders[4] = {KVA_ORDER_FCFS, KVA_ORDER_PRIORITY, 2, -1};
		c->order = orders[fz_u8(&S.in) & 3];
		/* INT32_MAX + 1 and UINT32_MAX are negative: invalid */
		c->preempt_threshold = (int32_t)u32_class(INT32_MAX);
		c->aging_interval_ns = u64_class();
	}
	/* Bit 3 of the first cap byte: one more byte for the cost policy (after the
	 * priority fields, whose inputs keep their meaning). Its bit 0: COST
	 * instead of the policy above; bit 1: a broken cost config (-EINVAL
	 * under COST, not read under the others); bit 2: a margin from its class. */
	if (cap0 & 8) {
		uint8_t x = fz_u8(&S.in);
		if (x & 1)
			c->policy = KVA_POLICY_COST;
		if (x & 2)
			c->cost.half_life = 0;
		if (x & 4)
			c->cost.margin_pct = u32_class(1000);
	}
}

static void plan_set(bool roomy)
{
	S.plan = (kva_plan){
	    .admitted = S.adm, .admitted_cap = roomy ? CAP : S.caps[0],
	    .pages = S.pages, .pages_cap = roomy ? PAGES_CAP : S.caps[1] * 32,
	    .copies = S.copies, .copies_cap = roomy ? CAP : S.caps[2],
	    .fallbacks = S.fb, .fallbacks_cap = roomy ? CAP : S.caps[3],
	    .ended = S.ended, .ended_cap = roomy ? CAP : S.caps[4],
	};
}

/* ---- checks ---------------------------------------------------------------------- */

static bool elapsed_at_least(uint64_t dur)
{
	if (!S.ingested)
		return false;
	uint64_t el = S.now - S.t_first;
	return el >= dur || dur - el <= SLACK;
}

static void check_after_step(void)
{
	kva_stats st;
	kva_stats_get(S.e, &st);
	CHECK(st.free_pages + st.reserved_pages + st.in_use_pages + st.draining_pages ==
	      st.total_pages);
	CHECK(st.total_pages == S.cfg.total_pages);
	kva_handle victim;
	int vrc = kva_preempt_candidate(S.e, &victim);
	CHECK(S.cfg.order == KVA_ORDER_PRIORITY ? vrc == 0 || vrc == -ENOENT : vrc == -EINVAL);
	if (st.lookups_timed_out)
		CHECK(S.cfg.lookup_timeout_ns && elapsed_at_least(S.cfg.lookup_timeout_ns));
	if (st.refreshes)
		CHECK(S.cfg.lookup_refresh_ns && elapsed_at_least(S.cfg.lookup_refresh_ns));
	if (st.wait_expired)
		CHECK(S.cfg.max_restore_wait_ns && elapsed_at_least(S.cfg.max_restore_wait_ns));
	/* one blocked head at a time: each head logs when its wait begins
	 * (twice at most: a refresh may restart it), then once per interval */
	uint64_t periodic = 0;
	if (S.cfg.wait_log_interval_ns && S.ingested) {
		uint64_t el = S.now - S.t_first;
		el = el > UINT64_MAX - SLACK ? UINT64_MAX : el + SLACK;
		periodic = el / S.cfg.wait_log_interval_ns;
		periodic += periodic < UINT64_MAX; /* (saturating: a 1 ns interval over all time) */
	}
	uint64_t bound = 2 * (uint64_t)S.nh;
	bound = periodic > UINT64_MAX - bound ? UINT64_MAX : bound + periodic;
	CHECK(st.wait_logs <= bound);
	if (!S.bad_answer)
		CHECK(st.fallbacks[KVA_REASON_INCOMPATIBLE] == 0);
}

static void handle_plan(void)
{
	for (uint32_t i = 0; i < S.plan.n_admitted; i++)
		for (uint32_t k = 0; k < S.nh; k++)
			if (S.h[k].h.id == S.plan.admitted[i].handle.id &&
			    S.h[k].h.slot == S.plan.admitted[i].handle.slot &&
			    S.h[k].h.gen == S.plan.admitted[i].handle.gen) {
				CHECK(!S.h[k].ended);
				S.h[k].running = true;
			}
	for (uint32_t i = 0; i < S.plan.n_copies; i++) { /* the host runs plan copies */
		CHECK(S.nj < MAXJ);
		S.jobs[S.nj] = S.plan.copies[i];
		S.jobs[S.nj].pages = NULL;
		S.job_done[S.nj++] = false;
	}
	for (uint32_t i = 0; i < S.plan.n_ended; i++) {
		bool found = false;
		for (uint32_t k = 0; k < S.nh; k++)
			if (S.h[k].h.slot == S.plan.ended[i].handle.slot &&
			    S.h[k].h.gen == S.plan.ended[i].handle.gen &&
			    S.h[k].h.id == S.plan.ended[i].handle.id) {
				CHECK(!S.h[k].ended);
				S.h[k].ended = true;
				S.h[k].running = false;
				found = true;
			}
		CHECK(found);
	}
}

static void do_step(uint64_t dt)
{
	S.now = S.now + dt < S.now ? UINT64_MAX : S.now + dt;
	int n = kva_step(S.e, S.now, &S.plan);
	TRACE("step +%llu -> %d (admitted %u, ended %u, copies %u)\n", (unsigned long long)dt, n,
	      S.plan.n_admitted, S.plan.n_ended, S.plan.n_copies);
	CHECK(n >= 0);
	if (!S.ingested && S.nh) {
		S.ingested = true;
		S.t_first = S.now;
	}
	handle_plan();
	check_after_step();
}

/* ---- operations ------------------------------------------------------------------ */

static void op_submit(void)
{
	if (S.nh == MAXH)
		return;
	uint8_t b = fz_u8(&S.in);
	static const uint32_t prompts[8] = {1, 2, 16, 100, 4096, 1u << 20, UINT32_MAX - 1,
					    UINT32_MAX};
	static const int32_t priorities[8] = {0, 1, -1, 2, INT32_MAX, INT32_MIN, 100, -100};
	kva_request r = {.id = 1 + S.nh,
			 .prefix_key = b & 3,
			 .prompt_tokens = prompts[b >> 5],
			 .priority = priorities[(b >> 2) & 7]};
	int rc = kva_submit(S.e, &r, &S.h[S.nh].h);
	TRACE("submit %u key %u prompt %u priority %d -> %d\n", S.nh, b & 3, r.prompt_tokens,
	      r.priority, rc);
	CHECK(rc == 0);
	S.h[S.nh++].prompt = r.prompt_tokens;
}

static void op_answer(void)
{
	uint8_t b = fz_u8(&S.in);
	if (!S.npend)
		return;
	uint32_t k = b % S.npend;
	uint32_t prompt = S.pend_prompt[k];
	kva_manifest m = {.count = 0};
	uint32_t pos = 0, n = (b >> 4) % 4;
	for (uint32_t i = 0; i < n; i++) {
		uint8_t c = fz_u8(&S.in);
		/* ascending: each class no lower than the last */
		uint32_t want = (c & 3) == 0 ? 1 : (c & 3) == 1 ? prompt / 2 : (c & 3) == 2 ? prompt
											  : UINT32_MAX;
		if (want <= pos) {
			if (pos == UINT32_MAX)
				break;
			want = pos + 1;
		}
		pos = want;
		m.entries[i] = (kva_checkpoint){.position = pos,
						.location = (c & 4) ? KVA_LOC_LOCAL : KVA_LOC_EXTERNAL,
						.compatible = !(c & 8),
						.id = 100 + i,
						.epoch = 1};
		if (!m.entries[i].compatible || pos > prompt)
			S.bad_answer = true;
		m.count = i + 1;
	}
	if (b & 64)
		m.count = 0; /* a miss */
	int rc = kva_lookup_answer(S.e, S.pend[k], &m);
	TRACE("answer %u (%u entries, last %u) -> %d\n", k, m.count, pos, rc);
	CHECK(rc == 0 || rc == -ESTALE || rc == -ENOENT);
	S.pend[k] = S.pend[--S.npend];
	S.pend_prompt[k] = S.pend_prompt[S.npend];
}

static void op_copy(void)
{
	uint8_t b = fz_u8(&S.in);
	if (!S.nj)
		return;
	uint32_t k = b % S.nj;
	if (S.job_done[k])
		return;
	int rc = kva_copy_done(S.e, S.jobs[k].token, S.jobs[k].rank, (b & 128) ? -5 : 0);
	TRACE("copy_done %u rank %u -> %d\n", k, S.jobs[k].rank, rc);
	CHECK(rc == 0 || rc == -ESTALE || rc == -ENOENT || rc == -EALREADY);
	S.job_done[k] = true;
}

static void op_end(void)
{
	uint8_t b = fz_u8(&S.in);
	if (!S.nh)
		return;
	struct hreq *r = &S.h[b % S.nh];
	if (r->ended)
		return;
	if (b & 64) { /* a prefix-cache reset (rule reset-returns-ready) now and then */
		CHECK(kva_reset_prefix_cache(S.e) == 0);
		return;
	}
	if (r->running && (b & 128)) {
		int rc = kva_finish(S.e, r->h);
		CHECK(rc == 0 || rc == -EBUSY || rc == -ENOENT || rc == -EALREADY);
		r->finish_ok |= rc == 0;
		if (rc == 0)
			r->running = false;
	} else if (!r->cancel_ok && !r->finish_ok) {
		int rc = kva_cancel(S.e, r->h);
		CHECK(rc == 0 || rc == -ENOENT || rc == -EALREADY);
		r->cancel_ok |= rc == 0;
	}
}

/* A priority change: refused under FCFS, else taken or the request ended. */
static void op_set_priority(void)
{
	uint8_t b = fz_u8(&S.in);
	static const int32_t to[4] = {INT32_MIN, -1, 1, INT32_MAX};
	if (!S.nh)
		return;
	struct hreq *r = &S.h[b % S.nh];
	int rc = kva_set_priority(S.e, r->h, to[b >> 6]);
	TRACE("set_priority %u %d -> %d\n", b % S.nh, to[b >> 6], rc);
	if (S.cfg.order != KVA_ORDER_PRIORITY)
		CHECK(rc == -EINVAL);
	else
		CHECK(rc == 0 || (rc == -ENOENT && (r->ended || r->cancel_ok || r->finish_ok)));
}

static void final_drain(void)
{
	plan_set(true);
	for (uint32_t round = 0;; round++) {
		CHECK(round < 64);
		for (uint32_t k = 0; k < S.nj; k++)
			if (!S.job_done[k]) {
				int rc = kva_copy_done(S.e, S.jobs[k].token, S.jobs[k].rank, 0);
				CHECK(rc == 0 || rc == -ESTALE || rc == -ENOENT || rc == -EALREADY);
				S.job_done[k] = true;
			}
		bool quiet = true;
		for (uint32_t i = 0; i < S.nh; i++) {
			struct hreq *r = &S.h[i];
			if (r->ended)
				continue;
			quiet = false;
			if (r->running && !r->finish_ok && !r->cancel_ok) {
				int rc = kva_finish(S.e, r->h);
				CHECK(rc == 0 || rc == -EBUSY);
				r->finish_ok |= rc == 0;
			} else if (!r->cancel_ok && !r->finish_ok) {
				int rc = kva_cancel(S.e, r->h);
				CHECK(rc == 0 || rc == -ENOENT || rc == -EALREADY);
				r->cancel_ok |= rc == 0;
			}
		}
		if (quiet && round > 0)
			break;
		do_step(1000000);
	}
	kva_stats st;
	kva_stats_get(S.e, &st);
	CHECK(st.free_pages == st.total_pages);
	CHECK(st.free_copy_slots == S.cfg.copy_slots && st.free_run_slots == S.cfg.max_running);
	CHECK(st.waiting + st.importing + st.ready + st.running == 0);
	CHECK(st.finished + st.cancelled + st.rejected == S.nh);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	memset(&S, 0, sizeof(S));
	fz_init(&S.in, data, size);
	configure();
	TRACE("config: pages %u x %u tok, watermark %u, headroom %u, chunk %u, slots %u, running "
	      "%u, world %u, retries %u, policy %d, timeouts %llu/%llu/%llu/%llu, start %llu, "
	      "order %d, threshold %d, aging %llu\n",
	      S.cfg.total_pages, S.cfg.page_tokens, S.cfg.decode_reserve_pages,
	      S.cfg.decode_headroom_pages, S.cfg.prefill_chunk_tokens, S.cfg.copy_slots,
	      S.cfg.max_running, S.cfg.world_size, S.cfg.max_copy_retries, S.cfg.policy,
	      (unsigned long long)S.cfg.lookup_timeout_ns,
	      (unsigned long long)S.cfg.max_restore_wait_ns,
	      (unsigned long long)S.cfg.wait_log_interval_ns,
	      (unsigned long long)S.cfg.lookup_refresh_ns, (unsigned long long)S.cfg.start_ns,
	      S.cfg.order, S.cfg.preempt_threshold, (unsigned long long)S.cfg.aging_interval_ns);
	int err = 1;
	S.e = kva_engine_create(&S.cfg, &err);
	bool valid = config_valid(&S.cfg);
	TRACE("create -> %d (documented %s)\n", err, valid ? "valid" : "invalid");
	if (!valid) {
		CHECK(!S.e && err == -EINVAL);
		return 0;
	}
	CHECK(S.e && err == 0);
	S.now = S.cfg.start_ns;
	plan_set(false);
	for (int ops = 0; ops < 48 && fz_more(&S.in); ops++) {
		uint8_t op = fz_u8(&S.in);
		switch (op % 8) {
		case 0:
		case 1:
			op_submit();
			break;
		case 2:
			op_answer();
			break;
		case 3:
			op_copy();
			break;
		case 4:
			op_end();
			break;
		case 7:
			op_set_priority();
			break;
		default: {
			static const uint64_t dt[8] = {0, 1, 1ull << 20, 1000000000ull,
						       60000000000ull, 1ull << 62, UINT64_MAX / 2,
						       UINT64_MAX};
			do_step(dt[(op >> 3) & 7]);
			break;
		}
		}
	}
	final_drain();
	kva_engine_destroy(S.e);
	S.e = NULL;
	return 0;
}
