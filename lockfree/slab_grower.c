/* SPDX-License-Identifier: Apache-2.0 */
/*
 * slab_grower: the background thread that keeps slabs' memory ready (see
 * slab_grower.h for the contract). Owns the list of slabs kept ahead, the
 * thread, and its lock, which only the thread's passes, add, remove and the
 * fork handlers take: never a slab's users.
 */
#define _GNU_SOURCE 1 /* pthread_setname_np */
#include <kvadmit/lockfree/slab_grower.h>

#include <pthread.h>
#include <stdbool.h>
#include <time.h>

#include <kvadmit/lockfree/thread_start.h>

#define POLL_BUSY_NS 1000000L   /* after a pass that did work */
#define POLL_IDLE_NS 16000000L  /* backed off to, doubling, while none is needed */

static struct {
	pthread_mutex_t lock;
	pthread_cond_t added; /* the list became non-empty */
	struct kva_slab_ahead *list;
	bool started;
} g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, false};

static _Thread_local bool on_grower;

bool kva_slab_grower_thread(void)
{
	return on_grower;
}

/* Under g.lock. true when it published or warmed anything. */
static bool keep_ahead(struct kva_slab_ahead *a)
{
	struct kva_slab *s = a->slab;
	uint32_t slots = kva_slab_slots(s);
	if (slots < KVA_SLAB_GROWER_FROM)
		return false;
	uint32_t low = slots / 4 < a->most ? slots / 4 : a->most;
	uint32_t warmed = atomic_load_explicit(&s->warmed, memory_order_relaxed);
	(void)kva_slab_grow_ahead(s, low); /* on failure producers grow on demand */
	return kva_slab_slots(s) != slots ||
	       atomic_load_explicit(&s->warmed, memory_order_relaxed) != warmed;
}

static void *grower_main(void *arg)
{
	(void)arg;
	on_grower = true;
	long poll_ns = POLL_BUSY_NS;
	pthread_mutex_lock(&g.lock);
	for (;;) {
		while (!g.list)
			pthread_cond_wait(&g.added, &g.lock);
		bool worked = false;
		for (struct kva_slab_ahead *a = g.list; a; a = a->next)
			worked |= keep_ahead(a);
		(void)kva_slab_tickets_ahead(KVA_SLAB_GROWER_TICKETS);
		pthread_mutex_unlock(&g.lock);
		poll_ns = worked ? POLL_BUSY_NS : poll_ns * 2 > POLL_IDLE_NS ? POLL_IDLE_NS : poll_ns * 2;
		struct timespec ts = {0, poll_ns};
		while (nanosleep(&ts, &ts) != 0)
			;
		pthread_mutex_lock(&g.lock);
	}
	return NULL;
}

/* Under g.lock. */
static void start(void)
{
	if (g.started)
		return;
	pthread_attr_t attr;
	if (pthread_attr_init(&attr) != 0)
		return;
	(void)pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_t t;
	if (kva_thread_start(&t, &attr, grower_main, NULL) == 0) {
		g.started = true;
		(void)pthread_setname_np(t, "kvadmit-grow");
	}
	pthread_attr_destroy(&attr);
}

void kva_slab_grower_add(struct kva_slab_ahead *a, struct kva_slab *s, uint32_t most)
{
	a->slab = s;
	a->most = most;
	pthread_mutex_lock(&g.lock);
	start();
	a->next = g.list;
	g.list = a;
	pthread_cond_signal(&g.added);
	pthread_mutex_unlock(&g.lock);
}

void kva_slab_grower_remove(struct kva_slab_ahead *a)
{
	pthread_mutex_lock(&g.lock);
	for (struct kva_slab_ahead **p = &g.list; *p; p = &(*p)->next)
		if (*p == a) {
			*p = a->next;
			break;
		}
	pthread_mutex_unlock(&g.lock);
}

void kva_slab_grower_atfork_prepare(void)
{
	pthread_mutex_lock(&g.lock);
}

void kva_slab_grower_atfork_parent(void)
{
	pthread_mutex_unlock(&g.lock);
}

void kva_slab_grower_atfork_child(void)
{
	/* Only the forking thread exists here: the lock and condition start
	 * over, and the next add starts a grower. The list is the parent's
	 * engines, which this child may still destroy. */
	pthread_mutex_init(&g.lock, NULL);
	pthread_cond_init(&g.added, NULL);
	g.started = false;
}
