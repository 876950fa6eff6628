/* Admission: admit, 429 with Retry-After from queue depth and throughput, 503. */
#include "dsv_policy.h"
#include "t.h"

static struct dsv_policy_admission adm;

#define W(ready, queued) {(ready), (queued), 0, 0, 0}

TEST(admits_under_limits) {
        struct dsv_policy_admit_limits lim = {.max_queue_per_instance = 4, .max_queue_total = 10};
        struct dsv_policy_worker_load w[2] = {W(true, 3), W(true, 3)};
        ASSERT_OK(dsv_policy_admit(&lim, w, 2, 0, 2.0, &adm));
        ASSERT_EQ(adm.verdict, DSV_POLICY_VERDICT_ADMIT);
        ASSERT_EQ(adm.http_status, 0);
        ASSERT_EQ(adm.retry_after_s, 0);
        struct dsv_policy_admit_limits none = {0}; /* 0: no limit */
        struct dsv_policy_worker_load busy[1] = {W(true, 100000)};
        ASSERT_OK(dsv_policy_admit(&none, busy, 1, 0, 0, &adm));
        ASSERT_EQ(adm.verdict, DSV_POLICY_VERDICT_ADMIT);
}

TEST(per_instance_limit_is_429_with_share_of_throughput) {
        struct dsv_policy_admit_limits lim = {.max_queue_per_instance = 4, .max_queue_total = 100};
        struct dsv_policy_worker_load w[2] = {W(true, 4), W(true, 0)};
        /* 4 queued on a worker doing 2 rps / 2 workers = 1 rps: 4 s. */
        ASSERT_OK(dsv_policy_admit(&lim, w, 2, 0, 2.0, &adm));
        ASSERT_EQ(adm.verdict, DSV_POLICY_VERDICT_BUSY);
        ASSERT_EQ(adm.http_status, 429);
        ASSERT_EQ(adm.retry_after_s, 4);
        ASSERT_OK(dsv_policy_admit(&lim, w, 2, 1, 2.0, &adm));
        ASSERT_EQ(adm.verdict, DSV_POLICY_VERDICT_ADMIT);
}

TEST(global_limit_is_429_with_drain_time) {
        struct dsv_policy_admit_limits lim = {.max_queue_per_instance = 100, .max_queue_total = 10};
        struct dsv_policy_worker_load w[3] = {W(true, 4), W(true, 3), W(false, 3)};
        ASSERT_OK(dsv_policy_admit(&lim, w, 3, 0, 3.0, &adm)); /* 10 queued / 3 rps = 3.33 → 4 s */
        ASSERT_EQ(adm.http_status, 429);
        ASSERT_EQ(adm.retry_after_s, 4);
        ASSERT_OK(dsv_policy_admit(&lim, w, 3, 0, 1000.0, &adm)); /* under a second → 1 */
        ASSERT_EQ(adm.retry_after_s, 1);
        ASSERT_OK(dsv_policy_admit(&lim, w, 3, 0, 0.001, &adm)); /* clamped to the default 60 */
        ASSERT_EQ(adm.retry_after_s, 60);
        lim.retry_after_max_s = 20;
        ASSERT_OK(dsv_policy_admit(&lim, w, 3, 0, 0.0, &adm)); /* unknown rate → the max */
        ASSERT_EQ(adm.retry_after_s, 20);
}

TEST(retry_after_grows_with_queue_depth) {
        struct dsv_policy_admit_limits lim = {.max_queue_total = 1, .retry_after_max_s = 1000};
        uint32_t last = 0;
        for (uint32_t q = 1; q <= 200; q += 7) {
                struct dsv_policy_worker_load w[1] = {W(true, q)};
                ASSERT_OK(dsv_policy_admit(&lim, w, 1, 0, 0.5, &adm));
                ASSERT_EQ(adm.http_status, 429);
                ASSERT_TRUE(adm.retry_after_s >= last);
                ASSERT_EQ(adm.retry_after_s, q * 2);
                last = adm.retry_after_s;
        }
}

