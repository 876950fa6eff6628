/* topo.c — hwloc behind struct dsv_topology (dsv_platform.h, "topology").
 *
 * hwloc 2.x attaches NUMA nodes as memory children, so a node's cores are found through
 * its cpuset, not its children: every Core (or PU, on machines without Core objects)
 * whose cpuset lies inside the node's cpuset belongs to that node. */
#include <errno.h>
#include <hwloc.h>
#include <stdlib.h>
#include <string.h>

#include "dsv_platform.h"

const char *dsv_topo_source_to_string(enum dsv_topo_source src) {
        switch (src) {
        case DSV_TOPO_SOURCE_SYSTEM:
                return "system";
        case DSV_TOPO_SOURCE_SYNTHETIC:
                return "synthetic";
        case DSV_TOPO_SOURCE_XML:
                return "xml";
        default:
                return NULL;
        }
}

/* hwloc reports failure as -1 with errno set; errno may be 0 for a parse error. */
static int hwloc_errno(void) {
        return errno > 0 ? -errno : -EINVAL;
}

/* Appends one core and its PUs to *t. */
static int add_core(hwloc_topology_t h, hwloc_obj_t core, int node, struct dsv_topology *t) {
        if (t->n_cores >= DSV_TOPOLOGY_MAX_CORES)
                return -E2BIG;
        struct dsv_topology_core *c = &t->cores[t->n_cores];
        c->os_index = core->type == HWLOC_OBJ_PU || core->os_index == HWLOC_UNKNOWN_INDEX
                              ? -1
                              : (int)core->os_index;
        c->node = node;
        c->pu_first = t->n_pus;
        c->n_pus = 0;
        hwloc_obj_t pu = NULL;
        while ((pu = hwloc_get_next_obj_inside_cpuset_by_type(h, core->cpuset, HWLOC_OBJ_PU, pu))) {
                if (t->n_pus >= DSV_TOPOLOGY_MAX_PUS)
                        return -E2BIG;
                t->pus[t->n_pus++] = (int)pu->os_index;
                c->n_pus++;
        }
        if (c->n_pus == 0) /* a core with no allowed PU: leave it out */
                return 0;
        t->n_cores++;
        t->nodes[node].n_cores++;
        return 0;
}

static int convert(hwloc_topology_t h, struct dsv_topology *t) {
        int n_nodes = hwloc_get_nbobjs_by_type(h, HWLOC_OBJ_NUMANODE);
        if (n_nodes <= 0)
                return -ENODEV;
        if (n_nodes > DSV_TOPOLOGY_MAX_NODES)
                return -E2BIG;
        hwloc_obj_type_t core_type = hwloc_get_nbobjs_by_type(h, HWLOC_OBJ_CORE) > 0 ? HWLOC_OBJ_CORE
                                                                                     : HWLOC_OBJ_PU;
        hwloc_bitmap_t placed = hwloc_bitmap_alloc();
        if (!placed)
                return -ENOMEM;
        int r = 0;
        memset(t, 0, sizeof *t);
        t->n_nodes = n_nodes;
        for (int n = 0; n < n_nodes && r == 0; n++) {
                hwloc_obj_t node = hwloc_get_obj_by_type(h, HWLOC_OBJ_NUMANODE, (unsigned)n);
                t->nodes[n].os_index = (int)node->os_index;
                t->nodes[n].memory_bytes = node->attr ? node->attr->numanode.local_memory : 0;
                t->nodes[n].core_first = t->n_cores;
                hwloc_obj_t core = NULL;
                while (r == 0 &&
                       (core = hwloc_get_next_obj_inside_cpuset_by_type(h, node->cpuset, core_type, core))) {
                        if (hwloc_bitmap_intersects(placed, core->cpuset))
                                continue; /* already listed under an earlier node */
                        hwloc_bitmap_or(placed, placed, core->cpuset);
                        r = add_core(h, core, n, t);
                }
        }
        hwloc_bitmap_free(placed);
        if (r == 0 && t->n_cores == 0)
                r = -ENODEV;
        return r;
}

int dsv_topo_load(enum dsv_topo_source src, const char *arg, struct dsv_topology *ret) {
        if (!ret || src < 0 || src >= DSV_TOPO_SOURCE_COUNT)
                return -EINVAL;
        if (src != DSV_TOPO_SOURCE_SYSTEM && (!arg || !*arg))
                return -EINVAL;

        hwloc_topology_t h;
        if (hwloc_topology_init(&h) < 0)
                return hwloc_errno();
        int r = 0;
        errno = 0;
        if (src == DSV_TOPO_SOURCE_SYNTHETIC && hwloc_topology_set_synthetic(h, arg) < 0)
                r = -EINVAL;
        else if (src == DSV_TOPO_SOURCE_XML && hwloc_topology_set_xml(h, arg) < 0)
                r = hwloc_errno();
        if (r == 0 && hwloc_topology_load(h) < 0)
                r = hwloc_errno();
        if (r == 0) {
                /* Convert into a scratch copy so *ret is written only on success. */
                struct dsv_topology *scratch = malloc(sizeof *scratch);
                r = scratch ? convert(h, scratch) : -ENOMEM;
                if (r == 0)
                        memcpy(ret, scratch, sizeof *scratch);
                free(scratch);
        }
        hwloc_topology_destroy(h);
        return r;
}
