# Supervisor: dsvisor start/status/stop. Unit tests on the configuration,
# backoff, RT preflight and control socket; integration tests run the real dsvisor with
# a stub worker that keeps dsvisor-worker's command line (and with the real worker when
# it is built), a fake NOTIFY_SOCKET, and systemd-analyze on the unit file.
set(DSV_SUP_DIR ${CMAKE_SOURCE_DIR}/supervisor)
dsv_test(NAME test-supervisor-config
         SOURCES unit/test-supervisor-config.c ${DSV_SUP_DIR}/config.c ${DSV_SUP_DIR}/restart_backoff.c
                 ${DSV_SUP_DIR}/rt_sched.c ${DSV_SUP_DIR}/control.c
                 ${DSV_SUP_DIR}/malloc_env.c
         LIBS dsv_platform dse dsv_ipc dsv::cjson Threads::Threads LABELS unit)
target_include_directories(test-supervisor-config PRIVATE ${DSV_SUP_DIR})

dsv_test(NAME test-supervisor-chat-format
         SOURCES unit/test-supervisor-chat-format.c ${DSV_SUP_DIR}/chat_format.c ${DSV_SUP_DIR}/log.c
         LIBS dse dsv_gateway dsv_platform dsv::cjson LABELS unit)
target_include_directories(test-supervisor-chat-format PRIVATE ${DSV_SUP_DIR})

add_executable(test-supervisor-stub-worker integration/test-supervisor-stub-worker.c)
target_link_libraries(test-supervisor-stub-worker PRIVATE dsv_ipc)

# Two instances, status, shared weights (PSS), kill -9 under load, stop; with the stub
# worker and with dsvisor-worker (skipped when it is not built); without and with
# HugePages (root: reserves 2 MiB pages and gives them back).
foreach(worker stub real)
  foreach(hp off require)
    set(name test-supervisor-lifecycle-${worker}-${hp})
    dsv_script_test(NAME ${name} SCRIPT ${CMAKE_SOURCE_DIR}/tests/integration/test-supervisor-lifecycle.sh
                    ARGS ${worker} ${hp} LABELS integration TIMEOUT 300)
    set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77 RUN_SERIAL ON)
  endforeach()
endforeach()
# The shmem image with shmem_enabled=advise (root; restored after): 2 MiB pages without
# a HugePages pool.
dsv_script_test(NAME test-supervisor-lifecycle-real-off-thp
                SCRIPT ${CMAKE_SOURCE_DIR}/tests/integration/test-supervisor-lifecycle.sh
                ARGS real off-thp LABELS integration TIMEOUT 300)
set_tests_properties(test-supervisor-lifecycle-real-off-thp PROPERTIES SKIP_RETURN_CODE 77 RUN_SERIAL ON)

# sd_notify against a fake NOTIFY_SOCKET: READY, STATUS, WATCHDOG, STOPPING, FDSTORE and
# re-attaching the weights from the fd store after a supervisor restart.
dsv_script_test(NAME test-supervisor-notify SCRIPT ${CMAKE_SOURCE_DIR}/tests/integration/test-supervisor-notify.sh
                LABELS integration TIMEOUT 300)
set_tests_properties(test-supervisor-notify PROPERTIES RUN_SERIAL ON)

# deploy/dsvisor.service + dsvisor.slice: systemd-analyze verify and the required settings.
dsv_script_test(NAME test-supervisor-unit SCRIPT ${CMAKE_SOURCE_DIR}/tests/integration/test-supervisor-unit.sh
                LABELS unit)
set_tests_properties(test-supervisor-unit PROPERTIES SKIP_RETURN_CODE 77)

# SIGHUP rolling restart under load, crash-loop limit, no orphans after kill -9 of the
# supervisor, the --rt-priority preflight, usage errors.
dsv_script_test(NAME test-supervisor-signals SCRIPT ${CMAKE_SOURCE_DIR}/tests/integration/test-supervisor-signals.sh
                LABELS integration TIMEOUT 300)
set_tests_properties(test-supervisor-signals PROPERTIES RUN_SERIAL ON)
# SIGHUP applies every changed option it can (seen in the new workers' binary, command
# line, weights and cgroup files; with dsvisor-worker the new model's answers) and names
# the rest in a warning and in status; a memory limit without a memory controller stops
# the start unless --allow-unenforced (root).
foreach(worker stub real)
  dsv_script_test(NAME test-supervisor-signals-reload-${worker}
                  SCRIPT ${CMAKE_SOURCE_DIR}/tests/integration/test-supervisor-signals-reload.sh ARGS ${worker}
                  LABELS integration TIMEOUT 300)
  set_tests_properties(test-supervisor-signals-reload-${worker} PROPERTIES SKIP_RETURN_CODE 77 RUN_SERIAL ON)
