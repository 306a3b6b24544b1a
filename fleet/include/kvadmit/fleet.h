/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvadmit fleet: a directory fed by the KV-event streams serving engines publish (ZeroMQ PUB +
 * msgpack EventBatch, vLLM's kv_events.py format; ROUTER replay for gaps). Its own library,
 * libkvadmit-fleet (kvadmit::fleet, kvadmit::fleet_static; KVADMIT_WITH_FLEET). docs/fleet.md.
 *
 * One I/O thread, started by kva_fleet_create, owns the sockets and the index; it calls
 * kva_lookup_answer and kva_checkpoint_evicted, and reads CLOCK_MONOTONIC (the engine never
 * does). It never exits, aborts or prints: warnings go to the log callback. Destroy the fleet
 * before the engine.
 *
 * Synchronisation (everything else reaches the I/O thread through a wait-free queue):
 *   kva_fleet_create / _destroy         the host's; nothing else on the fleet meanwhile
 *   kva_fleet_attach                    any, before the engine's first kva_step
 *   kva_fleet_lookup                    the engine's lookup callback; never blocks
 *   kva_fleet_chain_register            any thread, concurrently with everything
 *   kva_fleet_add/remove_publisher      any thread: one allocation + one enqueue
 *   kva_fleet_stats_get                 any thread (relaxed atomics)
 *   kva_fleet_publisher_seq, _lookups_done  any thread (acquire loads)
 *   kva_fleet_score                     any thread, lock-free (per-slot sequence numbers)
 */
#ifndef KVADMIT_FLEET_H
#define KVADMIT_FLEET_H

#include <stddef.h>
#include <stdint.h>

#include <kvadmit/kvadmit.h>

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
	/* Its CURVE public key (Z85, 40 characters; its PUB and ROUTER sockets
	 * are CURVE servers with the secret one): only that publisher is heard
	 * on both connections, encrypted. NULL: none (plain ZeroMQ, anyone who
	 * can connect is believed; docs/fleet.md, "Security"). Needs the
	 * fleet's key pair below. */
	const char *curve_server_key;
} kva_fleet_publisher;

/* Tokens per block of one (medium, KV-cache group): an offload tier or a
 * group whose blocks are another size than the engine's. */
typedef struct kva_fleet_block_size {
	const char *medium; /* NULL: "GPU" (an absent medium) */
	uint32_t group_idx; /* 0..31 (an absent group_idx is 0) */
	uint32_t block_size; /* >= 1 */
} kva_fleet_block_size;

typedef struct kva_fleet_config {
	const kva_fleet_publisher *publishers; /* copied */
	uint32_t npublishers;                  /* 1..KVA_FLEET_MAX_PUBLISHERS */
	/* Tokens per block, for positions (blocks * block_size), of every
	 * (medium, group) not in block_sizes; 0: each publisher's first
	 * BlockStored.block_size (events without one are dropped). */
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
	/* Per publisher (docs/fleet.md, "Security"): new medium names it may add
	 * to the fleet's 64 (1..64), and checkpoints of its in one answer
	 * (1..KVA_MAX_CHECKPOINTS). */
	uint32_t max_media_per_publisher, max_manifest_per_publisher;
	/* A (publisher, medium) whose copies failed (kva_fleet_report_failure)
	 * is left out of answers this long. */
	uint64_t quarantine_ns;
	/* The fleet's CURVE key pair (Z85; copied), both or neither: needed by
	 * publishers with a curve_server_key. */
	const char *curve_public_key, *curve_secret_key;
	void *zmq_context; /* NULL: the fleet's own; the host's to share inproc:// */
	kva_log_fn log;    /* I/O thread; may be NULL */
	void *log_ctx;
	/* 1: keep the index in a table any thread reads lock-free, for
	 * kva_fleet_score (routers); 24-byte slots instead of the plain
	 * index's 16 (at most 3/4 full), one per block, medium and group for
	 * up to 64 holders; ingest costs in bench/README.md. */
	uint8_t score;
	/* Block sizes per (medium, group), copied; a pair not listed uses
	 * block_size above (else its publisher's first BlockStored.block_size).
	 * A BlockStored whose block_size differs from its pair's configured one
	 * is refused (block_size_mismatch); one without block_size takes it. */
	const kva_fleet_block_size *block_sizes;
	uint32_t nblock_sizes; /* 0..64 * 32 */
} kva_fleet_config;

