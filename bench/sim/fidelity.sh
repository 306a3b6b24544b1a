#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The runs behind the fidelity and sensitivity tables of bench/sim/README.md:
# the production profile (default flags: sessions under way), the second
# production data point, the quiet case (--cold), then one input changed at a
# time (from the default, or from the cold start where the row says cold).
# Usage: bench/sim/fidelity.sh <kvadmit-sim>   (prints one line per run)
SIM=${1:?usage: fidelity.sh path/to/kvadmit-sim}
run() {
	label=$1
	shift
	"$SIM" --json --no-wall --no-progress "$@" | python3 -c '
import json, sys
d = json.load(sys.stdin)
out = []
for k in ("legacy", "wait"):
    p = d["policies"][k]
    m = p["turn_miss_tokens"]
    miss = lambda x: 100.0 * m[x] / m["prompt"] if m["prompt"] else 0
    out.append("%s %.1f tok/s, %.1f%% per turn (later turns %.1f%%; misses 1st %.1f%% new %.1f%% other %.1f%%; %.1f%% per admission), %d/%d later (stored) restored, %d/%d after 1st, %.1f s/turn, %d in flight" % (
        k, p["decode_tok_s"], 100 * p["turn_cache_share"], 100 * p["later_turn_cache_share"],
        miss("first_turns"), miss("new"), miss("other"), 100 * p["cache_token_share"],
        p["later_turns_stored_restored"], p["later_turns_stored"],
        p["later_turns_restored"], p["later_turns"], p["mean_turn_s"], p["turns_in_flight"]))
print(sys.argv[1] + ": " + " | ".join(out))
' "$label"
}
run "production profile (defaults: sessions under way)"
run "second data point: 16 agents" --agents 16
run "cold (the quiet case)" --cold
run "warm 80k-104k" --start-tokens 80000:104000
run "warm 120k-140k" --start-tokens 120000:140000
run "cold 32k-64k" --cold --start-tokens 32000:64000
run "cold 96k-128k" --cold --start-tokens 96000:128000
run "cold 120k-140k" --cold --start-tokens 120000:140000
run "write 6.8 GB/s" --write-gbs 6.8
run "write 0.68 GB/s" --write-gbs 0.68
run "cold, write 6.8 GB/s" --cold --write-gbs 6.8
run "cold, write 0.68 GB/s" --cold --write-gbs 0.68
run "keep-local off" --keep-local off
run "cold, keep-local off" --cold --keep-local off
run "FP8 weights" --weight-bits 8
run "cold, FP8 weights" --cold --weight-bits 8
run "cold, 4-bit weights" --cold --weight-bits 4
run "warm 80k-104k, FP8" --start-tokens 80000:104000 --weight-bits 8
run "warm 80k-104k, keep-local off" --start-tokens 80000:104000 --keep-local off
run "local cache prefix" --local-cache prefix
run "cold, local cache prefix" --cold --local-cache prefix
run "warm 80k-104k, local cache prefix" --start-tokens 80000:104000 --local-cache prefix
run "warm 120k-140k, local cache prefix" --start-tokens 120000:140000 --local-cache prefix
run "h200-70b" --profile h200-70b
run "h200-70b cold" --profile h200-70b --cold
run "h200-70b warm 80k-104k" --profile h200-70b --start-tokens 80000:104000
run "cold, window 2,400 s" --cold --duration 2400
run "cold, window 3,600 s" --cold --duration 3600
run "cold, window 7,200 s" --cold --duration 7200
