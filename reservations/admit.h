/* SPDX-License-Identifier: Apache-2.0 */
/*
 * admit.c: admission — the FCFS head's paired reservation (rules
 * restore-waits-for-capacity, paired-reservation, reservations-never-preempt,
 * fcfs-ready-bypass, too-large-at-once), READY restores passing a blocked
 * head, the plan's admissions, copy reports, the prefix-cache reset (rule
 * reset-returns-ready) and cancels in any state (rule cancel-any-thread).
 * The queue itself is waiting_queue.h, the head's timers head_timers.h, the
 * READY heap ready_heap.h, the step's token budget token_budget.h. Calls
 * copy.c, evict_walk.c, lookup.c and the files below them. Scheduler thread
 * only.
 */
#ifndef KVA_RESERVATIONS_ADMIT_H
#define KVA_RESERVATIONS_ADMIT_H

#include "engine_state.h"

/* A cancel of r in whatever state it is in now: it leaves the queue, the
 * READY heap, its import or its running pages and ends CANCELLED. Not ingested
 * yet: marked to end at its ingest (true). false: a kva_grow owns it this
 * instant: retry next step. */
bool kva__admit_cancel(kva_engine *e, struct kva__req *r);
/* A copy report: what it means for r's admission. */
void kva__admit_on_copy(kva_engine *e, struct kva__req *r, struct kva__event *ev);
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
/* READY restores first, then FCFS from the head until one is blocked; may
 * run again in the same step (after a recheck's answers). Once per step
 * before the first run: kva__token_budget_start. Returns how many
 * requests it took out of the waiting side (admitted, or imports started). */
uint32_t kva__admit_run(kva_engine *e);

#endif
