/* Placement on synthetic topologies built here (policy is tested on plain structs only). */
#include <stdbool.h>

#include "dsv_policy.h"
#include "t.h"

static struct dsv_topology topo;
static struct dsv_policy_placement plan;

/* Builds nodes with the given core counts; with smt > 1 the siblings are numbered the
 * Linux way: PU k of core c is CPU c + k * n_cores, so a core's PUs are not adjacent. */
static void make_topo(struct dsv_topology *t, int n_nodes, const int *cores_per_node, int smt) {
        memset(t, 0, sizeof *t);
        int total = 0;
        for (int n = 0; n < n_nodes; n++)
                total += cores_per_node[n];
        t->n_nodes = n_nodes;
        for (int n = 0; n < n_nodes; n++) {
                t->nodes[n] = (struct dsv_topology_node){.os_index = n, .core_first = t->n_cores,
                                                         .n_cores = cores_per_node[n], .memory_bytes = 1u << 30};
                for (int c = 0; c < cores_per_node[n]; c++) {
                        int id = t->n_cores;
                        t->cores[id] = (struct dsv_topology_core){.os_index = id, .node = n, .pu_first = t->n_pus,
                                                                  .n_pus = smt};
                        for (int k = 0; k < smt; k++)
                                t->pus[t->n_pus++] = id + k * total;
                        t->n_cores++;
                }
        }
}

static void make_uniform(struct dsv_topology *t, int n_nodes, int cores, int smt) {
        int per[DSV_TOPOLOGY_MAX_NODES];
        for (int n = 0; n < n_nodes; n++)
                per[n] = cores;
        make_topo(t, n_nodes, per, smt);
}

static int place(int n_instances, int threads) {
        struct dsv_policy_place_request req = {.n_instances = n_instances, .threads_per_instance = threads};
        return dsv_policy_place_instances(&topo, &req, &plan);
}

static bool has_warning(const char *needle) {
        for (int i = 0; i < plan.n_warnings; i++)
                if (strstr(plan.warnings[i], needle))
                        return true;
        return false;
}

/* The invariants every placement keeps: instances on their node's cores with memory on
 * that node; whole cores (each CPU's SMT siblings in the same instance); slices disjoint
 * from each other and from the housekeeping core unless flagged shared; instance counts
 * per node and slice sizes per node differ by at most one. */
static void check_invariants(void) {
        static int owner[1 << 16];
        for (int i = 0; i < (1 << 16); i++)
                owner[i] = -1;
        if (plan.housekeeping_core >= 0) {
                const struct dsv_topology_core *hk = &topo.cores[plan.housekeeping_core];
                for (int u = 0; u < hk->n_pus; u++)
                        owner[topo.pus[hk->pu_first + u]] = 1000;
        }
        int per_node[DSV_TOPOLOGY_MAX_NODES] = {0};
        int min_cores[DSV_TOPOLOGY_MAX_NODES], max_cores[DSV_TOPOLOGY_MAX_NODES];
        for (int n = 0; n < topo.n_nodes; n++)
                min_cores[n] = 1 << 30, max_cores[n] = 0;
        for (int i = 0; i < plan.n_instances; i++) {
                const struct dsv_policy_instance *inst = &plan.instances[i];
                ASSERT_TRUE(inst->node >= 0 && inst->node < topo.n_nodes);
                ASSERT_EQ(inst->mem_node_os, topo.nodes[inst->node].os_index);
                ASSERT_TRUE(inst->n_cores >= 1);
                ASSERT_TRUE(inst->n_threads >= 1);
                per_node[inst->node]++;
                if (inst->n_cores < min_cores[inst->node])
                        min_cores[inst->node] = inst->n_cores;
                if (inst->n_cores > max_cores[inst->node])
                        max_cores[inst->node] = inst->n_cores;
                int n_pus = 0;
                for (int c = inst->core_first; c < inst->core_first + inst->n_cores; c++) {
                        ASSERT_EQ(topo.cores[c].node, inst->node);
                        ASSERT_TRUE(c != plan.housekeeping_core);
                        n_pus += topo.cores[c].n_pus;
                }
                ASSERT_EQ(inst->n_pus, n_pus);
                int cpus[DSV_TOPOLOGY_MAX_PUS];
                int n = dsv_policy_instance_cpus(&topo, inst, cpus, DSV_TOPOLOGY_MAX_PUS);
                ASSERT_EQ(n, n_pus);
                for (int k = 0; k < n; k++) {
                        if (!inst->shared) {
                                ASSERT_TRUE(owner[cpus[k]] == -1);
                                owner[cpus[k]] = i;
                        }
                }
                /* Sibling grouping: for every core touched, all of its PUs are in the list. */
                for (int c = 0; c < topo.n_cores; c++) {
                        int hits = 0;
                        for (int u = 0; u < topo.cores[c].n_pus; u++)
                                for (int k = 0; k < n; k++)
                                        hits += cpus[k] == topo.pus[topo.cores[c].pu_first + u];
                        ASSERT_TRUE(hits == 0 || hits == topo.cores[c].n_pus);
                }
        }
        int lo = 1 << 30, hi = 0;
        for (int n = 0; n < topo.n_nodes; n++) {
                int free_cores = topo.nodes[n].n_cores -
                                 (plan.housekeeping_core >= 0 && topo.cores[plan.housekeeping_core].node == n);
                if (free_cores <= 0)
                        continue;
                if (per_node[n] < lo)
                        lo = per_node[n];
                if (per_node[n] > hi)
                        hi = per_node[n];
                if (per_node[n] > 0)
                        ASSERT_TRUE(max_cores[n] - min_cores[n] <= 1);
        }
        ASSERT_TRUE(hi - lo <= 1);
}

