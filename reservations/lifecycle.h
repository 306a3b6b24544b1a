/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lifecycle.h, lifecycle.c: a request record's life in the engine (struct
 * kva__req, record.h) — its slot in the records' slab, its state changes and
 * the gauges that follow them, the live-id map (rule id-reuse), its one
 * terminal outcome, and its retirement after a grace period.
 */
#ifndef KVA_RESERVATIONS_LIFECYCLE_H
#define KVA_RESERVATIONS_LIFECYCLE_H

#include "engine_state.h"

/* Any thread inside an RCU read-side section (or the scheduler): the live
 * record of incarnation {slot, gen} with this id, NULL if there is none. */
struct kva__req *kva__rec_find(kva_engine *e, uint32_t slot, uint32_t gen, uint64_t id);
/* Any thread: a free slot for a new record of this priority, its index in
 * *slot; NULL: -ENOMEM. Under priority order, one thread's records of one
 * level are neighbours in memory, as FCFS's of one thread are. */
struct kva__req *kva__rec_new(kva_engine *e, int32_t priority, uint32_t *slot);
/* Any thread: the record, filled, becomes findable under a new generation. */
uint32_t kva__rec_publish(kva_engine *e, struct kva__req *r);

/* Scheduler thread: r's state becomes `to`; every state change goes
 * through here, so the state gauges follow it. */
void kva__rec_set_state(kva_engine *e, struct kva__req *r, uint32_t to);

/* Scheduler thread: the live-id map (rule id-reuse). 0, -EEXIST (a live request
 * has this id), -ENOMEM. */
int kva__rec_claim_id(kva_engine *e, struct kva__req *r);
/* Scheduler thread: the live incarnation of id, or NULL. */
struct kva__req *kva__rec_live(kva_engine *e, uint64_t id);
/* Scheduler thread: removes the entries of ids that ended (kva__rec_end
 * defers them); called at the end of each step and before any map read. */
void kva__rec_ids_settle(kva_engine *e);
/* Scheduler thread, at the end of a step: hands the retired records and
 * cancel events to their grace period (call_rcu) once enough have gathered,
 * or as soon as a step retires none, so a quiet engine never sits on them. */
void kva__rec_flush_retired(kva_engine *e);
/* Scheduler thread: records the one terminal outcome of r and queues its
 * report. */
void kva__rec_end(kva_engine *e, struct kva__req *r, uint32_t terminal);
/* Scheduler thread: r's slot goes back after a grace period; what r owned
 * but its grant goes now. */
void kva__rec_retire(kva_engine *e, struct kva__req *r);
/* Engine destroy: fn for every live record whose end the host was not told. */
void kva__rec_each_unreported(kva_engine *e, kva_unfinished_fn fn, void *ctx);
/* Engine destroy: frees every grant and manifest left in the slab. */
void kva__rec_free_all(kva_engine *e);
#ifdef KVA_FAULT_INJECTION
/* Ids the held-checkpoint map holds now: 0 once every request has ended
 * and retired (fuzz_engine, test_held_balance). */
size_t kva__held_ids(const kva_engine *e);
#endif

#endif
