/* The status page's live view (metrics.c): histogram quantiles as Prometheus's
 * histogram_quantile() computes them, and an instance's figures over the last minute,
 * from snapshots taken as the view is read. The page itself is tested in a browser
 * (tests/integration/test-status-page.sh). */
#include <math.h>
#include <string.h>

#include "metrics.h"
#include "t.h"

#define S 1000000000LL

/* histogram_quantile() by hand: rank q*count, linear within its bucket, the first bucket
 * from 0, the last finite bound above it. */
TEST(quantiles_interpolate_within_the_bucket_as_prometheus_does) {
        static const struct dsv_gw_buckets b = {3, {1, 2, 4}};
        struct dsv_gw_hist h = {.counts = {2, 2, 0, 0}, .count = 4, .sum = 5};
        ASSERT_FLOAT_EQ(dsv__gw_hist_quantile(&h, &b, 0.5), 1.0);
        ASSERT_FLOAT_EQ(dsv__gw_hist_quantile(&h, &b, 0.75), 1.5);
        ASSERT_NEAR(dsv__gw_hist_quantile(&h, &b, 0.99), 1.98, 1e-12);
        ASSERT_NEAR(dsv__gw_hist_quantile(&h, &b, 0.25), 0.5, 1e-12);
        struct dsv_gw_hist over = {.counts = {0, 0, 1, 1}, .count = 2, .sum = 9};
        ASSERT_FLOAT_EQ(dsv__gw_hist_quantile(&over, &b, 0.99), 4.0); /* in +Inf: the last bound */
        ASSERT_FLOAT_EQ(dsv__gw_hist_quantile(&over, &b, 0.5), 4.0);  /* rank 1: the top of (2, 4] */
        struct dsv_gw_hist empty = {0};
        ASSERT_TRUE(isnan(dsv__gw_hist_quantile(&empty, &b, 0.5)));
}

static void request(struct gw_metrics *m, double e2e_s, int tokens) {
        for (int i = 0; i < tokens; i++)
                dsv__gw_metrics_token(m, 0, 3, i == 0, 0.004);
        struct gw_request_done d = {.e2e_s = e2e_s, .generation_tokens = tokens, .finish_reason = "stop"};
        dsv__gw_metrics_complete(m, 0, 3, &d);
}

TEST(the_live_view_covers_the_last_minute_from_its_first_read) {
        struct gw_metrics m;
        ASSERT_OK(dsv__gw_metrics_init(&m, "default", false));
        ASSERT_OK(dsv__gw_metrics_instance_reset(&m, 0, 3, "0", 0));
        request(&m, 9, 100); /* before anyone looked: not in any window */
        struct gw_live l;
        int64_t t0 = 1000 * S;
        ASSERT_OK(dsv__gw_metrics_live(&m, 0, 3, t0, &l));
        ASSERT_TRUE(l.window_s == 0 && l.requests == 0 && isnan(l.e2e_p50_s) && l.tokens_per_s == 0);

        request(&m, 0.3, 20);
        ASSERT_OK(dsv__gw_metrics_live(&m, 0, 3, t0 + 2 * S, &l));
        ASSERT_FLOAT_EQ(l.window_s, 2.0);
        ASSERT_EQ(l.requests, 1);
        ASSERT_NEAR(l.e2e_p50_s, 0.375, 1e-12); /* in (0.25, 0.5], halfway */
        ASSERT_NEAR(l.e2e_p99_s, 0.25 + 0.25 * 0.99, 1e-12);
        ASSERT_FLOAT_EQ(l.tokens_per_s, 10.0);
        ASSERT_NEAR(l.ttft_p50_s, 0.003, 1e-12); /* 0.004 in (0.001, 0.005]: halfway */
        ASSERT_EQ(isnan(l.itl_p50_s), 0);

        /* Read every second for a minute and more: the request falls out of the window. */
        for (int s = 3; s <= 70; s++)
                ASSERT_OK(dsv__gw_metrics_live(&m, 0, 3, t0 + s * S, &l));
        request(&m, 2, 30);
        ASSERT_OK(dsv__gw_metrics_live(&m, 0, 3, t0 + 71 * S, &l));
        ASSERT_TRUE(l.window_s >= GW_LIVE_WINDOW_S && l.window_s < GW_LIVE_WINDOW_S + GW_LIVE_STEP_S);
        ASSERT_EQ(l.requests, 1);
        ASSERT_NEAR(l.e2e_p50_s, 1 + 1.5 * 0.5, 1e-12); /* 2 s in (1, 2.5] */
        ASSERT_NEAR(l.tokens_per_s, 30 / l.window_s, 1e-9);

        ASSERT_ERR(dsv__gw_metrics_live(&m, 0, 4, t0 + 72 * S, &l), -ENOENT); /* another occupant */
        dsv__gw_metrics_done(&m);
}
