/* Speculative decoding's engine side: n-gram drafting (longest, most recent match,
 * window, bounds), a verification pass giving every draft position the logits of a
 * one-token decode on every model fixture, and the paged KV rollback after acceptance:
 * the sequence length, the block table (blocks of rejected positions back in the pool)
 * and the prefix table (no block containing a rejected token is ever keyed); a draft
 * cache cut back (dse_kv_seq_rewind) as if it never held the rejected tokens. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dse.h"
#include "t.h"
#include "fixture-models.h"

/* ---- n-gram drafting ---- */

TEST(ngram_longest_most_recent_match) {
        /* suffix "1 2 3": occurs at 0 (followed by 7 8) and at 5 (followed by 9 4 1);
         * the most recent wins. */
        const int32_t t[] = {1, 2, 3, 7, 8, 1, 2, 3, 9, 4, 1, 2, 3};
        int32_t d[8];
        int n = dse_ngram_draft(t, 13, 1, 4, 0, 3, d);
        ASSERT_EQ(n, 3);
        ASSERT_EQ(d[0], 9);
        ASSERT_EQ(d[1], 4);
        ASSERT_EQ(d[2], 1);
        /* A longer match beats a more recent shorter one: "5 6" recurs only at 0,
         * "6" alone also at 4. */
        const int32_t u[] = {5, 6, 10, 11, 6, 12, 5, 6};
        ASSERT_EQ(dse_ngram_draft(u, 8, 1, 4, 0, 2, d), 2);
        ASSERT_EQ(d[0], 10);
        ASSERT_EQ(d[1], 11);
        /* n_min 2 refuses the single-token match. */
        const int32_t v[] = {5, 20, 21, 5};
        ASSERT_EQ(dse_ngram_draft(v, 4, 2, 4, 0, 2, d), 0);
        ASSERT_EQ(dse_ngram_draft(v, 4, 1, 4, 0, 2, d), 2);
        ASSERT_EQ(d[0], 20);
}

TEST(ngram_never_past_the_end_and_window) {
        /* The match right before the suffix has one token after it: the draft stops
         * at the sequence's end. */
        const int32_t t[] = {4, 4, 4};
        int32_t d[8];
        ASSERT_EQ(dse_ngram_draft(t, 3, 1, 2, 0, 8, d), 1);
        ASSERT_EQ(d[0], 4);
        /* A match further back than the window is not seen. */
        const int32_t u[] = {1, 2, 9, 0, 0, 0, 0, 0, 0, 1, 2};
        ASSERT_EQ(dse_ngram_draft(u, 11, 2, 2, 0, 1, d), 1);
        ASSERT_EQ(d[0], 9);
        ASSERT_EQ(dse_ngram_draft(u, 11, 2, 2, 8, 1, d), 0);
        ASSERT_EQ(dse_ngram_draft(u, 11, 2, 2, 11, 1, d), 1);
        ASSERT_EQ(dse_ngram_draft(u, 0, 1, 2, 0, 4, d), 0);
        ASSERT_EQ(dse_ngram_draft(u, 11, 2, 2, 0, 0, d), 0);
}

TEST(ngram_bad_bounds) {
        int32_t t[] = {1, 1}, d[2];
        ASSERT_ERR(dse_ngram_draft(t, 2, 0, 2, 0, 1, d), -EINVAL);
        ASSERT_ERR(dse_ngram_draft(t, 2, 3, 2, 0, 1, d), -EINVAL);
        ASSERT_ERR(dse_ngram_draft(t, 2, 1, 2, -1, 1, d), -EINVAL);
        ASSERT_ERR(dse_ngram_draft(t, 2, 1, 2, 0, -1, d), -EINVAL);
        ASSERT_ERR(dse_ngram_draft(NULL, 2, 1, 2, 0, 1, d), -EINVAL);
}

/* ---- verification and rollback ---- */

