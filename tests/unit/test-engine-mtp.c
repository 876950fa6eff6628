/* DeepSeek-V3 MTP drafting on the bundled default model (models/default, one MTP
 * module): the converter keeps the module; its logits over the reference prompt and
 * greedy continuation equal the training framework's float64 reference
 * (ref/mtp_logits.f32); a batch with MTP enabled drafts, at every step, the argmax of
 * the reference row for its last position, through prefill in chunks, one-token steps
 * and verifications whose drafts were rejected and rolled back, in a batch of several
 * sequences; rows left waiting through plain steps are the rows written at every step,
 * and full blocks carry them to a sequence attaching them; bad calls are refused; a
 * model without a module refuses MTP by name. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dse.h"
#include "t.h"
#include "fixture-models.h"

#define V 4000
#define N_PROMPT 64
#define N_GEN 16
#define N_ROWS (N_PROMPT + N_GEN - 1)

/* Exact path (DSV_CPU=scalar DSV_ACT=f32, set before any test) against float64: the fixtures'
 * 1e-3 for fp32 activations (shared/fixtures/models/README.md). */
#define TOL 1e-3f
/* A reference row whose top two logits are closer than this may flip its argmax in
 * float32; the draft checks skip such rows. */
#define MIN_MARGIN 2e-3f

static struct dse_model *model;
static int32_t ids[N_PROMPT + N_GEN];
static float *ref;

static int read_ids(const char *path, int32_t *out, int n) {
        FILE *f = fopen(path, "r");
        if (!f)
                return -1;
        int c, k = 0, v = 0, in = 0;
        while ((c = fgetc(f)) != EOF) {
                if (c >= '0' && c <= '9') {
                        v = v * 10 + (c - '0');
                        in = 1;
                } else if (in) {
                        if (k < n)
                                out[k] = v;
                        k++;
                        v = in = 0;
                }
        }
        fclose(f);
        return k == n ? 0 : -1;
}

static int open_default(void) {
        if (model)
                return 0;
        if (!(model = default_model_open()))
                return -1;
        const char *src = getenv("DSV_SOURCE_DIR") ? getenv("DSV_SOURCE_DIR") : "..";
        char path[1200];
        snprintf(path, sizeof path, "%s/models/default/ref/prompt_ids.json", src);
        if (read_ids(path, ids, N_PROMPT) < 0)
                return -1;
        snprintf(path, sizeof path, "%s/models/default/ref/generated_ids.json", src);
        if (read_ids(path, ids + N_PROMPT, N_GEN) < 0)
                return -1;
        snprintf(path, sizeof path, "%s/models/default/ref/mtp_logits.f32", src);
        FILE *f = fopen(path, "rb");
        ref = malloc((size_t)N_ROWS * V * sizeof(float));
        if (!f || !ref || fread(ref, sizeof(float), (size_t)N_ROWS * V, f) != (size_t)N_ROWS * V) {
                if (f)
                        fclose(f);
                return -1;
        }
        fclose(f);
        return 0;
}

static int32_t argmax(const float *x) {
        int32_t b = 0;
        for (int32_t i = 1; i < V; i++)
                if (x[i] > x[b])
                        b = i;
        return b;
}

/* Whether reference row i has a clear argmax. */
static int clear_row(int i) {
        const float *x = ref + (size_t)i * V;
        int32_t b = argmax(x);
        float second = -INFINITY;
        for (int32_t j = 0; j < V; j++)
                if (j != b && x[j] > second)
                        second = x[j];
        return x[b] - second >= MIN_MARGIN;
}

TEST(converter_keeps_the_module) {
        ASSERT_EQ(open_default(), 0);
        ASSERT_EQ(dse_model_n_mtp_layers(model), 1);
        ASSERT_EQ(dse_model_n_mtp_layers(NULL), -EINVAL);
}

