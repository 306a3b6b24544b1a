/* SPDX-License-Identifier: Apache-2.0 */
/* The CPU importer driving real copies for the engine, end to end: rules
 * retry-then-shorter
 * (retries, shorter-checkpoint recovery), 12 (drain before reuse), 19
 * (collective completion) and the importer's destroy contract. Destination
 * pages are compared with the checkpoint bytes they must hold.
 *
 * Importer workers only run the resolve callback below, which never calls
 * cmocka; everything is asserted on the main (scheduler) thread. */
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <time.h>

#include "scenario.h"
#include "kva_test.h"
#include "kvadmit/importer.h"

#define PB 512 /* page bytes: small, the logic does not care */
#define NCK 128
#define MAX_ADM 512
#define WALL_NS (60ull * SC_SEC) /* generous: sanitizer builds are slow */

/* ---- a checkpoint store: per (id, rank) a deterministic byte pattern ---- */
struct ck {
	uint64_t id;
	size_t bytes;
	unsigned char *data[2];
};

struct store {
	struct ck ck[NCK];
	uint32_t n;
	/* set by the main thread, read by importer workers */
	_Atomic uint64_t gate_id; /* resolve of this id (gate_rank) blocks on gate */
	_Atomic uint32_t gate_rank;
	_Atomic int gate_entered;
	sem_t gate;
	_Atomic uint64_t fail_id; /* resolve of this id fails */
	_Atomic uint64_t resolves;
};

static void fill(unsigned char *p, size_t n, uint64_t id, uint32_t rank)
{
	uint64_t x = id * 0x9E3779B97F4A7C15ull + rank * 0xD1B54A32D192ED03ull + 1;
	for (size_t i = 0; i < n; i++) {
		if (i % 8 == 0)
			(void)kva_test_rand(&x);
		p[i] = (unsigned char)(x >> (8 * (i % 8)));
	}
}

/* Adds checkpoint `id` covering `pos` tokens (16 per page); every third one
 * has a partial last page. */
static struct ck *store_add(struct store *s, uint64_t id, uint32_t pos)
{
	assert_true(s->n < NCK);
	struct ck *c = &s->ck[s->n++];
	uint32_t np = (pos + 15) / 16;
	c->id = id;
	c->bytes = (size_t)np * PB - (id % 3 == 0 ? PB / 4 : 0);
	for (int r = 0; r < 2; r++) {
		c->data[r] = malloc(c->bytes);
		assert_non_null(c->data[r]);
		fill(c->data[r], c->bytes, id, (uint32_t)r);
	}
	return c;
}

static struct ck *store_find(struct store *s, uint64_t id)
{
	for (uint32_t i = 0; i < s->n; i++)
		if (s->ck[i].id == id)
			return &s->ck[i];
	return NULL;
}

static int store_resolve(void *ctx, uint64_t id, uint64_t epoch, uint32_t rank, const void **src,
			 size_t *bytes)
{
	(void)epoch;
	struct store *s = ctx;
	atomic_fetch_add_explicit(&s->resolves, 1, memory_order_relaxed);
	if (id == atomic_load(&s->gate_id) && rank == atomic_load(&s->gate_rank)) {
		atomic_store(&s->gate_entered, 1);
		while (sem_wait(&s->gate) != 0)
			;
	}
	if (id == atomic_load(&s->fail_id))
		return -EIO;
	struct ck *c = store_find(s, id);
	if (!c)
		return -ENOENT;
	*src = c->data[rank];
	*bytes = c->bytes;
	return 0;
}

static uint64_t fnv(uint64_t h, const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return h;
}

/* ---- harness: engine + one CPU importer per rank, admissions collected ---- */
struct adm {
	kva_handle h;
	uint8_t how, reason;
	uint32_t restored;
	uint32_t np;
	uint32_t pages[64];
};

struct t {
	struct sc *s;
	struct store st;
	uint32_t world;
	kva_cpu_importer *imp[2];
	unsigned char *pool[2];
	bool shim_closed; /* the shim refuses jobs once the importer is gone */
	struct adm adm[MAX_ADM];
	uint32_t n_adm;
};

/* An importer reference that survives its importer: used where a test
 * destroys the importer and keeps stepping the engine. */
