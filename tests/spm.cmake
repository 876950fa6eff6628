# SentencePiece .model tokenizers (engine/src/tok/tok_spm.c, spm_*.c).
foreach(spm sp_bpe sp_unigram)
  dsv_test(NAME test-tokenizer-${spm} SOURCES unit/test-tokenizer-sp.c LIBS dse dsv::cjson LABELS unit)
  target_compile_definitions(test-tokenizer-${spm} PRIVATE SPM_NAME="${spm}")
endforeach()
dsv_test(NAME test-tokenizer-spm-errors SOURCES unit/test-tokenizer-spm-errors.c LIBS dse LABELS unit)
