# tokenizer.json tokenizers (engine/src/tok/tok_bpe.c, bpe_*.c) and `dsvisor tokenize`.
set(DSV_TOK_ENV "DSV_FIXTURES=${DSV_FIXTURES};DSV_BUILD_DIR=${CMAKE_BINARY_DIR};DSV_SOURCE_DIR=${CMAKE_SOURCE_DIR}")

# One ctest per tokenizer.json fixture, all from one executable (the argument picks the
# tokenizer): exact ids with and without special tokens, and exact decoded text.
add_executable(test-tokenizer-hf unit/test-tokenizer-hf.c)
target_include_directories(test-tokenizer-hf PRIVATE ${CMAKE_SOURCE_DIR}/tests)
target_link_libraries(test-tokenizer-hf PRIVATE dse dsv::cjson)
foreach(name deepseek_v3 qwen2_5 llama3 mistral7b)
  add_test(NAME test-tokenizer-${name} COMMAND test-tokenizer-hf ${name})
  set_tests_properties(test-tokenizer-${name} PROPERTIES LABELS unit TIMEOUT 120 ENVIRONMENT "${DSV_TOK_ENV}")
endforeach()

dsv_script_test(NAME test-tokenize-cli SCRIPT ${CMAKE_SOURCE_DIR}/tests/integration/test-tokenize-cli.sh
  LABELS integration TIMEOUT 120)
