/* The HTTP side of the gateway: libmicrohttpd with one thread per connection, so a
 * handler may block while its generation runs; streamed answers come from a content-reader
 * callback (MHD_create_response_from_callback) that blocks for the next token. MHD's
 * connection timeout guards the time a request takes to arrive (slow or half-sent
 * requests); once a request is complete the gateway's own deadline takes over. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "core.h"

#define WAIT_SLICE_MS 100
#define SSE_BLOCK_BYTES 16384

enum endpoint {
        EP_UNKNOWN,
        EP_CHAT,
        EP_COMPLETIONS,
        EP_MODELS,
        EP_HEALTH,
        EP_READY,
        EP_METRICS,
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
};

/* Per HTTP request (MHD's con_cls). */
struct http_req {
        int ep_index; /* into endpoints[]; -1 unknown */
        char *body;
        size_t len, cap;
        bool too_large;
        bool answered; /* a response was queued before the body arrived */
};

/* One generation: the call plus what its answer needs. */
struct gen {
        struct gw_call call;
        char rid[48];
        time_t created;
        bool streaming; /* the 200 and SSE headers are queued: no retry any more */
        bool done;      /* nothing follows what is in out */
        bool role_sent;
        /* the answer */
        char *text;
        size_t text_len, text_cap;
        cJSON *logprobs; /* non-streamed: chat {"content":[...]}; completions {"tokens":[...],...} */
        char finish[16];
        int32_t prompt_tokens, completion_tokens;
        /* streamed bytes not yet handed to MHD */
        char *out;
        size_t out_len, out_cap, out_pos;
};

static int buf_append(char **buf, size_t *len, size_t *cap, const char *s, size_t n) {
        if (*len + n + 1 > *cap) {
                size_t c = *cap ? *cap : 256;
                while (c < *len + n + 1)
                        c *= 2;
                char *nb = realloc(*buf, c);
                if (!nb)
                        return -ENOMEM;
                *buf = nb;
                *cap = c;
        }
        memcpy(*buf + *len, s, n);
        *len += n;
        (*buf)[*len] = 0;
        return 0;
}

/* ---- plain responses --------------------------------------------------------------------- */

static enum MHD_Result respond(struct MHD_Connection *conn, unsigned status, const char *type, const char *body,
                               size_t len, uint32_t retry_after_s) {
        struct MHD_Response *resp = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
        if (!resp)
                return MHD_NO;
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
        if (retry_after_s) {
                char v[16];
                snprintf(v, sizeof v, "%u", retry_after_s);
                MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, v);
        }
        if (status == 401)
                MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
        enum MHD_Result r = MHD_queue_response(conn, status, resp);
        MHD_destroy_response(resp);
        return r;
}

static enum MHD_Result respond_json(struct MHD_Connection *conn, unsigned status, cJSON *o) {
        char *s = o ? cJSON_PrintUnformatted(o) : NULL;
        cJSON_Delete(o);
        if (!s)
                return MHD_NO;
        enum MHD_Result r = respond(conn, status, "application/json", s, strlen(s), 0);
        cJSON_free(s);
        return r;
}

static enum MHD_Result respond_error(struct dsv_gateway *gw, struct MHD_Connection *conn, const struct dsv_gw_error *e,
                                     bool count) {
        char *s;
        size_t len;
        if (count)
                dsv__gw_count_status(gw, e->status);
        if (dsv__gw_error_json(e, &s, &len) < 0)
                return MHD_NO;
        enum MHD_Result r = respond(conn, (unsigned)e->status, "application/json", s, len, e->retry_after_s);
        free(s);
        return r;
}

static enum MHD_Result respond_simple_error(struct dsv_gateway *gw, struct MHD_Connection *conn, int status,
                                            const char *type, const char *code, const char *msg, bool count) {
        struct dsv_gw_error e;
        dsv__gw_error_set(&e, status, type, code, NULL, "%s", msg);
        return respond_error(gw, conn, &e, count);
}

/* ---- generation -------------------------------------------------------------------------- */

