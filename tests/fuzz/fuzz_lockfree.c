/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_lockfree: lockfree/ building blocks against reference models. The
 * first input byte picks one:
 *
 *   timerwheel  arm (wheel or ordered lane) / cancel / advance (forwards,
 *               backwards, huge jumps past the 2^48-tick overflow), with callbacks that re-arm, cancel
 *               or arm other timers and try a nested advance; the reference
 *               is a plain array: at each advance, every timer armed before
 *               it with expires <= now fires in (expires, arm order), minus
 *               those a callback cancels or re-arms first. Firing order, the
 *               count returned, armed flags and the wheel's count must agree.
 *   waitq       push back / front, pop head, unlink, re-queue of unlinked
 *               nodes; writer traversal and the RCU reader traversal must
 *               both equal an array model, and so must the length.
 *   inbox       one thread: pushes (popped nodes pushed again), drains and
 *               pops against a FIFO model, with push's "was empty" result
 *               checked exactly; then two producer threads push stamped
 *               nodes while this thread drains concurrently: every node
 *               arrives exactly once and each producer's nodes in its order.
 *   slab        alloc / publish / re-publish / retire / flush / lookups of
 *               tracked and of arbitrary {index, generation} handles, all
 *               inside one read-side section per input, against a model of
 *               which slots are owned, live and retired: a lookup matches
 *               exactly the live handles (and shows their stamp), a fresh
 *               slot is free (even generation) and is none of the owned,
 *               live or retired-in-this-input ones (no reuse before a grace
 *               period). One slab for the process; every input retires
 *               what it allocated.
 *   pagepool    take_n / take / put_n (random subsets, random order) on a
 *               pool of up to 600 ids, against tests/pagepool_model.h:
 *               take_n succeeds exactly when enough ids are in the pool,
 *               and with one thread ids come back in exactly the
 *               documented order (from the hint's word, lowest first,
 *               across words and the partial last word); count agrees.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <kvadmit/lockfree/inbox.h>
#include <kvadmit/lockfree/pagepool.h>
#include <kvadmit/lockfree/rcu_thread.h>
#include <kvadmit/lockfree/slab.h>
#include <kvadmit/lockfree/timerwheel.h>
#include <kvadmit/lockfree/waitq.h>
#include "waitq_helpers.h"
#include "pagepool_model.h"
#include "fuzz_input.h"

#define FZ_TARGET "fuzz_lockfree"
#define CHECK FZ_CHECK

static struct fz in;

/* ---- timerwheel ------------------------------------------------------------ */

#define NT 24

struct action {
	uint8_t kind; /* 0 none, 1 re-arm self, 2 cancel other, 3 arm other, 4 nested advance */
	uint8_t other;
	uint64_t delta;
};

struct ref_timer {
	bool armed;
	uint64_t expires, seq;
	uint64_t epoch; /* advance during which it was armed (0 = outside) */
};

static struct {
	struct kva_timerwheel w;
	struct {
		struct kva_timer t;
		uint32_t i;
	} real[NT];
	struct ref_timer ref[NT];
	struct action act[NT];
	uint64_t seq, now, epoch;
	bool in_ref_advance;
	uint32_t log_real[4 * NT * NT], log_ref[4 * NT * NT];
	uint32_t nreal, nref;
	uint32_t fires_real[NT], fires_ref[NT];
} TW;

static uint64_t tw_delta(uint8_t sel, uint64_t raw, uint64_t tick)
{
	switch (sel % 8) {
	case 0:
		return 0;
	case 1:
		return raw % 4;
	case 2:
		return raw % (4 * tick);
	case 3:
		return raw % (64 * tick);
	case 4:
		return raw % (4096 * tick);
	case 5:
		return raw % ((uint64_t)1 << 30) * tick;
	case 6:
		return (raw % 4 + 1) << 48 > UINT64_MAX / tick ? raw : ((raw % 4 + 1) << 48) * tick;
	default:
		return raw;
	}
}