TEST(mtp_logits_match_the_reference) {
        ASSERT_EQ(open_default(), 0);
        struct dse_session *s;
        ASSERT_EQ(dse_session_new(model, 256, NULL, &s, NULL), 0);
        float *got = malloc((size_t)N_ROWS * V * sizeof(float));
        ASSERT_TRUE(got);
        ASSERT_EQ(dse_session_eval_mtp(s, ids, N_PROMPT + N_GEN, got, NULL), 0);
        double worst = 0;
        int agree = 0;
        for (size_t i = 0; i < (size_t)N_ROWS * V; i++) {
                double d = fabs((double)got[i] - (double)ref[i]);
                worst = d > worst ? d : worst;
        }
        for (int i = 0; i < N_ROWS; i++)
                agree += argmax(got + (size_t)i * V) == argmax(ref + (size_t)i * V);
        printf("  MTP logits: max abs diff %.2e over %d rows, argmax agrees on %d\n", worst, N_ROWS, agree);
        ASSERT_TRUE(worst <= TOL);
        /* the session advanced like dse_session_eval */
        ASSERT_EQ(dse_session_n_past(s), N_PROMPT + N_GEN);
        /* bad calls */
        struct dse_diag diag = {{0}};
        ASSERT_EQ(dse_session_eval_mtp(s, ids, 1, got, &diag), -EINVAL);
        int32_t bad[2] = {1, V};
        dse_session_reset(s);
        ASSERT_EQ(dse_session_eval_mtp(s, bad, 2, got, &diag), -EINVAL);
        free(got);
        dse_session_free(s);
}

/* A batch's first draft after each step is the argmax of the reference row of the
 * sequence's last position (the hidden state there and the token just sampled). Eight
 * sequences over the same text, each advancing its own way: prefill in chunks of
 * `chunk`, then one token per step, with `wrong` rejected drafts verified (and rolled
 * back) on the way when wrong > 0, or accepting the right drafts when wrong < 0. */
