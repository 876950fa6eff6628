/* place.c — where `dsvisor start` and `dsvisor plan` put the instances: the topology as
 * given to dsvisor (platform), the operator's --cpus/--housekeeping-cpus on it and the
 * placement (policy), and the CPUs left to the supervisor and gateway. One path, so the
 * plan shows exactly what start does. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "sup.h"

/* The given CPUs no instance uses. */
static int unused_cpus(const struct sup_placement *p, int *cpus) {
        static bool used[1 << 16];
        memset(used, 0, sizeof used);
        for (int i = 0; i < p->plan.n_instances; i++) {
                int inst[DSV_TOPOLOGY_MAX_PUS];
                int n = dsv_policy_instance_cpus(&p->topo, &p->plan.instances[i], inst, DSV_TOPOLOGY_MAX_PUS);
                if (n < 0)
                        return n;
                for (int c = 0; c < n; c++)
                        used[inst[c]] = true;
        }
        int n = 0;
        for (int u = 0; u < p->given.n_pus; u++)
                if (!used[p->given.pus[u]])
                        cpus[n++] = p->given.pus[u];
        return n;
}

int sup_place(const struct sup_place_request *req, struct sup_placement *ret, char *why, size_t why_size) {
        const struct dsv_given_source own = {.own = true};
        int r = dsv_topo_load_given(req->source, req->source_arg, req->source == DSV_TOPO_SOURCE_SYSTEM ? &own : NULL,
                                    &ret->given, &ret->given_set);
        if (r < 0) {
                if (req->source == DSV_TOPO_SOURCE_SYSTEM)
                        snprintf(why, why_size, "failed to read the CPUs and memory nodes given to dsvisor: %s%s",
                                 strerror(-r), r == -ENODEV ? " (no CPU of this machine is both in the affinity "
                                                              "mask and in the cgroup's cpuset)" : "");
                else
                        snprintf(why, why_size, "failed to read the %s topology '%s': %s",
                                 dsv_topo_source_to_string(req->source), req->source_arg, strerror(-r));
                return r;
        }
        bool have_hk = req->housekeeping_cpus && *req->housekeeping_cpus;
        if (have_hk && req->no_housekeeping) {
                snprintf(why, why_size, "--no-housekeeping and --housekeeping-cpus %s contradict each other",
                         req->housekeeping_cpus);
                return -EINVAL;
        }
        r = dsv_policy_cpus_choose(&ret->given, req->cpus, req->housekeeping_cpus, req->n_instances, &ret->topo, why,
                                   why_size);
        if (r < 0)
                return r;
        ret->chosen = r > 0;
        struct dsv_policy_place_request place = {
                .n_instances = req->n_instances,
                .threads_per_instance = req->threads_per_instance,
                .housekeeping = req->no_housekeeping || ret->chosen ? DSV_POLICY_HOUSEKEEPING_NONE
                                                                    : DSV_POLICY_HOUSEKEEPING_AUTO,
        };
        r = dsv_policy_place_instances(&ret->topo, &place, &ret->plan);
        if (r == -E2BIG) {
                snprintf(why, why_size, "cannot place %d instances: the limit is %d", req->n_instances,
                         DSV_POLICY_MAX_INSTANCES);
                return r;
        }
        if (r < 0) {
                snprintf(why, why_size, "cannot place the instances on this topology: %s", strerror(-r));
                return r;
        }
        r = have_hk ? dsv_policy_cpulist_parse(req->housekeeping_cpus, ret->housekeeping, DSV_TOPOLOGY_MAX_PUS)
                    : unused_cpus(ret, ret->housekeeping);
        if (r < 0) {
                snprintf(why, why_size, "failed to list the housekeeping CPUs: %s", strerror(-r));
                return r;
        }
        ret->n_housekeeping = r;
        return 0;
}
