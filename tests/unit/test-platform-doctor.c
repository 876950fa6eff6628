/* dsv_doctor_run() over small fake trees written here: the cases the CLI test
 * (tests/integration/test-doctor.sh) does not reach, and the report helpers. */
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dsv_platform.h"
#include "t.h"

static char root[256];

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
        return remove(path);
}

static void tree_new(void) {
        if (root[0])
                nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
        snprintf(root, sizeof root, "/tmp/dsv-test-doctor-XXXXXX");
        if (!mkdtemp(root))
                abort();
}

/* Writes content to root/rel, creating the directories. */
static int put(const char *rel, const char *content) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", root, rel);
        for (char *p = path + strlen(root) + 1; (p = strchr(p, '/')); p++) {
                *p = '\0';
                mkdir(path, 0755);
                *p = '/';
        }
        FILE *f = fopen(path, "we");
        if (!f)
                return -errno;
        fputs(content, f);
        return fclose(f) == 0 ? 0 : -errno;
}

static const struct dsv_doctor_check *find(const struct dsv_doctor_report *rep, const char *name) {
        for (int i = 0; i < rep->n_checks; i++)
                if (strcmp(rep->checks[i].name, name) == 0)
                        return &rep->checks[i];
        return NULL;
}

#define ASSERT_CHECK(rep, name, st, substr)                                                          \
        do {                                                                                         \
                const struct dsv_doctor_check *c_ = find(rep, name);                                 \
                if (!c_)                                                                             \
                        T_FAIL("no check %s", name);                                                 \
                if (c_->status != (st) || !strstr(c_->found, substr))                                \
                        T_FAIL("%s: %s '%s', expected %s '%s'", name, dsv_doctor_status_to_string(c_->status), \
                               c_->found, dsv_doctor_status_to_string(st), substr);                  \
                if (!c_->recommended[0] || !c_->reason[0])                                           \
                        T_FAIL("%s: no recommendation or reason", name);                             \
        } while (0)

static int cpus[] = {2, 3}, hk[] = {0, 1}, nodes[] = {0};

static struct dsv_doctor_request request(void) {
        return (struct dsv_doctor_request){.root = root, .instance_cpus = cpus, .n_instance_cpus = 2,
                                           .housekeeping_cpus = hk, .n_housekeeping_cpus = 2,
                                           .instance_nodes = nodes, .n_instance_nodes = 1,
                                           .model_bytes = 3 << 20};
}

TEST(status_names_and_exit_codes) {
        ASSERT_STREQ(dsv_doctor_status_to_string(DSV_DOCTOR_OK), "ok");
        ASSERT_STREQ(dsv_doctor_status_to_string(DSV_DOCTOR_UNKNOWN), "unknown");
        ASSERT_STREQ(dsv_doctor_status_to_string(DSV_DOCTOR_WARN), "warn");
        ASSERT_STREQ(dsv_doctor_status_to_string(DSV_DOCTOR_FAIL), "fail");
        ASSERT_STREQ(dsv_doctor_status_to_string(DSV_DOCTOR_STATUS_COUNT), "invalid");
        ASSERT_EQ(dsv_doctor_status_exit_code(DSV_DOCTOR_OK), 0);
        ASSERT_EQ(dsv_doctor_status_exit_code(DSV_DOCTOR_UNKNOWN), 0);
        ASSERT_EQ(dsv_doctor_status_exit_code(DSV_DOCTOR_WARN), 1);
        ASSERT_EQ(dsv_doctor_status_exit_code(DSV_DOCTOR_FAIL), 2);
}

TEST(report_add_worst_and_overflow) {
        static struct dsv_doctor_report rep;
        memset(&rep, 0, sizeof rep);
        ASSERT_EQ(dsv_doctor_report_worst(&rep), DSV_DOCTOR_OK);
        ASSERT_OK(dsv_doctor_report_add(&rep, "a", DSV_DOCTOR_UNKNOWN, "x", "y", "z"));
        ASSERT_EQ(dsv_doctor_report_worst(&rep), DSV_DOCTOR_UNKNOWN);
        ASSERT_OK(dsv_doctor_report_add(&rep, "b", DSV_DOCTOR_FAIL, NULL, NULL, NULL));
        ASSERT_OK(dsv_doctor_report_add(&rep, "c", DSV_DOCTOR_WARN, "", "", ""));
        ASSERT_EQ(dsv_doctor_report_worst(&rep), DSV_DOCTOR_FAIL);
        ASSERT_ERR(dsv_doctor_report_add(&rep, "d", DSV_DOCTOR_STATUS_COUNT, "", "", ""), -EINVAL);
        while (rep.n_checks < DSV_DOCTOR_MAX_CHECKS)
                ASSERT_OK(dsv_doctor_report_add(&rep, "fill", DSV_DOCTOR_OK, "", "", ""));
        ASSERT_ERR(dsv_doctor_report_add(&rep, "over", DSV_DOCTOR_OK, "", "", ""), -ENOSPC);
        ASSERT_EQ(rep.n_dropped, 1);
        /* long strings are cut to their fields, terminated */
        char big[1000];
        memset(big, 'v', sizeof big - 1);
        big[sizeof big - 1] = '\0';
        memset(&rep, 0, sizeof rep);
        ASSERT_OK(dsv_doctor_report_add(&rep, big, DSV_DOCTOR_OK, big, big, big));
        ASSERT_EQ(strlen(rep.checks[0].name), sizeof rep.checks[0].name - 1);
        ASSERT_EQ(strlen(rep.checks[0].reason), sizeof rep.checks[0].reason - 1);
}