/* kva_fleet_config_default - block_size 0, max_blocks 4M, max_chains and max_chain_blocks
 * 65536, max_message_bytes 16 MiB, max_pending 4096, replay_timeout 2 s, drop_after 30 s, watch
 * 10 min, full_groups 1, state_groups 0, "GPU", 8 media and 2 checkpoints a publisher,
 * quarantine 60 s. */
KVA_API void kva_fleet_config_default(kva_fleet_config *cfg);

/* kva_fleet_create - connect to every publisher, start the I/O thread.
 * Returns: the fleet, or NULL and *err: -EINVAL (a field out of range, an endpoint zmq
 * refuses, a malformed CURVE key, a server key without the fleet's key pair), -ENOTSUP (CURVE
 * keys and a libzmq without CURVE), -ENOMEM, -errno of zmq or pthread. */
KVA_API kva_fleet *kva_fleet_create(const kva_fleet_config *cfg, int *err);
/* kva_fleet_destroy - stop the I/O thread, close, free; unanswered lookups time out. */
KVA_API void kva_fleet_destroy(kva_fleet *f);

/* kva_fleet_attach - the engine the answers go to (lookup = kva_fleet_lookup, lookup_ctx = f).
 * Returns: 0, -EINVAL. */
KVA_API int kva_fleet_attach(kva_fleet *f, kva_engine *e);

/* kva_fleet_lookup - a kva_lookup_fn: hands the lookup to the I/O thread; without memory, or
 * with 65,536 lookups already waiting for it (a stalled I/O thread), it answers a miss at once
 * (lookup_nomem, lookups_shed). fleet NULL: nothing happens (no engine to answer). */
KVA_API void kva_fleet_lookup(void *fleet, uint64_t prefix_key, uint32_t prompt_tokens,
                              kva_lookup_token token);

/* kva_fleet_chain_register - the block hashes (as the engine publishes them; bytes through
 * kva_fleet_hash_bytes) of prompts with prefix_key, before kva_submit; copied and kept until
 * max_chains newer keys pushed it out (docs/fleet.md: chains).
 * Returns: 0, -EINVAL, -E2BIG (longer than max_chain_blocks), -ENOMEM. */
KVA_API int kva_fleet_chain_register(kva_fleet *f, uint64_t prefix_key, const uint64_t *hashes,
                                     uint32_t n);

/* kva_fleet_add_publisher - add p; the I/O thread connects at its next turn, unawaited (an
 * endpoint zmq refuses is then logged, counted in publisher_errors, its id freed).
 * Returns: its id (create's are 0..npublishers-1), -EINVAL (also a curve_server_key that is
 * malformed or without the fleet's key pair), -ENOMEM, -ENOSPC (all in use). */
KVA_API int kva_fleet_add_publisher(kva_fleet *f, const kva_fleet_publisher *p);

/* kva_fleet_remove_publisher - drop publisher id, unawaited (one added and not opened yet too,
 * in order): its answered checkpoints are reported evicted, then its id is free (docs/fleet.md).
 * Returns: 0, -EINVAL, -ENOENT (no such publisher, or already being removed), -ENOMEM. */
KVA_API int kva_fleet_remove_publisher(kva_fleet *f, uint32_t id);

/* kva_fleet_publisher_seq - *next_seq: the sequence number expected next from publisher id
 * (0 before its first batch); every earlier batch is applied, its evictions reported (acquire).
 * Returns: 0, -EINVAL, -ENOENT (no such publisher, or its sockets not opened yet). */
KVA_API int kva_fleet_publisher_seq(const kva_fleet *f, uint32_t id, int64_t *next_seq);
/* kva_fleet_lookups_done - lookups finished (answered, refused, a miss without memory); equal
 * to the kva_fleet_lookup calls made, every answer is in the engine's inbox (acquire). */
KVA_API uint64_t kva_fleet_lookups_done(const kva_fleet *f);

/* kva_fleet_report_failure - the host's copy of checkpoint_id (a kva_copy_job's, from a fleet
 * answer) failed: the (publisher, medium) that claimed it is left out of answers for
 * quarantine_ns (failures_reported; an id the fleet no longer watches: failures_unknown).
 * Thread: any; one allocation + one enqueue, unawaited.
 * Returns: 0, -EINVAL (f NULL, id 0), -ENOMEM. */
KVA_API int kva_fleet_report_failure(kva_fleet *f, uint64_t checkpoint_id);

