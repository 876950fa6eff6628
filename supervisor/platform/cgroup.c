/* cgroup.c — worker cgroups: the host (own groups per hierarchy), instances with their
 * limit report and description (name scheme, paths, cpu.stat), spawning into a group,
 * and teardown. The mode is cgroup_mode.c's.
 * Contracts are in dsv_platform.h; the layering of the cgroup files is in
 * cgroup-internal.h. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/sched.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
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
#define MAX_LEVELS DSV_CGROUP_PARENT_MAX_LEVELS
#define DSV__STR2(x) #x
#define DSV__STR(x) DSV__STR2(x)

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
        char parent_rel[PATH_BUF]; /* cfg->parent, "" for none */
        char v2_own[PATH_BUF];
        unsigned v2_available, v2_enabled;

        unsigned v1_mounted;
        int v1_fd[N_CTRL];          /* own v1 group per controller, -1 */
        char v1_rel[N_CTRL][PATH_BUF]; /* own group relative to its mount (libcgroup names) */
        char v1_own[N_CTRL][PATH_BUF];

        /* The parent subtree (cfg->parent) below own, one level per component; the
         * instance groups go into its last level. What dsvisor created or enabled on
         * the way is recorded, so that dsv_cgroup_host_restore() undoes exactly that. */
        int n_levels;
        char level[MAX_LEVELS][NAME_MAX + 1];
        uint64_t parent_rt_runtime_us;
        bool parent_made;
        int v2_lfd[MAX_LEVELS];
        unsigned v2_lcreated;           /* bit i: level i was made by us */
        unsigned v2_lnewly[MAX_LEVELS]; /* controllers we enabled in level i's subtree_control */
        char v2_parent[PATH_BUF];
        int v1_lfd[N_CTRL][MAX_LEVELS];
        unsigned v1_lcreated[N_CTRL];
        char v1_prel[N_CTRL][PATH_BUF];
        char v1_parent[N_CTRL][PATH_BUF];

        /* Delegation: what to undo in own. */
        bool leaf_created, moved_self;
        unsigned v2_own_newly;
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

static int split_parent(const char *rel, struct dsv_cgroup_host *h); /* below, with the parent code */

/* ---- names ----------------------------------------------------------------------- */

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

/* ---- own groups --------------------------------------------------------------------- */