TEST(bad_requests) {
        static struct dsv_doctor_report rep;
        struct dsv_doctor_request req = request();
        ASSERT_ERR(dsv_doctor_run(NULL, &rep), -EINVAL);
        ASSERT_ERR(dsv_doctor_run(&req, NULL), -EINVAL);
        int neg[] = {-1};
        req.instance_nodes = neg;
        ASSERT_ERR(dsv_doctor_run(&req, &rep), -EINVAL);
        req = request();
        int far[] = {5000};
        req.instance_cpus = far;
        req.n_instance_cpus = 1;
        ASSERT_ERR(dsv_doctor_run(&req, &rep), -EINVAL);
        req = request();
        req.instance_cpus = NULL;
        ASSERT_ERR(dsv_doctor_run(&req, &rep), -EINVAL);
}

TEST(empty_root_is_unknown_everywhere) {
        tree_new();
        static struct dsv_doctor_report rep;
        struct dsv_doctor_request req = request();
        ASSERT_OK(dsv_doctor_run(&req, &rep));
        ASSERT_EQ(rep.n_checks, 15); /* cgroup mode stops there; one HugePages line per node */
        for (int i = 0; i < rep.n_checks; i++)
                if (rep.checks[i].status != DSV_DOCTOR_UNKNOWN)
                        T_FAIL("%s is %s on an empty root", rep.checks[i].name,
                               dsv_doctor_status_to_string(rep.checks[i].status));
        ASSERT_EQ(dsv_doctor_report_worst(&rep), DSV_DOCTOR_UNKNOWN);
}

TEST(legacy_cgroups_single_node_balancing_and_limits) {
        tree_new();
        ASSERT_OK(put("proc/self/mounts", "tmpfs /sys/fs/cgroup tmpfs rw 0 0\n"
                                          "cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,nosuid,cpu,cpuacct 0 0\n"
                                          "cgroup /sys/fs/cgroup/cpuset cgroup rw,cpuset 0 0\n"
                                          "cgroup /sys/fs/cgroup/memory cgroup rw,memory 0 0\n"));
        ASSERT_OK(put("sys/fs/cgroup/cpu,cpuacct/cpu.shares", "1024\n")); /* no cpu.rt_runtime_us */
        ASSERT_OK(put("proc/sys/kernel/osrelease", "5.10.0-99\n"));
        ASSERT_OK(put("boot/config-5.10.0-99", "CONFIG_RT_GROUP_SCHED=y\nCONFIG_RT_GROUP_SCHED_DEFAULT_DISABLED=y\n"));
        ASSERT_OK(put("proc/sys/kernel/numa_balancing", "1\n"));
        ASSERT_OK(put("sys/devices/system/node/node0/meminfo", "Node 0 MemTotal: 1024 kB\n"));
        ASSERT_OK(put("proc/self/limits", "Limit Soft Hard Units\n"
                                          "Max locked memory         unlimited            unlimited            bytes\n"
                                          "Max realtime priority     0                    0\n"));
        ASSERT_OK(put("proc/self/status", "Name:\tx\nCapEff:\t0000000000800000\n")); /* CAP_SYS_NICE only */
        static struct dsv_doctor_report rep;
        struct dsv_doctor_request req = request();
        ASSERT_OK(dsv_doctor_run(&req, &rep));
        ASSERT_CHECK(&rep, "cgroup-mode", DSV_DOCTOR_WARN, "legacy");
        ASSERT_CHECK(&rep, "cgroup-controllers", DSV_DOCTOR_OK, "cpu cpuset memory in the v1 hierarchies");
        ASSERT_CHECK(&rep, "rt-group-sched", DSV_DOCTOR_OK, "off (/boot/config-5.10.0-99)");
        ASSERT_CHECK(&rep, "numa-balancing", DSV_DOCTOR_OK, "1"); /* one node: inactive */
        ASSERT_CHECK(&rep, "rlimit-memlock", DSV_DOCTOR_OK, "unlimited");
        ASSERT_CHECK(&rep, "rlimit-rtprio", DSV_DOCTOR_OK, "0, CAP_SYS_NICE");
        /* 3 MiB of weights in a 1 MiB node: fail, even before HugePages are looked at */
        ASSERT_OK(put("sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages", "2\n"));
        ASSERT_OK(put("sys/devices/system/node/node0/hugepages/hugepages-2048kB/free_hugepages", "2\n"));
        ASSERT_OK(dsv_doctor_run(&req, &rep));
        ASSERT_CHECK(&rep, "hugepages-node0", DSV_DOCTOR_FAIL, "2 free of 2");
        ASSERT_OK(put("sys/devices/system/node/node0/meminfo", "Node 0 MemTotal: 4194304 kB\n"));
        ASSERT_OK(dsv_doctor_run(&req, &rep));
        ASSERT_CHECK(&rep, "hugepages-node0", DSV_DOCTOR_OK, "2 free of 2"); /* 3 MiB: 2 pages */
        ASSERT_EQ(dsv_doctor_report_worst(&rep), DSV_DOCTOR_WARN);
}

