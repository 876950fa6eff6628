/* test-platform-cgroup.c — the cgroup layer on this host's real hierarchies (needs
 * root): groups below the test's own group in each hierarchy (v1 cpu/cpuset/memory on
 * the hybrid CI host, the v2 tree for spawning, hugetlb and cgroup.kill), a real child
 * spawned into them, membership and values read back from the kernel, then kill and
 * removal. Every test removes what it created, also when it fails, and the test
 * process itself never changes group. */
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <linux/filter.h>
#include <linux/magic.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "dsv_platform.h"
#include "t.h"

#define MAX_INST 4
#define MAX_KIDS 8

struct ctx {
        struct dsv_cgroup_host *h;
        struct dsv_cgroup_host_info info;
        struct dsv_cgroup_instance *inst[MAX_INST];
        char names[MAX_INST][64];
        int n_inst;
        pid_t pid[MAX_KIDS];
        int pidfd[MAX_KIDS];
        int n_kids;
        bool restore_hugetlb; /* we enabled hugetlb in the own v2 subtree_control */
        char self_cgroup[4096];
};

/* A small file's text into buf, trailing newlines dropped: its length, or -errno. */
static int read_text(const char *path, char *buf, size_t size) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        size_t len = 0;
        ssize_t n;
        while (len < size - 1 && (n = read(fd, buf + len, size - 1 - len)) > 0)
                len += (size_t)n;
        close(fd);
        buf[len] = '\0';
        while (len > 0 && buf[len - 1] == '\n')
                buf[--len] = '\0';
        return (int)len;
}

static int spew(const char *path, const char *value) {
        int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        ssize_t n = write(fd, value, strlen(value));
        int r = n < 0 ? -errno : 0;
        close(fd);
        return r;
}

static int read_in(const char *dir, const char *name, const char *file, char *buf, size_t size) {
        char p[1200];
        snprintf(p, sizeof p, "%s/%s/%s", dir, name, file);
        return read_text(p, buf, size);
}

static bool exists_in(const char *dir, const char *name) {
        char p[1200];
        snprintf(p, sizeof p, "%s/%s", dir, name);
        return access(p, F_OK) == 0;
}

static int ctx_init(struct ctx *c) {
        memset(c, 0, sizeof *c);
        for (int i = 0; i < MAX_KIDS; i++)
                c->pidfd[i] = -1;
        int r = read_text("/proc/self/cgroup", c->self_cgroup, sizeof c->self_cgroup);
        if (r < 0)
                return r;
        struct dsv_cgroup_config cfg = {0};
        r = dsv_cgroup_host_new(&cfg, &c->h);
        if (r < 0)
                return r;
        return dsv_cgroup_host_info(c->h, &c->info);
}

/* Enables hugetlb for children of the own v2 group when it can (remembering to undo it)
 * and delegates. The own v2 group on the CI host is the hierarchy root: no move. */
static int ctx_delegate(struct ctx *c) {
        if (!c->info.v2_own[0])
                return dsv_cgroup_host_delegate(c->h);
        c->restore_hugetlb = (c->info.v2_available & DSV_CGROUP_CTRL_HUGETLB) &&
                             !(c->info.v2_enabled & DSV_CGROUP_CTRL_HUGETLB);
        int r = dsv_cgroup_host_delegate(c->h);
        if (r < 0)
                return r;
        return dsv_cgroup_host_info(c->h, &c->info);
}

static int ctx_new_instance(struct ctx *c, const char *tag, const struct dsv_cgroup_limits *lim,
                            struct dsv_cgroup_report *rep, struct dsv_cgroup_instance **ret) {
        if (c->n_inst == MAX_INST)
                return -E2BIG;
        snprintf(c->names[c->n_inst], sizeof c->names[0], "dsvtest-%d-%s", (int)getpid(), tag);
        int r = dsv_cgroup_instance_new(c->h, c->names[c->n_inst], lim, rep, &c->inst[c->n_inst]);
        if (r < 0)
                return r;
        *ret = c->inst[c->n_inst++];
        return 0;
}

static int ctx_spawn(struct ctx *c, struct dsv_cgroup_instance *inst, char *const argv[], pid_t *ret_pid) {
        if (c->n_kids == MAX_KIDS)
                return -E2BIG;
        int r = dsv_cgroup_instance_spawn(inst, argv[0], argv, NULL, &c->pid[c->n_kids], &c->pidfd[c->n_kids]);
        if (r < 0)
                return r;
        *ret_pid = c->pid[c->n_kids++];
        return 0;
}

/* Runs whatever the test body left: kills and reaps children, stops and removes
 * instances, undoes the subtree_control change. Returns the first failure. */
static int ctx_cleanup(struct ctx *c) {
        int ret = 0, r;
        for (int i = 0; i < c->n_inst; i++) {
                if (!c->inst[i])
                        continue;
                r = dsv_cgroup_instance_stop(c->inst[i], 5000);
                if (r < 0 && ret == 0)
                        ret = r;
                dsv_cgroup_instance_free(c->inst[i]);
                c->inst[i] = NULL;
        }
        for (int i = 0; i < c->n_kids; i++) {
                if (c->pidfd[i] < 0)
                        continue;
                syscall(SYS_pidfd_send_signal, c->pidfd[i], SIGKILL, NULL, 0);
                siginfo_t si;
                waitid(P_PIDFD, (id_t)c->pidfd[i], &si, WEXITED);
                close(c->pidfd[i]);
                c->pidfd[i] = -1;
        }
        /* Belt and braces for a body that failed before the handle existed. */
        for (int i = 0; i < c->n_inst; i++) {
                if (c->info.v2_own[0] && exists_in(c->info.v2_own, c->names[i])) {
                        char p[1200];
                        snprintf(p, sizeof p, "%s/%s", c->info.v2_own, c->names[i]);
                        rmdir(p);
                }
                for (int b = 0; b < 4; b++) {
                        if (!(c->info.v1_mounted & (1u << b)) || !exists_in(c->info.v1_own[b], c->names[i]))
                                continue;
                        char p[1200];
                        snprintf(p, sizeof p, "%s/%s", c->info.v1_own[b], c->names[i]);
                        rmdir(p);
                        if (ret == 0)
                                ret = -ENOTEMPTY;
                }
        }
        if (c->restore_hugetlb) {
                char p[700];
                snprintf(p, sizeof p, "%s/cgroup.subtree_control", c->info.v2_own);
                r = spew(p, "-hugetlb");
                if (r < 0 && ret == 0)
                        ret = r;
        }
        dsv_cgroup_host_free(c->h);
        c->h = NULL;
        return ret;
}

