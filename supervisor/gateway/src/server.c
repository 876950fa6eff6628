/* The gateway object and its HTTP server: libmicrohttpd with one thread per connection
 * (so a completion may block while its generation runs), the routing table of endpoints,
 * API-key auth, and the small endpoints; the completion endpoints are completion.c's.
 * The public instance functions hand over to the calls room, GET /metrics to the metrics
 * room. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <microhttpd.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "cors.h"
#include "http_strict.h"
#include "keys.h"
#include "server.h"
#include "tls.h"

struct dsv_gateway {
        struct dsv_gateway_config cfg; /* strings below are our copies */
        char *listen_host, *model;
        char **model_aliases; /* [cfg.n_model_aliases] */
        struct dsv_gw_keys keys;
        bool auth;
        struct gw_cors cors;
        struct gw_tls tls;
        struct MHD_Daemon *mhd;
        int http_rt_priority; /* in effect: 0 when SCHED_FIFO was refused */
        struct gw_listener listener;
        struct gw_metrics metrics;
        struct gw_calls calls;
        pthread_mutex_t hook_lock;
        dsv_gateway_metrics_fn hook;
        void *hook_userdata;
        dsv_gateway_status_fn status_hook; /* under hook_lock */
        void *status_hook_userdata;
        struct dsv_gateway_tokenizer tokenizer; /* under hook_lock */
};

enum endpoint {
        EP_UNKNOWN,
        EP_CHAT,
        EP_COMPLETIONS,
        EP_MODELS,
        EP_HEALTH,
        EP_READY,
        EP_METRICS,
        EP_TOKENIZE,
        EP_DETOKENIZE,
        EP_STATUS_PAGE,
        EP_STATUS,
};

static const struct {
        const char *path, *method;
        enum endpoint ep;
        bool auth;
} endpoints[] = {
        {"/v1/chat/completions", "POST", EP_CHAT, true},
        {"/v1/completions", "POST", EP_COMPLETIONS, true},
        {"/v1/models", "GET", EP_MODELS, true},
        {"/health", "GET", EP_HEALTH, false},
        {"/ready", "GET", EP_READY, false},
        {"/metrics", "GET", EP_METRICS, false},
        {"/tokenize", "POST", EP_TOKENIZE, true},
        {"/detokenize", "POST", EP_DETOKENIZE, true},
        /* the page and its data tell what /metrics tells: open unless protect_metrics */
        {"/", "GET", EP_STATUS_PAGE, false},
        {"/status", "GET", EP_STATUS, false},
};

/* Per HTTP request (MHD's con_cls, made by on_target). */
struct http_req {
        bool target_ok; /* dsv__gw_strict_target_ok() on the target as it arrived */
        bool started;   /* the header fields were checked */
        int64_t body_by_ns; /* the body must have arrived by then (body_timeout_s) */
        int ep_index; /* into endpoints[]; -1 unknown */
        char *body;
        size_t len, cap;
        bool too_large;
        bool answered; /* a response was queued before the body arrived */
};

/* ---- small endpoints -------------------------------------------------------------------- */

static enum MHD_Result handle_ready(struct dsv_gateway *gw, struct MHD_Connection *conn) {
        int up = dsv__gw_instances_up(&gw->calls);
        if (up == 0) {
                struct dsv_gw_error e;
                dsv__gw_error_set(&e, 503, "server_error", "service_unavailable", NULL, "No model instance is ready");
                e.retry_after_s = gw->cfg.admit.retry_after_unavailable_s ? gw->cfg.admit.retry_after_unavailable_s : 5;
                return dsv__gw_reply_error(conn, &e, NULL);
        }
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "status", "ready");
        cJSON_AddNumberToObject(o, "instances_up", up);
        return dsv__gw_reply_json(conn, 200, o);
}

