/* Quantized checkpoints: dequantizing the native tensors reproduces, element for
 * element, the formulas of fixtures/models/README.md ("Quantized formats") evaluated
 * directly on the safetensors data (AWQ GEMM, GPTQ sym, GPTQ act-order asym, FP8 with
 * partial edge blocks); quantize-on-convert (int8/int4) stays within half a step. */
#include "model/model.h"
#include "t.h"
#include "test-modelfile-helpers.h"

static struct dse_model *convert_open(const char *fixture, const char *dir, const char *quant) {
        struct dse_diag diag = {{0}};
        int r;
        char src[4096];
        snprintf(src, sizeof src, "%s", t_fixture(fixture));
        const char *out = convert_fixture(src, dir, quant, &r, &diag);
        if (r < 0) {
                fprintf(stderr, "  convert %s: %s (%s)\n", fixture, strerror(-r), diag.msg);
                return NULL;
        }
        struct dse_model *m;
        if ((r = dse_model_open(out, 0, &m, &diag)) < 0 || (r = dse_model_verify(m, &diag)) < 0) {
                fprintf(stderr, "  open %s: %s (%s)\n", out, strerror(-r), diag.msg);
                return NULL;
        }
        return m;
}

/* Raw source tensor `name` from the fixture's (first matching) safetensors file. */
static void *src_tensor(const char *fixture, const char *name, const char *want_dtype, size_t *len) {
        char dir[4096], dtype[16] = "";
        snprintf(dir, sizeof dir, "%s", t_fixture(fixture));
        DIR *d = opendir(dir);
        void *out = NULL;
        struct dirent *e;
        while (d && !out && (e = readdir(d))) {
                size_t n = strlen(e->d_name);
                if (n < 12 || strcmp(e->d_name + n - 12, ".safetensors") != 0)
                        continue;
                char p[8192];
                snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
                out = st_tensor_bytes(p, name, dtype, len);
        }
        if (d)
                closedir(d);
        if (out && strcmp(dtype, want_dtype) != 0) {
                fprintf(stderr, "  %s: dtype %s, expected %s\n", name, dtype, want_dtype);
                free(out);
                return NULL;
        }
        return out;
}

/* IEEE half -> float, written independently of the engine's converter. */
static float half(uint16_t h) {
        int e = (h >> 10) & 31, m = h & 1023;
        float v = e ? ldexpf(1.0f + m / 1024.0f, e - 15) : ldexpf((float)m, -24);
        return h & 0x8000 ? -v : v;
}

static float e4m3(uint8_t b) {
        int e = (b >> 3) & 15, m = b & 7;
        float v = e ? ldexpf(1.0f + m / 8.0f, e - 7) : ldexpf((float)m / 8.0f, -6);
        return b & 0x80 ? -v : v;
}

static float bf16(uint16_t h) {
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
}

/* The native tensor's value at [r, c] (logical input column c). */
struct lookup {
        const struct dse_tensor *t, *scale, *zero, *perm;
};

/* The tensor and its auxiliary tensors, looked up once per (model, name). */
static struct {
        const struct dse_model *m;
        char name[160];
        struct lookup l;
} cache[4];

static struct lookup find(const struct dse_model *m, const char *name) {
        static int next;
        for (int i = 0; i < 4; i++)
                if (cache[i].m == m && strcmp(cache[i].name, name) == 0)
                        return cache[i].l;
        char aux[200];
        struct lookup l;
        l.t = dse__model_tensor(m, name);
        snprintf(aux, sizeof aux, "%s.scale", name);
        l.scale = dse__model_tensor(m, aux);
        snprintf(aux, sizeof aux, "%s.zero", name);
        l.zero = dse__model_tensor(m, aux);
        snprintf(aux, sizeof aux, "%s.perm", name);
        l.perm = dse__model_tensor(m, aux);
        int i = next++ % 4;
        cache[i].m = m;
        snprintf(cache[i].name, sizeof cache[i].name, "%s", name);
        cache[i].l = l;
        return l;
}

static const void *inv_of; /* the perm tensor data `inv` inverts */
static int64_t inv[65536];

/* Frees a model and forgets its cached lookups (a later model may reuse the address). */
static void close_model(struct dse_model *m) {
        inv_of = NULL;
        for (int i = 0; i < 4; i++)
                if (cache[i].m == m)
                        cache[i].m = NULL;
        dse_model_free(m);
}

