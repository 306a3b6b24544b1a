/* SPDX-License-Identifier: Apache-2.0 */
/*
 * BM_churn: steadiness under churn at 1,000,000 waiting. Each of ROUNDS
 * rounds cancels a tenth of the waiting requests (100,000), chosen uniformly,
 * and submits as many new restores, in chunks of CHUNK cancels + CHUNK
 * submits followed by the step that handles them (unlink, credits, reports
 * and retirement of the cancelled; ingest, lookup and the directory's answer,
 * given from its callback, of the new), so the queue stays at 1,000,000 with
 * the head blocked. A round's time is the sum of its chunks' calls + step,
 * wall and the thread's CPU time; choosing victims and reclaiming retired
 * records (call_rcu) between chunks is untimed, as elsewhere.
 *
 * What counts is worst round / median round within one process, in every
 * process: a slow path that only some runs fall into (README, "Known issue")
 * shows only across processes. So the benchmark re-executes kvadmit-bench
 * PROCESSES times, one after the other (posix_spawn of /proc/self/exe with
 * the hidden flag BM_CHURN_CHILD_FLAG); each child builds its own engine,
 * runs the rounds and writes each round's times to a pipe as it ends. The
 * parent reports counters [cpu_]worst_over_median_p<i> per process and
 * [cpu_]worst_over_median_max over them. One iteration is one round (manual
 * time: the sum of every process's rounds); the benchmark runs once, as the
 * processes are its repetitions.
 */
#define _GNU_SOURCE 1 /* pipe2 */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bm.h"
#include "fixture.h"
#include "gbench.h"

#define WAITING 1000000
#define ROUNDS 20
#define PROCESSES 8
#define CHUNK 10000
/* a process is stopped when a round takes STALL_FACTOR x the median of its
 * earlier rounds (at least STALL_MIN_NS), or its first round FIRST_ROUND_NS,
 * or building its engine BUILD_NS */
#define STALL_FACTOR 50
#define STALL_MIN_NS 5000000000ull
#define FIRST_ROUND_NS 60000000000ull
#define BUILD_NS 600000000000ull

extern char **environ;

/* ---- the child ---------------------------------------------------------- */

static size_t churn_per_round(const struct bx *b) { return b->n_waiting / 10; }

/* Writes "ready", then one line per round as soon as it ends (its wall and
 * CPU ns), then "churn K": the parent watches each round's progress. */
int bm_churn_child(const char *arg)
{
	struct bx *b = bx_blocked(WAITING);
	size_t churn = churn_per_round(b), chunk = churn < CHUNK ? churn : CHUNK;
	kva_handle *victims = calloc(chunk, sizeof(*victims));
	kva_handle *fresh = calloc(chunk, sizeof(*fresh));
	if (!victims || !fresh)
		bx_check(-ENOMEM, "churn arrays");
	uint64_t seed = strtoull(arg, NULL, 10) + 1;
	uint64_t rng = 0x9e3779b97f4a7c15ull ^ seed * 0xbf58476d1ce4e5b9ull;
	printf("ready\n");
	fflush(stdout);
	for (int round = 0; round < ROUNDS; round++) {
		uint64_t ns = 0, cpu = 0;
		for (size_t done = 0; done < churn; done += chunk) {
			size_t k = churn - done < chunk ? churn - done : chunk;
			for (size_t i = 0; i < k; i++)
				victims[i] = bx_waiting_take_random(b, &rng);
			uint64_t t0 = bx_clock_ns(), c0 = bx_cpu_ns();
			for (size_t i = 0; i < k; i++)
				bx_check(kva_cancel(b->e, victims[i]), "kva_cancel");
			for (size_t i = 0; i < k; i++)
				fresh[i] = bx_submit(b, true);
			bx_step(b);
			cpu += bx_cpu_ns() - c0;
			ns += bx_clock_ns() - t0;
			if (b->plan.n_ended != k || b->plan.n_admitted || !b->plan.head_blocked)
				bx_check(-EPROTO, "churn step");
			for (size_t i = 0; i < k; i++)
				bx_waiting_add(b, fresh[i]);
			bx_reclaim(b, k);
		}
		printf("%llu %llu\n", (unsigned long long)ns, (unsigned long long)cpu);
		fflush(stdout);
	}
	printf("churn %zu\n", churn);
	free(victims);
	free(fresh);
	return fflush(stdout) == 0 ? 0 : 1;
}

/* ---- the parent ----------------------------------------------------------- */

struct child {
	pid_t pid;
	int fd;
	char buf[256];
	size_t len;
};

