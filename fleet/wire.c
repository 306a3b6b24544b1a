/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wire: a bounded msgpack reader and the EventBatch decoder on top of it.
 * Owns nothing but the decoded batch's arrays. No recursion deeper than
 * MAX_DEPTH, no count trusted before it is checked against the bytes left
 * (every msgpack element takes at least one byte), no allocation except the
 * batch's growable arrays.
 *
 * One file past 600 lines on purpose: the reader and the decoder are one
 * bounded parse, and the fuzz target and the wire tests build this file
 * alone (fleet/CMakeLists.txt: kvadmit_fleet_wire).
 */
#include "wire.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 32

struct rd {
	const uint8_t *p, *end;
};

static inline size_t left(const struct rd *r) { return (size_t)(r->end - r->p); }

static inline bool take(struct rd *r, size_t n, const uint8_t **out)
{
	if (left(r) < n)
		return false;
	*out = r->p;
	r->p += n;
	return true;
}

static inline uint64_t be(const uint8_t *p, unsigned n)
{
	uint64_t v = 0;
	for (unsigned i = 0; i < n; i++)
		v = v << 8 | p[i];
	return v;
}

enum kind { K_NIL, K_BOOL, K_UINT, K_INT, K_FLOAT, K_STR, K_BIN, K_ARRAY, K_MAP, K_EXT };

struct val {
	enum kind k;
	uint64_t u;   /* UINT; INT (two's complement); BOOL; ARRAY/MAP/STR/BIN length */
	double f;
	const uint8_t *s; /* STR, BIN, EXT data */
};

/* Reads one element's header (and a scalar's value, a string's bytes). For
 * arrays and maps only the count is read; the caller walks the elements. */
static bool rd_val(struct rd *r, struct val *v)
{
	const uint8_t *q;
	if (!take(r, 1, &q))
		return false;
	uint8_t c = q[0];
	unsigned n = 0;
	if (c <= 0x7f) {
		v->k = K_UINT, v->u = c;
		return true;
	}
	if (c >= 0xe0) {
		v->k = K_INT, v->u = (uint64_t)(int64_t)(int8_t)c;
		return true;
	}
	if ((c & 0xf0) == 0x80) {
		v->k = K_MAP, v->u = c & 0x0f;
		goto counted;
	}
	if ((c & 0xf0) == 0x90) {
		v->k = K_ARRAY, v->u = c & 0x0f;
		goto counted;
	}
	if ((c & 0xe0) == 0xa0) {
		v->k = K_STR, v->u = c & 0x1f;
		goto bytes;
	}
	switch (c) {
	case 0xc0: v->k = K_NIL; return true;
	case 0xc2: v->k = K_BOOL, v->u = 0; return true;
	case 0xc3: v->k = K_BOOL, v->u = 1; return true;
	case 0xc4: case 0xc5: case 0xc6:
		n = 1u << (c - 0xc4);
		if (!take(r, n, &q))
			return false;
		v->k = K_BIN, v->u = be(q, n);
		goto bytes;
	case 0xc7: case 0xc8: case 0xc9:
		n = 1u << (c - 0xc7);
		if (!take(r, n + 1, &q)) /* length, then the type byte */
			return false;
		v->k = K_EXT, v->u = be(q, n);
		goto bytes;
	case 0xca:
		if (!take(r, 4, &q))
			return false;
		{
			uint32_t w = (uint32_t)be(q, 4);
			float f;
			memcpy(&f, &w, 4);
			v->k = K_FLOAT, v->f = f;
		}
		return true;
	case 0xcb:
		if (!take(r, 8, &q))
			return false;
		{
			uint64_t w = be(q, 8);
			memcpy(&v->f, &w, 8);
			v->k = K_FLOAT;
		}
		return true;
	case 0xcc: case 0xcd: case 0xce: case 0xcf:
		n = 1u << (c - 0xcc);
		if (!take(r, n, &q))
			return false;
		v->k = K_UINT, v->u = be(q, n);
		return true;
	case 0xd0: case 0xd1: case 0xd2: case 0xd3: {
		n = 1u << (c - 0xd0);
		if (!take(r, n, &q))
			return false;
		uint64_t u = be(q, n);
		if (n < 8 && (u >> (8 * n - 1)) & 1) /* sign-extend */
			u |= ~0ull << (8 * n);
		v->k = K_INT, v->u = u;
		return true;
	}
	case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8:
		if (!take(r, 1, &q)) /* fixext: the type byte */
			return false;
		v->k = K_EXT, v->u = 1u << (c - 0xd4);
		goto bytes;
	case 0xd9: case 0xda: case 0xdb:
		n = 1u << (c - 0xd9);
		if (!take(r, n, &q))
			return false;
		v->k = K_STR, v->u = be(q, n);
		goto bytes;
	case 0xdc: case 0xdd:
		n = 2u << (c - 0xdc);
		if (!take(r, n, &q))
			return false;
		v->k = K_ARRAY, v->u = be(q, n);
		goto counted;
	case 0xde: case 0xdf:
		n = 2u << (c - 0xde);
		if (!take(r, n, &q))
			return false;
		v->k = K_MAP, v->u = be(q, n);
		goto counted;
	default: /* 0xc1: never used */
		return false;
	}
bytes:
	return take(r, v->u, &v->s);
counted:
	/* every element is at least one byte (a map entry two) */
	return v->u <= left(r) / (v->k == K_MAP ? 2 : 1);
}

