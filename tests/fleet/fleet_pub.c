/* SPDX-License-Identifier: Apache-2.0 */
/* The tests' C publisher (fleet_pub.h), encoding with msgpack-c. */
#include "fleet_pub.h"

#include <msgpack.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#define RING 4096

struct tp {
	void *pub, *router;
	char pub_ep[128], rep_ep[128];
	int64_t seq;
	enum tp_replay mode;
	int reply_frames; /* 3 (vLLM before v0.26, SGLang) or 4 (vLLM v0.26 on: the topic too) */
	void *zctx;
	bool forge;        /* tp_replay_forge */
	int64_t forge_seq;
	unsigned char late_client[256]; /* TP_REPLAY_END_LATER: whom the end marker is for */
	size_t late_client_len;
	struct {
		int64_t seq;
		size_t len;
		char *data;
	} ring[RING];
};

static void be8(unsigned char *b, int64_t v)
{
	for (int i = 0; i < 8; i++)
		b[i] = (unsigned char)((uint64_t)v >> (56 - 8 * i));
}

struct tp *tp_new(void *zctx) { return tp_new_curve(zctx, NULL); }

struct tp *tp_new_curve(void *zctx, const char *secret_key)
{
	struct tp *p = calloc(1, sizeof(*p));
	int zero = 0, one = 1;
	size_t len;
	p->reply_frames = 3;
	p->zctx = zctx;
	p->pub = zmq_socket(zctx, ZMQ_PUB);
	p->router = zmq_socket(zctx, ZMQ_ROUTER);
	zmq_setsockopt(p->pub, ZMQ_LINGER, &zero, sizeof zero);
	zmq_setsockopt(p->router, ZMQ_LINGER, &zero, sizeof zero);
	for (int i = 0; i < 2 && secret_key; i++) {
		void *sock = i ? p->router : p->pub;
		if (zmq_setsockopt(sock, ZMQ_CURVE_SERVER, &one, sizeof one) ||
		    zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, secret_key, 40)) {
			tp_free(p);
			return NULL;
		}
	}
	if (zmq_bind(p->pub, "tcp://127.0.0.1:*") || zmq_bind(p->router, "tcp://127.0.0.1:*")) {
		tp_free(p);
		return NULL;
	}
	len = sizeof p->pub_ep;
	zmq_getsockopt(p->pub, ZMQ_LAST_ENDPOINT, p->pub_ep, &len);
	len = sizeof p->rep_ep;
	zmq_getsockopt(p->router, ZMQ_LAST_ENDPOINT, p->rep_ep, &len);
	return p;
}

void tp_free(struct tp *p)
{
	if (!p)
		return;
	zmq_close(p->pub);
	zmq_close(p->router);
	for (int i = 0; i < RING; i++)
		free(p->ring[i].data);
	free(p);
}

const char *tp_pub_endpoint(const struct tp *p) { return p->pub_ep; }
const char *tp_replay_endpoint(const struct tp *p) { return p->rep_ep; }

static void send_numbered(struct tp *p, const void *data, size_t len, int skip)
{
	int64_t seq = p->seq++;
	int i = (int)(seq % RING);
	free(p->ring[i].data);
	p->ring[i].seq = seq;
	p->ring[i].len = len;
	p->ring[i].data = malloc(len ? len : 1);
	memcpy(p->ring[i].data, data, len);
	if (skip)
		return;
	unsigned char s[8];
	be8(s, seq);
	zmq_send(p->pub, "kv", 2, ZMQ_SNDMORE);
	zmq_send(p->pub, s, 8, ZMQ_SNDMORE);
	zmq_send(p->pub, data, len, 0);
}

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	return (double)t.tv_sec + t.tv_nsec / 1e9;
}

/* [ts, [event...]] with msgpack-c; the events written by fn. */
static void batch(struct tp *p, void (*fn)(msgpack_packer *, const void *), const void *arg,
                  int skip)
{
	msgpack_sbuffer sb;
	msgpack_sbuffer_init(&sb);
	msgpack_packer pk;
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_array(&pk, 3);
	msgpack_pack_double(&pk, now_s());
	fn(&pk, arg);
	msgpack_pack_int(&pk, 0); /* data_parallel_rank */
	send_numbered(p, sb.data, sb.size, skip);
	msgpack_sbuffer_destroy(&sb);
}

