/*
 * Admission and restores: the head's paired reservation (rules 1, 4, 5, 7,
 * 9), immediate local and ordinary admissions, copy jobs and their collective
 * completion (rule 19), bounded retries with shorter-checkpoint recovery
 * (rule 11), drain-before-reuse (rule 12) and the prefix-cache reset
 * (rule 17).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "engine_internal.h"

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

static bool plan_room(const kva_plan *p, uint32_t pages)
{
	return p->n_admitted < p->admitted_cap && p->pages_cap - p->n_pages >= pages;
}

/* r becomes RUNNING: listed in the plan with its pages; every prompt token
 * counted once as local, restored or recomputed (rule 16). */
static void plan_admit(kva_engine *e, struct kva__req *r, uint8_t how, uint32_t local,
                       uint32_t restored)
{
	kva_plan *p = e->plan;
	struct kva__grant *g = kva__grant(r);
	uint32_t n = atomic_load_explicit(&g->npages, memory_order_relaxed);
	kva_admission *a = &p->admitted[p->n_admitted++];
	a->handle = (kva_handle){r->idn.id, r->idn.gen, 0};
	a->user = r->user;
	a->how = how;
	a->reason = how == KVA_ADMIT_RECOMPUTE ? r->reason : KVA_REASON_NONE;
	a->reserved_ = 0;
	a->local_tokens = local;
	a->restored_tokens = restored;
	a->recompute_tokens = r->prompt_tokens - local - restored;
	a->pages_off = p->n_pages;
	a->npages = n;
	a->reserved_pages = atomic_load_explicit(&g->reserved, memory_order_relaxed);
	memcpy(p->pages + p->n_pages, g->pages, n * sizeof(uint32_t));
	p->n_pages += n;

	kva__st_add(e, ST_RESERVED_PAGES, -(int64_t)n);
	kva__st_add(e, ST_IN_USE_PAGES, n);
	kva__st_sched(e, how == KVA_ADMIT_RESTORE ? ST_ADMIT_RESTORE
	                 : how == KVA_ADMIT_LOCAL ? ST_ADMIT_LOCAL
	                                          : ST_ADMIT_RECOMPUTE,
	              1);
	kva__st_sched(e, ST_TOK_ADMITTED, r->prompt_tokens);
	kva__st_sched(e, ST_TOK_LOCAL, local);
	kva__st_sched(e, ST_TOK_RESTORED, restored);
	kva__st_sched(e, ST_TOK_RECOMPUTED, a->recompute_tokens);
	r->flags &= (uint16_t)~KVA__F_BLOCKED;
	kva__req_set_state(e, r, KVA_STATE_RUNNING);
}

/* Takes n page ids for credits r already holds. */
static void take_pages(kva_engine *e, struct kva__grant *g, uint32_t n, uint32_t total)
{
	bool ok = kva_pagepool_take_n(&e->pool, g->pages, n);
	(void)ok; /* cannot fail: ids in the pool >= credits outstanding (R1/A1) */
	atomic_store_explicit(&g->npages, n, memory_order_relaxed);
	atomic_store_explicit(&g->reserved, total - n, memory_order_relaxed);
	g->import_pages = n;
	kva__st_add(e, ST_RESERVED_PAGES, total);
}

/* The head could not be admitted this step. Restores blocked on capacity
 * arm the bounded-wait, log and refresh timers (rules 8, 18). */
static void head_block(kva_engine *e, struct kva__req *r, bool restore)
{
	e->plan->head_blocked = true;
	if (!(r->flags & KVA__F_BLOCKED)) {
		r->flags |= KVA__F_BLOCKED;
		r->blocked_since = e->now;
	}
	if (!restore) {
		kva__head_forget(e, r);
		return;
	}
	kva__st_sched(e, ST_BLOCKED_STEPS, 1);
	if (e->head_req == r)
		return;
	kva__head_forget(e, e->head_req);
	e->head_req = r;
	if (e->cfg.max_restore_wait_ns)
		kva_timerwheel_arm(&e->wheel, &e->head_timer[HT_WAIT],
		                   r->blocked_since + e->cfg.max_restore_wait_ns);
	if (e->cfg.wait_log_interval_ns)
		kva_timerwheel_arm(&e->wheel, &e->head_timer[HT_LOG], e->now + e->cfg.wait_log_interval_ns);
	if (e->cfg.lookup_refresh_ns)
		kva_timerwheel_arm(&e->wheel, &e->head_timer[HT_REFRESH], e->now + e->cfg.lookup_refresh_ns);
}