TEST(batch_drafts_follow_the_reference) {
        ASSERT_EQ(open_default(), 0);
        struct dse_pool *pool;
        ASSERT_EQ(dse_pool_new(2, NULL, 0, &pool), 0);
        struct dse_kv_cache *kv;
        struct dse_batch *b;
        ASSERT_EQ(dse_kv_cache_new(model, 32u << 20, 16, 8, 256, &kv, NULL), 0);
        ASSERT_EQ(dse_batch_new(model, kv, pool, &b, NULL), 0);
        int32_t d[DSE_MTP_MAX_DRAFT];
        struct dse_diag diag = {{0}};
        ASSERT_EQ(dse_batch_mtp_draft(b, 0, 1, 1, d, &diag), -EINVAL); /* not enabled */
        ASSERT_EQ(dse_batch_enable_mtp(b, NULL), 0);
        ASSERT_EQ(dse_batch_enable_mtp(b, NULL), 0);

        enum { NS = 8 };
        const int chunks[NS] = {64, 17, 5, 64, 1, 33, 64, 20};
        const int wrongs[NS] = {0, 0, 0, 2, 0, 3, -1, -2};
        int seq[NS], len[NS], checked = 0, mismatched = 0;
        for (int k = 0; k < NS; k++) {
                seq[k] = dse_kv_seq_open(kv);
                ASSERT_TRUE(seq[k] >= 0);
                len[k] = 0;
        }
        ASSERT_EQ(dse_batch_mtp_draft(b, seq[0], 1, 1, d, NULL), 0); /* nothing evaluated yet */
        ASSERT_EQ(dse_batch_mtp_draft(b, seq[0], 1, DSE_MTP_MAX_DRAFT + 1, d, NULL), -EINVAL);
        ASSERT_EQ(dse_batch_mtp_draft(b, seq[0], V, 1, d, NULL), -EINVAL);
        ASSERT_EQ(dse_batch_mtp_draft(b, 99, 1, 1, d, NULL), -EINVAL);
        float *logits = malloc((size_t)NS * (DSE_MTP_MAX_DRAFT + 1) * V * sizeof(float));
        ASSERT_TRUE(logits);
        int32_t toks[NS][N_PROMPT + N_GEN + DSE_MTP_MAX_DRAFT];
        int done = 0;
        while (!done) {
                struct dse_batch_seq bs[NS];
                int32_t nd[NS];
                int n = 0, idx[NS];
                for (int k = 0; k < NS; k++) {
                        int total = N_PROMPT + N_GEN;
                        if (len[k] >= total - 1)
                                continue;
                        int c = len[k] < N_PROMPT ? chunks[k] : 1;
                        if (len[k] + c > total - 1)
                                c = total - 1 - len[k];
                        int w = wrongs[k] > 0 ? wrongs[k] : wrongs[k] < 0 ? -wrongs[k] : 0;
                        if (len[k] + c + w > total - 1)
                                w = 0;
                        memcpy(toks[k], ids + len[k], (size_t)c * sizeof(int32_t));
                        for (int j = 0; j < w; j++) /* a wrong draft, or the right token */
                                toks[k][c + j] = wrongs[k] > 0 ? (ids[len[k] + c + j] + 7) % V : ids[len[k] + c + j];
                        bs[n] = (struct dse_batch_seq){seq[k], toks[k], c + w, logits + (size_t)n * (DSE_MTP_MAX_DRAFT + 1) * V};
                        nd[n] = w;
                        idx[n++] = k;
                }
                if (n == 0)
                        break;
                ASSERT_EQ(dse_batch_verify(b, bs, nd, (size_t)n, &diag), 0);
                for (int i = 0; i < n; i++) {
                        int k = idx[i], c = bs[i].n_tokens - nd[i], acc = wrongs[k] < 0 ? nd[i] : 0;
                        ASSERT_EQ(dse_kv_seq_accept(kv, seq[k], toks[k] + c, (size_t)acc), 0);
                        len[k] += c + acc;
                        ASSERT_EQ(dse_kv_seq_len(kv, seq[k]), len[k]);
                        /* the token after the last position is the reference's; draft
                         * from it: row len-1 of the reference */
                        int r = dse_batch_mtp_draft(b, seq[k], ids[len[k]], 3, d, &diag);
                        ASSERT_EQ(r, 3);
                        if (len[k] - 1 < N_ROWS && clear_row(len[k] - 1)) {
                                checked++;
                                mismatched += d[0] != argmax(ref + (size_t)(len[k] - 1) * V);
                        }
                        /* a second draft without a step has nothing new to start from */
                        ASSERT_EQ(dse_batch_mtp_draft(b, seq[k], ids[len[k]], 1, d, NULL), 0);
                }
        }
        printf("  batch drafts: %d checked against the reference argmax, %d differ\n", checked, mismatched);
        ASSERT_TRUE(checked > 8 * N_GEN / 2);
        ASSERT_EQ(mismatched, 0);
        /* the drafter's scratch blocks go back with the batch */
        for (int k = 0; k < NS; k++)
                dse_kv_seq_close(kv, seq[k]);
        struct dse_kv_stats st;
        dse_batch_free(b);
        dse_kv_cache_stats(kv, &st);
        ASSERT_EQ(st.n_used, 0);
        free(logits);
        dse_kv_cache_free(kv);
        dse_pool_free(pool);
}

/* One step of a sequence: tokens[0..n), the last nd of them drafts, none accepted. */
static int step_rejecting(struct dse_batch *b, struct dse_kv_cache *kv, int seq, const int32_t *tokens, int n,
                          int nd) {
        struct dse_batch_seq one = {seq, tokens, n, NULL};
        int32_t d = nd;
        int r = dse_batch_verify(b, &one, &d, 1, NULL);
        return r < 0 ? r : dse_kv_seq_accept(kv, seq, tokens, 0);
}