static double max_abs_diff(const float *a, const float *b, int n) {
        double d = 0;
        for (int i = 0; i < n; i++)
                d = fmax(d, fabs((double)a[i] - (double)b[i]));
        return d;
}

#define BT 16
#define P 14 /* prompt: the verification crosses the first block boundary */
#define K 5  /* drafts */
#define G 24 /* greedy tokens of the reference decode */

static int argmax(const float *x, int n) {
        int b = 0;
        for (int i = 1; i < n; i++)
                if (x[i] > x[b])
                        b = i;
        return b;
}

struct spec_rig {
        struct dse_model *m;
        struct dse_kv_cache *kv;
        struct dse_batch *b;
        int V;
};

static int spec_rig_init(struct spec_rig *g, struct dse_model *m) {
        memset(g, 0, sizeof *g);
        g->m = m;
        g->V = dse_model_vocab_size(m);
        struct dse_kv_cache *probe;
        int r = dse_kv_cache_new(m, 1 << 20, BT, 1, BT, &probe, NULL);
        if (r < 0)
                return r;
        size_t bb = dse_kv_cache_block_bytes(probe);
        dse_kv_cache_free(probe);
        if ((r = dse_kv_cache_new(m, bb * 16, BT, 4, 128, &g->kv, NULL)) < 0)
                return r;
        return dse_batch_new(m, g->kv, NULL, &g->b, NULL);
}

static void spec_rig_done(struct spec_rig *g) {
        dse_batch_free(g->b);
        dse_kv_cache_free(g->kv);
}

/* Plain greedy decode, one token per step: ids[P..P+G) and each step's logits. */
static int plain_decode(struct spec_rig *g, int32_t *ids, float *logits) {
        int seq = dse_kv_seq_open(g->kv), r;
        struct dse_batch_seq one = {seq, ids, P, logits};
        if ((r = dse_batch_step(g->b, &one, 1, NULL)) < 0)
                return r;
        for (int t = 0; t < G; t++) {
                ids[P + t] = argmax(logits + (size_t)t * g->V, g->V);
                one = (struct dse_batch_seq){seq, ids + P + t, 1, logits + (size_t)(t + 1) * g->V};
                if (t + 1 < G && (r = dse_batch_step(g->b, &one, 1, NULL)) < 0)
                        return r;
        }
        dse_kv_seq_close(g->kv, seq);
        return 0;
}

/* Verification rows equal the plain decode's logits, exactly, for every accepted
 * prefix; after each rollback the sequence continues as the plain one. */
