/* cgroup.c — worker cgroups: mode detection, the host (own groups per hierarchy),
 * instances with their limit report, spawning into a group, and teardown.
 * Contracts are in dsv_platform.h; the layering of the cgroup files is in
 * cgroup-internal.h. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <linux/sched.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cgroup-internal.h"

#define N_CTRL 4 /* DSV_CGROUP_CTRL_* bits */
#define BIT_CPU 0
#define BIT_CPUSET 1
#define BIT_MEMORY 2
#define BIT_HUGETLB 3
#define PATH_BUF 512
#define HUGEPAGE_2MB (2ull << 20)

extern char **environ;

struct dsv_cgroup_host {
        enum dsv_cgroup_mode mode;
        char leaf[NAME_MAX + 1];
        unsigned want;
        int (*on_mkdir)(int parent_fd, const char *name, void *user);
        int (*on_rmdir)(int parent_fd, const char *name, void *user);
        void *fake_user;

        int v2_fd; /* own v2 group, -1 without a v2 tree */
        bool v2_own_is_root;
        char v2_own[PATH_BUF];
        unsigned v2_available, v2_enabled;

        unsigned v1_mounted;
        int v1_fd[N_CTRL];          /* own v1 group per controller, -1 */
        char v1_rel[N_CTRL][PATH_BUF]; /* own group relative to its mount (libcgroup names) */
        char v1_own[N_CTRL][PATH_BUF];
};

struct dsv_cgroup_instance {
        struct dsv_cgroup_host *h;
        char name[NAME_MAX + 1];
        int v2_fd;
        unsigned v2_controllers; /* enabled for this group: its cgroup.controllers */
        unsigned v1_created;
        int v1_fd[N_CTRL];
        int v1_procs_fd[N_CTRL]; /* open cgroup.procs, for join-before-exec */
        char v1_rel[N_CTRL][PATH_BUF];
};

/* ---- names ----------------------------------------------------------------------- */

const char *dsv_cgroup_mode_to_string(enum dsv_cgroup_mode mode) {
        static const char *const names[DSV_CGROUP_MODE_COUNT] = {
                [DSV_CGROUP_MODE_DETECT] = "detect",
                [DSV_CGROUP_MODE_LEGACY] = "legacy",
                [DSV_CGROUP_MODE_HYBRID] = "hybrid",
                [DSV_CGROUP_MODE_UNIFIED] = "unified",
        };
        return (unsigned)mode < DSV_CGROUP_MODE_COUNT ? names[mode] : "invalid";
}

const char *dsv_cgroup_limit_to_string(enum dsv_cgroup_limit limit) {
        static const char *const names[DSV_CGROUP_LIMIT_COUNT] = {
                [DSV_CGROUP_LIMIT_CPUS] = "cpuset.cpus",
                [DSV_CGROUP_LIMIT_MEMS] = "cpuset.mems",
                [DSV_CGROUP_LIMIT_CPU_WEIGHT] = "cpu.weight",
                [DSV_CGROUP_LIMIT_CPU_MAX] = "cpu.max",
                [DSV_CGROUP_LIMIT_CPU_RT_RUNTIME] = "cpu.rt_runtime_us",
                [DSV_CGROUP_LIMIT_MEMORY_HIGH] = "memory.high",
                [DSV_CGROUP_LIMIT_MEMORY_MAX] = "memory.max",
                [DSV_CGROUP_LIMIT_MEMORY_OOM_GROUP] = "memory.oom.group",
                [DSV_CGROUP_LIMIT_HUGETLB_2MB_MAX] = "hugetlb.2MB.max",
        };
        return (unsigned)limit < DSV_CGROUP_LIMIT_COUNT ? names[limit] : "invalid";
}

/* ---- mode and own groups ------------------------------------------------------------ */

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
        if (snprintf(unified, sizeof unified, "%s/unified", root) >= (int)sizeof unified)
                return -ENAMETOOLONG;
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

static int read_ctrl_bits(int dirfd, const char *file, unsigned *ret) {
        char buf[PATH_BUF];
        int r = dsv__cgfs_read(dirfd, file, buf, sizeof buf);
        if (r < 0)
                return r;
        unsigned bits = 0;
        for (unsigned b = 0; b < N_CTRL; b++)
                if (dsv__cgfs_has_word(buf, dsv__cgroup_ctrl_name(b)))
                        bits |= 1u << b;
        *ret = bits;
        return 0;
}

