/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fleet_state: the state every file of fleet/ shares. The fleet itself
 * (struct kva_fleet), its publishers and their held batches, the commands
 * other threads hand the I/O thread, the statistics helpers and the log.
 * The chains (chain.h) and the watches (watch.h) own their own types.
 *
 * Files, from the top down (calls go one way):
 *   fleet.c          the public API: create, destroy, commands, stats
 *   io_thread.c      the I/O thread, its sockets and its command queue
 *   lookup_answer.c  a lookup answered from the index
 *   quota.c          a publisher's share of the index, quarantined pairs
 *   replay.c         sequence tracking and replay
 *   apply.c          a decoded batch applied to the index
 *   watch.c          checkpoints a lookup was answered with, and their end
 *   chain.c          the registered chains
 *   holders.h        which locations hold a block: the fleet's one index
 *   score.c          the readers' table (kva_fleet_score), the index with cfg.score
 *   auth.c           CURVE keys
 *   index.c, wire.c  the table and the decoder
 *
 * Synchronisation (labels):
 *   R1/A1  the command queue (kva_inbox of lockfree/inbox.c): a producer's
 *          writes to its node (fleet.c) happen before the I/O thread pops
 *          it (io_thread.c).
 *   R2/A2  f->engine: kva_fleet_attach stores it (release), the I/O thread
 *          loads it (acquire) before answering (lookup_answer.c, watch.c).
 *   R3/A3  lookups_done: counted (release) after kva_lookup_answer returned
 *          (lookup_answer.c); kva_fleet_lookups_done loads it (acquire).
 *   R4/A4  a publisher's next_seq: stored (release, io_thread.c) after the
 *          batch before it was applied and its evictions reported;
 *          kva_fleet_publisher_seq loads it (acquire).
 *   Publisher slots: the adding thread takes a free one (CAS to ADDING,
 *          acquire); the I/O thread makes it TAKEN (release) once it filled
 *          the slot, which kva_fleet_publisher_seq loads (acquire) before
 *          reading it, and frees it (release) once a removal is done.
 * Statistics are atomics written by the I/O thread only, relaxed but for
 * the batch count (release, after the batch's blocks; stats readers load
 * with acquire).
 */
#ifndef KVA_FLEET_STATE_H
#define KVA_FLEET_STATE_H

#include "kvadmit/fleet.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include <kvadmit/lockfree/inbox.h>
#include "index.h"
#include "wire.h"

_Static_assert(KVF_INDEX_PUBS == KVA_FLEET_MAX_PUBLISHERS, "one index slot per publisher id");

/* Lookups waiting for the I/O thread; past it kva_fleet_lookup answers a
 * miss at once (lookups_shed). */
#define KVF_MAX_QUEUED_LOOKUPS 65536u

#define MAX_MEDIA 64 /* one table for the fleet; a publisher's media are a 64-bit mask */
#define QUARANTINE_SLOTS 64 /* (publisher, medium) pairs quarantined at once */
#define NO_MEDIUM UINT32_MAX

enum { STAT_COUNT = sizeof(kva_fleet_stats) / sizeof(uint64_t) };
#define STAT(field) (offsetof(kva_fleet_stats, field) / sizeof(uint64_t))

enum cmd_kind {
	CMD_LOOKUP = 1,
	CMD_CHAIN = 2,
	CMD_ADD_PUB = 3,
	CMD_REMOVE_PUB = 4,
	CMD_FAILURE = 5 /* kva_fleet_report_failure: the checkpoint id in prefix_key */
};

/* A command from any thread to the I/O thread (R1/A1). */
struct cmd {
	struct kva_inbox_node node;
	uint8_t kind; /* enum cmd_kind */
	union {
		uint32_t prompt_tokens; /* CMD_LOOKUP */
		uint32_t pub_id;        /* CMD_ADD_PUB, CMD_REMOVE_PUB */
	};
	uint64_t prefix_key; /* CMD_LOOKUP, CMD_CHAIN; CMD_FAILURE: the checkpoint id */
	kva_lookup_token token;
	uint64_t sent_ns; /* when the lookup was handed over (answer latency) */
};

/* A publisher added after create: its strings travel with the command. */
struct add_cmd {
	struct cmd cmd;
	char *endpoint, *replay_endpoint, *topic;
	uint8_t self;
};

/* Publisher slots (id = index): taken by the adding thread (CAS to ADDING),
 * made TAKEN by the I/O thread once the sockets are open (so nobody reads a
 * slot it is still filling), freed by it once a removal is done, so an id
 * is never reused while anything still refers to it. */
enum { SLOT_FREE = 0, SLOT_TAKEN = 1, SLOT_REMOVING = 2, SLOT_ADDING = 3 };

/* A live batch, held while a replay runs. */
struct pending {
	int64_t seq;
	size_t len;
	uint8_t *data;  /* NULL for a big one */
	bool big;       /* over max_message_bytes: its number only */
	bool restarted; /* its number was not above the previous live one: a new process */
};

