#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Model-checks kvadmit's cross-thread protocols with Spin (docs/model-checking.md).
#
#   tests/model/check.sh [--verify] [MODEL...]
#   tests/model/check.sh --refs
#
# For each model (default: all): the model itself must pass — no assertion
# violation, no invalid end state, and the search complete (not truncated by
# depth or memory); a model listed in LIVENESS must also have no
# non-progress cycle (pan -l) — and every mutant listed below must be
# rejected with a counterexample (its trail is replayed into the log). --verify checks with
# the larger bounds of `make verify`. Exit 0 only if everything holds.
#
# C references: the models and docs/model-checking.md cite the C code they
# stand for as `file.c function` (or file.h), never by line number. Before
# any model runs, every such pair in the models checked (and, when all run or
# with --refs, in docs/model-checking.md) must name a function defined in
# that file, and no `file.c:LINE` reference may remain. --refs checks only
# that (ctest: model_refs).
#
# At the end a table of the model runs (bounds, states, depth, pan's time)
# and the range of the mutants' trail lengths is printed in the form of
# docs/model-checking.md's table, to refresh it.
#
# Environment: MODEL_WORKDIR (default: a temporary directory, removed),
# MODEL_MEMLIM (MiB for pan, default 1024; verify 4096), SPIN, CC.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
SPIN=${SPIN:-spin}
CC=${CC:-gcc}
root=$(cd "$here/../.." && pwd)
doc=$root/docs/model-checking.md
mode=test
if [ "${1:-}" = "--verify" ]; then
  mode=verify
  shift
elif [ "${1:-}" = "--refs" ]; then
  mode=refs
  shift
fi

ALL=(inbox state slab fresh capacity copy freelist tickets pagepool caches registration)

# Mutants: each must fail. -DMUTANT_<name> is passed to spin.
declare -A MUTANTS=(
  [inbox]="CLEAR_AFTER_SPLICE POP_UNCHECKED"
  [state]="CANCEL_NO_CAS PREEMPT_DROPS_CANCEL GROW_UNOWNED"
  [slab]="NO_GEN_CHECK NO_GRACE_PERIOD GEN_WRAPS"
  [fresh]="EXTEND_UNCHECKED TAKE_NO_CAS CLAIM_ON_FAILURE NO_RETAKE"
  [capacity]="CHECK_THEN_SUB NO_SLOT_CHECK"
  [copy]="RETURN_BEFORE_DRAIN NO_ATTEMPT_CHECK"
  [freelist]="PUSH_BEFORE_GRACE"
  [tickets]="TAG_WRAPS"
  [pagepool]="NO_RECHECK TRUST_ALWAYS COUNT_FIRST TAKE_WHOLE_WORD GIVE_BACK_UNCOLLECTED"
  [caches]="FINI_FREES_OWNED DETACH_STORE THRASH_LOCK"
  [registration]="READ_OUTSIDE_LOCK COUNT_LAGS STALE_FLAG"
)
# Models also searched for non-progress cycles (pan built with -DNP, run with
# -l): a lock-free protocol has no run in which some thread spins while no
# call completes. Their mutants are searched that way first (it also checks
# the assertions), then for safety if that found nothing.
# (pagepool left this list when a take's loops became bounded: every loop in
# its model counts up to a bound, so no cycle exists to search for; a take
# that would have spun now gives up, which its crowded-out assertion checks.)
declare -A LIVENESS=()
# Mutants whose bug first shows at larger bounds than `make test`'s: their
# own -D flags, in both modes.
declare -A MUTANT_DEFS=(
  # a give-up (-EAGAIN after both passes) needs 4 ids to be reachable
  [pagepool/GIVE_BACK_UNCOLLECTED]="-DNPAGES=4 -DTAKERS=2 -DROUNDS=2 -DMAXTAKE=3"
)
# Bounds: make test, make verify.
declare -A TEST_DEFS=(
  [inbox]="-DPUSHES=1" [state]="-DADMITS=2" [slab]="-DINCARNATIONS=3 -DREADERS=1"
  [fresh]="-DTHREADS=2 -DALLOCS=2 -DOWNER=1 -DCHUNKS=2"
  [capacity]="-DTHREADS=3" [copy]="-DWORLD=2 -DRETRIES=1" [freelist]="-DPOPPERS=3 -DROUNDS=1" [tickets]="-DPOPPERS=3 -DROUNDS=1"
  [pagepool]="-DNPAGES=3 -DTAKERS=2 -DROUNDS=2 -DMAXTAKE=3"
  [caches]="-DTHREADS=2 -DROUNDS=2"
  [registration]="-DW=2 -DSETSPECIFIC_FAILS"
)
declare -A VERIFY_DEFS=(
  [inbox]="-DPUSHES=3" [state]="-DADMITS=3" [slab]="-DINCARNATIONS=4 -DREADERS=2"
  [fresh]="-DTHREADS=2 -DALLOCS=3 -DOWNER=1 -DCHUNKS=3"
  [capacity]="-DTHREADS=4" [copy]="-DWORLD=2 -DRETRIES=2" [freelist]="-DPOPPERS=3 -DROUNDS=2" [tickets]="-DPOPPERS=3 -DROUNDS=2"
  [pagepool]="-DNPAGES=4 -DTAKERS=2 -DROUNDS=2 -DMAXTAKE=3"
  [caches]="-DTHREADS=3 -DROUNDS=2"
  [registration]="-DW=3"
)
# Known failures: "model: reason" for a property the C code is known to
# break (a real bug, reported, not yet fixed). The model keeps asserting the
# correct property; listing it here is the only way to keep the check green.
KNOWN_FAIL=()

