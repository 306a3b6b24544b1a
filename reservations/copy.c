/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Copy jobs (see copy.h): attempts, collective completion (rule
 * collective-completion), retries and shorter-checkpoint recovery (rule
 * retry-then-shorter), drain before reuse (rule drain-before-reuse). Calls
 * lookup.c (selection, fallback), lifecycle.c, grant.c and stats.c.
 *
 * Memory-order labels:
 *   R1  an attempt handed out -> kva_copy_done's CAS (A3 of grant.c)
 */
#include <errno.h>

#include "copy.h"
#include "cost_model.h"
#include "grant.h"
#include "lifecycle.h"
#include "lookup.h"
#include "stats.h"

void kva__copy_start(kva_engine *e, struct kva__req *r)
{
	struct kva__grant *g = kva__grant(r);
	g->attempts++;
	g->n_reported = 0;
	g->any_failed = false;
	g->copying = true;
	g->copy_queued = true;
	g->reset_epoch = e->reset_epoch;
	/* copy_word still names the previous, fully reported attempt: reports
	 * for this one are refused until kva__copy_dispatch_pending opens it. */
	cds_list_add_tail(&r->link, &e->copy_pending);
	kva__st_add_single_writer(e, ST_COPY_JOBS, 1);
}

void kva__copy_cancel(kva_engine *e, struct kva__req *r)
{
	struct kva__grant *g = kva__grant(r);
	uint32_t rsv = atomic_load_explicit(&g->reserved, memory_order_relaxed);
	uint32_t n = atomic_load_explicit(&g->npages, memory_order_relaxed);
	atomic_store_explicit(&g->reserved, 0, memory_order_relaxed);
	kva__st_add(e, ST_RESERVED_PAGES, -(int64_t)(rsv + n));
	struct kva_credits give = {rsv, 1, 1}; /* credits, the copy slot, the run slot */
	if (g->copy_queued) {
		/* never dispatched: nothing to drain */
		cds_list_del(&r->link);
		g->copy_queued = false;
		g->copying = false;
		atomic_store_explicit(&g->npages, 0, memory_order_relaxed);
		g->import_pages = 0;
		kva__pages_return(e, g->pages, n, give);
		return;
	}
	/* the destination pages only after every rank reported */
	kva__st_add_single_writer(e, ST_DRAINING_PAGES, n);
	kva_capacity_release(&e->cap, give);
}

enum kva__copy_outcome kva__copy_on_report(kva_engine *e, struct kva__req *r,
                                           struct kva__event *ev)
{
	struct kva__grant *g = kva__grant(r);
	g->n_reported++;
	if (ev->status)
		g->any_failed = true;
	if (g->n_reported < g->world)
		/* rule collective-completion: complete only when every rank reported */
		return KVA__COPY_PENDING;
	g->copying = false;
	kva__observe(e, H_COPY, e->now - g->copy_started);
	uint32_t kp = g->import_pages;
	if (atomic_load_explicit(&r->state, memory_order_relaxed) == KVA_STATE_CANCELLED) {
		/* rule drain-before-reuse: drained, the destination pages may be reused now */
		atomic_store_explicit(&g->npages, 0, memory_order_relaxed);
		g->import_pages = 0;
		kva__st_add_single_writer(e, ST_DRAINING_PAGES, (uint64_t)-(int64_t)kp);
		kva__pages_return(e, g->pages, kp, (struct kva_credits){0, 0, 0});
		if (r->flags & KVA__F_REPORTED)
			kva__rec_retire(e, r);
		return KVA__COPY_DRAINED;
	}
	if (g->any_failed) {
		kva__st_add_single_writer(e, ST_COPY_FAILED, 1);
		kva__log(e, KVA_LOG_WARN, KVA_LOGEV_COPY_FAILED, r, 0, g->attempts,
		         "kvadmit: copy attempt %u of request %llu failed", g->attempts,
		         (unsigned long long)r->id);
	}
	if (g->reset_epoch != e->reset_epoch) {
		kva__rec_give_back(e, r, 1, true); /* reset while copying: drained now */
		return KVA__COPY_REQUEUE;
	}
	if (!g->any_failed) {
		kva__cost_copy_observed(e, kva__selected_checkpoint(r)->tier, kp,
		                        e->now - g->copy_started);
		return KVA__COPY_READY;
	}
	if (g->retries < e->cfg.max_copy_retries) {
		g->retries++;
		kva__st_add_single_writer(e, ST_COPY_RETRIES, 1);
		kva__log(e, KVA_LOG_INFO, KVA_LOGEV_COPY_RETRY, r, 0, g->retries,
		         "kvadmit: request %llu retries its copy (%u of %u)", (unsigned long long)r->id,
		         g->retries, e->cfg.max_copy_retries);
		kva__copy_start(e, r); /* same checkpoint, same pages, reservation kept */
		return KVA__COPY_PENDING;
	}
	int sh = kva__select_shorter(e, r);
	if (sh >= 0) {
		/* rule retry-then-shorter: shrink the import; the credits stay as continuation */
		const kva_checkpoint *c = &kva__manifest_entries(r)[sh];
		uint32_t kp2 = kva__pages_for(e, c->position);
		kva_pagepool_put_n(&e->pool, g->pages + kp2, kp - kp2); /* ids only: credits kept */
		atomic_store_explicit(&g->npages, kp2, memory_order_relaxed);
		atomic_fetch_add_explicit(&g->reserved, kp - kp2, memory_order_relaxed);
		g->import_pages = kp2;
		g->retries = 0;
		kva__st_add_single_writer(e, ST_SHORTER, 1);
		kva__log(e, KVA_LOG_INFO, KVA_LOGEV_SHORTER, r, 0, c->position,
		         "kvadmit: request %llu falls back to a shorter checkpoint (%u tokens)",
		         (unsigned long long)r->id, c->position);
		kva__select(e, r, sh);
		if (c->location == KVA_LOC_LOCAL)
			return KVA__COPY_READY;
		kva__copy_start(e, r);
		return KVA__COPY_PENDING;
	}
	kva__fallback(e, r, KVA_REASON_RETRIES_EXHAUSTED);
	return KVA__COPY_READY; /* recomputes with the capacity it already owns */
}