/* A publisher slot; the I/O thread's alone but for next_seq. */
struct publisher {
	void *sub, *dealer, *monitor;
	char *endpoint, *replay_endpoint, *topic;
	uint16_t id;
	uint8_t self;
	bool started, replaying, down, dropped, joining;
	bool live_seen;
	/* a batch marked restarted could not be held: the restart is applied
	 * once the held batches are handed back (flush_held) */
	bool restart_pending;
	int64_t expected;
	int64_t replay_from; /* where the replay last asked for began */
	int64_t live_last; /* the last number seen on PUB (restarts are told by it) */
	uint64_t replay_deadline, down_since;
	int replay_tries;
	bool active;              /* the I/O thread's view: sockets open */
	_Atomic int64_t next_seq; /* `expected`, published for kva_fleet_publisher_seq */
	struct pending *held;
	/* The other held list (max_pending too): flush_held holds into it what
	 * a replay begun meanwhile must keep, while it still reads `held`. */
	struct pending *held_spare;
	uint32_t nheld;
	size_t held_bytes;
	bool held_overflow;
	uint32_t block_size;
	uint64_t media;   /* medium ids seen */
	uint32_t watches; /* live watches on its checkpoints: a drop of none skips the ring */
	uint8_t media_named; /* names it added to the fleet's medium table */
};

struct kva_fleet {
	kva_fleet_config cfg;
	_Atomic(kva_engine *) engine;
	struct kva_inbox commands;
	int wake_fd; /* eventfd: a command was queued, or stop */
	atomic_bool stop;
	pthread_t thread;
	bool thread_started;
	void *zmq_ctx;
	bool own_zmq_ctx;
	struct publisher *pubs; /* KVA_FLEET_MAX_PUBLISHERS slots */
	uint32_t npubs;         /* slots ever used (inactive ones skipped) */
	bool pubs_changed;      /* the I/O thread rebuilds its poll items */
	uint32_t monitor_gen;
	_Atomic uint8_t pub_slot[KVA_FLEET_MAX_PUBLISHERS];
	_Atomic uint64_t lookups_done;
	_Atomic uint64_t lookups_queued; /* in the command queue: bounded */
	struct kvf_index index;
	struct kvf_batch batch;
	char media[MAX_MEDIA][KVF_MEDIUM_MAX + 1];
	uint8_t media_len[MAX_MEDIA]; /* a name may hold NUL bytes */
	uint8_t media_tier[MAX_MEDIA]; /* enum kva_tier read from the name (apply.c) */
	uint32_t nmedia;
	uint64_t local_media; /* ids local for the self publisher */
	/* chains (chain.c): open-addressing map key -> chain, FIFO list */
	struct chain **chain_map;
	size_t chain_mask, nchains;
	struct kvf_key chain_key; /* the map's homes (keyed_hash.h) */
	struct chain *oldest_chain, *newest_chain;
	/* pairs kva_fleet_report_failure quarantined (quota.c), until then */
	struct {
		uint32_t pair;
		uint64_t until;
	} quarantine[QUARANTINE_SLOTS];
	uint32_t nquarantine, quarantine_next;
	/* CURVE (auth.c): publishers' server keys (Z85, "" none; NULL: no key
	 * pair, so none), the fleet's key pair */
	char (*server_keys)[41];
	char curve_public[41], curve_secret[41];
	struct watch *watches; /* ring (watch.c) */
	uint32_t watch_head, nwatches;
	uint64_t epoch;
	_Atomic uint64_t stats[STAT_COUNT];
	struct kvf_score *score; /* cfg.score: the readers' table, then the index (score.c) */
	/* cfg.block_sizes by medium id and group (0: not configured); read by
	 * any thread after create, written only there */
	uint32_t block_sizes[MAX_MEDIA][32];
};

/* The block size configured for (medium, group) (group <= 31), else the
 * fleet's block_size; 0 when neither is set. */
static inline uint32_t configured_block_size(const kva_fleet *f, uint32_t medium, uint32_t group)
{
	uint32_t bs = f->block_sizes[medium][group];
	return bs ? bs : f->cfg.block_size;
}

/* The block size positions on medium count in: the first full group's
 * (0: none configured, the publisher's own). */
static inline uint32_t position_block_size(const kva_fleet *f, uint32_t medium)
{
	return configured_block_size(f, medium,
	                             (uint32_t)__builtin_ctz(f->cfg.full_groups | 1u << 31));
}

static inline void stat_add(kva_fleet *f, size_t i, uint64_t v)
{
	atomic_fetch_add_explicit(&f->stats[i], v, memory_order_relaxed);
}
static inline void stat_set(kva_fleet *f, size_t i, uint64_t v)
{
	atomic_store_explicit(&f->stats[i], v, memory_order_relaxed);
}

static inline uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* now + d, saturated: a timeout near UINT64_MAX means never, not at once. */
static inline uint64_t deadline_after(uint64_t now, uint64_t d)
{
	return d > UINT64_MAX - now ? UINT64_MAX : now + d;
}

/* One line to the user's log callback, if any. */
static inline void fleet_log(kva_fleet *f, int level, const char *fmt, ...)
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

#endif
