/* A client for dsvisor-worker: starts the binary, talks to it over a raw nng PAIR1
 * socket (so tests can also send malformed bytes) with dsv_ipc encode/decode, and
 * gathers per-request events. Used by worker_bench and by the worker's integration
 * tests, which find it here (tests/worker.cmake adds bench/ to their include path). */
#ifndef DSV_WORKER_CLIENT_H
#define DSV_WORKER_CLIENT_H

#include <errno.h>
#include <nng/nng.h>
#include <nng/protocol/pair1/pair.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dsv_ipc.h"
#include "bench_clock.h"

static inline int64_t wc_realtime_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A private 0700 directory for the socket and the model cache. */
static inline const char *wc_tmpdir(void) {
        static char dir[256];
        if (!dir[0]) {
                snprintf(dir, sizeof dir, "/tmp/dsv-wtest-XXXXXX");
                if (!mkdtemp(dir))
                        return NULL;
                if (!getenv("DSV_CACHE_DIR")) {
                        char cache[300];
                        const char *b = getenv("DSV_BUILD_DIR");
                        if (b)
                                snprintf(cache, sizeof cache, "%s/model-cache", b);
                        else
                                snprintf(cache, sizeof cache, "%s/cache", dir);
                        setenv("DSV_CACHE_DIR", cache, 1);
                }
        }
        return dir;
}

static inline void wc_worker_path(char *buf, size_t size) {
        const char *b = getenv("DSV_BUILD_DIR");
        snprintf(buf, size, "%s/bin/dsvisor-worker", b ? b : ".");
}

/* Starts dsvisor-worker with args (NULL-terminated, after argv[0]); its pid. */
static inline pid_t wc_spawn(char *const *args) {
        char path[1024];
        wc_worker_path(path, sizeof path);
        char *argv[64] = {path};
        int n = 1;
        for (; args[n - 1] && n < 63; n++)
                argv[n] = args[n - 1];
        argv[n] = NULL;
        pid_t pid = fork();
        if (pid == 0) {
                execv(path, argv);
                _exit(127);
        }
        return pid;
}

struct wc {
        nng_socket sock;
        struct dsv_ipc_msg *pending; /* the rest of an "events" batch, from at on */
        size_t n_pending, at;
};

static inline int wc_open(struct wc *c, const char *url) {
        *c = (struct wc){0};
        if (nng_pair1_open(&c->sock) != 0)
                return -EIO;
        nng_socket_set_size(c->sock, NNG_OPT_RECVMAXSZ, DSV_IPC_MAX_MSG_BYTES);
        nng_socket_set_ms(c->sock, NNG_OPT_RECONNMINT, 20);
        nng_socket_set_ms(c->sock, NNG_OPT_RECONNMAXT, 100);
        return nng_dial(c->sock, url, NULL, NNG_FLAG_NONBLOCK) == 0 ? 0 : -EIO;
}

static inline void wc_close(struct wc *c) {
        nng_close(c->sock);
        for (; c->at < c->n_pending; c->at++)
                dsv_ipc_msg_done(&c->pending[c->at]);
        free(c->pending);
        c->pending = NULL;
        c->n_pending = c->at = 0;
}

static inline int wc_send_raw(struct wc *c, const char *json) {
        return nng_send(c->sock, (void *)json, strlen(json), 0) == 0 ? 0 : -EIO;
}

static inline int wc_send(struct wc *c, const struct dsv_ipc_msg *m) {
        char *buf;
        size_t len;
        int r = dsv_ipc_msg_encode(m, &buf, &len);
        if (r < 0)
                return r;
        r = nng_send(c->sock, buf, len, 0) == 0 ? 0 : -EIO;
        free(buf);
        return r;
}

/* One message within timeout_ms: 0, -ETIMEDOUT or -EPROTO. An "events" batch (the
 * worker's events of one step, PROTOCOL.md) comes out one event per call. */
static inline int wc_recv(struct wc *c, struct dsv_ipc_msg *m, int timeout_ms) {
        if (c->at < c->n_pending) {
                *m = c->pending[c->at++];
                if (c->at == c->n_pending) {
                        free(c->pending);
                        c->pending = NULL;
                        c->n_pending = c->at = 0;
                }
                return 0;
        }
        nng_socket_set_ms(c->sock, NNG_OPT_RECVTIMEO, timeout_ms);
        char *buf;
        size_t len;
        int rv = nng_recv(c->sock, &buf, &len, NNG_FLAG_ALLOC);
        if (rv == NNG_ETIMEDOUT)
                return -ETIMEDOUT;
        if (rv != 0)
                return -EIO;
        struct dsv_ipc_msg *msgs;
        size_t n;
        int r = dsv_ipc_msgs_decode(buf, len, &msgs, &n, NULL, 0);
        nng_free(buf, len);
        if (r < 0)
                return r;
        *m = msgs[0];
        if (n == 1) {
                free(msgs);
                return 0;
        }
        c->pending = msgs;
        c->n_pending = n;
        c->at = 1;
        return 0;
}

/* Receives until a message of type arrives (late health replies of wc_wait_state and
 * other events are skipped): 0 with *m filled, or -ETIMEDOUT. */
static inline int wc_recv_type(struct wc *c, struct dsv_ipc_msg *m, enum dsv_ipc_msg_type type, int timeout_ms) {
        double end = bench_now_s() + timeout_ms / 1000.0;
        while (bench_now_s() < end) {
                if (wc_recv(c, m, 100) < 0)
                        continue;
                if (m->type == type)
                        return 0;
                dsv_ipc_msg_done(m);
        }
        return -ETIMEDOUT;
}

