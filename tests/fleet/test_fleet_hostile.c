/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The fleet directory against a misbehaving publisher (docs/fleet.md,
 * "Security"), each attacker bounded and local over tcp://127.0.0.1: a
 * frame far over max_message_bytes, forged replay numbers, live numbers no
 * publisher gives out, a stalled I/O thread under a flood of lookups, a
 * huge batch's decode buffers, timeouts near UINT64_MAX. Hash flooding and
 * clear storms: test_fleet_index.c and bench/fleet_attack_bench.c.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <msgpack.h>
#include <setjmp.h>
#include <signal.h>
#include <stdalign.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>
#include <zmq.h>

#include "apply.h"
#include "fleet_engine.h"
#include "fleet_mode.h"
#include "fleet_pub.h"
#include "chain.h"
#include "fleet_state.h"
#include "holders.h"
#include "unhash.h"
#include "tsan_libzmq.h"

#define WAIT_NS (30ull * 1000000000ull)

static uint64_t mono(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static kva_fleet_stats stats(kva_fleet *f)
{
	kva_fleet_stats s;
	kva_fleet_stats_get(f, &s);
	return s;
}

static int64_t seq_of(kva_fleet *f)
{
	int64_t s = -1;
	kva_fleet_publisher_seq(f, 0, &s);
	return s;
}

/* Polls until cond holds (answering replays of tp, if any), or fails. */
#define WAIT_UNTIL(tp, cond)                                                                 \
	do {                                                                                 \
		uint64_t _end = mono() + WAIT_NS;                                            \
		while (!(cond)) {                                                            \
			assert_true(mono() < _end);                                          \
			if (tp)                                                              \
				tp_service(tp);                                              \
			usleep(1000);                                                        \
		}                                                                            \
	} while (0)

static kva_fleet *fleet_for(const char *ep, const char *rep, void (*tweak)(kva_fleet_config *))
{
	kva_fleet_publisher p = {.endpoint = ep, .replay_endpoint = rep};
	kva_fleet_config fc;
	kva_fleet_config_default(&fc);
	fleet_mode_apply(&fc);
	fc.publishers = &p;
	fc.npublishers = 1;
	if (tweak)
		tweak(&fc);
	int err = 1;
	kva_fleet *f = kva_fleet_create(&fc, &err);
	assert_int_equal(err, 0);
	return f;
}

/* Until the fleet applied a batch of tp (the subscription is live). */
static void sync_with(kva_fleet *f, struct tp *tp)
{
	uint64_t end = mono() + WAIT_NS;
	while (stats(f).batches == 0) {
		assert_true(mono() < end);
		tp_empty(tp);
		for (int k = 0; k < 20 && stats(f).batches == 0; k++) {
			tp_service(tp);
			usleep(1000);
		}
	}
}

static void caught_up(kva_fleet *f, struct tp *tp)
{
	WAIT_UNTIL(tp, seq_of(f) == tp_next_seq(tp));
}

/* ---- a frame far over max_message_bytes ---- */

static long vm_kib(const char *field)
{
	FILE *fp = fopen("/proc/self/status", "r");
	char line[256];
	long v = -1;
	size_t n = strlen(field);
	while (fp && fgets(line, sizeof line, fp))
		if (strncmp(line, field, n) == 0)
			v = atol(line + n);
	if (fp)
		fclose(fp);
	return v;
}

static const unsigned char EMPTY[] = {0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x90, 0x00};

static void send3(void *pub, uint64_t seq, const void *data, size_t len)
{
	unsigned char s[8];
	for (int i = 0; i < 8; i++)
		s[i] = (unsigned char)(seq >> (56 - 8 * i));
	zmq_send(pub, "kv", 2, ZMQ_SNDMORE);
	zmq_send(pub, s, 8, ZMQ_SNDMORE);
	zmq_send(pub, data, len, 0);
}

/* The attacker, in a child process (its memory is not the fleet's): empty
 * batches until told, then one 128 MiB frame (from pages never written:
 * it costs the child no memory either), then empty batches until the
 * parent closes its pipe. */
static void big_sender(int to_parent, int from_parent)
{
	void *z = zmq_ctx_new();
	void *pub = zmq_socket(z, ZMQ_PUB);
	char ep[128] = "";
	size_t len = sizeof ep;
	if (zmq_bind(pub, "tcp://127.0.0.1:*") || zmq_getsockopt(pub, ZMQ_LAST_ENDPOINT, ep, &len))
		_exit(1);
	if (write(to_parent, ep, sizeof ep) != (ssize_t)sizeof ep)
		_exit(1);
	fcntl(from_parent, F_SETFL, O_NONBLOCK);
	uint64_t seq = 0;
	char c;
	ssize_t r;
	while ((r = read(from_parent, &c, 1)) != 1) {
		if (r == 0) /* the parent is gone */
			_exit(1);
		send3(pub, seq++, EMPTY, sizeof EMPTY);
		usleep(5000);
	}
	size_t big = (size_t)128 << 20;
	zmq_msg_t m;
	if (zmq_msg_init_size(&m, big))
		_exit(1);
	unsigned char s[8] = {0};
	s[7] = (unsigned char)seq++;
	zmq_send(pub, "kv", 2, ZMQ_SNDMORE);
	zmq_send(pub, s, 8, ZMQ_SNDMORE);
	zmq_msg_send(&m, pub, 0);
	for (int i = 0; i < 6000 && read(from_parent, &c, 1) != 0; i++) {
		send3(pub, seq++, EMPTY, sizeof EMPTY);
		usleep(5000);
	}
	_exit(0);
}

static void max_1mib(kva_fleet_config *c) { c->max_message_bytes = 1u << 20; }

/* One frame of 128 MiB against max_message_bytes of 1 MiB: libzmq received
 * all of it before the fleet could count it oversized (the peak memory rose
 * 128 MiB). ZMQ_MAXMSGSIZE (twice the limit) drops the connection at the
 * frame's header instead: the peak stays put. */
static void big_frame_is_never_buffered_whole(void **st)
{
	(void)st;
	int up[2], down[2];
	assert_int_equal(pipe(up), 0);
	assert_int_equal(pipe(down), 0);
	pid_t child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		close(up[0]), close(down[1]);
		big_sender(up[1], down[0]);
	}
	close(up[1]), close(down[0]);
	char ep[128];
	assert_int_equal(read(up[0], ep, sizeof ep), (ssize_t)sizeof ep);
	kva_fleet *f = fleet_for(ep, NULL, max_1mib);
	WAIT_UNTIL(NULL, stats(f).batches > 0);
	FILE *clear = fopen("/proc/self/clear_refs", "w"); /* the peak starts again from now */
	assert_non_null(clear);
	fputs("5", clear);
	fclose(clear);
	long base = vm_kib("VmHWM:");
	assert_true(base > 0);
	assert_int_equal(write(down[1], "g", 1), 1);
	WAIT_UNTIL(NULL, stats(f).oversized > 0 || stats(f).publishers_down > 0);
	usleep(200000);
	long peak = vm_kib("VmHWM:");
	kva_fleet_destroy(f);
	close(down[1]);
	close(up[0]);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	assert_true(peak - base < 32 * 1024); /* KiB */
}

