/* Attention over KV rows stored as BF16, FP8 (e4m3) or INT8 (attn_scores_kv,
 * attn_accum_kv; BF16 also for a group of queries at once), at every level up to the detected one, against a float64 oracle over
 * the stored elements decoded independently of ref.c, on seeded random rows of awkward
 * shapes: runs of 1..40 rows, lengths and offsets around the vector width, scale groups
 * that are and are not multiples of 8, row strides that are not. And the float32 -> e4m3
 * encoder the cache stores with. */
#include <stdint.h>

#include "kernels/kernels.h"
#include "kernel-test-data.h"
#include "t.h"

/* As test-kernels.c: float32 rounding of an n-term sum, n <= 600 here, relative to the
 * sum of |terms|. */
#define REL_TOL 2e-5
#define ABS_TOL 1e-6

TEST(f32_to_e4m3_inverts_the_decoder_and_rounds_to_nearest_even) {
        for (int b = 0; b < 256; b++) {
                if ((b & 0x7f) == 0x7f)
                        continue;
                float v = dse__kern_f8e4m3_to_f32((uint8_t)b);
                uint8_t back = dse__kern_f32_to_f8e4m3(v);
                ASSERT_EQ(v == 0.0f ? back & 0x7f : back, v == 0.0f ? 0 : b); /* -0 may come back as either zero */
        }
        ASSERT_EQ(dse__kern_f32_to_f8e4m3(1.0625f), 0x38);  /* 1 + 1/16: tie between 1 and 1.125, to even */
        ASSERT_EQ(dse__kern_f32_to_f8e4m3(1.1875f), 0x3a);  /* 1.125 + 1/16: tie, to even (1.25) */
        ASSERT_EQ(dse__kern_f32_to_f8e4m3(1.07f), 0x39);
        ASSERT_EQ(dse__kern_f32_to_f8e4m3(ldexpf(1, -10)), 0x00); /* half the smallest subnormal: tie, to 0 */
        ASSERT_EQ(dse__kern_f32_to_f8e4m3(3 * ldexpf(1, -10)), 0x02);
        ASSERT_EQ(dse__kern_f32_to_f8e4m3(15.5f * ldexpf(1, -10)), 0x08); /* rounds up into the normals */
        ASSERT_EQ(dse__kern_f32_to_f8e4m3(447.0f), 0x7e);
        ASSERT_EQ(dse__kern_f32_to_f8e4m3(1e9f), 0x7e);  /* saturates, no NaN */
        ASSERT_EQ(dse__kern_f32_to_f8e4m3(-1e9f), 0xfe);
        ASSERT_EQ(dse__kern_f32_to_f8e4m3(INFINITY), 0x7e);
        ASSERT_EQ(dse__kern_f32_to_f8e4m3(NAN) & 0x7f, 0x7f);
}

struct kv_case {
        int32_t group;  /* elements per scale (FP8, INT8) */
        int64_t off, len;
};

/* Rows of n_elems elements in dtype, then (FP8, INT8) n_elems / group float scales, ld
 * bytes apart; the oracle's view of element d of row t. */
struct kv_buf {
        enum dse_kv_dtype dt;
        struct dse_kv_rows rows;
        uint8_t *mem;
        int64_t n_elems;
};

