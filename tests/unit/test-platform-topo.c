/* The hwloc topology reader on synthetic strings, XML files and this machine. */
#include <hwloc.h>
#include <sched.h>
#include <unistd.h>

#include "dsv_platform.h"
#include "dsv_policy.h"
#include "t.h"

static struct dsv_topology topo;

/* Every node has n_cores cores of n_pus PUs, and the layout invariants hold. */
static void check_uniform(int n_nodes, int n_cores, int n_pus) {
        ASSERT_OK(dsv_topology_check(&topo));
        ASSERT_EQ(topo.n_nodes, n_nodes);
        ASSERT_EQ(topo.n_cores, n_nodes * n_cores);
        ASSERT_EQ(topo.n_pus, n_nodes * n_cores * n_pus);
        for (int n = 0; n < n_nodes; n++) {
                ASSERT_EQ(topo.nodes[n].os_index, n);
                ASSERT_EQ(topo.nodes[n].n_cores, n_cores);
                ASSERT_TRUE(topo.nodes[n].memory_bytes > 0);
        }
        for (int c = 0; c < topo.n_cores; c++) {
                ASSERT_EQ(topo.cores[c].n_pus, n_pus);
                ASSERT_EQ(topo.cores[c].node, c / n_cores);
                /* hwloc numbers synthetic PUs in order: core c holds c*n_pus .. */
                for (int u = 0; u < n_pus; u++)
                        ASSERT_EQ(topo.pus[topo.cores[c].pu_first + u], c * n_pus + u);
        }
}

TEST(synthetic_two_sockets_four_nodes_smt) {
        ASSERT_OK(dsv_topo_load(DSV_TOPO_SOURCE_SYNTHETIC, "pack:2 numa:2 core:16 pu:2", &topo));
        check_uniform(4, 16, 2);
        /* The long spelling is the same machine. */
        static struct dsv_topology again;
        ASSERT_OK(dsv_topo_load(DSV_TOPO_SOURCE_SYNTHETIC, "package:2 node:2 core:16 pu:2", &again));
        ASSERT_TRUE(memcmp(&topo, &again, sizeof topo) == 0);
}

TEST(synthetic_eight_nodes) {
        ASSERT_OK(dsv_topo_load(DSV_TOPO_SOURCE_SYNTHETIC, "numa:8 core:8 pu:1", &topo));
        check_uniform(8, 8, 1);
}

TEST(synthetic_this_machine_shape) {
        ASSERT_OK(dsv_topo_load(DSV_TOPO_SOURCE_SYNTHETIC, "pack:1 numa:1 core:2 pu:1", &topo));
        check_uniform(1, 2, 1);
}

TEST(synthetic_memory_levels_between) {
        /* Caches between node and core do not change the result. */
        ASSERT_OK(dsv_topo_load(DSV_TOPO_SOURCE_SYNTHETIC, "pack:2 numa:1 l3:2 l2:4 core:1 pu:2", &topo));
        check_uniform(2, 8, 2);
}

TEST(synthetic_without_cores_gives_one_core_per_pu) {
        ASSERT_OK(dsv_topo_load(DSV_TOPO_SOURCE_SYNTHETIC, "numa:2 pu:3", &topo));
        check_uniform(2, 3, 1);
        ASSERT_EQ(topo.cores[0].os_index, -1);
}

/* Writes an XML file of an uneven machine (nodes with 6, 4 and 2 cores): the synthetic
 * "numa:3 core:6 pu:2" restricted to the first cores of nodes 1 and 2. */