/* Module rows that waited through plain steps are the ones drafting at every step
 * writes: a sequence drafting after plain stretches of 1 to 21 steps (crossing blocks of
 * 16, one stretch after a verification whose two drafts were rejected) gets, beside one
 * drafting at every step in the same batch steps, the same three-draft chains (which
 * read the module's rows of every earlier position) and the reference's first drafts. A
 * sequence that never drafts leaves complete rows in its full blocks: one attaching
 * them after it closed drafts the chains of a sequence that computed every row itself. */
static void exact_path(void);

static void check_waiting_rows(struct dse_model *m, int against_reference) {
        struct dse_kv_cache *kv;
        struct dse_batch *b;
        ASSERT_EQ(dse_kv_cache_new(m, 32u << 20, 16, 4, 256, &kv, NULL), 0);
        ASSERT_EQ(dse_batch_new(m, kv, NULL, &b, NULL), 0);
        ASSERT_EQ(dse_batch_enable_mtp(b, NULL), 0);
        enum { N = N_PROMPT + N_GEN, START = 8 };
        int every = dse_kv_seq_open(kv), lazy = dse_kv_seq_open(kv);
        ASSERT_TRUE(every >= 0 && lazy >= 0);
        struct dse_batch_seq pre[2] = {{every, ids, START, NULL}, {lazy, ids, START, NULL}};
        ASSERT_EQ(dse_batch_step(b, pre, 2, NULL), 0);
        const int stretches[] = {1, 2, 3, 5, 8, 13, 21, 15};
        int stretch = 0, waited = 0, compared = 0, checked = 0, mismatched = 0;
        for (int len = START; len < N - 3; len++) {
                int32_t de[3], dl[3];
                ASSERT_EQ(dse_batch_mtp_draft(b, every, ids[len], 3, de, NULL), 3);
                int drafts = waited == stretches[stretch];
                if (drafts) {
                        ASSERT_EQ(dse_batch_mtp_draft(b, lazy, ids[len], 3, dl, NULL), 3);
                        ASSERT_EQ(memcmp(dl, de, sizeof de), 0);
                        compared++;
                        if (against_reference && clear_row(len - 1)) {
                                checked++;
                                mismatched += dl[0] != argmax(ref + (size_t)(len - 1) * V);
                        }
                        waited = 0;
                        stretch = (stretch + 1) % (int)(sizeof stretches / sizeof stretches[0]);
                }
                /* after the third stretch the waiting one verifies two wrong drafts */
                int32_t lazy_toks[3] = {ids[len], (ids[len + 1] + 7) % V, (ids[len + 2] + 7) % V};
                int nd = drafts && stretch == 3 ? 2 : 0;
                struct dse_batch_seq st[2] = {{every, ids + len, 1, NULL}, {lazy, lazy_toks, 1 + nd, NULL}};
                int32_t n_draft[2] = {0, nd};
                ASSERT_EQ(dse_batch_verify(b, st, n_draft, 2, NULL), 0);
                ASSERT_EQ(dse_kv_seq_accept(kv, lazy, lazy_toks + 1, 0), 0);
                ASSERT_EQ(dse_kv_seq_len(kv, lazy), len + 1);
                waited++;
        }
        printf("  waiting rows: %d chains compared, %d first drafts checked against the reference, %d differ\n",
               compared, checked, mismatched);
        ASSERT_TRUE(compared >= 8);
        ASSERT_TRUE(!against_reference || checked >= compared / 2);
        ASSERT_EQ(mismatched, 0);
        dse_kv_seq_close(kv, every);
        dse_kv_seq_close(kv, lazy);

        /* another text (so no block of the sequences above matches it) */
        int32_t text[N];
        for (int i = 0; i < N; i++)
                text[i] = ids[N - 1 - i];
        int plain = dse_kv_seq_open(kv);
        ASSERT_TRUE(plain >= 0);
        ASSERT_EQ(step_rejecting(b, kv, plain, text, START, 0), 0);
        for (int len = START; len < 36; len++)
                ASSERT_EQ(step_rejecting(b, kv, plain, text + len, 1, 0), 0);
        dse_kv_seq_close(kv, plain);
        int attached = dse_kv_seq_open(kv);
        ASSERT_EQ(dse_kv_seq_attach_prefix(kv, attached, text, 36), 32);
        ASSERT_EQ(step_rejecting(b, kv, attached, text + 32, 4, 0), 0);
        int own = dse_kv_seq_open(kv);
        ASSERT_EQ(step_rejecting(b, kv, own, text, 36, 0), 0);
        int32_t da[3], dn[3];
        ASSERT_EQ(dse_batch_mtp_draft(b, attached, text[36], 3, da, NULL), 3);
        ASSERT_EQ(dse_batch_mtp_draft(b, own, text[36], 3, dn, NULL), 3);
        ASSERT_EQ(memcmp(da, dn, sizeof da), 0);
        dse_kv_seq_close(kv, attached);
        dse_kv_seq_close(kv, own);
        dse_batch_free(b);
        dse_kv_cache_free(kv);
}

