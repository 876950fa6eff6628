/* dsvisor plan: a dry run of instance placement. Reads the topology
 * (this machine as given to dsvisor, an hwloc synthetic string or an XML file), places
 * the instances as `dsvisor start` would (placement.c), and prints the given set and what it
 * left out, per instance the node, cores, CPU list, memory node and threads, the
 * housekeeping CPUs and the warnings; with --json, one JSON object. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "sup.h"

static void plan_usage(FILE *out) {
        fprintf(out,
                "usage: dsvisor plan [--instances N] [--threads-per-instance T]\n"
                "                    [--topology SYNTHETIC | --topology-xml FILE] [--no-housekeeping]\n"
                "                    [--cpus LIST] [--housekeeping-cpus LIST] [--json]\n"
                "\n"
                "Prints where 'dsvisor start' would run each instance, without starting anything.\n"
                "  --instances N               instances to place (default: one per NUMA node)\n"
                "  --threads-per-instance T    compute threads per instance (default: its cores)\n"
                "  --topology SYNTHETIC        an hwloc synthetic machine, e.g. 'pack:2 numa:2 core:16 pu:2'\n"
                "  --topology-xml FILE         a machine saved with 'lstopo FILE.xml'\n"
                "  --no-housekeeping           give every core to instances (default: keep one core\n"
                "                              of node 0 for the supervisor when there are more than 2)\n"
                "  --cpus LIST                 CPUs instances may use, e.g. 2-15 (default: every CPU\n"
                "                              dsvisor was given)\n"
                "  --housekeeping-cpus LIST    CPUs kept for the supervisor, gateway and IRQs\n"
                "  --json                      print one JSON object\n");
}

static int parse_count(const char *s, int *ret) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (errno || end == s || *end || v < 1 || v > INT_MAX)
                return -EINVAL;
        *ret = (int)v;
        return 0;
}

struct plan_view {
        const struct dsv_topology *topo;
        const struct dsv_policy_placement *plan;
        const struct sup_placement *placed;
        const char *source;
        const char *description;
};

/* The OS CPU numbers of a core range, as a cpulist string. */
static int format_cores(const struct dsv_topology *topo, int core_first, int n_cores, int *cpus, char *list,
                        size_t size) {
        struct dsv_policy_instance range = {.core_first = core_first, .n_cores = n_cores};
        int n = dsv_policy_instance_cpus(topo, &range, cpus, DSV_TOPOLOGY_MAX_PUS);
        if (n < 0)
                return n;
        int r = dsv_policy_cpulist_format(cpus, (size_t)n, list, size);
        return r < 0 ? r : n;
}