/* ---- one C publisher over 127.0.0.1 ---- */

struct one {
	void *z;
	struct tp *tp;
	kva_fleet *f;
};

/* A publisher and a fleet listening to it, the subscription live. */
static struct one one_new(void (*tweak)(kva_fleet_config *))
{
	struct one o = {.z = zmq_ctx_new()};
	o.tp = tp_new(o.z);
	assert_non_null(o.tp);
	o.f = fleet_for(tp_pub_endpoint(o.tp), tp_replay_endpoint(o.tp), tweak);
	sync_with(o.f, o.tp);
	return o;
}

static void one_free(struct one *o)
{
	kva_fleet_destroy(o->f);
	tp_free(o->tp);
	zmq_ctx_term(o->z);
}

/* ---- sequence numbers ---- */

/* A replay answer numbered 2^62: `expected` jumped there and the next
 * live batches were all duplicates (0 blocks). A replayed number above the
 * highest live one is refused and counted; the live stream goes on. */
static void forged_replay_number_cannot_skip_the_stream(void **st)
{
	(void)st;
	struct one o = one_new(NULL);
	struct tp *tp = o.tp;
	kva_fleet *f = o.f;
	caught_up(f, tp);
	kva_fleet_stats s0 = stats(f);
	tp_replay_forge(tp, (int64_t)1 << 62);
	tp_lost(tp);
	tp_empty(tp); /* the gap seen: a replay, answered with the forged number first */
	for (uint64_t h = 1; h <= 50; h++)
		tp_store(tp, &h, 1, 16, NULL, -1, 0);
	caught_up(f, tp);
	/* The live batches past the gap may all be applied before the replay
	 * request reaches tp (a loaded machine): answer it until the forged
	 * number has been seen and refused. */
	WAIT_UNTIL(tp, stats(f).replay_refused > s0.replay_refused);
	kva_fleet_stats s = stats(f);
	assert_int_equal(s.blocks, 50);
	assert_int_equal(s.restarts, s0.restarts);
	one_free(&o);
}

