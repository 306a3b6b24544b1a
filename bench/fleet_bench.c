/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvadmit-fleet-bench: the fleet directory (fleet/, docs/fleet.md) under
 * load, over inproc:// in one process. Three numbers:
 *   ingest     block events indexed per second by the I/O thread (one core):
 *              pre-encoded vLLM-shaped batches (map layout, 16 BlockStored
 *              events of 32 blocks, 16 token ids a block) through PUB/SUB,
 *              decoded and indexed; timed from the first send to the last
 *              block counted in the fleet's stats
 *   memory     index bytes per indexed block (the table at that load) and
 *              at the cap's full load
 *   latency    lookup enqueued -> kva_lookup_answer returned, while the
 *              publisher keeps streaming (the fleet's own histogram)
 * Usage: kvadmit-fleet-bench [BATCHES] (default 4000; the smoke test: 50).
 */
#define _GNU_SOURCE
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "kvadmit/fleet.h"
#include "tsan_libzmq.h"

#define EVENTS 16
#define BLOCKS 32
#define BS 16

static uint64_t mono(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void str(msgpack_packer *pk, const char *s)
{
	msgpack_pack_str(pk, strlen(s));
	msgpack_pack_str_body(pk, s, strlen(s));
}

static msgpack_sbuffer encode(uint64_t first_hash)
{
	msgpack_sbuffer sb;
	msgpack_sbuffer_init(&sb);
	msgpack_packer pk;
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 3);
	str(&pk, "ts");
	msgpack_pack_double(&pk, 1.0);
	str(&pk, "events");
	msgpack_pack_array(&pk, EVENTS);
	for (int e = 0; e < EVENTS; e++) {
		msgpack_pack_map(&pk, 8);
		str(&pk, "type");
		str(&pk, "BlockStored");
		str(&pk, "block_hashes");
		msgpack_pack_array(&pk, BLOCKS);
		for (int b = 0; b < BLOCKS; b++)
			msgpack_pack_uint64(&pk, (first_hash + (uint64_t)(e * BLOCKS + b)) *
			                             0x9e3779b97f4a7c15ull);
		str(&pk, "parent_block_hash");
		msgpack_pack_nil(&pk);
		str(&pk, "token_ids");
		msgpack_pack_array(&pk, BLOCKS * BS);
		for (int t = 0; t < BLOCKS * BS; t++)
			msgpack_pack_uint32(&pk, 1000 + (uint32_t)t * 37);
		str(&pk, "block_size");
		msgpack_pack_int(&pk, BS);
		str(&pk, "lora_id");
		msgpack_pack_nil(&pk);
		str(&pk, "medium");
		str(&pk, "GPU");
		str(&pk, "lora_name");
		msgpack_pack_nil(&pk);
	}
	str(&pk, "data_parallel_rank");
	msgpack_pack_int(&pk, 0);
	return sb;
}

static uint64_t seq;
static void pub_send(void *pub, const msgpack_sbuffer *sb)
{
	unsigned char s[8];
	for (int i = 0; i < 8; i++)
		s[i] = (unsigned char)(seq >> (56 - 8 * i));
	seq++;
	zmq_send(pub, "", 0, ZMQ_SNDMORE);
	zmq_send(pub, s, 8, ZMQ_SNDMORE);
	zmq_send(pub, sb->data, sb->size, 0);
}

static kva_fleet_stats st(kva_fleet *f)
{
	kva_fleet_stats s;
	kva_fleet_stats_get(f, &s);
	return s;
}

int main(int argc, char **argv)
{
	int nb = argc > 1 ? atoi(argv[1]) : 4000;
	void *z = zmq_ctx_new();
	void *pub = zmq_socket(z, ZMQ_PUB);
	int hwm = 0;
	zmq_setsockopt(pub, ZMQ_SNDHWM, &hwm, sizeof hwm);
	if (zmq_bind(pub, "inproc://fleet-bench") != 0)
		return 1;
	kva_fleet_publisher p = {.endpoint = "inproc://fleet-bench", .self = 1};
	kva_fleet_config fc;
	kva_fleet_config_default(&fc);
	fc.publishers = &p;
	fc.npublishers = 1;
	fc.zmq_context = z;
	fc.max_blocks = (uint64_t)nb * EVENTS * BLOCKS + 1024;
	int err;
	kva_fleet *f = kva_fleet_create(&fc, &err);
	if (!f)
		return 2;
	msgpack_sbuffer *batches = calloc((size_t)nb, sizeof(*batches));
	for (int i = 0; i < nb; i++)
		batches[i] = encode((uint64_t)i * EVENTS * BLOCKS + 1);
	msgpack_sbuffer empty;
	msgpack_sbuffer_init(&empty);
	msgpack_packer pk;
	msgpack_packer_init(&pk, &empty, msgpack_sbuffer_write);
	msgpack_pack_array(&pk, 2);
	msgpack_pack_double(&pk, 0);
	msgpack_pack_array(&pk, 0);
	while (st(f).batches == 0) { /* the subscription is live */
		pub_send(pub, &empty);
		usleep(1000);
	}

	/* ingest */
	uint64_t total = (uint64_t)nb * EVENTS * BLOCKS, base = st(f).blocks_stored;
	uint64_t t0 = mono();
	for (int i = 0; i < nb; i++)
		pub_send(pub, &batches[i]);
	while (st(f).blocks_stored - base < total)
		usleep(100);
	double secs = (double)(mono() - t0) / 1e9;
	kva_fleet_stats s = st(f);
	printf("fleet ingest: %llu block events (%d batches of %d BlockStored x %d blocks, %zu bytes "
	       "each) in %.3f s: %.2f M block events/s, %.0f k batches/s\n",
	       (unsigned long long)total, nb, EVENTS, BLOCKS, batches[0].size, secs,
	       (double)total / secs / 1e6, nb / secs / 1e3);
	printf("fleet memory: %llu entries, index %llu bytes: %.1f bytes/block now, %.1f at the cap "
	       "(%llu entries)\n",
	       (unsigned long long)s.blocks, (unsigned long long)s.index_bytes,
	       (double)s.index_bytes / (double)s.blocks, (double)s.index_bytes / (double)s.index_cap,
	       (unsigned long long)s.index_cap);

	/* lookups under load: an engine whose lookups the fleet answers while
	 * the publisher re-sends the batches (refreshes: same entries) */
	kva_config c;
	kva_config_default(&c);
	c.total_pages = 1u << 20;
	c.page_tokens = BS;
	c.lookup = kva_fleet_lookup;
	c.lookup_ctx = f;
	c.lookup_timeout_ns = 60ull * 1000000000ull;
	c.start_ns = mono();
	kva_engine *e = kva_engine_create(&c, &err);
	if (!e)
		return 3;
	kva_fleet_attach(f, e);
	uint64_t chain[BLOCKS];
	for (int b = 0; b < BLOCKS; b++)
		chain[b] = (uint64_t)(b + 1) * 0x9e3779b97f4a7c15ull;
	kva_fleet_chain_register(f, 77, chain, BLOCKS);
	static kva_admission adm[256];
	static uint32_t pages[1 << 16];
	static kva_copy_job copies[256];
	static kva_ended ended[256];
	int nl = nb < 2000 ? nb : 2000;
	uint64_t lbase = st(f).answered;
	for (int i = 0; i < nl; i++) {
		pub_send(pub, &batches[i % nb]);
		kva_request r = {.id = (uint64_t)i + 1, .prefix_key = 77, .prompt_tokens = BLOCKS * BS};
		kva_handle h;
		kva_submit(e, &r, &h);
		kva_plan plan = {.admitted = adm, .admitted_cap = 256, .pages = pages,
		                 .pages_cap = 1 << 16, .copies = copies, .copies_cap = 256,
		                 .ended = ended, .ended_cap = 256};
		kva_step(e, mono(), &plan);
		for (uint32_t k = 0; k < plan.n_copies; k++)
			kva_copy_done(e, copies[k].token, copies[k].rank, 0);
		for (uint32_t k = 0; k < plan.n_admitted; k++)
			kva_finish(e, adm[k].handle);
	}
	while (st(f).answered - lbase < (uint64_t)nl && st(f).answer_errors == 0)
		usleep(100);
	s = st(f);
	static const char *bucket[14] = {"1us",   "2us",   "5us", "10us", "20us", "50us", "100us",
	                                 "200us", "500us", "1ms", "2ms",  "5ms",  "10ms", "more"};
	uint64_t n = 0, p50 = 0, p99 = 0, cum = 0;
	for (int b = 0; b < 14; b++)
		n += s.answer_ns_buckets[b];
	for (int b = 0; b < 14; b++) {
		cum += s.answer_ns_buckets[b];
		if (!p50 && cum * 2 >= n)
			p50 = (uint64_t)b + 1;
		if (!p99 && cum * 100 >= n * 99)
			p99 = (uint64_t)b + 1;
	}
	printf("fleet lookup->answer under load: %llu lookups (32-block chain, %u matched), mean "
	       "%.1f us, p50 <= %s, p99 <= %s, max %.1f us\n",
	       (unsigned long long)n, BLOCKS, n ? (double)s.answer_ns_sum / (double)n / 1e3 : 0.0,
	       p50 ? bucket[p50 - 1] : "-", p99 ? bucket[p99 - 1] : "-",
	       (double)s.answer_ns_max / 1e3);
	printf("fleet stats: malformed %llu, gaps %llu, misses %llu, answer errors %llu\n",
	       (unsigned long long)s.malformed, (unsigned long long)s.gaps,
	       (unsigned long long)s.misses, (unsigned long long)s.answer_errors);
	kva_fleet_destroy(f);
	kva_engine_destroy(e);
	for (int i = 0; i < nb; i++)
		msgpack_sbuffer_destroy(&batches[i]);
	msgpack_sbuffer_destroy(&empty);
	free(batches);
	zmq_close(pub);
	zmq_ctx_term(z);
	return s.malformed || s.answer_errors ? 4 : 0;
}
