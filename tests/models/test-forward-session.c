/* The session API's contract on real fixtures: argument checks, context overflow, token
 * range, reset, chunked evaluation through the KV cache, last-row-only output, thread
 * counts that do not divide the rows, and sessions on several threads sharing one
 * model's weights. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "dse.h"
#include "t.h"

#include "fixture-models.h"

#define N 12

static void ids_for(int32_t *ids, int vocab) {
        for (int i = 0; i < N; i++)
                ids[i] = (int32_t)((i * 97 + 3) % vocab);
}

TEST(arguments_and_limits) {
        struct dse_model *m = fixture_model_open("qwen2-bf16-tied");
        ASSERT_TRUE(m);
        struct dse_diag diag = {{0}};
        struct dse_session *s = NULL;
        int V = dse_model_vocab_size(m);
        ASSERT_ERR(dse_session_new(NULL, 8, NULL, &s, NULL), -EINVAL);
        ASSERT_ERR(dse_session_new(m, 0, NULL, &s, NULL), -EINVAL);
        ASSERT_ERR(dse_model_vocab_size(NULL), -EINVAL);
        ASSERT_OK(dse_session_new(m, 4, NULL, &s, &diag));
        ASSERT_EQ(dse_session_n_ctx(s), 4);
        int32_t ids[5] = {1, 2, 3, 4, 5}, bad[2] = {1, V};
        float *last = malloc((size_t)V * sizeof(float));
        ASSERT_ERR(dse_session_eval(s, ids, 5, NULL, last, &diag), -E2BIG);
        ASSERT_TRUE(strstr(diag.msg, "context") != NULL);
        ASSERT_ERR(dse_session_eval(s, bad, 2, NULL, last, &diag), -EINVAL);
        ASSERT_EQ(dse_session_n_past(s), 0); /* nothing evaluated on error */
        ASSERT_OK(dse_session_eval(s, ids, 3, NULL, last, &diag));
        ASSERT_EQ(dse_session_n_past(s), 3);
        ASSERT_ERR(dse_session_eval(s, ids, 2, NULL, last, &diag), -E2BIG);
        ASSERT_OK(dse_session_eval(s, ids, 1, NULL, NULL, &diag));
        ASSERT_EQ(dse_session_n_past(s), 4);
        dse_session_reset(s);
        ASSERT_EQ(dse_session_n_past(s), 0);
        free(last);
        dse_session_free(s);
        dse_session_free(NULL);
        dse_model_free(m);
}

/* One eval over N tokens, the same in chunks of 5+1+6 after a reset, and a fresh session
 * with a 3-thread pool must give bitwise the same rows: tokens go one at a time in the
 * same order, and every output row's sum is computed by exactly one thread. */
static void chunked_equals_whole(const char *fixture) {
        struct dse_model *m = fixture_model_open(fixture);
        ASSERT_TRUE(m);
        int V = dse_model_vocab_size(m);
        int32_t ids[N];
        ids_for(ids, V);
        struct dse_diag diag = {{0}};
        struct dse_session *s = NULL, *t = NULL;
        struct dse_pool *pool = NULL;
        ASSERT_OK(dse_pool_new(3, NULL, 0, &pool));
        float *whole = malloc((size_t)N * V * sizeof(float)), *parts = malloc((size_t)N * V * sizeof(float));
        float *last = malloc((size_t)V * sizeof(float)), *threaded = malloc((size_t)N * V * sizeof(float));
        ASSERT_OK(dse_session_new(m, N, NULL, &s, &diag));
        ASSERT_OK(dse_session_eval(s, ids, N, whole, last, &diag));
        ASSERT_TRUE(memcmp(last, whole + (size_t)(N - 1) * V, (size_t)V * sizeof(float)) == 0);
        dse_session_reset(s);
        ASSERT_OK(dse_session_eval(s, ids, 5, parts, NULL, &diag));
        ASSERT_OK(dse_session_eval(s, ids + 5, 1, parts + (size_t)5 * V, NULL, &diag));
        ASSERT_OK(dse_session_eval(s, ids + 6, N - 6, NULL, last, &diag)); /* last row only */
        ASSERT_TRUE(memcmp(parts, whole, (size_t)6 * V * sizeof(float)) == 0);
        ASSERT_TRUE(memcmp(last, whole + (size_t)(N - 1) * V, (size_t)V * sizeof(float)) == 0);
        ASSERT_OK(dse_session_new(m, N, pool, &t, &diag));
        ASSERT_OK(dse_session_eval(t, ids, N, threaded, NULL, &diag));
        ASSERT_TRUE(memcmp(threaded, whole, (size_t)N * V * sizeof(float)) == 0);
        float m0 = 0;
        for (int i = 0; i < V; i++)
                m0 = fabsf(whole[i]) > m0 ? fabsf(whole[i]) : m0;
        ASSERT_TRUE(m0 > 0.1f); /* real logits were compared */
        free(whole);
        free(parts);
        free(last);
        free(threaded);
        dse_session_free(s);
        dse_session_free(t);
        dse_pool_free(pool);
        dse_model_free(m);
}

