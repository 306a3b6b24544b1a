/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rescan: the baseline for BM_rescan_step — a C port of the waiting pass
 * serving engines run today (vLLM v1 `Scheduler.schedule()` with a KV
 * connector whose restores wait for capacity), so kvadmit's O(1) step is
 * compared with the O(waiting) step it replaces, in the same process, on
 * records of the same size as kvadmit's, from the same allocator.
 *
 * Every step walks the whole waiting deque. For each request it does what
 * the Python loop does for a request that cannot be scheduled yet:
 *   - checks its status (WAITING: not admitted, no import in flight);
 *   - asks the local prefix cache again (get_computed_blocks: a probe of
 *     the block-hash table with the request's first block hash);
 *   - re-polls its connector lookup (get_num_new_matched_tokens: a probe of
 *     the lookup client's table by request id, then the result object);
 *   - re-checks capacity (allocate_slots: free blocks < blocks needed);
 *   - and, blocked, pops it and prepends it to skipped_waiting_requests,
 *     which are put back at the head of the queue after the loop.
 * A blocked restore is skipped rather than ending the loop, as in the bridge
 * that keeps restores waiting for capacity: otherwise requests behind it that
 * already own their capacity could never pass (docs/design.md, rule
 * fcfs-ready-bypass).
 */
#ifndef KVA_BENCH_RESCAN_H
#define KVA_BENCH_RESCAN_H

#include <stddef.h>
#include <stdint.h>

struct rs_sched;

/* n waiting restores, every lookup answered, capacity for none of them. */
struct rs_sched *rs_build(size_t n);
void rs_free(struct rs_sched *s);
/* One scheduler step's waiting pass; returns the requests admitted (0 here). */
size_t rs_step(struct rs_sched *s);
/* Bytes of one waiting request record (equal to kvadmit's). */
size_t rs_record_bytes(void);

#endif
