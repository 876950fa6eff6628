# GGUF import: the parser's invariants, dequantisation against ggml's formulas, and the
# model fixtures written as GGUF through the converter and the forward pass.
add_library(dsv_gguf_writer STATIC ${CMAKE_SOURCE_DIR}/bench/gguf_writer.c ${CMAKE_SOURCE_DIR}/bench/gguf_model.c
            gguf/gguf-ref.c gguf/gguf-from-hf.c)
target_include_directories(dsv_gguf_writer PUBLIC ${CMAKE_SOURCE_DIR}/tests/gguf ${CMAKE_SOURCE_DIR}/bench
                           ${CMAKE_SOURCE_DIR}/engine/src ${CMAKE_SOURCE_DIR}/engine/include)
target_link_libraries(dsv_gguf_writer PUBLIC dse m)

dsv_test(NAME test-gguf-file SOURCES unit/test-gguf-file.c LIBS dsv_gguf_writer LABELS unit)
dsv_test(NAME test-gguf-dequant SOURCES unit/test-gguf-dequant.c LIBS dsv_gguf_writer LABELS unit)
dsv_test(NAME test-model-gguf SOURCES models/test-model-gguf.c LIBS dsv_gguf_writer LABELS integration)

# libFuzzer target for the GGUF reader (scripts/fuzz.sh; cmake -DDSV_FUZZ=ON with CC=clang).
if(DSV_FUZZ)
  dsv_add_fuzzer(fuzz-gguf fuzz/fuzz-gguf.c)
  target_include_directories(fuzz-gguf PRIVATE ${CMAKE_SOURCE_DIR}/engine/src)
  target_link_libraries(fuzz-gguf PRIVATE dse)
  dsv_add_fuzzer(fuzz-gguf-import fuzz/fuzz-gguf-import.c)
  target_include_directories(fuzz-gguf-import PRIVATE ${CMAKE_SOURCE_DIR}/engine/src)
  target_link_libraries(fuzz-gguf-import PRIVATE dse)
endif()

dsv_test(NAME test-gguf-tokenizer SOURCES unit/test-gguf-tokenizer.c LIBS dsv_gguf_writer dsv::cjson LABELS unit)

# gguf-from-hf: the fixture writer as a command, for bench/gguf_vs_llamacpp.sh.
add_executable(gguf-from-hf gguf/gguf-from-hf-cli.c)
target_link_libraries(gguf-from-hf PRIVATE dsv_gguf_writer)

# The command line on GGUF files (convert, logits through the cache, verify, a broken file).
dsv_script_test(NAME test-gguf-cli SCRIPT ${CMAKE_SOURCE_DIR}/tests/integration/gguf-cli.sh LABELS integration TIMEOUT 120)
add_dependencies(gguf-from-hf dsvisor) # the script runs both

# dsvisor-bench gguf: a preset's GGUF, imported and benchmarked through the reader.
dsv_script_test(NAME test-bench-gguf SCRIPT ${CMAKE_SOURCE_DIR}/tests/integration/test-bench-gguf.sh
  LABELS slow TIMEOUT 900)
