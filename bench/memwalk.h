/* SPDX-License-Identifier: Apache-2.0 */
/*
 * memwalk: the machine's memory yardstick. A ring of 32-bit slots, one cycle
 * through all of them in random order, walked by dependent loads: every hop
 * is a cache miss once the ring is well beyond the last-level cache, as a
 * record access is in an engine holding 1M requests. On huge pages where the
 * kernel gives them, like kvadmit's slab chunks (reservations/alloc.c), so
 * a hop is a DRAM miss without a page walk on top.
 *
 * Used by BM_dram_miss (bm_machine.c: what one such miss costs here, the
 * unit the 1M rows can be read in) and by BM_step_tail's memory control.
 */
#ifndef KVA_BENCH_MEMWALK_H
#define KVA_BENCH_MEMWALK_H

#include <stddef.h>
#include <stdint.h>

struct mw_ring {
	uint32_t *slot; /* slot[i]: the next slot after i */
	uint32_t n;
	uint32_t at; /* where the last walk stopped */
};

/* A ring of `bytes` (rounded down to whole slots). Aborts on no memory, as
 * the fixture does. */
void mw_init(struct mw_ring *r, size_t bytes);
void mw_fini(struct mw_ring *r);
/* The process's ring of MW_SHARED_BYTES (4 MiB under KVA_BENCH_SMALL),
 * built on first use (a few seconds) and kept: one thread at a time. */
#define MW_SHARED_BYTES (256u << 20)
struct mw_ring *mw_shared(void);
/* Walks `hops` dependent hops from where the last walk stopped. The walk
 * stays between two calls to the caller's clock: the compiler may not move
 * it out (the ring is private memory it could otherwise reorder freely). */
void mw_walk(struct mw_ring *r, uint64_t hops);

#endif
