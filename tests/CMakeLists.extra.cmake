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

# Metrics: the text kva_stats_format writes, parsed by the Prometheus client
# library (Debian's python3-prometheus-client; skipped without it).
add_executable(metrics_dump ${CMAKE_CURRENT_SOURCE_DIR}/metrics/metrics_dump.c)
target_link_libraries(metrics_dump PRIVATE kvadmit::kvadmit)
add_test(NAME metrics_parse COMMAND /usr/bin/python3
  ${CMAKE_CURRENT_SOURCE_DIR}/metrics/check_metrics.py $<TARGET_FILE:metrics_dump>)
set_tests_properties(metrics_parse PROPERTIES LABELS scenario SKIP_RETURN_CODE 77)
