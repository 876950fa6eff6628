/* Reference kernels: written for clarity, float32 activations and accumulation. They are
 * the specification of every entry of struct dse_kernels, the scalar fallback and the
 * oracle the SIMD versions are tested against (tests/kernels/test-kernels.c). */
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "kernels/kernels.h"

/* IEEE half: 1 sign, 5 exponent (bias 15), 10 mantissa bits. */
float dse__kern_f16_to_f32(uint16_t h) {
        int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
        float v;
        if (exp == 0)
                v = ldexpf((float)mant, -24); /* subnormal: mant * 2^-14 / 2^10 */
        else if (exp == 31)
                v = mant ? NAN : INFINITY;
        else
                v = ldexpf((float)(mant | 0x400), exp - 25);
        return sign ? -v : v;
}

/* bfloat16 is the top half of a float32. */
float dse__kern_bf16_to_f32(uint16_t h) {
        uint32_t bits = (uint32_t)h << 16;
        float v;
        memcpy(&v, &bits, sizeof v);
        return v;
}

uint16_t dse__kern_f32_to_bf16(float f) {
        uint32_t bits;
        memcpy(&bits, &f, sizeof bits);
        if ((bits & 0x7fffffff) > 0x7f800000)
                return (uint16_t)((bits >> 16) | 0x40); /* a quiet NaN */
        bits += 0x7fff + ((bits >> 16) & 1);
        return (uint16_t)(bits >> 16);
}

/* float8 e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities, S.1111.111
 * is NaN, max 448. */
float dse__kern_f8e4m3_to_f32(uint8_t b) {
        int sign = b >> 7, exp = (b >> 3) & 0xf, mant = b & 7;
        float v;
        if (exp == 0)
                v = ldexpf((float)mant, -9); /* subnormal: mant/8 * 2^-6 */
        else if (exp == 15 && mant == 7)
                v = NAN;
        else
                v = ldexpf((float)(mant | 8), exp - 10);
        return sign ? -v : v;
}

uint8_t dse__kern_f32_to_f8e4m3(float f) {
        uint8_t sign = signbit(f) ? 0x80 : 0;
        float a = fabsf(f);
        if (isnan(a))
                return sign | 0x7f;
        if (a >= 448.0f)
                return sign | 0x7e;
        if (a < 0x1p-6f) /* subnormal steps of 2^-9; 8 steps is the smallest normal 0x08 */
                return sign | (uint8_t)nearbyintf(a * 512.0f);
        int e;
        float fr = frexpf(a, &e); /* a = 2fr * 2^(e-1), 2fr in [1, 2): exponent field e + 6 */
        int m = (int)nearbyintf((fr * 2.0f - 1.0f) * 8.0f), E = e + 6;
        if (m == 8) {
                m = 0;
                E++;
        }
        return sign | (uint8_t)(E << 3) | (uint8_t)m; /* a < 448 keeps it at most 0x7e */
}

static float f8_table[256];
static pthread_once_t f8_once = PTHREAD_ONCE_INIT;

static void f8_table_build(void) {
        for (int i = 0; i < 256; i++)
                f8_table[i] = dse__kern_f8e4m3_to_f32((uint8_t)i);
}

const float *dse__f8e4m3_table(void) {
        pthread_once(&f8_once, f8_table_build);
        return f8_table;
}

/* ---- matvec per weight format --------------------------------------------------- */

static void matvec_f32_ref(const struct dse_qmat *w, const float *x, float *y, int64_t r0, int64_t r1) {
        const float *W = w->data; /* (rows, cols) */
        for (int64_t r = r0; r < r1; r++) {
                const float *row = W + r * w->cols;
                float acc = 0.0f;
                for (int64_t c = 0; c < w->cols; c++)
                        acc += row[c] * x[c];
                y[r] = acc;
        }
}

static void matvec_f16_ref(const struct dse_qmat *w, const float *x, float *y, int64_t r0, int64_t r1) {
        const uint16_t *W = w->data; /* (rows, cols) */
        for (int64_t r = r0; r < r1; r++) {
                const uint16_t *row = W + r * w->cols;
                float acc = 0.0f;
                for (int64_t c = 0; c < w->cols; c++)
                        acc += dse__kern_f16_to_f32(row[c]) * x[c];
                y[r] = acc;
        }
}

