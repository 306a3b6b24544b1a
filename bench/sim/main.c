/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvadmit-sim: command line. Parses the flags, refuses impossible scenarios
 * with a message, runs the requested policies one after the other (each on
 * its own engine, same workload) and prints the demo's screen (headline.c)
 * or one JSON object. The default screen also runs the quiet case (--cold).
 *
 * Exit status: 0 ok; 1 an invariant check failed; 2 bad flags or an
 * impossible scenario; 3 the run stopped on an unexpected engine error.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sim.h"

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: kvadmit-sim [flags]\n"
	    "\n"
	    "Simulates tool-using agents whose contexts outgrow the KV pool and runs the real\n"
	    "kvadmit engine under the legacy policy (a refused restore recomputes) and the\n"
	    "wait policy (a restore waits for capacity), side by side. Model and constants:\n"
	    "bench/sim/README.md.\n"
	    "\n"
	    "  --profile P           model and hardware of each engine: spark-glm (default; the\n"
	    "                        production deployment) or h200-70b\n"
	    "  --agents N            tool-using agents (default 8)\n"
	    "  --nodes N             engines, each its own pool, GPU and importer, sharing the\n"
	    "                        checkpoint store and directory; agent i on engine i mod N\n"
	    "                        (default 1)\n"
	    "  --directory D         who answers lookups: model (default: the simulator's own\n"
	    "                        directory) or fleet (the real fleet directory, fed by KV\n"
	    "                        events over inproc://; docs/fleet.md)\n"
	    "  --warm                sessions already under way at t = 0, each history stored\n"
	    "                        (the default: contexts outgrow the pool during the run)\n"
	    "  --cold                the quiet case: agents begin at their first turn, contexts\n"
	    "                        that fit the pool (both policies then decide alike)\n"
	    "  --start-tokens LO:HI  first prompt (cold) or history at t = 0 (warm), uniform\n"
	    "                        (default 8000:24000 cold; warm: a condensed session's size\n"
	    "                        to the model's window, 48000:202752 for spark-glm)\n"
	    "  --keep-local on|off   legacy: a restore refused for capacity keeps its local\n"
	    "                        prefix-cache hit, as vLLM does (default: the profile's, on)\n"
	    "  --local-cache boundary|prefix\n"
	    "                        local prefix cache: boundary = a recurrent model's (a hit\n"
	    "                        only where an entry ends, an entry evicted whole; spark-glm's\n"
	    "                        default), prefix = an attention model's (any shorter prefix)\n"
	    "  --write-gbs G         checkpoint write bandwidth per rank, GB/s (default: profile)\n"
	    "  --import-gbs G        checkpoint import bandwidth per rank, GB/s (default: profile)\n"
	    "  --weight-bits B       weight precision, 4..16 bits (default 16: BF16)\n"
	    "  --duration S          simulated seconds measured (default 1800)\n"
	    "  --pool-pages N        KV pool pages per engine (default: the profile's pool tokens /\n"
	    "                        page tokens)\n"
	    "  --page-tokens N       tokens per page (default 16)\n"
	    "  --seed N              workload seed (default 1)\n"
	    "  --policy P            both | wait | legacy | cost | all (all: legacy, wait and\n"
	    "                        cost, three columns; default both)\n"
	    "  --store S             where stored checkpoints live (README \"Store tiers\"):\n"
	    "                        default (host DRAM, the profile's import link) | slow-tier\n"
	    "                        (a file-backed tier) | mixed-tier (half of them there) |\n"
	    "                        slot-saturation (one copy slot, 32 agents)\n"
	    "  --max-restore-wait S  bounded wait of a blocked restore, 0 = unbounded (default "
	    "60)\n"
	    "  --lookup-timeout S    per-lookup deadline, 0 = never (default 5)\n"
	    "  --copy-slots N        concurrent copy jobs (default 32)\n"
	    "  --world-size N        ranks per copy job, tensor parallel size (default 2)\n"
	    "  --copy-fail-rate P    probability that one rank's copy fails (default 0)\n"
	    "  --json                print one JSON object instead of the table\n"
	    "  --details             the full table of counters below the headline\n"
	    "  --svg PATH            write the timeline (both policies, per minute) as SVG\n"
	    "  --progress            progress bar on stderr once the run takes over a second\n"
	    "                        (default: when stderr is a terminal)\n"
	    "  --no-progress         no progress bar\n"
	    "  --no-wall             report wall_s as null (byte-identical JSON for one seed)\n"
	    "  --help                this text\n");
}