static bool client_gone(int fd) {
        struct pollfd p = {.fd = fd, .events = POLLRDHUP};
        return fd >= 0 && poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

static cJSON *chunk_base(const struct gen *g) {
        bool chat = g->call.req.api == DSV_GW_API_CHAT;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "id", g->rid);
        cJSON_AddStringToObject(o, "object", chat ? (g->call.req.stream ? "chat.completion.chunk" : "chat.completion")
                                                  : "text_completion");
        cJSON_AddNumberToObject(o, "created", (double)g->created);
        cJSON_AddStringToObject(o, "model", g->call.gw->cfg.model);
        return o;
}

/* The worker names alternatives by token id only: "token_id:<n>" stands for their text. */
static cJSON *chat_logprob(const struct dsv_ipc_token *t, int32_t top_n) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "token", t->text ? t->text : "");
        cJSON_AddNumberToObject(e, "logprob", t->logprob);
        cJSON *bytes = cJSON_AddArrayToObject(e, "bytes");
        for (const unsigned char *p = (const unsigned char *)(t->text ? t->text : ""); *p; p++)
                cJSON_AddItemToArray(bytes, cJSON_CreateNumber(*p));
        cJSON *top = cJSON_AddArrayToObject(e, "top_logprobs");
        for (size_t i = 0; i < t->n_top && i < (size_t)top_n; i++) {
                char name[32];
                snprintf(name, sizeof name, "token_id:%d", t->top[i].token);
                cJSON *a = cJSON_CreateObject();
                cJSON_AddStringToObject(a, "token", name);
                cJSON_AddNumberToObject(a, "logprob", t->top[i].logprob);
                cJSON_AddNullToObject(a, "bytes");
                cJSON_AddItemToArray(top, a);
        }
        return e;
}

static void completion_logprob_add(cJSON *lp, const struct dsv_ipc_token *t, size_t offset, int32_t top_n) {
        cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "tokens"), cJSON_CreateString(t->text ? t->text : ""));
        cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "token_logprobs"), cJSON_CreateNumber(t->logprob));
        cJSON *top = cJSON_CreateObject();
        for (size_t i = 0; i < t->n_top && i < (size_t)top_n; i++) {
                char name[32];
                snprintf(name, sizeof name, "token_id:%d", t->top[i].token);
                cJSON_AddNumberToObject(top, name, t->top[i].logprob);
        }
        cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "top_logprobs"), top);
        cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "text_offset"), cJSON_CreateNumber((double)offset));
}

static cJSON *completion_logprobs_new(void) {
        cJSON *lp = cJSON_CreateObject();
        cJSON_AddArrayToObject(lp, "tokens");
        cJSON_AddArrayToObject(lp, "token_logprobs");
        cJSON_AddArrayToObject(lp, "top_logprobs");
        cJSON_AddArrayToObject(lp, "text_offset");
        return lp;
}

static cJSON *usage_new(const struct gen *g) {
        cJSON *u = cJSON_CreateObject();
        cJSON_AddNumberToObject(u, "prompt_tokens", g->prompt_tokens);
        cJSON_AddNumberToObject(u, "completion_tokens", g->completion_tokens);
        cJSON_AddNumberToObject(u, "total_tokens", (double)g->prompt_tokens + g->completion_tokens);
        return u;
}

static int out_add(struct gen *g, const char *s, size_t n) {
        return buf_append(&g->out, &g->out_len, &g->out_cap, s, n);
}

/* One SSE event "data: <json>\n\n" (frees o). */
static int out_event(struct gen *g, cJSON *o) {
        char *s = o ? cJSON_PrintUnformatted(o) : NULL;
        cJSON_Delete(o);
        if (!s)
                return -ENOMEM;
        int r = out_add(g, "data: ", 6);
        if (r == 0)
                r = out_add(g, s, strlen(s));
        if (r == 0)
                r = out_add(g, "\n\n", 2);
        cJSON_free(s);
        return r;
}

