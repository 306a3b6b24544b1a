# SPDX-License-Identifier: Apache-2.0
# ctest scenario for kvadmit-sim's table (the demo's output): when the pools
# never ran short the table must say why both columns are equal; when capacity
# decided anything it must not.
# Usage: cmake -DSIM=/path/to/kvadmit-sim -P table.cmake
include(${CMAKE_CURRENT_LIST_DIR}/sim_run.cmake)
set(note "The pools never ran short in this window")

# Cold start, a short window: the contexts stay far below the pool.
sim_exec(out --agents 4 --duration 120 --seed 7 --cold)
string(FIND "${out}" "${note}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "no pressure, but the table does not say so\n${out}")
endif()
# Warm histories on a small pool: restores wait, legacy recomputes.
sim_exec(out --agents 6 --duration 300 --seed 4 --warm --start-tokens 80000:104000 --pool-pages 30000)
string(FIND "${out}" "${note}" at)
if(NOT at EQUAL -1)
  message(FATAL_ERROR "capacity decided admissions, but the table says it never did\n${out}")
endif()
message(STATUS "table: the no-pressure note appears exactly when nothing met capacity")
