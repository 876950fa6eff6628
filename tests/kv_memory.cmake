# The engine's KV cache memory: its pages, 2 MiB where transparent huge pages allow, 4 KiB
# otherwise (engine/src/kv_pages.c), and the rows' layout in it (engine/src/kv.h).
dsv_test(NAME test-engine-kv-pages SOURCES unit/test-engine-kv-pages.c LIBS dse LABELS unit TIMEOUT 300)
target_include_directories(test-engine-kv-pages PRIVATE ${CMAKE_SOURCE_DIR}/engine/src)
dsv_test(NAME test-engine-kv-layout SOURCES unit/test-engine-kv-layout.c LIBS dse LABELS unit)
target_include_directories(test-engine-kv-layout PRIVATE ${CMAKE_SOURCE_DIR}/engine/src)
