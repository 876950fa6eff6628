# Platform layer: cgroups (v1 through libcgroup, v2 through the fd-rooted writer) and the
# hugetlb weight image. Owner: engineer "c".
dsv_test(NAME test-platform-cgroup-fake SOURCES unit/test-platform-cgroup-fake.c
         LIBS dsv_platform LABELS unit)
target_include_directories(test-platform-cgroup-fake PRIVATE ${CMAKE_SOURCE_DIR}/supervisor/platform)

# Real groups on this host (root): v1 cpu/cpuset/memory and the v2 tree, a real child.
dsv_test(NAME test-platform-cgroup SOURCES integration/test-platform-cgroup.c
         LIBS dsv_platform LABELS integration TIMEOUT 120)

# The hugetlb weight image: reserves pages through /proc/sys/vm/nr_hugepages (root) and
# restores the old value.
dsv_test(NAME test-platform-hugepages SOURCES integration/test-platform-hugepages.c
         LIBS dsv_platform dsv::numa LABELS integration TIMEOUT 120)