static void kv_make(struct kv_buf *b, enum dse_kv_dtype dt, int64_t n, int64_t n_elems, int32_t group) {
        b->dt = dt;
        b->n_elems = n_elems;
        size_t esz = dt == DSE_KV_BF16 ? 2 : 1, scale_off = ((size_t)n_elems * esz + 3) & ~(size_t)3;
        size_t ld = scale_off + (dt == DSE_KV_BF16 ? 0 : (size_t)(n_elems / group) * 4) + 12; /* a wider stride */
        b->mem = calloc((size_t)n, ld);
        ASSERT_TRUE(b->mem);
        b->rows = (struct dse_kv_rows){.rows = b->mem, .ld = (int64_t)ld, .scale_off = (int64_t)scale_off, .group = group};
        for (int64_t t = 0; t < n; t++) {
                uint8_t *row = b->mem + t * ld;
                for (int64_t d = 0; d < n_elems; d++) {
                        if (dt == DSE_KV_BF16) {
                                uint16_t h = dse__kern_f32_to_bf16(rng_unit());
                                memcpy(row + 2 * d, &h, 2);
                        } else if (dt == DSE_KV_FP8) {
                                uint8_t c = (uint8_t)(rng_u32() & 0xff);
                                row[d] = (c & 0x7f) == 0x7f ? 0x7e : c;
                        } else {
                                row[d] = (uint8_t)(int8_t)((int)(rng_u32() % 255) - 127);
                        }
                }
                if (dt != DSE_KV_BF16)
                        for (int64_t g = 0; g < n_elems / group; g++) {
                                float s = (0.5f + (float)(rng_u32() % 1000) / 1000.0f) / 127.0f;
                                memcpy(row + scale_off + 4 * g, &s, 4);
                        }
        }
}

static double kv_value(const struct kv_buf *b, int64_t t, int64_t d) {
        const uint8_t *row = b->rows.rows + t * b->rows.ld;
        if (b->dt == DSE_KV_BF16) {
                uint16_t h;
                memcpy(&h, row + 2 * d, 2);
                return bf16_value(h);
        }
        float s;
        memcpy(&s, row + b->rows.scale_off + 4 * (d / b->rows.group), 4);
        return (b->dt == DSE_KV_FP8 ? f8_value(row[d]) : (double)(int8_t)row[d]) * s;
}

/* Shapes: FP8/INT8 need whole groups; BF16 takes any length (group unused). */
static const struct kv_case scaled_cases[] = {
        {8, 0, 8},   {8, 8, 24},   {16, 0, 80},   {16, 64, 16},  {12, 12, 36}, {24, 0, 72},
        {32, 32, 64}, {64, 0, 576}, {64, 128, 128}, {4, 0, 4},     {20, 40, 60},
};
static const struct kv_case bf16_cases[] = {
        {1, 0, 1}, {1, 3, 7}, {1, 0, 8}, {1, 16, 16}, {1, 5, 33}, {1, 0, 64}, {1, 64, 130}, {1, 0, 576},
};
static const int64_t runs[] = {1, 3, 15, 16, 17, 40};