static int shim_submit(void *ctx, kva_engine *e, const kva_copy_job *job)
{
	struct t *t = ctx;
	if (t->shim_closed)
		return -ESHUTDOWN;
	kva_importer_ref r = kva_cpu_importer_ref(t->imp[job->rank]);
	return r.submit(r.ctx, e, job);
}

struct t_opts {
	uint32_t world, threads, total_pages, copy_slots, retries;
	uint64_t latency_ns;
	double fail_rate;
	uint64_t seed;
	bool shim;
};

static struct t *t_new(struct t_opts o)
{
	struct t *t = calloc(1, sizeof(*t));
	assert_non_null(t);
	assert_int_equal(sem_init(&t->st.gate, 0, 0), 0);
	t->world = o.world ? o.world : 1;
	kva_config c;
	sc_config(&c);
	c.total_pages = o.total_pages ? o.total_pages : 100;
	c.copy_slots = (uint16_t)(o.copy_slots ? o.copy_slots : 4);
	c.max_copy_retries = o.retries;
	c.world_size = t->world;
	for (uint32_t r = 0; r < t->world; r++) {
		t->pool[r] = malloc((size_t)c.total_pages * PB);
		assert_non_null(t->pool[r]);
		memset(t->pool[r], 0xEE, (size_t)c.total_pages * PB);
		kva_cpu_importer_config ic;
		kva_cpu_importer_config_default(&ic);
		ic.threads = o.threads ? o.threads : 2;
		ic.rank = r;
		ic.page_bytes = PB;
		ic.dest_base = t->pool[r];
		ic.dest_pages = c.total_pages;
		ic.resolve = store_resolve;
		ic.resolve_ctx = &t->st;
		ic.latency_ns = o.latency_ns;
		ic.fail_rate = o.fail_rate;
		ic.seed = o.seed;
		int err = 1;
		t->imp[r] = kva_cpu_importer_create(&ic, &err);
		assert_int_equal(err, 0);
		assert_non_null(t->imp[r]);
		c.importers[r] =
		    o.shim ? (kva_importer_ref){shim_submit, t} : kva_cpu_importer_ref(t->imp[r]);
	}
	t->s = sc_new(&c);
	return t;
}

static void t_destroy_importers(struct t *t)
{
	t->shim_closed = true;
	for (uint32_t r = 0; r < t->world; r++) {
		kva_cpu_importer_destroy(t->imp[r]);
		t->imp[r] = NULL;
	}
}

static void t_free(struct t *t)
{
	t_destroy_importers(t); /* importers before the engine */
	sc_free(t->s);
	for (uint32_t r = 0; r < t->world; r++)
		free(t->pool[r]);
	for (uint32_t i = 0; i < t->st.n; i++)
		for (int r = 0; r < 2; r++)
			free(t->st.ck[i].data[r]);
	sem_destroy(&t->st.gate);
	free(t);
}

static void t_collect(struct t *t)
{
	struct sc *s = t->s;
	for (uint32_t i = 0; i < s->plan.n_admitted; i++) {
		const kva_admission *a = &s->admitted[i];
		assert_true(t->n_adm < MAX_ADM);
		struct adm *d = &t->adm[t->n_adm++];
		d->h = a->handle;
		d->how = a->how;
		d->reason = a->reason;
		d->restored = a->restored_tokens;
		d->np = a->npages < 64 ? a->npages : 64;
		memcpy(d->pages, s->pages + a->pages_off, d->np * sizeof(uint32_t));
	}
}

static struct adm *t_find(struct t *t, kva_handle h)
{
	for (uint32_t i = 0; i < t->n_adm; i++)
		if (t->adm[i].h.id == h.id && t->adm[i].h.gen == h.gen && t->adm[i].h.slot == h.slot)
			return &t->adm[i];
	return NULL;
}

static void t_wait_idle(struct t *t, uint64_t ns)
{
	for (uint32_t r = 0; r < t->world; r++)
		if (t->imp[r])
			(void)kva_cpu_importer_wait_idle(t->imp[r], ns);
}

/* Every job accepted so far has been reported. */
static void t_idle(struct t *t)
{
	for (uint32_t r = 0; r < t->world; r++)
		assert_int_equal(kva_cpu_importer_wait_idle(t->imp[r], WALL_NS), 0);
}

static uint64_t wall_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * SC_SEC + (uint64_t)ts.tv_nsec;
}

