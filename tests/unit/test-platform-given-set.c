/* The given set: topologies restricted to a CPU binding (what `taskset -c` gives) and to
 * the cpuset of the process's own cgroup in fake v1, v2 and hybrid trees, on the
 * synthetic machines the placement tests use; and this process under a real binding. */
#include <fcntl.h>
#include <ftw.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dsv_platform.h"
#include "dsv_policy.h"
#include "t.h"

#define TWO_SOCKETS "pack:2 numa:2 core:16 pu:2" /* hwloc numbers core c's PUs 2c, 2c+1 */

static struct dsv_topology topo;
static struct dsv_given_set given;

struct fake_tree {
        char dir[64];
        char root[128]; /* dir/cg: the cgroup tree */
        char proc[128]; /* dir/proc-self-cgroup */
};

/* Writes content to dir/rel, creating the directories on the way. */
static void put(const struct fake_tree *f, const char *rel, const char *content) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", f->dir, rel);
        for (char *p = path + strlen(f->dir) + 1; (p = strchr(p, '/')); p++) {
                *p = '\0';
                mkdir(path, 0755);
                *p = '/';
        }
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0 || write(fd, content, strlen(content)) != (ssize_t)strlen(content))
                T_FAIL("cannot write %s", path);
        if (fd >= 0)
                close(fd);
}

static void fake_init(struct fake_tree *f, const char *proc_self_cgroup) {
        snprintf(f->dir, sizeof f->dir, "/tmp/dsv-given-XXXXXX");
        if (!mkdtemp(f->dir))
                T_FAIL("mkdtemp: %s", strerror(errno));
        snprintf(f->root, sizeof f->root, "%s/cg", f->dir);
        snprintf(f->proc, sizeof f->proc, "%s/proc-self-cgroup", f->dir);
        put(f, "proc-self-cgroup", proc_self_cgroup);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
        (void)st, (void)flag, (void)ftw;
        return remove(path);
}

