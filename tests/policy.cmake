# policy/ (placement, routing, admission) and the platform topology reader.
dsv_test(NAME test-policy-placement SOURCES unit/test-policy-placement.c LIBS dsv_policy LABELS unit)