/* A chunk with one choice: chat {"delta":{...}}, completions {"text":...}. */
static int out_choice(struct gen *g, const char *role, const char *text, const char *finish, cJSON *logprobs) {
        cJSON *o = chunk_base(g);
        cJSON *choices = cJSON_AddArrayToObject(o, "choices");
        cJSON *c = cJSON_CreateObject();
        cJSON_AddItemToArray(choices, c);
        cJSON_AddNumberToObject(c, "index", 0);
        if (g->call.req.api == DSV_GW_API_CHAT) {
                cJSON *d = cJSON_AddObjectToObject(c, "delta");
                if (role)
                        cJSON_AddStringToObject(d, "role", role);
                if (text)
                        cJSON_AddStringToObject(d, "content", text);
        } else {
                cJSON_AddStringToObject(c, "text", text ? text : "");
        }
        if (logprobs)
                cJSON_AddItemToObject(c, "logprobs", logprobs);
        else
                cJSON_AddNullToObject(c, "logprobs");
        if (finish)
                cJSON_AddStringToObject(c, "finish_reason", finish);
        else
                cJSON_AddNullToObject(c, "finish_reason");
        if (g->call.req.include_usage)
                cJSON_AddNullToObject(o, "usage");
        return out_event(g, o);
}

static int on_token(struct gen *g, const struct dsv_ipc_token *t) {
        const struct dsv_gw_request *q = &g->call.req;
        const char *text = t->text ? t->text : "";
        if (!q->stream) {
                if (q->logprobs) {
                        if (!g->logprobs)
                                g->logprobs = q->api == DSV_GW_API_CHAT ? cJSON_CreateObject() : completion_logprobs_new();
                        if (q->api == DSV_GW_API_CHAT) {
                                cJSON *content = cJSON_GetObjectItem(g->logprobs, "content");
                                if (!content)
                                        content = cJSON_AddArrayToObject(g->logprobs, "content");
                                cJSON_AddItemToArray(content, chat_logprob(t, q->top_logprobs));
                        } else {
                                completion_logprob_add(g->logprobs, t, g->text_len, q->top_logprobs);
                        }
                }
                return buf_append(&g->text, &g->text_len, &g->text_cap, text, strlen(text));
        }
        int r = 0;
        if (q->api == DSV_GW_API_CHAT && !g->role_sent) {
                r = out_choice(g, "assistant", "", NULL, NULL);
                g->role_sent = true;
        }
        if (r < 0 || (!text[0] && !q->logprobs))
                return r; /* an empty delta (a stop string still possible) is not sent */
        cJSON *lp = NULL;
        if (q->logprobs) {
                if (q->api == DSV_GW_API_CHAT) {
                        lp = cJSON_CreateObject();
                        cJSON_AddItemToArray(cJSON_AddArrayToObject(lp, "content"), chat_logprob(t, q->top_logprobs));
                } else {
                        lp = completion_logprobs_new();
                        completion_logprob_add(lp, t, g->text_len, q->top_logprobs);
                }
        }
        g->text_len += strlen(text); /* the offset of the next completion token */
        return out_choice(g, NULL, text, NULL, lp);
}

/* The streamed tail: the finish chunk, the usage chunk when asked for, [DONE]. */
static int out_finish(struct gen *g) {
        int r = 0;
        if (g->call.req.api == DSV_GW_API_CHAT && !g->role_sent) {
                r = out_choice(g, "assistant", "", NULL, NULL);
                g->role_sent = true;
        }
        if (r == 0)
                r = out_choice(g, NULL, NULL, g->finish, NULL);
        if (r == 0 && g->call.req.include_usage) {
                cJSON *o = chunk_base(g);
                cJSON_AddArrayToObject(o, "choices");
                cJSON_AddItemToObject(o, "usage", usage_new(g));
                r = out_event(g, o);
        }
        if (r == 0)
                r = out_add(g, "data: [DONE]\n\n", 14);
        g->done = true;
        return r;
}

/* A stream that cannot finish: an error event, then [DONE]. */
static int out_abort(struct gen *g, const struct dsv_gw_error *e) {
        char *s;
        size_t len;
        int r = dsv__gw_error_json(e, &s, &len);
        if (r == 0) {
                r = out_add(g, "data: ", 6);
                if (r == 0)
                        r = out_add(g, s, len);
                free(s);
        }
        if (r == 0)
                r = out_add(g, "\n\ndata: [DONE]\n\n", 16);
        g->done = true;
        return r;
}

