# Structured output end to end: dsvisor start on the bundled default model, response_format
# json_schema replies judged by python3-jsonschema, guided_* fields, logit_bias, logprob
# alternatives, and the openai / AI SDK clients (pinned in integration/structured-clients).
if(TARGET dsvisor-worker AND EXISTS ${CMAKE_SOURCE_DIR}/models/default/config.json)
  dsv_script_test(NAME test-structured-output SCRIPT ${CMAKE_SOURCE_DIR}/tests/integration/test-structured-output.sh
                  LABELS integration TIMEOUT 1200)
  # tool_choice in a template's own call syntax through the real worker (--chat-template)
  dsv_script_test(NAME test-tool-syntax-e2e SCRIPT ${CMAKE_SOURCE_DIR}/tests/integration/test-tool-syntax-e2e.sh
                  LABELS integration TIMEOUT 900)
  # both install the pinned clients into build/tests/structured-clients on first run
  set_tests_properties(test-structured-output test-tool-syntax-e2e PROPERTIES RESOURCE_LOCK structured-clients)
endif()
