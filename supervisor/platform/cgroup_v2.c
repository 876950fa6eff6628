/* cgroup_v2.c — delegation inside the unified hierarchy, through cgroup_fs.c only.
 *
 * cgroup-v2.rst: domain controllers may only be enabled in a group without processes
 * (the root is exempt), and a child can only enable what its parent enabled. systemd's
 * CGROUP_DELEGATION.md: the delegatee writes its own directory, cgroup.procs and
 * cgroup.subtree_control, never anything above, and "needs to migrate itself to a
 * sub-cgroup" first. So: own/<leaf> ← self, then "+ctrl" into own/cgroup.subtree_control. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cgroup-internal.h"

static const char *const ctrl_names[] = {"cpu", "cpuset", "memory", "hugetlb"};

const char *dsv__cgroup_ctrl_name(unsigned bit) {
        return bit < sizeof ctrl_names / sizeof ctrl_names[0] ? ctrl_names[bit] : NULL;
}

static unsigned ctrl_bits_of(const char *list) {
        unsigned bits = 0;
        for (unsigned bit = 0; dsv__cgroup_ctrl_name(bit); bit++)
                if (dsv__cgfs_has_word(list, dsv__cgroup_ctrl_name(bit)))
                        bits |= 1u << bit;
        return bits;
}

int dsv__cgroup_v2_enable(int dirfd, unsigned want, unsigned *ret_enabled, unsigned *ret_newly) {
        char buf[512];
        int r = dsv__cgfs_read(dirfd, "cgroup.controllers", buf, sizeof buf);
        if (r < 0)
                return r;
        unsigned available = ctrl_bits_of(buf);
        r = dsv__cgfs_read(dirfd, "cgroup.subtree_control", buf, sizeof buf);
        if (r < 0)
                return r;
        unsigned before = ctrl_bits_of(buf), newly = 0;

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
                if (r == -EBUSY) {
                        *ret_newly = newly;
                        return r;
                }
                if (r == 0)
                        newly |= 1u << bit;
        }

        r = dsv__cgfs_read(dirfd, "cgroup.subtree_control", buf, sizeof buf);
        if (r < 0)
                return r;
        *ret_enabled = ctrl_bits_of(buf);
        *ret_newly = newly;
        return 0;
}

int dsv__cgroup_v2_disable(int dirfd, unsigned bits) {
        int ret = 0;
        /* In reverse order of enabling (cpuset after cpu is how systemd orders them). */
        for (int bit = 3; bit >= 0; bit--) {
                if (!(bits & (1u << bit)))
                        continue;
                char op[32];
                snprintf(op, sizeof op, "-%s", dsv__cgroup_ctrl_name((unsigned)bit));
                int r = dsv__cgfs_write(dirfd, "cgroup.subtree_control", op);
                if (r < 0 && ret == 0)
                        ret = r;
        }
        return ret;
}

int dsv__cgroup_v2_move_self(int dirfd) {
        char pid[24];
        snprintf(pid, sizeof pid, "%d", (int)getpid());
        return dsv__cgfs_write(dirfd, "cgroup.procs", pid);
}
