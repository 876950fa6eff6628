# dsvisor doctor and per-instance perf counters. Owner: engineer "doc".
# The doctor against fake /proc and /sys trees, including deploy/host/ applied.
dsv_script_test(NAME test-doctor SCRIPT ${CMAKE_SOURCE_DIR}/tests/integration/test-doctor.sh
                LABELS integration TIMEOUT 120)
# The check library itself on small trees written by the test: report helpers, bad
# requests, an empty root, legacy cgroups, limits with capabilities, IRQs without counts.
dsv_test(NAME test-platform-doctor SOURCES unit/test-platform-doctor.c LIBS dsv_platform LABELS unit)

# Per-instance perf counters: rates and Prometheus text on synthetic samples...
dsv_test(NAME test-platform-perfctr-format SOURCES unit/test-platform-perfctr-format.c
         LIBS dsv_platform LABELS unit)
# ...and on this kernel: a spinning, faulting, sleeping thread; two threads on one CPU;
# hardware events as the kernel has them; a real v2 cgroup when running as root.
dsv_test(NAME test-platform-perfctr SOURCES integration/test-platform-perfctr.c
         LIBS dsv_platform Threads::Threads LABELS integration TIMEOUT 60)