static void matvec_bf16_ref(const struct dse_qmat *w, const float *x, float *y, int64_t r0, int64_t r1) {
        const uint16_t *W = w->data; /* (rows, cols) */
        for (int64_t r = r0; r < r1; r++) {
                const uint16_t *row = W + r * w->cols;
                float acc = 0.0f;
                for (int64_t c = 0; c < w->cols; c++)
                        acc += dse__kern_bf16_to_f32(row[c]) * x[c];
                y[r] = acc;
        }
}

/* Each 128-column block of a row shares one scale: sum the block, then scale it. */
static void matvec_f8_ref(const struct dse_qmat *w, const float *x, float *y, int64_t r0, int64_t r1) {
        const uint8_t *W = w->data; /* (rows, cols) */
        const float *lut = dse__f8e4m3_table();
        for (int64_t r = r0; r < r1; r++) {
                const uint8_t *row = W + r * w->cols;
                const float *srow = w->scale + (r / DSE_F8_BLOCK) * w->n_groups; /* (n_groups) */
                float acc = 0.0f;
                for (int64_t c0 = 0; c0 < w->cols; c0 += DSE_F8_BLOCK) {
                        int64_t c1 = c0 + DSE_F8_BLOCK < w->cols ? c0 + DSE_F8_BLOCK : w->cols;
                        float part = 0.0f;
                        for (int64_t c = c0; c < c1; c++)
                                part += lut[row[c]] * x[c];
                        acc += part * srow[c0 / DSE_F8_BLOCK];
                }
                y[r] = acc;
        }
}

static void matvec_q8_ref(const struct dse_qmat *w, const float *x, float *y, int64_t r0, int64_t r1) {
        const int8_t *W = w->data; /* (rows, cols) */
        int64_t G = w->group_size;
        for (int64_t r = r0; r < r1; r++) {
                const int8_t *row = W + r * w->cols;
                const float *srow = w->scale + r * w->n_groups; /* (n_groups) */
                float acc = 0.0f;
                for (int64_t g = 0; g < w->n_groups; g++) {
                        int64_t c1 = (g + 1) * G < w->cols ? (g + 1) * G : w->cols;
                        float part = 0.0f;
                        for (int64_t c = g * G; c < c1; c++)
                                part += (float)row[c] * x[c];
                        acc += part * srow[g];
                }
                y[r] = acc;
        }
}

static void matvec_q4_ref(const struct dse_qmat *w, const float *x, float *y, int64_t r0, int64_t r1) {
        const uint8_t *W = w->data; /* the Q4 layout (model.h) */
        int64_t G = w->group_size;
        for (int64_t r = r0; r < r1; r++) {
                float acc = 0.0f;
                for (int64_t g = 0; g < w->n_groups; g++) {
                        int64_t c1 = (g + 1) * G < w->cols ? (g + 1) * G : w->cols, s = dse__q4_sidx(w->n_groups, r, g);
                        float z = (float)dse__q4_zero(w, s), part = 0.0f;
                        for (int64_t c = g * G; c < c1; c++)
                                part += ((float)dse__q4_get(W, w->cols, r, c) - z) * x[c];
                        acc += part * dse__q4_scale(w, s);
                }
                y[r] = acc;
        }
}

/* ---- n tokens at once ------------------------------------------------------------ */

static const dse_matvec_fn matvec_ref[DSE_DTYPE_COUNT] = {
        [DSE_DTYPE_F32] = matvec_f32_ref, [DSE_DTYPE_F16] = matvec_f16_ref,    [DSE_DTYPE_BF16] = matvec_bf16_ref,
        [DSE_DTYPE_F8_E4M3] = matvec_f8_ref, [DSE_DTYPE_Q8] = matvec_q8_ref, [DSE_DTYPE_Q4] = matvec_q4_ref,
};

/* The definition of matmul: one matvec per token. */
static void matmul_ref(const struct dse_qmat *w, const float *x, int64_t ldx, int64_t n, float *y, int64_t ldy,
                       int64_t r0, int64_t r1) {
        for (int64_t t = 0; t < n; t++)
                matvec_ref[w->dtype](w, x + t * ldx, y + t * ldy, r0, r1);
}

