/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Everything outside the GPU that holds KV: the external checkpoint store
 * (always-write after each turn), the directory that answers lookups about
 * it after a simulated latency, the importer that copies checkpoints into
 * reserved pages at a simulated bandwidth, and the local cache — pages of
 * finished or preempted requests that still hold their KV while they sit in
 * the free pool, evicted least-recently-cached first as the pool fills.
 *
 * With --nodes N each engine has its own local cache and copy links; the
 * store and the directory are shared (an agent's checkpoints are found
 * wherever it is served).
 *
 * Ids: an agent's local checkpoint is (agent + 1) << 32 | 0xffffffff and
 * changes epoch whenever it shrinks, vanishes or is replaced; stored
 * checkpoints are (agent + 1) << 32 | seq, immutable, epoch 1.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "sim.h"

#define LOCAL_LOW 0xffffffffull

uint64_t sim_key(const struct sim_agent *a)
{
	return (uint64_t)a->session << 32 | (uint64_t)(a->index + 1);
}

uint64_t sim_local_id(const struct sim_agent *a)
{
	return (uint64_t)(a->index + 1) << 32 | LOCAL_LOW;
}

/* ---- directory ------------------------------------------------------------ */

/* Called by the engine inside kva_step: the answer arrives after the
 * directory's round trip and describes the store as it is then. */
void sim_dir_lookup_cb(void *ctx, uint64_t key, uint32_t prompt, kva_lookup_token t)
{
	struct sim *s = ((struct sim_node *)ctx)->s;
	/* round trips vary: uniform in [0.5, 1.5) x the mean latency, drawn per
	 * agent: a request's slot and generation depend on when the call_rcu
	 * thread hands retired slots back (and on the fleet's threads), so they
	 * must not seed the draw. Both directories (modelled, fleet) draw so. */
	uint32_t idx = (uint32_t)(key & 0xffffffffu) - 1;
	double jitter = 1.0; /* the mean, for a key that is no agent's (none is) */
	if (idx < s->sc->w.agents)
		jitter = 0.5 + sim_uniform(s->sc->w.seed ^ 0x100C0B5ull, idx + 1,
					   (uint64_t)1 << 63 | s->agents[idx].dir_draws++, 0);
	struct sim_event ev = {.t_ns = s->now_ns + sim_ns_of(s->sc->m.lookup_latency_s * jitter),
			       .kind = SIM_EV_ANSWER};
	ev.u.lookup.token = t;
	ev.u.lookup.key = key;
	ev.u.lookup.prompt = prompt;
	if (sim_clock_push(&s->clock, ev) != 0)
		sim_fatal(s, "event queue", -ENOMEM);
}

static void add_entry(kva_manifest *m, uint32_t pos, uint8_t loc, uint64_t id, uint64_t epoch,
		      uint8_t tier)
{
	if (pos == 0)
		return;
	/* keep ascending, unique positions; at equal positions local wins:
	 * reusing resident pages costs nothing */
	uint32_t i = m->count;
	while (i > 0 && m->entries[i - 1].position > pos)
		i--;
	if (i > 0 && m->entries[i - 1].position == pos) {
		if (loc == KVA_LOC_LOCAL)
			m->entries[i - 1] = (kva_checkpoint){.position = pos,
							     .location = loc,
							     .compatible = 1,
							     .id = id,
							     .epoch = epoch};
		return;
	}
	memmove(&m->entries[i + 1], &m->entries[i], (m->count - i) * sizeof(m->entries[0]));
	m->entries[i] = (kva_checkpoint){.position = pos,
					 .location = loc,
					 .compatible = 1,
					 .tier = tier,
					 .id = id,
					 .epoch = epoch};
	m->count++;
}

