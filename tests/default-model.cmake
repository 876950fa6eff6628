# The bundled default model (models/default): the engine's logits, greedy ids and
# tokenizer on held-out KJV text against the training framework's float64 reference.
dsv_script_test(NAME test-default-model SCRIPT ${CMAKE_SOURCE_DIR}/tests/integration/test-default-model.sh
  LABELS integration)

# Fifty varied short chat messages through `dsvisor start` with the README's sampling
# settings: the model answers each with a few sentences of dictionary words and ends on
# its own.
dsv_script_test(NAME test-default-chat-replies SCRIPT ${CMAKE_SOURCE_DIR}/tests/integration/test-default-chat-replies.sh
  LABELS integration TIMEOUT 600)
