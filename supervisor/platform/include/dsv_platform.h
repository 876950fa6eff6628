/* dsv_platform.h — the OS behind plain structs: topology (hwloc), cgroups (libcgroup and
 * dsvisor's own cgroupfs writer), hugepages. Every function returns 0 (or a count) on
 * success and a negative errno on failure; foreign error codes are converted here, once.
 * Nothing in this library logs: the caller (dsvisor) reports.
 *
 *     static struct dsv_topology topo;
 *     int r = dsv_topo_load(DSV_TOPO_SOURCE_SYNTHETIC, "pack:2 numa:2 core:16 pu:2", &topo);
 *     if (r < 0)
 *             return log_errno(r, "Failed to read the topology: %m");
 *     // topo.n_nodes == 4, topo.n_cores == 64, topo.n_pus == 128
 *
 * Ownership: results are written into caller-owned structs; no function here keeps a
 * pointer to its arguments or returns memory the caller must free, unless its comment
 * says so.
 */
#ifndef DSV_PLATFORM_H
#define DSV_PLATFORM_H

#include "dsv_topology.h"

/* ---- topology (topo.c, hwloc) ------------------------------------------------------ */

enum dsv_topo_source {
        DSV_TOPO_SOURCE_SYSTEM,    /* this machine, as far as our cpuset allows; arg NULL */
        DSV_TOPO_SOURCE_SYNTHETIC, /* arg: hwloc synthetic string, "pack:2 numa:2 core:16 pu:2" */
        DSV_TOPO_SOURCE_XML,       /* arg: path of an XML file written by `lstopo x.xml` */
        DSV_TOPO_SOURCE_COUNT
};

const char *dsv_topo_source_to_string(enum dsv_topo_source src);

/* Reads a topology into *ret (written only on success): NUMA nodes in logical order,
 * each node's cores, each core's PUs (OS numbers). Only allowed PUs are listed for
 * SYSTEM. A machine without Core objects gets one core per PU. A core inside the cpusets
 * of several nodes (DDR and HBM nodes of one socket) is listed under the first; such
 * memory-only nodes get no cores.
 * Returns 0; -EINVAL for a bad source, NULL or unparsable arg; -ENOENT when the XML file
 * is missing; -E2BIG when the machine exceeds DSV_TOPOLOGY_MAX_*; another -errno from
 * hwloc. */
int dsv_topo_load(enum dsv_topo_source src, const char *arg, struct dsv_topology *ret);

/* ---- cgroups (cgroup*.c) ----------------------------------------------------------- */
/* Worker cgroup slices (cpuset.cpus, cpuset.mems, memory.max) under dsvisor's own subtree: engineer "c". */

/* ---- hugepages (hugepages.c) ------------------------------------------------------- */
/* Per-node hugetlb pools and the shared weight image (memfd MFD_HUGETLB): engineer "c". */

#endif
