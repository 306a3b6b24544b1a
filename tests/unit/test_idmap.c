/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for lockfree/idmap: edge cases, then random insert / remove /
 * find sequences checked against a plain reference (an array of ids and
 * their values), with keys drawn from a small range so removals meet long
 * runs, wrap around the table's end and shift entries back; after every
 * operation count matches, and periodically every reference entry is found
 * and no entry of the table sits outside the run of its home. Then the
 * incremental growth: no insert moves more than KVA_IDMAP_MOVE_STEP entries
 * (seen from outside, by slot addresses); a model test whose operations,
 * reserves included, meet every stage of many growths, with each operation's
 * moves counted, each growth's length bounded, and reserve's promise tried
 * with allocation switched off; a reserve for more than a growth leaves
 * room for, in each stage; growth after the table filled past 3/4 for want
 * of memory.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <kvadmit/lockfree/idmap.h>
#include "kva_test.h"

/* The map's memory through its hooks: bytes held, and a switch that makes
 * every allocation fail (a growth the map cannot have). Fresh blocks are
 * filled with a pattern that is not an empty slot, so a table used before
 * it is initialised shows. */
static size_t held;
static int refuse_alloc;

static void *mem_alloc(size_t n)
{
	if (refuse_alloc)
		return NULL;
	void *p = malloc(n);
	if (p) {
		memset(p, 0x5a, n);
		held += n;
	}
	return p;
}

static void mem_free(void *p, size_t n)
{
	held -= n;
	free(p);
}

/* mem_alloc, counting the allocations it was asked for. */
static unsigned allocs;
static void *maybe_alloc(size_t n)
{
	allocs += !refuse_alloc;
	return mem_alloc(n);
}

static uint64_t key_at(const struct kva_idmap_entry *x)
{
	return (uint64_t)x->key_hi << 32 | x->key_lo;
}

/* Every occupied entry of t is reachable from its home: no empty slot lies
 * between the two (what lookups, the backward shift and the drain rely
 * on). Returns the number of entries. */
static uint32_t check_runs(const struct kva_idmap_entry *t, uint32_t cap)
{
	uint32_t mask = cap - 1, n = 0;
	for (uint32_t i = 0; i < cap; i++) {
		if (t[i].val == KVA_IDMAP_NONE)
			continue;
		n++;
		for (uint32_t j = (uint32_t)key_at(&t[i]) & mask; j != i; j = (j + 1) & mask)
			assert_true(t[j].val != KVA_IDMAP_NONE);
	}
	return n;
}

static bool in_table(const struct kva_idmap_entry *t, uint32_t cap, uint64_t h)
{
	for (uint32_t i = (uint32_t)h & (cap - 1);; i = (i + 1) & (cap - 1)) {
		if (t[i].val == KVA_IDMAP_NONE)
			return false;
		if (key_at(&t[i]) == h)
			return true;
	}
}

/* Both tables are valid, the old one's drained slots are empty, no entry is
 * in both, the counts add up, and only a growth holds two tables' memory. */
static void check_map(const struct kva_idmap *m)
{
	bool ready = m->ready == m->cap;
	uint32_t n = ready ? check_runs(m->ents, m->cap) : 0;
	assert_true(m->old || ready);
	if (!m->old) {
		assert_int_equal(held, (size_t)m->cap * sizeof(*m->ents));
	} else {
		assert_int_equal(held, ((size_t)m->cap + m->ocap) * sizeof(*m->ents));
		assert_true(m->cap >= 2 * m->ocap);
		assert_int_equal(check_runs(m->old, m->ocap), m->ocount);
		assert_true(m->ocount || !ready); /* a drained old table is freed at once */
		assert_true(ready || !n);
		n += m->ocount;
		if (m->stop != UINT32_MAX)
			for (uint32_t i = m->scan;; i = (i + 1) & (m->ocap - 1)) {
				assert_int_equal(m->old[i].val, KVA_IDMAP_NONE);
				if (i == m->stop)
					break;
			}
		for (uint32_t i = 0; ready && i < m->ocap; i++)
			if (m->old[i].val != KVA_IDMAP_NONE)
				assert_false(in_table(m->ents, m->cap, key_at(&m->old[i])));
	}
	assert_int_equal(n, m->count);
}

