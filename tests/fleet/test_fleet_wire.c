/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The wire decoder (fleet/wire.c) against msgpack-c's encoder: every batch
 * layout producers send (map batch + map events, as msgspec writes vLLM's
 * structs at the commit docs/fleet.md cites; array batch + map events, vLLM
 * v0.26 on; array_like, as older vLLM and TensorRT-LLM; Mooncake's), int and
 * bytes hashes (vLLM's own vectors), optional fields, unknown events and
 * fields skipped, undecodable events skipped alone, and every way a payload
 * can be broken refused whole.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <msgpack.h>

#include "vllm_hash_vectors.h"
#include "wire.h"

static void str(msgpack_packer *pk, const char *s)
{
	msgpack_pack_str(pk, strlen(s));
	msgpack_pack_str_body(pk, s, strlen(s));
}

static void map_form_as_vllm_writes_it(void **st)
{
	(void)st;
	msgpack_sbuffer sb;
	msgpack_sbuffer_init(&sb);
	msgpack_packer pk;
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 3);
	str(&pk, "ts");
	msgpack_pack_double(&pk, 1.5);
	str(&pk, "events");
	msgpack_pack_array(&pk, 4);
	/* BlockStored, bytes hashes, medium, group_idx, extras to skip */
	msgpack_pack_map(&pk, 9);
	str(&pk, "type");
	str(&pk, "BlockStored");
	str(&pk, "block_hashes");
	msgpack_pack_array(&pk, 2);
	unsigned char h1[32] = {[0] = 0xaa, [31] = 7}, h2[3] = {1, 2, 3}; /* keyed by the last 8 */
	msgpack_pack_bin(&pk, 32);
	msgpack_pack_bin_body(&pk, h1, 32);
	msgpack_pack_bin(&pk, 3);
	msgpack_pack_bin_body(&pk, h2, 3);
	str(&pk, "parent_block_hash");
	msgpack_pack_nil(&pk);
	str(&pk, "token_ids");
	msgpack_pack_array(&pk, 32);
	for (int i = 0; i < 32; i++)
		msgpack_pack_int(&pk, i);
	str(&pk, "block_size");
	msgpack_pack_int(&pk, 16);
	str(&pk, "medium");
	str(&pk, "CPU");
	str(&pk, "extra_keys");
	msgpack_pack_array(&pk, 2);
	msgpack_pack_array(&pk, 1);
	str(&pk, "salt");
	msgpack_pack_nil(&pk);
	str(&pk, "group_idx");
	msgpack_pack_int(&pk, 1);
	str(&pk, "kv_cache_spec_kind");
	str(&pk, "mamba");
	/* BlockRemoved with a negative int hash */
	msgpack_pack_map(&pk, 3);
	str(&pk, "type");
	str(&pk, "BlockRemoved");
	str(&pk, "block_hashes");
	msgpack_pack_array(&pk, 1);
	msgpack_pack_int64(&pk, -5);
	str(&pk, "medium");
	msgpack_pack_nil(&pk);
	/* a future event kind, skipped */
	msgpack_pack_map(&pk, 2);
	str(&pk, "type");
	str(&pk, "BlockMoved");
	str(&pk, "block_hashes");
	msgpack_pack_array(&pk, 1);
	msgpack_pack_int(&pk, 1);
	msgpack_pack_map(&pk, 1);
	str(&pk, "type");
	str(&pk, "AllBlocksCleared");
	str(&pk, "data_parallel_rank");
	msgpack_pack_int(&pk, 3);

	struct kvf_batch b;
	kvf_batch_init(&b, 0, 0);
	assert_int_equal(kvf_decode(&b, sb.data, sb.size), 0);
	assert_true(b.ts == 1.5);
	assert_int_equal(b.dp_rank, 3);
	assert_int_equal(b.nevents, 3);
	assert_int_equal(b.unknown_events, 1);
	assert_int_equal(b.events[0].type, KVF_EV_STORED);
	assert_int_equal(b.events[0].nhashes, 2);
	assert_int_equal(b.hashes[b.events[0].first_hash], 7);
	assert_int_equal(b.hashes[b.events[0].first_hash + 1], 0x010203);
	assert_int_equal(b.events[0].block_size, 16);
	assert_string_equal(b.events[0].medium, "CPU");
	assert_int_equal(b.events[0].group_idx, 1);
	assert_int_equal(b.events[1].type, KVF_EV_REMOVED);
	assert_int_equal(b.events[1].medium_len, 0);
	assert_int_equal(b.events[1].group_idx, KVF_GROUP_NONE);
	assert_int_equal(b.hashes[b.events[1].first_hash], (uint64_t)-5);
	assert_int_equal(b.events[2].type, KVF_EV_CLEARED);

	/* every truncation of a valid batch is refused, never read past */
	for (size_t n = 0; n < sb.size; n++) {
		unsigned char *cut = malloc(n ? n : 1);
		memcpy(cut, sb.data, n);
		assert_int_equal(kvf_decode(&b, cut, n), -EBADMSG);
		free(cut);
	}
	/* limits */
	struct kvf_batch small;
	kvf_batch_init(&small, 0, 1);
	assert_int_equal(kvf_decode(&small, sb.data, sb.size), -E2BIG);
	kvf_batch_fini(&small);
	kvf_batch_fini(&b);
	msgpack_sbuffer_destroy(&sb);
}

static void array_like_form_old_vllm_and_trtllm(void **st)
{
	(void)st;
	msgpack_sbuffer sb;
	msgpack_sbuffer_init(&sb);
	msgpack_packer pk;
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_array(&pk, 2); /* [ts, events] (no rank: older vLLM) */
	msgpack_pack_float(&pk, 2.0f);
	msgpack_pack_array(&pk, 3);
	msgpack_pack_array(&pk, 6); /* b4e69e0: tag + 5 fields */
	str(&pk, "BlockStored");
	msgpack_pack_array(&pk, 1);
	msgpack_pack_uint64(&pk, UINT64_MAX);
	msgpack_pack_int(&pk, 9);
	msgpack_pack_array(&pk, 0);
	msgpack_pack_int(&pk, 64);
	msgpack_pack_nil(&pk);
	msgpack_pack_array(&pk, 4); /* BlockRemoved with medium and group */
	str(&pk, "BlockRemoved");
	msgpack_pack_array(&pk, 2);
	msgpack_pack_int(&pk, 1);
	msgpack_pack_int(&pk, 2);
	str(&pk, "GPU");
	msgpack_pack_int(&pk, 2);
	msgpack_pack_array(&pk, 1);
	str(&pk, "AllBlocksCleared");
	struct kvf_batch b;
	kvf_batch_init(&b, 0, 0);
	assert_int_equal(kvf_decode(&b, sb.data, sb.size), 0);
	assert_int_equal(b.nevents, 3);
	assert_int_equal(b.dp_rank, -1);
	assert_int_equal(b.events[0].block_size, 64);
	assert_int_equal(b.hashes[0], UINT64_MAX);
	assert_int_equal(b.events[1].nhashes, 2);
	assert_int_equal(b.events[1].group_idx, 2);
	assert_string_equal(b.events[1].medium, "GPU");
	assert_int_equal(b.events[2].type, KVF_EV_CLEARED);
	kvf_batch_fini(&b);
	msgpack_sbuffer_destroy(&sb);
}

/* Mooncake's master (kvcache-ai/Mooncake mooncake-store/include/kv_event/
 * kv_event.hpp at e6294cf5a055637e28edf3cc021309a39090fd21), field by field
 * as its pack() writes them: [ts, events], each event an array whose first
 * element is its tag. */
static void mooncake_store_layout(void **st)
{
	(void)st;
	msgpack_sbuffer sb;
	msgpack_sbuffer_init(&sb);
	msgpack_packer pk;
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_array(&pk, 2);
	msgpack_pack_double(&pk, 1700000000.25);
	msgpack_pack_array(&pk, 5);
	/* BlockStoreEvent: 8 fields, a memory and a disk replica */
	msgpack_pack_array(&pk, 8);
	str(&pk, "BlockStoreEvent");
	str(&pk, "key_12345");
	msgpack_pack_array(&pk, 3);
	msgpack_pack_array(&pk, 2);
	str(&pk, "memory");
	str(&pk, "tcp://192.168.1.10:6000");
	msgpack_pack_array(&pk, 2);
	str(&pk, "disk");
	str(&pk, "/data/blocks/block_12345.bin");
	msgpack_pack_array(&pk, 2); /* a second memory replica: one medium */
	str(&pk, "memory");
	str(&pk, "tcp://192.168.1.11:6000");
	str(&pk, "llama2-7b");
	msgpack_pack_uint32(&pk, 16);
	str(&pk, "0x41234125");
	str(&pk, "0x51512342");
	msgpack_pack_array(&pk, 5);
	for (uint32_t i = 1; i <= 5; i++)
		msgpack_pack_uint32(&pk, i);
	/* a sha256 hex digest as the hash: its last 8 bytes, as the bytes form */
	msgpack_pack_array(&pk, 8);
	str(&pk, "BlockStoreEvent");
	str(&pk, "key_2");
	msgpack_pack_array(&pk, 1);
	msgpack_pack_array(&pk, 2);
	str(&pk, "local_disk");
	str(&pk, "tcp://192.168.1.10:7000");
	str(&pk, "");
	msgpack_pack_uint32(&pk, 16);
	str(&pk, "ffeeddccbbaa99887766554433221100ffeeddccbbaa998800000000000000ff");
	str(&pk, "");
	msgpack_pack_array(&pk, 0);
	/* no block hash (StoreEventInfo left at its defaults): not indexable */
	msgpack_pack_array(&pk, 8);
	str(&pk, "BlockStoreEvent");
	str(&pk, "key_3");
	msgpack_pack_array(&pk, 1);
	msgpack_pack_array(&pk, 2);
	str(&pk, "memory");
	str(&pk, "x");
	str(&pk, "");
	msgpack_pack_uint32(&pk, 0);
	str(&pk, "");
	str(&pk, "");
	msgpack_pack_array(&pk, 0);
	/* BlockUpdateEvent: a mooncake_key only, skipped */
	msgpack_pack_array(&pk, 3);
	str(&pk, "BlockUpdateEvent");
	str(&pk, "key_12345");
	msgpack_pack_array(&pk, 1);
	msgpack_pack_array(&pk, 2);
	str(&pk, "memory");
	str(&pk, "tcp://192.168.1.10:6000");
	msgpack_pack_array(&pk, 1);
	str(&pk, "RemoveAllEvent");
	struct kvf_batch b;
	kvf_batch_init(&b, 0, 0);
	assert_int_equal(kvf_decode(&b, sb.data, sb.size), 0);
	assert_int_equal(b.nevents, 4);
	assert_int_equal(b.unknown_events, 2);
	assert_int_equal(b.events[0].type, KVF_EV_STORED);
	assert_string_equal(b.events[0].medium, "memory");
	assert_string_equal(b.events[1].medium, "disk");
	assert_int_equal(b.events[0].block_size, 16);
	assert_int_equal(b.events[0].nhashes, 1);
	assert_int_equal(b.hashes[b.events[1].first_hash], 0x41234125);
	assert_int_equal(b.nhashes, 3); /* one per event */
	assert_int_equal(b.hashes[b.events[0].first_hash], 0x41234125);
	assert_string_equal(b.events[2].medium, "local_disk");
	assert_int_equal(b.hashes[b.events[2].first_hash], 0xff);
	assert_int_equal(b.events[3].type, KVF_EV_CLEARED);
	/* every truncation is refused whole */
	for (size_t n = 0; n < sb.size; n++)
		assert_int_equal(kvf_decode(&b, sb.data, n), -EBADMSG);
	kvf_batch_fini(&b);
	msgpack_sbuffer_destroy(&sb);
}

static void broken_payloads_are_refused(void **st)
{
	(void)st;
	static const struct {
		const char *what;
		const char *bytes;
		size_t len;
	} bad[] = {
		{"empty", "", 0},
		{"not a batch", "\x05", 1},
		{"reserved byte", "\xc1", 1},
		{"trailing bytes", "\x92\x00\x90\x00", 4},
		{"events not an array", "\x92\x00\x05", 3},
		{"array count past the end", "\x92\x00\xdd\x7f\xff\xff\xff", 7},
		{"map count past the end", "\x92\x00\x91\xdf\x7f\xff\xff\xff", 8},
		{"string past the end", "\x92\x00\x91\x91\xdb\x7f\xff\xff\xff", 9},
		{"batch of four, two there", "\x94\xcb\x3f\xf8\x00\x00\x00\x00\x00\x00\x90", 11},
		{"map batch without events", "\x81\xa2" "ts\x00", 5},
		{"negative rank", "\x93\x00\x90\xff", 4},
		{"rank past INT64_MAX", "\x93\x00\x90\xcf\x80\x00\x00\x00\x00\x00\x00\x00", 12},
		{"hash count past the end", "\x92\x00\x91\x92\xab" "BlockStored\xdd\x7f\xff\xff\xff", 21},
	};
	struct kvf_batch b;
	kvf_batch_init(&b, 0, 0);
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		int rc = kvf_decode(&b, bad[i].bytes, bad[i].len);
		if (rc != -EBADMSG)
			fail_msg("%s: %d", bad[i].what, rc);
	}
	/* nesting deeper than the reader follows */
	unsigned char deep[200];
	memcpy(deep, "\x92\x00\x91\x92\xb0" "AllBlocksCleared", 21);
	size_t n = 21;
	for (; n < sizeof deep - 1; n++)
		deep[n] = 0x91;
	deep[n++] = 0xc0;
	assert_int_equal(kvf_decode(&b, deep, n), -EBADMSG);
	kvf_batch_fini(&b);
}

