# SPDX-License-Identifier: Apache-2.0
# ctest scenario for kvadmit-sim: each scenario runs twice with the same seed
# and must print byte-identical JSON (wall time excluded with --no-wall),
# exit 0 (every invariant held) and report "ok":true for both policies.
# Usage: cmake -DSIM=/path/to/kvadmit-sim -P determinism.cmake
if(NOT SIM)
  message(FATAL_ERROR "pass -DSIM=<kvadmit-sim>")
endif()

function(run_twice name)
  set(outs "")
  foreach(i 1 2)
    execute_process(COMMAND ${SIM} ${ARGN} --json --no-wall --no-progress
      RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "${name}: run ${i} exited ${rc}\n${err}\n${out}")
    endif()
    list(APPEND outs "${out}")
    set(out_${i} "${out}")
  endforeach()
  if(NOT out_1 STREQUAL out_2)
    message(FATAL_ERROR "${name}: same seed, different JSON\n--- 1\n${out_1}\n--- 2\n${out_2}")
  endif()
  string(REGEX MATCHALL "\"checks\":{\"ok\":true" oks "${out_1}")
  list(LENGTH oks n)
  if(NOT n EQUAL 2)
    message(FATAL_ERROR "${name}: checks not ok for both policies\n${out_1}")
  endif()
  message(STATUS "${name}: identical, invariants ok")
endfunction()

# The default shape (production profile, cold start), shorter.
run_twice(defaults --agents 4 --duration 120 --seed 7)
# The 70B profile from a warm start: legacy preempts and keeps local hits.
run_twice(h200_warm --profile h200-70b --warm --agents 6 --duration 300 --seed 5)
# Several engines sharing the store and the directory.
run_twice(nodes --nodes 3 --agents 20 --duration 300 --seed 2 --warm)
# Failure paths: copies fail, lookups time out, restores give up waiting.
run_twice(faults --agents 6 --duration 600 --seed 3 --copy-fail-rate 0.3
  --lookup-timeout 0.001 --max-restore-wait 2 --copy-slots 2)
