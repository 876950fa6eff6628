/* DeepSeek MLA: the KV cache holds only the compressed latent (kv_lora_rank +
 * qk_rope_head_dim float32 values per token and layer), and the absorbed attention
 * (kv_b_proj folded into q and applied after the weighted sum) gives the same logits as
 * the naive one (k_nope and v decompressed per head and cached token). Checked on the
 * fixtures with and without q_lora_rank and on the FP8 one. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "model/forward.h"
#include "t.h"

#define N_PROMPT 24
#define N_DECODE 4
/* Both forms accumulate in float32 in a different order: agreement to ~1e-5 of logits
 * with a standard deviation of ~3. */
#define NAIVE_MAX_ABS 1e-4

static struct dse_model *open_fixture(const char *name, struct dse_diag *diag) {
        char dir[1024], native[4096];
        snprintf(dir, sizeof dir, "%s", t_fixture("models"));
        snprintf(dir + strlen(dir), sizeof dir - strlen(dir), "/%s", name);
        if (!getenv("DSV_CACHE_DIR") && getenv("DSV_BUILD_DIR")) {
                char cache[1100];
                snprintf(cache, sizeof cache, "%s/model-cache", getenv("DSV_BUILD_DIR"));
                setenv("DSV_CACHE_DIR", cache, 1);
        }
        struct dse_model *m = NULL;
        if (dse_model_resolve(dir, native, sizeof native, diag) < 0 || dse_model_open(native, 0, &m, diag) < 0)
                return NULL;
        return m;
}

/* Prompt ids spread over the vocabulary, then a few decode steps through the cache. */
static void run(struct dse_session *s, int vocab, float *out /* (N_PROMPT + N_DECODE, vocab) */) {
        int32_t ids[N_PROMPT];
        for (int i = 0; i < N_PROMPT; i++)
                ids[i] = (int32_t)((i * 37 + 11) % vocab);
        dse_session_eval(s, ids, N_PROMPT, out, NULL, NULL);
        for (int j = 0; j < N_DECODE; j++) {
                int32_t next = (int32_t)((j * 53 + 5) % vocab);
                dse_session_eval(s, &next, 1, out + (size_t)(N_PROMPT + j) * vocab, NULL, NULL);
        }
}

static void check_fixture(const char *name, int64_t want_kv_lora_rank, int64_t want_rope, int64_t want_layers) {
        struct dse_diag diag = {{0}};
        struct dse_model *m = open_fixture(name, &diag);
        if (!m)
                T_FAIL("%s: %s", name, diag.msg);
        const struct dse_hparams *hp = dse__model_hparams(m);
        /* the fixture's config.json values, written out here, and the formula */
        ASSERT_EQ(hp->kv_lora_rank, want_kv_lora_rank);
        ASSERT_EQ(hp->qk_rope_head_dim, want_rope);
        ASSERT_EQ(hp->n_layers, want_layers);
        int vocab = dse_model_vocab_size(m);
        struct dse_session *absorbed = NULL, *naive = NULL;
        ASSERT_OK(dse_session_new(m, N_PROMPT + N_DECODE, NULL, &absorbed, &diag));
        ASSERT_OK(dse_session_new(m, N_PROMPT + N_DECODE, NULL, &naive, &diag));
        ASSERT_EQ(dse_session_kv_bytes_per_token(absorbed),
                  want_layers * (want_kv_lora_rank + want_rope) * (int64_t)sizeof(float));
        dse__session_set_mla_naive(naive, 1);

        size_t n = (size_t)(N_PROMPT + N_DECODE) * vocab;
        float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
        run(absorbed, vocab, a);
        run(naive, vocab, b);
        double max_abs = 0, max_val = 0;
        for (size_t i = 0; i < n; i++) {
                double d = fabs((double)a[i] - b[i]);
                max_abs = d > max_abs || isnan(d) ? d : max_abs;
                max_val = fabs(a[i]) > max_val ? fabs(a[i]) : max_val;
        }
        fprintf(stderr, "  %-28s kv %zu bytes/token; absorbed vs naive max abs %.3g (max |logit| %.3g)\n", name,
                dse_session_kv_bytes_per_token(absorbed), max_abs, max_val);
        free(a);
        free(b);
        dse_session_free(absorbed);
        dse_session_free(naive);
        dse_model_free(m);
        ASSERT_TRUE(max_val > 0.1); /* the comparison saw real logits */
        ASSERT_TRUE(max_abs <= NAIVE_MAX_ABS);
}

TEST(mla_qlora_yarn) { check_fixture("deepseek-v2-mla-qlora-yarn", 64, 16, 3); }
TEST(mla_no_qlora) { check_fixture("deepseek-v2-lite-sharded", 48, 16, 3); }
TEST(mla_fp8) { check_fixture("deepseek-v3-fp8-mtp", 128, 32, 3); }
