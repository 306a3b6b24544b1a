/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ThreadSanitizer's built-in suppressions for a program that runs libzmq
 * (the fleet's tests and benchmarks, the simulator's fleet directory).
 * Include it in exactly one file of the program: it defines the hook.
 *
 * libzmq is not built with ThreadSanitizer: the lock-free pipes that hand
 * each message between the caller and libzmq's own I/O thread (and an
 * inproc message shared by several subscribers, one reference-counted
 * buffer freed by whichever thread drops it last) use atomics TSan cannot
 * see, so every message buffer looks raced. libsodium decrypts CURVE
 * messages on that I/O thread before the pipe hands them over. Reports from
 * inside those libraries are suppressed; kvadmit's own code stays checked.
 */
#ifndef KVA_TESTS_TSAN_LIBZMQ_H
#define KVA_TESTS_TSAN_LIBZMQ_H

#ifdef KVA_TSAN
const char *__tsan_default_suppressions(void);
const char *__tsan_default_suppressions(void)
{
	return "race:libzmq.so.5\ncalled_from_lib:libzmq.so.5\nrace:libsodium.so\n";
}
#endif

#endif
