# GGUF import: the parser's invariants, dequantisation against ggml's formulas, and the
# model fixtures written as GGUF through the converter and the forward pass.
add_library(dsv_gguf_writer STATIC gguf/gguf-writer.c gguf/gguf-ref.c gguf/gguf-from-hf.c)
target_include_directories(dsv_gguf_writer PUBLIC ${CMAKE_SOURCE_DIR}/tests/gguf ${CMAKE_SOURCE_DIR}/engine/src)
target_link_libraries(dsv_gguf_writer PUBLIC dse m)

dsv_test(NAME test-gguf-file SOURCES unit/test-gguf-file.c LIBS dsv_gguf_writer LABELS unit)
dsv_test(NAME test-gguf-dequant SOURCES unit/test-gguf-dequant.c LIBS dsv_gguf_writer LABELS unit)
dsv_test(NAME test-model-gguf SOURCES models/test-model-gguf.c LIBS dsv_gguf_writer LABELS integration)
