# Forward pass: kernels, sessions, golden-model fixtures, `dsvisor logits`.
dsv_test(NAME test-kernels SOURCES kernels/test-kernels.c LIBS dse dsv_gguf_writer LABELS unit)
target_include_directories(test-kernels PRIVATE ${CMAKE_SOURCE_DIR}/engine/src)
dsv_test(NAME test-kernels-kv SOURCES kernels/test-kernels-kv.c LIBS dse LABELS unit)
target_include_directories(test-kernels-kv PRIVATE ${CMAKE_SOURCE_DIR}/engine/src)
dsv_test(NAME test-kernels-kv-group SOURCES kernels/test-kernels-kv-group.c LIBS dse LABELS unit)
target_include_directories(test-kernels-kv-group PRIVATE ${CMAKE_SOURCE_DIR}/engine/src)

# Golden models: one ctest per fixture (test-model-<fixture>), each checking DSV_CPU=scalar
# and the detected level against the fixture's reference logits and greedy ids.
add_executable(test-model models/test-model.c)
target_include_directories(test-model PRIVATE ${CMAKE_SOURCE_DIR}/tests)
target_link_libraries(test-model PRIVATE dse)
foreach(fx llama-bf16-linear-rope llama3-rope-gqa qwen2-bf16-tied qwen2-awq-g32 llama-gptq-sym
           llama-gptq-actorder-asym deepseek-v2-mla-qlora-yarn deepseek-v2-lite-sharded
           deepseek-v2-group-limited deepseek-v3-noaux-yarn deepseek-v3-fp8-mtp)
  string(REPLACE "-" "_" fx_case ${fx})
  add_test(NAME test-model-${fx} COMMAND test-model ${fx_case})
  set_tests_properties(test-model-${fx} PROPERTIES LABELS "integration" TIMEOUT 300
    ENVIRONMENT "DSV_FIXTURES=${DSV_FIXTURES};DSV_BUILD_DIR=${CMAKE_BINARY_DIR};DSV_SOURCE_DIR=${CMAKE_SOURCE_DIR}")
endforeach()

# DeepSeek MLA: latent-only KV cache size and absorbed == naive attention.
dsv_test(NAME test-model-mla SOURCES models/test-mla.c LIBS dse LABELS integration)
target_include_directories(test-model-mla PRIVATE ${CMAKE_SOURCE_DIR}/engine/src)

# Long-context attention: the split form against the short one, invariant to calls and
# threads; over an f32, a bf16 (grouped GQA kernels) and an int8 cache.
dsv_test(NAME test-attn-split SOURCES models/test-attn-split.c LIBS dse LABELS integration)
target_include_directories(test-attn-split PRIVATE ${CMAKE_SOURCE_DIR}/engine/src)
add_test(NAME test-attn-split-kv-int8 COMMAND test-attn-split)
set_tests_properties(test-attn-split-kv-int8 PROPERTIES LABELS "integration" TIMEOUT 300 SKIP_RETURN_CODE 77
  ENVIRONMENT "DSV_KV=int8;DSV_FIXTURES=${DSV_FIXTURES};DSV_BUILD_DIR=${CMAKE_BINARY_DIR};DSV_SOURCE_DIR=${CMAKE_SOURCE_DIR}")
add_test(NAME test-attn-split-kv-bf16 COMMAND test-attn-split)
set_tests_properties(test-attn-split-kv-bf16 PROPERTIES LABELS "integration" TIMEOUT 300 SKIP_RETURN_CODE 77
  ENVIRONMENT "DSV_KV=bf16;DSV_FIXTURES=${DSV_FIXTURES};DSV_BUILD_DIR=${CMAKE_BINARY_DIR};DSV_SOURCE_DIR=${CMAKE_SOURCE_DIR}")

# MoE routing on hand-worked cases.
dsv_test(NAME test-forward-moe SOURCES unit/test-forward-moe.c LIBS dse LABELS unit)
target_include_directories(test-forward-moe PRIVATE ${CMAKE_SOURCE_DIR}/engine/src)

# `dsvisor logits` on a fixture folder, against ref/logits.f32 and ref/generated_ids.json.
dsv_test(NAME test-forward-logits-cli SOURCES integration/test-forward-logits-cli.c LABELS integration)
add_dependencies(test-forward-logits-cli dsvisor)

# Re-quantized (bf16, int8, int4) conversions through the forward pass, looser tolerances.
dsv_test(NAME test-model-requant SOURCES models/test-model-requant.c LIBS dse LABELS integration)

# Session API contract on fixtures (limits, reset, chunking, thread counts).
dsv_test(NAME test-forward-session SOURCES models/test-forward-session.c LIBS dse LABELS integration)

# MoE fixtures (stored, int8, int4; int8 and f32 activations) bitwise equal on 1, 2, 3 threads.
dsv_test(NAME test-moe-threads SOURCES models/test-moe-threads.c LIBS dse LABELS integration)