static bool skip_n(struct rd *r, uint64_t n, int depth);

static bool skip_val(struct rd *r, const struct val *v, int depth)
{
	if (v->k == K_ARRAY)
		return skip_n(r, v->u, depth + 1);
	if (v->k == K_MAP)
		return skip_n(r, 2 * v->u, depth + 1);
	return true;
}

static bool skip_n(struct rd *r, uint64_t n, int depth)
{
	if (depth > MAX_DEPTH)
		return false;
	for (uint64_t i = 0; i < n; i++) {
		struct val v;
		if (!rd_val(r, &v) || !skip_val(r, &v, depth))
			return false;
	}
	return true;
}

static inline bool str_is(const struct val *v, const char *s)
{
	size_t n = strlen(s);
	return v->k == K_STR && v->u == n && memcmp(v->s, s, n) == 0;
}

uint64_t kvf_hash_from_bytes(const void *p, size_t n)
{
	/* vLLM's int form: int.from_bytes(digest, "big") & (2**64 - 1) */
	const uint8_t *b = p;
	return n < 8 ? be(b, (unsigned)n) : be(b + n - 8, 8);
}

static int grow(void **arr, uint32_t *cap, uint32_t need, size_t elem, uint32_t limit)
{
	if (limit && need > limit)
		return -E2BIG;
	if (need <= *cap)
		return 0;
	uint64_t c = *cap ? *cap : 16;
	while (c < need)
		c *= 2;
	if (limit && c > limit)
		c = limit;
	if (c > UINT32_MAX / 2)
		return -E2BIG;
	void *n = realloc(*arr, c * elem);
	if (!n)
		return -ENOMEM;
	*arr = n;
	*cap = (uint32_t)c;
	return 0;
}

/* A hash: int, or bytes. */
static int rd_hash(struct rd *r, uint64_t *out)
{
	struct val v;
	if (!rd_val(r, &v))
		return -EBADMSG;
	if (v.k == K_UINT || v.k == K_INT)
		*out = v.u;
	else if (v.k == K_BIN || v.k == K_STR)
		*out = kvf_hash_from_bytes(v.s, v.u);
	else
		return -EBADMSG;
	return 0;
}