static uint64_t id_of(uint32_t k)
{
	return (uint64_t)k * 0x9e3779b97f4a7c15ull; /* spread over 64 bits */
}
static void test_edges(void **state)
{
	(void)state;
	struct kva_idmap m;
	assert_int_equal(kva_idmap_init(&m, mem_alloc, mem_free, 0), 0);
	assert_int_equal(m.cap, 64);
	assert_null(kva_idmap_find(&m, 0));
	assert_false(kva_idmap_remove(&m, 7));
	/* 0 and UINT64_MAX are ordinary ids */
	assert_int_equal(kva_idmap_insert(&m, 0, 10), 0);
	assert_int_equal(kva_idmap_insert(&m, UINT64_MAX, 11), 0);
	assert_int_equal(kva_idmap_insert(&m, 0, 12), -EEXIST);
	assert_int_equal(*kva_idmap_find(&m, 0), 10); /* unchanged by the refused insert */
	assert_int_equal(*kva_idmap_find(&m, UINT64_MAX), 11);
	*kva_idmap_find(&m, 0) = 13; /* the slot is the value's storage */
	assert_int_equal(*kva_idmap_find(&m, 0), 13);
	assert_true(kva_idmap_remove(&m, 0));
	assert_null(kva_idmap_find(&m, 0));
	assert_false(kva_idmap_remove(&m, 0));
	assert_int_equal(m.count, 1);
	/* growth keeps every entry: 3/4 of 64 fit, the 49th doubles */
	for (uint64_t id = 1; id <= 1000; id++)
		assert_int_equal(kva_idmap_insert(&m, id << 20, (uint32_t)id), 0);
	assert_true(m.cap >= 1024 && m.count * 4 <= m.cap * 3);
	for (uint64_t id = 1; id <= 1000; id++)
		assert_int_equal(*kva_idmap_find(&m, id << 20), (uint32_t)id);
	assert_int_equal(*kva_idmap_find(&m, UINT64_MAX), 11);
	check_map(&m);
	/* reserve: room ahead, or the current table while it has a free slot */
	uint32_t cap = m.cap;
	assert_int_equal(kva_idmap_reserve(&m, 0), 0);
	assert_int_equal(m.cap, cap);
	assert_int_equal(kva_idmap_reserve(&m, 4 * cap), 0);
	assert_true(m.cap > cap);
	check_map(&m);
	kva_idmap_fini(&m);
	assert_null(m.ents);
	assert_int_equal(m.count, 0);
	assert_int_equal(held, 0);
}

/* kva_idmap_init(initial) leaves room for `initial` entries: they go in
 * without another allocation, the table at most 3/4 full. */
static void test_init_leaves_room_for_initial_entries(void **state)
{
	(void)state;
	static const uint32_t initial[] = {1, 48, 49, 100, 1000, 3000};
	for (size_t k = 0; k < sizeof initial / sizeof initial[0]; k++) {
		struct kva_idmap m;
		refuse_alloc = 0;
		allocs = 0;
		assert_int_equal(kva_idmap_init(&m, maybe_alloc, mem_free, initial[k]), 0);
		assert_int_equal(allocs, 1);
		for (uint32_t i = 0; i < initial[k]; i++)
			assert_int_equal(kva_idmap_insert(&m, (uint64_t)i * 7919, i), 0);
		assert_int_equal(allocs, 1); /* no growth on the way */
		assert_true((uint64_t)m.count * 4 <= (uint64_t)m.cap * 3);
		check_map(&m);
		kva_idmap_fini(&m);
	}
}

/* Without memory to grow, inserts go on while one slot stays empty (every
 * probe ends there) and are refused after: the map stays whole, and a probe
 * for an absent id still ends. */
