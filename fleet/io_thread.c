/* SPDX-License-Identifier: Apache-2.0 */
/*
 * io_thread: the I/O thread and the publishers' sockets. Each loop turn
 * polls the eventfd and every publisher's SUB, DEALER and monitor sockets,
 * drains at most RECV_BUDGET messages a socket, and runs queued commands
 * between batches so a lookup waits for one batch at most. The commands
 * arrive on the kva_inbox (A1 here, R1 in fleet.c). A publisher slot's
 * sockets are opened here, with the slot states of fleet_state.h.
 */
#define _GNU_SOURCE
#include "io_thread.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "apply.h"
#include "auth.h"
#include "chain.h"
#include "lookup_answer.h"
#include "quota.h"
#include "replay.h"
#include "score.h"
#include "watch.h"

#define RECV_BUDGET 256 /* messages per socket per loop turn: lookups stay prompt */
#define REPLAY_TRIES 3
#define TICK_MS 50
#define RCVHWM_MIN 256 /* messages: a burst a small max_pending still takes */

/* What a publisher may make libzmq buffer before the fleet reads a frame:
 * no frame over twice max_message_bytes (one between counts as oversized,
 * its number kept; a larger one drops the connection, libzmq's check), and
 * RCVHWM messages queued. docs/fleet.md, "Security". */
static void limit_socket(kva_fleet *f, void *sock)
{
	int zero = 0;
	uint32_t pending = f->cfg.max_pending > INT_MAX ? INT_MAX : f->cfg.max_pending;
	int hwm = pending < RCVHWM_MIN ? RCVHWM_MIN : (int)pending;
	int64_t max_frame = 2 * (int64_t)f->cfg.max_message_bytes;
	zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof zero);
	zmq_setsockopt(sock, ZMQ_RCVHWM, &hwm, sizeof hwm);
	zmq_setsockopt(sock, ZMQ_MAXMSGSIZE, &max_frame, sizeof max_frame);
}

static int pub_open(kva_fleet *f, struct publisher *pub, uint32_t id)
{
	int zero = 0;
	pub->sub = zmq_socket(f->zmq_ctx, ZMQ_SUB);
	if (!pub->sub)
		return zmq_err();
	limit_socket(f, pub->sub);
	int rc = kvf_auth_socket(f, id, pub->sub);
	if (rc)
		return rc;
	const char *topic = pub->topic ? pub->topic : "";
	if (zmq_setsockopt(pub->sub, ZMQ_SUBSCRIBE, topic, strlen(topic)) < 0)
		return zmq_err();
	char name[96];
	/* a reused id gets a fresh monitor name: the old one may still unbind */
	snprintf(name, sizeof name, "inproc://kvadmit-fleet-mon-%p-%u-%u", (void *)f, id,
	         f->monitor_gen++);
	if (zmq_socket_monitor(pub->sub, name, ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED) ==
	    0) {
		pub->monitor = zmq_socket(f->zmq_ctx, ZMQ_PAIR);
		if (pub->monitor && zmq_connect(pub->monitor, name) < 0) {
			zmq_close(pub->monitor);
			pub->monitor = NULL;
		}
		if (pub->monitor)
			zmq_setsockopt(pub->monitor, ZMQ_LINGER, &zero, sizeof zero);
	}
	if (zmq_connect(pub->sub, pub->endpoint) < 0)
		return zmq_err();
	if (pub->replay_endpoint) {
		pub->dealer = zmq_socket(f->zmq_ctx, ZMQ_DEALER);
		if (!pub->dealer)
			return zmq_err();
		limit_socket(f, pub->dealer);
		if ((rc = kvf_auth_socket(f, id, pub->dealer)))
			return rc;
		if (zmq_connect(pub->dealer, pub->replay_endpoint) < 0)
			return zmq_err();
	}
	return 0;
}

void kvf_pub_close(struct publisher *pub)
{
	if (pub->sub) {
		zmq_socket_monitor(pub->sub, NULL, 0);
		zmq_close(pub->sub);
	}
	if (pub->monitor)
		zmq_close(pub->monitor);
	if (pub->dealer)
		zmq_close(pub->dealer);
	for (uint32_t k = 0; k < pub->nheld; k++)
		free(pub->held[k].data);
	free(pub->held);
	free(pub->held_spare); /* holds no data between flushes */
	free(pub->endpoint);
	free(pub->replay_endpoint);
	free(pub->topic);
	memset(pub, 0, sizeof(*pub)); /* the slot can be reused */
}

