/* cgroup_v2.c — delegation inside the unified hierarchy, through cgroup_fs.c only.
 *
 * cgroup-v2.rst: domain controllers may only be enabled in a group without processes
 * (the root is exempt), and a child can only enable what its parent enabled. systemd's
 * CGROUP_DELEGATION.md: the delegatee writes its own directory, cgroup.procs and
 * cgroup.subtree_control, never anything above, and "needs to migrate itself to a
 * sub-cgroup" first. So: own/<leaf> ← self, then "+ctrl" into own/cgroup.subtree_control. */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "cgroup-internal.h"

/* ---- who enabled what: xattrs on the group ---------------------------------------
 *
 * A supervisor that is SIGKILLed cannot take back the controllers it enabled in a
 * group's subtree_control, and the next one cannot tell them from the administrator's.
 * So each enabling process records its controllers on the group itself, as the xattr
 * trusted.dsvisor.enabled.<pid> (cgroupfs keeps trusted.* xattrs; needs CAP_SYS_ADMIN,
 * without which nothing is recorded and nothing is adopted). A later supervisor adopts
 * the still-enabled controllers of a pid that is gone, so its own teardown disables
 * them under the usual rule (no other group left below that may use them). */

#define MARK_PREFIX "trusted.dsvisor.enabled."

/* true when text is the pid of a process that is gone (not this one, kill says ESRCH). */
static bool pid_gone(const char *text) {
        char *end;
        long pid = strtol(text, &end, 10);
        return !*end && pid > 0 && pid != getpid() && kill((pid_t)pid, 0) < 0 && errno == ESRCH;
}

static void own_mark_name(char *name, size_t size) {
        snprintf(name, size, MARK_PREFIX "%d", (int)getpid());
}

static unsigned mark_read(int dirfd, const char *name) {
        char buf[128];
        ssize_t n = fgetxattr(dirfd, name, buf, sizeof buf - 1);
        if (n < 0)
                return 0;
        buf[n] = '\0';
        return dsv__cgroup_ctrl_bits(buf);
}

/* Records bits as this process's (removes the record when bits is 0); best effort. */
static void mark_write(int dirfd, unsigned bits) {
        char name[64], value[128];
        own_mark_name(name, sizeof name);
        if (!bits) {
                (void)fremovexattr(dirfd, name);
                return;
        }
        dsv__cgroup_ctrl_list(bits, value, sizeof value);
        (void)fsetxattr(dirfd, name, value, strlen(value), 0);
}

/* Takes over the records of processes that are gone: returns the controllers they
 * enabled that no live recorder claims, and removes their records. */
static unsigned marks_adopt(int dirfd) {
        char list[4096];
        ssize_t n = flistxattr(dirfd, list, sizeof list);
        if (n <= 0)
                return 0;
        unsigned dead = 0, live = 0;
        for (const char *name = list; name < list + n; name += strlen(name) + 1) {
                if (strncmp(name, MARK_PREFIX, strlen(MARK_PREFIX)) != 0)
                        continue;
                unsigned bits = mark_read(dirfd, name);
                if (!pid_gone(name + strlen(MARK_PREFIX))) {
                        live |= bits;
                        continue;
                }
                dead |= bits;
                (void)fremovexattr(dirfd, name);
        }
        return dead & ~live;
}

static unsigned mark_own(int dirfd) {
        char name[64];
        own_mark_name(name, sizeof name);
        return mark_read(dirfd, name);
}

/* The group a process made: trusted.dsvisor.made = its pid, so that a later supervisor
 * can take over (and at its teardown remove) the groups of one that is gone. */
#define MADE_NAME "trusted.dsvisor.made"

void dsv__cgroup_v2_mark_made(int fd) {
        char pid[24];
        snprintf(pid, sizeof pid, "%d", (int)getpid());
        (void)fsetxattr(fd, MADE_NAME, pid, strlen(pid), 0);
}

bool dsv__cgroup_v2_adopt_made(int fd) {
        char buf[24];
        ssize_t n = fgetxattr(fd, MADE_NAME, buf, sizeof buf - 1);
        if (n <= 0)
                return false;
        buf[n] = '\0';
        if (!pid_gone(buf))
                return false;
        dsv__cgroup_v2_mark_made(fd);
        return true;
}

int dsv__cgroup_v2_enable(int dirfd, unsigned want, unsigned *ret_enabled, unsigned *ret_newly) {
        char buf[512];
        int r = dsv__cgfs_read(dirfd, "cgroup.controllers", buf, sizeof buf);
        if (r < 0)
                return r;
        unsigned available = dsv__cgroup_ctrl_bits(buf);
        r = dsv__cgfs_read(dirfd, "cgroup.subtree_control", buf, sizeof buf);
        if (r < 0)
                return r;
        unsigned before = dsv__cgroup_ctrl_bits(buf);
        /* what a supervisor that is gone enabled and left on is ours to undo now */
        unsigned newly = marks_adopt(dirfd) & before;

        for (unsigned bit = 0; dsv__cgroup_ctrl_name(bit); bit++) {
                /* Only what is off: a controller someone else enabled is theirs to
                 * disable, and must not be counted as ours. */
                if (!(want & available & ~before & (1u << bit)))
                        continue;
                char op[32];
                snprintf(op, sizeof op, "+%s", dsv__cgroup_ctrl_name(bit));
                r = dsv__cgfs_write(dirfd, "cgroup.subtree_control", op);
                /* EBUSY: processes are in this group (no internal processes); the caller
                 * has to learn that, not just a missing limit. Whatever was enabled
                 * before is reported, so that it can be undone. */
                if (r == -EBUSY)
                        break;
                if (r == 0)
                        newly |= 1u << bit;
        }
        if (newly)
                mark_write(dirfd, mark_own(dirfd) | newly);
        if (r == -EBUSY) {
                *ret_newly = newly;
                return r;
        }

        r = dsv__cgfs_read(dirfd, "cgroup.subtree_control", buf, sizeof buf);
        if (r < 0)
                return r;
        *ret_enabled = dsv__cgroup_ctrl_bits(buf);
        *ret_newly = newly;
        return 0;
}

int dsv__cgroup_v2_disable(int dirfd, unsigned bits) {
        int ret = 0;
        unsigned off = 0;
        /* In reverse order of enabling (cpuset after cpu is how systemd orders them). */
        for (int bit = 3; bit >= 0; bit--) {
                if (!(bits & (1u << bit)))
                        continue;
                char op[32];
                snprintf(op, sizeof op, "-%s", dsv__cgroup_ctrl_name((unsigned)bit));
                int r = dsv__cgfs_write(dirfd, "cgroup.subtree_control", op);
                if (r == 0)
                        off |= 1u << bit;
                else if (ret == 0)
                        ret = r;
        }
        unsigned own = mark_own(dirfd);
        if (own & off)
                mark_write(dirfd, own & ~off);
        return ret;
}

int dsv__cgroup_v2_move_self(int dirfd) {
        char pid[24];
        snprintf(pid, sizeof pid, "%d", (int)getpid());
        return dsv__cgfs_write(dirfd, "cgroup.procs", pid);
}
