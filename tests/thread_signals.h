/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reads every thread's blocked-signal mask (/proc/self/task/TID/status,
 * SigBlk) for the tests that check "every thread kvadmit starts blocks
 * every signal". Linux only, like the library.
 */
#ifndef KVA_TESTS_THREAD_SIGNALS_H
#define KVA_TESTS_THREAD_SIGNALS_H

#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Threads of this process other than the caller whose mask lets any of
 * SIGINT, SIGTERM, SIGHUP, SIGUSR1 through; *others receives how many
 * threads other than the caller there are. -1 if /proc cannot be read. */
static inline int threads_taking_signals(int *others)
{
	const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1};
	DIR *d = opendir("/proc/self/task");
	if (!d)
		return -1;
	long me = (long)syscall(SYS_gettid); /* gettid() needs _GNU_SOURCE first */
	int open_ = 0;
	*others = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		long tid = strtol(de->d_name, NULL, 10);
		if (tid <= 0 || tid == me)
			continue;
		char path[64], line[256];
		snprintf(path, sizeof(path), "/proc/self/task/%ld/status", tid);
		FILE *f = fopen(path, "r");
		if (!f)
			continue; /* exited meanwhile */
		uint64_t blk = 0;
		while (fgets(line, sizeof(line), f))
			if (sscanf(line, "SigBlk: %lx", (unsigned long *)&blk) == 1)
				break;
		fclose(f);
		(*others)++;
		for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
			if (!(blk & (1ull << (sigs[i] - 1)))) {
				open_++;
				break;
			}
	}
	closedir(d);
	return open_;
}

#endif
