/* SPDX-License-Identifier: Apache-2.0 */
/*
 * --directory fleet: the simulator's lookups answered by the real fleet
 * directory (fleet/, docs/fleet.md) instead of the modelled one in store.c.
 *
 * Every engine's local cache publishes KV events (BlockStored, BlockRemoved)
 * on its own ZeroMQ XPUB socket over inproc://, encoded with msgpack-c in
 * vLLM's map layout; the checkpoint store publishes one stream per serving
 * node (medium "CPU": external for every engine). With --local-cache
 * boundary a second group (group_idx 1) carries the recurrent state where
 * an entry or a checkpoint ends (the fleet's state_groups). Node k's kva_fleet
 * subscribes to all N node streams (its own marked self) and to store
 * stream k, and its answers go to engine k through kva_lookup_answer; its
 * evictions through kva_checkpoint_evicted. Block i of an agent's session
 * has a hash of (agent, session, i), so a session's blocks form one chain,
 * registered once per session with kva_fleet_chain_register.
 *
 * Determinism: the fleet runs on its own threads in real time; the
 * simulation waits for it (bounded, real time) at the two places its
 * output enters the engine. Before engine k steps, fleet k has applied
 * every batch published so far (kva_fleet_publisher_seq), so the evictions
 * it reports reach that step. A lookup is forwarded when its simulated
 * answer time comes (the directory latency stays the modelled one), after
 * the same catch-up, and the simulation waits until the fleet answered it
 * (kva_fleet_lookups_done). Events an instant produces are batched per
 * publisher and sent at the next such point. Watches never expire in real
 * time, the index is sized so its cap never evicts (checked at the end):
 * what the fleet answers is then a function of what was published.
 *
 * Without ZeroMQ/msgpack (KVA_SIM_FLEET undefined) the flag is refused.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

#ifndef KVA_SIM_FLEET

bool sim_fleetdir_available(void) { return false; }
int sim_fleetdir_create(struct sim *s)
{
	(void)s;
	return -ENOTSUP;
}
void sim_fleetdir_destroy(struct sim *s) { (void)s; }
void sim_fleetdir_touch(struct sim *s, struct sim_agent *a)
{
	(void)s;
	(void)a;
}
void sim_fleetdir_before_step(struct sim *s, struct sim_node *n)
{
	(void)s;
	(void)n;
}
void sim_fleetdir_answer(struct sim *s, const struct sim_event *ev)
{
	(void)s;
	(void)ev;
}

#else

#include <msgpack.h>
#include <sched.h>
#include <sys/resource.h>
#include <time.h>
#include <zmq.h>

#include "kvadmit/fleet.h"
#include "tsan_libzmq.h"

#define WAIT_S 60.0 /* real seconds the fleet may take to catch up */

/* One publisher: an XPUB socket and the batch being built. */
struct fpub {
	void *sock;
	char endpoint[64];
	int64_t seq; /* batches sent */
	msgpack_sbuffer ev;
	msgpack_packer pk;
	uint32_t nev;
	const char *medium; /* NULL: the engine's GPU */
};

/* What has been published for an agent. */
struct fagent {
	uint32_t local_session, local_blocks; /* on its node's stream */
	uint32_t store_session, store_blocks; /* on its store stream */
	uint32_t chain_session;		      /* 0: none registered */
	uint64_t chain_at;		      /* the fleet's registration count then */
	bool dirty;
};

struct sim_fleetdir {
	void *zctx;
	uint32_t n;
	struct fpub *node, *store; /* n each */
	kva_fleet **fleet;	   /* n */
	uint64_t *issued;	   /* lookups forwarded to fleet k */
	uint64_t *registered;	   /* chains registered with fleet k */
	int64_t *synced;	   /* fleet k: total batches at its last catch-up */
	int64_t node_total;	   /* batches sent on all node streams */
	uint32_t max_chains, chain_len;
	struct fagent *ag;
	uint32_t *dirty, ndirty;
	uint64_t *hashes; /* chain_len */
	uint64_t waits;
};

