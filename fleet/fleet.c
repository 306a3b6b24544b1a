/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fleet: the public API of kvadmit/fleet.h. Create and destroy, the calls
 * any thread makes (a lookup, a chain registered, a publisher added or
 * removed: each a command queued for the I/O thread, R1), and the readers
 * of its progress and statistics. The files below it, and the labels, are
 * listed in fleet_state.h.
 */
#define _GNU_SOURCE
#include "fleet_state.h"

#include <kvadmit/lockfree/thread_start.h>

#include <errno.h>
#include <pthread.h>
#include <stdalign.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "apply.h"
#include "auth.h"
#include "chain.h"
#include "io_thread.h"
#include "holders.h"
#include "score.h"
#include "quota.h"
#include "watch.h"

_Static_assert(MAX_MEDIA <= KVF_SCORE_MEDIA, "the readers' table keys every medium id");

void kva_fleet_config_default(kva_fleet_config *c)
{
	memset(c, 0, sizeof(*c));
	c->max_blocks = 4u << 20;
	c->max_chains = 65536;
	c->max_chain_blocks = 65536;
	c->max_message_bytes = 16u << 20;
	c->max_pending = 4096;
	c->replay_timeout_ns = 2000000000ull;
	c->drop_after_ns = 30000000000ull;
	c->watch_ns = 600000000000ull;
	c->full_groups = 1;
	c->local_media = "GPU";
	c->max_media_per_publisher = 8;
	c->max_manifest_per_publisher = 2;
	c->quarantine_ns = 60000000000ull;
}

uint64_t kva_fleet_hash_bytes(const void *p, size_t n) { return kvf_hash_from_bytes(p, n); }

/* Any thread: hands cmd to the I/O thread, waking it when the queue was
 * empty (an eventfd write never blocks here). */
static void push_cmd(kva_fleet *f, struct cmd *cmd)
{
	if (kva_inbox_push(&f->commands, &cmd->node)) { /* R1: the command's fields */
		uint64_t one = 1;
		ssize_t w = write(f->wake_fd, &one, sizeof one);
		(void)w;
	}
}

/* A lookup answered a miss at once, on the caller's thread, counted in
 * stat. */
static void lookup_miss_now(kva_fleet *f, kva_lookup_token token, size_t stat)
{
	kva_engine *e = atomic_load_explicit(&f->engine, memory_order_acquire); /* A2 */
	kva_manifest m = {0};
	atomic_fetch_add_explicit(&f->stats[stat], 1, memory_order_relaxed);
	if (e)
		kva_lookup_answer(e, token, &m);
	atomic_fetch_add_explicit(&f->lookups_done, 1, memory_order_release); /* R3 */
}

void kva_fleet_lookup(void *fleet, uint64_t prefix_key, uint32_t prompt_tokens,
                      kva_lookup_token token)
{
	kva_fleet *f = fleet;
	if (!f)
		return; /* no fleet, no engine to answer: the lookup times out */
	/* The queue is bounded: a stalled I/O thread costs no memory past
	 * KVF_MAX_QUEUED_LOOKUPS commands (relaxed: a bound, nothing read
	 * after it). */
	if (atomic_fetch_add_explicit(&f->lookups_queued, 1, memory_order_relaxed) >=
	    KVF_MAX_QUEUED_LOOKUPS) {
		atomic_fetch_sub_explicit(&f->lookups_queued, 1, memory_order_relaxed);
		lookup_miss_now(f, token, STAT(lookups_shed));
		return;
	}
	struct cmd *cmd = malloc(sizeof(*cmd));
	if (!cmd) {
		atomic_fetch_sub_explicit(&f->lookups_queued, 1, memory_order_relaxed);
		lookup_miss_now(f, token, STAT(lookup_nomem));
		return;
	}
	kva_inbox_node_init(&cmd->node);
	cmd->kind = CMD_LOOKUP;
	cmd->prefix_key = prefix_key;
	cmd->prompt_tokens = prompt_tokens;
	cmd->token = token;
	cmd->sent_ns = now_ns();
	push_cmd(f, cmd);
}

int kva_fleet_chain_register(kva_fleet *f, uint64_t prefix_key, const uint64_t *hashes,
                             uint32_t n)
{
	if (!f || (!hashes && n) || n == 0)
		return -EINVAL;
	if (n > f->cfg.max_chain_blocks)
		return -E2BIG;
	struct chain *chain = malloc(sizeof(*chain) + (size_t)n * sizeof(uint64_t));
	if (!chain)
		return -ENOMEM;
	kva_inbox_node_init(&chain->cmd.node);
	chain->cmd.kind = CMD_CHAIN;
	chain->cmd.prefix_key = prefix_key;
	chain->nhashes = n;
	memcpy(chain->hashes, hashes, (size_t)n * sizeof(uint64_t));
	push_cmd(f, &chain->cmd);
	return 0;
}

