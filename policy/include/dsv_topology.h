/* dsv_topology.h — the machine's shape as plain data: NUMA nodes → cores → PUs.
 *
 * This header is vocabulary only (no functions), shared by the two sides of one
 * contract: supervisor/platform/topo.c fills it from hwloc, and policy/ reads it. It lives
 * with policy, the consumer, so that policy never sees an hwloc type and platform never
 * sees policy logic (tests/check-layering.sh).
 *
 *     static struct dsv_topology topo;                 // ~50 KiB: static or heap
 *     int r = dsv_topo_load(DSV_TOPO_SOURCE_SYSTEM, NULL, &topo);   // dsv_platform.h
 *     for (int n = 0; n < topo.n_nodes; n++)
 *             for (int c = 0; c < topo.nodes[n].n_cores; c++) {
 *                     const struct dsv_topology_core *core = &topo.cores[topo.nodes[n].core_first + c];
 *                     // topo.pus[core->pu_first .. core->pu_first + core->n_pus) are OS CPU numbers
 *             }
 *
 * Ownership: the struct is fixed-capacity and self-contained (indexes, no pointers);
 * whoever declares it owns it, and it can be copied with memcpy.
 *
 * Layout invariants (dsv_topology_check() in dsv_policy.h verifies them):
 *   - nodes[] are in hwloc logical order; node n owns the contiguous core range
 *     cores[core_first, core_first + n_cores), and the ranges follow node order;
 *   - core c owns the contiguous PU range pus[pu_first, pu_first + n_pus): its SMT
 *     siblings, in logical order;
 *   - a node may have no cores (memory-only node, e.g. CXL or HBM).
 */
#ifndef DSV_TOPOLOGY_H
#define DSV_TOPOLOGY_H

#include <stdint.h>

#define DSV_TOPOLOGY_MAX_NODES 64
#define DSV_TOPOLOGY_MAX_CORES 2048
#define DSV_TOPOLOGY_MAX_PUS   4096

struct dsv_topology_node {
        int os_index;          /* NUMA node number for cpuset.mems, mbind, numactl */
        int core_first;        /* first index into dsv_topology.cores */
        int n_cores;
        uint64_t memory_bytes; /* local memory; 0 when unknown */
};

struct dsv_topology_core {
        int os_index;          /* core id as the OS numbers it; -1 when unknown */
        int node;              /* index into dsv_topology.nodes */
        int pu_first;          /* first index into dsv_topology.pus */
        int n_pus;             /* SMT siblings: 1 without SMT */
};

struct dsv_topology {
        int n_nodes;
        int n_cores;
        int n_pus;
        struct dsv_topology_node nodes[DSV_TOPOLOGY_MAX_NODES];
        struct dsv_topology_core cores[DSV_TOPOLOGY_MAX_CORES];
        int pus[DSV_TOPOLOGY_MAX_PUS]; /* OS CPU numbers (sched_setaffinity, cpuset.cpus) */
};

#endif
