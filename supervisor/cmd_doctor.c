/* dsvisor doctor: the host tuning that steady P99 depends on, checked and explained.
 * Plans the instances like `dsvisor plan` (the CPUs and nodes the
 * checks are about), runs the platform checks over --root, adds the placement and the
 * engine's kernel level, and prints one line per check: status, value found, value
 * dsvisor wants, and why. Exit status: 0 ok (or unknown), 1 warn, 2 fail, 3 when the
 * doctor itself could not run (bad usage, unreadable topology). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "commands.h"
#include "dse.h"
#include "dsv_platform.h"
#include "dsv_policy.h"
#include "sup.h"

#define DOCTOR_EXIT_ERROR 3

static void doctor_usage(FILE *out) {
        fprintf(out,
                "usage: dsvisor doctor [--instances N] [--model FILE | --model-bytes N] [--root DIR]\n"
                "                      [--topology SYNTHETIC | --topology-xml FILE] [--pid PID]\n"
                "                      [--cpus LIST] [--housekeeping-cpus LIST] [--json]\n"
                "\n"
                "Checks the host settings dsvisor's latency depends on; one line per check with its\n"
                "status (ok, warn, fail, unknown), the value found, the value wanted and why.\n"
                "  --instances N          instances to plan for (default: one per NUMA node)\n"
                "  --model FILE           native model file: its size is the weight image per node\n"
                "  --model-bytes N        the weight image size in bytes, instead of --model\n"
                "  --root DIR             read /proc, /sys and /boot below DIR (default /; for tests)\n"
                "  --topology SYNTHETIC   an hwloc synthetic machine, e.g. 'pack:1 numa:2 core:4 pu:2'\n"
                "  --topology-xml FILE    a machine saved with 'lstopo FILE.xml'\n"
                "  --cpus LIST            CPUs instances may use (as dsvisor start --cpus)\n"
                "  --housekeeping-cpus L  CPUs kept for the supervisor (as dsvisor start)\n"
                "  --pid PID              check the limits, capabilities and cgroup of a running\n"
                "                         dsvisor (default: of this process)\n"
                "  --json                 print one JSON object\n"
                "Exit status: 0 all ok or unknown, 1 some warn, 2 some fail, 3 the doctor could not run.\n"
                "HugePages: one shared weight image per node that hosts instances, ceil(size / 2 MiB)\n"
                "pages on each such node, however many instances share it.\n");
}

static int parse_u64(const char *s, uint64_t min, uint64_t *ret) {
        char *end;
        errno = 0;
        if (*s == '-')
                return -EINVAL;
        unsigned long long v = strtoull(s, &end, 10);
        if (errno || end == s || *end || v < min)
                return -EINVAL;
        *ret = v;
        return 0;
}

/* The CPUs, housekeeping CPUs and nodes of a placement, for the doctor request. */
struct planned {
        int cpus[DSV_TOPOLOGY_MAX_PUS];
        size_t n_cpus;
        int hk[DSV_TOPOLOGY_MAX_PUS];
        size_t n_hk;
        int nodes[DSV_TOPOLOGY_MAX_NODES];
        size_t n_nodes;
};

static int collect(const struct sup_placement *placed, struct planned *p) {
        const struct dsv_topology *topo = &placed->topo;
        const struct dsv_policy_placement *plan = &placed->plan;
        static int buf[DSV_TOPOLOGY_MAX_PUS];
        memset(p, 0, sizeof *p);
        for (int i = 0; i < plan->n_instances; i++) {
                const struct dsv_policy_instance *inst = &plan->instances[i];
                int n = dsv_policy_instance_cpus(topo, inst, buf, DSV_TOPOLOGY_MAX_PUS);
                if (n < 0)
                        return n;
                for (int k = 0; k < n; k++) {
                        bool dup = false;
                        for (size_t j = 0; j < p->n_cpus && !dup; j++)
                                dup = p->cpus[j] == buf[k];
                        if (!dup && p->n_cpus < DSV_TOPOLOGY_MAX_PUS)
                                p->cpus[p->n_cpus++] = buf[k];
                }
                bool seen = false;
                for (size_t j = 0; j < p->n_nodes && !seen; j++)
                        seen = p->nodes[j] == inst->mem_node_os;
                if (!seen)
                        p->nodes[p->n_nodes++] = inst->mem_node_os;
        }
        if (plan->housekeeping_core >= 0) {
                struct dsv_policy_instance hk = {.core_first = plan->housekeeping_core, .n_cores = 1};
                int n = dsv_policy_instance_cpus(topo, &hk, p->hk, DSV_TOPOLOGY_MAX_PUS);
                if (n < 0)
                        return n;
                p->n_hk = (size_t)n;
        } else if (placed->chosen) {
                memcpy(p->hk, placed->housekeeping, (size_t)placed->n_housekeeping * sizeof p->hk[0]);
                p->n_hk = (size_t)placed->n_housekeeping;
        }
        return 0;
}

