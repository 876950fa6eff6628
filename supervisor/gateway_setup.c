/* gateway_setup.c — the supervisor's HTTP gateway: its configuration from the options,
 * every instance registered (not ready until its worker is), then HTTP started. */
#include <string.h>

#include "dsv_gateway.h"
#include "sup.h"

/* Readiness is seen within one interval; a worker that misses health replies stays "up"
 * for 3 intervals (the gateway's staleness rule). 500 ms let a busy worker on a loaded
 * 2-core host drop out of routing for a moment (a 503 while its peer restarted). */
#define HEALTH_INTERVAL_MS 1000

int sup_gateway_setup(struct sup *s) {
        struct dsv_gateway_config gc;
        dsv_gateway_config_init(&gc);
        gc.listen_host = s->cfg.host;
        gc.port = (uint16_t)s->cfg.port;
        gc.model = s->model.id;
        gc.health_interval_ms = HEALTH_INTERVAL_MS;
        gc.reasoning_format = (enum dsv_gateway_reasoning_format)s->chat.reasoning;
        gc.think_opened = s->chat.think_opened;
        gc.tool_format = (enum dsv_gateway_tool_format)s->chat.tools;
        gc.metrics_compat_vllm = strcmp(s->cfg.metrics_compat, "vllm") == 0;
        gc.admit.max_queue_per_instance = (uint32_t)s->cfg.max_queue;
        gc.max_connections = (unsigned)s->cfg.max_connections;
        /* Requests must reach the workers however busy their FIFO compute threads are:
         * the HTTP threads (on the housekeeping CPUs, which the preflight demands) run
         * above them. */
        if (s->cfg.rt_priority > 0)
                gc.http_rt_priority = s->cfg.rt_priority < SUP_RT_PRIORITY_MAX ? s->cfg.rt_priority + 1
                                                                               : SUP_RT_PRIORITY_MAX;
        int r = dsv_gateway_new(&gc, &s->env.gw);
        if (r < 0) {
                sup_log(3, "Failed to create the gateway: %s", strerror(-r));
                return r;
        }
        dsv_gateway_set_metrics_hook(s->env.gw, sup_metrics_hook, &s->metrics);
        sup_request_log_setup(s->env.gw, s->cfg.log_requests);
        for (int i = 0; i < s->n; i++) {
                struct dsv_gateway_instance_config ic = {.name = s->inst[i].name, .numa_node = s->inst[i].node_os,
                                                         .url = s->inst[i].url, .ready = false};
                r = dsv_gateway_instance_add(s->env.gw, &ic);
                if (r < 0) {
                        sup_log(3, "Failed to add instance %d to the gateway: %s", i, strerror(-r));
                        return r;
                }
                s->inst[i].gw_id = r;
        }
        if ((r = dsv_gateway_start(s->env.gw)) < 0) {
                sup_log(3, "Failed to listen on %s:%d: %s", s->cfg.host, s->cfg.port, strerror(-r));
                return r;
        }
        s->gw_port = dsv_gateway_port(s->env.gw);
        struct dsv_gateway_stats gst;
        if (gc.http_rt_priority > 0 && dsv_gateway_stats(s->env.gw, &gst) == 0) {
                if (gst.http_rt_priority > 0)
                        sup_log(6, "HTTP threads run SCHED_FIFO %d on the housekeeping CPUs", gst.http_rt_priority);
                else
                        sup_log(4, "SCHED_FIFO %d refused for the HTTP threads: they stay SCHED_OTHER",
                                gc.http_rt_priority);
        }
        sup_log(6, "HTTP gateway on http://%s:%d (model '%s')", s->cfg.host, s->gw_port, s->model.id);
        return 0;
}