/* Steps until `want` admissions have been collected since the call began
 * (or the wall-clock budget ends). */
static void t_drive(struct t *t, uint32_t want)
{
	uint32_t start = t->n_adm;
	uint64_t end = wall_ns() + WALL_NS;
	while (t->n_adm - start < want && wall_ns() < end) {
		sc_step(t->s, SC_MS);
		t_collect(t);
		t_wait_idle(t, SC_MS);
	}
	assert_int_equal(t->n_adm - start, want);
}

/* The first ceil(pos/16) pages of the admission hold checkpoint ck's bytes
 * for `rank`, byte for byte (checksum over the pages in order). */
static void assert_pages_hold(struct t *t, uint32_t rank, const uint32_t *pages, uint32_t np,
			      const struct ck *c)
{
	uint64_t want = 0xcbf29ce484222325ull, got = want;
	for (uint32_t i = 0; i < np; i++) {
		size_t off = (size_t)i * PB;
		size_t len = c->bytes - off < PB ? c->bytes - off : PB;
		want = fnv(want, c->data[rank] + off, len);
		got = fnv(got, t->pool[rank] + (size_t)pages[i] * PB, len);
	}
	assert_int_equal(got, want);
}

static uint32_t pages_of(uint32_t pos)
{
	return (pos + 15) / 16;
}

/* ---- tests ---------------------------------------------------------------- */

static void rule12_imported_pages_hold_checkpoint_bytes(void **state)
{
	(void)state;
	struct t *t = t_new((struct t_opts){.threads = 3, .total_pages = 200, .copy_slots = 4});
	enum { N = 40 };
	kva_handle h[N];
	uint32_t want_pos[N];
	for (uint32_t i = 0; i < N; i++) {
		uint32_t pos = 16 * (1 + (i * 7) % 20); /* 1..20 pages */
		want_pos[i] = pos;
		store_add(&t->st, 1000 + i, pos);
		sc_dir_set(t->s, 100 + i, sc_ckpt(pos, 1000 + i, 0));
		h[i] = sc_submit(t->s, i + 1, 100 + i, pos + 64);
	}
	/* Finish each as soon as it is checked, so later imports land in
	 * recycled, scattered pages that held other checkpoints. */
	uint32_t checked = 0;
	uint64_t end = wall_ns() + WALL_NS;
	while (checked < N && wall_ns() < end) {
		sc_step(t->s, SC_MS);
		t_collect(t);
		for (; checked < t->n_adm; checked++) {
			struct adm *a = &t->adm[checked];
			uint32_t i = (uint32_t)a->h.id - 1;
			assert_int_equal(a->how, KVA_ADMIT_RESTORE);
			const struct ck *c = store_find(&t->st, 1000 + i);
			assert_int_equal(a->restored, want_pos[i]);
			assert_int_equal(a->np, pages_of(a->restored));
			assert_pages_hold(t, 0, a->pages, a->np, c);
			assert_int_equal(kva_finish(t->s->e, h[i]), 0);
		}
		t_wait_idle(t, SC_MS);
	}
	assert_int_equal(checked, N);
	kva_stats es = sc_stats(t->s);
	kva_importer_stats is;
	kva_cpu_importer_stats(t->imp[0], &is);
	assert_int_equal(es.admitted_restore, N);
	assert_int_equal(es.copy_jobs, N);
	assert_int_equal(is.jobs_submitted, N);
	assert_int_equal(is.jobs_ok, N);
	assert_int_equal(is.jobs_failed + is.jobs_cancelled + is.in_flight, 0);
	sc_step(t->s, SC_MS);
	sc_assert_conserved(t->s);
	t_free(t);
}

