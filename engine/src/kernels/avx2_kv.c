/* AVX2 + FMA attention over KV rows stored as BF16, FP8 (e4m3) or INT8 (compiled with
 * -mavx2 -mfma -mf16c): each routine computes what its `_ref` twin in ref.c computes, 8
 * elements at a time with float32 FMA accumulation, converting on load (bf16: a widen
 * and a shift, shared by every query of a group); only the summation order differs.
 * FP8 and INT8 rows whose scale groups are not whole multiples of 8 elements are left to
 * the reference twins. */
#include <immintrin.h>

#include "kernels/avx2_loads.h"
#include "kernels/kernels.h"

#define UNROLL _Pragma("GCC unroll 8")

static void attn_scores_bf16_avx2(const float *q, const struct dse_kv_rows *k, int64_t off, int64_t n, int64_t len,
                                  float scale, float *scores) {
        for (int64_t t = 0; t < n; t++) {
                const uint16_t *row = (const uint16_t *)(k->rows + t * k->ld) + off;
                __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
                int64_t d = 0;
                for (; d + 16 <= len; d += 16) {
                        a0 = _mm256_fmadd_ps(load_bf16x8(row + d), _mm256_loadu_ps(q + d), a0);
                        a1 = _mm256_fmadd_ps(load_bf16x8(row + d + 8), _mm256_loadu_ps(q + d + 8), a1);
                }
                for (; d + 8 <= len; d += 8)
                        a0 = _mm256_fmadd_ps(load_bf16x8(row + d), _mm256_loadu_ps(q + d), a0);
                float acc = hsum8(_mm256_add_ps(a0, a1));
                for (; d < len; d++)
                        acc += q[d] * dse__kern_bf16_to_f32(row[d]);
                scores[t] = scale * acc;
        }
}

/* Elements [d0, d0 + 8C) of each row of the run, out kept in registers over all n rows;
 * ws(t, c) is the weight of row t's 8 elements from d0 + 8c. */
#define ACCUM_PIECE(LOAD, WS)                                                                                   \
        do {                                                                                                    \
                __m256 acc[8];                                                                                  \
                UNROLL for (int c = 0; c < C; c++) acc[c] = _mm256_loadu_ps(out + d0 + 8 * c);                 \
                for (int64_t t = 0; t < n; t++) {                                                               \
                        const uint8_t *row = v->rows + t * v->ld;                                               \
                        UNROLL for (int c = 0; c < C; c++) acc[c] =                                             \
                                _mm256_fmadd_ps(_mm256_set1_ps(WS), LOAD(row, off + d0 + 8 * c), acc[c]);       \
                }                                                                                               \
                UNROLL for (int c = 0; c < C; c++) _mm256_storeu_ps(out + d0 + 8 * c, acc[c]);                  \
        } while (0)

#define LOAD_BF16(row, e) load_bf16x8((const uint16_t *)(row) + (e))
#define LOAD_I8(row, e) load_i8x8((const int8_t *)(row) + (e))
#define LOAD_F8(row, e) load_f8x8((row) + (e), lut)
#define SCALE(row, e) (((const float *)((row) + v->scale_off))[(e) / v->group])

static inline __attribute__((always_inline)) void accum_bf16_piece(const float *w, const struct dse_kv_rows *v,
                                                                   int64_t off, int64_t n, float *out, int64_t d0,
                                                                   const int C) {
        ACCUM_PIECE(LOAD_BF16, w[t]);
}

static inline __attribute__((always_inline)) void accum_i8_piece(const float *w, const struct dse_kv_rows *v,
                                                                 int64_t off, int64_t n, float *out, int64_t d0,
                                                                 const int C) {
        ACCUM_PIECE(LOAD_I8, w[t] * SCALE(row, off + d0 + 8 * c));
}

static inline __attribute__((always_inline)) void accum_f8_piece(const float *w, const struct dse_kv_rows *v,
                                                                 int64_t off, int64_t n, float *out, int64_t d0,
                                                                 const int C, const float *lut) {
        ACCUM_PIECE(LOAD_F8, w[t] * SCALE(row, off + d0 + 8 * c));
}

/* Pieces of 64 elements, then one of the remaining whole 8s; returns where the columns
 * no piece covered begin. */