static enum MHD_Result handle_metrics(struct dsv_gateway *gw, struct MHD_Connection *conn) {
        char *text = NULL;
        size_t len = 0;
        int r = dsv_gateway_metrics_render(gw, &text, &len);
        pthread_mutex_lock(&gw->hook_lock);
        dsv_gateway_metrics_fn hook = gw->hook;
        void *userdata = gw->hook_userdata;
        pthread_mutex_unlock(&gw->hook_lock);
        if (r == 0 && hook) {
                char *more = NULL;
                size_t more_len = 0;
                FILE *f = open_memstream(&more, &more_len);
                r = f ? hook(f, userdata) : -errno;
                if (f && fclose(f) != 0 && r == 0)
                        r = -EIO;
                size_t cap = len + 1; /* open_memstream's buffer holds len bytes and a NUL */
                if (r == 0)
                        r = dsv__gw_buf_append(&text, &len, &cap, more, more_len);
                free(more);
        }
        if (r < 0) {
                free(text);
                return dsv__gw_reply_simple_error(conn, 500, "server_error", NULL, "The metrics could not be rendered",
                                                  NULL);
        }
        enum MHD_Result ret = dsv__gw_reply(conn, 200, "text/plain; version=0.0.4; charset=utf-8", text, len, 0);
        free(text);
        return ret;
}

/* ---- MHD callbacks ------------------------------------------------------------------------ */

static int find_endpoint(const char *url, const char *method, bool *method_ok) {
        for (size_t i = 0; i < sizeof endpoints / sizeof endpoints[0]; i++) {
                if (strcmp(url, endpoints[i].path) == 0) {
                        *method_ok = strcmp(method, endpoints[i].method) == 0 ||
                                     (strcmp(method, "HEAD") == 0 && strcmp(endpoints[i].method, "GET") == 0);
                        return (int)i;
                }
        }
        return -1;
}

/* Whether the endpoint (-1: an unknown URL) needs an API key. With protect_metrics
 * everything does but /ready, so an unknown URL is 401 before it is 404 and the
 * endpoints are not told apart without a key. */
static bool needs_key(const struct dsv_gateway *gw, int ep_index) {
        if (!gw->auth)
                return false;
        if (ep_index >= 0 && endpoints[ep_index].auth)
                return true;
        return gw->cfg.protect_metrics && (ep_index < 0 || endpoints[ep_index].ep != EP_READY);
}

/* Checks made before the body is read: route, method, API key, declared size. Returns
 * MHD_YES with hr->answered set when it queued a response. */