static int read_ctrl_bits(int dirfd, const char *file, unsigned *ret) {
        char buf[PATH_BUF];
        int r = dsv__cgfs_read(dirfd, file, buf, sizeof buf);
        if (r < 0)
                return r;
        *ret = dsv__cgroup_ctrl_bits(buf);
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
        r = dsv__cgroup_v2_mount(root, h->mode, mount, sizeof mount);
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
        for (int i = 0; i < MAX_LEVELS; i++) {
                if (h->v2_lfd[i] >= 0)
                        close(h->v2_lfd[i]);
                for (unsigned b = 0; b < N_CTRL; b++)
                        if (h->v1_lfd[b][i] >= 0)
                                close(h->v1_lfd[b][i]);
        }
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
        for (int i = 0; i < MAX_LEVELS; i++) {
                h->v2_lfd[i] = -1;
                for (unsigned b = 0; b < N_CTRL; b++)
                        h->v1_lfd[b][i] = -1;
        }
        r = split_parent(cfg->parent, h);
        if (r < 0) {
                free(h);
                return r;
        }
        h->parent_rt_runtime_us = cfg->parent_rt_runtime_us;
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
        /* Where the instance groups go: own, or own/<parent>. */
        if (h->v2_fd >= 0 && (r = join_path(h->v2_parent, sizeof h->v2_parent, h->v2_own, h->parent_rel)) < 0)
                goto fail;
        for (unsigned b = 0; b < N_CTRL; b++) {
                if (!(h->v1_mounted & (1u << b)))
                        continue;
                if ((r = join_path(h->v1_parent[b], sizeof h->v1_parent[b], h->v1_own[b], h->parent_rel)) < 0 ||
                    (r = join_path(h->v1_prel[b], sizeof h->v1_prel[b], h->v1_rel[b], h->parent_rel)) < 0)
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
                if (h->v1_mounted & (1u << b)) {
                        snprintf(ret->v1_own[b], sizeof ret->v1_own[b], "%s", h->v1_own[b]);
                        snprintf(ret->v1_parent[b], sizeof ret->v1_parent[b], "%s", h->v1_parent[b]);
                }
        if (h->v2_fd >= 0)
                snprintf(ret->v2_parent, sizeof ret->v2_parent, "%s", h->v2_parent);
        return 0;
}

/* mkdir of a v2 group below dirfd (own or a parent level), then the fake-tree hook;
 * opens it. *ret_made says whether it was made here (NULL: must be). */
static int v2_make(struct dsv_cgroup_host *h, int dirfd, const char *name, bool may_exist, int *ret_fd,
                   bool *ret_made) {
        int r = dsv__cgfs_mkdir(dirfd, name);
        bool made = r == 0;
        if (r < 0 && !(r == -EEXIST && may_exist))
                return r;
        if (made && h->on_mkdir) {
                r = h->on_mkdir(dirfd, name, h->fake_user);
                if (r < 0) {
                        dsv__cgfs_rmdir(dirfd, name);
                        return r;
                }
        }
        r = dsv__cgfs_open_dir(dirfd, name, ret_fd);
        if (r < 0 && made)
                dsv__cgfs_rmdir(dirfd, name);
        if (r < 0)
                return r;
        if (made)
                dsv__cgroup_v2_mark_made(*ret_fd);
        else /* a group a killed supervisor made is ours to remove now */
                made = dsv__cgroup_v2_adopt_made(*ret_fd);
        if (ret_made)
                *ret_made = made;
        return 0;
}

/* rmdir of a v2 group below dirfd. On a fake tree, the hook deletes the group's files
 * only once the group could go (the kernel refuses a populated group or one with
 * children; a fake tree has neither check, so the hook is asked first). */
static int v2_remove(struct dsv_cgroup_host *h, int dirfd, const char *name) {
        if (h->on_rmdir) {
                int r = h->on_rmdir(dirfd, name, h->fake_user);
                if (r < 0)
                        return r;
        }
        return dsv__cgfs_rmdir(dirfd, name);
}

/* The directory the instance groups go into: the last parent level, or own. */
static int v2_pdir(const struct dsv_cgroup_host *h) {
        return h->parent_made && h->n_levels > 0 ? h->v2_lfd[h->n_levels - 1] : h->v2_fd;
}

static int v1_pdir(const struct dsv_cgroup_host *h, unsigned bit) {
        return h->parent_made && h->n_levels > 0 ? h->v1_lfd[bit][h->n_levels - 1] : h->v1_fd[bit];
}

int dsv_cgroup_parent_check(const char *rel, const char **ret_why) {
        const char *why = NULL;
        int levels = 0;
        if (!rel || !rel[0])
                return 0;
        if (rel[0] == '/')
                why = "is absolute; give a path relative to dsvisor's own cgroup";
        else if (strlen(rel) >= 256)
                why = "is longer than 255 characters";
        for (const char *p = rel; !why;) {
                size_t n = strcspn(p, "/");
                if (n == 0)
                        why = "has an empty component ('//' or a trailing '/')";
                else if ((n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
                        why = "has a '.' or '..' component; it must stay below dsvisor's own cgroup";
                else if (n >= NAME_MAX)
                        why = "has a component longer than NAME_MAX";
                else if (++levels > MAX_LEVELS)
                        why = "has more than " DSV__STR(DSV_CGROUP_PARENT_MAX_LEVELS) " levels";
                if (why || !p[n])
                        break;
                p += n + 1;
        }
        if (why && ret_why)
                *ret_why = why;
        return why ? -EINVAL : 0;
}

static int split_parent(const char *rel, struct dsv_cgroup_host *h) {
        int r = dsv_cgroup_parent_check(rel, NULL);
        if (r < 0)
                return r;
        h->n_levels = 0;
        h->parent_rel[0] = '\0';
        if (!rel || !rel[0])
                return 0;
        snprintf(h->parent_rel, sizeof h->parent_rel, "%s", rel);
        for (const char *p = rel;;) {
                size_t n = strcspn(p, "/");
                memcpy(h->level[h->n_levels], p, n);
                h->level[h->n_levels++][n] = '\0';
                if (!p[n])
                        return 0;
                p += n + 1;
        }
}

/* A new v1 cpuset group has empty cpus and mems and admits no task (and no child with
 * cpus) until both are set: start from the parent's. */
static int v1_cpuset_inherit(int parent_fd, const char *rel) {
        static const char *const files[2] = {"cpuset.cpus", "cpuset.mems"};
        for (int i = 0; i < 2; i++) {
                char buf[1024];
                int r = dsv__cgfs_read(parent_fd, files[i], buf, sizeof buf);
                if (r < 0)
                        return r;
                r = dsv__cgroup_v1_set("cpuset", rel, files[i], buf);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* "<base>/<level 0>/.../<level i>" */
static int level_rel(const struct dsv_cgroup_host *h, const char *base, int i, char *buf, size_t size) {
        int r = snprintf(buf, size, "%s", base) >= (int)size ? -ENAMETOOLONG : 0;
        for (int k = 0; r == 0 && k <= i; k++) {
                char tmp[PATH_BUF];
                r = join_path(tmp, sizeof tmp, buf, h->level[k]);
                if (r == 0)
                        r = snprintf(buf, size, "%s", tmp) >= (int)size ? -ENAMETOOLONG : 0;
        }
        return r;
}

/* Creates (or opens) the parent levels in every hierarchy, enabling in each v2 level
 * what own enables, so that the instance groups below get the controllers. Levels that
 * exist are used as they are; a v2 level with processes in it refuses controllers
 * (-EBUSY, no internal processes). */
static int ensure_parent(struct dsv_cgroup_host *h) {
        if (h->parent_made || h->n_levels == 0)
                return 0;
        int r;
        if (h->v2_fd >= 0) {
                unsigned want = h->want & h->v2_available & ~h->v1_mounted;
                int dir = h->v2_fd;
                for (int i = 0; i < h->n_levels; i++) {
                        bool made = false;
                        if (h->v2_lfd[i] >= 0) {
                                close(h->v2_lfd[i]);
                                h->v2_lfd[i] = -1;
                        }
                        r = v2_make(h, dir, h->level[i], true, &h->v2_lfd[i], &made);
                        if (r < 0)
                                return r;
                        if (made)
                                h->v2_lcreated |= 1u << i;
                        unsigned enabled, newly = 0;
                        r = dsv__cgroup_v2_enable(h->v2_lfd[i], want, &enabled, &newly);
                        h->v2_lnewly[i] |= newly;
                        if (r < 0)
                                return r;
                        dir = h->v2_lfd[i];
                }
        }
        for (unsigned b = 0; b < N_CTRL; b++) {
                if (!(h->v1_mounted & (1u << b)))
                        continue;
                const char *ctrl = dsv__cgroup_ctrl_name(b);
                int dir = h->v1_fd[b];
                for (int i = 0; i < h->n_levels; i++) {
                        char rel[PATH_BUF];
                        if ((r = level_rel(h, h->v1_rel[b], i, rel, sizeof rel)) < 0)
                                return r;
                        bool made = false;
                        if (faccessat(dir, h->level[i], F_OK, AT_SYMLINK_NOFOLLOW) < 0) {
                                if (errno != ENOENT)
                                        return -errno;
                                if ((r = dsv__cgroup_v1_create(ctrl, rel)) < 0)
                                        return r;
                                h->v1_lcreated[b] |= 1u << i;
                                made = true;
                        }
                        if (h->v1_lfd[b][i] >= 0) {
                                close(h->v1_lfd[b][i]);
                                h->v1_lfd[b][i] = -1;
                        }
                        if ((r = dsv__cgfs_open_dir(dir, h->level[i], &h->v1_lfd[b][i])) < 0)
                                return r;
                        if (made && b == BIT_CPUSET && (r = v1_cpuset_inherit(dir, rel)) < 0)
                                return r;
                        /* RT group scheduling: a new cpu group has no RT runtime, and a
                         * child can have no more than its parent. A refusal shows up in
                         * the instance's cpu.rt_runtime_us report. */
                        if (made && b == BIT_CPU && h->parent_rt_runtime_us) {
                                char v[32];
                                snprintf(v, sizeof v, "%llu", (unsigned long long)h->parent_rt_runtime_us);
                                dsv__cgroup_v1_set(ctrl, rel, "cpu.rt_runtime_us", v);
                        }
                        dir = h->v1_lfd[b][i];
                }
        }
        h->parent_made = true;
        return 0;
}

/* Child groups of dirfd other than skip (NULL: none). */
static int count_children(int dirfd, const char *skip) {
        int fd = fcntl(dirfd, F_DUPFD_CLOEXEC, 3);
        if (fd < 0)
                return -errno;
        DIR *d = fdopendir(fd);
        if (!d) {
                int r = -errno;
                close(fd);
                return r;
        }
        rewinddir(d);
        int n = 0;
        struct dirent *de;
        while ((de = readdir(d))) {
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                if (skip && strcmp(de->d_name, skip) == 0)
                        continue;
                struct stat st;
                if (fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode))
                        n++;
        }
        closedir(d);
        return n;
}

__attribute__((format(printf, 3, 4))) static void note(char *why, size_t size, const char *fmt, ...) {
        if (!why || !size)
                return;
        size_t len = strlen(why);
        if (len + 3 >= size)
                return;
        if (len)
                len += (size_t)snprintf(why + len, size - len, "; ");
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why + len, size - len, fmt, ap);
        va_end(ap);
}

/* Disables the controllers we enabled in dirfd's subtree_control when no child group
 * other than skip is left that might use them. */
static int v2_undo_enable(int dirfd, const char *path, unsigned *newly, const char *skip, char *why, size_t size) {
        if (!*newly)
                return 0;
        char names[64];
        dsv__cgroup_ctrl_list(*newly, names, sizeof names);
        int n = count_children(dirfd, skip);
        if (n != 0) {
                note(why, size, "left '%s' enabled in %s/cgroup.subtree_control: %d other group%s below it may use it",
                     names, path, n, n == 1 ? "" : "s");
                return n < 0 ? n : -EBUSY;
        }
        int r = dsv__cgroup_v2_disable(dirfd, *newly);
        if (r < 0) {
                note(why, size, "failed to disable '%s' in %s/cgroup.subtree_control: %s", names, path, strerror(-r));
                return r;
        }
        *newly = 0;
        return 0;
}

int dsv_cgroup_host_restore(struct dsv_cgroup_host *h, char *why, size_t why_size) {
        if (!h)
                return -EINVAL;
        if (why && why_size)
                why[0] = '\0';
        int ret = 0, r;
        for (unsigned b = 0; b < N_CTRL; b++) {
                for (int i = h->n_levels - 1; i >= 0; i--) {
                        if (!(h->v1_lcreated[b] & (1u << i)))
                                continue;
                        char rel[PATH_BUF];
                        r = level_rel(h, h->v1_rel[b], i, rel, sizeof rel);
                        if (r == 0)
                                r = dsv__cgroup_v1_delete(dsv__cgroup_ctrl_name(b), rel);
                        if (r < 0 && r != -ENOENT) {
                                note(why, why_size, "v1 %s group '%s' not removed: %s", dsv__cgroup_ctrl_name(b), rel,
                                     strerror(-r));
                                ret = ret ?: r;
                                continue;
                        }
                        h->v1_lcreated[b] &= ~(1u << i);
                        if (h->v1_lfd[b][i] >= 0)
                                close(h->v1_lfd[b][i]);
                        h->v1_lfd[b][i] = -1;
                }
        }
        for (int i = h->n_levels - 1; i >= 0; i--) {
                if (h->v2_lfd[i] < 0)
                        continue;
                char path[PATH_BUF];
                level_rel(h, h->v2_own, i, path, sizeof path);
                r = v2_undo_enable(h->v2_lfd[i], path, &h->v2_lnewly[i], NULL, why, why_size);
                ret = ret ?: r;
                if (!(h->v2_lcreated & (1u << i)))
                        continue;
                int dir = i > 0 ? h->v2_lfd[i - 1] : h->v2_fd;
                r = count_children(h->v2_lfd[i], NULL) == 0 ? v2_remove(h, dir, h->level[i]) : -EBUSY;
                if (r < 0) {
                        note(why, why_size, "v2 group '%s' not removed: %s", path, strerror(-r));
                        ret = ret ?: r;
                        continue;
                }
                h->v2_lcreated &= ~(1u << i);
                close(h->v2_lfd[i]);
                h->v2_lfd[i] = -1;
        }
        h->parent_made = false;
        if (h->v2_fd >= 0) {
                r = v2_undo_enable(h->v2_fd, h->v2_own, &h->v2_own_newly, h->moved_self ? h->leaf : NULL, why,
                                   why_size);
                ret = ret ?: r;
                /* Back into own, which takes processes again only once its
                 * subtree_control has no domain controller left (no internal processes). */
                if (h->moved_self) {
                        r = dsv__cgroup_v2_move_self(h->v2_fd);
                        if (r < 0) {
                                note(why, why_size, "stays in %s/%s: %s", h->v2_own, h->leaf, strerror(-r));
                                ret = ret ?: r;
                        } else {
                                h->moved_self = false;
                        }
                }
                if (!h->moved_self && h->leaf_created) {
                        r = v2_remove(h, h->v2_fd, h->leaf);
                        if (r < 0) {
                                note(why, why_size, "v2 group '%s/%s' not removed: %s", h->v2_own, h->leaf, strerror(-r));
                                ret = ret ?: r;
                        } else {
                                h->leaf_created = false;
                        }
                }
        }
        return ret;
}

int dsv_cgroup_host_delegate(struct dsv_cgroup_host *h) {
        if (!h)
                return -EINVAL;
        if (h->v2_fd >= 0) {
                int r = 0;
                if (!h->v2_own_is_root && !h->moved_self) {
                        int leaf_fd = -1;
                        bool made = false;
                        r = v2_make(h, h->v2_fd, h->leaf, true, &leaf_fd, &made);
                        if (r < 0)
                                return r;
                        h->leaf_created |= made;
                        r = dsv__cgroup_v2_move_self(leaf_fd);
                        close(leaf_fd);
                        if (r < 0)
                                return r;
                        h->moved_self = true;
                }
                unsigned want = h->want & h->v2_available & ~h->v1_mounted, newly = 0;
                r = dsv__cgroup_v2_enable(h->v2_fd, want, &h->v2_enabled, &newly);
                h->v2_own_newly |= newly;
                if (r < 0)
                        return r;
        }
        return ensure_parent(h);
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
                entry_reason(e, "%s is delegated but not enabled in %s/cgroup.subtree_control", name, h->v2_parent);
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

/* Removes whatever groups inst holds (they must be empty), closing their fds. A group
 * that could not be removed keeps its fd, so that a retry (after -EBUSY) still watches
 * and removes it. */
static int instance_remove(struct dsv_cgroup_instance *inst) {
        int ret = 0, r;
        for (unsigned b = 0; b < N_CTRL; b++) {
                if (!(inst->v1_created & (1u << b)))
                        continue;
                r = dsv__cgroup_v1_delete(dsv__cgroup_ctrl_name(b), inst->v1_rel[b]);
                if (r < 0 && r != -ENOENT) {
                        ret = ret ?: r;
                        continue;
                }
                inst->v1_created &= ~(1u << b);
                if (inst->v1_procs_fd[b] >= 0)
                        close(inst->v1_procs_fd[b]);
                if (inst->v1_fd[b] >= 0)
                        close(inst->v1_fd[b]);
                inst->v1_procs_fd[b] = inst->v1_fd[b] = -1;
        }
        if (inst->v2_fd >= 0) {
                r = v2_remove(inst->h, v2_pdir(inst->h), inst->name);
                if (r < 0) {
                        ret = ret ?: r;
                } else {
                        close(inst->v2_fd);
                        inst->v2_fd = -1;
                }
        }
        return ret;
}

static int instance_make_v2(struct dsv_cgroup_instance *inst) {
        int r = v2_make(inst->h, v2_pdir(inst->h), inst->name, false, &inst->v2_fd, NULL);
        if (r < 0)
                return r;
        return read_ctrl_bits(inst->v2_fd, "cgroup.controllers", &inst->v2_controllers);
}

static int instance_make_v1(struct dsv_cgroup_instance *inst, unsigned bit) {
        struct dsv_cgroup_host *h = inst->h;
        const char *ctrl = dsv__cgroup_ctrl_name(bit);
        /* libcgroup creates with mkdir -p, so an existing group would be reused silently. */
        int pdir = v1_pdir(h, bit);
        if (faccessat(pdir, inst->name, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
                return -EEXIST;
        int r = join_path(inst->v1_rel[bit], sizeof inst->v1_rel[bit], h->v1_prel[bit], inst->name);
        if (r < 0)
                return r;
        r = dsv__cgroup_v1_create(ctrl, inst->v1_rel[bit]);
        if (r < 0)
                return r;
        inst->v1_created |= 1u << bit;
        r = dsv__cgfs_open_dir(pdir, inst->name, &inst->v1_fd[bit]);
        if (r < 0)
                return r;
        int fd = openat(inst->v1_fd[bit], "cgroup.procs", O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        inst->v1_procs_fd[bit] = fd;
        /* The requested cpus and mems are written next. */
        return bit == BIT_CPUSET ? v1_cpuset_inherit(pdir, inst->v1_rel[bit]) : 0;
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
        if ((r = ensure_parent(h)) < 0)
                return r;
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


/* ---- the instance group name scheme ------------------------------------------------ */

#define INSTANCE_NAME_FORMAT "dsvisor-%d-worker-%d"

int dsv_cgroup_instance_name(pid_t supervisor_pid, int index, char *buf, size_t size) {
        if (supervisor_pid <= 0 || index < 0 || !buf)
                return -EINVAL;
        int n = snprintf(buf, size, INSTANCE_NAME_FORMAT, (int)supervisor_pid, index);
        return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

/* The supervisor pid in an instance group's name; 0 when name is not one. */
static pid_t instance_name_owner(const char *name) {
        int pid, idx;
        char tail;
        if (sscanf(name, INSTANCE_NAME_FORMAT "%c", &pid, &idx, &tail) != 2 || pid <= 0 || idx < 0)
                return 0;
        return (pid_t)pid;
}

/* Removes the instance groups in dir whose supervisor is gone. rmdir fails on a group
 * that still has tasks, so nothing running is touched; the workers of a supervisor
 * killed a moment ago may still be exiting (PR_SET_PDEATHSIG), so an EBUSY is retried
 * until deadline, not given up at once (that left empty groups behind). */
static void remove_stale_in(const char *dir, long long deadline, struct dsv_cgroup_stale *ret, size_t max,
                            size_t *n) {
        DIR *d = opendir(dir);
        if (!d)
                return;
        struct dirent *de;
        while ((de = readdir(d))) {
                pid_t pid = instance_name_owner(de->d_name);
                if (pid <= 0 || pid == getpid() || kill(pid, 0) == 0 || errno != ESRCH)
                        continue;
                char path[sizeof ret->path];
                snprintf(path, sizeof path, "%.500s/%.400s", dir, de->d_name);
                int r;
                while ((r = rmdir(path) < 0 ? -errno : 0) == -EBUSY && dsv_clock_now_ms() < deadline)
                        usleep(20000);
                if (r == -ENOENT || *n >= max)
                        continue;
                struct dsv_cgroup_stale *e = &ret[(*n)++];
                snprintf(e->path, sizeof e->path, "%s", path);
                e->supervisor_pid = pid;
                e->result = r;
        }
        closedir(d);
}

int dsv_cgroup_host_remove_stale(const struct dsv_cgroup_host *h, struct dsv_cgroup_stale *ret, size_t max) {
        if (!h || (!ret && max))
                return -EINVAL;
        long long deadline = dsv_clock_now_ms() + 2000;
        size_t n = 0;
        if (h->v2_fd >= 0) {
                remove_stale_in(h->v2_own, deadline, ret, max, &n);
                if (strcmp(h->v2_parent, h->v2_own) != 0)
                        remove_stale_in(h->v2_parent, deadline, ret, max, &n);
        }
        for (unsigned b = 0; b < N_CTRL; b++)
                if (h->v1_mounted & (1u << b)) {
                        remove_stale_in(h->v1_own[b], deadline, ret, max, &n);
                        if (strcmp(h->v1_parent[b], h->v1_own[b]) != 0)
                                remove_stale_in(h->v1_parent[b], deadline, ret, max, &n);
                }
        return (int)n;
}

/* "v2 <dir>/<name>, v1 cpu <dir>/<name>, ..." for every hierarchy in use; name "" lists
 * the directories themselves. */
static int describe_dirs(const struct dsv_cgroup_host *h, const char *name, bool tag, char *buf, size_t size) {
        size_t len = 0;
        buf[0] = 0;
        if (h->v2_fd >= 0)
                len += (size_t)snprintf(buf, size, "%s%.400s%s%s", tag ? "v2 " : "", h->v2_parent, *name ? "/" : "",
                                        name);
        for (unsigned b = 0; b < N_CTRL && len < size; b++)
                if (h->v1_mounted & (1u << b))
                        len += (size_t)snprintf(buf + len, size - len, "%s%s%s%s%.400s%s%s", len ? ", " : "",
                                                tag ? "v1 " : "", tag ? dsv__cgroup_ctrl_name(b) : "",
                                                tag ? " " : "", h->v1_parent[b], *name ? "/" : "", name);
        if (!buf[0])
                snprintf(buf, size, "(none)");
        return len >= size ? -ENAMETOOLONG : 0;
}

int dsv_cgroup_host_describe_parent(const struct dsv_cgroup_host *h, char *buf, size_t size) {
        if (!h || !buf || size == 0)
                return -EINVAL;
        return describe_dirs(h, "", false, buf, size);
}

int dsv_cgroup_host_rt_runtime_us(const struct dsv_cgroup_host *h, uint64_t *ret) {
        if (!h || !ret)
                return -EINVAL;
        if (!(h->v1_mounted & (1u << BIT_CPU)))
                return -ENOENT;
        char buf[32], *end;
        int r = dsv__cgfs_read(h->v1_fd[BIT_CPU], "cpu.rt_runtime_us", buf, sizeof buf);
        if (r < 0)
                return r;
        unsigned long long v = strtoull(buf, &end, 10);
        if (end == buf || buf[0] == '-')
                return -EBADMSG;
        *ret = v;
        return 0;
}

int dsv_cgroup_instance_describe(const struct dsv_cgroup_instance *inst, char *buf, size_t size) {
        if (!inst || !buf || size == 0)
                return -EINVAL;
        return describe_dirs(inst->h, inst->name, true, buf, size);
}

int dsv_cgroup_instance_cpu_stat(const struct dsv_cgroup_instance *inst, struct dsv_cgroup_cpu_stat *ret) {
        if (!inst || !ret)
                return -EINVAL;
        int dirfd = (inst->v1_created & (1u << BIT_CPU))                        ? inst->v1_fd[BIT_CPU]
                    : inst->v2_fd >= 0 && (inst->v2_controllers & (1u << BIT_CPU)) ? inst->v2_fd
                                                                                   : -1;
        if (dirfd < 0)
                return -ENOENT;
        char text[1024];
        int r = dsv__cgfs_read(dirfd, "cpu.stat", text, sizeof text);
        if (r < 0)
                return r;
        /* v1 (cpu,cpuacct) says nr_throttled and throttled_time (ns), v2 nr_throttled
         * and throttled_usec. */
        struct dsv_cgroup_cpu_stat st = {.throttled_seconds = -1};
        bool have_periods = false;
        for (char *save = NULL, *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                char key[64];
                unsigned long long v;
                if (sscanf(line, "%63s %llu", key, &v) != 2)
                        continue;
                if (strcmp(key, "nr_throttled") == 0) {
                        st.throttled_periods = v;
                        have_periods = true;
                } else if (strcmp(key, "throttled_time") == 0) {
                        st.throttled_seconds = (double)v / 1e9;
                } else if (strcmp(key, "throttled_usec") == 0) {
                        st.throttled_seconds = (double)v / 1e6;
                }
        }
        if (!have_periods || st.throttled_seconds < 0)
                return -ENODATA;
        *ret = st;
        return 0;
}

/* ---- stopping ---------------------------------------------------------------------- */

/* SIGKILLs every id listed in dirfd's file (cgroup.procs; v1 tasks: a thread id
 * kills its whole process). Returns how many were listed. */
static int kill_listed(int dirfd, const char *file) {
        pid_t pids[1024];
        int n = dsv__cgfs_read_ids(dirfd, file, pids, 1024);
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
        long long deadline = dsv_clock_now_ms() + timeout_ms;
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
                                if (!has_kill && (r = kill_listed(inst->v2_fd, "cgroup.procs")) < 0)
                                        return r;
                        }
                }
                /* v1 has no cgroup.kill and no populated flag: kill what is listed until
                 * nothing is (a task forked meanwhile shows up in the next round). The
                 * list is "tasks", every thread, not cgroup.procs: css_task_iter_advance()
                 * hides a dying group leader from cgroup.procs once signal->live is 0,
                 * while the process's last thread may still be in exit_mm() with the
                 * group populated (rmdir EBUSY); a thread stays in "tasks" until
                 * cgroup_exit(). (On the 6.18 CI host a killed 4 GiB, 5-thread process
                 * showed no such gap: procs, tasks and rmdir agreed within 0.1 ms; this
                 * and the EBUSY retry below are the cheap guard.) A pid can be recycled
                 * before kill() if its task exits and is reaped by another parent in
                 * that window; cgroup.kill (v2) has no such window, which is why it goes
                 * first. */
                for (unsigned b = 0; b < N_CTRL; b++) {
                        if (inst->v1_fd[b] < 0)
                                continue;
                        r = kill_listed(inst->v1_fd[b], "tasks");
                        if (r == -ENOENT) /* a fake tree: no tasks file */
                                r = kill_listed(inst->v1_fd[b], "cgroup.procs");
                        if (r < 0)
                                return r;
                        busy |= r > 0;
                }
                if (!busy) {
                        /* Empty, yet rmdir can still say EBUSY for a moment; retry until
                         * the deadline instead of leaving the group behind. */
                        r = instance_remove(inst);
                        if (r != -EBUSY || dsv_clock_now_ms() >= deadline)
                                return r;
                }
                long long left = deadline - dsv_clock_now_ms();
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
}