static uint64_t sat_add(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* Either arm: the wheel and its ordered lane promise the same firing order. */
static void tw_arm(struct kva_timer *t, uint64_t exp, bool ordered)
{
	if (ordered)
		kva_timerwheel_arm_ordered(&TW.w, t, exp);
	else
		kva_timerwheel_arm(&TW.w, t, exp);
}

static void ref_arm(uint32_t i, uint64_t exp)
{
	TW.ref[i] = (struct ref_timer){true, exp, ++TW.seq, TW.in_ref_advance ? TW.epoch : 0};
}

/* The callback's action depends only on the timer and how often it fired,
 * so the wheel and the reference do the same things in the same order as
 * long as they agree. */
static const struct action *action_of(uint32_t i, uint32_t fires)
{
	return fires < 3 ? &TW.act[i] : &TW.act[(i + fires) % NT];
}

static void real_fire(struct kva_timer *t, void *arg)
{
	(void)arg;
	uint32_t i = caa_container_of(t, __typeof__(TW.real[0]), t)->i;
	CHECK(!kva_timer_armed(t));
	CHECK(TW.nreal < sizeof(TW.log_real) / sizeof(TW.log_real[0]));
	TW.log_real[TW.nreal++] = i;
	const struct action *a = action_of(i, TW.fires_real[i]++);
	switch (a->kind) {
	case 1:
		tw_arm(t, sat_add(TW.now, a->delta), a->other & 1);
		break;
	case 2:
		kva_timerwheel_cancel(&TW.w, &TW.real[a->other].t);
		break;
	case 3:
		tw_arm(&TW.real[a->other].t, sat_add(TW.now, a->delta), a->delta & 1);
		break;
	case 4:
		CHECK(kva_timerwheel_advance(&TW.w, sat_add(TW.now, a->delta), real_fire, NULL) ==
		      0);
		break;
	}
}

static size_t ref_advance(uint64_t now)
{
	if (now < TW.now)
		return 0; /* time never goes backwards */
	TW.now = now;
	TW.epoch++;
	TW.in_ref_advance = true;
	size_t fired = 0;
	for (;;) {
		int best = -1;
		for (uint32_t i = 0; i < NT; i++) {
			const struct ref_timer *r = &TW.ref[i];
			/* a timer at UINT64_MAX (KVA_TIMER_NEVER) never fires */
			if (!r->armed || r->expires > now || r->expires == UINT64_MAX ||
			    r->epoch == TW.epoch)
				continue;
			if (best < 0 || r->expires < TW.ref[best].expires ||
			    (r->expires == TW.ref[best].expires && r->seq < TW.ref[best].seq))
				best = (int)i;
		}
		if (best < 0)
			break;
		TW.ref[best].armed = false;
		fired++;
		TW.log_ref[TW.nref++] = (uint32_t)best;
		const struct action *a = action_of((uint32_t)best, TW.fires_ref[best]++);
		switch (a->kind) {
		case 1:
			ref_arm((uint32_t)best, sat_add(now, a->delta));
			break;
		case 2:
			TW.ref[a->other].armed = false;
			break;
		case 3:
			ref_arm(a->other, sat_add(now, a->delta));
			break;
		}
	}
	TW.in_ref_advance = false;
	return fired;
}

static void fuzz_timerwheel(void)
{
	static const uint64_t ticks[4] = {1, 7, 1000, 1u << 20};
	memset(&TW, 0, sizeof(TW));
	uint64_t tick = ticks[fz_u8(&in) % 4];
	uint64_t now0 = (uint64_t)fz_u16(&in) << (fz_u8(&in) % 40);
	TW.now = now0;
	kva_timerwheel_init(&TW.w, tick, now0);
	for (uint32_t i = 0; i < NT; i++) {
		kva_timer_init(&TW.real[i].t);
		TW.real[i].i = i;
		uint8_t b = fz_u8(&in);
		uint8_t other = fz_u8(&in) % NT;
		TW.act[i] = (struct action){(uint8_t)((b & 7) % 5), other,
					    tw_delta(b >> 3, fz_u16(&in), tick)};
	}
	while (fz_more(&in)) {
		uint8_t op = fz_u8(&in);
		uint8_t sel = fz_u8(&in);
		uint64_t raw = (uint64_t)fz_u16(&in) | (uint64_t)fz_u16(&in) << 16 |
			       (uint64_t)fz_u16(&in) << 32;
		uint32_t i = (op >> 2) % NT;
		switch (op & 3) {
		case 0: { /* arm at now + delta, or in the past */
			uint64_t d = tw_delta(sel, raw, tick);
			uint64_t exp =
			    (sel & 0x80) ? (TW.now > d ? TW.now - d : 0) : sat_add(TW.now, d);
			if ((sel & 0xf8) == 0x78)
				exp = UINT64_MAX;
			tw_arm(&TW.real[i].t, exp, raw & 1);
			ref_arm(i, exp);
			break;
		}
		case 1:
			kva_timerwheel_cancel(&TW.w, &TW.real[i].t);
			TW.ref[i].armed = false;
			break;
		default: {
			uint64_t d = tw_delta(sel, raw, tick);
			uint64_t now = (sel & 0x80) && (sel & 0x40) ? (TW.now > d ? TW.now - d : 0)
								    : sat_add(TW.now, d);
			TW.nreal = TW.nref = 0;
			size_t fr = ref_advance(now); /* moves TW.now, which callbacks use */
			size_t fw = kva_timerwheel_advance(&TW.w, now, real_fire, NULL);
			CHECK(fw == fr && TW.nreal == TW.nref);
			CHECK(memcmp(TW.log_real, TW.log_ref, TW.nref * sizeof(uint32_t)) == 0);
			break;
		}
		}
		size_t armed = 0;
		for (uint32_t k = 0; k < NT; k++) {
			CHECK(kva_timer_armed(&TW.real[k].t) == TW.ref[k].armed);
			armed += TW.ref[k].armed;
		}
		CHECK(kva_timerwheel_count(&TW.w) == armed);
	}
}

/* ---- waitq ----------------------------------------------------------------- */

#define NW 16

static void fuzz_waitq(void)
{
	struct kva_waitq q;
	struct kva_waitq_node node[NW];
	int model[NW];
	uint32_t n = 0;
	bool queued[NW] = {false};
	kva_waitq_init(&q);
	while (fz_more(&in)) {
		uint8_t op = fz_u8(&in);
		uint32_t i = (op >> 2) % NW;
		switch (op & 3) {
		case 0:
		case 1:
			if (queued[i])
				break;
			queued[i] = true;
			if (op & 1) {
				kva_waitq_push_front(&q, &node[i]);
				memmove(&model[1], &model[0], n * sizeof(int));
				model[0] = (int)i;
			} else {
				kva_waitq_push_back(&q, &node[i]);
				model[n] = (int)i;
			}
			n++;
			break;
		case 2: {
			struct kva_waitq_node *h = pop_head(&q);
			if (!n) {
				CHECK(h == NULL);
				break;
			}
			CHECK(h == &node[model[0]]);
			queued[model[0]] = false;
			memmove(&model[0], &model[1], (n - 1) * sizeof(int));
			n--;
			break;
		}
		default:
			if (!queued[i])
				break;
			kva_waitq_unlink(&q, &node[i]);
			queued[i] = false;
			for (uint32_t k = 0; k < n; k++)
				if (model[k] == (int)i) {
					memmove(&model[k], &model[k + 1],
						(n - k - 1) * sizeof(int));
					break;
				}
			n--;
			break;
		}
		CHECK(waitq_count(&q) == n && kva_waitq_empty(&q) == (n == 0));
		uint32_t k = 0;
		for (struct kva_waitq_node *x = kva_waitq_first(&q); x; x = kva_waitq_next(&q, x)) {
			CHECK(k < n && x == &node[model[k]]);
			k++;
		}
		CHECK(k == n);
		k = 0;
		struct kva_waitq_node *pos;
		kva_rcu_read_lock();
		kva_waitq_for_each_rcu(&q, pos)
		{
			CHECK(k < n && pos == &node[model[k]]);
			k++;
		}
		kva_rcu_read_unlock();
		CHECK(k == n);
	}
}

/* ---- inbox ------------------------------------------------------------------ */

#define NI 32
#define NPROD 2
#define MAXPUSH 256

struct item {
	struct kva_inbox_node node;
	uint32_t producer, seq;
};

static struct kva_inbox inbox;
static struct item items[NPROD][MAXPUSH];

struct producer {
	uint32_t id, count;
	pthread_t thread;
};

static void *produce(void *arg)
{
	struct producer *p = arg;
	for (uint32_t s = 0; s < p->count; s++) {
		struct item *it = &items[p->id][s];
		it->producer = p->id;
		it->seq = s;
		kva_inbox_push(&inbox, &it->node);
	}
	return NULL;
}

static void fuzz_inbox(void)
{
	static struct item one[NI];
	int fifo[NI];
	uint32_t n = 0;
	bool inside[NI] = {false}; /* queued or in an undrained batch */
	struct kva_inbox_batch batch;
	kva_inbox_init(&inbox);
	uint32_t rounds = fz_u8(&in) % 64;
	for (uint32_t r = 0; r < rounds && fz_more(&in); r++) {
		uint8_t op = fz_u8(&in);
		uint32_t i = (op >> 1) % NI;
		if (op & 1) {
			if (inside[i])
				continue;
			/* popped nodes are pushed again without re-initialisation */
			CHECK(kva_inbox_push(&inbox, &one[i].node) == (n == 0));
			CHECK(!kva_inbox_empty(&inbox));
			inside[i] = true;
			fifo[n++] = (int)i;
		} else {
			CHECK(kva_inbox_drain_blocking(&inbox, &batch) == (n > 0));
			CHECK(kva_inbox_empty(&inbox));
			for (uint32_t k = 0; k < n; k++) {
				struct kva_inbox_node *x = kva_inbox_batch_pop_blocking(&batch);
				CHECK(x == &one[fifo[k]].node);
				inside[fifo[k]] = false;
			}
			CHECK(kva_inbox_batch_pop_blocking(&batch) == NULL);
			n = 0;
		}
	}
	if (n) { /* leave the queue empty for the threaded round */
		CHECK(kva_inbox_drain_blocking(&inbox, &batch));
		while (kva_inbox_batch_pop_blocking(&batch))
			;
	}

	struct producer prod[NPROD];
	uint32_t total = 0;
	for (uint32_t p = 0; p < NPROD; p++) {
		prod[p] = (struct producer){p, fz_u8(&in) % (MAXPUSH + 1), 0};
		total += prod[p].count;
	}
	bool yield = fz_u8(&in) & 1;
	for (uint32_t p = 0; p < NPROD; p++)
		CHECK(pthread_create(&prod[p].thread, NULL, produce, &prod[p]) == 0);
	uint32_t next[NPROD] = {0}, got = 0, spins = 0;
	while (got < total) {
		if (yield)
			sched_yield(); /* let batches grow */
		if (!kva_inbox_drain_blocking(&inbox, &batch)) {
			CHECK(++spins < 100000000);
			continue;
		}
		struct kva_inbox_node *x;
		while ((x = kva_inbox_batch_pop_blocking(&batch))) {
			struct item *it = caa_container_of(x, struct item, node);
			CHECK(it->producer < NPROD && it->seq < prod[it->producer].count);
			CHECK(it == &items[it->producer][it->seq]);
			CHECK(it->seq == next[it->producer]); /* once each, in order */
			next[it->producer]++;
			got++;
		}
	}
	for (uint32_t p = 0; p < NPROD; p++) {
		pthread_join(prod[p].thread, NULL);
		CHECK(next[p] == prod[p].count);
	}
	CHECK(!kva_inbox_drain_blocking(&inbox, &batch) && kva_inbox_empty(&inbox));
	kva_inbox_fini(&inbox);
}

/* ---- slab ------------------------------------------------------------------- */

#define NS 32	  /* handles one input tracks */
#define NRET 1024 /* retired handles one input remembers */

struct fslot {
	struct kva_slab_hdr h;
	uint64_t stamp;
	union {
		struct kva_slab_rcu rcu;
		char pad[32];
	};
};

enum { S_NONE, S_OWNED, S_LIVE };

struct fhandle {
	uint8_t state;
	uint32_t idx, gen;
	uint64_t stamp;
	struct fslot *p;
};

static void *sl_alloc(size_t n)
{
	return malloc(n);
}

static void sl_free(void *p, size_t n)
{
	(void)n;
	free(p);
}

static bool sl_live(const struct fhandle *h, uint32_t idx, uint32_t gen, uint64_t *stamp)
{
	for (uint32_t k = 0; k < NS; k++)
		if (h[k].state == S_LIVE && h[k].idx == idx && h[k].gen == gen) {
			*stamp = h[k].stamp;
			return true;
		}
	return false;
}

static void fuzz_slab(void)
{
	static struct kva_slab sl;
	static bool inited;
	static uint64_t stamps;
	static struct fhandle h[NS];
	static struct {
		uint32_t idx, gen;
	} ret[NRET];
	uint32_t nret = 0;
	struct kva_slab_retired b = {0, 0, 0};

	if (!inited) {
		CHECK(kva_slab_init(&sl, sizeof(struct fslot), offsetof(struct fslot, rcu),
				    sl_alloc, sl_free) == 0);
		inited = true;
	}
	memset(h, 0, sizeof(h));
	/* Nothing retired from here on may come back before the unlock. */
	kva_rcu_read_lock();
	while (fz_more(&in)) {
		uint8_t op = fz_u8(&in);
		struct fhandle *x = &h[(op >> 3) % NS];
		uint64_t st;
		switch (op & 7) {
		case 0: { /* alloc */
			if (x->state != S_NONE)
				break;
			uint32_t idx;
			struct fslot *p = kva_slab_alloc(&sl, &idx);
			CHECK(p != NULL && kva_slab_get(&sl, idx) == p);
			uint32_t g = atomic_load_explicit(&p->h.gen, memory_order_relaxed);
			CHECK((g & 1) == 0 && kva_slab_lookup(&sl, idx, g + 1) == NULL);
			for (uint32_t k = 0; k < NS; k++)
				CHECK(h[k].state == S_NONE || h[k].idx != idx);
			for (uint32_t k = 0; k < nret; k++)
				CHECK(ret[k].idx != idx);
			*x = (struct fhandle){S_OWNED, idx, 0, ++stamps, p};
			p->stamp = x->stamp;
			break;
		}
		case 1:
		case 2: { /* publish, or publish again: a new incarnation */
			if (x->state == S_NONE)
				break;
			uint32_t was = atomic_load_explicit(&x->p->h.gen, memory_order_relaxed);
			x->p->stamp = x->stamp = ++stamps;
			uint32_t g = kva_slab_publish(&sl, x->p);
			CHECK((g & 1) && g == (x->state == S_LIVE ? was + 2 : was + 1));
			if (x->state == S_LIVE)
				CHECK(kva_slab_lookup(&sl, x->idx, x->gen) == NULL);
			x->gen = g;
			x->state = S_LIVE;
			break;
		}
		case 3: /* retire */
			if (x->state == S_NONE || nret == NRET)
				break;
			kva_slab_retire(&sl, &b, x->idx);
			ret[nret].idx = x->idx;
			ret[nret++].gen = x->gen;
			if (x->state == S_LIVE)
				CHECK(kva_slab_lookup(&sl, x->idx, x->gen) == NULL);
			CHECK((atomic_load_explicit(&x->p->h.gen, memory_order_relaxed) & 1) == 0);
			x->state = S_NONE;
			break;
		case 4:
			kva_slab_flush(&sl, &b);
			CHECK(b.n == 0);
			break;
		case 5: { /* a tracked handle, maybe with another generation */
			if (x->state == S_NONE)
				break;
			uint32_t g = x->gen + (fz_u8(&in) % 4) * 2 - (x->state == S_OWNED ? 1 : 0);
			struct fslot *p = kva_slab_lookup(&sl, x->idx, g);
			if (sl_live(h, x->idx, g, &st))
				CHECK(p == x->p && p->stamp == st);
			else
				CHECK(p == NULL);
			break;
		}
		case 6: { /* any handle at all */
			uint32_t idx = fz_u16(&in);
			if (idx & 0x8000)
				idx = (uint32_t)fz_u16(&in) << 16 | fz_u16(&in);
			uint32_t g = (uint32_t)fz_u16(&in) | 1;
			struct fslot *p = kva_slab_lookup(&sl, idx, g);
			if (sl_live(h, idx, g, &st))
				CHECK(p != NULL && p->stamp == st);
			else
				CHECK(p == NULL);
			if (idx >= KVA_SLAB_INDEX_END)
				CHECK(kva_slab_get(&sl, idx) == NULL);
			break;
		}
		default: /* every retired handle still fails */
			for (uint32_t k = 0; k < nret; k++)
				CHECK(!sl_live(h, ret[k].idx, ret[k].gen, &st) &&
				      kva_slab_lookup(&sl, ret[k].idx, ret[k].gen | 1) == NULL);
			break;
		}
	}
	for (uint32_t k = 0; k < NS; k++)
		if (h[k].state != S_NONE)
			kva_slab_retire(&sl, &b, h[k].idx);
	kva_slab_flush(&sl, &b);
	kva_rcu_read_unlock();
}

/* ---- pagepool ------------------------------------------------------------------ */

#define NP 600

static void fuzz_pagepool(void)
{
	static struct kva_pagepool pool;
	static struct ppm model;
	static uint32_t held[NP], tmp[NP + 1], want[NP + 1];
	uint32_t n = fz_below(&in, NP + 1), nheld = 0;

	CHECK(kva_pagepool_init(&pool, n) == 0);
	ppm_init(&model, n);
	while (fz_more(&in)) {
		uint8_t op = fz_u8(&in);
		uint32_t k = (op & 0x80) ? fz_below(&in, NP + 2) : (op >> 2) % 20;
		if (op & 1) {
			int rc = (op & 2) && k == 1 ? kva_pagepool_take(&pool, tmp)
						    : kva_pagepool_take_n(&pool, tmp, k);
			CHECK(rc == 0 || rc == -ENOSPC); /* alone: never contended */
			bool ok = rc == 0;
			CHECK(ok == ppm_take(&model, want, k));
			if (!ok)
				continue;
			CHECK(memcmp(tmp, want, k * sizeof(uint32_t)) == 0);
			memcpy(held + nheld, tmp, k * sizeof(uint32_t));
			nheld += k;
		} else {
			if (k > nheld)
				k = nheld;
			/* Give back k held ids in a shuffled order. */
			for (uint32_t i = 0; i < k; i++) {
				uint32_t j = i + fz_below(&in, nheld - i), t = held[i];
				held[i] = held[j];
				held[j] = t;
			}
			if (k == 1 && (op & 2))
				kva_pagepool_put(&pool, held[0]);
			else
				kva_pagepool_put_n(&pool, held, k);
			ppm_put(&model, held, k);
			memmove(held, held + k, (nheld - k) * sizeof(uint32_t));
			nheld -= k;
		}
		CHECK(kva_pagepool_count(&pool) == model.count);
	}
	uint32_t left = model.count;
	CHECK(kva_pagepool_take_n(&pool, tmp, left) == 0 && ppm_take(&model, want, left));
	CHECK(memcmp(tmp, want, left * sizeof(uint32_t)) == 0);
	CHECK(kva_pagepool_take(&pool, tmp) == -ENOSPC && kva_pagepool_count(&pool) == 0);
	kva_pagepool_fini(&pool);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fz_init(&in, data, size);
	/* 0..2 keep their meaning for the checked-in seeds. */
	switch (fz_u8(&in) % 5) {
	case 0:
		fuzz_timerwheel();
		break;
	case 1:
		fuzz_waitq();
		break;
	case 2:
		fuzz_inbox();
		break;
	case 3:
		fuzz_slab();
		break;
	default:
		fuzz_pagepool();
		break;
	}
	return 0;
}
