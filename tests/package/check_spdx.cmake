# SPDX-License-Identifier: Apache-2.0
# Every source, header, build and script file names its licence in its first
# lines (CONVENTIONS: "An SPDX licence line first"; LICENSE is Apache-2.0).
# Usage: cmake -DSRC=<source dir> -P check_spdx.cmake
set(_missing)
file(GLOB_RECURSE _files LIST_DIRECTORIES false
  ${SRC}/*.c ${SRC}/*.h ${SRC}/*.cc ${SRC}/*.cu ${SRC}/*.py ${SRC}/*.sh ${SRC}/*.cmake
  ${SRC}/*CMakeLists.txt)
list(FILTER _files EXCLUDE REGEX "^${SRC}/(build|build-[^/]*|\\.[^/]*)/")
foreach(_f ${_files})
  file(STRINGS ${_f} _head LIMIT_COUNT 3)
  if(NOT _head MATCHES "SPDX-License-Identifier: Apache-2.0")
    file(RELATIVE_PATH _rel ${SRC} ${_f})
    list(APPEND _missing ${_rel})
  endif()
endforeach()
list(LENGTH _files _n)
if(_missing)
  string(REPLACE ";" "\n  " _missing "${_missing}")
  message(FATAL_ERROR "no SPDX-License-Identifier line in the first 3 lines of:\n  ${_missing}")
endif()
message(STATUS "SPDX: all ${_n} files carry SPDX-License-Identifier: Apache-2.0")