static void rule11_injected_failures_are_retried_and_copy_right_bytes(void **state)
{
	(void)state;
	const double rate = 0.35;
	const uint64_t seed = 42;
	const uint32_t retries = 3;
	struct t *t = t_new((struct t_opts){.threads = 2,
					    .total_pages = 400,
					    .copy_slots = 8,
					    .retries = retries,
					    .fail_rate = rate,
					    .seed = seed});
	enum { N = 30 };
	kva_handle h[N];
	uint32_t want_failed = 0, want_restored = 0;
	bool restores[N];
	for (uint32_t i = 0; i < N; i++) {
		uint32_t pos = 16 * (2 + i % 9);
		store_add(&t->st, 2000 + i, pos);
		sc_dir_set(t->s, 200 + i, sc_ckpt(pos, 2000 + i, 0));
		h[i] = sc_submit(t->s, i + 1, 200 + i, pos + 32);
		/* predict from the published decision function */
		uint32_t a = 1;
		while (
		    a <= retries + 1 &&
		    kva_cpu_importer_fails(seed, rate, (kva_copy_token){h[i].id, h[i].gen, a, h[i].slot}, 0))
			a++;
		want_failed += a - 1;
		restores[i] = a <= retries + 1;
		want_restored += restores[i];
	}
	assert_true(want_failed > 0); /* the seed must exercise retries */
	t_drive(t, N);
	for (uint32_t i = 0; i < N; i++) {
		struct adm *a = t_find(t, h[i]);
		assert_non_null(a);
		if (!restores[i]) {
			assert_int_equal(a->how, KVA_ADMIT_RECOMPUTE);
			assert_int_equal(a->reason, KVA_REASON_RETRIES_EXHAUSTED);
			continue;
		}
		assert_int_equal(a->how, KVA_ADMIT_RESTORE);
		/* a failed attempt left half the pages written, the rest 0xEE:
		 * only a complete later attempt makes every byte right */
		assert_pages_hold(t, 0, a->pages, a->np, store_find(&t->st, 2000 + i));
	}
	kva_stats es = sc_stats(t->s);
	kva_importer_stats is;
	kva_cpu_importer_stats(t->imp[0], &is);
	assert_int_equal(es.copy_attempts_failed, want_failed);
	assert_int_equal(is.jobs_injected, want_failed);
	assert_int_equal(is.jobs_ok, want_restored);
	assert_int_equal(es.admitted_restore, want_restored);
	assert_int_equal(es.fallbacks[KVA_REASON_RETRIES_EXHAUSTED], N - want_restored);
	sc_assert_conserved(t->s);
	t_free(t);
}

static void rule11_shorter_checkpoint_fallback_copies_the_shorter_bytes(void **state)
{
	(void)state;
	const uint32_t retries = 2;
	struct t *t = t_new((struct t_opts){.threads = 2, .retries = retries});
	store_add(&t->st, 501, 160); /* 10 pages */
	store_add(&t->st, 502, 320); /* 20 pages, different bytes */
	sc_dir_add(t->s, 9, sc_ckpt(160, 501, 0));
	sc_dir_add(t->s, 9, sc_ckpt(320, 502, 0));
	kva_handle h = sc_submit(t->s, 1, 9, 480);
	/* A seed under which every attempt on the long checkpoint fails (each
	 * writing the long one's first 10 pages) and the shorter one's does not. */
	uint64_t seed = 0;
	for (uint64_t s = 1; s < 100000 && !seed; s++) {
		bool ok = true;
		for (uint32_t a = 1; a <= retries + 1; a++)
			ok = ok &&
			     kva_cpu_importer_fails(s, 0.5, (kva_copy_token){h.id, h.gen, a, h.slot}, 0);
		if (ok &&
		    !kva_cpu_importer_fails(s, 0.5, (kva_copy_token){h.id, h.gen, retries + 2, h.slot}, 0))
			seed = s;
	}
	assert_true(seed != 0);
	kva_cpu_importer_set_failures(t->imp[0], 0.5, seed);
	t_drive(t, 1);
	struct adm *a = t_find(t, h);
	assert_non_null(a);
	assert_int_equal(a->how, KVA_ADMIT_RESTORE);
	assert_int_equal(a->restored, 160);
	assert_int_equal(a->np, 10);
	assert_pages_hold(t, 0, a->pages, a->np, store_find(&t->st, 501));
	kva_stats es = sc_stats(t->s);
	assert_int_equal(es.copy_attempts_failed, retries + 1);
	assert_int_equal(es.copy_retries, retries);
	assert_int_equal(es.shorter_fallbacks, 1);
	kva_importer_stats is;
	kva_cpu_importer_stats(t->imp[0], &is);
	assert_int_equal(is.jobs_injected, retries + 1);
	assert_int_equal(is.jobs_ok, 1);
	sc_assert_conserved(t->s);
	t_free(t);
}

