/* The completion endpoints: one request from its body to its answer. The call's worker
 * events become a whole answer or, streamed, server-sent events read by MHD's content
 * reader, which blocks for the next token. MHD's connection timeout guards the time a
 * request takes to arrive; once it is complete the gateway's own deadline takes over. A
 * failure before any byte reached the client is retried once elsewhere; once streaming
 * began the status is spent and a failure ends the stream with an error event. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cors.h"
#include "server.h"

#define WAIT_SLICE_MS 100
#define SSE_BLOCK_BYTES 16384
#define RETRY_AFTER_SHUTDOWN_S 1

/* One completion request: the call plus its answer. */
struct gen {
        struct gw_call call;
        struct dsv_gw_answer answer;
        bool streaming; /* the 200 and SSE headers are queued: no retry any more */
        struct MHD_Connection *conn;
};

enum step { STEP_TOKEN, STEP_FINAL, STEP_FAIL, STEP_GONE };

static bool client_gone(int fd) {
        struct pollfd p = {.fd = fd, .events = POLLRDHUP};
        return fd >= 0 && poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* A failed attempt that nothing of reached the client yet is tried once more elsewhere. */
static bool retry(struct gen *g, struct dsv_gw_error *err) {
        if (g->streaming || dsv__gw_call_retry(&g->call, err) < 0)
                return false;
        dsv__gw_answer_reset(&g->answer);
        return true;
}

static int on_token(struct gen *g, const struct dsv_ipc_token *t) {
        return g->call.req.stream ? dsv__gw_sse_token(&g->answer, t) : dsv__gw_answer_token(&g->answer, t);
}

/* A refusal before the answer began counts in dsvisor_requests_rejected_total (once a
 * stream began it is an abort instead). */
static void count_refusal(const struct gen *g, enum dsv_gateway_reject why) {
        if (!g->streaming)
                dsv__gw_metrics_reject(g->call.calls->metrics, why);
}

/* Waits for the next thing to happen to the generation and turns it into output. */
static enum step gen_step(struct gen *g, struct dsv_gw_error *err, enum gw_abort *why) {
        struct gw_call *c = &g->call;
        const struct dsv_gateway_config *cfg = c->calls->cfg;
        for (;;) {
                int64_t now = dsv__gw_now_ns();
                if (atomic_load(&c->calls->stopping)) {
                        dsv__gw_call_cancel(c);
                        dsv__gw_error_set(err, 503, "server_error", "service_unavailable", NULL,
                                          "The server is shutting down");
                        err->retry_after_s = RETRY_AFTER_SHUTDOWN_S;
                        count_refusal(g, DSV_GATEWAY_REJECT_SHUTTING_DOWN);
                        *why = GW_ABORT_WORKER_ERROR;
                        return STEP_FAIL;
                }
                if (now >= c->deadline_ns) {
                        dsv__gw_call_cancel(c);
                        dsv__gw_error_set(err, 504, "timeout_error", "deadline_exceeded", NULL,
                                          "The request did not complete within %u ms", cfg->request_timeout_ms);
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
                        struct dsv_gw_answer *a = &g->answer;
                        dsv__gw_call_observe_end(c, f, now);
                        snprintf(a->finish, sizeof a->finish, "%s", f->finish_reason ? f->finish_reason : "stop");
                        a->prompt_tokens = f->prompt_tokens;
                        if (a->choice == 0)
                                a->cached_tokens = f->cached_tokens;
                        a->completion_tokens = f->completion_tokens;
                        if (strcmp(a->finish, "stop") == 0 || strcmp(a->finish, "length") == 0) {
                                st = STEP_FINAL;
                        } else if (strcmp(a->finish, "deadline") == 0) {
                                dsv__gw_error_set(err, 504, "timeout_error", "deadline_exceeded", NULL,
                                                  "The request did not complete within %u ms",
                                                  cfg->request_timeout_ms);
                                *why = GW_ABORT_DEADLINE;
                        } else {
                                dsv__gw_error_set(err, 500, "server_error", "internal_error", NULL,
                                                  "The generation was stopped by the model instance");
                                *why = GW_ABORT_WORKER_ERROR;
                        }
                } else {
                        dsv__gw_call_observe_end(c, NULL, now);
                        dsv__gw_worker_error(&m->u.error, err);
                        *why = GW_ABORT_WORKER_ERROR;
                        if (m->u.error.code == DSV_IPC_ERR_SHUTTING_DOWN && retry(g, err)) {
                                dsv__gw_event_free(ev);
                                continue;
                        }
                        if (m->u.error.code == DSV_IPC_ERR_OVERLOADED)
                                count_refusal(g, DSV_GATEWAY_REJECT_WORKER_OVERLOADED);
                        else if (m->u.error.code == DSV_IPC_ERR_SHUTTING_DOWN && err->status == 503)
                                count_refusal(g, DSV_GATEWAY_REJECT_SHUTTING_DOWN);
                }
                dsv__gw_event_free(ev);
                return st;
        }
}

/* After a choice's final: the next of n choices, if any, starts — the same request again
 * on the instance that made this one (its prefix cache holds the prompt's KV blocks), the
 * seed, when given, one further. 1 when it went out, 0 when that was the last choice,
 * else -errno with err filled. */
static int more_choices(struct gen *g, struct dsv_gw_error *err) {
        struct dsv_gw_answer *a = &g->answer;
        struct dsv_ipc_sampling *s = &g->call.req.ipc.u.request.sampling;
        if (a->choice + 1 >= g->call.req.n)
                return 0;
        if ((g->call.req.stream && dsv__gw_sse_choice_end(a) < 0) || dsv__gw_answer_next_choice(a) < 0) {
                dsv__gw_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
                return -ENOMEM;
        }
        if (s->has_seed)
                s->seed = s->seed < DSV_IPC_MAX_ID ? s->seed + 1 : 0;
        g->call.prefer_slot = g->call.slot;
        g->call.attempts = 0;
        int r = dsv__gw_call_start(&g->call, -1, err);
        return r < 0 ? r : 1;
}

static void gen_free(struct gen *g) {
        if (!g)
                return;
        dsv__gw_call_done(&g->call);
        dsv__gw_answer_done(&g->answer);
        free(g);
}

static struct gen *gen_new(struct gw_calls *cs, int fd) {
        struct gen *g = calloc(1, sizeof *g);
        if (!g)
                return NULL;
        if (dsv__gw_call_init(&g->call, cs, fd) < 0) {
                free(g);
                return NULL;
        }
        dsv__gw_answer_init(&g->answer, &g->call.req, cs->cfg->model);
        return g;
}

/* A stream's idle limit: none while sse_read waits for the generation (nothing is due to
 * the client then), connection_timeout_s once a block is handed to MHD. A client that
 * stops reading leaves MHD unable to write that block; past the limit MHD drops the
 * connection and frees the answer, which cancels the generation. */
static void stream_idle_limit(struct gen *g, bool writing) {
        MHD_set_connection_option(g->conn, MHD_CONNECTION_OPTION_TIMEOUT,
                                  writing ? g->call.calls->cfg->connection_timeout_s : 0u);
}

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max) {
        struct gen *g = cls;
        struct gw_metrics *metrics = g->call.calls->metrics;
        size_t n;
        stream_idle_limit(g, false);
        while ((n = dsv__gw_sse_read(&g->answer, buf, max)) == 0) {
                if (g->answer.done)
                        return MHD_CONTENT_READER_END_OF_STREAM;
                struct dsv_gw_error err;
                enum gw_abort why = GW_ABORT_WORKER_ERROR;
                enum step st = gen_step(g, &err, &why);
                int r = 0;
                if (st == STEP_FINAL) {
                        int more = more_choices(g, &err);
                        if (more < 0) {
                                dsv__gw_metrics_abort(metrics, why);
                                r = dsv__gw_sse_abort(&g->answer, &err);
                        } else if (more == 0) {
                                r = dsv__gw_sse_finish(&g->answer);
                        }
                } else if (st == STEP_FAIL) {
                        dsv__gw_metrics_abort(metrics, why);
                        r = dsv__gw_sse_abort(&g->answer, &err);
                } else if (st == STEP_GONE) {
                        dsv__gw_metrics_abort(metrics, GW_ABORT_CLIENT_GONE);
                        return MHD_CONTENT_READER_END_WITH_ERROR;
                }
                if (r < 0)
                        return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        stream_idle_limit(g, true);
        return (ssize_t)n;
}

static void sse_free(void *cls) {
        gen_free(cls);
}

enum MHD_Result dsv__gw_completion(struct gw_calls *cs, struct MHD_Connection *conn, const char *body, size_t len,
                                   enum dsv_gw_api api) {
        const struct dsv_gateway_config *cfg = cs->cfg;
        struct gw_metrics *metrics = cs->metrics;
        struct dsv_gw_error err;
        if (dsv__gw_calls_queue_full(cs, &err) < 0)
                return dsv__gw_reply_error(conn, &err, metrics);
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        struct gen *g = gen_new(cs, ci ? ci->connect_fd : -1);
        if (!g)
                return dsv__gw_reply_simple_error(conn, 500, "server_error", NULL, "out of memory", metrics);
        g->conn = conn;
        struct dsv_gw_limits lim = {
                .model = cfg->model,
                .model_aliases = cfg->model_aliases,
                .n_model_aliases = cfg->n_model_aliases,
                .max_prompt_bytes = cfg->max_prompt_bytes,
                .max_tokens_limit = cfg->max_tokens_limit,
                .default_max_tokens = cfg->default_max_tokens,
                .reasoning_format = cfg->reasoning_format,
                .think_opened = cfg->think_opened,
                .tool_format = cfg->tool_format,
        };
        enum gw_abort why;
        if (dsv__gw_request_parse(body, len, api, &lim, &g->call.req, &err) < 0) {
                gen_free(g);
                return dsv__gw_reply_error(conn, &err, metrics);
        }
        g->call.req.ipc.u.request.max_prompt_tokens = cfg->max_prompt_tokens;
        if (cfg->request_timeout_ms) {
                struct timespec wall;
                clock_gettime(CLOCK_REALTIME, &wall);
                g->call.req.ipc.u.request.deadline_unix_ms =
                        (int64_t)wall.tv_sec * 1000 + wall.tv_nsec / 1000000 + cfg->request_timeout_ms;
        }
        /* The request is in: from here the deadline, not MHD's idle timeout, bounds it. */
        MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
        if (dsv__gw_call_start(&g->call, -1, &err) < 0) {
                gen_free(g);
                return dsv__gw_reply_error(conn, &err, metrics);
        }
        dsv__gw_answer_set_id(&g->answer, g->call.id);
        enum step st;
        int more = 0;
        do {
                do
                        st = gen_step(g, &err, &why);
                while (st == STEP_TOKEN && !g->call.req.stream);
                if (st == STEP_FINAL && (more = more_choices(g, &err)) < 0)
                        st = STEP_FAIL;
        } while (more > 0 && !g->call.req.stream);
        if (st == STEP_GONE) {
                dsv__gw_metrics_status(metrics, 499); /* nginx's "client closed request" */
                gen_free(g);
                return MHD_NO;
        }
        if (st == STEP_FAIL) {
                gen_free(g);
                return dsv__gw_reply_error(conn, &err, metrics);
        }
        if (!g->call.req.stream) {
                dsv__gw_metrics_status(metrics, 200);
                enum MHD_Result r = dsv__gw_reply_json(conn, 200, dsv__gw_answer_object(&g->answer));
                gen_free(g);
                return r;
        }
        if (st == STEP_FINAL && more == 0 && dsv__gw_sse_finish(&g->answer) < 0) {
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
        dsv__gw_metrics_status(metrics, 200);
        dsv__gw_cors_decorate(conn, resp);
        enum MHD_Result r = MHD_queue_response(conn, 200, resp);
        MHD_destroy_response(resp); /* frees g through sse_free once MHD is done with it */
        return r;
}