static int rd_hashes(struct kvf_batch *b, struct rd *r, struct kvf_event *e)
{
	struct val v;
	if (!rd_val(r, &v) || v.k != K_ARRAY)
		return -EBADMSG;
	int rc = grow((void **)&b->hashes, &b->hashes_cap, b->nhashes + (uint32_t)v.u,
	              sizeof(uint64_t), b->max_hashes);
	if (rc)
		return rc;
	e->first_hash = b->nhashes;
	e->nhashes = (uint32_t)v.u;
	for (uint64_t i = 0; i < v.u; i++)
		if ((rc = rd_hash(r, &b->hashes[b->nhashes + i])))
			return rc;
	b->nhashes += (uint32_t)v.u;
	return 0;
}

/* Optional int (nil allowed) into *out. */
static int rd_opt_uint(struct rd *r, uint32_t *out, uint32_t if_nil)
{
	struct val v;
	if (!rd_val(r, &v))
		return -EBADMSG;
	if (v.k == K_NIL) {
		*out = if_nil;
		return 0;
	}
	if (v.k != K_UINT || v.u > UINT32_MAX)
		return -EBADMSG;
	*out = (uint32_t)v.u;
	return 0;
}

static int rd_medium(struct rd *r, struct kvf_event *e)
{
	struct val v;
	if (!rd_val(r, &v))
		return -EBADMSG;
	if (v.k == K_NIL) { /* a repeated key may follow a name: none now */
		e->medium[0] = 0;
		e->medium_len = 0;
		return 0;
	}
	if (v.k != K_STR)
		return -EBADMSG;
	size_t n = v.u > KVF_MEDIUM_MAX ? KVF_MEDIUM_MAX : v.u;
	memcpy(e->medium, v.s, n);
	e->medium[n] = 0;
	e->medium_len = (uint8_t)n;
	return 0;
}

/* Field `name` (by name in the map form, by position in the array form). */
enum field { F_HASHES, F_PARENT, F_TOKENS, F_BLOCK_SIZE, F_MEDIUM, F_GROUP, F_OTHER };

static enum field field_by_name(const struct val *k)
{
	if (str_is(k, "block_hashes"))
		return F_HASHES;
	if (str_is(k, "block_size"))
		return F_BLOCK_SIZE;
	if (str_is(k, "medium"))
		return F_MEDIUM;
	if (str_is(k, "group_idx"))
		return F_GROUP;
	return F_OTHER; /* parent, token_ids, lora, extra_keys, spec...: skipped */
}

/* Positional fields after the tag (array_like): BlockStored block_hashes,
 * parent_block_hash, token_ids, block_size, lora_id, medium, lora_name,
 * extra_keys, group_idx, ...; BlockRemoved block_hashes, medium, group_idx. */
static enum field field_by_pos(uint8_t type, uint64_t i)
{
	static const enum field stored[] = {F_HASHES, F_PARENT, F_TOKENS, F_BLOCK_SIZE, F_OTHER,
	                                    F_MEDIUM, F_OTHER,  F_OTHER,  F_GROUP};
	static const enum field removed[] = {F_HASHES, F_MEDIUM, F_GROUP};
	if (type == KVF_EV_STORED && i < sizeof stored / sizeof stored[0])
		return stored[i];
	if (type == KVF_EV_REMOVED && i < sizeof removed / sizeof removed[0])
		return removed[i];
	return F_OTHER;
}

static int rd_field(struct kvf_batch *b, struct rd *r, struct kvf_event *e, enum field f,
                    bool *has_hashes)
{
	switch (f) {
	case F_HASHES:
		if (*has_hashes)
			return -EBADMSG;
		*has_hashes = true;
		return rd_hashes(b, r, e);
	case F_BLOCK_SIZE:
		return rd_opt_uint(r, &e->block_size, 0);
	case F_MEDIUM:
		return rd_medium(r, e);
	case F_GROUP:
		return rd_opt_uint(r, &e->group_idx, KVF_GROUP_NONE);
	default: {
		struct val v;
		return rd_val(r, &v) && skip_val(r, &v, 2) ? 0 : -EBADMSG;
	}
	}
}

/* Mooncake's block hash is a string: hex digits, "0x" optional (its guide's
 * example "0x41234125"); up to 16 digits are the hash's value, a longer one
 * (a sha256 hex digest) its last 16 digits, so both agree with the bytes
 * form (last 8 bytes, big-endian). Any other string: its bytes. */
