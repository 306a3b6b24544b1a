# SPDX-License-Identifier: Apache-2.0
# ctest scenario for kvadmit-sim's local prefix cache (--local-cache) and the
# per-turn miss breakdown, on a pool the warm histories (80k-104k, the former
# --warm default) overflow (evictions,
# preemptions). Checks:
#   - boundary (a recurrent model's cache) never leaves a shorter entry after
#     an eviction; prefix (an attention model's) does, in this scenario;
#   - the scenario reports the mode it ran;
#   - the per-turn misses add up: first turns + new + other = prompt x (1 -
#     turn_cache_share), and the wait policy (no faults) has no "other" miss.
# Usage: cmake -DSIM=/path/to/kvadmit-sim -P local_cache.cmake
include(${CMAKE_CURRENT_LIST_DIR}/sim_run.cmake)

function(run_mode mode out_var)
  sim_run(out --agents 6 --duration 300 --seed 4 --warm --start-tokens 80000:104000 --pool-pages 30000
    --local-cache ${mode})
  string(JSON got GET "${out}" scenario local_cache)
  if(NOT got STREQUAL mode)
    message(FATAL_ERROR "${mode}: scenario says local_cache ${got}")
  endif()
  set(${out_var} "${out}" PARENT_SCOPE)
endfunction()

function(check_misses mode json policy)
  string(JSON prompt GET "${json}" policies ${policy} turn_miss_tokens prompt)
  string(JSON first GET "${json}" policies ${policy} turn_miss_tokens first_turns)
  string(JSON new GET "${json}" policies ${policy} turn_miss_tokens new)
  string(JSON other GET "${json}" policies ${policy} turn_miss_tokens other)
  string(JSON share GET "${json}" policies ${policy} turn_cache_share)
  math(EXPR miss "${first} + ${new} + ${other}")
  # share is printed with 6 significant digits: compare in parts per 10^5
  math(EXPR miss_e5 "${miss} * 100000 / ${prompt}")
  if(share MATCHES "^1(\\.0*)?$")
    set(frac 100000)
  else()
    string(REGEX REPLACE "^0\\.([0-9]*)$" "\\1" frac "${share}00000")
    string(SUBSTRING "${frac}" 0 5 frac)
  endif()
  math(EXPR share_miss_e5 "100000 - ${frac}")
  math(EXPR diff "${miss_e5} - ${share_miss_e5}")
  if(diff GREATER 2 OR diff LESS -2)
    message(FATAL_ERROR "${mode}/${policy}: misses ${miss} of ${prompt} disagree with share ${share}")
  endif()
  if(policy STREQUAL "wait" AND NOT other EQUAL 0)
    message(FATAL_ERROR "${mode}/wait: ${other} tokens missed beyond first turns and new tokens")
  endif()
endfunction()

run_mode(boundary b)
run_mode(prefix p)
foreach(policy legacy wait)
  string(JSON shrunk GET "${b}" policies ${policy} local_cache shrunk_entries)
  if(NOT shrunk EQUAL 0)
    message(FATAL_ERROR "boundary/${policy}: ${shrunk} entries shrunk (a recurrent bundle is evicted whole)")
  endif()
  string(JSON shrunk GET "${p}" policies ${policy} local_cache shrunk_entries)
  if(shrunk EQUAL 0)
    message(FATAL_ERROR "prefix/${policy}: no entry shrunk: the scenario no longer evicts partially")
  endif()
  check_misses(boundary "${b}" ${policy})
  check_misses(prefix "${p}" ${policy})
endforeach()
message(STATUS "local cache modes and miss breakdown ok")
