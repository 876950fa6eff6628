/* dsvisor-gateway-test-server — the gateway library on 127.0.0.1 in front of workers
 * given by URL (tests start fake-worker for them), so shell and node tests drive it over
 * HTTP. Built for tests only.
 *
 *     dsvisor-gateway-test-server --model M --port-file F [--port N]
 *         --instance NAME=URL [--instance NAME=URL ...] [--api-keys FILE]
 *         [--max-queue-per-instance N] [--max-queue-total N] [--timeout-ms N]
 *         [--max-connections N] [--conn-timeout-s N] [--max-body N] [--max-running N] [--route NAME]
 *         [--health-ms N] [--numa-node N] [--protect-metrics 0|1]
 *         [--reasoning-format deepseek|none] [--think-opened 0|1] [--tool-format deepseek_v3|hermes|llama3_json]
 *
 * It writes the bound port to F once serving. Commands on stdin, one per line, answer
 * "ok <n>" or "err <errno name>" on stdout: "ready ID 0|1", "url ID URL", "remove ID",
 * "add NAME URL", "load ID QUEUED RUNNING" (the worker's own load), "load ID -" (forget it). SIGTERM or SIGINT stops it (exit 0). A metrics hook appends the family
 * dsvisor_test_hook_scrapes_total to /metrics. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsv_gateway.h"

static unsigned long scrapes;

static int hook(FILE *out, void *userdata) {
        (void)userdata;
        scrapes++;
        fprintf(out, "# HELP dsvisor_test_hook_scrapes_total Scrapes seen by the test server's hook.\n"
                     "# TYPE dsvisor_test_hook_scrapes_total counter\n"
                     "dsvisor_test_hook_scrapes_total %lu\n", scrapes);
        return 0;
}

/* Held while a command runs; main takes it for good before freeing the gateway, so a
 * command never runs on a freed one (the thread stays blocked in fgets or here). */
static pthread_mutex_t command_lock = PTHREAD_MUTEX_INITIALIZER;

static void *commands(void *arg) {
        struct dsv_gateway *gw = arg;
        char line[4096];
        while (fgets(line, sizeof line, stdin)) {
                pthread_mutex_lock(&command_lock);
                char a[2048] = "", b[2048] = "";
                int id = -1, r = -EINVAL;
                unsigned q, run;
                if (sscanf(line, "ready %d %2047s", &id, a) == 2)
                        r = dsv_gateway_instance_set_ready(gw, id, atoi(a) != 0);
                else if (sscanf(line, "url %d %2047s", &id, a) == 2)
                        r = dsv_gateway_instance_set_url(gw, id, a);
                else if (sscanf(line, "load %d %u %u", &id, &q, &run) == 3)
                        r = dsv_gateway_instance_set_load(gw, id, &(struct dsv_policy_worker_load){
                                                                         .queued_requests = q, .running_seqs = run});
                else if (sscanf(line, "load %d -", &id) == 1)
                        r = dsv_gateway_instance_set_load(gw, id, NULL);
                else if (sscanf(line, "remove %d", &id) == 1)
                        r = dsv_gateway_instance_remove(gw, id);
                else if (sscanf(line, "add %2047s %2047s", a, b) == 2)
                        r = dsv_gateway_instance_add(gw, &(struct dsv_gateway_instance_config){
                                                                 .name = a, .numa_node = 0, .url = b, .ready = true});
                if (r < 0)
                        printf("err %s\n", strerrorname_np(-r) ? strerrorname_np(-r) : "?");
                else
                        printf("ok %d\n", r);
                fflush(stdout);
                pthread_mutex_unlock(&command_lock);
        }
        return NULL;
}