/* Live numbers no publisher gives out: a negative one was a restart (every
 * entry of the publisher dropped by one 50-byte message), INT64_MAX a gap
 * whose next number overflowed. Both are refused and counted; the stream
 * and the entries stay. */
static void live_numbers_out_of_range_are_refused(void **st)
{
	(void)st;
	struct one o = one_new(NULL);
	struct tp *tp = o.tp;
	kva_fleet *f = o.f;
	uint64_t a = 7, b = 8;
	tp_store(tp, &a, 1, 16, NULL, -1, 0);
	caught_up(f, tp);
	kva_fleet_stats s0 = stats(f);
	tp_live_as(tp, -5);
	tp_live_as(tp, INT64_MAX);
	tp_live_as(tp, INT64_MIN);
	tp_store(tp, &b, 1, 16, NULL, -1, 0);
	caught_up(f, tp);
	kva_fleet_stats s = stats(f);
	assert_int_equal(s.bad_seq - s0.bad_seq, 3);
	assert_int_equal(s.restarts, s0.restarts);
	assert_int_equal(s.gaps, s0.gaps);
	assert_int_equal(s.entries_dropped, s0.entries_dropped);
	assert_int_equal(s.blocks, 2);
	one_free(&o);
}

static void never_time_out(kva_fleet_config *c) { c->replay_timeout_ns = UINT64_MAX; }

/* replay_timeout_ns near UINT64_MAX wrapped the deadline to "at once": the
 * replay was retried and given up within two ticks. Saturated, it waits. */
static void huge_timeouts_mean_never(void **st)
{
	(void)st;
	struct one o = one_new(never_time_out);
	struct tp *tp = o.tp;
	kva_fleet *f = o.f;
	caught_up(f, tp);
	kva_fleet_stats s0 = stats(f);
	tp_replay_mode(tp, TP_REPLAY_HOLD);
	tp_lost(tp);
	tp_empty(tp);
	WAIT_UNTIL(NULL, stats(f).replays_requested > s0.replays_requested);
	usleep(300000); /* six ticks of the I/O thread */
	kva_fleet_stats s = stats(f);
	assert_int_equal(s.replay_retries, s0.replay_retries);
	tp_replay_mode(tp, TP_REPLAY_NORMAL);
	caught_up(f, tp);
	one_free(&o);
}

/* ---- the command queue while the I/O thread is stalled ---- */

static atomic_int log_hold, log_in;

static void hold_log(void *ctx, int level, const char *msg)
{
	(void)ctx, (void)level;
	if (!strstr(msg, "malformed") || !atomic_load(&log_hold))
		return;
	atomic_store(&log_in, 1);
	while (atomic_load(&log_hold))
		usleep(1000);
}

static void with_hold_log(kva_fleet_config *c) { c->log = hold_log; }

/* With the I/O thread stalled (here in the log callback), every lookup was
 * a queued allocation, without bound. Past 65,536 waiting, a lookup is
 * finished at once (a miss, lookups_shed) on the caller's thread. */