void sim_dir_answer(struct sim *s, const struct sim_event *ev)
{
	if (s->fleetdir) {
		sim_fleetdir_answer(s, ev);
		return;
	}
	kva_manifest m;
	memset(&m, 0, sizeof(m));
	uint64_t key = ev->u.lookup.key;
	uint32_t idx = (uint32_t)(key & 0xffffffffu) - 1;
	uint32_t pt = s->sc->page_tokens;
	if (idx < s->sc->w.agents && s->agents[idx].session == (uint32_t)(key >> 32)) {
		struct sim_agent *a = &s->agents[idx];
		for (uint32_t i = a->n_ext; i-- > 0;)
			add_entry(&m, a->ext_pos[i], KVA_LOC_EXTERNAL, a->ext_id[i], 1,
				  s->sc->tier[a->ext_tier[i]].kind);
		if (a->in_lru) {
			/* an attention prefix cache serves any page-aligned prefix of
			 * what it holds; a recurrent model's only the boundary its
			 * state was kept at (--local-cache boundary) */
			uint64_t have = (uint64_t)a->local_pages * pt;
			uint64_t cap = (uint64_t)ev->u.lookup.prompt / pt * pt;
			if (have <= cap || !s->sc->local_boundary)
				add_entry(&m, (uint32_t)(have < cap ? have : cap), KVA_LOC_LOCAL,
					  sim_local_id(a), a->local_epoch, KVA_TIER_GPU);
		}
	}
	if (idx >= s->sc->w.agents)
		return;
	int rc = kva_lookup_answer(sim_node_of(s, &s->agents[idx])->e, ev->u.lookup.token, &m);
	/* late answers (request ended, preempted or timed out meanwhile) are normal */
	if (rc != 0 && rc != -ESTALE && rc != -ENOENT)
		sim_fatal(s, "kva_lookup_answer", rc);
}

/* ---- importer --------------------------------------------------------------- */

/* The store tier a stored checkpoint of agent a lives on (its newest two
 * are known; an older one is taken as on the first tier). */
static const struct sim_tier *tier_of(const struct sim *s, const struct sim_agent *a, uint64_t id)
{
	for (uint32_t i = 0; a && i < a->n_ext; i++)
		if (a->ext_id[i] == id)
			return &s->sc->tier[a->ext_tier[i]];
	return &s->sc->tier[0];
}

/* kva_import_fn on the simulated clock. Each rank has one link; jobs on it
 * run one after another, so concurrent imports share its bandwidth (the
 * link's speed is the checkpoint's tier's). */
int sim_import_cb(void *ctx, kva_engine *e, const struct kva_copy_job *job)
{
	struct sim_node *n = ctx;
	struct sim *s = n->s;
	(void)e;
	const struct sim_scenario *sc = s->sc;
	uint32_t r = job->rank;
	/* drawn per agent, not from the token's generation (see
	 * sim_dir_lookup_cb); request ids are agent index + 1 */
	uint32_t idx = (uint32_t)job->token.id - 1;
	const struct sim_tier *t =
	    tier_of(s, idx < sc->w.agents ? &s->agents[idx] : NULL, job->checkpoint_id);
	double bytes = (double)job->position * sc->m.kv_bytes_per_token / job->world_size;
	uint64_t start = n->import_free_ns[r] > s->now_ns ? n->import_free_ns[r] : s->now_ns;
	uint64_t done = start + sim_ns_of(t->setup_s + bytes / t->bytes_s);
	n->import_free_ns[r] = done;
	uint64_t k = idx < sc->w.agents ? s->agents[idx].copy_draws++ : 0;
	double u = sim_uniform(sc->w.seed ^ 0xC0917EAFull, job->token.id, (uint64_t)1 << 63 | k, r);
	struct sim_event ev = {.t_ns = done, .kind = SIM_EV_COPY, .node = n->index};
	ev.u.copy.token = job->token;
	ev.u.copy.rank = r;
	ev.u.copy.status = u < sc->copy_fail_rate ? -EIO : 0;
	if (sim_clock_push(&s->clock, ev) != 0)
		return -ENOMEM; /* the engine counts the rank as failed */
	return 0;
}

/* ---- checkpoint store (always-write) -------------------------------------- */

/* The store is chunked by prefix: a turn writes only what the previous
 * checkpoint of the session does not already hold. */
void sim_store_write(struct sim *s, struct sim_agent *a, uint32_t position)
{
	const struct sim_scenario *sc = s->sc;
	struct sim_node *n = sim_node_of(s, a);
	uint32_t have = a->n_ext ? a->ext_pos[0] : 0;
	if (position <= have)
		return;
	double bytes = (double)(position - have) * sc->m.kv_bytes_per_token / sc->world_size;
	uint64_t done = 0;
	for (uint32_t r = 0; r < sc->world_size; r++) {
		uint64_t start = n->write_free_ns[r] > s->now_ns ? n->write_free_ns[r] : s->now_ns;
		n->write_free_ns[r] =
		    start + sim_ns_of(sc->m.copy_setup_s + bytes / sc->m.write_bytes_s);
		if (n->write_free_ns[r] > done)
			done = n->write_free_ns[r];
	}
	struct sim_event ev = {.t_ns = done, .kind = SIM_EV_WRITE, .agent = a->index};
	ev.u.write.session = a->session;
	ev.u.write.position = position;
	if (sim_clock_push(&s->clock, ev) != 0)
		sim_fatal(s, "event queue", -ENOMEM);
}

