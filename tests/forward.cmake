# Forward pass: kernels, sessions, golden-model fixtures, `dsvisor logits`.
dsv_test(NAME test-kernels SOURCES kernels/test-kernels.c LIBS dse LABELS unit)
target_include_directories(test-kernels PRIVATE ${CMAKE_SOURCE_DIR}/engine/src)