static void map_worker_error(const struct dsv_ipc_error *we, struct dsv_gw_error *e) {
        /* Only the request's own faults are worth repeating to the client; anything
         * else gets a fixed text, so no worker internals leak. */
        switch (we->code) {
        case DSV_IPC_ERR_INVALID_REQUEST:
                dsv__gw_error_set(e, 400, "invalid_request_error", "invalid_value", NULL, "%s",
                                  we->message && we->message[0] ? we->message : "The request was refused");
                break;
        case DSV_IPC_ERR_PROMPT_TOO_LONG:
                dsv__gw_error_set(e, 400, "invalid_request_error", "context_length_exceeded", NULL,
                                  "The prompt plus max_tokens exceeds the model's context length");
                break;
        case DSV_IPC_ERR_OVERLOADED:
                dsv__gw_error_set(e, 429, "rate_limit_error", "rate_limit_exceeded", NULL,
                                  "The model instance is overloaded; retry later");
                e->retry_after_s = 1;
                break;
        case DSV_IPC_ERR_DEADLINE:
                dsv__gw_error_set(e, 504, "timeout_error", "deadline_exceeded", NULL, "The request timed out");
                break;
        case DSV_IPC_ERR_SHUTTING_DOWN:
                dsv__gw_error_set(e, 503, "server_error", "service_unavailable", NULL,
                                  "The model instance is shutting down; retry later");
                e->retry_after_s = 1;
                break;
        default:
                dsv__gw_error_set(e, 500, "server_error", "internal_error", NULL,
                                  "The model instance failed to process the request");
                break;
        }
}

enum step { STEP_TOKEN, STEP_FINAL, STEP_FAIL, STEP_GONE };

/* A failed attempt that nothing of reached the client yet is tried once more elsewhere. */
static bool retry(struct gen *g, struct dsv_gw_error *err) {
        if (g->streaming || g->call.attempts >= 2)
                return false;
        dsv__gw_count_retry(g->call.gw);
        g->text_len = 0;
        g->role_sent = false;
        g->out_len = g->out_pos = 0;
        cJSON_Delete(g->logprobs);
        g->logprobs = NULL;
        int failed = g->call.slot;
        int r = dsv__gw_call_start(&g->call, failed, err);
        return r == 0;
}