static enum MHD_Result check_headers(struct dsv_gateway *gw, struct MHD_Connection *conn, const char *url,
                                     const char *method, struct http_req *hr) {
        bool method_ok = false;
        hr->ep_index = find_endpoint(url, method, &method_ok);
        hr->answered = true;
        bool key_ok = !needs_key(gw, hr->ep_index) || (strcmp(method, "OPTIONS") == 0 && hr->ep_index >= 0) ||
                      dsv__gw_keys_check(&gw->keys, MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization"));
        if (!key_ok && hr->ep_index < 0)
                return dsv__gw_reply_simple_error(conn, 401, "invalid_request_error", "invalid_api_key",
                                                  "Incorrect or missing API key", NULL);
        if (hr->ep_index < 0)
                return dsv__gw_reply_simple_error(conn, 404, "invalid_request_error", "unknown_url",
                                                  "Unknown request URL", NULL);
        /* A browser's preflight carries no key; what it asks about still needs one. */
        if (strcmp(method, "OPTIONS") == 0)
                return dsv__gw_cors_options(&gw->cors, conn,
                                            strcmp(endpoints[hr->ep_index].method, "GET") == 0 ? "GET, HEAD" : "POST");
        if (!method_ok) {
                struct dsv_gw_error e;
                dsv__gw_error_set(&e, 405, "invalid_request_error", "method_not_allowed", NULL,
                                  "Use %s for this URL", endpoints[hr->ep_index].method);
                return dsv__gw_reply_error(conn, &e, NULL);
        }
        /* Only the completion endpoints' answers are counted in dsvisor_requests_total. */
        bool generation = endpoints[hr->ep_index].ep == EP_CHAT || endpoints[hr->ep_index].ep == EP_COMPLETIONS;
        struct gw_metrics *counted = generation ? &gw->metrics : NULL;
        if (!key_ok)
                return dsv__gw_reply_simple_error(conn, 401, "invalid_request_error", "invalid_api_key",
                                                  "Incorrect or missing API key", counted);
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > gw->cfg.max_body_bytes) {
                struct dsv_gw_error e;
                dsv__gw_error_set(&e, 413, "invalid_request_error", "request_too_large", NULL,
                                  "The request body is larger than %zu bytes", gw->cfg.max_body_bytes);
                return dsv__gw_reply_error(conn, &e, counted);
        }
        hr->answered = false;
        return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
        struct dsv_gateway *gw = cls;
        struct http_req *hr = *con_cls;
        if (!hr)
                return MHD_NO; /* on_target ran out of memory */
        if (!hr->started) {
                hr->started = true;
                struct dsv_gw_error e;
                if (dsv__gw_strict_request(conn, version, hr->target_ok, &e) < 0) {
                        hr->answered = true;
                        return dsv__gw_reply_refusal(conn, &e, NULL);
                }
                if (gw->cfg.body_timeout_s)
                        hr->body_by_ns = dsv__gw_now_ns() + (int64_t)gw->cfg.body_timeout_s * 1000000000;
                return check_headers(gw, conn, url, method, hr);
        }
        if (*upload_data_size) {
                size_t n = *upload_data_size;
                *upload_data_size = 0;
                /* A body that trickles in: MHD's idle timeout restarts with every byte. */
                if (hr->body_by_ns && dsv__gw_now_ns() > hr->body_by_ns) {
                        dsv__gw_listener_count_timeout(&gw->listener, GW_TIMEOUT_BODY);
                        return MHD_NO;
                }
                if (hr->answered || hr->too_large)
                        return MHD_YES;
                if (hr->len + n > gw->cfg.max_body_bytes) {
                        hr->too_large = true; /* chunked upload: refuse once it is all read */
                        return MHD_YES;
                }
                return dsv__gw_buf_append(&hr->body, &hr->len, &hr->cap, upload_data, n) == 0 ? MHD_YES : MHD_NO;
        }
        if (hr->answered)
                return MHD_YES;
        hr->answered = true;
        enum endpoint ep = endpoints[hr->ep_index].ep;
        if (hr->too_large) {
                struct dsv_gw_error e;
                dsv__gw_error_set(&e, 413, "invalid_request_error", "request_too_large", NULL,
                                  "The request body is larger than %zu bytes", gw->cfg.max_body_bytes);
                return dsv__gw_reply_refusal(conn, &e, &gw->metrics);
        }
        switch (ep) {
        case EP_CHAT:
                return dsv__gw_completion(&gw->calls, conn, hr->body, hr->len, DSV_GW_API_CHAT);
        case EP_COMPLETIONS:
                return dsv__gw_completion(&gw->calls, conn, hr->body, hr->len, DSV_GW_API_COMPLETIONS);
        case EP_MODELS:
                return dsv__gw_reply_json(conn, 200,
                                          dsv__gw_models_object(gw->cfg.model, gw->cfg.model_aliases,
                                                                gw->cfg.n_model_aliases, gw->cfg.max_model_len));
        case EP_HEALTH: {
                static const char ok[] = "{\"status\":\"ok\"}";
                return dsv__gw_reply(conn, 200, "application/json", ok, sizeof ok - 1, 0);
        }
        case EP_READY:
                return handle_ready(gw, conn);
        case EP_METRICS:
                return handle_metrics(gw, conn);
        case EP_STATUS_PAGE:
                return dsv__gw_status_page(conn);
        case EP_STATUS: {
                struct gw_status_source src = {
                        .calls = &gw->calls, .metrics = &gw->metrics, .model = gw->cfg.model, .keys = gw->auth};
                pthread_mutex_lock(&gw->hook_lock);
                src.hook = gw->status_hook;
                src.hook_userdata = gw->status_hook_userdata;
                pthread_mutex_unlock(&gw->hook_lock);
                return dsv__gw_status_json(&src, conn);
        }
        case EP_TOKENIZE:
        case EP_DETOKENIZE: {
                struct gw_tokenize t = {.lim = {.model = gw->cfg.model, .model_aliases = gw->cfg.model_aliases,
                                                .n_model_aliases = gw->cfg.n_model_aliases},
                                        .max_prompt_bytes = gw->cfg.max_prompt_bytes,
                                        .max_model_len = gw->cfg.max_model_len};
                pthread_mutex_lock(&gw->hook_lock);
                t.fn = gw->tokenizer;
                pthread_mutex_unlock(&gw->hook_lock);
                return dsv__gw_tokenize(&t, conn, hr->body, hr->len, ep == EP_DETOKENIZE);
        }
        default:
                return MHD_NO;
        }
}

