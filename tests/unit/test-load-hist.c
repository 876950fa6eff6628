/* The load generator's histogram (bench/load/hist.c): bucket arithmetic, and quantiles of
 * known distributions within the stated relative error of the exact order statistics. */
#include "t.h"

#include <stdint.h>

#include "gen.h"
#include "hist.h"

static int cmp_u64(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
        return x < y ? -1 : x > y;
}

/* Worst relative error over a set of quantiles, against the sorted samples. */
static double worst_rel_err(uint64_t *v, size_t n) {
        static const double qs[] = {0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999, 0.9999};
        struct load_hist *h = malloc(sizeof *h);
        load_hist_init(h);
        for (size_t i = 0; i < n; i++)
                load_hist_record(h, v[i]);
        qsort(v, n, sizeof *v, cmp_u64);
        double worst = 0;
        for (size_t i = 0; i < sizeof qs / sizeof qs[0]; i++) {
                size_t rank = (size_t)ceil(qs[i] * (double)n); /* 1-based, as hist.h defines it */
                double exact = (double)v[rank - 1], got = (double)load_hist_quantile(h, qs[i]);
                double err = exact > 0 ? fabs(got - exact) / exact : fabs(got);
                if (err > worst)
                        worst = err;
        }
        free(h);
        return worst;
}

TEST(bucket_bounds_hold_their_values) {
        uint64_t probes[] = {0, 1, 127, 128, 255, 256, 257, 511, 512, 1000, 123456789, 1ull << 40,
                             (1ull << 40) + 12345, UINT64_MAX / 3, UINT64_MAX};
        for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
                uint64_t v = probes[i];
                unsigned b = load_hist_bucket_of(v);
                ASSERT_TRUE(b < LOAD_HIST_BUCKETS);
                uint64_t lo = load_hist_bucket_lo(b), w = load_hist_bucket_width(b);
                ASSERT_TRUE(lo <= v && v - lo < w);
                /* the width bound behind LOAD_HIST_REL_ERR */
                ASSERT_TRUE(w == 1 || (double)w <= (double)lo / LOAD_HIST_SUB);
        }
        /* buckets tile the line: each starts where the previous one ends */
        for (unsigned b = 1; b < LOAD_HIST_BUCKETS; b++)
                ASSERT_EQ(load_hist_bucket_lo(b), load_hist_bucket_lo(b - 1) + load_hist_bucket_width(b - 1));
}

TEST(small_values_are_exact) {
        struct load_hist h;
        load_hist_init(&h);
        for (uint64_t v = 1; v <= 200; v++)
                load_hist_record(&h, v);
        ASSERT_EQ(load_hist_quantile(&h, 0.5), 100);
        ASSERT_EQ(load_hist_quantile(&h, 0.99), 198);
        ASSERT_EQ(load_hist_quantile(&h, 0), 1);
        ASSERT_EQ(load_hist_quantile(&h, 1), 200);
        ASSERT_NEAR(load_hist_mean(&h), 100.5, 1e-9);
        ASSERT_NEAR(load_hist_stddev(&h), sqrt((200.0 * 200.0 - 1) / 12), 1e-6);
}

TEST(uniform_latencies_within_relative_error) {
        size_t n = 200000;
        uint64_t *v = malloc(n * sizeof *v);
        struct load_rng rng;
        load_rng_seed(&rng, 7);
        for (size_t i = 0; i < n; i++) /* 1 ms .. 2 s in ns */
                v[i] = 1000000 + (uint64_t)(load_rng_uniform(&rng) * 1999000000.0);
        double e = worst_rel_err(v, n);
        free(v);
        fprintf(stderr, "  uniform: worst relative error %.5f (bound %.5f)\n", e, LOAD_HIST_REL_ERR);
        ASSERT_TRUE(e <= LOAD_HIST_REL_ERR);
}

TEST(exponential_and_lognormal_latencies_within_relative_error) {
        size_t n = 200000;
        uint64_t *v = malloc(n * sizeof *v);
        struct load_rng rng;
        load_rng_seed(&rng, 11);
        for (size_t i = 0; i < n; i++) /* exponential, mean 50 ms */
                v[i] = (uint64_t)(load_next_interarrival_s(&rng, 20.0) * 1e9);
        double e1 = worst_rel_err(v, n);
        for (size_t i = 0; i < n; i++) { /* log-normal over six decades (Box-Muller) */
                double u1 = 1.0 - load_rng_uniform(&rng), u2 = load_rng_uniform(&rng);
                double z = sqrt(-2 * log(u1)) * cos(2 * M_PI * u2);
                v[i] = (uint64_t)exp(16.0 + 2.5 * z);
        }
        double e2 = worst_rel_err(v, n);
        free(v);
        fprintf(stderr, "  exponential %.5f, log-normal %.5f (bound %.5f)\n", e1, e2, LOAD_HIST_REL_ERR);
        ASSERT_TRUE(e1 <= LOAD_HIST_REL_ERR);
        ASSERT_TRUE(e2 <= LOAD_HIST_REL_ERR);
}

TEST(tail_is_not_the_maximum) {
        /* 10000 samples of 10 ms and one of 5 s: P99 must be 10 ms, P99.99+ the outlier */
        struct load_hist h;
        load_hist_init(&h);
        for (int i = 0; i < 10000; i++)
                load_hist_record(&h, 10000000);
        load_hist_record(&h, 5000000000ull);
        ASSERT_NEAR((double)load_hist_quantile(&h, 0.99), 1e7, 1e7 * LOAD_HIST_REL_ERR);
        ASSERT_EQ(load_hist_quantile(&h, 1), 5000000000ull);
        ASSERT_NEAR((double)load_hist_quantile(&h, 0.99999), 5e9, 5e9 * LOAD_HIST_REL_ERR);
}

TEST(merge_equals_recording_all) {
        struct load_hist *a = malloc(sizeof *a), *b = malloc(sizeof *b), *all = malloc(sizeof *all);
        load_hist_init(a);
        load_hist_init(b);
        load_hist_init(all);
        struct load_rng rng;
        load_rng_seed(&rng, 3);
        for (int i = 0; i < 5000; i++) {
                uint64_t v = load_rng_next(&rng) >> 30;
                load_hist_record(i % 2 ? a : b, v);
                load_hist_record(all, v);
        }
        load_hist_merge(a, b);
        ASSERT_EQ(a->count, all->count);
        ASSERT_EQ(a->min, all->min);
        ASSERT_EQ(a->max, all->max);
        ASSERT_TRUE(memcmp(a->buckets, all->buckets, sizeof a->buckets) == 0);
        ASSERT_EQ(load_hist_quantile(a, 0.9), load_hist_quantile(all, 0.9));
        free(a);
        free(b);
        free(all);
}

TEST(empty_histogram) {
        struct load_hist h;
        load_hist_init(&h);
        ASSERT_EQ(load_hist_quantile(&h, 0.99), 0);
        ASSERT_NEAR(load_hist_stddev(&h), 0, 0);
        ASSERT_NEAR(load_hist_mean(&h), 0, 0);
}