TEST(attention_over_stored_kv_all_types_all_levels) {
        enum dse_cpu_level top = detected_level();
        int n_checked = 0;
        for (int dt = DSE_KV_BF16; dt < DSE_KV_DTYPE_COUNT; dt++) {
                const struct kv_case *cases = dt == DSE_KV_BF16 ? bf16_cases : scaled_cases;
                size_t n_cases = dt == DSE_KV_BF16 ? sizeof bf16_cases / sizeof bf16_cases[0]
                                                    : sizeof scaled_cases / sizeof scaled_cases[0];
                for (size_t ci = 0; ci < n_cases; ci++)
                        for (size_t ri = 0; ri < sizeof runs / sizeof runs[0]; ri++) {
                                struct kv_case c = cases[ci];
                                int64_t n = runs[ri], n_elems = c.off + c.len + (dt == DSE_KV_BF16 ? 3 : c.group);
                                rng_seed(7000 + 97 * (uint64_t)dt + 31 * ci + ri);
                                struct kv_buf b;
                                kv_make(&b, (enum dse_kv_dtype)dt, n, n_elems, c.group);
                                float *q = malloc((size_t)c.len * sizeof *q), *w = malloc((size_t)n * sizeof *w);
                                float *sc = malloc((size_t)n * sizeof *sc), *out = malloc((size_t)c.len * sizeof *out);
                                float *out0 = malloc((size_t)c.len * sizeof *out0);
                                ASSERT_TRUE(q && w && sc && out && out0);
                                for (int64_t i = 0; i < c.len; i++) {
                                        q[i] = rng_unit();
                                        out0[i] = rng_unit();
                                }
                                for (int64_t t = 0; t < n; t++)
                                        w[t] = rng_unit();
                                for (int lvl = DSE_CPU_SCALAR; lvl <= (int)top; lvl++) {
                                        struct dse_kernels k;
                                        ASSERT_OK(dse_kernels_resolve((enum dse_cpu_level)lvl, &k));
                                        k.attn_scores_kv[dt](q, &b.rows, c.off, n, c.len, 0.125f, sc);
                                        for (int64_t t = 0; t < n; t++) {
                                                double dot = 0, mag = 0;
                                                for (int64_t i = 0; i < c.len; i++) {
                                                        double x = kv_value(&b, t, c.off + i);
                                                        dot += q[i] * x;
                                                        mag += fabs(q[i] * x);
                                                }
                                                ASSERT_NEAR(sc[t], 0.125 * dot, 0.125 * (REL_TOL * mag + ABS_TOL));
                                        }
                                        memcpy(out, out0, (size_t)c.len * sizeof *out);
                                        k.attn_accum_kv[dt](w, &b.rows, c.off, n, c.len, out);
                                        for (int64_t i = 0; i < c.len; i++) {
                                                double want = out0[i], mag = fabs(out0[i]);
                                                for (int64_t t = 0; t < n; t++) {
                                                        double x = kv_value(&b, t, c.off + i);
                                                        want += w[t] * x;
                                                        mag += fabs(w[t] * x);
                                                }
                                                ASSERT_NEAR(out[i], want, REL_TOL * mag + ABS_TOL);
                                        }
                                        n_checked++;
                                }
                                free(q);
                                free(w);
                                free(sc);
                                free(out);
                                free(out0);
                                free(b.mem);
                        }
        }
        fprintf(stderr, "  %d stored-KV attention (type, shape, run, level) combinations checked up to level %s\n",
                n_checked, dse_cpu_level_to_string(top));
}

/* G queries over one run of BF16 rows (attn_scores_group_bf16, attn_accum_group_bf16):
 * every query against the float64 oracle, and bitwise what the same kernel gives that
 * query alone (G = 1), so that a head's result does not depend on its group's size; at
 * group sizes around the kernels' tiles, awkward lengths and runs, query, score and
 * output strides wider than a row. */