TEST(irqs_without_counts_and_garbage) {
        tree_new();
        /* no /proc/interrupts: every IRQ counts; unparsable lists are skipped */
        ASSERT_OK(put("proc/irq/5/smp_affinity_list", "0-3\n"));
        ASSERT_OK(put("proc/irq/6/smp_affinity_list", "0\n"));
        ASSERT_OK(put("proc/irq/7/smp_affinity_list", "garbage\n"));
        ASSERT_OK(put("proc/irq/default_smp_affinity", "f\n"));
        static struct dsv_doctor_report rep;
        struct dsv_doctor_request req = request();
        ASSERT_OK(dsv_doctor_run(&req, &rep));
        ASSERT_CHECK(&rep, "irq-affinity", DSV_DOCTOR_WARN, "1 of 2 IRQs may fire on instance CPUs: 5");
        ASSERT_TRUE(strstr(find(&rep, "irq-affinity")->recommended, "housekeeping CPUs 0-1") != NULL);
        /* a THP file without brackets is unreadable, not an error */
        ASSERT_OK(put("sys/kernel/mm/transparent_hugepage/enabled", "madvise\n"));
        ASSERT_OK(dsv_doctor_run(&req, &rep));
        ASSERT_CHECK(&rep, "thp-enabled", DSV_DOCTOR_UNKNOWN, "madvise");
        /* never: the file mapping's MADV_HUGEPAGE gets nothing */
        ASSERT_OK(put("sys/kernel/mm/transparent_hugepage/enabled", "always madvise [never]\n"));
        ASSERT_OK(dsv_doctor_run(&req, &rep));
        ASSERT_CHECK(&rep, "thp-enabled", DSV_DOCTOR_WARN, "never");
        ASSERT_OK(put("sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never\n"));
        ASSERT_OK(dsv_doctor_run(&req, &rep));
        ASSERT_CHECK(&rep, "thp-enabled", DSV_DOCTOR_OK, "madvise");
        /* shmem THP: the 2 MiB size's own setting (6.11+) wins over the global one unless
         * it inherits */
        ASSERT_CHECK(&rep, "thp-shmem", DSV_DOCTOR_UNKNOWN, "missing");
        ASSERT_OK(put("sys/kernel/mm/transparent_hugepage/shmem_enabled", "always within_size [advise] never deny force\n"));
        ASSERT_OK(dsv_doctor_run(&req, &rep));
        ASSERT_CHECK(&rep, "thp-shmem", DSV_DOCTOR_OK, "advise");
        ASSERT_OK(put("sys/kernel/mm/transparent_hugepage/hugepages-2048kB/shmem_enabled",
                      "always inherit within_size advise [never]\n"));
        ASSERT_OK(dsv_doctor_run(&req, &rep));
        ASSERT_CHECK(&rep, "thp-shmem", DSV_DOCTOR_WARN, "advise (hugepages-2048kB: never)");
        /* deny holds for every size, whatever the size's own setting says */
        ASSERT_OK(put("sys/kernel/mm/transparent_hugepage/shmem_enabled", "always within_size advise never [deny] force\n"));
        ASSERT_OK(put("sys/kernel/mm/transparent_hugepage/hugepages-2048kB/shmem_enabled",
                      "always inherit within_size [advise] never\n"));
        ASSERT_OK(dsv_doctor_run(&req, &rep));
        ASSERT_CHECK(&rep, "thp-shmem", DSV_DOCTOR_WARN, "deny");
        ASSERT_TRUE(strcmp(find(&rep, "thp-shmem")->found, "deny") == 0);
        nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
        root[0] = '\0';
}
