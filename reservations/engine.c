/*
 * The engine: configuration, create/destroy, and kva_step, which drains the
 * inbox, expires timers and admits — in that order, in O(events drained +
 * timers expired + requests admitted) (rule 20). It never walks the waiting
 * queue: only its head is looked at, and only READY restores (which own
 * their capacity) are admitted past a blocked head (rule 7).
 */
#include <errno.h>
#include <string.h>

#include "alloc.h"
#include "engine_internal.h"

#define MS 1000000ull
#define SEC (1000 * MS)
#define TIMER_TICK_NS MS /* bucket width only: expiries are exact */

void kva_config_default(kva_config *cfg)
{
	if (!cfg)
		return;
	memset(cfg, 0, sizeof(*cfg));
	cfg->page_tokens = 16;
	cfg->prefill_chunk_tokens = 2048;
	cfg->copy_slots = 32;
	cfg->max_running = 256;
	cfg->world_size = 1;
	cfg->max_copy_retries = 2;
	cfg->lookup_timeout_ns = 5 * SEC;
	cfg->max_restore_wait_ns = 60 * SEC;
	cfg->wait_log_interval_ns = 30 * SEC;
	cfg->lookup_refresh_ns = 20 * SEC;
	cfg->policy = KVA_POLICY_WAIT;
}

static int config_check(const kva_config *c)
{
	if (!c->total_pages || !c->page_tokens || !c->prefill_chunk_tokens || !c->copy_slots ||
	    !c->max_running || !c->world_size || c->world_size > KVA_MAX_WORLD)
		return -EINVAL;
	if (c->decode_reserve_pages >= c->total_pages)
		return -EINVAL;
	if (c->policy != KVA_POLICY_WAIT && c->policy != KVA_POLICY_LEGACY)
		return -EINVAL;
	bool first = c->importers[0].submit != NULL; /* all ranks or none */
	for (uint32_t i = 1; i < c->world_size; i++)
		if ((c->importers[i].submit != NULL) != first)
			return -EINVAL;
	return 0;
}

kva_engine *kva_engine_create(const kva_config *cfg, int *err)
{
	int rc = cfg ? config_check(cfg) : -EINVAL;
	kva_engine *e = NULL;
	if (rc)
		goto fail;
	rc = -ENOMEM;
	e = kva__calloc(sizeof(*e));
	if (!e)
		goto fail;
	e->cfg = *cfg;
	e->usable_pages = cfg->total_pages - cfg->decode_reserve_pages;
	e->now = cfg->start_ns;
	if (kva_pagepool_init(&e->pool, cfg->total_pages) != 0)
		goto fail_free;
	/* Small start, auto-resized: a 64 Ki-bucket start made create+destroy
	 * 37x slower (3.4 ms vs 93 us), which fuzzing and tests pay per engine. */
	if (kva_idtable_init(&e->ids, 1024) != 0)
		goto fail_pool;
	if (kva_idtable_init(&e->ckpt, 256) != 0)
		goto fail_ids;
	kva_capacity_init(&e->cap, (struct kva_credits){cfg->total_pages, cfg->copy_slots,
	                                                cfg->max_running});
	kva_inbox_init(&e->inbox);
	kva_inbox_init(&e->deferred);
	kva_waitq_init(&e->waitq);
	CDS_INIT_LIST_HEAD(&e->ready);
	CDS_INIT_LIST_HEAD(&e->ended);
	CDS_INIT_LIST_HEAD(&e->copy_pending);
	kva_timerwheel_init(&e->wheel, TIMER_TICK_NS, e->now);
	for (int i = 0; i < HT_COUNT; i++)
		kva_timer_init(&e->head_timer[i]);
	kva_inbox_node_init(&e->reset_ev.node);
	e->reset_ev.type = KVA__EV_RESET;
	if (err)
		*err = 0;
	return e;
fail_ids:
	kva_idtable_fini(&e->ids);
fail_pool:
	kva_pagepool_fini(&e->pool);
fail_free:
	kva__free(e, sizeof(*e));
fail:
	if (err)
		*err = rc;
	return NULL;
}

