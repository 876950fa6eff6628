/* The paged KV cache and multi-sequence steps on fixtures: paged logits equal the
 * contiguous session's (llama, qwen2, DeepSeek MLA) whatever the chunking and the
 * neighbours in a step; a shared prefix gives the same logits with fewer blocks; an
 * exhausted pool is -ENOSPC with nothing taken; closed sequences leave their prefix
 * cached for the next one. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "dse.h"
#include "t.h"

#include "fixture-models.h"

#define N 40   /* tokens per sequence */
#define BT 16  /* block size */

static void ids_for(int32_t *ids, int n, int vocab, int salt) {
        for (int i = 0; i < n; i++)
                ids[i] = (int32_t)((i * 97 + 3 + salt * 31) % vocab);
}

/* Row-by-row logits of the contiguous session: ref[i] = logits after tokens 0..i. */
static float *session_logits(struct dse_model *m, const int32_t *ids, int n) {
        int V = dse_model_vocab_size(m);
        struct dse_session *s = NULL;
        float *out = malloc((size_t)n * V * sizeof(float));
        if (dse_session_new(m, n, NULL, &s, NULL) < 0 || dse_session_eval(s, ids, (size_t)n, out, NULL, NULL) < 0) {
                free(out);
                out = NULL;
        }
        dse_session_free(s);
        return out;
}

static double max_diff(const float *a, const float *b, int n) {
        double d = 0;
        for (int i = 0; i < n; i++)
                d = fmax(d, fabs((double)a[i] - (double)b[i]));
        return d;
}

/* A fixture converted to quant (int8/int4) in a temporary file, already unlinked. */
static struct dse_model *open_converted(const char *name, const char *quant) {
        char dir[1024], tmp[1024], path[1200];
        snprintf(dir, sizeof dir, "%s/%s", t_fixture("models"), name);
        snprintf(tmp, sizeof tmp, "%s/test-engine-kv.XXXXXX", getenv("DSV_BUILD_DIR") ? getenv("DSV_BUILD_DIR") : "/tmp");
        if (!mkdtemp(tmp))
                return NULL;
        snprintf(path, sizeof path, "%s/model.dse", tmp);
        struct dse_diag diag = {{0}};
        struct dse_model *m = NULL;
        if (dse_model_convert_hf(dir, path, quant, &diag) < 0 || dse_model_open(path, 0, &m, &diag) < 0)
                fprintf(stderr, "  %s as %s: %s\n", name, quant, diag.msg);
        unlink(path);
        rmdir(tmp);
        return m;
}

/* Three sequences advanced together in uneven chunks (one of them a token at a time,
 * like a decode) must each reproduce its session's logits at every chunk end. */
static void paged_equals_session_model_tol(const char *fixture, struct dse_model *m, double tol) {
        ASSERT_TRUE(m);
        int V = dse_model_vocab_size(m);
        int32_t ids[3][N];
        float *ref[3];
        for (int q = 0; q < 3; q++) {
                ids_for(ids[q], N, V, q);
                ref[q] = session_logits(m, ids[q], N);
                ASSERT_TRUE(ref[q]);
        }
        struct dse_diag diag = {{0}};
        struct dse_kv_cache *kv = NULL;
        struct dse_batch *b = NULL;
        struct dse_pool *pool = NULL;
        ASSERT_OK(dse_pool_new(2, NULL, 0, &pool));
        ASSERT_OK(dse_kv_cache_new(m, (size_t)1 << 24, BT, 4, 64, &kv, &diag));
        ASSERT_OK(dse_batch_new(m, kv, pool, &b, &diag));
        int seq[3], done[3] = {0, 0, 0};
        for (int q = 0; q < 3; q++)
                ASSERT_TRUE((seq[q] = dse_kv_seq_open(kv)) >= 0);
        static const int chunks[3][8] = {{7, 9, 1, 1, 22}, {1, 1, 1, 17, 20}, {40}};
        float *logits = malloc((size_t)3 * V * sizeof(float));
        double worst = 0;
        for (int round = 0; round < 5; round++) {
                struct dse_batch_seq bs[3];
                int n = 0, which[3];
                for (int q = 0; q < 3; q++) {
                        int c = chunks[q][round];
                        if (c == 0 || done[q] + c > N)
                                continue;
                        bs[n] = (struct dse_batch_seq){seq[q], ids[q] + done[q], c, logits + (size_t)n * V};
                        which[n++] = q;
                }
                ASSERT_OK(dse_batch_step(b, bs, (size_t)n, &diag));
                for (int i = 0; i < n; i++) {
                        int q = which[i];
                        done[q] += bs[i].n_tokens;
                        ASSERT_EQ(dse_kv_seq_len(kv, seq[q]), done[q]);
                        double d = max_diff(logits + (size_t)i * V, ref[q] + (size_t)(done[q] - 1) * V, V);
                        worst = fmax(worst, d);
                }
        }
        fprintf(stderr, "  %s: max |paged - session| = %g\n", fixture, worst);
        ASSERT_TRUE(worst <= tol); /* tol 0: same kernels, same order, bitwise equal */
        free(logits);
        for (int q = 0; q < 3; q++)
                free(ref[q]);
        dse_batch_free(b);
        dse_kv_cache_free(kv);
        dse_pool_free(pool);
        dse_model_free(m);
}

