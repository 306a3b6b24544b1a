/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvadmit fleet: a directory fed by the KV-event streams serving engines
 * publish (ZeroMQ PUB + msgpack EventBatch, vLLM's kv_events.py format; the
 * ROUTER replay endpoint for gaps). Optional component: its own library
 * (libkvadmit-fleet.so and .a, CMake targets kvadmit::fleet and
 * kvadmit::fleet_static, option KVADMIT_WITH_FLEET).
 * docs/fleet.md is the full description.
 *
 * Threads: one I/O thread, started by kva_fleet_create, owns the sockets and
 * the index. Everything else reaches it through a wait-free queue:
 *   call                      | thread
 *   --------------------------+------------------------------------------
 *   kva_fleet_create/destroy  | the host's; nothing else on the fleet meanwhile
 *   kva_fleet_attach          | any, before the engine's first kva_step
 *   kva_fleet_lookup          | the engine's lookup callback (kva_lookup_fn):
 *                             | one allocation + one enqueue, never blocks
 *   kva_fleet_chain_register  | any thread, concurrently with everything
 *   kva_fleet_stats_get       | any thread (relaxed atomics)
 *   kva_fleet_add_publisher,  | any thread: one allocation + one enqueue;
 *   kva_fleet_remove_publisher| the I/O thread opens / closes the sockets
 *   kva_fleet_publisher_seq,  | any thread (acquire loads)
 *   kva_fleet_lookups_done    |
 * The I/O thread calls kva_lookup_answer and kva_checkpoint_evicted (both
 * any-thread, lock-free in the engine). Destroy the fleet before the engine.
 *
 * The fleet reads CLOCK_MONOTONIC itself (replay timeouts, publisher
 * disappearance); the engine still never does. Like the engine, it never
 * exits, aborts or prints: warnings go through the log callback.
 */
#ifndef KVADMIT_FLEET_H
#define KVADMIT_FLEET_H

#include <stddef.h>
#include <stdint.h>

#include "kvadmit/kvadmit.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kva_fleet kva_fleet;

#define KVA_FLEET_MAX_PUBLISHERS 4096

typedef struct kva_fleet_publisher {
	const char *endpoint;        /* the PUB socket, e.g. tcp://node3:5557 (SUB connects) */
	const char *replay_endpoint; /* its ROUTER replay socket; NULL: no gap recovery */
	const char *topic;           /* subscription prefix; NULL or "" = every topic */
	/* This engine's own publisher: its blocks on a local medium are
	 * KVA_LOC_LOCAL checkpoints; everything else is KVA_LOC_EXTERNAL. */
	uint8_t self;
} kva_fleet_publisher;

typedef struct kva_fleet_config {
	const kva_fleet_publisher *publishers; /* copied */
	uint32_t npublishers;                  /* 1..KVA_FLEET_MAX_PUBLISHERS */
	/* Tokens per block, for positions (blocks * block_size); 0: each
	 * publisher's BlockStored.block_size (events without one are dropped). */
	uint32_t block_size;
	uint64_t max_blocks;         /* index cap, entries of (block, location); >= 1 */
	uint32_t max_chains;         /* registered chains kept (FIFO); >= 1 */
	uint32_t max_chain_blocks;   /* longest chain kva_fleet_chain_register takes */
	uint32_t max_message_bytes;  /* larger payloads are counted and dropped */
	uint32_t max_pending;        /* live batches held per publisher during a replay */
	uint64_t replay_timeout_ns;  /* no end marker by then: asked again (3 tries) */
	/* A publisher whose connection is down this long loses its entries
	 * (0: at once); while down it is left out of answers. */
	uint64_t drop_after_ns;
	uint64_t watch_ns;           /* answered checkpoints watched for removal this long */
	/* Groups (group_idx; absent = 0) a checkpoint needs. full_groups: every
	 * block of the prefix (attention); state_groups: the prefix's last block
	 * (a recurrent/Mamba state at that position). Bits 0..31. */
	uint32_t full_groups, state_groups;
	/* Media that are local for this engine's own publisher, comma separated
	 * (default "GPU"); an absent medium counts as "GPU". */
	const char *local_media;
	void *zmq_context; /* NULL: the fleet's own; the host's to share inproc:// */
	kva_log_fn log;    /* I/O thread; may be NULL */
	void *log_ctx;
} kva_fleet_config;

/* Defaults: block_size 0, max_blocks 4M, max_chains 65536, max_chain_blocks
 * 65536, max_message_bytes 16 MiB, max_pending 4096, replay_timeout 2 s,
 * drop_after 30 s, watch 10 min, full_groups 1, state_groups 0, "GPU". */
KVA_API void kva_fleet_config_default(kva_fleet_config *cfg);

/* Connects to every publisher and starts the I/O thread. NULL and *err =
 * -EINVAL (a field out of range, an endpoint zmq refuses), -ENOMEM, or
 * -errno of zmq / pthread. */
KVA_API kva_fleet *kva_fleet_create(const kva_fleet_config *cfg, int *err);
/* Stops the I/O thread, closes the sockets, frees everything; lookups not
 * answered yet stay unanswered (the engine times them out). */
KVA_API void kva_fleet_destroy(kva_fleet *f);

