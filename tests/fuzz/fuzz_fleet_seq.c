/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_fleet_seq: the fleet's sequence state machine (fleet/replay.c: live
 * batches, replay answers, end markers, retries, a replay given up, held
 * batches, restarts) driven from bytes, as a hostile publisher would, and
 * checked after every operation against a model of what must hold:
 *   - a batch number is applied at most once between two drops of the
 *     publisher's entries (each batch stores the block hash = its number,
 *     so an apply of a number already applied adds no entry);
 *   - the expected number never goes back but at a drop (a restart);
 *   - an applied number is never above the highest live number seen, and
 *     never negative or INT64_MAX;
 *   - a number out of range (negative but the end marker, INT64_MAX)
 *     changes nothing;
 *   - the held list stays within max_pending and 64 MiB;
 * and no crash, no undefined behaviour, no leak (ASan+UBSan, LeakSanitizer).
 * No sockets are read: the I/O thread's calls are made directly; replay
 * requests go to an unconnected DEALER (ZMQ_DONTWAIT, dropped).
 *
 * Input: a sequence of operations, 1 byte each plus the bytes of the number
 * it chooses (seq_of). FUZZ_TRACE=1 prints them.
 */
#define _GNU_SOURCE
#include <stdalign.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "apply.h"
#include "fleet_state.h"
#include "fuzz_input.h"
#include "replay.h"

#define FZ_TARGET "fuzz_fleet_seq"

#define MAX_PENDING 4

static void *zctx, *dealer;

/* [0.0, [["BlockStored", [seq], nil, [], 16, nil, nil, nil, nil, nil]], 0]
 * (array_like) */
static size_t payload(uint8_t *p, int64_t seq)
{
	static const uint8_t head[] = {0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x91, 0x9a,
	                               0xab, 'B', 'l', 'o', 'c', 'k', 'S', 't', 'o', 'r', 'e', 'd',
	                               0x91, 0xcf};
	static const uint8_t tail[] = {0xc0, 0x90, 0x10, 0xc0, 0xc0, 0xc0, 0xc0, 0xc0, 0x00};
	size_t n = 0;
	memcpy(p, head, sizeof head), n += sizeof head;
	for (int i = 0; i < 8; i++)
		p[n++] = (uint8_t)((uint64_t)seq >> (56 - 8 * i));
	memcpy(p + n, tail, sizeof tail), n += sizeof tail;
	return n;
}

static uint64_t fz_u64(struct fz *in)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v = v << 8 | fz_u8(in);
	return v;
}

/* A number: near the last live one, near the expected one, any, or one of
 * the edges. */
static int64_t seq_of(struct fz *in, const struct publisher *pub)
{
	uint8_t b = fz_u8(in);
	int64_t d = (int64_t)(b >> 2) - 24;
	switch (b & 3) {
	case 0:
		return pub->live_seen && pub->live_last < INT64_MAX - 64 ? pub->live_last + d : b >> 2;
	case 1:
		return pub->expected < INT64_MAX - 64 ? pub->expected + d : 0;
	case 2:
		return (int64_t)fz_u64(in);
	default: {
		static const int64_t edge[] = {-1, INT64_MAX, INT64_MIN, 0, -2, INT64_MAX - 1};
		return edge[(b >> 2) % 6];
	}
	}
}

static kva_fleet *fleet_new(void)
{
	size_t size = (sizeof(kva_fleet) + 63) / 64 * 64;
	kva_fleet *f = aligned_alloc(alignof(kva_fleet), size);
	FZ_CHECK(f);
	memset(f, 0, size);
	/* kva_fleet_config_default's values (fleet.c is not linked in) */
	f->cfg.max_blocks = 1024; /* above what 512 operations can store: no evictions */
	f->cfg.max_pending = MAX_PENDING;
	f->cfg.max_message_bytes = 4096;
	f->cfg.replay_timeout_ns = 2000000000ull;
	f->cfg.watch_ns = 600000000000ull;
	f->cfg.full_groups = 1;
	f->cfg.max_media_per_publisher = 8;
	f->cfg.max_manifest_per_publisher = 2;
	FZ_CHECK(kvf_index_init(&f->index, 1024) == 0);
	f->pubs = calloc(1, sizeof(*f->pubs)); /* publisher 0 alone */
	FZ_CHECK(f->pubs);
	kvf_batch_init(&f->batch, 0, 0);
	struct publisher *pub = &f->pubs[0];
	pub->endpoint = "fuzz";
	pub->dealer = dealer;
	pub->active = true;
	pub->held = calloc(MAX_PENDING, sizeof(*pub->held));
	pub->held_spare = calloc(MAX_PENDING, sizeof(*pub->held_spare));
	FZ_CHECK(pub->held && pub->held_spare);
	f->npubs = 1;
	return f;
}