static void leave_waitq(kva_engine *e, struct kva__req *r)
{
	kva_waitq_unlink(&e->waitq, &r->wq);
	kva__head_forget(e, r);
	kva__ckpt_unindex(e, r);
}

static void copy_start(kva_engine *e, struct kva__req *r)
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
	cds_list_add_tail(&r->wq.link, &e->copy_pending);
	kva__st_add(e, ST_COPY_JOBS, 1);
}

int kva__admit_head(kva_engine *e, struct kva__req *r)
{
	kva_plan *p = e->plan;
	if (!(r->flags & KVA__F_DECIDED)) {
		p->head_blocked = true; /* FCFS: an undecided head holds the line */
		return 0;
	}
	uint32_t prompt_pages = kva__pages_for(e, r->prompt_tokens);
	if (r->flags & KVA__F_RESTORE) {
		const kva_checkpoint *c = &r->manifest->entries[r->sel];
		bool local = c->location == KVA_LOC_LOCAL;
		uint32_t total = prompt_pages + e->cfg.decode_headroom_pages;
		uint32_t kp = kva__pages_for(e, c->position);
		if (local && !plan_room(p, kp))
			return -1;
		if (kva__grant_ensure(e, r, kp) != 0)
			return 0; /* out of memory: try again next step, nothing taken */
		/* rules 4 and 5: everything it needs or nothing, above the watermark */
		struct kva_credits want = {total, local ? 0 : 1, 1};
		if (kva_capacity_try_reserve(&e->cap, want, e->cfg.decode_reserve_pages)) {
			take_pages(e, kva__grant(r), kp, total);
			/* rule 11: a new reservation (after preemption or reset too)
			 * gets the whole retry budget; the grant outlives them */
			kva__grant(r)->retries = 0;
			leave_waitq(e, r);
			if (local) {
				plan_admit(e, r, KVA_ADMIT_LOCAL, c->position, 0);
			} else {
				kva__req_set_state(e, r, KVA_STATE_IMPORTING);
				copy_start(e, r);
			}
			return 1;
		}
		/* rule 1: wait, don't recompute. Legacy engines gave up only on
		 * imports; a local prefix hit waited for capacity there too. */
		if (e->cfg.policy != KVA_POLICY_LEGACY || local) {
			head_block(e, r, true);
			return 0;
		}
		kva__head_forget(e, r);
		kva__fallback(e, r, KVA_REASON_LEGACY);
	}
	uint32_t first = kva__pages_for(e, r->prompt_tokens < e->cfg.prefill_chunk_tokens
	                                           ? r->prompt_tokens
	                                           : e->cfg.prefill_chunk_tokens);
	if (first > e->usable_pages)
		first = e->usable_pages; /* a first chunk larger than the pool could never start */
	if (!plan_room(p, first))
		return -1;
	if (kva__grant_ensure(e, r, first) != 0)
		return 0;
	if (!kva_capacity_try_reserve(&e->cap, (struct kva_credits){first, 0, 1},
	                              e->cfg.decode_reserve_pages)) {
		head_block(e, r, false);
		return 0;
	}
	take_pages(e, kva__grant(r), first, first);
	leave_waitq(e, r);
	plan_admit(e, r, KVA_ADMIT_RECOMPUTE, 0, 0);
	return 1;
}

/* A request that owns its capacity (import done, or an owned fallback) is
 * admitted past a blocked head (rule 7). false when the plan is full. */