struct ev {
	const uint64_t *h;
	uint32_t n, bs;
	const char *medium;
	int group;
	size_t mlen; /* 0: strlen(medium) */
};

static void pack_strn(msgpack_packer *pk, const char *s, size_t n)
{
	if (!s) {
		msgpack_pack_nil(pk);
		return;
	}
	msgpack_pack_str(pk, n);
	msgpack_pack_str_body(pk, s, n);
}

static void pack_str(msgpack_packer *pk, const char *s) { pack_strn(pk, s, s ? strlen(s) : 0); }

static void pack_hashes(msgpack_packer *pk, const struct ev *e)
{
	msgpack_pack_array(pk, e->n);
	for (uint32_t i = 0; i < e->n; i++)
		msgpack_pack_uint64(pk, e->h[i]);
}

static void pack_store(msgpack_packer *pk, const struct ev *e)
{
	msgpack_pack_array(pk, 10); /* tag + 9 positional fields */
	pack_str(pk, "BlockStored");
	pack_hashes(pk, e);
	msgpack_pack_nil(pk); /* parent_block_hash */
	msgpack_pack_array(pk, e->n * e->bs);
	for (uint32_t i = 0; i < e->n * e->bs; i++)
		msgpack_pack_uint32(pk, 1000 + i);
	msgpack_pack_uint32(pk, e->bs);
	msgpack_pack_nil(pk); /* lora_id */
	pack_strn(pk, e->medium, e->mlen ? e->mlen : e->medium ? strlen(e->medium) : 0);
	msgpack_pack_nil(pk); /* lora_name */
	msgpack_pack_nil(pk); /* extra_keys */
	if (e->group < 0)
		msgpack_pack_nil(pk);
	else
		msgpack_pack_int(pk, e->group);
}

static void ev_store(msgpack_packer *pk, const void *arg)
{
	msgpack_pack_array(pk, 1);
	pack_store(pk, arg);
}

static void ev_remove(msgpack_packer *pk, const void *arg)
{
	const struct ev *e = arg;
	msgpack_pack_array(pk, 1);
	msgpack_pack_array(pk, 4);
	pack_str(pk, "BlockRemoved");
	pack_hashes(pk, e);
	pack_str(pk, e->medium);
	if (e->group < 0)
		msgpack_pack_nil(pk);
	else
		msgpack_pack_int(pk, e->group);
}

static void ev_clear(msgpack_packer *pk, const void *arg)
{
	(void)arg;
	msgpack_pack_array(pk, 1);
	msgpack_pack_array(pk, 1);
	pack_str(pk, "AllBlocksCleared");
}

static void ev_none(msgpack_packer *pk, const void *arg)
{
	(void)arg;
	msgpack_pack_array(pk, 0);
}

struct rounds {
	uint32_t n, tail;
	uint64_t first;
};

static void ev_rounds(msgpack_packer *pk, const void *arg)
{
	const struct rounds *r = arg;
	msgpack_pack_array(pk, 2 * r->n + r->tail);
	for (uint32_t i = 0; i < r->n; i++) {
		uint64_t h = r->first + i;
		struct ev e = {&h, 1, 16, NULL, -1, 0};
		msgpack_pack_array(pk, 1);
		pack_str(pk, "AllBlocksCleared");
		pack_store(pk, &e);
	}
	for (uint32_t i = 0; i < r->tail; i++) {
		msgpack_pack_array(pk, 1);
		pack_str(pk, "AllBlocksCleared");
	}
}

void tp_store(struct tp *p, const uint64_t *h, uint32_t n, uint32_t bs, const char *medium,
              int group, int skip)
{
	struct ev e = {h, n, bs, medium, group, 0};
	batch(p, ev_store, &e, skip);
}

