/* SPDX-License-Identifier: Apache-2.0 */
/*
 * thread_start: how kvadmit starts its threads. Every thread the library
 * starts (the slab grower, importer workers and progress threads, the fleet's
 * I/O thread and the ZeroMQ threads it causes) runs with every signal
 * blocked, so a host's signal handler never runs on a kvadmit thread and a
 * process-directed signal always reaches one of the host's own threads.
 *
 * Thread contract: any thread; nothing shared.
 */
#ifndef KVA_LOCKFREE_THREAD_START_H
#define KVA_LOCKFREE_THREAD_START_H

#include <pthread.h>
#include <signal.h>

/* kva_thread_start - pthread_create with every signal blocked in the new
 * thread (the caller's mask is restored before it returns).
 * Returns: 0, or pthread_create's positive error number. */
int kva_thread_start(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg);

/* kva_signals_block_all - blocks every signal in the calling thread, for a
 * section that starts threads through another library (ZeroMQ's context).
 * *old receives the mask that kva_signals_restore puts back. */
void kva_signals_block_all(sigset_t *old);
void kva_signals_restore(const sigset_t *old);

#endif
