/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tailload: the producers and the noisy host of tailload.h, and the timed
 * step. The threads never touch the fixture's own bookkeeping (next_id, the
 * tracked waiting window): producer requests have ids of their own range and
 * end before tl_stop returns, so the engine goes back to bx_blocked's state.
 */
#define _GNU_SOURCE 1 /* RUSAGE_THREAD */

#include "tailload.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <kvadmit/lockfree/rcu_thread.h>

/* producer p's request ids: bit 62 set, p above the sequence number, so they
 * never meet the fixture's ids (1, 2, ... in submission order) */
#define ID_BASE (1ull << 62)
#define ID_PRODUCER_SHIFT 48
#define SETTLE_NS 60000000000ull

void tl_config_default(struct tl_config *c)
{
	c->tick_ns = 100000;
	c->per_tick = bx_small() ? 4 : 8;
	c->window = bx_small() ? 64 : 8192;
	c->noisy_bytes = bx_small() ? (1u << 20) : (64u << 20);
	c->step_ns = 100000;
	c->warmup_steps = bx_small() ? 20 : 1000;
}

void tl_pace(uint64_t *next, uint64_t period_ns)
{
	uint64_t now = bx_clock_ns(), target = *next + period_ns;
	if (*next == 0 || target < now)
		target = now; /* late: no catching up */
	*next = target;
	struct timespec ts = {(time_t)(target / 1000000000ull), (long)(target % 1000000000ull)};
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

static bool stopping(struct tl_load *l)
{
	return atomic_load_explicit(&l->stop, memory_order_relaxed);
}

static void cancel_oldest(struct tl_producer *p)
{
	kva_handle h = p->ring[p->head];
	p->head = (p->head + 1) % p->load->cfg.window;
	p->filled--;
	if (kva_cancel(p->load->b->e, h) == 0)
		atomic_fetch_add_explicit(&p->cancels, 1, memory_order_relaxed);
	else
		atomic_fetch_add_explicit(&p->failures, 1, memory_order_relaxed);
}

static void *producer(void *arg)
{
	struct tl_producer *p = arg;
	struct tl_load *l = p->load;
	uint32_t window = l->cfg.window;
	uint64_t seq = 0, next = 0, seen = 0;
	unsigned ahead = 0;
	while (!stopping(l)) {
		uint64_t steps = atomic_load_explicit(&l->steps, memory_order_relaxed);
		ahead = steps == seen ? ahead + 1 : 0;
		seen = steps;
		if (ahead > TL_AHEAD) {
			atomic_fetch_add_explicit(&p->skipped_ticks, 1, memory_order_relaxed);
			tl_pace(&next, l->cfg.tick_ns);
			continue;
		}
		for (uint32_t i = 0; i < l->cfg.per_tick; i++) {
			if (p->filled == window)
				cancel_oldest(p);
			uint64_t id = ID_BASE | (uint64_t)p->index << ID_PRODUCER_SHIFT | ++seq;
			kva_request r = {.id = id, .prefix_key = id, .prompt_tokens = BX_PROMPT};
			kva_handle h;
			if (kva_submit(l->b->e, &r, &h) != 0) {
				atomic_fetch_add_explicit(&p->failures, 1, memory_order_relaxed);
				continue;
			}
			p->ring[(p->head + p->filled++) % window] = h;
			atomic_fetch_add_explicit(&p->submits, 1, memory_order_relaxed);
		}
		if (p->filled == window)
			atomic_store_explicit(&p->warm, true, memory_order_relaxed);
		tl_pace(&next, l->cfg.tick_ns);
	}
	while (p->filled)
		cancel_oldest(p);
	return NULL;
}

static void *noisy_host(void *arg)
{
	struct tl_load *l = arg;
	size_t len = l->cfg.noisy_bytes, page = (size_t)sysconf(_SC_PAGESIZE);
	while (!stopping(l)) {
		char *m =
		    mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (m == MAP_FAILED) {
			atomic_fetch_add_explicit(&l->noisy_failures, 1, memory_order_relaxed);
			struct timespec ms = {0, 1000000};
			nanosleep(&ms, NULL);
			continue;
		}
		for (size_t off = 0; off < len; off += page)
			m[off] = 1;
		madvise(m, len, MADV_DONTNEED);
		munmap(m, len);
		atomic_fetch_add_explicit(&l->noisy_rounds, 1, memory_order_relaxed);
	}
	return NULL;
}

int tl_start(struct tl_load *l, struct bx *b, const struct tl_config *c)
{
	memset(l, 0, sizeof(*l));
	l->b = b;
	l->cfg = *c;
	for (unsigned i = 0; i < TL_PRODUCERS; i++) {
		struct tl_producer *p = &l->prod[i];
		p->load = l;
		p->index = i;
		p->ring = calloc(c->window, sizeof(*p->ring));
		if (!p->ring)
			bx_check(-ENOMEM, "producer window");
		int rc = pthread_create(&p->thread, NULL, producer, p);
		if (rc)
			bx_check(-rc, "producer thread");
	}
	int rc = pthread_create(&l->noisy, NULL, noisy_host, l);
	if (rc)
		bx_check(-rc, "noisy host thread");
	return 0;
}

bool tl_warm(struct tl_load *l)
{
	for (unsigned i = 0; i < TL_PRODUCERS; i++)
		if (!atomic_load_explicit(&l->prod[i].warm, memory_order_relaxed))
			return false;
	return true;
}

bool tl_settle(struct tl_load *l)
{
	struct tl_sample x;
	uint64_t t0 = bx_clock_ns();
	for (uint32_t warm = 0; warm < l->cfg.warmup_steps && bx_clock_ns() - t0 < SETTLE_NS;) {
		tl_step(l, &x);
		warm += tl_warm(l);
	}
	return tl_warm(l);
}

void tl_step(struct tl_load *l, struct tl_sample *out)
{
	struct rusage r0, r1;
	tl_pace(&l->next_step, l->cfg.step_ns);
	getrusage(RUSAGE_THREAD, &r0);
	uint64_t c0 = bx_cpu_ns(), w0 = bx_clock_ns();
	bx_step(l->b);
	uint64_t w1 = bx_clock_ns(), c1 = bx_cpu_ns();
	getrusage(RUSAGE_THREAD, &r1);
	out->cpu_ns = c1 - c0;
	out->wall_ns = w1 - w0;
	out->voluntary = (uint64_t)(r1.ru_nvcsw - r0.ru_nvcsw);
	out->involuntary = (uint64_t)(r1.ru_nivcsw - r0.ru_nivcsw);
	out->minor_faults = (uint64_t)(r1.ru_minflt - r0.ru_minflt);
	out->major_faults = (uint64_t)(r1.ru_majflt - r0.ru_majflt);
	l->ended += l->b->plan.n_ended;
	atomic_fetch_add_explicit(&l->steps, 1, memory_order_relaxed);
}

int tl_stop(struct tl_load *l)
{
	atomic_store_explicit(&l->stop, true, memory_order_relaxed);
	uint64_t submits = 0, failures = 0;
	for (unsigned i = 0; i < TL_PRODUCERS; i++) {
		pthread_join(l->prod[i].thread, NULL);
		submits += atomic_load_explicit(&l->prod[i].submits, memory_order_relaxed);
		failures += atomic_load_explicit(&l->prod[i].failures, memory_order_relaxed);
		free(l->prod[i].ring);
		l->prod[i].ring = NULL;
	}
	pthread_join(l->noisy, NULL);
	/* every producer request was cancelled: step until all have ended */
	for (int guard = 0; l->ended < submits && guard < 100000; guard++) {
		bx_step(l->b);
		l->ended += l->b->plan.n_ended;
	}
	urcu_memb_barrier();
	kva_stats st;
	kva_stats_get(l->b->e, &st);
	if (failures || l->ended != submits || st.waiting != l->b->n_waiting ||
	    !l->b->plan.head_blocked)
		return -EPROTO;
	return 0;
}