TEST(this_machine_one_node_two_cores) {
        make_uniform(&topo, 1, 2, 1);
        ASSERT_OK(place(0, 0));
        check_invariants();
        ASSERT_EQ(plan.n_instances, 1);
        ASSERT_EQ(plan.housekeeping_core, -1); /* two cores: nothing to spare */
        ASSERT_EQ(plan.instances[0].n_cores, 2);
        ASSERT_EQ(plan.instances[0].n_threads, 2);
        ASSERT_EQ(plan.instances[0].mem_node_os, 0);
        ASSERT_TRUE(!plan.oversubscribed);
        ASSERT_EQ(plan.n_warnings, 0);
        ASSERT_EQ(plan.n_unused_nodes, 0);
        int cpus[8];
        char list[64];
        int n = dsv_policy_instance_cpus(&topo, &plan.instances[0], cpus, 8);
        ASSERT_EQ(n, 2);
        ASSERT_OK(dsv_policy_cpulist_format(cpus, (size_t)n, list, sizeof list));
        ASSERT_STREQ(list, "0-1");
}

TEST(this_machine_oversubscribed_instances_are_reported) {
        make_uniform(&topo, 1, 2, 1);
        ASSERT_OK(place(3, 0));
        check_invariants();
        ASSERT_EQ(plan.n_instances, 3);
        ASSERT_TRUE(plan.oversubscribed);
        for (int i = 0; i < 3; i++) {
                ASSERT_TRUE(plan.instances[i].shared);
                ASSERT_EQ(plan.instances[i].n_cores, 1);
        }
        ASSERT_EQ(plan.instances[0].core_first, 0);
        ASSERT_EQ(plan.instances[1].core_first, 1);
        ASSERT_EQ(plan.instances[2].core_first, 0);
        ASSERT_TRUE(has_warning("3 instances on 2 free cores"));
}

TEST(this_machine_threads_over_share_are_reported) {
        make_uniform(&topo, 1, 2, 1);
        ASSERT_OK(place(1, 4));
        ASSERT_EQ(plan.instances[0].n_threads, 4);
        ASSERT_TRUE(plan.oversubscribed);
        ASSERT_TRUE(!plan.instances[0].shared);
        ASSERT_TRUE(has_warning("instance 0: 4 threads on 2 cores"));
        ASSERT_OK(place(1, 1)); /* a cap below the share is not oversubscription */
        ASSERT_EQ(plan.instances[0].n_threads, 1);
        ASSERT_TRUE(!plan.oversubscribed);
        ASSERT_EQ(plan.n_warnings, 0);
}