static void test_full_table_without_memory_keeps_one_slot_empty(void **state)
{
	(void)state;
	struct kva_idmap m;
	refuse_alloc = 0;
	assert_int_equal(kva_idmap_init(&m, maybe_alloc, mem_free, 0), 0);
	assert_int_equal(m.cap, 64);
	refuse_alloc = 1;
	for (uint64_t id = 0; id < 63; id++)
		assert_int_equal(kva_idmap_insert(&m, id, (uint32_t)id), 0);
	assert_int_equal(m.cap, 64);
	assert_int_equal(m.count, 63);
	assert_int_equal(kva_idmap_insert(&m, 63, 63), -ENOMEM);
	assert_int_equal(kva_idmap_reserve(&m, 1), -ENOMEM);
	assert_int_equal(m.count, 63);
	assert_null(kva_idmap_find(&m, 63)); /* ends at the empty slot */
	for (uint64_t id = 0; id < 63; id++)
		assert_int_equal(*kva_idmap_find(&m, id), (uint32_t)id);
	check_map(&m);
	/* a removal makes room again */
	assert_true(kva_idmap_remove(&m, 5));
	assert_int_equal(kva_idmap_insert(&m, 63, 63), 0);
	assert_int_equal(kva_idmap_insert(&m, 64, 64), -ENOMEM);
	check_map(&m);
	refuse_alloc = 0;
	kva_idmap_fini(&m);
}

/* Random operations against the reference; keys from [0, keys) so the
 * table fills, empties and refills, and its runs grow long. */
static void replay(uint64_t seed, uint32_t keys, uint32_t ops)
{
	struct kva_idmap m;
	assert_int_equal(kva_idmap_init(&m, mem_alloc, mem_free, 0), 0);
	uint32_t *ref = malloc(keys * sizeof(*ref)); /* value + 1, 0 = absent */
	assert_non_null(ref);
	memset(ref, 0, keys * sizeof(*ref));
	uint32_t live = 0;
	uint64_t s = seed;
	for (uint32_t op = 0; op < ops; op++) {
		uint64_t r = kva_test_rand(&s);
		uint32_t k = (uint32_t)(r % keys);
		uint64_t id = (uint64_t)k * 0x9e3779b97f4a7c15ull; /* spread over 64 bits */
		uint32_t val = (uint32_t)(r >> 40);
		switch ((r >> 32) % 4) {
		case 0:
		case 1:
			if (ref[k]) {
				assert_int_equal(kva_idmap_insert(&m, id, val), -EEXIST);
			} else {
				assert_int_equal(kva_idmap_insert(&m, id, val), 0);
				ref[k] = val + 1;
				live++;
			}
			break;
		case 2:
			assert_int_equal(kva_idmap_remove(&m, id), ref[k] != 0);
			live -= ref[k] != 0;
			ref[k] = 0;
			break;
		default: {
			uint32_t *v = kva_idmap_find(&m, id);
			if (ref[k]) {
				assert_non_null(v);
				assert_int_equal(*v, ref[k] - 1);
			} else {
				assert_null(v);
			}
		}
		}
		assert_int_equal(m.count, live);
		if (op % 4096 == 0) {
			check_map(&m);
			for (uint32_t j = 0; j < keys; j++) {
				uint32_t *v = kva_idmap_find(&m, (uint64_t)j * 0x9e3779b97f4a7c15ull);
				assert_true(ref[j] ? v && *v == ref[j] - 1 : v == NULL);
			}
		}
	}
	check_map(&m);
	free(ref);
	kva_idmap_fini(&m);
}

static void test_random_against_reference(void **state)
{
	(void)state;
	uint32_t ops = (uint32_t)kva_test_scaled(400000);
	replay(1, 48, ops);     /* under one growth: a 64-slot table, long runs */
	replay(2, 1000, ops);   /* grows and shrinks around a few thousand slots */
	replay(3, 100000, ops); /* mostly distinct keys */
}

/* No insert moves more than KVA_IDMAP_MOVE_STEP entries, seen from outside:
 * an entry's value slot changes address only when the entry moves (an
 * insert never shifts others), so after each insert every earlier id's slot
 * is compared with where it was. (A growth that rehashed in one insert
 * moved all of them, 3/4 of the old table.) */