bool kva__admit_ready(kva_engine *e, struct kva__req *r)
{
	struct kva__grant *g = kva__grant(r);
	if (!plan_room(e->plan, atomic_load_explicit(&g->npages, memory_order_relaxed)))
		return false;
	cds_list_del(&r->wq.link);
	if (r->flags & KVA__F_RESTORE) {
		const kva_checkpoint *c = &r->manifest->entries[r->sel];
		if (c->location == KVA_LOC_LOCAL)
			plan_admit(e, r, KVA_ADMIT_LOCAL, c->position, 0);
		else
			plan_admit(e, r, KVA_ADMIT_RESTORE, 0, c->position);
	} else {
		plan_admit(e, r, KVA_ADMIT_RECOMPUTE, 0, 0);
	}
	return true;
}

static void make_ready(kva_engine *e, struct kva__req *r)
{
	kva_capacity_release(&e->cap, (struct kva_credits){0, 1, 0}); /* the copy slot */
	kva__req_set_state(e, r, KVA_STATE_READY);
	cds_list_add_tail(&r->wq.link, &e->ready);
}

void kva__reset_ready(kva_engine *e)
{
	e->reset_epoch++; /* imports still copying requeue when they drain */
	/* last READY first, each pushed to the front: relative order kept */
	while (!cds_list_empty(&e->ready)) {
		struct kva__req *r = caa_container_of(e->ready.prev, struct kva__req, wq.link);
		cds_list_del(&r->wq.link);
			if (e->plan)
			e->plan->records_touched++;
		kva__release_owned(e, r, 0); /* rule 17: pages back, to the front */
		kva__requeue_front(e, r);
	}
}

/* ---- copy reports ---------------------------------------------------------- */

int kva_copy_done(kva_engine *e, kva_copy_token t, uint32_t rank, int status)
{
	if (!e)
		return -EINVAL;
	if (rank >= e->cfg.world_size)
		return -ERANGE;
	int rc = 0;
	kva_rcu_read_lock();
	struct kva__req *r = kva__req_find(e, (kva_handle){t.id, t.gen, 0});
	struct kva__grant *g = r ? kva__grant(r) : NULL;
	if (!g) {
		rc = -ENOENT;
		goto out;
	}
	/* A2: pairs with R2 in kva__copy_dispatch_pending: the attempt and its pages. */
	uint64_t w = atomic_load_explicit(&g->copy_word, memory_order_acquire);
	for (;;) {
		/* attempts count from 1; 0 names none (a grant that never copied) */
		if (t.attempt == 0 || (uint32_t)(w >> 32) != t.attempt) {
			rc = -ESTALE;
			break;
		}
		if (w & (1ull << rank)) {
			rc = -EALREADY;
			break;
		}
		/* One report per rank per attempt: the bit is the claim. */
		if (atomic_compare_exchange_weak_explicit(&g->copy_word, &w, w | (1ull << rank),
		                                          memory_order_acq_rel, memory_order_acquire))
			break;
	}
	if (rc) {
		kva__st_add(e, ST_STALE_COPY, 1);
		goto out;
	}
	g->rank_ev[rank].status = status ? 1 : 0;
	kva_inbox_push(&e->inbox, &g->rank_ev[rank].node);
out:
	kva_rcu_read_unlock();
	return rc;
}