#define ACCUM_PIECES(PIECE, ...)                                                                                \
        do {                                                                                                    \
                for (d0 = 0; d0 + 64 <= len; d0 += 64)                                                          \
                        PIECE(w, v, off, n, out, d0, 8, ##__VA_ARGS__);                                         \
                switch ((len - d0) / 8) {                                                                       \
                case 1: PIECE(w, v, off, n, out, d0, 1, ##__VA_ARGS__); break;                                  \
                case 2: PIECE(w, v, off, n, out, d0, 2, ##__VA_ARGS__); break;                                  \
                case 3: PIECE(w, v, off, n, out, d0, 3, ##__VA_ARGS__); break;                                  \
                case 4: PIECE(w, v, off, n, out, d0, 4, ##__VA_ARGS__); break;                                  \
                case 5: PIECE(w, v, off, n, out, d0, 5, ##__VA_ARGS__); break;                                  \
                case 6: PIECE(w, v, off, n, out, d0, 6, ##__VA_ARGS__); break;                                  \
                case 7: PIECE(w, v, off, n, out, d0, 7, ##__VA_ARGS__); break;                                  \
                default: break;                                                                                 \
                }                                                                                               \
                d0 += (len - d0) / 8 * 8;                                                                       \
        } while (0)

static void attn_accum_bf16_avx2(const float *w, const struct dse_kv_rows *v, int64_t off, int64_t n, int64_t len,
                                 float *out) {
        int64_t d0;
        ACCUM_PIECES(accum_bf16_piece);
        for (int64_t d = d0; d < len; d++) /* the last len % 8 elements */
                for (int64_t t = 0; t < n; t++)
                        out[d] += w[t] * dse__kern_bf16_to_f32(((const uint16_t *)(v->rows + t * v->ld))[off + d]);
}

static void attn_accum_int8_avx2(const float *w, const struct dse_kv_rows *v, int64_t off, int64_t n, int64_t len,
                                 float *out) {
        if (v->group % 8) {
                dse__kernels_ref_attn_accum_int8(w, v, off, n, len, out);
                return;
        }
        int64_t d0;
        ACCUM_PIECES(accum_i8_piece);
}

static void attn_accum_fp8_avx2(const float *w, const struct dse_kv_rows *v, int64_t off, int64_t n, int64_t len,
                                float *out) {
        if (v->group % 8) {
                dse__kernels_ref_attn_accum_fp8(w, v, off, n, len, out);
                return;
        }
        const float *lut = dse__f8e4m3_table();
        int64_t d0;
        ACCUM_PIECES(accum_f8_piece, lut);
}

/* Per row: each group's products in one vector, scaled into the row's total with one
 * FMA, one horizontal sum per row. */
static inline __attribute__((always_inline)) void scores_scaled(const float *q, const struct dse_kv_rows *k,
                                                                int64_t off, int64_t n, int64_t len, float scale,
                                                                float *scores, int fp8) {
        const float *lut = dse__f8e4m3_table();
        int64_t G = k->group;
        for (int64_t t = 0; t < n; t++) {
                const uint8_t *row = k->rows + t * k->ld;
                const float *sc = (const float *)(row + k->scale_off);
                __m256 total = _mm256_setzero_ps();
                for (int64_t g0 = off; g0 < off + len; g0 += G) {
                        __m256 a = _mm256_setzero_ps();
                        for (int64_t d = g0; d < g0 + G; d += 8)
                                a = _mm256_fmadd_ps(fp8 ? load_f8x8(row + d, lut) : load_i8x8((const int8_t *)row + d),
                                                    _mm256_loadu_ps(q + d - off), a);
                        total = _mm256_fmadd_ps(a, _mm256_set1_ps(sc[g0 / G]), total);
                }
                scores[t] = scale * hsum8(total);
        }
}

static void attn_scores_int8_avx2(const float *q, const struct dse_kv_rows *k, int64_t off, int64_t n, int64_t len,
                                  float scale, float *scores) {
        if (k->group % 8)
                dse__kernels_ref_attn_scores_int8(q, k, off, n, len, scale, scores);
        else
                scores_scaled(q, k, off, n, len, scale, scores, 0);
}

static void attn_scores_fp8_avx2(const float *q, const struct dse_kv_rows *k, int64_t off, int64_t n, int64_t len,
                                 float scale, float *scores) {
        if (k->group % 8)
                dse__kernels_ref_attn_scores_fp8(q, k, off, n, len, scale, scores);
        else
                scores_scaled(q, k, off, n, len, scale, scores, 1);
}

/* ---- G queries sharing BF16 rows (GQA): tiles of up to GQ queries ---- */

#define GQ 6

/* NR rows from t for a tile of GT queries: each 8-element piece of a row widened once for
 * the tile; a row's GT sums reduced together. A query's score is the same whichever tile
 * and row pairing it falls in. */
static inline __attribute__((always_inline)) void scores_group_rows(const float *q, int64_t ldq,
                                                                    const struct dse_kv_rows *k, int64_t off,
                                                                    int64_t t, int64_t len, float scale,
                                                                    float *scores, int64_t lds, const int GT,
                                                                    const int NR) {
        const uint16_t *row[2];
        __m256 a[2][8];
        UNROLL for (int i = 0; i < NR; i++) {
                row[i] = (const uint16_t *)(k->rows + (t + i) * k->ld) + off;
                UNROLL for (int g = 0; g < 8; g++) a[i][g] = _mm256_setzero_ps();
        }
        int64_t len8 = len / 8 * 8;
        for (int64_t d = 0; d < len8; d += 8) {
                __m256 x[2];
                UNROLL for (int i = 0; i < NR; i++) x[i] = load_bf16x8(row[i] + d);
                UNROLL for (int g = 0; g < GT; g++) {
                        __m256 qv = _mm256_loadu_ps(q + g * ldq + d);
                        UNROLL for (int i = 0; i < NR; i++) a[i][g] = _mm256_fmadd_ps(x[i], qv, a[i][g]);
                }
        }
        UNROLL for (int i = 0; i < NR; i++) {
                float sum[8];
                _mm256_storeu_ps(sum, hsum8x8(a[i]));
                for (int g = 0; g < GT; g++) {
                        float acc = sum[g];
                        for (int64_t d = len8; d < len; d++)
                                acc += q[g * ldq + d] * dse__kern_bf16_to_f32(row[i][d]);
                        scores[g * lds + t + i] = scale * acc;
                }
        }
}

static inline __attribute__((always_inline)) void scores_group_tile(const float *q, int64_t ldq,
                                                                    const struct dse_kv_rows *k, int64_t off,
                                                                    int64_t n, int64_t len, float scale,
                                                                    float *scores, int64_t lds, const int GT) {
        int64_t t = 0;
        for (; t + 2 <= n; t += 2)
                scores_group_rows(q, ldq, k, off, t, len, scale, scores, lds, GT, 2);
        if (t < n)
                scores_group_rows(q, ldq, k, off, t, len, scale, scores, lds, GT, 1);
}

static void attn_scores_group_bf16_avx2(const float *q, int64_t ldq, int G, const struct dse_kv_rows *k,
                                        int64_t off, int64_t n, int64_t len, float scale, float *scores,
                                        int64_t lds) {
        for (int g0 = 0; g0 < G; g0 += GQ) {
                const float *qg = q + g0 * ldq;
                float *sg = scores + g0 * lds;
                switch (G - g0 < GQ ? G - g0 : GQ) {
                case 1: scores_group_tile(qg, ldq, k, off, n, len, scale, sg, lds, 1); break;
                case 2: scores_group_tile(qg, ldq, k, off, n, len, scale, sg, lds, 2); break;
                case 3: scores_group_tile(qg, ldq, k, off, n, len, scale, sg, lds, 3); break;
                case 4: scores_group_tile(qg, ldq, k, off, n, len, scale, sg, lds, 4); break;
                case 5: scores_group_tile(qg, ldq, k, off, n, len, scale, sg, lds, 5); break;
                default: scores_group_tile(qg, ldq, k, off, n, len, scale, sg, lds, 6); break;
                }
        }
}

/* Elements [d0, d0 + 8C) of every row for a tile of GT queries, their sums in registers
 * over the run; each row's piece widened once for the tile. */
static inline __attribute__((always_inline)) void accum_group_piece(const float *w, int64_t ldw,
                                                                    const struct dse_kv_rows *v, int64_t off,
                                                                    int64_t n, float *out, int64_t ldo, int64_t d0,
                                                                    const int GT, const int C) {
        __m256 acc[GQ][2];
        UNROLL for (int g = 0; g < GT; g++) UNROLL for (int c = 0; c < C; c++) acc[g][c] =
                _mm256_loadu_ps(out + g * ldo + d0 + 8 * c);
        for (int64_t t = 0; t < n; t++) {
                const uint16_t *row = (const uint16_t *)(v->rows + t * v->ld) + off + d0;
                __m256 x[2];
                UNROLL for (int c = 0; c < C; c++) x[c] = load_bf16x8(row + 8 * c);
                UNROLL for (int g = 0; g < GT; g++) {
                        __m256 wv = _mm256_broadcast_ss(w + g * ldw + t);
                        UNROLL for (int c = 0; c < C; c++) acc[g][c] = _mm256_fmadd_ps(wv, x[c], acc[g][c]);
                }
        }
        UNROLL for (int g = 0; g < GT; g++) UNROLL for (int c = 0; c < C; c++)
                _mm256_storeu_ps(out + g * ldo + d0 + 8 * c, acc[g][c]);
}

static inline __attribute__((always_inline)) void accum_group_tile(const float *w, int64_t ldw,
                                                                   const struct dse_kv_rows *v, int64_t off,
                                                                   int64_t n, int64_t len, float *out, int64_t ldo,
                                                                   const int GT) {
        int64_t d0 = 0;
        for (; d0 + 16 <= len; d0 += 16)
                accum_group_piece(w, ldw, v, off, n, out, ldo, d0, GT, 2);
        if (d0 + 8 <= len) {
                accum_group_piece(w, ldw, v, off, n, out, ldo, d0, GT, 1);
                d0 += 8;
        }
        for (int64_t d = d0; d < len; d++) /* the last len % 8 elements */
                for (int g = 0; g < GT; g++)
                        for (int64_t t = 0; t < n; t++)
                                out[g * ldo + d] +=
                                        w[g * ldw + t] * dse__kern_bf16_to_f32(((const uint16_t *)(v->rows + t * v->ld))[off + d]);
}

static void attn_accum_group_bf16_avx2(const float *w, int64_t ldw, int G, const struct dse_kv_rows *v,
                                       int64_t off, int64_t n, int64_t len, float *out, int64_t ldo) {
        for (int g0 = 0; g0 < G; g0 += GQ) {
                const float *wg = w + g0 * ldw;
                float *og = out + g0 * ldo;
                switch (G - g0 < GQ ? G - g0 : GQ) {
                case 1: accum_group_tile(wg, ldw, v, off, n, len, og, ldo, 1); break;
                case 2: accum_group_tile(wg, ldw, v, off, n, len, og, ldo, 2); break;
                case 3: accum_group_tile(wg, ldw, v, off, n, len, og, ldo, 3); break;
                case 4: accum_group_tile(wg, ldw, v, off, n, len, og, ldo, 4); break;
                case 5: accum_group_tile(wg, ldw, v, off, n, len, og, ldo, 5); break;
                default: accum_group_tile(wg, ldw, v, off, n, len, og, ldo, 6); break;
                }
        }
}

void dse__kernels_fill_avx2_kv(struct dse_kernels *k) {
        k->attn_scores_kv[DSE_KV_BF16] = attn_scores_bf16_avx2;
        k->attn_scores_kv[DSE_KV_FP8] = attn_scores_fp8_avx2;
        k->attn_scores_kv[DSE_KV_INT8] = attn_scores_int8_avx2;
        k->attn_accum_kv[DSE_KV_BF16] = attn_accum_bf16_avx2;
        k->attn_accum_kv[DSE_KV_FP8] = attn_accum_fp8_avx2;
        k->attn_accum_kv[DSE_KV_INT8] = attn_accum_int8_avx2;
        k->attn_scores_group_bf16 = attn_scores_group_bf16_avx2;
        k->attn_accum_group_bf16 = attn_accum_group_bf16_avx2;
}