int kva_fleet_report_failure(kva_fleet *f, uint64_t checkpoint_id)
{
	if (!f || !checkpoint_id)
		return -EINVAL;
	struct cmd *cmd = calloc(1, sizeof(*cmd));
	if (!cmd)
		return -ENOMEM;
	kva_inbox_node_init(&cmd->node);
	cmd->kind = CMD_FAILURE;
	cmd->prefix_key = checkpoint_id;
	push_cmd(f, cmd);
	return 0;
}

static char *dupstr(const char *s) { return s ? strdup(s) : NULL; }

int kva_fleet_add_publisher(kva_fleet *f, const kva_fleet_publisher *p)
{
	if (!f || !p || !p->endpoint || kvf_auth_check(f, p->curve_server_key))
		return -EINVAL;
	struct add_cmd *add = calloc(1, sizeof(*add));
	if (!add)
		return -ENOMEM;
	add->endpoint = dupstr(p->endpoint);
	add->replay_endpoint = dupstr(p->replay_endpoint);
	add->topic = dupstr(p->topic);
	add->self = p->self;
	if (!add->endpoint || (p->replay_endpoint && !add->replay_endpoint) ||
	    (p->topic && !add->topic)) {
		kvf_add_cmd_free(add);
		return -ENOMEM;
	}
	for (uint32_t id = 0; id < KVA_FLEET_MAX_PUBLISHERS; id++) {
		uint8_t want = SLOT_FREE;
		if (atomic_load_explicit(&f->pub_slot[id], memory_order_relaxed) == SLOT_FREE &&
		    atomic_compare_exchange_strong_explicit(&f->pub_slot[id], &want, SLOT_ADDING,
		                                            memory_order_acquire,
		                                            memory_order_relaxed)) {
			kvf_auth_publisher(f, id, p->curve_server_key); /* checked above */
			kva_inbox_node_init(&add->cmd.node);
			add->cmd.kind = CMD_ADD_PUB;
			add->cmd.pub_id = id;
			push_cmd(f, &add->cmd);
			return (int)id;
		}
	}
	kvf_add_cmd_free(add);
	return -ENOSPC;
}

int kva_fleet_remove_publisher(kva_fleet *f, uint32_t id)
{
	if (!f || id >= KVA_FLEET_MAX_PUBLISHERS)
		return -EINVAL;
	struct cmd *cmd = calloc(1, sizeof(*cmd)); /* first: nothing to undo after the CAS */
	if (!cmd)
		return -ENOMEM;
	uint8_t want = SLOT_TAKEN;
	if (!atomic_compare_exchange_strong_explicit(&f->pub_slot[id], &want, SLOT_REMOVING,
	                                             memory_order_acq_rel, memory_order_relaxed)) {
		want = SLOT_ADDING; /* not open yet: the removal follows the addition */
		if (!atomic_compare_exchange_strong_explicit(&f->pub_slot[id], &want, SLOT_REMOVING,
		                                             memory_order_acq_rel,
		                                             memory_order_relaxed)) {
			free(cmd);
			return -ENOENT;
		}
	}
	kva_inbox_node_init(&cmd->node);
	cmd->kind = CMD_REMOVE_PUB;
	cmd->pub_id = id;
	push_cmd(f, cmd);
	return 0;
}

int kva_fleet_publisher_seq(const kva_fleet *f, uint32_t id, int64_t *next_seq)
{
	if (!f || !next_seq || id >= KVA_FLEET_MAX_PUBLISHERS)
		return -EINVAL;
	kva_fleet *m = (kva_fleet *)f;
	if (atomic_load_explicit(&m->pub_slot[id], memory_order_acquire) != SLOT_TAKEN)
		return -ENOENT;
	*next_seq = atomic_load_explicit(&m->pubs[id].next_seq, memory_order_acquire); /* A4 */
	return 0;
}

uint64_t kva_fleet_lookups_done(const kva_fleet *f)
{
	return f ? atomic_load_explicit(&((kva_fleet *)f)->lookups_done,
	                                memory_order_acquire) /* A3 */
	         : 0;
}