static void lookups_past_the_queue_bound_are_shed(void **st)
{
	(void)st;
	struct one o = one_new(with_hold_log);
	struct tp *tp = o.tp;
	kva_fleet *f = o.f;
	atomic_store(&log_hold, 1);
	tp_raw(tp, "\xc1", 1); /* malformed: logged, and the log holds the thread */
	WAIT_UNTIL(tp, atomic_load(&log_in));
	const uint32_t extra = 1000;
	for (uint32_t i = 0; i < KVF_MAX_QUEUED_LOOKUPS + extra; i++)
		kva_fleet_lookup(f, i, 16, (kva_lookup_token){0});
	assert_int_equal(stats(f).lookups_shed, extra);
	assert_int_equal(kva_fleet_lookups_done(f), extra); /* finished at once */
	atomic_store(&log_hold, 0);
	WAIT_UNTIL(NULL, kva_fleet_lookups_done(f) == KVF_MAX_QUEUED_LOOKUPS + extra);
	assert_int_equal(stats(f).lookups, KVF_MAX_QUEUED_LOOKUPS);
	one_free(&o);
}

/* ---- decode buffers ---- */

/* A batch of 200,000 removals grew the decode buffers to 1.6 MB of hashes
 * (and more for a batch of max_message_bytes), kept for good. They go back
 * after such a batch. White-box: the fleet's apply step on its own. */
static void decode_buffers_shrink_after_a_large_batch(void **st)
{
	(void)st;
	/* aligned as create() does: its inbox is alignas(64), and calloc's 16
	 * bytes honour that only by chance of the heap's layout (UBSan) */
	size_t size = (sizeof(kva_fleet) + alignof(kva_fleet) - 1) / alignof(kva_fleet) *
	              alignof(kva_fleet);
	kva_fleet *f = aligned_alloc(alignof(kva_fleet), size);
	assert_non_null(f);
	memset(f, 0, size);
	assert_int_equal(kvf_index_init(&f->index, 64), 0);
	f->pubs = calloc(KVA_FLEET_MAX_PUBLISHERS, sizeof(*f->pubs));
	f->pubs[0].endpoint = "test";
	kva_fleet_config_default(&f->cfg);
	fleet_mode_apply(&f->cfg);
	kvf_batch_init(&f->batch, 0, 0);
	msgpack_sbuffer sb;
	msgpack_sbuffer_init(&sb);
	msgpack_packer pk;
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_array(&pk, 3);
	msgpack_pack_double(&pk, 0);
	msgpack_pack_array(&pk, 1);
	msgpack_pack_array(&pk, 4);
	msgpack_pack_str(&pk, 12);
	msgpack_pack_str_body(&pk, "BlockRemoved", 12);
	msgpack_pack_array(&pk, 200000);
	for (uint32_t i = 0; i < 200000; i++)
		msgpack_pack_uint64(&pk, i);
	msgpack_pack_nil(&pk);
	msgpack_pack_nil(&pk);
	msgpack_pack_int(&pk, 0);
	kvf_apply_batch(f, &f->pubs[0], (const uint8_t *)sb.data, sb.size);
	assert_int_equal(stats(f).blocks_removed, 200000); /* decoded and applied */
	assert_true(f->batch.hashes_cap <= 65536);
	msgpack_sbuffer_destroy(&sb);
	kvf_batch_fini(&f->batch);
	kvf_index_fini(&f->index);
	free(f->pubs);
	free(f);
}

/* ---- what one publisher may take of what the fleet shares ---- */

static kva_fleet *fleet_for2(struct tp *a, struct tp *b, void (*tweak)(kva_fleet_config *))
{
	kva_fleet_publisher p[2] = {
	    {.endpoint = tp_pub_endpoint(a), .replay_endpoint = tp_replay_endpoint(a)},
	    {.endpoint = tp_pub_endpoint(b), .replay_endpoint = tp_replay_endpoint(b)}};
	kva_fleet_config fc;
	kva_fleet_config_default(&fc);
	fleet_mode_apply(&fc);
	fc.publishers = p;
	fc.npublishers = 2;
	if (tweak)
		tweak(&fc);
	int err = 1;
	kva_fleet *f = kva_fleet_create(&fc, &err);
	assert_int_equal(err, 0);
	return f;
}