known_failure() {
  local m=$1 k
  for k in "${KNOWN_FAIL[@]+"${KNOWN_FAIL[@]}"}"; do
    [ "${k%%:*}" = "$m" ] && { echo "${k#*: }"; return 0; }
  done
  return 1
}

# The C file a reference names: a path under the source tree, or a file name
# looked up in the library's source directories (names are unique there).
ref_file() {
  local f=$1 d hits=()
  if [[ $f == */* ]]; then
    if [ -f "$root/$f" ]; then echo "$root/$f"; fi
    return 0
  fi
  for d in lockfree reservations cuda include/kvadmit examples; do
    [ -f "$root/$d/$f" ] && hits+=("$root/$d/$f")
  done
  if [ ${#hits[@]} -eq 1 ]; then echo "${hits[0]}"; fi
}

# Whether FILE defines function NAME: a line at column 0 (not a comment, not
# a preprocessor line) with NAME( on it, whose declaration reaches a `{`
# before a `;` (a prototype or forward declaration does not count).
defines() {
  awk -v fn="$2" '
    !cand && /^[A-Za-z_]/ && $0 ~ ("(^|[^A-Za-z0-9_])" fn "[(]") { cand = 1 }
    cand { if (index($0, "{")) { found = 1; exit } if ($0 ~ /;[ \t]*$/) cand = 0 }
    END { exit !found }' "$1"
}

# check_refs FILE...: every `file.[ch] name` pair names a function defined
# in that file; no `file.[ch]:LINE` reference. Prints each bad one.
check_refs() {
  local bad=0 n=0 src ln ref cf name path
  while IFS=: read -r src ln ref; do
    echo "FAIL  refs: ${src#"$root"/}:$ln: $ref: a line number (cite the function instead)"
    bad=1
  done < <(grep -HnoE '[A-Za-z0-9_]+\.[ch]:[0-9]+' "$@" || true)
  while IFS=: read -r src ln ref; do
    n=$((n + 1))
    cf=${ref%% *}
    name=${ref#* }
    path=$(ref_file "$cf")
    if [ -z "$path" ]; then
      echo "FAIL  refs: ${src#"$root"/}:$ln: \`$ref\`: no source file $cf"
      bad=1
    elif ! defines "$path" "$name"; then
      echo "FAIL  refs: ${src#"$root"/}:$ln: \`$ref\`: ${path#"$root"/} defines no function $name"
      bad=1
    fi
  done < <(grep -HnoE '[A-Za-z0-9_/]+\.[ch] [A-Za-z_][A-Za-z0-9_]*' "$@" || true)
  if [ $bad = 0 ]; then echo "PASS  refs: $n C references in ${*##*/}"; fi
  return $bad
}

if [ "$mode" = refs ]; then
  if check_refs "$here"/*.pml "$doc"; then exit 0; else exit 1; fi
fi

if [ "$mode" = verify ]; then
  memlim=${MODEL_MEMLIM:-4096}
  hashw=-w24
else
  memlim=${MODEL_MEMLIM:-1024}
  hashw=-w20
fi
command -v "$SPIN" >/dev/null || { echo "check.sh: spin not found (scripts/install-deps.sh installs it)" >&2; exit 1; }

work=${MODEL_WORKDIR:-}
if [ -z "$work" ]; then
  work=$(mktemp -d "${TMPDIR:-/tmp}/kva-model.XXXXXX")
  trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$work"

# run MODEL VARIANT DEFS... -> sets OUT (pan's output), RC; in $work/MODEL-VARIANT/.
# PAN_NP=1: search for non-progress cycles instead of safety only.
run_pan() {
  local model=$1 variant=$2
  shift 2
  local d="$work/$model-$variant"
  local build=(-DSAFETY) search=()
  if [ "${PAN_NP:-0}" = 1 ]; then build=(-DNP); search=(-l); fi
  rm -rf "$d" && mkdir -p "$d"
  cp "$here"/*.pml "$d/"
  printf '%s\n' "$@" >"$d/defs.txt"
  (
    cd "$d"
    "$SPIN" "$@" -a "$model.pml" >spin.log 2>&1 || { cat spin.log; exit 2; }
    "$CC" -O2 "${build[@]}" -DCOLLAPSE -DMEMLIM="$memlim" -o pan pan.c >cc.log 2>&1 || { cat cc.log; exit 2; }
    local t0=$(date +%s.%N)
    ./pan "${search[@]}" -m2000000 "$hashw" >pan.log 2>&1 || true
    local t1=$(date +%s.%N)
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f\n", b - a }' >time.txt
  ) || return 2
  OUT=$(cat "$d/pan.log")
  SECS=$(cat "$d/time.txt")
  DIR=$d
}

stat_line() {
  local states depth
  states=$(grep -Eo '^ *[0-9.e+]+ states, stored' <<<"$OUT" | awk '{print $1}' | head -1)
  depth=$(grep -Eo 'depth reached [0-9]+' <<<"$OUT" | awk '{print $3}' | head -1)
  echo "states=${states:-?} depth=${depth:-?} time=${SECS}s"
}

models=("$@")
fail=0
if [ ${#models[@]} -eq 0 ]; then
  models=("${ALL[@]}")
  check_refs "$here"/*.pml "$doc" || fail=1
else
  pmls=()
  for m in "${models[@]}"; do
    [ -f "$here/$m.pml" ] || { echo "check.sh: no model $m" >&2; exit 2; }
    pmls+=("$here/$m.pml")
  done
  check_refs "${pmls[@]}" || fail=1
fi
# One row per model for the table at the end; trail lengths of the mutants.
rows=()
trail_min='' trail_max=''
thousands() { sed -E ':a; s/([0-9])([0-9]{3})($| )/\1 \2\3/; ta'; }
for m in "${models[@]}"; do
  if [ "$mode" = verify ]; then defs=${VERIFY_DEFS[$m]}; else defs=${TEST_DEFS[$m]}; fi
  searches=(0)
  [ -n "${LIVENESS[$m]:-}" ] && searches=(0 1)
  for np in "${searches[@]}"; do
    name=$m
    [ "$np" = 1 ] && name="$m (non-progress)"
    # shellcheck disable=SC2086
    PAN_NP=$np run_pan "$m" "model$np" $defs || { echo "FAIL  $name: spin or cc failed"; fail=1; continue; }
    errs=$(grep -Eo 'errors: [0-9]+' <<<"$OUT" | awk '{print $2}' | head -1)
    truncated=0
    grep -Eq 'Search not completed|max search depth too small|reached -DMEMLIM|out of memory' <<<"$OUT" &&
      truncated=1
    if [ "${errs:-x}" = 0 ] && [ $truncated = 0 ]; then
      echo "PASS  $name ($defs): $(stat_line)"
      rows+=("$name|$defs|$(stat_line)")
    elif reason=$(known_failure "$m"); then
      echo "KNOWN $name ($defs): fails as listed in KNOWN_FAIL: $reason"
    else
      echo "FAIL  $name ($defs): errors=${errs:-?} truncated=$truncated $(stat_line)"
      grep -E 'violated|invalid end|non-progress cycle|error|Search not' <<<"$OUT" | head -5 |
        sed 's/^/      /'
      (cd "$DIR" && [ -f "$m.pml.trail" ] && mapfile -t d <defs.txt && "$SPIN" "${d[@]}" -t -p "$m.pml" 2>&1 |
        tail -25 | sed 's/^/      /') || true
      fail=1
    fi
  done
  for mu in ${MUTANTS[$m]}; do
    mdefs=${MUTANT_DEFS[$m/$mu]:-$defs}
    searches=(0)
    [ -n "${LIVENESS[$m]:-}" ] && searches=(1 0)
    built=1
    for np in "${searches[@]}"; do
      # shellcheck disable=SC2086
      PAN_NP=$np run_pan "$m" "$mu" $mdefs "-DMUTANT_$mu" || { built=0; break; }
      errs=$(grep -Eo 'errors: [0-9]+' <<<"$OUT" | awk '{print $2}' | head -1)
      [ "${errs:-0}" -gt 0 ] && [ -f "$DIR/$m.pml.trail" ] && break
    done
    if [ $built = 0 ]; then # DIR, OUT are still the last run's: never judge by them
      echo "FAIL  $m/$mu: spin or cc failed"
      fail=1
      continue
    fi
    if [ "${errs:-0}" -gt 0 ] && [ -f "$DIR/$m.pml.trail" ]; then
      what=$(grep -E 'assertion violated|invalid end state|non-progress cycle' <<<"$OUT" | head -1 |
        sed 's/^pan:[0-9]*: *//')
      (cd "$DIR" && mapfile -t d <defs.txt && "$SPIN" "${d[@]}" -t -p "$m.pml" >trail.txt 2>&1) || true
      steps=$(grep -Ec '^ *[0-9]+:[[:space:]]+proc' "$DIR/trail.txt" || true)
      echo "PASS  $m/$mu rejected: $what (trail: $steps steps) $(stat_line)"
      if [ -z "$trail_min" ] || [ "$steps" -lt "$trail_min" ]; then trail_min=$steps; fi
      if [ -z "$trail_max" ] || [ "$steps" -gt "$trail_max" ]; then trail_max=$steps; fi
    else
      echo "FAIL  $m/$mu: Spin found no counterexample (errors=${errs:-?})"
      fail=1
    fi
  done
done

# The table of docs/model-checking.md ("Bounds, state counts and run times"),
# this run's columns: model | bounds | states | depth | time.
echo
echo "| model | $mode bounds | states | depth | time |"
echo "|---|---|---|---|---|"
for row in "${rows[@]+"${rows[@]}"}"; do
  IFS='|' read -r m defs st <<<"$row"
  states=${st#states=}; states=${states%% *}
  depth=${st#*depth=}; depth=${depth%% *}
  secs=${st#*time=}; secs=${secs%s}
  echo "| $m | \`$defs\` | $(thousands <<<"$states") | $depth | $secs s |"
done
if [ -n "$trail_min" ]; then
  echo "mutant counterexamples: $trail_min–$trail_max steps (spin -t -p)"
fi
exit $fail