static uint64_t hash_from_str(const uint8_t *s, uint64_t n)
{
	const uint8_t *p = s;
	uint64_t m = n;
	if (m > 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X'))
		p += 2, m -= 2;
	uint64_t v = 0;
	for (uint64_t i = 0; i < m; i++) {
		uint8_t c = p[i];
		unsigned d = c >= '0' && c <= '9'   ? (unsigned)(c - '0')
		             : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
		             : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10)
		                                    : 16u;
		if (d == 16)
			return kvf_hash_from_bytes(s, n);
		v = v << 4 | d; /* the last 16 digits stay */
	}
	return m ? v : kvf_hash_from_bytes(s, n);
}

/* Mooncake's BlockStoreEvent, after its tag (array layout, 8 fields:
 * mooncake_key, replicas [[type, location]...], model_name, block_size,
 * block_hash, parent_block_hash, token_ids). One event per distinct replica
 * type, whose name is the medium ("memory", "disk", "local_disk"); no
 * replica or an empty block_hash: nothing indexable, counted unknown. */
static int rd_mooncake_store(struct kvf_batch *b, struct rd *r, uint64_t nfields)
{
	struct val v, x;
	char media[3][KVF_MEDIUM_MAX + 1];
	uint8_t mlen[3];
	uint32_t nm = 0, bs = 0;
	uint64_t hash = 0;
	bool has_hash = false;
	if (nfields < 7)
		return -EBADMSG;
	if (!rd_val(r, &v) || v.k != K_STR) /* mooncake_key */
		return -EBADMSG;
	if (!rd_val(r, &v) || v.k != K_ARRAY)
		return -EBADMSG;
	for (uint64_t i = 0; i < v.u; i++) {
		if (!rd_val(r, &x) || x.k != K_ARRAY || x.u == 0)
			return -EBADMSG;
		struct val t;
		if (!rd_val(r, &t) || t.k != K_STR || !skip_n(r, x.u - 1, 3))
			return -EBADMSG;
		size_t n = t.u > KVF_MEDIUM_MAX ? KVF_MEDIUM_MAX : (size_t)t.u;
		bool seen = n == 0;
		for (uint32_t k = 0; k < nm && !seen; k++)
			seen = mlen[k] == n && memcmp(media[k], t.s, n) == 0;
		if (!seen && nm < 3) {
			memcpy(media[nm], t.s, n);
			media[nm][n] = 0;
			mlen[nm++] = (uint8_t)n;
		}
	}
	if (!rd_val(r, &v) || v.k != K_STR) /* model_name */
		return -EBADMSG;
	if (!rd_val(r, &v) || v.k != K_UINT || v.u > UINT32_MAX)
		return -EBADMSG;
	bs = (uint32_t)v.u;
	if (!rd_val(r, &v) || (v.k != K_STR && v.k != K_BIN))
		return -EBADMSG;
	if (v.u) {
		has_hash = true;
		hash = v.k == K_STR ? hash_from_str(v.s, v.u) : kvf_hash_from_bytes(v.s, v.u);
	}
	if (!skip_n(r, nfields - 5, 2)) /* parent_block_hash, token_ids, later fields */
		return -EBADMSG;
	if (!has_hash || nm == 0) {
		b->unknown_events++;
		return 0;
	}
	int rc = grow((void **)&b->events, &b->events_cap, b->nevents + nm,
	              sizeof(struct kvf_event), b->max_events);
	if (rc || (rc = grow((void **)&b->hashes, &b->hashes_cap, b->nhashes + nm, sizeof(uint64_t),
	                     b->max_hashes)))
		return rc;
	for (uint32_t k = 0; k < nm; k++) { /* each event owns its copy of the hash */
		struct kvf_event *e = &b->events[b->nevents++];
		memset(e, 0, sizeof(*e));
		e->type = KVF_EV_STORED;
		e->group_idx = KVF_GROUP_NONE;
		e->block_size = bs;
		e->nhashes = 1;
		e->first_hash = b->nhashes;
		b->hashes[b->nhashes++] = hash;
		memcpy(e->medium, media[k], mlen[k] + 1u);
		e->medium_len = mlen[k];
	}
	return 0;
}

