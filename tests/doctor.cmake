# dsvisor doctor and per-instance perf counters (issue 11). Owner: engineer "doc".
# The doctor against fake /proc and /sys trees, including deploy/host/ applied.
dsv_script_test(NAME test-doctor SCRIPT ${CMAKE_SOURCE_DIR}/tests/integration/test-doctor.sh
                LABELS integration TIMEOUT 120)