/* Frees what queued events own (answers, evictions); events embedded in
 * records and grants die with their records. */
static void discard_events(struct kva_inbox *q)
{
	struct kva_inbox_batch b;
	if (!kva_inbox_drain(q, &b))
		return;
	struct kva_inbox_node *n;
	while ((n = kva_inbox_batch_pop(&b))) {
		struct kva__event *ev = caa_container_of(n, struct kva__event, node);
		if (ev->type == KVA__EV_ANSWER)
			kva__answer_free(caa_container_of(ev, struct kva__answer, ev));
		else if (ev->type == KVA__EV_EVICT)
			kva__free(ev, sizeof(struct kva__evict));
	}
}

void kva_engine_destroy(kva_engine *e)
{
	if (!e)
		return;
	kva_rcu_enter();
	discard_events(&e->inbox);
	discard_events(&e->deferred);
	/* The id table holds every record not yet retired, in any state; the
	 * checkpoint index only points into their manifests. */
	kva_rcu_read_lock();
	struct cds_lfht_iter it;
	struct cds_lfht_node *ln;
	/* Not cds_lfht_for_each_entry: it applies container_of to the final
	 * NULL node, which is undefined behaviour in C (UBSan reports it). */
	for (cds_lfht_first(e->ckpt.ht, &it); (ln = cds_lfht_iter_get_node(&it));
	     cds_lfht_next(e->ckpt.ht, &it))
		kva_idtable_del(&e->ckpt, caa_container_of(ln, struct kva_idtable_node, lfht));
	for (cds_lfht_first(e->ids.ht, &it); (ln = cds_lfht_iter_get_node(&it));
	     cds_lfht_next(e->ids.ht, &it)) {
		struct kva_idtable_node *n = caa_container_of(ln, struct kva_idtable_node, lfht);
		struct kva__req *r = caa_container_of(n, struct kva__req, idn);
		kva_idtable_del(&e->ids, n);
		kva_rcu_call(&r->rcu, kva__req_free_rcu);
	}
	kva_rcu_read_unlock();
	urcu_memb_barrier(); /* every record (and retired one) is freed now */
	kva_rcu_reclaim_begin();
	kva_idtable_fini(&e->ckpt);
	kva_idtable_fini(&e->ids);
	kva_pagepool_fini(&e->pool);
	kva_inbox_fini(&e->inbox);
	kva_inbox_fini(&e->deferred);
	kva__free(e, sizeof(*e));
}

/* ---- plan helpers ---------------------------------------------------------- */

bool kva__plan_fallback(kva_engine *e, struct kva__req *r, uint8_t reason)
{
	kva_plan *p = e->plan;
	if (!p || p->n_fallbacks >= p->fallbacks_cap)
		return false; /* informational list; the admission carries the reason */
	p->fallbacks[p->n_fallbacks++] = (kva_fallback){{r->idn.id, r->idn.gen, 0}, reason};
	return true;
}

/* Hands terminal outcomes to the host, each exactly once; retires records
 * unless pages of theirs are still under a copy. */
static void emit_ended(kva_engine *e)
{
	kva_plan *p = e->plan;
	while (!cds_list_empty(&e->ended)) {
		if (p->ended && p->n_ended >= p->ended_cap)
			return; /* next step */
		struct kva__req *r = caa_container_of(e->ended.next, struct kva__req, wq.link);
		cds_list_del(&r->wq.link);
		r->flags |= KVA__F_REPORTED;
		p->records_touched++;
		if (p->ended)
			p->ended[p->n_ended++] = (kva_ended){{r->idn.id, r->idn.gen, 0}, r->user,
			                                     (uint8_t)atomic_load_explicit(&r->state,
			                                                                   memory_order_relaxed)};
		struct kva__grant *g = kva__grant(r);
		if (!g || !g->copying)
			kva__req_retire(e, r);
	}
}

