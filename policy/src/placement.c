/* placement.c — instances onto NUMA nodes and cores.
 *
 * One instance per node by default, because one process spanning sockets decodes slower
 * than one per socket (peers-and-anchors.md §1, Intel's SGLang study). Each instance owns
 * whole cores, SMT siblings included, so no two instances share a core's caches and
 * execution units; memory is bound to the instance's node. One core of node 0 is kept
 * for the supervisor and gateway, so their threads never compete with a compute thread. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsv_policy.h"

static void add_warning(struct dsv_policy_placement *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void add_warning(struct dsv_policy_placement *p, const char *fmt, ...) {
        if (p->n_warnings == DSV_POLICY_MAX_WARNINGS) {
                /* Never drop silently: the last slot says how many did not fit. */
                p->n_warnings_dropped++;
                snprintf(p->warnings[DSV_POLICY_MAX_WARNINGS - 1], DSV_POLICY_WARNING_LEN,
                         "... and %d more warnings", p->n_warnings_dropped + 1);
                return;
        }
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p->warnings[p->n_warnings], DSV_POLICY_WARNING_LEN, fmt, ap);
        va_end(ap);
        p->n_warnings++;
}

/* Free cores of each node: the range [first, first + n) after housekeeping. */
struct node_share {
        int first;
        int n;
        int n_instances;
};

/* Hands out n_instances over the nodes with free cores: one each while they last, then
 * evenly, the remainder going to the nodes with the most free cores (earliest on ties). */
static void count_instances(struct node_share *share, int n_nodes, int n_usable, int n_instances) {
        if (n_instances <= n_usable) {
                for (int n = 0; n < n_nodes && n_instances > 0; n++)
                        if (share[n].n > 0) {
                                share[n].n_instances = 1;
                                n_instances--;
                        }
                return;
        }
        int base = n_instances / n_usable, extra = n_instances % n_usable;
        for (int n = 0; n < n_nodes; n++)
                if (share[n].n > 0)
                        share[n].n_instances = base;
        while (extra-- > 0) {
                int best = -1;
                for (int n = 0; n < n_nodes; n++)
                        if (share[n].n > 0 && share[n].n_instances == base &&
                            (best < 0 || share[n].n > share[best].n))
                                best = n;
                share[best].n_instances++;
        }
}

static int count_pus(const struct dsv_topology *topo, int core_first, int n_cores) {
        int n = 0;
        for (int c = core_first; c < core_first + n_cores; c++)
                n += topo->cores[c].n_pus;
        return n;
}

/* Cuts node `node`'s free cores into share->n_instances slices appended to p. */
static void place_on_node(const struct dsv_topology *topo, int node, const struct node_share *share,
                          struct dsv_policy_placement *p) {
        int k = share->n_instances, f = share->n;
        if (k > f) {
                p->oversubscribed = true;
                add_warning(p, "node %d: %d instances on %d free cores: instances share cores",
                            topo->nodes[node].os_index, k, f);
        }
        int next = share->first;
        for (int j = 0; j < k; j++) {
                struct dsv_policy_instance *inst = &p->instances[p->n_instances++];
                inst->node = node;
                inst->mem_node_os = topo->nodes[node].os_index;
                if (k > f) {
                        inst->core_first = share->first + j % f;
                        inst->n_cores = 1;
                        inst->shared = true;
                } else {
                        inst->core_first = next;
                        inst->n_cores = f / k + (j < f % k);
                        inst->shared = false;
                        next += inst->n_cores;
                }
                inst->n_pus = count_pus(topo, inst->core_first, inst->n_cores);
        }
}

