/* Long-context attention (engine/src/attend.c): a query over more than the split's
 * positions is computed in chunks on the threads and merged. Its twin is the short form
 * (dse__attend, split off): on fixtures of both attention kinds (GQA llama/qwen2, MLA),
 * prompts well past the split at awkward chunk sizes (16, 17, 40: last chunks of 1..39
 * positions) give the short form's logits within float32 rounding; and the split form's
 * logits do not depend on how the tokens were cut into calls nor on the thread count
 * (bitwise), which the batch scheduler relies on. Float32 activations, so that a last-bit
 * difference cannot move an int8 activation's rounding. Runs over the cache type DSV_KV
 * says (ctest runs it over f32 and int8). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "dse_internal.h"
#include "model/forward.h"
#include "fixture-model.h"
#include "t.h"

#define N_PROMPT 100
#define N_DECODE 6
/* Chunked and whole softmax differ only in float32 summation order: over an f32 cache
 * measured max abs differences up to ~8e-6 on logits of standard deviation ~3, >10x
 * margin. Over a quantized cache a last-bit difference in a layer's output can move one
 * stored element by a quantization step in the next: measured up to 2.8e-3 (int8). */
#define SPLIT_MAX_ABS 1e-4
#define SPLIT_MAX_ABS_QUANTIZED 1e-2

/* The prompt in calls of `cut` tokens (every logits row kept), then decode steps. */
static void run(struct dse_session *s, int vocab, int cut, float *out /* (N_PROMPT + N_DECODE, vocab) */) {
        int32_t ids[N_PROMPT];
        for (int i = 0; i < N_PROMPT; i++)
                ids[i] = (int32_t)((i * 37 + 11) % vocab);
        for (int i = 0; i < N_PROMPT; i += cut) {
                int n = N_PROMPT - i < cut ? N_PROMPT - i : cut;
                ASSERT_OK(dse_session_eval(s, ids + i, (size_t)n, out + (size_t)i * vocab, NULL, NULL));
        }
        for (int j = 0; j < N_DECODE; j++) {
                int32_t next = (int32_t)((j * 53 + 5) % vocab);
                ASSERT_OK(dse_session_eval(s, &next, 1, NULL, out + (size_t)(N_PROMPT + j) * vocab, NULL));
        }
}

static void check_fixture(const char *name) {
        struct dse_diag diag = {{0}};
        struct dse_model *m = open_fixture(name, &diag);
        if (!m)
                T_FAIL("%s: %s", name, diag.msg);
        int vocab = dse_model_vocab_size(m), n_ctx = N_PROMPT + N_DECODE;
        size_t n = (size_t)n_ctx * vocab;
        float *want = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float)), *again = malloc(n * sizeof(float));
        ASSERT_TRUE(want && got && again);
        struct dse_pool *pool = NULL;
        ASSERT_OK(dse_pool_new(2, NULL, 0, &pool));
        struct dse_session *whole = NULL;
        ASSERT_OK(dse_session_new(m, n_ctx, pool, &whole, &diag));
        ASSERT_OK(dse__session_set_attn_split(whole, 0));
        ASSERT_OK(dse_session_set_activations(whole, DSE_ACTIVATIONS_F32));
        run(whole, vocab, N_PROMPT, want);
        static const int splits[] = {16, 17, 40};
        for (size_t k = 0; k < sizeof splits / sizeof splits[0]; k++) {
                struct dse_session *a = NULL, *b = NULL;
                ASSERT_OK(dse_session_new(m, n_ctx, pool, &a, &diag));
                ASSERT_OK(dse_session_new(m, n_ctx, NULL, &b, &diag));
                ASSERT_OK(dse__session_set_attn_split(a, splits[k]));
                ASSERT_OK(dse__session_set_attn_split(b, splits[k]));
                ASSERT_OK(dse_session_set_activations(a, DSE_ACTIVATIONS_F32));
                ASSERT_OK(dse_session_set_activations(b, DSE_ACTIVATIONS_F32));
                run(a, vocab, N_PROMPT, got);
                run(b, vocab, 7, again); /* one thread, the prompt in calls of 7 */
                double max_abs = 0, max_val = 0;
                for (size_t i = 0; i < n; i++) {
                        double d = fabs((double)got[i] - want[i]);
                        max_abs = d > max_abs || isnan(d) ? d : max_abs;
                        max_val = fabs(want[i]) > max_val ? fabs(want[i]) : max_val;
                }
                fprintf(stderr, "  %-28s kv %-4s split %2d: max abs vs whole %.3g (max |logit| %.3g)\n", name,
                        getenv("DSV_KV") ? getenv("DSV_KV") : "f32", splits[k], max_abs, max_val);
                const char *kv = getenv("DSV_KV");
                ASSERT_TRUE(max_abs <= (!kv || !*kv || !strcmp(kv, "f32") ? SPLIT_MAX_ABS : SPLIT_MAX_ABS_QUANTIZED));
                ASSERT_TRUE(memcmp(got, again, n * sizeof(float)) == 0);
                dse_session_free(a);
                dse_session_free(b);
        }
        dse_session_free(whole);
        dse_pool_free(pool);
        free(want);
        free(got);
        free(again);
        dse_model_free(m);
}

TEST(split_gqa_llama3) { check_fixture("llama3-rope-gqa"); }
TEST(split_gqa_qwen2_bias) { check_fixture("qwen2-bf16-tied"); }
TEST(split_mla_qlora) { check_fixture("deepseek-v2-mla-qlora-yarn"); }
TEST(split_mla_no_qlora) { check_fixture("deepseek-v2-lite-sharded"); }

/* The split's bounds: 16 .. DSE__ATTN_SPLIT positions, or 0 (never). */
TEST(split_setter_rejects_bad_sizes) {
        struct dse_diag diag = {{0}};
        struct dse_model *m = open_fixture("llama3-rope-gqa", &diag);
        if (!m)
                T_FAIL("llama3-rope-gqa: %s", diag.msg);
        struct dse_session *s = NULL;
        ASSERT_OK(dse_session_new(m, 64, NULL, &s, &diag));
        ASSERT_ERR(dse__session_set_attn_split(s, 15), -EINVAL);
        ASSERT_ERR(dse__session_set_attn_split(s, DSE__ATTN_SPLIT + 1), -EINVAL);
        ASSERT_ERR(dse__session_set_attn_split(s, -1), -EINVAL);
        ASSERT_OK(dse__session_set_attn_split(s, DSE__ATTN_SPLIT_MIN));
        ASSERT_OK(dse__session_set_attn_split(s, 0));
        dse_session_free(s);
        dse_model_free(m);
}
