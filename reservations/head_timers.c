/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The head's timers (rules bounded-wait, wait-logs-and-refreshes): a restore
 * blocked on capacity at the head of the waiting queue arms a bounded wait,
 * a periodic log line and a periodic lookup refresh; they go when it stops
 * being the blocked head. Owns e->head_req, e->head_timer and the refresh
 * bookkeeping. Calls lookup.c (refreshes, the fallback at expiry) and
 * stats.c. Scheduler thread only.
 */
#include "head_timers.h"
#include "lookup.h"
#include "stats.h"

void kva__head_timers_forget(kva_engine *e, struct kva__req *r)
{
	if (!r || e->head_req != r)
		return;
	for (int i = 0; i < HT_COUNT; i++)
		kva_timerwheel_cancel(&e->wheel, &e->head_timer[i]);
	e->head_req = NULL;
	atomic_store_explicit(&e->st[ST_CAPACITY_WAIT_NS], 0, memory_order_relaxed);
}

/* One log line through the host's callbacks about a restore waiting. */
static void log_wait(kva_engine *e, struct kva__req *r, const char *what, int event)
{
	uint32_t need = kva__pages_for(e, r->prompt_tokens) + e->cfg.decode_headroom_pages;
	uint64_t waited = e->now - r->blocked_since;
	bool expired = event == KVA_LOGEV_WAIT_EXPIRED;
	kva__log(e, expired ? KVA_LOG_WARN : KVA_LOG_INFO, event, r, 0,
	         event == KVA_LOGEV_WAIT_STARTED ? need : waited,
	         "kvadmit: restore of request %llu %s %.1f s for capacity (needs %u pages, %u free)%s",
	         (unsigned long long)r->id, what, (double)waited / 1e9, need,
	         kva_capacity_free(&e->cap).pages, expired ? "; recomputing instead" : "");
}

void kva__head_timers_fired(kva_engine *e, int which)
{
	struct kva__req *r = e->head_req;
	if (!r)
		return;
	if (!(r->flags & KVA__F_RESTORE)) {
		/* its selection went (an eviction's re-lookup is out): the head
		 * is no longer timed as a restore. If it blocks as one again,
		 * kva__head_timers_block re-arms from blocked_since, so a bound already
		 * passed fires at the next step instead of being lost. */
		kva__head_timers_forget(e, r);
		return;
	}
	switch (which) {
	case HT_WAIT:
		if (e->cfg.max_restore_wait_ns &&
		    e->now - r->blocked_since < e->cfg.max_restore_wait_ns) {
			/* the cost policy's earlier deadline (kva__head_timers_deadline):
			 * this step's admission decides; the bound stays armed */
			kva_timerwheel_arm(&e->wheel, &e->head_timer[HT_WAIT],
			                   kva__after(r->blocked_since, e->cfg.max_restore_wait_ns));
			break;
		}
		if (!e->cfg.max_restore_wait_ns)
			break; /* an unbounded wait's cost deadline: admission decides */
		/* rule bounded-wait: give up once, say so once, stop holding others as a restore */
		log_wait(e, r, "waited", KVA_LOGEV_WAIT_EXPIRED);
		kva__observe(e, H_CAPACITY_WAIT, e->now - r->blocked_since);
		r->flags &= (uint16_t)~KVA__F_BLOCKED; /* its wait as a restore is over */
		r->ahead = 0;                          /* not a hint: a time */
		kva__st_add_single_writer(e, ST_WAIT_EXPIRED, 1);
		kva__head_timers_forget(e, r);
		kva__fallback(e, r, KVA_REASON_WAIT_EXPIRED);
		break;
	case HT_LOG:
		log_wait(e, r, "waiting", KVA_LOGEV_WAIT_ONGOING);
		kva__st_add_single_writer(e, ST_WAIT_LOGS, 1);
		kva_timerwheel_arm(&e->wheel, &e->head_timer[HT_LOG],
		                   kva__after(e->now, e->cfg.wait_log_interval_ns));
		break;
	case HT_REFRESH:
		/* One refresh per interval. A refresh has no deadline: one still
		 * out after as long as any lookup may take (lookup_timeout_ns, or
		 * one interval without a timeout) was lost, and the new one
		 * supersedes it (its answer, if it ever comes, is refused as
		 * late), or a single lost answer would end refreshing for the
		 * whole wait. A younger one is still awaited: superseding it
		 * would refuse every answer of a directory slower than the
		 * interval (but within the timeout), and no refresh would ever
		 * count. */
		if (!(r->flags & KVA__F_REFRESH) || e->refresh_req != r ||
		    !e->cfg.lookup_timeout_ns || e->now - e->refresh_sent >= e->cfg.lookup_timeout_ns) {
			kva__st_add_single_writer(e, ST_REFRESHES, 1);
			kva__lookup_issue(e, r, false);
			e->refresh_req = r;
			e->refresh_sent = e->now;
		}
		kva_timerwheel_arm(&e->wheel, &e->head_timer[HT_REFRESH],
		                   kva__after(e->now, e->cfg.lookup_refresh_ns));
		break;
	}
}