static float native_at(const struct dse_model *m, const char *name, int64_t r, int64_t c) {
        struct lookup l = find(m, name);
        const struct dse_tensor *t = l.t;
        int64_t cols = t->shape[1];
        switch (t->dtype) {
        case DSE_DTYPE_BF16:
                return bf16(((const uint16_t *)t->data)[r * cols + c]);
        case DSE_DTYPE_F16:
                return half(((const uint16_t *)t->data)[r * cols + c]);
        case DSE_DTYPE_F32:
                return ((const float *)t->data)[r * cols + c];
        case DSE_DTYPE_F8_E4M3: {
                const struct dse_tensor *s = l.scale;
                return e4m3(((const uint8_t *)t->data)[r * cols + c]) *
                       ((const float *)s->data)[(r / 128) * s->shape[1] + c / 128];
        }
        case DSE_DTYPE_Q8: {
                const struct dse_tensor *s = l.scale;
                int64_t ng = s->shape[1];
                return ((const int8_t *)t->data)[r * cols + c] * ((const float *)s->data)[r * ng + c / t->group_size];
        }
        case DSE_DTYPE_Q4: {
                const struct dse_tensor *p = l.perm;
                int64_t j = c;
                if (p) { /* stored column j holds input perm[j]: invert perm (cached per tensor) */
                        if (inv_of != p->data && cols <= 65536) {
                                for (int64_t k = 0; k < cols; k++)
                                        inv[((const int32_t *)p->data)[k]] = k;
                                inv_of = p->data;
                        }
                        j = inv[c];
                }
                const struct dse_tensor *s = l.scale, *z = l.zero;
                /* scales and zero points 16 rows interleaved, rows padded to 16 (FORMAT.md) */
                int64_t ng = s->shape[1], g = ((r / 16) * ng + j / t->group_size) * 16 + r % 16;
                int q = dse__q4_get(t->data, cols, r, j);
                return (float)(q - ((const uint8_t *)z->data)[g]) * ((const float *)s->data)[g];
        }
        default:
                return NAN;
        }
}

static const char *const proj[] = {
        "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
        "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj",
};

TEST(awq_gemm_dequantizes_exactly) {
        const char *fx = "models/qwen2-awq-g32";
        char *dir = tmp_dir();
        struct dse_model *m = convert_open(fx, dir, NULL);
        ASSERT_TRUE(m);
        static const int order[8] = {0, 2, 4, 6, 1, 3, 5, 7};
        for (int layer = 0; layer < 2; layer++)
                for (size_t p = 0; p < 7; p++) {
                        char base[128], name[160];
                        snprintf(base, sizeof base, "model.layers.%d.%s", layer, proj[p]);
                        snprintf(name, sizeof name, "%s.weight", base);
                        const struct dse_tensor *t = dse__model_tensor(m, name);
                        ASSERT_TRUE(t);
                        ASSERT_EQ(t->dtype, DSE_DTYPE_Q4);
                        ASSERT_EQ(t->group_size, 32);
                        int64_t out = t->shape[0], in = t->shape[1];
                        size_t l1, l2, l3;
                        char a[160], b[160], c[160];
                        snprintf(a, sizeof a, "%s.qweight", base);
                        snprintf(b, sizeof b, "%s.qzeros", base);
                        snprintf(c, sizeof c, "%s.scales", base);
                        int32_t *qw = src_tensor(fx, a, "I32", &l1), *qz = src_tensor(fx, b, "I32", &l2);
                        uint16_t *sc = src_tensor(fx, c, "F16", &l3);
                        ASSERT_TRUE(qw && qz && sc);
                        ASSERT_EQ(l1, (size_t)(in * out / 8) * 4);
                        int bad = 0;
                        for (int64_t i = 0; i < in && !bad; i++)
                                for (int64_t o = 0; o < out && !bad; o++) {
                                        /* README: nibble k of packed column c holds column 8c + order[k] */
                                        int64_t col = o / 8, k = 0;
                                        while (order[k] != o % 8)
                                                k++;
                                        int q = ((uint32_t)qw[i * (out / 8) + col] >> (4 * k)) & 15;
                                        int z = ((uint32_t)qz[(i / 32) * (out / 8) + col] >> (4 * k)) & 15;
                                        float want = (float)(q - z) * half(sc[(i / 32) * out + o]);
                                        float got = native_at(m, name, o, i);
                                        if (got != want) {
                                                fprintf(stderr, "  %s[%lld,%lld]: %g != %g\n", name, (long long)o,
                                                        (long long)i, got, want);
                                                bad = 1;
                                        }
                                }
                        free(qw);
                        free(qz);
                        free(sc);
                        ASSERT_TRUE(!bad);
                }
        /* F16 embeddings / norms / biases kept as F16 */
        ASSERT_EQ(dse__model_tensor(m, "model.embed_tokens.weight")->dtype, DSE_DTYPE_F16);
        ASSERT_EQ(dse__model_tensor(m, "model.layers.0.self_attn.q_proj.bias")->dtype, DSE_DTYPE_F16);
        ASSERT_EQ(dse__model_tensor(m, "lm_head.weight")->dtype, DSE_DTYPE_F16);
        close_model(m);
        tmp_rm(dir);
}

