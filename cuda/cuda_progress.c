/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CUDA importer's progress loop: one pass issues the jobs the intake
 * inbox holds, takes the completion markers the host functions pushed and
 * reports what finished (completion.h); the progress thread runs passes
 * until destroy, sleeping on the wake semaphore; destroy drains what was
 * issued. Manual progress runs the same pass from the host's thread
 * (cuda_importer.c).
 *
 * In host-function mode the loop wakes every millisecond (CLOCK_MONOTONIC)
 * while jobs are outstanding, to find a sticky error behind which no marker
 * comes; event mode polls every 20 us.
 *
 * Every call: the progress loop only (one thread at a time).
 */
#define _GNU_SOURCE 1 /* sem_clockwait */
#include <semaphore.h>
#include <time.h>

#include "cuda_progress.h"
#include "cuda_completion.h"
#include "cuda_context.h"
#include "cuda_issue.h"

int kva__cuda_progress_once(kva_cuda_importer *imp, bool watchdog)
{
	int n = 0;
	struct kva_inbox_batch b;
	struct kva_inbox_node *nd;
	if (kva_inbox_drain_blocking(&imp->intake, &b)) {
		bool stop = kva__cuda_stopping(imp);
		while ((nd = kva_inbox_batch_pop_blocking(&b))) {
			struct kva__imp_job *j = caa_container_of(nd, struct kva__imp_job, node);
			if (stop) {
				/* destroy began: never started */
				kva__cuda_job_finish(imp, j, true);
				n++;
			} else if (imp->completion.dead) {
				j->status = imp->completion.dead_err; /* submitted before it died */
				kva__cuda_job_finish(imp, j, false);
				n++;
			} else {
				n += kva__cuda_issue(imp, j);
			}
		}
	}
	if (imp->cfg.completion != KVA_CUDA_COMPLETE_EVENT &&
	    kva_inbox_drain_blocking(&imp->done, &b)) {
		while ((nd = kva_inbox_batch_pop_blocking(&b)))
			kva__cq_marked(&imp->completion,
				       &caa_container_of(nd, struct kva__imp_job, node)->cq);
	}
	n += (int)kva__cq_poll(&imp->completion, watchdog);
	/* R3: pairs with A3 in cuda_submit (cuda_importer.c) — only a hint to
	 * refuse early; jobs that arrive anyway are failed above. */
	if (imp->completion.dead)
		atomic_store_explicit(&imp->dead, true, memory_order_release);
	return n;
}

/* Destroy: waits on the import streams (never the device, never the decode
 * stream) until every issued job has reported, and always returns. Once
 * every import stream has been synchronized, every host function on them
 * has returned and every event recorded on them has completed, so the pass
 * after it reports every job. A job still outstanding then, or while the
 * importer is dead, or when a stream cannot be synchronized (a broken
 * context runs no more host functions), would never be reported by its
 * marker or its query: it is failed instead. */
void kva__cuda_drain_issued(kva_cuda_importer *imp)
{
	(void)kva__cuda_progress_once(imp, true);
	for (int fruitless = 0; imp->completion.outstanding;) {
		if (imp->completion.dead) {
			(void)kva__cq_kill(&imp->completion, imp->completion.dead_err);
			break;
		}
		bool broken = false;
		for (uint32_t s = 0; s < imp->nstreams; s++) {
			cudaError_t ce = cudaStreamSynchronize(imp->import_streams[s]);
			if (ce != cudaSuccess) {
				kva__cuda_note_error(imp, ce);
				broken = true;
			}
		}
		int n = kva__cuda_progress_once(imp, true);
		/* one more synchronized pass before giving up: cheap insurance */
		if (broken || (n == 0 && ++fruitless == 2)) {
			(void)kva__cq_kill(&imp->completion, -EIO);
			break;
		}
	}
}

void *kva__cuda_progress_thread_main(void *arg)
{
	kva_cuda_importer *imp = arg;
	/* Its own thread: nothing to restore when it ends, and cudaSetDevice
	 * (the same primary context) is harmless here as a fallback. */
	if (kva__cuda_ctx_set(imp->primary_ctx) != CUDA_SUCCESS) {
		cudaError_t ce = cudaSetDevice(imp->cfg.device);
		kva__cuda_note_error(imp, ce != cudaSuccess ? ce : cudaErrorDeviceUninitialized);
	}
	bool watchdog = false;
	for (;;) {
		int n = kva__cuda_progress_once(imp, watchdog);
		watchdog = false;
		if (kva__cuda_stopping(imp)) {
			kva__cuda_drain_issued(imp);
			/* jobs submitted before the stop flag */
			(void)kva__cuda_progress_once(imp, true);
			break;
		}
		if (n)
			continue;
		if (imp->completion.outstanding) {
			/* event mode polls every 20 us; host-function mode wakes on
			 * markers, and every 1 ms to look for a sticky error (no
			 * marker comes after one). Wakes at once on a new job. The
			 * monotonic clock: a wall-clock step never stretches it. */
			long step =
			    imp->cfg.completion == KVA_CUDA_COMPLETE_EVENT ? 20000L : 1000000L;
			struct timespec ts;
			clock_gettime(CLOCK_MONOTONIC, &ts);
			ts.tv_nsec += step;
			if (ts.tv_nsec >= 1000000000L) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000L;
			}
			watchdog = sem_clockwait(&imp->wake, CLOCK_MONOTONIC, &ts) != 0;
		} else {
			while (sem_wait(&imp->wake) != 0)
				; /* EINTR */
		}
	}
	return NULL;
}