struct proc_result {
	uint64_t ns[ROUNDS], cpu[ROUNDS]; /* wall and the round thread's CPU time */
	int rounds;   /* rounds reported (a stalled one included) */
	bool stalled; /* stopped: a round ran past its limit */
	size_t churn;
};

/* Reads one line from the child within limit_ns: 1 with the line in `line`
 * (no newline), 0 on timeout, -1 at end of file or on an error. */
static int read_line(struct child *c, char *line, size_t cap, uint64_t limit_ns)
{
	uint64_t deadline = bx_clock_ns() + limit_ns;
	for (;;) {
		char *nl = memchr(c->buf, '\n', c->len);
		if (nl) {
			size_t n = (size_t)(nl - c->buf);
			snprintf(line, cap, "%.*s", (int)n, c->buf);
			c->len -= n + 1;
			memmove(c->buf, nl + 1, c->len);
			return 1;
		}
		if (c->len == sizeof(c->buf))
			return -1; /* not our protocol */
		uint64_t now = bx_clock_ns();
		if (now >= deadline)
			return 0;
		struct pollfd pfd = {c->fd, POLLIN, 0};
		uint64_t wait_ms = (deadline - now) / 1000000 + 1;
		int rc = poll(&pfd, 1, wait_ms > INT_MAX ? INT_MAX : (int)wait_ms);
		if (rc < 0 && errno != EINTR)
			return -1;
		if (rc <= 0)
			continue;
		ssize_t got = read(c->fd, c->buf + c->len, sizeof(c->buf) - c->len);
		if (got <= 0 && !(got < 0 && errno == EINTR))
			return -1;
		if (got > 0)
			c->len += (size_t)got;
	}
}

static double median(const uint64_t *v, size_t n)
{
	uint64_t sorted[PROCESSES * ROUNDS];
	if (n == 0 || n > PROCESSES * ROUNDS)
		return 0;
	memcpy(sorted, v, n * sizeof(*v));
	qsort(sorted, n, sizeof(*sorted), bx_cmp_u64);
	double mid = (double)sorted[n / 2];
	return n % 2 ? mid : ((double)sorted[n / 2 - 1] + mid) / 2;
}

/* Runs one child process and collects its rounds. A round that takes more
 * than STALL_FACTOR times the median of the rounds before it (at least
 * STALL_MIN_NS; FIRST_ROUND_NS for the first) stops the process: that round
 * is recorded as the time waited so far (a lower bound) and the process as
 * stalled, so one process in a pathological state cannot hold the suite for
 * long. 0, or -1 when the process failed (message on stderr). */
static int run_child(const char *exe, int index, struct proc_result *out)
{
	int fd[2];
	memset(out, 0, sizeof(*out));
	if (pipe2(fd, O_CLOEXEC) != 0)
		return -1;
	char idx[16];
	snprintf(idx, sizeof(idx), "%d", index);
	char *argv[] = {(char *)exe, (char *)BM_CHURN_CHILD_FLAG, idx, NULL};
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, fd[1], STDOUT_FILENO); /* dup2 clears CLOEXEC */
	struct child c = {.fd = fd[0]};
	int rc = posix_spawn(&c.pid, exe, &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(fd[1]);
	if (rc != 0) {
		close(fd[0]);
		fprintf(stderr, "kvadmit-bench: BM_churn: spawn %s: %s\n", exe, strerror(rc));
		return -1;
	}
	char line[64];
	bool ok = read_line(&c, line, sizeof(line), BUILD_NS) == 1 && strcmp(line, "ready") == 0;
	while (ok && out->rounds < ROUNDS) {
		uint64_t limit = FIRST_ROUND_NS;
		if (out->rounds) {
			double m = median(out->ns, (size_t)out->rounds) * STALL_FACTOR;
			limit = m > (double)STALL_MIN_NS ? (uint64_t)m : STALL_MIN_NS;
		}
		uint64_t t0 = bx_clock_ns();
		int got = read_line(&c, line, sizeof(line), limit);
		if (got == 0) {
			out->cpu[out->rounds] = 0; /* unknown */
			out->ns[out->rounds++] = bx_clock_ns() - t0;
			out->stalled = true;
			kill(c.pid, SIGKILL);
			break;
		}
		ok = got == 1 && sscanf(line, "%" SCNu64 " %" SCNu64, &out->ns[out->rounds],
		                        &out->cpu[out->rounds]) == 2;
		out->rounds += ok;
	}
	if (ok && !out->stalled)
		ok = read_line(&c, line, sizeof(line), STALL_MIN_NS) == 1 &&
		     sscanf(line, "churn %zu", &out->churn) == 1;
	close(c.fd);
	if (!ok)
		kill(c.pid, SIGKILL); /* off protocol: do not wait for it to finish */
	int status = 0;
	while (waitpid(c.pid, &status, 0) < 0 && errno == EINTR)
		;
	if (!ok || (!out->stalled && (!WIFEXITED(status) || WEXITSTATUS(status) != 0))) {
		fprintf(stderr,
		        "kvadmit-bench: BM_churn process %d failed (status %d, %d rounds)\n",
		        index, status, out->rounds);
		return -1;
	}
	return 0;
}