static int bad(const char *flag, const char *val, const char *why)
{
	if (val)
		fprintf(stderr, "kvadmit-sim: %s %s: %s (see --help)\n", flag, val, why);
	else
		fprintf(stderr, "kvadmit-sim: %s: %s (see --help)\n", flag, why);
	return 2;
}

static const char *const valued[] = {
    "--agents",	    "--duration",   "--pool-pages",	  "--page-tokens",
    "--seed",	    "--policy",	    "--max-restore-wait", "--lookup-timeout",
    "--copy-slots", "--world-size", "--copy-fail-rate", "--profile", "--nodes",
    "--directory", "--svg",
    "--start-tokens", "--keep-local", "--local-cache", "--write-gbs", "--import-gbs", "--weight-bits",
    "--store",
};

static bool is_valued(const char *name)
{
	for (size_t i = 0; i < sizeof(valued) / sizeof(valued[0]); i++)
		if (!strcmp(name, valued[i]))
			return true;
	return false;
}

static int parse_u64(const char *s, uint64_t *out)
{
	if (!s || !*s || *s == '-')
		return -1;
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || *end)
		return -1;
	*out = v;
	return 0;
}

static int parse_u32(const char *s, uint32_t *out)
{
	uint64_t v;
	if (parse_u64(s, &v) || v > UINT32_MAX)
		return -1;
	*out = (uint32_t)v;
	return 0;
}

static int parse_double(const char *s, double *out)
{
	if (!s || !*s)
		return -1;
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || *end || v != v)
		return -1;
	*out = v;
	return 0;
}

/* Runs the scenario's policies, legacy first; r[i] points into res or is
 * NULL. 0, or 3 when a run stopped on an engine error. */
static int run_policies(const struct sim_scenario *sc, struct sim_result res[SIM_N_POLICIES],
			struct sim_result *r[SIM_N_POLICIES])
{
	const int order[SIM_N_POLICIES] = {SIM_POLICY_LEGACY, SIM_POLICY_WAIT, SIM_POLICY_COST};
	for (int i = 0; i < SIM_N_POLICIES; i++) {
		if (!(sc->policies & order[i]))
			continue;
		if (sim_run_policy(sc, order[i], &res[i]) != 0) {
			sim_result_free(&res[i]);
			return 3;
		}
		r[i] = &res[i];
	}
	return 0;
}

/* 1 when a finished run broke an invariant, else status. */
static int check_invariants(struct sim_result *r[SIM_N_POLICIES], int status)
{
	for (int i = 0; i < SIM_N_POLICIES; i++)
		if (r[i] && !(r[i]->credits_conserved && r[i]->no_leaked_pages &&
			      r[i]->all_terminal && r[i]->reported_once && r[i]->page_accounting)) {
			fprintf(stderr, "kvadmit-sim: invariant check failed: %s\n", r[i]->check_msg);
			status = 1;
		}
	return status;
}