/* Details of the reader: int8..int32 hashes sign-extended as int64 ones
 * are; a medium longer than KVF_MEDIUM_MAX truncated; an unknown map event
 * leaves no hashes behind; a count is checked against the bytes left before
 * anything is allocated for it. */
static void narrow_ints_long_media_and_counts(void **st)
{
	(void)st;
	msgpack_sbuffer sb;
	msgpack_sbuffer_init(&sb);
	msgpack_packer pk;
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_array(&pk, 2);
	msgpack_pack_int(&pk, 7);
	msgpack_pack_array(&pk, 3);
	/* a future event kind with hashes, skipped: they go with it */
	msgpack_pack_map(&pk, 2);
	str(&pk, "type");
	str(&pk, "BlockMoved");
	str(&pk, "block_hashes");
	msgpack_pack_array(&pk, 2);
	msgpack_pack_int(&pk, 11);
	msgpack_pack_int(&pk, 12);
	msgpack_pack_map(&pk, 3);
	str(&pk, "type");
	str(&pk, "BlockRemoved");
	str(&pk, "block_hashes");
	msgpack_pack_array(&pk, 4);
	msgpack_pack_int(&pk, -100);    /* int8 */
	msgpack_pack_int(&pk, -200);    /* int16 */
	msgpack_pack_int(&pk, -70000);  /* int32 */
	msgpack_pack_int64(&pk, -5000000000ll); /* int64 */
	str(&pk, "medium");
	str(&pk, "a-medium-name-of-forty-bytes-0123456789");
	msgpack_pack_map(&pk, 2);
	str(&pk, "block_hashes");
	msgpack_pack_array(&pk, 1);
	msgpack_pack_int(&pk, 13);
	str(&pk, "type");
	str(&pk, "BlockMoved");
	struct kvf_batch b;
	kvf_batch_init(&b, 0, 0);
	assert_int_equal(kvf_decode(&b, sb.data, sb.size), 0);
	assert_int_equal(b.nevents, 1);
	assert_int_equal(b.unknown_events, 2);
	assert_int_equal(b.nhashes, 4); /* the skipped events' hashes are not kept */
	assert_int_equal(b.events[0].first_hash, 0);
	assert_int_equal(b.events[0].nhashes, 4);
	assert_int_equal(b.hashes[0], (uint64_t)-100);
	assert_int_equal(b.hashes[1], (uint64_t)-200);
	assert_int_equal(b.hashes[2], (uint64_t)-70000);
	assert_int_equal(b.hashes[3], (uint64_t)-5000000000ll);
	assert_int_equal(b.events[0].medium_len, KVF_MEDIUM_MAX);
	assert_int_equal(strlen(b.events[0].medium), KVF_MEDIUM_MAX);
	assert_memory_equal(b.events[0].medium, "a-medium-name-of-forty-bytes-0123456789",
	                    KVF_MEDIUM_MAX);

	/* a million hashes announced in a 30-byte payload: refused before the
	 * hash array grows for them */
	static const unsigned char many[] = {0x92, 0x00, 0x91, 0x92, 0xab, 'B', 'l', 'o', 'c', 'k',
	                                     'S', 't', 'o', 'r', 'e', 'd', 0xdd, 0x00, 0x10,
	                                     0x00, 0x00, 0x01, 0x02};
	struct kvf_batch fresh;
	kvf_batch_init(&fresh, 0, 0);
	assert_int_equal(kvf_decode(&fresh, many, sizeof many), -EBADMSG);
	assert_true(fresh.hashes_cap <= 16);
	kvf_batch_fini(&fresh);
	kvf_batch_fini(&b);
	msgpack_sbuffer_destroy(&sb);
}