static uint8_t tag_type(const struct val *t)
{
	if (str_is(t, "BlockStored"))
		return KVF_EV_STORED;
	if (str_is(t, "BlockRemoved"))
		return KVF_EV_REMOVED;
	if (str_is(t, "AllBlocksCleared") || str_is(t, "RemoveAllEvent")) /* vLLM, Mooncake */
		return KVF_EV_CLEARED;
	return 0;
}

/* One event. An unknown tag is skipped (counted), not an error: a newer
 * publisher may add event kinds. */
static int rd_event(struct kvf_batch *b, struct rd *r)
{
	int rc = grow((void **)&b->events, &b->events_cap, b->nevents + 1, sizeof(struct kvf_event),
	              b->max_events);
	if (rc)
		return rc;
	struct kvf_event *e = &b->events[b->nevents];
	memset(e, 0, sizeof(*e));
	e->group_idx = KVF_GROUP_NONE;
	uint32_t hashes_before = b->nhashes;
	bool has_hashes = false;
	struct val v, k;
	if (!rd_val(r, &v))
		return -EBADMSG;
	if (v.k == K_ARRAY) {
		if (v.u == 0 || !rd_val(r, &k) || k.k != K_STR)
			return -EBADMSG;
		if (str_is(&k, "BlockStoreEvent"))
			return rd_mooncake_store(b, r, v.u - 1);
		/* Mooncake's BlockUpdateEvent names a mooncake_key, not a block
		 * hash: nothing the index can key; skipped as unknown (below) */
		e->type = tag_type(&k);
		if (!e->type) {
			b->unknown_events++;
			return skip_n(r, v.u - 1, 2) ? 0 : -EBADMSG;
		}
		for (uint64_t i = 1; i < v.u; i++)
			if ((rc = rd_field(b, r, e, field_by_pos(e->type, i - 1), &has_hashes)))
				return rc;
	} else if (v.k == K_MAP) {
		/* The tag may come anywhere (msgspec writes it first); fields are
		 * read as they come and the event is kept only once it is known. */
		bool tagged = false;
		for (uint64_t i = 0; i < v.u; i++) {
			if (!rd_val(r, &k))
				return -EBADMSG;
			if (str_is(&k, "type")) {
				struct val t;
				if (tagged || !rd_val(r, &t) || t.k != K_STR)
					return -EBADMSG;
				tagged = true;
				e->type = tag_type(&t);
				continue;
			}
			if (k.k != K_STR)
				return -EBADMSG;
			/* an unknown kind's fields are skipped unread (its tag came
			 * first, as msgspec writes it): a known name may have
			 * another type there */
			enum field fld = tagged && !e->type ? F_OTHER : field_by_name(&k);
			if ((rc = rd_field(b, r, e, fld, &has_hashes)))
				return rc;
		}
		if (!tagged)
			return -EBADMSG;
		if (!e->type) {
			b->nhashes = hashes_before;
			b->unknown_events++;
			return 0;
		}
	} else {
		return -EBADMSG;
	}
	if (e->type != KVF_EV_CLEARED && !has_hashes)
		return -EBADMSG;
	if (e->type == KVF_EV_CLEARED) { /* fields of a cleared event mean nothing */
		b->nhashes = hashes_before;
		e->nhashes = 0;
	}
	b->nevents++;
	return 0;
}

/* The events. One that is well-formed msgpack but not an event this decoder
 * can read (a known field of another type, a tag missing) is skipped and
 * counted, the others kept: a newer publisher may change an event kind
 * without the batch being lost. Broken msgpack still refuses the batch. */