static void verify_equals_decode(const char *fixture) {
        struct dse_model *m = fixture_model_open(fixture);
        ASSERT_TRUE(m);
        struct spec_rig g;
        ASSERT_OK(spec_rig_init(&g, m));
        int V = g.V;
        int32_t ids[P + G];
        for (int i = 0; i < P; i++)
                ids[i] = (int32_t)((i * 37 + 5) % V);
        float *ref = malloc((size_t)(G + 1) * V * sizeof(float)), *out = malloc((size_t)(K + 1) * V * sizeof(float));
        ASSERT_TRUE(ref && out);
        ASSERT_OK(plain_decode(&g, ids, ref));
        /* For each number of correct drafts a (0..K): drafts = the greedy continuation
         * with draft a (if any) wrong; accept a, then check the next step. */
        double worst = 0;
        for (int a = 0; a <= K; a++) {
                int seq = dse_kv_seq_open(g.kv);
                ASSERT_TRUE(seq >= 0);
                struct dse_batch_seq one = {seq, ids, P, out};
                ASSERT_OK(dse_batch_step(g.b, &one, 1, NULL));
                int32_t v[K + 1];
                memcpy(v, ids + P, sizeof v); /* the pending token, then the drafts */
                if (a < K)
                        v[1 + a] = (v[1 + a] + 1) % V;
                one = (struct dse_batch_seq){seq, v, K + 1, out};
                int32_t nd = K;
                ASSERT_OK(dse_batch_verify(g.b, &one, &nd, 1, NULL));
                ASSERT_EQ(dse_kv_seq_len(g.kv, seq), P + 1);
                for (int i = 0; i <= a && i <= K; i++)
                        for (int j = 0; j < V; j++) {
                                double d = fabs((double)out[(size_t)i * V + j] - (double)ref[(size_t)(1 + i) * V + j]);
                                worst = d > worst ? d : worst;
                        }
                ASSERT_OK(dse_kv_seq_accept(g.kv, seq, v + 1, (size_t)a));
                int len = P + 1 + a;
                ASSERT_EQ(dse_kv_seq_len(g.kv, seq), len);
                struct dse_kv_stats st;
                dse_kv_cache_stats(g.kv, &st);
                ASSERT_EQ(st.n_used, (len + BT - 1) / BT); /* rejected-only blocks are back */
                /* The next plain step after the rollback: the token after the accepted
                 * ones, and its logits equal the reference's. */
                if (len < P + G) {
                        one = (struct dse_batch_seq){seq, ids + len, 1, out};
                        ASSERT_OK(dse_batch_step(g.b, &one, 1, NULL));
                        for (int j = 0; j < V; j++) {
                                double d = fabs((double)out[j] - (double)ref[(size_t)(len - P + 1) * V + j]);
                                worst = d > worst ? d : worst;
                        }
                }
                dse_kv_seq_close(g.kv, seq);
        }
        fprintf(stderr, "  %s: max |verify - decode| = %g\n", fixture, worst);
        ASSERT_TRUE(worst == 0);
        free(ref);
        free(out);
        spec_rig_done(&g);
        dse_model_free(m);
}

TEST(verify_equals_decode_every_fixture) {
        for (size_t i = 0; i < N_FIXTURE_MODELS; i++) {
                verify_equals_decode(fixture_models[i]);
                if (t_failed_current)
                        return;
        }
}

/* Prefix keys after a rollback: only blocks whose every position was accepted are
 * offered to other sequences; the ids of rejected drafts never match. */