static int add_placement(struct dsv_doctor_report *rep, const struct dsv_policy_placement *plan,
                         const struct planned *p) {
        char cpus[128], found[256], nodes[64] = "";
        int r = dsv_policy_cpulist_format(p->cpus, p->n_cpus, cpus, sizeof cpus);
        if (r == -ENOBUFS)
                snprintf(cpus, sizeof cpus, "%zu CPUs", p->n_cpus);
        else if (r < 0)
                return r;
        for (size_t i = 0; i < p->n_nodes; i++) {
                size_t len = strlen(nodes);
                snprintf(nodes + len, sizeof nodes - len, "%s%d", i ? "," : "", p->nodes[i]);
        }
        snprintf(found, sizeof found, "%d instance%s on node%s %s, CPUs %s", plan->n_instances,
                 plan->n_instances == 1 ? "" : "s", p->n_nodes == 1 ? "" : "s", nodes, cpus);
        if (plan->oversubscribed || plan->n_warnings > 0)
                return dsv_doctor_report_add(rep, "placement", plan->oversubscribed ? DSV_DOCTOR_WARN : DSV_DOCTOR_OK,
                                             found, "one instance per node, whole cores",
                                             plan->warnings[0]);
        return dsv_doctor_report_add(rep, "placement", DSV_DOCTOR_OK, found, "one instance per node, whole cores",
                                     "the CPUs and nodes the other checks are about (see dsvisor plan)");
}

/* The CPUs and memory nodes dsvisor was given, and what of the machine they leave out. */
static int add_given(struct dsv_doctor_report *rep, const struct dsv_given_set *g) {
        char found[400], reason[400];
        snprintf(found, sizeof found, "CPUs %.100s, memory nodes %.40s%s%.100s%s%.40s", g->cpus, g->mems,
                 g->cpus_left_out[0] ? "; left out CPUs " : "", g->cpus_left_out,
                 g->mems_left_out[0] ? "; left out nodes " : "", g->mems_left_out);
        snprintf(reason, sizeof reason, "instances run only here: affinity %.80s, cgroup %.120s%s%.80s",
                 g->binding[0] ? g->binding : "not restricted", g->cgroup.version ? g->cgroup.group : "not restricted",
                 g->cgroup.version ? " cpuset " : "", g->cgroup.version ? g->cgroup.cpus : "");
        return dsv_doctor_report_add(rep, "given set", DSV_DOCTOR_OK, found,
                                     "the CPUs and nodes meant for dsvisor (taskset, AllowedCPUs=, pod cpuset)", reason);
}

/* What the engine resolved on this machine (only when --root is this host). */
static int add_engine(struct dsv_doctor_report *rep) {
        struct dse_cpu_info cpu;
        struct dse_diag diag = {{0}};
        const char *want = "the best level detected (DSV_CPU unset)";
        if (dse_cpu_detect(&cpu, &diag) < 0)
                return dsv_doctor_report_add(rep, "engine-kernels", DSV_DOCTOR_FAIL, diag.msg, want,
                                             "the engine refuses to start with this DSV_CPU");
        char found[160];
        snprintf(found, sizeof found, "using %s, detected %s", dse_cpu_level_to_string(cpu.level),
                 dse_cpu_level_to_string(cpu.detected));
        if (cpu.level < cpu.detected)
                return dsv_doctor_report_add(rep, "engine-kernels", DSV_DOCTOR_WARN, found, want,
                                             "DSV_CPU caps the kernels below what this CPU runs: slower tokens");
        if (cpu.level == DSE_CPU_SCALAR)
                return dsv_doctor_report_add(rep, "engine-kernels", DSV_DOCTOR_WARN, found, want,
                                             "only the scalar reference kernels: several times slower per token");
        return dsv_doctor_report_add(rep, "engine-kernels", DSV_DOCTOR_OK, found, want,
                                     "the SIMD kernels this CPU and OS support (cpuid and xgetbv)");
}

