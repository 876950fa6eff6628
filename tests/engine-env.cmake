# The engine's environment switches whose value is one of a few names (DSV_CPU, DSV_ACT,
# DSV_KV, DSV_KV_PAGES; engine/src/env_choice.c): the shared lookup and its message, and an
# unknown value refused by name where each switch is read.
dsv_test(NAME test-engine-env-choice SOURCES unit/test-engine-env-choice.c LIBS dse LABELS unit)
target_include_directories(test-engine-env-choice PRIVATE ${CMAKE_SOURCE_DIR}/engine/src)