#define IDLE_TIMEOUT_BUSY_S 1
#define MHD_LIMIT_MARGIN 64 /* MHD's own limit above ours: it closes without an answer */

/* The idle limit for a kept-alive connection: short while connections are scarce, so
 * idle ones make room for requests instead of the accept path refusing them. */
static unsigned idle_timeout_s(struct dsv_gateway *gw) {
        unsigned busy_from = gw->cfg.max_connections - gw->cfg.max_connections / 4;
        unsigned t = gw->cfg.connection_timeout_s;
        if (dsv__gw_listener_connections(&gw->listener) >= busy_from && (t == 0 || t > IDLE_TIMEOUT_BUSY_S))
                t = IDLE_TIMEOUT_BUSY_S;
        return t;
}

/* Called with the request line, before the target is percent-decoded: the only place
 * an escaped NUL can still be seen. */
static void *on_target(void *cls, const char *uri, struct MHD_Connection *conn) {
        (void)cls, (void)conn;
        struct http_req *hr = calloc(1, sizeof *hr);
        if (hr)
                hr->target_ok = dsv__gw_strict_target_ok(uri);
        return hr;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe) {
        struct dsv_gateway *gw = cls;
        struct http_req *hr = *con_cls;
        if (hr) {
                free(hr->body);
                free(hr);
                *con_cls = NULL;
        }
        /* Back to the idle limit for the next request on a kept-alive connection. */
        MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, idle_timeout_s(gw));
}

/* ---- connections under load ---------------------------------------------------------- */

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
        struct dsv_gateway *gw = cls;
        bool started = toe == MHD_CONNECTION_NOTIFY_STARTED;
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        if (started) /* what reply.c and completion.c read to add the CORS headers */
                *socket_context = &gw->cors;
        dsv__gw_listener_connection_event(&gw->listener, started, ci ? ci->client_addr : NULL);
}

/* MHD without a listening socket of its own: the listener accepts and hands connections
 * over, answering those beyond max_connections itself. */
static int start_http(struct dsv_gateway *gw) {
        const struct dsv_gateway_config *cfg = &gw->cfg;
        struct gw_listener_limits lim = {.max_connections = cfg->max_connections,
                                         .per_ip = cfg->max_connections_per_ip,
                                         .first_byte_timeout_s = cfg->first_byte_timeout_s,
                                         .header_timeout_s = cfg->header_timeout_s,
                                         .tls = gw->tls.cert_pem != NULL};
        int r = dsv__gw_listener_open(&gw->listener, cfg->listen_host, cfg->port, &lim, &gw->metrics);
        if (r < 0)
                return r;
        unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO |
                         MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC;
        /* The per-address cap is the listener's (MHD's own closes without a status line). */
        struct MHD_OptionItem ops[] = {
                {MHD_OPTION_CONNECTION_TIMEOUT, cfg->connection_timeout_s, NULL},
                {MHD_OPTION_CONNECTION_LIMIT, cfg->max_connections + MHD_LIMIT_MARGIN, NULL},
                {MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)on_completed, gw},
                {MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)on_connection, gw},
                {MHD_OPTION_URI_LOG_CALLBACK, (intptr_t)on_target, NULL},
                /* libmicrohttpd's own strictness, level 1 ("busy public servers"): its
                 * parser refuses what http_strict.c cannot see from the request callback
                 * (NUL in a field value, an empty field name, a chunk line over its
                 * buffer). Level 2 would also refuse the empty line RFC 9112 §2.2 asks
                 * servers to skip before a request line, which older clients send after
                 * a POST body: their next request on the connection would fail. */
                {MHD_OPTION_CLIENT_DISCIPLINE_LVL, 1, NULL},
                {MHD_OPTION_END, 0, NULL}, /* the TLS pair, when configured */
                {MHD_OPTION_END, 0, NULL},
                {MHD_OPTION_END, 0, NULL},
        };
        if (gw->tls.cert_pem) {
                flags |= MHD_USE_TLS;
                ops[6] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, gw->tls.cert_pem};
                ops[7] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, gw->tls.key_pem};
        }
        gw->mhd = MHD_start_daemon(flags, 0, NULL, NULL, on_request, gw, MHD_OPTION_ARRAY, ops, MHD_OPTION_END);
        if (!gw->mhd) /* with TLS, most likely a certificate and key GnuTLS refused */
                r = gw->tls.cert_pem ? -EKEYREJECTED : -EIO;
        if (r == 0)
                r = dsv__gw_listener_start(&gw->listener, gw->mhd);
        if (r < 0) {
                dsv__gw_listener_close(&gw->listener);
                if (gw->mhd)
                        MHD_stop_daemon(gw->mhd);
                gw->mhd = NULL;
                dsv__gw_listener_done(&gw->listener);
        }
        return r;
}

