/* dsvisor status and dsvisor stop: ask the running supervisor over its
 * control socket (<runtime dir>/control.sock, see control.c). status prints per
 * instance the pid, state, NUMA node, CPUs, cgroup, limits in effect, scheduling policy,
 * weight bytes in HugePages, queue depth, restarts, uptime, the involuntary context
 * switch and migration rates and the output drift against the other instances; --json
 * prints the supervisor's JSON as it is. stop asks for a drain and waits until the
 * supervisor has gone. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "dsv_ipc.h"
#include "sup.h"

struct client_opts {
        bool json;
        int wait_ms;
        char runtime_dir[PATH_MAX];
};

static void client_usage(FILE *out, const char *cmd) {
        if (strcmp(cmd, "status") == 0)
                fprintf(out, "usage: dsvisor status [--json] [--runtime-dir DIR]\n"
                             "  --json              the running supervisor's state as one JSON object\n"
                             "  --runtime-dir DIR   as given to 'dsvisor start' (default: the private runtime dir)\n");
        else
                fprintf(out, "usage: dsvisor stop [--runtime-dir DIR] [--wait-ms MS]\n"
                             "  drains the instances, stops the workers and removes the cgroups;\n"
                             "  waits up to MS (default 120000) for the supervisor to exit\n");
}

static int parse_client(int argc, char **argv, struct client_opts *o) {
        static const struct option lopts[] = {{"json", no_argument, NULL, 'j'},
                                              {"runtime-dir", required_argument, NULL, 'r'},
                                              {"wait-ms", required_argument, NULL, 'w'},
                                              {"help", no_argument, NULL, 'h'},
                                              {0}};
        memset(o, 0, sizeof *o);
        o->wait_ms = 120000;
        optind = 1;
        opterr = 0;
        int c;
        while ((c = getopt_long(argc, argv, "h", lopts, NULL)) != -1) {
                switch (c) {
                case 'j': o->json = true; break;
                case 'r': snprintf(o->runtime_dir, sizeof o->runtime_dir, "%s", optarg); break;
                case 'w': o->wait_ms = atoi(optarg); break;
                case 'h': client_usage(stdout, argv[0]); return 1;
                default:
                        fprintf(stderr, "dsvisor %s: unknown or incomplete option '%s'\n", argv[0], argv[optind - 1]);
                        client_usage(stderr, argv[0]);
                        return -EINVAL;
                }
        }
        if (optind < argc || (strcmp(argv[0], "stop") == 0 && o->json) || o->wait_ms < 0) {
                client_usage(stderr, argv[0]);
                return -EINVAL;
        }
        return 0;
}

static int control_path(const struct client_opts *o, char *buf, size_t size) {
        char dir[PATH_MAX];
        if (o->runtime_dir[0]) {
                snprintf(dir, sizeof dir, "%s", o->runtime_dir);
        } else {
                int r = dsv_ipc_runtime_dir(dir, sizeof dir);
                if (r < 0)
                        return r;
        }
        return sup_control_path(dir, buf, size);
}

static const char *str(const cJSON *o, const char *k) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
        return cJSON_IsString(v) ? v->valuestring : "?";
}

static double num(const cJSON *o, const char *k) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
        return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

static void rate(char *buf, size_t size, double v) {
        if (v < 0)
                snprintf(buf, size, "n/a");
        else
                snprintf(buf, size, "%.1f", v);
}

/* "output drift vs peers: ..." from the instance's "drift" (status.c). */
static void print_drift(const cJSON *d) {
        if (!d)
                return;
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(d, "token_prob"),
                    *e = cJSON_GetObjectItemCaseSensitive(d, "entropy");
        if (!cJSON_IsObject(p) || !cJSON_IsObject(e)) {
                printf("  output drift vs peers: no verdict (%.0f tokens of %.0f requests in the last minute, its "
                       "peers %.0f of %.0f; %d and %d each needed)\n",
                       num(d, "tokens"), num(d, "requests"), num(d, "peer_tokens"), num(d, "peer_requests"),
                       SUP_DRIFT_MIN_TOKENS, SUP_DRIFT_MIN_REQUESTS);
                return;
        }
        bool drifts = num(p, "pvalue") < SUP_DRIFT_ALPHA || num(e, "pvalue") < SUP_DRIFT_ALPHA;
        printf("  output drift vs peers: %s; token probability KS %.3f p %.3g, entropy KS %.3f p %.3g "
               "(%.0f tokens of %.0f requests in the last minute, peers %.0f of %.0f)\n",
               drifts ? "DRIFTS" : "none", num(p, "ks"), num(p, "pvalue"), num(e, "ks"), num(e, "pvalue"),
               num(d, "tokens"), num(d, "requests"), num(d, "peer_tokens"), num(d, "peer_requests"));
}