static int64_t seq_of_id(kva_fleet *f, uint32_t id)
{
	int64_t s = -1;
	kva_fleet_publisher_seq(f, id, &s);
	return s;
}

/* Both publishers live, every batch so far applied. */
static void sync2(kva_fleet *f, struct tp **tp)
{
	for (uint32_t i = 0; i < 2; i++) {
		uint64_t end = mono() + WAIT_NS;
		while (seq_of_id(f, i) <= 0) {
			assert_true(mono() < end);
			tp_empty(tp[i]);
			for (int k = 0; k < 20 && seq_of_id(f, i) <= 0; k++) {
				tp_service(tp[0]), tp_service(tp[1]);
				usleep(1000);
			}
		}
	}
}

static void caught_up2(kva_fleet *f, struct tp **tp)
{
	for (uint32_t i = 0; i < 2; i++)
		WAIT_UNTIL(tp[i], seq_of_id(f, i) == tp_next_seq(tp[i]));
}

static void cap_1024(kva_fleet_config *c) { c->max_blocks = 1024; }

/* 20,000 random blocks from one publisher into a cap of 1,024: the cap's
 * CLOCK took the other publisher's entries too (an honest checkpoint
 * evicted). Past its share (half the cap, two publishers) only the
 * flooding publisher's entries go. Reads the I/O thread's index after
 * kva_fleet_publisher_seq's acquire, while it is idle. */
static void one_publisher_cannot_evict_the_others(void **st)
{
	(void)st;
	void *z = zmq_ctx_new();
	struct tp *tp[2] = {tp_new(z), tp_new(z)};
	kva_fleet *f = fleet_for2(tp[0], tp[1], cap_1024);
	sync2(f, tp);
	uint64_t honest[8];
	for (int i = 0; i < 8; i++)
		honest[i] = 900000 + (uint64_t)i;
	tp_store(tp[0], honest, 8, 16, NULL, -1, 0);
	caught_up2(f, tp);
	uint64_t flood[1000];
	for (int round = 0; round < 20; round++) {
		for (int i = 0; i < 1000; i++)
			flood[i] = 1000000 * (uint64_t)(round + 2) + (uint64_t)i;
		tp_store(tp[1], flood, 1000, 16, NULL, -1, 0);
		caught_up2(f, tp);
	}
	assert_int_equal(kvf_holders_pub_live(f, 0), 8);
	assert_true(stats(f).cap_evictions >= 20000 - 1024);
	kva_fleet_destroy(f);
	tp_free(tp[0]), tp_free(tp[1]);
	zmq_ctx_term(z);
}

/* 63 invented medium names from one publisher filled the fleet's table of
 * 64: the other's "CPU" copies were skipped (ignored_media). Now a
 * publisher adds at most 8 names. */
static void one_publisher_cannot_fill_the_medium_table(void **st)
{
	(void)st;
	void *z = zmq_ctx_new();
	struct tp *tp[2] = {tp_new(z), tp_new(z)};
	kva_fleet *f = fleet_for2(tp[0], tp[1], NULL);
	sync2(f, tp);
	char name[16];
	for (uint64_t i = 0; i < 63; i++) {
		uint64_t h = 5000 + i;
		snprintf(name, sizeof name, "bogus%u", (unsigned)i);
		tp_store(tp[1], &h, 1, 16, name, -1, 0);
	}
	caught_up2(f, tp);
	assert_int_equal(stats(f).ignored_media, 63 - 8);
	uint64_t honest[4] = {11, 12, 13, 14};
	tp_store(tp[0], honest, 4, 16, "CPU", -1, 0);
	caught_up2(f, tp);
	assert_int_equal(kvf_holders_pub_live(f, 0), 4);
	assert_int_equal(stats(f).ignored_media, 63 - 8);
	kva_fleet_destroy(f);
	tp_free(tp[0]), tp_free(tp[1]);
	zmq_ctx_term(z);
}