/* "<own>/<name>" as /proc/<pid>/cgroup shows it for the hierarchy whose line matches. */
static bool proc_cgroup_has(pid_t pid, const char *ctrl, const char *path) {
        char p[64], buf[4096], want[1200];
        snprintf(p, sizeof p, "/proc/%d/cgroup", (int)pid);
        if (read_text(p, buf, sizeof buf) < 0)
                return false;
        for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
                char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
                if (!c2)
                        continue;
                *c2 = '\0';
                bool match = ctrl ? strstr(c1 + 1, ctrl) != NULL : c1[1] == '\0';
                snprintf(want, sizeof want, "%s", path);
                if (match && strcmp(c2 + 1, want) == 0)
                        return true;
        }
        return false;
}

/* The own path of ctrl relative to its mount root, from /proc/self/cgroup. */
static void own_rel(const struct ctx *c, const char *ctrl, char *buf, size_t size) {
        char copy[4096];
        snprintf(copy, sizeof copy, "%s", c->self_cgroup);
        buf[0] = '\0';
        for (char *line = strtok(copy, "\n"); line; line = strtok(NULL, "\n")) {
                char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
                if (!c2)
                        continue;
                *c2 = '\0';
                bool match = ctrl ? strcmp(c1 + 1, ctrl) == 0 : c1[1] == '\0';
                if (match) {
                        snprintf(buf, size, "%s", strcmp(c2 + 1, "/") == 0 ? "" : c2 + 1);
                        return;
                }
        }
}

/* ---- tests ------------------------------------------------------------------------ */

/* The mode, decided independently from the mount table. */
static void mode_detect_matches_mount_table_body(void) {
        char mounts[65536];
        ASSERT_OK(read_text("/proc/self/mounts", mounts, sizeof mounts));
        enum dsv_cgroup_mode want = DSV_CGROUP_MODE_LEGACY;
        if (strstr(mounts, " /sys/fs/cgroup cgroup2 "))
                want = DSV_CGROUP_MODE_UNIFIED;
        else if (strstr(mounts, " /sys/fs/cgroup/unified cgroup2 "))
                want = DSV_CGROUP_MODE_HYBRID;
        enum dsv_cgroup_mode m;
        ASSERT_OK(dsv_cgroup_mode_detect("/sys/fs/cgroup", &m));
        ASSERT_STREQ(dsv_cgroup_mode_to_string(m), dsv_cgroup_mode_to_string(want));
        if (want == DSV_CGROUP_MODE_HYBRID) {
                ASSERT_OK(dsv_cgroup_mode_detect("/sys/fs/cgroup/unified", &m));
                ASSERT_EQ(m, DSV_CGROUP_MODE_UNIFIED);
        }
}

static void host_discovery(struct ctx *c) {
        char rel[1024], want[1200];
        ASSERT_OK(ctx_init(c));
        static const char *const ctrls[4] = {"cpu", "cpuset", "memory", "hugetlb"};
        for (int b = 0; b < 4; b++) {
                if (!(c->info.v1_mounted & (1u << b)))
                        continue;
                own_rel(c, ctrls[b], rel, sizeof rel);
                /* The controller's v1 mount, with our own group below it. */
                size_t lo = strlen(c->info.v1_own[b]), lr = strlen(rel);
                ASSERT_TRUE(strncmp(c->info.v1_own[b], "/sys/fs/cgroup/", 15) == 0);
                ASSERT_TRUE(lo > lr && strcmp(c->info.v1_own[b] + lo - lr, rel) == 0);
        }
        if (c->info.mode == DSV_CGROUP_MODE_HYBRID) {
                /* The CI host: cpu, cpuset and memory are v1, hugetlb lives in the v2 tree. */
                ASSERT_EQ(c->info.v1_mounted & 7u, 7u);
                ASSERT_TRUE((c->info.v1_mounted & DSV_CGROUP_CTRL_HUGETLB) == 0);
                own_rel(c, NULL, rel, sizeof rel);
                snprintf(want, sizeof want, "/sys/fs/cgroup/unified%s", rel);
                ASSERT_STREQ(c->info.v2_own, want);
                own_rel(c, "memory", rel, sizeof rel);
                snprintf(want, sizeof want, "/sys/fs/cgroup/memory%s", rel);
                ASSERT_STREQ(c->info.v1_own[2], want);
        }
}

static void host_discovery_finds_own_groups_body(void) {
        struct ctx c;
        host_discovery(&c);
        ASSERT_OK(ctx_cleanup(&c));
}