static void paged_equals_session_model(const char *fixture, struct dse_model *m) {
        paged_equals_session_model_tol(fixture, m, 0.0);
}

static void paged_equals_session(const char *fixture) {
        paged_equals_session_model(fixture, fixture_model_open(fixture));
}

/* Q4/Q8 weights multiply int8 activations (the default): each token's activations are
 * quantized on their own, so the logits still do not depend on the step's other tokens,
 * the chunking or the thread split, bitwise, with the kernels that compute every token
 * alike (DSV_NO_AMX=1: the AMX matmul_xq for 8+ tokens sums the exact block products in
 * another float order, checked below within rounding). */
static void no_amx(int on) {
        if (on)
                setenv("DSV_NO_AMX", "1", 1);
        else
                unsetenv("DSV_NO_AMX");
}

TEST(paged_equals_session_gptq_int8_activations) {
        no_amx(1);
        paged_equals_session("llama-gptq-sym");
        no_amx(0);
}

TEST(paged_equals_session_awq_int8_activations) {
        no_amx(1);
        paged_equals_session("qwen2-awq-g32");
        no_amx(0);
}

/* The MoE experts run grouped over the tokens routed to them. */
TEST(paged_equals_session_deepseek_v2_int8_int8_activations) {
        no_amx(1);
        paged_equals_session_model("deepseek-v2-group-limited as int8", open_converted("deepseek-v2-group-limited", "int8"));
        no_amx(0);
}

TEST(paged_equals_session_deepseek_v3_int4_int8_activations) {
        no_amx(1);
        paged_equals_session_model("deepseek-v3-noaux-yarn as int4", open_converted("deepseek-v3-noaux-yarn", "int4"));
        no_amx(0);
}

/* With every kernel the CPU offers (AMX included where present): dense models stay
 * within float rounding of their session (logits have a standard deviation of ~3). */
TEST(paged_near_session_int8_activations_all_kernels) {
        paged_equals_session_model_tol("llama-gptq-sym", fixture_model_open("llama-gptq-sym"), 1e-3);
        paged_equals_session_model_tol("qwen2-awq-g32", fixture_model_open("qwen2-awq-g32"), 1e-3);
}

TEST(paged_equals_session_llama) {
        paged_equals_session("llama3-rope-gqa");
}

TEST(paged_equals_session_qwen2) {
        paged_equals_session("qwen2-bf16-tied");
}

TEST(paged_equals_session_deepseek_mla) {
        paged_equals_session("deepseek-v2-mla-qlora-yarn");
}

/* B shares A's first 32 tokens: it attaches 2 cached blocks, computes only the rest,
 * gets A-independent logits equal to its own session's, and the pool holds fewer
 * blocks than two private copies would. */