static int print_text(const struct plan_view *v) {
        const struct dsv_topology *topo = v->topo;
        const struct dsv_policy_placement *plan = v->plan;
        static int cpus[DSV_TOPOLOGY_MAX_PUS];
        static char list[DSV_TOPOLOGY_MAX_PUS * 6];

        const struct dsv_topology *given = &v->placed->given;
        printf("topology: %s%s%s%s, %d NUMA node%s, %d cores, %d CPUs\n", v->source, v->description ? " '" : "",
               v->description ? v->description : "", v->description ? "'" : "", given->n_nodes,
               given->n_nodes == 1 ? "" : "s", given->n_cores, given->n_pus);
        const struct dsv_given_set *g = &v->placed->given_set;
        printf("given: CPUs %s, memory nodes %s", g->cpus, g->mems);
        if (g->binding[0] || g->cgroup.version)
                printf(" (%s%s%s%s", g->binding[0] ? "affinity " : "", g->binding, g->binding[0] && g->cgroup.version ? "; " : "",
                       g->cgroup.version ? "cgroup" : "");
        if (g->cgroup.version)
                printf(" v%d %s: CPUs %s, nodes %s", g->cgroup.version, g->cgroup.group, g->cgroup.cpus, g->cgroup.mems);
        printf("%s\n", g->binding[0] || g->cgroup.version ? ")" : "");
        if (g->cpus_left_out[0] || g->mems_left_out[0])
                printf("left out: CPUs %s, memory nodes %s\n", g->cpus_left_out[0] ? g->cpus_left_out : "none",
                       g->mems_left_out[0] ? g->mems_left_out : "none");
        if (plan->housekeeping_core >= 0) {
                int r = format_cores(topo, plan->housekeeping_core, 1, cpus, list, sizeof list);
                if (r < 0)
                        return r;
                printf("housekeeping: CPUs %s (node %d)\n", list,
                       topo->nodes[topo->cores[plan->housekeeping_core].node].os_index);
        } else if (v->placed->chosen && v->placed->n_housekeeping > 0) {
                int r = dsv_policy_cpulist_format(v->placed->housekeeping, (size_t)v->placed->n_housekeeping, list,
                                                  sizeof list);
                if (r < 0)
                        return r;
                printf("housekeeping: CPUs %s\n", list);
        } else {
                printf("housekeeping: none\n");
        }
        for (int i = 0; i < plan->n_instances; i++) {
                const struct dsv_policy_instance *inst = &plan->instances[i];
                int r = format_cores(topo, inst->core_first, inst->n_cores, cpus, list, sizeof list);
                if (r < 0)
                        return r;
                printf("instance %d: node %d, %d core%s, CPUs %s, memory node %d, %d thread%s%s\n", i,
                       topo->nodes[inst->node].os_index, inst->n_cores, inst->n_cores == 1 ? "" : "s", list,
                       inst->mem_node_os, inst->n_threads, inst->n_threads == 1 ? "" : "s",
                       inst->shared ? " (shared cores)" : "");
        }
        if (plan->n_unused_nodes > 0) {
                printf("unused nodes:");
                for (int i = 0; i < plan->n_unused_nodes; i++)
                        printf(" %d", topo->nodes[plan->unused_nodes[i]].os_index);
                printf("\n");
        }
        for (int i = 0; i < plan->n_warnings; i++)
                printf("warning: %s\n", plan->warnings[i]);
        return 0;
}

static cJSON *int_array(const int *v, int n) {
        cJSON *a = cJSON_CreateArray();
        for (int i = 0; a && i < n; i++)
                if (!cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]))) {
                        cJSON_Delete(a);
                        return NULL;
                }
        return a;
}

/* Adds {"n_cores", "cores", "cpus", "cpulist"} for a core range to obj. */
static int add_core_range(cJSON *obj, const struct dsv_topology *topo, int core_first, int n_cores) {
        static int cpus[DSV_TOPOLOGY_MAX_PUS];
        static char list[DSV_TOPOLOGY_MAX_PUS * 6];
        int cores[DSV_TOPOLOGY_MAX_CORES];
        int n = format_cores(topo, core_first, n_cores, cpus, list, sizeof list);
        if (n < 0)
                return n;
        for (int c = 0; c < n_cores; c++)
                cores[c] = core_first + c;
        if (!cJSON_AddNumberToObject(obj, "n_cores", n_cores) ||
            !cJSON_AddItemToObject(obj, "cores", int_array(cores, n_cores)) ||
            !cJSON_AddItemToObject(obj, "cpus", int_array(cpus, n)) || !cJSON_AddStringToObject(obj, "cpulist", list))
                return -ENOMEM;
        return 0;
}