/* Events that are well-formed msgpack but cannot be read as their kind
 * (these were refused whole before: a newer publisher's batch was lost with
 * them): each is skipped and counted, never half-kept. */
static void undecodable_events_are_skipped_alone(void **st)
{
	(void)st;
	static const struct {
		const char *what;
		const char *bytes;
		size_t len;
	} skipped[] = {
		{"event without a tag", "\x92\x00\x91\x90", 4},
		{"map event without type", "\x92\x00\x91\x80", 4},
		{"stored without hashes", "\x92\x00\x91\x91\xab" "BlockStored", 16},
		{"hash of a wrong type", "\x92\x00\x91\x92\xac" "BlockRemoved\x91\xc3", 19},
		{"block_size past 32 bits", "\x92\x00\x91\x95\xab" "BlockStored\x91\x01\xc0\x90"
		 "\xcf\x00\x00\x00\x01\x00\x00\x00\x00", 29},
		{"group_idx past 32 bits", "\x92\x00\x91\x84\xa4type\xac" "BlockRemoved\xac" "block_hashes"
		 "\x91\x01\xa6medium\xc0\xa9group_idx\xcf\x00\x00\x00\x01\x00\x00\x00\x00", 64},
		{"block_hashes twice", "\x92\x00\x91\x83\xa4type\xac" "BlockRemoved\xac" "block_hashes"
		 "\x91\x01\xac" "block_hashes\x91\x02", 52},
	};
	struct kvf_batch b;
	kvf_batch_init(&b, 0, 0);
	for (size_t i = 0; i < sizeof skipped / sizeof skipped[0]; i++) {
		int rc = kvf_decode(&b, skipped[i].bytes, skipped[i].len);
		if (rc != 0 || b.nevents != 0 || b.nhashes != 0 || b.undecodable_events != 1)
			fail_msg("%s: rc %d, %u events, %u hashes, %u undecodable", skipped[i].what,
			         rc, b.nevents, b.nhashes, b.undecodable_events);
	}

	/* Between readable ones: a BlockStored whose block_hashes is a string
	 * (a known field, another type), an unknown kind (tag first, as msgspec
	 * writes it) reusing known names with other types, unknown fields in a
	 * known event and in the batch, a 4th batch element. */
	msgpack_sbuffer sb;
	msgpack_sbuffer_init(&sb);
	msgpack_packer pk;
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_array(&pk, 4); /* [ts, events, rank, a later field] */
	msgpack_pack_double(&pk, 3.0);
	msgpack_pack_array(&pk, 4);
	msgpack_pack_map(&pk, 3);
	str(&pk, "type");
	str(&pk, "BlockStored");
	str(&pk, "block_hashes");
	msgpack_pack_array(&pk, 1);
	msgpack_pack_int(&pk, 41);
	str(&pk, "priority"); /* a field this decoder does not know */
	msgpack_pack_map(&pk, 1);
	str(&pk, "x");
	msgpack_pack_int(&pk, 1);
	msgpack_pack_map(&pk, 2);
	str(&pk, "type");
	str(&pk, "BlockStored");
	str(&pk, "block_hashes");
	str(&pk, "not-a-list");
	msgpack_pack_map(&pk, 3);
	str(&pk, "type");
	str(&pk, "BlockPinned");
	str(&pk, "block_hashes");
	str(&pk, "another type");
	str(&pk, "medium");
	msgpack_pack_int(&pk, 5);
	msgpack_pack_map(&pk, 2);
	str(&pk, "type");
	str(&pk, "BlockRemoved");
	str(&pk, "block_hashes");
	msgpack_pack_array(&pk, 2);
	msgpack_pack_int(&pk, 42);
	msgpack_pack_int(&pk, 43);
	msgpack_pack_int(&pk, 2);
	msgpack_pack_map(&pk, 1);
	str(&pk, "trace_id");
	msgpack_pack_int(&pk, 99);
	assert_int_equal(kvf_decode(&b, sb.data, sb.size), 0);
	assert_int_equal(b.dp_rank, 2);
	assert_int_equal(b.nevents, 2);
	assert_int_equal(b.unknown_events, 1);
	assert_int_equal(b.undecodable_events, 1);
	assert_int_equal(b.nhashes, 3);
	assert_int_equal(b.events[0].type, KVF_EV_STORED);
	assert_int_equal(b.hashes[b.events[0].first_hash], 41);
	assert_int_equal(b.events[1].type, KVF_EV_REMOVED);
	assert_int_equal(b.events[1].first_hash, 1);
	assert_int_equal(b.hashes[2], 43);
	/* still: every truncation refused whole */
	for (size_t n = 0; n < sb.size; n++)
		assert_int_equal(kvf_decode(&b, sb.data, n), -EBADMSG);
	kvf_batch_fini(&b);
	msgpack_sbuffer_destroy(&sb);
}