static int write_uneven_xml(const char *path) {
        hwloc_topology_t h;
        if (hwloc_topology_init(&h) < 0)
                return -errno;
        int r = -EINVAL;
        hwloc_bitmap_t keep = hwloc_bitmap_alloc();
        if (!keep)
                goto out;
        if (hwloc_topology_set_synthetic(h, "numa:3 core:6 pu:2") < 0 || hwloc_topology_load(h) < 0)
                goto out;
        static const int keep_cores[3] = {6, 4, 2};
        for (int n = 0; n < 3; n++)
                for (int c = 0; c < keep_cores[n]; c++)
                        hwloc_bitmap_set_range(keep, (unsigned)((n * 6 + c) * 2), (n * 6 + c) * 2 + 1);
        if (hwloc_topology_restrict(h, keep, 0) < 0 || hwloc_topology_export_xml(h, path, 0) < 0)
                goto out;
        r = 0;
out:
        hwloc_bitmap_free(keep);
        hwloc_topology_destroy(h);
        return r;
}

TEST(xml_uneven_nodes) {
        char path[] = "/tmp/dsv-topo-XXXXXX.xml";
        int fd = mkstemps(path, 4);
        ASSERT_TRUE(fd >= 0);
        close(fd);
        int r = write_uneven_xml(path);
        if (r == 0)
                r = dsv_topo_load(DSV_TOPO_SOURCE_XML, path, &topo);
        unlink(path);
        ASSERT_OK(r);
        ASSERT_OK(dsv_topology_check(&topo));
        ASSERT_EQ(topo.n_nodes, 3);
        ASSERT_EQ(topo.nodes[0].n_cores, 6);
        ASSERT_EQ(topo.nodes[1].n_cores, 4);
        ASSERT_EQ(topo.nodes[2].n_cores, 2);
        ASSERT_EQ(topo.n_pus, 24);
        /* Node 1's first core is core 6 of the original machine: PUs 12 and 13. */
        const struct dsv_topology_core *c = &topo.cores[topo.nodes[1].core_first];
        ASSERT_EQ(topo.pus[c->pu_first], 12);
        ASSERT_EQ(topo.pus[c->pu_first + 1], 13);
}

TEST(system_matches_affinity) {
        ASSERT_OK(dsv_topo_load(DSV_TOPO_SOURCE_SYSTEM, NULL, &topo));
        ASSERT_OK(dsv_topology_check(&topo));
        cpu_set_t set;
        ASSERT_OK(sched_getaffinity(0, sizeof set, &set));
        ASSERT_EQ(topo.n_pus, CPU_COUNT(&set));
        for (int i = 0; i < topo.n_pus; i++)
                ASSERT_TRUE(CPU_ISSET(topo.pus[i], &set));
        ASSERT_TRUE(topo.n_nodes >= 1);
        ASSERT_TRUE(topo.n_cores >= 1);
}

TEST(system_honours_hwloc_synthetic_env) {
        /* The seam integration tests of 'dsvisor start' use to fake a NUMA machine. */
        ASSERT_OK(setenv("HWLOC_SYNTHETIC", "numa:3 core:4 pu:2", 1));
        int r = dsv_topo_load(DSV_TOPO_SOURCE_SYSTEM, NULL, &topo);
        unsetenv("HWLOC_SYNTHETIC");
        ASSERT_OK(r);
        check_uniform(3, 4, 2);
}

TEST(errors_leave_result_untouched) {
        memset(&topo, 0x5a, sizeof topo);
        ASSERT_ERR(dsv_topo_load(DSV_TOPO_SOURCE_SYNTHETIC, "bogus:3 pu:x", &topo), -EINVAL);
        ASSERT_ERR(dsv_topo_load(DSV_TOPO_SOURCE_SYNTHETIC, NULL, &topo), -EINVAL);
        ASSERT_ERR(dsv_topo_load(DSV_TOPO_SOURCE_XML, "", &topo), -EINVAL);
        ASSERT_ERR(dsv_topo_load(DSV_TOPO_SOURCE_COUNT, "x", &topo), -EINVAL);
        ASSERT_TRUE(dsv_topo_load(DSV_TOPO_SOURCE_XML, "/nonexistent/dsv-topo.xml", &topo) < 0);
        ASSERT_EQ(topo.n_nodes, 0x5a5a5a5a);
        ASSERT_STREQ(dsv_topo_source_to_string(DSV_TOPO_SOURCE_XML), "xml");
}
