/* test-platform-cgroup-fake.c — the cgroup layer on a fake v2 tree (a temp dir laid out
 * like a systemd-delegated cgroup2 hierarchy), plus its parsers. Proves that every
 * write lands inside the delegated group: the whole temp tree, files outside the tree
 * included, is snapshotted before and after and compared path by path. */
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "cgroup-internal.h"
#include "dsv_platform.h"
#include "t.h"

#define OWN "cg/system.slice/dsv.service"

struct fake {
        char dir[256];  /* temp root: cg/, outside/, proc-self-cgroup */
        char root[300]; /* dir/cg */
        char proc[300];
        int evil;       /* plant a symlink as cpu.weight in groups named "evil" */
        char last_kill[32]; /* cgroup.kill of the last group removed */
};

static int put_file(int dirfd, const char *name, const char *content) {
        int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0)
                return -errno;
        ssize_t n = write(fd, content, strlen(content));
        close(fd);
        return n == (ssize_t)strlen(content) ? 0 : -EIO;
}

static int put_path(const struct fake *f, const char *rel, const char *content) {
        char p[600];
        snprintf(p, sizeof p, "%s/%s", f->dir, rel);
        return put_file(AT_FDCWD, p, content);
}

static const char *const group_files[] = {
        "cgroup.procs", "cgroup.subtree_control", "cgroup.kill", "cpu.weight", "cpu.max",
        "cpuset.cpus", "cpuset.mems", "memory.high", "memory.max", "memory.oom.group",
};

/* What the kernel would create: control files for the controllers the parent enabled
 * (here: cpu cpuset memory; no hugetlb, which systemd cannot delegate). Limit files
 * start empty so that the appended writes read back as written. */
static int fake_mkdir(int parent_fd, const char *name, void *user) {
        struct fake *f = user;
        int fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        int r = put_file(fd, "cgroup.controllers", "cpu cpuset memory\n");
        r = r ?: put_file(fd, "cgroup.events", "populated 0\nfrozen 0\n");
        r = r ?: put_file(fd, "cpuset.cpus.effective", "0-3\n");
        r = r ?: put_file(fd, "cpuset.mems.effective", "0\n");
        for (size_t i = 0; !r && i < sizeof group_files / sizeof group_files[0]; i++) {
                if (f->evil && strcmp(name, "evil") == 0 && strcmp(group_files[i], "cpu.weight") == 0) {
                        char target[600];
                        snprintf(target, sizeof target, "%s/outside/secret", f->dir);
                        r = symlinkat(target, fd, "cpu.weight") < 0 ? -errno : 0;
                        continue;
                }
                r = put_file(fd, group_files[i], "");
        }
        close(fd);
        return r;
}

static int fake_rmdir(int parent_fd, const char *name, void *user) {
        struct fake *f = user;
        int fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        int kfd = openat(fd, "cgroup.kill", O_RDONLY | O_CLOEXEC);
        ssize_t n = kfd >= 0 ? read(kfd, f->last_kill, sizeof f->last_kill - 1) : 0;
        f->last_kill[n > 0 ? n : 0] = '\0';
        if (kfd >= 0)
                close(kfd);
        DIR *d = fdopendir(fd);
        if (!d) {
                close(fd);
                return -errno;
        }
        struct dirent *de;
        while ((de = readdir(d)))
                if (de->d_type != DT_DIR)
                        unlinkat(fd, de->d_name, 0);
        closedir(d);
        return 0;
}

static int fake_setup(struct fake *f) {
        memset(f, 0, sizeof *f);
        snprintf(f->dir, sizeof f->dir, "/tmp/dsv-cgfake-XXXXXX");
        if (!mkdtemp(f->dir))
                return -errno;
        snprintf(f->root, sizeof f->root, "%s/cg", f->dir);
        snprintf(f->proc, sizeof f->proc, "%s/proc-self-cgroup", f->dir);
        static const char *const dirs[] = {"cg", "cg/system.slice", OWN, "outside"};
        for (size_t i = 0; i < 4; i++) {
                char p[600];
                snprintf(p, sizeof p, "%s/%s", f->dir, dirs[i]);
                if (mkdir(p, 0755) < 0)
                        return -errno;
        }
        int r = put_path(f, "cg/cgroup.controllers", "cpu cpuset io memory hugetlb pids\n");
        r = r ?: put_path(f, "cg/cgroup.subtree_control", "cpu cpuset io memory pids\n");
        r = r ?: put_path(f, "cg/cgroup.procs", "1\n");
        r = r ?: put_path(f, "cg/system.slice/cgroup.controllers", "cpu cpuset io memory pids\n");
        r = r ?: put_path(f, "cg/system.slice/cgroup.subtree_control", "cpu cpuset memory pids\n");
        r = r ?: put_path(f, OWN "/cgroup.controllers", "cpu cpuset memory pids\n");
        r = r ?: put_path(f, OWN "/cgroup.subtree_control", "");
        r = r ?: put_path(f, OWN "/cgroup.procs", "4242\n");
        r = r ?: put_path(f, "outside/secret", "keep\n");
        r = r ?: put_path(f, "proc-self-cgroup", "0::/system.slice/dsv.service\n");
        return r;
}

static int rm_cb(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
        return remove(path);
}