static int config_valid(const kva_fleet_config *c)
{
	if (!c || !c->publishers || c->npublishers == 0 ||
	    c->npublishers > KVA_FLEET_MAX_PUBLISHERS || c->max_blocks == 0 || c->max_chains == 0 ||
	    c->max_chain_blocks == 0 || c->max_message_bytes == 0 || c->max_pending == 0 ||
	    !(c->full_groups | c->state_groups) || c->max_media_per_publisher == 0 ||
	    c->max_media_per_publisher > MAX_MEDIA || c->max_manifest_per_publisher == 0 ||
	    c->max_manifest_per_publisher > KVA_MAX_CHECKPOINTS)
		return -EINVAL;
	for (uint32_t i = 0; i < c->npublishers; i++)
		if (!c->publishers[i].endpoint)
			return -EINVAL;
	if (c->nblock_sizes > MAX_MEDIA * 32 || (c->nblock_sizes && !c->block_sizes))
		return -EINVAL;
	for (uint32_t i = 0; i < c->nblock_sizes; i++)
		if (c->block_sizes[i].group_idx > 31 || c->block_sizes[i].block_size == 0)
			return -EINVAL;
	return 0;
}

void kva_fleet_destroy(kva_fleet *f)
{
	if (!f)
		return;
	if (f->thread_started) {
		atomic_store_explicit(&f->stop, true, memory_order_release);
		uint64_t one = 1;
		ssize_t w = write(f->wake_fd, &one, sizeof one);
		(void)w;
		pthread_join(f->thread, NULL);
	}
	struct kva_inbox_batch batch;
	if (kva_inbox_drain_blocking(&f->commands, &batch)) {
		struct kva_inbox_node *node;
		while ((node = kva_inbox_batch_pop_blocking(&batch))) {
			struct cmd *cmd = caa_container_of(node, struct cmd, node);
			if (cmd->kind == CMD_ADD_PUB)
				kvf_add_cmd_free(caa_container_of(cmd, struct add_cmd, cmd));
			else
				free(cmd); /* a chain starts with its cmd */
		}
	}
	kva_inbox_fini(&f->commands);
	if (f->pubs)
		for (uint32_t i = 0; i < f->npubs; i++)
			kvf_pub_close(&f->pubs[i]);
	free(f->pubs);
	if (f->own_zmq_ctx && f->zmq_ctx)
		zmq_ctx_term(f->zmq_ctx);
	kvf_watches_free(f);
	free(f->watches);
	kvf_chains_free(f);
	free(f->chain_map);
	kvf_index_fini(&f->index);
	kvf_score_free(f->score);
	kvf_batch_fini(&f->batch);
	kvf_auth_fini(f);
	if (f->wake_fd >= 0)
		close(f->wake_fd);
	free(f);
}

/* The media names local to the self publisher: "GPU" and cfg->local_media
 * (comma-separated). */
static void local_media_init(kva_fleet *f, const char *names)
{
	kvf_medium_id(f, "GPU", 3);
	names = names ? names : "";
	while (*names) {
		size_t len = strcspn(names, ",");
		uint32_t medium = len ? kvf_medium_id(f, names, len) : NO_MEDIUM;
		if (medium != NO_MEDIUM)
			f->local_media |= 1ull << medium;
		names += len + (names[len] == ',');
	}
}

static kva_fleet *create_signals_blocked(const kva_fleet_config *cfg, int *err);

kva_fleet *kva_fleet_create(const kva_fleet_config *cfg, int *err)
{
	int rc = config_valid(cfg), dummy;
	if (!err)
		err = &dummy;
	if (rc) {
		*err = rc;
		return NULL;
	}
	/* Every thread that create starts blocks every signal: the I/O thread, and
	 * ZeroMQ's own threads, which its context starts at the first socket
	 * (kvf_pub_init) and which inherit this thread's mask. */
	sigset_t old;
	kva_signals_block_all(&old);
	kva_fleet *f = create_signals_blocked(cfg, err);
	kva_signals_restore(&old);
	return f;
}