/* Each activation rounded to bf16, then multiplied as matvec_bf16_ref does: the products
 * of two bf16 values are exact in float32. */
void dse__kernels_ref_matmul_bf16act(const struct dse_qmat *w, const float *x, int64_t ldx, int64_t n, float *y,
                                     int64_t ldy, int64_t r0, int64_t r1) {
        const uint16_t *W = w->data; /* (rows, cols) */
        for (int64_t t = 0; t < n; t++)
                for (int64_t r = r0; r < r1; r++) {
                        const uint16_t *row = W + r * w->cols;
                        float acc = 0.0f;
                        for (int64_t c = 0; c < w->cols; c++)
                                acc += dse__kern_bf16_to_f32(row[c]) *
                                       dse__kern_bf16_to_f32(dse__kern_f32_to_bf16(x[t * ldx + c]));
                        y[t * ldy + r] = acc;
                }
}

/* ---- int8 activations ------------------------------------------------------------- */

static void quantize_xq_ref(const float *x, int64_t ldx, struct dse_xq *xq) {
        for (int64_t t = 0; t < xq->n; t++) {
                const float *xt = x + t * ldx;                         /* (cols) */
                int8_t *q = xq->q + t * xq->n_blocks * DSE_XQ_BLOCK;   /* (n_blocks * 32) */
                float *d = xq->d + t * xq->n_blocks;                   /* (n_blocks) */
                for (int64_t b = 0; b < xq->n_blocks; b++) {
                        int64_t c0 = b * DSE_XQ_BLOCK, c1 = c0 + DSE_XQ_BLOCK < xq->cols ? c0 + DSE_XQ_BLOCK : xq->cols;
                        float amax = 0.0f;
                        for (int64_t c = c0; c < c1; c++)
                                amax = fabsf(xt[c]) > amax ? fabsf(xt[c]) : amax;
                        float id = amax > 0.0f ? 127.0f / amax : 0.0f;
                        d[b] = dse__xq_scale(amax);
                        for (int64_t c = c0; c < c0 + DSE_XQ_BLOCK; c++)
                                q[c] = c < c1 ? (int8_t)nearbyintf(xt[c] * id) : 0;
                }
        }
}

/* Integer weight of W[r, c] before its group scale: q (Q8) or q - zero (Q4). */
static inline int32_t wq_at(const struct dse_qmat *w, int64_t r, int64_t c) {
        if (w->dtype == DSE_DTYPE_Q8)
                return ((const int8_t *)w->data)[r * w->cols + c];
        return dse__q4_get(w->data, w->cols, r, c) - dse__q4_zero(w, dse__q4_sidx(w->n_groups, r, c / w->group_size));
}

/* The scale of row r, group g of a Q8 or Q4 matrix. */
static inline float wscale_at(const struct dse_qmat *w, int64_t r, int64_t g) {
        return w->dtype == DSE_DTYPE_Q4 ? dse__q4_scale(w, dse__q4_sidx(w->n_groups, r, g)) : w->scale[r * w->n_groups + g];
}

/* Each 32-column activation block is cut at weight-group boundaries; each piece is an
 * exact integer dot product, scaled by the group's scale times the block's d. */
void dse__kernels_ref_matmul_xq(const struct dse_qmat *w, const struct dse_xq *xq, float *y, int64_t ldy,
                                int64_t r0, int64_t r1) {
        int64_t G = w->group_size;
        for (int64_t t = 0; t < xq->n; t++) {
                const int8_t *q = xq->q + t * xq->n_blocks * DSE_XQ_BLOCK; /* (n_blocks * 32) */
                const float *d = xq->d + t * xq->n_blocks;                 /* (n_blocks) */
                for (int64_t r = r0; r < r1; r++) {
                        float acc = 0.0f;
                        for (int64_t b = 0; b < xq->n_blocks; b++) {
                                int64_t c1 = (b + 1) * DSE_XQ_BLOCK < w->cols ? (b + 1) * DSE_XQ_BLOCK : w->cols;
                                for (int64_t c = b * DSE_XQ_BLOCK; c < c1;) {
                                        int64_t g = c / G, ce = (g + 1) * G < c1 ? (g + 1) * G : c1;
                                        int32_t isum = 0;
                                        for (; c < ce; c++)
                                                isum += wq_at(w, r, c) * q[c];
                                        acc += wscale_at(w, r, g) * d[b] * (float)isum;
                                }
                        }
                        y[t * ldy + r] = acc;
                }
        }
}

