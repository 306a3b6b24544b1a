/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Grant reuse against readers on other threads. The main thread is the
 * scheduler: every request restores (one external checkpoint), its copy is
 * reported at once, it runs, and it finishes a few steps later, so records
 * retire all the time and their grants go to later admissions after a grace
 * period (reservations/grant.c, "grant reuse"). Reader threads meanwhile
 * query recent handles and report their copies again, late.
 *
 * Request `id` needs exactly 2 + id % 7 pages, so a reader that read another
 * request's grant (one reused too early) would see a page count that is not
 * its own: every query must show at most the request's own pages and at
 * most one copy attempt. A late copy report must always be refused (the
 * scheduler reported every rank already): accepting one would count it for
 * whichever request holds the grant now. Readers count; the main thread
 * asserts. A reader must be descheduled inside its few-nanosecond window for
 * an early reuse to show here, so this test checks contents under real
 * interleavings (and gives the sanitizers these paths);
 * tests/scenario/test_grant_lifetime.c pins the grace period itself.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "kva_test.h"
#include "kvadmit/kvadmit.h"

#define READERS 2
#define STEPS_FULL 30000ull
#define RING 256 /* recently admitted requests the readers pick from */
#define MAX_RUNNING 64

static uint32_t pages_of(uint64_t id) { return 2 + (uint32_t)(id % 7); }

struct shared {
	kva_engine *e;
	atomic_int stop;
	/* Published admissions: handle and copy token fields, each word atomic
	 * (a reader may pair words of two entries: such a handle matches no
	 * request and gets -ENOENT). */
	_Atomic uint64_t ring_id[RING], ring_genslot[RING];
	_Atomic uint64_t published;
};

struct reader {
	struct shared *sh;
	pthread_t t;
	uint64_t queries, found, late_reports;
	uint64_t wrong_pages, wrong_attempts, wrong_handle, accepted_late, bad_rc;
};

static void *reader_main(void *arg)
{
	struct reader *r = arg;
	uint64_t rng = (uint64_t)(uintptr_t)r | 1;
	while (!atomic_load(&r->sh->stop)) {
		uint64_t n = atomic_load_explicit(&r->sh->published, memory_order_acquire);
		if (!n)
			continue;
		uint64_t k = kva_test_rand(&rng) % (n < RING ? n : RING);
		uint64_t id = atomic_load_explicit(&r->sh->ring_id[k], memory_order_relaxed);
		uint64_t gs = atomic_load_explicit(&r->sh->ring_genslot[k], memory_order_relaxed);
		kva_handle h = {.id = id, .gen = (uint32_t)(gs >> 32), .slot = (uint32_t)gs};
		kva_request_info info;
		int rc = kva_query(r->sh->e, h, &info);
		r->queries++;
		if (rc == 0) {
			r->found++;
			uint32_t own = pages_of(id);
			if (info.handle.id != id || info.handle.gen != h.gen ||
			    info.prompt_tokens != 16 * own)
				r->wrong_handle++;
			if (info.pages_held > own || info.pages_reserved > own)
				r->wrong_pages++;
			if (info.copy_attempts > 1)
				r->wrong_attempts++;
		} else if (rc != -ENOENT) {
			r->bad_rc++;
		}
		kva_copy_token t = {.id = id, .gen = h.gen, .attempt = 1, .slot = h.slot};
		rc = kva_copy_done(r->sh->e, t, 0, 0);
		r->late_reports++;
		if (rc == 0)
			r->accepted_late++;
		else if (rc != -ENOENT && rc != -EALREADY && rc != -ESTALE)
			r->bad_rc++;
	}
	return NULL;
}

/* Every lookup is answered from the callback: one external checkpoint
 * ending one page before the prompt does. */
static void directory(void *ctx, uint64_t key, uint32_t prompt, kva_lookup_token t)
{
	kva_engine **e = ctx;
	(void)key;
	kva_manifest m = {.count = 1,
	                  .entries = {{.position = prompt - 16, .location = KVA_LOC_EXTERNAL,
	                               .compatible = 1, .id = key, .epoch = 1}}};
	assert_int_equal(kva_lookup_answer(*e, t, &m), 0);
}