/* vLLM v0.26 on (PR #42892): the batch an array [ts, events, rank], each
 * event a map with its "type" tag first; hashes as bytes or as ints. */
static void array_batch_with_map_events_vllm_0_26(void **st)
{
	(void)st;
	msgpack_sbuffer sb;
	msgpack_sbuffer_init(&sb);
	msgpack_packer pk;
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_array(&pk, 3);
	msgpack_pack_double(&pk, 4.25);
	msgpack_pack_array(&pk, 3);
	msgpack_pack_map(&pk, 8);
	str(&pk, "type");
	str(&pk, "BlockStored");
	str(&pk, "block_hashes");
	msgpack_pack_array(&pk, 2);
	unsigned char d[32] = {[0] = 1, [24] = 0x11, [31] = 0x88};
	msgpack_pack_bin(&pk, 32);
	msgpack_pack_bin_body(&pk, d, 32);
	msgpack_pack_uint64(&pk, 0x1100000000000088ull); /* the same block, int form */
	str(&pk, "parent_block_hash");
	msgpack_pack_nil(&pk);
	str(&pk, "token_ids");
	msgpack_pack_array(&pk, 32);
	for (int i = 0; i < 32; i++)
		msgpack_pack_int(&pk, i);
	str(&pk, "block_size");
	msgpack_pack_int(&pk, 16);
	str(&pk, "lora_name");
	str(&pk, "sql-lora");
	str(&pk, "medium");
	str(&pk, "GPU");
	str(&pk, "group_idx");
	msgpack_pack_int(&pk, 0);
	msgpack_pack_map(&pk, 3);
	str(&pk, "type");
	str(&pk, "BlockRemoved");
	str(&pk, "block_hashes");
	msgpack_pack_array(&pk, 1);
	msgpack_pack_uint64(&pk, 0x1100000000000088ull);
	str(&pk, "medium");
	str(&pk, "CPU");
	msgpack_pack_map(&pk, 1);
	str(&pk, "type");
	str(&pk, "AllBlocksCleared");
	msgpack_pack_int(&pk, 1);
	struct kvf_batch b;
	kvf_batch_init(&b, 0, 0);
	assert_int_equal(kvf_decode(&b, sb.data, sb.size), 0);
	assert_true(b.ts == 4.25);
	assert_int_equal(b.dp_rank, 1);
	assert_int_equal(b.nevents, 3);
	assert_int_equal(b.unknown_events + b.undecodable_events, 0);
	assert_int_equal(b.events[0].type, KVF_EV_STORED);
	assert_int_equal(b.events[0].block_size, 16);
	assert_int_equal(b.events[0].group_idx, 0);
	assert_string_equal(b.events[0].medium, "GPU");
	/* bytes and int forms of one block: one key */
	assert_int_equal(b.hashes[0], 0x1100000000000088ull);
	assert_int_equal(b.hashes[1], 0x1100000000000088ull);
	assert_int_equal(b.events[1].type, KVF_EV_REMOVED);
	assert_string_equal(b.events[1].medium, "CPU");
	assert_int_equal(b.events[2].type, KVF_EV_CLEARED);
	for (size_t n = 0; n < sb.size; n++)
		assert_int_equal(kvf_decode(&b, sb.data, n), -EBADMSG);
	kvf_batch_fini(&b);
	msgpack_sbuffer_destroy(&sb);
}

