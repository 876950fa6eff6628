/* MoE models give bitwise the same logits for any thread count: the DeepSeek V2/V3
 * fixtures, as stored and converted to int8 and int4 (the int8-activation kernels and
 * their gathered expert rows), with int8 and float32 activations, evaluated as a prompt
 * in one call (tokens per expert > 1) and then token by token (the decode's one-token
 * split, one piece per thread), on no pool and on pools of 1, 2 and 3 threads. The
 * 2-thread run also counts the pool's calls (dse_pool_timing_*): the three MoE regions of
 * every MoE layer are there under their labels. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dse.h"
#include "t.h"

#include "fixture-models.h"

#define PROMPT 7
#define DECODE 5
#define N_POOLS 4 /* none, 1, 2, 3 threads */

static const char *const moe_labels[] = {"moe: router, shared gate/up", "moe: shared down, routed gate/up",
                                         "moe: routed down"};

/* The fixture converted to quant, or as stored (NULL). */
static struct dse_model *open_as(const char *fixture, const char *quant) {
        if (!quant)
                return fixture_model_open(fixture);
        struct dse_diag diag = {{0}};
        struct dse_model *m = NULL;
        int r = fixture_model_convert(fixture, quant, &m, &diag);
        if (r < 0)
                fprintf(stderr, "  %s as %s: %s (%s)\n", fixture, quant, strerror(-r), diag.msg);
        return m;
}

/* PROMPT tokens in one eval, then DECODE single tokens: every row's logits into out. */
static void run(struct dse_model *m, struct dse_pool *pool, enum dse_activations act, float *out) {
        int V = dse_model_vocab_size(m);
        struct dse_diag diag = {{0}};
        struct dse_session *s = NULL;
        int32_t ids[PROMPT + DECODE];
        for (int i = 0; i < PROMPT + DECODE; i++)
                ids[i] = (int32_t)((i * 131 + 5) % V);
        ASSERT_OK(dse_session_new(m, PROMPT + DECODE, pool, &s, &diag));
        ASSERT_OK(dse_session_set_activations(s, act));
        ASSERT_OK(dse_session_eval(s, ids, PROMPT, out, NULL, &diag));
        for (int i = PROMPT; i < PROMPT + DECODE; i++)
                ASSERT_OK(dse_session_eval(s, ids + i, 1, out + (size_t)i * V, NULL, &diag));
        dse_session_free(s);
}

static void same_for_any_threads(const char *fixture, const char *quant) {
        struct dse_model *m = open_as(fixture, quant);
        ASSERT_TRUE(m);
        size_t V = (size_t)dse_model_vocab_size(m), rows = PROMPT + DECODE;
        struct dse_pool *pools[N_POOLS] = {NULL};
        for (int p = 1; p < N_POOLS; p++)
                ASSERT_OK(dse_pool_new(p, NULL, 0, &pools[p]));
        float *want = malloc(rows * V * sizeof(float)), *got = malloc(rows * V * sizeof(float));
        ASSERT_TRUE(want && got);
        for (int a = 0; a < DSE_ACTIVATIONS_COUNT; a++) {
                run(m, NULL, (enum dse_activations)a, want);
                float peak = 0;
                for (size_t i = 0; i < rows * V; i++)
                        peak = fabsf(want[i]) > peak ? fabsf(want[i]) : peak;
                ASSERT_TRUE(peak > 0.01f); /* real logits are compared */
                for (int p = 1; p < N_POOLS; p++) {
                        if (p == 2)
                                dse_pool_timing_start(pools[p]);
                        run(m, pools[p], (enum dse_activations)a, got);
                        for (size_t i = 0; i < rows * V; i++)
                                if (memcmp(&got[i], &want[i], sizeof(float)) != 0)
                                        T_FAIL("%s as %s, %s activations, %d threads: row %zu logit %zu is %.9g, "
                                               "%.9g without a pool", fixture, quant ? quant : "stored",
                                               dse_activations_to_string((enum dse_activations)a), p, i / V, i % V,
                                               got[i], want[i]);
                        if (p != 2)
                                continue;
                        dse_pool_timing_stop(pools[p]);
                        struct dse_pool_phase_timing ph[DSE_POOL_TIMING_PHASES];
                        int n = dse_pool_timing_read(pools[p], ph, DSE_POOL_TIMING_PHASES);
                        for (size_t l = 0; l < sizeof moe_labels / sizeof moe_labels[0]; l++) {
                                int found = 0;
                                for (int i = 0; i < n; i++)
                                        if (strcmp(ph[i].label, moe_labels[l]) == 0) {
                                                found = 1;
                                                /* one call per MoE layer per eval */
                                                ASSERT_TRUE(ph[i].calls > 0 && ph[i].calls % (1 + DECODE) == 0);
                                                ASSERT_TRUE(ph[i].wall_ns > 0);
                                        }
                                if (!found)
                                        T_FAIL("%s: no pool calls counted as '%s'", fixture, moe_labels[l]);
                        }
                }
        }
        free(want);
        free(got);
        for (int p = 1; p < N_POOLS; p++)
                dse_pool_free(pools[p]);
        dse_model_free(m);
}

TEST(v2_lite_stored) { same_for_any_threads("deepseek-v2-lite-sharded", NULL); }
TEST(v2_lite_int8) { same_for_any_threads("deepseek-v2-lite-sharded", "int8"); }
TEST(v2_lite_int4) { same_for_any_threads("deepseek-v2-lite-sharded", "int4"); }
TEST(v2_group_limited_int4) { same_for_any_threads("deepseek-v2-group-limited", "int4"); }
TEST(v3_noaux_stored) { same_for_any_threads("deepseek-v3-noaux-yarn", NULL); }
TEST(v3_noaux_int8) { same_for_any_threads("deepseek-v3-noaux-yarn", "int8"); }
TEST(v3_fp8_stored) { same_for_any_threads("deepseek-v3-fp8-mtp", NULL); }
TEST(v3_fp8_int4) { same_for_any_threads("deepseek-v3-fp8-mtp", "int4"); }
