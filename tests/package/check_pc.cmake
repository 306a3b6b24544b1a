# SPDX-License-Identifier: Apache-2.0
# kvadmit.pc and kvadmit-cuda.pc (cmake/pkgconfig.cmake) for relative,
# multiarch and absolute GNUInstallDirs directories: each case writes the
# files where an installation would have them, under WORK, and asks
# pkg-config for libdir, includedir and --cflags --libs (the absolute ones
# must appear as they are, never appended to the prefix).
# Usage: cmake -DSRC=<source dir> -DPKG_CONFIG=<pkg-config> -DWORK=<scratch dir> -P check_pc.cmake
include(${SRC}/cmake/pkgconfig.cmake)
set(PROJECT_VERSION 0.0.1)
set(PROJECT_DESCRIPTION "check_pc")
set(KVADMIT_WITH_CUDA OFF)
set(KVADMIT_PC_REQUIRES_PRIVATE "")
set(KVADMIT_PC_LIBS_PRIVATE "-lkvadmit_lockfree")
set(KVADMIT_PC_CUDA_LIBS_PRIVATE "")
file(REMOVE_RECURSE ${WORK})

set(_fail "")
# case: prefix libdir includedir (absolute ones under WORK)
foreach(_case "rel;lib;include" "multiarch;lib/x86_64-linux-gnu;include"
    "abs;${WORK}/abs-lib/lib;${WORK}/abs-dev/include" "abslib;${WORK}/abslib-lib/lib;include"
    "absinc;lib;${WORK}/absinc-dev/include")
  list(GET _case 0 _name)
  list(GET _case 1 _libdir)
  list(GET _case 2 _incdir)
  set(_prefix ${WORK}/${_name})
  foreach(_d _libdir _incdir)
    if(IS_ABSOLUTE "${${_d}}")
      set(${_d}_full "${${_d}}")
    else()
      set(${_d}_full "${_prefix}/${${_d}}")
    endif()
  endforeach()
  kvadmit_configure_pc(${_libdir_full}/pkgconfig ${_prefix} ${_libdir} ${_incdir})
  set(ENV{PKG_CONFIG_PATH} ${_libdir_full}/pkgconfig)
  foreach(_pc kvadmit kvadmit-cuda)
    foreach(_var libdir includedir)
      execute_process(COMMAND ${PKG_CONFIG} --variable=${_var} ${_pc} RESULT_VARIABLE _rc
        OUTPUT_VARIABLE _got OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_VARIABLE _err)
      cmake_path(NORMAL_PATH _got)
      string(REGEX REPLACE "/$" "" _got "${_got}")
      if(_var STREQUAL "libdir")
        set(_want ${_libdir_full})
      else()
        set(_want ${_incdir_full})
      endif()
      message(STATUS "${_name} ${_pc}: ${_var}=${_got}")
      if(NOT _rc EQUAL 0 OR NOT _got STREQUAL _want)
        string(APPEND _fail "\n  ${_name}: ${_pc} ${_var} is '${_got}' ${_err}, expected '${_want}'")
      endif()
    endforeach()
    execute_process(COMMAND ${PKG_CONFIG} --cflags --libs ${_pc}
      OUTPUT_VARIABLE _flags OUTPUT_STRIP_TRAILING_WHITESPACE)
    message(STATUS "${_name} ${_pc}: ${_flags}")
    # The flags name each directory once: ${prefix}/<absolute dir> would
    # repeat the prefix.
    if(_flags MATCHES "${_prefix}/?${WORK}")
      string(APPEND _fail "\n  ${_name}: ${_pc} flags '${_flags}' put an absolute directory under the prefix")
    endif()
  endforeach()
endforeach()
if(_fail)
  message(FATAL_ERROR "pkg-config files:${_fail}")
endif()
message(STATUS "pkg-config files: relative, multiarch and absolute directories OK")