/* kva_fleet_hash_bytes - a bytes block hash as the fleet keys it: its last 8 bytes, big-endian
 * (fewer than 8: all of them). That is vLLM's maybe_convert_block_hash
 * (vllm/v1/core/kv_cache_utils.py: int.from_bytes(hash, "big") & (2**64 - 1)), the int a
 * publisher with VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES sends, so a chain stored by an int
 * publisher and one stored by a bytes publisher are the same chain. Any thread; pure. */
KVA_API uint64_t kva_fleet_hash_bytes(const void *p, size_t n);

/* One (publisher, medium) holding a prefix of a chain (kva_fleet_score). */
typedef struct kva_fleet_match {
	uint32_t publisher; /* its id */
	uint32_t blocks;    /* the longest prefix of the chain it holds there, in blocks */
	uint32_t tokens;    /* blocks * its block size (config, else its events'); 0 unknown */
	int32_t dp_rank;    /* its batches' data_parallel_rank; -1 none seen */
	char medium[32];    /* "GPU" for an absent medium (vLLM's MEDIUM_GPU) */
	char topic[96];     /* the topic frame of its last message; "" none */
	char pod[64], model[64]; /* from a "kv@pod@model" topic; "" otherwise */
} kva_fleet_match;

/* kva_fleet_score - for a chain of block hashes (as kva_fleet_chain_register takes them), every
 * (publisher, medium) that holds a prefix of it: how many blocks, with the publisher's identity.
 * Blocks count in the full_groups (any of them). A router's query: no registration needed.
 * Thread: any, concurrently with everything but kva_fleet_destroy; lock-free, never waits for
 * the I/O thread (with cfg.score the index is a table whose slots are read under
 * per-slot sequence numbers; an entry moved or written during the query may be missed).
 * Cost: one probe of the table per block until no publisher holds the next one, plus the
 * publishers holding them; no allocation (12 KiB of stack). At most 1,024 pairs holding
 * block 0 followed.
 * Effect: none; out[0..ret) sorted by blocks, longest first; past cap, the longest kept.
 * Returns: the number written, -EINVAL (f or out NULL with cap, hashes NULL with n),
 * -ENOTSUP (created without cfg.score). */
KVA_API int kva_fleet_score(const kva_fleet *f, const uint64_t *hashes, uint32_t n,
                            kva_fleet_match *out, uint32_t cap);

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
	/* Scans of the whole index table to drop one publisher's entries: only
	 * when its generation wraps, once per 2^24 drops (a clear, a restart,
	 * a dropped or removed publisher are O(1)). */
	uint64_t index_scans;
	/* Against a publisher or host choosing keys (docs/fleet.md, "Security"):
	 * stores refused because their probe would pass the cap, dead entries
	 * (of dropped publishers) reclaimed, chains refused for the same. */
	uint64_t index_refused, index_reclaimed, chains_refused;
	/* Lookups answered a miss at once: the I/O thread had 65,536 waiting. */
	uint64_t lookups_shed;
	/* Sequence numbers refused: negative (but a replay's end marker) or
	 * INT64_MAX, live or replayed; replayed batches numbered above the
	 * highest live number seen (a replay returns what PUB already sent). */
	uint64_t bad_seq, replay_refused;
	/* kva_fleet_report_failure: reports applied, ids no longer watched,
	 * candidate (publisher, medium) pairs left out of answers meanwhile. */
	uint64_t failures_reported, failures_unknown, quarantine_skips;
	/* Events skipped because they could not be read as their kind (a known
	 * field of another type: a newer publisher); their batch's other events
	 * are applied. */
	uint64_t undecodable_events;
	/* Publishers whose connection came back: treated as a new process, their
	 * entries dropped and their history fetched again from 0 (docs/fleet.md). */
	uint64_t reconnects;
	/* Blocks of BlockStored events refused: their block_size is not the one
	 * configured for their (medium, group) (or block_size). */
	uint64_t block_size_mismatch;
	/* With cfg.score: stored blocks left out of the router's copy because
	 * their publisher had 8 dropped columns still being swept (a publisher
	 * dropped again and again within one sweep pass; docs/fleet.md). */
	uint64_t score_uncopied;
} kva_fleet_stats;

KVA_API void kva_fleet_stats_get(const kva_fleet *f, kva_fleet_stats *out);

#ifdef __cplusplus
}
#endif
#endif
