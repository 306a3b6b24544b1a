# SPDX-License-Identifier: Apache-2.0
# The pkg-config files (included by cmake/package.cmake, and by
# tests/package/check_pc.cmake in script mode, which checks them for
# relative, multiarch and absolute directories).
#
# kvadmit_configure_pc(OUT_DIR INSTALL_PREFIX LIBDIR INCLUDEDIR) writes
# OUT_DIR/kvadmit.pc and OUT_DIR/kvadmit-cuda.pc from cmake/*.pc.in, with
# PROJECT_VERSION, PROJECT_DESCRIPTION, KVADMIT_WITH_CUDA and the
# KVADMIT_PC_{REQUIRES,LIBS,CUDA_LIBS}_PRIVATE variables of the caller.
# LIBDIR and INCLUDEDIR are GNUInstallDirs' values, relative to the prefix
# or absolute:
#   relative LIBDIR     prefix=${pcfiledir}/.. (relocatable: an installation
#                       moved or made with --prefix still works)
#   absolute LIBDIR     prefix=INSTALL_PREFIX, libdir=LIBDIR
#   relative INCLUDEDIR includedir=${prefix}/INCLUDEDIR
#   absolute INCLUDEDIR includedir=INCLUDEDIR
set(_kva_pc_templates ${CMAKE_CURRENT_LIST_DIR})
function(kvadmit_configure_pc out_dir install_prefix libdir includedir)
  if(IS_ABSOLUTE "${libdir}")
    set(KVADMIT_PC_PREFIX "${install_prefix}")
    set(KVADMIT_PC_LIBDIR "${libdir}")
  else()
    file(RELATIVE_PATH _up "/${libdir}/pkgconfig" "/")
    string(REGEX REPLACE "/$" "" _up "${_up}")
    set(KVADMIT_PC_PREFIX "\${pcfiledir}/${_up}")
    set(KVADMIT_PC_LIBDIR "\${prefix}/${libdir}")
  endif()
  if(IS_ABSOLUTE "${includedir}")
    set(KVADMIT_PC_INCLUDEDIR "${includedir}")
  else()
    set(KVADMIT_PC_INCLUDEDIR "\${prefix}/${includedir}")
  endif()
  foreach(_pc kvadmit kvadmit-cuda)
    configure_file(${_kva_pc_templates}/${_pc}.pc.in ${out_dir}/${_pc}.pc @ONLY)
  endforeach()
endfunction()