TEST(no_ready_worker_is_503) {
        struct dsv_policy_admit_limits lim = {.max_queue_per_instance = 4};
        struct dsv_policy_worker_load w[2] = {W(false, 0), W(false, 0)};
        ASSERT_OK(dsv_policy_admit(&lim, w, 2, -EAGAIN, 5.0, &adm));
        ASSERT_EQ(adm.verdict, DSV_POLICY_VERDICT_UNAVAILABLE);
        ASSERT_EQ(adm.http_status, 503);
        ASSERT_EQ(adm.retry_after_s, 5);
        lim.retry_after_unavailable_s = 2;
        ASSERT_OK(dsv_policy_admit(&lim, NULL, 0, -EAGAIN, 0, &adm));
        ASSERT_EQ(adm.http_status, 503);
        ASSERT_EQ(adm.retry_after_s, 2);
}

TEST(router_and_admission_together) {
        struct dsv_policy_router r;
        ASSERT_OK(dsv_policy_router_init(&r, DSV_POLICY_ROUTE_LEAST_OUTSTANDING, 1));
        struct dsv_policy_admit_limits lim = {.max_queue_per_instance = 2, .max_queue_total = 5};
        struct dsv_policy_worker_load w[3] = {W(true, 0), W(true, 0), W(false, 0)};
        int admitted = 0, refused = 0;
        for (int i = 0; i < 10; i++) {
                int t = dsv_policy_route_pick(&r, w, 3, NULL, 0);
                ASSERT_OK(dsv_policy_admit(&lim, w, 3, t, 1.0, &adm));
                if (adm.verdict == DSV_POLICY_VERDICT_ADMIT) {
                        w[t].queued_requests++;
                        w[t].queued_prompt_tokens += 100;
                        admitted++;
                } else {
                        ASSERT_EQ(adm.http_status, 429);
                        refused++;
                }
        }
        ASSERT_EQ(admitted, 4); /* two ready workers × 2 */
        ASSERT_EQ(refused, 6);
        ASSERT_EQ(w[2].queued_requests, 0);
}

TEST(queue_wait_over_its_share_of_service_time_is_429) {
        struct dsv_policy_admit_limits lim = {.max_queue_per_instance = 32, .max_queue_wait_pct = 50};
        /* 8 running: a queued request waits 1/8 of a service time, so half of one is a
         * queue of 4; the next request is refused */
        struct dsv_policy_worker_load w[3] = {{true, 4, 0, 8, 0}, {true, 5, 0, 8, 0}, {false, 9, 0, 8, 0}};
        ASSERT_OK(dsv_policy_admit(&lim, w, 3, 0, 200.0, &adm));
        ASSERT_EQ(adm.verdict, DSV_POLICY_VERDICT_ADMIT);
        ASSERT_EQ(adm.retry_after_s, 0);
        ASSERT_OK(dsv_policy_admit(&lim, w, 3, 1, 200.0, &adm));
        ASSERT_EQ(adm.verdict, DSV_POLICY_VERDICT_BUSY);
        ASSERT_EQ(adm.http_status, 429);
        ASSERT_EQ(adm.retry_after_s, 1); /* 5 queued at 100 rps */
        /* Retry-After is the queue's drain time at the target's share of the rate: 5 / 0.5 rps */
        ASSERT_OK(dsv_policy_admit(&lim, w, 3, 1, 1.0, &adm));
        ASSERT_EQ(adm.retry_after_s, 10);
        /* with no rate measured yet it drains within a service time: 1 s */
        ASSERT_OK(dsv_policy_admit(&lim, w, 3, 1, 0.0, &adm));
        ASSERT_EQ(adm.retry_after_s, 1);
        /* a larger batch drains faster and takes the same queue */
        w[1].running_seqs = 10;
        ASSERT_OK(dsv_policy_admit(&lim, w, 3, 1, 200.0, &adm));
        ASSERT_EQ(adm.verdict, DSV_POLICY_VERDICT_ADMIT);
        /* so does a larger share */
        w[1].running_seqs = 8;
        lim.max_queue_wait_pct = 75;
        ASSERT_OK(dsv_policy_admit(&lim, w, 3, 1, 200.0, &adm));
        ASSERT_EQ(adm.verdict, DSV_POLICY_VERDICT_ADMIT);
}