struct http_starter {
        struct dsv_gateway *gw;
        int r;
};

static void *start_http_fifo(void *arg) {
        struct http_starter *st = arg;
        st->r = start_http(st->gw);
        return NULL;
}

/* Threads inherit their creator's policy, so MHD's polling thread, the connection threads
 * it creates and the accept thread all run SCHED_FIFO when they are created from a
 * thread that does: start them from one, not from the caller's thread, whose policy
 * stays as it is. */
static int start_http_at_priority(struct dsv_gateway *gw, int priority) {
        pthread_attr_t attr;
        struct sched_param sp = {.sched_priority = priority};
        int e = pthread_attr_init(&attr);
        if (e == 0)
                e = pthread_attr_setinheritsched(&attr, PTHREAD_EXPLICIT_SCHED);
        if (e == 0)
                e = pthread_attr_setschedpolicy(&attr, SCHED_FIFO);
        if (e == 0)
                e = pthread_attr_setschedparam(&attr, &sp);
        struct http_starter st = {.gw = gw};
        pthread_t t;
        if (e == 0)
                e = pthread_create(&t, &attr, start_http_fifo, &st);
        pthread_attr_destroy(&attr);
        if (e != 0)
                return -e;
        pthread_join(t, NULL);
        return st.r;
}

int dsv_gateway_start(struct dsv_gateway *gw) {
        if (!gw)
                return -EINVAL;
        if (gw->mhd)
                return -EALREADY;
        if (gw->cfg.http_rt_priority > 0) {
                int r = start_http_at_priority(gw, gw->cfg.http_rt_priority);
                if (r != -EPERM) {
                        if (r == 0)
                                gw->http_rt_priority = gw->cfg.http_rt_priority;
                        return r;
                }
        }
        return start_http(gw);
}

int dsv_gateway_port(const struct dsv_gateway *gw) {
        if (!gw || !gw->mhd)
                return -ENOTCONN;
        return dsv__gw_listener_port(&gw->listener);
}

/* ---- the object -------------------------------------------------------------------------- */

void dsv_gateway_config_init(struct dsv_gateway_config *cfg) {
        *cfg = (struct dsv_gateway_config){
                .listen_host = "127.0.0.1",
                .route = DSV_POLICY_ROUTE_LEAST_OUTSTANDING,
                .max_body_bytes = 1u << 20,
                .max_prompt_bytes = 256u << 10,
                .max_tokens_limit = 32768,
                .connection_timeout_s = 30,
                .first_byte_timeout_s = 10,
                .header_timeout_s = 30,
                .body_timeout_s = 60,
                .max_connections = 256,
                .max_running_per_instance = 8,
        };
}

static void free_config_copies(struct dsv_gateway *gw) {
        dsv__gw_keys_done(&gw->keys);
        dsv__gw_cors_done(&gw->cors);
        dsv__gw_tls_done(&gw->tls);
        for (size_t i = 0; gw->model_aliases && i < gw->cfg.n_model_aliases; i++)
                free(gw->model_aliases[i]);
        free(gw->model_aliases);
        free(gw->listen_host);
        free(gw->model);
}

