/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the CPU and CUDA importers share: the copy of a job the importer owns
 * until it reported, job validation, runs of consecutive page ids, the
 * in-flight count behind wait_idle, counters, and the report call.
 *
 * Synchronisation of the idle tracker:
 *   call                  | may run concurrently with
 *   ----------------------+---------------------------------------------
 *   kva__idle_add         | everything (submit path: one atomic add)
 *   kva__idle_done        | everything (importer threads, after a report)
 *   kva__idle_wait        | everything (any thread)
 * Only kva__idle_done (when the count reaches zero) and kva__idle_wait take
 * the idle mutex; the engine's scheduler thread never does.
 */
#ifndef KVA_CUDA_IMPORT_COMMON_H
#define KVA_CUDA_IMPORT_COMMON_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvadmit/importer.h"
#include "completion.h"
#include <kvadmit/lockfree/inbox.h>

/* One rank's share of a copy job, owned by the importer from submit until
 * it has been reported: the engine's page array is copied into ids[], so
 * the record never depends on the engine's memory. */
struct kva__imp_job {
	struct kva_inbox_node node; /* intake inbox, then (CUDA) the done inbox */
	kva_engine *e;
	kva_copy_job job; /* job.pages points at ids[] */
	int status;	  /* result to report */
	bool inject_fail; /* decided at submit (CPU importer) */
	/* CUDA importer bookkeeping */
	struct kva__cq_node cq; /* completion state: stream FIFO, marker (completion.h) */
	void *event;		/* cudaEvent_t recorded after its copies */
	void *owner;		/* the importer, for the host function */
	uint64_t bytes;		/* bytes its copies move */
	uint32_t ids[];
};

/* Allocates and fills a job record; NULL on allocation failure. */
struct kva__imp_job *kva__imp_job_new(kva_engine *e, const kva_copy_job *job);
void kva__imp_job_free(struct kva__imp_job *j);

/* 0 if the job is one this importer can run: its rank, page ids inside the
 * pool. -EINVAL (rank / empty) or -ERANGE (a page id out of the pool). */
int kva__imp_job_check(const kva_copy_job *job, uint32_t rank, uint32_t dest_pages);

/* 0 if a resolved share of `bytes` covers npages pages (the last may be
 * partial), else -ERANGE. */
int kva__imp_src_check(uint32_t npages, size_t page_bytes, const void *src, size_t bytes);

/* Bytes of checkpoint page i in a share of `bytes`. */
static inline size_t kva__imp_page_len(size_t page_bytes, size_t bytes, uint32_t i)
{
	size_t off = (size_t)i * page_bytes;
	size_t left = bytes - off;
	return left < page_bytes ? left : page_bytes;
}

/* Length of the run of consecutive destination ids starting at pages[i]
 * (pages[i + k] == pages[i] + k); consecutive checkpoint pages are always
 * contiguous in the source, so a run is one contiguous copy. */
static inline uint32_t kva__imp_run(const uint32_t *pages, uint32_t n, uint32_t i)
{
	uint32_t k = 1;
	while (i + k < n && pages[i + k] == pages[i] + k)
		k++;
	return k;
}

/* ---- in-flight count and wait_idle -------------------------------------- */
struct kva__idle {
	_Atomic uint64_t in_flight;
	pthread_mutex_t mtx;
	pthread_cond_t cv; /* CLOCK_MONOTONIC */
};

int kva__idle_init(struct kva__idle *w);
void kva__idle_fini(struct kva__idle *w);
void kva__idle_add(struct kva__idle *w);
void kva__idle_done(struct kva__idle *w);
/* 0 when nothing is in flight, -ETIMEDOUT after timeout_ns (0 = forever). */
int kva__idle_wait(struct kva__idle *w, uint64_t timeout_ns);

/* ---- counters ------------------------------------------------------------ */
enum {
	KVA__IS_SUBMITTED,
	KVA__IS_REFUSED,
	KVA__IS_OK,
	KVA__IS_FAILED,
	KVA__IS_INJECTED,
	KVA__IS_CANCELLED,
	KVA__IS_PAGES,
	KVA__IS_BYTES,
	KVA__IS_CALLS,
	KVA__IS_BUSY_NS,
	KVA__IS_COUNT
};

struct kva__imp_stats {
	_Atomic uint64_t v[KVA__IS_COUNT];
};

static inline void kva__is_add(struct kva__imp_stats *s, int i, uint64_t n)
{
	/* statistics only: no ordering with anything */
	atomic_fetch_add_explicit(&s->v[i], n, memory_order_relaxed);
}

/* Zeroes *out when s or w is NULL (a NULL importer). */
void kva__imp_stats_read(const struct kva__imp_stats *s, const struct kva__idle *w,
			 kva_importer_stats *out);

/* ---- submit and reporting ----------------------------------------------------------- */
/* The submit path both importers share (the engine's scheduler thread):
 * checks the job, copies it into a new record and counts it in flight.
 * Returns the record, which the caller pushes onto its intake, or NULL with
 * *rc = -EINVAL / -ERANGE / -ESHUTDOWN / -ENOMEM (counted as refused). */
struct kva__imp_job *kva__imp_accept(struct kva__imp_stats *st, struct kva__idle *idle,
				     bool stopping, kva_engine *e, const kva_copy_job *job,
				     uint32_t rank, uint32_t dest_pages, int *rc);

/* Reports j's result (the override or kva_copy_done), counts it, and leaves
 * the in-flight count to the caller (kva__idle_done after freeing). */
void kva__imp_report(kva_report_fn fn, void *ctx, struct kva__imp_stats *s, struct kva__imp_job *j,
		     int status, bool cancelled);

/* CLOCK_MONOTONIC in ns. */
uint64_t kva__imp_now_ns(void);

#endif
