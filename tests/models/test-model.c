/* Golden-model tests: every fixture in $DSV_FIXTURES/models against its reference data
 * (fixtures/models/README.md), at DSV_CPU=scalar and at the detected level.
 *
 *   prompt:  one eval over ref/prompt_ids.json, all rows compared with ref/logits.f32
 *   decode:  ref/generated_ids.json fed one token at a time through the KV cache (the
 *            ids are our own greedy choices as long as they agree), each row compared
 *            with ref/decode_logits.f32; every argmax must equal the next reference id
 *
 * Tolerance: the README's strict row for float32 activations (DSE_ACTIVATIONS_F32, set
 * explicitly: the default multiplies Q8/Q4 weights by int8 activations): max abs <= 1e-3,
 * top-1 agreement 100 %, identical greedy ids. Fixtures with Q8/Q4 weights (GPTQ, AWQ)
 * also run the default int8 activations at the detected level against the README's
 * second row: mean abs <= 0.05, max abs <= 0.5 (all three are dense), top-1 agreement
 * >= 0.9 on the teacher-forced prompt rows; generated ids are compared only up to the
 * first divergence, so decode rows are held to the same mean/max bounds. The strict
 * passes run on an F32 KV cache (DSV_KV=f32, the engine's default); every fixture also
 * runs a BF16, FP8 and INT8 cache against the KV rows below. Run one fixture
 * with `test-model llama_bf16_linear_rope`; ctest registers one test each. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "dse.h"
#include "model-ref.h"
#include "t.h"

#define STRICT_MAX_ABS 1e-3
#define ROW2_MEAN_ABS 0.05
#define ROW2_MAX_ABS 0.5
#define ROW2_TOP1 0.9
#define N_DECODE 16

/* The KV rows: float32 activations at the detected level over a cache of each stored
 * type, against the same reference (prompt rows one eval, decode rows teacher-forced
 * through the cache). Bounds over all eleven fixtures: the worst each fixture showed
 * (this test's own lines, measured on an AVX-512 host) and about 2x margin:
 *   bf16  max abs 0.069, mean abs 0.0096 (qwen2-bf16-tied); top-1 100 % everywhere
 *   int8  max abs 0.168, mean abs 0.029 (qwen2-bf16-tied); top-1 >= 31/32
 *   fp8   max abs 3.11, mean abs 0.212 (deepseek-v3-fp8-mtp decode); top-1 >= 43/48
 * (e4m3 keeps 3 mantissa bits, int8 with a per-group scale about 7, bf16 8). Greedy ids
 * are compared only up to the first divergence, as in the int8 activation row. */
struct kv_row {
        double mean_abs, max_abs, top1;
};
static const struct kv_row kv_rows[DSE_KV_DTYPE_COUNT] = {
        [DSE_KV_BF16] = {0.02, 0.15, 0.95},
        [DSE_KV_FP8] = {0.45, 6.5, 0.8},
        [DSE_KV_INT8] = {0.06, 0.35, 0.9},
};

struct errstats {
        double max_abs, sum_abs;
        size_t n;
        int rows, top1_agree, worst_row;
};

static void compare_rows(struct errstats *e, const float *got, const float *want, int rows, int vocab) {
        for (int r = 0; r < rows; r++) {
                for (int i = 0; i < vocab; i++) {
                        double d = fabs((double)got[(size_t)r * vocab + i] - want[(size_t)r * vocab + i]);
                        if (!(d <= e->max_abs)) {
                                e->max_abs = isnan(d) ? INFINITY : d;
                                e->worst_row = e->rows;
                        }
                        e->sum_abs += d;
                        e->n++;
                }
                e->rows++;
                e->top1_agree += argmax(got + (size_t)r * vocab, vocab) == argmax(want + (size_t)r * vocab, vocab);
        }
}

static void print_first(const char *what, const float *got, const float *want, int n) {
        fprintf(stderr, "    %sfirst values (got, reference):\n", what);
        for (int i = 0; i < n; i++)
                fprintf(stderr, "      %s %12.6f %12.6f\n",
                        fabs(got[i] - want[i]) <= STRICT_MAX_ABS ? "OK    " : "NOT OK", got[i], want[i]);
}