static void check_gptq(const char *fx, int expect_perm) {
        char *dir = tmp_dir();
        struct dse_model *m = convert_open(fx, dir, NULL);
        ASSERT_TRUE(m);
        int n_perm = 0;
        for (int layer = 0; layer < 2; layer++)
                for (size_t p = 0; p < 7; p++) {
                        char base[128], name[160], aux[200];
                        snprintf(base, sizeof base, "model.layers.%d.%s", layer, proj[p]);
                        snprintf(name, sizeof name, "%s.weight", base);
                        const struct dse_tensor *t = dse__model_tensor(m, name);
                        ASSERT_TRUE(t);
                        ASSERT_EQ(t->dtype, DSE_DTYPE_Q4);
                        snprintf(aux, sizeof aux, "%s.perm", name);
                        n_perm += dse__model_tensor(m, aux) != NULL;
                        int64_t out = t->shape[0], in = t->shape[1];
                        size_t l;
                        char a[160];
                        snprintf(a, sizeof a, "%s.qweight", base);
                        int32_t *qw = src_tensor(fx, a, "I32", &l);
                        snprintf(a, sizeof a, "%s.qzeros", base);
                        int32_t *qz = src_tensor(fx, a, "I32", &l);
                        snprintf(a, sizeof a, "%s.scales", base);
                        uint16_t *sc = src_tensor(fx, a, "F16", &l);
                        snprintf(a, sizeof a, "%s.g_idx", base);
                        int32_t *gi = src_tensor(fx, a, "I32", &l);
                        ASSERT_TRUE(qw && qz && sc && gi);
                        int bad = 0;
                        for (int64_t i = 0; i < in && !bad; i++)
                                for (int64_t o = 0; o < out && !bad; o++) {
                                        /* README: W[o,i] = s[g_idx[i], o] * (q[i,o] - (qz[g_idx[i], o] + 1)) */
                                        int g = gi[i];
                                        int q = ((uint32_t)qw[(i / 8) * out + o] >> (4 * (i % 8))) & 15;
                                        int z = (((uint32_t)qz[g * (out / 8) + o / 8] >> (4 * (o % 8))) & 15) + 1;
                                        float want = half(sc[g * out + o]) * (float)(q - z);
                                        float got = native_at(m, name, o, i);
                                        if (got != want) {
                                                fprintf(stderr, "  %s[%lld,%lld]: %g != %g\n", name, (long long)o,
                                                        (long long)i, got, want);
                                                bad = 1;
                                        }
                                }
                        free(qw);
                        free(qz);
                        free(sc);
                        free(gi);
                        ASSERT_TRUE(!bad);
                }
        if (expect_perm)
                ASSERT_TRUE(n_perm > 0);
        else
                ASSERT_EQ(n_perm, 0);
        close_model(m);
        tmp_rm(dir);
}

TEST(gptq_sym_dequantizes_exactly) {
        check_gptq("models/llama-gptq-sym", 0);
}

TEST(gptq_actorder_asym_dequantizes_exactly) {
        check_gptq("models/llama-gptq-actorder-asym", 1);
}

