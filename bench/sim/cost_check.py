# SPDX-License-Identifier: Apache-2.0
"""The cost policy's targets in the simulator (bench/sim/README.md, "Store
tiers"), each store run once with --policy all, same seed:

  default          cost's decode tok/s, per-turn cache share and mean turn time
                   within +-2% of wait
  slow-tier,       cost's mean TTFT at least 10% below the better of wait and
  mixed-tier       legacy, its decode tok/s not below the better one's (by
                   more than one mean answer's tokens: the run ends at a fixed
                   time, and a turn more or less in flight then moves the
                   count by up to an answer)
  slot-saturation  no turn waited for a copy slot longer than its predicted
                   recompute time plus the margin

and, on seeds 2-5 of the slow-tier and mixed-tier stores, cost's mean turn
time at most 3% above the better of wait and legacy (a prefill model linear
in tokens lost 20% on seed 2's mixed tiers: README, "Other seeds").

The mean turn time target of the issue (10% better on the slow and mixed
stores) is not met and not checked here: the README's table says by how much.

usage: cost_check.py SIM
"""
import json
import subprocess
import sys


def run(sim, store, seed=1):
    out = subprocess.run([sim, "--policy", "all", "--json", "--no-wall", "--no-progress",
                          "--store", store, "--seed", str(seed)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["policies"]


def main():
    sim = sys.argv[1]
    fails = []
    d = run(sim, "default")
    for k in ("decode_tok_s", "turn_cache_share", "mean_turn_s"):
        ratio = d["cost"][k] / d["wait"][k]
        if abs(ratio - 1) > 0.02:
            fails.append(f"default: {k} cost/wait {ratio:.4f}, not within 2%")
    for store in ("slow-tier", "mixed-tier"):
        d = run(sim, store)
        c, w, l = d["cost"], d["wait"], d["legacy"]
        ttft = min(w["ttft_mean_s"], l["ttft_mean_s"])
        if c["ttft_mean_s"] > 0.9 * ttft:
            fails.append(f"{store}: mean TTFT {c['ttft_mean_s']:.2f} s, not 10% below {ttft:.2f}")
        better = w if w["decode_tokens"] >= l["decode_tokens"] else l
        answer = better["decode_tokens"] / max(better["turns_completed"], 1)
        if c["decode_tokens"] < better["decode_tokens"] - answer:
            fails.append(f"{store}: decode {c['decode_tokens']} tokens, more than an answer "
                         f"({answer:.0f}) below {better['decode_tokens']}")
        if c["cost"]["recomputes"] + c["cost"]["other_checkpoint"] == 0:
            fails.append(f"{store}: the cost policy never chose another source")
    for seed in (2, 3, 4, 5):
        for store in ("slow-tier", "mixed-tier"):
            d = run(sim, store, seed)
            turn = min(d["wait"]["mean_turn_s"], d["legacy"]["mean_turn_s"])
            if d["cost"]["mean_turn_s"] > 1.03 * turn:
                fails.append(f"{store}, seed {seed}: mean turn {d['cost']['mean_turn_s']:.1f} s, "
                             f"more than 3% above {turn:.1f} s")
    d = run(sim, "slot-saturation")
    over = d["cost"]["copy_slot_wait_over_recompute_max_s"]
    if over is not None and over > 0:
        fails.append(f"slot-saturation: a turn waited {over:.3f} s past its recompute time")
    for f in fails:
        print("cost_check:", f)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