/* "pack:2 numa:2 core:16 pu:2": 4 nodes × 16 cores × 2 PUs, siblings c and c+64. */
TEST(two_sockets_four_nodes_smt) {
        make_uniform(&topo, 4, 16, 2);
        ASSERT_OK(place(0, 0));
        check_invariants();
        ASSERT_EQ(plan.n_instances, 4);
        ASSERT_EQ(plan.housekeeping_core, 0);
        const struct dsv_topology_core *hk = &topo.cores[0];
        ASSERT_EQ(hk->n_pus, 2);
        ASSERT_EQ(topo.pus[hk->pu_first], 0);
        ASSERT_EQ(topo.pus[hk->pu_first + 1], 64);
        ASSERT_EQ(plan.instances[0].n_cores, 15);
        ASSERT_EQ(plan.instances[0].n_pus, 30);
        ASSERT_EQ(plan.instances[0].n_threads, 15);
        for (int i = 1; i < 4; i++) {
                ASSERT_EQ(plan.instances[i].node, i);
                ASSERT_EQ(plan.instances[i].n_cores, 16);
                ASSERT_EQ(plan.instances[i].n_threads, 16);
        }
        int cpus[64];
        char list[128];
        int n = dsv_policy_instance_cpus(&topo, &plan.instances[0], cpus, 64);
        ASSERT_EQ(n, 30);
        ASSERT_OK(dsv_policy_cpulist_format(cpus, (size_t)n, list, sizeof list));
        ASSERT_STREQ(list, "1-15,65-79");
        ASSERT_TRUE(!plan.oversubscribed);
        ASSERT_EQ(plan.n_warnings, 0);
}

TEST(two_sockets_eight_instances_split_each_node) {
        make_uniform(&topo, 4, 16, 2);
        ASSERT_OK(place(8, 0));
        check_invariants();
        ASSERT_EQ(plan.n_instances, 8);
        ASSERT_EQ(plan.instances[0].n_cores + plan.instances[1].n_cores, 15);
        ASSERT_EQ(plan.instances[2].n_cores, 8);
        ASSERT_EQ(plan.instances[3].n_cores, 8);
        ASSERT_TRUE(!plan.oversubscribed);
}

TEST(two_sockets_every_instance_count) {
        make_uniform(&topo, 4, 16, 2);
        for (int n = 1; n <= 100; n++) {
                ASSERT_OK(place(n, 0));
                check_invariants();
                if (t_failed_current)
                        T_FAIL("invariants broken for %d instances", n);
                ASSERT_EQ(plan.n_instances, n);
                ASSERT_EQ(plan.oversubscribed, n > 63);
                ASSERT_EQ(plan.n_unused_nodes, n < 4 ? 4 - n : 0);
        }
}

TEST(eight_nodes_eight_cores) {
        make_uniform(&topo, 8, 8, 1);
        ASSERT_OK(place(0, 0));
        check_invariants();
        ASSERT_EQ(plan.n_instances, 8);
        for (int i = 0; i < 8; i++) {
                ASSERT_EQ(plan.instances[i].node, i);
                ASSERT_EQ(plan.instances[i].mem_node_os, i);
                ASSERT_EQ(plan.instances[i].n_cores, i == 0 ? 7 : 8);
        }
        ASSERT_OK(place(20, 0)); /* 20 over 8 nodes: four nodes get 3, four get 2 */
        check_invariants();
        int per_node[8] = {0};
        for (int i = 0; i < plan.n_instances; i++)
                per_node[plan.instances[i].node]++;
        int threes = 0;
        for (int n = 0; n < 8; n++) {
                ASSERT_TRUE(per_node[n] == 2 || per_node[n] == 3);
                threes += per_node[n] == 3;
        }
        ASSERT_EQ(threes, 4);
        ASSERT_EQ(per_node[0], 2); /* node 0 has a core fewer: the extras go elsewhere first */
}