static void print_reload(const cJSON *rl) {
        if (!cJSON_IsObject(rl))
                return;
        if (*str(rl, "error")) {
                printf("reload %.0f s ago: refused, the running configuration kept: %s\n", num(rl, "ago_s"),
                       str(rl, "error"));
                return;
        }
        const cJSON *applied = cJSON_GetObjectItemCaseSensitive(rl, "applied");
        const cJSON *missed = cJSON_GetObjectItemCaseSensitive(rl, "not_applied");
        printf("reload %.0f s ago: %d option%s applied, %d NOT applied\n", num(rl, "ago_s"),
               cJSON_GetArraySize(applied), cJSON_GetArraySize(applied) == 1 ? "" : "s", cJSON_GetArraySize(missed));
        const cJSON *it;
        cJSON_ArrayForEach(it, applied) printf("  applied      %-22s %s\n", str(it, "option"), str(it, "how"));
        cJSON_ArrayForEach(it, missed) printf("  NOT applied  %-22s %s\n", str(it, "option"), str(it, "reason"));
}

static void print_text(const cJSON *j) {
        printf("dsvisor pid %.0f: %s, up %.0f s, model '%s' (%s), http://%s:%.0f\n", num(j, "pid"), str(j, "state"),
               num(j, "uptime_s"), str(j, "model_id"), str(j, "model"), str(j, "host"), num(j, "port"));
        printf("instances: %.0f/%.0f ready; hugepages %s; rt-priority %.0f (fallbacks %.0f); cgroups %s\n",
               num(j, "instances_ready"), num(j, "instances_total"), str(j, "hugepages"), num(j, "rt_priority"),
               num(j, "rt_fallbacks"), str(j, "cgroups"));
        const cJSON *parent = cJSON_GetObjectItemCaseSensitive(j, "cgroup_parent");
        if (cJSON_IsString(parent) && parent->valuestring[0])
                printf("cgroup parent: <own cgroup>/%s\n", parent->valuestring);
        const cJSON *w;
        cJSON_ArrayForEach(w, cJSON_GetObjectItemCaseSensitive(j, "weights")) {
                bool huge = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(w, "hugepages"));
                char thp[64] = "";
                if (!huge && num(w, "bytes") > 0)
                        snprintf(thp, sizeof thp, ", %.0f%% in transparent 2 MiB pages at load",
                                 100.0 * num(w, "thp_bytes") / num(w, "bytes"));
                printf("weights node %.0f: %.0f bytes in %s%s%s\n", num(w, "numa_node"), num(w, "bytes"),
                       huge ? "HugePages" : "normal pages", thp,
                       cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(w, "from_fd_store")) ? " (from the fd store)" : "");
        }
        const cJSON *g = cJSON_GetObjectItemCaseSensitive(j, "gateway"), *r;
        if (g) {
                printf("gateway: queue %.0f waiting; connections %.0f/%.0f open, %.0f refused; rejected:",
                       num(g, "queue_length"), num(g, "connections_open"), num(g, "max_connections"),
                       num(g, "connections_refused"));
                cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(g, "rejected"))
                        printf(" %s %.0f", r->string, r->valuedouble);
                printf("\n");
        }
        print_reload(cJSON_GetObjectItemCaseSensitive(j, "reload"));
        const cJSON *in;
        cJSON_ArrayForEach(in, cJSON_GetObjectItemCaseSensitive(j, "instances")) {
                char invol[32], migr[32];
                rate(invol, sizeof invol, num(in, "ctxsw_involuntary_per_s"));
                rate(migr, sizeof migr, num(in, "migrations_per_s"));
                printf("\ninstance %s: pid %.0f, %s, node %.0f, CPUs %s, %.0f threads, %s\n", str(in, "name"),
                       num(in, "pid"), str(in, "state"), num(in, "numa_node"), str(in, "cpus"), num(in, "threads"),
                       str(in, "sched"));
                printf("  cgroup %s\n", str(in, "cgroup"));
                printf("  weights in HugePages %.0f bytes; queue %.0f waiting, %.0f running; restarts %.0f; "
                       "up %.1f s\n",
                       num(in, "weights_hugepages_bytes"), num(in, "queue_depth"), num(in, "running"),
                       num(in, "restarts"), num(in, "uptime_s"));
                printf("  involuntary context switches/s %s, migrations/s %s\n", invol, migr);
                print_drift(cJSON_GetObjectItemCaseSensitive(in, "drift"));
                const cJSON *kd = cJSON_GetObjectItemCaseSensitive(in, "kv_disk");
                if (kd)
                        printf("  KV disk tier%s: %.0f of %.0f MiB; blocks written %.0f, read %.0f, dropped %.0f, "
                               "corrupt %.0f; prefix hit tokens RAM %.0f, disk %.0f\n",
                               cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(kd, "failed")) ? " (OFF after an I/O error)" : "",
                               num(kd, "bytes_used") / 1048576, num(kd, "bytes_capacity") / 1048576,
                               num(kd, "blocks_written"), num(kd, "blocks_read"), num(kd, "blocks_dropped"),
                               num(kd, "blocks_corrupt"), num(kd, "hit_tokens_ram"), num(kd, "hit_tokens_disk"));
                const cJSON *l;
                cJSON_ArrayForEach(l, cJSON_GetObjectItemCaseSensitive(in, "limits")) {
                        bool on = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(l, "in_effect"));
                        printf("  %-18s %-24s %s%s%s\n", str(l, "limit"), str(l, "value"),
                               on ? "in effect" : "NOT in effect", *str(l, "reason") ? ": " : "", str(l, "reason"));
                }
        }
}