TEST(prefix_sharing) {
        struct dse_model *m = fixture_model_open("llama3-rope-gqa");
        ASSERT_TRUE(m);
        int V = dse_model_vocab_size(m);
        int32_t a[N], bids[N];
        ids_for(a, N, V, 0);
        ids_for(bids, N, V, 0);
        for (int i = 32; i < N; i++)
                bids[i] = (bids[i] + 5) % V;
        float *ref = session_logits(m, bids, N);
        ASSERT_TRUE(ref);
        struct dse_diag diag = {{0}};
        struct dse_kv_cache *kv = NULL;
        struct dse_batch *b = NULL;
        ASSERT_OK(dse_kv_cache_new(m, (size_t)1 << 24, BT, 4, 64, &kv, &diag));
        ASSERT_OK(dse_batch_new(m, kv, NULL, &b, &diag));
        float *last = malloc((size_t)V * sizeof(float));
        int sa = dse_kv_seq_open(kv), sb = dse_kv_seq_open(kv);
        ASSERT_EQ(dse_kv_seq_attach_prefix(kv, sa, a, N), 0); /* empty cache */
        struct dse_batch_seq one = {sa, a, N, last};
        ASSERT_OK(dse_batch_step(b, &one, 1, &diag));
        struct dse_kv_stats st;
        dse_kv_cache_stats(kv, &st);
        ASSERT_EQ(st.n_used, 3); /* 40 tokens in blocks of 16 */

        int cached = dse_kv_seq_attach_prefix(kv, sb, bids, N);
        ASSERT_EQ(cached, 32);
        one = (struct dse_batch_seq){sb, bids + cached, N - cached, last};
        ASSERT_OK(dse_batch_step(b, &one, 1, &diag));
        ASSERT_FLOAT_EQ(max_diff(last, ref + (size_t)(N - 1) * V, V), 0.0);
        dse_kv_cache_stats(kv, &st);
        ASSERT_EQ(st.n_used, 4); /* 3 + B's own last block, not 6 */
        ASSERT_EQ(st.prefix_hit_tokens, 32);
        ASSERT_EQ(st.prefix_query_tokens, 2 * N);

        /* Closing both keeps the full blocks cached: a third sequence reuses them. */
        dse_kv_seq_close(kv, sa);
        dse_kv_seq_close(kv, sb);
        dse_kv_cache_stats(kv, &st);
        ASSERT_EQ(st.n_used, 0);
        ASSERT_EQ(st.n_cached, 2); /* the two full blocks; the partial tails went back to the free list */
        int sc = dse_kv_seq_open(kv);
        ASSERT_EQ(dse_kv_seq_attach_prefix(kv, sc, a, N), 32);
        one = (struct dse_batch_seq){sc, a + 32, N - 32, last};
        ASSERT_OK(dse_batch_step(b, &one, 1, &diag));
        float *ref_a = session_logits(m, a, N);
        ASSERT_FLOAT_EQ(max_diff(last, ref_a + (size_t)(N - 1) * V, V), 0.0);
        free(ref_a);
        free(ref);
        free(last);
        dse_batch_free(b);
        dse_kv_cache_free(kv);
        dse_model_free(m);
}

/* A pool of 3 blocks: a 40-token step fits (3 blocks), a second sequence's step does
 * not: -ENOSPC, nothing taken, the first sequence intact; after closing it, it fits. */