/* W[r, c] (0 for a format without weights). */
static float weight_at(const struct dse_qmat *w, int64_t r, int64_t c) {
        int64_t n = w->cols;
        switch (w->dtype) {
        case DSE_DTYPE_F32: return ((const float *)w->data)[r * n + c];
        case DSE_DTYPE_F16: return dse__kern_f16_to_f32(((const uint16_t *)w->data)[r * n + c]);
        case DSE_DTYPE_BF16: return dse__kern_bf16_to_f32(((const uint16_t *)w->data)[r * n + c]);
        case DSE_DTYPE_F8_E4M3:
                return dse__f8e4m3_table()[((const uint8_t *)w->data)[r * n + c]] *
                       w->scale[(r / DSE_F8_BLOCK) * w->n_groups + c / DSE_F8_BLOCK];
        case DSE_DTYPE_Q8:
                return (float)((const int8_t *)w->data)[r * n + c] * w->scale[r * w->n_groups + c / w->group_size];
        case DSE_DTYPE_Q4: {
                int64_t g = dse__q4_sidx(w->n_groups, r, c / w->group_size);
                return ((float)dse__q4_get(w->data, n, r, c) - (float)dse__q4_zero(w, g)) * dse__q4_scale(w, g);
        }
        default: return 0.0f;
        }
}

void dse__kernels_ref_dequant_row(const struct dse_qmat *w, int64_t r, float *out) {
        for (int64_t c = 0; c < w->cols; c++)
                out[c] = weight_at(w, r, c);
}

/* ---- vector helpers ------------------------------------------------------------- */

static float dot_ref(const float *a, const float *b, int64_t n) {
        float acc = 0.0f;
        for (int64_t i = 0; i < n; i++)
                acc += a[i] * b[i];
        return acc;
}

static void axpy_ref(float a, const float *x, float *y, int64_t n) {
        for (int64_t i = 0; i < n; i++)
                y[i] += a * x[i];
}

/* The twin of dequant_row then axpy_ref, row by row. */
static void axpy_rows_ref(const struct dse_qmat *w, int64_t r0, int64_t n, const float *a, float *y) {
        for (int64_t i = 0; i < n; i++)
                for (int64_t c = 0; c < w->cols; c++)
                        y[c] += a[i] * weight_at(w, r0 + i, c);
}

void dse__kernels_fma_axpy_rows(const struct dse_qmat *w, int64_t r0, int64_t n, const float *a, float *y) {
        for (int64_t i = 0; i < n; i++)
                for (int64_t c = 0; c < w->cols; c++)
                        y[c] = fmaf(a[i], weight_at(w, r0 + i, c), y[c]);
}

static void attn_scores_ref(const float *q, const float *k, int64_t ld, int64_t n, int64_t len, float scale,
                            float *scores) {
        for (int64_t t = 0; t < n; t++)
                scores[t] = scale * dot_ref(q, k + t * ld, len);
}

static void attn_accum_ref(const float *w, const float *v, int64_t ld, int64_t n, int64_t len, float *out) {
        for (int64_t t = 0; t < n; t++)
                axpy_ref(w[t], v + t * ld, out, len);
}

/* ---- attention over BF16/FP8/INT8 KV rows ---- */

static void attn_scores_bf16_ref(const float *q, const struct dse_kv_rows *k, int64_t off, int64_t n, int64_t len,
                                 float scale, float *scores) {
        for (int64_t t = 0; t < n; t++) {
                const uint16_t *row = (const uint16_t *)(k->rows + t * k->ld) + off;
                float acc = 0.0f;
                for (int64_t d = 0; d < len; d++)
                        acc += q[d] * dse__kern_bf16_to_f32(row[d]);
                scores[t] = scale * acc;
        }
}

static void attn_accum_bf16_ref(const float *w, const struct dse_kv_rows *v, int64_t off, int64_t n, int64_t len,
                                float *out) {
        for (int64_t t = 0; t < n; t++) {
                const uint16_t *row = (const uint16_t *)(v->rows + t * v->ld) + off;
                for (int64_t d = 0; d < len; d++)
                        out[d] += w[t] * dse__kern_bf16_to_f32(row[d]);
        }
}

