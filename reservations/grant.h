/* SPDX-License-Identifier: Apache-2.0 */
/*
 * grant.h, grant.c: what an admitted (or importing) request owns, against
 * the engine — building its grant (struct kva__grant, record.h) and growing
 * its page array, reusing retired grants after their grace period, a
 * rank's copy report, and the one way pages and credits go back.
 */
#ifndef KVA_RESERVATIONS_GRANT_H
#define KVA_RESERVATIONS_GRANT_H

#include "engine_state.h"

/* Scheduler thread, or the GROWING owner: r owns a grant whose page array
 * holds min_cap ids. 0 or -ENOMEM (nothing changed). */
int kva__grant_ensure(kva_engine *e, struct kva__req *r, uint32_t min_cap);

/* Any thread (caller keeps g's record found, e.g. under RCU): one rank of
 * copy attempt `attempt` finished. 0, -ESTALE (not the attempt handed out),
 * -EALREADY (this rank already reported). *wake: call kva__wake once out
 * of the read-side section (set on 0 only). */
int kva__grant_report(kva_engine *e, struct kva__grant *g, uint32_t attempt, uint32_t rank,
                      int status, bool *wake);

/* The one way page ids go back: ids to the pool first, then their credits
 * together with `extra` (R1 of capacity.c: whoever reserves those credits
 * finds ids). */
void kva__pages_return(kva_engine *e, const uint32_t *ids, uint32_t n, struct kva_credits extra);
/* r gives back every page and credit it owns, its run slot and `slots` copy
 * slots. `reserved_gauge`: its pages were counted as reserved (not running). */
void kva__rec_give_back(kva_engine *e, struct kva__req *r, uint16_t slots, bool reserved_gauge);

/* Scheduler thread: g, unlinked from its retired record, waits for the
 * grace period of the next slab flush before it is reused ("grant reuse"). */
void kva__grant_retire(kva_engine *e, struct kva__grant *g);
/* Engine destroy: g and its page array go. */
void kva__grant_free(struct kva__grant *g);
/* Engine destroy: every retired grant, waiting or ready for reuse, goes. */
void kva__grants_free_retired(kva_engine *e);

#endif
