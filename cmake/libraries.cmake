# SPDX-License-Identifier: Apache-2.0
# The libraries (included by the top-level CMakeLists.txt). In-tree name ->
# installed file -> name in the CMake package:
#
#   kvadmit_lockfree    libkvadmit_lockfree.a   kvadmit::lockfree      reusable building blocks
#   kvadmit             libkvadmit.a            kvadmit::kvadmit_static
#   kvadmit_shared      libkvadmit.so.0.2       kvadmit::kvadmit       the public API only
#   kvadmit_cuda_static libkvadmit-cuda.a       kvadmit::cuda_static   CUDA importer
#   kvadmit_cuda        libkvadmit-cuda.so.0.2  kvadmit::cuda
#
# The in-tree static `kvadmit` keeps its name: tests, benchmarks and fuzzers
# link it and reach internals (kva__*), which the shared library hides. Every
# object is compiled with -fvisibility=hidden; only KVA_API declarations
# (kvadmit/export.h) are exported from the shared libraries, and
# --exclude-libs keeps the archives they link (lockfree) out of their
# dynamic symbol tables. The soname carries major.minor: a 0.x minor
# release may change the ABI (CHANGELOG.md); so does the symbol version
# (KVADMIT_0.2, a version script generated from project(VERSION)), so that
# two minors' libraries in one process each keep their own callers.
#
# The archives and the shared libraries are compiled separately (an OBJECT
# library per shared one): in the archives KVA_API is empty, so the public
# functions are hidden there too, and a host shared object (a plug-in, a
# Python extension) that links an archive does not re-export kvadmit's API
# nor have its calls bound to another libkvadmit.so in the process.
#
# Allocator (reservations/alloc.c, docs/embedding.md): with
# KVADMIT_WITH_JEMALLOC the libraries look up jemalloc's mallocx/tcache API
# at run time in the host process (dlsym) and use plain malloc when the
# host has no jemalloc, so they never link jemalloc, never replace the
# host's malloc and stay dlopen-able (libjemalloc.so.2 cannot be dlopen'ed
# on Debian 12: its static TLS block). KVADMIT_LINK_JEMALLOC links it
# instead, an explicit choice with both of those consequences.
option(KVADMIT_LINK_JEMALLOC
  "Link libjemalloc into the libraries (replaces the host's malloc; breaks dlopen)" OFF)

configure_file(${PROJECT_SOURCE_DIR}/cmake/version.h.in
  ${PROJECT_BINARY_DIR}/include/kvadmit/version.h @ONLY)

