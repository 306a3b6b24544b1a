/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The fleet directory over real sockets on loopback (tcp://127.0.0.1, ports
 * the kernel picks): C publishers (fleet_pub.c, msgpack-c, array_like
 * batches) and one in Python (pypub.py, python3-msgpack, map batches as
 * vLLM's msgspec writes them), a real engine whose lookups the fleet answers.
 * Every wait polls with a generous deadline; nothing asserts on a sleep.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>
#include <zmq.h>

#include "fleet_engine.h"
#include "fleet_mode.h"
#include "fleet_pub.h"
#include "kvadmit/fleet.h"
#include "score_reference.h"
#include "tsan_libzmq.h"
#include "thread_signals.h"

extern char **environ;


#define BS 16
#define WAIT_NS (60ull * 1000000000ull)
#define KEY 0x5eedull

static uint64_t mono(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

struct fx {
	void *zctx;
	kva_fleet *f;
	kva_engine *e;
	struct tp *tp[4];
	int ntp;
	kva_plan plan;
	kva_admission adm[64];
	uint32_t pages[1 << 12];
	kva_copy_job copies[64];
	kva_fallback fb[64];
	kva_ended ended[64];
	FILE *py_in, *py_out;
	pid_t py;
};

static void pump(struct fx *x)
{
	for (int i = 0; i < x->ntp; i++)
		tp_service(x->tp[i]);
	x->plan.admitted = x->adm, x->plan.admitted_cap = 64;
	x->plan.pages = x->pages, x->plan.pages_cap = 1 << 12;
	x->plan.copies = x->copies, x->plan.copies_cap = 64;
	x->plan.fallbacks = x->fb, x->plan.fallbacks_cap = 64;
	x->plan.ended = x->ended, x->plan.ended_cap = 64;
	assert_true(kva_step(x->e, mono(), &x->plan) >= 0);
}

static kva_fleet_stats stats(struct fx *x)
{
	kva_fleet_stats s;
	kva_fleet_stats_get(x->f, &s);
	return s;
}

/* A wait that ran out: what it waited for and the stream's counters, so
 * that a failure on a loaded CI machine says where the stream stood. */
static void wait_failed(struct fx *x, const char *cond)
{
	kva_fleet_stats s = stats(x);
	print_error("WAIT_UNTIL(%s) ran out: batches %llu blocks %llu gaps %llu replays_requested "
	            "%llu replay_retries %llu replay_batches %llu lost_batches %llu duplicates "
	            "%llu restarts %llu bad_frames %llu malformed %llu\n",
	            cond, (unsigned long long)s.batches, (unsigned long long)s.blocks,
	            (unsigned long long)s.gaps, (unsigned long long)s.replays_requested,
	            (unsigned long long)s.replay_retries, (unsigned long long)s.replay_batches,
	            (unsigned long long)s.lost_batches, (unsigned long long)s.duplicates,
	            (unsigned long long)s.restarts, (unsigned long long)s.bad_frames,
	            (unsigned long long)s.malformed);
	fail();
}

/* Polls until cond holds (pumping publishers and the engine), or fails. */
#define WAIT_UNTIL(x, cond)                                                                  \
	do {                                                                                 \
		uint64_t _end = mono() + WAIT_NS;                                            \
		while (!(cond)) {                                                            \
			if (mono() >= _end)                                                  \
				wait_failed(x, #cond);                                       \
			pump(x);                                                             \
			usleep(1000);                                                        \
		}                                                                            \
	} while (0)

static uint64_t fx_drop_after_ns;    /* 0: the default */
static uint64_t fx_replay_timeout_ns; /* 0: the default */
static uint64_t fx_max_blocks;        /* 0: the default */
static uint32_t fx_max_pending;       /* 0: the default */
static uint32_t fx_max_chains;        /* 0: the default */
static uint32_t fx_state_groups;      /* 0: the default (none) */
static uint64_t fx_watch_ns;          /* 0: the default */
static uint8_t fx_score;              /* cfg.score */
static const kva_fleet_block_size *fx_block_sizes; /* cfg.block_sizes */
static uint32_t fx_nblock_sizes;
static uint32_t fx_media_per_pub;     /* 0: the default */
static uint32_t fx_manifest_per_pub;  /* 0: the default */

/* Publishers: ntp C ones, plus endpoints given by the caller (the Python
 * one); publisher `self` is this engine's own. */
static struct fx *fx_new(int ntp, const char *extra_pub, const char *extra_rep,
                         uint32_t max_msg, int self)
{
	struct fx *x = calloc(1, sizeof(*x));
	x->zctx = zmq_ctx_new();
	kva_fleet_publisher pubs[5];
	int n = 0;
	for (int i = 0; i < ntp; i++) {
		x->tp[i] = tp_new(x->zctx);
		assert_non_null(x->tp[i]);
		pubs[n++] = (kva_fleet_publisher){.endpoint = tp_pub_endpoint(x->tp[i]),
		                                  .replay_endpoint = tp_replay_endpoint(x->tp[i]),
		                                  .self = i == self};
	}
	x->ntp = ntp;
	if (extra_pub) {
		pubs[n] = (kva_fleet_publisher){.endpoint = extra_pub, .replay_endpoint = extra_rep,
		                                .self = n == self};
		n++;
	}
	kva_fleet_config fc;
	kva_fleet_config_default(&fc);
	fleet_mode_apply(&fc);
	fc.publishers = pubs;
	fc.npublishers = (uint32_t)n;
	fc.local_media = "GPU";
	if (fx_drop_after_ns)
		fc.drop_after_ns = fx_drop_after_ns;
	if (fx_replay_timeout_ns)
		fc.replay_timeout_ns = fx_replay_timeout_ns;
	if (fx_max_blocks)
		fc.max_blocks = fx_max_blocks;
	if (fx_max_pending)
		fc.max_pending = fx_max_pending;
	if (fx_max_chains)
		fc.max_chains = fx_max_chains;
	if (fx_state_groups)
		fc.state_groups = fx_state_groups;
	if (fx_watch_ns)
		fc.watch_ns = fx_watch_ns;
	fc.score = fx_score || fleet_mode_score();
	fc.block_sizes = fx_block_sizes;
	fc.nblock_sizes = fx_nblock_sizes;
	if (fx_media_per_pub)
		fc.max_media_per_publisher = fx_media_per_pub;
	if (fx_manifest_per_pub)
		fc.max_manifest_per_publisher = fx_manifest_per_pub;
	if (max_msg)
		fc.max_message_bytes = max_msg;
	int err = 1;
	x->f = kva_fleet_create(&fc, &err);
	assert_int_equal(err, 0);
	assert_non_null(x->f);

	kva_config c;
	fleet_test_engine_config(&c, x->f, 64, mono());
	x->e = kva_engine_create(&c, &err);
	assert_int_equal(err, 0);
	assert_int_equal(kva_fleet_attach(x->f, x->e), 0);
	return x;
}

static void fx_free(struct fx *x)
{
	kva_fleet_destroy(x->f); /* before the engine */
	kva_engine_destroy(x->e);
	for (int i = 0; i < x->ntp; i++)
		tp_free(x->tp[i]);
	zmq_ctx_term(x->zctx);
	free(x);
}

/* Until the fleet has applied a batch from C publisher i (the subscription
 * is live: later batches are not lost to ZeroMQ's slow joiner). */
static void fx_sync(struct fx *x, int i)
{
	uint64_t before = stats(x).batches;
	uint64_t end = mono() + WAIT_NS;
	while (stats(x).batches == before) {
		assert_true(mono() < end);
		tp_empty(x->tp[i]);
		for (int k = 0; k < 20 && stats(x).batches == before; k++) {
			pump(x);
			usleep(1000);
		}
	}
}

/* Until every batch published so far by C publisher i has been applied. */
static void fx_settle(struct fx *x, uint64_t batches)
{
	WAIT_UNTIL(x, stats(x).batches >= batches);
}

static int64_t fx_seq(struct fx *x, uint32_t id)
{
	int64_t seq = -1;
	kva_fleet_publisher_seq(x->f, id, &seq);
	return seq;
}

/* Until the fleet applied every number C publisher i (fleet id i) gave out. */
static void fx_caught_up(struct fx *x, int i)
{
	WAIT_UNTIL(x, fx_seq(x, (uint32_t)i) == tp_next_seq(x->tp[i]));
}

/* Caught up with C publisher i, and no replay of it running: a last batch,
 * sent live after everything else, was applied (a running replay would
 * have held it to its end). Statistics stand still after this. */
static void fx_quiet(struct fx *x, int i)
{
	tp_empty(x->tp[i]);
	fx_caught_up(x, i);
}

/* A running request holding 99 of the 100 pages: restores wait. */
static kva_handle fx_hog(struct fx *x)
{
	kva_request r = {.id = 1, .prompt_tokens = 16};
	kva_handle h;
	assert_int_equal(kva_submit(x->e, &r, &h), 0);
	kva_request_info in;
	WAIT_UNTIL(x, kva_query(x->e, h, &in) == 0 && in.state == KVA_STATE_RUNNING);
	assert_int_equal(kva_grow(x->e, h, 98, NULL), 0);
	return h;
}

static kva_handle fx_submit(struct fx *x, uint64_t id, uint64_t key, uint32_t prompt)
{
	kva_request r = {.id = id, .prefix_key = key, .prompt_tokens = prompt};
	kva_handle h;
	assert_int_equal(kva_submit(x->e, &r, &h), 0);
	return h;
}

static kva_request_info info(struct fx *x, kva_handle h)
{
	kva_request_info in;
	assert_int_equal(kva_query(x->e, h, &in), 0);
	return in;
}

static const uint64_t CHAIN[8] = {101, 102, 103, 104, 105, 106, 107, 108};

static void register_chain(struct fx *x)
{
	assert_int_equal(kva_fleet_chain_register(x->f, KEY, CHAIN, 8), 0);
}

/* Three C publishers at once: this engine's GPU (6 blocks, local), its CPU
 * offload (4 blocks, external), another node (2 blocks, external). The longest
 * is selected; removing one of its blocks reaches the waiting request as an
 * eviction, which looks up again and takes the next longest (rule
 * eviction-revalidates, local or external selections). */
static void several_publishers_longest_first_and_removal_reaches_waiting(void **st)
{
	(void)st;
	struct fx *x = fx_new(3, NULL, NULL, 0, 0);
	for (int i = 0; i < 3; i++)
		fx_sync(x, i);
	register_chain(x);
	uint64_t b0 = stats(x).batches;
	tp_store(x->tp[0], CHAIN, 6, BS, NULL, -1, 0);
	tp_store(x->tp[0], CHAIN, 4, BS, "CPU", -1, 0);
	tp_store(x->tp[1], CHAIN, 2, BS, "GPU", 0, 0);
	tp_store(x->tp[2], &CHAIN[1], 5, BS, "GPU", 0, 0); /* not a prefix: useless */
	fx_settle(x, b0 + 4);
	fx_hog(x);
	kva_handle h = fx_submit(x, 2, KEY, 8 * BS);
	WAIT_UNTIL(x, info(x, h).has_selection);
	kva_request_info in = info(x, h);
	assert_int_equal(in.selected_position, 6 * BS);
	assert_int_equal(in.selected_location, KVA_LOC_LOCAL);
	assert_int_equal(in.state, KVA_STATE_WAITING);

	tp_remove(x->tp[0], &CHAIN[3], 1, NULL, -1); /* this engine evicts block 3 */
	WAIT_UNTIL(x, info(x, h).lookups == 2 && info(x, h).has_selection &&
	                  info(x, h).selected_position == 4 * BS);
	assert_true(stats(x).evictions_reported >= 1);
	assert_int_equal(info(x, h).selected_location, KVA_LOC_EXTERNAL); /* CPU offload */
	kva_fleet_stats s = stats(x);
	assert_int_equal(s.malformed, 0);
	assert_int_equal(s.lost_batches, 0);
	assert_int_equal(s.blocks, 5 + 4 + 2 + 5);
	assert_int_equal(s.answered, 2);
	fx_free(x);
}

/* Every thread the fleet starts, its I/O thread and ZeroMQ's own (started
 * at the first socket), blocks every signal, although the thread that
 * creates the fleet does not: a host's SIGINT handler never runs on them. */
static void fleet_threads_block_every_signal(void **st)
{
	(void)st;
	sigset_t none, old;
	sigemptyset(&none);
	pthread_sigmask(SIG_SETMASK, &none, &old);
	int before = 0;
	assert_int_equal(threads_taking_signals(&before), 0); /* no ZeroMQ context of ours left */
	/* Its own context (none given): nobody listens there; connects are
	 * asynchronous, so create still succeeds. */
	kva_fleet_publisher pub = {.endpoint = "tcp://127.0.0.1:9"};
	kva_fleet_config fc;
	kva_fleet_config_default(&fc);
	fleet_mode_apply(&fc);
	fc.publishers = &pub;
	fc.npublishers = 1;
	int err = 1, others = 0;
	kva_fleet *f = kva_fleet_create(&fc, &err);
	assert_int_equal(err, 0);
	assert_int_equal(threads_taking_signals(&others), 0);
	/* the I/O thread, ZeroMQ's reaper and its I/O thread */
	assert_true(others >= before + 3);
	kva_fleet_destroy(f);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* A batch the subscriber never saw (sent only into the replay buffer) is
 * fetched from the ROUTER endpoint; nothing is lost. */
static void gap_is_recovered_through_replay(void **st)
{
	(void)st;
	struct fx *x = fx_new(1, NULL, NULL, 0, 0);
	fx_sync(x, 0);
	register_chain(x);
	kva_fleet_stats s0 = stats(x);
	tp_store(x->tp[0], &CHAIN[0], 2, BS, NULL, -1, 0);
	tp_store(x->tp[0], &CHAIN[2], 2, BS, NULL, -1, 1 /* skipped: a gap */);
	tp_store(x->tp[0], &CHAIN[4], 2, BS, NULL, -1, 0);
	fx_settle(x, s0.batches + 3);
	kva_fleet_stats s = stats(x);
	assert_int_equal(s.gaps - s0.gaps, 1);
	assert_true(s.replays_requested > s0.replays_requested);
	assert_int_equal(s.lost_batches, 0);
	assert_int_equal(s.blocks, 6);
	fx_hog(x);
	kva_handle h = fx_submit(x, 2, KEY, 8 * BS);
	WAIT_UNTIL(x, info(x, h).has_selection);
	assert_int_equal(info(x, h).selected_position, 6 * BS);
	assert_int_equal(info(x, h).selected_location, KVA_LOC_LOCAL);
	fx_free(x);
}

/* Replay replies in both framings, told apart per reply: 3 frames (vLLM
 * before v0.26, SGLang) and 4 with the topic (vLLM v0.26 on, PR #45177).
 * A gap is recovered and a publisher that joins late gets its history, in
 * each; nothing lands in bad_frames. */
static void replay_in_both_framings_gap_and_late_join(void **st)
{
	(void)st;
	for (int frames = 3; frames <= 4; frames++) {
		fx_replay_timeout_ns = 30ull * 1000000000ull; /* as in the Python one below */
		struct fx *x = fx_new(1, NULL, NULL, 0, 0);
		fx_replay_timeout_ns = 0;
		tp_reply_frames(x->tp[0], frames);
		fx_sync(x, 0);
		register_chain(x);
		kva_fleet_stats s0 = stats(x);
		tp_store(x->tp[0], &CHAIN[0], 2, BS, NULL, -1, 0);
		tp_store(x->tp[0], &CHAIN[2], 2, BS, NULL, -1, 1 /* skipped: a gap */);
		tp_store(x->tp[0], &CHAIN[4], 2, BS, NULL, -1, 0);
		fx_quiet(x, 0);
		kva_fleet_stats s = stats(x);
		assert_int_equal(s.gaps - s0.gaps, 1);
		assert_int_equal(s.lost_batches, 0);
		assert_int_equal(s.bad_frames, 0);
		assert_int_equal(s.blocks, 6);

		/* joins late: its first batches were published before anyone listened */
		x->tp[1] = tp_new(x->zctx);
		assert_non_null(x->tp[1]);
		x->ntp = 2;
		tp_reply_frames(x->tp[1], frames);
		tp_store(x->tp[1], CHAIN, 8, BS, "CPU", -1, 1);
		tp_store(x->tp[1], CHAIN, 3, BS, "disk", -1, 1);
		kva_fleet_publisher np = {.endpoint = tp_pub_endpoint(x->tp[1]),
		                          .replay_endpoint = tp_replay_endpoint(x->tp[1])};
		assert_int_equal(kva_fleet_add_publisher(x->f, &np), 1);
		uint64_t end = mono() + WAIT_NS;
		while (fx_seq(x, 1) <= 2) { /* slow joiner: send until one arrives */
			assert_true(mono() < end);
			tp_empty(x->tp[1]);
			for (int k = 0; k < 20 && fx_seq(x, 1) <= 2; k++) {
				pump(x);
				usleep(1000);
			}
		}
		fx_quiet(x, 1);
		s = stats(x);
		assert_int_equal(s.bad_frames, 0);
		assert_int_equal(s.lost_batches, 0);
		assert_int_equal(s.blocks, 6 + 8 + 3);
		fx_hog(x);
		kva_handle h = fx_submit(x, 2, KEY, 8 * BS);
		WAIT_UNTIL(x, info(x, h).has_selection);
		assert_int_equal(info(x, h).selected_position, 8 * BS); /* the late joiner's CPU */
		fx_free(x);
	}
}

/* The restart tests' start: publisher 0 holds 6 blocks of CHAIN and
 * publisher 1 one; a waiting request (*h) has selected publisher 0's 6. */
static struct fx *six_blocks_selected(kva_handle *h)
{
	struct fx *x = fx_new(2, NULL, NULL, 0, 0);
	fx_sync(x, 0);
	fx_sync(x, 1);
	register_chain(x);
	uint64_t b0 = stats(x).batches;
	tp_store(x->tp[0], CHAIN, 6, BS, NULL, -1, 0);
	tp_store(x->tp[1], CHAIN, 1, BS, NULL, -1, 0);
	fx_settle(x, b0 + 2);
	fx_hog(x);
	*h = fx_submit(x, 2, KEY, 8 * BS);
	WAIT_UNTIL(x, info(x, *h).has_selection);
	assert_int_equal(info(x, *h).selected_position, 6 * BS);
	return x;
}

/* Sequence back to 0: the old process's blocks are dropped, the new
 * process's count; a waiting request that selected the old ones hears of it. */
static void publisher_restart_drops_its_entries(void **st)
{
	(void)st;
	kva_handle h;
	struct fx *x = six_blocks_selected(&h);
	tp_restart(x->tp[0]);
	tp_store(x->tp[0], CHAIN, 3, BS, NULL, -1, 0); /* sequence 0 again */
	WAIT_UNTIL(x, stats(x).restarts == 1 && info(x, h).lookups == 2 &&
	                  info(x, h).has_selection && info(x, h).selected_position == 3 * BS);
	assert_int_equal(info(x, h).selected_location, KVA_LOC_LOCAL);
	assert_int_equal(stats(x).blocks, 3 + 1);
	fx_free(x);
}

/* A quick restart: the publisher's process goes and another binds the same
 * endpoints and has already numbered past the old sequence before the
 * subscriber reconnects, so the numbers never go back. The reconnect alone
 * makes it a new process: the old blocks are not answered any more (the
 * waiting request that selected them looks up again), the new process's
 * blocks are. */
static void quick_restart_on_reconnect_is_a_new_process(void **st)
{
	(void)st;
	kva_handle h;
	struct fx *x = six_blocks_selected(&h);
	kva_fleet_stats s0 = stats(x);
	int64_t old_next = tp_next_seq(x->tp[0]);
	assert_int_equal(tp_reopen(x->tp[0], old_next + 5), 0);
	uint64_t end = mono() + WAIT_NS;
	while (fx_seq(x, 0) != tp_next_seq(x->tp[0])) { /* until the new stream is applied */
		assert_true(mono() < end);
		tp_empty(x->tp[0]);
		for (int k = 0; k < 20 && fx_seq(x, 0) != tp_next_seq(x->tp[0]); k++) {
			pump(x);
			usleep(1000);
		}
	}
	WAIT_UNTIL(x, info(x, h).lookups == 2 && info(x, h).has_selection);
	assert_int_equal(info(x, h).selected_position, 1 * BS); /* the other node's block */
	tp_store(x->tp[0], CHAIN, 2, BS, NULL, -1, 0); /* the new process's own */
	fx_quiet(x, 0);
	kva_fleet_stats s = stats(x);
	assert_true(s.reconnects >= 1);
	assert_int_equal(s.restarts - s0.restarts, 0); /* the numbers never went back */
	assert_int_equal(s.blocks, 1 + 2);
	fx_free(x);
}

/* AllBlocksCleared empties the publisher; the waiting request looks up
 * again, finds nothing and falls back to recompute (MISS). */
static void cleared_publisher_reaches_waiting_request(void **st)
{
	(void)st;
	struct fx *x = fx_new(2, NULL, NULL, 0, 1);
	fx_sync(x, 0);
	fx_sync(x, 1);
	register_chain(x);
	uint64_t b0 = stats(x).batches;
	tp_store(x->tp[1], CHAIN, 5, BS, NULL, -1, 0);
	fx_settle(x, b0 + 1);
	fx_hog(x);
	kva_handle h = fx_submit(x, 2, KEY, 8 * BS);
	WAIT_UNTIL(x, info(x, h).has_selection);
	assert_int_equal(info(x, h).selected_position, 5 * BS);
	tp_clear(x->tp[1]);
	WAIT_UNTIL(x, info(x, h).lookups == 2 && info(x, h).reason == KVA_REASON_MISS);
	assert_int_equal(stats(x).clears, 1);
	assert_int_equal(stats(x).blocks, 0);
	fx_free(x);
}

/* Publisher 0 (this engine) stores 2 blocks of the chain locally,
 * publisher 1 (another node) 6 on its GPU; a request submitted behind a
 * blocked head selects the longer, external one. */
static kva_handle waits_on_external(struct fx *x)
{
	uint64_t b0 = stats(x).batches;
	tp_store(x->tp[0], CHAIN, 2, BS, NULL, -1, 0); /* this engine: local */
	tp_store(x->tp[1], CHAIN, 6, BS, "GPU", 0, 0); /* another node: external */
	fx_settle(x, b0 + 2);
	fx_hog(x);
	kva_handle h = fx_submit(x, 2, KEY, 8 * BS);
	WAIT_UNTIL(x, info(x, h).has_selection);
	assert_int_equal(info(x, h).selected_position, 6 * BS);
	assert_int_equal(info(x, h).selected_location, KVA_LOC_EXTERNAL);
	return h;
}

/* A publisher that disappears (its connection drops): it is left out of
 * answers at once and its entries are dropped after drop_after_ns; the
 * waiting request that selected its (external) checkpoint hears of it and
 * takes this engine's own shorter one. */
static void vanished_publisher_is_dropped_and_reaches_waiting(void **st)
{
	(void)st;
	fx_drop_after_ns = 300ull * 1000000ull;
	struct fx *x = fx_new(2, NULL, NULL, 0, 0);
	fx_drop_after_ns = 0;
	fx_sync(x, 0);
	fx_sync(x, 1);
	register_chain(x);
	kva_handle h = waits_on_external(x);
	tp_free(x->tp[1]); /* the other node goes away */
	x->tp[1] = NULL;
	x->ntp = 1;
	WAIT_UNTIL(x, stats(x).publishers_down == 1);
	WAIT_UNTIL(x, stats(x).publishers_dropped == 1 && info(x, h).lookups == 2 &&
	                  info(x, h).has_selection && info(x, h).selected_position == 2 * BS);
	assert_int_equal(info(x, h).selected_location, KVA_LOC_LOCAL);
	assert_int_equal(stats(x).blocks, 2);
	fx_free(x);
}

/* A publisher added after create is subscribed to (its id is the one
 * kva_fleet_publisher_seq reports progress for); removing it drops its
 * entries and reaches the waiting request that selected its checkpoint, as
 * a vanished publisher does. Added again, it is a late joiner: replayed from
 * 0. An endpoint zmq refuses is counted and its id freed. */
static void publisher_added_and_removed_after_create(void **st)
{
	(void)st;
	struct fx *x = fx_new(1, NULL, NULL, 0, 0);
	fx_sync(x, 0);
	register_chain(x);
	x->tp[1] = tp_new(x->zctx);
	assert_non_null(x->tp[1]);
	x->ntp = 2;
	kva_fleet_publisher np = {.endpoint = tp_pub_endpoint(x->tp[1]),
	                          .replay_endpoint = tp_replay_endpoint(x->tp[1])};
	assert_int_equal(kva_fleet_add_publisher(x->f, NULL), -EINVAL);
	int id = kva_fleet_add_publisher(x->f, &np);
	assert_int_equal(id, 1); /* the first free id after create's 0 */
	fx_sync(x, 1);
	int64_t seq = -1;
	assert_int_equal(kva_fleet_publisher_seq(x->f, (uint32_t)id, &seq), 0);
	assert_true(seq >= 1);
	assert_int_equal(kva_fleet_publisher_seq(x->f, 7, &seq), -ENOENT);
	kva_handle h = waits_on_external(x);
	assert_true(kva_fleet_lookups_done(x->f) >= 1);

	assert_int_equal(kva_fleet_remove_publisher(x->f, (uint32_t)id), 0);
	assert_int_equal(kva_fleet_remove_publisher(x->f, (uint32_t)id), -ENOENT);
	WAIT_UNTIL(x, stats(x).publishers_removed == 1 && info(x, h).lookups == 2 &&
	                  info(x, h).has_selection && info(x, h).selected_position == 2 * BS);
	assert_int_equal(info(x, h).selected_location, KVA_LOC_LOCAL);
	assert_int_equal(stats(x).blocks, 2);
	assert_true(stats(x).evictions_reported >= 1);

	/* back again: it joins late and is replayed from 0 */
	WAIT_UNTIL(x, kva_fleet_publisher_seq(x->f, (uint32_t)id, &seq) == -ENOENT);
	id = kva_fleet_add_publisher(x->f, &np);
	assert_true(id >= 1);
	WAIT_UNTIL(x, (tp_empty(x->tp[1]), stats(x).blocks == 2 + 6));
	assert_int_equal(stats(x).lost_batches, 0);

	kva_fleet_publisher bad = {.endpoint = "nonsense://nowhere"};
	int bid = kva_fleet_add_publisher(x->f, &bad);
	assert_true(bid >= 0);
	WAIT_UNTIL(x, stats(x).publisher_errors == 1);
	WAIT_UNTIL(x, kva_fleet_publisher_seq(x->f, (uint32_t)bid, &seq) == -ENOENT);

	/* removed at once, maybe before the I/O thread opened it: in order */
	int qid = kva_fleet_add_publisher(x->f, &np);
	assert_true(qid >= 0);
	assert_int_equal(kva_fleet_remove_publisher(x->f, (uint32_t)qid), 0);
	WAIT_UNTIL(x, stats(x).publishers_removed == 2);
	assert_int_equal(stats(x).blocks, 2 + 6);
	fx_free(x);
}

struct churn {
	kva_fleet *f;
	int ids[16];
	int n;
};

/* Another thread adds publishers (nobody listens at their endpoints: ZeroMQ
 * keeps trying) and removes every second one. */
static void *churn_thread(void *arg)
{
	struct churn *c = arg;
	char ep[64];
	for (int i = 0; i < 16; i++) {
		snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", 1 + i);
		kva_fleet_publisher p = {.endpoint = ep};
		c->ids[i] = kva_fleet_add_publisher(c->f, &p);
		if (c->ids[i] >= 0 && i % 2 && kva_fleet_remove_publisher(c->f, (uint32_t)c->ids[i]) == 0)
			c->n++;
	}
	return NULL;
}

/* Publishers added and removed from other threads while the engine's
 * lookups go on: distinct ids, every removal done, lookups answered. */
static void publishers_churn_from_other_threads(void **st)
{
	(void)st;
	struct fx *x = fx_new(1, NULL, NULL, 0, 0);
	fx_sync(x, 0);
	register_chain(x);
	uint64_t b0 = stats(x).batches;
	tp_store(x->tp[0], CHAIN, 3, BS, NULL, -1, 0);
	fx_settle(x, b0 + 1);
	struct churn c[2] = {{.f = x->f}, {.f = x->f}};
	pthread_t t[2];
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&t[i], NULL, churn_thread, &c[i]), 0);
	fx_hog(x);
	kva_handle h = fx_submit(x, 2, KEY, 8 * BS);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < 32; i++) {
		int a = c[i / 16].ids[i % 16];
		assert_true(a >= 1);
		for (int j = 0; j < i; j++)
			assert_true(i % 16 % 2 || j % 16 % 2 || a != c[j / 16].ids[j % 16]);
	}
	WAIT_UNTIL(x, stats(x).publishers_removed == (uint64_t)(c[0].n + c[1].n));
	assert_int_equal(c[0].n + c[1].n, 16);
	WAIT_UNTIL(x, info(x, h).has_selection);
	assert_int_equal(info(x, h).selected_position, 3 * BS);
	assert_int_equal(stats(x).publisher_errors, 0);
	fx_free(x);
}

/* Garbage payloads, wrong frame counts and oversized payloads are counted
 * and dropped; the stream goes on without a gap. */
static void malformed_and_oversized_are_counted_and_dropped(void **st)
{
	(void)st;
	struct fx *x = fx_new(1, NULL, NULL, 4096, 0);
	fx_sync(x, 0);
	register_chain(x);
	kva_fleet_stats s0 = stats(x);
	static const unsigned char junk[] = {0x93, 0xcb, 1, 2, 3}; /* truncated */
	tp_raw(x->tp[0], junk, sizeof junk);
	tp_raw(x->tp[0], "\xc1", 1);
	static const unsigned char huge_count[] = {0x92, 0x00, 0xdd, 0xff, 0xff, 0xff, 0xff};
	tp_raw(x->tp[0], huge_count, sizeof huge_count);
	tp_frames(x->tp[0], 2);
	tp_frames(x->tp[0], 5);
	char *big = calloc(1, 5000);
	tp_raw(x->tp[0], big, 5000);
	free(big);
	tp_store(x->tp[0], CHAIN, 4, BS, NULL, -1, 0);
	fx_settle(x, s0.batches + 1);
	kva_fleet_stats s = stats(x);
	assert_int_equal(s.malformed - s0.malformed, 3);
	assert_int_equal(s.bad_frames - s0.bad_frames, 2);
	assert_int_equal(s.oversized - s0.oversized, 1);
	assert_int_equal(s.gaps, s0.gaps);
	assert_int_equal(s.blocks, 4);
	fx_hog(x);
	kva_handle h = fx_submit(x, 2, KEY, 8 * BS);
	WAIT_UNTIL(x, info(x, h).has_selection);
	assert_int_equal(info(x, h).selected_position, 4 * BS);
	fx_free(x);
}

/* ---- replay rounds, restarts, clears, media, big batches ------------------- */

#define S_DELTA(a, b, field) ((a).field - (b).field)
#define NO_RETRY_NS (600ull * 1000000000ull) /* the test decides when the ROUTER answers */

/* One C publisher with the given replay timeout and held list (0: the
 * defaults): `old` empty batches (numbers a restarted process will not
 * reach), then `blocks` blocks of CHAIN stored and applied. *s0: the
 * statistics from there. */
static struct fx *one_publisher(uint64_t replay_timeout_ns, uint32_t max_pending, int old,
                                uint32_t blocks, kva_fleet_stats *s0)
{
	fx_replay_timeout_ns = replay_timeout_ns;
	fx_max_pending = max_pending;
	struct fx *x = fx_new(1, NULL, NULL, 0, 0);
	fx_replay_timeout_ns = 0;
	fx_max_pending = 0;
	fx_sync(x, 0);
	register_chain(x);
	for (int i = 0; i < old; i++)
		tp_empty(x->tp[0]);
	tp_store(x->tp[0], CHAIN, blocks, BS, NULL, -1, 0);
	fx_quiet(x, 0);
	*s0 = stats(x);
	assert_int_equal(s0->blocks, blocks);
	return x;
}

/* A replay's end marker that arrives after a live batch numbered past a
 * hole the answer could not hold: the answer was made before the missing
 * batch existed (Python's publisher answered, the test published two more,
 * the second live, and the end marker was still on the wire), so the
 * publisher still buffers it. It was counted lost and its blocks never
 * indexed; now the fleet asks again from there. */
static void hole_newer_than_the_answer_is_asked_for(void **st)
{
	(void)st;
	kva_fleet_stats s0;
	struct fx *x = one_publisher(NO_RETRY_NS, 0, 0, 2, &s0);
	struct tp *tp = x->tp[0];
	tp_replay_mode(tp, TP_REPLAY_END_LATER);
	tp_lost(tp);                                 /* a: lost on the wire */
	tp_store(tp, &CHAIN[2], 1, BS, NULL, -1, 0); /* a + 1: the gap seen */
	WAIT_UNTIL(x, stats(x).replay_batches == s0.replay_batches + 2); /* a, a + 1 */
	uint64_t m = stats(x).messages;
	tp_store(tp, &CHAIN[3], 1, BS, NULL, -1, 1); /* a + 2: after the answer, lost */
	tp_store(tp, &CHAIN[4], 1, BS, NULL, -1, 0); /* a + 3: live, held */
	WAIT_UNTIL(x, stats(x).messages == m + 1);
	tp_replay_send_end(tp); /* the first answer's end marker, late */
	WAIT_UNTIL(x, stats(x).blocks == 5);
	fx_quiet(x, 0);
	kva_fleet_stats s = stats(x);
	assert_int_equal(S_DELTA(s, s0, lost_batches), 0);
	assert_int_equal(S_DELTA(s, s0, gaps), 2); /* a, then a + 2 past the answer */
	assert_int_equal(S_DELTA(s, s0, replays_requested), 2);
	kva_handle h = fx_submit(x, 2, KEY, 8 * BS);
	WAIT_UNTIL(x, info(x, h).has_selection);
	assert_int_equal(info(x, h).selected_position, 5 * BS);
	fx_free(x);
}

/* The publisher's process dies while a replay is pending, and a new one
 * comes back on the same endpoints (numbers from 0, its first batch lost on
 * the wire). The old replay then ends without the missing batch, and the
 * held batches are applied: the old process's, then the new one's, whose
 * number goes back (a restart) and starts a replay from 0 while the rest of
 * the held list is still being handed back. Nothing is freed twice (the
 * held list is detached first), the old entries go, the new ones come. */
static void replay_begun_while_held_batches_are_applied(void **st)
{
	(void)st;
	kva_fleet_stats s0;
	struct fx *x = one_publisher(NO_RETRY_NS, 0, 4, 4, &s0);
	tp_replay_mode(x->tp[0], TP_REPLAY_HOLD); /* the old process will never answer */
	tp_lost(x->tp[0]);
	tp_empty(x->tp[0]); /* the gap seen: a replay asked for */
	WAIT_UNTIL(x, stats(x).replays_requested == s0.replays_requested + 1);
	tp_restart(x->tp[0]);
	tp_store(x->tp[0], &CHAIN[0], 1, BS, NULL, -1, 1); /* 0: lost on the wire */
	tp_store(x->tp[0], &CHAIN[1], 1, BS, NULL, -1, 0); /* 1, 2: held */
	tp_store(x->tp[0], &CHAIN[2], 1, BS, NULL, -1, 0);
	WAIT_UNTIL(x, stats(x).messages == s0.messages + 3);
	/* the new process's ROUTER gets the old request: nothing that far back */
	tp_replay_mode(x->tp[0], TP_REPLAY_NORMAL);
	fx_caught_up(x, 0);
	fx_quiet(x, 0);
	kva_fleet_stats s = stats(x);
	assert_int_equal(S_DELTA(s, s0, restarts), 1);
	assert_int_equal(S_DELTA(s, s0, entries_dropped), 4);
	assert_int_equal(S_DELTA(s, s0, gaps), 1);
	assert_int_equal(S_DELTA(s, s0, lost_batches), 1); /* the old process's lost batch */
	assert_int_equal(S_DELTA(s, s0, replays_requested), 2); /* the gap; the restart, from 0 */
	assert_int_equal(s.blocks, 3);
	fx_hog(x);
	kva_handle h = fx_submit(x, 2, KEY, 8 * BS);
	WAIT_UNTIL(x, info(x, h).has_selection);
	assert_int_equal(info(x, h).selected_position, 3 * BS);
	fx_free(x);
}

/* One publisher, a held list of 2 (max_pending) and replays that are never
 * retried: `old` empty batches (numbers a restarted process will not
 * reach), 4 blocks stored, then a gap whose replay the ROUTER holds while
 * 3 live batches come: 2 held, the 3rd past the list. *s0: the statistics
 * before the gap. */
static struct fx *gap_past_a_full_held_list(int old, kva_fleet_stats *s0)
{
	struct fx *x = one_publisher(NO_RETRY_NS, 2, old, 4, s0);
	tp_replay_mode(x->tp[0], TP_REPLAY_HOLD);
	tp_lost(x->tp[0]);
	for (int i = 0; i < 3; i++) /* the gap seen, 2 held, the 3rd past max_pending */
		tp_empty(x->tp[0]);
	WAIT_UNTIL(x, stats(x).messages == s0->messages + 3);
	return x;
}

/* The first held batch itself starts a new replay: more live batches came
 * during a replay than max_pending (2 here), so a second replay fetches the
 * rest, and while it is pending the process restarts (its first batch lost
 * on the wire, and its ROUTER buffers nothing). Handing back the held list,
 * its first batch goes back: a restart, a replay from 0, and that batch
 * held again at the same place of the list being read. The list is
 * detached first, and held batches move, so nothing is freed twice, and the
 * batches are applied intact from the held list once that replay ends. */
static void first_held_batch_starts_a_replay(void **st)
{
	(void)st;
	kva_fleet_stats s0;
	struct fx *x = gap_past_a_full_held_list(4, &s0);
	/* answered; the second replay, for what was not held, stays pending */
	tp_replay_mode(x->tp[0], TP_REPLAY_ONCE_THEN_HOLD);
	WAIT_UNTIL(x, stats(x).replays_requested == s0.replays_requested + 2);
	tp_restart(x->tp[0]);
	tp_lost(x->tp[0]);                             /* 0 */
	tp_store(x->tp[0], CHAIN, 2, BS, NULL, -1, 0); /* 1, 2: held */
	tp_store(x->tp[0], &CHAIN[2], 1, BS, NULL, -1, 0);
	WAIT_UNTIL(x, stats(x).messages == s0.messages + 5);
	tp_replay_mode(x->tp[0], TP_REPLAY_END_ONLY);
	fx_caught_up(x, 0);
	fx_quiet(x, 0);
	kva_fleet_stats s = stats(x);
	assert_int_equal(S_DELTA(s, s0, restarts), 1);
	assert_int_equal(S_DELTA(s, s0, entries_dropped), 4);
	assert_int_equal(S_DELTA(s, s0, gaps), 1);
	assert_int_equal(S_DELTA(s, s0, lost_batches), 1); /* the new process's 0 */
	assert_int_equal(S_DELTA(s, s0, replays_requested), 3); /* gap, overflow, restart */
	assert_int_equal(s.blocks, 3);
	fx_hog(x);
	kva_handle h = fx_submit(x, 2, KEY, 8 * BS);
	WAIT_UNTIL(x, info(x, h).has_selection);
	assert_int_equal(info(x, h).selected_position, 3 * BS);
	fx_free(x);
}

/* The restart's first live batch arrives while the held list is already
 * full: it cannot be held, and its "went back" mark must not be lost with
 * it. Once the replay ends, the held batches (the old process's) are
 * handed back and the restart applied: the old entries dropped, a replay
 * from 0 fetches the new process's batches, which are then all applied. */
static void restart_past_a_full_held_list_is_not_lost(void **st)
{
	(void)st;
	kva_fleet_stats s0;
	struct fx *x = gap_past_a_full_held_list(8, &s0);
	tp_restart(x->tp[0]);                              /* a new process */
	tp_store(x->tp[0], &CHAIN[4], 1, BS, NULL, -1, 0); /* its 0: marked back, not held */
	tp_store(x->tp[0], &CHAIN[5], 1, BS, NULL, -1, 0); /* 1 */
	WAIT_UNTIL(x, stats(x).messages == s0.messages + 5);
	tp_replay_mode(x->tp[0], TP_REPLAY_NORMAL); /* answers the pending replay */
	tp_store(x->tp[0], &CHAIN[6], 2, BS, NULL, -1, 0); /* 2 */
	fx_caught_up(x, 0); /* the fleet follows the new process's numbers */
	fx_quiet(x, 0);
	kva_fleet_stats s = stats(x);
	assert_int_equal(S_DELTA(s, s0, restarts), 1);
	assert_int_equal(S_DELTA(s, s0, entries_dropped), 4);
	assert_int_equal(s.blocks, 4); /* the new process's 4 blocks, CHAIN[4..7] */
	fx_free(x);
}

/* A replay that cannot return the missing batch (the publisher's buffer no
 * longer holds it): the loss is accepted once its end marker came, and the
 * held batch applied; it is not asked for again and again. A late joiner
 * whose publisher buffers nothing that far back is not a loss. */
static void replay_without_the_missing_batch_accepts_the_loss(void **st)
{
	(void)st;
	kva_fleet_stats s0;
	struct fx *x = one_publisher(NO_RETRY_NS, 0, 0, 2, &s0);
	tp_replay_mode(x->tp[0], TP_REPLAY_END_ONLY);
	tp_lost(x->tp[0]);
	tp_store(x->tp[0], &CHAIN[2], 2, BS, NULL, -1, 0);
	fx_caught_up(x, 0);
	tp_store(x->tp[0], &CHAIN[4], 1, BS, NULL, -1, 0); /* and the stream goes on */
	fx_quiet(x, 0);
	kva_fleet_stats s = stats(x);
	assert_int_equal(S_DELTA(s, s0, gaps), 1);
	assert_int_equal(S_DELTA(s, s0, replays_requested), 1);
	assert_int_equal(S_DELTA(s, s0, lost_batches), 1);
	assert_int_equal(S_DELTA(s, s0, restarts), 0);
	assert_int_equal(s.blocks, 5);

	/* a publisher added late, whose first three batches nobody buffers */
	x->tp[1] = tp_new(x->zctx);
	assert_non_null(x->tp[1]);
	x->ntp = 2;
	tp_replay_mode(x->tp[1], TP_REPLAY_END_ONLY);
	for (int i = 0; i < 3; i++)
		tp_lost(x->tp[1]);
	kva_fleet_publisher np = {.endpoint = tp_pub_endpoint(x->tp[1]),
	                          .replay_endpoint = tp_replay_endpoint(x->tp[1])};
	assert_int_equal(kva_fleet_add_publisher(x->f, &np), 1);
	uint64_t end = mono() + WAIT_NS;
	while (fx_seq(x, 1) <= 0) { /* ZeroMQ's slow joiner: send until one arrives */
		assert_true(mono() < end);
		tp_empty(x->tp[1]);
		for (int k = 0; k < 20 && fx_seq(x, 1) <= 0; k++) {
			pump(x);
			usleep(1000);
		}
	}
	fx_quiet(x, 1);
	s = stats(x);
	assert_int_equal(S_DELTA(s, s0, lost_batches), 1);
	assert_int_equal(S_DELTA(s, s0, gaps), 1);
	assert_int_equal(S_DELTA(s, s0, replays_requested), 2); /* + the late join */
	fx_free(x);
}

/* Sets up publisher 0 with CHAIN[0..3] and a replay that answers the missing
 * batch and the held one but gives no end marker (mode), after a gap. */
static struct fx *gap_with_replay_mode(kva_fleet_stats *s0, enum tp_replay mode)
{
	/* tries 0.1 s apart */
	struct fx *x = one_publisher(100ull * 1000000ull, 0, 0, 4, s0);
	tp_replay_mode(x->tp[0], mode);
	tp_lost(x->tp[0]);
	tp_store(x->tp[0], &CHAIN[4], 2, BS, NULL, -1, 0); /* held, and returned by the replay */
	return x;
}

/* The replay returns the batches but never its end marker: after 3 tries
 * the round is given up, and the held batch, which the replay already
 * returned, is a duplicate, not a publisher restart (nothing dropped). */
static void abandoned_replay_is_not_a_restart(void **st)
{
	(void)st;
	kva_fleet_stats s0;
	struct fx *x = gap_with_replay_mode(&s0, TP_REPLAY_NO_END);
	WAIT_UNTIL(x, stats(x).duplicates > s0.duplicates || stats(x).restarts > s0.restarts);
	fx_quiet(x, 0);
	kva_fleet_stats s = stats(x);
	assert_int_equal(S_DELTA(s, s0, restarts), 0);
	assert_int_equal(S_DELTA(s, s0, entries_dropped), 0);
	assert_int_equal(S_DELTA(s, s0, replay_retries), 2);
	assert_int_equal(S_DELTA(s, s0, lost_batches), 0);
	assert_int_equal(S_DELTA(s, s0, gaps), 1);
	assert_int_equal(s.blocks, 6);
	assert_int_equal(S_DELTA(s, s0, replays_requested), 3); /* asked, then 2 more tries */
	fx_free(x);
}

/* The first answer lacks its end marker, the retry's answer is whole: the
 * round ends there, and the held batch is a duplicate, not a restart. */
static void retried_replay_is_not_a_restart(void **st)
{
	(void)st;
	kva_fleet_stats s0;
	struct fx *x = gap_with_replay_mode(&s0, TP_REPLAY_NO_END_ONCE);
	WAIT_UNTIL(x, stats(x).duplicates > s0.duplicates || stats(x).restarts > s0.restarts);
	fx_quiet(x, 0);
	kva_fleet_stats s = stats(x);
	assert_int_equal(S_DELTA(s, s0, restarts), 0);
	assert_int_equal(S_DELTA(s, s0, entries_dropped), 0);
	assert_true(S_DELTA(s, s0, replay_retries) >= 1);
	assert_int_equal(S_DELTA(s, s0, lost_batches), 0);
	assert_int_equal(s.blocks, 6);
	fx_free(x);
}

/* A replay returns a batch whose live copy is still on its way (the two
 * sockets are separate connections), numbered above the last live one. A
 * replayed number above every live one is refused (a forged one would move
 * `expected` past the live stream, test_fleet_hostile.c), so the batch is
 * applied when its live copy comes: once, not a restart, nothing dropped. */
static void live_copy_after_its_replay_is_applied_once(void **st)
{
	(void)st;
	kva_fleet_stats s0;
	struct fx *x = one_publisher(NO_RETRY_NS, 0, 0, 4, &s0);
	tp_lost(x->tp[0]);
	tp_empty(x->tp[0]); /* the gap seen */
	tp_store(x->tp[0], &CHAIN[4], 2, BS, NULL, -1, 1); /* buffered; its live copy is late */
	int64_t late = tp_next_seq(x->tp[0]) - 1;
	/* the replay is over, the late one refused from it */
	WAIT_UNTIL(x, fx_seq(x, 0) == late && stats(x).replay_refused > s0.replay_refused);
	assert_int_equal(stats(x).blocks, 4);
	tp_send_buffered(x->tp[0], late);
	fx_quiet(x, 0);
	kva_fleet_stats s = stats(x);
	assert_int_equal(S_DELTA(s, s0, restarts), 0);
	assert_int_equal(S_DELTA(s, s0, entries_dropped), 0);
	assert_int_equal(S_DELTA(s, s0, replay_refused), 1);
	assert_true(S_DELTA(s, s0, duplicates) >= 1); /* the held batch */
	assert_int_equal(S_DELTA(s, s0, lost_batches), 0);
	assert_int_equal(s.blocks, 6);
	fx_free(x);
}

/* A batch of many AllBlocksCleared events, or many batches of one, never
 * scan the index table: a clear moves the publisher's generation on (O(1),
 * fleet/index.h). Before, every clear scanned it: a 16 MiB batch of clears
 * held every lookup for hours, and later one scan per message with entries
 * (52 ms each at 1M entries). Counted (index_scans), not timed. */
static void clears_scan_the_index_only_when_it_matters(void **st)
{
	(void)st;
	struct fx *x = fx_new(2, NULL, NULL, 0, 0);
	fx_sync(x, 0);
	fx_sync(x, 1);
	register_chain(x);
	tp_store(x->tp[0], CHAIN, 4, BS, NULL, -1, 0);
	tp_store(x->tp[1], CHAIN, 2, BS, NULL, -1, 0);
	fx_quiet(x, 0);
	fx_quiet(x, 1);
	assert_int_equal(stats(x).blocks, 6);

	kva_fleet_stats s0 = stats(x);
	tp_clear_rounds(x->tp[0], 1, 1000000, 0); /* publisher 0 has entries: no scan */
	fx_caught_up(x, 0);
	kva_fleet_stats s = stats(x);
	assert_int_equal(S_DELTA(s, s0, index_scans), 0);
	assert_int_equal(s.blocks, 1 + 2);

	s0 = s;
	tp_clear_rounds(x->tp[0], 2000, 2000000, 0); /* 2,000 clear + store rounds, one batch */
	fx_caught_up(x, 0);
	s = stats(x);
	assert_int_equal(S_DELTA(s, s0, clears), 2000); /* every event counts */
	assert_int_equal(S_DELTA(s, s0, blocks_stored), 2000);
	assert_int_equal(S_DELTA(s, s0, index_scans), 0); /* none, not even the last */
	assert_int_equal(s.blocks, 1 + 2); /* the last round's block, publisher 1's */

	tp_clear(x->tp[0]); /* no entries from here */
	fx_quiet(x, 0);
	s0 = stats(x);
	assert_int_equal(s0.blocks, 2);
	for (int chunk = 0; chunk < 5; chunk++) { /* within ZeroMQ's send queue */
		for (int i = 0; i < 200; i++)
			tp_clear(x->tp[0]);
		fx_caught_up(x, 0);
	}
	s = stats(x);
	assert_int_equal(S_DELTA(s, s0, clears), 1000);
	assert_int_equal(S_DELTA(s, s0, index_scans), 0); /* nothing to find */
	assert_int_equal(s.blocks, 2);

	/* a clear still reaches a waiting request: publisher 1's checkpoint */
	fx_hog(x);
	kva_handle h = fx_submit(x, 2, KEY, 8 * BS);
	WAIT_UNTIL(x, info(x, h).has_selection);
	assert_int_equal(info(x, h).selected_position, 2 * BS);
	tp_clear(x->tp[1]);
	WAIT_UNTIL(x, info(x, h).lookups == 2 && info(x, h).reason == KVA_REASON_MISS);
	assert_int_equal(stats(x).blocks, 0);
	assert_int_equal(stats(x).index_scans, s.index_scans);
	fx_free(x);
}

/* Each publisher's entry count (which lets a clear of none skip the scan)
 * follows the cap's evictions, whoever's entry they take: every clear
 * still empties its publisher. */
static void entry_counts_follow_cap_evictions(void **st)
{
	(void)st;
	fx_max_blocks = 8;
	struct fx *x = fx_new(2, NULL, NULL, 0, 0);
	fx_max_blocks = 0;
	fx_sync(x, 0);
	fx_sync(x, 1);
	static const uint64_t A[8] = {1, 2, 3, 4, 5, 6, 7, 8}, B[8] = {11, 12, 13, 14, 15, 16, 17, 18};
	tp_store(x->tp[0], A, 8, BS, NULL, -1, 0);
	fx_quiet(x, 0);
	tp_store(x->tp[1], B, 8, BS, NULL, -1, 0); /* takes publisher 0's places */
	fx_quiet(x, 1);
	tp_store(x->tp[0], A, 5, BS, "CPU", -1, 0); /* and some back */
	fx_quiet(x, 0);
	assert_int_equal(stats(x).blocks, 8);
	assert_true(stats(x).cap_evictions >= 13);
	tp_clear(x->tp[1]);
	fx_quiet(x, 1);
	uint64_t left = stats(x).blocks; /* publisher 0's */
	assert_true(left >= 1 && left <= 8);
	tp_remove(x->tp[0], A, 5, "CPU", -1);
	fx_quiet(x, 0);
	tp_clear(x->tp[0]);
	fx_quiet(x, 0);
	assert_int_equal(stats(x).blocks, 0);
	assert_int_equal(stats(x).entries_dropped, 0);
	fx_free(x);
}

/* Medium names are compared by length too (a name may hold NUL bytes), so
 * "X\0" sent 63 times is one medium, not 63; and media past the fleet's 64
 * names are skipped and counted, not merged: a removal on one never
 * deletes another's copies. One publisher fills the table here, allowed
 * all 64 names (by default 8: test_fleet_hostile.c). */
static void media_stay_apart(void **st)
{
	(void)st;
	fx_media_per_pub = 64;
	struct fx *x = fx_new(1, NULL, NULL, 0, 0);
	fx_media_per_pub = 0;
	fx_sync(x, 0);
	register_chain(x);
	for (uint64_t i = 0; i < 63; i++) {
		uint64_t h = 5000 + i;
		tp_store_medium(x->tp[0], &h, 1, BS, "X\0", 2);
	}
	tp_store(x->tp[0], CHAIN, 4, BS, "CPU", -1, 0);
	tp_store(x->tp[0], CHAIN, 4, BS, "DISK", -1, 0);
	fx_quiet(x, 0);
	assert_int_equal(stats(x).blocks, 63 + 4 + 4);
	tp_remove(x->tp[0], CHAIN, 4, "DISK", -1);
	fx_quiet(x, 0);
	assert_int_equal(stats(x).blocks, 63 + 4);

	/* GPU, "X\0", CPU, DISK so far: 60 more fill the table */
	char name[16];
	for (uint64_t i = 0; i < 60; i++) {
		uint64_t h = 6000 + i;
		snprintf(name, sizeof name, "m%u", (unsigned)i);
		tp_store(x->tp[0], &h, 1, BS, name, -1, 0);
	}
	tp_store(x->tp[0], CHAIN, 4, BS, "m59", -1, 0); /* the 64th name */
	fx_quiet(x, 0);
	assert_int_equal(stats(x).blocks, 63 + 4 + 60 + 4);
	assert_int_equal(stats(x).ignored_media, 0);
	tp_store(x->tp[0], &CHAIN[4], 4, BS, "NEW", -1, 0);
	tp_remove(x->tp[0], CHAIN, 4, "OTHER", -1);
	fx_quiet(x, 0);
	kva_fleet_stats s = stats(x);
	assert_int_equal(s.ignored_media, 8);
	assert_int_equal(s.blocks, 63 + 4 + 60 + 4);
	assert_int_equal(s.malformed, 0);
	fx_hog(x);
	kva_handle h = fx_submit(x, 2, KEY, 8 * BS);
	WAIT_UNTIL(x, info(x, h).has_selection);
	assert_int_equal(info(x, h).selected_position, 4 * BS);
	fx_free(x);
}

/* Batches over max_message_bytes near a gap: held as their number while the
 * replay runs, and counted once each in `oversized`, whether their turn
 * comes live or from the replay; not in bad_frames, and not as losses. */
static void oversized_near_a_gap_counted_once(void **st)
{
	(void)st;
	fx_replay_timeout_ns = NO_RETRY_NS;
	struct fx *x = fx_new(1, NULL, NULL, 4096, 0);
	fx_replay_timeout_ns = 0;
	fx_sync(x, 0);
	register_chain(x);
	fx_quiet(x, 0);
	char *big = calloc(1, 5000);
	kva_fleet_stats s0 = stats(x);
	tp_replay_mode(x->tp[0], TP_REPLAY_HOLD);
	tp_lost(x->tp[0]);
	tp_raw(x->tp[0], big, 5000); /* the gap seen on a big one */
	tp_store(x->tp[0], CHAIN, 2, BS, NULL, -1, 0);
	tp_raw(x->tp[0], big, 5000);
	tp_store(x->tp[0], &CHAIN[2], 2, BS, NULL, -1, 0);
	WAIT_UNTIL(x, stats(x).messages == s0.messages + 4);
	tp_replay_mode(x->tp[0], TP_REPLAY_NORMAL); /* returns all five */
	fx_caught_up(x, 0);
	fx_quiet(x, 0);
	kva_fleet_stats s = stats(x);
	assert_int_equal(S_DELTA(s, s0, oversized), 2);
	assert_int_equal(S_DELTA(s, s0, bad_frames), 0);
	assert_int_equal(S_DELTA(s, s0, lost_batches), 0);
	assert_int_equal(S_DELTA(s, s0, gaps), 1);
	assert_int_equal(S_DELTA(s, s0, replays_requested), 1);
	assert_int_equal(s.blocks, 4);

	/* the replay cannot return the lost one: the big one that came during
	 * it was held, and its number still counts */
	s0 = s;
	tp_replay_mode(x->tp[0], TP_REPLAY_HOLD);
	tp_lost(x->tp[0]);
	tp_empty(x->tp[0]); /* the gap seen */
	tp_raw(x->tp[0], big, 5000);
	tp_store(x->tp[0], &CHAIN[4], 1, BS, NULL, -1, 0);
	WAIT_UNTIL(x, stats(x).messages == s0.messages + 3);
	tp_replay_mode(x->tp[0], TP_REPLAY_END_ONLY);
	fx_caught_up(x, 0);
	fx_quiet(x, 0);
	s = stats(x);
	assert_int_equal(S_DELTA(s, s0, oversized), 1);
	assert_int_equal(S_DELTA(s, s0, bad_frames), 0);
	assert_int_equal(S_DELTA(s, s0, lost_batches), 1);
	assert_int_equal(S_DELTA(s, s0, gaps), 1);
	assert_int_equal(s.blocks, 5);
	free(big);
	fx_free(x);
}

/* ---- answers: locality, many candidates, state groups, chains ------------- */

/* Another node (publisher 0) and this engine (publisher 1) hold the same
 * prefix: at one position the local copy is the checkpoint answered, even
 * though the other publisher comes first. */
static void local_copy_wins_at_an_equal_position(void **st)
{
	(void)st;
	struct fx *x = fx_new(2, NULL, NULL, 0, 1);
	fx_sync(x, 0);
	fx_sync(x, 1);
	register_chain(x);
	uint64_t b0 = stats(x).batches;
	tp_store(x->tp[0], CHAIN, 4, BS, "GPU", -1, 0); /* another node: external */
	tp_store(x->tp[1], CHAIN, 4, BS, "GPU", -1, 0); /* this engine: local */
	fx_settle(x, b0 + 2);
	fx_hog(x);
	kva_handle h = fx_submit(x, 2, KEY, 8 * BS);
	WAIT_UNTIL(x, info(x, h).has_selection);
	assert_int_equal(info(x, h).selected_position, 4 * BS);
	assert_int_equal(info(x, h).selected_location, KVA_LOC_LOCAL);
	fx_free(x);
}

/* More candidate positions than a manifest holds (KVA_MAX_CHECKPOINTS): the
 * longest are kept, whatever order the media were seen in. Twelve media hold
 * prefixes of 1..12 blocks, the shortest seen first; the one publisher is
 * allowed them all (by default 8 media and 2 checkpoints a publisher:
 * test_fleet_hostile.c). */
static void longest_candidates_fill_the_manifest(void **st)
{
	(void)st;
	fx_manifest_per_pub = KVA_MAX_CHECKPOINTS;
	fx_media_per_pub = 12;
	struct fx *x = fx_new(1, NULL, NULL, 0, 0);
	fx_manifest_per_pub = fx_media_per_pub = 0;
	fx_sync(x, 0);
	uint64_t chain[12];
	for (int i = 0; i < 12; i++)
		chain[i] = 301 + (uint64_t)i;
	assert_int_equal(kva_fleet_chain_register(x->f, KEY + 1, chain, 12), 0);
	char name[8];
	for (uint32_t n = 1; n <= 12; n++) {
		snprintf(name, sizeof name, "m%u", n);
		tp_store(x->tp[0], chain, n, BS, name, -1, 0);
	}
	fx_quiet(x, 0);
	assert_int_equal(stats(x).blocks, 12 * 13 / 2);
	fx_hog(x);
	kva_handle h = fx_submit(x, 2, KEY + 1, 13 * BS);
	WAIT_UNTIL(x, info(x, h).has_selection);
	assert_int_equal(info(x, h).selected_position, 12 * BS);
	assert_int_equal(info(x, h).selected_location, KVA_LOC_EXTERNAL);
	fx_free(x);
}

/* state_groups (group 1 here): a checkpoint also needs its last block in
 * every state group. Group 0 (full) holds 6 blocks, group 1 only blocks 2
 * and 4 of them: the longest checkpoint is 4 blocks. */
static void state_groups_need_the_last_block(void **st)
{
	(void)st;
	fx_state_groups = 1u << 1;
	struct fx *x = fx_new(1, NULL, NULL, 0, 0);
	fx_state_groups = 0;
	fx_sync(x, 0);
	register_chain(x);
	tp_store(x->tp[0], CHAIN, 6, BS, NULL, -1, 0);
	tp_store(x->tp[0], &CHAIN[1], 1, BS, NULL, 1, 0);
	tp_store(x->tp[0], &CHAIN[3], 1, BS, NULL, 1, 0);
	fx_quiet(x, 0);
	assert_int_equal(stats(x).blocks, 6 + 2);
	assert_int_equal(stats(x).ignored_groups, 0);
	fx_hog(x);
	kva_handle h = fx_submit(x, 2, KEY, 8 * BS);
	WAIT_UNTIL(x, info(x, h).has_selection);
	assert_int_equal(info(x, h).selected_position, 4 * BS);
	fx_free(x);
}

/* Groups past 31 (no mask bit) and groups configured in neither mask are
 * ignored and counted, never stored. */
static void groups_outside_the_masks_are_ignored(void **st)
{
	(void)st;
	struct fx *x = fx_new(1, NULL, NULL, 0, 0);
	fx_sync(x, 0);
	tp_store(x->tp[0], CHAIN, 2, BS, NULL, 32, 0); /* 32 & 31 == 0: not group 0 */
	tp_store(x->tp[0], CHAIN, 3, BS, NULL, 33, 0);
	tp_store(x->tp[0], CHAIN, 1, BS, NULL, 5, 0);
	tp_store(x->tp[0], CHAIN, 4, BS, NULL, 0, 0);
	fx_quiet(x, 0);
	kva_fleet_stats s = stats(x);
	assert_int_equal(s.ignored_groups, 2 + 3 + 1);
	assert_int_equal(s.blocks, 4);
	assert_int_equal(s.malformed, 0);
	fx_free(x);
}

/* The chains kept are the max_chains newest (FIFO); a lookup of an evicted
 * key is unregistered and answered as a miss. A chain of max_chain_blocks
 * is taken, one longer refused. */
static void oldest_chain_gives_way_and_chain_length_limit(void **st)
{
	(void)st;
	fx_max_chains = 2;
	struct fx *x = fx_new(1, NULL, NULL, 0, 0);
	fx_max_chains = 0;
	fx_sync(x, 0);
	for (uint64_t k = 0; k < 3; k++)
		assert_int_equal(kva_fleet_chain_register(x->f, KEY + 10 + k, CHAIN, 8), 0);
	tp_store(x->tp[0], CHAIN, 4, BS, NULL, -1, 0);
	fx_quiet(x, 0);
	fx_hog(x);
	kva_handle old = fx_submit(x, 2, KEY + 10, 8 * BS); /* pushed out */
	kva_handle kept = fx_submit(x, 3, KEY + 12, 8 * BS);
	WAIT_UNTIL(x, info(x, kept).has_selection && info(x, old).lookups == 1 &&
	                  stats(x).lookups == 2 && kva_fleet_lookups_done(x->f) == 2);
	assert_int_equal(info(x, kept).selected_position, 4 * BS);
	assert_false(info(x, old).has_selection);
	kva_fleet_stats s = stats(x);
	assert_int_equal(s.chains, 2);
	assert_int_equal(s.chains_evicted, 1);
	assert_int_equal(s.unregistered, 1);
	assert_int_equal(s.misses, 1);
	assert_int_equal(s.answered, 2);

	kva_fleet_config dc;
	kva_fleet_config_default(&dc);
	fleet_mode_apply(&dc);
	uint32_t n = dc.max_chain_blocks; /* fx_new keeps the default */
	uint64_t *big = calloc(n + 1, sizeof(*big));
	assert_non_null(big);
	assert_int_equal(kva_fleet_chain_register(x->f, KEY + 20, big, n), 0);
	assert_int_equal(kva_fleet_chain_register(x->f, KEY + 21, big, n + 1), -E2BIG);
	free(big);
	fx_free(x);
}

/* An answered checkpoint is watched for watch_ns: a removal after that is
 * not reported (the watch is gone), and the request keeps its selection. */
static void watches_end_after_watch_ns(void **st)
{
	(void)st;
	fx_watch_ns = 200ull * 1000000ull;
	struct fx *x = fx_new(1, NULL, NULL, 0, 0);
	fx_watch_ns = 0;
	fx_sync(x, 0);
	register_chain(x);
	tp_store(x->tp[0], CHAIN, 4, BS, NULL, -1, 0);
	fx_quiet(x, 0);
	fx_hog(x);
	kva_handle h = fx_submit(x, 2, KEY, 8 * BS);
	WAIT_UNTIL(x, info(x, h).has_selection);
	assert_int_equal(info(x, h).selected_position, 4 * BS);
	uint64_t past = mono() + 600ull * 1000000ull; /* watch_ns and a few ticks */
	WAIT_UNTIL(x, mono() > past); /* the I/O thread's tick lets the watch go */
	tp_remove(x->tp[0], &CHAIN[3], 1, NULL, -1);
	fx_quiet(x, 0);
	kva_fleet_stats s = stats(x);
	assert_int_equal(s.blocks, 3);
	assert_int_equal(s.blocks_removed, 1);
	assert_int_equal(s.evictions_reported, 0);
	assert_int_equal(info(x, h).lookups, 1);
	fx_free(x);
}

/* ---- router scores (kva_fleet_score) ------------------------------------------ */

#define SC_PUBS 3
#define SC_LEN 24
static const char *const SC_MEDIA[2] = {"GPU", "CPU"};

/* The reference: which (publisher, medium) holds which block of the base
 * chain (and noise beside it), kept as the publishers are told. */
struct sc_model {
	uint8_t held[SC_PUBS][2][SC_LEN];
};

static uint32_t rnd(uint64_t *st)
{
	*st = *st * 6364136223846793005ull + 1442695040888963407ull;
	return (uint32_t)(*st >> 33);
}

/* Brute force: every pair's leading run over chain[0..n), longest first
 * (ties: publisher, then medium name, as kva_fleet_score sorts). */
static uint32_t sc_reference(const struct sc_model *m, const uint32_t *idx, uint32_t n,
                             kva_fleet_match *out)
{
	uint32_t k = 0;
	for (uint32_t p = 0; p < SC_PUBS; p++)
		for (int md = 0; md < 2; md++) {
			uint32_t len = 0;
			while (len < n && idx[len] < SC_LEN && m->held[p][md][idx[len]])
				len++;
			if (!len)
				continue;
			kva_fleet_match o = {.publisher = p, .blocks = len, .tokens = len * BS};
			strcpy(o.medium, SC_MEDIA[md]);
			score_ref_insert(out, &k, &o);
		}
	return k;
}

struct sc_reader {
	kva_fleet *f;
	const uint64_t *chain;
	atomic_bool stop;
	uint64_t calls;
	int bad;
};

/* Another thread scoring all along while the I/O thread applies. */
static void *sc_read(void *arg)
{
	struct sc_reader *r = arg;
	kva_fleet_match out[8];
	while (!atomic_load(&r->stop)) {
		int n = kva_fleet_score(r->f, r->chain, SC_LEN, out, 8);
		if (n < 0 || n > 8)
			r->bad++;
		for (int i = 0; i < n; i++)
			if (out[i].blocks == 0 || out[i].blocks > SC_LEN || out[i].publisher >= SC_PUBS)
				r->bad++;
		r->calls++;
	}
	return NULL;
}

/* kva_fleet_score against a brute-force reference, rounds of random stores,
 * removals and clears on three publishers and two media, each round
 * checked on random chains (the base chain's prefixes, chains that leave it
 * part-way, a chain nobody holds); a thread scores all along meanwhile. */
static void score_matches_brute_force_on_random_chains(void **st)
{
	(void)st;
	fx_score = 1;
	struct fx *x = fx_new(SC_PUBS, NULL, NULL, 0, 0);
	fx_score = 0;
	for (int i = 0; i < SC_PUBS; i++)
		fx_sync(x, i);
	uint64_t base[SC_LEN + 8];
	for (int i = 0; i < SC_LEN + 8; i++)
		base[i] = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1); /* [SC_LEN..]: noise */
	struct sc_model m = {0};
	struct sc_reader rd = {.f = x->f, .chain = base};
	pthread_t reader;
	assert_int_equal(pthread_create(&reader, NULL, sc_read, &rd), 0);
	uint64_t seed = 29;
	kva_fleet_match got[16], want[16];
	for (int round = 0; round < 40; round++) {
		uint32_t p = rnd(&seed) % SC_PUBS, md = rnd(&seed) % 2, op = rnd(&seed) % 8;
		uint32_t a = rnd(&seed) % SC_LEN, len = 1 + rnd(&seed) % (SC_LEN - a);
		if (op < 5) {
			tp_store(x->tp[p], &base[a], len, BS, SC_MEDIA[md], -1, 0);
			for (uint32_t i = a; i < a + len; i++)
				m.held[p][md][i] = 1;
		} else if (op < 7) {
			tp_remove(x->tp[p], &base[a], len, SC_MEDIA[md], -1);
			for (uint32_t i = a; i < a + len; i++)
				m.held[p][md][i] = 0;
		} else {
			tp_clear(x->tp[p]);
			memset(m.held[p], 0, sizeof m.held[p]);
		}
		tp_store(x->tp[p], &base[SC_LEN + round % 8], 1, BS, "noise", -1, 0);
		fx_quiet(x, (int)p);
		for (int q = 0; q < 6; q++) {
			uint32_t idx[SC_LEN + 1], n = 1 + rnd(&seed) % SC_LEN;
			uint64_t chain[SC_LEN + 1];
			for (uint32_t i = 0; i < n; i++)
				idx[i] = i;
			if (q == 4) /* leaves the base chain part-way */
				idx[rnd(&seed) % n] = SC_LEN + 100;
			if (q == 5) /* nobody holds it */
				idx[0] = SC_LEN + 100;
			for (uint32_t i = 0; i < n; i++)
				chain[i] = idx[i] < SC_LEN + 8 ? base[idx[i]] : 42;
			uint32_t nw = sc_reference(&m, idx, n, want);
			int ng = kva_fleet_score(x->f, chain, n, got, 16);
			assert_int_equal(ng, (int)nw);
			score_ref_assert_equal(got, want, nw);
			for (uint32_t i = 0; i < nw; i++) {
				assert_int_equal(got[i].dp_rank, 0); /* fleet_pub.c sends rank 0 */
				assert_string_equal(got[i].topic, "kv");
			}
			if (nw > 1) { /* past cap: the longest kept */
				assert_int_equal(kva_fleet_score(x->f, chain, n, got, 1), 1);
				assert_int_equal(got[0].blocks, want[0].blocks);
			}
		}
	}
	atomic_store(&rd.stop, true);
	pthread_join(reader, NULL);
	assert_int_equal(rd.bad, 0);
	assert_true(rd.calls > 0);
	assert_int_equal(kva_fleet_score(x->f, NULL, 0, got, 16), 0);
	assert_int_equal(kva_fleet_score(x->f, NULL, 3, got, 16), -EINVAL);
	fx_free(x);
	if (fleet_mode_score())
		return; /* every fleet has cfg.score in this run */
	x = fx_new(1, NULL, NULL, 0, 0); /* without cfg.score */
	assert_int_equal(kva_fleet_score(x->f, base, 1, got, 16), -ENOTSUP);
	fx_free(x);
}

