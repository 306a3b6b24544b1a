/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fleet: the I/O thread, its publishers' sequence tracking and replay, the
 * registered chains, the lookups and the watches of answered checkpoints.
 * Calls go one way: fleet.c -> index.c (the table), wire.c (the decoder).
 *
 * Synchronisation (labels):
 *   R1/A1  the command queue (kva_inbox of lockfree/inbox.c): a producer's
 *          writes to its node happen before the I/O thread pops it.
 *   R2/A2  f->engine: kva_fleet_attach stores it (release), the I/O thread
 *          loads it (acquire) before answering.
 *   R3/A3  lookups_done: counted (release) after kva_lookup_answer returned;
 *          kva_fleet_lookups_done loads it (acquire).
 *   R4/A4  a publisher's next_seq: stored (release) after the batch before
 *          it was applied and its evictions reported; kva_fleet_publisher_seq
 *          loads it (acquire).
 *   Publisher slots: the adding thread takes a free one (CAS to ADDING,
 *          acquire); the I/O thread makes it TAKEN (release) once it filled
 *          the slot, which kva_fleet_publisher_seq loads (acquire) before
 *          reading it, and frees it (release) once a removal is done.
 * Statistics are atomics written by the I/O thread only, relaxed but for
 * the batch count (release, after the batch's blocks; stats readers load
 * with acquire).
 */
#define _GNU_SOURCE
#include "kvadmit/fleet.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include <kvadmit/lockfree/hash.h>
#include <kvadmit/lockfree/inbox.h>
#include "index.h"
#include "wire.h"

#define MAX_MEDIA 64 /* one table for the fleet; a publisher's media are a 64-bit mask */
#define NO_MEDIUM UINT32_MAX
#define MAX_WATCHES 65536u
#define PENDING_BYTES_MAX ((size_t)64 << 20)
#define RECV_BUDGET 256  /* messages per socket per loop turn: lookups stay prompt */
#define REPLAY_TRIES 3
#define TICK_MS 50

enum { ST_N = sizeof(kva_fleet_stats) / sizeof(uint64_t) };
#define ST(field) (offsetof(kva_fleet_stats, field) / sizeof(uint64_t))

enum cmd_kind { CMD_LOOKUP = 1, CMD_CHAIN = 2, CMD_ADD_PUB = 3, CMD_REMOVE_PUB = 4 };

struct cmd {
	struct kva_inbox_node node;
	uint8_t kind;
	uint32_t prompt; /* CMD_ADD_PUB, CMD_REMOVE_PUB: the publisher's id */
	uint64_t key;
	kva_lookup_token tok;
	uint64_t t0;
};

/* A publisher added after create: its strings travel with the command. */
struct add_cmd {
	struct cmd c;
	char *endpoint, *replay, *topic;
	uint8_t self;
};

/* Publisher slots (id = index): taken by the adding thread (CAS to ADDING),
 * made TAKEN by the I/O thread once the sockets are open (so nobody reads a
 * slot it is still filling), freed by it once a removal is done, so an id
 * is never reused while anything still refers to it. */
enum { SLOT_FREE = 0, SLOT_TAKEN = 1, SLOT_REMOVING = 2, SLOT_ADDING = 3 };

/* A registered chain; FIFO list for the cap; refs: the map + watches. */
struct chain {
	struct cmd c; /* the node it arrived in (kind CMD_CHAIN) */
	struct chain *older, *newer;
	uint32_t refs, n;
	uint64_t hashes[];
};

/* A live batch, held while a replay runs. */
struct pending {
	int64_t seq;
	size_t len;
	uint8_t *data; /* NULL for a big one */
	bool big;      /* over max_message_bytes: its number only */
	bool back;     /* its number was not above the previous live one: a new process */
};

struct pub {
	void *sub, *dealer, *mon;
	char *endpoint, *replay, *topic;
	uint16_t idx;
	uint8_t self;
	bool started, replaying, down, dropped, joining;
	bool live_seen;
	/* a batch marked back (a new process) could not be held: the restart
	 * is applied once the held batches are handed back (pend_flush) */
	bool restart_pending;
	int64_t expected;
	int64_t live_last; /* the last number seen on PUB (restarts are told by it) */
	uint64_t replay_deadline, down_since;
	int replay_tries;
	bool active; /* the I/O thread's view: sockets open */
	_Atomic int64_t next_seq; /* `expected`, published for kva_fleet_publisher_seq */
	struct pending *pend;
	/* The other held list (max_pending too): pend_flush holds into it what a
	 * replay begun meanwhile must keep, while it still reads `pend`. */
	struct pending *pend_spare;
	uint32_t npend;
	size_t pend_bytes;
	bool pend_overflow;
	uint32_t block_size;
	uint64_t media;  /* medium ids seen */
	size_t nentries; /* its index entries: a clear of none costs no scan */
};

struct watch {
	uint64_t id; /* 0: dead */
	uint32_t pair, L;
	uint64_t expires;
	struct chain *ch;
};

struct kva_fleet {
	kva_fleet_config cfg;
	_Atomic(kva_engine *) engine;
	struct kva_inbox q;
	int efd;
	atomic_bool stop;
	pthread_t thread;
	bool thread_started;
	void *ctx;
	bool own_ctx;
	struct pub *pubs;   /* KVA_FLEET_MAX_PUBLISHERS slots */
	uint32_t npubs;     /* slots ever used (inactive ones skipped) */
	bool pubs_changed;  /* the I/O thread rebuilds its poll items */
	uint32_t mon_gen;
	_Atomic uint8_t slot[KVA_FLEET_MAX_PUBLISHERS];
	_Atomic uint64_t lookups_done;
	struct kvf_index ix;
	struct kvf_batch batch;
	char media[MAX_MEDIA][KVF_MEDIUM_MAX + 1];
	uint8_t media_len[MAX_MEDIA]; /* a name may hold NUL bytes */
	uint32_t nmedia;
	uint64_t local_media; /* ids local for the self publisher */
	/* chains: open-addressing map key -> chain, FIFO list */
	struct chain **cmap;
	size_t cmask, nchains;
	struct chain *oldest, *newest;
	struct watch *watches; /* ring */
	uint32_t wh, wn;
	uint64_t epoch;
	_Atomic uint64_t st[ST_N];
};

static inline void st_add(kva_fleet *f, size_t i, uint64_t v)
{
	atomic_fetch_add_explicit(&f->st[i], v, memory_order_relaxed);
}
static inline void st_set(kva_fleet *f, size_t i, uint64_t v)
{
	atomic_store_explicit(&f->st[i], v, memory_order_relaxed);
}

static uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void flog(kva_fleet *f, int level, const char *fmt, ...)
{
	if (!f->cfg.log)
		return;
	char buf[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	f->cfg.log(f->cfg.log_ctx, level, buf);
}

void kva_fleet_config_default(kva_fleet_config *c)
{
	memset(c, 0, sizeof(*c));
	c->max_blocks = 4u << 20;
	c->max_chains = 65536;
	c->max_chain_blocks = 65536;
	c->max_message_bytes = 16u << 20;
	c->max_pending = 4096;
	c->replay_timeout_ns = 2000000000ull;
	c->drop_after_ns = 30000000000ull;
	c->watch_ns = 600000000000ull;
	c->full_groups = 1;
	c->local_media = "GPU";
}

uint64_t kva_fleet_hash_bytes(const void *p, size_t n) { return kvf_hash_from_bytes(p, n); }

/* ---- media ------------------------------------------------------------- */

/* Id of a medium name; an absent medium is "GPU" (vLLM's MEDIUM_GPU). Names
 * compare by their bytes and length (the wire allows NUL in them). Past
 * MAX_MEDIA names: NO_MEDIUM, and the caller skips the event. A shared id
 * would merge media (a BlockRemoved on one deleting another's copies); a
 * medium without an id has no entries, so skipping its removals is exact. */
static uint32_t medium_id(kva_fleet *f, const char *name, size_t len)
{
	if (len == 0)
		name = "GPU", len = 3;
	len = len > KVF_MEDIUM_MAX ? KVF_MEDIUM_MAX : len; /* as the decoder keeps it */
	for (uint32_t i = 0; i < f->nmedia; i++)
		if (f->media_len[i] == len && memcmp(f->media[i], name, len) == 0)
			return i;
	if (f->nmedia == MAX_MEDIA)
		return NO_MEDIUM;
	memcpy(f->media[f->nmedia], name, len);
	f->media[f->nmedia][len] = 0;
	f->media_len[f->nmedia] = (uint8_t)len;
	return f->nmedia++;
}

/* ---- chains -------------------------------------------------------------- */

static void chain_unref(struct chain *c)
{
	if (--c->refs == 0)
		free(c);
}

static struct chain **cmap_slot(kva_fleet *f, uint64_t key)
{
	for (size_t i = kva_hash64(key) & f->cmask;; i = (i + 1) & f->cmask)
		if (!f->cmap[i] || f->cmap[i]->c.key == key)
			return &f->cmap[i];
}

static void cmap_del(kva_fleet *f, struct chain **slot)
{
	size_t i = (size_t)(slot - f->cmap), j = i;
	for (;;) {
		f->cmap[i] = NULL;
		for (;;) {
			j = (j + 1) & f->cmask;
			if (!f->cmap[j])
				return;
			size_t h = kva_hash64(f->cmap[j]->c.key) & f->cmask;
			if (i <= j ? (h <= i || h > j) : (h <= i && h > j))
				break;
		}
		f->cmap[i] = f->cmap[j];
		i = j;
	}
}

static void chain_unlink(kva_fleet *f, struct chain *c)
{
	if (c->older)
		c->older->newer = c->newer;
	else
		f->oldest = c->newer;
	if (c->newer)
		c->newer->older = c->older;
	else
		f->newest = c->older;
	f->nchains--;
}

static void chain_add(kva_fleet *f, struct chain *c)
{
	struct chain **s = cmap_slot(f, c->c.key);
	if (*s) { /* a new chain for a known key replaces it */
		struct chain *old = *s;
		chain_unlink(f, old);
		*s = c;
		chain_unref(old);
	} else {
		if (f->nchains >= f->cfg.max_chains) {
			struct chain *old = f->oldest;
			chain_unlink(f, old);
			cmap_del(f, cmap_slot(f, old->c.key));
			chain_unref(old);
			st_add(f, ST(chains_evicted), 1);
			s = cmap_slot(f, c->c.key);
		}
		*s = c;
	}
	c->refs = 1;
	c->newer = NULL;
	c->older = f->newest;
	if (f->newest)
		f->newest->newer = c;
	else
		f->oldest = c;
	f->newest = c;
	f->nchains++;
	st_set(f, ST(chains), f->nchains);
}

/* ---- locations and checkpoints ------------------------------------------ */

static inline uint32_t pair_of(uint32_t pub, uint32_t medium) { return pub << 8 | medium; }

static inline uint64_t ckpt_id(uint64_t last_hash, uint32_t pair)
{
	return kva_hash64(last_hash ^ kva_hash64((uint64_t)pair + 1));
}

/* Longest prefix of ch (at most maxL blocks) the pair holds in every full
 * group, shortened to where every state group holds the last block. */
static uint32_t prefix_len(kva_fleet *f, const struct chain *ch, uint32_t pair, uint32_t maxL)
{
	uint32_t L = maxL;
	for (uint32_t g = 0; g < 32; g++) {
		if (!(f->cfg.full_groups >> g & 1))
			continue;
		uint32_t loc = pair << 8 | g, i = 0;
		while (i < L && kvf_index_find(&f->ix, ch->hashes[i], loc))
			i++;
		L = i;
	}
	if (!f->cfg.state_groups)
		return L;
	for (; L > 0; L--) {
		bool all = true;
		for (uint32_t g = 0; g < 32 && all; g++)
			if (f->cfg.state_groups >> g & 1)
				all = kvf_index_find(&f->ix, ch->hashes[L - 1], pair << 8 | g) != NULL;
		if (all)
			break;
	}
	return L;
}

static void mark_watched(kva_fleet *f, const struct chain *ch, uint32_t pair, uint32_t L)
{
	for (uint32_t g = 0; g < 32; g++) {
		bool full = f->cfg.full_groups >> g & 1, state = f->cfg.state_groups >> g & 1;
		if (!full && !state)
			continue;
		for (uint32_t i = full ? 0 : L - 1; i < L; i++) {
			struct kvf_slot *s = kvf_index_find(&f->ix, ch->hashes[i], pair << 8 | g);
			if (s)
				s->flags |= KVF_E_WATCHED | KVF_E_REF;
		}
	}
}

static void watch_add(kva_fleet *f, uint64_t id, uint32_t pair, uint32_t L, struct chain *ch,
                      uint64_t now)
{
	if (f->wn == MAX_WATCHES) { /* the oldest watch gives way */
		struct watch *w = &f->watches[f->wh];
		if (w->id)
			chain_unref(w->ch);
		f->wh = (f->wh + 1) % MAX_WATCHES;
		f->wn--;
	}
	struct watch *w = &f->watches[(f->wh + f->wn) % MAX_WATCHES];
	*w = (struct watch){.id = id, .pair = pair, .L = L, .ch = ch,
	                    .expires = now + f->cfg.watch_ns};
	ch->refs++;
	f->wn++;
}

static void watch_fire(kva_fleet *f, struct watch *w)
{
	kva_engine *e = atomic_load_explicit(&f->engine, memory_order_acquire); /* A2 */
	if (e && kva_checkpoint_evicted(e, w->id, ++f->epoch) == 0)
		st_add(f, ST(evictions_reported), 1);
	chain_unref(w->ch);
	w->id = 0;
}

/* Watches of `pair` (or of every pair of publisher `pub` when pair is
 * UINT32_MAX) whose prefix is no longer whole are reported evicted. */
static void watches_check(kva_fleet *f, uint32_t pair, int pub)
{
	for (uint32_t k = 0; k < f->wn; k++) {
		struct watch *w = &f->watches[(f->wh + k) % MAX_WATCHES];
		if (!w->id)
			continue;
		if (pub >= 0) {
			if ((w->pair >> 8) == (uint32_t)pub)
				watch_fire(f, w);
		} else if (w->pair == pair && prefix_len(f, w->ch, pair, w->L) < w->L) {
			watch_fire(f, w);
		}
	}
}

static void watches_expire(kva_fleet *f, uint64_t now)
{
	while (f->wn) {
		struct watch *w = &f->watches[f->wh];
		if (w->id && w->expires > now)
			break;
		if (w->id)
			chain_unref(w->ch);
		f->wh = (f->wh + 1) % MAX_WATCHES;
		f->wn--;
	}
}

/* ---- lookups -------------------------------------------------------------- */

struct cand {
	uint32_t pos, pair, L;
	uint8_t local;
};

static void answer(kva_fleet *f, struct cmd *c, uint64_t now)
{
	kva_engine *e = atomic_load_explicit(&f->engine, memory_order_acquire); /* A2 */
	kva_manifest m = {0};
	st_add(f, ST(lookups), 1);
	struct chain **s = cmap_slot(f, c->key);
	struct chain *ch = *s;
	struct cand best[KVA_MAX_CHECKPOINTS];
	uint32_t nb = 0;
	if (!ch) {
		st_add(f, ST(unregistered), 1);
	} else {
		for (uint32_t p = 0; p < f->npubs; p++) {
			struct pub *P = &f->pubs[p];
			if (!P->active || P->down || P->dropped)
				continue;
			for (uint32_t md = 0; md < MAX_MEDIA; md++) {
				if (!(P->media >> md & 1))
					continue;
				uint32_t bs = f->cfg.block_size ? f->cfg.block_size : P->block_size;
				if (!bs)
					continue;
				uint32_t maxL = c->prompt / bs < ch->n ? c->prompt / bs : ch->n;
				uint32_t pair = pair_of(p, md);
				uint32_t L = maxL ? prefix_len(f, ch, pair, maxL) : 0;
				if (!L)
					continue;
				struct cand x = {.pos = L * bs, .pair = pair, .L = L,
				                 .local = P->self && (f->local_media >> md & 1)};
				/* keep the longest distinct positions; at one position a
				 * local copy wins, then the first publisher */
				uint32_t i;
				for (i = 0; i < nb && best[i].pos != x.pos; i++)
					;
				if (i < nb) {
					if (x.local && !best[i].local)
						best[i] = x;
					continue;
				}
				if (nb < KVA_MAX_CHECKPOINTS) {
					best[nb++] = x;
					continue;
				}
				uint32_t lo = 0;
				for (i = 1; i < nb; i++)
					if (best[i].pos < best[lo].pos)
						lo = i;
				if (best[lo].pos < x.pos)
					best[lo] = x;
			}
		}
		/* ascending positions */
		for (uint32_t i = 1; i < nb; i++)
			for (uint32_t j = i; j > 0 && best[j - 1].pos > best[j].pos; j--) {
				struct cand t = best[j];
				best[j] = best[j - 1];
				best[j - 1] = t;
			}
		for (uint32_t i = 0; i < nb; i++) {
			uint64_t id = ckpt_id(ch->hashes[best[i].L - 1], best[i].pair);
			m.entries[i] = (kva_checkpoint){.position = best[i].pos,
			                                .location = best[i].local ? KVA_LOC_LOCAL
			                                                          : KVA_LOC_EXTERNAL,
			                                .compatible = 1, .id = id, .epoch = f->epoch};
		}
		m.count = nb;
	}
	if (!m.count)
		st_add(f, ST(misses), 1);
	int rc = e ? kva_lookup_answer(e, c->tok, &m) : -ENOENT;
	uint64_t dt = now_ns() - c->t0;
	if (rc) {
		st_add(f, ST(answer_errors), 1);
	} else {
		st_add(f, ST(answered), 1);
		for (uint32_t i = 0; i < nb; i++) {
			mark_watched(f, ch, best[i].pair, best[i].L);
			watch_add(f, m.entries[i].id, best[i].pair, best[i].L, ch, now);
		}
	}
	static const uint64_t bounds[13] = {1000,   2000,   5000,    10000,   20000,
	                                    50000,  100000, 200000,  500000,  1000000,
	                                    2000000, 5000000, 10000000};
	uint32_t b = 0;
	while (b < 13 && dt > bounds[b])
		b++;
	st_add(f, ST(answer_ns_buckets) + b, 1);
	st_add(f, ST(answer_ns_sum), dt);
	if (dt > atomic_load_explicit(&f->st[ST(answer_ns_max)], memory_order_relaxed))
		st_set(f, ST(answer_ns_max), dt);
	atomic_fetch_add_explicit(&f->lookups_done, 1, memory_order_release); /* R3 */
}

/* Any thread: hands c to the I/O thread, waking it when the queue was
 * empty (an eventfd write never blocks here). */
static void push_cmd(kva_fleet *f, struct cmd *c)
{
	if (kva_inbox_push(&f->q, &c->node)) { /* R1: the command's fields */
		uint64_t one = 1;
		ssize_t w = write(f->efd, &one, sizeof one);
		(void)w;
	}
}

void kva_fleet_lookup(void *fleet, uint64_t prefix_key, uint32_t prompt_tokens,
                      kva_lookup_token token)
{
	kva_fleet *f = fleet;
	struct cmd *c = malloc(sizeof(*c));
	if (!c) {
		kva_engine *e = atomic_load_explicit(&f->engine, memory_order_acquire); /* A2 */
		kva_manifest m = {0};
		atomic_fetch_add_explicit(&f->st[ST(lookup_nomem)], 1, memory_order_relaxed);
		if (e)
			kva_lookup_answer(e, token, &m);
		atomic_fetch_add_explicit(&f->lookups_done, 1, memory_order_release);
		return;
	}
	kva_inbox_node_init(&c->node);
	c->kind = CMD_LOOKUP;
	c->key = prefix_key;
	c->prompt = prompt_tokens;
	c->tok = token;
	c->t0 = now_ns();
	push_cmd(f, c);
}

int kva_fleet_chain_register(kva_fleet *f, uint64_t prefix_key, const uint64_t *hashes,
                             uint32_t n)
{
	if (!f || (!hashes && n) || n == 0)
		return -EINVAL;
	if (n > f->cfg.max_chain_blocks)
		return -E2BIG;
	struct chain *c = malloc(sizeof(*c) + (size_t)n * sizeof(uint64_t));
	if (!c)
		return -ENOMEM;
	kva_inbox_node_init(&c->c.node);
	c->c.kind = CMD_CHAIN;
	c->c.key = prefix_key;
	c->n = n;
	memcpy(c->hashes, hashes, (size_t)n * sizeof(uint64_t));
	push_cmd(f, &c->c);
	return 0;
}

static void pub_add(kva_fleet *f, struct add_cmd *a);
static void pub_remove(kva_fleet *f, uint32_t id);

static void drain_commands(kva_fleet *f, bool woken)
{
	if (woken) {
		uint64_t v;
		ssize_t r = read(f->efd, &v, sizeof v); /* reset before draining: no lost wakeup */
		(void)r;
	} else if (kva_inbox_empty(&f->q)) {
		return;
	}
	struct kva_inbox_batch b;
	if (!kva_inbox_drain_blocking(&f->q, &b))
		return;
	uint64_t now = now_ns();
	struct kva_inbox_node *n;
	while ((n = kva_inbox_batch_pop_blocking(&b))) { /* A1: pairs with R1 */
		struct cmd *c = caa_container_of(n, struct cmd, node);
		if (c->kind == CMD_CHAIN) {
			chain_add(f, caa_container_of(c, struct chain, c));
		} else if (c->kind == CMD_ADD_PUB) {
			pub_add(f, caa_container_of(c, struct add_cmd, c));
		} else if (c->kind == CMD_REMOVE_PUB) {
			pub_remove(f, c->prompt);
			free(c);
		} else {
			answer(f, c, now);
			free(c);
		}
	}
}

/* ---- applying batches ------------------------------------------------------ */

/* Every entry of P goes, and its watches are reported. Finding them scans
 * the whole table (max_blocks entries), so a publisher without entries
 * (counted, nentries) skips that. */
static size_t drop_entries(kva_fleet *f, struct pub *P)
{
	size_t n = 0;
	if (P->nentries) {
		n = kvf_index_del_matching(&f->ix, (uint32_t)P->idx << 16, 16, NULL);
		P->nentries = 0;
		st_add(f, ST(index_scans), 1);
	}
	watches_check(f, 0, P->idx);
	return n;
}

static void drop_publisher(kva_fleet *f, struct pub *P, const char *why)
{
	size_t n = drop_entries(f, P);
	st_add(f, ST(entries_dropped), n);
	st_set(f, ST(blocks), f->ix.count); /* also when no batch follows */
	P->media = 0;
	flog(f, KVA_LOG_WARN, "kvadmit-fleet: publisher %s: %s, %zu entries dropped", P->endpoint,
	     why, n);
}

static void apply(kva_fleet *f, struct pub *P, const uint8_t *data, size_t len)
{
	int rc = kvf_decode(&f->batch, data, len);
	if (rc) {
		uint64_t k = atomic_fetch_add_explicit(&f->st[ST(malformed)], 1, memory_order_relaxed);
		if ((k & (k + 1)) == 0) /* 1st, 2nd, 4th ... */
			flog(f, KVA_LOG_WARN, "kvadmit-fleet: publisher %s: malformed batch (%d)",
			     P->endpoint, rc);
		return;
	}
	st_add(f, ST(unknown_events), f->batch.unknown_events);
	/* Only the batch's last AllBlocksCleared touches the index: it wipes
	 * whatever the events before it would store or remove there, and each
	 * clear may scan the whole table. They are still counted. */
	uint32_t last_clear = UINT32_MAX;
	for (uint32_t i = 0; i < f->batch.nevents; i++)
		if (f->batch.events[i].type == KVF_EV_CLEARED)
			last_clear = i;
	uint32_t groups = f->cfg.full_groups | f->cfg.state_groups;
	uint64_t stored = 0, removed = 0;
	for (uint32_t i = 0; i < f->batch.nevents; i++) {
		const struct kvf_event *ev = &f->batch.events[i];
		const uint64_t *h = &f->batch.hashes[ev->first_hash];
		bool wiped = last_clear != UINT32_MAX && i < last_clear;
		if (ev->type == KVF_EV_CLEARED) {
			if (!wiped)
				drop_entries(f, P);
			st_add(f, ST(clears), 1);
			continue;
		}
		if (ev->group_idx > 31 || !(groups >> ev->group_idx & 1)) {
			st_add(f, ST(ignored_groups), ev->nhashes);
			continue;
		}
		uint32_t md = medium_id(f, ev->medium, ev->medium_len);
		if (md == NO_MEDIUM) {
			uint64_t k = atomic_fetch_add_explicit(&f->st[ST(ignored_media)], ev->nhashes,
			                                       memory_order_relaxed);
			if (k == 0)
				flog(f, KVA_LOG_WARN,
				     "kvadmit-fleet: publisher %s: more than %d medium names, events on "
				     "new ones skipped", P->endpoint, MAX_MEDIA);
			continue;
		}
		uint32_t loc = KVF_LOC(P->idx, md, ev->group_idx);
		if (ev->type == KVF_EV_STORED) {
			if (!f->cfg.block_size && !P->block_size) {
				if (!ev->block_size) {
					st_add(f, ST(no_block_size), ev->nhashes);
					continue;
				}
				P->block_size = ev->block_size;
			}
			P->media |= 1ull << md;
			for (uint32_t k = 0; k < ev->nhashes && !wiped; k++) {
				struct kvf_slot out;
				bool evicted;
				if (kvf_index_put(&f->ix, h[k], loc, &out, &evicted))
					P->nentries++;
				if (evicted) /* the cap took some publisher's entry */
					f->pubs[KVF_LOC_PUB(out.loc1 - 1)].nentries--;
			}
			stored += ev->nhashes;
		} else {
			bool watched = false;
			for (uint32_t k = 0; k < ev->nhashes && !wiped; k++) {
				uint32_t fl = kvf_index_del(&f->ix, h[k], loc);
				if (fl)
					P->nentries--;
				if (fl && ((fl - 1) & KVF_E_WATCHED))
					watched = true;
			}
			removed += ev->nhashes;
			if (watched)
				watches_check(f, KVF_LOC_PUB_MEDIUM(loc), -1);
		}
	}
	st_add(f, ST(blocks_stored), stored);
	st_add(f, ST(blocks_removed), removed);
	st_set(f, ST(blocks), f->ix.count);
	st_set(f, ST(cap_evictions), f->ix.evicted);
	/* Last, and release: a stats reader that sees the batch counted sees
	 * its blocks (its acquire loads, kva_fleet_stats_get). */
	atomic_fetch_add_explicit(&f->st[ST(batches)], 1, memory_order_release);
}

/* ---- sequence tracking and replay -------------------------------------------- */

/* A replay round starts with a gap, a late join, a restart or an overflow of
 * the held list; retries ask again from `expected`. Live batches that arrive
 * meanwhile are held and handed back to live_batch once the round is over. */
static void replay_request(kva_fleet *f, struct pub *P, int64_t from)
{
	unsigned char seq[8];
	for (int i = 0; i < 8; i++)
		seq[i] = (unsigned char)((uint64_t)from >> (56 - 8 * i));
	P->replaying = true;
	P->replay_deadline = now_ns() + f->cfg.replay_timeout_ns;
	if (zmq_send(P->dealer, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
	    zmq_send(P->dealer, seq, 8, ZMQ_DONTWAIT) < 0)
		flog(f, KVA_LOG_WARN, "kvadmit-fleet: publisher %s: replay request not sent (%s)",
		     P->endpoint, zmq_strerror(zmq_errno()));
	st_add(f, ST(replays_requested), 1);
}

/* Holds b until the replay is over. owned: b's data belongs to the held
 * list being flushed and moves (b->data is NULL after); otherwise it is
 * copied. Past max_pending or 64 MiB nothing more is held, and the round is
 * followed by another replay from where the stream stopped. */
static void hold(kva_fleet *f, struct pub *P, struct pending *b, bool owned)
{
	if (P->pend_overflow || P->npend >= f->cfg.max_pending ||
	    P->pend_bytes + b->len > PENDING_BYTES_MAX) {
		P->pend_overflow = true; /* asked for again after this replay */
		if (b->back) /* its mark would be lost with it */
			P->restart_pending = true;
		return;
	}
	struct pending h = *b;
	if (owned) {
		b->data = NULL;
	} else if (!b->big) {
		h.data = malloc(b->len ? b->len : 1);
		if (!h.data) {
			P->pend_overflow = true;
			if (b->back)
				P->restart_pending = true;
			return;
		}
		if (b->len)
			memcpy(h.data, b->data, b->len);
	}
	P->pend[P->npend++] = h;
	P->pend_bytes += h.len;
}

/* A live batch: just received, or held and now handed back (owned). */
static void live_batch(kva_fleet *f, struct pub *P, struct pending *b, bool owned)
{
	if (P->replaying) {
		hold(f, P, b, owned);
		return;
	}
	bool back = b->back;
	if (P->dropped) { /* back after being dropped: a fresh start */
		P->dropped = false;
		P->started = false;
	}
	if (!P->started) {
		P->started = true;
		back = false;
		if (b->seq > 0 && P->dealer) { /* joined late: ask for its history */
			P->expected = 0;
			P->joining = true;
			replay_request(f, P, 0);
			b->back = false;
			hold(f, P, b, owned);
			return;
		}
		P->expected = b->seq;
	}
	if (back) {
		/* PUB sends each number once, in order: a number not above the
		 * previous one is a new process */
		st_add(f, ST(restarts), 1);
		drop_publisher(f, P, "restarted (sequence went back)");
		P->expected = 0;
		if (b->seq > 0 && P->dealer) {
			replay_request(f, P, 0);
			b->back = false; /* the new process's round starts here */
			hold(f, P, b, owned);
			return;
		}
		P->expected = b->seq;
	} else if (b->seq < P->expected) {
		/* the same process, still going up: a replay returned it first
		 * (during a replay, or its end marker overtook it) */
		st_add(f, ST(duplicates), 1);
		return;
	}
	if (b->seq > P->expected) {
		st_add(f, ST(gaps), 1);
		flog(f, KVA_LOG_INFO, "kvadmit-fleet: publisher %s: gap %lld..%lld", P->endpoint,
		     (long long)P->expected, (long long)b->seq - 1);
		if (P->dealer) {
			replay_request(f, P, P->expected);
			hold(f, P, b, owned);
			return;
		}
		st_add(f, ST(lost_batches), (uint64_t)(b->seq - P->expected));
		P->expected = b->seq;
	}
	if (b->big)
		st_add(f, ST(oversized), 1); /* its number counts: lost, not missing */
	else
		apply(f, P, b->data, b->len);
	P->expected = b->seq + 1;
}

/* A batch from the PUB socket (big: over max_message_bytes, unread). */
static void on_live(kva_fleet *f, struct pub *P, int64_t seq, const uint8_t *d, size_t len,
                    bool big)
{
	struct pending b = {.seq = seq, .len = big ? 0 : len, .data = big ? NULL : (uint8_t *)d,
	                    .big = big, .back = P->live_seen && seq <= P->live_last};
	P->live_seen = true;
	P->live_last = seq;
	live_batch(f, P, &b, false);
}

/* The replay is over (its end marker, or given up). Whatever it did not
 * return before the first held batch the stream goes on from is not
 * buffered any more: a loss, accepted here. Otherwise that batch would ask
 * for the same replay again, and again. History before a late joiner's
 * first batch is not a loss. */
static void accept_loss(kva_fleet *f, struct pub *P)
{
	for (uint32_t i = 0; i < P->npend; i++) {
		const struct pending *b = &P->pend[i];
		if (b->back)
			return; /* a new process from here: it starts afresh */
		if (b->seq < P->expected)
			continue; /* the replay returned it */
		if (b->seq > P->expected) {
			if (!P->joining)
				st_add(f, ST(lost_batches), (uint64_t)(b->seq - P->expected));
			P->expected = b->seq;
		}
		return;
	}
}

/* Hands the held batches back to live_batch, in order. The list is
 * detached first: a batch may start a new replay (a gap further on, a
 * restart), and the batches after it are then held again, moved into the
 * fresh list, not copied over the one being read. */
static void pend_flush(kva_fleet *f, struct pub *P)
{
	struct pending *pd = P->pend;
	uint32_t n = P->npend;
	P->pend = P->pend_spare;
	P->pend_spare = pd;
	P->npend = 0;
	P->pend_bytes = 0;
	bool overflow = P->pend_overflow;
	P->pend_overflow = false;
	for (uint32_t i = 0; i < n; i++) {
		live_batch(f, P, &pd[i], true);
		free(pd[i].data); /* NULL when held again */
		pd[i].data = NULL;
	}
	if (P->replaying) {
		if (overflow)
			P->pend_overflow = true; /* after the replay just begun */
	} else if (P->restart_pending) {
		/* a new process began among the batches that were dropped: its
		 * numbers start again at 0, so what the old one's `expected` would
		 * ask for is not there; start afresh and fetch the new history */
		P->restart_pending = false;
		st_add(f, ST(restarts), 1);
		drop_publisher(f, P, "restarted (sequence went back while batches were held)");
		P->expected = 0;
		if (P->dealer)
			replay_request(f, P, 0);
	} else if (overflow && P->dealer) {
		/* live batches after the held ones were dropped: fetch them */
		replay_request(f, P, P->expected);
	}
}

static void replay_end(kva_fleet *f, struct pub *P)
{
	P->replaying = false;
	P->replay_tries = 0;
	accept_loss(f, P);
	P->joining = false;
	pend_flush(f, P);
}

/* A batch (or the end marker) from the replay socket. */
static void on_replay(kva_fleet *f, struct pub *P, int64_t seq, const uint8_t *d, size_t len,
                      bool big)
{
	if (!P->replaying)
		return; /* an answer to a request already given up */
	if (seq == -1) {
		replay_end(f, P);
		return;
	}
	st_add(f, ST(replay_batches), 1);
	if (seq < P->expected) {
		st_add(f, ST(duplicates), 1);
		return;
	}
	if (seq > P->expected && !P->joining) /* older than the publisher's buffer */
		st_add(f, ST(lost_batches), (uint64_t)(seq - P->expected));
	P->joining = false; /* its history starts here: later holes are losses */
	if (big)
		st_add(f, ST(oversized), 1);
	else
		apply(f, P, d, len);
	P->expected = seq + 1;
}

/* ---- sockets ------------------------------------------------------------------ */

/* Receives one multipart message of up to 3 frames; returns the frame count
 * (more frames than 3: 4), 0 when nothing is waiting. */
static int recv3(void *sock, zmq_msg_t m[3])
{
	int n = 0;
	for (;;) {
		zmq_msg_t tmp;
		zmq_msg_t *x = n < 3 ? &m[n] : &tmp;
		zmq_msg_init(x);
		if (zmq_msg_recv(x, sock, n == 0 ? ZMQ_DONTWAIT : 0) < 0) {
			zmq_msg_close(x);
			return n;
		}
		bool more = zmq_msg_more(x);
		if (n >= 3)
			zmq_msg_close(x);
		n++;
		if (!more)
			return n > 3 ? 4 : n;
	}
}

static void close3(zmq_msg_t m[3], int n)
{
	for (int i = 0; i < n && i < 3; i++)
		zmq_msg_close(&m[i]);
}

static void drain_commands(kva_fleet *f, bool woken);

/* R4: every batch before P->expected is applied and its evictions reported
 * (kva_fleet_publisher_seq, A4). */
static void publish_progress(struct pub *P)
{
	atomic_store_explicit(&P->next_seq, P->expected, memory_order_release);
}

static void drain_sub(kva_fleet *f, struct pub *P)
{
	for (int k = 0; k < RECV_BUDGET; k++) {
		zmq_msg_t m[3];
		int n = recv3(P->sub, m);
		if (n == 0)
			return;
		st_add(f, ST(messages), 1);
		if (n != 3 || zmq_msg_size(&m[1]) != 8) {
			st_add(f, ST(bad_frames), 1);
		} else {
			/* a big one goes through the sequence tracking with its number
			 * only: counted once, when its turn comes, held during a replay */
			bool big = zmq_msg_size(&m[2]) > f->cfg.max_message_bytes;
			if (!big)
				st_add(f, ST(bytes), zmq_msg_size(&m[2]));
			on_live(f, P, kvf_seq_decode(zmq_msg_data(&m[1])), zmq_msg_data(&m[2]),
			        zmq_msg_size(&m[2]), big);
		}
		close3(m, n);
		publish_progress(P);
		drain_commands(f, false); /* a lookup waits for one batch at most */
	}
}

static void drain_dealer(kva_fleet *f, struct pub *P)
{
	for (int k = 0; k < RECV_BUDGET && P->dealer; k++) { /* NULL: drain_commands removed P */
		zmq_msg_t m[3];
		int n = recv3(P->dealer, m);
		if (n == 0)
			return;
		if (n != 3 || zmq_msg_size(&m[0]) != 0 || zmq_msg_size(&m[1]) != 8)
			st_add(f, ST(bad_frames), 1);
		else if (zmq_msg_size(&m[2]) == 8 &&
		         memcmp(zmq_msg_data(&m[2]), "\xff\xff\xff\xff\xff\xff\xff\xff", 8) == 0)
			on_replay(f, P, -1, NULL, 0, false); /* Mooncake's end marker is in the payload */
		else /* a big one counts its number, as on PUB */
			on_replay(f, P, kvf_seq_decode(zmq_msg_data(&m[1])), zmq_msg_data(&m[2]),
			          zmq_msg_size(&m[2]),
			          zmq_msg_size(&m[2]) > f->cfg.max_message_bytes);
		close3(m, n);
		publish_progress(P);
		drain_commands(f, false); /* as on PUB: a lookup waits for one batch at most */
	}
}

static void drain_monitor(kva_fleet *f, struct pub *P)
{
	for (;;) {
		zmq_msg_t m[3];
		int n = recv3(P->mon, m);
		if (n == 0)
			return;
		if (zmq_msg_size(&m[0]) >= 2) {
			uint16_t ev;
			memcpy(&ev, zmq_msg_data(&m[0]), 2);
			if (ev == ZMQ_EVENT_DISCONNECTED && !P->down) {
				P->down = true;
				P->down_since = now_ns();
				st_add(f, ST(publishers_down), 1);
			} else if (ev == ZMQ_EVENT_CONNECTED) {
				P->down = false;
			}
		}
		close3(m, n);
	}
}

static void tick(kva_fleet *f, uint64_t now)
{
	for (uint32_t i = 0; i < f->npubs; i++) {
		struct pub *P = &f->pubs[i];
		if (!P->active)
			continue;
		if (P->replaying && now >= P->replay_deadline) {
			if (++P->replay_tries < REPLAY_TRIES) {
				st_add(f, ST(replay_retries), 1);
				replay_request(f, P, P->expected);
			} else { /* give up: what was missed is lost */
				flog(f, KVA_LOG_WARN, "kvadmit-fleet: publisher %s: replay unanswered",
				     P->endpoint);
				P->pend_overflow = false; /* no second replay for this round */
				replay_end(f, P);
				publish_progress(P);
			}
		}
		if (P->down && !P->dropped && now - P->down_since >= f->cfg.drop_after_ns) {
			P->dropped = true;
			st_add(f, ST(publishers_dropped), 1);
			drop_publisher(f, P, "connection down");
		}
	}
	watches_expire(f, now);
}

/* Poll items: the eventfd, then (SUB, DEALER, monitor) per publisher slot;
 * an inactive slot or a missing socket is a never-ready fd. */
static zmq_pollitem_t *poll_items(kva_fleet *f, zmq_pollitem_t *it, uint32_t *ni)
{
	uint32_t n = 1 + 3 * f->npubs;
	if (n > *ni || !it) {
		zmq_pollitem_t *g = realloc(it, n * sizeof(*it));
		if (!g)
			return it; /* the old items stay: new publishers wait for memory */
		it = g;
	}
	*ni = n;
	it[0] = (zmq_pollitem_t){.fd = f->efd, .events = ZMQ_POLLIN};
	for (uint32_t i = 0; i < f->npubs; i++) {
		struct pub *P = &f->pubs[i];
		zmq_pollitem_t none = {.fd = -1};
		it[1 + 3 * i] = P->active ? (zmq_pollitem_t){.socket = P->sub, .events = ZMQ_POLLIN}
		                          : none;
		it[2 + 3 * i] = P->active && P->dealer
		                    ? (zmq_pollitem_t){.socket = P->dealer, .events = ZMQ_POLLIN}
		                    : none;
		it[3 + 3 * i] = P->active && P->mon
		                    ? (zmq_pollitem_t){.socket = P->mon, .events = ZMQ_POLLIN}
		                    : none;
	}
	f->pubs_changed = false;
	return it;
}

static void *io_thread(void *arg)
{
	kva_fleet *f = arg;
	uint32_t ni = 0;
	zmq_pollitem_t *it = poll_items(f, NULL, &ni);
	if (!it)
		return NULL; /* lookups time out; create checked memory before */
	uint64_t last_tick = now_ns();
	while (!atomic_load_explicit(&f->stop, memory_order_acquire)) {
		int rc = zmq_poll(it, (int)ni, TICK_MS);
		if (rc < 0 && zmq_errno() == ETERM)
			break;
		drain_commands(f, rc > 0 && (it[0].revents & ZMQ_POLLIN));
		for (uint32_t i = 0; i < f->npubs; i++) {
			struct pub *P = &f->pubs[i];
			if (!P->active)
				continue;
			drain_sub(f, P);
			if (P->dealer)
				drain_dealer(f, P);
			if (P->mon)
				drain_monitor(f, P);
			drain_commands(f, false); /* lookups between publishers: latency stays low */
		}
		if (f->pubs_changed)
			it = poll_items(f, it, &ni);
		uint64_t now = now_ns();
		if (now - last_tick >= (uint64_t)TICK_MS * 1000000u / 2) {
			tick(f, now);
			last_tick = now;
		}
	}
	free(it);
	return NULL;
}

/* ---- lifecycle -------------------------------------------------------------- */

static char *dupstr(const char *s) { return s ? strdup(s) : NULL; }

static int zerr(void) { return zmq_errno() ? -zmq_errno() : -EINVAL; }

static int pub_open(kva_fleet *f, struct pub *P, uint32_t i)
{
	int zero = 0, hwm = 1000000;
	P->sub = zmq_socket(f->ctx, ZMQ_SUB);
	if (!P->sub)
		return zerr();
	zmq_setsockopt(P->sub, ZMQ_LINGER, &zero, sizeof zero);
	zmq_setsockopt(P->sub, ZMQ_RCVHWM, &hwm, sizeof hwm);
	const char *t = P->topic ? P->topic : "";
	if (zmq_setsockopt(P->sub, ZMQ_SUBSCRIBE, t, strlen(t)) < 0)
		return zerr();
	char name[96];
	/* a reused id gets a fresh monitor name: the old one may still unbind */
	snprintf(name, sizeof name, "inproc://kvadmit-fleet-mon-%p-%u-%u", (void *)f, i,
	         f->mon_gen++);
	if (zmq_socket_monitor(P->sub, name, ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED) == 0) {
		P->mon = zmq_socket(f->ctx, ZMQ_PAIR);
		if (P->mon && zmq_connect(P->mon, name) < 0) {
			zmq_close(P->mon);
			P->mon = NULL;
		}
		if (P->mon)
			zmq_setsockopt(P->mon, ZMQ_LINGER, &zero, sizeof zero);
	}
	if (zmq_connect(P->sub, P->endpoint) < 0)
		return zerr();
	if (P->replay) {
		P->dealer = zmq_socket(f->ctx, ZMQ_DEALER);
		if (!P->dealer)
			return zerr();
		zmq_setsockopt(P->dealer, ZMQ_LINGER, &zero, sizeof zero);
		zmq_setsockopt(P->dealer, ZMQ_RCVHWM, &hwm, sizeof hwm);
		if (zmq_connect(P->dealer, P->replay) < 0)
			return zerr();
	}
	return 0;
}

static void pub_close(struct pub *P)
{
	if (P->sub) {
		zmq_socket_monitor(P->sub, NULL, 0);
		zmq_close(P->sub);
	}
	if (P->mon)
		zmq_close(P->mon);
	if (P->dealer)
		zmq_close(P->dealer);
	for (uint32_t k = 0; k < P->npend; k++)
		free(P->pend[k].data);
	free(P->pend);
	free(P->pend_spare); /* holds no data between flushes */
	free(P->endpoint);
	free(P->replay);
	free(P->topic);
	memset(P, 0, sizeof(*P)); /* the slot can be reused */
}

/* Fills a slot from the publisher's description (strings owned by it). */
static int pub_init(kva_fleet *f, struct pub *P, uint32_t id, char *endpoint, char *replay,
                    char *topic, uint8_t self)
{
	memset(P, 0, sizeof(*P));
	P->idx = (uint16_t)id;
	P->self = self;
	P->endpoint = endpoint;
	P->replay = replay;
	P->topic = topic;
	P->pend = calloc(f->cfg.max_pending, sizeof(*P->pend));
	P->pend_spare = calloc(f->cfg.max_pending, sizeof(*P->pend_spare));
	if (!P->endpoint || !P->pend || !P->pend_spare)
		return -ENOMEM;
	int rc = pub_open(f, P, id);
	if (rc == 0)
		P->active = true;
	return rc;
}

static void add_cmd_free(struct add_cmd *a)
{
	free(a->endpoint);
	free(a->replay);
	free(a->topic);
	free(a);
}

/* I/O thread: a publisher added after create. */
static void pub_add(kva_fleet *f, struct add_cmd *a)
{
	uint32_t id = a->c.prompt;
	struct pub *P = &f->pubs[id];
	int rc = pub_init(f, P, id, a->endpoint, a->replay, a->topic, a->self);
	a->endpoint = a->replay = a->topic = NULL; /* the slot owns them now */
	add_cmd_free(a);
	if (id >= f->npubs)
		f->npubs = id + 1;
	f->pubs_changed = true;
	uint8_t want = SLOT_ADDING;
	if (rc) {
		flog(f, KVA_LOG_WARN, "kvadmit-fleet: publisher %s not added (%d)",
		     P->endpoint ? P->endpoint : "?", rc);
		st_add(f, ST(publisher_errors), 1);
		pub_close(P);
		/* a removal already queued frees it instead (it follows in order) */
		atomic_compare_exchange_strong_explicit(&f->slot[id], &want, SLOT_FREE,
		                                        memory_order_release, memory_order_relaxed);
		return;
	}
	atomic_compare_exchange_strong_explicit(&f->slot[id], &want, SLOT_TAKEN,
	                                        memory_order_release, memory_order_relaxed);
}

/* I/O thread: a publisher removed. Its entries go as a vanished publisher's
 * do (watches reported), then its sockets; the id is free again after. */
static void pub_remove(kva_fleet *f, uint32_t id)
{
	struct pub *P = &f->pubs[id];
	if (P->active) {
		drop_publisher(f, P, "removed");
		pub_close(P);
		st_add(f, ST(publishers_removed), 1);
	}
	f->pubs_changed = true;
	atomic_store_explicit(&f->slot[id], SLOT_FREE, memory_order_release);
}

int kva_fleet_add_publisher(kva_fleet *f, const kva_fleet_publisher *p)
{
	if (!f || !p || !p->endpoint)
		return -EINVAL;
	struct add_cmd *a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	a->endpoint = dupstr(p->endpoint);
	a->replay = dupstr(p->replay_endpoint);
	a->topic = dupstr(p->topic);
	a->self = p->self;
	if (!a->endpoint || (p->replay_endpoint && !a->replay) || (p->topic && !a->topic)) {
		add_cmd_free(a);
		return -ENOMEM;
	}
	for (uint32_t id = 0; id < KVA_FLEET_MAX_PUBLISHERS; id++) {
		uint8_t want = SLOT_FREE;
		if (atomic_load_explicit(&f->slot[id], memory_order_relaxed) == SLOT_FREE &&
		    atomic_compare_exchange_strong_explicit(&f->slot[id], &want, SLOT_ADDING,
		                                            memory_order_acquire,
		                                            memory_order_relaxed)) {
			kva_inbox_node_init(&a->c.node);
			a->c.kind = CMD_ADD_PUB;
			a->c.prompt = id;
			push_cmd(f, &a->c);
			return (int)id;
		}
	}
	add_cmd_free(a);
	return -ENOSPC;
}

int kva_fleet_remove_publisher(kva_fleet *f, uint32_t id)
{
	if (!f || id >= KVA_FLEET_MAX_PUBLISHERS)
		return -EINVAL;
	struct cmd *c = calloc(1, sizeof(*c)); /* first: nothing to undo after the CAS */
	if (!c)
		return -ENOMEM;
	uint8_t want = SLOT_TAKEN;
	if (!atomic_compare_exchange_strong_explicit(&f->slot[id], &want, SLOT_REMOVING,
	                                             memory_order_acq_rel, memory_order_relaxed)) {
		want = SLOT_ADDING; /* not open yet: the removal follows the addition */
		if (!atomic_compare_exchange_strong_explicit(&f->slot[id], &want, SLOT_REMOVING,
		                                             memory_order_acq_rel,
		                                             memory_order_relaxed)) {
			free(c);
			return -ENOENT;
		}
	}
	kva_inbox_node_init(&c->node);
	c->kind = CMD_REMOVE_PUB;
	c->prompt = id;
	push_cmd(f, c);
	return 0;
}

int kva_fleet_publisher_seq(const kva_fleet *f, uint32_t id, int64_t *next_seq)
{
	if (!f || !next_seq || id >= KVA_FLEET_MAX_PUBLISHERS)
		return -EINVAL;
	kva_fleet *m = (kva_fleet *)f;
	if (atomic_load_explicit(&m->slot[id], memory_order_acquire) != SLOT_TAKEN)
		return -ENOENT;
	*next_seq = atomic_load_explicit(&m->pubs[id].next_seq, memory_order_acquire); /* A4 */
	return 0;
}

uint64_t kva_fleet_lookups_done(const kva_fleet *f)
{
	return f ? atomic_load_explicit(&((kva_fleet *)f)->lookups_done,
	                                memory_order_acquire) /* A3 */
	         : 0;
}

static int config_valid(const kva_fleet_config *c)
{
	if (!c || !c->publishers || c->npublishers == 0 ||
	    c->npublishers > KVA_FLEET_MAX_PUBLISHERS || c->max_blocks == 0 || c->max_chains == 0 ||
	    c->max_chain_blocks == 0 || c->max_message_bytes == 0 || c->max_pending == 0 ||
	    !(c->full_groups | c->state_groups))
		return -EINVAL;
	for (uint32_t i = 0; i < c->npublishers; i++)
		if (!c->publishers[i].endpoint)
			return -EINVAL;
	return 0;
}

void kva_fleet_destroy(kva_fleet *f)
{
	if (!f)
		return;
	if (f->thread_started) {
		atomic_store_explicit(&f->stop, true, memory_order_release);
		uint64_t one = 1;
		ssize_t w = write(f->efd, &one, sizeof one);
		(void)w;
		pthread_join(f->thread, NULL);
	}
	struct kva_inbox_batch b;
	if (kva_inbox_drain_blocking(&f->q, &b)) {
		struct kva_inbox_node *n;
		while ((n = kva_inbox_batch_pop_blocking(&b))) {
			struct cmd *c = caa_container_of(n, struct cmd, node);
			if (c->kind == CMD_ADD_PUB)
				add_cmd_free(caa_container_of(c, struct add_cmd, c));
			else
				free(c); /* a chain starts with its cmd */
		}
	}
	kva_inbox_fini(&f->q);
	if (f->pubs)
		for (uint32_t i = 0; i < f->npubs; i++)
			pub_close(&f->pubs[i]);
	free(f->pubs);
	if (f->own_ctx && f->ctx)
		zmq_ctx_term(f->ctx);
	for (uint32_t k = 0; k < f->wn; k++) {
		struct watch *w = &f->watches[(f->wh + k) % MAX_WATCHES];
		if (w->id)
			chain_unref(w->ch);
	}
	free(f->watches);
	while (f->oldest) {
		struct chain *c = f->oldest;
		chain_unlink(f, c);
		chain_unref(c);
	}
	free(f->cmap);
	kvf_index_fini(&f->ix);
	kvf_batch_fini(&f->batch);
	if (f->efd >= 0)
		close(f->efd);
	free(f);
}

kva_fleet *kva_fleet_create(const kva_fleet_config *cfg, int *err)
{
	int rc = config_valid(cfg), dummy;
	if (!err)
		err = &dummy;
	if (rc) {
		*err = rc;
		return NULL;
	}
	kva_fleet *f = calloc(1, sizeof(*f));
	if (!f) {
		*err = -ENOMEM;
		return NULL;
	}
	f->cfg = *cfg;
	f->cfg.publishers = NULL;
	f->efd = -1;
	f->epoch = 1;
	kva_inbox_init(&f->q);
	f->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (f->efd < 0) {
		rc = -errno;
		goto fail;
	}
	rc = kvf_index_init(&f->ix, cfg->max_blocks > SIZE_MAX / 64 ? SIZE_MAX / 64
	                                                             : (size_t)cfg->max_blocks);
	if (rc)
		goto fail;
	kvf_batch_init(&f->batch, 0, 0);
	size_t cn = 16;
	while (cn < 2 * (size_t)cfg->max_chains)
		cn *= 2;
	f->cmap = calloc(cn, sizeof(*f->cmap));
	f->cmask = cn - 1;
	f->watches = calloc(MAX_WATCHES, sizeof(*f->watches));
	f->pubs = calloc(KVA_FLEET_MAX_PUBLISHERS, sizeof(*f->pubs)); /* ids stay put */
	rc = -ENOMEM;
	if (!f->cmap || !f->watches || !f->pubs)
		goto fail;
	/* local media */
	medium_id(f, "GPU", 3);
	const char *lm = cfg->local_media ? cfg->local_media : "";
	while (*lm) {
		size_t n = strcspn(lm, ",");
		uint32_t md = n ? medium_id(f, lm, n) : NO_MEDIUM;
		if (md != NO_MEDIUM)
			f->local_media |= 1ull << md;
		lm += n + (lm[n] == ',');
	}
	f->ctx = cfg->zmq_context;
	if (!f->ctx) {
		f->ctx = zmq_ctx_new();
		f->own_ctx = true;
		if (!f->ctx) {
			rc = zerr();
			goto fail;
		}
	}
	f->npubs = cfg->npublishers;
	for (uint32_t i = 0; i < f->npubs; i++) {
		const kva_fleet_publisher *src = &cfg->publishers[i];
		char *ep = dupstr(src->endpoint), *rp = dupstr(src->replay_endpoint),
		     *tp = dupstr(src->topic);
		if ((src->replay_endpoint && !rp) || (src->topic && !tp)) {
			free(ep), free(rp), free(tp);
			rc = -ENOMEM;
			goto fail;
		}
		atomic_init(&f->slot[i], SLOT_TAKEN);
		if ((rc = pub_init(f, &f->pubs[i], i, ep, rp, tp, src->self)))
			goto fail;
	}
	st_set(f, ST(index_bytes), kvf_index_bytes(&f->ix));
	st_set(f, ST(index_cap), f->ix.cap);
	rc = -pthread_create(&f->thread, NULL, io_thread, f);
	if (rc)
		goto fail;
	f->thread_started = true;
	*err = 0;
	return f;
fail:
	*err = rc;
	kva_fleet_destroy(f);
	return NULL;
}

int kva_fleet_attach(kva_fleet *f, kva_engine *e)
{
	if (!f || !e)
		return -EINVAL;
	atomic_store_explicit(&f->engine, e, memory_order_release); /* R2 */
	return 0;
}

void kva_fleet_stats_get(const kva_fleet *f, kva_fleet_stats *out)
{
	if (!f || !out)
		return;
	uint64_t *o = (uint64_t *)out;
	for (size_t i = 0; i < ST_N; i++)
		o[i] = atomic_load_explicit(&((kva_fleet *)f)->st[i], memory_order_acquire);
}