/* Waits for the next thing to happen to the generation and turns it into output. */
static enum step gen_step(struct gen *g, struct dsv_gw_error *err, enum gw_abort *why) {
        struct gw_call *c = &g->call;
        for (;;) {
                int64_t now = dsv__gw_now_ns();
                if (atomic_load(&c->gw->stopping)) {
                        dsv__gw_call_cancel(c);
                        dsv__gw_error_set(err, 503, "server_error", "service_unavailable", NULL,
                                          "The server is shutting down");
                        *why = GW_ABORT_WORKER_ERROR;
                        return STEP_FAIL;
                }
                if (now >= c->deadline_ns) {
                        dsv__gw_call_cancel(c);
                        dsv__gw_error_set(err, 504, "timeout_error", "deadline_exceeded", NULL,
                                          "The request did not complete within %u ms", c->gw->cfg.request_timeout_ms);
                        *why = GW_ABORT_DEADLINE;
                        return STEP_FAIL;
                }
                if (client_gone(c->fd)) {
                        dsv__gw_call_cancel(c);
                        return STEP_GONE;
                }
                int64_t left_ms = (c->deadline_ns - now) / 1000000 + 1;
                struct gw_event *ev;
                int r = dsv__gw_call_wait(c, left_ms < WAIT_SLICE_MS ? (int)left_ms : WAIT_SLICE_MS, &ev);
                if (r == -ETIMEDOUT)
                        continue;
                if (r == -ECONNRESET) {
                        if (retry(g, err))
                                continue;
                        if (g->streaming || c->attempts >= 2)
                                dsv__gw_error_set(err, 502, "server_error", "instance_failed", NULL,
                                                  "The model instance serving this request failed");
                        *why = GW_ABORT_INSTANCE_LOST;
                        return STEP_FAIL;
                }
                now = dsv__gw_now_ns();
                struct dsv_ipc_msg *m = &ev->msg;
                enum step st = STEP_FAIL;
                if (m->type == DSV_IPC_TOKEN) {
                        dsv__gw_call_observe_token(c, now);
                        st = on_token(g, &m->u.token) < 0 ? STEP_FAIL : STEP_TOKEN;
                        if (st == STEP_FAIL) {
                                dsv__gw_call_cancel(c);
                                dsv__gw_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
                                *why = GW_ABORT_WORKER_ERROR;
                        }
                } else if (m->type == DSV_IPC_FINAL) {
                        const struct dsv_ipc_final *f = &m->u.final;
                        dsv__gw_call_observe_end(c, f, now);
                        snprintf(g->finish, sizeof g->finish, "%s", f->finish_reason ? f->finish_reason : "stop");
                        g->prompt_tokens = f->prompt_tokens;
                        g->completion_tokens = f->completion_tokens;
                        if (strcmp(g->finish, "stop") == 0 || strcmp(g->finish, "length") == 0) {
                                st = STEP_FINAL;
                        } else if (strcmp(g->finish, "deadline") == 0) {
                                dsv__gw_error_set(err, 504, "timeout_error", "deadline_exceeded", NULL,
                                                  "The request did not complete within %u ms",
                                                  c->gw->cfg.request_timeout_ms);
                                *why = GW_ABORT_DEADLINE;
                        } else {
                                dsv__gw_error_set(err, 500, "server_error", "internal_error", NULL,
                                                  "The generation was stopped by the model instance");
                                *why = GW_ABORT_WORKER_ERROR;
                        }
                } else {
                        dsv__gw_call_observe_end(c, NULL, now);
                        map_worker_error(&m->u.error, err);
                        *why = GW_ABORT_WORKER_ERROR;
                        if (m->u.error.code == DSV_IPC_ERR_SHUTTING_DOWN && retry(g, err)) {
                                dsv__gw_event_free(ev);
                                continue;
                        }
                }
                dsv__gw_event_free(ev);
                return st;
        }
}

static void gen_free(struct gen *g) {
        if (!g)
                return;
        dsv__gw_call_cancel(&g->call);
        struct gw_event *ev;
        while (dsv__gw_call_wait(&g->call, 0, &ev) == 0)
                dsv__gw_event_free(ev);
        dsv__gw_request_done(&g->call.req);
        pthread_mutex_destroy(&g->call.lock);
        pthread_cond_destroy(&g->call.cond);
        cJSON_Delete(g->logprobs);
        free(g->text);
        free(g->out);
        free(g);
}

