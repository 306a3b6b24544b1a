/* SPDX-License-Identifier: Apache-2.0 */
/* What the engine tells the host: the statistics snapshot (atomics only,
 * any thread), its Prometheus-style text rendering, and log lines through
 * the host's callback. A leaf: calls nothing else in reservations/. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "engine_state.h"

void kva__plan_too_small(kva_engine *e, uint64_t id, const char *what, uint32_t need)
{
	kva_plan *p = e->plan;
	if (p->too_small)
		return;
	p->too_small = true;
	kva__st_sched(e, ST_PLAN_TOO_SMALL, 1);
	if (!e->was_too_small)
		kva__log(e, KVA_LOG_ERROR,
		         "kvadmit: the plan is too small for request %llu's %s (needs %u; plan has "
		         "%u admissions, %u pages, %u copies): it waits; see kva_plan_min_sizes",
		         (unsigned long long)id, what, need, p->admitted_cap, p->pages_cap,
		         p->copies_cap);
}

void kva__alloc_failed(kva_engine *e, uint64_t id, const char *what)
{
	kva__st_sched(e, ST_ALLOC_FAILURES, 1);
	if (!e->alloc_failing)
		kva__log(e, KVA_LOG_WARN, "kvadmit: out of memory for request %llu's %s; retried next step",
		         (unsigned long long)id, what);
	e->alloc_failing = true;
}

void kva__log(kva_engine *e, int level, const char *fmt, ...)
{
	if (!e->cfg.log)
		return;
	char msg[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	e->cfg.log(e->cfg.log_ctx, level, msg);
}

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
}

size_t kva_stats_format(const kva_stats *s, char *buf, size_t len)
{
	if (!s)
		return 0;
	struct {
		const char *name;
		uint64_t v;
	} rows[] = {
		{"kvadmit_pages_total", s->total_pages},
		{"kvadmit_pages_free", s->free_pages},
		{"kvadmit_pages_reserved", s->reserved_pages},
		{"kvadmit_pages_in_use", s->in_use_pages},
		{"kvadmit_pages_draining", s->draining_pages},
		{"kvadmit_copy_slots_free", s->free_copy_slots},
		{"kvadmit_requests_submitted_total", s->submitted},
		{"kvadmit_requests_finished_total", s->finished},
		{"kvadmit_requests_cancelled_total", s->cancelled},
		{"kvadmit_requests_rejected_total", s->rejected},
		{"kvadmit_requests_preempted_total", s->preempted},
		{"kvadmit_requests_waiting", s->waiting},
		{"kvadmit_requests_importing", s->importing},
		{"kvadmit_requests_ready", s->ready},
		{"kvadmit_requests_running", s->running},
		{"kvadmit_admitted_restore_total", s->admitted_restore},
		{"kvadmit_admitted_local_total", s->admitted_local},
		{"kvadmit_admitted_recompute_total", s->admitted_recompute},
		{"kvadmit_prompt_tokens_admitted_total", s->prompt_tokens_admitted},
		{"kvadmit_prompt_tokens_local_total", s->tokens_local},
		{"kvadmit_prompt_tokens_restored_total", s->tokens_restored},
		{"kvadmit_prompt_tokens_recomputed_total", s->tokens_recomputed},
		{"kvadmit_lookups_total", s->lookups_issued},
		{"kvadmit_lookup_timeouts_total", s->lookups_timed_out},
		{"kvadmit_late_answers_total", s->late_answers},
		{"kvadmit_copy_jobs_total", s->copy_jobs},
		{"kvadmit_copy_failures_total", s->copy_attempts_failed},
		{"kvadmit_steps_total", s->steps},
		{"kvadmit_restores_waiting", s->restores_waiting},
		{"kvadmit_capacity_wait_nanoseconds", s->capacity_wait_ns},
		{"kvadmit_local_checkpoints_stated", s->local_stated},
		{"kvadmit_local_upgrades", s->local_upgrades},
		{"kvadmit_plan_too_small_steps", s->plan_too_small},
		{"kvadmit_step_allocation_failures", s->alloc_failures},
	};
	size_t need = 0, written = 0; /* whole lines only: written <= need */
	char line[160];
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		int n = snprintf(line, sizeof(line), "%s %llu\n", rows[i].name,
		                 (unsigned long long)rows[i].v);
		if (buf && need + (size_t)n < len) {
			memcpy(buf + need, line, (size_t)n);
			written = need + (size_t)n;
		}
		need += (size_t)n;
	}
	for (int r = 1; r < KVA_REASON_COUNT; r++) {
		int n = snprintf(line, sizeof(line), "kvadmit_fallbacks_total{reason=\"%s\"} %llu\n",
		                 kva_reason_name(r), (unsigned long long)s->fallbacks[r]);
		if (buf && need + (size_t)n < len) {
			memcpy(buf + need, line, (size_t)n);
			written = need + (size_t)n;
		}
		need += (size_t)n;
	}
	/* end after the last whole line written: the bytes behind it were
	 * never written */
	if (buf && len)
		buf[written] = '\0';
	return need;
}