static double wall(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Waiting for another thread: yield first, then sleep a little. */
static void backoff(uint32_t *spins)
{
	if ((*spins)++ < 64) {
		sched_yield();
		return;
	}
	struct timespec t = {0, 20000};
	nanosleep(&t, NULL);
}

/* Block i of an agent's session: its prefix hash (the chain's identity). */
static uint64_t block_hash(uint32_t agent, uint32_t session, uint32_t i)
{
	return sim_mix(sim_mix((uint64_t)(agent + 1) << 32 | session) ^ i);
}

static void str(msgpack_packer *pk, const char *s)
{
	size_t n = strlen(s);
	msgpack_pack_str(pk, n);
	msgpack_pack_str_body(pk, s, n);
}

/* One event of vLLM's map layout (kv_events.py: BlockStored / BlockRemoved,
 * int hashes) for blocks [from, to) of (agent, session). */
static void put_event(struct fpub *p, bool stored, uint32_t agent, uint32_t session,
		      uint32_t from, uint32_t to, uint32_t bs, uint32_t group)
{
	msgpack_packer *pk = &p->pk;
	msgpack_pack_map(pk, stored ? 9 : 4);
	str(pk, "type");
	str(pk, stored ? "BlockStored" : "BlockRemoved");
	str(pk, "block_hashes");
	msgpack_pack_array(pk, to - from);
	for (uint32_t i = from; i < to; i++)
		msgpack_pack_uint64(pk, block_hash(agent, session, i));
	if (stored) {
		str(pk, "parent_block_hash");
		if (from)
			msgpack_pack_uint64(pk, block_hash(agent, session, from - 1));
		else
			msgpack_pack_nil(pk);
		str(pk, "token_ids"); /* the tokens are not simulated: their positions */
		msgpack_pack_array(pk, (to - from) * bs);
		for (uint64_t t = (uint64_t)from * bs; t < (uint64_t)to * bs; t++)
			msgpack_pack_uint32(pk, (uint32_t)t);
		str(pk, "block_size");
		msgpack_pack_uint32(pk, bs);
		str(pk, "lora_id");
		msgpack_pack_nil(pk);
	}
	str(pk, "medium");
	if (p->medium)
		str(pk, p->medium);
	else
		msgpack_pack_nil(pk);
	if (stored) {
		str(pk, "lora_name");
		msgpack_pack_nil(pk);
	}
	str(pk, "group_idx");
	msgpack_pack_uint32(pk, group);
	p->nev++;
}

/* Sends the batch built so far: (topic, sequence, EventBatch). */
static int pub_flush(struct sim *s, struct fpub *p)
{
	if (!p->nev)
		return 0;
	msgpack_sbuffer b;
	msgpack_sbuffer_init(&b);
	msgpack_packer pk;
	msgpack_packer_init(&pk, &b, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 3);
	str(&pk, "ts");
	msgpack_pack_double(&pk, (double)s->now_ns / SIM_NS_PER_S); /* simulated time */
	str(&pk, "events");
	msgpack_pack_array(&pk, p->nev);
	msgpack_sbuffer_write(&b, p->ev.data, p->ev.size);
	str(&pk, "data_parallel_rank");
	msgpack_pack_uint32(&pk, 0);
	unsigned char seq[8];
	for (int i = 0; i < 8; i++)
		seq[i] = (unsigned char)((uint64_t)p->seq >> (56 - 8 * i));
	int rc = 0;
	if (zmq_send(p->sock, "kv", 2, ZMQ_SNDMORE) < 0 ||
	    zmq_send(p->sock, seq, 8, ZMQ_SNDMORE) < 0 || zmq_send(p->sock, b.data, b.size, 0) < 0)
		rc = zmq_errno() ? -zmq_errno() : -EIO;
	msgpack_sbuffer_destroy(&b);
	msgpack_sbuffer_clear(&p->ev);
	p->nev = 0;
	p->seq++;
	return rc;
}

/* Groups (group_idx): 0 is the attention KV of every block; with
 * --local-cache boundary (a model with recurrent state) group 1 is the
 * state, which exists only where an entry or a checkpoint ends, and the
 * fleet counts a prefix only where its last block has it (state_groups). */
enum { G_KV = 0, G_STATE = 1 };

/* Publishes what changed for agent a since it was last published: blocks
 * of a session it left are removed; its local cache entry is stored or cut
 * to what the LRU holds; a running request's full blocks are cached too,
 * as in vLLM's prefix cache (a snapshot: no lookup can be for it while it
 * runs); the store holds every checkpoint of the session. */
static void agent_publish(struct sim *s, struct sim_agent *a)
{
	struct sim_fleetdir *fd = s->fleetdir;
	struct fagent *g = &fd->ag[a->index];
	uint32_t pt = s->sc->page_tokens, ai = a->index;
	bool bnd = s->sc->local_boundary;
	struct fpub *np = &fd->node[a->node], *sp = &fd->store[a->node];
	g->dirty = false;
	uint32_t lb = g->local_blocks;
	if (g->local_session != a->session) {
		if (lb) {
			put_event(np, false, ai, g->local_session, 0, lb, pt, G_KV);
			if (bnd)
				put_event(np, false, ai, g->local_session, lb - 1, lb, pt, G_STATE);
		}
		lb = 0;
		g->local_session = a->session;
	}
	uint32_t want = a->in_lru ? a->local_pages : a->running ? a->kv / pt : 0;
	if (want != lb) {
		if (want > lb)
			put_event(np, true, ai, a->session, lb, want, pt, G_KV);
		else
			put_event(np, false, ai, a->session, want, lb, pt, G_KV);
		if (bnd && lb) /* one bundle per entry: the old state goes */
			put_event(np, false, ai, a->session, lb - 1, lb, pt, G_STATE);
		if (bnd && want)
			put_event(np, true, ai, a->session, want - 1, want, pt, G_STATE);
	}
	g->local_blocks = want;

	uint32_t sb = g->store_blocks;
	if (g->store_session != a->session) {
		if (sb) { /* states at every checkpoint it had: removing absent ones is a no-op */
			put_event(sp, false, ai, g->store_session, 0, sb, pt, G_KV);
			if (bnd)
				put_event(sp, false, ai, g->store_session, 0, sb, pt, G_STATE);
		}
		sb = 0;
		g->store_session = a->session;
	}
	uint32_t have = a->n_ext ? a->ext_pos[0] / pt : 0;
	if (have > sb) { /* within a session the store only grows */
		put_event(sp, true, ai, a->session, sb, have, pt, G_KV);
		if (bnd)
			put_event(sp, true, ai, a->session, have - 1, have, pt, G_STATE);
		sb = have;
	}
	g->store_blocks = sb;
}

void sim_fleetdir_touch(struct sim *s, struct sim_agent *a)
{
	struct sim_fleetdir *fd = s->fleetdir;
	if (!fd || fd->ag[a->index].dirty)
		return;
	fd->ag[a->index].dirty = true;
	fd->dirty[fd->ndirty++] = a->index;
}

/* Everything changed so far goes out (in the order agents changed). */
static void flush(struct sim *s)
{
	struct sim_fleetdir *fd = s->fleetdir;
	for (uint32_t i = 0; i < fd->ndirty; i++)
		agent_publish(s, &s->agents[fd->dirty[i]]);
	fd->ndirty = 0;
	for (uint32_t k = 0; k < fd->n; k++) {
		int64_t before = fd->node[k].seq;
		int rc = pub_flush(s, &fd->node[k]);
		fd->node_total += fd->node[k].seq - before;
		if (!rc)
			rc = pub_flush(s, &fd->store[k]);
		if (rc)
			sim_fatal(s, "fleet directory: publishing", rc);
	}
}

/* Until fleet k has applied every batch sent on its streams. */
static void catch_up(struct sim *s, uint32_t k)
{
	struct sim_fleetdir *fd = s->fleetdir;
	int64_t total = fd->node_total + fd->store[k].seq;
	if (fd->synced[k] == total)
		return;
	double deadline = wall() + WAIT_S;
	uint32_t spins = 0;
	for (uint32_t id = 0; id <= fd->n && !s->fatal; id++) {
		int64_t want = id < fd->n ? fd->node[id].seq : fd->store[k].seq, got = -1;
		while (kva_fleet_publisher_seq(fd->fleet[k], id, &got) == 0 && got < want) {
			if (wall() > deadline) {
				sim_fatal(s, "fleet directory: events not applied in time", -ETIMEDOUT);
				return;
			}
			backoff(&spins);
		}
	}
	fd->synced[k] = total;
	fd->waits++;
}

void sim_fleetdir_before_step(struct sim *s, struct sim_node *n)
{
	if (!s->fleetdir)
		return;
	flush(s);
	catch_up(s, n->index);
}

void sim_fleetdir_answer(struct sim *s, const struct sim_event *ev)
{
	struct sim_fleetdir *fd = s->fleetdir;
	uint64_t key = ev->u.lookup.key;
	uint32_t idx = (uint32_t)(key & 0xffffffffu) - 1, session = (uint32_t)(key >> 32);
	if (idx >= s->sc->w.agents)
		return;
	struct sim_agent *a = &s->agents[idx];
	uint32_t k = a->node;
	struct fagent *g = &fd->ag[idx];
	flush(s);
	catch_up(s, k);
	if (s->fatal)
		return;
	/* one registration per session, renewed before the FIFO of chains
	 * (max_chains) would push it out */
	if (g->chain_session != session || fd->registered[k] - g->chain_at >= fd->max_chains - 1) {
		for (uint32_t i = 0; i < fd->chain_len; i++)
			fd->hashes[i] = block_hash(idx, session, i);
		int rc = kva_fleet_chain_register(fd->fleet[k], key, fd->hashes, fd->chain_len);
		if (rc) {
			sim_fatal(s, "kva_fleet_chain_register", rc);
			return;
		}
		g->chain_session = session;
		g->chain_at = fd->registered[k]++;
	}
	kva_fleet_lookup(fd->fleet[k], key, ev->u.lookup.prompt, ev->u.lookup.token);
	fd->issued[k]++;
	double deadline = wall() + WAIT_S;
	uint32_t spins = 0;
	while (kva_fleet_lookups_done(fd->fleet[k]) < fd->issued[k]) {
		if (wall() > deadline) {
			sim_fatal(s, "fleet directory: lookup not answered in time", -ETIMEDOUT);
			return;
		}
		backoff(&spins);
	}
}

/* The XPUB sees each subscription: wait for `want` of them, so that no
 * batch is sent before its subscribers listen (ZeroMQ's slow joiner). */
static int await_subscribers(struct fpub *p, int want)
{
	char buf[64];
	for (int got = 0; got < want;) {
		int n = zmq_recv(p->sock, buf, sizeof buf, 0);
		if (n < 0)
			return zmq_errno() ? -zmq_errno() : -EIO;
		if (n >= 1 && buf[0] == 1)
			got++;
	}
	return 0;
}

static int pub_open(struct sim_fleetdir *fd, struct fpub *p, const char *name, uint32_t i,
		    const char *medium)
{
	int zero = 0, one = 1, timeout_ms = (int)(WAIT_S * 1000);
	msgpack_sbuffer_init(&p->ev);
	msgpack_packer_init(&p->pk, &p->ev, msgpack_sbuffer_write);
	p->medium = medium;
	snprintf(p->endpoint, sizeof p->endpoint, "inproc://kvadmit-sim-%s-%u", name, i);
	p->sock = zmq_socket(fd->zctx, ZMQ_XPUB);
	if (!p->sock)
		return zmq_errno() ? -zmq_errno() : -ENOMEM;
	/* no high-water mark: a batch is never dropped (the fleet would see
	 * a gap) */
	zmq_setsockopt(p->sock, ZMQ_SNDHWM, &zero, sizeof zero);
	zmq_setsockopt(p->sock, ZMQ_LINGER, &zero, sizeof zero);
	zmq_setsockopt(p->sock, ZMQ_XPUB_VERBOSE, &one, sizeof one);
	zmq_setsockopt(p->sock, ZMQ_RCVTIMEO, &timeout_ms, sizeof timeout_ms);
	return zmq_bind(p->sock, p->endpoint) < 0 ? -zmq_errno() : 0;
}

bool sim_fleetdir_available(void) { return true; }

int sim_fleetdir_create(struct sim *s)
{
	const struct sim_scenario *sc = s->sc;
	uint32_t n = s->n_nodes, pt = sc->page_tokens;
	struct sim_fleetdir *fd = calloc(1, sizeof(*fd));
	if (!fd)
		return -ENOMEM;
	s->fleetdir = fd;
	fd->n = n;
	fd->chain_len = (sc->m.max_context + pt - 1) / pt;
	fd->node = calloc(n, sizeof(*fd->node));
	fd->store = calloc(n, sizeof(*fd->store));
	fd->fleet = calloc(n, sizeof(*fd->fleet));
	fd->issued = calloc(n, sizeof(*fd->issued));
	fd->registered = calloc(n, sizeof(*fd->registered));
	fd->synced = calloc(n, sizeof(*fd->synced));
	fd->ag = calloc(sc->w.agents, sizeof(*fd->ag));
	fd->dirty = calloc(sc->w.agents, sizeof(*fd->dirty));
	fd->hashes = calloc(fd->chain_len, sizeof(*fd->hashes));
	kva_fleet_publisher *pubs = calloc(n + 1, sizeof(*pubs));
	if (!fd->node || !fd->store || !fd->fleet || !fd->issued || !fd->registered ||
	    !fd->synced || !fd->ag || !fd->dirty || !fd->hashes || !pubs) {
		free(pubs);
		return -ENOMEM;
	}
	/* every ZeroMQ socket holds a descriptor (N fleets x N + 1 subscriptions,
	 * each with a monitor): the soft limit goes up to the hard one */
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	fd->zctx = zmq_ctx_new();
	if (!fd->zctx) {
		free(pubs);
		return -ENOMEM;
	}
	/* per fleet: 1 + N + 1 sockets and a monitor pair per subscription */
	zmq_ctx_set(fd->zctx, ZMQ_MAX_SOCKETS, (int)(8 * (n + 2) * (n + 1) + 64));
	int rc = 0;
	for (uint32_t k = 0; k < n && !rc; k++) {
		rc = pub_open(fd, &fd->node[k], "node", k, NULL);
		if (!rc)
			rc = pub_open(fd, &fd->store[k], "store", k, "CPU");
	}
	/* The index holds every node's cache (its pool at most) and this
	 * node's share of the store (a session's chain per agent), with room
	 * to spare: the cap must never evict, or the answers would depend on
	 * the order batches from different streams were applied in. */
	uint64_t per_node = (sc->w.agents + n - 1) / n;
	uint64_t max_blocks = (uint64_t)n * sc->pool_pages + 2 * per_node * fd->chain_len;
	max_blocks += max_blocks / 4 + 1024;
	fd->max_chains = (uint32_t)(2 * per_node + 64);
	for (uint32_t k = 0; k < n && !rc; k++) {
		for (uint32_t j = 0; j < n; j++)
			pubs[j] = (kva_fleet_publisher){.endpoint = fd->node[j].endpoint,
							.self = j == k};
		pubs[n] = (kva_fleet_publisher){.endpoint = fd->store[k].endpoint};
		kva_fleet_config fc;
		kva_fleet_config_default(&fc);
		fc.publishers = pubs;
		fc.npublishers = n + 1;
		fc.block_size = pt;
		fc.full_groups = 1u << G_KV;
		fc.state_groups = sc->local_boundary ? 1u << G_STATE : 0;
		fc.max_blocks = max_blocks;
		fc.max_chains = fd->max_chains;
		fc.max_chain_blocks = fd->chain_len;
		fc.watch_ns = UINT64_MAX / 4; /* a real-time expiry would not be deterministic */
		fc.zmq_context = fd->zctx;
		fd->fleet[k] = kva_fleet_create(&fc, &rc);
		if (fd->fleet[k])
			rc = kva_fleet_attach(fd->fleet[k], s->nodes[k].e);
	}
	free(pubs);
	for (uint32_t k = 0; k < n && !rc; k++) {
		rc = await_subscribers(&fd->node[k], (int)n);
		if (!rc)
			rc = await_subscribers(&fd->store[k], 1);
	}
	if (rc)
		return rc;
	/* a warm start: the histories stored before t = 0 */
	for (uint32_t i = 0; i < sc->w.agents; i++)
		if (s->agents[i].n_ext)
			sim_fleetdir_touch(s, &s->agents[i]);
	return 0;
}

/* The fleets go before the engines they answer. Checks that nothing was
 * lost or capped (the run would not be deterministic) and counts the
 * evictions they reported. */
void sim_fleetdir_destroy(struct sim *s)
{
	struct sim_fleetdir *fd = s->fleetdir;
	if (!fd)
		return;
	uint64_t batches = 0, blocks = 0, bytes = 0, lookups = 0, mem = 0;
	for (uint32_t k = 0; k < fd->n; k++) {
		if (!fd->fleet[k])
			continue;
		kva_fleet_stats st;
		kva_fleet_stats_get(fd->fleet[k], &st);
		s->res->evictions_reported += st.evictions_reported;
		batches += st.batches;
		blocks += st.blocks_stored + st.blocks_removed;
		bytes += st.bytes;
		lookups += st.answered + st.answer_errors;
		mem += st.index_bytes;
		if (!s->fatal && (st.cap_evictions || st.lost_batches || st.malformed || st.gaps))
			sim_fatal(s, "fleet directory: index capped or a batch lost", -EOVERFLOW);
		kva_fleet_destroy(fd->fleet[k]);
	}
	/* stderr: the JSON on stdout stays byte-identical */
	fprintf(stderr,
		"kvadmit-sim: fleet directory (%s): %u fleets applied %llu batches, %llu block events,"
		" %.1f MB; %llu lookups answered; %llu catch-ups; index tables %.0f MB\n",
		s->policy == SIM_POLICY_WAIT ? "wait" : "legacy", fd->n,
		(unsigned long long)batches, (unsigned long long)blocks, (double)bytes / 1e6,
		(unsigned long long)lookups, (unsigned long long)fd->waits, (double)mem / 1e6);
	for (uint32_t k = 0; k < fd->n; k++) {
		struct fpub *ps[2] = {&fd->node[k], &fd->store[k]};
		for (int j = 0; j < 2; j++) {
			if (ps[j]->sock)
				zmq_close(ps[j]->sock);
			msgpack_sbuffer_destroy(&ps[j]->ev);
		}
	}
	if (fd->zctx)
		zmq_ctx_term(fd->zctx);
	free(fd->node);
	free(fd->store);
	free(fd->fleet);
	free(fd->issued);
	free(fd->registered);
	free(fd->synced);
	free(fd->ag);
	free(fd->dirty);
	free(fd->hashes);
	free(fd);
	s->fleetdir = NULL;
}

#endif