/* The readers' table follows the cap: with the index exactly full (12
 * entries), each new block evicts an old one, and scores must show exactly
 * what the index holds. (Before the table was the index, it was a copy
 * sized like the index, and had to drop the evicted entry before it took
 * the new one.) */
static void score_follows_cap_evictions(void **st)
{
	(void)st;
	fx_max_blocks = 12;
	fx_score = 1;
	struct fx *x = fx_new(2, NULL, NULL, 0, 0);
	fx_max_blocks = 0;
	fx_score = 0;
	fx_sync(x, 0);
	fx_sync(x, 1);
	uint64_t a[12], b[12];
	for (int i = 0; i < 12; i++)
		a[i] = 1000 + (uint64_t)i, b[i] = 2000 + (uint64_t)i;
	tp_store(x->tp[0], a, 12, BS, NULL, -1, 0);
	fx_quiet(x, 0);
	tp_store(x->tp[1], b, 12, BS, NULL, -1, 0); /* every one of a's evicted */
	fx_quiet(x, 1);
	assert_int_equal(stats(x).blocks, 12);
	/* block by block: scores show what the index holds, 12 entries */
	kva_fleet_match m[4];
	int held = 0;
	for (int i = 0; i < 12; i++) {
		int na = kva_fleet_score(x->f, &a[i], 1, m, 4), nb = kva_fleet_score(x->f, &b[i], 1, m, 4);
		assert_true(na >= 0 && na <= 1 && nb >= 0 && nb <= 1);
		held += na + nb;
	}
	assert_int_equal(held, 12);
	fx_free(x);
}

