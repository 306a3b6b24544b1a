# SPDX-License-Identifier: Apache-2.0
# CUDA-only targets of the importers (included last by the top-level
# CMakeLists.txt): the synthetic decode kernel shared by the CUDA importer
# test and the cuda_import benchmark, and that benchmark. The CUDA importer
# itself is its own library, kvadmit_cuda (cmake/libraries.cmake).
if(NOT KVADMIT_WITH_CUDA)
  return()
endif()

add_library(kvadmit_cuda_testkit STATIC ${PROJECT_SOURCE_DIR}/bench/cuda_import/decode_kernel.cu)
target_include_directories(kvadmit_cuda_testkit PUBLIC ${PROJECT_SOURCE_DIR}/bench/cuda_import)
target_link_libraries(kvadmit_cuda_testkit PUBLIC CUDA::cudart)

if(KVADMIT_BUILD_BENCH OR KVADMIT_BUILD_TESTS)
  # Standalone C program (no Google Benchmark): exits 77 without a device.
  add_executable(kvadmit-cuda-import-bench ${PROJECT_SOURCE_DIR}/bench/cuda_import/cuda_import_bench.c)
  target_include_directories(kvadmit-cuda-import-bench PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  target_link_libraries(kvadmit-cuda-import-bench PRIVATE kvadmit_cuda_static kvadmit_cuda_testkit
    Threads::Threads)
endif()