int kvf_pub_init(kva_fleet *f, struct publisher *pub, uint32_t id, char *endpoint,
                 char *replay_endpoint, char *topic, uint8_t self)
{
	memset(pub, 0, sizeof(*pub));
	pub->id = (uint16_t)id;
	pub->self = self;
	pub->endpoint = endpoint;
	pub->replay_endpoint = replay_endpoint;
	pub->topic = topic;
	pub->held = calloc(f->cfg.max_pending, sizeof(*pub->held));
	pub->held_spare = calloc(f->cfg.max_pending, sizeof(*pub->held_spare));
	if (!pub->endpoint || !pub->held || !pub->held_spare)
		return -ENOMEM;
	int rc = pub_open(f, pub, id);
	if (rc == 0)
		pub->active = true;
	return rc;
}

void kvf_add_cmd_free(struct add_cmd *add)
{
	free(add->endpoint);
	free(add->replay_endpoint);
	free(add->topic);
	free(add);
}

/* A publisher added after create. */
static void pub_add(kva_fleet *f, struct add_cmd *add)
{
	uint32_t id = add->cmd.pub_id;
	struct publisher *pub = &f->pubs[id];
	int rc = kvf_pub_init(f, pub, id, add->endpoint, add->replay_endpoint, add->topic,
	                      add->self);
	add->endpoint = add->replay_endpoint = add->topic = NULL; /* the slot owns them now */
	kvf_add_cmd_free(add);
	if (id >= f->npubs)
		f->npubs = id + 1;
	f->pubs_changed = true;
	kvf_quota_update(f);
	uint8_t want = SLOT_ADDING;
	if (rc) {
		fleet_log(f, KVA_LOG_WARN, "kvadmit-fleet: publisher %s not added (%d)",
		          pub->endpoint ? pub->endpoint : "?", rc);
		stat_add(f, STAT(publisher_errors), 1);
		kvf_pub_close(pub);
		/* a removal already queued frees it instead (it follows in order) */
		atomic_compare_exchange_strong_explicit(&f->pub_slot[id], &want, SLOT_FREE,
		                                        memory_order_release, memory_order_relaxed);
		return;
	}
	atomic_compare_exchange_strong_explicit(&f->pub_slot[id], &want, SLOT_TAKEN,
	                                        memory_order_release, memory_order_relaxed);
}

/* A publisher removed. Its entries go as a vanished publisher's do (watches
 * reported), then its sockets; the id is free again after. */
static void pub_remove(kva_fleet *f, uint32_t id)
{
	struct publisher *pub = &f->pubs[id];
	if (pub->active) {
		kvf_drop_publisher(f, pub, "removed");
		kvf_pub_close(pub);
		stat_add(f, STAT(publishers_removed), 1);
	}
	f->pubs_changed = true;
	kvf_quota_update(f);
	atomic_store_explicit(&f->pub_slot[id], SLOT_FREE, memory_order_release);
}

static void drain_commands(kva_fleet *f, bool woken)
{
	if (woken) {
		uint64_t v;
		/* reset before draining: no lost wakeup */
		ssize_t r = read(f->wake_fd, &v, sizeof v);
		(void)r;
	} else if (kva_inbox_empty(&f->commands)) {
		return;
	}
	struct kva_inbox_batch batch;
	if (!kva_inbox_drain_blocking(&f->commands, &batch))
		return;
	uint64_t now = now_ns();
	struct kva_inbox_node *node;
	while ((node = kva_inbox_batch_pop_blocking(&batch))) { /* A1: pairs with R1 */
		struct cmd *cmd = caa_container_of(node, struct cmd, node);
		if (cmd->kind == CMD_CHAIN) {
			kvf_chain_add(f, caa_container_of(cmd, struct chain, cmd));
		} else if (cmd->kind == CMD_ADD_PUB) {
			pub_add(f, caa_container_of(cmd, struct add_cmd, cmd));
		} else if (cmd->kind == CMD_REMOVE_PUB) {
			pub_remove(f, cmd->pub_id);
			free(cmd);
		} else if (cmd->kind == CMD_FAILURE) {
			kvf_quarantine_report(f, cmd->prefix_key, now);
			free(cmd);
		} else {
			kvf_lookup_answer(f, cmd, now);
			free(cmd);
			/* only a bound (kva_fleet_lookup): no order needed */
			atomic_fetch_sub_explicit(&f->lookups_queued, 1, memory_order_relaxed);
		}
	}
}

/* Receives one multipart message of up to MAX_FRAMES frames; returns the
 * frame count (more frames: MAX_FRAMES + 1), 0 when nothing is waiting. */
