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

#endif