static struct gen *gen_new(struct dsv_gateway *gw, int fd) {
        struct gen *g = calloc(1, sizeof *g);
        if (!g)
                return NULL;
        g->call.gw = gw;
        g->call.fd = fd;
        g->call.slot = -1;
        g->call.t_arrival_ns = dsv__gw_now_ns();
        g->call.deadline_ns = g->call.t_arrival_ns + (int64_t)gw->cfg.request_timeout_ms * 1000000;
        g->created = time(NULL);
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&g->call.cond, &ca);
        pthread_condattr_destroy(&ca);
        pthread_mutex_init(&g->call.lock, NULL);
        return g;
}

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max) {
        struct gen *g = cls;
        while (g->out_pos == g->out_len) {
                if (g->done)
                        return MHD_CONTENT_READER_END_OF_STREAM;
                g->out_len = g->out_pos = 0;
                struct dsv_gw_error err;
                enum gw_abort why = GW_ABORT_WORKER_ERROR;
                enum step st = gen_step(g, &err, &why);
                int r = 0;
                if (st == STEP_FINAL) {
                        r = out_finish(g);
                } else if (st == STEP_FAIL) {
                        dsv__gw_count_abort(g->call.gw, why);
                        r = out_abort(g, &err);
                } else if (st == STEP_GONE) {
                        dsv__gw_count_abort(g->call.gw, GW_ABORT_CLIENT_GONE);
                        return MHD_CONTENT_READER_END_WITH_ERROR;
                }
                if (r < 0)
                        return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        size_t n = g->out_len - g->out_pos < max ? g->out_len - g->out_pos : max;
        memcpy(buf, g->out + g->out_pos, n);
        g->out_pos += n;
        return (ssize_t)n;
}

static void sse_free(void *cls) {
        gen_free(cls);
}

static enum MHD_Result respond_final(struct gen *g, struct MHD_Connection *conn) {
        const struct dsv_gw_request *q = &g->call.req;
        cJSON *o = chunk_base(g);
        cJSON *c = cJSON_CreateObject();
        cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "choices"), c);
        cJSON_AddNumberToObject(c, "index", 0);
        if (q->api == DSV_GW_API_CHAT) {
                cJSON *m = cJSON_AddObjectToObject(c, "message");
                cJSON_AddStringToObject(m, "role", "assistant");
                cJSON_AddStringToObject(m, "content", g->text ? g->text : "");
        } else {
                cJSON_AddStringToObject(c, "text", g->text ? g->text : "");
        }
        if (q->logprobs) {
                if (!g->logprobs)
                        g->logprobs = q->api == DSV_GW_API_CHAT ? cJSON_CreateObject() : completion_logprobs_new();
                if (q->api == DSV_GW_API_CHAT && !cJSON_GetObjectItem(g->logprobs, "content"))
                        cJSON_AddArrayToObject(g->logprobs, "content");
                cJSON_AddItemToObject(c, "logprobs", g->logprobs);
                g->logprobs = NULL;
        } else {
                cJSON_AddNullToObject(c, "logprobs");
        }
        cJSON_AddStringToObject(c, "finish_reason", g->finish);
        cJSON_AddItemToObject(o, "usage", usage_new(g));
        dsv__gw_count_status(g->call.gw, 200);
        return respond_json(conn, 200, o);
}

static enum MHD_Result handle_generation(struct dsv_gateway *gw, struct MHD_Connection *conn, struct http_req *hr,
                                         enum dsv_gw_api api) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        struct gen *g = gen_new(gw, ci ? ci->connect_fd : -1);
        if (!g)
                return respond_simple_error(gw, conn, 500, "server_error", NULL, "out of memory", true);
        struct dsv_gw_limits lim = {
                .model = gw->cfg.model,
                .max_prompt_bytes = gw->cfg.max_prompt_bytes,
                .max_tokens_limit = gw->cfg.max_tokens_limit,
                .default_max_tokens = gw->cfg.default_max_tokens,
        };
        struct dsv_gw_error err;
        enum gw_abort why;
        if (dsv__gw_request_parse(hr->body, hr->len, api, &lim, &g->call.req, &err) < 0) {
                gen_free(g);
                return respond_error(gw, conn, &err, true);
        }
        struct timespec wall;
        clock_gettime(CLOCK_REALTIME, &wall);
        g->call.req.ipc.u.request.deadline_unix_ms =
                (int64_t)wall.tv_sec * 1000 + wall.tv_nsec / 1000000 + gw->cfg.request_timeout_ms;
        /* The request is in: from here the deadline, not MHD's idle timeout, bounds it. */
        MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
        if (dsv__gw_call_start(&g->call, -1, &err) < 0) {
                gen_free(g);
                return respond_error(gw, conn, &err, true);
        }
        snprintf(g->rid, sizeof g->rid, "%s-%016llx", api == DSV_GW_API_CHAT ? "chatcmpl" : "cmpl",
                 (unsigned long long)g->call.id);
        enum step st;
        do
                st = gen_step(g, &err, &why);
        while (st == STEP_TOKEN && !g->call.req.stream);
        if (st == STEP_GONE) {
                dsv__gw_count_status(gw, 499); /* nginx's "client closed request" */
                gen_free(g);
                return MHD_NO;
        }
        if (st == STEP_FAIL) {
                gen_free(g);
                return respond_error(gw, conn, &err, true);
        }
        if (!g->call.req.stream) {
                enum MHD_Result r = respond_final(g, conn);
                gen_free(g);
                return r;
        }
        if (st == STEP_FINAL && out_finish(g) < 0) {
                gen_free(g);
                return MHD_NO;
        }
        g->streaming = true;
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, SSE_BLOCK_BYTES, sse_read, g,
                                                                      sse_free);
        if (!resp) {
                gen_free(g);
                return MHD_NO;
        }
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        MHD_add_response_header(resp, "X-Accel-Buffering", "no");
        dsv__gw_count_status(gw, 200);
        enum MHD_Result r = MHD_queue_response(conn, 200, resp);
        MHD_destroy_response(resp); /* frees g through sse_free once MHD is done with it */
        return r;
}

