/* worker.c — dsvisor-bench-load straight against one dsvisor-worker (--url ipc://PATH):
 * the same schedule, lengths and accounting as over HTTP, speaking ipc/PROTOCOL.md.
 *
 * Each request is a `request` with a text prompt (greedy sampling); `token` events give
 * TTFT and inter-token latency, `final` completes it, `error` is an explicit error. The
 * worker has one peer: it must not be behind a gateway at the same time. When the pipe
 * drops (the worker died) every request in flight is lost: nothing else will answer it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dsv_ipc.h"
#include "load.h"

struct wreq {
        uint64_t id; /* 0: free slot */
        int64_t sched_ns, last_tok_ns;
        int began;
};

struct wdriver {
        const struct load_opts *o;
        struct load_stats *st;
        struct dsv_ipc_conn *conn;
        struct load_rng len_rng;
        struct wreq *slots; /* max_inflight of them */
        unsigned inflight;
        uint64_t next_id;
        char *prompt;
};

static struct wreq *slot_find(struct wdriver *d, uint64_t id) {
        for (unsigned i = 0; i < d->o->max_inflight; i++)
                if (d->slots[i].id == id)
                        return &d->slots[i];
        return NULL;
}

static void slot_release(struct wdriver *d, struct wreq *w) {
        w->id = 0;
        d->inflight--;
}

static int send_one(struct wdriver *d, int64_t sched_ns) {
        struct wreq *w = slot_find(d, 0);
        if (!w)
                return -EBUSY;
        struct dsv_ipc_msg m = {.type = DSV_IPC_REQUEST};
        struct dsv_ipc_request *r = &m.u.request;
        r->id = ++d->next_id;
        r->input = DSV_IPC_INPUT_PROMPT;
        r->max_tokens = (int32_t)load_request_draw(d->o, &d->len_rng, d->prompt);
        r->prompt = d->prompt;
        dsv_ipc_sampling_init(&r->sampling);
        d->st->sent++;
        if (dsv_ipc_peers(d->conn) == 0) { /* nobody to send to: never answered */
                load_stats_lost(d->st, "no_worker");
                return 0;
        }
        int e = dsv_ipc_send(d->conn, &m);
        if (e < 0) {
                char kind[96];
                snprintf(kind, sizeof kind, "send:%s", strerror(-e));
                load_stats_lost(d->st, kind);
                return 0;
        }
        *w = (struct wreq){.id = r->id, .sched_ns = sched_ns};
        d->inflight++;
        return 0;
}

static void on_msg(struct wdriver *d, const struct dsv_ipc_msg *m, int64_t now) {
        struct wreq *w;
        char kind[96];
        switch (m->type) {
        case DSV_IPC_TOKEN:
                if (!(w = slot_find(d, m->u.token.id)))
                        return;
                if (!w->began)
                        load_hist_record(&d->st->ttft, (uint64_t)(now - w->sched_ns));
                else
                        load_hist_record(&d->st->itl, (uint64_t)(now - w->last_tok_ns));
                w->began = 1;
                w->last_tok_ns = now;
                return;
        case DSV_IPC_FINAL:
                if (!(w = slot_find(d, m->u.final.id)))
                        return;
                if (!strcmp(m->u.final.finish_reason, "stop") || !strcmp(m->u.final.finish_reason, "length")) {
                        load_stats_completed(d->st, now - w->sched_ns,
                                             m->u.final.completion_tokens > 0 ? (unsigned long)m->u.final.completion_tokens : 0);
                } else {
                        snprintf(kind, sizeof kind, "final:%s", m->u.final.finish_reason);
                        load_stats_error(d->st, w->began, kind);
                }
                slot_release(d, w);
                return;
        case DSV_IPC_ERROR:
                if (!m->u.error.id || !(w = slot_find(d, m->u.error.id)))
                        return;
                snprintf(kind, sizeof kind, "worker_error:%s", dsv_ipc_error_code_to_string(m->u.error.code));
                load_stats_error(d->st, w->began, kind);
                slot_release(d, w);
                return;
        default:
                return;
        }
}

/* Every request still in flight ends as lost, with kind. */
static void lose_all(struct wdriver *d, const char *kind) {
        for (unsigned i = 0; i < d->o->max_inflight; i++)
                if (d->slots[i].id) {
                        load_stats_lost(d->st, kind);
                        slot_release(d, &d->slots[i]);
                }
}