/* An engine whose lookups the fleet answers (as tests/fleet/test_fleet.c's). */
struct eng {
	kva_engine *e;
	kva_plan plan;
	kva_admission adm[16];
	uint32_t pages[1024];
	kva_copy_job copies[16];
	kva_fallback fb[16];
	kva_ended ended[16];
};

static void eng_init(struct eng *g, kva_fleet *f)
{
	kva_config c;
	fleet_test_engine_config(&c, f, 16, mono());
	int err = 1;
	g->e = kva_engine_create(&c, &err);
	assert_int_equal(err, 0);
	assert_int_equal(kva_fleet_attach(f, g->e), 0);
}

static void eng_step(struct eng *g)
{
	g->plan = (kva_plan){.admitted = g->adm, .admitted_cap = 16, .pages = g->pages,
	                     .pages_cap = 1024, .copies = g->copies, .copies_cap = 16,
	                     .fallbacks = g->fb, .fallbacks_cap = 16, .ended = g->ended,
	                     .ended_cap = 16};
	assert_true(kva_step(g->e, mono(), &g->plan) >= 0);
}

/* A request for prefix key, stepped until the fleet answered `done`
 * lookups in all. */
static void eng_lookup(struct eng *g, kva_fleet *f, uint64_t id, uint64_t key, uint64_t done)
{
	kva_request r = {.id = id, .prefix_key = key, .prompt_tokens = 13 * 16};
	kva_handle h;
	assert_int_equal(kva_submit(g->e, &r, &h), 0);
	uint64_t end = mono() + WAIT_NS;
	while (kva_fleet_lookups_done(f) < done) {
		assert_true(mono() < end);
		eng_step(g);
		usleep(1000);
	}
}

/* One publisher claims the chain's longest prefixes on 8 media: an answer
 * held its 8 claims and not the honest publisher's shorter checkpoint
 * (each request then paid 8 failed copies before recomputing). Now one
 * publisher has at most 2 checkpoints in an answer; and a copy the host
 * reports failed (kva_fleet_report_failure) quarantines its (publisher,
 * medium): left out of the answers that follow. Watches (one per answered
 * checkpoint) tell who was answered. */
static void one_publisher_cannot_fill_the_manifest(void **st)
{
	(void)st;
	void *z = zmq_ctx_new();
	struct tp *tp[2] = {tp_new(z), tp_new(z)};
	kva_fleet *f = fleet_for2(tp[0], tp[1], NULL);
	sync2(f, tp);
	uint64_t chain[12];
	for (int i = 0; i < 12; i++)
		chain[i] = 7001 + (uint64_t)i;
	assert_int_equal(kva_fleet_chain_register(f, 42, chain, 12), 0);
	tp_store(tp[0], chain, 4, 16, NULL, -1, 0);
	char name[8];
	for (uint32_t n = 5; n <= 12; n++) {
		snprintf(name, sizeof name, "m%u", n);
		tp_store(tp[1], chain, n, 16, name, -1, 0);
	}
	caught_up2(f, tp);
	struct eng *g = calloc(1, sizeof(*g));
	eng_init(g, f);
	eng_lookup(g, f, 1, 42, 1);
	assert_int_equal(f->pubs[1].watches, 2); /* its two longest */
	assert_int_equal(f->pubs[0].watches, 1); /* the honest one kept */

	/* the engine restores from the longest (m12); the copy fails */
	uint64_t end = mono() + WAIT_NS;
	do {
		assert_true(mono() < end);
		eng_step(g);
	} while (g->plan.n_copies == 0);
	kva_copy_job job = g->copies[0];
	assert_int_equal(job.position, 12 * 16);
	assert_int_equal(kva_fleet_report_failure(f, job.checkpoint_id), 0);
	kva_copy_done(g->e, job.token, job.rank, -5);
	WAIT_UNTIL(NULL, stats(f).failures_reported == 1);
	kva_fleet_stats s0 = stats(f);
	eng_lookup(g, f, 2, 42, kva_fleet_lookups_done(f) + 1);
	kva_fleet_stats s = stats(f);
	assert_int_equal(s.quarantine_skips - s0.quarantine_skips, 1); /* m12 left out */
	assert_int_equal(kva_fleet_report_failure(f, 0), -EINVAL);
	assert_int_equal(kva_fleet_report_failure(NULL, 1), -EINVAL);
	assert_int_equal(kva_fleet_report_failure(f, 12345), 0); /* no such watch */
	WAIT_UNTIL(NULL, stats(f).failures_unknown == 1);
	kva_fleet_destroy(f);
	kva_engine_destroy(g->e);
	free(g);
	tp_free(tp[0]), tp_free(tp[1]);
	zmq_ctx_term(z);
}