static void test_inserts_move_few_entries(void **state)
{
	(void)state;
	enum { N = 5000 }; /* growths up to 8 Ki slots, with multi-quantum inits */
	struct kva_idmap m;
	assert_int_equal(kva_idmap_init(&m, mem_alloc, mem_free, 0), 0);
	uint32_t **slot = malloc(N * sizeof(*slot));
	assert_non_null(slot);
	uint32_t worst = 0;
	for (uint32_t k = 0; k < N; k++) {
		assert_int_equal(kva_idmap_insert(&m, id_of(k), k), 0);
		uint32_t moved = 0;
		for (uint32_t j = 0; j < k; j++) {
			uint32_t *v = kva_idmap_find(&m, id_of(j));
			assert_non_null(v);
			assert_int_equal(*v, j);
			moved += v != slot[j];
			slot[j] = v;
		}
		assert_true(moved <= KVA_IDMAP_MOVE_STEP);
		worst = moved > worst ? moved : worst;
		slot[k] = kva_idmap_find(&m, id_of(k));
	}
	assert_true(worst > 0); /* growths did move entries, a few at a time */
	free(slot);
	kva_idmap_fini(&m);
	assert_int_equal(held, 0);
}

/* One growth's progress as the model test sees it. */
struct growth_watch {
	uint32_t cap;       /* the growing map's new table; 0: none */
	uint32_t changes;   /* inserts and removes since it began */
	uint32_t budget;    /* the most it may take (idmap.h) */
	uint64_t phases[3]; /* operations seen while initialising, searching, draining */
	uint64_t begun;
};

static void watch(struct growth_watch *g, const struct kva_idmap *m, bool changed)
{
	if (!m->old) {
		g->cap = 0;
		return;
	}
	if (m->cap != g->cap) {
		g->cap = m->cap;
		g->changes = 0;
		g->budget = (m->cap + KVA_IDMAP_INIT_STEP - 1) / KVA_IDMAP_INIT_STEP +
		            (2 * m->ocap + KVA_IDMAP_MOVE_STEP - 1) / KVA_IDMAP_MOVE_STEP;
		g->begun++;
	}
	g->changes += changed;
	assert_true(g->changes <= g->budget);
	g->phases[m->ready < m->cap ? 0 : m->stop == UINT32_MAX ? 1 : 2]++;
}

/* An absent key, if one turns up in a few random picks. */
static bool absent_key(const uint32_t *ref, uint32_t keys, uint64_t *s, uint32_t *out)
{
	for (int i = 0; i < 16; i++) {
		*out = (uint32_t)(kva_test_rand(s) % keys);
		if (!ref[*out])
			return true;
	}
	return false;
}

/* Random inserts, removes, finds and reserves against the reference, on
 * fresh maps that grow through many incremental growths, so that every
 * operation meets every stage of one: the new table being initialised, the
 * search for the old one's first empty slot, the drain. Checked on each
 * operation: the result, the count, the moves it made (at most
 * KVA_IDMAP_MOVE_STEP, none for a find or a reserve(1), fewer than 4n for a
 * reserve(n)); each growth ends within its budget, and only a growth holds
 * two tables. After a reserve(n), with allocation switched off, n inserts
 * of absent ids with removes, finds and reserve(1)s between them must all
 * succeed (the promise callers rely on). Often, and at each stage change:
 * the tables' structure (check_map) and every reference entry. */
