# The pages under the engine's KV caches: 2 MiB where transparent huge pages allow,
# 4 KiB otherwise (engine/src/kv_pages.c).
dsv_test(NAME test-engine-kv-pages SOURCES unit/test-engine-kv-pages.c LIBS dse LABELS unit TIMEOUT 300)
target_include_directories(test-engine-kv-pages PRIVATE ${CMAKE_SOURCE_DIR}/engine/src)