endforeach()

# SCHED_FIFO in a v1 cpu group: EPERM without cpu.rt_runtime_us, granted with it (root).
dsv_test(NAME test-supervisor-rt SOURCES integration/test-supervisor-rt.c ${DSV_SUP_DIR}/rt_sched.c
         LIBS dsv_platform dsv_ipc LABELS integration)
target_include_directories(test-supervisor-rt PRIVATE ${DSV_SUP_DIR})
set_tests_properties(test-supervisor-rt PROPERTIES SKIP_RETURN_CODE 77)

# --rt-priority end to end on a pretend 3-core topology (CPU 0 kept free of compute threads; the HTTP threads run there one priority above them).
foreach(worker stub real)
  dsv_script_test(NAME test-supervisor-rt-start-${worker}
                  SCRIPT ${CMAKE_SOURCE_DIR}/tests/integration/test-supervisor-rt-start.sh ARGS ${worker}
                  LABELS integration TIMEOUT 300)
  set_tests_properties(test-supervisor-rt-start-${worker} PROPERTIES SKIP_RETURN_CODE 77 RUN_SERIAL ON)
endforeach()

# --cgroup-parent end to end, inside a private own group per hierarchy: instance groups
# in <own>/inference/prod, and after stop (dsvisor stop and SIGTERM, 3 cycles) every
# hierarchy below the own group exactly as before; usage errors exit 2 (root).
dsv_script_test(NAME test-supervisor-cgroup-parent
                SCRIPT ${CMAKE_SOURCE_DIR}/tests/integration/test-supervisor-cgroup-parent.sh
                LABELS integration TIMEOUT 300)
set_tests_properties(test-supervisor-cgroup-parent PROPERTIES SKIP_RETURN_CODE 77 RUN_SERIAL ON)

if(DSV_FUZZ)
  # The JSON config, and above all the cgroup parent it accepts (scripts/fuzz.sh).
  dsv_add_fuzzer(fuzz-supervisor-config fuzz/fuzz-supervisor-config.c ${DSV_SUP_DIR}/config.c)
  target_include_directories(fuzz-supervisor-config PRIVATE ${DSV_SUP_DIR})
  target_link_libraries(fuzz-supervisor-config PRIVATE dsv_platform dse dsv_ipc dsv::cjson)
endif()

# dsvisor start runs with glibc's malloc thread cache off (supervisor/malloc_env.c): the
# re-exec keeps the pid and the user's tunables, the workers get the original environment
# back and keep their cache (checked in each process by an LD_PRELOAD probe), and a
# tcache_count the user set is left alone.
add_library(tcache-probe MODULE integration/tcache-probe.c)
set_target_properties(tcache-probe PROPERTIES PREFIX "" LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
dsv_script_test(NAME test-supervisor-malloc-env
                SCRIPT ${CMAKE_SOURCE_DIR}/tests/integration/test-supervisor-malloc-env.sh
                LABELS integration TIMEOUT 120)
set_tests_properties(test-supervisor-malloc-env PROPERTIES RUN_SERIAL ON)

# dsvisor start under taskset: the worker's threads and cpuset group only on the given
# CPU; --cpus/--housekeeping-cpus split two CPUs between worker and supervisor.
dsv_script_test(NAME test-supervisor-given-cpus
                SCRIPT ${CMAKE_SOURCE_DIR}/tests/integration/test-supervisor-given-cpus.sh
                LABELS integration TIMEOUT 600)
set_tests_properties(test-supervisor-given-cpus PROPERTIES SKIP_RETURN_CODE 77 RUN_SERIAL ON)

# dsvisor start --speculative ngram: options reach the workers, output unchanged, and the
# speculation counters and acceptance-length histogram on /metrics.
dsv_script_test(NAME test-spec-metrics SCRIPT ${CMAKE_SOURCE_DIR}/tests/integration/test-spec-metrics.sh
                LABELS integration TIMEOUT 300)
# --log-format json and --log-requests on a real `dsvisor start` (supervisor and workers).
dsv_script_test(NAME test-supervisor-log-format SCRIPT ${CMAKE_SOURCE_DIR}/tests/integration/test-supervisor-log-format.sh
                LABELS integration TIMEOUT 300)
set_tests_properties(test-supervisor-log-format PROPERTIES SKIP_RETURN_CODE 77)