/* Block sizes per (medium, group): the GPU cache's blocks are 16 tokens,
 * the CPU offload tier's 64, group 1's 32. Positions and scores count in
 * each pair's own size; a store whose block_size is not its pair's is
 * refused and counted, one without block_size takes the configured one. */
static void block_size_per_medium_and_group(void **st)
{
	(void)st;
	static const kva_fleet_block_size sizes[] = {
		{.medium = NULL, .group_idx = 0, .block_size = BS},
		{.medium = "CPU", .group_idx = 0, .block_size = 4 * BS},
		{.medium = "GPU", .group_idx = 1, .block_size = 2 * BS},
	};
	fx_block_sizes = sizes;
	fx_nblock_sizes = 3;
	fx_score = 1;
	struct fx *x = fx_new(1, NULL, NULL, 0, 0);
	fx_score = 0;
	fx_sync(x, 0);
	register_chain(x);
	kva_fleet_stats s0 = stats(x);
	tp_store(x->tp[0], CHAIN, 5, BS, NULL, -1, 0);         /* GPU: 5 x 16 */
	tp_store(x->tp[0], CHAIN, 1, 4 * BS, "CPU", -1, 0);    /* CPU: its size */
	tp_store(x->tp[0], &CHAIN[1], 1, 0, "CPU", -1, 0);     /* no size: CPU's */
	tp_store(x->tp[0], &CHAIN[2], 2, BS, "CPU", -1, 0);    /* GPU's size on CPU: refused */
	fx_quiet(x, 0);
	kva_fleet_stats s = stats(x);
	assert_int_equal(s.block_size_mismatch - s0.block_size_mismatch, 2);
	assert_int_equal(s.blocks, 5 + 2);
	kva_fleet_match m[4];
	assert_int_equal(kva_fleet_score(x->f, CHAIN, 8, m, 4), 2);
	assert_string_equal(m[0].medium, "GPU");
	assert_int_equal(m[0].blocks, 5);
	assert_int_equal(m[0].tokens, 5 * BS);
	assert_string_equal(m[1].medium, "CPU");
	assert_int_equal(m[1].blocks, 2);
	assert_int_equal(m[1].tokens, 2 * 4 * BS);
	fx_hog(x);
	kva_handle h = fx_submit(x, 2, KEY, 8 * BS);
	WAIT_UNTIL(x, info(x, h).has_selection);
	assert_int_equal(info(x, h).selected_position, 8 * BS); /* CPU: 2 x 64 */
	assert_int_equal(info(x, h).selected_location, KVA_LOC_EXTERNAL);
	fx_free(x);

	/* a group with its own size: group 1 indexed (a recurrent state) */
	fx_state_groups = 1u << 1;
	x = fx_new(1, NULL, NULL, 0, 0);
	fx_state_groups = 0;
	fx_block_sizes = NULL;
	fx_nblock_sizes = 0;
	fx_sync(x, 0);
	s0 = stats(x);
	tp_store(x->tp[0], CHAIN, 3, BS, "GPU", 1, 0);     /* group 1, group 0's size: refused */
	tp_store(x->tp[0], CHAIN, 3, 2 * BS, "GPU", 1, 0); /* group 1: its size */
	tp_store(x->tp[0], CHAIN, 2, 0, "GPU", 1, 0);      /* no size: group 1's */
	fx_quiet(x, 0);
	s = stats(x);
	assert_int_equal(s.block_size_mismatch - s0.block_size_mismatch, 3);
	assert_int_equal(s.blocks, 3);
	assert_int_equal(s.no_block_size, 0);
	fx_free(x);

	/* refused at create: a size of 0, a group past 31 */
	kva_fleet_block_size bad = {.medium = "CPU", .group_idx = 0, .block_size = 0};
	kva_fleet_publisher pub = {.endpoint = "tcp://127.0.0.1:9"};
	kva_fleet_config fc;
	kva_fleet_config_default(&fc);
	fleet_mode_apply(&fc);
	fc.publishers = &pub;
	fc.npublishers = 1;
	fc.block_sizes = &bad;
	fc.nblock_sizes = 1;
	int err = 0;
	assert_null(kva_fleet_create(&fc, &err));
	assert_int_equal(err, -EINVAL);
	bad = (kva_fleet_block_size){.medium = "CPU", .group_idx = 32, .block_size = 16};
	assert_null(kva_fleet_create(&fc, &err));
	assert_int_equal(err, -EINVAL);
}