/* The engine the answers go to (its lookup callback is kva_fleet_lookup
 * with this fleet as lookup_ctx). 0, -EINVAL. */
KVA_API int kva_fleet_attach(kva_fleet *f, kva_engine *e);

/* kva_lookup_fn: set cfg.lookup = kva_fleet_lookup, cfg.lookup_ctx = fleet.
 * Hands the lookup to the I/O thread. Without memory it answers a miss at
 * once. */
KVA_API void kva_fleet_lookup(void *fleet, uint64_t prefix_key, uint32_t prompt_tokens,
                              kva_lookup_token token);

/* The block-hash chain of prompts submitted with this prefix_key (hashes as
 * the engine publishes them; bytes hashes through kva_fleet_hash_bytes).
 * Copied; kept until max_chains newer keys pushed it out, so a prefix key
 * seen before costs nothing more. Register before kva_submit. Using the
 * hash of the prompt's last full block as the prefix_key makes the key the
 * chain's identity. 0, -EINVAL, -E2BIG (longer than max_chain_blocks),
 * -ENOMEM. */
KVA_API int kva_fleet_chain_register(kva_fleet *f, uint64_t prefix_key, const uint64_t *hashes,
                                     uint32_t n);

/* A publisher added after create (any thread). Its strings are copied and
 * the I/O thread connects to it at its next turn; the caller does not wait
 * for that. Returns its id (>= 0: the index kva_fleet_publisher_seq and
 * kva_fleet_remove_publisher take; the publishers given to create are ids
 * 0..npublishers-1), -EINVAL, -ENOMEM, or -ENOSPC (KVA_FLEET_MAX_PUBLISHERS
 * in use). An endpoint zmq refuses is found by the I/O thread: logged,
 * counted in publisher_errors, and its id freed. */
KVA_API int kva_fleet_add_publisher(kva_fleet *f, const kva_fleet_publisher *p);

/* Removes publisher `id` (any thread; returns without waiting). The I/O
 * thread drops its entries as it drops a vanished publisher's: every
 * checkpoint it answered from that publisher is reported with
 * kva_checkpoint_evicted, so a waiting request that selected one looks up
 * again. The id can be handed out again once that is done. A publisher
 * added but not yet opened can be removed too (in order). 0, -EINVAL,
 * -ENOENT (no such publisher, or already being removed), -ENOMEM. */
KVA_API int kva_fleet_remove_publisher(kva_fleet *f, uint32_t id);

/* Progress, for a host that must know the fleet caught up (the simulator's
 * deterministic mode waits on these). *next_seq: the sequence number the
 * fleet expects next from publisher `id`; every batch before it has been
 * applied and the evictions it caused reported (0 before the first batch).
 * 0, -EINVAL, -ENOENT (no such publisher, or one added whose sockets the
 * I/O thread has not opened yet). Acquire: what the I/O thread did before is
 * visible to the caller after. */
KVA_API int kva_fleet_publisher_seq(const kva_fleet *f, uint32_t id, int64_t *next_seq);
/* Lookups finished so far (answered, refused by the engine, or answered a
 * miss without memory): once it reached the number of kva_fleet_lookup calls
 * made, every answer is in the engine's inbox (acquire). */
KVA_API uint64_t kva_fleet_lookups_done(const kva_fleet *f);

/* A bytes block hash (vLLM's sha256) as the fleet keys it. */
KVA_API uint64_t kva_fleet_hash_bytes(const void *p, size_t n);

typedef struct kva_fleet_stats {
	uint64_t messages, bytes, batches;
	uint64_t blocks_stored, blocks_removed, clears; /* events applied, per block */
	uint64_t blocks, index_bytes, index_cap;        /* entries now; table memory */
	uint64_t cap_evictions;                         /* entries the cap pushed out */
	uint64_t malformed, oversized, unknown_events, bad_frames, ignored_groups,
		no_block_size;
	uint64_t gaps, replays_requested, replay_retries, replay_batches, duplicates,
		lost_batches; /* batches a replay could not return */
	uint64_t restarts, publishers_down, publishers_dropped, entries_dropped;
	uint64_t publishers_removed, publisher_errors; /* kva_fleet_remove/add_publisher */
	uint64_t lookups, answered, misses, unregistered, answer_errors, lookup_nomem;
	uint64_t evictions_reported; /* kva_checkpoint_evicted calls */
	uint64_t chains, chains_evicted;
	uint64_t answer_ns_sum, answer_ns_max; /* lookup enqueued -> answer returned */
	uint64_t answer_ns_buckets[14];       /* <= 1,2,5,10,20,50,100,200,500 us, 1,2,5,10 ms, more */
	/* Blocks of events skipped because their medium is past the fleet's 64
	 * medium names (docs/fleet.md). */
	uint64_t ignored_media;
	/* Scans of the whole index table to drop one publisher's entries (a
	 * clear, a restart, a dropped or removed publisher): about 10 ms each
	 * at the default max_blocks. */
	uint64_t index_scans;
} kva_fleet_stats;

KVA_API void kva_fleet_stats_get(const kva_fleet *f, kva_fleet_stats *out);

#ifdef __cplusplus
}
#endif
#endif