static void limits_spawn_kill(struct ctx *c) {
        char buf[4096];
        ASSERT_OK(ctx_init(c));
        if (!(c->info.v1_mounted & DSV_CGROUP_CTRL_CPU) && !c->info.v2_own[0])
                T_FAIL("no usable cgroup hierarchy here");
        ASSERT_OK(ctx_delegate(c));

        struct dsv_cgroup_limits lim = {
                .cpus = "0", .mems = "0", .cpu_weight = 50, .cpu_max_quota_us = 50000,
                .cpu_max_period_us = 100000, .cpu_rt_runtime_us = 10000,
                .memory_high_bytes = 256ull << 20, .memory_max_bytes = 512ull << 20,
                .memory_oom_group = true, .hugetlb_2mb_max_bytes = 8ull << 20,
        };
        struct dsv_cgroup_report rep;
        struct dsv_cgroup_instance *inst;
        ASSERT_OK(ctx_new_instance(c, "a", &lim, &rep, &inst));
        const char *name = c->names[c->n_inst - 1];
        int n = dsv_cgroup_report_format(&rep, buf, sizeof buf);
        ASSERT_TRUE(n > 0);
        fprintf(stderr, "  report for %s:\n%s", name, buf);

        if (c->info.mode == DSV_CGROUP_MODE_HYBRID) {
                /* Values read back from the kernel, by path, not through the library. */
                ASSERT_OK(read_in(c->info.v1_own[1], name, "cpuset.cpus", buf, sizeof buf));
                ASSERT_STREQ(buf, "0");
                ASSERT_OK(read_in(c->info.v1_own[1], name, "cpuset.effective_cpus", buf, sizeof buf));
                ASSERT_STREQ(buf, "0");
                ASSERT_OK(read_in(c->info.v1_own[1], name, "cpuset.mems", buf, sizeof buf));
                ASSERT_STREQ(buf, "0");
                ASSERT_OK(read_in(c->info.v1_own[0], name, "cpu.shares", buf, sizeof buf));
                ASSERT_STREQ(buf, "512");
                ASSERT_OK(read_in(c->info.v1_own[0], name, "cpu.cfs_quota_us", buf, sizeof buf));
                ASSERT_STREQ(buf, "50000");
                ASSERT_OK(read_in(c->info.v1_own[0], name, "cpu.cfs_period_us", buf, sizeof buf));
                ASSERT_STREQ(buf, "100000");
                ASSERT_OK(read_in(c->info.v1_own[0], name, "cpu.rt_runtime_us", buf, sizeof buf));
                ASSERT_STREQ(buf, "10000");
                ASSERT_OK(read_in(c->info.v1_own[2], name, "memory.limit_in_bytes", buf, sizeof buf));
                ASSERT_STREQ(buf, "536870912");
                ASSERT_OK(read_in(c->info.v1_own[2], name, "memory.soft_limit_in_bytes", buf, sizeof buf));
                ASSERT_STREQ(buf, "268435456");
                ASSERT_TRUE(rep.e[DSV_CGROUP_LIMIT_MEMORY_MAX].applied);
                ASSERT_TRUE(strstr(rep.e[DSV_CGROUP_LIMIT_MEMORY_MAX].reason,
                                   "memory controller is v1 here: memory.limit_in_bytes") != NULL);
                ASSERT_TRUE(!rep.e[DSV_CGROUP_LIMIT_MEMORY_OOM_GROUP].applied);
                ASSERT_TRUE(rep.e[DSV_CGROUP_LIMIT_CPU_RT_RUNTIME].applied);
                ASSERT_TRUE(rep.e[DSV_CGROUP_LIMIT_CPUS].applied && rep.e[DSV_CGROUP_LIMIT_MEMS].applied);
                ASSERT_TRUE(rep.e[DSV_CGROUP_LIMIT_CPU_WEIGHT].applied && rep.e[DSV_CGROUP_LIMIT_CPU_MAX].applied);
                if (c->info.v2_enabled & DSV_CGROUP_CTRL_HUGETLB) {
                        ASSERT_OK(read_in(c->info.v2_own, name, "hugetlb.2MB.max", buf, sizeof buf));
                        ASSERT_STREQ(buf, "8388608");
                        ASSERT_TRUE(rep.e[DSV_CGROUP_LIMIT_HUGETLB_2MB_MAX].applied);
                        ASSERT_STREQ(rep.e[DSV_CGROUP_LIMIT_HUGETLB_2MB_MAX].file, "v2:hugetlb.2MB.max");
                        ASSERT_EQ(dsv_cgroup_report_n_missing(&rep), 1); /* only memory.oom.group */
                }
        }

        /* A real child, in every group before it runs. */
        pid_t pid;
        char *argv[] = {"/bin/sleep", "100", NULL};
        ASSERT_OK(ctx_spawn(c, inst, argv, &pid));
        char rel[1024], want[1200];
        static const char *const ctrls[3] = {"cpu", "cpuset", "memory"};
        for (int b = 0; b < 3; b++) {
                if (!(c->info.v1_mounted & (1u << b)))
                        continue;
                own_rel(c, ctrls[b], rel, sizeof rel);
                snprintf(want, sizeof want, "%s/%s", rel, name);
                if (!proc_cgroup_has(pid, ctrls[b], want))
                        T_FAIL("child %d not in v1 %s group %s", (int)pid, ctrls[b], want);
        }
        if (c->info.v2_own[0]) {
                own_rel(c, NULL, rel, sizeof rel);
                snprintf(want, sizeof want, "%s/%s", rel, name);
                if (!proc_cgroup_has(pid, NULL, want))
                        T_FAIL("child %d not in v2 group %s", (int)pid, want);
        }

        /* RT group scheduling: FIFO works in a group with cpu.rt_runtime_us > 0. */
        if (c->info.v1_mounted & DSV_CGROUP_CTRL_CPU) {
                struct sched_param sp = {.sched_priority = 1};
                if (sched_setscheduler(pid, SCHED_FIFO, &sp) != 0)
                        T_FAIL("SCHED_FIFO in a group with rt runtime: %s", strerror(errno));
                ASSERT_EQ(sched_getscheduler(pid), SCHED_FIFO);
                sp.sched_priority = 0;
                ASSERT_OK(sched_setscheduler(pid, SCHED_OTHER, &sp));
        }

        /* Stop: everything killed, groups gone, the child reaped by its pidfd. */
        ASSERT_OK(dsv_cgroup_instance_stop(inst, 5000));
        siginfo_t si = {0};
        ASSERT_OK(waitid(P_PIDFD, (id_t)c->pidfd[c->n_kids - 1], &si, WEXITED));
        ASSERT_EQ(si.si_code, CLD_KILLED);
        ASSERT_EQ(si.si_status, SIGKILL);
        for (int b = 0; b < 4; b++)
                if (c->info.v1_mounted & (1u << b))
                        ASSERT_TRUE(!exists_in(c->info.v1_own[b], name));
        if (c->info.v2_own[0])
                ASSERT_TRUE(!exists_in(c->info.v2_own, name));
        close(c->pidfd[c->n_kids - 1]);
        c->pidfd[c->n_kids - 1] = -1;
}

static int count_fds(void) {
        int n = 0;
        for (int fd = 0; fd < 1024; fd++)
                n += fcntl(fd, F_GETFD) >= 0;
        return n;
}

static void real_groups_limits_spawn_kill_remove_body(void) {
        struct ctx c;
        int fds = count_fds();
        limits_spawn_kill(&c);
        int r = ctx_cleanup(&c);
        char now[4096];
        ASSERT_OK(r);
        ASSERT_EQ(count_fds(), fds);
        ASSERT_OK(read_text("/proc/self/cgroup", now, sizeof now));
        ASSERT_STREQ(now, c.self_cgroup);
}

/* Without cpu.rt_runtime_us the kernel (CONFIG_RT_GROUP_SCHED) refuses SCHED_FIFO in a
 * child group, even to root: the fact the report's cpu.rt_runtime_us line is about. */