int dsv_policy_place_instances(const struct dsv_topology *topo, const struct dsv_policy_place_request *req,
                               struct dsv_policy_placement *ret) {
        if (!topo || !req || !ret || req->n_instances < 0 || req->threads_per_instance < 0 ||
            req->housekeeping < 0 || req->housekeeping >= DSV_POLICY_HOUSEKEEPING_COUNT)
                return -EINVAL;
        int r = dsv_topology_check(topo);
        if (r < 0)
                return r;

        struct dsv_policy_placement p;
        memset(&p, 0, sizeof p);
        p.housekeeping_core = -1;
        if (req->housekeeping == DSV_POLICY_HOUSEKEEPING_AUTO && topo->n_cores > 2)
                for (int n = 0; n < topo->n_nodes && p.housekeeping_core < 0; n++)
                        if (topo->nodes[n].n_cores > 0)
                                p.housekeeping_core = topo->nodes[n].core_first;

        struct node_share share[DSV_TOPOLOGY_MAX_NODES];
        int n_usable = 0;
        for (int n = 0; n < topo->n_nodes; n++) {
                const struct dsv_topology_node *node = &topo->nodes[n];
                bool has_hk = p.housekeeping_core >= 0 && topo->cores[p.housekeeping_core].node == n;
                share[n] = (struct node_share){node->core_first + has_hk, node->n_cores - has_hk, 0};
                n_usable += share[n].n > 0;
        }
        if (n_usable == 0)
                return -EINVAL;
        int n_instances = req->n_instances ? req->n_instances : n_usable;
        if (n_instances > DSV_POLICY_MAX_INSTANCES)
                return -E2BIG;

        count_instances(share, topo->n_nodes, n_usable, n_instances);
        for (int n = 0; n < topo->n_nodes; n++) {
                if (share[n].n_instances > 0) {
                        place_on_node(topo, n, &share[n], &p);
                        continue;
                }
                p.unused_nodes[p.n_unused_nodes++] = n;
                if (share[n].n > 0)
                        add_warning(&p, "node %d: no instance, %d cores idle", topo->nodes[n].os_index, share[n].n);
                else if (topo->nodes[n].n_cores > 0)
                        add_warning(&p, "node %d: its only core is kept for housekeeping", topo->nodes[n].os_index);
        }

        for (int i = 0; i < p.n_instances; i++) {
                struct dsv_policy_instance *inst = &p.instances[i];
                inst->n_threads = req->threads_per_instance ? req->threads_per_instance : inst->n_cores;
                if (inst->n_threads > inst->n_cores) {
                        p.oversubscribed = true;
                        add_warning(&p, "instance %d: %d threads on %d core%s (%d CPU%s)", i, inst->n_threads,
                                    inst->n_cores, inst->n_cores == 1 ? "" : "s", inst->n_pus,
                                    inst->n_pus == 1 ? "" : "s");
                }
        }
        *ret = p;
        return 0;
}

int dsv_policy_instance_cpus(const struct dsv_topology *topo, const struct dsv_policy_instance *inst,
                             int *cpus, size_t cap) {
        if (!topo || !inst || (!cpus && cap > 0) || inst->core_first < 0 || inst->n_cores < 0 ||
            inst->core_first + inst->n_cores > topo->n_cores || topo->n_cores > DSV_TOPOLOGY_MAX_CORES)
                return -EINVAL;
        size_t n = 0;
        for (int c = inst->core_first; c < inst->core_first + inst->n_cores; c++) {
                const struct dsv_topology_core *core = &topo->cores[c];
                if (core->pu_first < 0 || core->n_pus < 0 || core->pu_first + core->n_pus > topo->n_pus)
                        return -EINVAL;
                for (int u = 0; u < core->n_pus; u++) {
                        if (n >= cap)
                                return -ENOBUFS;
                        cpus[n++] = topo->pus[core->pu_first + u];
                }
        }
        return (int)n;
}

static int cmp_int(const void *a, const void *b) {
        int x = *(const int *)a, y = *(const int *)b;
        return (x > y) - (x < y);
}

int dsv_policy_cpulist_format(const int *cpus, size_t n, char *buf, size_t size) {
        if ((!cpus && n > 0) || !buf || size == 0 || n > DSV_TOPOLOGY_MAX_PUS)
                return -EINVAL;
        int sorted[DSV_TOPOLOGY_MAX_PUS];
        for (size_t i = 0; i < n; i++) {
                if (cpus[i] < 0)
                        return -EINVAL;
                sorted[i] = cpus[i];
        }
        qsort(sorted, n, sizeof sorted[0], cmp_int);

        size_t len = 0;
        buf[0] = '\0';
        for (size_t i = 0; i < n;) {
                size_t j = i;
                while (j + 1 < n && sorted[j + 1] <= sorted[j] + 1)
                        j++; /* a run of consecutive numbers, duplicates included */
                int w = sorted[j] == sorted[i]
                                ? snprintf(buf + len, size - len, "%s%d", len ? "," : "", sorted[i])
                                : snprintf(buf + len, size - len, "%s%d-%d", len ? "," : "", sorted[i], sorted[j]);
                if (w < 0 || (size_t)w >= size - len)
                        return -ENOBUFS;
                len += (size_t)w;
                i = j + 1;
        }
        return (int)len;
}