TEST(fp8_block_scales_dequantize_exactly) {
        const char *fx = "models/deepseek-v3-fp8-mtp";
        char *dir = tmp_dir();
        struct dse_model *m = convert_open(fx, dir, NULL);
        ASSERT_TRUE(m);
        const char *names[] = {
                "model.layers.0.mlp.down_proj.weight",             /* [192, 320]: 2x3 blocks, partial */
                "model.layers.0.self_attn.kv_a_proj_with_mqa.weight", /* [160, 192] */
                "model.layers.0.self_attn.q_b_proj.weight",        /* [256, 160] */
                "model.layers.1.mlp.experts.7.up_proj.weight",     /* [96, 192] */
                "model.layers.2.mlp.shared_experts.down_proj.weight",
        };
        for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
                const struct dse_tensor *t = dse__model_tensor(m, names[k]);
                ASSERT_TRUE(t);
                ASSERT_EQ(t->dtype, DSE_DTYPE_F8_E4M3);
                int64_t out = t->shape[0], in = t->shape[1], bc = (in + 127) / 128;
                size_t l;
                char a[200];
                uint8_t *w = src_tensor(fx, names[k], "F8_E4M3", &l);
                snprintf(a, sizeof a, "%s_scale_inv", names[k]);
                float *s = src_tensor(fx, a, "F32", &l);
                ASSERT_TRUE(w && s);
                int bad = 0;
                for (int64_t o = 0; o < out && !bad; o++)
                        for (int64_t i = 0; i < in && !bad; i++) {
                                float want = e4m3(w[o * in + i]) * s[(o / 128) * bc + i / 128];
                                if (native_at(m, names[k], o, i) != want)
                                        bad = 1;
                        }
                free(w);
                free(s);
                ASSERT_TRUE(!bad);
        }
        /* BF16 router, embedding, norms kept; the MTP module (layer 3) kept as stored,
         * without its copies of the embedding and head */
        ASSERT_EQ(dse__model_tensor(m, "model.layers.1.mlp.gate.weight")->dtype, DSE_DTYPE_BF16);
        ASSERT_EQ(dse__model_tensor(m, "model.layers.1.mlp.gate.e_score_correction_bias")->dtype, DSE_DTYPE_F32);
        ASSERT_EQ(dse__model_hparams(m)->n_layers, 3);
        ASSERT_EQ(dse__model_hparams(m)->n_mtp_layers, 1);
        ASSERT_EQ(dse__model_tensor(m, "model.layers.3.eh_proj.weight")->dtype, DSE_DTYPE_BF16);
        ASSERT_EQ(dse__model_tensor(m, "model.layers.3.self_attn.kv_b_proj.weight")->dtype, DSE_DTYPE_F8_E4M3);
        ASSERT_TRUE(dse__model_tensor(m, "model.layers.3.shared_head.norm.weight") != NULL);
        ASSERT_TRUE(dse__model_tensor(m, "model.layers.3.embed_tokens.weight") == NULL);
        ASSERT_TRUE(dse__model_tensor(m, "model.layers.3.shared_head.head.weight") == NULL);
        close_model(m);
        tmp_rm(dir);
}

/* --quant-format bf16 on an AWQ checkpoint: the exact dequantized value, rounded once. */
TEST(awq_to_bf16_rounds_the_exact_value) {
        char *d1 = tmp_dir(), *d2 = tmp_dir();
        struct dse_model *q = convert_open("models/qwen2-awq-g32", d1, "auto");
        struct dse_model *b = convert_open("models/qwen2-awq-g32", d2, "bf16");
        ASSERT_TRUE(q && b);
        const char *name = "model.layers.1.mlp.down_proj.weight";
        const struct dse_tensor *t = dse__model_tensor(b, name);
        ASSERT_EQ(t->dtype, DSE_DTYPE_BF16);
        for (int64_t o = 0; o < t->shape[0]; o++)
                for (int64_t i = 0; i < t->shape[1]; i++) {
                        float exact = native_at(q, name, o, i), got = native_at(b, name, o, i);
                        ASSERT_TRUE(fabsf(got - exact) <= fabsf(exact) * (1.0f / 256));
                }
        close_model(q);
        close_model(b);
        tmp_rm(d1);
        tmp_rm(d2);
}

