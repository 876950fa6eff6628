/* Drift detection's statistics (supervisor/drift.c): the Kolmogorov survival function
 * and the binned two-sample KS test against scipy 1.10 (scipy.special.kolmogorov,
 * scipy.stats.ks_2samp on the same data as bin indices), and the windows and peer
 * comparison that feed dsvisor_instance_output_drift_{ks,pvalue}. */
#include <math.h>
#include <string.h>

#include "drift.h"
#include "t.h"

TEST(the_kolmogorov_survival_function_matches_scipy) {
        static const double want[][2] = {
                /* λ, scipy.special.kolmogorov(λ) */
                {0.1, 1.0},
                {0.3, 0.9999906941986655},
                {0.5, 0.9639452436648751},
                {0.8, 0.5441424115741981},
                {1.0, 0.26999967167735456},
                {1.18, 0.1234538094297657},
                {1.2, 0.11224966667072497},
                {1.36, 0.049485876755377876},
                {1.63, 0.009846364888486529},
                {2.0, 0.0006709252557796953},
                {3.0, 3.045995948942526e-08},
        };
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
                ASSERT_NEAR(sup_ks_kolmogorov_sf(want[i][0]), want[i][1], 1e-12 + 1e-9 * want[i][1]);
        ASSERT_FLOAT_EQ(sup_ks_kolmogorov_sf(0), 1.0);
        ASSERT_FLOAT_EQ(sup_ks_kolmogorov_sf(-1), 1.0);
}

TEST(the_binned_two_sample_test_matches_scipy) {
        /* ks_2samp(np.repeat(range(8), a), np.repeat(range(8), b)).statistic == 0.3;
         * kolmogorov(sqrt(100*100/200) * 0.3) == 0.00024681960817289476 */
        static const int64_t a[8] = {5, 10, 20, 30, 20, 10, 4, 1}, b[8] = {1, 4, 10, 20, 30, 20, 10, 5};
        double d, p;
        ASSERT_OK(sup_ks_binned(a, b, 8, 0, 0, &d, &p));
        ASSERT_NEAR(d, 0.3, 1e-12);
        ASSERT_NEAR(p, 0.00024681960817289476, 1e-15);
        /* The same gap between 10 and 10 requests: kolmogorov(sqrt(5) * 0.3) */
        ASSERT_OK(sup_ks_binned(a, b, 8, 10, 10, &d, &p));
        ASSERT_NEAR(p, 0.7590978384203948, 1e-12);
        ASSERT_OK(sup_ks_binned(a, a, 8, 0, 0, &d, &p));
        ASSERT_TRUE(d == 0 && p == 1);
        static const int64_t none[8] = {0};
        ASSERT_ERR(sup_ks_binned(a, none, 8, 0, 0, &d, &p), -EINVAL);
}

/* Counts of n tokens spread like shape (percent per bin, first bins), both signals, from
 * n / 20 requests. */
static void spread(struct sup_drift_counts *c, const int *shape, int n_shape, int64_t n) {
        for (int s = 0; s < SUP_DRIFT_SIGNAL_COUNT; s++)
                for (int i = 0; i < n_shape; i++)
                        c->c[s][i] += n * shape[i] / 100;
        c->requests += n / 20;
}

TEST(an_instance_whose_output_drifts_is_the_one_named) {
        static const int usual[] = {10, 20, 40, 20, 10}, flat[] = {40, 30, 20, 5, 5};
        struct sup_drift_window w[3];
        memset(w, 0, sizeof w);
        struct sup_drift_counts total[3];
        memset(total, 0, sizeof total);
        const struct sup_drift_window *pw[3] = {&w[0], &w[1], &w[2]};
        struct sup_drift_verdict v[3];
        /* 3 minutes at 1000 tokens a second; instance 2 drifts after the first minute. */
        for (int t = 0; t <= 180; t++) {
                for (int i = 0; i < 3; i++) {
                        spread(&total[i], i == 2 && t > 60 ? flat : usual, 5, 1000);
                        sup_drift_window_update(&w[i], t * 1000, &total[i]);
                }
                sup_drift_compare(pw, 3, v);
                if (t == 60)
                        for (int i = 0; i < 3; i++)
                                ASSERT_TRUE(v[i].valid && v[i].pvalue[SUP_DRIFT_TOKEN_PROB] > 0.5);
        }
        ASSERT_TRUE(v[2].valid && v[2].pvalue[SUP_DRIFT_TOKEN_PROB] < 1e-6 && v[2].pvalue[SUP_DRIFT_ENTROPY] < 1e-6);
        /* cumulative shares 0.70 vs 0.30 at the second bin's end */
        ASSERT_NEAR(v[2].ks[SUP_DRIFT_TOKEN_PROB], 0.40, 1e-9);
        /* The window is the last minute: 60 to 65 s of tokens (a snapshot every 5 s). */
        ASSERT_TRUE(v[2].n >= 60000 && v[2].n <= 65000 && v[2].m == 2 * v[2].n);
        ASSERT_TRUE(v[2].n_requests == v[2].n / 20 && v[2].m_requests == 2 * v[2].n_requests);
        /* Pooled with the drifting one, the healthy ones would be 0.20 from their pool; it
         * left the pool, so they are compared with each other only. */
        for (int i = 0; i < 2; i++)
                ASSERT_TRUE(v[i].valid && v[i].ks[SUP_DRIFT_TOKEN_PROB] == 0 && v[i].pvalue[SUP_DRIFT_TOKEN_PROB] == 1 &&
                            v[i].m == v[i].n);
        /* Two instances: a drift cannot be pinned on one, both carry it. */
        sup_drift_compare(pw + 1, 2, v);
        ASSERT_TRUE(v[0].pvalue[SUP_DRIFT_TOKEN_PROB] < 1e-6 && v[1].pvalue[SUP_DRIFT_TOKEN_PROB] < 1e-6);
}

