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

int dsv__cgroup_v2_delegate(int own_fd, int leaf_fd, unsigned want, unsigned *ret_enabled) {
        char buf[512];
        int r;

        if (leaf_fd >= 0) {
                char pid[24];
                snprintf(pid, sizeof pid, "%d", (int)getpid());
                r = dsv__cgfs_write(leaf_fd, "cgroup.procs", pid);
                if (r < 0)
                        return r;
        }

        r = dsv__cgfs_read(own_fd, "cgroup.controllers", buf, sizeof buf);
        if (r < 0)
                return r;
        char available[512];
        snprintf(available, sizeof available, "%s", buf);

        for (unsigned bit = 0; dsv__cgroup_ctrl_name(bit); bit++) {
                const char *name = dsv__cgroup_ctrl_name(bit);
                if (!(want & (1u << bit)) || !dsv__cgfs_has_word(available, name))
                        continue;
                char op[32];
                snprintf(op, sizeof op, "+%s", name);
                r = dsv__cgfs_write(own_fd, "cgroup.subtree_control", op);
                /* EBUSY: processes other than ours are still in own (no internal
                 * processes); the caller has to learn that, not just a missing limit. */
                if (r == -EBUSY)
                        return r;
        }

        r = dsv__cgfs_read(own_fd, "cgroup.subtree_control", buf, sizeof buf);
        if (r < 0)
                return r;
        unsigned enabled = 0;
        for (unsigned bit = 0; dsv__cgroup_ctrl_name(bit); bit++)
                if (dsv__cgfs_has_word(buf, dsv__cgroup_ctrl_name(bit)))
                        enabled |= 1u << bit;
        *ret_enabled = enabled;
        return 0;
}