/* ---- authentication ---- */

static char fleet_pk[41], fleet_sk[41];

static void with_fleet_keys(kva_fleet_config *c)
{
	c->curve_public_key = fleet_pk;
	c->curve_secret_key = fleet_sk;
}

/* Without authentication anyone who can reach the fleet's connection to a
 * publisher's address is believed. With the publisher's CURVE server key
 * configured, its real stream is applied, while an impersonator at its
 * address (no CURVE, or CURVE with another key pair) gets nothing in, and
 * malformed keys are refused. */
static void curve_keys_shut_out_impersonators(void **st)
{
	(void)st;
	if (!zmq_has("curve"))
		skip();
	char pub_pk[41], pub_sk[41], other_pk[41], other_sk[41];
	assert_int_equal(zmq_curve_keypair(fleet_pk, fleet_sk), 0);
	assert_int_equal(zmq_curve_keypair(pub_pk, pub_sk), 0);
	assert_int_equal(zmq_curve_keypair(other_pk, other_sk), 0);
	void *z = zmq_ctx_new();
	struct tp *honest = tp_new_curve(z, pub_sk);
	struct tp *plain = tp_new(z);              /* at an address the fleet trusts */
	struct tp *forger = tp_new_curve(z, other_sk); /* CURVE, the wrong key pair */
	assert_non_null(honest), assert_non_null(plain), assert_non_null(forger);
	kva_fleet_publisher p[3] = {
	    {.endpoint = tp_pub_endpoint(honest), .replay_endpoint = tp_replay_endpoint(honest),
	     .curve_server_key = pub_pk},
	    {.endpoint = tp_pub_endpoint(plain), .replay_endpoint = tp_replay_endpoint(plain),
	     .curve_server_key = pub_pk},
	    {.endpoint = tp_pub_endpoint(forger), .replay_endpoint = tp_replay_endpoint(forger),
	     .curve_server_key = pub_pk}};
	kva_fleet_config fc;
	kva_fleet_config_default(&fc);
	fleet_mode_apply(&fc);
	fc.publishers = p;
	fc.npublishers = 3;
	int err = 1;
	assert_null(kva_fleet_create(&fc, &err)); /* server keys without the fleet's pair */
	assert_int_equal(err, -EINVAL);
	with_fleet_keys(&fc);
	fc.curve_secret_key = "short";
	assert_null(kva_fleet_create(&fc, &err));
	assert_int_equal(err, -EINVAL);
	with_fleet_keys(&fc);
	kva_fleet *f = kva_fleet_create(&fc, &err);
	assert_int_equal(err, 0);
	uint64_t end = mono() + WAIT_NS;
	while (seq_of_id(f, 0) <= 0) { /* the honest stream, replayed from 0 and live */
		assert_true(mono() < end);
		tp_empty(honest), tp_empty(plain), tp_empty(forger);
		for (int k = 0; k < 20; k++) {
			tp_service(honest), tp_service(plain), tp_service(forger);
			usleep(1000);
		}
	}
	for (uint64_t h = 1; h <= 20; h++) {
		tp_store(plain, &h, 1, 16, NULL, -1, 0);
		tp_store(forger, &h, 1, 16, NULL, -1, 0);
	}
	uint64_t mine = 77;
	tp_store(honest, &mine, 1, 16, NULL, -1, 0);
	WAIT_UNTIL(honest, seq_of_id(f, 0) == tp_next_seq(honest));
	for (int k = 0; k < 200; k++) { /* the others' had as long, and more */
		tp_service(plain), tp_service(forger);
		usleep(1000);
	}
	assert_int_equal(seq_of_id(f, 1), 0);
	assert_int_equal(seq_of_id(f, 2), 0);
	assert_int_equal(stats(f).blocks, 1);
	kva_fleet_publisher bad = {.endpoint = "tcp://127.0.0.1:9", .curve_server_key = "x"};
	assert_int_equal(kva_fleet_add_publisher(f, &bad), -EINVAL);
	kva_fleet_destroy(f);
	tp_free(honest), tp_free(plain), tp_free(forger);
	zmq_ctx_term(z);
}