static void fifo_needs_rt_runtime(struct ctx *c) {
        ASSERT_OK(ctx_init(c));
        char rt[64];
        if (!(c->info.v1_mounted & DSV_CGROUP_CTRL_CPU) ||
            read_in(c->info.v1_own[0], "", "cpu.rt_runtime_us", rt, sizeof rt) < 0) {
                fprintf(stderr, "  no v1 cpu hierarchy with RT group scheduling here, nothing to check\n");
                return;
        }
        struct dsv_cgroup_limits lim = {.cpu_weight = 100};
        struct dsv_cgroup_report rep;
        struct dsv_cgroup_instance *inst;
        ASSERT_OK(ctx_new_instance(c, "nort", &lim, &rep, &inst));
        pid_t pid;
        char *argv[] = {"/bin/sleep", "100", NULL};
        ASSERT_OK(ctx_spawn(c, inst, argv, &pid));
        struct sched_param sp = {.sched_priority = 1};
        ASSERT_TRUE(sched_setscheduler(pid, SCHED_FIFO, &sp) == -1);
        ASSERT_EQ(errno, EPERM);
        ASSERT_OK(dsv_cgroup_instance_stop(inst, 5000));
}

static void fifo_refused_without_rt_runtime_body(void) {
        struct ctx c;
        fifo_needs_rt_runtime(&c);
        ASSERT_OK(ctx_cleanup(&c));
}

/* A shell with background grandchildren: stop must get them all (cgroup.kill on v2,
 * the SIGKILL loop on every v1 group). */
static void kill_process_tree(struct ctx *c) {
        ASSERT_OK(ctx_init(c));
        struct dsv_cgroup_limits lim = {0};
        struct dsv_cgroup_report rep;
        struct dsv_cgroup_instance *inst;
        ASSERT_OK(ctx_new_instance(c, "tree", &lim, &rep, &inst));
        ASSERT_EQ(dsv_cgroup_report_n_missing(&rep), 0);
        const char *name = c->names[c->n_inst - 1];
        pid_t pid;
        char *argv[] = {"/bin/sh", "-c", "sleep 100 & sleep 100 & sleep 100 & wait", NULL};
        ASSERT_OK(ctx_spawn(c, inst, argv, &pid));
        char procs[256];
        const char *dir = c->info.v1_mounted & DSV_CGROUP_CTRL_MEMORY ? c->info.v1_own[2] : c->info.v2_own;
        int n = 0;
        for (int tries = 0; tries < 200; tries++) {
                n = 0;
                procs[0] = '\0';
                if (read_in(dir, name, "cgroup.procs", procs, sizeof procs) >= 0)
                        for (char *p = procs; *p; p++)
                                n += *p == '\n';
                if (procs[0])
                        n++;
                if (n == 4)
                        break;
                usleep(10000);
        }
        ASSERT_EQ(n, 4);
        ASSERT_OK(dsv_cgroup_instance_stop(inst, 5000));
        ASSERT_TRUE(!exists_in(dir, name));
}

static void stop_kills_the_whole_tree_body(void) {
        struct ctx c;
        kill_process_tree(&c);
        ASSERT_OK(ctx_cleanup(&c));
}

/* Failures leave nothing behind: exec of a missing program, and a stale group. */
static void failures_clean(struct ctx *c) {
        ASSERT_OK(ctx_init(c));
        struct dsv_cgroup_limits lim = {0};
        struct dsv_cgroup_report rep;
        struct dsv_cgroup_instance *inst;
        ASSERT_OK(ctx_new_instance(c, "noexec", &lim, &rep, &inst));
        pid_t pid;
        int pidfd;
        char *argv[] = {"/nonexistent/dsv-worker", NULL};
        ASSERT_ERR(dsv_cgroup_instance_spawn(inst, argv[0], argv, NULL, &pid, &pidfd), -ENOENT);
        ASSERT_OK(dsv_cgroup_instance_stop(inst, 1000));

        /* A stale group from an earlier run in one hierarchy: -EEXIST, and the groups
         * made before noticing it are removed again. */
        if (c->info.v1_mounted & DSV_CGROUP_CTRL_MEMORY) {
                char stale[1200], name[64];
                snprintf(name, sizeof name, "dsvtest-%d-stale", (int)getpid());
                snprintf(stale, sizeof stale, "%s/%s", c->info.v1_own[2], name);
                ASSERT_TRUE(mkdir(stale, 0755) == 0);
                struct dsv_cgroup_instance *dup = NULL;
                int r = dsv_cgroup_instance_new(c->h, name, &lim, &rep, &dup);
                bool left_v2 = c->info.v2_own[0] && exists_in(c->info.v2_own, name);
                bool left_cpu = (c->info.v1_mounted & DSV_CGROUP_CTRL_CPU) && exists_in(c->info.v1_own[0], name);
                rmdir(stale);
                ASSERT_ERR(r, -EEXIST);
                ASSERT_TRUE(!left_v2 && !left_cpu);
        }
}

static void failures_leave_nothing_behind_body(void) {
        struct ctx c;
        failures_clean(&c);
        ASSERT_OK(ctx_cleanup(&c));
}

/* Kernels without clone3 (before 5.7): the spawn helper forks, the child joins the v2
 * group through cgroup.procs itself, and the pidfd comes from pidfd_open(). Simulated
 * with a seccomp filter that fails clone3 with ENOSYS, in a forked test process. */
static int fallback_child(struct ctx *c, struct dsv_cgroup_instance *inst, const char *name) {
        struct sock_filter filt[] = {
                BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
                BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone3, 0, 1),
                BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)),
                BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        };
        struct sock_fprog prog = {.len = sizeof filt / sizeof filt[0], .filter = filt};
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) < 0)
                return 10;
        struct clone_args_probe { uint64_t flags; } probe = {0};
        if (syscall(SYS_clone3, &probe, sizeof probe) != -1 || errno != ENOSYS)
                return 11;
        pid_t pid;
        int pidfd;
        char *argv[] = {"/bin/sleep", "100", NULL};
        if (dsv_cgroup_instance_spawn(inst, argv[0], argv, NULL, &pid, &pidfd) < 0)
                return 12;
        char rel[1024], want[1200];
        int ret = 0;
        if (c->info.v2_own[0]) {
                own_rel(c, NULL, rel, sizeof rel);
                snprintf(want, sizeof want, "%s/%s", rel, name);
                if (!proc_cgroup_has(pid, NULL, want))
                        ret = 13;
        }
        if (c->info.v1_mounted & DSV_CGROUP_CTRL_CPU) {
                own_rel(c, "cpu", rel, sizeof rel);
                snprintf(want, sizeof want, "%s/%s", rel, name);
                if (!proc_cgroup_has(pid, "cpu", want))
                        ret = 14;
        }
        siginfo_t si = {0};
        if (syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0) < 0 ||
            waitid(P_PIDFD, (id_t)pidfd, &si, WEXITED) < 0 || si.si_pid != pid)
                ret = ret ?: 15;
        return ret;
}