static void fake_done(struct fake_tree *f) {
        nftw(f->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static int load(const char *synthetic, const struct dsv_given_source *src) {
        return dsv_topo_load_given(DSV_TOPO_SOURCE_SYNTHETIC, synthetic, src, &topo, &given);
}

static const char *pus(void) {
        static char buf[1024];
        if (dsv_policy_cpulist_format(topo.pus, (size_t)topo.n_pus, buf, sizeof buf) < 0)
                return "(error)";
        return buf;
}

TEST(no_source_is_the_whole_machine) {
        ASSERT_OK(load(TWO_SOCKETS, NULL));
        ASSERT_EQ(topo.n_pus, 128);
        ASSERT_STREQ(given.cpus, "0-127");
        ASSERT_STREQ(given.mems, "0-3");
        ASSERT_STREQ(given.cpus_left_out, "");
        ASSERT_STREQ(given.binding, "");
        ASSERT_EQ(given.cgroup.version, 0);
}

TEST(taskset_mask_on_two_sockets) {
        ASSERT_OK(load(TWO_SOCKETS, &(struct dsv_given_source){.affinity = "1-3,64-65"}));
        ASSERT_OK(dsv_topology_check(&topo));
        ASSERT_STREQ(pus(), "1-3,64-65");
        ASSERT_EQ(topo.n_nodes, 2); /* nodes without a given CPU are left out */
        ASSERT_EQ(topo.nodes[0].n_cores, 2);
        ASSERT_EQ(topo.nodes[1].os_index, 2);
        ASSERT_EQ(topo.nodes[1].n_cores, 1);
        ASSERT_EQ(topo.cores[0].n_pus, 1); /* half of core 0 */
        ASSERT_STREQ(given.binding, "1-3,64-65");
        ASSERT_STREQ(given.cpus_left_out, "0,4-63,66-127");
        ASSERT_STREQ(given.mems, "0,2");
        ASSERT_STREQ(given.mems_left_out, "1,3");

        /* Placed there, nothing lands outside the mask. */
        struct dsv_policy_placement plan;
        struct dsv_policy_place_request req = {.n_instances = 0};
        ASSERT_OK(dsv_policy_place_instances(&topo, &req, &plan));
        ASSERT_EQ(plan.n_instances, 2);
        ASSERT_EQ(plan.instances[0].mem_node_os, 0);
        ASSERT_EQ(plan.instances[1].mem_node_os, 2);
}

TEST(taskset_mask_on_eight_nodes) {
        ASSERT_OK(load("numa:8 core:8 pu:1", &(struct dsv_given_source){.affinity = "60-63,5"}));
        ASSERT_STREQ(pus(), "5,60-63");
        ASSERT_EQ(topo.n_nodes, 2);
        ASSERT_EQ(topo.nodes[0].n_cores, 1);
        ASSERT_EQ(topo.nodes[1].os_index, 7);
        ASSERT_EQ(topo.nodes[1].n_cores, 4);
        ASSERT_ERR(load("numa:8 core:8 pu:1", &(struct dsv_given_source){.affinity = "64-70"}), -ENODEV);
        ASSERT_ERR(load("numa:8 core:8 pu:1", &(struct dsv_given_source){.affinity = "x"}), -EINVAL);
}

TEST(cgroup_v1_cpuset) {
        struct fake_tree f;
        fake_init(&f, "5:memory:/x\n3:cpuset:/kubepods/pod1\n0::/\n");
        put(&f, "cg/cpuset/kubepods/pod1/cpuset.effective_cpus", "4-11\n");
        put(&f, "cg/cpuset/kubepods/pod1/cpuset.effective_mems", "0-1\n");
        put(&f, "cg/cpuset/kubepods/pod1/cpuset.cpus", "0-63\n"); /* configured, not effective */
        int r = load("numa:8 core:8 pu:1", &(struct dsv_given_source){.cgroup_root = f.root, .proc_self_cgroup = f.proc});
        ASSERT_OK(r);
        ASSERT_STREQ(pus(), "4-11");
        ASSERT_EQ(topo.n_nodes, 2); /* nodes 2-7: neither CPUs nor memory given */
        ASSERT_STREQ(given.mems, "0-1");
        ASSERT_STREQ(given.mems_left_out, "2-7");
        ASSERT_EQ(given.cgroup.version, 1);
        ASSERT_TRUE(strstr(given.cgroup.group, "/cg/cpuset/kubepods/pod1") != NULL);

        /* CPUs of a node whose memory is not given are left out with it. */
        put(&f, "cg/cpuset/kubepods/pod1/cpuset.effective_mems", "0\n");
        ASSERT_OK(load("numa:8 core:8 pu:1", &(struct dsv_given_source){.cgroup_root = f.root, .proc_self_cgroup = f.proc}));
        ASSERT_STREQ(pus(), "4-7");
        ASSERT_EQ(topo.n_nodes, 1);
        ASSERT_STREQ(given.cpus_left_out, "0-3,8-63");

        /* And the binding narrows it further: taskset inside the pod. */
        ASSERT_OK(load("numa:8 core:8 pu:1",
                       &(struct dsv_given_source){.affinity = "5-6", .cgroup_root = f.root, .proc_self_cgroup = f.proc}));
        ASSERT_STREQ(pus(), "5-6");
        fake_done(&f);
}

TEST(cgroup_v2_kubernetes_pod_across_two_nodes) {
        /* The container's group has no cpuset files of its own: the pod's applies. Whole
         * cores 3, 5 (node 0) and 17, 18 (node 1) of the two-socket machine. */
        struct fake_tree f;
        fake_init(&f, "0::/kubepods.slice/pod1.slice/ctr.scope\n");
        put(&f, "cg/cgroup.controllers", "cpuset cpu memory\n");
        put(&f, "cg/kubepods.slice/pod1.slice/cpuset.cpus.effective", "6-7,10-11,34-37\n");
        put(&f, "cg/kubepods.slice/pod1.slice/cpuset.mems.effective", "0-1\n");
        put(&f, "cg/kubepods.slice/pod1.slice/ctr.scope/cgroup.procs", "");
        ASSERT_OK(load(TWO_SOCKETS, &(struct dsv_given_source){.cgroup_root = f.root, .proc_self_cgroup = f.proc}));
        ASSERT_OK(dsv_topology_check(&topo));
        ASSERT_STREQ(pus(), "6-7,10-11,34-37");
        ASSERT_EQ(topo.n_nodes, 2);
        ASSERT_EQ(topo.nodes[0].n_cores, 2);
        ASSERT_EQ(topo.nodes[1].n_cores, 2);
        ASSERT_EQ(given.cgroup.version, 2);
        ASSERT_STREQ(given.cgroup.cpus, "6-7,10-11,34-37");
        ASSERT_STREQ(given.mems_left_out, "2-3");

        struct dsv_policy_placement plan;
        struct dsv_policy_place_request req = {.housekeeping = DSV_POLICY_HOUSEKEEPING_NONE};
        ASSERT_OK(dsv_policy_place_instances(&topo, &req, &plan));
        ASSERT_EQ(plan.n_instances, 2);
        int cpus[8];
        ASSERT_EQ(dsv_policy_instance_cpus(&topo, &plan.instances[1], cpus, 8), 4);
        ASSERT_EQ(cpus[0], 34);
        ASSERT_EQ(plan.instances[1].mem_node_os, 1);
        fake_done(&f);
}

TEST(cgroup_v2_hybrid_and_uneven) {
        /* Hybrid host: the v2 tree at <root>/unified; the cpuset makes the nodes uneven
         * (6, 4 and 2 cores). */
        struct fake_tree f;
        fake_init(&f, "0::/svc\n");
        put(&f, "cg/unified/svc/cpuset.cpus.effective", "0-11,12-19,24-27\n");
        put(&f, "cg/unified/svc/cpuset.mems.effective", "0-2\n");
        ASSERT_OK(load("numa:3 core:6 pu:2", &(struct dsv_given_source){.cgroup_root = f.root, .proc_self_cgroup = f.proc}));
        ASSERT_EQ(topo.nodes[0].n_cores, 6);
        ASSERT_EQ(topo.nodes[1].n_cores, 4);
        ASSERT_EQ(topo.nodes[2].n_cores, 2);
        ASSERT_STREQ(given.cpus_left_out, "20-23,28-35");
        fake_done(&f);
}

TEST(cgroup_without_cpuset_does_not_restrict) {
        struct fake_tree f;
        fake_init(&f, "0::/svc\n");
        put(&f, "cg/cgroup.controllers", "memory\n");
        put(&f, "cg/svc/cgroup.procs", "");
        ASSERT_OK(load(TWO_SOCKETS, &(struct dsv_given_source){.cgroup_root = f.root, .proc_self_cgroup = f.proc}));
        ASSERT_EQ(topo.n_pus, 128);
        ASSERT_EQ(given.cgroup.version, 0);
        /* A cpuset file that is not a list is an error for a tree named explicitly. */
        put(&f, "cg/svc/cpuset.cpus.effective", "zero\n");
        put(&f, "cg/svc/cpuset.mems.effective", "0\n");
        ASSERT_ERR(load(TWO_SOCKETS, &(struct dsv_given_source){.cgroup_root = f.root, .proc_self_cgroup = f.proc}),
                   -EBADMSG);
        fake_done(&f);
}

TEST(this_process_under_a_binding) {
        /* What `taskset -c <last CPU>` does to dsvisor: the binding is the machine. */
        cpu_set_t saved, one;
        ASSERT_OK(sched_getaffinity(0, sizeof saved, &saved));
        int last = -1;
        for (int c = 0; c < CPU_SETSIZE; c++)
                if (CPU_ISSET(c, &saved))
                        last = c;
        CPU_ZERO(&one);
        CPU_SET(last, &one);
        ASSERT_OK(sched_setaffinity(0, sizeof one, &one));
        int r = dsv_topo_load_given(DSV_TOPO_SOURCE_SYSTEM, NULL, &(struct dsv_given_source){.own = true}, &topo,
                                    &given);
        sched_setaffinity(0, sizeof saved, &saved);
        ASSERT_OK(r);
        ASSERT_EQ(topo.n_pus, 1);
        ASSERT_EQ(topo.pus[0], last);
        char want[16];
        snprintf(want, sizeof want, "%d", last);
        ASSERT_STREQ(given.cpus, want);
        ASSERT_STREQ(given.binding, want);
        if (CPU_COUNT(&saved) > 1)
                ASSERT_TRUE(given.cpus_left_out[0] != '\0');
        /* dsv_topo_load() of the system is the same. */
        static struct dsv_topology again;
        ASSERT_OK(sched_setaffinity(0, sizeof one, &one));
        r = dsv_topo_load(DSV_TOPO_SOURCE_SYSTEM, NULL, &again);
        sched_setaffinity(0, sizeof saved, &saved);
        ASSERT_OK(r);
        ASSERT_TRUE(memcmp(&topo, &again, sizeof topo) == 0);
}
