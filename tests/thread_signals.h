/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reads every thread's blocked-signal mask (/proc/self/task/TID/status,
 * SigBlk) for the tests that check "every thread kvadmit starts blocks
 * every signal" (test_host_process, test_fleet). Linux only, like the
 * library.
 */
#ifndef KVA_TESTS_THREAD_SIGNALS_H
#define KVA_TESTS_THREAD_SIGNALS_H

#include <dirent.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

static inline uint64_t sig_bit(int sig)
{
	return 1ull << (sig - 1);
}

/* The signals a host most often handles or sends; a kvadmit thread must
 * block them all. */
static inline uint64_t host_signals(void)
{
	return sig_bit(SIGINT) | sig_bit(SIGTERM) | sig_bit(SIGHUP) | sig_bit(SIGQUIT) |
	       sig_bit(SIGUSR1) | sig_bit(SIGUSR2) | sig_bit(SIGALRM) | sig_bit(SIGCHLD) |
	       sig_bit(SIGPIPE) | sig_bit(SIGWINCH) | sig_bit(SIGRTMIN + 1);
}

/* SigBlk of thread tid; false when it cannot be read (it exited). */
static inline bool thread_sigblk(long tid, uint64_t *blk)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/self/task/%ld/status", tid);
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	bool found = false;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "SigBlk: %" SCNx64, blk) == 1) {
			found = true;
			break;
		}
	fclose(f);
	return found;
}

/* Threads of this process other than the caller that let any of
 * host_signals() through (each is named on stderr); *others receives how
 * many threads other than the caller there are. -1 if /proc cannot be read. */
static inline int threads_taking_signals(int *others)
{
	const uint64_t want = host_signals();
	DIR *d = opendir("/proc/self/task");
	if (!d)
		return -1;
	long me = (long)syscall(SYS_gettid); /* gettid() needs _GNU_SOURCE first */
	int open_ = 0;
	*others = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		long tid = strtol(de->d_name, NULL, 10);
		uint64_t blk = 0;
		if (tid <= 0 || tid == me || !thread_sigblk(tid, &blk))
			continue;
		(*others)++;
		if ((blk & want) != want) {
			fprintf(stderr, "thread %ld blocks %#" PRIx64 ", not %#" PRIx64 "\n", tid, blk,
			        want);
			open_++;
		}
	}
	closedir(d);
	return open_;
}

#endif