int dsv_gateway_new(const struct dsv_gateway_config *cfg, struct dsv_gateway **ret_gw) {
        if (!cfg || !ret_gw || !cfg->model || !cfg->model[0] || cfg->max_body_bytes == 0 || cfg->max_prompt_bytes == 0 ||
            cfg->max_tokens_limit <= 0 || cfg->default_max_tokens < 0 || cfg->max_prompt_tokens < 0 ||
            cfg->max_model_len < 0 || cfg->max_running_per_instance == 0 || cfg->max_connections == 0 ||
            (cfg->n_model_aliases && !cfg->model_aliases) || (cfg->n_api_keys && !cfg->api_keys))
                return -EINVAL;
        struct dsv_gateway *gw = calloc(1, sizeof *gw);
        if (!gw)
                return -ENOMEM;
        gw->cfg = *cfg;
        gw->listen_host = strdup(cfg->listen_host ? cfg->listen_host : "127.0.0.1");
        gw->model = strdup(cfg->model);
        gw->cfg.listen_host = gw->listen_host;
        gw->cfg.model = gw->model;
        gw->cfg.api_keys_path = NULL;
        gw->cfg.api_keys = NULL;
        gw->cfg.n_api_keys = 0;
        gw->cfg.cors_origins = gw->cfg.tls_cert_path = gw->cfg.tls_key_path = NULL;
        gw->listener = (struct gw_listener){.fd = -1, .wake = {-1, -1}};
        int r = gw->listen_host && gw->model ? 0 : -ENOMEM;
        if (r == 0 && cfg->n_model_aliases)
                r = (gw->model_aliases = calloc(cfg->n_model_aliases, sizeof *gw->model_aliases)) ? 0 : -ENOMEM;
        for (size_t i = 0; r == 0 && i < cfg->n_model_aliases; i++)
                if (!cfg->model_aliases[i] || !cfg->model_aliases[i][0])
                        r = -EINVAL;
                else if (!(gw->model_aliases[i] = strdup(cfg->model_aliases[i])))
                        r = -ENOMEM;
        gw->cfg.model_aliases = (const char *const *)gw->model_aliases;
        if (r == 0 && cfg->api_keys_path)
                r = dsv__gw_keys_load(cfg->api_keys_path, &gw->keys);
        for (size_t i = 0; r == 0 && i < cfg->n_api_keys; i++)
                r = dsv__gw_keys_add(&gw->keys, cfg->api_keys[i]);
        gw->auth = r == 0 && gw->keys.n > 0;
        if (r == 0)
                r = dsv__gw_cors_init(&gw->cors, cfg->cors_origins);
        if (r == 0)
                r = dsv__gw_tls_load(cfg->tls_cert_path, cfg->tls_key_path, &gw->tls);
        bool metrics = false, calls = false;
        if (r == 0)
                metrics = (r = dsv__gw_metrics_init(&gw->metrics, gw->model, cfg->metrics_compat_vllm)) == 0;
        if (r == 0)
                calls = (r = dsv__gw_calls_init(&gw->calls, &gw->cfg, &gw->metrics)) == 0;
        if (r == 0)
                r = -pthread_mutex_init(&gw->hook_lock, NULL);
        if (r < 0) {
                if (calls)
                        dsv__gw_calls_done(&gw->calls);
                if (metrics)
                        dsv__gw_metrics_done(&gw->metrics);
                free_config_copies(gw);
                free(gw);
                return r;
        }
        *ret_gw = gw;
        return 0;
}

void dsv_gateway_free(struct dsv_gateway *gw) {
        if (!gw)
                return;
        dsv__gw_calls_shutdown(&gw->calls);
        dsv__gw_listener_close(&gw->listener);
        if (gw->mhd)
                MHD_stop_daemon(gw->mhd);
        gw->mhd = NULL;
        dsv__gw_listener_done(&gw->listener);
        dsv__gw_calls_done(&gw->calls);
        dsv__gw_metrics_done(&gw->metrics);
        pthread_mutex_destroy(&gw->hook_lock);
        free_config_copies(gw);
        free(gw);
}

/* ---- instances: the calls room's ---------------------------------------------------------- */

int dsv_gateway_instance_add(struct dsv_gateway *gw, const struct dsv_gateway_instance_config *ic) {
        return gw ? dsv__gw_instance_add(&gw->calls, ic) : -EINVAL;
}

int dsv_gateway_instance_set_url(struct dsv_gateway *gw, int id, const char *url) {
        return gw ? dsv__gw_instance_set_url(&gw->calls, id, url) : -EINVAL;
}