static void print_text(const struct dsv_doctor_report *rep, const char *root) {
        int counts[DSV_DOCTOR_STATUS_COUNT] = {0};
        printf("dsvisor doctor: %s\n", root);
        for (int i = 0; i < rep->n_checks; i++) {
                const struct dsv_doctor_check *c = &rep->checks[i];
                counts[c->status]++;
                printf("%-7s %-18s %s | want %s | %s\n", dsv_doctor_status_to_string(c->status), c->name, c->found,
                       c->recommended, c->reason);
        }
        enum dsv_doctor_status worst = dsv_doctor_report_worst(rep);
        printf("summary: %d ok, %d warn, %d fail, %d unknown; exit %d\n", counts[DSV_DOCTOR_OK],
               counts[DSV_DOCTOR_WARN], counts[DSV_DOCTOR_FAIL], counts[DSV_DOCTOR_UNKNOWN],
               dsv_doctor_status_exit_code(worst));
}

static int print_json(const struct dsv_doctor_report *rep, const char *root) {
        cJSON *o = cJSON_CreateObject();
        cJSON *checks = o ? cJSON_AddArrayToObject(o, "checks") : NULL;
        enum dsv_doctor_status worst = dsv_doctor_report_worst(rep);
        int r = -ENOMEM;
        if (!checks || !cJSON_AddStringToObject(o, "root", root) ||
            !cJSON_AddStringToObject(o, "status", dsv_doctor_status_to_string(worst)) ||
            !cJSON_AddNumberToObject(o, "exit_code", dsv_doctor_status_exit_code(worst)))
                goto out;
        for (int i = 0; i < rep->n_checks; i++) {
                const struct dsv_doctor_check *c = &rep->checks[i];
                cJSON *e = cJSON_CreateObject();
                if (!e)
                        goto out;
                cJSON_AddItemToArray(checks, e);
                if (!cJSON_AddStringToObject(e, "name", c->name) ||
                    !cJSON_AddStringToObject(e, "status", dsv_doctor_status_to_string(c->status)) ||
                    !cJSON_AddStringToObject(e, "found", c->found) ||
                    !cJSON_AddStringToObject(e, "recommended", c->recommended) ||
                    !cJSON_AddStringToObject(e, "reason", c->reason))
                        goto out;
        }
        char *text = cJSON_Print(o);
        if (!text)
                goto out;
        printf("%s\n", text);
        cJSON_free(text);
        r = 0;
out:
        cJSON_Delete(o);
        return r;
}

