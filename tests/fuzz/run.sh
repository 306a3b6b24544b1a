#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the libFuzzer targets of a fuzz build (see tests/fuzz/README.md):
#
#   tests/fuzz/run.sh BUILD_DIR SECONDS
#
# For each target: replays its checked-in corpus (tests/fuzz/corpus/<target>/,
# every input once; seeds and regress-* inputs), then, when SECONDS > 0, fuzzes
# it for SECONDS on a scratch corpus under BUILD_DIR/fuzz-work/<target>/ seeded
# from the checked-in one, and prints libFuzzer's own summary lines. The engine
# targets run FUZZ_FORKS (default 4) libFuzzer fork-mode workers (an input
# costs what its operations cost: kva_engine_destroy no longer waits for
# liburcu's call_rcu thread, so more workers than cores only add overhead;
# FUZZ_FORKS=1 is as fast on two cores); FUZZ_FORKS=0 runs them in one
# process, without fork mode.
#
# Each run explores: every target starts from a fresh random -seed, printed
# as "<target>: seed N" (FUZZ_SEED=N gives every target that seed; in one
# process, FUZZ_FORKS=0 for the engine targets, and from the same scratch
# corpus, empty in a fresh build directory as in CI, it tries the same
# inputs in the same order).
# Exits non-zero if a replay or a run failed or left a crash, leak or timeout
# artifact (kept in BUILD_DIR/fuzz-work/<target>/); each artifact is printed
# base64 ("<target>: artifact NAME (N bytes) base64 ..."), so the log alone
# reproduces it: base64 -d into a file, then run the target on that file.
set -uo pipefail

build=${1:?usage: run.sh BUILD_DIR SECONDS}
secs=${2:?usage: run.sh BUILD_DIR SECONDS}
forks=${FUZZ_FORKS:-4}
src=$(cd "$(dirname "$0")" && pwd)
status=0

# Every artifact a replay or run left, base64 on one line each.
show_artifacts() {
	local f
	for f in "$2"/*; do
		[ -f "$f" ] || continue
		echo "$1: artifact $(basename "$f") ($(wc -c <"$f") bytes) base64 $(base64 -w0 "$f")"
	done
}

for t in fuzz_engine fuzz_differential fuzz_lockfree fuzz_config fuzz_fleet_wire fuzz_fleet_seq fuzz_fleet_index; do
	bin=$build/tests/fuzz/$t
	work=$build/fuzz-work/$t
	mkdir -p "$work/corpus" "$work/artifacts"
	rm -f "$work/artifacts/"*

	n=$(find "$src/corpus/$t" -type f | wc -l)
	if ! "$bin" -runs=0 -artifact_prefix="$work/artifacts/" "$src/corpus/$t" >"$work/replay.log" 2>&1; then
		echo "$t: corpus replay FAILED ($n inputs); log: $work/replay.log"
		grep -E "invariant violated|ERROR:|SUMMARY:|Running:" "$work/replay.log" | tail -5
		show_artifacts "$t" "$work/artifacts"
		status=1
		continue
	fi
	echo "$t: corpus replay ok ($n inputs)"
	[ "$secs" -gt 0 ] || continue

	mode=()
	case $t in fuzz_lockfree | fuzz_config) ;; *) [ "$forks" -gt 0 ] && mode=(-fork="$forks") ;; esac
	seed=${FUZZ_SEED:-$(($(od -An -N4 -tu4 /dev/urandom) % 2147483646 + 1))}
	echo "$t: seed $seed"
	start=$(date +%s)
	# the decoder gets whole batches of many events; the others' operations fit in 2 KiB
	max_len=2048
	[ "$t" = fuzz_fleet_wire ] && max_len=65536
	"$bin" "${mode[@]}" -seed="$seed" -max_total_time="$secs" -max_len="$max_len" -rss_limit_mb=2048 -timeout=60 \
		-print_final_stats=1 -artifact_prefix="$work/artifacts/" \
		"$work/corpus" "$src/corpus/$t" >"$work/fuzz.log" 2>&1
	rc=$?
	took=$(($(date +%s) - start))
	# libFuzzer's summary: the last status line and its closing lines
	grep -E '^#[0-9]+' "$work/fuzz.log" | tail -1 | sed "s/^/$t: /"
	grep -E '^(Done [0-9]+ runs|INFO: exiting|stat::number_of_executed_units|stat::average_exec_per_sec)' \
		"$work/fuzz.log" | sed "s/^/$t: /"
	execs=$(grep -oE '^#[0-9]+' "$work/fuzz.log" | tail -1 | tr -d '#')
	[ -n "$execs" ] && [ "$took" -gt 0 ] &&
		echo "$t: $execs executions in ${took} s ($((execs / took)) exec/s over all workers)"
	if [ $rc -ne 0 ] || [ -n "$(ls -A "$work/artifacts")" ]; then
		echo "$t: FAILED (exit $rc, seed $seed); artifacts in $work/artifacts/, log $work/fuzz.log"
		grep -E "invariant violated|ERROR:|SUMMARY:" "$work/fuzz.log" | sort | uniq -c | head -10
		show_artifacts "$t" "$work/artifacts"
		status=1
	fi
done
exit $status
