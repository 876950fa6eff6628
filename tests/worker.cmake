# Worker (issue 6): the engine's paged KV cache and batch steps, the scheduler, and
# dsvisor-worker end to end over IPC.
if(TARGET dsvisor-worker)
  dsv_test(NAME test-engine-kv SOURCES unit/test-engine-kv.c LIBS dse LABELS unit TIMEOUT 300)
  dsv_test(NAME test-worker-sched SOURCES unit/test-worker-sched.c LIBS dsv_worker_core LABELS unit TIMEOUT 300)
  dsv_test(NAME test-worker-ipc SOURCES integration/test-worker-ipc.c LIBS dsv_ipc LABELS integration TIMEOUT 300)
  add_dependencies(test-worker-ipc dsvisor-worker)
endif()