TEST(uneven_nodes_six_four_two) {
        static const int cores[] = {6, 4, 2};
        make_topo(&topo, 3, cores, 1);
        ASSERT_OK(place(0, 0));
        check_invariants();
        ASSERT_EQ(plan.n_instances, 3);
        ASSERT_EQ(plan.instances[0].n_cores, 5);
        ASSERT_EQ(plan.instances[1].n_cores, 4);
        ASSERT_EQ(plan.instances[2].n_cores, 2);

        ASSERT_OK(place(5, 0)); /* the two extra instances go to the nodes with most cores */
        check_invariants();
        int per_node[3] = {0};
        for (int i = 0; i < plan.n_instances; i++)
                per_node[plan.instances[i].node]++;
        ASSERT_EQ(per_node[0], 2);
        ASSERT_EQ(per_node[1], 2);
        ASSERT_EQ(per_node[2], 1);
        ASSERT_EQ(plan.instances[0].n_cores, 3);
        ASSERT_EQ(plan.instances[1].n_cores, 2);
        ASSERT_TRUE(!plan.oversubscribed);
}

TEST(fewer_instances_than_nodes_report_unused) {
        static const int cores[] = {6, 4, 2};
        make_topo(&topo, 3, cores, 1);
        ASSERT_OK(place(2, 0));
        check_invariants();
        ASSERT_EQ(plan.n_instances, 2);
        ASSERT_EQ(plan.instances[0].node, 0);
        ASSERT_EQ(plan.instances[1].node, 1);
        ASSERT_EQ(plan.n_unused_nodes, 1);
        ASSERT_EQ(plan.unused_nodes[0], 2);
        ASSERT_TRUE(has_warning("node 2: no instance, 2 cores idle"));
        ASSERT_TRUE(!plan.oversubscribed);
}

TEST(memory_only_node_gets_no_instance) {
        static const int cores[] = {4, 0, 4};
        make_topo(&topo, 3, cores, 2);
        ASSERT_OK(place(0, 0));
        check_invariants();
        ASSERT_EQ(plan.n_instances, 2);
        ASSERT_EQ(plan.instances[0].node, 0);
        ASSERT_EQ(plan.instances[1].node, 2);
        ASSERT_EQ(plan.n_unused_nodes, 1);
        ASSERT_EQ(plan.unused_nodes[0], 1);
}

TEST(housekeeping_none_and_node0_single_core) {
        make_uniform(&topo, 2, 4, 1);
        struct dsv_policy_place_request req = {.housekeeping = DSV_POLICY_HOUSEKEEPING_NONE};
        ASSERT_OK(dsv_policy_place_instances(&topo, &req, &plan));
        ASSERT_EQ(plan.housekeeping_core, -1);
        ASSERT_EQ(plan.instances[0].n_cores, 4);

        static const int cores[] = {1, 4};
        make_topo(&topo, 2, cores, 1);
        ASSERT_OK(place(0, 0)); /* node 0's only core is housekeeping: one instance */
        check_invariants();
        ASSERT_EQ(plan.housekeeping_core, 0);
        ASSERT_EQ(plan.n_instances, 1);
        ASSERT_EQ(plan.instances[0].node, 1);
        ASSERT_TRUE(has_warning("kept for housekeeping"));
}

TEST(bad_input) {
        make_uniform(&topo, 1, 2, 1);
        ASSERT_ERR(place(-1, 0), -EINVAL);
        ASSERT_ERR(place(1, -1), -EINVAL);
        ASSERT_ERR(place(DSV_POLICY_MAX_INSTANCES + 1, 0), -E2BIG);
        ASSERT_ERR(dsv_policy_place_instances(NULL, &(struct dsv_policy_place_request){0}, &plan), -EINVAL);
        topo.nodes[0].n_cores = 3; /* claims a core that does not exist */
        ASSERT_ERR(place(0, 0), -EINVAL);
        make_uniform(&topo, 1, 2, 1);
        topo.pus[1] = 0; /* CPU 0 listed twice */
        ASSERT_ERR(dsv_topology_check(&topo), -EINVAL);
        make_uniform(&topo, 2, 2, 1);
        topo.cores[1].node = 1; /* core inside node 0's range claims node 1 */
        ASSERT_ERR(dsv_topology_check(&topo), -EINVAL);
        make_uniform(&topo, 2, 2, 1);
        topo.cores[3].node = 99; /* node index out of range */
        ASSERT_ERR(dsv_topology_check(&topo), -EINVAL);
        make_uniform(&topo, 2, 2, 1);
        topo.pus[2] = 1 << 20; /* CPU number beyond any kernel */
        ASSERT_ERR(dsv_topology_check(&topo), -EINVAL);
        make_uniform(&topo, 2, 2, 1);
        ASSERT_OK(dsv_topology_check(&topo));
}

