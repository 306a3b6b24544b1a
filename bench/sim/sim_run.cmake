# SPDX-License-Identifier: Apache-2.0
# Shared by the simulator's ctest scripts (determinism, local_cache, table,
# fleetdir): run kvadmit-sim (for its table or JSON), and the same flags twice.
if(NOT SIM)
  message(FATAL_ERROR "pass -DSIM=<kvadmit-sim>")
endif()

# out_var = what one run with ARGN printed (exit 0: every invariant held).
function(sim_exec out_var)
  execute_process(COMMAND ${SIM} ${ARGN} --no-progress
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${ARGN}: exited ${rc}\n${err}\n${out}")
  endif()
  set(${out_var} "${out}" PARENT_SCOPE)
endfunction()

# out_var = the JSON of one run with ARGN.
function(sim_run out_var)
  sim_exec(out ${ARGN} --json --no-wall)
  set(${out_var} "${out}" PARENT_SCOPE)
endfunction()

# Two runs with ARGN (wall time excluded): byte-identical JSON, "ok":true for
# both policies; out_var = that JSON.
function(sim_run_twice name out_var)
  sim_run(out_1 ${ARGN})
  sim_run(out_2 ${ARGN})
  if(NOT out_1 STREQUAL out_2)
    message(FATAL_ERROR "${name}: same seed, different JSON\n--- 1\n${out_1}\n--- 2\n${out_2}")
  endif()
  string(REGEX MATCHALL "\"checks\":{\"ok\":true" oks "${out_1}")
  list(LENGTH oks n)
  if(NOT n EQUAL 2)
    message(FATAL_ERROR "${name}: checks not ok for both policies\n${out_1}")
  endif()
  set(${out_var} "${out_1}" PARENT_SCOPE)
endfunction()
