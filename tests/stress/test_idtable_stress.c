/*
 * Stress test for lockfree/idtable: lookups and duplicate iteration run under
 * RCU while writers replace records (add the next generation, publish it,
 * delete the previous one and free it with call_rcu).
 *
 * Checks: a lookup returns only the record asked for, live and with its
 * writer's stores visible; a record present for the whole lookup (its slot's
 * generation did not move) is always found; iteration sees only generations
 * that were present meanwhile, each once; never-replaced records are always
 * found. Every record is freed exactly once (LSan reports leaks, ASan any
 * read of a freed record).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "idtable.h"
#include "kva_test.h"

#define READERS 2
#define WRITERS 2
#define SLOTS 512
#define OPS_FULL 1000000ULL
#define MAGIC_LIVE 0x1d7ab1e5u
#define MAGIC_DEAD 0xdeadbeefu

struct rec {
	struct kva_idtable_node node;
	uint32_t magic;
	uint64_t payload;
	struct rcu_head rcu;
};

struct slot {
	uint64_t id;
	_Atomic uint32_t gen; /* generation of the newest record added */
	struct rec *cur;      /* owning writer (or main, when quiescent) only */
};

struct shared {
	struct kva_idtable t;
	struct slot slots[SLOTS];
	uint64_t ops;
	atomic_int writers_done;
	atomic_ulong created;
	atomic_ulong freed;
};

struct result {
	uint64_t lookups;
	uint64_t misses;   /* lookups that lost the race with a replacement */
	uint64_t iterated; /* records seen by iteration */
	uint64_t errors;
	char first_error[160];
};

struct thread_arg {
	struct shared *s;
	int index;
	struct result r;
};

static struct shared *g_shared; /* for the call_rcu callback */

static int is_stable(int i)
{
	return i % 4 == 0;
}
static int owner_of(int i)
{
	return i % 2;
} /* writer owning a churned slot */
static uint64_t payload_of(uint64_t id, uint32_t gen)
{
	return id * 31 + gen * 0x9e3779b9ULL;
}

static void note(struct result *r, const char *what, uint64_t id, uint32_t gen)
{
	if (r->errors++ == 0)
		snprintf(r->first_error, sizeof r->first_error, "%s (id %llu gen %u)", what,
			 (unsigned long long)id, (unsigned)gen);
}

static struct rec *new_rec(struct shared *s, uint64_t id, uint32_t gen)
{
	struct rec *x = malloc(sizeof *x);

	if (!x)
		return NULL;
	x->node.id = id;
	x->node.gen = gen;
	x->magic = MAGIC_LIVE;
	x->payload = payload_of(id, gen);
	atomic_fetch_add_explicit(&s->created, 1, memory_order_relaxed);
	return x;
}

static void free_rec(struct rcu_head *h)
{
	struct rec *x = caa_container_of(h, struct rec, rcu);

	kva_rcu_reclaim_begin();
	x->magic = MAGIC_DEAD;
	free(x);
	atomic_fetch_add_explicit(&g_shared->freed, 1, memory_order_relaxed);
}

static int check_rec(struct result *r, struct kva_idtable_node *n, uint64_t id)
{
	struct rec *x = caa_container_of(n, struct rec, node);

	if (x->magic != MAGIC_LIVE) {
		note(r, "freed record returned", id, 0);
		return 0;
	}
	if (n->id != id) {
		note(r, "record of another id returned", id, n->gen);
		return 0;
	}
	if (x->payload != payload_of(n->id, n->gen)) {
		note(r, "writer's stores not visible", id, n->gen);
		return 0;
	}
	return 1;
}

