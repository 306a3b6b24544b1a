/* SPDX-License-Identifier: Apache-2.0 */
/*
 * head_timers.c: the bounded-wait, log and refresh timers of a restore
 * blocked at the head (rules bounded-wait, wait-logs-and-refreshes).
 * Scheduler thread only.
 */
#ifndef KVA_RESERVATIONS_HEAD_TIMERS_H
#define KVA_RESERVATIONS_HEAD_TIMERS_H

#include "engine_state.h"

/* r (or NULL) is no longer the timed head: its timers are cancelled. */
void kva__head_timers_forget(kva_engine *e, struct kva__req *r);
/* The head r could not be admitted this step (plan.head_blocked); a restore
 * (`restore`) becomes the timed head. */
void kva__head_timers_block(kva_engine *e, struct kva__req *r, bool restore);
/* A head timer fired (HT_WAIT, HT_LOG or HT_REFRESH). */
void kva__head_timers_fired(kva_engine *e, int which);

/* The cost policy's deadline for the blocked head r (cost_model.c,
 * kva__cost_wait_over): HT_WAIT fires then, if before the bound, so a
 * step looks at it again; UINT64_MAX: none. */
void kva__head_timers_deadline(kva_engine *e, struct kva__req *r, uint64_t deadline);

#endif
