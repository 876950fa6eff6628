/* topo.c — hwloc behind struct dsv_topology (dsv_platform.h, "topology" and "the given
 * set").
 *
 * hwloc 2.x attaches NUMA nodes as memory children, so a node's cores are found through
 * its cpuset, not its children: every Core (or PU, on machines without Core objects)
 * whose cpuset lies inside the node's cpuset belongs to that node.
 *
 * The given set is hwloc's allowed sets (the host cgroup hwloc reads itself) narrowed
 * by the binding and by the cgroup named in the source; the topology is then restricted
 * to it with hwloc_topology_restrict(), so a disallowed CPU or node never reaches
 * policy. */
#include <errno.h>
#include <hwloc.h>
#include <stdio.h>
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

/* Narrows cpus and nodes to the binding, memory policy and cgroup of *src; describes
 * what applied in *g. */
static int given_narrow(hwloc_topology_t h, enum dsv_topo_source source, const struct dsv_given_source *src,
                        hwloc_bitmap_t cpus, hwloc_bitmap_t nodes, struct dsv_given_set *g) {
        hwloc_bitmap_t b = hwloc_bitmap_alloc();
        if (!b)
                return -ENOMEM;
        int r = 0;
        /* HWLOC_SYNTHETIC/HWLOC_XMLFILE replace this machine: then nothing of this
         * process applies to it. */
        bool own = src->own && source == DSV_TOPO_SOURCE_SYSTEM && hwloc_topology_is_thissystem(h);
        if (src->affinity) {
                if (hwloc_bitmap_list_sscanf(b, src->affinity) < 0)
                        r = -EINVAL;
        } else if (own && hwloc_get_cpubind(h, b, HWLOC_CPUBIND_PROCESS) < 0) {
                r = hwloc_errno();
        }
        if (r == 0 && (src->affinity || own)) {
                hwloc_bitmap_and(cpus, cpus, b);
                hwloc_bitmap_list_snprintf(g->binding, sizeof g->binding, b);
        }
        hwloc_membind_policy_t policy;
        /* The memory policy is per thread; the one starting dsvisor is the one asked. */
        if (r == 0 && own &&
            hwloc_get_membind(h, b, &policy, HWLOC_MEMBIND_THREAD | HWLOC_MEMBIND_BYNODESET) == 0 &&
            policy == HWLOC_MEMBIND_BIND)
                hwloc_bitmap_and(nodes, nodes, b);

        const char *root = src->cgroup_root ? src->cgroup_root : own ? "/sys/fs/cgroup" : NULL;
        if (r == 0 && root) {
                int c = dsv_given_cgroup_read(root, src->proc_self_cgroup, &g->cgroup);
                if (c == 0 && hwloc_bitmap_list_sscanf(b, g->cgroup.cpus) == 0) {
                        hwloc_bitmap_and(cpus, cpus, b);
                        c = hwloc_bitmap_list_sscanf(b, g->cgroup.mems) == 0 ? 0 : -EBADMSG;
                } else if (c == 0) {
                        c = -EBADMSG;
                }
                if (c == 0)
                        hwloc_bitmap_and(nodes, nodes, b);
                else
                        memset(&g->cgroup, 0, sizeof g->cgroup);
                /* hwloc has read this host's cgroup already; only a named tree must be read. */
                if (c < 0 && c != -ENOENT && src->cgroup_root)
                        r = c;
        }
        hwloc_bitmap_free(b);
        return r;
}

/* Restricts h to the given set and describes it in *g. */
static int given_restrict(hwloc_topology_t h, enum dsv_topo_source source, const struct dsv_given_source *src,
                          struct dsv_given_set *g) {
        hwloc_bitmap_t cpus = hwloc_bitmap_dup(hwloc_topology_get_allowed_cpuset(h));
        hwloc_bitmap_t nodes = hwloc_bitmap_dup(hwloc_topology_get_allowed_nodeset(h));
        int r = cpus && nodes ? given_narrow(h, source, src, cpus, nodes, g) : -ENOMEM;
        if (r == 0 && (hwloc_bitmap_iszero(cpus) || hwloc_bitmap_iszero(nodes)))
                r = -ENODEV;
        errno = 0;
        /* Nodes left without a given CPU go too: no instance could run there, and
         * hwloc would otherwise reorder them. */
        if (r == 0 && !hwloc_bitmap_isequal(cpus, hwloc_topology_get_complete_cpuset(h)) &&
            hwloc_topology_restrict(h, cpus, HWLOC_RESTRICT_FLAG_REMOVE_CPULESS) < 0)
                r = hwloc_errno();
        /* Nodes whose memory is not given go, and with them their CPUs: convert() lists
         * only cores inside a remaining node. */
        if (r == 0 && !hwloc_bitmap_isequal(nodes, hwloc_topology_get_complete_nodeset(h)) &&
            hwloc_topology_restrict(h, nodes, HWLOC_RESTRICT_FLAG_BYNODESET) < 0)
                r = hwloc_errno();
        hwloc_bitmap_free(cpus);
        hwloc_bitmap_free(nodes);
        return r;
}

