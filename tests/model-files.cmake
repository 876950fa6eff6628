# Model files (engine/src/model: native format, loader, HF import, converter): unit tests
# over the fixtures, bad-input tests, and libFuzzer targets for the header parsers.
dsv_test(NAME test-modelfile-convert SOURCES unit/test-modelfile-convert.c LIBS dse LABELS unit TIMEOUT 120)
target_include_directories(test-modelfile-convert PRIVATE ${CMAKE_SOURCE_DIR}/engine/src)
dsv_test(NAME test-modelfile-tokenizer SOURCES unit/test-modelfile-tokenizer.c LIBS dse LABELS unit TIMEOUT 60)
target_include_directories(test-modelfile-tokenizer PRIVATE ${CMAKE_SOURCE_DIR}/engine/src)
dsv_test(NAME test-modelfile-quant SOURCES unit/test-modelfile-quant.c LIBS dse LABELS unit TIMEOUT 120)
target_include_directories(test-modelfile-quant PRIVATE ${CMAKE_SOURCE_DIR}/engine/src)
dsv_test(NAME test-modelfile-bad SOURCES unit/test-modelfile-bad.c LIBS dse LABELS unit TIMEOUT 120)
target_include_directories(test-modelfile-bad PRIVATE ${CMAKE_SOURCE_DIR}/engine/src)
dsv_test(NAME test-modelfile-checkpoints SOURCES unit/test-modelfile-checkpoints.c LIBS dse LABELS unit TIMEOUT 120)
target_include_directories(test-modelfile-checkpoints PRIVATE ${CMAKE_SOURCE_DIR}/engine/src)
dsv_script_test(NAME test-modelfile-cli SCRIPT ${CMAKE_SOURCE_DIR}/tests/integration/modelfile-cli.sh LABELS integration TIMEOUT 60)

# libFuzzer targets for the safetensors and native header parsers and the config.json
# parser (cmake -DDSV_FUZZ=ON with CC=clang).
if(DSV_FUZZ)
  foreach(f safetensors native hfconfig)
    dsv_add_fuzzer(fuzz-${f}-header fuzz/fuzz-${f}-header.c)
    target_include_directories(fuzz-${f}-header PRIVATE ${CMAKE_SOURCE_DIR}/engine/src)
    target_link_libraries(fuzz-${f}-header PRIVATE dse)
  endforeach()
endif()
# compressed-tensors checkpoints written from the fixtures by tests/ct/make-ct-fixture.py.
dsv_test(NAME test-model-ct SOURCES models/test-model-ct.c LIBS dse LABELS integration TIMEOUT 300)
target_include_directories(test-model-ct PRIVATE ${CMAKE_SOURCE_DIR}/engine/src ${CMAKE_SOURCE_DIR}/tests/models)
dsv_test(NAME test-modelfile-ct-config SOURCES unit/test-modelfile-ct-config.c LIBS dse LABELS unit TIMEOUT 60)
target_include_directories(test-modelfile-ct-config PRIVATE ${CMAKE_SOURCE_DIR}/engine/src)