#define MAX_FRAMES 4
static int recv_frames(void *sock, zmq_msg_t frames[MAX_FRAMES])
{
	int n = 0;
	for (;;) {
		zmq_msg_t extra;
		zmq_msg_t *frame = n < MAX_FRAMES ? &frames[n] : &extra;
		zmq_msg_init(frame);
		if (zmq_msg_recv(frame, sock, n == 0 ? ZMQ_DONTWAIT : 0) < 0) {
			zmq_msg_close(frame);
			return n;
		}
		bool more = zmq_msg_more(frame);
		if (n >= MAX_FRAMES)
			zmq_msg_close(frame);
		n++;
		if (!more)
			return n > MAX_FRAMES ? MAX_FRAMES + 1 : n;
	}
}

static void close_frames(zmq_msg_t frames[MAX_FRAMES], int n)
{
	for (int i = 0; i < n && i < MAX_FRAMES; i++)
		zmq_msg_close(&frames[i]);
}

/* R4: every batch before pub->expected is applied and its evictions
 * reported (kva_fleet_publisher_seq, A4). */
static void publish_progress(struct publisher *pub)
{
	atomic_store_explicit(&pub->next_seq, pub->expected, memory_order_release);
}

static void drain_sub(kva_fleet *f, struct publisher *pub)
{
	for (int k = 0; k < RECV_BUDGET; k++) {
		zmq_msg_t m[MAX_FRAMES];
		int n = recv_frames(pub->sub, m);
		if (n == 0)
			return;
		stat_add(f, STAT(messages), 1);
		if (n != 3 || zmq_msg_size(&m[1]) != 8) {
			stat_add(f, STAT(bad_frames), 1);
		} else {
			/* a big one goes through the sequence tracking with its number
			 * only: counted once, when its turn comes, held during a replay */
			bool big = zmq_msg_size(&m[2]) > f->cfg.max_message_bytes;
			if (!big)
				stat_add(f, STAT(bytes), zmq_msg_size(&m[2]));
			if (f->score) /* its identity, for routers */
				kvf_score_topic(f->score, pub->id, zmq_msg_data(&m[0]),
				                zmq_msg_size(&m[0]));
			kvf_on_live(f, pub, kvf_seq_decode(zmq_msg_data(&m[1])),
			            zmq_msg_data(&m[2]), zmq_msg_size(&m[2]), big);
		}
		close_frames(m, n);
		publish_progress(pub);
		drain_commands(f, false); /* a lookup waits for one batch at most */
	}
}

/* A replay reply, in either framing, told apart per reply (a publisher
 * may be upgraded while the fleet runs): ["", seq, payload] (vLLM before
 * v0.26, SGLang) or ["", topic, seq, payload] (vLLM v0.26 on, PR #45177).
 * The end marker is seq -1 in either (its topic frame empty), or
 * Mooncake's 8-byte 0xff payload. */
static void on_reply(kva_fleet *f, struct publisher *pub, zmq_msg_t *m, int n)
{
	if ((n != 3 && n != 4) || zmq_msg_size(&m[0]) != 0 || zmq_msg_size(&m[n - 2]) != 8) {
		stat_add(f, STAT(bad_frames), 1);
		return;
	}
	zmq_msg_t *seq = &m[n - 2], *payload = &m[n - 1];
	size_t len = zmq_msg_size(payload);
	if (len == 8 && memcmp(zmq_msg_data(payload), "\xff\xff\xff\xff\xff\xff\xff\xff", 8) == 0)
		kvf_on_replay(f, pub, -1, NULL, 0, false);
	else /* a big one counts its number, as on PUB */
		kvf_on_replay(f, pub, kvf_seq_decode(zmq_msg_data(seq)), zmq_msg_data(payload), len,
		              len > f->cfg.max_message_bytes);
}

static void drain_dealer(kva_fleet *f, struct publisher *pub)
{
	/* dealer NULL: drain_commands removed pub */
	for (int k = 0; k < RECV_BUDGET && pub->dealer; k++) {
		zmq_msg_t m[MAX_FRAMES];
		int n = recv_frames(pub->dealer, m);
		if (n == 0)
			return;
		on_reply(f, pub, m, n);
		close_frames(m, n);
		publish_progress(pub);
		drain_commands(f, false); /* as on PUB: a lookup waits for one batch at most */
	}
}