/* Scheduler thread: one rank of r's current attempt reported. */
void kva__copy_on_report(kva_engine *e, struct kva__req *r, struct kva__event *ev)
{
	struct kva__grant *g = kva__grant(r);
	g->n_reported++;
	if (ev->status)
		g->any_failed = true;
	if (g->n_reported < g->world)
		return; /* rule 19: complete only when every rank reported */
	g->copying = false;
	uint32_t kp = g->import_pages;
	if (atomic_load_explicit(&r->state, memory_order_relaxed) == KVA_STATE_CANCELLED) {
		/* rule 12: drained, the destination pages may be reused now */
		kva_pagepool_put_n(&e->pool, g->pages, kp);
		atomic_store_explicit(&g->npages, 0, memory_order_relaxed);
		g->import_pages = 0;
		kva__st_add(e, ST_DRAINING_PAGES, -(int64_t)kp);
		kva_capacity_release(&e->cap, (struct kva_credits){kp, 0, 0});
		if (r->flags & KVA__F_REPORTED)
			kva__req_retire(e, r);
		return;
	}
	if (g->any_failed)
		kva__st_add(e, ST_COPY_FAILED, 1);
	if (g->reset_epoch != e->reset_epoch) {
		kva__release_owned(e, r, 1); /* reset while copying: drained now */
		kva__requeue_front(e, r);
		return;
	}
	if (!g->any_failed) {
		make_ready(e, r);
		return;
	}
	if (g->retries < e->cfg.max_copy_retries) {
		g->retries++;
		kva__st_add(e, ST_COPY_RETRIES, 1);
		copy_start(e, r); /* same checkpoint, same pages, reservation kept */
		return;
	}
	int sh = kva__select_shorter(r);
	if (sh >= 0) {
		/* rule 11: shrink the import; the credits stay as continuation */
		const kva_checkpoint *c = &r->manifest->entries[sh];
		uint32_t kp2 = kva__pages_for(e, c->position);
		kva_pagepool_put_n(&e->pool, g->pages + kp2, kp - kp2);
		atomic_store_explicit(&g->npages, kp2, memory_order_relaxed);
		atomic_fetch_add_explicit(&g->reserved, kp - kp2, memory_order_relaxed);
		g->import_pages = kp2;
		g->retries = 0;
		kva__st_add(e, ST_SHORTER, 1);
		kva__select(e, r, sh);
		if (c->location == KVA_LOC_LOCAL)
			make_ready(e, r);
		else
			copy_start(e, r);
		return;
	}
	kva__fallback(e, r, KVA_REASON_RETRIES_EXHAUSTED);
	make_ready(e, r); /* recomputes with the capacity it already owns */
}

/* Scheduler thread: hands started attempts to the importers and lists them
 * in the plan. Without importers the plan is the only channel, so a job
 * waits until the plan has room for all its ranks. */
void kva__copy_dispatch_pending(kva_engine *e)
{
	kva_plan *p = e->plan;
	uint32_t w = e->cfg.world_size;
	bool importers = e->cfg.importers[0].submit != NULL;
	struct cds_list_head *pos, *tmp;
	cds_list_for_each_safe(pos, tmp, &e->copy_pending) {
		struct kva__req *r = caa_container_of(pos, struct kva__req, wq.link);
		struct kva__grant *g = kva__grant(r);
		if (!importers && p->copies_cap - p->n_copies < w)
			break;
		cds_list_del(&r->wq.link);
		g->copy_queued = false;
		p->records_touched++;
		/* R2: the attempt is handed out now, no rank reported yet;
		 * kva_copy_done CASes bits (A2). Not earlier: a queued attempt
		 * may still be cancelled and its pages returned undrained. */
		atomic_store_explicit(&g->copy_word, (uint64_t)g->attempts << 32, memory_order_release);
		const kva_checkpoint *c = &r->manifest->entries[r->sel];
		kva_copy_job job = {
			.token = {r->idn.id, r->idn.gen, g->attempts},
			.handle = {r->idn.id, r->idn.gen, 0},
			.world_size = w,
			.checkpoint_id = c->id,
			.checkpoint_epoch = c->epoch,
			.position = c->position,
			.npages = g->import_pages,
			.pages = g->pages,
		};
		for (uint32_t rank = 0; rank < w; rank++) {
			job.rank = rank;
			if (p->n_copies < p->copies_cap)
				p->copies[p->n_copies++] = job;
			if (importers && e->cfg.importers[rank].submit(e->cfg.importers[rank].ctx, e, &job) != 0)
				kva_copy_done(e, job.token, rank, -1); /* refused: that rank failed */
		}
	}
}