static int rd_events(struct kvf_batch *b, struct rd *r)
{
	struct val v;
	if (!rd_val(r, &v) || v.k != K_ARRAY)
		return -EBADMSG;
	for (uint64_t i = 0; i < v.u; i++) {
		const uint8_t *start = r->p;
		uint32_t nevents = b->nevents, nhashes = b->nhashes, unknown = b->unknown_events;
		int rc = rd_event(b, r);
		if (rc == -EBADMSG) {
			struct val ev;
			r->p = start;
			if (!rd_val(r, &ev) || !skip_val(r, &ev, 1))
				return -EBADMSG;
			b->nevents = nevents, b->nhashes = nhashes, b->unknown_events = unknown;
			b->undecodable_events++;
		} else if (rc) {
			return rc;
		}
	}
	return 0;
}

static int rd_ts(struct rd *r, double *ts)
{
	struct val v;
	if (!rd_val(r, &v))
		return -EBADMSG;
	if (v.k == K_FLOAT)
		*ts = v.f;
	else if (v.k == K_UINT)
		*ts = (double)v.u;
	else if (v.k == K_INT)
		*ts = (double)(int64_t)v.u;
	else
		return -EBADMSG;
	return 0;
}

static int rd_rank(struct rd *r, int64_t *rank)
{
	struct val v;
	if (!rd_val(r, &v))
		return -EBADMSG;
	if (v.k == K_NIL)
		*rank = -1;
	else if (v.k == K_UINT && v.u <= INT64_MAX)
		*rank = (int64_t)v.u;
	else
		return -EBADMSG;
	return 0;
}

void kvf_batch_init(struct kvf_batch *b, uint32_t max_events, uint32_t max_hashes)
{
	memset(b, 0, sizeof(*b));
	b->max_events = max_events;
	b->max_hashes = max_hashes;
}

void kvf_batch_fini(struct kvf_batch *b)
{
	free(b->events);
	free(b->hashes);
	b->events = NULL;
	b->hashes = NULL;
	b->events_cap = b->hashes_cap = 0;
}

int kvf_decode(struct kvf_batch *b, const void *payload, size_t len)
{
	b->nevents = b->nhashes = b->unknown_events = b->undecodable_events = 0;
	b->ts = 0;
	b->dp_rank = -1;
	if (!payload)
		return -EBADMSG;
	struct rd r = {payload, (const uint8_t *)payload + len};
	struct val v, k;
	int rc;
	bool has_ts = false, has_events = false;
	if (!rd_val(&r, &v))
		return -EBADMSG;
	if (v.k == K_ARRAY) { /* array_like: [ts, events, data_parallel_rank?, later...] */
		if (v.u < 2)
			return -EBADMSG;
		if ((rc = rd_ts(&r, &b->ts)) || (rc = rd_events(b, &r)))
			return rc;
		if (v.u >= 3 && (rc = rd_rank(&r, &b->dp_rank)))
			return rc;
		/* fields a newer publisher appended (msgspec's schema evolution) */
		if (v.u > 3 && !skip_n(&r, v.u - 3, 1))
			return -EBADMSG;
		has_ts = has_events = true;
	} else if (v.k == K_MAP) {
		for (uint64_t i = 0; i < v.u; i++) {
			if (!rd_val(&r, &k) || k.k != K_STR)
				return -EBADMSG;
			if (str_is(&k, "ts")) {
				if (has_ts || (rc = rd_ts(&r, &b->ts)))
					return -EBADMSG;
				has_ts = true;
			} else if (str_is(&k, "events")) {
				if (has_events)
					return -EBADMSG;
				if ((rc = rd_events(b, &r)))
					return rc;
				has_events = true;
			} else if (str_is(&k, "data_parallel_rank")) {
				if ((rc = rd_rank(&r, &b->dp_rank)))
					return rc;
			} else {
				struct val x;
				if (!rd_val(&r, &x) || !skip_val(&r, &x, 1))
					return -EBADMSG;
			}
		}
	} else {
		return -EBADMSG;
	}
	if (!has_ts || !has_events || r.p != r.end) /* trailing bytes: not one batch */
		return -EBADMSG;
	return 0;
}