TEST(attention_group_over_bf16_rows_all_levels) {
        static const int groups[] = {1, 2, 5, 6, 7, 12, 13};
        static const struct kv_case cases[] = {{1, 0, 1}, {1, 3, 7}, {1, 0, 8}, {1, 5, 33}, {1, 64, 128}, {1, 0, 130}};
        enum dse_cpu_level top = detected_level();
        int n_checked = 0;
        for (size_t gi = 0; gi < sizeof groups / sizeof groups[0]; gi++)
                for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
                        for (size_t ri = 0; ri < sizeof runs / sizeof runs[0]; ri++) {
                                int G = groups[gi];
                                struct kv_case c = cases[ci];
                                int64_t n = runs[ri], ldq = c.len + 5, lds = n + 3, ldo = c.len + 2;
                                rng_seed(9100 + 131 * gi + 17 * ci + ri);
                                struct kv_buf b;
                                kv_make(&b, DSE_KV_BF16, n, c.off + c.len + 3, 1);
                                float *q = malloc((size_t)(G * ldq) * sizeof *q), *w = malloc((size_t)(G * lds) * sizeof *w);
                                float *sc = malloc((size_t)(G * lds) * sizeof *sc), *one = malloc((size_t)ldo * sizeof *one);
                                float *out = malloc((size_t)(G * ldo) * sizeof *out), *out0 = malloc((size_t)(G * ldo) * sizeof *out0);
                                ASSERT_TRUE(q && w && sc && one && out && out0);
                                for (int64_t i = 0; i < G * ldq; i++)
                                        q[i] = rng_unit();
                                for (int64_t i = 0; i < G * lds; i++)
                                        w[i] = rng_unit();
                                for (int64_t i = 0; i < G * ldo; i++)
                                        out0[i] = rng_unit();
                                for (int lvl = DSE_CPU_SCALAR; lvl <= (int)top; lvl++) {
                                        struct dse_kernels k;
                                        ASSERT_OK(dse_kernels_resolve((enum dse_cpu_level)lvl, &k));
                                        k.attn_scores_group_bf16(q, ldq, G, &b.rows, c.off, n, c.len, 0.125f, sc, lds);
                                        memcpy(out, out0, (size_t)(G * ldo) * sizeof *out);
                                        k.attn_accum_group_bf16(w, lds, G, &b.rows, c.off, n, c.len, out, ldo);
                                        for (int g = 0; g < G; g++) {
                                                float alone[40];
                                                k.attn_scores_group_bf16(q + g * ldq, ldq, 1, &b.rows, c.off, n, c.len, 0.125f,
                                                                         alone, n);
                                                ASSERT_TRUE(memcmp(alone, sc + g * lds, (size_t)n * sizeof(float)) == 0);
                                                memcpy(one, out0 + g * ldo, (size_t)ldo * sizeof *one);
                                                k.attn_accum_group_bf16(w + g * lds, lds, 1, &b.rows, c.off, n, c.len, one, ldo);
                                                ASSERT_TRUE(memcmp(one, out + g * ldo, (size_t)c.len * sizeof(float)) == 0);
                                                for (int64_t t = 0; t < n; t++) {
                                                        double dot = 0, mag = 0;
                                                        for (int64_t i = 0; i < c.len; i++) {
                                                                double x = kv_value(&b, t, c.off + i);
                                                                dot += q[g * ldq + i] * x;
                                                                mag += fabs(q[g * ldq + i] * x);
                                                        }
                                                        ASSERT_NEAR(sc[g * lds + t], 0.125 * dot, 0.125 * (REL_TOL * mag + ABS_TOL));
                                                }
                                                for (int64_t i = 0; i < c.len; i++) {
                                                        double want = out0[g * ldo + i], mag = fabs(want);
                                                        for (int64_t t = 0; t < n; t++) {
                                                                double x = kv_value(&b, t, c.off + i);
                                                                want += w[g * lds + t] * x;
                                                                mag += fabs(w[g * lds + t] * x);
                                                        }
                                                        ASSERT_NEAR(out[g * ldo + i], want, REL_TOL * mag + ABS_TOL);
                                                }
                                                /* the strides' gaps are left alone */
                                                for (int64_t i = c.len; i < ldo; i++)
                                                        ASSERT_TRUE(out[g * ldo + i] == out0[g * ldo + i]);
                                        }
                                        n_checked++;
                                }
                                free(q);
                                free(w);
                                free(sc);
                                free(one);
                                free(out);
                                free(out0);
                                free(b.mem);
                        }
        fprintf(stderr, "  %d grouped BF16 attention (group, shape, run, level) combinations checked up to level %s\n",
                n_checked, dse_cpu_level_to_string(top));
}

/* The F32 entries stay the float kernels' (attn_scores, attn_accum). */
TEST(f32_kv_has_no_stored_type_entry) {
        struct dse_kernels k;
        ASSERT_OK(dse_kernels_resolve(detected_level(), &k));
        ASSERT_TRUE(k.attn_scores_kv[DSE_KV_F32] == NULL && k.attn_accum_kv[DSE_KV_F32] == NULL);
        for (int dt = DSE_KV_BF16; dt < DSE_KV_DTYPE_COUNT; dt++)
                ASSERT_TRUE(k.attn_scores_kv[dt] && k.attn_accum_kv[dt]);
        ASSERT_TRUE(k.attn_scores_group_bf16 && k.attn_accum_group_bf16);
}
