# deploy/: the shipped HAProxy, Prometheus and Kubernetes files are
# checked by their own tools (haproxy -c, promtool, python3-yaml), and exercised against
# real `dsvisor start` processes: HAProxy on loopback in front of two of them with one
# stopped under load, Prometheus on loopback scraping one and answering a P99 query per
# instance. The systemd units are sup's (test-supervisor-unit). Exit 77: tool not installed.
foreach(t haproxy prometheus k8s)
  dsv_script_test(NAME test-deploy-${t} SCRIPT ${CMAKE_SOURCE_DIR}/tests/integration/test-deploy-${t}.sh
                  LABELS unit TIMEOUT 60)
  set_tests_properties(test-deploy-${t} PROPERTIES SKIP_RETURN_CODE 77)
endforeach()

foreach(t haproxy prometheus)
  dsv_script_test(NAME test-${t} SCRIPT ${CMAKE_SOURCE_DIR}/tests/integration/test-${t}.sh
                  LABELS integration TIMEOUT 180)
  set_tests_properties(test-${t} PROPERTIES SKIP_RETURN_CODE 77 RUN_SERIAL ON)
endforeach()

# deploy/grafana's dashboard and deploy/dsvisor-rules.yml: every expression evaluated by a
# real Prometheus scraping `dsvisor start` under load (and promtool's rule tests).
dsv_script_test(NAME test-grafana-prometheus SCRIPT ${CMAKE_SOURCE_DIR}/tests/integration/test-grafana-prometheus.sh
                LABELS integration TIMEOUT 420)
set_tests_properties(test-grafana-prometheus PROPERTIES SKIP_RETURN_CODE 77 RUN_SERIAL ON)