uint8_t sim_store_tier(const struct sim *s, const struct sim_agent *a)
{
	return sim_uniform(s->sc->w.seed ^ 0x71E5ull, a->index + 1, a->ext_seq, 0) <
	       s->sc->slow_share;
}

/* A checkpoint is visible to the directory once every rank wrote it. */
void sim_store_written(struct sim *s, const struct sim_event *ev)
{
	struct sim_agent *a = &s->agents[ev->agent];
	uint32_t pos = ev->u.write.position;
	if (a->session != ev->u.write.session || (a->n_ext && pos <= a->ext_pos[0]))
		return;
	a->ext_pos[1] = a->ext_pos[0];
	a->ext_id[1] = a->ext_id[0];
	a->ext_tier[1] = a->ext_tier[0];
	a->ext_pos[0] = pos;
	a->ext_id[0] = (uint64_t)(a->index + 1) << 32 | ++a->ext_seq;
	a->ext_tier[0] = sim_store_tier(s, a);
	if (a->n_ext < 2)
		a->n_ext++;
	sim_fleetdir_touch(s, a);
}

/* ---- local cache ------------------------------------------------------------ */

static void lru_unlink(struct sim *s, struct sim_agent *a)
{
	struct sim_node *n = sim_node_of(s, a);
	sim_list_unlink(&n->lru, a);
	a->in_lru = false;
	n->cached_pages -= a->local_pages;
	a->local_pages = 0;
}

static void report_evicted(struct sim *s, struct sim_agent *a)
{
	if (s->fleetdir) { /* published; the fleet reports what a lookup selected */
		sim_fleetdir_touch(s, a);
		return;
	}
	int rc = kva_checkpoint_evicted(sim_node_of(s, a)->e, sim_local_id(a), a->local_epoch);
	if (rc != 0)
		sim_fatal(s, "kva_checkpoint_evicted", rc);
	s->res->evictions_reported++;
}

/* The local checkpoint is gone (report) or now belongs to a running request
 * (no report: nobody else can have selected it). A new epoch either way. */
void sim_cache_drop(struct sim *s, struct sim_agent *a, bool report)
{
	if (!a->in_lru)
		return;
	lru_unlink(s, a);
	a->local_epoch++;
	if (report)
		report_evicted(s, a);
}

void sim_cache_put(struct sim *s, struct sim_agent *a, uint32_t pages)
{
	sim_fleetdir_touch(s, a);
	sim_cache_drop(s, a, true);
	if (!pages)
		return;
	a->local_pages = pages;
	a->local_epoch++;
	a->in_lru = true;
	sim_list_push_back(&sim_node_of(s, a)->lru, a);
	sim_node_of(s, a)->cached_pages += pages;
}

void sim_cache_fit(struct sim_node *n)
{
	struct sim *s = n->s;
	if (!n->cached_pages)
		return;
	kva_stats st;
	kva_stats_get(n->e, &st);
	while (n->cached_pages > st.free_pages) {
		struct sim_agent *a = n->lru.head;
		uint64_t over = n->cached_pages - st.free_pages;
		/* the newest pages of a prefix go first: what is left is still a
		 * valid, shorter checkpoint. A recurrent bundle has no shorter
		 * state: evicting any of its pages invalidates all of it (vLLM's
		 * BoundaryCheckpointCache, README "Local cache") */
		uint32_t cut = over < a->local_pages && !s->sc->local_boundary ? (uint32_t)over
									       : a->local_pages;
		s->res->evicted_pages += cut;
		if (cut == a->local_pages) {
			sim_cache_drop(s, a, true);
			continue;
		}
		a->local_pages -= cut;
		n->cached_pages -= cut;
		s->res->shrunk_entries++;
		a->local_epoch++;
		report_evicted(s, a);
	}
}
