/* Admission against the worker's own load report (calls.c): the report is as old as the
 * last stats poll, so requests the worker ended since then no longer hold their places,
 * while a cancelled request the worker still runs does; and against the wait bound, a
 * queue of a share of the running batch. The worker is a bare dsv_ipc
 * listener on an inproc:// URL that answers the one poll made at connect and sends the
 * finals itself; the poll interval is a minute, so no newer report comes. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "calls.h"
#include "dsv_ipc.h"
#include "t.h"

#define URL "inproc://gw-worker-report"

struct room {
        struct dsv_gateway_config cfg;
        struct gw_metrics metrics;
        struct gw_calls calls;
        struct dsv_ipc_conn *worker;
};

/* The next message the gateway sent the worker. */
static int worker_recv(struct room *r, struct dsv_ipc_msg *m) {
        return dsv_ipc_recv(r->worker, m, 2000, NULL, 0);
}

static int send_stats(struct room *r, int running, int waiting) {
        struct dsv_ipc_msg m = {.type = DSV_IPC_STATS_REPLY};
        m.u.stats.running = running;
        m.u.stats.waiting = waiting;
        return dsv_ipc_send(r->worker, &m);
}

/* A report with the worker's batch capacity. */
static int send_stats_batch(struct room *r, int running, int waiting, int max_batch) {
        struct dsv_ipc_msg m = {.type = DSV_IPC_STATS_REPLY};
        m.u.stats.running = running;
        m.u.stats.waiting = waiting;
        m.u.stats.max_batch = max_batch;
        return dsv_ipc_send(r->worker, &m);
}

static int send_final(struct room *r, uint64_t id, const char *reason) {
        struct dsv_ipc_msg m = {.type = DSV_IPC_FINAL};
        m.u.final.id = id;
        m.u.final.finish_reason = (char *)reason;
        return dsv_ipc_send(r->worker, &m);
}

/* One running slot and one waiting place; health polled once, at connect. The worker
 * answers the health probe (ready) and keeps the stats probe unanswered. */
static int room_open(struct room *r) {
        memset(r, 0, sizeof *r);
        dsv_gateway_config_init(&r->cfg);
        r->cfg.model = "m";
        r->cfg.health_interval_ms = 60000;
        r->cfg.max_running_per_instance = 1;
        r->cfg.admit.max_queue_per_instance = 1;
        int e;
        if ((e = dsv__gw_metrics_init(&r->metrics, "m", false)) < 0 ||
            (e = dsv__gw_calls_init(&r->calls, &r->cfg, &r->metrics)) < 0 || (e = dsv_ipc_listen(URL, &r->worker)) < 0)
                return e;
        struct dsv_gateway_instance_config ic = {.name = "w0", .url = URL, .ready = true};
        if ((e = dsv__gw_instance_add(&r->calls, &ic)) < 0)
                return e;
        for (int probes = 0; probes < 2;) {
                struct dsv_ipc_msg m;
                if ((e = worker_recv(r, &m)) < 0)
                        return e;
                if (m.type == DSV_IPC_HEALTH) {
                        struct dsv_ipc_msg rep = {.type = DSV_IPC_HEALTH_REPLY};
                        rep.u.health.seq = m.u.probe.seq;
                        rep.u.health.state = "ready";
                        e = dsv_ipc_send(r->worker, &rep);
                }
                probes += m.type == DSV_IPC_HEALTH || m.type == DSV_IPC_STATS;
                dsv_ipc_msg_done(&m);
                if (e < 0)
                        return e;
        }
        for (int i = 0; i < 200 && dsv__gw_instance_is_up(&r->calls, 0) != 1; i++)
                usleep(10000);
        return dsv__gw_instance_is_up(&r->calls, 0) == 1 ? 0 : -ETIMEDOUT;
}

static void room_close(struct room *r) {
        dsv__gw_calls_shutdown(&r->calls);
        dsv__gw_calls_done(&r->calls);
        dsv__gw_metrics_done(&r->metrics);
        dsv_ipc_close(r->worker);
}

/* A one-token prompt request, started: 0, or call_start's refusal. The worker receives
 * it when admitted. */
static int call_open(struct room *r, struct gw_call *c, struct dsv_gw_error *err) {
        int e = dsv__gw_call_init(c, &r->calls, -1);
        if (e < 0)
                return e;
        c->req.ipc.type = DSV_IPC_REQUEST;
        c->req.ipc.u.request.input = DSV_IPC_INPUT_PROMPT;
        c->req.ipc.u.request.prompt = strdup("In the beginning");
        c->req.ipc.u.request.max_tokens = 1;
        dsv_ipc_sampling_init(&c->req.ipc.u.request.sampling);
        if ((e = dsv__gw_call_start(c, -1, err)) < 0)
                return e;
        struct dsv_ipc_msg m;
        if ((e = worker_recv(r, &m)) < 0)
                return e;
        e = m.type == DSV_IPC_REQUEST && m.u.request.id == c->id ? 0 : -EPROTO;
        dsv_ipc_msg_done(&m);
        return e;
}

/* Waits up to 2 s until routing sees `waiting` requests waiting at the instance. */
static int wait_waiting(struct room *r, uint32_t waiting) {
        struct dsv_gateway_instance_stats st;
        for (int i = 0; i < 200; i++) {
                if (dsv__gw_instance_stats(&r->calls, 0, &st) < 0)
                        return -ENOENT;
                if (st.worker_reported && st.waiting == waiting)
                        return 0;
                usleep(10000);
        }
        return -ETIMEDOUT;
}

