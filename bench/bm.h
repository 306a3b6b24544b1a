/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The benchmark files' registration and cleanup entry points, called by
 * bench_main.c in the order the suite runs (registration order).
 */
#ifndef KVA_BENCH_BM_H
#define KVA_BENCH_BM_H

void bm_register_memory(void);   /* bm_memory.c */
void bm_register_step(void);     /* bm_step.c */
void bm_register_admit(void);    /* bm_admit.c */
void bm_register_events(void);   /* bm_events.c */
void bm_register_submit(void);   /* bm_submit.c */
void bm_register_capacity(void); /* bm_capacity.c */
void bm_register_local(void);     /* bm_local.c */
void bm_register_lifecycle(void); /* bm_lifecycle.c */
void bm_register_churn(void);     /* bm_churn.c */
void bm_register_stalls(void);    /* bm_stalls.c */
void bm_register_step_tail(void); /* bm_step_tail.c */
void bm_register_priority(void);  /* bm_priority.c */

/* BM_churn's processes: kvadmit-bench BM_CHURN_CHILD_FLAG <index> runs one
 * process's churn rounds (bm_churn.c) instead of the suite. */
#define BM_CHURN_CHILD_FLAG "--kva-churn-child"
int bm_churn_child(const char *index);

void bm_cleanup_step(void);
void bm_cleanup_events(void);
void bm_cleanup_priority(void);

#endif