/* Sends health probes until a reply says state (e.g. "ready"); 0 or -ETIMEDOUT. */
static inline int wc_wait_state(struct wc *c, const char *state, double timeout_s) {
        double end = bench_now_s() + timeout_s;
        uint64_t seq = 1;
        while (bench_now_s() < end) {
                struct dsv_ipc_msg m = {.type = DSV_IPC_HEALTH};
                m.u.probe.seq = seq++;
                wc_send(c, &m);
                struct dsv_ipc_msg r;
                if (wc_recv(c, &r, 200) == 0) {
                        int ok = r.type == DSV_IPC_HEALTH_REPLY && !strcmp(r.u.health.state, state);
                        dsv_ipc_msg_done(&r);
                        if (ok)
                                return 0;
                }
        }
        return -ETIMEDOUT;
}

#define WC_MAX_REQ 64
#define WC_MAX_OUT 512

/* What came back for one request. */
struct wc_result {
        int32_t tokens[WC_MAX_OUT];
        int n_tokens;
        char text[8192];
        char reason[16];    /* final's finish_reason, "" before */
        int error;          /* error code + 1, 0: none */
        char message[256];  /* the error's message */
        int done;
        double t_sent, t_first, t_last, t_done;
        double itl_sum;
        double itl[WC_MAX_OUT]; /* gaps between token events */
        int n_itl;
        int n_logprobs;
        float logprob[WC_MAX_OUT]; /* each token's own */
        int cached_tokens;  /* final's: prompt tokens the worker's KV cache supplied */
};

/* Receives events into res[id] (ids < WC_MAX_REQ) until n_expected requests are done
 * or timeout; returns the number done. Errors with id 0 go to res[0]. */
static inline int wc_collect(struct wc *c, struct wc_result *res, int n_expected, double timeout_s) {
        int n_done = 0;
        double end = bench_now_s() + timeout_s;
        while (n_done < n_expected && bench_now_s() < end) {
                struct dsv_ipc_msg m;
                if (wc_recv(c, &m, 200) < 0)
                        continue;
                double t = bench_now_s();
                uint64_t id = m.type == DSV_IPC_TOKEN ? m.u.token.id
                              : m.type == DSV_IPC_FINAL ? m.u.final.id
                              : m.type == DSV_IPC_ERROR ? m.u.error.id
                                                        : WC_MAX_REQ;
                if (id < WC_MAX_REQ) {
                        struct wc_result *r = &res[id];
                        if (m.type == DSV_IPC_TOKEN) {
                                if (r->n_tokens < WC_MAX_OUT)
                                        r->tokens[r->n_tokens] = m.u.token.token;
                                if (r->n_tokens == 0)
                                        r->t_first = t;
                                else if (r->n_itl < WC_MAX_OUT)
                                        r->itl[r->n_itl++] = t - r->t_last;
                                r->t_last = t;
                                r->n_tokens++;
                                r->n_logprobs = (int)m.u.token.n_top;
                                if (r->n_tokens <= WC_MAX_OUT)
                                        r->logprob[r->n_tokens - 1] = m.u.token.logprob;
                                strncat(r->text, m.u.token.text ? m.u.token.text : "",
                                        sizeof r->text - strlen(r->text) - 1);
                        } else {
                                if (m.type == DSV_IPC_FINAL) {
                                        snprintf(r->reason, sizeof r->reason, "%s", m.u.final.finish_reason);
                                        r->cached_tokens = m.u.final.cached_tokens;
                                } else {
                                        r->error = (int)m.u.error.code + 1;
                                        snprintf(r->message, sizeof r->message, "%s",
                                                 m.u.error.message ? m.u.error.message : "");
                                }
                                r->done = 1;
                                r->t_done = t;
                                n_done++;
                        }
                }
                dsv_ipc_msg_done(&m);
        }
        return n_done;
}

static inline struct dsv_ipc_msg wc_tokens_request(uint64_t id, const int32_t *tokens, size_t n, int max_tokens,
                                                   float temperature, uint64_t seed) {
        struct dsv_ipc_msg m = {.type = DSV_IPC_REQUEST};
        m.u.request.id = id;
        m.u.request.input = DSV_IPC_INPUT_TOKENS;
        m.u.request.tokens = (int32_t *)tokens;
        m.u.request.n_tokens = n;
        m.u.request.max_tokens = max_tokens;
        dsv_ipc_sampling_init(&m.u.request.sampling);
        m.u.request.sampling.temperature = temperature;
        m.u.request.sampling.seed = seed;
        m.u.request.sampling.has_seed = 1;
        return m;
}

/* Asks for stats (probe seq) and waits up to 10 s for the reply, skipping other messages. */
static inline int wc_stats(struct wc *c, uint64_t seq, struct dsv_ipc_stats *ret) {
        struct dsv_ipc_msg m = {.type = DSV_IPC_STATS};
        m.u.probe.seq = seq;
        int r = wc_send(c, &m);
        for (int i = 0; r == 0 && i < 50; i++) {
                struct dsv_ipc_msg x;
                if (wc_recv(c, &x, 200) < 0)
                        continue;
                int hit = x.type == DSV_IPC_STATS_REPLY && x.u.stats.seq == seq;
                if (hit)
                        *ret = x.u.stats;
                dsv_ipc_msg_done(&x);
                if (hit)
                        return 0;
        }
        return -ETIMEDOUT;
}

/* Waits up to timeout_s for pid; its wait status, or -ETIMEDOUT (still running). */
static inline int wc_wait_exit(pid_t pid, double timeout_s) {
        double end = bench_now_s() + timeout_s;
        int st;
        while (bench_now_s() < end) {
                pid_t r = waitpid(pid, &st, WNOHANG);
                if (r == pid)
                        return st;
                if (r < 0)
                        return -errno;
                usleep(10000);
        }
        return -ETIMEDOUT;
}

#endif
