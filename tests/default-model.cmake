# The bundled default model (models/default): the engine's logits, greedy ids and
# tokenizer on held-out KJV text against the training framework's float64 reference.
dsv_script_test(NAME test-default-model SCRIPT ${CMAKE_SOURCE_DIR}/tests/integration/test-default-model.sh
  LABELS integration)
