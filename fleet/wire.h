/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wire: the KV-event wire format, decoded without allocation.
 *
 * A publisher sends multipart messages (topic, 8-byte big-endian sequence,
 * msgpack payload); the payload is an EventBatch. Reference: vLLM
 * vllm/distributed/kv_events.py at commit 0181ea3173e53eea8cf04a86891488e3dc89bb34
 * (map-encoded batch and events, tag key "type", ExternalBlockHash = bytes |
 * int, medium, group_idx), also accepting the array_like encoding of older
 * vLLM (b4e69e0af33f4698e157a262cc787fe61983cd3d) and of TensorRT-LLM
 * (positional fields, the tag first), and the Mooncake master's events
 * (kvcache-ai/Mooncake mooncake-store/include/kv_event/kv_event.hpp at
 * e6294cf5a055637e28edf3cc021309a39090fd21: BlockStoreEvent with one string
 * block_hash and its replicas' types as media, RemoveAllEvent).
 * docs/fleet.md lists the fields.
 *
 * kvf_decode() validates the whole payload before anything is applied: a
 * batch is either decoded into the caller's kvf_batch or refused (-EBADMSG),
 * so a malformed message never half-applies; within a well-formed batch an
 * event it cannot read is skipped and counted (forward compatibility). Every length read
 * from the payload is checked against the bytes left before it is used.
 */
#ifndef KVA_FLEET_WIRE_H
#define KVA_FLEET_WIRE_H

#include <stddef.h>
#include <stdint.h>

enum kvf_event_type { KVF_EV_STORED = 1, KVF_EV_REMOVED = 2, KVF_EV_CLEARED = 3 };

#define KVF_GROUP_NONE 0u  /* group_idx absent or nil: the model's only group */
#define KVF_MEDIUM_MAX 31u /* longest medium name kept (longer: truncated) */

struct kvf_event {
	uint8_t type;        /* enum kvf_event_type */
	uint8_t medium_len;  /* 0: medium absent or nil (the engine's GPU cache) */
	uint16_t reserved_;
	uint32_t group_idx;  /* KVF_GROUP_NONE when absent */
	uint32_t block_size; /* STORED: tokens per block; 0 absent */
	uint32_t nhashes;
	uint32_t first_hash; /* index into kvf_batch.hashes */
	char medium[KVF_MEDIUM_MAX + 1];
};

/* Decoded batch; the arrays grow as needed (kvf_batch_fini frees them).
 * Limits bound the memory one message can take. */
struct kvf_batch {
	double ts;
	int64_t dp_rank; /* -1 when absent */
	uint32_t nevents, unknown_events;
	uint32_t undecodable_events; /* well-formed, but not readable as their kind: skipped */
	struct kvf_event *events;
	uint64_t *hashes;
	uint32_t nhashes;
	uint32_t events_cap, hashes_cap;
	uint32_t max_events, max_hashes; /* 0: no limit beyond the payload size */
};

void kvf_batch_init(struct kvf_batch *b, uint32_t max_events, uint32_t max_hashes);
void kvf_batch_fini(struct kvf_batch *b);

/* 0; -EBADMSG (not an EventBatch: truncated, wrong types, a count past the
 * payload); -E2BIG (more events or hashes than the limits); -ENOMEM. An
 * event that is well-formed msgpack but not readable as its kind is
 * skipped (undecodable_events), the batch's other events kept. */
int kvf_decode(struct kvf_batch *b, const void *payload, size_t len);

/* A block hash as the index keys it: an int as its 64-bit two's complement,
 * bytes (vLLM's sha256 digests) as their last 8 bytes big-endian (fewer
 * bytes: their big-endian value), which is the int vLLM sends for the same
 * digest (maybe_convert_block_hash), so int and bytes publishers of one
 * chain agree. Hosts registering chains use the same. */
uint64_t kvf_hash_from_bytes(const void *p, size_t n);

/* The 8-byte big-endian sequence frame; -1 is the replay's end marker. */
static inline int64_t kvf_seq_decode(const unsigned char *p)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v = v << 8 | p[i];
	return (int64_t)v;
}

#endif