TEST(cpulist_format) {
        char buf[32];
        static const int a[] = {7, 3, 4, 5, 0, 5, 9, 10};
        ASSERT_EQ(dsv_policy_cpulist_format(a, 8, buf, sizeof buf), 12);
        ASSERT_STREQ(buf, "0,3-5,7,9-10");
        ASSERT_EQ(dsv_policy_cpulist_format(a, 0, buf, sizeof buf), 0);
        ASSERT_STREQ(buf, "");
        ASSERT_ERR(dsv_policy_cpulist_format(a, 8, buf, 5), -ENOBUFS);
        static const int neg[] = {-1};
        ASSERT_ERR(dsv_policy_cpulist_format(neg, 1, buf, sizeof buf), -EINVAL);
        make_uniform(&topo, 1, 4, 2);
        int cpus[4];
        ASSERT_ERR(dsv_policy_instance_cpus(&topo, &(struct dsv_policy_instance){.core_first = 0, .n_cores = 4}, cpus, 4),
                   -ENOBUFS);
}

TEST(warnings_are_capped_not_dropped_silently) {
        make_uniform(&topo, 1, 2, 1);
        ASSERT_OK(place(1, 0));
        make_uniform(&topo, 1, 40, 1);
        ASSERT_OK(place(20, 100)); /* 20 "threads on cores" warnings */
        ASSERT_EQ(plan.n_warnings, DSV_POLICY_MAX_WARNINGS);
        ASSERT_EQ(plan.n_warnings_dropped, 20 - DSV_POLICY_MAX_WARNINGS);
        char want[64];
        snprintf(want, sizeof want, "... and %d more warnings", 20 - DSV_POLICY_MAX_WARNINGS + 1);
        ASSERT_STREQ(plan.warnings[DSV_POLICY_MAX_WARNINGS - 1], want);
}

TEST(random_topologies_keep_invariants) {
        uint64_t x = 2026;
        for (int iter = 0; iter < 400; iter++) {
                int per[12];
                x = x * 6364136223846793005ull + 1442695040888963407ull;
                int n_nodes = 1 + (int)(x >> 59) % 12, smt = 1 + (int)(x >> 40) % 4, any = 0;
                for (int n = 0; n < n_nodes; n++) {
                        x = x * 6364136223846793005ull + 1442695040888963407ull;
                        per[n] = (int)(x >> 50) % 21; /* 0..20 cores: memory-only nodes too */
                        any += per[n];
                }
                if (!any)
                        per[0] = 1;
                make_topo(&topo, n_nodes, per, smt);
                x = x * 6364136223846793005ull + 1442695040888963407ull;
                int n_inst = (int)(x >> 33) % 100, threads = (int)((x >> 20) % 24);
                int r = place(n_inst, threads);
                if (r < 0)
                        T_FAIL("iteration %d: %d nodes, smt %d, %d instances, %d threads: %s", iter, n_nodes, smt,
                               n_inst, threads, strerror(-r));
                check_invariants();
                if (t_failed_current)
                        T_FAIL("iteration %d: %d nodes, smt %d, %d instances, %d threads", iter, n_nodes, smt, n_inst,
                               threads);
                /* Oversubscribed exactly when a core is shared or threads exceed a slice. */
                bool expect = false;
                for (int i = 0; i < plan.n_instances; i++)
                        expect |= plan.instances[i].shared || plan.instances[i].n_threads > plan.instances[i].n_cores;
                ASSERT_EQ(plan.oversubscribed, expect);
                /* Warnings exactly when something is oversubscribed or cores sit idle. */
                bool idle = false;
                for (int i = 0; i < plan.n_unused_nodes; i++)
                        idle |= topo.nodes[plan.unused_nodes[i]].n_cores > 0;
                ASSERT_EQ(plan.n_warnings > 0, plan.oversubscribed || idle);
        }
}

/* ---- the operator's --cpus and --housekeeping-cpus on the given CPUs ---------------- */

static struct dsv_topology given;
static char why[256];

/* Applies the lists to `given` and places on the result (kept in topo, which the plan
 * indexes) as dsvisor start does: no automatic housekeeping once a list is given. */