static void fake_teardown(struct fake *f) {
        if (f->dir[0])
                nftw(f->dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- snapshot: every path below dir with its type and content -------------------- */

#define SNAP_MAX 256
struct snap {
        int n;
        char path[SNAP_MAX][160];
        char content[SNAP_MAX][160];
};
static struct snap *snap_cur;
static size_t snap_prefix;

static int snap_cb(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
        struct snap *s = snap_cur;
        if (s->n >= SNAP_MAX)
                return 1;
        snprintf(s->path[s->n], sizeof s->path[0], "%s", path + snap_prefix);
        char *c = s->content[s->n];
        if (S_ISLNK(st->st_mode)) {
                snprintf(c, sizeof s->content[0], "link");
        } else if (S_ISDIR(st->st_mode)) {
                snprintf(c, sizeof s->content[0], "dir");
        } else {
                int fd = open(path, O_RDONLY | O_CLOEXEC);
                ssize_t n = fd >= 0 ? read(fd, c, sizeof s->content[0] - 1) : -1;
                c[n > 0 ? n : 0] = '\0';
                if (fd >= 0)
                        close(fd);
        }
        s->n++;
        return 0;
}

static int snap_take(const struct fake *f, struct snap *s) {
        memset(s, 0, sizeof *s);
        snap_cur = s;
        snap_prefix = strlen(f->dir);
        return nftw(f->dir, snap_cb, 16, FTW_PHYS) == 0 ? 0 : -E2BIG;
}

static const char *snap_find(const struct snap *s, const char *path) {
        for (int i = 0; i < s->n; i++)
                if (strcmp(s->path[i], path) == 0)
                        return s->content[i];
        return NULL;
}

/* Every path outside /OWN is unchanged, and nothing appeared or vanished there. */
static int snap_diff_outside_own(const struct snap *a, const struct snap *b, char *bad, size_t size) {
        const char *own = "/" OWN;
        size_t lo = strlen(own);
        for (int pass = 0; pass < 2; pass++) {
                const struct snap *x = pass ? b : a, *y = pass ? a : b;
                for (int i = 0; i < x->n; i++) {
                        const char *p = x->path[i];
                        if (strncmp(p, own, lo) == 0 && (p[lo] == '/' || p[lo] == '\0'))
                                continue;
                        const char *other = snap_find(y, p);
                        if (!other || strcmp(other, x->content[i]) != 0) {
                                snprintf(bad, size, "%s", p);
                                return 1;
                        }
                }
        }
        return 0;
}

static int read_rel(const struct fake *f, const char *rel, char *buf, size_t size) {
        char p[600];
        snprintf(p, sizeof p, "%s/%s", f->dir, rel);
        int fd = open(p, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        ssize_t n = read(fd, buf, size - 1);
        close(fd);
        if (n < 0)
                return -errno;
        buf[n] = '\0';
        return (int)n;
}

/* ---- tests ------------------------------------------------------------------------ */

static void fake_full_cycle(struct fake *f, struct dsv_cgroup_host **hp, struct dsv_cgroup_instance **ip) {
        struct snap *before = calloc(1, sizeof *before), *after = calloc(1, sizeof *after);
        char buf[4096];
        ASSERT_TRUE(before && after);
        ASSERT_OK(snap_take(f, before));

        struct dsv_cgroup_config cfg = {
                .root = f->root, .proc_self_cgroup = f->proc, .mode = DSV_CGROUP_MODE_UNIFIED,
                .on_mkdir = fake_mkdir, .on_rmdir = fake_rmdir, .fake_user = f,
        };
        ASSERT_OK(dsv_cgroup_host_new(&cfg, hp));
        struct dsv_cgroup_host_info info;
        ASSERT_OK(dsv_cgroup_host_info(*hp, &info));
        ASSERT_EQ(info.mode, DSV_CGROUP_MODE_UNIFIED);
        ASSERT_EQ(info.v2_available, DSV_CGROUP_CTRL_CPU | DSV_CGROUP_CTRL_CPUSET | DSV_CGROUP_CTRL_MEMORY);
        ASSERT_EQ(info.v1_mounted, 0);
        char want_own[400];
        snprintf(want_own, sizeof want_own, "%s/system.slice/dsv.service", f->root);
        ASSERT_STREQ(info.v2_own, want_own);

        /* Delegation: self into the leaf first, then one "+ctrl" write each. */
        ASSERT_OK(dsv_cgroup_host_delegate(*hp));
        char pid[32];
        snprintf(pid, sizeof pid, "%d\n", (int)getpid());
        ASSERT_OK(read_rel(f, OWN "/supervisor/cgroup.procs", buf, sizeof buf));
        ASSERT_STREQ(buf, pid);
        ASSERT_OK(read_rel(f, OWN "/cgroup.subtree_control", buf, sizeof buf));
        ASSERT_STREQ(buf, "+cpu\n+cpuset\n+memory\n");

        struct dsv_cgroup_limits lim = {
                .cpus = "0-3", .mems = "0", .cpu_weight = 250, .cpu_max_quota_us = 50000,
                .cpu_rt_runtime_us = 10000, .memory_high_bytes = 3ull << 30,
                .memory_max_bytes = 4ull << 30, .memory_oom_group = true,
                .hugetlb_2mb_max_bytes = 64ull << 20,
        };
        struct dsv_cgroup_report rep;
        ASSERT_OK(dsv_cgroup_instance_new(*hp, "worker-0", &lim, &rep, ip));
        ASSERT_TRUE(dsv_cgroup_instance_v2_fd(*ip) >= 0);

        /* Exactly the files each limit maps to, each written once. */
        static const struct { const char *file, *content; } want[] = {
                {"cpuset.cpus", "0-3\n"}, {"cpuset.mems", "0\n"}, {"cpu.weight", "250\n"},
                {"cpu.max", "50000 100000\n"}, {"memory.high", "3221225472\n"},
                {"memory.max", "4294967296\n"}, {"memory.oom.group", "1\n"},
        };
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
                char rel[200];
                snprintf(rel, sizeof rel, OWN "/worker-0/%s", want[i].file);
                ASSERT_OK(read_rel(f, rel, buf, sizeof buf));
                ASSERT_STREQ(buf, want[i].content);
        }

        /* The report: what is in effect, what is not, and why. */
        ASSERT_EQ(dsv_cgroup_report_n_missing(&rep), 2);
        for (int l = 0; l < DSV_CGROUP_LIMIT_COUNT; l++)
                ASSERT_TRUE(rep.e[l].requested);
        ASSERT_TRUE(rep.e[DSV_CGROUP_LIMIT_CPUS].applied);
        ASSERT_STREQ(rep.e[DSV_CGROUP_LIMIT_CPUS].file, "v2:cpuset.cpus");
        ASSERT_TRUE(rep.e[DSV_CGROUP_LIMIT_MEMORY_OOM_GROUP].applied);
        ASSERT_TRUE(!rep.e[DSV_CGROUP_LIMIT_HUGETLB_2MB_MAX].applied);
        ASSERT_TRUE(strstr(rep.e[DSV_CGROUP_LIMIT_HUGETLB_2MB_MAX].reason, "hugetlb not delegated") != NULL);
        ASSERT_TRUE(!rep.e[DSV_CGROUP_LIMIT_CPU_RT_RUNTIME].applied);
        ASSERT_TRUE(strstr(rep.e[DSV_CGROUP_LIMIT_CPU_RT_RUNTIME].reason, "v1-only") != NULL);
        int n = dsv_cgroup_report_format(&rep, buf, sizeof buf);
        ASSERT_TRUE(n > 0 && n < (int)sizeof buf);
        ASSERT_TRUE(strstr(buf, "cpu.max=50000 100000 applied (v2:cpu.max)\n") != NULL);
        ASSERT_TRUE(strstr(buf, "hugetlb.2MB.max=67108864 NOT applied (hugetlb not delegated") != NULL);

        /* An effective cpuset that differs from the request is reported, not trusted. */
        struct dsv_cgroup_instance *other = NULL;
        struct dsv_cgroup_limits lim2 = {.cpus = "4-5"};
        ASSERT_OK(dsv_cgroup_instance_new(*hp, "worker-1", &lim2, &rep, &other));
        ASSERT_TRUE(!rep.e[DSV_CGROUP_LIMIT_CPUS].applied);
        ASSERT_TRUE(strstr(rep.e[DSV_CGROUP_LIMIT_CPUS].reason, "cpuset.cpus.effective is \"0-3\"") != NULL);
        ASSERT_EQ(dsv_cgroup_report_n_missing(&rep), 1);

        /* A second instance of the same name is refused: stale state is not reused. */
        struct dsv_cgroup_instance *dup = NULL;
        ASSERT_ERR(dsv_cgroup_instance_new(*hp, "worker-0", &lim2, &rep, &dup), -EEXIST);

        /* Stop: cgroup.kill, "populated 0", rmdir. */
        int r = dsv_cgroup_instance_stop(other, 1000);
        dsv_cgroup_instance_free(other);
        ASSERT_OK(r);
        ASSERT_STREQ(f->last_kill, "1\n");
        f->last_kill[0] = '\0';
        ASSERT_OK(dsv_cgroup_instance_stop(*ip, 1000));
        ASSERT_STREQ(f->last_kill, "1\n");
        ASSERT_ERR(read_rel(f, OWN "/worker-0/cgroup.kill", buf, sizeof buf), -ENOENT);
        dsv_cgroup_instance_free(*ip);
        *ip = NULL;
        dsv_cgroup_host_free(*hp);
        *hp = NULL;

        /* Nothing outside the delegated group changed; inside it only the supervisor
         * leaf is new and only cgroup.subtree_control changed. */
        ASSERT_OK(snap_take(f, after));
        char bad[200] = "";
        int diff = snap_diff_outside_own(before, after, bad, sizeof bad);
        if (diff)
                T_FAIL("changed outside the delegated group: %s", bad);
        for (int i = 0; i < after->n; i++) {
                const char *old = snap_find(before, after->path[i]);
                if (strncmp(after->path[i], "/" OWN "/supervisor", strlen("/" OWN "/supervisor")) == 0)
                        continue;
                if (strcmp(after->path[i], "/" OWN "/cgroup.subtree_control") == 0)
                        continue;
                if (!old || strcmp(old, after->content[i]) != 0)
                        T_FAIL("unexpected change inside the delegated group: %s", after->path[i]);
        }
        ASSERT_TRUE(snap_find(after, "/" OWN "/worker-0") == NULL);
        ASSERT_TRUE(snap_find(after, "/" OWN "/worker-1") == NULL);
        free(before);
        free(after);
}

static int count_fds(void) {
        DIR *d = opendir("/proc/self/fd");
        if (!d)
                return -errno;
        int n = 0;
        while (readdir(d))
                n++;
        closedir(d);
        return n;
}

TEST(fake_v2_tree_writes_stay_inside_delegated_group) {
        struct fake f = {0};
        struct dsv_cgroup_host *h = NULL;
        struct dsv_cgroup_instance *inst = NULL;
        int fds = count_fds();
        int r = fake_setup(&f);
        if (r == 0)
                fake_full_cycle(&f, &h, &inst);
        dsv_cgroup_instance_free(inst);
        dsv_cgroup_host_free(h);
        fake_teardown(&f);
        ASSERT_OK(r);
        ASSERT_EQ(count_fds(), fds); /* every fd the host and instances opened is closed */
}

static void fake_attacks(struct fake *f) {
        char buf[256];
        struct dsv_cgroup_config cfg = {
                .root = f->root, .proc_self_cgroup = f->proc, .mode = DSV_CGROUP_MODE_UNIFIED,
                .on_mkdir = fake_mkdir, .on_rmdir = fake_rmdir, .fake_user = f,
        };
        struct dsv_cgroup_host *h = NULL;
        struct dsv_cgroup_instance *inst = NULL;
        struct dsv_cgroup_report rep;
        struct dsv_cgroup_limits lim = {.cpu_weight = 100};

        ASSERT_OK(dsv_cgroup_host_new(&cfg, &h));
        static const char *const bad_names[] = {"..", ".", "", "../escape", "a/b", "/abs"};
        for (size_t i = 0; i < sizeof bad_names / sizeof bad_names[0]; i++)
                ASSERT_ERR(dsv_cgroup_instance_new(h, bad_names[i], &lim, &rep, &inst), -EINVAL);

        /* A control file replaced by a symlink to a file outside: not followed. */
        f->evil = 1;
        ASSERT_OK(dsv_cgroup_instance_new(h, "evil", &lim, &rep, &inst));
        ASSERT_TRUE(!rep.e[DSV_CGROUP_LIMIT_CPU_WEIGHT].applied);
        ASSERT_TRUE(strstr(rep.e[DSV_CGROUP_LIMIT_CPU_WEIGHT].reason, strerror(ELOOP)) != NULL);
        ASSERT_OK(read_rel(f, "outside/secret", buf, sizeof buf));
        ASSERT_STREQ(buf, "keep\n");
        ASSERT_OK(dsv_cgroup_instance_stop(inst, 1000));
        dsv_cgroup_instance_free(inst);
        dsv_cgroup_host_free(h);
        h = NULL;

        /* An own path that climbs out, or goes through a symlink, is refused. */
        ASSERT_OK(put_path(f, "proc-self-cgroup", "0::/system.slice/../../outside\n"));
        ASSERT_ERR(dsv_cgroup_host_new(&cfg, &h), -EINVAL);
        char link[600], target[600];
        snprintf(link, sizeof link, "%s/link", f->root);
        snprintf(target, sizeof target, "%s/outside", f->dir);
        ASSERT_TRUE(symlink(target, link) == 0);
        ASSERT_OK(put_path(f, "proc-self-cgroup", "0::/link\n"));
        ASSERT_TRUE(dsv_cgroup_host_new(&cfg, &h) < 0);
        ASSERT_TRUE(h == NULL);
        /* A missing "0::" line: no v2 group, and unified mode cannot do without one. */
        ASSERT_OK(put_path(f, "proc-self-cgroup", "4:memory:/x\n"));
        ASSERT_ERR(dsv_cgroup_host_new(&cfg, &h), -ENOENT);
}

TEST(fake_v2_tree_refuses_escapes) {
        struct fake f = {0};
        int r = fake_setup(&f);
        if (r == 0)
                fake_attacks(&f);
        fake_teardown(&f);
        ASSERT_OK(r);
}

/* The snapshot oracle itself notices a write above the delegated group. */
TEST(snapshot_diff_catches_outside_write) {
        struct fake f = {0};
        struct snap *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b);
        char bad[200] = "";
        int r = a && b ? fake_setup(&f) : -ENOMEM;
        int ra = r ?: snap_take(&f, a);
        int w = ra ?: put_path(&f, "cg/system.slice/cgroup.subtree_control", "+hugetlb\n");
        int rb = w ?: snap_take(&f, b);
        int diff = rb ? -1 : snap_diff_outside_own(a, b, bad, sizeof bad);
        fake_teardown(&f);
        free(a);
        free(b);
        ASSERT_OK(rb);
        ASSERT_EQ(diff, 1);
        ASSERT_STREQ(bad, "/cg/system.slice/cgroup.subtree_control");
}

TEST(writer_checks_names) {
        ASSERT_OK(dsv__cgfs_name_check("worker-0"));
        ASSERT_ERR(dsv__cgfs_name_check(".."), -EINVAL);
        ASSERT_ERR(dsv__cgfs_name_check("a/b"), -EINVAL);
        ASSERT_ERR(dsv__cgfs_name_check(""), -EINVAL);
        ASSERT_ERR(dsv__cgfs_name_check(NULL), -EINVAL);
        char longname[300];
        memset(longname, 'a', sizeof longname - 1);
        longname[sizeof longname - 1] = '\0';
        ASSERT_ERR(dsv__cgfs_name_check(longname), -EINVAL);
        ASSERT_TRUE(dsv__cgfs_has_word("cpu cpuset memory\n", "cpuset"));
        ASSERT_TRUE(dsv__cgfs_has_word("cpu cpuset memory\n", "memory"));
        ASSERT_TRUE(!dsv__cgfs_has_word("cpuset memory", "cpu"));
        ASSERT_TRUE(!dsv__cgfs_has_word("", "cpu"));
}

TEST(read_pids_streams_cgroup_procs) {
        char dir[] = "/tmp/dsv-procs-XXXXXX";
        ASSERT_TRUE(mkdtemp(dir) != NULL);
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        pid_t pids[4];
        int r1 = put_file(dfd, "cgroup.procs", "12\n34\n56\n");
        int n1 = dsv__cgfs_read_pids(dfd, pids, 4);
        int n2 = dsv__cgfs_read_pids(dfd, pids, 2); /* stops at max */
        int r2 = put_file(dfd, "cgroup.procs", "");
        int n3 = dsv__cgfs_read_pids(dfd, pids, 4);
        int r3 = put_file(dfd, "cgroup.procs", "12\nx\n");
        int n4 = dsv__cgfs_read_pids(dfd, pids, 4);
        unlinkat(dfd, "cgroup.procs", 0);
        int n5 = dsv__cgfs_read_pids(dfd, pids, 4);
        close(dfd);
        rmdir(dir);
        ASSERT_OK(r1);
        ASSERT_OK(r2);
        ASSERT_OK(r3);
        ASSERT_EQ(n1, 3);
        ASSERT_EQ(n2, 2);
        ASSERT_EQ(pids[1], 34);
        ASSERT_EQ(n3, 0);
        ASSERT_ERR(n4, -EBADMSG);
        ASSERT_ERR(n5, -ENOENT);
}

TEST(cpulist_parse_and_compare) {
        struct dsv__cpulist a, b;
        ASSERT_OK(dsv__cpulist_parse("0-3,8,10-11\n", &a));
        ASSERT_OK(dsv__cpulist_parse("0,1,2,3,8,10,11", &b));
        ASSERT_TRUE(dsv__cpulist_equal(&a, &b));
        ASSERT_EQ(a.bits[0], 0xd0full);
        ASSERT_OK(dsv__cpulist_parse("", &b));
        ASSERT_TRUE(!dsv__cpulist_equal(&a, &b));
        ASSERT_OK(dsv__cpulist_parse("0-4095", &a));
        ASSERT_EQ(a.bits[63], ~0ull);
        ASSERT_ERR(dsv__cpulist_parse("3-1", &a), -EINVAL);
        ASSERT_ERR(dsv__cpulist_parse("1-", &a), -EINVAL);
        ASSERT_ERR(dsv__cpulist_parse("x", &a), -EINVAL);
        ASSERT_ERR(dsv__cpulist_parse("-1", &a), -EINVAL);
        ASSERT_ERR(dsv__cpulist_parse("4096", &a), -ERANGE);
}

TEST(own_path_from_proc_self_cgroup) {
        char path[] = "/tmp/dsv-proc-cgroup-XXXXXX", buf[256];
        int fd = mkstemp(path);
        ASSERT_TRUE(fd >= 0);
        const char *text = "9:name=systemd:/\n4:memory:/process_api/abc\n2:cpu,cpuacct:/a/b\n"
                           "1:cpuset:/\n0::/system.slice/x.service\n";
        ssize_t n = write(fd, text, strlen(text));
        close(fd);
        int r1 = dsv__cgroup_own_path(path, NULL, buf, sizeof buf);
        char v2[256];
        snprintf(v2, sizeof v2, "%s", buf);
        int r2 = dsv__cgroup_own_path(path, "memory", buf, sizeof buf);
        char mem[256];
        snprintf(mem, sizeof mem, "%s", buf);
        int r3 = dsv__cgroup_own_path(path, "cpuacct", buf, sizeof buf);
        char cpuacct[256];
        snprintf(cpuacct, sizeof cpuacct, "%s", buf);
        int r4 = dsv__cgroup_own_path(path, "hugetlb", buf, sizeof buf);
        int r5 = dsv__cgroup_own_path(path, "cpu", buf, sizeof buf);
        unlink(path);
        ASSERT_EQ(n, (ssize_t)strlen(text));
        ASSERT_OK(r1);
        ASSERT_STREQ(v2, "/system.slice/x.service");
        ASSERT_OK(r2);
        ASSERT_STREQ(mem, "/process_api/abc");
        ASSERT_OK(r3);
        ASSERT_STREQ(cpuacct, "/a/b");
        ASSERT_ERR(r4, -ENOENT);
        ASSERT_OK(r5);
        ASSERT_STREQ(buf, "/a/b");
}

TEST(report_format_and_names) {
        struct dsv_cgroup_report rep;
        memset(&rep, 0, sizeof rep);
        char buf[512];
        ASSERT_EQ(dsv_cgroup_report_format(&rep, buf, sizeof buf), 0);
        ASSERT_STREQ(buf, "");
        rep.e[DSV_CGROUP_LIMIT_MEMORY_MAX] = (struct dsv_cgroup_report_entry){
                .requested = true, .applied = true, .value = "1048576",
                .file = "v1/memory:memory.limit_in_bytes",
                .reason = "memory controller is v1 here: memory.limit_in_bytes used"};
        int n = dsv_cgroup_report_format(&rep, buf, sizeof buf);
        ASSERT_STREQ(buf, "memory.max=1048576 applied (v1/memory:memory.limit_in_bytes; memory controller "
                          "is v1 here: memory.limit_in_bytes used)\n");
        ASSERT_EQ(n, (int)strlen(buf));
        char small[8];
        ASSERT_EQ(dsv_cgroup_report_format(&rep, small, sizeof small), n);
        ASSERT_EQ(strlen(small), 7);
        ASSERT_STREQ(dsv_cgroup_limit_to_string(DSV_CGROUP_LIMIT_HUGETLB_2MB_MAX), "hugetlb.2MB.max");
        ASSERT_STREQ(dsv_cgroup_mode_to_string(DSV_CGROUP_MODE_HYBRID), "hybrid");
        ASSERT_STREQ(dsv_hugepages_mode_to_string(DSV_HUGEPAGES_MODE_REQUIRE), "require");
}

TEST(mode_detect_on_non_cgroup_filesystems) {
        enum dsv_cgroup_mode m = DSV_CGROUP_MODE_COUNT;
        ASSERT_ERR(dsv_cgroup_mode_detect("/proc", &m), -ENOMEDIUM);
        ASSERT_ERR(dsv_cgroup_mode_detect("/nonexistent-dsv", &m), -ENOENT);
        /* A tmpfs without a cgroup2 "unified" below it is legacy. */
        char dir[] = "/dev/shm/dsv-cgmode-XXXXXX";
        if (mkdtemp(dir)) {
                int r = dsv_cgroup_mode_detect(dir, &m);
                rmdir(dir);
                ASSERT_OK(r);
                ASSERT_EQ(m, DSV_CGROUP_MODE_LEGACY);
        }
}

/* ---- the parent subtree (--cgroup-parent) and restoring the delegated group ------- */

/* The set of controllers a fake cgroup.subtree_control ends up with: the fake keeps
 * every "+ctrl"/"-ctrl" write appended, so the kernel's answer is their replay. */
static unsigned replay_subtree_control(const char *log) {
        static const char *const names[] = {"cpu", "cpuset", "memory", "hugetlb", "io", "pids"};
        unsigned set = 0;
        char copy[512];
        snprintf(copy, sizeof copy, "%s", log);
        for (char *w = strtok(copy, " \n"); w; w = strtok(NULL, " \n")) {
                char op = (*w == '+' || *w == '-') ? *w++ : '+';
                for (unsigned i = 0; i < sizeof names / sizeof names[0]; i++)
                        if (strcmp(w, names[i]) == 0)
                                set = op == '+' ? set | (1u << i) : set & ~(1u << i);
        }
        return set;
}

static void fake_parent_cycle(struct fake *f) {
        struct snap *before = calloc(1, sizeof *before), *after = calloc(1, sizeof *after);
        char buf[4096], want[600];
        ASSERT_TRUE(before && after);
        ASSERT_OK(snap_take(f, before));
        struct dsv_cgroup_config cfg = {
                .root = f->root, .proc_self_cgroup = f->proc, .mode = DSV_CGROUP_MODE_UNIFIED,
                .on_mkdir = fake_mkdir, .on_rmdir = fake_rmdir, .fake_user = f, .parent = "inference/prod",
        };
        struct dsv_cgroup_host *h = NULL;
        ASSERT_OK(dsv_cgroup_host_new(&cfg, &h));
        struct dsv_cgroup_host_info info;
        ASSERT_OK(dsv_cgroup_host_info(h, &info));
        snprintf(want, sizeof want, "%s/system.slice/dsv.service/inference/prod", f->root);
        ASSERT_STREQ(info.v2_parent, want);

        /* Every level of the path gets the controllers own enables, top down, so that
         * the instance groups below have them; nothing is written above own. */
        ASSERT_OK(dsv_cgroup_host_delegate(h));
        ASSERT_OK(read_rel(f, OWN "/cgroup.subtree_control", buf, sizeof buf));
        ASSERT_STREQ(buf, "+cpu\n+cpuset\n+memory\n");
        ASSERT_OK(read_rel(f, OWN "/inference/cgroup.subtree_control", buf, sizeof buf));
        ASSERT_STREQ(buf, "+cpu\n+cpuset\n+memory\n");
        ASSERT_OK(read_rel(f, OWN "/inference/prod/cgroup.subtree_control", buf, sizeof buf));
        ASSERT_STREQ(buf, "+cpu\n+cpuset\n+memory\n");

        struct dsv_cgroup_limits lim = {.cpus = "0-3", .mems = "0", .cpu_weight = 100};
        struct dsv_cgroup_report rep;
        struct dsv_cgroup_instance *w0 = NULL, *w1 = NULL;
        ASSERT_OK(dsv_cgroup_instance_new(h, "w0", &lim, &rep, &w0));
        ASSERT_OK(dsv_cgroup_instance_new(h, "w1", &lim, &rep, &w1));
        ASSERT_EQ(dsv_cgroup_report_n_missing(&rep), 0);
        ASSERT_OK(read_rel(f, OWN "/inference/prod/w1/cpu.weight", buf, sizeof buf));
        ASSERT_STREQ(buf, "100\n");
        ASSERT_OK(dsv_cgroup_instance_stop(w0, 1000));
        ASSERT_OK(dsv_cgroup_instance_stop(w1, 1000));
        dsv_cgroup_instance_free(w0);
        dsv_cgroup_instance_free(w1);

        char why[512] = "x";
        ASSERT_OK(dsv_cgroup_host_restore(h, why, sizeof why));
        ASSERT_STREQ(why, "");
        ASSERT_OK(dsv_cgroup_host_restore(h, why, sizeof why)); /* idempotent */
        dsv_cgroup_host_free(h);

        /* Exactly as before: no level, no leaf; own's subtree_control replays to what it
         * was; own's cgroup.procs got this process back (a move, appended). */
        ASSERT_OK(snap_take(f, after));
        char bad[200] = "";
        if (snap_diff_outside_own(before, after, bad, sizeof bad))
                T_FAIL("changed outside the delegated group: %s", bad);
        ASSERT_EQ(after->n, before->n);
        for (int i = 0; i < after->n; i++) {
                const char *old = snap_find(before, after->path[i]);
                if (!old) {
                        T_FAIL("left behind: %s", after->path[i]);
                        continue;
                }
                if (strcmp(after->path[i], "/" OWN "/cgroup.subtree_control") == 0)
                        ASSERT_EQ(replay_subtree_control(after->content[i]), replay_subtree_control(old));
                else if (strcmp(after->path[i], "/" OWN "/cgroup.procs") == 0)
                        ASSERT_TRUE(strncmp(after->content[i], old, strlen(old)) == 0 &&
                                    atoi(after->content[i] + strlen(old)) == (int)getpid());
                else if (strcmp(old, after->content[i]) != 0)
                        T_FAIL("changed: %s", after->path[i]);
        }
        ASSERT_OK(read_rel(f, OWN "/cgroup.subtree_control", buf, sizeof buf));
        ASSERT_STREQ(buf, "+cpu\n+cpuset\n+memory\n-memory\n-cpuset\n-cpu\n");
        free(before);
        free(after);
}

TEST(fake_v2_parent_subtree_created_and_restored) {
        struct fake f = {0};
        int fds = count_fds();
        int r = fake_setup(&f);
        if (r == 0)
                fake_parent_cycle(&f);
        fake_teardown(&f);
        ASSERT_OK(r);
        ASSERT_EQ(count_fds(), fds);
}

/* A level that existed is used and left; a group someone else made meanwhile keeps
 * the controllers enabled above it (it may use them), and restore says so. */
static void fake_parent_shared(struct fake *f) {
        char buf[512];
        ASSERT_TRUE(mkdirat(AT_FDCWD, f->root, 0755) == 0 || errno == EEXIST);
        char p[600];
        snprintf(p, sizeof p, "%s/%s", f->dir, OWN);
        int own = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ASSERT_TRUE(own >= 0);
        ASSERT_TRUE(mkdirat(own, "inference", 0755) == 0);
        ASSERT_OK(fake_mkdir(own, "inference", f));
        struct dsv_cgroup_config cfg = {
                .root = f->root, .proc_self_cgroup = f->proc, .mode = DSV_CGROUP_MODE_UNIFIED,
                .on_mkdir = fake_mkdir, .on_rmdir = fake_rmdir, .fake_user = f, .parent = "inference/prod",
        };
        struct dsv_cgroup_host *h = NULL;
        ASSERT_OK(dsv_cgroup_host_new(&cfg, &h));
        ASSERT_OK(dsv_cgroup_host_delegate(h));
        ASSERT_TRUE(mkdirat(own, "inference/other", 0755) == 0);
        char why[1024];
        ASSERT_ERR(dsv_cgroup_host_restore(h, why, sizeof why), -EBUSY);
        ASSERT_TRUE(strstr(why, "inference/cgroup.subtree_control: 1 other group below it may use it") != NULL);
        ASSERT_TRUE(strstr(why, "dsv.service/cgroup.subtree_control: 1 other group") != NULL);
        dsv_cgroup_host_free(h);
        /* prod (ours) is gone, inference (theirs) stays with "other" below it. */
        ASSERT_ERR(read_rel(f, OWN "/inference/prod/cgroup.controllers", buf, sizeof buf), -ENOENT);
        ASSERT_OK(read_rel(f, OWN "/inference/cgroup.controllers", buf, sizeof buf));
        ASSERT_OK(read_rel(f, OWN "/inference/cgroup.subtree_control", buf, sizeof buf));
        ASSERT_STREQ(buf, "+cpu\n+cpuset\n+memory\n");
        unlinkat(own, "inference/other", AT_REMOVEDIR);
        close(own);
}

TEST(fake_v2_parent_leaves_what_others_use) {
        struct fake f = {0};
        int r = fake_setup(&f);
        if (r == 0)
                fake_parent_shared(&f);
        fake_teardown(&f);
        ASSERT_OK(r);
}

/* A supervisor killed with SIGKILL left "cpu" and "memory" enabled in own's
 * subtree_control and recorded them (trusted.dsvisor.enabled.<pid>), and its leaf
 * (trusted.dsvisor.made); a live one (pid 1 stands in for it) recorded "memory". The
 * next supervisor adopts "cpu", not "memory" (still claimed), and the leaf, enables what
 * else it wants, and its restore disables what it adopted and enabled and removes the
 * leaf: the gone supervisor's changes are undone, the live one's kept. */
static void fake_adopt_cycle(struct fake *f) {
        char buf[512], p[600], name[64];
        pid_t dead = fork();
        ASSERT_TRUE(dead >= 0);
        if (dead == 0)
                _exit(0);
        ASSERT_EQ(waitpid(dead, NULL, 0), dead);
        ASSERT_OK(put_path(f, OWN "/cgroup.subtree_control", "cpu memory\n"));
        snprintf(p, sizeof p, "%s/%s", f->dir, OWN);
        snprintf(name, sizeof name, "trusted.dsvisor.enabled.%d", (int)dead);
        ASSERT_OK(setxattr(p, name, "cpu memory", 10, 0) < 0 ? -errno : 0);
        ASSERT_OK(setxattr(p, "trusted.dsvisor.enabled.1", "memory", 6, 0) < 0 ? -errno : 0);
        /* and its leaf, which it made */
        char leaf[700], pidtxt[24];
        snprintf(leaf, sizeof leaf, "%s/supervisor", p);
        snprintf(pidtxt, sizeof pidtxt, "%d", (int)dead);
        int own = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ASSERT_TRUE(own >= 0);
        ASSERT_TRUE(mkdirat(own, "supervisor", 0755) == 0);
        ASSERT_OK(fake_mkdir(own, "supervisor", f));
        close(own);
        ASSERT_OK(setxattr(leaf, "trusted.dsvisor.made", pidtxt, strlen(pidtxt), 0) < 0 ? -errno : 0);

        struct dsv_cgroup_config cfg = {
                .root = f->root, .proc_self_cgroup = f->proc, .mode = DSV_CGROUP_MODE_UNIFIED,
                .on_mkdir = fake_mkdir, .on_rmdir = fake_rmdir, .fake_user = f,
        };
        struct dsv_cgroup_host *h = NULL;
        ASSERT_OK(dsv_cgroup_host_new(&cfg, &h));
        ASSERT_OK(dsv_cgroup_host_delegate(h));
        ASSERT_OK(read_rel(f, OWN "/cgroup.subtree_control", buf, sizeof buf));
        ASSERT_STREQ(buf, "cpu memory\n+cpuset\n");
        ASSERT_TRUE(getxattr(p, name, buf, sizeof buf) < 0 && errno == ENODATA); /* taken over */
        snprintf(name, sizeof name, "trusted.dsvisor.enabled.%d", (int)getpid());
        ssize_t n = getxattr(p, name, buf, sizeof buf - 1);
        ASSERT_TRUE(n > 0);
        buf[n] = '\0';
        ASSERT_STREQ(buf, "cpu cpuset");

        char why[512];
        ASSERT_OK(dsv_cgroup_host_restore(h, why, sizeof why));
        dsv_cgroup_host_free(h);
        ASSERT_OK(read_rel(f, OWN "/cgroup.subtree_control", buf, sizeof buf));
        ASSERT_EQ(replay_subtree_control(buf), 1u << 2); /* memory only */
        struct stat st;
        ASSERT_TRUE(stat(leaf, &st) < 0 && errno == ENOENT); /* the adopted leaf removed */
        ASSERT_TRUE(getxattr(p, name, buf, sizeof buf) < 0 && errno == ENODATA); /* ours dropped */
        n = getxattr(p, "trusted.dsvisor.enabled.1", buf, sizeof buf - 1);
        ASSERT_TRUE(n == 6);
}

TEST(fake_v2_adopts_what_a_killed_supervisor_enabled) {
        struct fake f = {0};
        int r = fake_setup(&f);
        if (r == 0)
                fake_adopt_cycle(&f);
        fake_teardown(&f);
        ASSERT_OK(r);
}

TEST(parent_paths_must_stay_below_own) {
        static const char *const bad[] = {"/sys/fs/cgroup/x", "..", "a/../b", "a//b", "a/", ".", "./a", "a/..",
                                          "/"};
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
                const char *why = NULL;
                ASSERT_ERR(dsv_cgroup_parent_check(bad[i], &why), -EINVAL);
                ASSERT_TRUE(why != NULL && why[0]);
        }
        const char *why = NULL;
        ASSERT_ERR(dsv_cgroup_parent_check("/a", &why), -EINVAL);
        ASSERT_TRUE(strstr(why, "absolute") != NULL);
        ASSERT_ERR(dsv_cgroup_parent_check("a/../b", &why), -EINVAL);
        ASSERT_TRUE(strstr(why, "'..'") != NULL);
        ASSERT_ERR(dsv_cgroup_parent_check("a//b", &why), -EINVAL);
        ASSERT_TRUE(strstr(why, "empty component") != NULL);
        ASSERT_ERR(dsv_cgroup_parent_check("a/b/c/d/e/f/g/h/i/j/k/l/m/n/o/p/q", &why), -EINVAL);
        ASSERT_OK(dsv_cgroup_parent_check("a/b/c/d/e/f/g/h/i/j/k/l/m/n/o/p", NULL));
        ASSERT_OK(dsv_cgroup_parent_check("inference/prod", NULL));
        ASSERT_OK(dsv_cgroup_parent_check("x..y/.z", NULL));
        ASSERT_OK(dsv_cgroup_parent_check("", NULL));
        ASSERT_OK(dsv_cgroup_parent_check(NULL, NULL));

        /* And the host refuses them before touching anything. */
        struct fake f = {0};
        int r = fake_setup(&f);
        struct dsv_cgroup_host *h = NULL;
        struct dsv_cgroup_config cfg = {.root = f.root, .proc_self_cgroup = f.proc,
                                        .mode = DSV_CGROUP_MODE_UNIFIED, .parent = "../escape"};
        int r2 = r ?: dsv_cgroup_host_new(&cfg, &h);
        fake_teardown(&f);
        ASSERT_OK(r);
        ASSERT_ERR(r2, -EINVAL);
        ASSERT_TRUE(h == NULL);
}