/* worst / median of one process's rounds; a stalled process's is a lower
 * bound, and at least STALL_FACTOR (with no earlier round to compare to) */
static double worst_over_median(const uint64_t *v, int n, bool stalled, uint64_t *worst)
{
	*worst = 0;
	for (int r = 0; r < n; r++)
		*worst = v[r] > *worst ? v[r] : *worst;
	double m = median(v, (size_t)n), ratio = m > 0 ? (double)*worst / m : 0;
	return stalled && ratio < STALL_FACTOR ? STALL_FACTOR : ratio;
}

static void bm_churn(gb_state *s, void *arg)
{
	(void)arg;
	char exe[PATH_MAX];
	ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (len <= 0) {
		gb_skip_with_error(s, "cannot find /proc/self/exe");
		gb_keep_running_batch(s, 1);
		return;
	}
	exe[len] = '\0';
	uint64_t all[PROCESSES * ROUNDS], all_cpu[PROCESSES * ROUNDS];
	struct proc_result pr;
	double max_wall = 0, max_cpu = 0;
	uint64_t worst_ns = 0;
	size_t churn = 0, n_all = 0;
	int procs = 0, stalled = 0;
	char name[48];
	while (gb_keep_running_batch(s, PROCESSES * ROUNDS)) {
		uint64_t total = 0;
		n_all = 0;
		for (int p = 0; p < PROCESSES; p++) {
			if (run_child(exe, procs, &pr) != 0) {
				gb_skip_with_error(s, "a churn process failed");
				gb_keep_running_batch(s, 1);
				return;
			}
			for (int r = 0; r < pr.rounds; r++) {
				total += pr.ns[r];
				all[n_all] = pr.ns[r];
				all_cpu[n_all++] = pr.cpu[r];
			}
			uint64_t worst, worst_cpu;
			double wall = worst_over_median(pr.ns, pr.rounds, pr.stalled, &worst);
			double cpu = worst_over_median(pr.cpu, pr.rounds, pr.stalled, &worst_cpu);
			snprintf(name, sizeof(name), "worst_over_median_p%d", procs);
			gb_counter(s, name, wall, GB_COUNTER_DEFAULT);
			snprintf(name, sizeof(name), "cpu_worst_over_median_p%d", procs);
			gb_counter(s, name, cpu, GB_COUNTER_DEFAULT);
			max_wall = wall > max_wall ? wall : max_wall;
			max_cpu = cpu > max_cpu ? cpu : max_cpu;
			worst_ns = worst > worst_ns ? worst : worst_ns;
			stalled += pr.stalled;
			if (!pr.stalled)
				churn = pr.churn;
			procs++;
		}
		gb_set_iteration_time(s, (double)total / 1e9);
	}
	gb_set_items_processed(s, gb_iterations_done(s) * (int64_t)churn);
	gb_counter(s, "worst_over_median_max", max_wall, GB_COUNTER_DEFAULT);
	gb_counter(s, "cpu_worst_over_median_max", max_cpu, GB_COUNTER_DEFAULT);
	gb_counter(s, "median_round_ms", median(all, n_all) / 1e6, GB_COUNTER_DEFAULT);
	gb_counter(s, "cpu_median_round_ms", median(all_cpu, n_all) / 1e6, GB_COUNTER_DEFAULT);
	gb_counter(s, "worst_round_ms", (double)worst_ns / 1e6, GB_COUNTER_DEFAULT);
	gb_counter(s, "processes", procs, GB_COUNTER_DEFAULT);
	gb_counter(s, "stalled_processes", stalled, GB_COUNTER_DEFAULT);
	gb_counter(s, "rounds", ROUNDS, GB_COUNTER_DEFAULT);
	gb_counter(s, "churn_per_round", (double)churn, GB_COUNTER_DEFAULT);
}

void bm_register_churn(void)
{
	/* the processes are the repetitions: once, whatever --benchmark_repetitions says */
	gb_repetitions(gb_use_manual_time(gb_register("BM_churn", bm_churn, NULL)), 1);
}