static int build_json(const struct plan_view *v, cJSON *root) {
        const struct dsv_topology *topo = v->topo;
        const struct dsv_policy_placement *plan = v->plan;
        int r;

        cJSON *t = cJSON_AddObjectToObject(root, "topology");
        if (!t || !cJSON_AddStringToObject(t, "source", v->source) ||
            !(v->description ? cJSON_AddStringToObject(t, "description", v->description)
                             : cJSON_AddNullToObject(t, "description")) ||
            !cJSON_AddNumberToObject(t, "nodes", v->placed->given.n_nodes) ||
            !cJSON_AddNumberToObject(t, "cores", v->placed->given.n_cores) ||
            !cJSON_AddNumberToObject(t, "cpus", v->placed->given.n_pus))
                return -ENOMEM;

        const struct dsv_given_set *g = &v->placed->given_set;
        cJSON *given = cJSON_AddObjectToObject(root, "given");
        if (!given || !cJSON_AddStringToObject(given, "cpus", g->cpus) ||
            !cJSON_AddStringToObject(given, "mems", g->mems) ||
            !cJSON_AddStringToObject(given, "cpus_left_out", g->cpus_left_out) ||
            !cJSON_AddStringToObject(given, "mems_left_out", g->mems_left_out) ||
            !(g->binding[0] ? cJSON_AddStringToObject(given, "affinity", g->binding)
                            : cJSON_AddNullToObject(given, "affinity")))
                return -ENOMEM;
        if (g->cgroup.version) {
                cJSON *cg = cJSON_AddObjectToObject(given, "cgroup");
                if (!cg || !cJSON_AddNumberToObject(cg, "version", g->cgroup.version) ||
                    !cJSON_AddStringToObject(cg, "group", g->cgroup.group) ||
                    !cJSON_AddStringToObject(cg, "cpus", g->cgroup.cpus) ||
                    !cJSON_AddStringToObject(cg, "mems", g->cgroup.mems))
                        return -ENOMEM;
        } else if (!cJSON_AddNullToObject(given, "cgroup")) {
                return -ENOMEM;
        }

        if (plan->housekeeping_core < 0 && v->placed->chosen && v->placed->n_housekeeping > 0) {
                static char list[DSV_TOPOLOGY_MAX_PUS * 6];
                cJSON *hk = cJSON_AddObjectToObject(root, "housekeeping");
                if ((r = dsv_policy_cpulist_format(v->placed->housekeeping, (size_t)v->placed->n_housekeeping, list,
                                                   sizeof list)) < 0)
                        return r;
                if (!hk || !cJSON_AddItemToObject(hk, "cpus", int_array(v->placed->housekeeping, v->placed->n_housekeeping)) ||
                    !cJSON_AddStringToObject(hk, "cpulist", list))
                        return -ENOMEM;
        } else if (plan->housekeeping_core >= 0) {
                cJSON *hk = cJSON_AddObjectToObject(root, "housekeeping");
                if (!hk ||
                    !cJSON_AddNumberToObject(hk, "node", topo->nodes[topo->cores[plan->housekeeping_core].node].os_index))
                        return -ENOMEM;
                if ((r = add_core_range(hk, topo, plan->housekeeping_core, 1)) < 0)
                        return r;
        } else if (!cJSON_AddNullToObject(root, "housekeeping")) {
                return -ENOMEM;
        }

        cJSON *insts = cJSON_AddArrayToObject(root, "instances");
        if (!insts)
                return -ENOMEM;
        for (int i = 0; i < plan->n_instances; i++) {
                const struct dsv_policy_instance *inst = &plan->instances[i];
                cJSON *o = cJSON_CreateObject();
                if (!o)
                        return -ENOMEM;
                cJSON_AddItemToArray(insts, o); /* cannot fail: both are non-NULL */
                if (!cJSON_AddNumberToObject(o, "id", i) ||
                    !cJSON_AddNumberToObject(o, "node", topo->nodes[inst->node].os_index) ||
                    !cJSON_AddNumberToObject(o, "memory_node", inst->mem_node_os) ||
                    !cJSON_AddNumberToObject(o, "threads", inst->n_threads) ||
                    !cJSON_AddBoolToObject(o, "shared", inst->shared))
                        return -ENOMEM;
                if ((r = add_core_range(o, topo, inst->core_first, inst->n_cores)) < 0)
                        return r;
        }

        int unused[DSV_TOPOLOGY_MAX_NODES];
        for (int i = 0; i < plan->n_unused_nodes; i++)
                unused[i] = topo->nodes[plan->unused_nodes[i]].os_index;
        cJSON *warnings = cJSON_AddArrayToObject(root, "warnings");
        if (!cJSON_AddItemToObject(root, "unused_nodes", int_array(unused, plan->n_unused_nodes)) ||
            !cJSON_AddBoolToObject(root, "oversubscribed", plan->oversubscribed) || !warnings)
                return -ENOMEM;
        for (int i = 0; i < plan->n_warnings; i++)
                if (!cJSON_AddItemToArray(warnings, cJSON_CreateString(plan->warnings[i])))
                        return -ENOMEM;
        return 0;
}

static int print_json(const struct plan_view *v) {
        cJSON *root = cJSON_CreateObject();
        if (!root)
                return -ENOMEM;
        int r = build_json(v, root);
        char *text = r == 0 ? cJSON_Print(root) : NULL;
        if (r == 0 && !text)
                r = -ENOMEM;
        if (text)
                printf("%s\n", text);
        cJSON_free(text);
        cJSON_Delete(root);
        return r;
}