/* ---- hash flooding of the chain map ---- */

static void chains_8192(kva_fleet_config *c) { c->max_chains = 8192; }

/* 4,096 prefix keys crafted to share one home of the chain map under
 * kva_hash64 (its home before it was keyed): each registration probed the
 * run before it. Keyed, they spread. White-box: the map is read after a
 * lookup behind them finished (kva_fleet_lookups_done's acquire). */
static void crafted_prefix_keys_do_not_share_a_home(void **st)
{
	(void)st;
	kva_fleet *f = fleet_for("tcp://127.0.0.1:9", NULL, chains_8192);
	uint64_t h = 1;
	for (uint64_t k = 1; k <= 4096; k++) /* kva_hash64(key) has its low 40 bits zero */
		assert_int_equal(kva_fleet_chain_register(f, kva_test_unhash64(k << 40), &h, 1), 0);
	kva_fleet_lookup(f, 1, 16, (kva_lookup_token){0}); /* after them in the queue */
	WAIT_UNTIL(NULL, kva_fleet_lookups_done(f) == 1);
	/* the longest run of taken slots: every probe stays within it */
	size_t n = 0, run = 0, longest = 0;
	for (size_t i = 0; i <= 2 * f->chain_mask + 1; i++) { /* twice round: a run that wraps */
		bool taken = f->chain_map[i & f->chain_mask] != NULL;
		n += taken && i <= f->chain_mask;
		run = taken ? run + 1 : 0;
		longest = run > longest ? run : longest;
	}
	assert_int_equal(n, 4096);
	assert_true(longest < 64); /* 4,096 before: one run */
	assert_int_equal(stats(f).chains_refused, 0);
	kva_fleet_destroy(f);
}

/* ---- misuse ---- */

/* struct kva_fleet has alignas(64) members (its command queue): it came
 * from calloc (16 bytes). Fleets created in turn, all aligned. */
static void fleets_are_aligned(void **st)
{
	(void)st;
	kva_fleet *keep[8];
	for (int i = 0; i < 8; i++) {
		void *spacer = malloc((size_t)16 * (i + 1));
		keep[i] = fleet_for("tcp://127.0.0.1:9", NULL, NULL);
		assert_int_equal((uintptr_t)keep[i] % alignof(struct kva_fleet), 0);
		free(spacer);
	}
	for (int i = 0; i < 8; i++)
		kva_fleet_destroy(keep[i]);
}

/* kva_fleet_lookup(NULL, ...) dereferenced it. */
static void lookup_on_no_fleet_returns(void **st)
{
	(void)st;
	kva_fleet_lookup(NULL, 1, 16, (kva_lookup_token){0});
	assert_int_equal(kva_fleet_lookups_done(NULL), 0);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(big_frame_is_never_buffered_whole), /* first: it forks */
		cmocka_unit_test(forged_replay_number_cannot_skip_the_stream),
		cmocka_unit_test(live_numbers_out_of_range_are_refused),
		cmocka_unit_test(huge_timeouts_mean_never),
		cmocka_unit_test(lookups_past_the_queue_bound_are_shed),
		cmocka_unit_test(decode_buffers_shrink_after_a_large_batch),
		cmocka_unit_test(lookup_on_no_fleet_returns),
		cmocka_unit_test(fleets_are_aligned),
		cmocka_unit_test(one_publisher_cannot_evict_the_others),
		cmocka_unit_test(one_publisher_cannot_fill_the_medium_table),
		cmocka_unit_test(one_publisher_cannot_fill_the_manifest),
		cmocka_unit_test(curve_keys_shut_out_impersonators),
		cmocka_unit_test(crafted_prefix_keys_do_not_share_a_home),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
