/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Paired reservations from 1 and 2 threads: one item takes a restore's
 * credits (pages, a copy slot and a run slot, all or nothing) and gives them
 * back. BM_reserve_release uses lockfree/capacity (one CAS on the packed
 * word, one fetch_add); the baseline BM_mutex_counter does the same check
 * and arithmetic on three counters under a pthread mutex. Threads run in
 * lockstep batches (lockstep.h).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "bm.h"
#include <kvadmit/lockfree/capacity.h>
#include "fixture.h"
#include "lockstep.h"

#define BATCH 16384

static const struct kva_credits want = {BX_NEED, 1, 1};
static struct kva_capacity cap;
static _Atomic uint64_t refused; /* must stay 0: there is room for every thread */

static struct {
	pthread_mutex_t lock;
	uint32_t pages;
	uint16_t slots, runs;
} mc = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0};

static void refuse(void) { atomic_fetch_add_explicit(&refused, 1, memory_order_relaxed); }

static void check_none_refused(void)
{
	if (atomic_load_explicit(&refused, memory_order_relaxed))
		bx_check(-EPROTO, "a reservation was refused");
}

static void capacity_setup(void)
{
	kva_capacity_init(&cap, (struct kva_credits){1u << 20, UINT16_MAX, UINT16_MAX});
}

static void capacity_one(uint64_t id)
{
	(void)id;
	if (kva_capacity_try_reserve(&cap, want, 0))
		kva_capacity_release(&cap, want);
	else
		refuse();
}

static void mutex_setup(void)
{
	mc.pages = 1u << 20;
	mc.slots = mc.runs = UINT16_MAX;
}

static void mutex_one(uint64_t id)
{
	(void)id;
	pthread_mutex_lock(&mc.lock);
	bool ok = mc.pages >= want.pages && mc.slots >= want.slots && mc.runs >= want.runs;
	if (ok) {
		mc.pages -= want.pages;
		mc.slots -= want.slots;
		mc.runs -= want.runs;
	}
	pthread_mutex_unlock(&mc.lock);
	if (!ok) {
		refuse();
		return;
	}
	pthread_mutex_lock(&mc.lock);
	mc.pages += want.pages;
	mc.slots += want.slots;
	mc.runs += want.runs;
	pthread_mutex_unlock(&mc.lock);
}

static const struct lockstep capacity = {capacity_setup, capacity_one, NULL, check_none_refused,
                                         BATCH};
static const struct lockstep mutexc = {mutex_setup, mutex_one, NULL, check_none_refused, BATCH};

void bm_register_capacity(void)
{
	lockstep_register("BM_reserve_release", &capacity);
	lockstep_register("BM_mutex_counter", &mutexc);
}
