# policy/ (placement, routing, admission) and the platform topology reader.
dsv_test(NAME test-policy-placement SOURCES unit/test-policy-placement.c LIBS dsv_policy LABELS unit)
dsv_test(NAME test-policy-balance   SOURCES unit/test-policy-balance.c   LIBS dsv_policy LABELS unit)
dsv_test(NAME test-policy-admission SOURCES unit/test-policy-admission.c LIBS dsv_policy LABELS unit)
dsv_test(NAME test-platform-topo    SOURCES unit/test-platform-topo.c    LIBS dsv_platform dsv::hwloc LABELS unit)
dsv_test(NAME test-platform-given-set SOURCES unit/test-platform-given-set.c LIBS dsv_platform LABELS unit)
dsv_script_test(NAME test-plan SCRIPT ${CMAKE_SOURCE_DIR}/tests/integration/test-plan.sh LABELS integration TIMEOUT 120)