static void rule11_failing_store_exhausts_retries_then_recomputes(void **state)
{
	(void)state;
	struct t *t = t_new((struct t_opts){.threads = 1, .retries = 2});
	store_add(&t->st, 601, 128);
	atomic_store(&t->st.fail_id, 601);
	sc_dir_set(t->s, 6, sc_ckpt(128, 601, 0));
	kva_handle h = sc_submit(t->s, 1, 6, 200);
	t_drive(t, 1);
	struct adm *a = t_find(t, h);
	assert_int_equal(a->how, KVA_ADMIT_RECOMPUTE);
	assert_int_equal(a->reason, KVA_REASON_RETRIES_EXHAUSTED);
	kva_importer_stats is;
	kva_cpu_importer_stats(t->imp[0], &is);
	assert_int_equal(is.jobs_failed, 3);
	assert_int_equal(is.jobs_injected, 0);
	assert_int_equal(atomic_load(&t->st.resolves), 3);
	sc_assert_conserved(t->s);
	t_free(t);
}

static void wait_gate_entered(struct t *t)
{
	uint64_t end = wall_ns() + WALL_NS;
	while (!atomic_load(&t->st.gate_entered) && wall_ns() < end) {
		struct timespec ts = {0, 100000};
		nanosleep(&ts, NULL);
	}
	assert_true(atomic_load(&t->st.gate_entered));
}

static void rule12_cancel_during_copy_returns_pages_only_after_drain(void **state)
{
	(void)state;
	struct t *t = t_new((struct t_opts){.threads = 2});
	struct ck *c = store_add(&t->st, 700, 320); /* 20 pages */
	atomic_store(&t->st.gate_id, 700);
	sc_dir_set(t->s, 7, sc_ckpt(320, 700, 0));
	kva_handle big = sc_occupy(t->s, 1, 70);
	kva_handle h = sc_submit(t->s, 2, 7, 480); /* 20 imported + 10 continuation */
	sc_step(t->s, SC_MS);
	assert_int_equal(t->s->plan.n_copies, 1);
	uint32_t copy_pages[20];
	assert_int_equal(t->s->copies[0].npages, 20);
	memcpy(copy_pages, t->s->copies[0].pages, sizeof(copy_pages));
	wait_gate_entered(t); /* a worker holds the job: the copy is under way */

	assert_int_equal(kva_cancel(t->s->e, h), 0);
	sc_step(t->s, SC_MS);
	kva_stats st = sc_stats(t->s);
	assert_int_equal(st.draining_pages, 20);
	assert_int_equal(st.free_pages, 10); /* continuation credits came back at once */
	assert_int_equal(st.cancelled, 1);

	/* Try to take the draining pages: a 16-page first chunk and a grow of
	 * 11 pages both need more than the 10 free ones. */
	kva_handle other = sc_submit(t->s, 3, 0, 256);
	for (int i = 0; i < 5; i++) {
		sc_step(t->s, SC_MS);
		assert_null(sc_admitted(t->s, other));
		assert_true(t->s->plan.head_blocked);
	}
	assert_int_equal(kva_grow(t->s->e, big, 11, NULL), -ENOSPC);
	assert_int_equal(sc_stats(t->s).draining_pages, 20);

	/* Let the copy finish: it writes into the still-held pages, reports,
	 * and only then do the pages return. */
	sem_post(&t->st.gate);
	t_idle(t);
	assert_pages_hold(t, 0, copy_pages, 20, c);
	sc_step(t->s, SC_MS);
	assert_non_null(sc_admitted(t->s, other));
	st = sc_stats(t->s);
	assert_int_equal(st.draining_pages, 0);
	assert_int_equal(st.free_pages, 30 - 16);
	assert_int_equal(kva_grow(t->s->e, big, 11, NULL), 0);
	sc_assert_conserved(t->s);
	t_free(t);
}

/* Destroy the importers while their jobs are copying or queued, keep
 * stepping: every accepted job must have been reported (cancelled imports
 * drain, the others complete, retry or fall back), nothing leaks. */
