# SentencePiece .model tokenizers (engine/src/tok/tok_spm.c, spm_*.c).
foreach(spm sp_bpe sp_unigram)
  dsv_test(NAME test-tokenizer-${spm} SOURCES unit/test-tokenizer-sp.c LIBS dse dsv::cjson LABELS unit)
  target_compile_definitions(test-tokenizer-${spm} PRIVATE SPM_NAME="${spm}")
endforeach()
dsv_test(NAME test-tokenizer-spm-errors SOURCES unit/test-tokenizer-spm-errors.c LIBS dse LABELS unit)

# libFuzzer targets (configure with CC=clang -DDSV_FUZZ=ON) for the SentencePiece loader
# and encoders. A fuzz build instruments libdse itself (CMakeLists.txt).
if(DSV_FUZZ)
  foreach(fz fuzz-spm-load fuzz-spm-encode)
    dsv_add_fuzzer(${fz} fuzz/${fz}.c)
    target_compile_definitions(${fz} PRIVATE DSV_FIXTURES_DIR="${DSV_FIXTURES}")
    target_link_libraries(${fz} PRIVATE dse)
  endforeach()
endif()

# Differential test against Debian's sentencepiece tools (spm_train/spm_encode/spm_decode,
# package `sentencepiece`, installed by scripts/bootstrap.sh --with-tests).
dsv_test(NAME test-tokenizer-spm-train SOURCES unit/test-tokenizer-spm-train.c LIBS dse dsv::cjson LABELS unit TIMEOUT 120)
