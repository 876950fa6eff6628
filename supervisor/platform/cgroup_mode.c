/* cgroup_mode.c — the one place that decides where cgroups are on this host: the mode
 * (v1 legacy, hybrid, v2 unified), from statfs() for the running supervisor or from a
 * mounts file for the doctor's view of a host tree; where each controller's hierarchy
 * is mounted; this process's own group from /proc/self/cgroup; and the controller
 * names for the DSV_CGROUP_CTRL_* bits. Everything else asks here. */
#include <errno.h>
#include <limits.h>
#include <linux/magic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/vfs.h>

#include "cgroup-internal.h"

/* ---- controller names --------------------------------------------------------------- */

static const char *const ctrl_names[] = {"cpu", "cpuset", "memory", "hugetlb"};

const char *dsv__cgroup_ctrl_name(unsigned bit) {
        return bit < sizeof ctrl_names / sizeof ctrl_names[0] ? ctrl_names[bit] : NULL;
}

void dsv__cgroup_ctrl_list(unsigned bits, char *buf, size_t size) {
        buf[0] = '\0';
        for (unsigned bit = 0; dsv__cgroup_ctrl_name(bit); bit++)
                if (bits & (1u << bit)) {
                        size_t len = strlen(buf);
                        snprintf(buf + len, size - len, "%s%s", len ? " " : "", dsv__cgroup_ctrl_name(bit));
                }
}

unsigned dsv__cgroup_ctrl_bits(const char *list) {
        unsigned bits = 0;
        for (unsigned bit = 0; dsv__cgroup_ctrl_name(bit); bit++)
                if (dsv__cgfs_has_word(list, dsv__cgroup_ctrl_name(bit)))
                        bits |= 1u << bit;
        return bits;
}

/* ---- the mode ------------------------------------------------------------------------ */

const char *dsv_cgroup_mode_to_string(enum dsv_cgroup_mode mode) {
        static const char *const names[DSV_CGROUP_MODE_COUNT] = {
                [DSV_CGROUP_MODE_DETECT] = "detect",
                [DSV_CGROUP_MODE_LEGACY] = "legacy",
                [DSV_CGROUP_MODE_HYBRID] = "hybrid",
                [DSV_CGROUP_MODE_UNIFIED] = "unified",
        };
        return (unsigned)mode < DSV_CGROUP_MODE_COUNT ? names[mode] : "invalid";
}
int dsv__cgroup_v2_mount(const char *root, enum dsv_cgroup_mode mode, char *buf, size_t size) {
        int n;
        if (mode == DSV_CGROUP_MODE_UNIFIED)
                n = snprintf(buf, size, "%s", root);
        else if (mode == DSV_CGROUP_MODE_HYBRID)
                n = snprintf(buf, size, "%s/unified", root);
        else
                return -ENOENT;
        return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

int dsv_cgroup_mode_detect(const char *root, enum dsv_cgroup_mode *ret_mode) {
        struct statfs sfs;
        if (!root || !ret_mode)
                return -EINVAL;
        if (statfs(root, &sfs) < 0)
                return -errno;
        if (sfs.f_type == CGROUP2_SUPER_MAGIC) {
                *ret_mode = DSV_CGROUP_MODE_UNIFIED;
                return 0;
        }
        if (sfs.f_type != TMPFS_MAGIC)
                return -ENOMEDIUM;
        char unified[PATH_MAX];
        int r = dsv__cgroup_v2_mount(root, DSV_CGROUP_MODE_HYBRID, unified, sizeof unified);
        if (r < 0)
                return r;
        bool hybrid = statfs(unified, &sfs) == 0 && sfs.f_type == CGROUP2_SUPER_MAGIC;
        *ret_mode = hybrid ? DSV_CGROUP_MODE_HYBRID : DSV_CGROUP_MODE_LEGACY;
        return 0;
}

int dsv__cgroup_own_path(const char *proc_path, const char *controller, char *buf, size_t size) {
        FILE *f = fopen(proc_path, "re");
        if (!f)
                return -errno;
        char line[4096];
        int r = -ENOENT;
        while (fgets(line, sizeof line, f)) {
                line[strcspn(line, "\n")] = '\0';
                char *c1 = strchr(line, ':');
                char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
                if (!c2 || c2[1] != '/')
                        continue;
                *c1 = '\0';
                *c2 = '\0';
                const char *ctrls = c1 + 1, *path = c2 + 1;
                bool match;
                if (!controller) {
                        match = strcmp(line, "0") == 0 && ctrls[0] == '\0';
                } else {
                        match = false;
                        for (const char *p = ctrls; *p;) {
                                size_t n = strcspn(p, ",");
                                if (n == strlen(controller) && memcmp(p, controller, n) == 0)
                                        match = true;
                                p += n + (p[n] == ',');
                        }
                }
                if (match) {
                        r = snprintf(buf, size, "%s", path) >= (int)size ? -ENAMETOOLONG : 0;
                        break;
                }
        }
        fclose(f);
        return r;
}

int dsv__cgroup_mounts_read(const char *mounts_path, const char *root, struct dsv__cgroup_mounts *ret) {
        char line[1024], unified[PATH_MAX], root_fs[32] = "";
        bool unified_v2 = false;
        struct dsv__cgroup_mounts m;
        memset(&m, 0, sizeof m);
        int r = dsv__cgroup_v2_mount(root, DSV_CGROUP_MODE_HYBRID, unified, sizeof unified);
        if (r < 0)
                return r;
        FILE *f = fopen(mounts_path, "re");
        if (!f)
                return -errno;
        while (fgets(line, sizeof line, f)) {
                char dev[256], dir[256], type[32], opts[512];
                if (sscanf(line, "%255s %255s %31s %511s", dev, dir, type, opts) != 4)
                        continue;
                if (strcmp(dir, root) == 0)
                        snprintf(root_fs, sizeof root_fs, "%s", type);
                else if (strcmp(dir, unified) == 0 && strcmp(type, "cgroup2") == 0)
                        unified_v2 = true;
                if (strcmp(type, "cgroup") != 0)
                        continue;
                for (char *o = opts; *o; o++)
                        if (*o == ',')
                                *o = ' ';
                unsigned bits = dsv__cgroup_ctrl_bits(opts);
                m.v1 |= bits;
                if (bits & DSV_CGROUP_CTRL_CPU)
                        snprintf(m.v1_cpu_dir, sizeof m.v1_cpu_dir, "%s", dir);
        }
        fclose(f);
        m.mode = strcmp(root_fs, "cgroup2") == 0 ? DSV_CGROUP_MODE_UNIFIED
                 : unified_v2                     ? DSV_CGROUP_MODE_HYBRID
                 : m.v1                           ? DSV_CGROUP_MODE_LEGACY
                                                  : DSV_CGROUP_MODE_DETECT;
        if (dsv__cgroup_v2_mount(root, m.mode, m.v2_dir, sizeof m.v2_dir) < 0)
                m.v2_dir[0] = '\0';
        *ret = m;
        return 0;
}
