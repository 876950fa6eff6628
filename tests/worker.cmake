# Worker: the engine's paged KV cache and batch steps, the scheduler, and
# dsvisor-worker end to end over IPC.
if(TARGET dsvisor-worker)
  dsv_test(NAME test-engine-kv SOURCES unit/test-engine-kv.c LIBS dse LABELS unit TIMEOUT 300)
  dsv_test(NAME test-engine-kv-disk SOURCES unit/test-engine-kv-disk.c LIBS dse LABELS unit TIMEOUT 300)
  # libFuzzer target for the KV disk tier's file and index readers (scripts/fuzz.sh).
  if(DSV_FUZZ)
    dsv_add_fuzzer(fuzz-kv-disk fuzz/fuzz-kv-disk.c)
    target_include_directories(fuzz-kv-disk PRIVATE ${CMAKE_SOURCE_DIR}/engine/src)
    target_link_libraries(fuzz-kv-disk PRIVATE dse)
  endif()
  dsv_test(NAME test-engine-spec SOURCES unit/test-engine-spec.c LIBS dse LABELS unit TIMEOUT 300)
  dsv_test(NAME test-worker-sched SOURCES unit/test-worker-sched.c LIBS dsv_worker_core LABELS unit TIMEOUT 300)
  dsv_test(NAME test-worker-sched-kv-disk SOURCES unit/test-worker-sched-kv-disk.c LIBS dsv_worker_core LABELS unit
           TIMEOUT 300)
  dsv_test(NAME test-worker-spec SOURCES unit/test-worker-spec.c LIBS dsv_worker_core LABELS unit TIMEOUT 600)
  dsv_test(NAME test-worker-spec-policy SOURCES unit/test-worker-spec-policy.c LIBS dsv_worker_core LABELS unit)
  dsv_test(NAME test-worker-sampling SOURCES unit/test-worker-sampling.c LIBS dsv_worker_core LABELS unit)
  dsv_test(NAME test-worker-sched-alloc SOURCES unit/test-worker-sched-alloc.c LIBS dsv_worker_core LABELS unit
           TIMEOUT 300)
  dsv_test(NAME test-worker-ipc SOURCES integration/test-worker-ipc.c LIBS dse dsv_ipc LABELS integration TIMEOUT 300)
  add_dependencies(test-worker-ipc dsvisor-worker)
  target_include_directories(test-worker-ipc PRIVATE ${CMAKE_SOURCE_DIR}/bench) # worker-client.h
  dsv_test(NAME test-worker-kv-disk SOURCES integration/test-worker-kv-disk.c LIBS dse dsv_ipc LABELS integration
           TIMEOUT 300)
  add_dependencies(test-worker-kv-disk dsvisor-worker)
  target_include_directories(test-worker-kv-disk PRIVATE ${CMAKE_SOURCE_DIR}/bench) # worker-client.h
  dsv_script_test(NAME test-worker-cli SCRIPT ${CMAKE_SOURCE_DIR}/tests/integration/worker-cli.sh LABELS integration
                  TIMEOUT 60)
endif()
# Text, stop strings and chat need a tokenizer: the bundled default model, once it is in
# the tree (models/default).
if(TARGET dsvisor-worker AND EXISTS ${CMAKE_SOURCE_DIR}/models/default/config.json)
  dsv_test(NAME test-worker-text SOURCES integration/test-worker-text.c LIBS dse dsv_ipc LABELS integration
           TIMEOUT 600)
  add_dependencies(test-worker-text dsvisor-worker)
  target_include_directories(test-worker-text PRIVATE ${CMAKE_SOURCE_DIR}/bench) # worker-client.h
  dsv_test(NAME test-engine-mtp SOURCES unit/test-engine-mtp.c LIBS dse LABELS unit TIMEOUT 600)
  dsv_test(NAME test-worker-spec-ipc SOURCES integration/test-worker-spec.c LIBS dse dsv_ipc LABELS integration
           TIMEOUT 600)
  add_dependencies(test-worker-spec-ipc dsvisor-worker)
  target_include_directories(test-worker-spec-ipc PRIVATE ${CMAKE_SOURCE_DIR}/bench) # worker-client.h
endif()
# The per-token path allocates only nng's message: the real serve loop in-process, its
# allocations counted per thread and nng_send wrapped to count nng's apart.
if(TARGET dsv_worker_serve)
  dsv_test(NAME test-worker-alloc SOURCES unit/test-worker-alloc.c LIBS dsv_worker_serve LABELS unit TIMEOUT 300)
  target_link_options(test-worker-alloc PRIVATE -Wl,--wrap=nng_send -Wl,--wrap=dse_batch_step)
endif()
# Constrained sampling (structured output) needs a tokenizer: the bundled default model.
if(TARGET dsvisor-worker AND EXISTS ${CMAKE_SOURCE_DIR}/models/default/config.json)
  dsv_test(NAME test-worker-constrained SOURCES unit/test-worker-constrained.c LIBS dsv_worker_core dsv::cjson
           LABELS unit TIMEOUT 300)
endif()
# Paged blocks, prefix sharing, preemption and the worker end to end over each KV cache
# type: the same executables again with DSV_KV set, for the types their default leaves
# out (the engine's default is f32, the worker's bf16).
if(TARGET dsvisor-worker)
  foreach(t test-engine-kv test-worker-sched test-worker-ipc)
    set(kv_types bf16 fp8 int8)
    if(t STREQUAL "test-worker-ipc")
      set(kv_types f32 fp8 int8)
    endif()
    get_test_property(${t} LABELS kv_labels)
    foreach(kv ${kv_types})
      set(kv_args "")
      if(t STREQUAL "test-worker-sched" AND kv STREQUAL "fp8")
        # The two penalty cases rest on the fixture's greedy stream repeating a token
        # within 24 (a property of its numbers): over an FP8 cache it does not.
        set(kv_args batch_of_8_equals_alone_greedy batch_of_8_equals_alone_seeded token_budget_respected
            length_grouping preempt_youngest_and_recompute cancel_frees_blocks_within_one_step deadline_ends_request
            prefix_hits_reported bad_input_error_codes repetition_penalty_applies random_workload_invariants)
      endif()
      add_test(NAME ${t}-kv-${kv} COMMAND ${t} ${kv_args})
      set_tests_properties(${t}-kv-${kv} PROPERTIES LABELS "${kv_labels}" TIMEOUT 300 SKIP_RETURN_CODE 77
        ENVIRONMENT "DSV_KV=${kv};DSV_FIXTURES=${DSV_FIXTURES};DSV_BUILD_DIR=${CMAKE_BINARY_DIR};DSV_SOURCE_DIR=${CMAKE_SOURCE_DIR}")
    endforeach()
  endforeach()
endif()