TEST(a_request_the_worker_ended_after_its_report_frees_its_place) {
        struct room r;
        ASSERT_OK(room_open(&r));
        struct gw_call c1, c2, c3, c4;
        struct dsv_gw_error err;
        ASSERT_OK(call_open(&r, &c1, &err)); /* running */
        ASSERT_OK(call_open(&r, &c2, &err)); /* waiting: the queue is full */
        ASSERT_OK(send_stats(&r, 1, 1));    /* the poll's answer: as the gateway counts */
        ASSERT_OK(wait_waiting(&r, 1));
        ASSERT_ERR(call_open(&r, &c3, &err), -EAGAIN);
        ASSERT_EQ(err.status, 429);
        dsv__gw_call_done(&c3);

        /* c1 ends: c2 runs and the waiting place is free, though the report still says 1 */
        ASSERT_OK(send_final(&r, c1.id, "stop"));
        struct gw_event *ev;
        ASSERT_OK(dsv__gw_call_wait(&c1, 2000, &ev));
        ASSERT_EQ(ev->msg.type, DSV_IPC_FINAL);
        dsv__gw_event_free(ev);
        ASSERT_OK(call_open(&r, &c3, &err));

        /* c2 is cancelled: the gateway forgets it at once, but the worker, which has not
         * seen the cancel yet, reports it running with c3 waiting; the worker's count
         * holds until it ends c2 */
        dsv__gw_call_cancel(&c2);
        ASSERT_OK(send_stats(&r, 1, 1));
        ASSERT_OK(wait_waiting(&r, 1));
        ASSERT_ERR(call_open(&r, &c4, &err), -EAGAIN);
        dsv__gw_call_done(&c4);
        struct dsv_ipc_msg m;
        ASSERT_OK(worker_recv(&r, &m));
        ASSERT_EQ(m.type, DSV_IPC_CANCEL);
        dsv_ipc_msg_done(&m);
        ASSERT_OK(send_final(&r, c2.id, "cancelled"));
        ASSERT_OK(wait_waiting(&r, 0));
        ASSERT_OK(call_open(&r, &c4, &err));

        dsv__gw_call_done(&c1);
        dsv__gw_call_done(&c2);
        dsv__gw_call_done(&c3);
        dsv__gw_call_done(&c4);
        room_close(&r);
}

TEST(a_queue_whose_wait_outlasts_half_the_service_time_is_full) {
        struct room r;
        ASSERT_OK(room_open(&r));
        r.cfg.max_running_per_instance = 2;
        r.cfg.admit.max_queue_per_instance = 4; /* room for more by count */
        r.cfg.admit.max_queue_wait_pct = 50;    /* half a service time: a queue of one per two running */
        struct gw_call c[5];
        struct dsv_gw_error err;
        for (int i = 0; i < 4; i++) /* two running, then two waiting */
                ASSERT_OK(call_open(&r, &c[i], &err));
        ASSERT_ERR(call_open(&r, &c[4], &err), -EAGAIN);
        ASSERT_EQ(err.status, 429);
        ASSERT_TRUE(err.retry_after_s >= 1);
        dsv__gw_call_done(&c[4]);
        ASSERT_ERR(dsv__gw_calls_queue_full(&r.calls, &err), -EAGAIN); /* the check before parsing too */

        r.cfg.admit.max_queue_wait_pct = 0; /* off: the count alone decides */
        ASSERT_OK(dsv__gw_calls_queue_full(&r.calls, &err));
        ASSERT_OK(call_open(&r, &c[4], &err));

        for (int i = 0; i < 5; i++)
                dsv__gw_call_done(&c[i]);
        room_close(&r);
}

/* The worker reports a batch of 4: the gateway counts 4 of its requests as running (not
 * max_running_per_instance's 1), and the wait bound takes effect only once the batch is
 * full: with more than 2 (half of 4) waiting behind it, the next request is refused. */
TEST(the_wait_bound_waits_for_the_workers_batch_to_fill) {
        struct room r;
        ASSERT_OK(room_open(&r));
        r.cfg.admit.max_queue_per_instance = 8;
        r.cfg.admit.max_queue_wait_pct = 50; /* half a service time: 2 waiting per batch of 4 */
        struct gw_call c[8];
        struct dsv_gw_error err;
        ASSERT_OK(send_stats_batch(&r, 0, 0, 4));
        ASSERT_OK(wait_waiting(&r, 0));
        for (int i = 0; i < 3; i++)
                ASSERT_OK(call_open(&r, &c[i], &err));
        /* ramping up: one runs, two have not been taken into the batch yet; a queue twice
         * the running count, but slots are free */
        ASSERT_OK(send_stats_batch(&r, 1, 2, 4));
        ASSERT_OK(wait_waiting(&r, 2));
        for (int i = 3; i < 7; i++) /* 4 running by the gateway's count, then 3 waiting */
                ASSERT_OK(call_open(&r, &c[i], &err));
        ASSERT_ERR(call_open(&r, &c[7], &err), -EAGAIN);
        ASSERT_EQ(err.status, 429);
        ASSERT_TRUE(err.retry_after_s >= 1);
        dsv__gw_call_done(&c[7]);
        ASSERT_ERR(dsv__gw_calls_queue_full(&r.calls, &err), -EAGAIN);
        for (int i = 0; i < 7; i++)
                dsv__gw_call_done(&c[i]);
        room_close(&r);
}