TEST(out_of_blocks_is_enospc) {
        struct dse_model *m = fixture_model_open("llama3-rope-gqa");
        ASSERT_TRUE(m);
        int V = dse_model_vocab_size(m);
        struct dse_diag diag = {{0}};
        struct dse_kv_cache *kv = NULL;
        struct dse_batch *b = NULL;
        ASSERT_ERR(dse_kv_cache_new(m, 10, BT, 2, 64, &kv, &diag), -ENOSPC);
        struct dse_kv_cache *probe = NULL;
        ASSERT_OK(dse_kv_cache_new(m, (size_t)1 << 20, BT, 1, 64, &probe, &diag));
        size_t bb = dse_kv_cache_block_bytes(probe);
        dse_kv_cache_free(probe);
        ASSERT_OK(dse_kv_cache_new(m, 3 * bb + bb / 2, BT, 2, 64, &kv, &diag));
        ASSERT_EQ(dse_kv_cache_n_available(kv), 3);
        ASSERT_OK(dse_batch_new(m, kv, NULL, &b, &diag));
        int32_t x[N], y[N];
        ids_for(x, N, V, 1);
        ids_for(y, N, V, 2);
        float *last = malloc((size_t)V * sizeof(float));
        int s1 = dse_kv_seq_open(kv), s2 = dse_kv_seq_open(kv);
        ASSERT_ERR(dse_kv_seq_open(kv), -EBUSY);
        struct dse_batch_seq one = {s1, x, N, last};
        ASSERT_OK(dse_batch_step(b, &one, 1, &diag));
        struct dse_batch_seq two = {s2, y, 1, last};
        ASSERT_ERR(dse_batch_step(b, &two, 1, &diag), -ENOSPC);
        ASSERT_EQ(dse_kv_seq_len(kv, s2), 0);
        ASSERT_EQ(dse_kv_seq_len(kv, s1), N);
        /* both in one step: refused as a whole */
        struct dse_batch_seq both[2] = {{s1, x, 1, NULL}, {s2, y, 1, NULL}};
        ASSERT_ERR(dse_batch_step(b, both, 2, &diag), -ENOSPC);
        ASSERT_EQ(dse_kv_seq_len(kv, s1), N);
        /* past n_ctx and bad ids are refused before anything runs */
        struct dse_batch_seq big = {s1, x, N, NULL};
        ASSERT_ERR(dse_batch_step(b, &big, 1, &diag), -E2BIG);
        int32_t bad = V;
        struct dse_batch_seq badid = {s1, &bad, 1, NULL};
        ASSERT_ERR(dse_batch_step(b, &badid, 1, &diag), -EINVAL);
        struct dse_batch_seq dup[2] = {{s1, x, 1, NULL}, {s1, x, 1, NULL}};
        ASSERT_ERR(dse_batch_step(b, dup, 2, &diag), -EINVAL);
        dse_kv_seq_close(kv, s1);
        ASSERT_OK(dse_batch_step(b, &two, 1, &diag));
        free(last);
        dse_batch_free(b);
        dse_kv_cache_free(kv);
        dse_model_free(m);
}

/* Resident anonymous memory of this process, bytes (/proc/self/status RssAnon). */
static long rss_anon_bytes(void) {
        FILE *f = fopen("/proc/self/status", "r");
        char line[256];
        long kb = -1;
        while (f && fgets(line, sizeof line, f))
                if (sscanf(line, "RssAnon: %ld kB", &kb) == 1)
                        break;
        if (f)
                fclose(f);
        return kb < 0 ? -1 : kb * 1024;
}

/* dse_kv_cache_prefault on a pool in use: the whole pool becomes resident (RssAnon
 * grows by at least 90% of it: only the few blocks already written were resident) and
 * the sequence's blocks keep their contents (its next logits equal the session's). */
TEST(prefault_makes_pool_resident_keeping_contents) {
        struct dse_model *m = fixture_model_open("llama3-rope-gqa");
        ASSERT_TRUE(m);
        int V = dse_model_vocab_size(m);
        int32_t a[N];
        ids_for(a, N, V, 3);
        float *ref = session_logits(m, a, N);
        ASSERT_TRUE(ref);
        struct dse_diag diag = {{0}};
        struct dse_kv_cache *kv = NULL;
        struct dse_batch *b = NULL;
        const size_t pool = (size_t)64 << 20;
        ASSERT_OK(dse_kv_cache_new(m, pool, BT, 2, 64, &kv, &diag));
        ASSERT_OK(dse_batch_new(m, kv, NULL, &b, &diag));
        float *last = malloc((size_t)V * sizeof(float));
        int s = dse_kv_seq_open(kv);
        struct dse_batch_seq one = {s, a, N - 1, NULL};
        ASSERT_OK(dse_batch_step(b, &one, 1, &diag));
        long before = rss_anon_bytes();
        ASSERT_OK(dse_kv_cache_prefault(kv, &diag));
        long after = rss_anon_bytes();
        struct dse_kv_stats st;
        dse_kv_cache_stats(kv, &st);
        size_t pool_bytes = (size_t)st.n_blocks * dse_kv_cache_block_bytes(kv);
        ASSERT_TRUE(before > 0 && after - before >= (long)(pool_bytes / 10 * 9));
        one = (struct dse_batch_seq){s, a + N - 1, 1, last};
        ASSERT_OK(dse_batch_step(b, &one, 1, &diag));
        ASSERT_FLOAT_EQ(max_diff(last, ref + (size_t)(N - 1) * V, V), 0.0);
        ASSERT_ERR(dse_kv_cache_prefault(NULL, &diag), -EINVAL);
        free(last);
        free(ref);
        dse_batch_free(b);
        dse_kv_cache_free(kv);
        dse_model_free(m);
}
