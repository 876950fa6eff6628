# Load generation: dsvisor-bench-load's histogram, arrivals, pace and SSE reader, and
# runs against the gateway test server in front of fake workers.
dsv_test(NAME test-load-hist SOURCES unit/test-load-hist.c LIBS dsv_load_core LABELS unit TIMEOUT 60)
dsv_test(NAME test-load-gen  SOURCES unit/test-load-gen.c  LIBS dsv_load_core LABELS unit TIMEOUT 60)
dsv_test(NAME test-load-sse  SOURCES unit/test-load-sse.c  LIBS dsv_load_core LABELS unit TIMEOUT 60)
dsv_test(NAME test-load-pace SOURCES unit/test-load-pace.c LIBS dsv_load_core LABELS unit TIMEOUT 60)

# dsvisor-bench-load end to end: open and closed loop, streamed and not, against
# dsvisor-gateway-test-server + fake-worker; counts add up, nothing lost, JSON keys; a
# dead port loses every request; a worker dying mid-stream gives explicit errors.
dsv_script_test(NAME test-load-gateway SCRIPT ${CMAKE_SOURCE_DIR}/tests/integration/test-load-gateway.sh
                LABELS integration TIMEOUT 120)

# Chaos under load against dsvisor start with the stub worker (tests/integration/test-chaos.sh):
# kill -9 a random worker every 3-6 s for 60 s; SIGSTOP a worker (replaced after the
# supervisor's 30 s unhealthy timeout); SIGTERM to the supervisor with requests in flight.
# Lost must be 0 in each. One ctest per phase, each well under 90 s.
foreach(phase kill stop term)
  dsv_script_test(NAME test-chaos-${phase} SCRIPT ${CMAKE_SOURCE_DIR}/tests/integration/test-chaos.sh
                  ARGS ${phase} LABELS integration TIMEOUT 150)
  set_tests_properties(test-chaos-${phase} PROPERTIES SKIP_RETURN_CODE 77 RUN_SERIAL ON)
endforeach()

# libFuzzer target for the SSE reader (configure with CC=clang -DDSV_FUZZ=ON).
if(DSV_FUZZ)
  dsv_add_fuzzer(fuzz-load-sse fuzz/fuzz-load-sse.c ${CMAKE_SOURCE_DIR}/bench/load/sse.c)
  target_include_directories(fuzz-load-sse PRIVATE ${CMAKE_SOURCE_DIR}/bench/load)
  target_link_libraries(fuzz-load-sse PRIVATE dsv::cjson)
endif()