static void run_fixture(const char *name, int quantized) {
        char dir[1024], path[1200], native[4096];
        snprintf(dir, sizeof dir, "%s", t_fixture("models"));
        snprintf(dir + strlen(dir), sizeof dir - strlen(dir), "/%s", name);
        if (!getenv("DSV_CACHE_DIR") && getenv("DSV_BUILD_DIR")) {
                char cache[1100];
                snprintf(cache, sizeof cache, "%s/model-cache", getenv("DSV_BUILD_DIR"));
                setenv("DSV_CACHE_DIR", cache, 1);
        }
        struct dse_diag diag = {{0}};
        struct dse_model *model = NULL;
        int r = dse_model_resolve(dir, native, sizeof native, &diag);
        if (r >= 0)
                r = dse_model_open(native, 0, &model, &diag);
        if (r < 0)
                T_FAIL("%s: %s (%s)", name, strerror(-r), diag.msg);

        int32_t prompt[512], gen[N_DECODE];
        snprintf(path, sizeof path, "%s/ref/prompt_ids.json", dir);
        int P = read_ids(path, prompt, 512);
        snprintf(path, sizeof path, "%s/ref/generated_ids.json", dir);
        int G = read_ids(path, gen, N_DECODE);
        int V = dse_model_vocab_size(model);
        size_t len_l = 0, len_d = 0;
        snprintf(path, sizeof path, "%s/ref/logits.f32", dir);
        float *ref_logits = slurp(path, &len_l);
        snprintf(path, sizeof path, "%s/ref/decode_logits.f32", dir);
        float *ref_decode = slurp(path, &len_d);
        if (P <= 0 || G != N_DECODE || V <= 0 || !ref_logits || !ref_decode ||
            len_l != (size_t)P * V * 4 || len_d != (size_t)N_DECODE * V * 4) {
                free(ref_logits);
                free(ref_decode);
                dse_model_free(model);
                T_FAIL("%s: reference data unreadable or of the wrong size (P %d, vocab %d)", name, P, V);
        }

        struct dse_cpu_info cpu;
        unsetenv("DSV_CPU");
        unsetenv("DSV_KV");
        ASSERT_OK(dse_cpu_detect(&cpu, NULL));
        /* passes: scalar f32, detected f32 (both strict, F32 KV), detected int8 (second
         * row); then the KV rows: detected f32 activations over a BF16, FP8, INT8 cache */
        enum dse_cpu_level levels[6] = {DSE_CPU_SCALAR, cpu.detected, cpu.detected};
        enum dse_activations acts[6] = {DSE_ACTIVATIONS_F32, DSE_ACTIVATIONS_F32, DSE_ACTIVATIONS_INT8};
        enum dse_kv_dtype kvs[6] = {DSE_KV_F32, DSE_KV_F32, DSE_KV_F32};
        int n_levels = cpu.detected == DSE_CPU_SCALAR ? 1 : 2;
        if (quantized)
                n_levels = 3;
        for (int t = DSE_KV_BF16; t < DSE_KV_DTYPE_COUNT; t++, n_levels++) {
                levels[n_levels] = cpu.detected;
                acts[n_levels] = DSE_ACTIVATIONS_F32;
                kvs[n_levels] = (enum dse_kv_dtype)t;
        }
        float *logits = malloc((size_t)P * V * sizeof(float));
        struct dse_pool *pool = NULL; /* the fast level also runs the row split over 2 threads */
        ASSERT_OK(dse_pool_new(2, NULL, 0, &pool));
        int failed = 0;
        for (int li = 0; li < n_levels && !failed; li++) {
                setenv("DSV_CPU", dse_cpu_level_to_string(levels[li]), 1);
                setenv("DSV_KV", dse_kv_dtype_to_string(kvs[li]), 1);
                struct dse_session *s = NULL;
                r = dse_session_new(model, P + N_DECODE, li ? pool : NULL, &s, &diag);
                if (r < 0) {
                        fprintf(stderr, "  %s: dse_session_new: %s (%s)\n", name, strerror(-r), diag.msg);
                        failed = 1;
                        break;
                }
                ASSERT_OK(dse_session_set_activations(s, acts[li]));
                int strict = acts[li] == DSE_ACTIVATIONS_F32 && kvs[li] == DSE_KV_F32;
                const struct kv_row *kvr = kvs[li] == DSE_KV_F32 ? NULL : &kv_rows[kvs[li]];
                struct errstats prompt_err = {0}, decode_err = {0};
                r = dse_session_eval(s, prompt, (size_t)P, logits, NULL, &diag);
                if (r < 0) {
                        fprintf(stderr, "  %s: eval: %s (%s)\n", name, strerror(-r), diag.msg);
                        failed = 1;
                }
                compare_rows(&prompt_err, logits, ref_logits, P, V);
                if (strict && prompt_err.max_abs > STRICT_MAX_ABS) {
                        size_t o = (size_t)prompt_err.worst_row * V;
                        fprintf(stderr, "    worst prompt row %d:\n", prompt_err.worst_row);
                        print_first("", logits + o, ref_logits + o, 8);
                }
                /* greedy continuation through the cache */
                int first_diverged = -1;
                if (argmax(logits + (size_t)(P - 1) * V, V) != gen[0])
                        first_diverged = 0;
                for (int j = 0; j < N_DECODE && r >= 0; j++) {
                        r = dse_session_eval(s, &gen[j], 1, NULL, logits, &diag);
                        compare_rows(&decode_err, logits, ref_decode + (size_t)j * V, 1, V);
                        int next = argmax(logits, V), want = argmax(ref_decode + (size_t)j * V, V);
                        if (next != want && first_diverged < 0)
                                first_diverged = j + 1;
                }
                fprintf(stderr,
                        "  %-24s %-6s %-4s kv %-4s prompt: max abs %.3g mean abs %.3g top-1 %d/%d | decode: max abs %.3g mean abs "
                        "%.3g top-1 %d/%d | greedy ids %s\n",
                        name, dse_cpu_level_to_string(levels[li]), dse_activations_to_string(acts[li]),
                        dse_kv_dtype_to_string(kvs[li]), prompt_err.max_abs,
                        prompt_err.sum_abs / (double)prompt_err.n, prompt_err.top1_agree, prompt_err.rows,
                        decode_err.max_abs, decode_err.sum_abs / (double)decode_err.n, decode_err.top1_agree,
                        decode_err.rows, first_diverged < 0 ? "identical" : "DIVERGE");
                if (strict && (prompt_err.max_abs > STRICT_MAX_ABS || decode_err.max_abs > STRICT_MAX_ABS ||
                               prompt_err.top1_agree != P || first_diverged >= 0))
                        failed = 1;
                if (kvr && (prompt_err.sum_abs / (double)prompt_err.n > kvr->mean_abs ||
                            decode_err.sum_abs / (double)decode_err.n > kvr->mean_abs ||
                            prompt_err.max_abs > kvr->max_abs || decode_err.max_abs > kvr->max_abs ||
                            prompt_err.top1_agree < kvr->top1 * P)) {
                        fprintf(stderr, "    kv %s row: mean abs <= %g, max abs <= %g, top-1 >= %g\n",
                                dse_kv_dtype_to_string(kvs[li]), kvr->mean_abs, kvr->max_abs, kvr->top1);
                        failed = 1;
                }
                if (!strict && !kvr && (prompt_err.sum_abs / (double)prompt_err.n > ROW2_MEAN_ABS ||
                                decode_err.sum_abs / (double)decode_err.n > ROW2_MEAN_ABS ||
                                prompt_err.max_abs > ROW2_MAX_ABS || decode_err.max_abs > ROW2_MAX_ABS ||
                                prompt_err.top1_agree < ROW2_TOP1 * P))
                        failed = 1;
                if (r < 0)
                        failed = 1;
                dse_session_free(s);
        }
        unsetenv("DSV_CPU");
        unsetenv("DSV_KV");
        dse_pool_free(pool);
        free(logits);
        free(ref_logits);
        free(ref_decode);
        dse_model_free(model);
        if (failed)
                T_FAIL("%s: outside the tolerance (f32: max abs %g and identical greedy ids; int8: mean abs %g, "
                       "max abs %g, top-1 %g; KV rows above)", name, STRICT_MAX_ABS, ROW2_MEAN_ABS, ROW2_MAX_ABS, ROW2_TOP1);
}

TEST(llama_bf16_linear_rope) { run_fixture("llama-bf16-linear-rope", 0); }
TEST(llama3_rope_gqa) { run_fixture("llama3-rope-gqa", 0); }
TEST(qwen2_bf16_tied) { run_fixture("qwen2-bf16-tied", 0); }
TEST(qwen2_awq_g32) { run_fixture("qwen2-awq-g32", 1); }
TEST(llama_gptq_sym) { run_fixture("llama-gptq-sym", 1); }
TEST(llama_gptq_actorder_asym) { run_fixture("llama-gptq-actorder-asym", 1); }
TEST(deepseek_v2_mla_qlora_yarn) { run_fixture("deepseek-v2-mla-qlora-yarn", 0); }
TEST(deepseek_v2_lite_sharded) { run_fixture("deepseek-v2-lite-sharded", 0); }
TEST(deepseek_v2_group_limited) { run_fixture("deepseek-v2-group-limited", 0); }
TEST(deepseek_v3_noaux_yarn) { run_fixture("deepseek-v3-noaux-yarn", 0); }
TEST(deepseek_v3_fp8_mtp) { run_fixture("deepseek-v3-fp8-mtp", 0); }
