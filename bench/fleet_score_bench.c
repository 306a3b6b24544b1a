/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvadmit-fleet-score-bench: kva_fleet_score (a router's query, docs/fleet.md
 * "Answering routers") against a fleet of 64 publishers over inproc://.
 *   ingest   block events indexed per second by the I/O thread while 64
 *            publishers fill the index (BLOCKS_PER_PUB each, stores of 32
 *            blocks in batches of 16 events, no token ids), three ways in
 *            the same run: cfg.score off (the baseline: the fleet as before
 *            kva_fleet_score), on, and on with a thread scoring all along
 *   latency  kva_fleet_score of a 1,000-block chain (publisher 0 holds all of
 *            it, publishers 1..7 shorter prefixes, the other 56 none of it:
 *            their own blocks), p50 / p99 / max,
 *            while one publisher streams at a paced rate (stores of new
 *            blocks and removals of old ones, the index staying full);
 *            against the machine's floor in the same run: after each score,
 *            on the same thread, register arithmetic as long as the scores'
 *            median, its p99 the tail any work of that length has here
 * Usage: kvadmit-fleet-score-bench [BLOCKS_PER_PUB [EVENTS_PER_S [SECONDS [ROUNDS]]]]
 * (default 16384: 1,048,576 blocks in all; 1,000,000; 3; 7). The ingest
 * runs ROUNDS times, interleaved; the latency phase follows the last.
 * Rates are given per second of wall time and per CPU-second of the
 * fleet's I/O thread (the process's CPU time less the publishing and the
 * scoring threads'); latencies as wall time and as the
 * scoring thread's CPU time (its cost without the time it was descheduled
 * on a loaded machine).
 */
#define _GNU_SOURCE
#include <msgpack.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "kvadmit/fleet.h"
#include "tsan_libzmq.h"

#define PUBS 64
#define EVENTS 16
#define BLOCKS 32 /* per event */
#define CHAIN 1000
#define BS 16