/* Fills the lists of *g from the result t and the machine's complete sets. */
static void given_describe(const struct dsv_topology *t, hwloc_const_bitmap_t machine_cpus,
                           hwloc_const_bitmap_t machine_nodes, struct dsv_given_set *g) {
        hwloc_bitmap_t cpus = hwloc_bitmap_alloc(), nodes = hwloc_bitmap_alloc();
        hwloc_bitmap_t out = hwloc_bitmap_alloc();
        if (cpus && nodes && out) {
                for (int i = 0; i < t->n_pus; i++)
                        hwloc_bitmap_set(cpus, (unsigned)t->pus[i]);
                for (int n = 0; n < t->n_nodes; n++)
                        hwloc_bitmap_set(nodes, (unsigned)t->nodes[n].os_index);
                hwloc_bitmap_list_snprintf(g->cpus, sizeof g->cpus, cpus);
                hwloc_bitmap_list_snprintf(g->mems, sizeof g->mems, nodes);
                hwloc_bitmap_andnot(out, machine_cpus, cpus);
                hwloc_bitmap_list_snprintf(g->cpus_left_out, sizeof g->cpus_left_out, out);
                hwloc_bitmap_andnot(out, machine_nodes, nodes);
                hwloc_bitmap_list_snprintf(g->mems_left_out, sizeof g->mems_left_out, out);
        }
        hwloc_bitmap_free(cpus);
        hwloc_bitmap_free(nodes);
        hwloc_bitmap_free(out);
}

int dsv_topo_load(enum dsv_topo_source src, const char *arg, struct dsv_topology *ret) {
        const struct dsv_given_source own = {.own = true};
        return dsv_topo_load_given(src, arg, src == DSV_TOPO_SOURCE_SYSTEM ? &own : NULL, ret, NULL);
}

int dsv_topo_load_given(enum dsv_topo_source src, const char *arg, const struct dsv_given_source *given,
                        struct dsv_topology *ret, struct dsv_given_set *ret_given) {
        if (!ret || src < 0 || src >= DSV_TOPO_SOURCE_COUNT)
                return -EINVAL;
        if (src != DSV_TOPO_SOURCE_SYSTEM && (!arg || !*arg))
                return -EINVAL;

        hwloc_topology_t h;
        if (hwloc_topology_init(&h) < 0)
                return hwloc_errno();
        hwloc_bitmap_t machine_cpus = NULL, machine_nodes = NULL;
        struct dsv_given_set *g = calloc(1, sizeof *g);
        int r = g ? 0 : -ENOMEM;
        errno = 0;
        /* Keep the disallowed part in view, to say what was left out. */
        if (r == 0 && given && src == DSV_TOPO_SOURCE_SYSTEM &&
            hwloc_topology_set_flags(h, HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED) < 0)
                r = hwloc_errno();
        if (r == 0 && src == DSV_TOPO_SOURCE_SYNTHETIC && hwloc_topology_set_synthetic(h, arg) < 0)
                r = -EINVAL;
        else if (r == 0 && src == DSV_TOPO_SOURCE_XML && hwloc_topology_set_xml(h, arg) < 0)
                r = hwloc_errno();
        if (r == 0 && hwloc_topology_load(h) < 0)
                r = hwloc_errno();
        if (r == 0) {
                machine_cpus = hwloc_bitmap_dup(hwloc_topology_get_complete_cpuset(h));
                machine_nodes = hwloc_bitmap_dup(hwloc_topology_get_complete_nodeset(h));
                if (!machine_cpus || !machine_nodes)
                        r = -ENOMEM;
        }
        if (r == 0 && given)
                r = given_restrict(h, src, given, g);
        if (r == 0) {
                /* Convert into a scratch copy so *ret is written only on success. */
                struct dsv_topology *scratch = malloc(sizeof *scratch);
                r = scratch ? convert(h, scratch) : -ENOMEM;
                if (r == 0) {
                        given_describe(scratch, machine_cpus, machine_nodes, g);
                        memcpy(ret, scratch, sizeof *scratch);
                        if (ret_given)
                                *ret_given = *g;
                }
                free(scratch);
        }
        hwloc_bitmap_free(machine_cpus);
        hwloc_bitmap_free(machine_nodes);
        free(g);
        hwloc_topology_destroy(h);
        return r;
}
