/* When dsvisor-bench-load's drivers send and stop (bench/load/pace.c), with time given by
 * hand: the open loop follows its schedule within --max-inflight and ends with it; the
 * closed loop keeps --concurrency in flight until --requests or --duration; after sending,
 * the run drains for --drain seconds at most; the wait for I/O never runs past the next
 * arrival, nor spins on one that is already due. */
#include "t.h"

#include "load.h"

#define MS 1000000LL

static struct load_opts opts(double qps) {
        return (struct load_opts){.qps = qps, .duration_s = 1, .drain_s = 2, .concurrency = 3, .max_inflight = 2,
                                  .seed = 7};
}

/* A run of o started now, its counters zeroed. */
static int start(struct load_pace *p, const struct load_opts *o, struct load_stats *st) {
        load_stats_init(st);
        return load_pace_start(p, o, st);
}

TEST(open_loop_sends_each_arrival_when_due) {
        struct load_opts o = opts(50);
        struct load_stats st;
        struct load_pace p;
        ASSERT_OK(start(&p, &o, &st));
        size_t n = 0;
        int64_t *sched = load_schedule_new(&o, &n);
        ASSERT_TRUE(sched && n > 10);
        for (size_t i = 0; i < n; i++) {
                int64_t at = p.t0 + sched[i];
                ASSERT_EQ(load_pace_due(&p, at - 1, 0), -1);
                ASSERT_EQ(load_pace_wait_ms(&p, at - 3 * MS), 3);
                ASSERT_EQ(load_pace_due(&p, at + 5 * MS, 1), at); /* late: still its own arrival time */
                ASSERT_EQ(load_pace_due(&p, at + 5 * MS, 2), -1);  /* --max-inflight */
                ASSERT_EQ(load_pace_wait_ms(&p, at + 5 * MS), 100); /* due: wait for I/O, no spin */
                ASSERT_EQ(load_pace_check(&p, at, 1), LOAD_PACE_SENDING);
                load_pace_sent(&p);
        }
        int64_t end = p.t0 + sched[n - 1];
        ASSERT_EQ(load_pace_due(&p, end + 10 * LOAD_NS, 0), -1);
        ASSERT_EQ(load_pace_check(&p, end, 1), LOAD_PACE_DRAINING);
        ASSERT_EQ(load_pace_check(&p, end + 2 * LOAD_NS - 1, 1), LOAD_PACE_DRAINING);
        ASSERT_EQ(load_pace_check(&p, end + 2 * LOAD_NS, 1), LOAD_PACE_DRAIN_TIMEOUT);
        ASSERT_EQ(load_pace_check(&p, end + 2 * LOAD_NS, 0), LOAD_PACE_DONE);
        int64_t t0, t1;
        load_pace_finish(&p, 0, &t0, &t1);
        ASSERT_EQ(t0, p.t0);
        ASSERT_TRUE(t1 >= t0);
        free(sched);
}

TEST(closed_loop_keeps_concurrency_until_requests) {
        struct load_opts o = opts(0);
        o.requests = 5;
        struct load_stats st;
        struct load_pace p;
        ASSERT_OK(start(&p, &o, &st));
        int64_t now = p.t0 + 10 * MS;
        ASSERT_EQ(load_pace_due(&p, now, 2), now);
        ASSERT_EQ(load_pace_due(&p, now, 3), -1); /* --concurrency */
        ASSERT_EQ(load_pace_wait_ms(&p, now), 100);
        st.sent = 4;
        ASSERT_EQ(load_pace_check(&p, now, 3), LOAD_PACE_SENDING);
        st.sent = 5; /* --requests reached */
        ASSERT_EQ(load_pace_due(&p, now, 0), -1);
        ASSERT_EQ(load_pace_check(&p, now, 2), LOAD_PACE_DRAINING);
        ASSERT_EQ(load_pace_check(&p, now + 1 * MS, 0), LOAD_PACE_DONE);
        int64_t t0, t1;
        load_pace_finish(&p, 0, &t0, &t1);
}

TEST(closed_loop_stops_sending_at_duration) {
        struct load_opts o = opts(0);
        struct load_stats st;
        struct load_pace p;
        ASSERT_OK(start(&p, &o, &st));
        int64_t end = p.t0 + LOAD_NS;
        ASSERT_EQ(load_pace_due(&p, end - 1, 0), end - 1);
        ASSERT_EQ(load_pace_due(&p, end, 0), -1);
        ASSERT_EQ(load_pace_check(&p, end, 1), LOAD_PACE_DRAINING); /* the drain starts here */
        ASSERT_EQ(load_pace_check(&p, end + 2 * LOAD_NS, 1), LOAD_PACE_DRAIN_TIMEOUT);
        int64_t t0, t1;
        load_pace_finish(&p, 1, &t0, &t1);
}
