# The harness tests/t.h checks itself: each assertion fails on a wrong value (cases run
# one by one from t-harness-wrong-values), and ASSERT_EQ refuses a float at compile time.
add_executable(t-harness-wrong-values unit/t-harness-wrong-values.c)
target_include_directories(t-harness-wrong-values PRIVATE ${CMAKE_SOURCE_DIR}/tests)
target_link_libraries(t-harness-wrong-values PRIVATE m)
dsv_test(NAME test-t-harness SOURCES unit/test-t-harness.c LIBS m LABELS unit)
target_compile_definitions(test-t-harness PRIVATE T_WRONG_VALUES="$<TARGET_FILE:t-harness-wrong-values>")
add_dependencies(test-t-harness t-harness-wrong-values)
add_test(NAME test-t-harness-eq-refuses-float
  COMMAND ${CMAKE_C_COMPILER} -std=c11 -fsyntax-only -I${CMAKE_SOURCE_DIR}/tests
          ${CMAKE_SOURCE_DIR}/tests/unit/t-harness-eq-float.c)
set_tests_properties(test-t-harness-eq-refuses-float PROPERTIES LABELS unit
  PASS_REGULAR_EXPRESSION "ASSERT_EQ compares integers")
# The skip allow-list check that scripts/dev.sh runs after ctest.
dsv_script_test(NAME test-check-skips SCRIPT ${CMAKE_SOURCE_DIR}/tests/unit/test-check-skips.sh LABELS unit)