TEST(rollback_keeps_prefix_table_to_accepted_tokens) {
        struct dse_model *m = fixture_model_open("llama3-rope-gqa");
        ASSERT_TRUE(m);
        struct spec_rig g;
        ASSERT_OK(spec_rig_init(&g, m));
        int V = g.V;
        float *out = malloc((size_t)(K + 1) * V * sizeof(float));
        int32_t ids[64], wrong[64];
        for (int i = 0; i < 64; i++)
                ids[i] = wrong[i] = (int32_t)((i * 53 + 11) % V);
        /* Case 1: prompt 10, drafts at 11..15 fill block 0, 2 accepted: len 13, block 0
         * not full, nothing keyed. */
        int s1 = dse_kv_seq_open(g.kv);
        struct dse_batch_seq one = {s1, ids, 10, NULL};
        ASSERT_OK(dse_batch_step(g.b, &one, 1, NULL));
        int32_t nd = 5;
        one = (struct dse_batch_seq){s1, ids + 10, 6, out};
        ASSERT_OK(dse_batch_verify(g.b, &one, &nd, 1, NULL));
        ASSERT_ERR(dse_kv_seq_accept(g.kv, s1, ids + 11, 6), -EINVAL); /* more than drafted */
        ASSERT_OK(dse_kv_seq_accept(g.kv, s1, ids + 11, 2));
        ASSERT_EQ(dse_kv_seq_len(g.kv, s1), 13);
        ASSERT_ERR(dse_kv_seq_accept(g.kv, s1, ids + 13, 1), -EINVAL); /* drafts already settled */
        dse_kv_seq_close(g.kv, s1);
        int s2 = dse_kv_seq_open(g.kv);
        ASSERT_EQ(dse_kv_seq_attach_prefix(g.kv, s2, ids, 40), 0);
        dse_kv_seq_close(g.kv, s2);

        /* Case 2: prompt 14, the pending token at 14, drafts at 15..19 cross into block
         * 1; 1 accepted: block 0 (0..15) holds only accepted tokens and is keyed,
         * block 1 held only rejected positions and went back to the pool. */
        for (int i = 16; i < 20; i++)
                wrong[i] = (ids[i] + 1) % V;
        s1 = dse_kv_seq_open(g.kv);
        one = (struct dse_batch_seq){s1, ids, 14, NULL};
        ASSERT_OK(dse_batch_step(g.b, &one, 1, NULL));
        one = (struct dse_batch_seq){s1, wrong + 14, 6, out};
        ASSERT_OK(dse_batch_verify(g.b, &one, &nd, 1, NULL));
        struct dse_kv_stats st;
        dse_kv_cache_stats(g.kv, &st);
        ASSERT_EQ(st.n_used, 2);
        ASSERT_OK(dse_kv_seq_accept(g.kv, s1, wrong + 15, 1));
        ASSERT_EQ(dse_kv_seq_len(g.kv, s1), 16);
        dse_kv_cache_stats(g.kv, &st);
        ASSERT_EQ(st.n_used, 1);
        /* Continue with the true tokens 16..35 in plain steps: block 1 is recomputed. */
        one = (struct dse_batch_seq){s1, ids + 16, 20, NULL};
        ASSERT_OK(dse_batch_step(g.b, &one, 1, NULL));
        dse_kv_seq_close(g.kv, s1);
        /* The true prefix hits both full blocks; the rejected ids hit only block 0. */
        s2 = dse_kv_seq_open(g.kv);
        ASSERT_EQ(dse_kv_seq_attach_prefix(g.kv, s2, ids, 40), 32);
        dse_kv_seq_close(g.kv, s2);
        s2 = dse_kv_seq_open(g.kv);
        ASSERT_EQ(dse_kv_seq_attach_prefix(g.kv, s2, wrong, 40), 16);
        dse_kv_seq_close(g.kv, s2);

        /* A verification whose drafts are all rejected leaves the sequence as a plain
         * one-token step would. */
        s1 = dse_kv_seq_open(g.kv);
        one = (struct dse_batch_seq){s1, ids, 3, NULL};
        ASSERT_OK(dse_batch_step(g.b, &one, 1, NULL));
        nd = 2;
        one = (struct dse_batch_seq){s1, ids + 3, 3, out};
        ASSERT_OK(dse_batch_verify(g.b, &one, &nd, 1, NULL));
        ASSERT_OK(dse_kv_seq_accept(g.kv, s1, NULL, 0));
        ASSERT_EQ(dse_kv_seq_len(g.kv, s1), 4);
        nd = 3; /* n_draft must leave one token that is not a draft */
        one = (struct dse_batch_seq){s1, ids + 4, 3, out};
        ASSERT_ERR(dse_batch_verify(g.b, &one, &nd, 1, NULL), -EINVAL);
        dse_kv_seq_close(g.kv, s1);
        free(out);
        spec_rig_done(&g);
        dse_model_free(m);
}

/* A draft model's cache cut back after its chain was rejected (dse_kv_seq_rewind):
 * evaluating the true tokens from where it stops gives the logits of a sequence that
 * never held the wrong ones, exactly; the prefix table names only what the sequence
 * holds; a block another sequence shares is never written, the cut then falls back to
 * the block before it; blocks go back to the pool. */