static int choose_and_place(const char *cpus, const char *hk, int n_instances) {
        int r = dsv_policy_cpus_choose(&given, cpus, hk, n_instances, &topo, why, sizeof why);
        if (r < 0)
                return r;
        struct dsv_policy_place_request req = {
                .n_instances = n_instances,
                .housekeeping = r > 0 ? DSV_POLICY_HOUSEKEEPING_NONE : DSV_POLICY_HOUSEKEEPING_AUTO};
        return dsv_policy_place_instances(&topo, &req, &plan);
}

static const char *instance_list(int i) {
        static char buf[512];
        int cpus[DSV_TOPOLOGY_MAX_PUS];
        int n = dsv_policy_instance_cpus(&topo, &plan.instances[i], cpus, DSV_TOPOLOGY_MAX_PUS);
        if (n < 0 || dsv_policy_cpulist_format(cpus, (size_t)n, buf, sizeof buf) < 0)
                return "(error)";
        return buf;
}

TEST(cpulist_parse) {
        int cpus[16];
        ASSERT_EQ(dsv_policy_cpulist_parse("0,3-5,7,9-10", cpus, 16), 7);
        ASSERT_EQ(cpus[0], 0);
        ASSERT_EQ(cpus[3], 5);
        ASSERT_EQ(cpus[6], 10);
        ASSERT_EQ(dsv_policy_cpulist_parse("5,5,4-5", cpus, 16), 2); /* sorted, no duplicates */
        ASSERT_EQ(cpus[0], 4);
        ASSERT_EQ(dsv_policy_cpulist_parse("", cpus, 16), 0);
        ASSERT_ERR(dsv_policy_cpulist_parse("0-20", cpus, 16), -ENOBUFS);
        static const char *const bad[] = {"x", "1-", "-1", "3-1", "1,", ",1", "1 2", "1,,2", "65536", "1-2-3"};
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
                if (dsv_policy_cpulist_parse(bad[i], cpus, 16) != -EINVAL)
                        T_FAIL("'%s' was accepted", bad[i]);
}

TEST(no_lists_keep_the_default) {
        make_uniform(&given, 4, 16, 2);
        ASSERT_EQ(dsv_policy_cpus_choose(&given, NULL, "", 0, &topo, why, sizeof why), 0);
        ASSERT_TRUE(memcmp(&topo, &given, sizeof topo) == 0);
        ASSERT_OK(choose_and_place(NULL, NULL, 0));
        ASSERT_EQ(plan.housekeeping_core, 0);
}

TEST(two_sockets_cpus_and_housekeeping) {
        /* 2 sockets x 2 nodes x 16 cores, SMT: core c is CPUs c and c + 64. */
        make_uniform(&given, 4, 16, 2);
        ASSERT_EQ(dsv_policy_cpus_choose(&given, "2-15,66-79", "0-1,64-65", 0, &topo, why, sizeof why), 1);
        ASSERT_OK(choose_and_place("2-15,66-79", "0-1,64-65", 0));
        check_invariants();
        ASSERT_EQ(plan.housekeeping_core, -1);
        ASSERT_EQ(plan.n_instances, 1); /* only node 0 has chosen CPUs */
        ASSERT_STREQ(instance_list(0), "2-15,66-79");
        ASSERT_EQ(plan.instances[0].mem_node_os, 0);
        ASSERT_EQ(plan.n_unused_nodes, 3);

        /* Only --housekeeping-cpus: instances get every other CPU, one per node. */
        ASSERT_OK(choose_and_place(NULL, "0,64", 0));
        check_invariants();
        ASSERT_EQ(plan.n_instances, 4);
        ASSERT_STREQ(instance_list(0), "1-15,65-79");
        ASSERT_STREQ(instance_list(3), "48-63,112-127");
        ASSERT_EQ(plan.housekeeping_core, -1);
}

