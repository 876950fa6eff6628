# The gateway's status page: its live view (unit) and the page (GET /) in headless
# chromium, driven by the pinned npm playwright-core, against `dsvisor start
# --instances 2` on the bundled model.
dsv_test(NAME test-gateway-live SOURCES unit/test-gateway-live.c LIBS dsv_gateway_internal m LABELS unit)
dsv_script_test(NAME test-status-page SCRIPT ${CMAKE_SOURCE_DIR}/tests/integration/test-status-page.sh
                LABELS integration TIMEOUT 400)