/* Query by query, as attn_scores_bf16_ref and attn_accum_bf16_ref take them. */
static void attn_scores_group_bf16_ref(const float *q, int64_t ldq, int G, const struct dse_kv_rows *k, int64_t off,
                                       int64_t n, int64_t len, float scale, float *scores, int64_t lds) {
        for (int g = 0; g < G; g++)
                attn_scores_bf16_ref(q + g * ldq, k, off, n, len, scale, scores + g * lds);
}

static void attn_accum_group_bf16_ref(const float *w, int64_t ldw, int G, const struct dse_kv_rows *v, int64_t off,
                                      int64_t n, int64_t len, float *out, int64_t ldo) {
        for (int g = 0; g < G; g++)
                attn_accum_bf16_ref(w + g * ldw, v, off, n, len, out + g * ldo);
}

/* The query rounded to bf16 first; the products of two bf16 values are exact in float32. */
void dse__kernels_ref_attn_scores_group_bf16act(const float *q, int64_t ldq, int G, const struct dse_kv_rows *k,
                                                int64_t off, int64_t n, int64_t len, float scale, float *scores,
                                                int64_t lds) {
        for (int g = 0; g < G; g++)
                for (int64_t t = 0; t < n; t++) {
                        const uint16_t *row = (const uint16_t *)(k->rows + t * k->ld) + off;
                        float acc = 0.0f;
                        for (int64_t d = 0; d < len; d++)
                                acc += dse__kern_bf16_to_f32(dse__kern_f32_to_bf16(q[g * ldq + d])) *
                                       dse__kern_bf16_to_f32(row[d]);
                        scores[g * lds + t] = scale * acc;
                }
}

/* FP8 and INT8: each group's sum is scaled once, as the FP8 weights' blocks are. */
static inline float kv_elem(const uint8_t *row, int64_t d, int fp8, const float *lut) {
        return fp8 ? lut[row[d]] : (float)(int8_t)row[d];
}

static inline void attn_scores_scaled_ref(const float *q, const struct dse_kv_rows *k, int64_t off, int64_t n,
                                          int64_t len, float scale, float *scores, int fp8) {
        const float *lut = dse__f8e4m3_table();
        int64_t G = k->group;
        for (int64_t t = 0; t < n; t++) {
                const uint8_t *row = k->rows + t * k->ld;
                const float *sc = (const float *)(row + k->scale_off);
                float acc = 0.0f;
                for (int64_t g0 = off; g0 < off + len; g0 += G) {
                        float part = 0.0f;
                        for (int64_t d = g0; d < g0 + G; d++)
                                part += q[d - off] * kv_elem(row, d, fp8, lut);
                        acc += part * sc[g0 / G];
                }
                scores[t] = scale * acc;
        }
}

static inline void attn_accum_scaled_ref(const float *w, const struct dse_kv_rows *v, int64_t off, int64_t n,
                                         int64_t len, float *out, int fp8) {
        const float *lut = dse__f8e4m3_table();
        int64_t G = v->group;
        for (int64_t t = 0; t < n; t++) {
                const uint8_t *row = v->rows + t * v->ld;
                const float *sc = (const float *)(row + v->scale_off);
                for (int64_t g0 = off; g0 < off + len; g0 += G) {
                        float ws = w[t] * sc[g0 / G];
                        for (int64_t d = g0; d < g0 + G; d++)
                                out[d - off] += ws * kv_elem(row, d, fp8, lut);
                }
        }
}

void dse__kernels_ref_attn_scores_fp8(const float *q, const struct dse_kv_rows *k, int64_t off, int64_t n, int64_t len,
                                float scale, float *scores) {
        attn_scores_scaled_ref(q, k, off, n, len, scale, scores, 1);
}

void dse__kernels_ref_attn_scores_int8(const float *q, const struct dse_kv_rows *k, int64_t off, int64_t n, int64_t len,
                                 float scale, float *scores) {
        attn_scores_scaled_ref(q, k, off, n, len, scale, scores, 0);
}

