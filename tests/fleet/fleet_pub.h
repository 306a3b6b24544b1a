/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A test publisher that behaves like vLLM's ZmqEventPublisher: a PUB socket
 * (topic, 8-byte big-endian sequence, payload), a ROUTER replay socket that
 * resends buffered batches from a requested sequence and ends with -1.
 * Single-threaded: the test calls tp_service() while it waits. Payloads are
 * encoded with msgpack-c in the array_like layout (older vLLM, TensorRT-LLM).
 */
#ifndef KVA_TESTS_FLEET_PUB_H
#define KVA_TESTS_FLEET_PUB_H

#include <stddef.h>
#include <stdint.h>

struct tp;

/* Binds tcp://127.0.0.1:* (PUB and ROUTER); NULL on failure. */
struct tp *tp_new(void *zctx);
/* The same, both sockets CURVE servers with this secret key (Z85). */
struct tp *tp_new_curve(void *zctx, const char *secret_key);
void tp_free(struct tp *p);
const char *tp_pub_endpoint(const struct tp *p);
const char *tp_replay_endpoint(const struct tp *p);

/* Batches. skip: number, buffer it, but do not send it on PUB (a gap). */
void tp_store(struct tp *p, const uint64_t *hashes, uint32_t n, uint32_t block_size,
              const char *medium, int group, int skip);
void tp_remove(struct tp *p, const uint64_t *hashes, uint32_t n, const char *medium, int group);
void tp_clear(struct tp *p);
void tp_empty(struct tp *p); /* a batch without events (a heartbeat for the tests) */
void tp_raw(struct tp *p, const void *payload, size_t len); /* numbered, any bytes */
void tp_frames(struct tp *p, int nframes);                    /* a wrong message shape */
/* A new process: sequence back to 0, replay buffer empty. */
void tp_restart(struct tp *p);
/* Answers waiting replay requests. */
void tp_service(struct tp *p);

/* How the ROUTER answers (TP_REPLAY_NORMAL: the buffered batches from the
 * requested number, then the end marker). */
enum tp_replay {
	TP_REPLAY_NORMAL = 0,
	TP_REPLAY_HOLD,        /* requests wait unread until the mode changes */
	TP_REPLAY_NO_END,      /* the batches, never the end marker */
	TP_REPLAY_NO_END_ONCE, /* the next request: no end marker; then NORMAL */
	TP_REPLAY_END_ONLY,    /* only the end marker (nothing buffered that far) */
	TP_REPLAY_ONCE_THEN_HOLD, /* the next request: NORMAL; then HOLD */
	TP_REPLAY_END_LATER,   /* the next request: its batches now, its end marker
	                          at tp_replay_send_end; then NORMAL */
};
void tp_replay_mode(struct tp *p, enum tp_replay mode);
/* The end marker TP_REPLAY_END_LATER kept back, sent now (the answer's
 * last frames delayed on the wire). */
void tp_replay_send_end(struct tp *p);
int64_t tp_next_seq(const struct tp *p); /* the number the next batch gets */
/* Replay replies: 3 frames ["", seq, payload] (the default: vLLM before
 * v0.26, SGLang) or 4 ["", topic, seq, payload] (vLLM v0.26 on, PR #45177);
 * the end marker ["", -1, ""] or ["", "", -1, ""]. */
void tp_reply_frames(struct tp *p, int frames);
/* A new process on the same endpoints: the sockets closed and bound again,
 * the buffer empty, numbering from next_seq (a quick restart that already
 * passed the old number). 0, or -1 if a port could not be bound again. */
int tp_reopen(struct tp *p, int64_t next_seq);

/* An empty batch, numbered and buffered but not sent: lost on the wire. */
void tp_lost(struct tp *p);
/* Sends buffered batch `seq` on PUB now (a live copy delayed past its replay). */
void tp_send_buffered(struct tp *p, int64_t seq);
/* As tp_store, the medium given as mlen bytes (it may hold NUL bytes). */
void tp_store_medium(struct tp *p, const uint64_t *hashes, uint32_t n, uint32_t block_size,
                     const char *medium, size_t mlen);
/* One batch of `rounds` x (AllBlocksCleared, BlockStored of the one block
 * first_hash + round), then `tail` more AllBlocksCleared. */
void tp_clear_rounds(struct tp *p, uint32_t rounds, uint64_t first_hash, uint32_t tail);

/* A hostile publisher (tests/fleet/test_fleet_hostile.c). tp_live_as: an
 * empty batch numbered seq on PUB (not buffered, the count not moved);
 * tp_replay_forge: every replay answer starts with an empty batch
 * numbered seq. */
void tp_live_as(struct tp *p, int64_t seq);
void tp_replay_forge(struct tp *p, int64_t seq);

#endif