int main(int argc, char **argv) {
        struct dsv_gateway_config cfg;
        dsv_gateway_config_init(&cfg);
        const char *port_file = NULL;
        const char *instances[DSV_GATEWAY_MAX_INSTANCES];
        int n_instances = 0, numa_node = 0;
        for (int i = 1; i + 1 < argc; i += 2) {
                const char *k = argv[i], *v = argv[i + 1];
                if (!strcmp(k, "--model"))
                        cfg.model = v;
                else if (!strcmp(k, "--port-file"))
                        port_file = v;
                else if (!strcmp(k, "--port"))
                        cfg.port = (uint16_t)atoi(v);
                else if (!strcmp(k, "--instance") && n_instances < DSV_GATEWAY_MAX_INSTANCES)
                        instances[n_instances++] = v;
                else if (!strcmp(k, "--api-keys"))
                        cfg.api_keys_path = v;
                else if (!strcmp(k, "--max-queue-per-instance"))
                        cfg.admit.max_queue_per_instance = (uint32_t)atoi(v);
                else if (!strcmp(k, "--max-queue-total"))
                        cfg.admit.max_queue_total = (uint32_t)atoi(v);
                else if (!strcmp(k, "--timeout-ms"))
                        cfg.request_timeout_ms = (uint32_t)atoi(v);
                else if (!strcmp(k, "--max-connections"))
                        cfg.max_connections = (unsigned)atoi(v);
                else if (!strcmp(k, "--conn-timeout-s"))
                        cfg.connection_timeout_s = (unsigned)atoi(v);
                else if (!strcmp(k, "--max-body"))
                        cfg.max_body_bytes = (size_t)atol(v);
                else if (!strcmp(k, "--max-running"))
                        cfg.max_running_per_instance = (uint32_t)atoi(v);
                else if (!strcmp(k, "--health-ms"))
                        cfg.health_interval_ms = (uint32_t)atoi(v);
                else if (!strcmp(k, "--protect-metrics"))
                        cfg.protect_metrics = atoi(v) != 0;
                else if (!strcmp(k, "--reasoning-format"))
                        for (int f = 0; f < DSV_GATEWAY_REASONING_FORMAT_COUNT; f++)
                                cfg.reasoning_format = !strcmp(v, dsv_gateway_reasoning_format_to_string(f))
                                                               ? (enum dsv_gateway_reasoning_format)f
                                                               : cfg.reasoning_format;
                else if (!strcmp(k, "--think-opened"))
                        cfg.think_opened = atoi(v) != 0;
                else if (!strcmp(k, "--tool-format"))
                        for (int f = 0; f < DSV_GATEWAY_TOOLS_FORMAT_COUNT; f++)
                                cfg.tool_format = !strcmp(v, dsv_gateway_tool_format_to_string(f))
                                                          ? (enum dsv_gateway_tool_format)f
                                                          : cfg.tool_format;
                else if (!strcmp(k, "--numa-node"))
                        numa_node = atoi(v);
                else if (!strcmp(k, "--route")) {
                        int r = dsv_policy_route_from_string(v);
                        if (r < 0) {
                                fprintf(stderr, "unknown route '%s'\n", v);
                                return 2;
                        }
                        cfg.route = (enum dsv_policy_route)r;
                } else {
                        fprintf(stderr, "unknown option '%s'\n", k);
                        return 2;
                }
        }
        if (!cfg.model || !port_file) {
                fprintf(stderr, "usage: dsvisor-gateway-test-server --model M --port-file F --instance NAME=URL ...\n");
                return 2;
        }
        sigset_t sigs;
        sigemptyset(&sigs);
        sigaddset(&sigs, SIGTERM);
        sigaddset(&sigs, SIGINT);
        pthread_sigmask(SIG_BLOCK, &sigs, NULL);
        signal(SIGPIPE, SIG_IGN);

        struct dsv_gateway *gw;
        int r = dsv_gateway_new(&cfg, &gw);
        if (r < 0) {
                fprintf(stderr, "gateway: %s\n", strerror(-r));
                return 1;
        }
        dsv_gateway_set_metrics_hook(gw, hook, NULL);
        for (int i = 0; i < n_instances; i++) {
                char name[DSV_GATEWAY_NAME_MAX];
                const char *eq = strchr(instances[i], '=');
                if (!eq || eq - instances[i] >= DSV_GATEWAY_NAME_MAX) {
                        fprintf(stderr, "bad --instance '%s'\n", instances[i]);
                        return 2;
                }
                snprintf(name, sizeof name, "%.*s", (int)(eq - instances[i]), instances[i]);
                r = dsv_gateway_instance_add(gw, &(struct dsv_gateway_instance_config){
                                                         .name = name, .numa_node = numa_node, .url = eq + 1, .ready = true});
                if (r < 0) {
                        fprintf(stderr, "instance '%s': %s\n", name, strerror(-r));
                        return 1;
                }
        }
        if ((r = dsv_gateway_start(gw)) < 0) {
                fprintf(stderr, "gateway start: %s\n", strerror(-r));
                return 1;
        }
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp", port_file);
        FILE *f = fopen(tmp, "we");
        if (!f || fprintf(f, "%d\n", dsv_gateway_port(gw)) < 0 || fclose(f) != 0 || rename(tmp, port_file) < 0) {
                fprintf(stderr, "cannot write '%s': %m\n", port_file);
                return 1;
        }
        pthread_t t;
        pthread_create(&t, NULL, commands, gw);
        pthread_detach(t);
        int sig;
        sigwait(&sigs, &sig);
        pthread_mutex_lock(&command_lock);
        dsv_gateway_free(gw);
        return 0;
}
