# Engine speed. The kernels' tests (matvec, matmul, quantize_xq, matmul_xq at
# every level against their _ref twins) are in test-kernels (forward.cmake); here the
# benchmark program itself runs end to end on a one-layer preset model.
dsv_script_test(NAME test-bench-model SCRIPT ${CMAKE_SOURCE_DIR}/tests/integration/test-bench-model.sh
  LABELS slow TIMEOUT 900)
# dsvisor-bench spec: verification cost, n-gram acceptance and speed-up, end to end.
dsv_script_test(NAME test-bench-spec SCRIPT ${CMAKE_SOURCE_DIR}/tests/integration/test-bench-spec.sh
  LABELS slow TIMEOUT 900)