int dsv_cmd_plan(int argc, char **argv) {
        enum {
                OPT_INSTANCES = 256,
                OPT_THREADS,
                OPT_TOPOLOGY,
                OPT_TOPOLOGY_XML,
                OPT_NO_HOUSEKEEPING,
                OPT_CPUS,
                OPT_HOUSEKEEPING_CPUS,
                OPT_JSON
        };
        static const struct option options[] = {
                {"instances", required_argument, NULL, OPT_INSTANCES},
                {"threads-per-instance", required_argument, NULL, OPT_THREADS},
                {"topology", required_argument, NULL, OPT_TOPOLOGY},
                {"topology-xml", required_argument, NULL, OPT_TOPOLOGY_XML},
                {"no-housekeeping", no_argument, NULL, OPT_NO_HOUSEKEEPING},
                {"cpus", required_argument, NULL, OPT_CPUS},
                {"housekeeping-cpus", required_argument, NULL, OPT_HOUSEKEEPING_CPUS},
                {"json", no_argument, NULL, OPT_JSON},
                {"help", no_argument, NULL, 'h'},
                {0},
        };
        int n_instances = 0, threads_per_instance = 0;
        bool no_housekeeping = false;
        const char *cpus = NULL, *housekeeping_cpus = NULL;
        enum dsv_topo_source source = DSV_TOPO_SOURCE_SYSTEM;
        const char *source_arg = NULL;
        bool json = false;

        optind = 0; /* GNU getopt: reinitialise, argv[0] is the subcommand */
        int opt;
        while ((opt = getopt_long(argc, argv, "h", options, NULL)) != -1) {
                switch (opt) {
                case OPT_INSTANCES:
                case OPT_THREADS:
                        if (parse_count(optarg, opt == OPT_INSTANCES ? &n_instances : &threads_per_instance) < 0) {
                                fprintf(stderr, "dsvisor plan: --%s needs a positive integer, not '%s'\n",
                                        opt == OPT_INSTANCES ? "instances" : "threads-per-instance", optarg);
                                return 2;
                        }
                        break;
                case OPT_TOPOLOGY:
                case OPT_TOPOLOGY_XML:
                        if (source != DSV_TOPO_SOURCE_SYSTEM) {
                                fprintf(stderr, "dsvisor plan: give --topology or --topology-xml once\n");
                                return 2;
                        }
                        source = opt == OPT_TOPOLOGY ? DSV_TOPO_SOURCE_SYNTHETIC : DSV_TOPO_SOURCE_XML;
                        source_arg = optarg;
                        break;
                case OPT_NO_HOUSEKEEPING:
                        no_housekeeping = true;
                        break;
                case OPT_CPUS:
                        cpus = optarg;
                        break;
                case OPT_HOUSEKEEPING_CPUS:
                        housekeeping_cpus = optarg;
                        break;
                case OPT_JSON:
                        json = true;
                        break;
                case 'h':
                        plan_usage(stdout);
                        return 0;
                default:
                        plan_usage(stderr);
                        return 2;
                }
        }
        if (optind < argc) {
                fprintf(stderr, "dsvisor plan: unexpected argument '%s'\n", argv[optind]);
                plan_usage(stderr);
                return 2;
        }

        static struct sup_placement placed;
        char why[512];
        struct sup_place_request place = {
                .source = source,
                .source_arg = source_arg,
                .n_instances = n_instances,
                .threads_per_instance = threads_per_instance,
                .no_housekeeping = no_housekeeping,
                .cpus = cpus,
                .housekeeping_cpus = housekeeping_cpus,
        };
        int r = sup_place(&place, &placed, why, sizeof why);
        if (r < 0) {
                fprintf(stderr, "dsvisor plan: %s\n", why);
                return 1;
        }
        struct plan_view view = {&placed.topo, &placed.plan, &placed, dsv_topo_source_to_string(source), source_arg};
        r = json ? print_json(&view) : print_text(&view);
        if (r < 0) {
                fprintf(stderr, "dsvisor plan: failed to print the plan: %s\n", strerror(-r));
                return 1;
        }
        return 0;
}
