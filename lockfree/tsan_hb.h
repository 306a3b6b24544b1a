/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Happens-before annotations for ThreadSanitizer, no-ops in other builds.
 *
 * Debian's liburcu is not built with TSan: the atomics inside its library
 * functions (wfcqueue, rculfhash, call_rcu, grace periods) are invisible to
 * it, so the ordering they provide must be restated where kvadmit hands a
 * node to liburcu (release) and gets it back (acquire). KVA_TSAN is defined
 * by CMake in KVADMIT_SANITIZE=thread builds.
 */
#ifndef KVA_LOCKFREE_TSAN_HB_H
#define KVA_LOCKFREE_TSAN_HB_H

#ifdef KVA_TSAN
#include <sanitizer/tsan_interface.h>
#define KVA__TSAN_RELEASE(addr) __tsan_release((void *)(addr))
#define KVA__TSAN_ACQUIRE(addr) __tsan_acquire((void *)(addr))
#else
#define KVA__TSAN_RELEASE(addr) ((void)0)
#define KVA__TSAN_ACQUIRE(addr) ((void)0)
#endif

#endif