/* The hashes vLLM computes (tests/fleet/vllm_hash_vectors.py: sha256 of the
 * pickled (parent, tokens, extra_keys), PYTHONHASHSEED=0) key the same
 * whether a publisher sends the digest or its int form. */
static void vllm_hash_vectors_int_and_bytes_agree(void **st)
{
	(void)st;
	struct kvf_batch b;
	kvf_batch_init(&b, 0, 0);
	for (size_t i = 0; i < sizeof VLLM_VECTORS / sizeof VLLM_VECTORS[0]; i++) {
		const struct vllm_vector *v = &VLLM_VECTORS[i];
		assert_int_equal(kvf_hash_from_bytes(v->digest, 32), v->as_int);
		msgpack_sbuffer sb;
		msgpack_sbuffer_init(&sb);
		msgpack_packer pk;
		msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
		msgpack_pack_array(&pk, 2);
		msgpack_pack_int(&pk, 0);
		msgpack_pack_array(&pk, 1);
		msgpack_pack_map(&pk, 2);
		str(&pk, "type");
		str(&pk, "BlockRemoved");
		str(&pk, "block_hashes");
		msgpack_pack_array(&pk, 2);
		msgpack_pack_bin(&pk, 32);
		msgpack_pack_bin_body(&pk, v->digest, 32);
		msgpack_pack_uint64(&pk, v->as_int);
		assert_int_equal(kvf_decode(&b, sb.data, sb.size), 0);
		assert_int_equal(b.hashes[0], v->as_int);
		assert_int_equal(b.hashes[1], v->as_int);
		msgpack_sbuffer_destroy(&sb);
	}
	kvf_batch_fini(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(map_form_as_vllm_writes_it),
		cmocka_unit_test(array_like_form_old_vllm_and_trtllm),
		cmocka_unit_test(mooncake_store_layout),
		cmocka_unit_test(broken_payloads_are_refused),
		cmocka_unit_test(narrow_ints_long_media_and_counts),
		cmocka_unit_test(undecodable_events_are_skipped_alone),
		cmocka_unit_test(array_batch_with_map_events_vllm_0_26),
		cmocka_unit_test(vllm_hash_vectors_int_and_bytes_agree),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