static void fleet_free(kva_fleet *f)
{
	struct publisher *pub = &f->pubs[0];
	for (uint32_t i = 0; i < pub->nheld; i++)
		free(pub->held[i].data);
	free(pub->held);
	free(pub->held_spare);
	free(f->pubs);
	kvf_batch_fini(&f->batch);
	kvf_index_fini(&f->index);
	free(f);
}

static uint64_t stat_of(kva_fleet *f, size_t i)
{
	return atomic_load_explicit(&f->stats[i], memory_order_relaxed);
}

enum { OP_LIVE, OP_BIG, OP_REPLAY, OP_END, OP_RETRY, OP_GIVE_UP, OP_COUNT };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!zctx) {
		zctx = zmq_ctx_new();
		dealer = zctx ? zmq_socket(zctx, ZMQ_DEALER) : NULL;
		FZ_CHECK(dealer);
		int zero = 0;
		zmq_setsockopt(dealer, ZMQ_LINGER, &zero, sizeof zero);
		/* the batches this harness sends decode to one stored block */
		struct kvf_batch b;
		kvf_batch_init(&b, 0, 0);
		uint8_t p[64];
		FZ_CHECK(kvf_decode(&b, p, payload(p, 12345)) == 0 && b.nhashes == 1 &&
		         b.hashes[0] == 12345 && b.events[0].type == KVF_EV_STORED);
		kvf_batch_fini(&b);
	}
	kva_fleet *f = fleet_new();
	struct publisher *pub = &f->pubs[0];
	struct fz in;
	fz_init(&in, data, size);
	uint8_t buf[64];
	for (int ops = 0; ops < 512 && fz_more(&in); ops++) {
		uint32_t gen = f->index.pubs[0].gen;
		uint64_t live = f->index.pubs[0].live;
		uint64_t stored = stat_of(f, STAT(blocks_stored));
		uint64_t bad = stat_of(f, STAT(bad_seq));
		int64_t expected = pub->expected, live_last = pub->live_last;
		bool replaying = pub->replaying;
		int op = fz_u8(&in) % OP_COUNT;
		int64_t seq = seq_of(&in, pub);
		bool out_of_range = seq < 0 || seq == INT64_MAX;
		FZ_TRACE("op %d seq %lld (expected %lld, live_last %lld, replaying %d, held %u)\n", op,
		         (long long)seq, (long long)expected, (long long)live_last, replaying,
		         pub->nheld);
		switch (op) {
		case OP_LIVE:
			kvf_on_live(f, pub, seq, buf, payload(buf, seq), false);
			break;
		case OP_BIG: /* over max_message_bytes: its number only */
			kvf_on_live(f, pub, seq, NULL, 0, true);
			break;
		case OP_REPLAY:
			kvf_on_replay(f, pub, seq, buf, payload(buf, seq), false);
			break;
		case OP_END:
			kvf_on_replay(f, pub, -1, NULL, 0, false);
			break;
		case OP_RETRY: /* the deadline passed (io_thread.c's tick) */
			if (pub->replaying)
				kvf_replay_request(f, pub, pub->expected);
			break;
		default: /* the last try passed: given up (the tick) */
			if (pub->replaying) {
				pub->held_overflow = false;
				kvf_replay_end(f, pub);
			}
		}
		bool dropped = f->index.pubs[0].gen != gen;
		uint64_t applied = stat_of(f, STAT(blocks_stored)) - stored;
		if (!dropped) {
			/* every apply stored a number not applied since the last drop */
			FZ_CHECK(f->index.pubs[0].live - live == applied);
			FZ_CHECK(pub->expected >= expected);
		}
		/* a replay returns what PUB already sent */
		if (op == OP_REPLAY && applied)
			FZ_CHECK(seq <= live_last);
		bool refused = ((op == OP_LIVE || op == OP_BIG) && out_of_range) ||
		               (op == OP_REPLAY && replaying && out_of_range && seq != -1);
		if (refused) { /* counted, and nothing moved */
			FZ_CHECK(stat_of(f, STAT(bad_seq)) == bad + 1);
			FZ_CHECK(pub->expected == expected && pub->live_last == live_last);
			FZ_CHECK(pub->replaying == replaying && applied == 0 && !dropped);
		}
		FZ_CHECK(pub->expected >= 0);
		FZ_CHECK(pub->nheld <= MAX_PENDING);
		FZ_CHECK(pub->held_bytes <= ((size_t)64 << 20));
		FZ_CHECK(f->index.live == f->index.pubs[0].live);
	}
	/* every entry is a number a publisher may give out */
	for (size_t i = 0; i <= f->index.mask; i++) {
		const struct kvf_slot *s = &f->index.slots[i];
		if (s->loc1 && (s->flags >> KVF_GEN_SHIFT) == f->index.pubs[0].gen)
			FZ_CHECK((int64_t)s->hash >= 0 && (int64_t)s->hash != INT64_MAX);
	}
	fleet_free(f);
	return 0;
}