static void destroy_importer_with_jobs_in_flight_reports_every_job(void **state)
{
	(void)state;
	struct t *t = t_new((struct t_opts){.threads = 2,
					    .total_pages = 400,
					    .copy_slots = 16,
					    .retries = 1,
					    .latency_ns = 20 * SC_MS,
					    .shim = true});
	enum { N = 12 };
	kva_handle h[N];
	atomic_store(&t->st.gate_id, 3000); /* the first job's copy is held */
	for (uint32_t i = 0; i < N; i++) {
		store_add(&t->st, 3000 + i, 64);
		sc_dir_set(t->s, 300 + i, sc_ckpt(64, 3000 + i, 0));
		h[i] = sc_submit(t->s, i + 1, 300 + i, 128);
	}
	sc_step(t->s, SC_MS);
	assert_int_equal(t->s->plan.n_copies, N);
	wait_gate_entered(t);
	for (uint32_t i = 0; i < 3; i++)
		assert_int_equal(kva_cancel(t->s->e, h[i]), 0);
	sc_step(t->s, SC_MS);
	/* the held copy's pages drain; the other two cancelled ones may have
	 * finished their 20 ms copies first (a slow sanitizer build) and gave
	 * their pages back at once */
	uint64_t draining = sc_stats(t->s).draining_pages;
	assert_true(draining >= 4 && draining <= 3 * 4 && draining % 4 == 0);
	sem_post(&t->st.gate);

	kva_importer_stats is;
	kva_cpu_importer_stats(t->imp[0], &is);
	assert_int_equal(is.jobs_submitted, N);
	t_destroy_importers(t);

	/* After destroy the engine has every report: the cancelled imports
	 * drain at the next step, the rest finish one way or the other. */
	t_drive(t, N - 3);
	kva_stats es = sc_stats(t->s);
	assert_int_equal(es.draining_pages, 0);
	assert_int_equal(es.importing, 0);
	assert_int_equal(es.cancelled, 3);
	assert_int_equal(es.admitted_restore + es.admitted_recompute, N - 3);
	for (uint32_t i = 3; i < N; i++) {
		struct adm *a = t_find(t, h[i]);
		assert_non_null(a);
		if (a->how == KVA_ADMIT_RESTORE)
			assert_pages_hold(t, 0, a->pages, a->np, store_find(&t->st, 3000 + i));
		else
			assert_int_equal(a->reason, KVA_REASON_RETRIES_EXHAUSTED);
	}
	sc_assert_conserved(t->s);
	t_free(t);
}

/* The documented shutdown order with copies in flight: importers, then the
 * engine. The sanitizer build proves there is no leak and no use after free. */
static void destroy_importer_then_engine_mid_copy(void **state)
{
	(void)state;
	struct t *t = t_new((struct t_opts){.threads = 3,
					    .total_pages = 400,
					    .copy_slots = 16,
					    .latency_ns = 5 * SC_MS,
					    .world = 2});
	kva_handle h[10];
	for (uint32_t i = 0; i < 10; i++) {
		store_add(&t->st, 4000 + i, 96);
		sc_dir_set(t->s, 400 + i, sc_ckpt(96, 4000 + i, 0));
		h[i] = sc_submit(t->s, i + 1, 400 + i, 100);
	}
	sc_step(t->s, SC_MS);
	assert_int_equal(t->s->plan.n_copies, 20);
	assert_int_equal(kva_cancel(t->s->e, h[0]), 0);
	t_free(t);
}

static void rule19_world2_admits_only_after_both_ranks(void **state)
{
	(void)state;
	struct t *t = t_new((struct t_opts){.world = 2, .threads = 2});
	struct ck *c = store_add(&t->st, 800, 256);
	atomic_store(&t->st.gate_rank, 1);
	atomic_store(&t->st.gate_id, 800);
	sc_dir_set(t->s, 8, sc_ckpt(256, 800, 0));
	kva_handle h = sc_submit(t->s, 1, 8, 300);
	sc_step(t->s, SC_MS);
	assert_int_equal(t->s->plan.n_copies, 2);
	/* rank 0 finishes; rank 1 is held in its resolve */
	assert_int_equal(kva_cpu_importer_wait_idle(t->imp[0], WALL_NS), 0);
	wait_gate_entered(t);
	for (int i = 0; i < 5; i++) {
		sc_step(t->s, SC_MS);
		assert_int_equal(t->s->plan.n_admitted, 0);
		assert_int_equal(sc_state(t->s, h), KVA_STATE_IMPORTING);
	}
	sem_post(&t->st.gate);
	t_drive(t, 1);
	struct adm *a = t_find(t, h);
	assert_int_equal(a->how, KVA_ADMIT_RESTORE);
	assert_pages_hold(t, 0, a->pages, a->np, c); /* each rank got its own share */
	assert_pages_hold(t, 1, a->pages, a->np, c);
	t_free(t);
}

