# SPDX-License-Identifier: Apache-2.0
# Link-time optimization (included by the top-level CMakeLists.txt before the
# libraries).
#
# Why: a blocked step calls about 25 small functions spread over the engine's
# files (the queue's emptiness, the head's timers, the grant, the inboxes...),
# one concept per file. Compiled a file at a time each stays a call, and
# `BM_step_blocked/1000000` cost 52-91 ns on the reference 2-vCPU VM; optimized
# across files at link time the same source costs 25-29 ns (bench/README.md).
#
# Applies to optimized GCC builds (Release, RelWithDebInfo) unless
# -DKVADMIT_LTO=OFF; never to sanitizer and fuzzing builds (their runtimes
# instrument each file as it is compiled), nor to other compilers: clang 14's
# archives would hold bitcode only, which no other toolchain links. Tests,
# benchmarks and the installed libraries are built the same way, so what is
# tested is what is measured.
#
# The installed archives keep machine code beside GCC's IR
# (-ffat-lto-objects, KVADMIT_ARCHIVE_LTO_OPTIONS): a host that links them
# without -flto, or with another compiler, links the plain code; one that
# links with -flto gets the cross-file inlining too.
#
# Where it applies is decided at every configure, not cached with the option:
# an existing build folder switched to Debug or a sanitizer drops it.
option(KVADMIT_LTO "Link-time optimization where it applies (optimized GCC builds)" ON)

set(KVADMIT_ARCHIVE_LTO_OPTIONS "")
if(KVADMIT_LTO AND CMAKE_C_COMPILER_ID STREQUAL "GNU" AND NOT KVADMIT_SANITIZE
   AND NOT KVADMIT_BUILD_FUZZ AND CMAKE_BUILD_TYPE MATCHES "^(Release|RelWithDebInfo)$")
  include(CheckIPOSupported)
  check_ipo_supported(RESULT _kva_ipo OUTPUT _kva_ipo_why LANGUAGES C CXX)
  if(_kva_ipo)
    set(CMAKE_INTERPROCEDURAL_OPTIMIZATION ON)
    set(KVADMIT_ARCHIVE_LTO_OPTIONS -ffat-lto-objects)
  else()
    message(WARNING "KVADMIT_LTO: this toolchain cannot optimize at link time; "
                    "building without it (${_kva_ipo_why})")
  endif()
endif()