/* ---- head timers (rules 8, 18) ---------------------------------------------- */

void kva__head_forget(kva_engine *e, struct kva__req *r)
{
	if (!r || e->head_req != r)
		return;
	for (int i = 0; i < HT_COUNT; i++)
		kva_timerwheel_cancel(&e->wheel, &e->head_timer[i]);
	e->head_req = NULL;
}

static void head_timer_fired(kva_engine *e, int which)
{
	struct kva__req *r = e->head_req;
	if (!r || !(r->flags & KVA__F_RESTORE))
		return;
	uint32_t need = kva__pages_for(e, r->prompt_tokens) + e->cfg.decode_headroom_pages;
	uint32_t free_pages = kva_capacity_free(&e->cap).pages;
	double waited = (double)(e->now - r->blocked_since) / 1e9;
	switch (which) {
	case HT_WAIT:
		/* rule 8: give up once, say so once, stop holding others as a restore */
		kva__log(e, KVA_LOG_WARN,
		         "kvadmit: restore of request %llu waited %.1f s for capacity "
		         "(needs %u pages, %u free); recomputing instead",
		         (unsigned long long)r->idn.id, waited, need, free_pages);
		kva__st_add(e, ST_WAIT_EXPIRED, 1);
		kva__head_forget(e, r);
		kva__fallback(e, r, KVA_REASON_WAIT_EXPIRED);
		break;
	case HT_LOG:
		kva__log(e, KVA_LOG_INFO,
		         "kvadmit: restore of request %llu waiting %.1f s for capacity "
		         "(needs %u pages, %u free)",
		         (unsigned long long)r->idn.id, waited, need, free_pages);
		kva__st_add(e, ST_WAIT_LOGS, 1);
		kva_timerwheel_arm(&e->wheel, &e->head_timer[HT_LOG], e->now + e->cfg.wait_log_interval_ns);
		break;
	case HT_REFRESH:
		if (!(r->flags & KVA__F_REFRESH)) {
			kva__st_add(e, ST_REFRESHES, 1);
			kva__lookup_issue(e, r, false);
		}
		kva_timerwheel_arm(&e->wheel, &e->head_timer[HT_REFRESH], e->now + e->cfg.lookup_refresh_ns);
		break;
	}
}

static void timer_fired(struct kva_timer *t, void *arg)
{
	kva_engine *e = arg;
	e->plan->timers_fired++;
	e->plan->records_touched++;
	if (t >= &e->head_timer[0] && t < &e->head_timer[HT_COUNT]) {
		head_timer_fired(e, (int)(t - e->head_timer));
		return;
	}
	kva__lookup_on_deadline(e, caa_container_of(t, struct kva__req, deadline));
}

/* ---- the step ---------------------------------------------------------------- */

static void dispatch_event(kva_engine *e, struct kva__event *ev)
{
	kva_plan *p = e->plan;
	p->events++;
	/* every event but these names exactly one record */
	p->records_touched += ev->type != KVA__EV_EVICT && ev->type != KVA__EV_RESET;
	switch (ev->type) {
	case KVA__EV_SUBMIT:
		kva__handle_submit(e, caa_container_of(ev, struct kva__req, ev_main));
		break;
	case KVA__EV_CANCEL:
		kva__handle_cancel(e, caa_container_of(ev, struct kva__req, ev_cancel));
		break;
	case KVA__EV_FINISHED:
	case KVA__EV_PREEMPTED:
		kva__handle_life_event(e, caa_container_of(ev, struct kva__req, ev_main), ev->type);
		break;
	case KVA__EV_ANSWER:
		kva__lookup_on_answer(e, caa_container_of(ev, struct kva__answer, ev));
		break;
	case KVA__EV_COPY: {
		struct kva__grant *g = caa_container_of(ev - ev->rank, struct kva__grant, rank_ev[0]);
		kva__copy_on_report(e, g->req, ev);
		break;
	}
	case KVA__EV_EVICT:
		kva__lookup_on_evict(e, caa_container_of(ev, struct kva__evict, ev));
		break;
	case KVA__EV_RESET:
		/* R7/A7: re-arm before acting, so a reset requested from now on
		 * is a new event. */
		atomic_store_explicit(&e->reset_requested, 0, memory_order_release);
		kva__reset_ready(e);
		break;
	}
}