int main(int argc, char **argv)
{
	struct sim_scenario sc;
	sim_defaults(&sc);
	int progress = -1; /* -1: when stderr is a terminal */
	bool pool_given = false, start_given = false;
	bool start_chosen = false; /* --warm or --cold given */
	/* the profile first: later flags override its constants */
	for (int i = 1; i < argc; i++) {
		const char *v = NULL;
		if (!strncmp(argv[i], "--profile=", 10))
			v = argv[i] + 10;
		else if (!strcmp(argv[i], "--profile") && i + 1 < argc)
			v = argv[i + 1];
		if (v && sim_profile(&sc, v) != 0)
			return bad("--profile", v, sim_profile_names());
	}
	double write_gbs = 0, import_gbs = 0;
	const char *store = "default";
	bool agents_given = false, slots_given = false;
	uint32_t weight_bits = 16;
	int keep_local = -1;
	int local_boundary = -1;
	uint32_t start_lo = 0, start_hi = 0;
	for (int i = 1; i < argc; i++) {
		const char *flag = argv[i];
		char name[64];
		const char *val = NULL;
		const char *eq = strchr(flag, '=');
		if (strncmp(flag, "--", 2) != 0)
			return bad(flag, NULL, "not a flag");
		if (eq) {
			size_t n = (size_t)(eq - flag);
			if (n >= sizeof(name))
				return bad(flag, NULL, "unknown flag");
			memcpy(name, flag, n);
			name[n] = '\0';
			val = eq + 1;
		} else {
			snprintf(name, sizeof(name), "%s", flag);
		}
		/* flags without a value */
		if (!strcmp(name, "--help") || !strcmp(name, "-h")) {
			usage(stdout);
			return 0;
		}
		bool boolean = true;
		if (!strcmp(name, "--json"))
			sc.json = true;
		else if (!strcmp(name, "--progress"))
			progress = 1;
		else if (!strcmp(name, "--no-progress"))
			progress = 0;
		else if (!strcmp(name, "--no-wall"))
			sc.no_wall = true;
		else if (!strcmp(name, "--warm"))
			sc.w.warm = true, start_chosen = true;
		else if (!strcmp(name, "--cold"))
			sc.w.warm = false, start_chosen = true;
		else if (!strcmp(name, "--details"))
			sc.details = true;
		else
			boolean = false;
		if (boolean) {
			if (val)
				return bad(name, val, "takes no value");
			continue;
		}
		if (!is_valued(name))
			return bad(name, NULL, "unknown flag");
		if (!val) {
			if (i + 1 >= argc)
				return bad(name, NULL, "needs a value");
			val = argv[++i];
		}
		int rc = 0;
		if (!strcmp(name, "--agents"))
			rc = parse_u32(val, &sc.w.agents), agents_given = true;
		else if (!strcmp(name, "--duration"))
			rc = parse_double(val, &sc.duration_s);
		else if (!strcmp(name, "--pool-pages"))
			rc = parse_u32(val, &sc.pool_pages), pool_given = true;
		else if (!strcmp(name, "--page-tokens"))
			rc = parse_u32(val, &sc.page_tokens);
		else if (!strcmp(name, "--seed"))
			rc = parse_u64(val, &sc.w.seed);
		else if (!strcmp(name, "--max-restore-wait"))
			rc = parse_double(val, &sc.max_restore_wait_s);
		else if (!strcmp(name, "--lookup-timeout"))
			rc = parse_double(val, &sc.lookup_timeout_s);
		else if (!strcmp(name, "--copy-slots"))
			rc = parse_u32(val, &sc.copy_slots), slots_given = true;
		else if (!strcmp(name, "--world-size"))
			rc = parse_u32(val, &sc.world_size);
		else if (!strcmp(name, "--copy-fail-rate"))
			rc = parse_double(val, &sc.copy_fail_rate);
		else if (!strcmp(name, "--profile"))
			rc = 0; /* applied above */
		else if (!strcmp(name, "--svg"))
			sc.svg_path = val;
		else if (!strcmp(name, "--weight-bits"))
			rc = parse_u32(val, &weight_bits) || weight_bits < 4 || weight_bits > 16;
		else if (!strcmp(name, "--nodes"))
			rc = parse_u32(val, &sc.nodes);
		else if (!strcmp(name, "--directory")) {
			if (!strcmp(val, "model"))
				sc.directory = SIM_DIR_MODEL;
			else if (strcmp(val, "fleet"))
				return bad(name, val, "must be model or fleet");
			else if (!sim_fleetdir_available())
				return bad(name, val,
					   "this build has no fleet directory (it needs libzmq and "
					   "msgpack-c: KVADMIT_WITH_FLEET)");
			else
				sc.directory = SIM_DIR_FLEET;
		}
		else if (!strcmp(name, "--write-gbs"))
			rc = parse_double(val, &write_gbs) || !(write_gbs > 0 && write_gbs <= 1e6);
		else if (!strcmp(name, "--import-gbs"))
			rc = parse_double(val, &import_gbs) || !(import_gbs > 0 && import_gbs <= 1e6);
		else if (!strcmp(name, "--keep-local")) {
			if (!strcmp(val, "on"))
				keep_local = 1;
			else if (!strcmp(val, "off"))
				keep_local = 0;
			else
				return bad(name, val, "must be on or off");
		} else if (!strcmp(name, "--local-cache")) {
			if (!strcmp(val, "boundary"))
				local_boundary = 1;
			else if (!strcmp(val, "prefix"))
				local_boundary = 0;
			else
				return bad(name, val, "must be boundary or prefix");
		} else if (!strcmp(name, "--start-tokens")) {
			char lo[32];
			const char *colon = strchr(val, ':');
			size_t k = colon ? (size_t)(colon - val) : 0;
			if (!colon || k == 0 || k >= sizeof(lo))
				return bad(name, val, "must be LO:HI");
			memcpy(lo, val, k);
			lo[k] = '\0';
			rc = parse_u32(lo, &start_lo) || parse_u32(colon + 1, &start_hi) ||
			     start_lo < 1 || start_hi < start_lo;
			start_given = true;
		}
		else if (!strcmp(name, "--policy")) {
			if (!strcmp(val, "both"))
				sc.policies = SIM_POLICY_LEGACY | SIM_POLICY_WAIT;
			else if (!strcmp(val, "wait"))
				sc.policies = SIM_POLICY_WAIT;
			else if (!strcmp(val, "legacy"))
				sc.policies = SIM_POLICY_LEGACY;
			else if (!strcmp(val, "cost"))
				sc.policies = SIM_POLICY_COST;
			else if (!strcmp(val, "all"))
				sc.policies = SIM_POLICY_LEGACY | SIM_POLICY_WAIT | SIM_POLICY_COST;
			else
				return bad(name, val, "must be both, wait, legacy, cost or all");
		} else if (!strcmp(name, "--store")) {
			store = val;
		}
		if (rc)
			return bad(name, val, "not a valid number");
	}
	if (!pool_given)
		sc.pool_pages = sim_default_pool_pages(&sc);
	sc.m.weight_dense_bytes *= weight_bits / 16.0;
	sc.m.weight_expert_bytes *= weight_bits / 16.0;
	if (write_gbs > 0)
		sc.m.write_bytes_s = write_gbs * 1e9;
	if (import_gbs > 0)
		sc.m.import_bytes_s = import_gbs * 1e9;
	if (sim_store_profile(&sc, store, agents_given, slots_given) != 0)
		return bad("--store", store, sim_store_names());
	if (keep_local >= 0)
		sc.keep_local = keep_local;
	if (local_boundary >= 0)
		sc.local_boundary = local_boundary;
	if (start_given) {
		if (sc.w.warm)
			sc.w.init_ctx_min = start_lo, sc.w.init_ctx_max = start_hi;
		else
			sc.w.first_min = start_lo, sc.w.first_max = start_hi;
	}
	sim_default_start(&sc);
	sc.progress = progress < 0 ? isatty(STDERR_FILENO) : progress;
	/* runs that end within a second print no progress line */
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	sc.progress_after_s = (double)now.tv_sec + (double)now.tv_nsec / 1e9 + 1.0;

	char why[512];
	const char *err = sim_check(&sc, why, sizeof(why));
	if (err) {
		fprintf(stderr, "kvadmit-sim: %s\n", err);
		return 2;
	}

	struct sim_result res[SIM_N_POLICIES], quiet_res[SIM_N_POLICIES];
	struct sim_result *r[SIM_N_POLICIES] = {NULL}, *quiet[SIM_N_POLICIES] = {NULL};
	int status = run_policies(&sc, res, r);
	/* The default scenario's table also shows the quiet case, so that
	 * nobody takes the difference for a constant. */
	bool contrast = !sc.json && sc.w.warm && !start_chosen && !start_given &&
			sc.policies == (SIM_POLICY_LEGACY | SIM_POLICY_WAIT);
	if (status == 0 && contrast) {
		struct sim_scenario quiet_sc = sc;
		quiet_sc.w.warm = false;
		status = run_policies(&quiet_sc, quiet_res, quiet);
	}
	if (status == 0) {
		if (sc.json) {
			sim_print_json(stdout, &sc, r);
			if (sc.svg_path && sim_timeline_svg(sc.svg_path, &sc, r) != 0) {
				fprintf(stderr, "kvadmit-sim: --svg %s: %s\n", sc.svg_path,
					strerror(errno));
				status = 2;
			}
		} else if (sim_print_table(stdout, &sc, r, quiet) != 0) {
			status = 2;
		}
		status = check_invariants(r, status);
		status = check_invariants(quiet, status);
	}
	for (int i = 0; i < SIM_N_POLICIES; i++) {
		if (r[i])
			sim_result_free(r[i]);
		if (quiet[i])
			sim_result_free(quiet[i]);
	}
	return status;
}
