/* SPDX-License-Identifier: Apache-2.0 */
/*
 * replay: a publisher's sequence tracking. Batches are applied in sequence
 * order; a gap, a late join, a restart or an overflow of the held list asks
 * the publisher's replay endpoint (DEALER) for what is missing, and live
 * batches are held meanwhile. I/O thread only.
 */
#ifndef KVA_FLEET_REPLAY_H
#define KVA_FLEET_REPLAY_H

#include "fleet_state.h"

/* Asks the replay endpoint for the batches from `from` on; the round ends
 * with the end marker or after REPLAY_TRIES timeouts (io_thread.c). */
void kvf_replay_request(kva_fleet *f, struct publisher *pub, int64_t from);

/* The replay is over: losses accepted, the held batches handed back. */
void kvf_replay_end(kva_fleet *f, struct publisher *pub);
/* The publisher's connection came back after it went down: maybe another
 * process on the same endpoint, which may already have passed the old
 * one's sequence numbers. Its entries are dropped now; its next batch
 * starts it afresh, its history replayed from 0 (what the replay returns
 * is what is answered again). */
void kvf_on_reconnect(kva_fleet *f, struct publisher *pub);

/* A batch from the PUB socket (big: over max_message_bytes, unread). */
void kvf_on_live(kva_fleet *f, struct publisher *pub, int64_t seq, const uint8_t *data,
                 size_t len, bool big);

/* A batch (or, seq -1, the end marker) from the replay socket. */
void kvf_on_replay(kva_fleet *f, struct publisher *pub, int64_t seq, const uint8_t *data,
                   size_t len, bool big);

#endif
