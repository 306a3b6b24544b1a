/*
 * Paired reservations from 1 and 2 threads: one iteration takes a restore's
 * credits (pages, a copy slot and a run slot, all or nothing) and gives them
 * back. BM_reserve_release uses lockfree/capacity (one CAS on the packed
 * word, one fetch_add); the baseline BM_mutex_counter does the same check
 * and arithmetic on three counters under a pthread mutex.
 */
#include <pthread.h>
#include <stdio.h>

#include "bm.h"
#include "capacity.h"
#include "fixture.h"
#include "gbench.h"

#define BATCH 256

static const struct kva_credits want = {BX_NEED, 1, 1};
static struct kva_capacity cap;

static struct {
	pthread_mutex_t lock;
	uint32_t pages;
	uint16_t slots, runs;
} mc = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0};

static void finish(gb_state *s, uint64_t refused)
{
	gb_set_items_processed(s, gb_iterations_done(s));
	if (refused)
		gb_skip_with_error(s, "a reservation was refused");
}

static void bm_reserve_release(gb_state *s, void *arg)
{
	(void)arg;
	if (gb_thread_index(s) == 0)
		kva_capacity_init(&cap, (struct kva_credits){1u << 20, UINT16_MAX, UINT16_MAX});
	uint64_t refused = 0;
	size_t n;
	while ((n = gb_keep_running_batch(s, BATCH)))
		for (size_t i = 0; i < n; i++) {
			if (kva_capacity_try_reserve(&cap, want, 0))
				kva_capacity_release(&cap, want);
			else
				refused++;
		}
	finish(s, refused);
}

static void bm_mutex_counter(gb_state *s, void *arg)
{
	(void)arg;
	if (gb_thread_index(s) == 0) {
		mc.pages = 1u << 20;
		mc.slots = mc.runs = UINT16_MAX;
	}
	uint64_t refused = 0;
	size_t n;
	while ((n = gb_keep_running_batch(s, BATCH)))
		for (size_t i = 0; i < n; i++) {
			pthread_mutex_lock(&mc.lock);
			bool ok = mc.pages >= want.pages && mc.slots >= want.slots && mc.runs >= want.runs;
			if (ok) {
				mc.pages -= want.pages;
				mc.slots -= want.slots;
				mc.runs -= want.runs;
			}
			pthread_mutex_unlock(&mc.lock);
			if (!ok) {
				refused++;
				continue;
			}
			pthread_mutex_lock(&mc.lock);
			mc.pages += want.pages;
			mc.slots += want.slots;
			mc.runs += want.runs;
			pthread_mutex_unlock(&mc.lock);
		}
	finish(s, refused);
}

void bm_register_capacity(void)
{
	gb_bench *b = gb_use_real_time(gb_register("BM_reserve_release", bm_reserve_release, NULL));
	gb_threads(gb_threads(b, 1), 2);
	b = gb_use_real_time(gb_register("BM_mutex_counter", bm_mutex_counter, NULL));
	gb_threads(gb_threads(b, 1), 2);
}
