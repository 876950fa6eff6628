/* placement.c — where the instances run: the host's topology through the placement
 * policy into one instance per placement (CPUs, NUMA node, threads), and the supervisor
 * itself kept to the CPUs none of them uses (its, the gateway's and the kernel's),
 * never real-time. */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "dsv_policy.h"
#include "sup.h"

static int place(const struct dsv_topology *topo, const struct dsv_policy_placement *plan,
                 const struct sup_instance_env *env, const char *runtime_dir, bool *used, struct sup_instance *inst,
                 int *ret_n_free_cpus) {
        for (int i = 0; i < plan->n_instances; i++) {
                int cpus[DSV_TOPOLOGY_MAX_PUS];
                int n = dsv_policy_instance_cpus(topo, &plan->instances[i], cpus, DSV_TOPOLOGY_MAX_PUS);
                if (n < 0)
                        return n;
                for (int c = 0; c < n; c++)
                        for (int p = 0; p < topo->n_pus; p++)
                                if (topo->pus[p] == cpus[c])
                                        used[p] = true;
                int r = sup_instance_init(&inst[i], env, i, plan->instances[i].mem_node_os,
                                          plan->instances[i].n_threads, cpus, n, runtime_dir);
                if (r < 0)
                        return r;
        }
        int n_free = 0;
        cpu_set_t free_set;
        CPU_ZERO(&free_set);
        for (int p = 0; p < topo->n_pus; p++)
                if (!used[p] && topo->pus[p] < CPU_SETSIZE) {
                        n_free++;
                        CPU_SET(topo->pus[p], &free_set);
                }
        /* The supervisor and the gateway's threads (started later, they inherit this)
         * stay on the CPUs no instance uses, when there are any. Never real-time. */
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
        struct dsv_topology *topo = calloc(1, sizeof *topo);
        struct dsv_policy_placement *plan = calloc(1, sizeof *plan);
        bool *used = calloc(DSV_TOPOLOGY_MAX_PUS, sizeof *used);
        int r = topo && plan && used ? dsv_topo_load(DSV_TOPO_SOURCE_SYSTEM, NULL, topo) : -ENOMEM;
        if (r < 0) {
                sup_log(3, "Failed to read the topology: %s", strerror(-r));
                goto out;
        }
        struct dsv_policy_place_request req = {
                .n_instances = cfg->n_instances,
                .threads_per_instance = cfg->threads_per_instance,
                .housekeeping = cfg->no_housekeeping ? DSV_POLICY_HOUSEKEEPING_NONE : DSV_POLICY_HOUSEKEEPING_AUTO};
        if ((r = dsv_policy_place_instances(topo, &req, plan)) < 0) {
                sup_log(3, "Failed to place %d instances: %s", cfg->n_instances, strerror(-r));
                goto out;
        }
        if (plan->n_instances > SUP_MAX_INSTANCES) {
                sup_log(3, "%d instances: the gateway takes at most %d", plan->n_instances, SUP_MAX_INSTANCES);
                r = -E2BIG;
                goto out;
        }
        for (int i = 0; i < plan->n_warnings; i++)
                sup_log(4, "Placement: %s", plan->warnings[i]);
        r = place(topo, plan, env, runtime_dir, used, inst, ret_n_free_cpus);
        if (r == 0)
                *ret_n = plan->n_instances;
out:
        free(used);
        free(plan);
        free(topo);
        return r;
}
