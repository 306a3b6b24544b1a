# SPDX-License-Identifier: Apache-2.0
# ctest scenario for kvadmit-sim: each scenario runs twice with the same seed
# and must print byte-identical JSON (wall time excluded with --no-wall),
# exit 0 (every invariant held) and report "ok":true for both policies.
# Also: with the default (fast) store every later turn finds its history
# stored, so "later turns (stored)" are all the turns after a session's
# first (a history ending on a page boundary included).
# Usage: cmake -DSIM=/path/to/kvadmit-sim -P determinism.cmake
include(${CMAKE_CURRENT_LIST_DIR}/sim_run.cmake)

# No admission is preempted in the step that admitted it: the engine grants
# every admission its first chunk, and a legacy recompute that keeps a local
# hit takes the hit's pages too, or admits nothing while they do not fit.
function(check_admissions name json)
  foreach(policy legacy wait)
    string(JSON n GET "${json}" policies ${policy} preempted_at_admission)
    if(NOT n EQUAL 0)
      message(FATAL_ERROR "${name}/${policy}: ${n} requests preempted in the step that admitted them")
    endif()
  endforeach()
endfunction()

# Two runs (sim_run_twice), then check_admissions; `out` = their JSON.
function(run_twice name)
  sim_run_twice(${name} out ${ARGN})
  check_admissions(${name} "${out}")
  message(STATUS "${name}: identical, invariants ok")
  set(out "${out}" PARENT_SCOPE)
endfunction()

# The default scenario exactly as `make run` runs it (production profile,
# 8 agents whose contexts outgrow the pool, 1,800 s).
run_twice(default)
# The quiet case (--cold: sessions at their first turn), shorter.
run_twice(cold --agents 4 --duration 120 --seed 7 --cold)
# The 70B profile from a warm start (80k-104k, the former --warm default): legacy preempts, and its head waits while
# the local hit it would keep and its first chunk do not fit.
run_twice(h200_warm --profile h200-70b --warm --start-tokens 80000:104000 --agents 6 --duration 300 --seed 5)
# The 70B profile from a cold start: legacy recomputes that keep a local hit
# (--keep-local, the profile's default) are admitted and run.
run_twice(h200_keep_local --profile h200-70b --agents 6 --duration 600 --seed 5 --cold)
string(JSON kept GET "${out}" policies legacy legacy_kept_local admissions)
if(kept LESS 1)
  message(FATAL_ERROR "h200_keep_local: no legacy recompute kept a local hit")
endif()
message(STATUS "h200_keep_local: ${kept} legacy recomputes kept a local hit")
# Several engines sharing the store and the directory.
run_twice(nodes --nodes 3 --agents 20 --duration 300 --seed 2 --warm --start-tokens 80000:104000)
# Failure paths: copies fail, lookups time out, restores give up waiting.
run_twice(faults --agents 6 --duration 600 --seed 3 --cold --copy-fail-rate 0.3
  --lookup-timeout 0.001 --max-restore-wait 2 --copy-slots 2)
# Every later turn's history was stored before it began (10 minutes, about
# 150 later turns: some end on a page boundary).
run_twice(stored --agents 8 --duration 600 --seed 9 --cold)
foreach(policy legacy wait)
  string(JSON stored GET "${out}" policies ${policy} later_turns_stored)
  string(JSON later GET "${out}" policies ${policy} later_turns)
  if(NOT stored EQUAL later OR later LESS 100)
    message(FATAL_ERROR "stored/${policy}: ${stored} of ${later} later turns counted as stored")
  endif()
endforeach()
message(STATUS "stored: every later turn's history was stored")