TEST(eight_nodes_cpus_on_some_nodes) {
        make_uniform(&given, 8, 8, 1);
        ASSERT_OK(choose_and_place("8-15,40-47", NULL, 4));
        check_invariants();
        ASSERT_EQ(plan.n_instances, 4);
        ASSERT_STREQ(instance_list(0), "8-11");
        ASSERT_STREQ(instance_list(1), "12-15");
        ASSERT_STREQ(instance_list(2), "40-43");
        ASSERT_STREQ(instance_list(3), "44-47");
        ASSERT_EQ(plan.instances[0].mem_node_os, 1);
        ASSERT_EQ(plan.instances[3].mem_node_os, 5);
}

TEST(uneven_nodes_housekeeping_list) {
        static const int per[3] = {6, 4, 2};
        make_topo(&given, 3, per, 1);
        ASSERT_OK(choose_and_place(NULL, "0-1,6", 0));
        check_invariants();
        ASSERT_EQ(plan.n_instances, 3);
        ASSERT_STREQ(instance_list(0), "2-5");
        ASSERT_STREQ(instance_list(1), "7-9");
        ASSERT_STREQ(instance_list(2), "10-11");
}

TEST(kubernetes_pod_set_across_two_nodes) {
        /* A static-policy pod: whole cores 3, 5, 17 and 18 with their siblings, on
         * nodes 0 and 1 of the two-socket machine; the kubelet hands out such sets. */
        make_uniform(&given, 4, 16, 2);
        static const char pod[] = "3,5,17-18,67,69,81-82";
        ASSERT_OK(choose_and_place(pod, NULL, 0));
        check_invariants();
        ASSERT_EQ(plan.n_instances, 2);
        ASSERT_STREQ(instance_list(0), "3,5,67,69");
        ASSERT_STREQ(instance_list(1), "17-18,81-82");
        ASSERT_EQ(plan.instances[0].mem_node_os, 0);
        ASSERT_EQ(plan.instances[1].mem_node_os, 1);
        ASSERT_EQ(plan.instances[0].n_threads, 2);
        /* The same set as the given set itself: the topology already restricted to it. */
        ASSERT_OK(dsv_policy_cpus_choose(&given, pod, NULL, 0, &given, why, sizeof why));
        ASSERT_OK(choose_and_place(NULL, "3,67", 0));
        check_invariants();
        ASSERT_EQ(plan.n_instances, 2);
        ASSERT_STREQ(instance_list(0), "5,69");
        ASSERT_STREQ(instance_list(1), "17-18,81-82");
        /* Half a core is allowed: the instance gets just that sibling. */
        ASSERT_OK(choose_and_place("3,5", NULL, 2));
        ASSERT_STREQ(instance_list(0), "3");
        ASSERT_STREQ(instance_list(1), "5");
}

TEST(bad_lists_name_the_cpus) {
        make_uniform(&given, 2, 4, 2); /* core c: CPUs c and c + 8 */
        ASSERT_ERR(choose_and_place("0-3,16-17", NULL, 0), -EINVAL);
        ASSERT_STREQ(why, "--cpus: CPUs 16-17 are not among the CPUs dsvisor was given (0-15)");
        ASSERT_ERR(choose_and_place(NULL, "20", 0), -EINVAL);
        ASSERT_STREQ(why, "--housekeeping-cpus: CPU 20 is not among the CPUs dsvisor was given (0-15)");
        ASSERT_ERR(choose_and_place("0-5", "4-7", 0), -EINVAL);
        ASSERT_STREQ(why, "--cpus and --housekeeping-cpus both list CPUs 4-5");
        ASSERT_ERR(choose_and_place("two", NULL, 0), -EINVAL);
        ASSERT_TRUE(strstr(why, "'two' is not a CPU list") != NULL);
        ASSERT_ERR(choose_and_place("1,9", NULL, 2), -EINVAL);
        ASSERT_STREQ(why, "--cpus 1,9: 1 core for 2 instances; each instance needs a core of its own");
        ASSERT_ERR(choose_and_place(NULL, "0-15", 0), -EINVAL);
        ASSERT_STREQ(why, "--housekeeping-cpus 0-15 leaves 0 cores (CPUs none) for 1 instance; each instance "
                          "needs a core of its own");
        /* Nothing was written on failure. */
        make_uniform(&topo, 1, 1, 1);
        ASSERT_ERR(dsv_policy_cpus_choose(&given, "99", NULL, 0, &topo, why, sizeof why), -EINVAL);
        ASSERT_EQ(topo.n_cores, 1);
}
