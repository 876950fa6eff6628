/* The sampler on synthetic logits: greedy is the argmax, top-k=1 is greedy, a seed
 * reproduces its draws, top-k/top-p/min-p keep exactly the sets their definitions give,
 * and draw frequencies match the (filtered, tempered) softmax by a chi-square test;
 * dse_sampler_probs is that distribution, and dse_sampler_uniform_at a counter-based
 * stream. */
#include <stdint.h>

#include "dse.h"
#include "t.h"

#define N_DRAWS 20000

static struct dse_sampler *make(float temperature, int top_k, float top_p, float min_p, uint64_t seed, int n_vocab) {
        struct dse_sampler_params p;
        dse_sampler_params_default(&p);
        p.temperature = temperature;
        p.top_k = top_k;
        p.top_p = top_p;
        p.min_p = min_p;
        p.seed = seed;
        struct dse_sampler *s = NULL;
        return dse_sampler_new(&p, n_vocab, &s, NULL) == 0 ? s : NULL;
}

static uint64_t lcg(uint64_t *x) {
        *x = *x * 6364136223846793005ull + 1442695040888963407ull;
        return *x >> 33;
}

/* Pearson's chi-square of observed counts against probabilities (cells with p > 0). */
static double chi_square(const int *counts, const double *p, int n, int total, int *ret_df) {
        double chi = 0;
        int cells = 0;
        for (int i = 0; i < n; i++) {
                if (p[i] <= 0)
                        continue;
                double e = p[i] * total;
                chi += (counts[i] - e) * (counts[i] - e) / e;
                cells++;
        }
        *ret_df = cells - 1;
        return chi;
}

/* Upper 0.1% points of the chi-square distribution by degrees of freedom (1..6). */
static const double chi2_999[] = {0, 10.828, 13.816, 16.266, 18.467, 20.515, 22.458};

static void softmax(const float *logits, int n, double temperature, double *p) {
        double m = -INFINITY, s = 0;
        for (int i = 0; i < n; i++)
                m = fmax(m, logits[i] / temperature);
        for (int i = 0; i < n; i++)
                s += p[i] = exp(logits[i] / temperature - m);
        for (int i = 0; i < n; i++)
                p[i] /= s;
}

TEST(greedy_is_argmax) {
        uint64_t x = 1;
        float logits[1000];
        struct dse_sampler *s = make(0.0f, 0, 1.0f, 0.0f, 7, 1000);
        ASSERT_TRUE(s);
        for (int trial = 0; trial < 50; trial++) {
                int best = 0;
                for (int i = 0; i < 1000; i++) {
                        logits[i] = (float)lcg(&x) / 4294967296.0f * 20.0f - 10.0f;
                        if (logits[i] > logits[best])
                                best = i;
                }
                ASSERT_EQ(dse_sampler_sample(s, logits), best);
        }
        dse_sampler_free(s);
        float ties[4] = {1.0f, 3.0f, 3.0f, NAN};
        s = make(0.0f, 0, 1.0f, 0.0f, 7, 4);
        ASSERT_TRUE(s);
        ASSERT_EQ(dse_sampler_sample(s, ties), 1); /* lowest id on ties, NaN skipped */
        dse_sampler_free(s);
        float none[2] = {-INFINITY, NAN};
        s = make(0.0f, 0, 1.0f, 0.0f, 7, 2);
        ASSERT_TRUE(s);
        ASSERT_ERR(dse_sampler_sample(s, none), -EINVAL);
        dse_sampler_free(s);
        s = make(1.0f, 0, 1.0f, 0.0f, 7, 2);
        ASSERT_TRUE(s);
        ASSERT_ERR(dse_sampler_sample(s, none), -EINVAL);
        dse_sampler_free(s);
}