/* Requests past --timeout: cancelled on the worker and counted as lost. */
static void expire(struct wdriver *d, int64_t now) {
        int64_t limit = (int64_t)(d->o->timeout_s * LOAD_NS);
        for (unsigned i = 0; i < d->o->max_inflight; i++) {
                struct wreq *w = &d->slots[i];
                if (w->id && now - w->sched_ns > limit) {
                        struct dsv_ipc_msg c = {.type = DSV_IPC_CANCEL, .u.cancel_id = w->id};
                        dsv_ipc_send(d->conn, &c);
                        load_stats_lost(d->st, "timeout");
                        slot_release(d, w);
                }
        }
}

/* Waits up to timeout_ms for a health reply that says "ready". */
static int wait_ready(struct dsv_ipc_conn *c, int timeout_ms) {
        int64_t end = load_now_ns() + (int64_t)timeout_ms * 1000000;
        uint64_t seq = 0;
        while (load_now_ns() < end) {
                if (dsv_ipc_peers(c) > 0) {
                        struct dsv_ipc_msg h = {.type = DSV_IPC_HEALTH, .u.probe.seq = ++seq};
                        dsv_ipc_send(c, &h);
                        struct dsv_ipc_msg m;
                        if (dsv_ipc_recv(c, &m, 200, NULL, 0) == 0) {
                                int ready = m.type == DSV_IPC_HEALTH_REPLY && !strcmp(m.u.health.state, "ready");
                                dsv_ipc_msg_done(&m);
                                if (ready)
                                        return 0;
                                continue;
                        }
                }
                usleep(50000);
        }
        return -ETIMEDOUT;
}

static int drive(struct wdriver *d, int64_t *ret_t0, int64_t *ret_t1) {
        struct load_pace p;
        if (load_pace_start(&p, d->o, d->st) < 0)
                return -ENOMEM;
        for (;;) {
                int64_t at;
                /* A request that could not be put in flight (no worker) ends at once; in a
                 * closed loop the next try waits for the receive timeout below instead of
                 * spinning. */
                while ((at = load_pace_due(&p, load_now_ns(), d->inflight)) >= 0) {
                        unsigned before = d->inflight;
                        send_one(d, at);
                        load_pace_sent(&p);
                        if (d->o->qps <= 0 && d->inflight == before)
                                break;
                }
                int64_t now = load_now_ns();
                enum load_pace_state state = load_pace_check(&p, now, d->inflight);
                if (state == LOAD_PACE_DRAIN_TIMEOUT)
                        lose_all(d, "drain_timeout");
                if (state == LOAD_PACE_DONE || state == LOAD_PACE_DRAIN_TIMEOUT)
                        break;
                if (d->inflight && dsv_ipc_peers(d->conn) == 0)
                        lose_all(d, "worker_gone");
                expire(d, now);
                struct dsv_ipc_msg m;
                int r = dsv_ipc_recv(d->conn, &m, load_pace_wait_ms(&p, now), NULL, 0);
                /* drain whatever else is queued without waiting */
                while (r == 0) {
                        on_msg(d, &m, load_now_ns());
                        dsv_ipc_msg_done(&m);
                        r = dsv_ipc_recv(d->conn, &m, 0, NULL, 0);
                }
        }
        load_pace_finish(&p, d->inflight, ret_t0, ret_t1);
        return 0;
}

int load_run_worker(const struct load_opts *o, struct load_stats *st, int64_t *ret_t0, int64_t *ret_t1) {
        struct wdriver d = {.o = o, .st = st};
        int r = dsv_ipc_dial(o->url, &d.conn);
        if (r < 0)
                return r;
        d.slots = calloc(o->max_inflight, sizeof *d.slots);
        d.prompt = malloc(LOAD_MAX_PROMPT_BYTES);
        if (!d.slots || !d.prompt) {
                r = -ENOMEM;
                goto out;
        }
        load_len_rng_init(o, &d.len_rng);
        r = wait_ready(d.conn, 30000);
        if (r == 0)
                r = drive(&d, ret_t0, ret_t1);
out:
        free(d.slots);
        free(d.prompt);
        dsv_ipc_close(d.conn);
        return r;
}