static void drain_monitor(kva_fleet *f, struct publisher *pub)
{
	for (;;) {
		zmq_msg_t m[MAX_FRAMES];
		int n = recv_frames(pub->monitor, m);
		if (n == 0)
			return;
		if (zmq_msg_size(&m[0]) >= 2) {
			uint16_t event;
			memcpy(&event, zmq_msg_data(&m[0]), 2);
			if (event == ZMQ_EVENT_DISCONNECTED && !pub->down) {
				pub->down = true;
				pub->down_since = now_ns();
				stat_add(f, STAT(publishers_down), 1);
			} else if (event == ZMQ_EVENT_CONNECTED) {
				if (pub->down) /* back: not trusted to be the same process */
					kvf_on_reconnect(f, pub);
				pub->down = false;
			}
		}
		close_frames(m, n);
	}
}

static void tick(kva_fleet *f, uint64_t now)
{
	for (uint32_t i = 0; i < f->npubs; i++) {
		struct publisher *pub = &f->pubs[i];
		if (!pub->active)
			continue;
		if (pub->replaying && now >= pub->replay_deadline) {
			if (++pub->replay_tries < REPLAY_TRIES) {
				stat_add(f, STAT(replay_retries), 1);
				kvf_replay_request(f, pub, pub->expected);
			} else { /* give up: what was missed is lost */
				fleet_log(f, KVA_LOG_WARN,
				          "kvadmit-fleet: publisher %s: replay unanswered",
				          pub->endpoint);
				pub->held_overflow = false; /* no second replay for this round */
				kvf_replay_end(f, pub);
				publish_progress(pub);
			}
		}
		if (pub->down && !pub->dropped && now - pub->down_since >= f->cfg.drop_after_ns) {
			pub->dropped = true;
			stat_add(f, STAT(publishers_dropped), 1);
			kvf_drop_publisher(f, pub, "connection down");
		}
	}
	kvf_watches_expire(f, now);
}

/* Poll items: the eventfd, then (SUB, DEALER, monitor) per publisher slot;
 * an inactive slot or a missing socket is a never-ready fd. */
static zmq_pollitem_t *poll_items(kva_fleet *f, zmq_pollitem_t *items, uint32_t *nitems)
{
	uint32_t n = 1 + 3 * f->npubs;
	if (n > *nitems || !items) {
		zmq_pollitem_t *grown = realloc(items, n * sizeof(*items));
		if (!grown)
			return items; /* the old items stay: new publishers wait for memory */
		items = grown;
	}
	*nitems = n;
	items[0] = (zmq_pollitem_t){.fd = f->wake_fd, .events = ZMQ_POLLIN};
	for (uint32_t i = 0; i < f->npubs; i++) {
		struct publisher *pub = &f->pubs[i];
		zmq_pollitem_t none = {.fd = -1};
		zmq_pollitem_t sub = {.socket = pub->sub, .events = ZMQ_POLLIN};
		zmq_pollitem_t dealer = {.socket = pub->dealer, .events = ZMQ_POLLIN};
		zmq_pollitem_t monitor = {.socket = pub->monitor, .events = ZMQ_POLLIN};
		items[1 + 3 * i] = pub->active ? sub : none;
		items[2 + 3 * i] = pub->active && pub->dealer ? dealer : none;
		items[3 + 3 * i] = pub->active && pub->monitor ? monitor : none;
	}
	f->pubs_changed = false;
	return items;
}

void *kvf_io_thread(void *arg)
{
	kva_fleet *f = arg;
	uint32_t nitems = 0;
	zmq_pollitem_t *items = poll_items(f, NULL, &nitems);
	if (!items)
		return NULL; /* lookups time out; create checked memory before */
	uint64_t last_tick = now_ns();
	while (!atomic_load_explicit(&f->stop, memory_order_acquire)) {
		int rc = zmq_poll(items, (int)nitems, TICK_MS);
		if (rc < 0 && zmq_errno() == ETERM)
			break;
		drain_commands(f, rc > 0 && (items[0].revents & ZMQ_POLLIN));
		for (uint32_t i = 0; i < f->npubs; i++) {
			struct publisher *pub = &f->pubs[i];
			if (!pub->active)
				continue;
			drain_sub(f, pub);
			if (pub->dealer)
				drain_dealer(f, pub);
			if (pub->monitor)
				drain_monitor(f, pub);
			/* lookups between publishers: latency stays low */
			drain_commands(f, false);
		}
		if (f->pubs_changed)
			items = poll_items(f, items, &nitems);
		uint64_t now = now_ns();
		if (now - last_tick >= (uint64_t)TICK_MS * 1000000u / 2) {
			tick(f, now);
			last_tick = now;
		}
	}
	free(items);
	return NULL;
}