static void spawn_fallback(struct ctx *c) {
        ASSERT_OK(ctx_init(c));
        struct dsv_cgroup_limits lim = {0};
        struct dsv_cgroup_report rep;
        struct dsv_cgroup_instance *inst;
        ASSERT_OK(ctx_new_instance(c, "noclone3", &lim, &rep, &inst));
        pid_t tp = fork();
        ASSERT_TRUE(tp >= 0);
        if (tp == 0)
                _exit(fallback_child(c, inst, c->names[c->n_inst - 1]));
        int st;
        ASSERT_TRUE(waitpid(tp, &st, 0) == tp);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                T_FAIL("fallback spawn failed in the test child (status 0x%x)", st);
        ASSERT_OK(dsv_cgroup_instance_stop(inst, 5000));
}

static void spawn_without_clone3_joins_before_exec_body(void) {
        struct ctx c;
        spawn_fallback(&c);
        ASSERT_OK(ctx_cleanup(&c));
}

/* Delegation on the real v2 tree, for a process whose own group is not the root: a
 * forked child moves itself into a fresh group G (as if systemd had put it there), and
 * G stands in for its own group through an injected /proc/self/cgroup. The kernel's
 * no-internal-processes rule is real here: "+hugetlb" in G's subtree_control is EBUSY
 * while the child is in G, and works after dsv_cgroup_host_delegate() moved it to
 * G/supervisor. The test process itself stays where it is. */
static int delegate_child(const char *own_abs, const char *own_rel_path, const char *proc_file) {
        char p[1400], buf[256];
        snprintf(p, sizeof p, "%s/cgroup.procs", own_abs);
        if (spew(p, "0") < 0)
                return 20;
        snprintf(p, sizeof p, "%s/cgroup.subtree_control", own_abs);
        if (spew(p, "+hugetlb") != -EBUSY)
                return 21;
        FILE *f = fopen(proc_file, "we");
        if (!f)
                return 22;
        fprintf(f, "0::%s\n", own_rel_path);
        fclose(f);
        struct dsv_cgroup_config cfg = {.proc_self_cgroup = proc_file, .controllers = DSV_CGROUP_CTRL_HUGETLB};
        struct dsv_cgroup_host *h;
        if (dsv_cgroup_host_new(&cfg, &h) < 0)
                return 23;
        struct dsv_cgroup_host_info info;
        int ret = 0;
        if (dsv_cgroup_host_info(h, &info) < 0 || strcmp(info.v2_own, own_abs) != 0 || info.v1_mounted)
                ret = 24;
        if (!ret && dsv_cgroup_host_delegate(h) < 0)
                ret = 25;
        snprintf(p, sizeof p, "%s/supervisor/cgroup.procs", own_abs);
        char pid[32];
        snprintf(pid, sizeof pid, "%d", (int)getpid());
        if (!ret && (read_text(p, buf, sizeof buf) < 0 || strcmp(buf, pid) != 0))
                ret = 26;
        if (!ret && (dsv_cgroup_host_info(h, &info) < 0 || !(info.v2_enabled & DSV_CGROUP_CTRL_HUGETLB)))
                ret = 27;
        struct dsv_cgroup_limits lim = {.hugetlb_2mb_max_bytes = 4ull << 20};
        struct dsv_cgroup_report rep;
        struct dsv_cgroup_instance *inst = NULL;
        if (!ret && dsv_cgroup_instance_new(h, "w", &lim, &rep, &inst) < 0)
                ret = 28;
        if (!ret && !rep.e[DSV_CGROUP_LIMIT_HUGETLB_2MB_MAX].applied)
                ret = 29;
        pid_t kid = -1;
        int pidfd = -1;
        char *argv[] = {"/bin/sleep", "100", NULL};
        if (!ret && dsv_cgroup_instance_spawn(inst, argv[0], argv, NULL, &kid, &pidfd) < 0)
                ret = 30;
        snprintf(p, sizeof p, "%s/w", own_rel_path);
        if (!ret && !proc_cgroup_has(kid, NULL, p))
                ret = 31;
        if (inst && dsv_cgroup_instance_stop(inst, 5000) < 0)
                ret = ret ?: 32;
        if (pidfd >= 0) {
                siginfo_t si;
                waitid(P_PIDFD, (id_t)pidfd, &si, WEXITED);
                close(pidfd);
        }
        if (!ret && exists_in(own_abs, "w"))
                ret = 33;
        dsv_cgroup_instance_free(inst);
        dsv_cgroup_host_free(h);
        return ret;
}

static void delegate_real(char *own_abs, size_t size, bool *restore) {
        struct ctx c;
        ASSERT_OK(ctx_init(&c));
        struct dsv_cgroup_host_info info = c.info;
        dsv_cgroup_host_free(c.h);
        if (!info.v2_own[0] || !(info.v2_available & DSV_CGROUP_CTRL_HUGETLB)) {
                fprintf(stderr, "  no v2 tree with hugetlb here, nothing to check\n");
                return;
        }
        char rel[1024], rel_own[1200], p[1300], proc_file[64];
        own_rel(&c, NULL, rel, sizeof rel);
        snprintf(rel_own, sizeof rel_own, "%s/dsvtest-%d-own", rel, (int)getpid());
        snprintf(own_abs, size, "%s/dsvtest-%d-own", info.v2_own, (int)getpid());
        *restore = !(info.v2_enabled & DSV_CGROUP_CTRL_HUGETLB);
        snprintf(p, sizeof p, "%s/cgroup.subtree_control", info.v2_own);
        ASSERT_OK(spew(p, "+hugetlb"));
        ASSERT_TRUE(mkdir(own_abs, 0755) == 0);
        snprintf(proc_file, sizeof proc_file, "/tmp/dsv-proc-self-cgroup-%d", (int)getpid());
        pid_t kid = fork();
        ASSERT_TRUE(kid >= 0);
        if (kid == 0)
                _exit(delegate_child(own_abs, rel_own, proc_file));
        int st;
        ASSERT_TRUE(waitpid(kid, &st, 0) == kid);
        unlink(proc_file);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                T_FAIL("delegation child failed (status 0x%x)", st);
        char now[4096];
        ASSERT_OK(read_text("/proc/self/cgroup", now, sizeof now));
        ASSERT_STREQ(now, c.self_cgroup);
}

