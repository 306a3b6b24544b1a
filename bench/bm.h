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

void bm_cleanup_step(void);
void bm_cleanup_events(void);

#endif