/* ---- other endpoints -------------------------------------------------------------------- */

static enum MHD_Result handle_models(struct dsv_gateway *gw, struct MHD_Connection *conn) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "object", "list");
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "id", gw->cfg.model);
        cJSON_AddStringToObject(m, "object", "model");
        cJSON_AddNumberToObject(m, "created", 0);
        cJSON_AddStringToObject(m, "owned_by", "dsvisor");
        cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "data"), m);
        return respond_json(conn, 200, o);
}

static enum MHD_Result handle_ready(struct dsv_gateway *gw, struct MHD_Connection *conn) {
        int up = dsv__gw_instances_up(gw);
        if (up == 0) {
                struct dsv_gw_error e;
                dsv__gw_error_set(&e, 503, "server_error", "service_unavailable", NULL, "No model instance is ready");
                e.retry_after_s = gw->cfg.admit.retry_after_unavailable_s ? gw->cfg.admit.retry_after_unavailable_s : 5;
                return respond_error(gw, conn, &e, false);
        }
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "status", "ready");
        cJSON_AddNumberToObject(o, "instances_up", up);
        return respond_json(conn, 200, o);
}

static enum MHD_Result handle_metrics(struct dsv_gateway *gw, struct MHD_Connection *conn) {
        char *text = NULL;
        size_t len = 0;
        int r = dsv_gateway_metrics_render(gw, &text, &len);
        pthread_mutex_lock(&gw->lock);
        dsv_gateway_metrics_fn hook = gw->hook;
        void *userdata = gw->hook_userdata;
        pthread_mutex_unlock(&gw->lock);
        if (r == 0 && hook) {
                char *more = NULL;
                size_t more_len = 0;
                FILE *f = open_memstream(&more, &more_len);
                r = f ? hook(f, userdata) : -errno;
                if (f && fclose(f) != 0 && r == 0)
                        r = -EIO;
                size_t cap = len + 1; /* open_memstream's buffer holds len bytes and a NUL */
                if (r == 0)
                        r = buf_append(&text, &len, &cap, more, more_len);
                free(more);
        }
        if (r < 0) {
                free(text);
                return respond_simple_error(gw, conn, 500, "server_error", NULL, "The metrics could not be rendered",
                                            false);
        }
        enum MHD_Result ret = respond(conn, 200, "text/plain; version=0.0.4; charset=utf-8", text, len, 0);
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

/* Checks made before the body is read: route, method, API key, declared size. Returns
 * MHD_YES with hr->answered set when it queued a response. */
static enum MHD_Result check_headers(struct dsv_gateway *gw, struct MHD_Connection *conn, const char *url,
                                     const char *method, struct http_req *hr) {
        bool method_ok = false;
        hr->ep_index = find_endpoint(url, method, &method_ok);
        hr->answered = true;
        if (hr->ep_index < 0)
                return respond_simple_error(gw, conn, 404, "invalid_request_error", "unknown_url",
                                            "Unknown request URL", false);
        if (!method_ok) {
                struct dsv_gw_error e;
                dsv__gw_error_set(&e, 405, "invalid_request_error", "method_not_allowed", NULL,
                                  "Use %s for this URL", endpoints[hr->ep_index].method);
                return respond_error(gw, conn, &e, false);
        }
        bool generation = endpoints[hr->ep_index].ep == EP_CHAT || endpoints[hr->ep_index].ep == EP_COMPLETIONS;
        if (gw->auth && endpoints[hr->ep_index].auth &&
            !dsv__gw_keys_check(&gw->keys, MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization")))
                return respond_simple_error(gw, conn, 401, "invalid_request_error", "invalid_api_key",
                                            "Incorrect or missing API key", generation);
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > gw->cfg.max_body_bytes) {
                struct dsv_gw_error e;
                dsv__gw_error_set(&e, 413, "invalid_request_error", "request_too_large", NULL,
                                  "The request body is larger than %zu bytes", gw->cfg.max_body_bytes);
                return respond_error(gw, conn, &e, generation);
        }
        hr->answered = false;
        return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
        struct dsv_gateway *gw = cls;
        struct http_req *hr = *con_cls;
        if (!hr) {
                if (!(hr = calloc(1, sizeof *hr)))
                        return MHD_NO;
                *con_cls = hr;
                return check_headers(gw, conn, url, method, hr);
        }
        if (*upload_data_size) {
                size_t n = *upload_data_size;
                *upload_data_size = 0;
                if (hr->answered || hr->too_large)
                        return MHD_YES;
                if (hr->len + n > gw->cfg.max_body_bytes) {
                        hr->too_large = true; /* chunked upload: refuse once it is all read */
                        return MHD_YES;
                }
                return buf_append(&hr->body, &hr->len, &hr->cap, upload_data, n) == 0 ? MHD_YES : MHD_NO;
        }
        if (hr->answered)
                return MHD_YES;
        hr->answered = true;
        enum endpoint ep = endpoints[hr->ep_index].ep;
        if (hr->too_large) {
                struct dsv_gw_error e;
                dsv__gw_error_set(&e, 413, "invalid_request_error", "request_too_large", NULL,
                                  "The request body is larger than %zu bytes", gw->cfg.max_body_bytes);
                return respond_error(gw, conn, &e, true);
        }
        switch (ep) {
        case EP_CHAT:
                return handle_generation(gw, conn, hr, DSV_GW_API_CHAT);
        case EP_COMPLETIONS:
                return handle_generation(gw, conn, hr, DSV_GW_API_COMPLETIONS);
        case EP_MODELS:
                return handle_models(gw, conn);
        case EP_HEALTH: {
                static const char ok[] = "{\"status\":\"ok\"}";
                return respond(conn, 200, "application/json", ok, sizeof ok - 1, 0);
        }
        case EP_READY:
                return handle_ready(gw, conn);
        case EP_METRICS:
                return handle_metrics(gw, conn);
        default:
                return MHD_NO;
        }
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
        MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, gw->cfg.connection_timeout_s);
}

int dsv_gateway_start(struct dsv_gateway *gw) {
        if (!gw)
                return -EINVAL;
        if (gw->mhd)
                return -EALREADY;
        struct addrinfo hints = {.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV, .ai_socktype = SOCK_STREAM};
        struct addrinfo *ai;
        char port[8];
        snprintf(port, sizeof port, "%u", gw->cfg.port);
        if (getaddrinfo(gw->cfg.listen_host, port, &hints, &ai) != 0)
                return -EINVAL;
        unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO;
        if (ai->ai_family == AF_INET6)
                flags |= MHD_USE_IPv6;
        errno = 0;
        gw->mhd = MHD_start_daemon(flags, gw->cfg.port, NULL, NULL, on_request, gw, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                                   MHD_OPTION_CONNECTION_TIMEOUT, gw->cfg.connection_timeout_s,
                                   MHD_OPTION_CONNECTION_LIMIT, gw->cfg.max_connections, MHD_OPTION_NOTIFY_COMPLETED,
                                   on_completed, gw, MHD_OPTION_END);
        int saved = errno;
        freeaddrinfo(ai);
        if (!gw->mhd)
                return saved == EADDRINUSE || saved == EACCES ? -saved : -EIO;
        return 0;
}

int dsv_gateway_port(const struct dsv_gateway *gw) {
        if (!gw || !gw->mhd)
                return -ENOTCONN;
        const union MHD_DaemonInfo *di = MHD_get_daemon_info(gw->mhd, MHD_DAEMON_INFO_BIND_PORT);
        return di ? di->port : -ENOTCONN;
}

void dsv__gw_http_stop(struct dsv_gateway *gw) {
        if (gw->mhd)
                MHD_stop_daemon(gw->mhd);
        gw->mhd = NULL;
}
