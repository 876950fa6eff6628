/* placement.c — where the instances run. sup_place is the one path from the machine as
 * given to dsvisor (platform: affinity, cgroup cpuset, memory nodes) and the operator's
 * --cpus/--housekeeping-cpus through the placement policy, so `dsvisor plan` shows
 * exactly what `dsvisor start` does; sup_place_instances turns its plan into instances
 * (CPUs, NUMA node, threads) and keeps the supervisor itself on the housekeeping CPUs
 * (its, the gateway's and the kernel's), never real-time. */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sup.h"

/* The given CPUs no instance uses. */
static int unused_cpus(const struct sup_placement *p, int *cpus) {
        bool used[1 << 16] = {false};
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

static int place(const struct sup_placement *p, const struct sup_instance_env *env, const char *runtime_dir,
                 struct sup_instance *inst, int *ret_n_free_cpus) {
        for (int i = 0; i < p->plan.n_instances; i++) {
                int cpus[DSV_TOPOLOGY_MAX_PUS];
                int n = dsv_policy_instance_cpus(&p->topo, &p->plan.instances[i], cpus, DSV_TOPOLOGY_MAX_PUS);
                if (n < 0)
                        return n;
                int r = sup_instance_init(&inst[i], env, i, p->plan.instances[i].mem_node_os,
                                          p->plan.instances[i].n_threads, cpus, n, runtime_dir);
                if (r < 0)
                        return r;
        }
        int n_free = 0;
        cpu_set_t free_set;
        CPU_ZERO(&free_set);
        for (int h = 0; h < p->n_housekeeping; h++)
                if (p->housekeeping[h] < CPU_SETSIZE) {
                        n_free++;
                        CPU_SET(p->housekeeping[h], &free_set);
                }
        /* The supervisor and the gateway's threads (started later, they inherit this)
         * stay on the housekeeping CPUs, when there are any. Never real-time. */
        if (n_free > 0 && sched_setaffinity(0, sizeof free_set, &free_set) < 0)
                sup_log(4, "Failed to keep the supervisor on the housekeeping CPUs: %m, ignoring");
        if (sched_getscheduler(0) != SCHED_OTHER) {
                struct sched_param sp = {0};
                sup_log(4, "The supervisor was started with a real-time policy; switching it to SCHED_OTHER");
                sched_setscheduler(0, SCHED_OTHER, &sp);
        }
        *ret_n_free_cpus = n_free;
        return 0;
}

int sup_place_instances(const struct sup_instance_env *env, const char *runtime_dir, struct sup_instance *inst,
                        int *ret_n, int *ret_n_free_cpus) {
        const struct sup_config *cfg = env->cfg;
        struct sup_placement *placed = calloc(1, sizeof *placed);
        if (!placed) {
                sup_log(3, "Failed to place the instances: %s", strerror(ENOMEM));
                return -ENOMEM;
        }
        char why[512];
        struct sup_place_request req = {
                .n_instances = cfg->n_instances,
                .threads_per_instance = cfg->threads_per_instance,
                .no_housekeeping = cfg->no_housekeeping,
                .cpus = cfg->cpus,
                .housekeeping_cpus = cfg->housekeeping_cpus};
        int r = sup_place(&req, placed, why, sizeof why);
        if (r < 0) {
                sup_log(3, "Placement: %s", why);
                goto out;
        }
        if (placed->plan.n_instances > SUP_MAX_INSTANCES) {
                sup_log(3, "%d instances: the gateway takes at most %d", placed->plan.n_instances, SUP_MAX_INSTANCES);
                r = -E2BIG;
                goto out;
        }
        for (int i = 0; i < placed->plan.n_warnings; i++)
                sup_log(4, "Placement: %s", placed->plan.warnings[i]);
        r = place(placed, env, runtime_dir, inst, ret_n_free_cpus);
        if (r == 0)
                *ret_n = placed->plan.n_instances;
out:
        free(placed);
        return r;
}