static void real_v2_delegation_moves_self_before_enabling_body(void) {
        char own_abs[1100] = "", p[1200];
        bool restore = false;
        delegate_real(own_abs, sizeof own_abs, &restore);
        /* The child has exited: its groups are empty and can go. */
        int r = 0;
        if (own_abs[0]) {
                snprintf(p, sizeof p, "%s/supervisor", own_abs);
                if (rmdir(p) < 0 && errno != ENOENT)
                        r = -errno;
                if (rmdir(own_abs) < 0 && errno != ENOENT && r == 0)
                        r = -errno;
        }
        if (restore) {
                snprintf(p, sizeof p, "%s", own_abs);
                char *slash = strrchr(p, '/');
                if (slash) {
                        snprintf(slash, sizeof p - (size_t)(slash - p), "/cgroup.subtree_control");
                        int rr = spew(p, "-hugetlb");
                        if (r == 0)
                                r = rr;
                }
        }
        ASSERT_OK(r);
}

/* ---- --cgroup-parent on real hierarchies, and restoring exactly ----------------
 * A private group G (dsvtest-<pid>-own) in every hierarchy stands in for the own group
 * (as systemd's Delegate=yes would give one), through an injected /proc/self/cgroup,
 * so that concurrent users of the real own groups cannot disturb the comparison. A
 * forked child runs several cycles of host, delegate (it moves itself into
 * G/supervisor, enables what G offers), two instances below G/inference/prod with a
 * real child each, stop, restore; after each cycle every hierarchy below G must be
 * exactly as before: the same directories and the same subtree_control. Then the
 * no-internal-processes rule along the path (busy_level_child). */

#define SNAP_BYTES 8192
static char *snap_buf;
static size_t snap_len, snap_root_len;
static const char *snap_tag;

static int snap_walk(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
        const char *base = path + ftw->base;
        bool dir = flag == FTW_D || flag == FTW_DP;
        if (!dir && strcmp(base, "cgroup.subtree_control") != 0)
                return 0;
        char content[256] = "";
        if (!dir)
                read_text(path, content, sizeof content);
        int n = snprintf(snap_buf + snap_len, SNAP_BYTES - snap_len, "%s:%s%s%s\n", snap_tag, path + snap_root_len,
                         dir ? "/" : " = ", content);
        if (n < 0 || (size_t)n >= SNAP_BYTES - snap_len)
                return 1;
        snap_len += (size_t)n;
        return 0;
}

/* Directories and subtree_control contents below each G, one line each, sorted by the
 * walk (readdir order is stable for an unchanged cgroupfs directory). */
static int snap_groups(char dirs[][1100], const char *const tags[], int n, char *buf) {
        snap_buf = buf;
        snap_len = 0;
        buf[0] = '\0';
        for (int i = 0; i < n; i++) {
                if (!dirs[i][0])
                        continue;
                snap_tag = tags[i];
                snap_root_len = strlen(dirs[i]);
                if (nftw(dirs[i], snap_walk, 16, FTW_PHYS) != 0)
                        return -E2BIG;
        }
        return 0;
}

struct gset {
        char dir[5][1100];  /* 0..3: v1 by controller bit, 4: v2; "" when not there */
        char rel[5][1100];  /* the same relative to its mount, for /proc/self/cgroup */
};
static const char *const gtags[5] = {"cpu", "cpuset", "memory", "hugetlb", "v2"};

static int busy_level_child(const struct gset *g, const char *proc_file);

static int parent_cycles_child(const struct gset *g, const char *proc_file, int n_cycles) {
        static char before[SNAP_BYTES], after[SNAP_BYTES];
        char dirs[5][1100];
        memcpy(dirs, g->dir, sizeof dirs);
        if (snap_groups(dirs, gtags, 5, before) < 0)
                return 40;
        for (int cycle = 0; cycle < n_cycles; cycle++) {
                struct dsv_cgroup_config cfg = {.proc_self_cgroup = proc_file, .parent = "inference/prod"};
                struct dsv_cgroup_host *h;
                if (dsv_cgroup_host_new(&cfg, &h) < 0)
                        return 41;
                struct dsv_cgroup_host_info info;
                char want[1200];
                int ret = dsv_cgroup_host_info(h, &info) < 0 ? 42 : 0;
                for (int b = 0; !ret && b < 5; b++) {
                        if (!g->dir[b][0])
                                continue;
                        snprintf(want, sizeof want, "%s/inference/prod", g->dir[b]);
                        if (strcmp(b == 4 ? info.v2_parent : info.v1_parent[b], want) != 0)
                                ret = 43;
                }
                if (!ret && dsv_cgroup_host_delegate(h) < 0)
                        ret = 44;
                struct dsv_cgroup_instance *inst[2] = {NULL, NULL};
                pid_t kid[2] = {-1, -1};
                int pidfd[2] = {-1, -1};
                struct dsv_cgroup_limits lim = {.cpus = "0", .mems = "0", .cpu_weight = 100,
                                                .memory_max_bytes = 256ull << 20,
                                                .hugetlb_2mb_max_bytes = 4ull << 20};
                char *argv[] = {"/bin/sleep", "100", NULL};
                for (int i = 0; !ret && i < 2; i++) {
                        struct dsv_cgroup_report rep;
                        char name[32];
                        snprintf(name, sizeof name, "w%d", i);
                        if (dsv_cgroup_instance_new(h, name, &lim, &rep, &inst[i]) < 0)
                                ret = 45;
                        else if (!rep.e[DSV_CGROUP_LIMIT_CPUS].applied || !rep.e[DSV_CGROUP_LIMIT_MEMORY_MAX].applied)
                                ret = 46;
                        else if (dsv_cgroup_instance_spawn(inst[i], argv[0], argv, NULL, &kid[i], &pidfd[i]) < 0)
                                ret = 47;
                        /* The child is in <G>/inference/prod/w<i> in every hierarchy. */
                        for (int b = 0; !ret && b < 5; b++) {
                                if (!g->dir[b][0])
                                        continue;
                                snprintf(want, sizeof want, "%s/inference/prod/%s", g->rel[b], name);
                                if (!proc_cgroup_has(kid[i], b == 4 ? NULL : gtags[b], want))
                                        ret = 48;
                        }
                }
                for (int i = 0; i < 2; i++) {
                        if (inst[i] && dsv_cgroup_instance_stop(inst[i], 5000) < 0)
                                ret = ret ?: 49;
                        if (pidfd[i] >= 0) {
                                siginfo_t si;
                                waitid(P_PIDFD, (id_t)pidfd[i], &si, WEXITED);
                                close(pidfd[i]);
                        }
                        dsv_cgroup_instance_free(inst[i]);
                }
                char why[1024];
                if (dsv_cgroup_host_restore(h, why, sizeof why) < 0) {
                        fprintf(stderr, "  restore: %s\n", why);
                        ret = ret ?: 50;
                }
                dsv_cgroup_host_free(h);
                if (ret)
                        return ret;
                if (snap_groups(dirs, gtags, 5, after) < 0)
                        return 51;
                if (strcmp(before, after) != 0) {
                        fprintf(stderr, "  cycle %d changed the hierarchies:\n--- before\n%s--- after\n%s", cycle,
                                before, after);
                        return 52;
                }
        }
        int r = busy_level_child(g, proc_file);
        if (r)
                return r;
        if (snap_groups(dirs, gtags, 5, after) < 0)
                return 53;
        if (strcmp(before, after) != 0) {
                fprintf(stderr, "  the busy level changed the hierarchies:\n--- before\n%s--- after\n%s", before, after);
                return 54;
        }
        return 0;
}