/* Drains until the inbox is empty: events pushed while handling (a directory
 * answering from its callback) are handled in this step too. */
static void drain(kva_engine *e, struct kva_inbox *q)
{
	struct kva_inbox_batch b;
	while (kva_inbox_drain(q, &b)) {
		struct kva_inbox_node *n;
		while ((n = kva_inbox_batch_pop(&b)))
			dispatch_event(e, caa_container_of(n, struct kva__event, node));
		if (q == &e->deferred)
			return; /* deferred cancels retry once per step */
	}
}

static void plan_clear(kva_plan *p)
{
	p->n_admitted = p->n_pages = p->n_copies = p->n_fallbacks = p->n_ended = 0;
	p->events = p->timers_fired = p->records_touched = 0;
	p->head_blocked = false;
}

/* A NULL array must not claim room: the step would write through it. */
static bool plan_valid(const kva_plan *p)
{
	return (p->admitted || !p->admitted_cap) && (p->pages || !p->pages_cap) &&
	       (p->copies || !p->copies_cap) && (p->fallbacks || !p->fallbacks_cap) &&
	       (p->ended || !p->ended_cap);
}

int kva_step(kva_engine *e, uint64_t now_ns, kva_plan *plan)
{
	if (!e || !plan || e->in_step || !plan_valid(plan))
		return -EINVAL;
	kva_rcu_enter();
	plan_clear(plan);
	e->plan = plan;
	e->in_step = true;
	if (now_ns > e->now)
		e->now = now_ns;
	kva__st_sched(e, ST_STEPS, 1);
	kva_rcu_read_lock();

	drain(e, &e->deferred);
	drain(e, &e->inbox);
	if (kva_timerwheel_advance(&e->wheel, e->now, timer_fired, e))
		drain(e, &e->inbox); /* answers to lookups the timers issued */
	emit_ended(e);

	/* rule 7: restores that own their capacity go first, past the head */
	while (!cds_list_empty(&e->ready)) {
		struct kva__req *r = caa_container_of(e->ready.next, struct kva__req, wq.link);
		plan->records_touched++;
		if (!kva__admit_ready(e, r))
			break;
	}
	/* FCFS: admit from the head until one is blocked; never look further */
	struct kva_waitq_node *n;
	for (bool batch = false; (n = kva_waitq_first(&e->waitq)); batch = true) {
		plan->records_touched++;
		/* Admitting a run of heads: start the next record's cache miss
		 * now. Not for the first head, so a blocked step stays minimal. */
		struct kva_waitq_node *next = batch ? kva_waitq_next(&e->waitq, n) : NULL;
		if (next) {
			__builtin_prefetch(kva__req_of_wq(next));
			__builtin_prefetch((char *)kva__req_of_wq(next) + 64);
			__builtin_prefetch((char *)kva__req_of_wq(next) + 128);
		}
		if (kva__admit_head(e, kva__req_of_wq(n)) <= 0)
			break;
	}
	kva__copy_dispatch_pending(e);

	kva_rcu_read_unlock();
	kva__st_sched(e, ST_EVENTS, plan->events);
	e->in_step = false;
	e->plan = NULL;
	return (int)plan->n_admitted;
}

int kva_reset_prefix_cache(kva_engine *e)
{
	if (!e)
		return -EINVAL;
	/* A7: one queued reset covers every request made before it is handled. */
	if (!atomic_exchange_explicit(&e->reset_requested, 1, memory_order_acq_rel))
		kva_inbox_push(&e->inbox, &e->reset_ev.node);
	return 0;
}