TEST(chunked_reset_threads_llama) { chunked_equals_whole("llama-gptq-actorder-asym"); }
TEST(chunked_reset_threads_deepseek) { chunked_equals_whole("deepseek-v3-noaux-yarn"); }

struct concurrent_eval {
        struct dse_session *s;
        const int32_t *ids;
        float *out; /* (N, vocab) */
        int r;
};

static void *eval_thread(void *arg) {
        struct concurrent_eval *c = arg;
        for (int rep = 0; rep < 3 && c->r >= 0; rep++) {
                dse_session_reset(c->s);
                c->r = dse_session_eval(c->s, c->ids, N, c->out, NULL, NULL);
        }
        return NULL;
}

/* The weights are bound once, when the model is opened, and every session reads them:
 * sessions created on several threads and evaluating at the same time must give the
 * rows one session alone gives. */
static void concurrent_sessions_share_model(const char *fixture) {
        enum { N_THREADS = 3 };
        struct dse_model *m = fixture_model_open(fixture);
        ASSERT_TRUE(m);
        int V = dse_model_vocab_size(m);
        int32_t ids[N];
        ids_for(ids, V);
        struct dse_diag diag = {{0}};
        struct dse_session *alone = NULL;
        float *want = malloc((size_t)N * V * sizeof(float));
        ASSERT_OK(dse_session_new(m, N, NULL, &alone, &diag));
        ASSERT_OK(dse_session_eval(alone, ids, N, want, NULL, &diag));
        struct concurrent_eval c[N_THREADS];
        pthread_t th[N_THREADS];
        for (int i = 0; i < N_THREADS; i++) {
                c[i] = (struct concurrent_eval){.ids = ids, .out = malloc((size_t)N * V * sizeof(float))};
                ASSERT_OK(dse_session_new(m, N, NULL, &c[i].s, &diag));
                ASSERT_EQ(pthread_create(&th[i], NULL, eval_thread, &c[i]), 0);
        }
        for (int i = 0; i < N_THREADS; i++) {
                ASSERT_EQ(pthread_join(th[i], NULL), 0);
                ASSERT_OK(c[i].r);
                ASSERT_TRUE(memcmp(c[i].out, want, (size_t)N * V * sizeof(float)) == 0);
                free(c[i].out);
                dse_session_free(c[i].s);
        }
        free(want);
        dse_session_free(alone);
        dse_model_free(m);
}

TEST(concurrent_sessions_llama) { concurrent_sessions_share_model("qwen2-awq-g32"); }
TEST(concurrent_sessions_deepseek) { concurrent_sessions_share_model("deepseek-v2-group-limited"); }

TEST(kv_bytes_per_token_llama) {
        struct dse_model *m = fixture_model_open("llama-bf16-linear-rope");
        ASSERT_TRUE(m);
        struct dse_session *s = NULL;
        ASSERT_OK(dse_session_new(m, 8, NULL, &s, NULL));
        /* config.json: 3 layers, 2 kv heads, head_dim 128/8 = 16; K and V in float32 */
        size_t want = (size_t)2 * 3 * 2 * 16 * sizeof(float);
        ASSERT_EQ(dse_session_kv_bytes_per_token(s), want);
        dse_session_free(s);
        dse_model_free(m);
}
