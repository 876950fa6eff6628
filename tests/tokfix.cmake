# A SentencePiece .model with its Hugging Face tokenizer_config.json (engine/src/tok/spm_hf.c)
# on the bundled default model, against spm_encode (Debian `sentencepiece`); and
# `dsvisor run --chat` on models/default end to end.
dsv_test(NAME test-tokenizer-spm-hf SOURCES unit/test-tokenizer-spm-hf.c LIBS dse LABELS unit TIMEOUT 120)
dsv_script_test(NAME test-default-chat SCRIPT ${CMAKE_SOURCE_DIR}/tests/integration/test-default-chat.sh
  LABELS integration TIMEOUT 300)