static void check_requant(const char *quant, enum dse_dtype want, float steps) {
        const char *fx = "models/llama-bf16-linear-rope";
        char *d1 = tmp_dir(), *d2 = tmp_dir();
        struct dse_model *ref = convert_open(fx, d1, "auto");
        struct dse_model *m = convert_open(fx, d2, quant);
        ASSERT_TRUE(ref && m);
        ASSERT_STREQ(dse_model_quant_format(m), want == DSE_DTYPE_Q8 ? "int8/float" : "int4/float");
        for (size_t k = 0; k < dse__model_n_tensors(ref); k++) {
                const struct dse_tensor *rt = dse__model_tensor_at(ref, k);
                const struct dse_tensor *t = dse__model_tensor(m, rt->name);
                ASSERT_TRUE(t);
                int is_proj = strstr(rt->name, "_proj.weight") || strcmp(rt->name, "lm_head.weight") == 0;
                if (!is_proj) { /* norms and embedding keep their precision, byte for byte */
                        ASSERT_EQ(t->dtype, rt->dtype);
                        ASSERT_TRUE(memcmp(t->data, rt->data, rt->size_bytes) == 0);
                        continue;
                }
                ASSERT_EQ(t->dtype, want);
                ASSERT_EQ(t->group_size, 32);
                char aux[160];
                snprintf(aux, sizeof aux, "%s.scale", rt->name);
                const struct dse_tensor *s = dse__model_tensor(m, aux);
                ASSERT_TRUE(s);
                int64_t rows = t->shape[0], cols = t->shape[1], ng = s->shape[1];
                for (int64_t r = 0; r < rows; r++)
                        for (int64_t c = 0; c < cols; c++) {
                                float x = native_at(ref, rt->name, r, c), y = native_at(m, rt->name, r, c);
                                int64_t k = want == DSE_DTYPE_Q4 ? ((r / 16) * ng + c / 32) * 16 + r % 16 /* FORMAT.md */
                                                                 : r * ng + c / 32;
                                float step = ((const float *)s->data)[k];
                                if (!(fabsf(x - y) <= steps * step + 1e-7f))
                                        T_FAIL("%s[%lld,%lld]: %g vs %g (step %g)", rt->name, (long long)r,
                                               (long long)c, x, y, step);
                        }
        }
        close_model(ref);
        close_model(m);
        tmp_rm(d1);
        tmp_rm(d2);
}

TEST(int8_quantize_on_convert_within_half_step) {
        check_requant("int8", DSE_DTYPE_Q8, 0.5f);
}

TEST(int4_quantize_on_convert_within_half_step) {
        /* the zero point is rounded too, which can add up to half a step */
        check_requant("int4", DSE_DTYPE_Q4, 1.0f);
}

/* int4 on an already-int4 checkpoint keeps the checkpoint's own quantization. */
TEST(int4_on_gptq_is_lossless) {
        char *d1 = tmp_dir(), *d2 = tmp_dir();
        struct dse_model *a = convert_open("models/llama-gptq-actorder-asym", d1, "auto");
        struct dse_model *b = convert_open("models/llama-gptq-actorder-asym", d2, "int4");
        ASSERT_TRUE(a && b);
        int n_q4 = 0;
        for (size_t k = 0; k < dse__model_n_tensors(a); k++) {
                const struct dse_tensor *x = dse__model_tensor_at(a, k);
                /* the checkpoint's int4 weights and their scale/zero/perm; its F16 lm_head
                 * is a float weight and gets quantized by int4 */
                if (strncmp(x->name, "model.layers.", 13) != 0 || strstr(x->name, "layernorm"))
                        continue;
                const struct dse_tensor *y = dse__model_tensor(b, x->name);
                ASSERT_TRUE(y);
                n_q4 += x->dtype == DSE_DTYPE_Q4;
                ASSERT_EQ(x->dtype, y->dtype);
                ASSERT_EQ(x->size_bytes, y->size_bytes);
                ASSERT_TRUE(memcmp(x->data, y->data, x->size_bytes) == 0);
        }
        ASSERT_EQ(n_q4, 14);
        ASSERT_EQ(dse__model_tensor(b, "lm_head.weight")->dtype, DSE_DTYPE_Q4);
        close_model(a);
        close_model(b);
        tmp_rm(d1);
        tmp_rm(d2);
}

TEST(quant_format_must_match_checkpoint) {
        char *dir = tmp_dir();
        struct dse_diag diag = {{0}};
        int r;
        convert_fixture(t_fixture("models/qwen2-awq-g32"), dir, "gptq", &r, &diag);
        ASSERT_ERR(r, -EINVAL);
        ASSERT_TRUE(strstr(diag.msg, "gptq"));
        convert_fixture(t_fixture("models/qwen2-awq-g32"), dir, "int3", &r, &diag);
        ASSERT_ERR(r, -EINVAL);
        struct dse_model *m = convert_open("models/qwen2-awq-g32", dir, "awq");
        ASSERT_TRUE(m);
        close_model(m);
        tmp_rm(dir);
}