/* The head could not be admitted this step. Restores blocked on capacity
 * arm the bounded-wait, log and refresh timers (rules bounded-wait,
 * wait-logs-and-refreshes). */
void kva__head_timers_block(kva_engine *e, struct kva__req *r, bool restore)
{
	e->plan->head_blocked = true;
	bool begins = !(r->flags & KVA__F_BLOCKED);
	if (begins) {
		r->flags |= KVA__F_BLOCKED;
		r->blocked_since = e->now;
	}
	if (!restore) {
		/* the head is not a restore: no restore's wait is timed or shown
		 * (one that blocked here before and was passed by a requeue to the
		 * front resumes from its blocked_since when it is the head again) */
		kva__head_timers_forget(e, e->head_req);
		return;
	}
	kva__st_add_single_writer(e, ST_BLOCKED_STEPS, 1);
	atomic_store_explicit(&e->st[ST_CAPACITY_WAIT_NS], e->now - r->blocked_since,
	                      memory_order_relaxed);
	if (e->head_req == r)
		return;
	/* rule wait-logs-and-refreshes: a wait that begins logs once */
	if (begins && e->cfg.wait_log_interval_ns) {
		log_wait(e, r, "starts waiting after", KVA_LOGEV_WAIT_STARTED);
		kva__st_add_single_writer(e, ST_WAIT_LOGS, 1);
	}
	kva__head_timers_forget(e, e->head_req);
	e->head_req = r;
	if (e->cfg.max_restore_wait_ns)
		kva_timerwheel_arm(&e->wheel, &e->head_timer[HT_WAIT],
		                   kva__after(r->blocked_since, e->cfg.max_restore_wait_ns));
	if (e->cfg.wait_log_interval_ns)
		kva_timerwheel_arm(&e->wheel, &e->head_timer[HT_LOG],
		                   kva__after(e->now, e->cfg.wait_log_interval_ns));
	if (e->cfg.lookup_refresh_ns)
		kva_timerwheel_arm(&e->wheel, &e->head_timer[HT_REFRESH],
		                   kva__after(e->now, e->cfg.lookup_refresh_ns));
}

void kva__head_timers_deadline(kva_engine *e, struct kva__req *r, uint64_t deadline)
{
	if (e->head_req != r || deadline == UINT64_MAX)
		return;
	uint64_t cap = e->cfg.max_restore_wait_ns
	                   ? kva__after(r->blocked_since, e->cfg.max_restore_wait_ns)
	                   : UINT64_MAX;
	struct kva_timer *t = &e->head_timer[HT_WAIT];
	if (deadline < cap && (!kva_timer_armed(t) || t->expires > deadline))
		kva_timerwheel_arm(&e->wheel, t, deadline);
}
