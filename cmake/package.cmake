# SPDX-License-Identifier: Apache-2.0
# Installation: libraries, headers (the generated kvadmit/version.h too, and
# lockfree/'s under kvadmit/lockfree for kvadmit::lockfree), the CMake package
# (kvadmitConfig.cmake, kvadmitConfigVersion.cmake, kvadmitTargets*.cmake)
# and the pkg-config files. docs/embedding.md says how hosts consume them;
# tests/consumer/ builds consumers against a real installation.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(KVADMIT_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/kvadmit CACHE STRING
  "Where kvadmitConfig.cmake is installed, relative to the prefix")

install(TARGETS kvadmit_shared kvadmit kvadmit_lockfree kvadmit_cuda kvadmit_cuda_static
  EXPORT kvadmitTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} NAMELINK_COMPONENT Development
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/kvadmit DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_BINARY_DIR}/include/kvadmit/version.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kvadmit)
install(FILES ${KVADMIT_LOCKFREE_HEADERS} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kvadmit/lockfree)

install(EXPORT kvadmitTargets NAMESPACE kvadmit:: DESTINATION ${KVADMIT_INSTALL_CMAKEDIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/kvadmitConfig.cmake.in
  ${PROJECT_BINARY_DIR}/package/kvadmitConfig.cmake
  INSTALL_DESTINATION ${KVADMIT_INSTALL_CMAKEDIR})
# 0.x: a minor release may break the ABI, so only the same minor series matches.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/package/kvadmitConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/package/kvadmitConfig.cmake
  ${PROJECT_BINARY_DIR}/package/kvadmitConfigVersion.cmake
  DESTINATION ${KVADMIT_INSTALL_CMAKEDIR})

# pkg-config. Libs.private/Requires.private are what `pkg-config --static`
# adds for libkvadmit.a: its companion archive, liburcu, libdl (dlsym of the
# allocator lookup), threads, and jemalloc only when linked explicitly.
set(KVADMIT_PC_LIBS_PRIVATE "-lkvadmit_lockfree -lpthread")
if(CMAKE_DL_LIBS)
  string(APPEND KVADMIT_PC_LIBS_PRIVATE " -l${CMAKE_DL_LIBS}")
endif()
set(KVADMIT_PC_REQUIRES_PRIVATE "liburcu-memb liburcu-cds")
if(KVADMIT_WITH_JEMALLOC AND KVADMIT_LINK_JEMALLOC)
  string(APPEND KVADMIT_PC_REQUIRES_PRIVATE " jemalloc")
endif()
set(KVADMIT_PC_CUDA_LIBS_PRIVATE "")
if(KVADMIT_WITH_CUDA)
  # libcudart from the toolkit (no .pc file of its own in /usr/local/cuda).
  get_filename_component(_kva_cudart_dir "${CUDA_cudart_LIBRARY}" DIRECTORY)
  set(KVADMIT_PC_CUDA_LIBS_PRIVATE "-L${_kva_cudart_dir} -lcudart")
endif()
# Relocatable where the directories are relative (cmake/pkgconfig.cmake).
include(${PROJECT_SOURCE_DIR}/cmake/pkgconfig.cmake)
kvadmit_configure_pc(${PROJECT_BINARY_DIR}/package ${CMAKE_INSTALL_PREFIX}
  ${CMAKE_INSTALL_LIBDIR} ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_BINARY_DIR}/package/kvadmit.pc ${PROJECT_BINARY_DIR}/package/kvadmit-cuda.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

install(FILES ${PROJECT_SOURCE_DIR}/LICENSE ${PROJECT_SOURCE_DIR}/CHANGELOG.md
  ${PROJECT_SOURCE_DIR}/docs/embedding.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