/* ---- the Python publisher -------------------------------------------------- */

static int py_cmd(struct fx *x, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vfprintf(x->py_in, fmt, ap);
	va_end(ap);
	fputc('\n', x->py_in);
	fflush(x->py_in);
	char line[256];
	if (!fgets(line, sizeof line, x->py_out))
		return -1;
	return strncmp(line, "OK", 2) == 0 ? 0 : -1;
}

static int py_start_args(struct fx *x, char *pub, char *rep, char *const *args);

static int py_start(struct fx *x, char *pub, char *rep)
{
	char *const none[] = {NULL};
	return py_start_args(x, pub, rep, none);
}

/* pypub.py with args (its options: --reply-frames, --array-batch, ...). */
static int py_start_args(struct fx *x, char *pub, char *rep, char *const *args)
{
	const char *script = getenv("KVA_FLEET_PYPUB");
	if (!script || access("/usr/bin/python3", X_OK) != 0)
		return -1;
	if (system("/usr/bin/python3 -c 'import zmq, msgpack' >/dev/null 2>&1") != 0)
		return -1;
	int in[2], out[2];
	if (pipe(in) || pipe(out))
		return -1;
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, in[0], 0);
	posix_spawn_file_actions_adddup2(&fa, out[1], 1);
	posix_spawn_file_actions_addclose(&fa, in[1]);
	posix_spawn_file_actions_addclose(&fa, out[0]);
	char *argv[12] = {"/usr/bin/python3", (char *)script};
	for (int i = 0; args[i] && i < 9; i++)
		argv[2 + i] = args[i];
	/* the sanitizer runtimes' preloads are not for the interpreter */
	char *envp[] = {"PATH=/usr/bin:/bin", NULL};
	int rc = posix_spawn(&x->py, argv[0], &fa, NULL, argv, envp);
	posix_spawn_file_actions_destroy(&fa);
	close(in[0]);
	close(out[1]);
	if (rc)
		return -1;
	x->py_in = fdopen(in[1], "w");
	x->py_out = fdopen(out[0], "r");
	char line[512];
	if (!fgets(line, sizeof line, x->py_out) || sscanf(line, "READY %255s %255s", pub, rep) != 2)
		return -1;
	return 0;
}