void tp_store_medium(struct tp *p, const uint64_t *h, uint32_t n, uint32_t bs, const char *medium,
                     size_t mlen)
{
	struct ev e = {h, n, bs, medium, -1, mlen};
	batch(p, ev_store, &e, 0);
}

void tp_clear_rounds(struct tp *p, uint32_t rounds, uint64_t first_hash, uint32_t tail)
{
	struct rounds r = {rounds, tail, first_hash};
	batch(p, ev_rounds, &r, 0);
}

void tp_lost(struct tp *p) { batch(p, ev_none, NULL, 1); }

void tp_send_buffered(struct tp *p, int64_t seq)
{
	int i = (int)(seq % RING);
	if (seq < 0 || seq >= p->seq || p->ring[i].seq != seq || !p->ring[i].data)
		return;
	unsigned char s[8];
	be8(s, seq);
	zmq_send(p->pub, "kv", 2, ZMQ_SNDMORE);
	zmq_send(p->pub, s, 8, ZMQ_SNDMORE);
	zmq_send(p->pub, p->ring[i].data, p->ring[i].len, 0);
}

void tp_replay_mode(struct tp *p, enum tp_replay mode) { p->mode = mode; }
void tp_reply_frames(struct tp *p, int frames) { p->reply_frames = frames; }

int tp_reopen(struct tp *p, int64_t next_seq)
{
	int zero = 0;
	zmq_close(p->pub);
	zmq_close(p->router);
	tp_restart(p);
	p->seq = next_seq;
	p->pub = zmq_socket(p->zctx, ZMQ_PUB);
	p->router = zmq_socket(p->zctx, ZMQ_ROUTER);
	zmq_setsockopt(p->pub, ZMQ_LINGER, &zero, sizeof zero);
	zmq_setsockopt(p->router, ZMQ_LINGER, &zero, sizeof zero);
	/* the old listeners are closed in the background: retry a while */
	for (int i = 0; i < 500; i++) {
		if (zmq_bind(p->pub, p->pub_ep) == 0)
			break;
		struct timespec t = {0, 10000000};
		nanosleep(&t, NULL);
	}
	for (int i = 0; i < 500; i++) {
		if (zmq_bind(p->router, p->rep_ep) == 0)
			return 0;
		struct timespec t = {0, 10000000};
		nanosleep(&t, NULL);
	}
	return -1;
}
int64_t tp_next_seq(const struct tp *p) { return p->seq; }

void tp_remove(struct tp *p, const uint64_t *h, uint32_t n, const char *medium, int group)
{
	struct ev e = {h, n, 0, medium, group, 0};
	batch(p, ev_remove, &e, 0);
}

void tp_clear(struct tp *p) { batch(p, ev_clear, NULL, 0); }
void tp_empty(struct tp *p) { batch(p, ev_none, NULL, 0); }
void tp_raw(struct tp *p, const void *payload, size_t len) { send_numbered(p, payload, len, 0); }

/* [0.0, [], 0]: an empty array_like batch. */
static const unsigned char EMPTY_BATCH[] = {0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x90, 0x00};

void tp_live_as(struct tp *p, int64_t seq)
{
	unsigned char s[8];
	be8(s, seq);
	zmq_send(p->pub, "kv", 2, ZMQ_SNDMORE);
	zmq_send(p->pub, s, 8, ZMQ_SNDMORE);
	zmq_send(p->pub, EMPTY_BATCH, sizeof EMPTY_BATCH, 0);
}

void tp_replay_forge(struct tp *p, int64_t seq)
{
	p->forge = true;
	p->forge_seq = seq;
}

void tp_frames(struct tp *p, int nframes)
{
	for (int i = 0; i < nframes; i++)
		zmq_send(p->pub, "x", 1, i + 1 < nframes ? ZMQ_SNDMORE : 0);
}

void tp_restart(struct tp *p)
{
	p->seq = 0;
	for (int i = 0; i < RING; i++) {
		free(p->ring[i].data);
		p->ring[i].data = NULL;
	}
}