TEST(top_k_1_is_greedy) {
        uint64_t x = 2;
        float logits[500];
        struct dse_sampler *s = make(1.5f, 1, 1.0f, 0.0f, 11, 500);
        ASSERT_TRUE(s);
        for (int trial = 0; trial < 50; trial++) {
                int best = 0;
                for (int i = 0; i < 500; i++) {
                        logits[i] = (float)lcg(&x) / 4294967296.0f * 8.0f;
                        if (logits[i] > logits[best])
                                best = i;
                }
                ASSERT_EQ(dse_sampler_sample(s, logits), best);
        }
        dse_sampler_free(s);
}

TEST(seed_reproduces_draws) {
        float logits[8] = {0.1f, 0.2f, 0.3f, 0.1f, 0.0f, 0.25f, 0.15f, 0.05f};
        struct dse_sampler *a = make(1.0f, 0, 0.95f, 0.0f, 1234, 8), *b = make(1.0f, 0, 0.95f, 0.0f, 1234, 8),
                           *c = make(1.0f, 0, 0.95f, 0.0f, 1235, 8);
        ASSERT_TRUE(a && b && c);
        int differ = 0;
        for (int i = 0; i < 200; i++) {
                int ia = dse_sampler_sample(a, logits), ib = dse_sampler_sample(b, logits), ic = dse_sampler_sample(c, logits);
                ASSERT_TRUE(ia >= 0 && ia < 8);
                ASSERT_EQ(ia, ib);
                differ += ia != ic;
        }
        ASSERT_TRUE(differ > 50); /* another seed gives another sequence */
        dse_sampler_free(a);
        dse_sampler_free(b);
        dse_sampler_free(c);
}

/* Draws N_DRAWS ids and checks them against probabilities p by chi-square. */
static int draws_match(struct dse_sampler *s, const float *logits, const double *p, int n, double *ret_chi) {
        int counts[16] = {0}, df;
        for (int i = 0; i < N_DRAWS; i++) {
                int id = dse_sampler_sample(s, logits);
                if (id < 0 || id >= n)
                        return 0;
                counts[id]++;
        }
        for (int i = 0; i < n; i++)
                if (p[i] == 0 && counts[i] != 0)
                        return 0; /* a filtered token was drawn */
        *ret_chi = chi_square(counts, p, n, N_DRAWS, &df);
        return df >= 1 && df <= 6 && *ret_chi < chi2_999[df];
}

TEST(frequencies_match_softmax) {
        float logits[5] = {1.0f, 2.0f, 0.5f, -1.0f, 3.0f};
        double p[5], chi = 0;
        for (int t = 0; t < 3; t++) {
                float temperature = (float[]){1.0f, 0.5f, 2.0f}[t];
                softmax(logits, 5, temperature, p);
                struct dse_sampler *s = make(temperature, 0, 1.0f, 0.0f, 99 + (uint64_t)t, 5);
                ASSERT_TRUE(s);
                int ok = draws_match(s, logits, p, 5, &chi);
                dse_sampler_free(s);
                if (!ok)
                        T_FAIL("temperature %g: chi-square %.2f over the 0.1%% bound", (double)temperature, chi);
        }
}

TEST(top_k_keeps_k_best) {
        float logits[6] = {0.3f, 2.0f, 1.0f, 2.5f, -0.5f, 1.5f};
        /* k=3 keeps ids 3, 1, 5 with softmax renormalised over them */
        double p[6] = {0}, s = 0;
        int keep[3] = {3, 1, 5};
        for (int i = 0; i < 3; i++)
                s += p[keep[i]] = exp(logits[keep[i]]);
        for (int i = 0; i < 3; i++)
                p[keep[i]] /= s;
        struct dse_sampler *smp = make(1.0f, 3, 1.0f, 0.0f, 5, 6);
        ASSERT_TRUE(smp);
        double chi = 0;
        int ok = draws_match(smp, logits, p, 6, &chi);
        dse_sampler_free(smp);
        if (!ok)
                T_FAIL("top-k 3: chi-square %.2f, or a dropped token drawn", chi);
}