TEST(waiting_rows_equal_rows_written_at_every_step) {
        ASSERT_EQ(open_default(), 0);
        check_waiting_rows(model, 1);
}

/* The same at every SIMD level this CPU has, with the activations the level uses by
 * default: lazy and eager rows go through the batched and one-token kernels, which must
 * agree bit for bit (the fixture reference holds only on the exact path). */
TEST(waiting_rows_equal_rows_written_at_every_step_at_every_level) {
        ASSERT_EQ(open_default(), 0);
        struct dse_cpu_info info;
        ASSERT_EQ(dse_cpu_detect(&info, NULL), 0);
        for (int level = DSE_CPU_AVX2; level <= (int)info.detected && !t_failed_current; level++) {
                printf("  level %s\n", dse_cpu_level_to_string((enum dse_cpu_level)level));
                setenv("DSV_CPU", dse_cpu_level_to_string((enum dse_cpu_level)level), 1);
                unsetenv("DSV_ACT");
                struct dse_model *m = default_model_open();
                exact_path();
                ASSERT_TRUE(m != NULL);
                check_waiting_rows(m, 0);
                dse_model_free(m);
        }
}

TEST(model_without_module_refuses_mtp) {
        struct dse_model *m = fixture_model_open("llama-bf16-linear-rope");
        ASSERT_TRUE(m);
        ASSERT_EQ(dse_model_n_mtp_layers(m), 0);
        struct dse_kv_cache *kv;
        struct dse_batch *b;
        struct dse_session *s;
        ASSERT_EQ(dse_kv_cache_new(m, 4u << 20, 16, 2, 64, &kv, NULL), 0);
        ASSERT_EQ(dse_batch_new(m, kv, NULL, &b, NULL), 0);
        struct dse_diag diag = {{0}};
        ASSERT_EQ(dse_batch_enable_mtp(b, &diag), -EOPNOTSUPP);
        ASSERT_TRUE(strstr(diag.msg, "MTP") != NULL);
        ASSERT_EQ(dse_session_new(m, 64, NULL, &s, NULL), 0);
        int32_t t[2] = {1, 2};
        float lg[8];
        ASSERT_EQ(dse_session_eval_mtp(s, t, 2, lg, &diag), -EOPNOTSUPP);
        dse_session_free(s);
        dse_batch_free(b);
        dse_kv_cache_free(kv);
        dse_model_free(m);
}

/* the exact path for every test: scalar kernels, float activations */
__attribute__((constructor)) static void exact_path(void) {
        setenv("DSV_CPU", "scalar", 1);
        setenv("DSV_ACT", "f32", 1);
}

__attribute__((destructor)) static void close_default(void) {
        dse_model_free(model);
        free(ref);
}
