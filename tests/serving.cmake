# dsvisor start's serving options (keys, TLS, CORS, protect-metrics, limits, client
# deadlines) end to end against the real worker. Serial: its deadlines are timed.
dsv_script_test(NAME test-start-serving SCRIPT ${CMAKE_SOURCE_DIR}/tests/integration/test-start-serving.sh
                LABELS integration TIMEOUT 400)
set_tests_properties(test-start-serving PROPERTIES RUN_SERIAL ON)
# deepseek-convert and ds-runtime as `cmake --install` puts them.
dsv_script_test(NAME test-frontends SCRIPT ${CMAKE_SOURCE_DIR}/tests/integration/test-frontends.sh
                LABELS integration TIMEOUT 300)
