# Structured output (engine/src/grammar) and `dsvisor grammar`.

# Per-keyword accept/reject cases, compile errors naming keyword and pointer, and the
# token-trie mask against its per-token scan twin on random states of real vocabularies
# and in the keys of the corpus's big objects (cJSON reads the corpus files).
dsv_test(NAME test-grammar SOURCES unit/test-grammar.c LIBS dse dsv::cjson LABELS unit TIMEOUT 300)
target_include_directories(test-grammar PRIVATE ${CMAKE_SOURCE_DIR}/engine/src)

# Composed grammars: the tool-call syntaxes of DeepSeek-V3, Hermes and Llama 3.1 walked
# through the masks with each family's fixture tokenizer; special tokens by id only.
dsv_test(NAME test-grammar-compose SOURCES unit/test-grammar-compose.c LIBS dse LABELS unit TIMEOUT 300)
target_include_directories(test-grammar-compose PRIVATE ${CMAKE_SOURCE_DIR}/engine/src)

# dsvisor grammar --composed --check: a forced DeepSeek-V3 call through the fixture
# tokenizer's masks from the command line; errors naming the part.
dsv_script_test(NAME test-grammar-composed-cli SCRIPT ${CMAKE_SOURCE_DIR}/tests/integration/test-grammar-composed-cli.sh
                LABELS unit TIMEOUT 120)

# Regexes, GBNF and choice lists: accept/reject per construct, refusals naming it.
dsv_test(NAME test-grammar-text SOURCES unit/test-grammar-text.c LIBS dse LABELS unit)

# The whole JSON Schema corpus (fixtures/json-schema) through `dsvisor grammar --check`
# with the bundled model's tokenizer: per-dataset compile, validation and invalidation
# counts; fails on any wrong judgement not listed with its reason in grammar-corpus.known.
add_test(NAME test-grammar-corpus COMMAND python3 ${CMAKE_SOURCE_DIR}/tests/integration/test-grammar-corpus.py
  ${CMAKE_SOURCE_DIR}/models/default/tokenizer.model ${CMAKE_SOURCE_DIR}/tests/grammar-corpus.known)
set_tests_properties(test-grammar-corpus PROPERTIES LABELS integration TIMEOUT 1800 SKIP_RETURN_CODE 77
  ENVIRONMENT "DSV_FIXTURES=${DSV_FIXTURES};DSV_BUILD_DIR=${CMAKE_BINARY_DIR};DSV_SOURCE_DIR=${CMAKE_SOURCE_DIR}")

# libFuzzer targets (configure with CC=clang -DDSV_FUZZ=ON) for the three text parsers of
# the grammar engine: JSON Schema, GBNF and regex, each [NUL output bytes for a matcher].
if(DSV_FUZZ)
  foreach(kind schema gbnf regex)
    dsv_add_fuzzer(fuzz-grammar-${kind} fuzz/fuzz-grammar.c)
    target_link_libraries(fuzz-grammar-${kind} PRIVATE dse)
  endforeach()
  target_compile_definitions(fuzz-grammar-schema PRIVATE FUZZ_GRAMMAR_COMPILE=dse_grammar_compile_json_schema)
  target_compile_definitions(fuzz-grammar-gbnf PRIVATE FUZZ_GRAMMAR_COMPILE=dse_grammar_compile_gbnf)
  target_compile_definitions(fuzz-grammar-regex PRIVATE FUZZ_GRAMMAR_COMPILE=dse_grammar_compile_regex)
  dsv_add_fuzzer(fuzz-grammar-composed fuzz/fuzz-grammar-composed.c)
  target_link_libraries(fuzz-grammar-composed PRIVATE dse)
  target_compile_definitions(fuzz-grammar-composed PRIVATE DSV_FIXTURES_DIR="${DSV_FIXTURES}")
endif()