/* An existing parent level with a process in it cannot pass controllers on (no internal
 * processes): delegate says EBUSY. Restore then keeps what "inference" (not ours) may
 * need, and once that group is gone undoes the rest. 0, or the step that failed. */
static int busy_level_child(const struct gset *g, const char *proc_file) {
        char p[1300], buf[256];
        snprintf(p, sizeof p, "%s/cgroup.controllers", g->dir[4]);
        if (!g->dir[4][0] || read_text(p, buf, sizeof buf) <= 0)
                return 0; /* nothing G could enable: no rule to check */
        snprintf(p, sizeof p, "%s/inference", g->dir[4]);
        if (mkdir(p, 0755) < 0)
                return 60;
        int go[2];
        if (pipe(go) < 0)
                return 61;
        pid_t sleeper = fork();
        if (sleeper == 0) {
                char q[1400];
                snprintf(q, sizeof q, "%s/cgroup.procs", p);
                char ok = spew(q, "0") == 0 ? 'y' : 'n';
                ssize_t n = write(go[1], &ok, 1);
                (void)n;
                pause();
                _exit(0);
        }
        char ok = 'n';
        ssize_t n = read(go[0], &ok, 1);
        close(go[0]);
        close(go[1]);
        struct dsv_cgroup_config cfg = {.proc_self_cgroup = proc_file, .parent = "inference/prod"};
        struct dsv_cgroup_host *h = NULL;
        char why[1024] = "";
        int ret = n == 1 && ok == 'y' ? 0 : 62;
        if (!ret && dsv_cgroup_host_new(&cfg, &h) < 0)
                ret = 63;
        int r = ret ? 0 : dsv_cgroup_host_delegate(h);
        if (!ret && r != -EBUSY) {
                fprintf(stderr, "  delegate below a level with a process: %d, not -EBUSY\n", r);
                ret = 64;
        }
        kill(sleeper, SIGKILL);
        waitpid(sleeper, NULL, 0);
        if (!ret && (dsv_cgroup_host_restore(h, why, sizeof why) != -EBUSY || !strstr(why, "other group")))
                ret = 65;
        if (rmdir(p) < 0)
                ret = ret ?: 66;
        if (!ret && dsv_cgroup_host_restore(h, why, sizeof why) < 0) {
                fprintf(stderr, "  restore: %s\n", why);
                ret = 67;
        }
        dsv_cgroup_host_free(h);
        return ret;
}

static void parent_cycles(struct gset *g, bool *root_hugetlb, char *own_v2, size_t own_size) {
        struct ctx c;
        ASSERT_OK(ctx_init(&c));
        struct dsv_cgroup_host_info info = c.info;
        dsv_cgroup_host_free(c.h);
        char name[64], proc_file[64], lines[4096] = "", p[1300];
        snprintf(name, sizeof name, "dsvtest-%d-own", (int)getpid());
        for (int b = 0; b < 5; b++) {
                const char *own = b == 4 ? info.v2_own : (info.v1_mounted & (1u << b)) ? info.v1_own[b] : "";
                if (!own[0])
                        continue;
                char rel[1024];
                own_rel(&c, b == 4 ? NULL : gtags[b], rel, sizeof rel);
                snprintf(g->dir[b], sizeof g->dir[b], "%s/%s", own, name);
                snprintf(g->rel[b], sizeof g->rel[b], "%s/%s", rel, name);
                ASSERT_TRUE(mkdir(g->dir[b], 0755) == 0);
                size_t len = strlen(lines);
                snprintf(lines + len, sizeof lines - len, "%d:%s:%s\n", b == 4 ? 0 : 10 + b, b == 4 ? "" : gtags[b],
                         g->rel[b]);
                if (b == 1) { /* an empty v1 cpuset admits nothing: G gets its parent's */
                        static const char *const files[2] = {"cpuset.cpus", "cpuset.mems"};
                        for (int i = 0; i < 2; i++) {
                                char v[256];
                                ASSERT_OK(read_in(own, "", files[i], v, sizeof v) >= 0 ? 0 : -EIO);
                                char path[1200];
                                snprintf(path, sizeof path, "%.1099s/%s", g->dir[b], files[i]);
                                ASSERT_OK(spew(path, v));
                        }
                }
        }
        if (info.v2_own[0]) {
                snprintf(own_v2, own_size, "%s", info.v2_own);
                /* Something for G to delegate: hugetlb, when the host has it in v2. */
                if ((info.v2_available & DSV_CGROUP_CTRL_HUGETLB) && !(info.v2_enabled & DSV_CGROUP_CTRL_HUGETLB)) {
                        snprintf(p, sizeof p, "%s/cgroup.subtree_control", info.v2_own);
                        ASSERT_OK(spew(p, "+hugetlb"));
                        *root_hugetlb = true;
                }
        }
        snprintf(proc_file, sizeof proc_file, "/tmp/dsv-proc-self-cgroup-%d", (int)getpid());
        FILE *f = fopen(proc_file, "we");
        ASSERT_TRUE(f != NULL);
        fputs(lines, f);
        fclose(f);
        pid_t kid = fork();
        ASSERT_TRUE(kid >= 0);
        if (kid == 0)
                _exit(parent_cycles_child(g, proc_file, 3));
        int st;
        ASSERT_TRUE(waitpid(kid, &st, 0) == kid);
        unlink(proc_file);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                T_FAIL("parent-subtree cycles failed (status 0x%x)", st);
}