static int join_path(char *buf, size_t size, const char *a, const char *b) {
        size_t la = strlen(a);
        while (la > 0 && a[la - 1] == '/')
                la--;
        while (*b == '/')
                b++;
        int n = snprintf(buf, size, "%.*s%s%s", (int)la, a, *b ? "/" : "", b);
        return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

static int open_own(const char *mount, const char *own, int *ret_fd) {
        int mfd = open(mount, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (mfd < 0)
                return -errno;
        int r = dsv__cgfs_open_path(mfd, own, ret_fd);
        close(mfd);
        return r;
}

static int host_open_v2(struct dsv_cgroup_host *h, const char *root, const char *proc) {
        char mount[PATH_MAX], own[PATH_BUF];
        int r;
        if (h->mode == DSV_CGROUP_MODE_UNIFIED)
                r = snprintf(mount, sizeof mount, "%s", root) >= (int)sizeof mount ? -ENAMETOOLONG : 0;
        else
                r = join_path(mount, sizeof mount, root, "unified");
        if (r < 0)
                return r;
        r = dsv__cgroup_own_path(proc, NULL, own, sizeof own);
        if (r < 0)
                return r;
        r = open_own(mount, own, &h->v2_fd);
        if (r < 0)
                return r;
        h->v2_own_is_root = strspn(own, "/") == strlen(own);
        r = join_path(h->v2_own, sizeof h->v2_own, mount, own);
        if (r < 0)
                return r;
        r = read_ctrl_bits(h->v2_fd, "cgroup.controllers", &h->v2_available);
        if (r < 0)
                return r;
        return read_ctrl_bits(h->v2_fd, "cgroup.subtree_control", &h->v2_enabled);
}

static int host_open_v1(struct dsv_cgroup_host *h, unsigned bit, const char *root, const char *proc) {
        const char *name = dsv__cgroup_ctrl_name(bit);
        char mount[PATH_BUF];
        int r = dsv__cgroup_v1_mount(root, name, mount, sizeof mount);
        if (r < 0)
                return r;
        r = dsv__cgroup_own_path(proc, name, h->v1_rel[bit], sizeof h->v1_rel[bit]);
        if (r < 0)
                return r;
        r = open_own(mount, h->v1_rel[bit], &h->v1_fd[bit]);
        if (r < 0)
                return r;
        r = join_path(h->v1_own[bit], sizeof h->v1_own[bit], mount, h->v1_rel[bit]);
        if (r < 0)
                return r;
        h->v1_mounted |= 1u << bit;
        return 0;
}

void dsv_cgroup_host_free(struct dsv_cgroup_host *h) {
        if (!h)
                return;
        if (h->v2_fd >= 0)
                close(h->v2_fd);
        for (unsigned b = 0; b < N_CTRL; b++)
                if (h->v1_fd[b] >= 0)
                        close(h->v1_fd[b]);
        free(h);
}

int dsv_cgroup_host_new(const struct dsv_cgroup_config *cfg, struct dsv_cgroup_host **ret) {
        if (!cfg || !ret || (unsigned)cfg->mode >= DSV_CGROUP_MODE_COUNT)
                return -EINVAL;
        const char *root = cfg->root ? cfg->root : "/sys/fs/cgroup";
        const char *proc = cfg->proc_self_cgroup ? cfg->proc_self_cgroup : "/proc/self/cgroup";
        const char *leaf = cfg->supervisor_leaf ? cfg->supervisor_leaf : "supervisor";
        int r = dsv__cgfs_name_check(leaf);
        if (r < 0)
                return r;

        struct dsv_cgroup_host *h = calloc(1, sizeof *h);
        if (!h)
                return -ENOMEM;
        h->v2_fd = -1;
        for (unsigned b = 0; b < N_CTRL; b++)
                h->v1_fd[b] = -1;
        snprintf(h->leaf, sizeof h->leaf, "%s", leaf);
        h->want = cfg->controllers ? cfg->controllers & DSV_CGROUP_CTRL_ALL : DSV_CGROUP_CTRL_ALL;
        h->on_mkdir = cfg->on_mkdir;
        h->on_rmdir = cfg->on_rmdir;
        h->fake_user = cfg->fake_user;
        h->mode = cfg->mode;
        if (h->mode == DSV_CGROUP_MODE_DETECT) {
                r = dsv_cgroup_mode_detect(root, &h->mode);
                if (r < 0)
                        goto fail;
        }

        if (h->mode != DSV_CGROUP_MODE_LEGACY) {
                r = host_open_v2(h, root, proc);
                /* Hybrid: a process without a "0::" line (or an unreadable unified
                 * tree) simply has no v2 side; unified mode cannot do without it. */
                if (r < 0 && h->mode == DSV_CGROUP_MODE_UNIFIED)
                        goto fail;
                if (r < 0 && h->v2_fd >= 0) {
                        close(h->v2_fd);
                        h->v2_fd = -1;
                }
        }
        if (h->mode != DSV_CGROUP_MODE_UNIFIED) {
                for (unsigned b = 0; b < N_CTRL; b++) {
                        if (!(h->want & (1u << b)))
                                continue;
                        r = host_open_v1(h, b, root, proc);
                        if (r < 0 && h->v1_fd[b] >= 0) {
                                close(h->v1_fd[b]);
                                h->v1_fd[b] = -1;
                        }
                        if (r < 0 && r != -ENOENT && r != -ENODEV)
                                goto fail;
                }
        }
        if (h->v2_fd < 0 && !h->v1_mounted) {
                r = -ENOENT;
                goto fail;
        }
        *ret = h;
        return 0;
fail:
        dsv_cgroup_host_free(h);
        return r;
}

int dsv_cgroup_host_info(const struct dsv_cgroup_host *h, struct dsv_cgroup_host_info *ret) {
        if (!h || !ret)
                return -EINVAL;
        memset(ret, 0, sizeof *ret);
        ret->mode = h->mode;
        if (h->v2_fd >= 0)
                snprintf(ret->v2_own, sizeof ret->v2_own, "%s", h->v2_own);
        ret->v2_available = h->v2_available;
        ret->v2_enabled = h->v2_enabled;
        ret->v1_mounted = h->v1_mounted;
        for (unsigned b = 0; b < N_CTRL; b++)
                if (h->v1_mounted & (1u << b))
                        snprintf(ret->v1_own[b], sizeof ret->v1_own[b], "%s", h->v1_own[b]);
        return 0;
}

/* mkdir of a v2 group below the own group, then the fake-tree hook; opens it. */
static int v2_make(struct dsv_cgroup_host *h, const char *name, bool may_exist, int *ret_fd) {
        int r = dsv__cgfs_mkdir(h->v2_fd, name);
        bool made = r == 0;
        if (r < 0 && !(r == -EEXIST && may_exist))
                return r;
        if (made && h->on_mkdir) {
                r = h->on_mkdir(h->v2_fd, name, h->fake_user);
                if (r < 0) {
                        dsv__cgfs_rmdir(h->v2_fd, name);
                        return r;
                }
        }
        r = dsv__cgfs_open_dir(h->v2_fd, name, ret_fd);
        if (r < 0 && made)
                dsv__cgfs_rmdir(h->v2_fd, name);
        return r;
}

static int v2_remove(struct dsv_cgroup_host *h, const char *name) {
        if (h->on_rmdir) {
                int r = h->on_rmdir(h->v2_fd, name, h->fake_user);
                if (r < 0)
                        return r;
        }
        return dsv__cgfs_rmdir(h->v2_fd, name);
}

int dsv_cgroup_host_delegate(struct dsv_cgroup_host *h) {
        if (!h)
                return -EINVAL;
        if (h->v2_fd < 0)
                return 0;
        int leaf_fd = -1;
        if (!h->v2_own_is_root) {
                int r = v2_make(h, h->leaf, true, &leaf_fd);
                if (r < 0)
                        return r;
        }
        unsigned want = h->want & h->v2_available & ~h->v1_mounted;
        int r = dsv__cgroup_v2_delegate(h->v2_fd, leaf_fd, want, &h->v2_enabled);
        if (leaf_fd >= 0)
                close(leaf_fd);
        return r;
}

/* ---- report ---------------------------------------------------------------------- */

__attribute__((format(printf, 2, 3))) static void entry_reason(struct dsv_cgroup_report_entry *e,
                                                               const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->reason, sizeof e->reason, fmt, ap);
        va_end(ap);
}

int dsv_cgroup_report_format(const struct dsv_cgroup_report *rep, char *buf, size_t size) {
        if (!rep || (!buf && size))
                return -EINVAL;
        size_t len = 0;
        for (int l = 0; l < DSV_CGROUP_LIMIT_COUNT; l++) {
                const struct dsv_cgroup_report_entry *e = &rep->e[l];
                if (!e->requested)
                        continue;
                int n = snprintf(len < size ? buf + len : NULL, len < size ? size - len : 0,
                                 "%s=%s %s%s%s%s%s%s\n", dsv_cgroup_limit_to_string(l), e->value,
                                 e->applied ? "applied" : "NOT applied", e->file[0] || e->reason[0] ? " (" : "",
                                 e->file, e->file[0] && e->reason[0] ? "; " : "", e->reason,
                                 e->file[0] || e->reason[0] ? ")" : "");
                if (n < 0)
                        return -EIO;
                len += (size_t)n;
        }
        if (size && len < size)
                buf[len] = '\0';
        return (int)len;
}

int dsv_cgroup_report_n_missing(const struct dsv_cgroup_report *rep) {
        if (!rep)
                return -EINVAL;
        int n = 0;
        for (int l = 0; l < DSV_CGROUP_LIMIT_COUNT; l++)
                n += rep->e[l].requested && !rep->e[l].applied;
        return n;
}

/* ---- instances: where a limit goes, writing and reading back -------------------- */

enum where { WHERE_NONE, WHERE_V2, WHERE_V1 };

/* Picks the hierarchy that carries controller bit for inst; on WHERE_NONE says why in e. */
static enum where locate(const struct dsv_cgroup_instance *inst, unsigned bit,
                         struct dsv_cgroup_report_entry *e) {
        const struct dsv_cgroup_host *h = inst->h;
        const char *name = dsv__cgroup_ctrl_name(bit);
        if (inst->v1_created & (1u << bit))
                return WHERE_V1;
        if (inst->v2_fd >= 0 && (inst->v2_controllers & (1u << bit)))
                return WHERE_V2;
        if (inst->v2_fd >= 0 && (h->v2_available & (1u << bit)))
                entry_reason(e, "%s is delegated but not enabled in %s/cgroup.subtree_control", name, h->v2_own);
        else if (inst->v2_fd >= 0)
                entry_reason(e, "%s not delegated (not in %s/cgroup.controllers)", name, h->v2_own);
        else
                entry_reason(e, "%s controller not mounted", name);
        return WHERE_NONE;
}

static int put(struct dsv_cgroup_instance *inst, enum where w, unsigned bit, const char *file,
               const char *value) {
        if (w == WHERE_V2)
                return dsv__cgfs_write(inst->v2_fd, file, value);
        return dsv__cgroup_v1_set(dsv__cgroup_ctrl_name(bit), inst->v1_rel[bit], file, value);
}

static int get(const struct dsv_cgroup_instance *inst, enum where w, unsigned bit, const char *file,
               char *buf, size_t size) {
        return dsv__cgfs_read(w == WHERE_V2 ? inst->v2_fd : inst->v1_fd[bit], file, buf, size);
}

static void note_file(struct dsv_cgroup_report_entry *e, enum where w, unsigned bit, const char *file) {
        if (w == WHERE_V2)
                snprintf(e->file, sizeof e->file, "v2:%s", file);
        else
                snprintf(e->file, sizeof e->file, "v1/%s:%s", dsv__cgroup_ctrl_name(bit), file);
}

/* Writes value and checks that file reads back as expect (NULL: value). */
static bool put_checked(struct dsv_cgroup_instance *inst, enum where w, unsigned bit, const char *file,
                        const char *value, const char *expect, struct dsv_cgroup_report_entry *e) {
        char got[256];
        note_file(e, w, bit, file);
        int r = put(inst, w, bit, file, value);
        if (r < 0) {
                entry_reason(e, "writing %s failed: %s", file, strerror(-r));
                return false;
        }
        r = get(inst, w, bit, file, got, sizeof got);
        if (r < 0) {
                entry_reason(e, "reading %s back failed: %s", file, strerror(-r));
                return false;
        }
        if (strcmp(got, expect ? expect : value) != 0) {
                entry_reason(e, "%s reads back \"%s\", expected \"%s\"", file, got, expect ? expect : value);
                return false;
        }
        return true;
}

static bool cpuset_checked(struct dsv_cgroup_instance *inst, enum where w, const char *file,
                           const char *effective, const char *value, struct dsv_cgroup_report_entry *e) {
        struct dsv__cpulist want, got;
        char buf[1024];
        note_file(e, w, BIT_CPUSET, file);
        int r = dsv__cpulist_parse(value, &want);
        if (r < 0) {
                entry_reason(e, "bad list \"%s\": %s", value, strerror(-r));
                return false;
        }
        r = put(inst, w, BIT_CPUSET, file, value);
        if (r < 0) {
                entry_reason(e, "writing %s failed: %s", file, strerror(-r));
                return false;
        }
        r = get(inst, w, BIT_CPUSET, effective, buf, sizeof buf);
        if (r >= 0)
                r = dsv__cpulist_parse(buf, &got);
        if (r < 0) {
                entry_reason(e, "reading %s failed: %s", effective, strerror(-r));
                return false;
        }
        if (!dsv__cpulist_equal(&want, &got)) {
                entry_reason(e, "%s is \"%s\", requested \"%s\"", effective, buf, value);
                return false;
        }
        return true;
}

static uint64_t round_down(uint64_t v, uint64_t unit) {
        return v / unit * unit;
}

static void apply_cpuset(struct dsv_cgroup_instance *inst, const struct dsv_cgroup_limits *lim,
                         struct dsv_cgroup_report *rep) {
        const struct { enum dsv_cgroup_limit l; const char *value, *file, *eff_v2, *eff_v1; } sets[2] = {
                {DSV_CGROUP_LIMIT_CPUS, lim->cpus, "cpuset.cpus", "cpuset.cpus.effective", "cpuset.effective_cpus"},
                {DSV_CGROUP_LIMIT_MEMS, lim->mems, "cpuset.mems", "cpuset.mems.effective", "cpuset.effective_mems"},
        };
        for (int i = 0; i < 2; i++) {
                struct dsv_cgroup_report_entry *e = &rep->e[sets[i].l];
                if (!sets[i].value)
                        continue;
                enum where w = locate(inst, BIT_CPUSET, e);
                if (w == WHERE_NONE)
                        continue;
                e->applied = cpuset_checked(inst, w, sets[i].file, w == WHERE_V2 ? sets[i].eff_v2 : sets[i].eff_v1,
                                            sets[i].value, e);
                if (e->applied && w == WHERE_V1)
                        entry_reason(e, "cpuset controller is v1 here: verified %s", sets[i].eff_v1);
                else if (e->applied)
                        entry_reason(e, "verified %s", sets[i].eff_v2);
        }
}

static void apply_cpu(struct dsv_cgroup_instance *inst, const struct dsv_cgroup_limits *lim,
                      struct dsv_cgroup_report *rep) {
        char v[64], v2[64];
        struct dsv_cgroup_report_entry *e = &rep->e[DSV_CGROUP_LIMIT_CPU_WEIGHT];
        enum where w;
        if (lim->cpu_weight && (w = locate(inst, BIT_CPU, e)) != WHERE_NONE) {
                if (w == WHERE_V2) {
                        snprintf(v, sizeof v, "%u", lim->cpu_weight);
                        e->applied = put_checked(inst, w, BIT_CPU, "cpu.weight", v, NULL, e);
                } else {
                        /* systemd's mapping: shares = weight * 1024 / 100, in [2, 262144]. */
                        uint64_t shares = (uint64_t)lim->cpu_weight * 1024 / 100;
                        shares = shares < 2 ? 2 : shares > 262144 ? 262144 : shares;
                        snprintf(v, sizeof v, "%llu", (unsigned long long)shares);
                        e->applied = put_checked(inst, w, BIT_CPU, "cpu.shares", v, NULL, e);
                        if (e->applied)
                                entry_reason(e, "cpu controller is v1 here: cpu.shares=%s", v);
                }
        }

        e = &rep->e[DSV_CGROUP_LIMIT_CPU_MAX];
        uint64_t period = lim->cpu_max_period_us ? lim->cpu_max_period_us : 100000;
        if (lim->cpu_max_quota_us && (w = locate(inst, BIT_CPU, e)) != WHERE_NONE) {
                if (w == WHERE_V2) {
                        snprintf(v, sizeof v, "%llu %llu", (unsigned long long)lim->cpu_max_quota_us,
                                 (unsigned long long)period);
                        e->applied = put_checked(inst, w, BIT_CPU, "cpu.max", v, NULL, e);
                } else {
                        snprintf(v, sizeof v, "%llu", (unsigned long long)period);
                        snprintf(v2, sizeof v2, "%llu", (unsigned long long)lim->cpu_max_quota_us);
                        e->applied = put_checked(inst, w, BIT_CPU, "cpu.cfs_period_us", v, NULL, e) &&
                                     put_checked(inst, w, BIT_CPU, "cpu.cfs_quota_us", v2, NULL, e);
                        if (e->applied)
                                entry_reason(e, "cpu controller is v1 here: cpu.cfs_period_us=%s", v);
                }
        }

        e = &rep->e[DSV_CGROUP_LIMIT_CPU_RT_RUNTIME];
        if (lim->cpu_rt_runtime_us && (w = locate(inst, BIT_CPU, e)) != WHERE_NONE) {
                if (w == WHERE_V2) {
                        entry_reason(e, "cgroup v2 has no RT bandwidth control (cpu.rt_runtime_us is v1-only)");
                } else {
                        snprintf(v, sizeof v, "%llu", (unsigned long long)lim->cpu_rt_runtime_us);
                        e->applied = put_checked(inst, w, BIT_CPU, "cpu.rt_runtime_us", v, NULL, e);
                }
        }
}

static void apply_memory(struct dsv_cgroup_instance *inst, const struct dsv_cgroup_limits *lim,
                         struct dsv_cgroup_report *rep) {
        char v[64], expect[64];
        uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
        const struct { enum dsv_cgroup_limit l; uint64_t bytes; const char *v2, *v1; } limits[2] = {
                {DSV_CGROUP_LIMIT_MEMORY_HIGH, lim->memory_high_bytes, "memory.high", "memory.soft_limit_in_bytes"},
                {DSV_CGROUP_LIMIT_MEMORY_MAX, lim->memory_max_bytes, "memory.max", "memory.limit_in_bytes"},
        };
        enum where w;
        for (int i = 0; i < 2; i++) {
                struct dsv_cgroup_report_entry *e = &rep->e[limits[i].l];
                if (!limits[i].bytes || (w = locate(inst, BIT_MEMORY, e)) == WHERE_NONE)
                        continue;
                snprintf(v, sizeof v, "%llu", (unsigned long long)limits[i].bytes);
                /* The kernel keeps whole pages. */
                snprintf(expect, sizeof expect, "%llu", (unsigned long long)round_down(limits[i].bytes, page));
                const char *file = w == WHERE_V2 ? limits[i].v2 : limits[i].v1;
                e->applied = put_checked(inst, w, BIT_MEMORY, file, v, expect, e);
                if (e->applied && w == WHERE_V1)
                        entry_reason(e, "memory controller is v1 here: %s used%s", file,
                                     i == 0 ? " (a reclaim target under pressure, not throttling)" : "");
        }

        struct dsv_cgroup_report_entry *e = &rep->e[DSV_CGROUP_LIMIT_MEMORY_OOM_GROUP];
        if (lim->memory_oom_group && (w = locate(inst, BIT_MEMORY, e)) != WHERE_NONE) {
                if (w == WHERE_V2)
                        e->applied = put_checked(inst, w, BIT_MEMORY, "memory.oom.group", "1", NULL, e);
                else
                        entry_reason(e, "memory controller is v1 here: no memory.oom.group, "
                                        "the OOM killer picks single tasks");
        }
}

static void apply_hugetlb(struct dsv_cgroup_instance *inst, const struct dsv_cgroup_limits *lim,
                          struct dsv_cgroup_report *rep) {
        char v[64], expect[64];
        struct dsv_cgroup_report_entry *e = &rep->e[DSV_CGROUP_LIMIT_HUGETLB_2MB_MAX];
        enum where w;
        if (!lim->hugetlb_2mb_max_bytes || (w = locate(inst, BIT_HUGETLB, e)) == WHERE_NONE)
                return;
        snprintf(v, sizeof v, "%llu", (unsigned long long)lim->hugetlb_2mb_max_bytes);
        snprintf(expect, sizeof expect, "%llu",
                 (unsigned long long)round_down(lim->hugetlb_2mb_max_bytes, HUGEPAGE_2MB));
        const char *file = w == WHERE_V2 ? "hugetlb.2MB.max" : "hugetlb.2MB.limit_in_bytes";
        e->applied = put_checked(inst, w, BIT_HUGETLB, file, v, expect, e);
        if (e->applied && w == WHERE_V1)
                entry_reason(e, "hugetlb controller is v1 here: %s used", file);
}

static void report_init(const struct dsv_cgroup_limits *lim, struct dsv_cgroup_report *rep) {
        memset(rep, 0, sizeof *rep);
        struct dsv_cgroup_report_entry *e = rep->e;
        uint64_t period = lim->cpu_max_period_us ? lim->cpu_max_period_us : 100000;
#define REQ(l, cond, ...)                                                                  \
        do {                                                                               \
                if (cond) {                                                                \
                        e[l].requested = true;                                             \
                        snprintf(e[l].value, sizeof e[l].value, __VA_ARGS__);              \
                }                                                                          \
        } while (0)
        REQ(DSV_CGROUP_LIMIT_CPUS, lim->cpus, "%s", lim->cpus);
        REQ(DSV_CGROUP_LIMIT_MEMS, lim->mems, "%s", lim->mems);
        REQ(DSV_CGROUP_LIMIT_CPU_WEIGHT, lim->cpu_weight, "%u", lim->cpu_weight);
        REQ(DSV_CGROUP_LIMIT_CPU_MAX, lim->cpu_max_quota_us, "%llu %llu",
            (unsigned long long)lim->cpu_max_quota_us, (unsigned long long)period);
        REQ(DSV_CGROUP_LIMIT_CPU_RT_RUNTIME, lim->cpu_rt_runtime_us, "%llu",
            (unsigned long long)lim->cpu_rt_runtime_us);
        REQ(DSV_CGROUP_LIMIT_MEMORY_HIGH, lim->memory_high_bytes, "%llu",
            (unsigned long long)lim->memory_high_bytes);
        REQ(DSV_CGROUP_LIMIT_MEMORY_MAX, lim->memory_max_bytes, "%llu",
            (unsigned long long)lim->memory_max_bytes);
        REQ(DSV_CGROUP_LIMIT_MEMORY_OOM_GROUP, lim->memory_oom_group, "1");
        REQ(DSV_CGROUP_LIMIT_HUGETLB_2MB_MAX, lim->hugetlb_2mb_max_bytes, "%llu",
            (unsigned long long)lim->hugetlb_2mb_max_bytes);
#undef REQ
}

/* ---- instances: creation and teardown ------------------------------------------- */

void dsv_cgroup_instance_free(struct dsv_cgroup_instance *inst) {
        if (!inst)
                return;
        if (inst->v2_fd >= 0)
                close(inst->v2_fd);
        for (unsigned b = 0; b < N_CTRL; b++) {
                if (inst->v1_fd[b] >= 0)
                        close(inst->v1_fd[b]);
                if (inst->v1_procs_fd[b] >= 0)
                        close(inst->v1_procs_fd[b]);
        }
        free(inst);
}

/* Removes whatever groups inst holds (they must be empty), closing their fds. */
static int instance_remove(struct dsv_cgroup_instance *inst) {
        int ret = 0, r;
        for (unsigned b = 0; b < N_CTRL; b++) {
                if (!(inst->v1_created & (1u << b)))
                        continue;
                if (inst->v1_procs_fd[b] >= 0)
                        close(inst->v1_procs_fd[b]);
                if (inst->v1_fd[b] >= 0)
                        close(inst->v1_fd[b]);
                inst->v1_procs_fd[b] = inst->v1_fd[b] = -1;
                r = dsv__cgroup_v1_delete(dsv__cgroup_ctrl_name(b), inst->v1_rel[b]);
                if (r < 0 && r != -ENOENT && ret == 0)
                        ret = r;
                if (r >= 0 || r == -ENOENT)
                        inst->v1_created &= ~(1u << b);
        }
        if (inst->v2_fd >= 0) {
                close(inst->v2_fd);
                inst->v2_fd = -1;
                r = v2_remove(inst->h, inst->name);
                if (r < 0 && ret == 0)
                        ret = r;
        }
        return ret;
}

static int instance_make_v2(struct dsv_cgroup_instance *inst) {
        int r = v2_make(inst->h, inst->name, false, &inst->v2_fd);
        if (r < 0)
                return r;
        return read_ctrl_bits(inst->v2_fd, "cgroup.controllers", &inst->v2_controllers);
}

static int instance_make_v1(struct dsv_cgroup_instance *inst, unsigned bit) {
        struct dsv_cgroup_host *h = inst->h;
        const char *ctrl = dsv__cgroup_ctrl_name(bit);
        /* libcgroup creates with mkdir -p, so an existing group would be reused silently. */
        if (faccessat(h->v1_fd[bit], inst->name, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
                return -EEXIST;
        int r = join_path(inst->v1_rel[bit], sizeof inst->v1_rel[bit], h->v1_rel[bit], inst->name);
        if (r < 0)
                return r;
        r = dsv__cgroup_v1_create(ctrl, inst->v1_rel[bit]);
        if (r < 0)
                return r;
        inst->v1_created |= 1u << bit;
        r = dsv__cgfs_open_dir(h->v1_fd[bit], inst->name, &inst->v1_fd[bit]);
        if (r < 0)
                return r;
        int fd = openat(inst->v1_fd[bit], "cgroup.procs", O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        inst->v1_procs_fd[bit] = fd;
        if (bit != BIT_CPUSET)
                return 0;
        /* A v1 cpuset group starts with empty cpus and mems and admits no task until
         * both are set; start from the parent's, the requested ones are written next. */
        static const char *const files[2] = {"cpuset.cpus", "cpuset.mems"};
        for (int i = 0; i < 2; i++) {
                char buf[1024];
                r = dsv__cgfs_read(h->v1_fd[bit], files[i], buf, sizeof buf);
                if (r < 0)
                        return r;
                r = dsv__cgroup_v1_set(ctrl, inst->v1_rel[bit], files[i], buf);
                if (r < 0)
                        return r;
        }
        return 0;
}

int dsv_cgroup_instance_new(struct dsv_cgroup_host *h, const char *name,
                            const struct dsv_cgroup_limits *lim,
                            struct dsv_cgroup_report *ret_report,
                            struct dsv_cgroup_instance **ret) {
        if (!h || !lim || !ret_report || !ret)
                return -EINVAL;
        int r = dsv__cgfs_name_check(name);
        if (r < 0)
                return r;
        if (lim->cpu_weight > 10000)
                return -EINVAL;
        struct dsv_cgroup_instance *inst = calloc(1, sizeof *inst);
        if (!inst)
                return -ENOMEM;
        inst->h = h;
        snprintf(inst->name, sizeof inst->name, "%s", name);
        inst->v2_fd = -1;
        for (unsigned b = 0; b < N_CTRL; b++)
                inst->v1_fd[b] = inst->v1_procs_fd[b] = -1;

        if (h->v2_fd >= 0) {
                r = instance_make_v2(inst);
                if (r < 0)
                        goto fail;
        }
        for (unsigned b = 0; b < N_CTRL; b++) {
                if (!(h->v1_mounted & (1u << b)))
                        continue;
                r = instance_make_v1(inst, b);
                if (r < 0)
                        goto fail;
        }

        struct dsv_cgroup_report rep;
        report_init(lim, &rep);
        apply_cpuset(inst, lim, &rep); /* before any task can join: pages don't follow */
        apply_cpu(inst, lim, &rep);
        apply_memory(inst, lim, &rep);
        apply_hugetlb(inst, lim, &rep);
        *ret_report = rep;
        *ret = inst;
        return 0;
fail:
        instance_remove(inst);
        dsv_cgroup_instance_free(inst);
        return r;
}

int dsv_cgroup_instance_v2_fd(const struct dsv_cgroup_instance *inst) {
        if (!inst)
                return -EINVAL;
        return inst->v2_fd >= 0 ? inst->v2_fd : -ENOENT;
}

/* ---- spawning ---------------------------------------------------------------------- */

static void child_fail(int err_fd, int e) {
        ssize_t n = write(err_fd, &e, sizeof e);
        (void)n;
        _exit(127);
}

/* In the child: async-signal-safe calls only (the parent may have threads). Writing
 * "0" to cgroup.procs moves the writer itself (cgroup_procs_write_start: pid 0 is
 * current), on v1 and v2 alike. */
static void child_exec(int err_fd, int v2_join_fd, const int *v1_fds, size_t n_v1, const char *path,
                       char *const argv[], char *const envp[]) {
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        for (size_t i = 0; i < n_v1; i++)
                if (write(v1_fds[i], "0", 1) != 1)
                        child_fail(err_fd, errno);
        if (v2_join_fd >= 0) {
                int fd = openat(v2_join_fd, "cgroup.procs", O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
                if (fd < 0 || write(fd, "0", 1) != 1)
                        child_fail(err_fd, errno);
        }
        execve(path, argv, envp ? envp : environ);
        child_fail(err_fd, errno);
}

int dsv_cgroup_spawn(int v2_fd, const int *v1_procs_fds, size_t n_v1, const char *path,
                     char *const argv[], char *const envp[], pid_t *ret_pid, int *ret_pidfd) {
        if (!path || !argv || !argv[0] || !ret_pid || !ret_pidfd || (n_v1 && !v1_procs_fds))
                return -EINVAL;
        int pipefd[2];
        if (pipe2(pipefd, O_CLOEXEC) < 0)
                return -errno;

        int pidfd = -1;
        struct clone_args args;
        memset(&args, 0, sizeof args);
        args.flags = CLONE_PIDFD | (v2_fd >= 0 ? CLONE_INTO_CGROUP : 0);
        args.pidfd = (uint64_t)(uintptr_t)&pidfd;
        args.exit_signal = SIGCHLD;
        args.cgroup = v2_fd >= 0 ? (uint64_t)v2_fd : 0;
        long pid = syscall(SYS_clone3, &args, sizeof args);
        int v2_join = -1;
        if (pid < 0 && (errno == ENOSYS || errno == E2BIG)) {
                /* Kernels before 5.7: fork, then join before exec. */
                v2_join = v2_fd;
                pid = fork();
        }
        if (pid < 0) {
                int r = -errno;
                close(pipefd[0]);
                close(pipefd[1]);
                return r;
        }
        if (pid == 0)
                child_exec(pipefd[1], v2_join, v1_procs_fds, n_v1, path, argv, envp);

        close(pipefd[1]);
        int child_errno = 0;
        ssize_t n;
        do
                n = read(pipefd[0], &child_errno, sizeof child_errno);
        while (n < 0 && errno == EINTR);
        close(pipefd[0]);
        if (n == (ssize_t)sizeof child_errno) {
                waitpid((pid_t)pid, NULL, 0);
                if (pidfd >= 0)
                        close(pidfd);
                return child_errno > 0 ? -child_errno : -EIO;
        }
        if (pidfd < 0) {
                pidfd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
                if (pidfd < 0) {
                        int r = -errno;
                        kill((pid_t)pid, SIGKILL);
                        waitpid((pid_t)pid, NULL, 0);
                        return r;
                }
        }
        *ret_pid = (pid_t)pid;
        *ret_pidfd = pidfd;
        return 0;
}

int dsv_cgroup_instance_spawn(const struct dsv_cgroup_instance *inst, const char *path,
                              char *const argv[], char *const envp[], pid_t *ret_pid,
                              int *ret_pidfd) {
        if (!inst)
                return -EINVAL;
        int fds[N_CTRL];
        size_t n = 0;
        for (unsigned b = 0; b < N_CTRL; b++)
                if (inst->v1_procs_fd[b] >= 0)
                        fds[n++] = inst->v1_procs_fd[b];
        return dsv_cgroup_spawn(inst->v2_fd, fds, n, path, argv, envp, ret_pid, ret_pidfd);
}

/* ---- stopping ---------------------------------------------------------------------- */

static long long now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* SIGKILLs every pid listed in dirfd's cgroup.procs. Returns how many were listed. */
static int kill_listed(int dirfd) {
        pid_t pids[1024];
        int n = dsv__cgfs_read_pids(dirfd, pids, 1024);
        if (n < 0)
                return n;
        for (int i = 0; i < n; i++)
                kill(pids[i], SIGKILL);
        return n;
}

/* 1 if cgroup.events says "populated 1", 0 for "populated 0". */
static int v2_populated(int dirfd) {
        char buf[256];
        int r = dsv__cgfs_read(dirfd, "cgroup.events", buf, sizeof buf);
        if (r < 0)
                return r;
        for (char *p = buf; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
                if (strncmp(p, "populated ", 10) == 0)
                        return p[10] == '1';
        return -EBADMSG;
}

int dsv_cgroup_instance_stop(struct dsv_cgroup_instance *inst, int timeout_ms) {
        if (!inst || timeout_ms < 0)
                return -EINVAL;
        long long deadline = now_ms() + timeout_ms;
        bool has_kill = false;
        int r;
        if (inst->v2_fd >= 0) {
                r = dsv__cgfs_write(inst->v2_fd, "cgroup.kill", "1");
                if (r < 0 && r != -ENOENT)
                        return r;
                has_kill = r == 0;
        }
        for (;;) {
                bool busy = false;
                if (inst->v2_fd >= 0) {
                        r = v2_populated(inst->v2_fd);
                        if (r < 0)
                                return r;
                        if (r > 0) {
                                busy = true;
                                if (!has_kill && (r = kill_listed(inst->v2_fd)) < 0)
                                        return r;
                        }
                }
                /* v1 has no cgroup.kill and no populated flag: kill what is listed until
                 * nothing is (a task forked meanwhile shows up in the next round). A pid
                 * read from cgroup.procs can be recycled before kill() if its task exits
                 * and is reaped by another parent in that window; cgroup.kill (v2) has
                 * no such window, which is why it goes first. */
                for (unsigned b = 0; b < N_CTRL; b++) {
                        if (inst->v1_fd[b] < 0)
                                continue;
                        r = kill_listed(inst->v1_fd[b]);
                        if (r < 0)
                                return r;
                        busy |= r > 0;
                }
                if (!busy)
                        break;
                long long left = deadline - now_ms();
                if (left <= 0)
                        return -ETIMEDOUT;
                /* cgroup.events signals POLLPRI on change; elsewhere (v1, fake trees)
                 * this is a short sleep. */
                struct pollfd pfd = {.fd = -1, .events = POLLPRI};
                int efd = inst->v2_fd >= 0 ? openat(inst->v2_fd, "cgroup.events", O_RDONLY | O_CLOEXEC) : -1;
                pfd.fd = efd;
                if (efd >= 0) {
                        char tmp[64];
                        ssize_t nr = read(efd, tmp, sizeof tmp); /* arm the notification */
                        (void)nr;
                }
                poll(efd >= 0 ? &pfd : NULL, efd >= 0 ? 1 : 0, left < 10 ? (int)left : 10);
                if (efd >= 0)
                        close(efd);
        }
        return instance_remove(inst);
}