/* The replay's end marker to client: ["", -1, ""], or ["", "", -1, ""]
 * with 4 frames (the end marker's topic is empty). */
static void send_end(struct tp *p, const void *client, size_t len)
{
	unsigned char end[8];
	be8(end, -1);
	zmq_send(p->router, client, len, ZMQ_SNDMORE);
	zmq_send(p->router, "", 0, ZMQ_SNDMORE);
	if (p->reply_frames == 4)
		zmq_send(p->router, "", 0, ZMQ_SNDMORE);
	zmq_send(p->router, end, 8, ZMQ_SNDMORE);
	zmq_send(p->router, "", 0, 0);
}

void tp_replay_send_end(struct tp *p)
{
	if (p->late_client_len)
		send_end(p, p->late_client, p->late_client_len);
	p->late_client_len = 0;
}

void tp_service(struct tp *p)
{
	while (p->mode != TP_REPLAY_HOLD) {
		zmq_msg_t f[3];
		int n = 0, more = 1;
		while (more && n < 3) {
			zmq_msg_init(&f[n]);
			if (zmq_msg_recv(&f[n], p->router, n ? 0 : ZMQ_DONTWAIT) < 0) {
				zmq_msg_close(&f[n]);
				return;
			}
			more = zmq_msg_more(&f[n]);
			n++;
		}
		if (n == 3 && zmq_msg_size(&f[2]) == 8) {
			const unsigned char *b = zmq_msg_data(&f[2]);
			int64_t from = 0;
			for (int i = 0; i < 8; i++)
				from = (int64_t)((uint64_t)from << 8 | b[i]);
			enum tp_replay mode = p->mode;
			if (mode == TP_REPLAY_NO_END_ONCE)
				p->mode = TP_REPLAY_NORMAL;
			if (mode == TP_REPLAY_ONCE_THEN_HOLD)
				p->mode = TP_REPLAY_HOLD; /* after this answer */
			if (p->forge) {
				unsigned char sb[8];
				be8(sb, p->forge_seq);
				zmq_send(p->router, zmq_msg_data(&f[0]), zmq_msg_size(&f[0]), ZMQ_SNDMORE);
				zmq_send(p->router, "", 0, ZMQ_SNDMORE);
				zmq_send(p->router, sb, 8, ZMQ_SNDMORE);
				zmq_send(p->router, EMPTY_BATCH, sizeof EMPTY_BATCH, 0);
			}
			int64_t lo = p->seq > RING ? p->seq - RING : 0;
			if (mode == TP_REPLAY_END_ONLY)
				lo = p->seq; /* nothing that far back */
			for (int64_t s = from < lo ? lo : from; s < p->seq; s++) {
				int i = (int)(s % RING);
				if (!p->ring[i].data)
					continue;
				unsigned char sb[8];
				be8(sb, s);
				zmq_send(p->router, zmq_msg_data(&f[0]), zmq_msg_size(&f[0]), ZMQ_SNDMORE);
				zmq_send(p->router, "", 0, ZMQ_SNDMORE);
				if (p->reply_frames == 4)
					zmq_send(p->router, "kv", 2, ZMQ_SNDMORE);
				zmq_send(p->router, sb, 8, ZMQ_SNDMORE);
				zmq_send(p->router, p->ring[i].data, p->ring[i].len, 0);
			}
			if (mode == TP_REPLAY_NO_END || mode == TP_REPLAY_NO_END_ONCE)
				goto done;
			if (mode == TP_REPLAY_END_LATER) {
				p->mode = TP_REPLAY_NORMAL;
				p->late_client_len = zmq_msg_size(&f[0]) < sizeof p->late_client
				                         ? zmq_msg_size(&f[0])
				                         : sizeof p->late_client;
				memcpy(p->late_client, zmq_msg_data(&f[0]), p->late_client_len);
				goto done;
			}
			send_end(p, zmq_msg_data(&f[0]), zmq_msg_size(&f[0]));
		}
	done:
		for (int i = 0; i < n; i++)
			zmq_msg_close(&f[i]);
	}
}
