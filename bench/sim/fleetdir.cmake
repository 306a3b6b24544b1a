# SPDX-License-Identifier: Apache-2.0
# ctest sim_fleet_directory: kvadmit-sim --directory fleet (the real fleet
# directory over inproc://, bench/sim/fleetdir.c). Each scenario runs twice
# in fleet mode and must print byte-identical JSON with every invariant ok;
# then its results are compared with the modelled directory's for the same
# seed. The cache share, turns and later turns restored must match within
# 1% of the modelled value, a count or a share - they matched exactly when this test
# was written. Timings may differ slightly: a lookup's latency is drawn per
# agent in fleet mode, per token in the modelled one (fleetdir.c says why).
# Usage: cmake -DSIM=/path/to/kvadmit-sim -P fleetdir.cmake
include(${CMAKE_CURRENT_LIST_DIR}/sim_run.cmake)

# |a - b| <= tol% of |b| (at least one unit of the sixth decimal)
function(close name a b tol)
  if(a STREQUAL b)
    return()
  endif()
  # CMake has no floating point: compare in millionths
  foreach(v a b)
    string(REGEX MATCH "^([0-9]+)(\\.([0-9]*))?$" _m "${${v}}")
    if(NOT _m)
      message(FATAL_ERROR "${name}: not a number: ${${v}}")
    endif()
    set(_frac "${CMAKE_MATCH_3}000000")
    string(SUBSTRING "${_frac}" 0 6 _frac)
    math(EXPR ${v}_u "${CMAKE_MATCH_1} * 1000000 + 1${_frac} - 1000000")
  endforeach()
  math(EXPR d "${a_u} - ${b_u}")
  if(d LESS 0)
    math(EXPR d "-${d}")
  endif()
  # relative to the modelled value (a share too, not 1% of 1.0); at least
  # one unit of the sixth decimal
  math(EXPR lim "${b_u} * ${tol} / 100")
  if(lim LESS 1)
    set(lim 1)
  endif()
  if(d GREATER lim)
    message(FATAL_ERROR "${name}: fleet ${a}, modelled ${b}: more than ${tol}% apart")
  endif()
endfunction()

function(compare name)
  sim_run_twice("${name} (fleet directory)" f1 ${ARGN} --directory fleet)
  sim_run(m ${ARGN})
  foreach(pol legacy wait)
    foreach(key cache_token_share later_turns_restored later_turns turns_completed)
      string(JSON fv GET "${f1}" policies ${pol} ${key})
      string(JSON mv GET "${m}" policies ${pol} ${key})
      close("${name} ${pol} ${key}" "${fv}" "${mv}" 1)
    endforeach()
    string(JSON fs GET "${f1}" policies ${pol} cache_token_share)
    string(JSON fr GET "${f1}" policies ${pol} later_turns_restored)
    message(STATUS "${name} ${pol}: identical runs; cache share ${fs}, later turns restored ${fr} (modelled: same within 1%)")
  endforeach()
endfunction()

# The default profile (recurrent state: boundary local cache), cold start.
compare(nodes4_boundary --nodes 4 --agents 40 --duration 600 --seed 3 --cold)
# An attention prefix cache, warm histories near the pool: evictions,
# preemptions, re-lookups.
compare(nodes4_prefix_warm --nodes 4 --agents 40 --duration 600 --seed 5 --warm --start-tokens 80000:104000 --local-cache prefix)
