/* gateway_setup.c — the supervisor's HTTP gateway: its configuration from the options
 * (files holding secrets checked first), every instance registered (not ready until its
 * worker is), then HTTP started. No key and no key file content is ever logged. */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "dsv_gateway.h"
#include "sup.h"

/* Readiness is seen within one interval; a worker that misses health replies stays "up"
 * for 3 intervals (the gateway's staleness rule). 500 ms let a busy worker on a loaded
 * 2-core host drop out of routing for a moment (a 503 while its peer restarted). */
#define HEALTH_INTERVAL_MS 1000

#define MAX_LIST 64
/* dsvisor-worker's context when --n-ctx is not given (worker/serve.c). */
#define WORKER_N_CTX_DEFAULT 4096

/* A file holding a secret (API keys, a TLS private key) must not be open to other users:
 * refused when others may read or write it, or its group may write it. */
static int check_secret_file(const char *option, const char *path) {
        struct stat st;
        if (stat(path, &st) < 0) {
                int r = -errno;
                sup_log(3, "--%s '%s': %s", option, path, strerror(-r));
                return r;
        }
        if (!S_ISREG(st.st_mode) || (st.st_mode & (S_IROTH | S_IWOTH | S_IWGRP))) {
                sup_log(3, "--%s '%s' is %s: it holds a secret; chmod 600 (or 640) it", option, path,
                        !S_ISREG(st.st_mode) ? "not a regular file"
                        : st.st_mode & S_IWGRP && !(st.st_mode & (S_IROTH | S_IWOTH)) ? "writable by its group"
                                                                                        : "open to other users");
                return -EPERM;
        }
        return 0;
}

/* The gateway's view of the HTTP options; the lists point into the caller's buffers. */
static void http_options(struct sup *s, struct dsv_gateway_config *gc, char *names_buf, char **names, char *keys_buf,
                         char **keys) {
        const struct sup_config *c = &s->cfg;
        memcpy(names_buf, c->served_model_names, sizeof c->served_model_names);
        int n_names = sup_config_list_split(names_buf, names, MAX_LIST);
        if (n_names > 0) { /* names[0] is also s->model.id (served_model.c) */
                gc->model = names[0];
                gc->model_aliases = (const char *const *)names + 1;
                gc->n_model_aliases = (size_t)n_names - 1;
        }
        memcpy(keys_buf, c->api_keys, sizeof c->api_keys);
        gc->n_api_keys = (size_t)sup_config_list_split(keys_buf, keys, MAX_LIST);
        gc->api_keys = (const char *const *)keys;
        gc->api_keys_path = c->api_key_file[0] ? c->api_key_file : NULL;
        gc->protect_metrics = c->protect_metrics;
        gc->cors_origins = c->cors_origins[0] ? c->cors_origins : NULL;
        gc->tls_cert_path = c->tls_cert[0] ? c->tls_cert : NULL;
        gc->tls_key_path = c->tls_key[0] ? c->tls_key : NULL;
        gc->max_model_len = c->n_ctx > 0 ? c->n_ctx : WORKER_N_CTX_DEFAULT;
        gc->default_max_tokens = c->default_max_tokens;
        gc->max_prompt_tokens = c->max_prompt_tokens;
        gc->max_prompt_bytes = (size_t)c->max_prompt_bytes;
        /* A prompt's text grows when JSON escapes it (up to 6 bytes a character); leave
         * room for that and the rest of the request before the body limit refuses it. */
        if (gc->max_body_bytes < 2 * gc->max_prompt_bytes + (64u << 10))
                gc->max_body_bytes = 2 * gc->max_prompt_bytes + (64u << 10);
        gc->request_timeout_ms = (uint32_t)c->request_timeout_ms;
        gc->max_connections_per_ip = (unsigned)c->max_connections_per_ip;
        gc->first_byte_timeout_s = (unsigned)c->first_byte_timeout_s;
        gc->header_timeout_s = (unsigned)c->header_timeout_s;
        gc->body_timeout_s = (unsigned)c->body_timeout_s;
        gc->connection_timeout_s = (unsigned)c->idle_timeout_s;
}

static const char *gateway_error(int r) {
        switch (r) {
        case -EINVAL: return "a bad value (an API key file without keys, a CORS origin that is not "
                             "scheme://host[:port], a TLS file that is not PEM)";
        case -EOPNOTSUPP: return "libmicrohttpd was built without TLS";
        default: return strerror(-r);
        }
}

int sup_gateway_setup(struct sup *s) {
        struct dsv_gateway_config gc;
        dsv_gateway_config_init(&gc);
        gc.listen_host = s->cfg.host;
        gc.port = (uint16_t)s->cfg.port;
        gc.model = s->model.id;
        char names_buf[sizeof s->cfg.served_model_names], keys_buf[sizeof s->cfg.api_keys];
        char *names[MAX_LIST], *keys[MAX_LIST];
        http_options(s, &gc, names_buf, names, keys_buf, keys);
        int r = 0;
        if ((s->cfg.api_key_file[0] && (r = check_secret_file("api-key-file", s->cfg.api_key_file)) < 0) ||
            (s->cfg.tls_key[0] && (r = check_secret_file("tls-key", s->cfg.tls_key)) < 0))
                return r;
        gc.health_interval_ms = HEALTH_INTERVAL_MS;
        gc.reasoning_format = (enum dsv_gateway_reasoning_format)s->chat.reasoning;
        gc.think_opened = s->chat.think_opened;
        gc.tool_format = (enum dsv_gateway_tool_format)s->chat.tools;
        gc.metrics_compat_vllm = strcmp(s->cfg.metrics_compat, "vllm") == 0;
        gc.admit.max_queue_per_instance = (uint32_t)s->cfg.max_queue;
        gc.admit.max_queue_wait_pct = (uint32_t)s->cfg.max_queue_wait_pct;
        gc.max_connections = (unsigned)s->cfg.max_connections;
        /* Requests must reach the workers however busy their FIFO compute threads are:
         * the HTTP threads (on the housekeeping CPUs, which the preflight demands) run
         * above them. */
        if (s->cfg.rt_priority > 0)
                gc.http_rt_priority = s->cfg.rt_priority < SUP_RT_PRIORITY_MAX ? s->cfg.rt_priority + 1
                                                                               : SUP_RT_PRIORITY_MAX;
        r = dsv_gateway_new(&gc, &s->env.gw);
        explicit_bzero(keys_buf, sizeof keys_buf); /* the gateway keeps its own copies */
        if (r < 0) {
                sup_log(3, "Failed to create the gateway: %s", gateway_error(r));
                return r;
        }
        dsv_gateway_set_metrics_hook(s->env.gw, sup_metrics_hook, &s->metrics);
        dsv_gateway_set_status_hook(s->env.gw, sup_status_page_hook, &s->metrics);
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
                sup_log(3, "Failed to listen on %s:%d: %s", s->cfg.host, s->cfg.port,
                        r == -EKEYREJECTED ? "the TLS certificate and key were refused (not a matching pair?)"
                                           : strerror(-r));
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
        sup_log(6, "HTTP gateway on %s://%s:%d (model '%s'%s%s)", gc.tls_cert_path ? "https" : "http", s->cfg.host,
                s->gw_port, gc.model, gc.n_api_keys || gc.api_keys_path ? ", API keys required" : "",
                gc.protect_metrics ? " also for /metrics and /health" : "");
        return 0;
}