int dsv_gateway_instance_remove(struct dsv_gateway *gw, int id) {
        return gw ? dsv__gw_instance_remove(&gw->calls, id) : -EINVAL;
}

int dsv_gateway_instance_set_ready(struct dsv_gateway *gw, int id, bool ready) {
        return gw ? dsv__gw_instance_set_ready(&gw->calls, id, ready) : -EINVAL;
}

int dsv_gateway_instance_set_load(struct dsv_gateway *gw, int id, const struct dsv_policy_worker_load *load) {
        return gw ? dsv__gw_instance_set_load(&gw->calls, id, load) : -EINVAL;
}

int dsv_gateway_instance_is_up(struct dsv_gateway *gw, int id) {
        return gw ? dsv__gw_instance_is_up(&gw->calls, id) : -EINVAL;
}

int dsv_gateway_instance_stats(struct dsv_gateway *gw, int id, struct dsv_gateway_instance_stats *ret) {
        return gw ? dsv__gw_instance_stats(&gw->calls, id, ret) : -EINVAL;
}

/* ---- metrics: the metrics room's ---------------------------------------------------------- */

int dsv_gateway_metrics_render(struct dsv_gateway *gw, char **ret_text, size_t *ret_len) {
        if (!gw || !ret_text || !ret_len)
                return -EINVAL;
        struct gw_instance_sample v[DSV_GATEWAY_MAX_INSTANCES];
        size_t n = dsv__gw_instances_sample(&gw->calls, v);
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        if (!f)
                return -errno;
        struct gw_server_sample srv = {.max_connections = gw->cfg.max_connections,
                                       .max_connections_per_ip = gw->cfg.max_connections_per_ip,
                                       .http_threads_max = gw->cfg.max_connections + 2};
        if (gw->mhd)
                dsv__gw_listener_sample(&gw->listener, &srv);
        int r = dsv__gw_metrics_write(&gw->metrics, f, v, n, &srv);
        if (fclose(f) != 0 && r == 0)
                r = -EIO;
        if (r < 0) {
                free(buf);
                return r;
        }
        *ret_text = buf;
        *ret_len = len;
        return 0;
}

void dsv_gateway_set_metrics_hook(struct dsv_gateway *gw, dsv_gateway_metrics_fn fn, void *userdata) {
        if (!gw)
                return;
        pthread_mutex_lock(&gw->hook_lock);
        gw->hook = fn;
        gw->hook_userdata = userdata;
        pthread_mutex_unlock(&gw->hook_lock);
}

void dsv_gateway_set_status_hook(struct dsv_gateway *gw, dsv_gateway_status_fn fn, void *userdata) {
        if (!gw)
                return;
        pthread_mutex_lock(&gw->hook_lock);
        gw->status_hook = fn;
        gw->status_hook_userdata = userdata;
        pthread_mutex_unlock(&gw->hook_lock);
}

void dsv_gateway_set_tokenizer(struct dsv_gateway *gw, const struct dsv_gateway_tokenizer *t) {
        if (!gw)
                return;
        pthread_mutex_lock(&gw->hook_lock);
        gw->tokenizer = t ? *t : (struct dsv_gateway_tokenizer){0};
        pthread_mutex_unlock(&gw->hook_lock);
}

void dsv_gateway_set_request_log_hook(struct dsv_gateway *gw, dsv_gateway_request_log_fn fn, void *userdata) {
        if (!gw)
                return;
        dsv__gw_calls_set_request_log(&gw->calls, fn, userdata);
}

/* ---- overload ---------------------------------------------------------------------------- */

int dsv_gateway_stats(struct dsv_gateway *gw, struct dsv_gateway_stats *ret) {
        if (!gw || !ret)
                return -EINVAL;
        *ret = (struct dsv_gateway_stats){.connections_open = dsv__gw_listener_connections(&gw->listener),
                                          .max_connections = gw->cfg.max_connections,
                                          .http_rt_priority = gw->http_rt_priority};
        dsv__gw_metrics_refusals(&gw->metrics, ret);
        struct gw_instance_sample v[DSV_GATEWAY_MAX_INSTANCES];
        size_t n = dsv__gw_instances_sample(&gw->calls, v);
        for (size_t i = 0; i < n; i++)
                ret->queue_length += v[i].stats.waiting;
        return 0;
}