TEST(top_p_keeps_smallest_set_reaching_p) {
        /* probabilities 0.5 0.2 0.15 0.1 0.05 (as logits): p=0.8 needs 0.5+0.2+0.15 = 0.85 */
        double probs[5] = {0.5, 0.2, 0.15, 0.1, 0.05}, p[5] = {0};
        float logits[5];
        for (int i = 0; i < 5; i++)
                logits[i] = (float)log(probs[i]);
        for (int i = 0; i < 3; i++)
                p[i] = probs[i] / 0.85;
        struct dse_sampler *s = make(1.0f, 0, 0.8f, 0.0f, 17, 5);
        ASSERT_TRUE(s);
        double chi = 0;
        int ok = draws_match(s, logits, p, 5, &chi);
        dse_sampler_free(s);
        if (!ok)
                T_FAIL("top-p 0.8: chi-square %.2f, or a token outside the nucleus drawn", chi);
        /* p=0.45: the most likely token alone reaches it */
        s = make(1.0f, 0, 0.45f, 0.0f, 18, 5);
        ASSERT_TRUE(s);
        for (int i = 0; i < 100; i++)
                ASSERT_EQ(dse_sampler_sample(s, logits), 0);
        dse_sampler_free(s);
}

TEST(min_p_drops_unlikely_tokens) {
        /* min_p 0.25 of p_max 0.5 = 0.125: keeps 0.5 0.2 0.15 */
        double probs[5] = {0.5, 0.2, 0.15, 0.1, 0.05}, p[5] = {0};
        float logits[5];
        for (int i = 0; i < 5; i++)
                logits[i] = (float)log(probs[i]);
        for (int i = 0; i < 3; i++)
                p[i] = probs[i] / 0.85;
        struct dse_sampler *s = make(1.0f, 0, 1.0f, 0.25f, 23, 5);
        ASSERT_TRUE(s);
        double chi = 0;
        int ok = draws_match(s, logits, p, 5, &chi);
        dse_sampler_free(s);
        if (!ok)
                T_FAIL("min-p 0.25: chi-square %.2f, or a dropped token drawn", chi);
}

/* dse_sampler_probs gives the distribution the draws follow, over the whole
 * vocabulary: the tempered softmax, each filter's renormalised set (0 outside it), a
 * one-hot argmax when greedy; every logit -inf is an error. It draws nothing: the
 * sampler's next draws are those of a sampler never asked. */
TEST(probs_are_the_distribution_drawn_from) {
        double probs5[5] = {0.5, 0.2, 0.15, 0.1, 0.05}, want[5];
        float logits[5], mixed[5] = {1.0f, 2.0f, 0.5f, -1.0f, 3.0f}, got[5];
        for (int i = 0; i < 5; i++)
                logits[i] = (float)log(probs5[i]);
        struct {
                float temperature, top_p, min_p;
                int top_k;
                const float *logits;
                int n_kept;
        } cases[] = {
                {2.0f, 1.0f, 0.0f, 0, mixed, 5},    /* tempered softmax */
                {1.0f, 1.0f, 0.0f, 3, mixed, 3},    /* top-k 3 */
                {1.0f, 0.8f, 0.0f, 0, logits, 3},   /* top-p 0.8: 0.5 + 0.2 + 0.15 */
                {1.0f, 1.0f, 0.25f, 0, logits, 3},  /* min-p 0.25 of 0.5 */
                {0.0f, 1.0f, 0.0f, 0, mixed, 1},    /* greedy: id 4 */
        };
        for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
                float t = cases[c].temperature;
                if (t > 0)
                        softmax(cases[c].logits, 5, t, want);
                else
                        for (int i = 0; i < 5; i++)
                                want[i] = i == 4;
                /* the kept set: the n_kept largest, renormalised */
                double kept = 0;
                for (int i = 0; i < 5; i++) {
                        int rank = 0;
                        for (int j = 0; j < 5; j++)
                                rank += cases[c].logits[j] > cases[c].logits[i];
                        if (rank >= cases[c].n_kept)
                                want[i] = 0;
                        kept += want[i];
                }
                struct dse_sampler *s = make(t, cases[c].top_k, cases[c].top_p, cases[c].min_p, 41, 5),
                                   *twin = make(t, cases[c].top_k, cases[c].top_p, cases[c].min_p, 41, 5);
                ASSERT_TRUE(s && twin);
                ASSERT_EQ(dse_sampler_probs(s, cases[c].logits, got), cases[c].n_kept);
                for (int i = 0; i < 5; i++)
                        if (fabs(got[i] - want[i] / kept) > 1e-6)
                                T_FAIL("case %zu: p[%d] = %.7f, want %.7f", c, i, (double)got[i], want[i] / kept);
                for (int i = 0; i < 50; i++)
                        ASSERT_EQ(dse_sampler_sample(s, cases[c].logits), dse_sampler_sample(twin, cases[c].logits));
                double chi = 0;
                for (int i = 0; i < 5; i++)
                        want[i] = got[i];
                if (t > 0 && !draws_match(s, cases[c].logits, want, 5, &chi))
                        T_FAIL("case %zu: draws against dse_sampler_probs: chi-square %.2f", c, chi);
                dse_sampler_free(s);
                dse_sampler_free(twin);
        }
        float none[3] = {-INFINITY, NAN, -INFINITY}, p3[3];
        struct dse_sampler *s = make(1.0f, 0, 1.0f, 0.0f, 1, 3);
        ASSERT_TRUE(s);
        ASSERT_ERR(dse_sampler_probs(s, none, p3), -EINVAL);
        dse_sampler_free(s);
}