static void parent_subtree_cycles_restore_exactly_body(void) {
        struct gset g;
        memset(&g, 0, sizeof g);
        bool root_hugetlb = false;
        char own_v2[1100] = "", p[1300];
        parent_cycles(&g, &root_hugetlb, own_v2, sizeof own_v2);
        int r = 0;
        for (int b = 0; b < 5; b++)
                if (g.dir[b][0] && rmdir(g.dir[b]) < 0 && r == 0)
                        r = -errno;
        if (root_hugetlb) {
                snprintf(p, sizeof p, "%s/cgroup.subtree_control", own_v2);
                int rr = spew(p, "-hugetlb");
                r = r ?: rr;
        }
        ASSERT_OK(r);
}

/* ---- isolation: each test body runs in a forked child; the parent then sweeps ----
 * A body that crashes cannot run its own cleanup, so the parent removes every group
 * named "dsvtest-<child pid>-*" below its own groups (killing what is still in them)
 * and undoes a hugetlb left enabled in the own v2 subtree_control. A body that passed
 * must have left nothing: the sweep finding anything fails the test. */

static int sweep_group(const char *path) {
        int n = 0;
        DIR *d = opendir(path);
        if (!d)
                return 0;
        struct dirent *de;
        while ((de = readdir(d))) {
                if (de->d_type != DT_DIR || de->d_name[0] == '.')
                        continue;
                char sub[1400];
                snprintf(sub, sizeof sub, "%s/%s", path, de->d_name);
                n += sweep_group(sub);
        }
        closedir(d);
        char procs_path[1400], procs[4096];
        snprintf(procs_path, sizeof procs_path, "%s/cgroup.procs", path);
        for (int tries = 0; tries < 500 && read_text(procs_path, procs, sizeof procs) > 0; tries++) {
                for (char *t = strtok(procs, "\n"); t; t = strtok(NULL, "\n"))
                        kill((pid_t)atoi(t), SIGKILL);
                usleep(10000);
        }
        if (rmdir(path) == 0)
                n++;
        return n;
}

static int sweep_prefix(const char *dir, const char *prefix) {
        int n = 0;
        DIR *d = opendir(dir);
        if (!d)
                return 0;
        struct dirent *de;
        while ((de = readdir(d))) {
                if (de->d_type != DT_DIR || strncmp(de->d_name, prefix, strlen(prefix)) != 0)
                        continue;
                char sub[1400];
                snprintf(sub, sizeof sub, "%s/%s", dir, de->d_name);
                n += sweep_group(sub);
        }
        closedir(d);
        return n;
}

static void run_isolated(void (*body)(void)) {
        struct dsv_cgroup_config cfg = {0};
        struct dsv_cgroup_host *h = NULL;
        struct dsv_cgroup_host_info info;
        ASSERT_OK(dsv_cgroup_host_new(&cfg, &h));
        int r = dsv_cgroup_host_info(h, &info);
        dsv_cgroup_host_free(h);
        ASSERT_OK(r);

        pid_t kid = fork();
        ASSERT_TRUE(kid >= 0);
        if (kid == 0) {
                body();
                fflush(stderr);
                _exit(t_failed_current ? 1 : 0);
        }
        int st = 0;
        waitpid(kid, &st, 0);

        char prefix[64];
        snprintf(prefix, sizeof prefix, "dsvtest-%d-", (int)kid);
        int swept = info.v2_own[0] ? sweep_prefix(info.v2_own, prefix) : 0;
        for (int b = 0; b < 4; b++)
                if (info.v1_mounted & (1u << b))
                        swept += sweep_prefix(info.v1_own[b], prefix);
        int restored = 0;
        if (info.v2_own[0] && !(info.v2_enabled & DSV_CGROUP_CTRL_HUGETLB)) {
                char p[700], now[256];
                snprintf(p, sizeof p, "%s/cgroup.subtree_control", info.v2_own);
                if (read_text(p, now, sizeof now) >= 0 && strstr(now, "hugetlb")) {
                        spew(p, "-hugetlb");
                        restored = 1;
                }
        }
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                T_FAIL("test body failed (status 0x%x); swept %d group(s)", st, swept);
        ASSERT_EQ(swept, 0);
        ASSERT_EQ(restored, 0);
}

TEST(mode_detect_matches_mount_table) {
        run_isolated(mode_detect_matches_mount_table_body);
}

TEST(host_discovery_finds_own_groups) {
        run_isolated(host_discovery_finds_own_groups_body);
}

TEST(real_groups_limits_spawn_kill_remove) {
        run_isolated(real_groups_limits_spawn_kill_remove_body);
}

TEST(fifo_refused_without_rt_runtime) {
        run_isolated(fifo_refused_without_rt_runtime_body);
}

TEST(stop_kills_the_whole_tree) {
        run_isolated(stop_kills_the_whole_tree_body);
}

TEST(failures_leave_nothing_behind) {
        run_isolated(failures_leave_nothing_behind_body);
}

TEST(spawn_without_clone3_joins_before_exec) {
        run_isolated(spawn_without_clone3_joins_before_exec_body);
}

TEST(real_v2_delegation_moves_self_before_enabling) {
        run_isolated(real_v2_delegation_moves_self_before_enabling_body);
}

TEST(parent_subtree_cycles_restore_exactly) {
        run_isolated(parent_subtree_cycles_restore_exactly_body);
}