void dse__kernels_ref_attn_accum_fp8(const float *w, const struct dse_kv_rows *v, int64_t off, int64_t n, int64_t len,
                               float *out) {
        attn_accum_scaled_ref(w, v, off, n, len, out, 1);
}

void dse__kernels_ref_attn_accum_int8(const float *w, const struct dse_kv_rows *v, int64_t off, int64_t n, int64_t len,
                                float *out) {
        attn_accum_scaled_ref(w, v, off, n, len, out, 0);
}

/* The squares summed in float64 and the mean rounded to float, as ggml's rms_norm does:
 * the mean is then exact to float whatever the order of the sum, so every level, and
 * llama.cpp, normalise by the same number. */
static void rmsnorm_ref(float *out, const float *x, const float *w, int64_t n, float eps) {
        double ss = 0.0;
        for (int64_t i = 0; i < n; i++)
                ss += (double)(x[i] * x[i]);
        float inv = 1.0f / sqrtf((float)(ss / (double)n) + eps);
        for (int64_t i = 0; i < n; i++)
                out[i] = w[i] * (x[i] * inv);
}

static void softmax_parts_ref(float *x, int64_t n, float *ret_max, float *ret_sum) {
        float max = x[0], sum = 0.0f;
        for (int64_t i = 1; i < n; i++)
                max = x[i] > max ? x[i] : max;
        for (int64_t i = 0; i < n; i++) {
                x[i] = expf(x[i] - max);
                sum += x[i];
        }
        *ret_max = max;
        *ret_sum = sum;
}

static void softmax_ref(float *x, int64_t n) {
        float max, sum;
        softmax_parts_ref(x, n, &max, &sum);
        for (int64_t i = 0; i < n; i++)
                x[i] /= sum;
}

static void swiglu_ref(float *gate, const float *up, int64_t n) {
        for (int64_t i = 0; i < n; i++)
                gate[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

void dse__kernels_fill_ref(struct dse_kernels *k) {
        memset(k, 0, sizeof *k);
        k->level = DSE_CPU_SCALAR;
        k->matvec[DSE_DTYPE_F32] = matvec_f32_ref;
        k->matvec[DSE_DTYPE_F16] = matvec_f16_ref;
        k->matvec[DSE_DTYPE_BF16] = matvec_bf16_ref;
        k->matvec[DSE_DTYPE_F8_E4M3] = matvec_f8_ref;
        k->matvec[DSE_DTYPE_Q8] = matvec_q8_ref;
        k->matvec[DSE_DTYPE_Q4] = matvec_q4_ref;
        for (int dt = DSE_DTYPE_F32; dt <= DSE_DTYPE_Q4; dt++)
                k->matmul[dt] = matmul_ref;
        k->quantize_xq = quantize_xq_ref;
        k->matmul_xq[DSE_DTYPE_Q8] = dse__kernels_ref_matmul_xq;
        k->matmul_xq[DSE_DTYPE_Q4] = dse__kernels_ref_matmul_xq;
        k->dequant_row = dse__kernels_ref_dequant_row;
        k->dot = dot_ref;
        k->axpy = axpy_ref;
        k->axpy_rows = axpy_rows_ref;
        k->attn_scores = attn_scores_ref;
        k->attn_accum = attn_accum_ref;
        k->attn_scores_kv[DSE_KV_BF16] = attn_scores_bf16_ref;
        k->attn_scores_kv[DSE_KV_FP8] = dse__kernels_ref_attn_scores_fp8;
        k->attn_scores_kv[DSE_KV_INT8] = dse__kernels_ref_attn_scores_int8;
        k->attn_accum_kv[DSE_KV_BF16] = attn_accum_bf16_ref;
        k->attn_accum_kv[DSE_KV_FP8] = dse__kernels_ref_attn_accum_fp8;
        k->attn_accum_kv[DSE_KV_INT8] = dse__kernels_ref_attn_accum_int8;
        k->attn_scores_group_bf16 = attn_scores_group_bf16_ref;
        k->attn_accum_group_bf16 = attn_accum_group_bf16_ref;
        k->rmsnorm = rmsnorm_ref;
        k->softmax = softmax_ref;
        k->softmax_parts = softmax_parts_ref;
        k->swiglu = swiglu_ref;
}