TEST(rewind_equals_never_drafted) {
        struct dse_model *m = fixture_model_open("llama3-rope-gqa");
        ASSERT_TRUE(m);
        struct spec_rig g;
        ASSERT_OK(spec_rig_init(&g, m));
        int V = g.V;
        float *want = malloc((size_t)V * sizeof(float)), *got = malloc((size_t)V * sizeof(float));
        ASSERT_TRUE(want && got);
        int32_t ids[64], wrong[64];
        for (int i = 0; i < 64; i++)
                ids[i] = wrong[i] = (int32_t)((i * 53 + 11) % V);
        for (int i = 20; i < 40; i++)
                wrong[i] = (ids[i] + 7) % V;
        /* the reference: ids[0..40) in one step */
        int s0 = dse_kv_seq_open(g.kv);
        struct dse_batch_seq one = {s0, ids, 40, want};
        ASSERT_OK(dse_batch_step(g.b, &one, 1, NULL));
        dse_kv_seq_close(g.kv, s0);
        /* a sequence that went wrong at 20, through block 1 into block 2 */
        int s1 = dse_kv_seq_open(g.kv);
        one = (struct dse_batch_seq){s1, wrong, 37, NULL};
        ASSERT_OK(dse_batch_step(g.b, &one, 1, NULL));
        ASSERT_EQ(dse_kv_seq_rewind(g.kv, s1, ids, 40), 20);
        ASSERT_EQ(dse_kv_seq_len(g.kv, s1), 20);
        struct dse_kv_stats st;
        dse_kv_cache_stats(g.kv, &st);
        ASSERT_EQ(st.n_used, 2); /* block 2 went back */
        /* block 1 (16..31) held wrong ids: it left the prefix table */
        int s2 = dse_kv_seq_open(g.kv);
        ASSERT_EQ(dse_kv_seq_attach_prefix(g.kv, s2, wrong, 40), 16);
        dse_kv_seq_close(g.kv, s2);
        one = (struct dse_batch_seq){s1, ids + 20, 20, got};
        ASSERT_OK(dse_batch_step(g.b, &one, 1, NULL));
        ASSERT_FLOAT_EQ(max_abs_diff(got, want, V), 0.0);
        ASSERT_EQ(dse_kv_seq_rewind(g.kv, s1, ids, 40), 40); /* equal ids keep everything */
        /* Two sequences share blocks 0 and 1 (32 cached positions): a cut inside block
         * 1 keeps block 0 only, the shared block stays as it was for the other. */
        int s3 = dse_kv_seq_open(g.kv);
        ASSERT_EQ(dse_kv_seq_attach_prefix(g.kv, s3, ids, 40), 32);
        s2 = dse_kv_seq_open(g.kv);
        ASSERT_EQ(dse_kv_seq_attach_prefix(g.kv, s2, ids, 40), 32);
        ASSERT_EQ(dse_kv_seq_rewind(g.kv, s2, wrong, 40), 16);
        one = (struct dse_batch_seq){s2, wrong + 16, 24, got};
        ASSERT_OK(dse_batch_step(g.b, &one, 1, NULL));
        s0 = dse_kv_seq_open(g.kv);
        one = (struct dse_batch_seq){s0, ids, 41, want};
        ASSERT_OK(dse_batch_step(g.b, &one, 1, NULL));
        dse_kv_seq_close(g.kv, s0);
        one = (struct dse_batch_seq){s3, ids + 32, 9, got};
        ASSERT_OK(dse_batch_step(g.b, &one, 1, NULL));
        ASSERT_FLOAT_EQ(max_abs_diff(got, want, V), 0.0);
        dse_kv_seq_close(g.kv, s3);
        ASSERT_EQ(dse_kv_seq_rewind(g.kv, s1, NULL, 0), 0); /* no ids keep nothing */
        ASSERT_EQ(dse_kv_seq_len(g.kv, s1), 0);
        ASSERT_ERR(dse_kv_seq_rewind(g.kv, 99, ids, 4), -EINVAL);
        dse_kv_seq_close(g.kv, s1);
        dse_kv_seq_close(g.kv, s2);
        dse_kv_cache_stats(g.kv, &st);
        ASSERT_EQ(st.n_used, 0);
        free(want);
        free(got);
        spec_rig_done(&g);
        dse_model_free(m);
}