TEST(queue_wait_rule_is_off_at_zero_and_with_nothing_running) {
        struct dsv_policy_admit_limits lim = {.max_queue_per_instance = 32};
        struct dsv_policy_worker_load w[1] = {{true, 20, 0, 1, 0}};
        ASSERT_OK(dsv_policy_admit(&lim, w, 1, 0, 100.0, &adm)); /* 0: off */
        ASSERT_EQ(adm.verdict, DSV_POLICY_VERDICT_ADMIT);
        lim.max_queue_wait_pct = 1;
        w[0].running_seqs = 0; /* nothing drains it: no wait to bound, the count decides */
        ASSERT_OK(dsv_policy_admit(&lim, w, 1, 0, 100.0, &adm));
        ASSERT_EQ(adm.verdict, DSV_POLICY_VERDICT_ADMIT);
        w[0].running_seqs = 1;
        w[0].queued_requests = 0; /* an empty queue: the request runs or is next */
        ASSERT_OK(dsv_policy_admit(&lim, w, 1, 0, 100.0, &adm));
        ASSERT_EQ(adm.verdict, DSV_POLICY_VERDICT_ADMIT);
        /* the count limit decides first, with its own Retry-After */
        lim.max_queue_per_instance = 4;
        w[0].queued_requests = 4;
        ASSERT_OK(dsv_policy_admit(&lim, w, 1, 0, 0.0, &adm));
        ASSERT_EQ(adm.retry_after_s, 60);
}

TEST(queue_wait_rule_waits_for_a_full_batch) {
        struct dsv_policy_admit_limits lim = {.max_queue_per_instance = 32, .max_queue_wait_pct = 50};
        static const struct {
                uint32_t max_batch, running, queued;
                double rps;
                enum dsv_policy_verdict verdict;
                uint32_t retry_after_s;
        } cases[] = {
                /* ramping up: 2 of 8 slots run, 3 requests are on their way into the free ones */
                {8, 2, 3, 100.0, DSV_POLICY_VERDICT_ADMIT, 0},
                /* one slot short of full, a queue of 20 still has a slot to go to; the count decides */
                {8, 7, 20, 100.0, DSV_POLICY_VERDICT_ADMIT, 0},
                /* full: half a service time is a queue of 4 of the 8 slots */
                {8, 8, 4, 100.0, DSV_POLICY_VERDICT_ADMIT, 0},
                {8, 8, 5, 100.0, DSV_POLICY_VERDICT_BUSY, 1}, /* 5 queued at 100 rps */
                {8, 8, 20, 2.0, DSV_POLICY_VERDICT_BUSY, 10},
                /* the bound is a share of the batch's capacity, not of what runs: a count
                 * above it (the gateway's own, ahead of the worker's report) takes no longer queue */
                {8, 12, 5, 100.0, DSV_POLICY_VERDICT_BUSY, 1},
                /* a larger batch takes a longer queue at the same share */
                {16, 16, 8, 100.0, DSV_POLICY_VERDICT_ADMIT, 0},
                {16, 16, 9, 100.0, DSV_POLICY_VERDICT_BUSY, 1},
        };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
                struct dsv_policy_worker_load w[1] = {{.ready = true, .queued_requests = cases[i].queued,
                                                       .running_seqs = cases[i].running, .max_batch = cases[i].max_batch}};
                ASSERT_OK(dsv_policy_admit(&lim, w, 1, 0, cases[i].rps, &adm));
                ASSERT_EQ(adm.verdict, cases[i].verdict);
                ASSERT_EQ(adm.http_status, cases[i].verdict == DSV_POLICY_VERDICT_BUSY ? 429 : 0);
                ASSERT_EQ(adm.retry_after_s, cases[i].retry_after_s);
        }
}

TEST(bad_input) {
        struct dsv_policy_admit_limits lim = {0};
        struct dsv_policy_worker_load w[2] = {W(true, 0), W(false, 0)};
        ASSERT_ERR(dsv_policy_admit(&lim, w, 2, 2, 1.0, &adm), -EINVAL);
        ASSERT_ERR(dsv_policy_admit(&lim, w, 2, 1, 1.0, &adm), -EINVAL);      /* not ready */
        ASSERT_ERR(dsv_policy_admit(&lim, w, 2, -EAGAIN, 1.0, &adm), -EINVAL); /* one is ready */
        ASSERT_ERR(dsv_policy_admit(&lim, w, 2, 0, -1.0, &adm), -EINVAL);
        ASSERT_ERR(dsv_policy_admit(&lim, w, 2, 0, NAN, &adm), -EINVAL);
        ASSERT_ERR(dsv_policy_admit(NULL, w, 2, 0, 1.0, &adm), -EINVAL);
        ASSERT_STREQ(dsv_policy_verdict_to_string(DSV_POLICY_VERDICT_BUSY), "busy");
}