static void py_stop(struct fx *x)
{
	fprintf(x->py_in, "quit\n");
	fclose(x->py_in);
	fclose(x->py_out);
	int status;
	waitpid(x->py, &status, 0);
}

/* A Python publisher (map-encoded batches, bytes hashes, its own replay
 * socket) beside a C one: the C decoder against an encoder it shares no
 * code with, a gap replayed by the Python ROUTER, group_idx and a clear. */
static void python_publisher_beside_a_c_one(void **st)
{
	(void)st;
	char pub[256], rep[256];
	struct fx tmp = {0};
	if (py_start(&tmp, pub, rep) != 0)
		skip(); /* no /usr/bin/python3 with python3-zmq and python3-msgpack */
	struct fx *x = fx_new(1, pub, rep, 0, 1); /* the Python one is this engine's */
	x->py_in = tmp.py_in, x->py_out = tmp.py_out, x->py = tmp.py;
	fx_sync(x, 0);
	/* the Python side: wait until one of its batches is applied */
	uint64_t before = stats(x).batches;
	uint64_t end = mono() + WAIT_NS;
	while (stats(x).batches == before) {
		assert_true(mono() < end);
		assert_int_equal(py_cmd(x, "empty"), 0);
		for (int k = 0; k < 20 && stats(x).batches == before; k++) {
			pump(x);
			usleep(1000);
		}
	}
	/* hashes as bytes on the Python side: register what the fleet keys */
	register_chain(x);
	uint64_t b0 = stats(x).batches;
	assert_int_equal(py_cmd(x, "store 101,102,103 %d - -", BS), 0);
	assert_int_equal(py_cmd(x, "skip-next"), 0);
	assert_int_equal(py_cmd(x, "store 104,105 %d GPU 0", BS), 0); /* never sent live */
	assert_int_equal(py_cmd(x, "store 106,107 %d GPU 1", BS), 0); /* group 1: ignored */
	tp_store(x->tp[0], CHAIN, 2, BS, NULL, -1, 0);
	fx_settle(x, b0 + 4);
	kva_fleet_stats s = stats(x);
	assert_int_equal(s.malformed, 0);
	assert_true(s.gaps >= 1);
	assert_int_equal(s.lost_batches, 0);
	assert_int_equal(s.ignored_groups, 2);
	assert_int_equal(s.blocks, 5 + 2);
	fx_hog(x);
	kva_handle h = fx_submit(x, 2, KEY, 8 * BS);
	WAIT_UNTIL(x, info(x, h).has_selection);
	assert_int_equal(info(x, h).selected_position, 5 * BS);
	assert_int_equal(info(x, h).selected_location, KVA_LOC_LOCAL);
	assert_int_equal(py_cmd(x, "remove 105 - -"), 0); /* a bytes hash removed */
	WAIT_UNTIL(x, info(x, h).lookups == 2 && info(x, h).selected_position == 4 * BS);
	assert_int_equal(info(x, h).selected_location, KVA_LOC_LOCAL);
	assert_int_equal(py_cmd(x, "clear"), 0);
	WAIT_UNTIL(x, info(x, h).lookups == 3 && info(x, h).selected_position == 2 * BS);
	assert_int_equal(info(x, h).selected_location, KVA_LOC_EXTERNAL);
	py_stop(x);
	fx_free(x);
}