static void grants_reused_under_readers_stay_their_requests(void **unused)
{
	(void)unused;
	static struct shared sh;
	memset(&sh, 0, sizeof(sh));
	kva_config c;
	kva_config_default(&c);
	c.total_pages = 256;
	c.page_tokens = 16;
	c.decode_reserve_pages = 0;
	c.decode_headroom_pages = 0;
	c.prefill_chunk_tokens = 256;
	c.copy_slots = 16;
	c.max_running = MAX_RUNNING;
	c.lookup = directory;
	c.lookup_ctx = &sh.e;
	int err;
	sh.e = kva_engine_create(&c, &err);
	assert_non_null(sh.e);
	static kva_admission adm[256];
	static uint32_t pages[4096];
	static kva_copy_job copies[256];
	static kva_ended ended[1024];
	kva_plan plan = {.admitted = adm, .admitted_cap = 256, .pages = pages, .pages_cap = 4096,
	                 .copies = copies, .copies_cap = 256, .ended = ended, .ended_cap = 1024};
	struct reader rd[READERS];
	memset(rd, 0, sizeof(rd));
	for (int i = 0; i < READERS; i++) {
		rd[i].sh = &sh;
		assert_int_equal(pthread_create(&rd[i].t, NULL, reader_main, &rd[i]), 0);
	}
	static kva_handle running[MAX_RUNNING];
	uint32_t nr = 0;
	uint64_t rng = 0x6a17, next_id = 1, now = 0, steps = kva_test_scaled(STEPS_FULL);
	uint64_t restored = 0, finished = 0, reported = 0;
	for (uint64_t s = 0; s < steps; s++) {
		uint64_t x = kva_test_rand(&rng);
		if (x % 4 != 0) { /* a new request most steps */
			kva_request q = {.id = next_id, .prefix_key = next_id,
			                 .prompt_tokens = 16 * pages_of(next_id)};
			kva_handle h;
			assert_int_equal(kva_submit(sh.e, &q, &h), 0);
			next_id++;
		}
		if (nr && (x >> 8) % 3 != 0) { /* a running request ends */
			uint32_t i = (uint32_t)(x >> 16) % nr;
			assert_int_equal(kva_finish(sh.e, running[i]), 0);
			running[i] = running[--nr];
			finished++;
		}
		now += 1000000;
		assert_true(kva_step(sh.e, now, &plan) >= 0);
		for (uint32_t i = 0; i < plan.n_copies; i++) {
			/* reported first, then published: every reader's report is late */
			assert_int_equal(kva_copy_done(sh.e, copies[i].token, copies[i].rank, 0), 0);
			kva_handle h = copies[i].handle;
			uint64_t k = atomic_load_explicit(&sh.published, memory_order_relaxed);
			atomic_store_explicit(&sh.ring_id[k % RING], h.id, memory_order_relaxed);
			atomic_store_explicit(&sh.ring_genslot[k % RING], (uint64_t)h.gen << 32 | h.slot,
			                      memory_order_relaxed);
			atomic_store_explicit(&sh.published, k + 1, memory_order_release);
		}
		for (uint32_t i = 0; i < plan.n_admitted; i++) {
			assert_true(nr < MAX_RUNNING);
			assert_int_equal(adm[i].how, KVA_ADMIT_RESTORE);
			running[nr++] = adm[i].handle;
			restored++;
		}
		reported += plan.n_ended;
	}
	atomic_store(&sh.stop, 1);
	uint64_t queries = 0, found = 0, late = 0;
	for (int i = 0; i < READERS; i++) {
		pthread_join(rd[i].t, NULL);
		queries += rd[i].queries;
		found += rd[i].found;
		late += rd[i].late_reports;
		assert_int_equal(rd[i].wrong_handle, 0);
		assert_int_equal(rd[i].wrong_pages, 0);
		assert_int_equal(rd[i].wrong_attempts, 0);
		assert_int_equal(rd[i].accepted_late, 0);
		assert_int_equal(rd[i].bad_rc, 0);
	}
	print_message("grant reuse: %llu steps, %llu restored, %llu finished, %llu reported; "
	              "%llu queries (%llu found a live request), %llu late copy reports\n",
	              (unsigned long long)steps, (unsigned long long)restored,
	              (unsigned long long)finished, (unsigned long long)reported,
	              (unsigned long long)queries, (unsigned long long)found,
	              (unsigned long long)late);
	assert_true(restored > steps / 4 && found > 0);
	kva_engine_destroy(sh.e);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(grants_reused_under_readers_stay_their_requests),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