/* dse_sampler_uniform_at: a function of (seed, counter, lane) alone, in [0, 1), evenly
 * spread over counters, with lanes and seeds apart; the sequential draws do not move
 * it. */
TEST(uniform_at_is_counter_based) {
        struct dse_sampler *a = make(1.0f, 0, 1.0f, 0.0f, 7, 5), *b = make(1.0f, 0, 1.0f, 0.0f, 7, 5),
                           *c = make(1.0f, 0, 1.0f, 0.0f, 8, 5);
        ASSERT_TRUE(a && b && c);
        float logits[5] = {0};
        for (int i = 0; i < 10; i++)
                dse_sampler_sample(b, logits);
        int bins[10] = {0}, same_lane = 0, same_seed = 0;
        for (uint64_t k = 0; k < 10000; k++) {
                double u = dse_sampler_uniform_at(a, k, 0);
                ASSERT_TRUE(u >= 0 && u < 1);
                ASSERT_TRUE(u == dse_sampler_uniform_at(b, k, 0));
                same_lane += u == dse_sampler_uniform_at(a, k, 1);
                same_seed += u == dse_sampler_uniform_at(c, k, 0);
                bins[(int)(u * 10)]++;
        }
        ASSERT_EQ(same_lane, 0);
        ASSERT_EQ(same_seed, 0);
        double p[10], chi;
        int df;
        for (int i = 0; i < 10; i++)
                p[i] = 0.1;
        chi = chi_square(bins, p, 10, 10000, &df);
        ASSERT_TRUE(chi < 27.877); /* the upper 0.1% point at 9 degrees of freedom */
        dse_sampler_free(a);
        dse_sampler_free(b);
        dse_sampler_free(c);
}

TEST(bad_params_rejected) {
        struct dse_sampler_params p;
        struct dse_sampler *s = NULL;
        struct dse_diag diag = {{0}};
        dse_sampler_params_default(&p);
        ASSERT_ERR(dse_sampler_new(&p, 0, &s, &diag), -EINVAL);
        p.top_p = 0.0f;
        ASSERT_ERR(dse_sampler_new(&p, 10, &s, &diag), -EINVAL);
        ASSERT_TRUE(strstr(diag.msg, "top-p") != NULL);
        dse_sampler_params_default(&p);
        p.min_p = 1.5f;
        ASSERT_ERR(dse_sampler_new(&p, 10, &s, &diag), -EINVAL);
        dse_sampler_params_default(&p);
        p.temperature = NAN;
        ASSERT_ERR(dse_sampler_new(&p, 10, &s, &diag), -EINVAL);
        dse_sampler_free(NULL);
}