static kva_fleet *create_signals_blocked(const kva_fleet_config *cfg, int *err)
{
	int rc;
	/* aligned: its queue's head and tail are alignas(64), which calloc's
	 * 16 bytes do not honour (UBSan's alignment check) */
	size_t size = (sizeof(kva_fleet) + alignof(kva_fleet) - 1) / alignof(kva_fleet) *
	              alignof(kva_fleet);
	kva_fleet *f = aligned_alloc(alignof(kva_fleet), size);
	if (f)
		memset(f, 0, size);
	if (!f) {
		*err = -ENOMEM;
		return NULL;
	}
	f->cfg = *cfg;
	f->cfg.publishers = NULL;
	f->cfg.curve_public_key = f->cfg.curve_secret_key = NULL; /* copied by auth.c */
	f->wake_fd = -1;
	f->epoch = 1;
	kva_inbox_init(&f->commands);
	f->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (f->wake_fd < 0) {
		rc = -errno;
		goto fail;
	}
	/* one index: the routers' table when there is one (holders.h) */
	rc = cfg->score ? 0 : kvf_index_init(&f->index, (size_t)kvf_holders_cap(f));
	if (rc)
		goto fail;
	kvf_batch_init(&f->batch, 0, 0);
	size_t map_size = 16;
	while (map_size < 2 * (size_t)cfg->max_chains)
		map_size *= 2;
	f->chain_map = calloc(map_size, sizeof(*f->chain_map));
	f->chain_mask = map_size - 1;
	kvf_key_random(&f->chain_key);
	f->watches = calloc(MAX_WATCHES, sizeof(*f->watches));
	f->pubs = calloc(KVA_FLEET_MAX_PUBLISHERS, sizeof(*f->pubs)); /* ids stay put */
	rc = -ENOMEM;
	if (!f->chain_map || !f->watches || !f->pubs)
		goto fail;
	if (cfg->score && !(f->score = kvf_score_new(cfg->full_groups,
	                                             cfg->full_groups | cfg->state_groups,
	                                             kvf_holders_cap(f), true)))
		goto fail;
	local_media_init(f, cfg->local_media);
	for (uint32_t i = 0; i < cfg->nblock_sizes; i++) {
		const kva_fleet_block_size *b = &cfg->block_sizes[i];
		uint32_t medium = kvf_medium_id(f, b->medium ? b->medium : "GPU",
		                                b->medium ? strlen(b->medium) : 3);
		rc = -EINVAL; /* more media names than the fleet's table holds */
		if (medium == NO_MEDIUM)
			goto fail;
		f->block_sizes[medium][b->group_idx] = b->block_size;
	}
	f->cfg.block_sizes = NULL; /* copied into the table */
	if ((rc = kvf_auth_init(f, cfg)))
		goto fail;
	f->zmq_ctx = cfg->zmq_context;
	if (!f->zmq_ctx) {
		f->zmq_ctx = zmq_ctx_new();
		f->own_zmq_ctx = true;
		if (!f->zmq_ctx) {
			rc = zmq_err();
			goto fail;
		}
	}
	f->npubs = cfg->npublishers;
	for (uint32_t i = 0; i < f->npubs; i++) {
		const kva_fleet_publisher *src = &cfg->publishers[i];
		char *endpoint = dupstr(src->endpoint), *replay = dupstr(src->replay_endpoint),
		     *topic = dupstr(src->topic);
		if ((src->replay_endpoint && !replay) || (src->topic && !topic)) {
			free(endpoint), free(replay), free(topic);
			rc = -ENOMEM;
			goto fail;
		}
		atomic_init(&f->pub_slot[i], SLOT_TAKEN);
		if ((rc = kvf_auth_publisher(f, i, src->curve_server_key))) {
			free(endpoint), free(replay), free(topic);
			goto fail;
		}
		if ((rc = kvf_pub_init(f, &f->pubs[i], i, endpoint, replay, topic, src->self)))
			goto fail;
	}
	kvf_quota_update(f);
	stat_set(f, STAT(index_bytes),
	         f->score ? kvf_score_bytes(f->score) : kvf_index_bytes(&f->index));
	stat_set(f, STAT(index_cap), kvf_holders_cap(f));
	rc = -pthread_create(&f->thread, NULL, kvf_io_thread, f);
	if (rc)
		goto fail;
	f->thread_started = true;
	*err = 0;
	return f;
fail:
	*err = rc;
	kva_fleet_destroy(f);
	return NULL;
}

int kva_fleet_attach(kva_fleet *f, kva_engine *e)
{
	if (!f || !e)
		return -EINVAL;
	atomic_store_explicit(&f->engine, e, memory_order_release); /* R2 */
	return 0;
}

int kva_fleet_score(const kva_fleet *f, const uint64_t *hashes, uint32_t n,
                    kva_fleet_match *out, uint32_t cap)
{
	if (!f || (!hashes && n) || (!out && cap))
		return -EINVAL;
	if (!f->score)
		return -ENOTSUP;
	uint32_t bs[MAX_MEDIA];
	for (uint32_t m = 0; m < MAX_MEDIA; m++)
		bs[m] = position_block_size(f, m);
	return kvf_score_query(f->score, (const char(*)[KVF_MEDIUM_MAX + 1])f->media, bs, hashes,
	                       n, out, cap);
}

void kva_fleet_stats_get(const kva_fleet *f, kva_fleet_stats *out)
{
	if (!f || !out)
		return;
	uint64_t *o = (uint64_t *)out;
	for (size_t i = 0; i < STAT_COUNT; i++)
		o[i] = atomic_load_explicit(&((kva_fleet *)f)->stats[i], memory_order_acquire);
}