static uint64_t clock_ns(clockid_t c)
{
	struct timespec t;
	clock_gettime(c, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}
static uint64_t mono(void) { return clock_ns(CLOCK_MONOTONIC); }
/* The calling thread's CPU time: a score's own cost, without the time its
 * thread was descheduled (this VM's two cores are shared). */
static uint64_t thread_cpu(void) { return clock_ns(CLOCK_THREAD_CPUTIME_ID); }
/* The process's CPU time, every thread. */
static uint64_t process_cpu(void) { return clock_ns(CLOCK_PROCESS_CPUTIME_ID); }

static void str(msgpack_packer *pk, const char *s)
{
	msgpack_pack_str(pk, strlen(s));
	msgpack_pack_str_body(pk, s, strlen(s));
}

/* Block i of publisher p: the query chain's block i for i < held(p), else
 * its own. */
static uint64_t chain_hash(uint32_t i) { return (i + 1) * 0x9e3779b97f4a7c15ull; }
static uint32_t held(uint32_t p) { return p < 8 ? CHAIN * (8 - p) / 8 : 0; }
static uint64_t block_hash(uint32_t p, uint64_t i)
{
	return i < held(p) ? chain_hash((uint32_t)i)
	                   : ((uint64_t)p << 40 | i) * 0xc2b2ae3d27d4eb4full + 1;
}

/* One batch: EVENTS events of BLOCKS blocks, stores from `first` of p (or
 * removals). */
static void encode(msgpack_sbuffer *sb, uint32_t p, uint64_t first, bool remove)
{
	msgpack_sbuffer_clear(sb);
	msgpack_packer pk;
	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	msgpack_pack_array(&pk, 3);
	msgpack_pack_double(&pk, 1.0);
	msgpack_pack_array(&pk, EVENTS);
	for (int e = 0; e < EVENTS; e++) {
		msgpack_pack_map(&pk, remove ? 3 : 4);
		str(&pk, "type");
		str(&pk, remove ? "BlockRemoved" : "BlockStored");
		str(&pk, "block_hashes");
		msgpack_pack_array(&pk, BLOCKS);
		for (int b = 0; b < BLOCKS; b++)
			msgpack_pack_uint64(&pk, block_hash(p, first + (uint64_t)(e * BLOCKS + b)));
		str(&pk, "medium");
		str(&pk, "GPU");
		if (!remove) {
			str(&pk, "block_size");
			msgpack_pack_int(&pk, BS);
		}
	}
	msgpack_pack_int(&pk, (int)(p % 8)); /* data_parallel_rank */
}

struct pub {
	void *sock;
	uint64_t seq;
	char topic[32];
};

static void pub_send(struct pub *p, const msgpack_sbuffer *sb)
{
	unsigned char s[8];
	for (int i = 0; i < 8; i++)
		s[i] = (unsigned char)(p->seq >> (56 - 8 * i));
	p->seq++;
	zmq_send(p->sock, p->topic, strlen(p->topic), ZMQ_SNDMORE);
	zmq_send(p->sock, s, 8, ZMQ_SNDMORE);
	zmq_send(p->sock, sb->data, sb->size, 0);
}

static kva_fleet_stats st(kva_fleet *f)
{
	kva_fleet_stats s;
	kva_fleet_stats_get(f, &s);
	return s;
}

struct scorer {
	kva_fleet *f;
	const uint64_t *chain;
	atomic_bool stop;
	uint64_t calls, *lat, *cpu; /* per score: wall and thread CPU ns */
	size_t nlat, cap;
	uint32_t longest;
	uint64_t cpu_total; /* the scoring thread's CPU time, all of it */
	/* the machine's floor (the latency phase only): after each score, a
	 * loop of register arithmetic as long as the scores' median, timed the
	 * same way; its tail is this machine's, not the query's */
	uint64_t *floor_lat, *floor_cpu, floor_steps;
	size_t nfloor;
};

/* `steps` dependent multiply-adds: no memory, no branch but the loop's. */
static uint64_t fixed_work(uint64_t steps)
{
	uint64_t x = steps;
	for (uint64_t i = 0; i < steps; i++)
		x = x * 6364136223846793005ull + 1442695040888963407ull;
	__asm__ volatile("" : "+r"(x));
	return x;
}

static int cmp_u64(const void *a, const void *b);

/* After the first 1,000 scores: the steps of fixed_work that last as long
 * as their median CPU time. */
static void floor_calibrate(struct scorer *s)
{
	uint64_t *c = malloc(s->nlat * sizeof(*c));
	if (!c)
		return;
	memcpy(c, s->cpu, s->nlat * sizeof(*c));
	qsort(c, s->nlat, sizeof(*c), cmp_u64);
	uint64_t t0 = thread_cpu();
	fixed_work(1000000);
	uint64_t per_m = thread_cpu() - t0; /* ns per million steps */
	s->floor_steps = per_m ? c[s->nlat / 2] * 1000000 / per_m : 1;
	free(c);
}

static void *score_loop(void *arg)
{
	struct scorer *s = arg;
	kva_fleet_match out[PUBS];
	uint64_t start = thread_cpu();
	while (!atomic_load_explicit(&s->stop, memory_order_relaxed)) {
		uint64_t c0 = thread_cpu(), t0 = mono();
		int n = kva_fleet_score(s->f, s->chain, CHAIN, out, PUBS);
		uint64_t dt = mono() - t0, dc = thread_cpu() - c0;
		if (s->lat && s->nlat < s->cap) {
			s->cpu[s->nlat] = dc;
			s->lat[s->nlat++] = dt;
		}
		if (n > 0)
			s->longest = out[0].blocks;
		s->calls++;
		if (s->floor_lat && !s->floor_steps && s->nlat == 1000)
			floor_calibrate(s);
		if (s->floor_steps && s->nfloor < s->cap) {
			c0 = thread_cpu();
			t0 = mono();
			fixed_work(s->floor_steps);
			s->floor_lat[s->nfloor] = mono() - t0;
			s->floor_cpu[s->nfloor++] = thread_cpu() - c0;
		}
	}
	s->cpu_total = thread_cpu() - start;
	return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

struct run {
	void *z;
	struct pub pubs[PUBS];
	kva_fleet *f;
};

static int run_open(struct run *r, void *z, int k, uint8_t score, uint64_t max_blocks)
{
	memset(r, 0, sizeof(*r));
	r->z = z;
	kva_fleet_publisher p[PUBS];
	char ep[PUBS][64];
	for (int i = 0; i < PUBS; i++) {
		snprintf(ep[i], sizeof ep[i], "inproc://score-bench-%d-%d", k, i);
		snprintf(r->pubs[i].topic, sizeof r->pubs[i].topic, "kv@pod-%d@model", i);
		r->pubs[i].sock = zmq_socket(z, ZMQ_PUB);
		int hwm = 0;
		zmq_setsockopt(r->pubs[i].sock, ZMQ_SNDHWM, &hwm, sizeof hwm);
		if (zmq_bind(r->pubs[i].sock, ep[i]))
			return -1;
		p[i] = (kva_fleet_publisher){.endpoint = ep[i]};
	}
	kva_fleet_config fc;
	kva_fleet_config_default(&fc);
	fc.publishers = p;
	fc.npublishers = PUBS;
	fc.zmq_context = z;
	fc.max_blocks = max_blocks;
	fc.block_size = BS;
	fc.score = score;
	int err;
	r->f = kva_fleet_create(&fc, &err);
	if (!r->f)
		return -1;
	msgpack_sbuffer empty;
	msgpack_sbuffer_init(&empty);
	msgpack_packer pk;
	msgpack_packer_init(&pk, &empty, msgpack_sbuffer_write);
	msgpack_pack_array(&pk, 2);
	msgpack_pack_double(&pk, 0);
	msgpack_pack_array(&pk, 0);
	/* every subscription live before timing (a slow joiner's losses would
	 * be gaps); no replay endpoints, so gaps cost nothing here */
	for (int i = 0; i < PUBS; i++) {
		uint64_t before = st(r->f).batches;
		while (st(r->f).batches == before) {
			pub_send(&r->pubs[i], &empty);
			usleep(200);
		}
	}
	msgpack_sbuffer_destroy(&empty);
	return 0;
}

static void run_close(struct run *r)
{
	kva_fleet_destroy(r->f);
	for (int i = 0; i < PUBS; i++)
		zmq_close(r->pubs[i].sock);
}

/* Fills the index from every publisher: block events per second of wall
 * time, and *cpu_ns the CPU time meanwhile of the process's threads but
 * this one (the publishers' sends): the fleet's I/O thread, ZeroMQ's, and a
 * scorer if one runs. */
static double fill(struct run *r, const msgpack_sbuffer *const *batches, uint32_t nbatch,
                   uint64_t *cpu_ns)
{
	uint64_t base = st(r->f).blocks_stored, total = (uint64_t)PUBS * nbatch * EVENTS * BLOCKS;
	uint64_t t0 = mono(), c0 = process_cpu(), m0 = thread_cpu();
	for (uint32_t b = 0; b < nbatch; b++)
		for (int i = 0; i < PUBS; i++)
			pub_send(&r->pubs[i], &batches[i][b]);
	while (st(r->f).blocks_stored - base < total)
		usleep(100);
	uint64_t main_ns = thread_cpu() - m0;
	*cpu_ns = process_cpu() - c0 - main_ns;
	return (double)total / ((double)(mono() - t0) / 1e9);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* p-th percentile (0..100) of n sorted values, in microseconds. */
static double pct_us(const uint64_t *v, size_t n, unsigned p)
{
	if (!n)
		return 0;
	size_t i = p >= 100 ? n - 1 : n * p / 100;
	return (double)v[i] / 1e3;
}

int main(int argc, char **argv)
{
	uint32_t per_pub = argc > 1 ? (uint32_t)atoi(argv[1]) : 16384;
	double rate = argc > 2 ? atof(argv[2]) : 1e6;
	double seconds = argc > 3 ? atof(argv[3]) : 3;
	int rounds = argc > 4 ? atoi(argv[4]) : 7;
	rounds = rounds < 1 ? 1 : rounds > 16 ? 16 : rounds;
	uint32_t per_batch = EVENTS * BLOCKS;
	uint32_t nbatch = (per_pub + per_batch - 1) / per_batch;
	per_pub = nbatch * per_batch;
	msgpack_sbuffer **batches = calloc(PUBS, sizeof(*batches));
	for (int i = 0; i < PUBS; i++) {
		batches[i] = calloc(nbatch, sizeof(**batches));
		for (uint32_t b = 0; b < nbatch; b++) {
			msgpack_sbuffer_init(&batches[i][b]);
			encode(&batches[i][b], (uint32_t)i, (uint64_t)b * per_batch, false);
		}
	}
	uint64_t *chain = malloc(CHAIN * sizeof(*chain));
	for (uint32_t i = 0; i < CHAIN; i++)
		chain[i] = chain_hash(i);
	uint64_t total = (uint64_t)PUBS * per_pub;
	uint64_t max_blocks = total + total / 8; /* the stream's window fits */
	void *z = zmq_ctx_new();

	/* ingest, three ways, in this run, `rounds` times interleaved (the
	 * machine's load moves between rounds: each ratio is against the
	 * baseline of its own round, and the median round is reported) */
	static const char *const how[3] = {"score off (baseline)", "score on",
	                                   "score on, a thread scoring"};
	double wall_of[3][16], ratio[3][16], cpu_rate_of[3][16], cpu_ratio[3][16];
	for (int round = 0; round < rounds; round++)
	for (int k = 0; k < 3; k++) {
		struct run r;
		if (run_open(&r, z, round * 3 + k, k > 0, max_blocks))
			return 1;
		struct scorer sc = {.f = r.f, .chain = chain};
		pthread_t t;
		if (k == 2)
			pthread_create(&t, NULL, score_loop, &sc);
		uint64_t cpu;
		double wall_rate = fill(&r, (const msgpack_sbuffer *const *)batches, nbatch, &cpu);
		if (k == 2) {
			atomic_store(&sc.stop, true);
			pthread_join(t, NULL);
			cpu -= sc.cpu_total < cpu ? sc.cpu_total : cpu; /* the scorer's own */
		}
		/* block events per CPU-second of the fleet's I/O thread (and
		 * ZeroMQ's: inproc:// gives them little to do) */
		double cpu_rate = (double)total / ((double)cpu / 1e9);
		wall_of[k][round] = wall_rate;
		ratio[k][round] = wall_rate / wall_of[0][round];
		cpu_rate_of[k][round] = cpu_rate;
		cpu_ratio[k][round] = cpu_rate / cpu_rate_of[0][round];
		printf("fleet score bench: round %d, ingest, %s: %llu block events from %d publishers: "
		       "%.2f M/s wall (%.2f of the baseline), %.2f M per I/O-thread CPU-second (%.2f of "
		       "the baseline)\n",
		       round, how[k], (unsigned long long)total, PUBS, wall_rate / 1e6,
		       ratio[k][round], cpu_rate / 1e6, cpu_ratio[k][round]);
		if (k == 2)
			printf("fleet score bench: %llu scores ran meanwhile\n",
			       (unsigned long long)sc.calls);
		if (k < 2 || round < rounds - 1) {
			run_close(&r);
			continue;
		}

		/* latency while publisher 63 streams at `rate` block events/s:
		 * stores of new blocks past its fill, removals of its oldest */
		struct scorer lat = {.f = r.f, .chain = chain};
		lat.cap = 4u << 20;
		lat.lat = malloc(lat.cap * sizeof(uint64_t));
		lat.cpu = malloc(lat.cap * sizeof(uint64_t));
		lat.floor_lat = malloc(lat.cap * sizeof(uint64_t));
		lat.floor_cpu = malloc(lat.cap * sizeof(uint64_t));
		if (!lat.lat || !lat.cpu || !lat.floor_lat || !lat.floor_cpu) {
			fprintf(stderr, "fleet score bench: out of memory\n");
			return 1;
		}
		pthread_t lt;
		pthread_create(&lt, NULL, score_loop, &lat);
		msgpack_sbuffer sb;
		msgpack_sbuffer_init(&sb);
		kva_fleet_stats s0 = st(r.f);
		uint64_t t0 = mono(), sent = 0, next_new = per_pub, next_old = held(PUBS - 1);
		while (mono() - t0 < (uint64_t)(seconds * 1e9)) {
			uint64_t due = (uint64_t)((double)(mono() - t0) / 1e9 * rate);
			while (sent + per_batch <= due) {
				bool remove = (sent / per_batch) & 1;
				encode(&sb, PUBS - 1, remove ? next_old : next_new, remove);
				if (remove)
					next_old += per_batch;
				else
					next_new += per_batch;
				pub_send(&r.pubs[PUBS - 1], &sb);
				sent += per_batch;
			}
			usleep(50);
		}
		uint64_t t1 = mono();
		while (st(r.f).blocks_stored + st(r.f).blocks_removed - s0.blocks_stored -
		           s0.blocks_removed < sent &&
		       mono() - t1 < 30000000000ull)
			usleep(100);
		double applied_s = (double)(mono() - t0) / 1e9;
		atomic_store(&lat.stop, true);
		pthread_join(lt, NULL);
		kva_fleet_stats s1 = st(r.f);
		qsort(lat.lat, lat.nlat, sizeof(uint64_t), cmp_u64);
		qsort(lat.cpu, lat.nlat, sizeof(uint64_t), cmp_u64);
		uint64_t applied = s1.blocks_stored + s1.blocks_removed - s0.blocks_stored -
		                   s0.blocks_removed;
		printf("fleet score bench: score of a %d-block chain (longest holder %u blocks) over "
		       "%llu entries, while applying %.2f M block events/s: %zu scores, wall p50 %.2f us, "
		       "p99 %.2f us, max %.1f us; the scoring thread's CPU time p50 %.2f us, p99 %.2f "
		       "us, max %.1f us\n",
		       CHAIN, lat.longest, (unsigned long long)s1.blocks,
		       (double)applied / applied_s / 1e6, lat.nlat, pct_us(lat.lat, lat.nlat, 50),
		       pct_us(lat.lat, lat.nlat, 99), pct_us(lat.lat, lat.nlat, 100),
		       pct_us(lat.cpu, lat.nlat, 50), pct_us(lat.cpu, lat.nlat, 99),
		       pct_us(lat.cpu, lat.nlat, 100));
		qsort(lat.floor_lat, lat.nfloor, sizeof(uint64_t), cmp_u64);
		qsort(lat.floor_cpu, lat.nfloor, sizeof(uint64_t), cmp_u64);
		printf("fleet score bench: the machine's floor, register arithmetic as long as a "
		       "score's median, after each score on the same thread: wall p50 %.2f us, p99 "
		       "%.2f us; CPU p50 %.2f us, p99 %.2f us; score p99 / floor p99: %.2f wall, %.2f "
		       "CPU\n",
		       pct_us(lat.floor_lat, lat.nfloor, 50), pct_us(lat.floor_lat, lat.nfloor, 99),
		       pct_us(lat.floor_cpu, lat.nfloor, 50), pct_us(lat.floor_cpu, lat.nfloor, 99),
		       pct_us(lat.lat, lat.nlat, 99) / pct_us(lat.floor_lat, lat.nfloor, 99),
		       pct_us(lat.cpu, lat.nlat, 99) / pct_us(lat.floor_cpu, lat.nfloor, 99));
		printf("fleet score bench: malformed %llu, gaps %llu, cap evictions %llu\n",
		       (unsigned long long)s1.malformed, (unsigned long long)s1.gaps,
		       (unsigned long long)s1.cap_evictions);
		free(lat.lat);
		free(lat.cpu);
		free(lat.floor_lat);
		free(lat.floor_cpu);
		msgpack_sbuffer_destroy(&sb);
		run_close(&r);
	}
	for (int k = 1; k < 3; k++)
		printf("fleet score bench: ingest, %s, median of %d rounds: %.2f of the baseline wall, "
		       "%.2f per I/O-thread CPU-second\n",
		       how[k], rounds, median(ratio[k], rounds), median(cpu_ratio[k], rounds));
	for (int i = 0; i < PUBS; i++) {
		for (uint32_t b = 0; b < nbatch; b++)
			msgpack_sbuffer_destroy(&batches[i][b]);
		free(batches[i]);
	}
	free(batches);
	free(chain);
	zmq_ctx_term(z);
	return 0;
}