/* A job is listed whole or waits: without importers the plan is the only
 * channel; with them the list is optional (a cap of 0 lists nothing) but
 * never partial. A job waits until the plan has room for all its ranks. */
void kva__copy_dispatch_pending(kva_engine *e)
{
	kva_plan *p = e->plan;
	uint32_t w = e->cfg.world_size;
	bool importers = e->cfg.importers[0].submit != NULL;
	bool listed = !importers || p->copies_cap > 0;
	struct cds_list_head *pos, *tmp;
	cds_list_for_each_safe(pos, tmp, &e->copy_pending) {
		struct kva__req *r = kva__req_of_link(pos);
		struct kva__grant *g = kva__grant(r);
		if (listed && p->copies_cap - p->n_copies < w) {
			if (p->copies_cap < w)
				kva__plan_too_small(e, r->id, "copy job ranks", w);
			break;
		}
		cds_list_del(&r->link);
		g->copy_queued = false;
		p->records_touched++;
		/* R1: the attempt is handed out now, no rank reported yet;
		 * kva_copy_done CASes bits (A3 of grant.c). Not earlier: a queued
		 * attempt may still be cancelled and its pages returned undrained. */
		atomic_store_explicit(&g->copy_word, (uint64_t)g->attempts << 32, memory_order_release);
		g->copy_started = e->now;
		const kva_checkpoint *c = kva__selected_checkpoint(r);
		kva_handle h = kva__rec_handle(r);
		kva_copy_job job = {
			.token = {h.id, h.gen, g->attempts, h.slot, 0},
			.handle = h,
			.world_size = w,
			.checkpoint_id = c->id,
			.checkpoint_epoch = c->epoch,
			.position = c->position,
			.npages = g->import_pages,
			/* the host's own pages, named when it runs the copy */
			.pages = (e->cfg.flags & KVA_CONFIG_CREDITS_ONLY) ? NULL : g->pages,
		};
		for (uint32_t rank = 0; rank < w; rank++) {
			job.rank = rank;
			if (listed)
				p->copies[p->n_copies++] = job;
			if (!importers)
				continue;
			int rc = e->cfg.importers[rank].submit(e->cfg.importers[rank].ctx, e, &job);
			if (rc != 0) { /* refused: that rank failed (the copy is retried or falls back) */
				kva__log(e, KVA_LOG_WARN, KVA_LOGEV_IMPORTER_REFUSED, r, 0, (uint64_t)-rc,
				         "kvadmit: importer of rank %u refused request %llu's copy: %s%s",
				         rank, (unsigned long long)r->id, kva_strerror(rc),
				         rc == -EIO ? " (importer dead)" : "");
				/* on the step's own queue: never a wake */
				kva__grant_report(e, g, g->attempts, rank, -1, &(bool){false});
			}
		}
	}
}
