/* SPDX-License-Identifier: Apache-2.0 */
/*
 * step_events.c: a step's event handling — events to their owners, fired
 * timers, terminal outcomes to the plan. Scheduler thread only, inside
 * kva_step.
 */
#ifndef KVA_RESERVATIONS_STEP_EVENTS_H
#define KVA_RESERVATIONS_STEP_EVENTS_H

#include "engine_state.h"

/* The events present when the step began, in order: one that stalled last
 * step and the rest of the batches it stalled in, what the scheduler
 * produced after its last look (refused copies), deferred cancels, the
 * inbox — then what handling those produced. Stops at the first event that
 * needs memory it cannot get. */
void kva__step_events_handle(kva_engine *e);
/* Events the scheduler thread itself produced (a directory answering from
 * its callback, an importer refusing a rank), until none is left; false
 * when one stalls (or one already had). */
bool kva__step_events_handle_local(kva_engine *e);
/* Hands terminal outcomes to the host, each exactly once (up to
 * plan.ended_cap; the rest next step); retires records unless pages of
 * theirs are still under a copy. */
void kva__step_events_emit_ended(kva_engine *e);
/* The timer wheel's callback (arg: the engine): a head timer or a lookup
 * deadline fired. */
void kva__step_events_timer_fired(struct kva_timer *t, void *arg);

#endif