file(GLOB KVADMIT_LOCKFREE_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/lockfree/*.c)
file(GLOB KVADMIT_LOCKFREE_HEADERS CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/lockfree/*.h)
file(GLOB KVADMIT_ENGINE_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/reservations/*.c)
file(GLOB KVADMIT_CPU_IMPORTER_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/cuda/cpu_*.c)
list(REMOVE_ITEM KVADMIT_CPU_IMPORTER_SOURCES ${PROJECT_SOURCE_DIR}/cuda/cpu_cuda_stub.c)

set(_kva_public_includes
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
  $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/include>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)

# Linker flags of the shared libraries: archives stay private, and (outside
# sanitizer and fuzzing builds, whose runtimes resolve at program link) no
# undefined symbols except the weak CUDA reference.
# -z nodelete: dlclose never unmaps the library (nor liburcu, which it keeps
# loaded). liburcu's call_rcu thread, our thread-exit key destructor and
# queued flush callbacks outlive any engine; unmapping their code under them
# crashed Python hosts at exit, where cffi dlcloses the library.
# --version-script: every export is versioned KVADMIT_<major>.<minor>
# (tests/package/check_symbols.py checks it).
set(KVADMIT_ABI_VERSION_NODE "KVADMIT_${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR}")
set(_kva_version_script ${PROJECT_BINARY_DIR}/kvadmit.map)
file(CONFIGURE OUTPUT ${_kva_version_script} CONTENT
"${KVADMIT_ABI_VERSION_NODE} {\n  global: kva_*;\n  local: *;\n};\n")
set(_kva_shared_link_options LINKER:--exclude-libs,ALL LINKER:-z,nodelete
  LINKER:--version-script=${_kva_version_script})
if(NOT KVADMIT_SANITIZE AND NOT KVADMIT_BUILD_FUZZ)
  list(APPEND _kva_shared_link_options LINKER:--no-undefined)
endif()
# The shared libraries' link settings. RUNPATH $ORIGIN on those that need
# libkvadmit.so (CUDA, fleet): loaded by path (dlopen, ctypes) from any
# prefix, they find the core installed beside them.
function(kvadmit_shared_library_settings target)
  target_link_options(${target} PRIVATE ${_kva_shared_link_options})
  set_property(TARGET ${target} APPEND PROPERTY LINK_DEPENDS ${_kva_version_script})
  set_target_properties(${target} PROPERTIES
    VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
  if(NOT target STREQUAL "kvadmit_shared")
    set_target_properties(${target} PROPERTIES INSTALL_RPATH "$ORIGIN")
  endif()
endfunction()
# Compiled into the archives: KVA_API empty (export.h keeps a definition
# it is given), so -fvisibility=hidden hides the public functions as well
# (a static link still resolves them; no shared object re-exports them).
set(KVADMIT_ARCHIVE_DEFINITIONS KVA_API=)
# Installed archives keep machine code beside the link-time IR
# (cmake/optimization.cmake), so hosts link them with or without -flto.
function(kvadmit_archive_settings target)
  target_compile_options(${target} PRIVATE ${KVADMIT_ARCHIVE_LTO_OPTIONS})
endfunction()

# lockfree/ is reusable on its own: its own target, no LLM vocabulary.
add_library(kvadmit_lockfree STATIC ${KVADMIT_LOCKFREE_SOURCES})
add_library(kvadmit::lockfree ALIAS kvadmit_lockfree)
set_target_properties(kvadmit_lockfree PROPERTIES POSITION_INDEPENDENT_CODE ON
  C_VISIBILITY_PRESET hidden EXPORT_NAME lockfree)
kvadmit_archive_settings(kvadmit_lockfree)
# Its headers are included as <kvadmit/lockfree/NAME.h>, in the tree as
# once installed: the build tree's include/kvadmit/lockfree links to
# lockfree/, so no bare <hash.h> or <slab.h> reaches an include path.
file(MAKE_DIRECTORY ${PROJECT_BINARY_DIR}/include/kvadmit)
file(CREATE_LINK ${PROJECT_SOURCE_DIR}/lockfree ${PROJECT_BINARY_DIR}/include/kvadmit/lockfree
  SYMBOLIC)
target_include_directories(kvadmit_lockfree PUBLIC
  $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/include>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_link_libraries(kvadmit_lockfree PUBLIC PkgConfig::kvadmit_URCU Threads::Threads)
if(KVADMIT_FAULT_INJECTION) # the page pool's claim hook (pagepool.h)
  target_compile_definitions(kvadmit_lockfree PUBLIC KVA_FAULT_INJECTION=1)
endif()

# The engine and the CPU importer: the archive, and the shared library from
# its own objects (KVA_API exported).
function(_kva_engine_settings target)
  set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE ON C_VISIBILITY_PRESET hidden)
  target_include_directories(${target} PUBLIC ${_kva_public_includes}
    PRIVATE ${PROJECT_SOURCE_DIR}/reservations ${PROJECT_SOURCE_DIR}/cuda)
  target_link_libraries(${target} PRIVATE kvadmit_lockfree ${CMAKE_DL_LIBS} PUBLIC Threads::Threads)
  if(KVADMIT_WITH_JEMALLOC AND KVADMIT_LINK_JEMALLOC)
    target_link_libraries(${target} PRIVATE PkgConfig::kvadmit_JEMALLOC)
    target_compile_definitions(${target} PRIVATE KVA_WITH_JEMALLOC=1)
  elseif(KVADMIT_WITH_JEMALLOC)
    # Only jemalloc's header (its MALLOCX_* flag macros); the functions are
    # found at run time.
    target_include_directories(${target} PRIVATE ${kvadmit_JEMALLOC_INCLUDE_DIRS})
    target_compile_definitions(${target} PRIVATE KVA_WITH_JEMALLOC=1 KVA_JEMALLOC_RUNTIME=1)
  endif()
  if(KVADMIT_FAULT_INJECTION)
    target_compile_definitions(${target} PUBLIC KVA_FAULT_INJECTION=1)
  endif()
endfunction()
add_library(kvadmit STATIC ${KVADMIT_ENGINE_SOURCES} ${KVADMIT_CPU_IMPORTER_SOURCES})
set_target_properties(kvadmit PROPERTIES EXPORT_NAME kvadmit_static)
_kva_engine_settings(kvadmit)
kvadmit_archive_settings(kvadmit)
target_compile_definitions(kvadmit PRIVATE ${KVADMIT_ARCHIVE_DEFINITIONS})

add_library(kvadmit_objects OBJECT ${KVADMIT_ENGINE_SOURCES} ${KVADMIT_CPU_IMPORTER_SOURCES})
_kva_engine_settings(kvadmit_objects)
add_library(kvadmit_shared SHARED $<TARGET_OBJECTS:kvadmit_objects>)
add_library(kvadmit::kvadmit ALIAS kvadmit_shared)
set_target_properties(kvadmit_shared PROPERTIES OUTPUT_NAME kvadmit EXPORT_NAME kvadmit)
target_include_directories(kvadmit_shared PUBLIC ${_kva_public_includes})
target_link_libraries(kvadmit_shared PRIVATE kvadmit_lockfree ${CMAKE_DL_LIBS} PUBLIC Threads::Threads)
kvadmit_shared_library_settings(kvadmit_shared)
if(KVADMIT_WITH_JEMALLOC AND KVADMIT_LINK_JEMALLOC)
  target_link_libraries(kvadmit_shared PRIVATE PkgConfig::kvadmit_JEMALLOC)
endif()

# The CUDA importer, its own library so that the core never needs libcudart.
# Built in every configuration: without CUDA from the stub (create returns
# -ENOTSUP), so hosts link it the same way everywhere.
if(KVADMIT_WITH_CUDA)
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES OR CMAKE_CUDA_ARCHITECTURES STREQUAL "52")
    set(CMAKE_CUDA_ARCHITECTURES 90) # Hopper (H100/H200); override on the command line
  endif()
  file(GLOB _kva_cuda_sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/cuda/cuda_*.c)
else()
  set(_kva_cuda_sources ${PROJECT_SOURCE_DIR}/cuda/cpu_cuda_stub.c)
endif()
add_library(kvadmit_cuda_static STATIC ${_kva_cuda_sources})
add_library(kvadmit::cuda_static ALIAS kvadmit_cuda_static)
set_target_properties(kvadmit_cuda_static PROPERTIES OUTPUT_NAME kvadmit-cuda
  POSITION_INDEPENDENT_CODE ON C_VISIBILITY_PRESET hidden EXPORT_NAME cuda_static)
target_include_directories(kvadmit_cuda_static PRIVATE ${PROJECT_SOURCE_DIR}/cuda)
target_compile_definitions(kvadmit_cuda_static PRIVATE ${KVADMIT_ARCHIVE_DEFINITIONS})
kvadmit_archive_settings(kvadmit_cuda_static)
# The importer's shared helpers (cpu_import_common.c) come from libkvadmit.a.
target_link_libraries(kvadmit_cuda_static PUBLIC kvadmit PRIVATE kvadmit_lockfree)

add_library(kvadmit_cuda_objects OBJECT ${_kva_cuda_sources})
set_target_properties(kvadmit_cuda_objects PROPERTIES POSITION_INDEPENDENT_CODE ON
  C_VISIBILITY_PRESET hidden)
target_include_directories(kvadmit_cuda_objects PRIVATE ${PROJECT_SOURCE_DIR}/cuda)
target_link_libraries(kvadmit_cuda_objects PRIVATE kvadmit_shared kvadmit_lockfree)
add_library(kvadmit_cuda SHARED $<TARGET_OBJECTS:kvadmit_cuda_objects>)
add_library(kvadmit::cuda ALIAS kvadmit_cuda)
set_target_properties(kvadmit_cuda PROPERTIES OUTPUT_NAME kvadmit-cuda EXPORT_NAME cuda)
target_link_libraries(kvadmit_cuda PUBLIC kvadmit_shared)
kvadmit_shared_library_settings(kvadmit_cuda)
# Always NEEDED (also the stub, which calls nothing in it): loading the CUDA
# library brings the core into the same scope, which resolves the core's weak
# KVA_FEATURE_CUDA_IMPORTER reference (dlopen, Python ctypes).
target_link_options(kvadmit_cuda PRIVATE LINKER:--no-as-needed)
if(KVADMIT_WITH_CUDA)
  # libkvadmit.so hides the importers' shared helpers, so the shared CUDA
  # library has its own copy, from an archive so that --exclude-libs keeps
  # it private (it also defines kva_cpu_importer_fails, the core's export).
  add_library(kvadmit_import_common STATIC ${PROJECT_SOURCE_DIR}/cuda/cpu_import_common.c)
  set_target_properties(kvadmit_import_common PROPERTIES POSITION_INDEPENDENT_CODE ON
    C_VISIBILITY_PRESET hidden)
  target_include_directories(kvadmit_import_common PRIVATE ${PROJECT_SOURCE_DIR}/cuda)
  target_link_libraries(kvadmit_import_common PRIVATE kvadmit_shared kvadmit_lockfree)
  target_link_libraries(kvadmit_cuda PRIVATE kvadmit_import_common kvadmit_lockfree CUDA::cudart)
  target_link_libraries(kvadmit_cuda_static PRIVATE CUDA::cudart)
  target_link_libraries(kvadmit_cuda_objects PRIVATE CUDA::cudart)
  target_compile_definitions(kvadmit_cuda_objects PRIVATE KVADMIT_HAVE_CUDA=1)
  foreach(_t kvadmit_cuda kvadmit_cuda_static)
    target_compile_definitions(${_t} PUBLIC $<BUILD_INTERFACE:KVADMIT_HAVE_CUDA=1>)
  endforeach()
endif()
