# Chat templates, streaming detokenization, the sampler and `dsvisor run` (area: chat).

# One ctest per reference template: the executable runs the TEST named by its argument.
add_executable(test-chat-template unit/test-chat-template.c)
target_include_directories(test-chat-template PRIVATE ${CMAKE_SOURCE_DIR}/tests)
target_link_libraries(test-chat-template PRIVATE dse dsv::cjson)
foreach(name deepseek_v3 qwen2_5 llama3)
  add_test(NAME test-chat-${name} COMMAND test-chat-template ${name})
  set_tests_properties(test-chat-${name} PROPERTIES LABELS unit TIMEOUT 120
    ENVIRONMENT "DSV_FIXTURES=${DSV_FIXTURES};DSV_BUILD_DIR=${CMAKE_BINARY_DIR};DSV_SOURCE_DIR=${CMAKE_SOURCE_DIR}")
endforeach()

dsv_test(NAME test-chat-jinja SOURCES unit/test-chat-jinja.c LIBS dse LABELS unit)
dsv_test(NAME test-detok   SOURCES unit/test-detok.c   LIBS dse dsv::cjson LABELS unit)
dsv_test(NAME test-sampler SOURCES unit/test-sampler.c LIBS dse LABELS unit)
dsv_script_test(NAME test-chat-run SCRIPT ${CMAKE_SOURCE_DIR}/tests/integration/chat-run.sh LABELS integration TIMEOUT 300)

# libFuzzer target for template parsing + rendering (configure with CC=clang -DDSV_FUZZ=ON):
#   build/bin/fuzz-chat-template -max_total_time=60 CORPUS_DIR
if(DSV_FUZZ)
  dsv_add_fuzzer(fuzz-chat-template fuzz/fuzz-chat-template.c)
  target_link_libraries(fuzz-chat-template PRIVATE dse)
endif()