int dsv_cmd_status(int argc, char **argv) {
        struct client_opts o;
        int r = parse_client(argc, argv, &o);
        if (r != 0)
                return r > 0 ? 0 : 2;
        char path[PATH_MAX], *reply = NULL;
        if ((r = control_path(&o, path, sizeof path)) < 0 || (r = sup_control_call(path, "status", 5000, &reply)) < 0) {
                fprintf(stderr, "dsvisor status: no running supervisor at '%s': %s\n", path, strerror(-r));
                return 1;
        }
        cJSON *j = cJSON_Parse(reply);
        if (!j || cJSON_GetObjectItemCaseSensitive(j, "error")) {
                fprintf(stderr, "dsvisor status: bad answer: %s\n", reply);
                cJSON_Delete(j);
                free(reply);
                return 1;
        }
        if (o.json)
                printf("%s\n", reply);
        else
                print_text(j);
        cJSON_Delete(j);
        free(reply);
        return 0;
}

int dsv_cmd_stop(int argc, char **argv) {
        struct client_opts o;
        int r = parse_client(argc, argv, &o);
        if (r != 0)
                return r > 0 ? 0 : 2;
        char path[PATH_MAX], *reply = NULL;
        if ((r = control_path(&o, path, sizeof path)) < 0 || (r = sup_control_call(path, "stop", 5000, &reply)) < 0) {
                fprintf(stderr, "dsvisor stop: no running supervisor at '%s': %s\n", path, strerror(-r));
                return 1;
        }
        free(reply);
        /* Gone when nobody answers on the socket any more (it is removed last). */
        int64_t t0 = dsv_clock_now_ms();
        for (;;) {
                if (access(path, F_OK) < 0)
                        return 0;
                if (dsv_clock_now_ms() - t0 > o.wait_ms) {
                        fprintf(stderr, "dsvisor stop: the supervisor is still running after %d ms\n", o.wait_ms);
                        return 1;
                }
                usleep(50000);
        }
}
