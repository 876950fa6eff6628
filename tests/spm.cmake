# SentencePiece .model tokenizers (engine/src/tok/tok_spm.c, spm_*.c).
foreach(spm sp_bpe sp_unigram)
  dsv_test(NAME test-tokenizer-${spm} SOURCES unit/test-tokenizer-sp.c LIBS dse dsv::cjson LABELS unit)
  target_compile_definitions(test-tokenizer-${spm} PRIVATE SPM_NAME="${spm}")
endforeach()
dsv_test(NAME test-tokenizer-spm-errors SOURCES unit/test-tokenizer-spm-errors.c LIBS dse LABELS unit)

# libFuzzer targets (configure with CC=clang -DDSV_FUZZ=ON). The tokenizer sources are
# compiled once more with coverage so the fuzzer sees inside the loader and encoders;
# the rest of libdse comes from the normal library.
if(DSV_FUZZ)
  set(SPM_FUZZ_FLAGS -fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer)
  add_library(dse_spm_fuzz STATIC
    ${CMAKE_SOURCE_DIR}/engine/src/tok/tokenizer.c
    ${CMAKE_SOURCE_DIR}/engine/src/tok/tok_spm.c
    ${CMAKE_SOURCE_DIR}/engine/src/tok/spm_proto.c
    ${CMAKE_SOURCE_DIR}/engine/src/tok/spm_trie.c
    ${CMAKE_SOURCE_DIR}/engine/src/tok/spm_norm.c
    ${CMAKE_SOURCE_DIR}/engine/src/log.c)
  target_include_directories(dse_spm_fuzz PRIVATE ${CMAKE_SOURCE_DIR}/engine/include ${CMAKE_SOURCE_DIR}/engine/src)
  target_compile_options(dse_spm_fuzz PRIVATE ${SPM_FUZZ_FLAGS})
  foreach(fz fuzz-spm-load fuzz-spm-encode)
    add_executable(${fz} fuzz/${fz}.c)
    target_compile_definitions(${fz} PRIVATE DSV_FIXTURES_DIR="${DSV_FIXTURES}")
    target_compile_options(${fz} PRIVATE -fsanitize=fuzzer,address,undefined)
    target_link_options(${fz} PRIVATE -fsanitize=fuzzer,address,undefined)
    target_link_libraries(${fz} PRIVATE dse_spm_fuzz dse)
  endforeach()
endif()

# Differential test against Debian's sentencepiece tools (spm_train/spm_encode/spm_decode,
# package `sentencepiece`, installed by scripts/bootstrap.sh --with-tests).
dsv_test(NAME test-tokenizer-spm-train SOURCES unit/test-tokenizer-spm-train.c LIBS dse dsv::cjson LABELS unit TIMEOUT 120)