static void rule19_world2_one_rank_failing_fails_attempt_and_retry_succeeds(void **state)
{
	(void)state;
	struct t *t = t_new((struct t_opts){.world = 2, .threads = 2, .retries = 2});
	struct ck *c = store_add(&t->st, 900, 200);
	sc_dir_set(t->s, 9, sc_ckpt(200, 900, 0));
	kva_handle h = sc_submit(t->s, 1, 9, 300);
	uint64_t seed = 0;
	for (uint64_t s = 1; s < 100000 && !seed; s++)
		if (kva_cpu_importer_fails(s, 0.5, (kva_copy_token){h.id, h.gen, 1, h.slot}, 1) &&
		    !kva_cpu_importer_fails(s, 0.5, (kva_copy_token){h.id, h.gen, 2, h.slot}, 1))
			seed = s;
	kva_cpu_importer_set_failures(t->imp[1], 0.5, seed);
	t_drive(t, 1);
	struct adm *a = t_find(t, h);
	assert_int_equal(a->how, KVA_ADMIT_RESTORE);
	assert_int_equal(a->restored, 200);
	assert_pages_hold(t, 0, a->pages, a->np, c);
	assert_pages_hold(t, 1, a->pages, a->np, c);
	kva_stats es = sc_stats(t->s);
	assert_int_equal(es.copy_attempts_failed, 1);
	assert_int_equal(es.copy_retries, 1);
	kva_importer_stats s0, s1;
	kva_cpu_importer_stats(t->imp[0], &s0);
	kva_cpu_importer_stats(t->imp[1], &s1);
	assert_int_equal(s0.jobs_ok, 2); /* rank 0 copied both attempts */
	assert_int_equal(s1.jobs_injected, 1);
	assert_int_equal(s1.jobs_ok, 1);
	sc_assert_conserved(t->s);
	t_free(t);
}

static void importer_refuses_jobs_it_cannot_run(void **state)
{
	(void)state;
	struct t *t = t_new((struct t_opts){.threads = 1});
	kva_importer_ref r = kva_cpu_importer_ref(t->imp[0]);
	uint32_t bad_page[2] = {3, 100}; /* 100 is outside a 100-page pool */
	kva_copy_job job = {.rank = 0, .world_size = 1, .npages = 2, .pages = bad_page};
	assert_int_equal(r.submit(r.ctx, t->s->e, &job), -ERANGE);
	job.rank = 1;
	bad_page[1] = 4;
	assert_int_equal(r.submit(r.ctx, t->s->e, &job), -EINVAL);
	kva_importer_stats is;
	kva_cpu_importer_stats(t->imp[0], &is);
	assert_int_equal(is.jobs_refused, 2);
	assert_int_equal(is.jobs_submitted, 0);

	int err = 0;
	kva_cpu_importer_config bad;
	kva_cpu_importer_config_default(&bad);
	assert_null(kva_cpu_importer_create(&bad, &err));
	assert_int_equal(err, -EINVAL);
	t_free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(rule12_imported_pages_hold_checkpoint_bytes),
	    cmocka_unit_test(rule11_injected_failures_are_retried_and_copy_right_bytes),
	    cmocka_unit_test(rule11_shorter_checkpoint_fallback_copies_the_shorter_bytes),
	    cmocka_unit_test(rule11_failing_store_exhausts_retries_then_recomputes),
	    cmocka_unit_test(rule12_cancel_during_copy_returns_pages_only_after_drain),
	    cmocka_unit_test(destroy_importer_with_jobs_in_flight_reports_every_job),
	    cmocka_unit_test(destroy_importer_then_engine_mid_copy),
	    cmocka_unit_test(rule19_world2_admits_only_after_both_ranks),
	    cmocka_unit_test(rule19_world2_one_rank_failing_fails_attempt_and_retry_succeeds),
	    cmocka_unit_test(importer_refuses_jobs_it_cannot_run),
	};
	return cmocka_run_group_tests_name("cpu_importer", tests, NULL, NULL);
}
