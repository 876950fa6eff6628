# Supervisor (issue 7): dsvisor start/status/stop. Unit tests on the configuration,
# backoff, RT preflight and control socket; integration tests run the real dsvisor with
# a stub worker that keeps dsvisor-worker's command line (and with the real worker when
# it is built), a fake NOTIFY_SOCKET, and systemd-analyze on the unit file.
set(DSV_SUP_DIR ${CMAKE_SOURCE_DIR}/supervisor)
dsv_test(NAME test-supervisor-config
         SOURCES unit/test-supervisor-config.c ${DSV_SUP_DIR}/config.c ${DSV_SUP_DIR}/instance.c ${DSV_SUP_DIR}/control.c
         LIBS dsv_platform dsv::cjson Threads::Threads LABELS unit)
target_include_directories(test-supervisor-config PRIVATE ${DSV_SUP_DIR})

add_executable(test-supervisor-stub-worker integration/test-supervisor-stub-worker.c)
target_link_libraries(test-supervisor-stub-worker PRIVATE dsv_ipc)
