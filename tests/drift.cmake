# Drift detection (supervisor/drift.c): the KS statistics against scipy's values, the
# windows and the peer comparison; and end to end with a worker whose logits are
# perturbed by the test hook (tests/integration/test-drift.sh).
dsv_test(NAME test-supervisor-drift
         SOURCES unit/test-supervisor-drift.c ${CMAKE_SOURCE_DIR}/supervisor/drift.c LIBS dsv_ipc m LABELS unit)
target_include_directories(test-supervisor-drift PRIVATE ${CMAKE_SOURCE_DIR}/supervisor)
dsv_script_test(NAME test-drift SCRIPT ${CMAKE_SOURCE_DIR}/tests/integration/test-drift.sh
                LABELS integration TIMEOUT 600)
set_tests_properties(test-drift PROPERTIES SKIP_RETURN_CODE 77 RUN_SERIAL ON)
