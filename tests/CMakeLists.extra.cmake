# SPDX-License-Identifier: Apache-2.0
# Extra wiring for tests that the per-file glob cannot express.
#
# The CUDA importer test links the synthetic decode kernel (a .cu file, built
# as kvadmit_cuda_testkit in cmake/cuda_targets.cmake) when CUDA is on; in
# other builds it is a plain C test that reports itself skipped (77).
# The importer lives in its own library (the stub that returns -ENOTSUP in
# builds without CUDA).
if(TARGET test_cuda_importer)
  target_link_libraries(test_cuda_importer PRIVATE kvadmit_cuda_static)
endif()
if(KVADMIT_WITH_CUDA AND TARGET test_cuda_importer)
  target_link_libraries(test_cuda_importer PRIVATE kvadmit_cuda_testkit)
  target_compile_definitions(test_cuda_importer PRIVATE KVA_TEST_DECODE_KERNEL=1)
endif()
