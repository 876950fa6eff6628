/* The load generator's arrivals and lengths (bench/load/gen.c): seeded and reproducible,
 * Poisson gaps with the right mean and spread, length distributions in their bounds. */
#include "t.h"

#include "gen.h"

TEST(same_seed_same_stream) {
        struct load_rng a, b, c;
        load_rng_seed(&a, 42);
        load_rng_seed(&b, 42);
        load_rng_seed(&c, 43);
        int differ = 0;
        for (int i = 0; i < 1000; i++) {
                uint64_t x = load_rng_next(&a);
                ASSERT_EQ(x, load_rng_next(&b));
                differ |= x != load_rng_next(&c);
        }
        ASSERT_TRUE(differ);
}

TEST(poisson_gaps_have_mean_and_cv_one) {
        /* exponential gaps at rate r: mean 1/r, standard deviation 1/r; 100000 gaps put the
         * sample mean within ~1% (3 sigma) */
        struct load_rng rng;
        load_rng_seed(&rng, 1);
        double rate = 250, sum = 0, sum_sq = 0;
        int n = 100000;
        for (int i = 0; i < n; i++) {
                double g = load_next_interarrival_s(&rng, rate);
                ASSERT_TRUE(g >= 0);
                sum += g;
                sum_sq += g * g;
        }
        double mean = sum / n, sd = sqrt(sum_sq / n - mean * mean);
        ASSERT_NEAR(mean * rate, 1.0, 0.015);
        ASSERT_NEAR(sd / mean, 1.0, 0.02);
}

TEST(dist_parse) {
        struct load_dist d;
        char buf[64];
        ASSERT_OK(load_dist_parse("32", &d));
        ASSERT_EQ(d.kind, LOAD_DIST_FIXED);
        ASSERT_EQ(d.a, 32);
        ASSERT_OK(load_dist_parse("uniform:4:9", &d));
        ASSERT_STREQ(load_dist_to_string(&d, buf, sizeof buf), "uniform:4:9");
        ASSERT_OK(load_dist_parse("exp:40", &d));
        ASSERT_STREQ(load_dist_to_string(&d, buf, sizeof buf), "exp:40:320");
        ASSERT_OK(load_dist_parse("exp:40:100", &d));
        ASSERT_EQ(d.b, 100);
        const char *bad[] = {"", "0", "-3", "x", "12x", "uniform:9:4", "uniform:4", "uniform:0:3",
                             "exp:", "exp:10:5", "exp:10:20:30", "uniform:1:2:", "9999999"};
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
                ASSERT_ERR(load_dist_parse(bad[i], &d), -EINVAL);
}

TEST(dist_samples_in_bounds_with_expected_mean) {
        struct load_rng rng;
        load_rng_seed(&rng, 5);
        struct load_dist u, e;
        ASSERT_OK(load_dist_parse("uniform:10:20", &u));
        ASSERT_OK(load_dist_parse("exp:50:10000", &e));
        double su = 0, se = 0;
        int n = 50000, seen_lo = 0, seen_hi = 0;
        for (int i = 0; i < n; i++) {
                unsigned x = load_dist_sample(&u, &rng), y = load_dist_sample(&e, &rng);
                ASSERT_TRUE(x >= 10 && x <= 20);
                ASSERT_TRUE(y >= 1 && y <= 10000);
                seen_lo |= x == 10;
                seen_hi |= x == 20;
                su += x;
                se += y;
        }
        ASSERT_TRUE(seen_lo && seen_hi);
        ASSERT_NEAR(su / n, 15.0, 0.1);
        ASSERT_NEAR(se / n, 50.0, 1.5);
}

TEST(prompt_has_the_asked_words_and_fits) {
        struct load_rng rng;
        load_rng_seed(&rng, 9);
        char buf[4096];
        size_t len = load_prompt_fill(buf, sizeof buf, 25, &rng);
        ASSERT_EQ(len, strlen(buf));
        int words = 1;
        for (size_t i = 0; i < len; i++) {
                ASSERT_TRUE((buf[i] >= 'a' && buf[i] <= 'z') || buf[i] == ' ');
                words += buf[i] == ' ';
        }
        ASSERT_EQ(words, 25);
        char small[16];
        len = load_prompt_fill(small, sizeof small, 100, &rng);
        ASSERT_TRUE(len < sizeof small && len == strlen(small));
}