static void read_once(struct shared *s, struct result *r, uint64_t *rng)
{
	int i = (int)(kva_test_rand(rng) % SLOTS);
	struct slot *sl = &s->slots[i];
	/* Acquire: pairs with the writer's release store of gen, made after
	 * the record of that generation was added. */
	uint32_t g1 = atomic_load_explicit(&sl->gen, memory_order_acquire);

	kva_rcu_read_lock();
	struct kva_idtable_node *n = kva_idtable_lookup(&s->t, sl->id, g1);
	/* The lookup's loads must be done before gen is read again (free on
	 * x86; on weaker machines a later acquire load does not order them). */
	atomic_thread_fence(memory_order_acquire);
	uint32_t g2 = atomic_load_explicit(&sl->gen, memory_order_acquire);
	r->lookups++;
	if (n) {
		if (check_rec(r, n, sl->id) && n->gen != g1)
			note(r, "record of another generation returned", sl->id, n->gen);
	} else if (g2 == g1) {
		/* Generation g1 is deleted only after g1 + 1 is published. */
		note(r, "record present throughout the lookup not found", sl->id, g1);
	} else {
		r->misses++;
	}

	/* Iteration over the id's incarnations. Present at some point while
	 * iterating: g0 - 1 (deleted only after g0 was published) up to g3 + 1
	 * (added before it is published). */
	struct kva_idtable_iter it;
	uint32_t seen[64];
	int nseen = 0, saw_g0 = 0;
	uint32_t g0 = atomic_load_explicit(&sl->gen, memory_order_acquire);
	for (n = kva_idtable_first(&s->t, sl->id, &it); n; n = kva_idtable_next(&s->t, &it)) {
		if (!check_rec(r, n, sl->id))
			break;
		for (int k = 0; k < nseen; k++)
			if (seen[k] == n->gen)
				note(r, "iteration saw a record twice", sl->id, n->gen);
		if (nseen == 64) {
			note(r, "iteration too long", sl->id, n->gen);
			break;
		}
		seen[nseen++] = n->gen;
		saw_g0 |= n->gen == g0;
	}
	atomic_thread_fence(memory_order_acquire);
	uint32_t g3 = atomic_load_explicit(&sl->gen, memory_order_acquire);
	kva_rcu_read_unlock();
	r->iterated += (uint64_t)nseen;
	for (int k = 0; k < nseen; k++)
		if ((uint32_t)(seen[k] - (g0 - 1)) > (uint32_t)(g3 + 1 - (g0 - 1)))
			note(r, "iteration saw a generation that was not present", sl->id, seen[k]);
	if (g3 == g0 && !saw_g0)
		note(r, "iteration missed a record present throughout", sl->id, g0);
	if (is_stable(i) && (nseen != 1 || g0 != 0))
		note(r, "never-replaced record not seen exactly once", sl->id, g0);
}

static void *reader_main(void *p)
{
	struct thread_arg *a = p;
	struct shared *s = a->s;
	uint64_t rng = 0x5eed0000ULL + (uint64_t)a->index;

	if (kva_rcu_enter() != 0) {
		note(&a->r, "kva_rcu_enter failed", 0, 0);
		return NULL;
	}
	do {
		for (int k = 0; k < 64; k++)
			read_once(s, &a->r, &rng);
	} while (atomic_load_explicit(&s->writers_done, memory_order_acquire) < WRITERS &&
		 a->r.errors == 0);
	return NULL;
}

static void *writer_main(void *p)
{
	struct thread_arg *a = p;
	struct shared *s = a->s;
	uint64_t rng = 0xabcd0000ULL + (uint64_t)a->index;

	if (kva_rcu_enter() != 0) {
		note(&a->r, "kva_rcu_enter failed", 0, 0);
		goto out;
	}
	for (uint64_t op = 0; op < s->ops; op++) {
		int i;
		do
			i = (int)(kva_test_rand(&rng) % SLOTS);
		while (is_stable(i) || owner_of(i) != a->index);
		struct slot *sl = &s->slots[i];
		struct rec *old = sl->cur;
		uint32_t g = old->node.gen + 1;
		struct rec *x = new_rec(s, sl->id, g);
		if (!x) {
			note(&a->r, "out of memory", sl->id, g);
			break;
		}
		kva_rcu_read_lock();
		kva_idtable_add(&s->t, &x->node);
		kva_rcu_read_unlock();
		/* Release: pairs with the readers' acquire loads of gen. */
		atomic_store_explicit(&sl->gen, g, memory_order_release);
		sl->cur = x;
		kva_rcu_read_lock();
		int err = kva_idtable_del(&s->t, &old->node);
		int again = kva_idtable_del(&s->t, &old->node);
		kva_rcu_read_unlock();
		if (err != 0 || again != -ENOENT)
			note(&a->r, "delete of the previous generation failed", sl->id, g - 1);
		kva_rcu_call(&old->rcu, free_rec);
	}
out:
	atomic_fetch_add_explicit(&s->writers_done, 1, memory_order_release);
	return NULL;
}

