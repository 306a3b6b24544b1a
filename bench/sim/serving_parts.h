/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The serving loop's internals, shared by its files: serving.c (the run)
 * calls down into serving_events.c, serving_gpu.c, serving_plan.c,
 * serving_checks.c and serving_turns.c; of those, events and the GPU step
 * call turns, the plan calls turns and checks. Nothing calls back up.
 * Everything here runs on the simulator's one thread.
 */
#ifndef KVA_SIM_SERVING_PARTS_H
#define KVA_SIM_SERVING_PARTS_H

#include "sim.h"

/* serving_turns.c: the running list, turns. */
void sim_run_link(struct sim_node *n, struct sim_agent *a);
void sim_run_unlink(struct sim_node *n, struct sim_agent *a);
void sim_wake(struct sim *s, struct sim_node *n);
void sim_schedule_submit(struct sim *s, struct sim_agent *a, uint64_t at_ns);
void sim_on_submit(struct sim *s, struct sim_agent *a);
void sim_finish_turn(struct sim *s, struct sim_agent *a);

/* serving_checks.c: the invariants. */
void sim_check_fail(struct sim *s, bool *flag, const char *msg);
void sim_check_running(struct sim_node *n);
void sim_check_end(struct sim *s);

/* serving_plan.c: taking kva_step's plan. */
uint32_t sim_kept_local_pages(const struct sim *s, const struct sim_agent *a);
void sim_take_plan(struct sim_node *n);

/* serving_gpu.c: the GPU step. */
void sim_schedule_from(struct sim_node *n, struct sim_agent *from, struct sim_batch *b,
		       uint32_t *prefill_budget);
void sim_gpu_complete(struct sim_node *n);

/* serving_events.c: the events due now. */
void sim_deliver_due(struct sim *s);

#endif
