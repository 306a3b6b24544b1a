/* SPDX-License-Identifier: Apache-2.0 */
/*
 * admit.c: the admission side — the FCFS waiting queue and its head (rules
 * restore-waits-for-capacity, paired-reservation, reservations-never-preempt,
 * fcfs-ready-bypass, too-large-at-once), the head's bounded-wait, log and
 * refresh timers (rules bounded-wait, wait-logs-and-refreshes), READY restores
 * passing a blocked head, the plan's admissions, requeueing to the front
 * (preemption, reset: rule reset-returns-ready) and cancels in any state (rule
 * cancel-any-thread). Calls copy.c, evict_walk.c, lookup.c and the files below
 * them. Scheduler thread only.
 */
#ifndef KVA_RESERVATIONS_ADMIT_H
#define KVA_RESERVATIONS_ADMIT_H

#include "engine_state.h"

/* A newly ingested request joins the back of the queue and is looked up. */
void kva__admit_enqueue(kva_engine *e, struct kva__req *r);
/* r, no longer running or importing, goes back to the front as a new wait:
 * no manifest, no reason, a fresh decisive lookup — but the host's local
 * checkpoint stays (if stated since the last reset), and a preempted request
 * resumes from it (rule host-local-checkpoints). */
void kva__admit_requeue_front(kva_engine *e, struct kva__req *r, bool preempted);
/* r leaves the waiting queue (admitted or cancelled): queue link, head
 * timers, lookup deadline and index entry go. */
void kva__admit_forget_waiting(kva_engine *e, struct kva__req *r);
/* r leaves the READY heap (cancel). */
void kva__admit_forget_ready(kva_engine *e, struct kva__req *r);
/* A cancel of r in whatever state it is in now: it leaves the queue, the
 * READY heap, its import or its running pages and ends CANCELLED. Not ingested
 * yet: marked to end at its ingest (true). false: a kva_grow owns it this
 * instant: retry next step. */
bool kva__admit_cancel(kva_engine *e, struct kva__req *r);
/* A copy report: what it means for r's admission. */
void kva__admit_on_copy(kva_engine *e, struct kva__req *r, struct kva__event *ev);
/* A head timer fired. */
void kva__admit_head_timer(kva_engine *e, int which);
/* rule reset-returns-ready: READY imports give their pages back and requeue in order. */
void kva__admit_reset_ready(kva_engine *e);
/* A head restore whose host checkpoint a prefix-cache reset forgot looks
 * up again (rule host-local-checkpoints; a reset walks no queue), and so do the
 * forgotten ones among the next few behind it. true if the head's lookup was
 * issued. */
bool kva__admit_head_recheck(kva_engine *e);
/* Only while an eviction is revalidated over several steps (rule
 * eviction-revalidates,
 * e->n_evicting): the first requests of the queue whose copy it made stale
 * look up again now. true if any did. */
bool kva__admit_revalidate_front(kva_engine *e);
/* Once per step, before the first kva__admit_run: the step's token budget. */
void kva__admit_start(kva_engine *e);
/* READY restores first, then FCFS from the head until one is blocked; may
 * run again in the same step (after a recheck's answers). Returns how many
 * requests it took out of the waiting side (admitted, or imports started). */
uint32_t kva__admit_run(kva_engine *e);

#endif