static void growth_replay(uint64_t seed, uint32_t keys, uint32_t ops, struct growth_watch *g)
{
	struct kva_idmap m;
	assert_int_equal(kva_idmap_init(&m, mem_alloc, mem_free, 0), 0);
	uint32_t *ref = calloc(keys, sizeof(*ref)); /* value + 1, 0 = absent */
	assert_non_null(ref);
	uint32_t live = 0;
	uint64_t s = seed;
	int stage = -1;
	for (uint32_t op = 0; op < ops; op++) {
		uint64_t r = kva_test_rand(&s);
		uint32_t k = (uint32_t)(r % keys);
		uint32_t val = (uint32_t)(r >> 40);
		uint64_t moved = m.moved;
		bool changed = false;
		/* inserts dominate in the first half (growths), removes in part
		 * of the second (the old table drained by removes too) */
		uint32_t pick = (uint32_t)((r >> 32) % 16);
		if (op > ops / 2 && pick < 6)
			pick = 8 + pick % 4;
		if (pick < 7) {
			int rc = kva_idmap_insert(&m, id_of(k), val);
			assert_int_equal(rc, ref[k] ? -EEXIST : 0);
			changed = !ref[k];
			live += !ref[k];
			if (!ref[k])
				ref[k] = val + 1;
			assert_true(m.moved - moved <= KVA_IDMAP_MOVE_STEP);
		} else if (pick < 12) {
			changed = ref[k] != 0;
			assert_int_equal(kva_idmap_remove(&m, id_of(k)), changed);
			live -= changed;
			ref[k] = 0;
			assert_true(m.moved - moved <= KVA_IDMAP_MOVE_STEP);
		} else if (pick < 14) {
			uint32_t *v = kva_idmap_find(&m, id_of(k));
			assert_true(ref[k] ? v && *v == ref[k] - 1 : v == NULL);
			assert_int_equal(m.moved, moved);
		} else {
			/* mostly what the engine asks (1), some a few, rarely many */
			uint32_t n = 1;
			if (pick == 14)
				n += (uint32_t)(r >> 56) % 8;
			else if ((r >> 36) % 8 == 0)
				n = (uint32_t)(r >> 44) % (2 * live + 64);
			assert_int_equal(kva_idmap_reserve(&m, n), 0);
			assert_true(m.moved - moved <= (n > 1 ? 4 * (uint64_t)n - 1 : 0));
			watch(g, &m, false);
			/* the promise: n inserts, whatever comes between */
			refuse_alloc = 1;
			for (uint32_t i = 0; i < n; i++) {
				uint64_t u = kva_test_rand(&s);
				uint32_t a;
				if (u % 4 == 0) {
					uint32_t b = (uint32_t)(u >> 8) % keys;
					bool had = ref[b] != 0;
					assert_int_equal(kva_idmap_remove(&m, id_of(b)), had);
					live -= had;
					ref[b] = 0;
				} else if (u % 4 == 1) {
					assert_int_equal(kva_idmap_reserve(&m, 1), 0);
				}
				if (!absent_key(ref, keys, &s, &a))
					break;
				assert_int_equal(kva_idmap_insert(&m, id_of(a), i), 0);
				ref[a] = i + 1;
				live++;
				watch(g, &m, true);
			}
			refuse_alloc = 0;
		}
		assert_int_equal(m.count, live);
		assert_true((uint64_t)m.count * 4 <= (uint64_t)m.cap * 3);
		watch(g, &m, changed);
		int now = !m.old ? 3 : m.ready < m.cap ? 0 : m.stop == UINT32_MAX ? 1 : 2;
		if (now != stage || op % 1024 == 0) {
			stage = now;
			check_map(&m);
			for (uint32_t j = 0; j < keys; j++) {
				uint32_t *v = kva_idmap_find(&m, id_of(j));
				assert_true(ref[j] ? v && *v == ref[j] - 1 : v == NULL);
			}
		}
	}
	check_map(&m);
	free(ref);
	kva_idmap_fini(&m);
	assert_int_equal(held, 0);
}

static void test_growth_against_reference(void **state)
{
	(void)state;
	struct growth_watch g = {0};
	uint32_t ops = (uint32_t)kva_test_scaled(60000);
	for (uint64_t seed = 1; seed <= 24; seed++)
		growth_replay(seed, seed % 3 == 0 ? 300 : seed % 3 == 1 ? 3000 : 20000, ops, &g);
	/* every stage was met, many times */
	assert_true(g.begun > 24);
	for (int i = 0; i < 3; i++)
		assert_true(g.phases[i] > 100);
}

/* A reserve for more than a growth in progress leaves room for completes
 * it (fewer than 4n moves) and makes room in a larger table, in either
 * stage; then n inserts succeed with memory gone, the load stays <= 3/4. */