int dsv_cmd_doctor(int argc, char **argv) {
        enum { OPT_INSTANCES = 256, OPT_MODEL, OPT_MODEL_BYTES, OPT_ROOT, OPT_TOPOLOGY, OPT_TOPOLOGY_XML, OPT_PID, OPT_CPUS,
               OPT_HOUSEKEEPING_CPUS, OPT_JSON };
        static const struct option options[] = {
                {"instances", required_argument, NULL, OPT_INSTANCES},
                {"model", required_argument, NULL, OPT_MODEL},
                {"model-bytes", required_argument, NULL, OPT_MODEL_BYTES},
                {"root", required_argument, NULL, OPT_ROOT},
                {"topology", required_argument, NULL, OPT_TOPOLOGY},
                {"topology-xml", required_argument, NULL, OPT_TOPOLOGY_XML},
                {"pid", required_argument, NULL, OPT_PID},
                {"cpus", required_argument, NULL, OPT_CPUS},
                {"housekeeping-cpus", required_argument, NULL, OPT_HOUSEKEEPING_CPUS},
                {"json", no_argument, NULL, OPT_JSON},
                {"help", no_argument, NULL, 'h'},
                {0},
        };
        struct sup_place_request place = {.source = DSV_TOPO_SOURCE_SYSTEM};
        const char *root = "/", *model = NULL;
        uint64_t model_bytes = 0, n;
        pid_t pid = 0;
        bool json = false, have_bytes = false;

        optind = 0;
        int opt;
        while ((opt = getopt_long(argc, argv, "h", options, NULL)) != -1) {
                switch (opt) {
                case OPT_INSTANCES:
                        if (parse_u64(optarg, 1, &n) < 0 || n > INT_MAX) {
                                fprintf(stderr, "dsvisor doctor: --instances needs a positive integer, not '%s'\n", optarg);
                                return DOCTOR_EXIT_ERROR;
                        }
                        place.n_instances = (int)n;
                        break;
                case OPT_MODEL:
                        model = optarg;
                        break;
                case OPT_MODEL_BYTES:
                        if (parse_u64(optarg, 1, &model_bytes) < 0) {
                                fprintf(stderr, "dsvisor doctor: --model-bytes needs a positive integer, not '%s'\n", optarg);
                                return DOCTOR_EXIT_ERROR;
                        }
                        have_bytes = true;
                        break;
                case OPT_PID:
                        if (parse_u64(optarg, 1, &n) < 0 || n > INT_MAX) {
                                fprintf(stderr, "dsvisor doctor: --pid needs a process id, not '%s'\n", optarg);
                                return DOCTOR_EXIT_ERROR;
                        }
                        pid = (pid_t)n;
                        break;
                case OPT_ROOT:
                        root = optarg;
                        break;
                case OPT_TOPOLOGY:
                case OPT_TOPOLOGY_XML:
                        if (place.source != DSV_TOPO_SOURCE_SYSTEM) {
                                fprintf(stderr, "dsvisor doctor: give --topology or --topology-xml once\n");
                                return DOCTOR_EXIT_ERROR;
                        }
                        place.source = opt == OPT_TOPOLOGY ? DSV_TOPO_SOURCE_SYNTHETIC : DSV_TOPO_SOURCE_XML;
                        place.source_arg = optarg;
                        break;
                case OPT_CPUS:
                        place.cpus = optarg;
                        break;
                case OPT_HOUSEKEEPING_CPUS:
                        place.housekeeping_cpus = optarg;
                        break;
                case OPT_JSON:
                        json = true;
                        break;
                case 'h':
                        doctor_usage(stdout);
                        return 0;
                default:
                        doctor_usage(stderr);
                        return DOCTOR_EXIT_ERROR;
                }
        }
        if (optind < argc || (model && have_bytes)) {
                if (optind < argc)
                        fprintf(stderr, "dsvisor doctor: unexpected argument '%s'\n", argv[optind]);
                else
                        fprintf(stderr, "dsvisor doctor: give --model or --model-bytes, not both\n");
                doctor_usage(stderr);
                return DOCTOR_EXIT_ERROR;
        }
        if (model) {
                struct stat st;
                if (stat(model, &st) < 0) {
                        fprintf(stderr, "dsvisor doctor: cannot read the model '%s': %m\n", model);
                        return DOCTOR_EXIT_ERROR;
                }
                model_bytes = (uint64_t)st.st_size;
        }

        static struct sup_placement placed;
        char why[512];
        int r = sup_place(&place, &placed, why, sizeof why);
        if (r < 0) {
                fprintf(stderr, "dsvisor doctor: %s\n", why);
                return DOCTOR_EXIT_ERROR;
        }
        static struct planned p;
        r = collect(&placed, &p);
        if (r < 0) {
                fprintf(stderr, "dsvisor doctor: failed to list the planned CPUs: %s\n", strerror(-r));
                return DOCTOR_EXIT_ERROR;
        }

        struct dsv_doctor_request req = {
                .root = root,
                .instance_cpus = p.cpus,
                .n_instance_cpus = p.n_cpus,
                .housekeeping_cpus = p.hk,
                .n_housekeeping_cpus = p.n_hk,
                .instance_nodes = p.nodes,
                .n_instance_nodes = p.n_nodes,
                .model_bytes = model_bytes,
                .pid = pid,
        };
        static struct dsv_doctor_report rep;
        r = dsv_doctor_run(&req, &rep);
        if (r < 0) {
                fprintf(stderr, "dsvisor doctor: failed to check the host below '%s': %s\n", root, strerror(-r));
                return DOCTOR_EXIT_ERROR;
        }
        if ((r = add_given(&rep, &placed.given_set)) < 0 && r != -ENOSPC) {
                fprintf(stderr, "dsvisor doctor: failed to describe the given set: %s\n", strerror(-r));
                return DOCTOR_EXIT_ERROR;
        }
        if ((r = add_placement(&rep, &placed.plan, &p)) < 0 && r != -ENOSPC) {
                fprintf(stderr, "dsvisor doctor: failed to describe the placement: %s\n", strerror(-r));
                return DOCTOR_EXIT_ERROR;
        }
        /* The engine's level describes the machine the doctor runs on, not a fake tree. */
        if (strspn(root, "/") == strlen(root))
                add_engine(&rep);

        if (json) {
                r = print_json(&rep, root);
                if (r < 0) {
                        fprintf(stderr, "dsvisor doctor: failed to print JSON: %s\n", strerror(-r));
                        return DOCTOR_EXIT_ERROR;
                }
        } else {
                print_text(&rep, root);
        }
        return dsv_doctor_status_exit_code(dsv_doctor_report_worst(&rep));
}