static void test_lookups_race_replacement_safely(void **state)
{
	(void)state;
	struct shared *s = calloc(1, sizeof *s);
	struct thread_arg ra[READERS], wa[WRITERS];
	pthread_t rt[READERS], wt[WRITERS];
	struct timespec t0, t1;

	assert_non_null(s);
	assert_int_equal(kva_rcu_enter(), 0);
	g_shared = s;
	s->ops = kva_test_scaled(OPS_FULL);
	assert_int_equal(kva_idtable_init(&s->t, 16), 0);
	kva_rcu_read_lock();
	for (int i = 0; i < SLOTS; i++) {
		struct slot *sl = &s->slots[i];
		/* Spread over the id space, with neighbours differing by one. */
		sl->id = (i & 1) ? (uint64_t)i : ((uint64_t)i << 33) | 2;
		atomic_init(&sl->gen, 0);
		sl->cur = new_rec(s, sl->id, 0);
		assert_non_null(sl->cur);
		kva_idtable_add(&s->t, &sl->cur->node);
	}
	kva_rcu_read_unlock();

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < READERS; i++) {
		ra[i] = (struct thread_arg){.s = s, .index = i};
		assert_int_equal(pthread_create(&rt[i], NULL, reader_main, &ra[i]), 0);
	}
	for (int i = 0; i < WRITERS; i++) {
		wa[i] = (struct thread_arg){.s = s, .index = i};
		assert_int_equal(pthread_create(&wt[i], NULL, writer_main, &wa[i]), 0);
	}
	for (int i = 0; i < WRITERS; i++)
		pthread_join(wt[i], NULL);
	for (int i = 0; i < READERS; i++)
		pthread_join(rt[i], NULL);
	clock_gettime(CLOCK_MONOTONIC, &t1);

	uint64_t lookups = 0, misses = 0, iterated = 0;
	for (int i = 0; i < READERS; i++) {
		if (ra[i].r.errors)
			fail_msg("reader %d: %llu errors, first: %s", i,
				 (unsigned long long)ra[i].r.errors, ra[i].r.first_error);
		lookups += ra[i].r.lookups;
		misses += ra[i].r.misses;
		iterated += ra[i].r.iterated;
	}
	for (int i = 0; i < WRITERS; i++)
		if (wa[i].r.errors)
			fail_msg("writer %d: %llu errors, first: %s", i,
				 (unsigned long long)wa[i].r.errors, wa[i].r.first_error);
	printf("idtable stress: %d x %llu replacements, %llu lookups (%llu lost the race), "
	       "%llu iterated, %.3f s\n",
	       WRITERS, (unsigned long long)s->ops, (unsigned long long)lookups,
	       (unsigned long long)misses, (unsigned long long)iterated,
	       (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);

	/* Quiescent: exactly the newest generation of each slot is left. */
	assert_int_equal(kva_idtable_count(&s->t), SLOTS);
	kva_rcu_read_lock();
	for (int i = 0; i < SLOTS; i++) {
		struct slot *sl = &s->slots[i];
		struct kva_idtable_iter it;
		uint32_t g = atomic_load_explicit(&sl->gen, memory_order_relaxed);
		assert_ptr_equal(kva_idtable_lookup(&s->t, sl->id, g), &sl->cur->node);
		assert_ptr_equal(kva_idtable_first(&s->t, sl->id, &it), &sl->cur->node);
		assert_null(kva_idtable_next(&s->t, &it));
		assert_int_equal(kva_idtable_del(&s->t, &sl->cur->node), 0);
		kva_rcu_call(&sl->cur->rcu, free_rec);
	}
	kva_rcu_read_unlock();
	/* Every callback has run once this returns. */
	urcu_memb_barrier();
	assert_int_equal(atomic_load_explicit(&s->freed, memory_order_relaxed),
			 atomic_load_explicit(&s->created, memory_order_relaxed));
	assert_int_equal(kva_idtable_fini(&s->t), 0);
	free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_lookups_race_replacement_safely),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