/* The Python publisher in both replay framings (3 frames; 4 with the
 * topic, and then also vLLM v0.26's array batch with map events and int
 * hashes, the digest's last 8 bytes): a late join fetches the history
 * published before the fleet listened, a gap is replayed, and the chain
 * registered by the same numbers matches whichever form it was sent in. */
static void python_publisher_replays_in_both_framings(void **st)
{
	(void)st;
	for (int frames = 3; frames <= 4; frames++) {
		char pub[256], rep[256];
		struct fx tmp = {0};
		char *const v3[] = {"--reply-frames", "3", NULL};
		char *const v4[] = {"--reply-frames", "4", "--array-batch", "--int-hashes",
		                    "--topic", "kv@pod-7@llama", NULL};
		if (py_start_args(&tmp, pub, rep, frames == 3 ? v3 : v4) != 0)
			skip(); /* no /usr/bin/python3 with python3-zmq and python3-msgpack */
		/* published before the fleet exists: only the replay has them */
		FILE *in = tmp.py_in;
		fprintf(in, "store 101,102,103 %d - -\n", BS);
		fflush(in);
		char line[64];
		assert_non_null(fgets(line, sizeof line, tmp.py_out));
		/* no retry on a loaded machine: a retried request's late end
		 * marker would end the gap's replay early (docs/fleet.md, not done) */
		fx_score = 1;
		fx_replay_timeout_ns = 30ull * 1000000000ull;
		struct fx *x = fx_new(0, pub, rep, 0, 0);
		fx_score = 0;
		fx_replay_timeout_ns = 0;
		x->py_in = tmp.py_in, x->py_out = tmp.py_out, x->py = tmp.py;
		uint64_t end = mono() + WAIT_NS;
		while (stats(x).blocks < 3) {
			assert_true(mono() < end);
			assert_int_equal(py_cmd(x, "empty"), 0);
			for (int k = 0; k < 20 && stats(x).blocks < 3; k++) {
				pump(x);
				usleep(1000);
			}
		}
		register_chain(x);
		assert_int_equal(py_cmd(x, "skip-next"), 0);
		assert_int_equal(py_cmd(x, "store 104,105 %d - -", BS), 0); /* never sent live */
		assert_int_equal(py_cmd(x, "store 106 %d - -", BS), 0);
		WAIT_UNTIL(x, stats(x).blocks == 6);
		kva_fleet_stats s = stats(x);
		assert_int_equal(s.malformed, 0);
		assert_int_equal(s.bad_frames, 0);
		assert_int_equal(s.lost_batches, 0);
		assert_true(s.gaps >= 1);
		fx_hog(x);
		kva_handle h = fx_submit(x, 2, KEY, 8 * BS);
		WAIT_UNTIL(x, info(x, h).has_selection);
		assert_int_equal(info(x, h).selected_position, 6 * BS);
		/* a router's view: the publisher's identity from its topic */
		kva_fleet_match m[4];
		assert_int_equal(kva_fleet_score(x->f, CHAIN, 8, m, 4), 1);
		assert_int_equal(m[0].blocks, 6);
		assert_int_equal(m[0].tokens, 6 * BS);
		assert_int_equal(m[0].dp_rank, 0);
		assert_string_equal(m[0].medium, "GPU");
		assert_string_equal(m[0].pod, frames == 4 ? "pod-7" : "");
		assert_string_equal(m[0].model, frames == 4 ? "llama" : "");
		py_stop(x);
		fx_free(x);
	}
}