static void test_reserve_beyond_growth(void **state)
{
	(void)state;
	for (int stage = 0; stage < 2; stage++) {
		struct kva_idmap m;
		assert_int_equal(kva_idmap_init(&m, mem_alloc, mem_free, 12000), 0);
		uint32_t k = 0;
		/* stage 0: stop while the new table is initialised; 1: draining */
		while (!m.old || (stage == 0 ? m.ready == m.cap : m.ready < m.cap || m.moved == 0)) {
			assert_int_equal(kva_idmap_insert(&m, id_of(k), k), 0);
			k++;
		}
		uint32_t cap = m.cap, n = cap * 3 / 4 - m.count + 1;
		uint64_t moved = m.moved;
		assert_int_equal(kva_idmap_reserve(&m, n), 0);
		assert_true(m.moved - moved < 4 * (uint64_t)n);
		assert_true(m.cap > cap);
		assert_true(((uint64_t)m.count + n) * 4 <= (uint64_t)m.cap * 3);
		check_map(&m);
		refuse_alloc = 1;
		for (uint32_t i = 0; i < n; i++, k++) {
			assert_int_equal(kva_idmap_insert(&m, id_of(k), k), 0);
			assert_true((uint64_t)m.count * 4 <= (uint64_t)m.cap * 3);
		}
		refuse_alloc = 0;
		check_map(&m);
		for (uint32_t j = 0; j < k; j++)
			assert_int_equal(*kva_idmap_find(&m, id_of(j)), j);
		kva_idmap_fini(&m);
		assert_int_equal(held, 0);
	}
}

/* With memory gone the table fills past 3/4, up to one empty slot. Once
 * memory is back, a growth lets the old table take inserts while the new
 * one is initialised only as long as it keeps an empty slot; then it makes
 * the new one ready at once (no entry moves), and still moves entries a few
 * at a time. */
static void test_growth_after_allocation_failure(void **state)
{
	(void)state;
	struct kva_idmap m;
	/* big enough that initialising its successor takes several inserts */
	assert_int_equal(kva_idmap_init(&m, mem_alloc, mem_free, 12000), 0);
	uint32_t cap = m.cap, k = 0;
	assert_true(2 * cap / KVA_IDMAP_INIT_STEP > 4);
	refuse_alloc = 1;
	while (kva_idmap_insert(&m, id_of(k), k) == 0)
		k++;
	assert_int_equal(k, cap - 1);
	assert_int_equal(kva_idmap_insert(&m, id_of(k), k), -ENOMEM);
	assert_int_equal(kva_idmap_reserve(&m, 1), -ENOMEM);
	assert_int_equal(kva_idmap_reserve(&m, 0), 0);
	assert_null(m.old);
	check_map(&m);
	for (uint32_t j = 0; j < 3; j++)
		assert_true(kva_idmap_remove(&m, id_of(j)));
	refuse_alloc = 0;
	/* room in old for three more: it takes them while the new table is
	 * initialised, and the fourth insert makes the new table ready */
	for (uint32_t j = 0; j < 4; j++) {
		uint64_t moved = m.moved;
		uint32_t id = j < 3 ? j : k++;
		assert_int_equal(kva_idmap_insert(&m, id_of(id), id), 0);
		assert_non_null(m.old);
		assert_true(m.ocount < m.ocap);
		assert_int_equal(m.ready == m.cap, j == 3);
		assert_true(m.moved - moved <= KVA_IDMAP_MOVE_STEP);
		check_map(&m);
	}
	/* a reserve beyond what the growth leaves room for, with memory gone:
	 * it completes the growth, cannot grow again, and says so */
	refuse_alloc = 1;
	assert_int_equal(kva_idmap_reserve(&m, m.cap), -ENOMEM);
	assert_null(m.old);
	check_map(&m);
	refuse_alloc = 0;
	for (; k < 3 * cap; k++) {
		uint64_t moved = m.moved;
		assert_int_equal(kva_idmap_insert(&m, id_of(k), k), 0);
		assert_true(m.moved - moved <= KVA_IDMAP_MOVE_STEP);
	}
	check_map(&m);
	for (uint32_t j = 0; j < k; j++)
		assert_int_equal(*kva_idmap_find(&m, id_of(j)), j);
	kva_idmap_fini(&m);
	assert_int_equal(held, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_edges),
		cmocka_unit_test(test_init_leaves_room_for_initial_entries),
		cmocka_unit_test(test_full_table_without_memory_keeps_one_slot_empty),
		cmocka_unit_test(test_random_against_reference),
		cmocka_unit_test(test_inserts_move_few_entries),
		cmocka_unit_test(test_growth_against_reference),
		cmocka_unit_test(test_reserve_beyond_growth),
		cmocka_unit_test(test_growth_after_allocation_failure),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
