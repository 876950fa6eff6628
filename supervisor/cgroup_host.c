/* cgroup_host.c — the supervisor's side of the instances' cgroups: the platform's host
 * set up below our own group (and --cgroup-parent), cleared of the groups a killed
 * supervisor left, its share of RT runtime, and restored at stop. Where each group
 * lives and what is in effect is the platform's (dsv_platform.h). */
#include <stdio.h>
#include <string.h>

#include "sup.h"

/* The RT runtime to share: our own v1 cpu group's, else the kernel's default. */
static uint64_t own_rt_runtime_us(const struct dsv_cgroup_host *h) {
        uint64_t v;
        return h && dsv_cgroup_host_rt_runtime_us(h, &v) == 0 ? v : 950000;
}

uint64_t sup_cgroup_rt_share_us(const struct dsv_cgroup_host *h, int n_instances) {
        return own_rt_runtime_us(h) / (uint64_t)(n_instances + 1);
}

/* Logs what dsv_cgroup_host_remove_stale did. */
static void remove_stale(const struct dsv_cgroup_host *h) {
        struct dsv_cgroup_stale stale[64];
        int n = dsv_cgroup_host_remove_stale(h, stale, sizeof stale / sizeof stale[0]);
        for (int i = 0; i < n; i++)
                if (stale[i].result == 0)
                        sup_log(6, "Removed cgroup '%s' left by supervisor %d, which is gone", stale[i].path,
                                (int)stale[i].supervisor_pid);
                else
                        sup_log(4, "Failed to remove cgroup '%s' left by supervisor %d: %s, ignoring", stale[i].path,
                                (int)stale[i].supervisor_pid, strerror(-stale[i].result));
}

void sup_cgroup_host_done(struct dsv_cgroup_host *h) {
        if (!h)
                return;
        char why[1024];
        int r = dsv_cgroup_host_restore(h, why, sizeof why);
        if (r < 0)
                sup_log(4, "Cgroups not fully restored (%s): %s, ignoring", strerror(-r), why);
        dsv_cgroup_host_free(h);
}

int sup_cgroup_host_setup(const struct sup_config *cfg, int n_instances, struct dsv_cgroup_host **ret, char *note,
                          size_t note_size) {
        struct dsv_cgroup_config cc = {.parent = cfg->cgroup_parent};
        struct dsv_cgroup_host *h = NULL;
        int r = dsv_cgroup_host_new(&cc, &h);
        if (r == 0 && cfg->rt_priority > 0 && cfg->cgroup_parent[0]) {
                /* FIFO workers need RT runtime in every v1 cpu group on their path: the
                 * parent levels get what the instances get together (see
                 * sup_cgroup_rt_share_us). host_new writes nothing; make it again. */
                cc.parent_rt_runtime_us = sup_cgroup_rt_share_us(h, n_instances) * (uint64_t)n_instances;
                dsv_cgroup_host_free(h);
                h = NULL;
                r = dsv_cgroup_host_new(&cc, &h);
        }
        if (r == 0)
                r = dsv_cgroup_host_delegate(h);
        if (r < 0) {
                snprintf(note, note_size, "none: %s", strerror(-r));
                sup_cgroup_host_done(h);
                if (cfg->cgroup_parent[0]) {
                        /* Asked for explicitly: running without them would hide it. */
                        sup_log(3, "Failed to set up the instance cgroups below --cgroup-parent '%s': %s",
                                cfg->cgroup_parent, strerror(-r));
                        return r;
                }
                sup_log(4, "No cgroups for the instances (%s): no limit is in effect, ignoring", strerror(-r));
                *ret = NULL;
                return 0;
        }
        remove_stale(h);
        if (cfg->cgroup_parent[0]) {
                char where[2048];
                dsv_cgroup_host_describe_parent(h, where, sizeof where);
                sup_log(6, "Instance cgroups below --cgroup-parent: %s", where);
        }
        *ret = h;
        return 0;
}
