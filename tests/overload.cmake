# Admission under overload that the stub-worker test cannot time: the worker's own load
# report against the requests it ended since (calls.c).
dsv_test(NAME test-gateway-worker-report SOURCES unit/test-gateway-worker-report.c LIBS dsv_gateway_internal dsv_ipc LABELS unit TIMEOUT 60)
