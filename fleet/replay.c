/* SPDX-License-Identifier: Apache-2.0 */
/*
 * replay: sequence tracking and replay. A replay round starts with a gap, a
 * late join, a restart or an overflow of the held list; retries ask again
 * from `expected`. Live batches that arrive meanwhile are held and handed
 * back to live_batch once the round is over. I/O thread only.
 */
#define _GNU_SOURCE
#include "replay.h"

#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "apply.h"

#define HELD_BYTES_MAX ((size_t)64 << 20)

void kvf_replay_request(kva_fleet *f, struct publisher *pub, int64_t from)
{
	unsigned char seq[8];
	for (int i = 0; i < 8; i++)
		seq[i] = (unsigned char)((uint64_t)from >> (56 - 8 * i));
	pub->replaying = true;
	pub->replay_from = from;
	pub->replay_deadline = deadline_after(now_ns(), f->cfg.replay_timeout_ns);
	if (zmq_send(pub->dealer, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
	    zmq_send(pub->dealer, seq, 8, ZMQ_DONTWAIT) < 0)
		fleet_log(f, KVA_LOG_WARN,
		          "kvadmit-fleet: publisher %s: replay request not sent (%s)",
		          pub->endpoint, zmq_strerror(zmq_errno()));
	stat_add(f, STAT(replays_requested), 1);
}

/* Holds batch until the replay is over. owned: its data belongs to the
 * held list being flushed and moves (batch->data is NULL after); otherwise
 * it is copied. Past max_pending or 64 MiB nothing more is held, and the round is
 * followed by another replay from where the stream stopped. */
static void hold(kva_fleet *f, struct publisher *pub, struct pending *batch, bool owned)
{
	if (pub->held_overflow || pub->nheld >= f->cfg.max_pending ||
	    pub->held_bytes + batch->len > HELD_BYTES_MAX) {
		pub->held_overflow = true; /* asked for again after this replay */
		if (batch->restarted)      /* its mark would be lost with it */
			pub->restart_pending = true;
		return;
	}
	struct pending kept = *batch;
	if (owned) {
		batch->data = NULL;
	} else if (!batch->big) {
		kept.data = malloc(batch->len ? batch->len : 1);
		if (!kept.data) {
			pub->held_overflow = true;
			if (batch->restarted)
				pub->restart_pending = true;
			return;
		}
		if (batch->len)
			memcpy(kept.data, batch->data, batch->len);
	}
	pub->held[pub->nheld++] = kept;
	pub->held_bytes += kept.len;
}

/* A live batch: just received, or held and now handed back (owned). */
static void live_batch(kva_fleet *f, struct publisher *pub, struct pending *batch, bool owned)
{
	if (pub->replaying) {
		hold(f, pub, batch, owned);
		return;
	}
	bool restarted = batch->restarted;
	if (pub->dropped) { /* back after being dropped: a fresh start */
		pub->dropped = false;
		pub->started = false;
	}
	if (!pub->started) {
		pub->started = true;
		restarted = false;
		if (batch->seq > 0 && pub->dealer) { /* joined late: ask for its history */
			pub->expected = 0;
			pub->joining = true;
			kvf_replay_request(f, pub, 0);
			batch->restarted = false;
			hold(f, pub, batch, owned);
			return;
		}
		pub->expected = batch->seq;
	}
	if (restarted) {
		/* PUB sends each number once, in order: a number not above the
		 * previous one is a new process */
		stat_add(f, STAT(restarts), 1);
		kvf_drop_publisher(f, pub, "restarted (sequence went back)");
		pub->expected = 0;
		if (batch->seq > 0 && pub->dealer) {
			kvf_replay_request(f, pub, 0);
			batch->restarted = false; /* the new process's round starts here */
			hold(f, pub, batch, owned);
			return;
		}
		pub->expected = batch->seq;
	} else if (batch->seq < pub->expected) {
		/* the same process, still going up: a replay returned it first
		 * (during a replay, or its end marker overtook it) */
		stat_add(f, STAT(duplicates), 1);
		return;
	}
	if (batch->seq > pub->expected) {
		stat_add(f, STAT(gaps), 1);
		fleet_log(f, KVA_LOG_INFO, "kvadmit-fleet: publisher %s: gap %lld..%lld",
		          pub->endpoint, (long long)pub->expected, (long long)batch->seq - 1);
		if (pub->dealer) {
			kvf_replay_request(f, pub, pub->expected);
			hold(f, pub, batch, owned);
			return;
		}
		stat_add(f, STAT(lost_batches), (uint64_t)batch->seq - (uint64_t)pub->expected);
		pub->expected = batch->seq;
	}
	if (batch->big)
		stat_add(f, STAT(oversized), 1); /* its number counts: lost, not missing */
	else
		kvf_apply_batch(f, pub, batch->data, batch->len);
	pub->expected = batch->seq + 1;
}

/* A number no publisher gives out: negative (-1 is the replay's end
 * marker), or the largest, after which `expected` would overflow. */
static bool seq_bad(kva_fleet *f, int64_t seq)
{
	if (seq >= 0 && seq < INT64_MAX)
		return false;
	stat_add(f, STAT(bad_seq), 1);
	return true;
}

void kvf_on_live(kva_fleet *f, struct publisher *pub, int64_t seq, const uint8_t *data,
                 size_t len, bool big)
{
	if (seq_bad(f, seq))
		return; /* not a restart, not a gap: nothing it says is believed */
	struct pending batch = {.seq = seq, .len = big ? 0 : len,
	                    .data = big ? NULL : (uint8_t *)data, .big = big,
	                    .restarted = pub->live_seen && seq <= pub->live_last};
	pub->live_seen = true;
	pub->live_last = seq;
	live_batch(f, pub, &batch, false);
}

/* The first held batch the stream goes on from (numbered `expected` or
 * later), or NULL: none, or a restarted one comes first (a new process
 * from there, which starts afresh). */
static const struct pending *first_held_ahead(const struct publisher *pub)
{
	for (uint32_t i = 0; i < pub->nheld; i++) {
		const struct pending *batch = &pub->held[i];
		if (batch->restarted)
			return NULL;
		if (batch->seq >= pub->expected) /* below: the replay returned it */
			return batch;
	}
	return NULL;
}

/* The replay is over (its end marker, or given up). Whatever it did not
 * return before the first held batch the stream goes on from is not
 * buffered any more: a loss, accepted here. Otherwise that batch would ask
 * for the same replay again, and again. History before a late joiner's
 * first batch is not a loss. */
static void accept_loss(kva_fleet *f, struct publisher *pub)
{
	const struct pending *batch = first_held_ahead(pub);
	if (!batch || batch->seq == pub->expected)
		return;
	if (!pub->joining)
		stat_add(f, STAT(lost_batches), (uint64_t)batch->seq - (uint64_t)pub->expected);
	pub->expected = batch->seq;
}

/* Hands the held batches back to live_batch, in order. The list is
 * detached first: a batch may start a new replay (a gap further on, a
 * restart), and the batches after it are then held again, moved into the
 * fresh list, not copied over the one being read. */
static void flush_held(kva_fleet *f, struct publisher *pub)
{
	struct pending *flushing = pub->held;
	uint32_t n = pub->nheld;
	pub->held = pub->held_spare;
	pub->held_spare = flushing;
	pub->nheld = 0;
	pub->held_bytes = 0;
	bool overflow = pub->held_overflow;
	pub->held_overflow = false;
	for (uint32_t i = 0; i < n; i++) {
		live_batch(f, pub, &flushing[i], true);
		free(flushing[i].data); /* NULL when held again */
		flushing[i].data = NULL;
	}
	if (pub->replaying) {
		if (overflow)
			pub->held_overflow = true; /* after the replay just begun */
	} else if (pub->restart_pending) {
		/* a new process began among the batches that were dropped: its
		 * numbers start again at 0, so what the old one's `expected` would
		 * ask for is not there; start afresh and fetch the new history */
		pub->restart_pending = false;
		stat_add(f, STAT(restarts), 1);
		kvf_drop_publisher(f, pub,
		                   "restarted (sequence went back while batches were held)");
		pub->expected = 0;
		if (pub->dealer)
			kvf_replay_request(f, pub, 0);
	} else if (overflow && pub->dealer) {
		/* live batches after the held ones were dropped: fetch them */
		kvf_replay_request(f, pub, pub->expected);
	}
}

/* At an end marker: does the stream go on past a hole newer than the answer?
 * The answer returned batches up to expected - 1 (it moved `expected` on
 * from where it asked), so everything the publisher numbered before
 * answering is there up to its end; a hole right after it was numbered
 * later (the answer was made, then the publisher went on, and a later
 * live batch overtook the end marker) and is still buffered: asked for
 * again, not lost. A round that returned nothing new does not ask again,
 * so the rounds are bounded by the batches the publisher numbers. */
static bool hole_after_the_answer(const struct publisher *pub)
{
	if (!pub->dealer || pub->expected <= pub->replay_from)
		return false;
	const struct pending *batch = first_held_ahead(pub);
	return batch && batch->seq > pub->expected;
}

void kvf_replay_end(kva_fleet *f, struct publisher *pub)
{
	pub->replaying = false;
	pub->replay_tries = 0;
	accept_loss(f, pub);
	pub->joining = false;
	flush_held(f, pub);
}

void kvf_on_replay(kva_fleet *f, struct publisher *pub, int64_t seq, const uint8_t *data,
                   size_t len, bool big)
{
	if (!pub->replaying)
		return; /* an answer to a request already given up */
	if (seq == -1) {
		if (hole_after_the_answer(pub)) { /* the held batches stay held */
			stat_add(f, STAT(gaps), 1);
			fleet_log(f, KVA_LOG_INFO,
			          "kvadmit-fleet: publisher %s: gap from %lld after the replay's answer",
			          pub->endpoint, (long long)pub->expected);
			pub->replay_tries = 0;
			kvf_replay_request(f, pub, pub->expected);
			return;
		}
		kvf_replay_end(f, pub);
		return;
	}
	if (seq_bad(f, seq))
		return;
	/* A replay returns what PUB already sent: a number above the highest
	 * live one would move `expected` past every live batch to come (they
	 * would all be duplicates). The ones above arrive live anyway. */
	if (!pub->live_seen || seq > pub->live_last) {
		stat_add(f, STAT(replay_refused), 1);
		return;
	}
	stat_add(f, STAT(replay_batches), 1);
	if (seq < pub->expected) {
		stat_add(f, STAT(duplicates), 1);
		return;
	}
	if (seq > pub->expected && !pub->joining) /* older than the publisher's buffer */
		stat_add(f, STAT(lost_batches), (uint64_t)seq - (uint64_t)pub->expected);
	pub->joining = false; /* its history starts here: later holes are losses */
	if (big)
		stat_add(f, STAT(oversized), 1);
	else
		kvf_apply_batch(f, pub, data, len);
	pub->expected = seq + 1;
}

void kvf_on_reconnect(kva_fleet *f, struct publisher *pub)
{
	stat_add(f, STAT(reconnects), 1);
	if (pub->dropped)
		return; /* dropped while down: a fresh start already */
	kvf_drop_publisher(f, pub, "reconnected (a new process until its replay says otherwise)");
	pub->dropped = true; /* live_batch: started afresh, replayed from 0 */
}
