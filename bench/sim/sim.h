/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvadmit-sim: shared types of the agent-workload simulator.
 *
 * The simulator plays the GPU, the directory and the checkpoint store on a
 * simulated clock; the real engine (kvadmit.h, nothing private) makes every
 * admission decision. Files: main.c (flags, main), scenario.c (defaults and
 * checks), workload.c (seeded agent turns), clock.c (event queue, failure record), store.c
 * (directory, checkpoint store, local cache, importer), gpu.c (step-time
 * model), serving.c (the serving loop; its parts: serving_*.c), timeline.c (the run over
 * time, its pictures), report.c (metrics, the full table, JSON), headline.c (the demo's
 * screen), fleetdir.c (--directory fleet: the real fleet directory). Everything is
 * single-threaded (but for the fleet directory's own threads) and deterministic: same flags
 * and seed, same output (wall time aside).
 */
#ifndef KVA_SIM_H
#define KVA_SIM_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "kvadmit/kvadmit.h"

#define SIM_NS_PER_S 1000000000.0
#define SIM_MAX_AGENTS 1000000u

/* ---- constants: every one is explained in bench/sim/README.md ---------- */

/* The model and the GPU of one engine (a profile: scenario.c, README). */
struct sim_model {
	const char *profile;	    /* --profile name */
	const char *model_class;    /* one line: model, parallelism, hardware */
	uint64_t pool_tokens;	    /* KV pool of one engine, tokens */
	double kv_bytes_per_token;  /* all ranks together */
	double prefill_tok_s;	    /* linear layers, short context */
	double attn_s_per_tok2;	    /* causal attention: seconds per (p1^2 - p0^2) */
	/* decode floor: weights read once per step, per rank */
	double weight_dense_bytes;  /* weights every token reads (all ranks) */
	double weight_expert_bytes; /* routed experts (all ranks); 0 for a dense model */
	uint32_t n_experts, top_k;  /* routed experts per layer, chosen per token */
	uint32_t tp;		    /* ranks the weights are split over */
	double mem_bytes_s;	    /* usable memory bandwidth per rank */
	double decode_overhead_s;   /* collectives, scheduling, launches per step */
	double kv_read_s_per_tok;   /* decode: reading one context token's KV, one sequence */
	uint32_t spec_verify;	    /* tokens a decoding sequence puts through a step (1 + drafts) */
	uint32_t spec_accept_milli; /* tokens it keeps per step, x1000 (1000: no speculation) */
	double import_bytes_s;	    /* checkpoint store -> GPU, per rank */
	double write_bytes_s;	    /* GPU -> checkpoint store, per rank */
	double copy_setup_s;	    /* fixed cost of one copy job, per rank */
	double lookup_latency_s;    /* directory round trip */
	double idle_poll_s;	    /* scheduler loop period while only waiting */
	uint32_t step_token_budget; /* chunked prefill: tokens per step */
	uint32_t max_context;	    /* model window: longer histories are compacted */
	uint32_t decode_headroom_tokens;
	double decode_reserve_frac; /* decode watermark, share of the pool */
	uint16_t max_running;
	uint32_t max_copy_retries;
	bool keep_local; /* legacy default: a refused restore keeps its local prefix hit */
	/* local prefix cache of a model with recurrent state: a hit only at the
	 * exact request boundary an entry ends at, and an entry evicted whole */
	bool local_boundary;
};

/* The agents' turns. */
struct sim_workload {
	uint32_t agents;
	uint64_t seed;
	bool warm; /* sessions already under way at t = 0 (the default; --cold: not) */
	/* warm sessions: history at t = 0; 0: from a condensed session's size to
	 * the model's window (sim_default_start, README "The default scenario") */
	uint32_t init_ctx_min, init_ctx_max;
	uint32_t first_min, first_max;	     /* cold start: a session's first prompt */
	double tool_median, tool_sigma;	     /* tool output tokens, lognormal */
	uint32_t tool_min, tool_max;
	double decode_median, decode_sigma; /* decode tokens, lognormal */
	uint32_t decode_min, decode_max;
	double think_median_s, think_sigma; /* tool execution time, lognormal */
	double think_min_s, think_max_s;
	uint32_t compact_min, compact_max; /* a compacted session restarts at this size */
};

enum { SIM_POLICY_LEGACY = 1, SIM_POLICY_WAIT = 2, SIM_POLICY_COST = 4 };
#define SIM_N_POLICIES 3 /* legacy, wait, cost: the columns, in this order */

/* One tier of the checkpoint store (--store; README "Store tiers"). */
struct sim_tier {
	uint8_t kind;	 /* enum kva_tier, told to the engine in each answer */
	double bytes_s;	 /* store -> GPU, per rank */
	double setup_s;	 /* fixed cost of one copy job, per rank */
};
/* who answers lookups: the modelled directory (store.c) or the real fleet
 * directory over inproc:// (fleetdir.c) */
enum { SIM_DIR_MODEL = 0, SIM_DIR_FLEET = 1 };

struct sim_scenario {
	struct sim_workload w;
	struct sim_model m;
	double duration_s;
	uint32_t pool_pages, page_tokens;
	double max_restore_wait_s, lookup_timeout_s, copy_fail_rate;
	uint32_t copy_slots, world_size;
	uint32_t nodes;	 /* engines, each its own pool and importer */
	int directory;	 /* SIM_DIR_* (--directory) */
	bool keep_local; /* legacy: a refused restore keeps its local prefix hit */
	bool local_boundary; /* --local-cache boundary|prefix (sim_model.local_boundary) */
	int policies;	 /* SIM_POLICY_* bits */
	bool json, progress, no_wall;
	double progress_after_s; /* CLOCK_MONOTONIC: the progress line waits until then */
	bool details;	      /* --details: the full table below the headline */
	const char *svg_path; /* --svg: the timeline's SVG file; NULL: none */
	/* --store: where stored checkpoints live. tier[0] is the profile's import link
	 * (host DRAM), tier[1] the slow one; a checkpoint is on tier[1] with probability
	 * slow_share (drawn per agent and checkpoint). */
	const char *store;
	struct sim_tier tier[2];
	double slow_share;
	double cost_margin; /* the cost policy's margin (kva_cost_config.margin_pct / 100) */
};

void sim_defaults(struct sim_scenario *sc);
/* Sets the model constants of a profile; -1 for an unknown name. */
int sim_profile(struct sim_scenario *sc, const char *name);
const char *sim_profile_names(void);
/* Sets the store's tiers (--store NAME, after the profile and --import-gbs); the
 * slot-saturation store also sets agents and copy slots where no flag did. -1 for an
 * unknown name. */
int sim_store_profile(struct sim_scenario *sc, const char *name, bool agents_given,
		      bool slots_given);
const char *sim_store_names(void);
uint32_t sim_default_pool_pages(const struct sim_scenario *sc);
/* Fills the warm start's range where no flag set it: a session under way is
 * anywhere between its condensed size and the model's window. */
void sim_default_start(struct sim_scenario *sc);
/* NULL when the scenario can run, else why not (a static message in buf). */
const char *sim_check(const struct sim_scenario *sc, char *buf, size_t len);
uint32_t sim_decode_reserve_pages(const struct sim_scenario *sc);
uint32_t sim_headroom_pages(const struct sim_scenario *sc);

/* ---- workload.c: counter-based draws, identical for both policies -------- */
uint32_t sim_draw_init_ctx(const struct sim_workload *w, uint32_t agent);
uint32_t sim_draw_first(const struct sim_workload *w, uint32_t agent, uint32_t turn);
double sim_draw_start_s(const struct sim_workload *w, uint32_t agent);
uint32_t sim_draw_tool(const struct sim_workload *w, uint32_t agent, uint32_t turn);
uint32_t sim_draw_decode(const struct sim_workload *w, uint32_t agent, uint32_t turn);
double sim_draw_think_s(const struct sim_workload *w, uint32_t agent, uint32_t turn);
uint32_t sim_draw_compact(const struct sim_workload *w, uint32_t agent, uint32_t turn);
/* Uniform in [0, 1) from (seed, a, b, c): copy failures use it too. */
double sim_uniform(uint64_t seed, uint64_t a, uint64_t b, uint64_t c);
/* The mixer behind every draw (splitmix64's: a bijection, full avalanche). */
uint64_t sim_mix(uint64_t x);

/* ---- clock.c: the discrete-event queue ------------------------------------ */
enum sim_ev_kind {
	SIM_EV_SUBMIT = 1, /* an agent's think time ended: next turn */
	SIM_EV_ANSWER,	   /* a directory answer arrives */
	SIM_EV_COPY,	   /* one rank of a copy job completes */
	SIM_EV_WRITE,	   /* a turn's checkpoint is stored */
};

struct sim_event {
	uint64_t t_ns;
	uint64_t seq; /* ties broken by insertion order: deterministic */
	uint32_t kind;
	uint32_t agent;
	uint32_t node; /* SIM_EV_COPY: the engine whose importer ran it */
	union {
		struct {
			kva_lookup_token token;
			uint64_t key;
			uint32_t prompt;
		} lookup;
		struct {
			kva_copy_token token;
			uint32_t rank;
			int status;
		} copy;
		struct {
			uint32_t session;
			uint32_t position;
		} write;
	} u;
};

struct sim_clock {
	struct sim_event *heap;
	uint32_t n, cap;
	uint64_t next_seq;
	uint32_t n_copies; /* copy completions still queued */
};

int sim_clock_init(struct sim_clock *c);
void sim_clock_fini(struct sim_clock *c);
int sim_clock_push(struct sim_clock *c, struct sim_event ev);
bool sim_clock_pop_due(struct sim_clock *c, uint64_t now_ns, struct sim_event *out);
/* UINT64_MAX when empty. */
uint64_t sim_clock_next(const struct sim_clock *c);

/* ---- agents -------------------------------------------------------------- */
/* An agent sits on up to two intrusive lists: the running list (admission
 * order) and the local cache's LRU. */
enum { SIM_LIST_RUN = 0, SIM_LIST_LRU = 1 };

struct sim_agent;
struct sim_link {
	struct sim_agent *prev, *next;
};
struct sim_list {
	struct sim_agent *head, *tail; /* the oldest at the head */
	int which;		       /* SIM_LIST_* */
};

struct sim_agent {
	uint32_t index;
	uint32_t node;	       /* the engine serving this agent */
	bool fresh;	       /* the next prompt is the session's first (no tool output) */
	uint32_t session;      /* bumped by compaction */
	uint32_t turn;	       /* turns drawn so far (draw counter) */
	uint32_t session_turn; /* 0 = a session's first turn (nothing stored yet) */
	uint32_t ctx;	       /* history tokens after the last completed turn */

	/* the current turn */
	kva_handle h;
	bool live;		/* submitted, not yet reported ended */
	bool running;		/* admitted and not finished / preempted */
	bool recomputed_prefix; /* some admission of this turn recomputed */
	bool admitted_once;
	uint32_t prompt, decode_total, decoded;
	uint32_t spec_acc;	 /* speculative decoding: kept tokens carried, x1000 */
	bool stored_at_start;	 /* the history was in the store when the turn began */
	uint32_t turn_local, turn_ext; /* cached tokens at the turn's first admission */
	uint32_t admit_pos; /* tokens the current admission took from cache */
	uint32_t hist_pos;  /* page-aligned KV the last turn left (stored and cached) */
	uint64_t turn_start_ns;
	bool has_first_token;
	uint32_t submits, ended_reports;
	kva_handle last_ended; /* the last ended report (double-report check) */
	uint32_t dir_draws;    /* the modelled directory's latency draws so far */
	uint32_t copy_draws;   /* the importer's failure draws so far */
	/* this turn's wait for a copy slot as the blocked head (pages free, no slot),
	 * and the engine's predicted recompute time then (kva_query) */
	uint64_t slot_wait_ns, pred_recompute_ns;

	/* running state (the GPU's view) */
	uint32_t kv;		 /* tokens whose KV is in pages */
	uint32_t held_pages;	 /* pages the engine handed over */
	uint32_t prefill_left;	 /* tokens to prefill before decoding */
	uint32_t step_tokens;	 /* scheduled in the current step */
	struct sim_link link[2]; /* SIM_LIST_* */

	/* checkpoint store: the two newest stored positions of this session */
	uint32_t ext_pos[2];
	uint64_t ext_id[2];
	uint8_t ext_tier[2]; /* index into sim_scenario.tier */
	uint32_t n_ext;
	uint32_t ext_seq;

	/* local cache (pages left by a finished or preempted request) */
	uint32_t local_pages;
	uint64_t local_epoch;
	bool in_lru;
};

static inline void sim_list_push_back(struct sim_list *l, struct sim_agent *a)
{
	struct sim_link *k = &a->link[l->which];
	k->prev = l->tail;
	k->next = NULL;
	if (l->tail)
		l->tail->link[l->which].next = a;
	else
		l->head = a;
	l->tail = a;
}

static inline void sim_list_unlink(struct sim_list *l, struct sim_agent *a)
{
	struct sim_link *k = &a->link[l->which];
	if (k->prev)
		k->prev->link[l->which].next = k->next;
	else
		l->head = k->next;
	if (k->next)
		k->next->link[l->which].prev = k->prev;
	else
		l->tail = k->prev;
	k->prev = k->next = NULL;
}

static inline struct sim_agent *sim_list_next(const struct sim_list *l, const struct sim_agent *a)
{
	return a->link[l->which].next;
}

/* ---- store.c: directory, checkpoint store, local cache, importer ---------- */
struct sim;
struct sim_node;
uint64_t sim_key(const struct sim_agent *a);
uint64_t sim_local_id(const struct sim_agent *a);
void sim_dir_lookup_cb(void *ctx, uint64_t key, uint32_t prompt, kva_lookup_token t);
void sim_dir_answer(struct sim *s, const struct sim_event *ev);
int sim_import_cb(void *ctx, kva_engine *e, const struct kva_copy_job *job);
void sim_store_write(struct sim *s, struct sim_agent *a, uint32_t position);
void sim_store_written(struct sim *s, const struct sim_event *ev);
/* The tier (index into sim_scenario.tier) of agent a's newest checkpoint
 * (ext_seq): a draw per agent and checkpoint, the same for every policy. */
uint8_t sim_store_tier(const struct sim *s, const struct sim_agent *a);
void sim_cache_put(struct sim *s, struct sim_agent *a, uint32_t pages);
void sim_cache_drop(struct sim *s, struct sim_agent *a, bool report);
/* Evicts least recently cached pages until cached pages fit in the free
 * credits (cached pages are free pages that still hold KV). */
void sim_cache_fit(struct sim_node *n);

/* ---- fleetdir.c: --directory fleet (the real fleet directory) ------------ */
bool sim_fleetdir_available(void); /* built with ZeroMQ and msgpack-c */
/* After the engines and agents exist: publishers, one fleet per engine. */
int sim_fleetdir_create(struct sim *s);
void sim_fleetdir_destroy(struct sim *s); /* before the engines */
/* Agent a's local cache entry or stored checkpoint changed (published at
 * the next step or answer); no-op without the fleet directory. */
void sim_fleetdir_touch(struct sim *s, struct sim_agent *a);
/* Before engine n steps: the fleet has applied every event published. */
void sim_fleetdir_before_step(struct sim *s, struct sim_node *n);
void sim_fleetdir_answer(struct sim *s, const struct sim_event *ev);

/* ---- gpu.c: step time ------------------------------------------------------ */
struct sim_batch {
	uint32_t n_decode;
	uint64_t decode_tokens; /* tokens decoding sequences put through (speculation) */
	uint64_t prefill_tokens;
	double attn_tok2;  /* sum of p1^2 - p0^2 over prefill chunks */
	double decode_ctx; /* sum of context tokens over decoding sequences */
};
double sim_gpu_step_s(const struct sim_model *m, const struct sim_batch *b);

/* ---- results --------------------------------------------------------------- */
struct sim_samples {
	double *v;
	uint32_t n, cap;
};
int sim_samples_add(struct sim_samples *s, double x);
double sim_samples_mean(const struct sim_samples *s);
double sim_samples_pct(struct sim_samples *s, double p); /* sorts in place */
void sim_samples_free(struct sim_samples *s);

/* timeline.c: the run per bin of whole minutes (at most 60 bins). */
struct sim_timeline {
	double bin_s, duration_s;
	uint32_t n;
	uint32_t sampled;		   /* bins whose end state is recorded */
	uint64_t *decode_tokens;	   /* sampled in the bin */
	uint64_t *turn_prompt, *turn_cached; /* turns that ended in the bin */
	double *capacity;		   /* share of the pools not free, at the bin's end */
	uint32_t *waiting;		   /* requests submitted, not running, at the bin's end */
};
int sim_timeline_init(struct sim_timeline *t, double duration_s);
void sim_timeline_free(struct sim_timeline *t);
uint32_t sim_timeline_bin(const struct sim_timeline *t, uint64_t now_ns);
uint64_t sim_timeline_bin_end_ns(const struct sim_timeline *t, uint32_t bin);

struct sim_result {
	int policy;
	struct sim_timeline tl;
	kva_stats st; /* engine statistics at the end of the measured window */
	uint64_t decode_tokens;
	uint64_t turns_completed, later_turns, later_turns_restored;
	/* as the production table counts: per completed turn, the cached tokens
	 * of its first admission (vLLM's num_cached_tokens); later turns: the
	 * history was stored when the turn began */
	uint64_t turn_prompt_tokens, turn_local_tokens, turn_ext_tokens;
	uint64_t later_stored, later_stored_restored;
	/* where the per-turn misses are: first turns' prompts, later turns'
	 * tokens beyond the page-aligned history (tool output), the rest */
	uint64_t first_turns, miss_first, miss_new, miss_other;
	uint64_t later_prompt_tokens, later_cached_tokens;
	uint64_t in_flight; /* turns submitted, not completed, at the end of the window */
	double in_flight_age_s; /* their mean age then */
	uint64_t hold_steps, budget_steps; /* steps that preempted / spent the token budget */
	uint64_t kept_local, kept_local_tokens; /* legacy recomputes that kept a local hit */
	uint64_t preempt_calls;		 /* kva_preempt calls (the engine counts them too) */
	uint64_t preempted_at_admission; /* of them: a request admitted in the same step */
	struct sim_samples turn_s, ttft_s;
	uint64_t evicted_pages, evictions_reported, stale_local;
	uint64_t shrunk_entries; /* evictions that left a shorter entry (prefix caches only) */
	uint64_t idle_polls, gpu_steps;
	double gpu_busy_s;
	double ctx_to_pool_end, ctx_to_pool_mean; /* at the end / averaged over the window */
	uint64_t compactions;
	double wall_s;
	/* the longest wait of one turn for a copy slot, and the most it exceeded its
	 * predicted recompute time plus the margin (negative: never) */
	double slot_wait_max_s, slot_over_max_s;
	/* invariant checks at the end (and during the run) */
	bool credits_conserved, no_leaked_pages, all_terminal, reported_once, page_accounting;
	char check_msg[256];
};

/* One engine: its pool, GPU, local cache and copy links (serving.c). */
struct sim_node {
	struct sim *s;
	uint32_t index;
	kva_engine *e;
	kva_plan plan;
	struct sim_list run; /* running requests; the newest at the tail */
	uint32_t n_running;
	struct sim_list lru; /* local cache; the least recently cached at the head */
	uint64_t cached_pages;
	/* per-rank copy links (FIFO: concurrent copies share bandwidth) */
	uint64_t import_free_ns[KVA_MAX_WORLD];
	uint64_t write_free_ns[KVA_MAX_WORLD];
	/* the GPU: a step in flight ends at wake_ns; an idle node wakes then */
	bool in_step;
	uint64_t wake_ns;
	bool preempted; /* this step preempted: vLLM admits nothing new */
	/* the head blocked on a copy slot alone at the last step (NULL: none), and when */
	struct sim_agent *slot_head;
	uint64_t slot_seen_ns;
};

/* The simulation of one policy (serving.c). */
struct sim {
	const struct sim_scenario *sc;
	int policy;
	struct sim_node *nodes;
	uint32_t n_nodes;
	struct sim_clock clock;
	struct sim_agent *agents;
	uint64_t now_ns, end_ns;
	bool draining;
	uint64_t sum_ctx;    /* the agents' histories, tokens */
	double ctx_integral; /* sum_ctx over simulated time, token-seconds */
	int fatal; /* an unexpected engine error: abort the run */
	char fatal_msg[200];
	struct sim_result *res;
	struct sim_fleetdir *fleetdir; /* --directory fleet; NULL: the modelled one */
};

static inline struct sim_node *sim_node_of(struct sim *s, const struct sim_agent *a)
{
	return &s->nodes[a->node];
}

/* Simulated seconds as a clock delay, at least 1 ns. */
static inline uint64_t sim_ns_of(double sec)
{
	double ns = ceil(sec * SIM_NS_PER_S);
	return ns < 1 ? 1 : (uint64_t)ns;
}

/* The pages that hold `tokens` tokens. */
static inline uint32_t sim_pages_for(const struct sim *s, uint64_t tokens)
{
	return (uint32_t)((tokens + s->sc->page_tokens - 1) / s->sc->page_tokens);
}

int sim_run_policy(const struct sim_scenario *sc, int policy, struct sim_result *res);
void sim_result_free(struct sim_result *r);
/* clock.c: the first failure of the run, at the simulated instant. */
void sim_fatal(struct sim *s, const char *what, int rc);

/* ---- report.c ------------------------------------------------------------ */
/* The figures every report derives from a result. */
struct sim_metrics {
	double decode_tok_s, cache, local, external, mean_turn, ttft50, ttft99;
	double turn_cache, turn_local, turn_external;
	bool ok;
};
struct sim_metrics sim_metrics(const struct sim_scenario *sc, struct sim_result *r);
/* Did capacity ever decide anything (a refused or waiting restore, a
 * preemption, a local cache entry evicted to make room)? */
bool sim_under_pressure(const struct sim_result *r);
const char *sim_policy_name(int policy);
/* The full table (--details). */
void sim_print_details(FILE *f, const struct sim_scenario *sc,
		       struct sim_result *r[SIM_N_POLICIES]);
void sim_print_json(FILE *f, const struct sim_scenario *sc, struct sim_result *r[SIM_N_POLICIES]);
double sim_ctx_to_pool_start(const struct sim_scenario *sc);

/* ---- headline.c: the demo's screen ------------------------------------- */
/* The headline, the quiet case's line (quiet: the same run with contexts
 * that fit, either entry NULL when not run), the timeline, then the full
 * table under --details. */
int sim_print_table(FILE *f, const struct sim_scenario *sc, struct sim_result *r[SIM_N_POLICIES],
		    struct sim_result *quiet[SIM_N_POLICIES]); /* -1: the SVG could not be written */
/* ---- timeline.c: the pictures ------------------------------------------- */
void sim_timeline_print(FILE *f, struct sim_result *r[2]);
/* "timeline":{...}: the bin length and one array per series (null: no turn ended). */
void sim_timeline_json(FILE *f, const struct sim_timeline *t);
/* Writes the SVG (both policies, every series); 0 or -1 (errno set). */
int sim_timeline_svg(const char *path, const struct sim_scenario *sc, struct sim_result *r[2]);

#endif
