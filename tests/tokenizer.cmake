# tokenizer.json tokenizers (engine/src/tok/tok_bpe.c, bpe_*.c) and `dsvisor tokenize`.
set(DSV_TOK_ENV "DSV_FIXTURES=${DSV_FIXTURES};DSV_BUILD_DIR=${CMAKE_BINARY_DIR};DSV_SOURCE_DIR=${CMAKE_SOURCE_DIR}")

# One ctest per tokenizer.json fixture, all from one executable (the argument picks the
# tokenizer): exact ids with and without special tokens, and exact decoded text.
add_executable(test-tokenizer-hf unit/test-tokenizer-hf.c)
target_include_directories(test-tokenizer-hf PRIVATE ${CMAKE_SOURCE_DIR}/tests)
target_link_libraries(test-tokenizer-hf PRIVATE dse dsv::cjson)
foreach(name deepseek_v3 qwen2_5 llama3 mistral7b threads)
  add_test(NAME test-tokenizer-${name} COMMAND test-tokenizer-hf ${name})
  set_tests_properties(test-tokenizer-${name} PROPERTIES LABELS unit TIMEOUT 120 ENVIRONMENT "${DSV_TOK_ENV}")
endforeach()

# Each pipeline stage on small synthetic files, and the errors for bad files and text.
dsv_test(NAME test-tokenizer-bpe SOURCES unit/test-tokenizer-bpe.c LIBS dse LABELS unit TIMEOUT 60)
target_include_directories(test-tokenizer-bpe PRIVATE ${CMAKE_SOURCE_DIR}/engine/src)

# The SIMD UTF-8 validator against its byte-by-byte reference.
dsv_test(NAME test-tokenizer-utf8 SOURCES unit/test-tokenizer-utf8.c LIBS dse LABELS unit TIMEOUT 60)
target_include_directories(test-tokenizer-utf8 PRIVATE ${CMAKE_SOURCE_DIR}/engine/src)

dsv_script_test(NAME test-tokenize-cli SCRIPT ${CMAKE_SOURCE_DIR}/tests/integration/test-tokenize-cli.sh
  LABELS integration TIMEOUT 120)

# libFuzzer targets (configure with CC=clang -DDSV_FUZZ=ON): the tokenizer.json loader and
# the encoder on arbitrary bytes. A fuzz build instruments libdse itself (CMakeLists.txt).
if(DSV_FUZZ)
  foreach(fz fuzz-tokenizer-load fuzz-tokenizer-encode)
    dsv_add_fuzzer(${fz} fuzz/${fz}.c)
    target_compile_definitions(${fz} PRIVATE DSV_FIXTURES_DIR="${DSV_FIXTURES}")
    target_link_libraries(${fz} PRIVATE dse)
  endforeach()
endif()