static void bad_config_is_refused(void **st)
{
	(void)st;
	kva_fleet_config fc;
	kva_fleet_config_default(&fc);
	fleet_mode_apply(&fc);
	int err = 0;
	assert_null(kva_fleet_create(&fc, &err));
	assert_int_equal(err, -EINVAL);
	kva_fleet_publisher p = {.endpoint = "nonsense://x"};
	fc.publishers = &p;
	fc.npublishers = 1;
	assert_null(kva_fleet_create(&fc, &err));
	assert_true(err < 0);
	p.endpoint = "tcp://127.0.0.1:1";
	fc.max_blocks = 0;
	assert_null(kva_fleet_create(&fc, &err));
	assert_int_equal(err, -EINVAL);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	if (getenv("KVA_FLEET_TESTS")) /* a glob of test names, to run some alone */
		cmocka_set_test_filter(getenv("KVA_FLEET_TESTS"));
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(several_publishers_longest_first_and_removal_reaches_waiting),
		cmocka_unit_test(gap_is_recovered_through_replay),
		cmocka_unit_test(replay_in_both_framings_gap_and_late_join),
		cmocka_unit_test(publisher_restart_drops_its_entries),
		cmocka_unit_test(quick_restart_on_reconnect_is_a_new_process),
		cmocka_unit_test(cleared_publisher_reaches_waiting_request),
		cmocka_unit_test(vanished_publisher_is_dropped_and_reaches_waiting),
		cmocka_unit_test(fleet_threads_block_every_signal),
		cmocka_unit_test(publisher_added_and_removed_after_create),
		cmocka_unit_test(publishers_churn_from_other_threads),
		cmocka_unit_test(malformed_and_oversized_are_counted_and_dropped),
		cmocka_unit_test(replay_begun_while_held_batches_are_applied),
		cmocka_unit_test(hole_newer_than_the_answer_is_asked_for),
		cmocka_unit_test(first_held_batch_starts_a_replay),
		cmocka_unit_test(restart_past_a_full_held_list_is_not_lost),
		cmocka_unit_test(replay_without_the_missing_batch_accepts_the_loss),
		cmocka_unit_test(abandoned_replay_is_not_a_restart),
		cmocka_unit_test(retried_replay_is_not_a_restart),
		cmocka_unit_test(live_copy_after_its_replay_is_applied_once),
		cmocka_unit_test(clears_scan_the_index_only_when_it_matters),
		cmocka_unit_test(entry_counts_follow_cap_evictions),
		cmocka_unit_test(media_stay_apart),
		cmocka_unit_test(oversized_near_a_gap_counted_once),
		cmocka_unit_test(local_copy_wins_at_an_equal_position),
		cmocka_unit_test(longest_candidates_fill_the_manifest),
		cmocka_unit_test(state_groups_need_the_last_block),
		cmocka_unit_test(groups_outside_the_masks_are_ignored),
		cmocka_unit_test(oldest_chain_gives_way_and_chain_length_limit),
		cmocka_unit_test(watches_end_after_watch_ns),
		cmocka_unit_test(score_matches_brute_force_on_random_chains),
		cmocka_unit_test(score_follows_cap_evictions),
		cmocka_unit_test(block_size_per_medium_and_group),
		cmocka_unit_test(python_publisher_beside_a_c_one),
		cmocka_unit_test(python_publisher_replays_in_both_framings),
		cmocka_unit_test(bad_config_is_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
