/* topology.c — the layout invariants of dsv_topology.h, checked once so placement can
 * index without re-validating. */
#include <errno.h>
#include <stdint.h>

#include "dsv_policy.h"

#define MAX_OS_CPU (1 << 16) /* Linux's NR_CPUS tops out at 8192; leave room */

int dsv_topology_check(const struct dsv_topology *topo) {
        if (!topo)
                return -EINVAL;
        if (topo->n_nodes < 1 || topo->n_nodes > DSV_TOPOLOGY_MAX_NODES || topo->n_cores < 0 ||
            topo->n_cores > DSV_TOPOLOGY_MAX_CORES || topo->n_pus < 0 || topo->n_pus > DSV_TOPOLOGY_MAX_PUS)
                return -EINVAL;

        int next_core = 0;
        for (int n = 0; n < topo->n_nodes; n++) {
                const struct dsv_topology_node *node = &topo->nodes[n];
                if (node->core_first != next_core || node->n_cores < 0 || node->os_index < 0)
                        return -EINVAL;
                next_core += node->n_cores;
                if (next_core > topo->n_cores)
                        return -EINVAL;
        }
        if (next_core != topo->n_cores)
                return -EINVAL;

        /* PU ranges: inside pus[], contiguous in core order; no OS number twice. */
        int next_pu = 0;
        for (int c = 0; c < topo->n_cores; c++) {
                const struct dsv_topology_core *core = &topo->cores[c];
                if (core->node < 0 || core->node >= topo->n_nodes)
                        return -EINVAL;
                const struct dsv_topology_node *node = &topo->nodes[core->node];
                if (c < node->core_first || c >= node->core_first + node->n_cores)
                        return -EINVAL;
                if (core->pu_first != next_pu || core->n_pus < 1 || core->pu_first + core->n_pus > topo->n_pus)
                        return -EINVAL;
                next_pu += core->n_pus;
        }
        if (next_pu != topo->n_pus)
                return -EINVAL;
        uint64_t seen[MAX_OS_CPU / 64] = {0};
        for (int i = 0; i < topo->n_pus; i++) {
                int cpu = topo->pus[i];
                if (cpu < 0 || cpu >= MAX_OS_CPU || (seen[cpu / 64] >> (cpu % 64) & 1))
                        return -EINVAL;
                seen[cpu / 64] |= 1ull << (cpu % 64);
        }
        return 0;
}
