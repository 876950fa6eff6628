/* given_set.c — the cpuset of this process's own cgroup: which CPUs and memory nodes
 * the cgroup lets it use (dsv_platform.h, "the given set"). Read-only: it looks at the
 * effective files of the group /proc/self/cgroup names, v1 or v2. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cgroup-internal.h"
#include "dsv_platform.h"

/* Reads the first line of path into buf (newline removed). */
static int read_line(const char *path, char *buf, size_t size) {
        FILE *f = fopen(path, "re");
        if (!f)
                return -errno;
        int r = fgets(buf, (int)size, f) ? 0 : -EIO;
        fclose(f);
        if (r == 0)
                buf[strcspn(buf, "\n")] = '\0';
        return r;
}

/* Reads dir/name into buf. */
static int read_in(const char *dir, const char *name, char *buf, size_t size) {
        char path[PATH_MAX];
        if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
                return -ENAMETOOLONG;
        return read_line(path, buf, size);
}

/* Reads dir/effective, or dir/configured on kernels without the effective file. */
static int read_either(const char *dir, const char *effective, const char *configured, char *buf, size_t size) {
        int r = read_in(dir, effective, buf, size);
        return r == -ENOENT ? read_in(dir, configured, buf, size) : r;
}

/* v1: the cpuset hierarchy at <root>/cpuset (or where libcgroup found it); every group
 * there has effective_cpus and effective_mems. */
static int read_v1(const char *root, const char *proc, struct dsv_given_cgroup *ret) {
        char own[PATH_MAX], mount[PATH_MAX];
        int r = dsv__cgroup_own_path(proc, "cpuset", own, sizeof own);
        if (r < 0)
                return r;
        if (dsv__cgroup_v1_mount(root, "cpuset", mount, sizeof mount) < 0 &&
            snprintf(mount, sizeof mount, "%s/cpuset", root) >= (int)sizeof mount)
                return -ENAMETOOLONG;
        if (snprintf(ret->group, sizeof ret->group, "%s%s", mount, strcmp(own, "/") ? own : "") >=
            (int)sizeof ret->group)
                return -ENAMETOOLONG;
        if ((r = read_either(ret->group, "cpuset.effective_cpus", "cpuset.cpus", ret->cpus, sizeof ret->cpus)) < 0 ||
            (r = read_either(ret->group, "cpuset.effective_mems", "cpuset.mems", ret->mems, sizeof ret->mems)) < 0)
                return r;
        ret->version = 1;
        return 0;
}

/* v2: the tree at <root> (unified) or <root>/unified (hybrid). Without the cpuset
 * controller in a group, the nearest ancestor that has it decides; without it anywhere,
 * the cgroup does not restrict. */
static int read_v2(const char *root, const char *proc, struct dsv_given_cgroup *ret) {
        char own[PATH_MAX], tree[PATH_MAX], probe[PATH_MAX];
        int r = dsv__cgroup_own_path(proc, NULL, own, sizeof own);
        if (r < 0)
                return r;
        if (snprintf(probe, sizeof probe, "%s/cgroup.controllers", root) >= (int)sizeof probe)
                return -ENAMETOOLONG;
        if (snprintf(tree, sizeof tree, access(probe, F_OK) == 0 ? "%s" : "%s/unified", root) >= (int)sizeof tree)
                return -ENAMETOOLONG;
        for (;;) {
                if (snprintf(ret->group, sizeof ret->group, "%s%s", tree, strcmp(own, "/") ? own : "") >=
                    (int)sizeof ret->group)
                        return -ENAMETOOLONG;
                r = read_in(ret->group, "cpuset.cpus.effective", ret->cpus, sizeof ret->cpus);
                if (r == 0 && (r = read_in(ret->group, "cpuset.mems.effective", ret->mems, sizeof ret->mems)) == 0) {
                        ret->version = 2;
                        return 0;
                }
                if (r != -ENOENT || strcmp(own, "/") == 0)
                        return r;
                char *slash = strrchr(own, '/');
                slash[slash == own] = '\0'; /* "/a/b" -> "/a", "/a" -> "/" */
        }
}

int dsv_given_cgroup_read(const char *root, const char *proc_self_cgroup, struct dsv_given_cgroup *ret) {
        if (!root || !ret)
                return -EINVAL;
        const char *proc = proc_self_cgroup ? proc_self_cgroup : "/proc/self/cgroup";
        struct dsv_given_cgroup g;
        memset(&g, 0, sizeof g);
        int r = read_v1(root, proc, &g);
        if (r == -ENOENT) {
                memset(&g, 0, sizeof g);
                r = read_v2(root, proc, &g);
        }
        if (r == 0)
                *ret = g;
        return r;
}