/* Just after a start, instances whose windows are too small for a verdict of their own
 * are no reference for the others: here the pool of two such (one drifting) would name
 * the healthy, well-sampled instance 0 as drifted. */
TEST(instances_too_new_to_judge_are_no_reference) {
        static const int usual[] = {10, 20, 40, 20, 10}, skewed[] = {90, 5, 3, 1, 1};
        struct sup_drift_window w[3];
        memset(w, 0, sizeof w);
        struct sup_drift_counts total[3];
        memset(total, 0, sizeof total);
        spread(&total[0], usual, 5, 20000);
        spread(&total[1], usual, 5, 40);   /* 2 requests */
        spread(&total[2], skewed, 5, 380); /* 19 requests: one short of a verdict */
        for (int i = 0; i < 3; i++)
                sup_drift_window_update(&w[i], 0, &total[i]);
        const struct sup_drift_window *pw[3] = {&w[0], &w[1], &w[2]};
        struct sup_drift_verdict v[3];
        sup_drift_compare(pw, 3, v);
        for (int i = 0; i < 3; i++)
                ASSERT_TRUE(!v[i].valid);
        ASSERT_TRUE(v[0].m == 0 && v[0].m_requests == 0);
        /* with instance 1 judgeable (20 requests), instance 0 is compared with it alone */
        memset(w, 0, sizeof w);
        memset(&total[1], 0, sizeof total[1]);
        spread(&total[1], usual, 5, 400);
        for (int i = 0; i < 3; i++)
                sup_drift_window_update(&w[i], 0, &total[i]);
        sup_drift_compare(pw, 3, v);
        ASSERT_TRUE(v[0].valid && v[0].m == 400 && v[0].pvalue[SUP_DRIFT_TOKEN_PROB] >= SUP_DRIFT_ALPHA);
        ASSERT_TRUE(v[1].valid && v[1].m == 20000);
        ASSERT_TRUE(!v[2].valid);
}

TEST(a_new_worker_restarts_its_window_and_too_few_tokens_give_no_verdict) {
        static const int usual[] = {10, 20, 40, 20, 10};
        struct sup_drift_window w = {0}, peer = {0};
        struct sup_drift_counts total = {0}, ptotal = {0};
        spread(&total, usual, 5, 5000);
        spread(&ptotal, usual, 5, 5000);
        sup_drift_window_update(&w, 0, &total);
        sup_drift_window_update(&peer, 0, &ptotal);
        const struct sup_drift_window *pw[2] = {&w, &peer};
        struct sup_drift_verdict v[2];
        sup_drift_compare(pw, 2, v);
        ASSERT_TRUE(v[0].valid && v[0].n == 5000);
        struct sup_drift_counts fresh = {0};
        spread(&fresh, usual, 5, 300); /* 300 tokens, 15 requests: too few requests */
        sup_drift_window_update(&w, 1000, &fresh);
        sup_drift_compare(pw, 2, v);
        ASSERT_TRUE(!v[0].valid && v[0].n == 300 && v[0].n_requests == 15);
        ASSERT_TRUE(!v[1].valid); /* its peer has too few now */
        ASSERT_STREQ(sup_drift_signal_to_string(SUP_DRIFT_ENTROPY), "entropy");
        ASSERT_TRUE(sup_drift_signal_to_string(SUP_DRIFT_SIGNAL_COUNT) == NULL);
}
