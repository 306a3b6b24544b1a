#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The runs behind the fidelity and sensitivity tables of bench/sim/README.md:
# the production profile (default flags), then one input changed at a time.
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
run "production profile (defaults)"
run "warm 80k-104k" --warm
run "warm 120k-140k" --warm --start-tokens 120000:140000
run "cold 32k-64k" --start-tokens 32000:64000
run "cold 96k-128k" --start-tokens 96000:128000
run "cold 120k-140k" --start-tokens 120000:140000
run "write 6.8 GB/s" --write-gbs 6.8
run "write 0.68 GB/s" --write-gbs 0.68
run "keep-local off" --keep-local off
run "FP8 weights" --weight-bits 8
run "4-bit weights" --weight-bits 4
run "warm 80k-104k, FP8" --warm --weight-bits 8
run "warm 80k-104k, keep-local off" --warm --keep-local off
run "local cache prefix (cold)" --local-cache prefix
run "warm 80k-104k, local cache prefix" --warm --local-cache prefix
run "warm 120k-140k, local cache prefix" --warm --start-tokens 120000:140000 --local-cache prefix
run "h200-70b cold" --profile h200-70b
run "h200-70b warm" --profile h200-70b --warm
run "window 2,400 s" --duration 2400
run "window 3,600 s" --duration 3600
run "window 7,200 s" --duration 7200
