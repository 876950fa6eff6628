# supervisor/gateway: the HTTP gateway. Unit tests on the pure parts, a fake
# worker and a test server for the curl and openai-client integration tests.
# White-box tests reach the gateway's internal headers through dsv_gateway_internal, which
# brings the libraries those headers include (libmicrohttpd for server.h, http_strict.h,
# cors.h), so no test compiles against another libmicrohttpd's header than the one linked.
add_library(dsv_gateway_internal INTERFACE)
target_include_directories(dsv_gateway_internal INTERFACE ${CMAKE_SOURCE_DIR}/supervisor/gateway/src)
target_link_libraries(dsv_gateway_internal INTERFACE dsv_gateway dsv::mhd)

dsv_test(NAME test-gateway-request SOURCES unit/test-gateway-request.c LIBS dsv_gateway_internal dsv::cjson LABELS unit)
dsv_test(NAME test-gateway-chat-output SOURCES unit/test-gateway-chat-output.c LIBS dsv_gateway_internal dsv::cjson LABELS unit)
dsv_test(NAME test-gateway-structured SOURCES unit/test-gateway-structured.c LIBS dsv_gateway_internal dsv::cjson LABELS unit)
dsv_test(NAME test-gateway-tool-choice SOURCES unit/test-gateway-tool-choice.c LIBS dsv_gateway_internal dse dsv::cjson
         LABELS unit)
dsv_test(NAME test-gateway-tool-syntax SOURCES unit/test-gateway-tool-syntax.c LIBS dsv_gateway_internal dse dsv::cjson
         LABELS unit TIMEOUT 120)
dsv_test(NAME test-gateway-metrics SOURCES unit/test-gateway-metrics.c LIBS dsv_gateway_internal LABELS unit)
dsv_test(NAME test-gateway-strict SOURCES unit/test-gateway-strict.c LIBS dsv_gateway_internal LABELS unit)

add_executable(fake-worker integration/fake-worker.c)
target_link_libraries(fake-worker PRIVATE dsv_ipc dsv::cjson)
add_executable(scripted-worker integration/scripted-worker.c)
target_link_libraries(scripted-worker PRIVATE dse dsv_ipc dsv::cjson)
add_executable(dsvisor-gateway-test-server integration/gateway-test-server.c)
target_link_libraries(dsvisor-gateway-test-server PRIVATE dsv_gateway Threads::Threads)

dsv_script_test(NAME test-gateway-rooms SCRIPT ${CMAKE_SOURCE_DIR}/tests/integration/test-gateway-rooms.sh
                LABELS unit TIMEOUT 30)
dsv_script_test(NAME test-gateway-http SCRIPT ${CMAKE_SOURCE_DIR}/tests/integration/test-gateway-http.sh
                LABELS integration TIMEOUT 240)
dsv_script_test(NAME test-gateway-hostile SCRIPT ${CMAKE_SOURCE_DIR}/tests/integration/test-gateway-hostile.sh
                LABELS integration TIMEOUT 300)
set_tests_properties(test-gateway-hostile PROPERTIES RUN_SERIAL ON)
dsv_script_test(NAME test-gateway-tools SCRIPT ${CMAKE_SOURCE_DIR}/tests/integration/test-gateway-tools.sh
                LABELS integration TIMEOUT 400)
dsv_script_test(NAME test-gateway-openai SCRIPT ${CMAKE_SOURCE_DIR}/tests/integration/test-gateway-openai.sh
                LABELS integration TIMEOUT 300)

if(DSV_FUZZ)
  dsv_add_fuzzer(fuzz-gateway-request fuzz/fuzz-gateway-request.c)
  target_link_libraries(fuzz-gateway-request PRIVATE dsv_gateway_internal dsv::cjson)
  dsv_add_fuzzer(fuzz-gateway-chat-output fuzz/fuzz-gateway-chat-output.c)
  target_link_libraries(fuzz-gateway-chat-output PRIVATE dsv_gateway_internal dsv::cjson)
  dsv_add_fuzzer(fuzz-gateway-http fuzz/fuzz-gateway-http.c)
  target_link_libraries(fuzz-gateway-http PRIVATE dsv_gateway)
endif()
dsv_test(NAME test-gateway-api SOURCES unit/test-gateway-api.c LIBS dsv_gateway dsv_ipc LABELS unit TIMEOUT 60)
# Overload: at about 5x the admission limits (and, second, far over the connection limit)
# every request is answered 200, 429 or 503 with Retry-After, none lost, counted in /metrics.
dsv_script_test(NAME test-gateway-overload SCRIPT ${CMAKE_SOURCE_DIR}/tests/integration/test-gateway-overload.sh
                LABELS integration TIMEOUT 120)
dsv_test(NAME test-gateway-serving SOURCES unit/test-gateway-serving.c LIBS dsv_gateway_internal dsv::cjson LABELS unit)
