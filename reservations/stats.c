/* SPDX-License-Identifier: Apache-2.0 */
/* What the engine tells the host (see stats.h): the statistics snapshot
 * (atomics only, any thread) with its measured durations, its Prometheus /
 * OpenMetrics text rendering, and log lines through the host's callbacks.
 * Reads the engine state; calls nothing else in reservations/. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "stats.h"

/* ---- log lines ---------------------------------------------------------------- */

#define LOG_BURST 16 /* lines per event per second of the step's clock */

void kva__log(kva_engine *e, int level, int event, const struct kva__req *r, int reason,
              uint64_t value, const char *fmt, ...)
{
	if ((!e->cfg.log && !e->cfg.log_record) || level < e->cfg.log_level)
		return;
	if (event > 0 && event < KVA_LOGEV_COUNT) {
		uint64_t second = e->now / 1000000000ull;
		if (e->log_rate[event].window != second) {
			e->log_rate[event].window = second;
			e->log_rate[event].lines = 0;
		}
		if (++e->log_rate[event].lines > LOG_BURST) {
			kva__st_add_single_writer(e, ST_LOGS_SUPPRESSED, 1);
			return;
		}
	}
	char msg[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (e->cfg.log)
		e->cfg.log(e->cfg.log_ctx, level, msg);
	if (e->cfg.log_record) {
		kva_log_record rec = {level, event, {0, 0, 0}, reason, value, msg};
		if (r)
			rec.handle = kva__rec_handle((struct kva__req *)r);
		e->cfg.log_record(e->cfg.log_record_ctx, &rec);
	}
}

void kva__plan_too_small(kva_engine *e, uint64_t id, const char *what, uint32_t need)
{
	kva_plan *p = e->plan;
	if (p->too_small)
		return;
	p->too_small = true;
	kva__st_add_single_writer(e, ST_PLAN_TOO_SMALL, 1);
	if (!e->was_too_small)
		kva__log(e, KVA_LOG_ERROR, KVA_LOGEV_PLAN_TOO_SMALL, NULL, 0, need,
		         "kvadmit: the plan is too small for request %llu's %s (needs %u; plan has "
		         "%u admissions, %u pages, %u copies): it waits; see kva_plan_min_sizes",
		         (unsigned long long)id, what, need, p->admitted_cap, p->pages_cap,
		         p->copies_cap);
}

void kva__alloc_failed(kva_engine *e, uint64_t id, const char *what)
{
	kva__st_add_single_writer(e, ST_ALLOC_FAILURES, 1);
	if (!e->alloc_failing)
		kva__log(e, KVA_LOG_WARN, KVA_LOGEV_NO_MEMORY, NULL, 0, 0,
		         "kvadmit: out of memory for request %llu's %s; retried next step",
		         (unsigned long long)id, what);
	e->alloc_failing = true;
}

/* ---- measured durations ------------------------------------------------------- */

#define MS 1000000ull
#define SEC (1000 * MS)
static const uint64_t hist_bounds[KVA_HIST_BUCKETS - 1] = {
	1 * MS, 5 * MS, 10 * MS, 50 * MS, 100 * MS, 250 * MS, 500 * MS,
	1 * SEC, 2 * SEC, 5 * SEC, 10 * SEC, 30 * SEC, 60 * SEC,
};

const uint64_t *kva_histogram_bounds(void) { return hist_bounds; }

void kva__observe(kva_engine *e, enum kva__hist h, uint64_t ns)
{
	_Atomic uint64_t *w = e->hist[h];
	unsigned b = 0;
	while (b < KVA_HIST_BUCKETS - 1 && ns > hist_bounds[b])
		b++;
	/* one writer (the scheduler): plain read-modify-store, atomic for readers */
	atomic_store_explicit(&w[0], atomic_load_explicit(&w[0], memory_order_relaxed) + 1,
	                      memory_order_relaxed);
	atomic_store_explicit(&w[1], atomic_load_explicit(&w[1], memory_order_relaxed) + ns,
	                      memory_order_relaxed);
	atomic_store_explicit(&w[2 + b], atomic_load_explicit(&w[2 + b], memory_order_relaxed) + 1,
	                      memory_order_relaxed);
}

/* Cumulative buckets, as the host reads them. */
static void hist_get(const kva_engine *e, enum kva__hist h, kva_histogram *out)
{
	const _Atomic uint64_t *w = e->hist[h];
	uint64_t run = 0;
	for (unsigned b = 0; b < KVA_HIST_BUCKETS; b++) {
		run += atomic_load_explicit(&w[2 + b], memory_order_relaxed);
		out->buckets[b] = run;
	}
	out->count = run; /* consistent with the buckets even while they move */
	out->sum_ns = atomic_load_explicit(&w[1], memory_order_relaxed);
}

/* ---- the snapshot -------------------------------------------------------------- */

static uint64_t submitted(const kva_engine *e)
{
	uint64_t n = 0;
	for (int i = 0; i < KVA__SHARDS; i++)
		n += atomic_load_explicit(&e->shard[i].submitted, memory_order_relaxed);
	return n;
}

void kva_stats_get(const kva_engine *e, kva_stats *out)
{
	if (!out)
		return;
	memset(out, 0, sizeof(*out));
	if (!e)
		return;
	struct kva_credits f = kva_capacity_free(&e->cap);
	out->total_pages = e->cfg.total_pages;
	out->free_pages = f.pages;
	out->free_copy_slots = f.slots;
	out->free_run_slots = f.runs;
	out->reserved_pages = kva__st_get(e, ST_RESERVED_PAGES);
	out->in_use_pages = kva__st_get(e, ST_IN_USE_PAGES);
	out->draining_pages = kva__st_get(e, ST_DRAINING_PAGES);
	out->submitted = submitted(e);
	out->ingested = kva__st_get(e, ST_INGESTED);
	out->rejected = kva__st_get(e, ST_REJECTED);
	out->finished = kva__st_get(e, ST_FINISHED);
	out->cancelled = kva__st_get(e, ST_CANCELLED);
	out->preempted = kva__st_get(e, ST_PREEMPTED);
	out->waiting = kva__st_get(e, ST_WAITING);
	out->importing = kva__st_get(e, ST_IMPORTING);
	out->ready = kva__st_get(e, ST_READY);
	out->running = kva__st_get(e, ST_RUNNING);
	out->admitted_restore = kva__st_get(e, ST_ADMIT_RESTORE);
	out->admitted_local = kva__st_get(e, ST_ADMIT_LOCAL);
	out->admitted_recompute = kva__st_get(e, ST_ADMIT_RECOMPUTE);
	out->prompt_tokens_admitted = kva__st_get(e, ST_TOK_ADMITTED);
	out->tokens_local = kva__st_get(e, ST_TOK_LOCAL);
	out->tokens_restored = kva__st_get(e, ST_TOK_RESTORED);
	out->tokens_recomputed = kva__st_get(e, ST_TOK_RECOMPUTED);
	out->lookups_issued = kva__st_get(e, ST_LOOKUPS);
	out->lookups_answered = kva__st_get(e, ST_ANSWERED);
	out->lookups_timed_out = kva__st_get(e, ST_LOOKUP_TIMEOUTS);
	out->late_answers = kva__st_get(e, ST_LATE_ANSWERS);
	out->refreshes = kva__st_get(e, ST_REFRESHES);
	out->revalidations = kva__st_get(e, ST_REVALIDATIONS);
	out->copy_jobs = kva__st_get(e, ST_COPY_JOBS);
	out->copy_attempts_failed = kva__st_get(e, ST_COPY_FAILED);
	out->copy_retries = kva__st_get(e, ST_COPY_RETRIES);
	out->shorter_fallbacks = kva__st_get(e, ST_SHORTER);
	out->stale_copy_reports = kva__st_get(e, ST_STALE_COPY);
	for (int i = 0; i < KVA_REASON_COUNT; i++)
		out->fallbacks[i] = kva__st_get(e, (enum kva__stat)(ST_FALLBACK0 + i));
	out->restore_blocked_steps = kva__st_get(e, ST_BLOCKED_STEPS);
	out->wait_logs = kva__st_get(e, ST_WAIT_LOGS);
	out->wait_expired = kva__st_get(e, ST_WAIT_EXPIRED);
	out->steps = kva__st_get(e, ST_STEPS);
	out->events = kva__st_get(e, ST_EVENTS);
	out->restores_waiting = kva__st_get(e, ST_RESTORES_WAITING);
	out->capacity_wait_ns = kva__st_get(e, ST_CAPACITY_WAIT_NS);
	out->local_stated = kva__st_get(e, ST_LOCAL_STATED);
	out->local_upgrades = kva__st_get(e, ST_LOCAL_UPGRADES);
	out->plan_too_small = kva__st_get(e, ST_PLAN_TOO_SMALL);
	out->alloc_failures = kva__st_get(e, ST_ALLOC_FAILURES);
	out->logs_suppressed = kva__st_get(e, ST_LOGS_SUPPRESSED);
	out->priority_levels = kva__st_get(e, ST_PRIO_LEVELS);
	out->urgent_level = (int64_t)kva__st_get(e, ST_URGENT_LEVEL);
	out->lax_level = (int64_t)kva__st_get(e, ST_LAX_LEVEL);
	out->urgent_waiting = kva__st_get(e, ST_URGENT_WAITING);
	out->lax_waiting = kva__st_get(e, ST_LAX_WAITING);
	out->urgent_wait_ns = kva__st_get(e, ST_URGENT_WAIT_NS);
	out->lax_wait_ns = kva__st_get(e, ST_LAX_WAIT_NS);
	for (int i = 0; i < KVA_PRIORITY_CLASSES; i++)
		out->admitted_by_priority[i] = kva__st_get(e, (enum kva__stat)(ST_ADMIT_PRIO0 + i));
	out->cost_restores = kva__st_get(e, ST_COST_RESTORE);
	out->cost_other_checkpoint = kva__st_get(e, ST_COST_OTHER);
	out->cost_recomputes = kva__st_get(e, ST_COST_RECOMPUTE);
	const struct kva__cost *m = &e->cost;
	uint64_t x = atomic_load_explicit(&m->pub_ns_per_token_x1000, memory_order_relaxed);
	out->prefill_tokens_per_s = x ? (uint64_t)(1e12 / (double)x) : 0;
	out->prefill_attn_ps = atomic_load_explicit(&m->pub_attn_ps, memory_order_relaxed);
	for (int t = 0; t < KVA_TIER_COUNT; t++) {
		out->tier_bytes_per_s[t] = atomic_load_explicit(&m->pub_bytes_per_s[t],
		                                                memory_order_relaxed);
		out->tier_setup_ns[t] = atomic_load_explicit(&m->pub_setup_ns[t], memory_order_relaxed);
	}
	out->copy_slot_interval_ns = atomic_load_explicit(&m->pub_slot_interval_ns,
	                                                  memory_order_relaxed);
	hist_get(e, H_CAPACITY_WAIT, &out->capacity_wait);
	hist_get(e, H_LOOKUP, &out->lookup_latency);
	hist_get(e, H_COPY, &out->copy_duration);
	hist_get(e, H_ADMISSION, &out->time_to_admission);
}

/* ---- text exposition -------------------------------------------------------------- */

/* Appends whole lines to buf while they fit; counts what all of them need. */
struct out {
	char *buf;
	size_t len, need, written;
	bool full; /* a line did not fit: no later line is written either */
};

static void emit(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void emit(struct out *o, const char *fmt, ...)
{
	char line[256];
	va_list ap, again;
	va_start(ap, fmt);
	va_copy(again, ap);
	int n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (n >= 0 && o->buf && !o->full && o->need + (size_t)n < o->len) {
		if ((size_t)n < sizeof(line)) /* the usual case: one copy of a short line */
			memcpy(o->buf + o->need, line, (size_t)n);
		else /* longer than line[]: format it again, in place (it fits) */
			vsnprintf(o->buf + o->need, (size_t)n + 1, fmt, again);
		o->written = o->need + (size_t)n;
	} else {
		o->full = true;
	}
	va_end(again);
	if (n >= 0)
		o->need += (size_t)n;
}

enum kind { COUNTER, GAUGE };

/* # HELP and # TYPE of one family. OpenMetrics names a counter family
 * without its samples' _total suffix. */
static void family(struct out *o, bool om, const char *name, enum kind k, const char *help)
{
	const char *suffix = k == COUNTER && !om ? "_total" : "";
	emit(o, "# HELP %s%s %s\n", name, suffix, help);
	emit(o, "# TYPE %s%s %s\n", name, suffix, k == COUNTER ? "counter" : "gauge");
}

static void sample(struct out *o, enum kind k, const char *name, const char *labels, uint64_t v)
{
	emit(o, "%s%s%s %llu\n", name, k == COUNTER ? "_total" : "", labels,
	     (unsigned long long)v);
}

/* One label value and its sample. */
struct lv {
	const char *label;
	uint64_t v;
};

/* A family whose samples differ by one label (`key`): rows end at a NULL label. */
static void labelled(struct out *o, bool om, const char *name, enum kind k, const char *help,
                     const char *key, const struct lv *rows)
{
	family(o, om, name, k, help);
	for (; rows->label; rows++) {
		char labels[80];
		snprintf(labels, sizeof(labels), "{%s=\"%s\"}", key, rows->label);
		sample(o, k, name, labels, rows->v);
	}
}

static void single(struct out *o, bool om, const char *name, enum kind k, const char *help,
                   uint64_t v)
{
	family(o, om, name, k, help);
	sample(o, k, name, "", v);
}

/* A bound in seconds as OpenMetrics' canonical numbers write it (and
 * Prometheus reads it): no trailing zeros, at least one digit after the
 * point, "0.01" and "1.0", never "0.010". `le` is compared as a string by
 * consumers, so the same bound must always be the same text. */
static void canonical_seconds(char *out, size_t len, uint64_t ns)
{
	char frac[16];
	snprintf(frac, sizeof(frac), "%09llu", (unsigned long long)(ns % 1000000000u));
	size_t digits = 9;
	while (digits > 1 && frac[digits - 1] == '0')
		digits--;
	snprintf(out, len, "%llu.%.*s", (unsigned long long)(ns / 1000000000u), (int)digits, frac);
}

static void histogram(struct out *o, bool om, const char *name, const char *help,
                      const kva_histogram *h)
{
	emit(o, "# HELP %s %s\n", name, help);
	emit(o, "# TYPE %s histogram\n", name);
	if (om)
		emit(o, "# UNIT %s seconds\n", name);
	for (unsigned b = 0; b < KVA_HIST_BUCKETS - 1; b++) {
		char le[32];
		canonical_seconds(le, sizeof(le), hist_bounds[b]);
		emit(o, "%s_bucket{le=\"%s\"} %llu\n", name, le, (unsigned long long)h->buckets[b]);
	}
	emit(o, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)h->count);
	emit(o, "%s_sum %.9f\n", name, (double)h->sum_ns / 1e9);
	emit(o, "%s_count %llu\n", name, (unsigned long long)h->count);
}

size_t kva_stats_format_as(const kva_stats *s, int format, char *buf, size_t len)
{
	if (!s || (format != KVA_METRICS_PROMETHEUS && format != KVA_METRICS_OPENMETRICS))
		return 0;
	bool om = format == KVA_METRICS_OPENMETRICS;
	struct out o = {buf, len, 0, 0, false};

	family(&o, om, "kvadmit_build_info", GAUGE, "kvadmit library version.");
	emit(&o, "kvadmit_build_info{version=\"%s\"} 1\n", kva_version_string());

	/* the page pool: total = free + reserved + in use + draining at quiescence */
	single(&o, om, "kvadmit_pool_pages", GAUGE, "Pages in the KV-cache pool.", s->total_pages);
	labelled(&o, om, "kvadmit_pages", GAUGE, "Pool pages by what holds them.", "state",
		 (const struct lv[]){{"free", s->free_pages},
				     {"reserved", s->reserved_pages},
				     {"in_use", s->in_use_pages},
				     {"draining", s->draining_pages},
				     {NULL, 0}});
	single(&o, om, "kvadmit_copy_slots_free", GAUGE, "Copy slots free.", s->free_copy_slots);
	single(&o, om, "kvadmit_run_slots_free", GAUGE, "Running slots free.", s->free_run_slots);

	labelled(&o, om, "kvadmit_requests", GAUGE, "Requests by state now.", "state",
		 (const struct lv[]){{"waiting", s->waiting},
				     {"importing", s->importing},
				     {"ready", s->ready},
				     {"running", s->running},
				     {NULL, 0}});
	labelled(&o, om, "kvadmit_request_events", COUNTER, "Request lifecycle events.", "event",
		 (const struct lv[]){{"submitted", s->submitted},
				     {"ingested", s->ingested},
				     {"rejected", s->rejected},
				     {"finished", s->finished},
				     {"cancelled", s->cancelled},
				     {"preempted", s->preempted},
				     {NULL, 0}});

	labelled(&o, om, "kvadmit_admissions", COUNTER, "Admissions by how the prefix was served.",
		 "how",
		 (const struct lv[]){{"restore", s->admitted_restore},
				     {"local", s->admitted_local},
				     {"recompute", s->admitted_recompute},
				     {NULL, 0}});
	single(&o, om, "kvadmit_prompt_tokens_admitted", COUNTER,
	       "Prompt tokens of admitted requests.", s->prompt_tokens_admitted);
	labelled(&o, om, "kvadmit_prompt_tokens", COUNTER,
		 "Admitted prompt tokens by source, each counted once.", "source",
		 (const struct lv[]){{"local", s->tokens_local},
				     {"restored", s->tokens_restored},
				     {"recomputed", s->tokens_recomputed},
				     {NULL, 0}});

	labelled(&o, om, "kvadmit_lookups", COUNTER, "Directory lookups by outcome.", "event",
		 (const struct lv[]){{"issued", s->lookups_issued},
				     {"answered", s->lookups_answered},
				     {"timed_out", s->lookups_timed_out},
				     {"late_answer", s->late_answers},
				     {"refresh", s->refreshes},
				     {"revalidation", s->revalidations},
				     {NULL, 0}});

	labelled(&o, om, "kvadmit_copies", COUNTER, "Copy jobs and what became of them.", "event",
		 (const struct lv[]){{"job", s->copy_jobs},
				     {"attempt_failed", s->copy_attempts_failed},
				     {"retry", s->copy_retries},
				     {"shorter_checkpoint", s->shorter_fallbacks},
				     {"stale_report", s->stale_copy_reports},
				     {NULL, 0}});

	family(&o, om, "kvadmit_fallbacks", COUNTER,
	       "Fallback decisions to the ordinary path, by reason (a request may count again "
	       "after a preemption, or be upgraded or cancelled later).");
	for (int r = 1; r < KVA_REASON_COUNT; r++) {
		char labels[64];
		snprintf(labels, sizeof(labels), "{reason=\"%s\"}", kva_reason_name(r));
		sample(&o, COUNTER, "kvadmit_fallbacks", labels, s->fallbacks[r]);
	}

	single(&o, om, "kvadmit_restore_blocked_steps", COUNTER,
	       "Steps in which a restore at the head waited for capacity.",
	       s->restore_blocked_steps);
	single(&o, om, "kvadmit_wait_logs", COUNTER, "Capacity-wait log lines.", s->wait_logs);
	single(&o, om, "kvadmit_wait_expired", COUNTER, "Bounded restore waits that expired.",
	       s->wait_expired);
	single(&o, om, "kvadmit_restores_waiting", GAUGE,
	       "Restores waiting for capacity now (checkpoint selected).", s->restores_waiting);
	family(&o, om, "kvadmit_capacity_wait_seconds", GAUGE,
	       "How long the blocked head restore has waited so far.");
	emit(&o, "kvadmit_capacity_wait_seconds %.9f\n", (double)s->capacity_wait_ns / 1e9);
	single(&o, om, "kvadmit_steps", COUNTER, "Scheduler steps.", s->steps);
	single(&o, om, "kvadmit_events", COUNTER, "Inbox events handled.", s->events);
	single(&o, om, "kvadmit_local_checkpoints_stated", COUNTER,
	       "Local checkpoints the host stated after submit.", s->local_stated);
	single(&o, om, "kvadmit_local_upgrades", COUNTER,
	       "Waiting selections a stated local checkpoint upgraded.", s->local_upgrades);
	single(&o, om, "kvadmit_plan_too_small_steps", COUNTER,
	       "Steps whose plan could not hold an admission or copy job.", s->plan_too_small);
	single(&o, om, "kvadmit_step_allocation_failures", COUNTER,
	       "Allocations a step needed and could not get.", s->alloc_failures);
	single(&o, om, "kvadmit_logs_suppressed", COUNTER, "Log lines dropped by the rate limit.",
	       s->logs_suppressed);

	labelled(&o, om, "kvadmit_cost_decisions", COUNTER,
		 "Cost policy choices at the head: restore the longest checkpoint, another "
		 "(shorter or other-tier) one, or recompute.", "choice",
		 (const struct lv[]){{"restore", s->cost_restores},
				     {"other_checkpoint", s->cost_other_checkpoint},
				     {"recompute", s->cost_recomputes},
				     {NULL, 0}});
	single(&o, om, "kvadmit_cost_prefill_tokens_per_second", GAUGE,
	       "Learned prefill rate (the seed until the host reports one).",
	       s->prefill_tokens_per_s);
	single(&o, om, "kvadmit_cost_prefill_attention_picoseconds", GAUGE,
	       "Learned attention term of a prefill: picoseconds per unit of end^2 - start^2 of "
	       "the positions prefilled.",
	       s->prefill_attn_ps);
	static const char *const tiers[KVA_TIER_COUNT] = {"unknown", "gpu", "host", "disk",
	                                                  "remote"};
	struct lv bw[KVA_TIER_COUNT + 1], setup[KVA_TIER_COUNT + 1];
	for (int t = 0; t < KVA_TIER_COUNT; t++) {
		bw[t] = (struct lv){tiers[t], s->tier_bytes_per_s[t]};
		setup[t] = (struct lv){tiers[t], s->tier_setup_ns[t]};
	}
	bw[KVA_TIER_COUNT] = setup[KVA_TIER_COUNT] = (struct lv){NULL, 0};
	labelled(&o, om, "kvadmit_cost_copy_bytes_per_second", GAUGE,
		 "Learned copy bandwidth per tier (the seed until measured).", "tier", bw);
	labelled(&o, om, "kvadmit_cost_copy_setup_nanoseconds", GAUGE,
		 "Learned copy setup latency per tier (the seed until measured).", "tier", setup);
	single(&o, om, "kvadmit_cost_copy_slot_interval_nanoseconds", GAUGE,
	       "Mean time between copy-slot releases (0: none seen).", s->copy_slot_interval_ns);

	histogram(&o, om, "kvadmit_capacity_wait_duration_seconds",
		  "Time a head waited for capacity, per wait.", &s->capacity_wait);
	histogram(&o, om, "kvadmit_lookup_duration_seconds",
		  "Time from a decisive lookup to its answer.", &s->lookup_latency);
	histogram(&o, om, "kvadmit_copy_duration_seconds",
		  "Time from a copy attempt's dispatch to its last rank's report.",
		  &s->copy_duration);
	histogram(&o, om, "kvadmit_time_to_admission_seconds",
		  "Time from ingest (or requeue) to admission.", &s->time_to_admission);
	/* priority order (zeros under FCFS): last, so that the families before keep their place */
	const uint64_t *ap = s->admitted_by_priority;
	labelled(&o, om, "kvadmit_admissions_by_priority", COUNTER,
		 "Admissions by priority class (priority order).", "priority",
		 (const struct lv[]){{"negative", ap[0]}, {"0", ap[1]}, {"1", ap[2]},
				     {"2-3", ap[3]}, {"4-7", ap[4]}, {"8-15", ap[5]},
				     {"16-255", ap[6]}, {"256+", ap[7]}, {NULL, 0}});
	single(&o, om, "kvadmit_priority_levels", GAUGE,
	       "Priority levels in use in the waiting queue.", s->priority_levels);
	labelled(&o, om, "kvadmit_priority_waiting", GAUGE,
		 "Waiting requests of the most and the least urgent priority level.", "level",
		 (const struct lv[]){{"most_urgent", s->urgent_waiting},
				     {"least_urgent", s->lax_waiting},
				     {NULL, 0}});
	family(&o, om, "kvadmit_priority_wait_seconds", GAUGE,
	       "How long the first request of the most and the least urgent level has waited.");
	emit(&o, "kvadmit_priority_wait_seconds{level=\"most_urgent\"} %.9f\n",
	     (double)s->urgent_wait_ns / 1e9);
	emit(&o, "kvadmit_priority_wait_seconds{level=\"least_urgent\"} %.9f\n",
	     (double)s->lax_wait_ns / 1e9);
	if (om)
		emit(&o, "# EOF\n");
	/* end after the last whole line written: the bytes behind it were
	 * never written */
	if (buf && len)
		buf[o.written] = '\0';
	return o.need;
}

size_t kva_stats_format(const kva_stats *s, char *buf, size_t len)
{
	return kva_stats_format_as(s, KVA_METRICS_PROMETHEUS, buf, len);
}
