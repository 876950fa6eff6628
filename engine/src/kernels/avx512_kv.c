/* AVX-512 F+BW attention of G queries over one run of BF16 KV rows (the query heads of a
 * GQA KV head; compiled with -mavx512f -mavx512bw -mavx512vl -mfma and nothing more):
 * what attn_scores_group_bf16_ref and attn_accum_group_bf16_ref compute, 16 elements at a
 * time with float32 FMA accumulation; only the summation order differs. Each 16-element
 * piece of a row is widened to float32 once (a zero-extension and a shift) for every
 * query of a tile, the last piece of a row goes through a mask (no scalar tail), and a
 * score's 16 partial sums are reduced with those of the other rows and queries of its
 * step in one transposing tree, 16 sums a tree, instead of one horizontal sum each. A
 * query's operations are the same whatever tile and step it falls in, so its result
 * does not depend on G nor on the other queries. */
#include <immintrin.h>
#include <string.h>

#include "kernels/avx512_blocks.h"
#include "kernels/avx512_hsum16.h"
#include "kernels/kernels.h"

#define GQ 8 /* queries of a tile */

static inline __m512 load_bf16x16(const uint16_t *p, __mmask16 m) {
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}

/* One 16-element step at d (lanes past m zero) of NR rows for GT queries: each row's
 * piece widened once, query g's row i summed in a[g * NR + i]. */
static inline __attribute__((always_inline)) void scores_step(const float *q, int64_t ldq, const uint16_t *const *row,
                                                              int64_t d, __mmask16 m, __m512 *a, const int GT,
                                                              const int NR) {
        __m512 x[16];
        UNROLL for (int i = 0; i < NR; i++) x[i] = load_bf16x16(row[i] + d, m);
        UNROLL for (int g = 0; g < GT; g++) {
                __m512 qv = _mm512_maskz_loadu_ps(m, q + g * ldq + d);
                UNROLL for (int i = 0; i < NR; i++) a[g * NR + i] = _mm512_fmadd_ps(x[i], qv, a[g * NR + i]);
        }
}

/* Scores of NR rows from t for a tile of GT queries (NR * GT <= 16), the NR * GT sums
 * reduced in one tree; a query's NR scores are adjacent lanes. */
static inline __attribute__((always_inline)) void scores_group_rows(const float *q, int64_t ldq,
                                                                    const struct dse_kv_rows *k, int64_t off,
                                                                    int64_t t, int64_t len, float scale,
                                                                    float *scores, int64_t lds, const int GT,
                                                                    const int NR) {
        const uint16_t *row[16];
        __m512 a[16];
        UNROLL for (int j = 0; j < 16; j++) a[j] = _mm512_setzero_ps();
        UNROLL for (int i = 0; i < NR; i++) row[i] = (const uint16_t *)(k->rows + (t + i) * k->ld) + off;
        int64_t d = 0;
        for (; d + 16 <= len; d += 16)
                scores_step(q, ldq, row, d, 0xffff, a, GT, NR);
        if (d < len)
                scores_step(q, ldq, row, d, mask16(len - d), a, GT, NR);
        float sum[16];
        _mm512_storeu_ps(sum, _mm512_mul_ps(_mm512_set1_ps(scale), hsum16x16(a)));
        UNROLL for (int g = 0; g < GT; g++) memcpy(scores + g * lds + t, sum + g * NR, (size_t)NR * sizeof(float));
}

static inline __attribute__((always_inline)) void scores_group_tile(const float *q, int64_t ldq,
                                                                    const struct dse_kv_rows *k, int64_t off,
                                                                    int64_t n, int64_t len, float scale,
                                                                    float *scores, int64_t lds, const int GT) {
        const int NR = GT <= 2 ? 8 : GT <= 4 ? 4 : 2;
        int64_t t = 0;
        for (; t + NR <= n; t += NR)
                scores_group_rows(q, ldq, k, off, t, len, scale, scores, lds, GT, NR);
        for (; t < n; t++)
                scores_group_rows(q, ldq, k, off, t, len, scale, scores, lds, GT, 1);
}

static void attn_scores_group_bf16_avx512(const float *q, int64_t ldq, int G, const struct dse_kv_rows *k,
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
                case 6: scores_group_tile(qg, ldq, k, off, n, len, scale, sg, lds, 6); break;
                case 7: scores_group_tile(qg, ldq, k, off, n, len, scale, sg, lds, 7); break;
                default: scores_group_tile(qg, ldq, k, off, n, len, scale, sg, lds, 8); break;
                }
        }
}

/* Elements [d0, d0 + 16C) of every row (masked past len) for a tile of GT queries, their
 * sums in registers over the run; each row's piece widened once for the tile. */
static inline __attribute__((always_inline)) void accum_group_piece(const float *w, int64_t ldw,
                                                                    const struct dse_kv_rows *v, int64_t off,
                                                                    int64_t n, int64_t len, float *out,
                                                                    int64_t ldo, int64_t d0, const int GT,
                                                                    const int C) {
        __m512 acc[GQ][4];
        __mmask16 m[4];
        UNROLL for (int c = 0; c < C; c++) m[c] = mask16(len - d0 - 16 * c);
        UNROLL for (int g = 0; g < GT; g++) UNROLL for (int c = 0; c < C; c++) acc[g][c] =
                _mm512_maskz_loadu_ps(m[c], out + g * ldo + d0 + 16 * c);
        for (int64_t t = 0; t < n; t++) {
                const uint16_t *row = (const uint16_t *)(v->rows + t * v->ld) + off + d0;
                __m512 x[4];
                UNROLL for (int c = 0; c < C; c++) x[c] = load_bf16x16(row + 16 * c, m[c]);
                UNROLL for (int g = 0; g < GT; g++) {
                        __m512 wv = _mm512_set1_ps(w[g * ldw + t]);
                        UNROLL for (int c = 0; c < C; c++) acc[g][c] = _mm512_fmadd_ps(wv, x[c], acc[g][c]);
                }
        }
        UNROLL for (int g = 0; g < GT; g++) UNROLL for (int c = 0; c < C; c++)
                _mm512_mask_storeu_ps(out + g * ldo + d0 + 16 * c, m[c], acc[g][c]);
}

/* Pieces of up to CM vectors (as many accumulators as the registers hold beside the
 * widened row), the last one as short as the length leaves. */
static inline __attribute__((always_inline)) void accum_group_tile(const float *w, int64_t ldw,
                                                                   const struct dse_kv_rows *v, int64_t off,
                                                                   int64_t n, int64_t len, float *out, int64_t ldo,
                                                                   const int GT) {
        const int CM = GT <= 6 ? 4 : 3;
        for (int64_t d0 = 0; d0 < len; d0 += 16 * CM) {
                int64_t left = (len - d0 + 15) / 16;
                switch (left < CM ? left : CM) {
                case 1: accum_group_piece(w, ldw, v, off, n, len, out, ldo, d0, GT, 1); break;
                case 2: accum_group_piece(w, ldw, v, off, n, len, out, ldo, d0, GT, 2); break;
                case 3: accum_group_piece(w, ldw, v, off, n, len, out, ldo, d0, GT, 3); break;
                default: accum_group_piece(w, ldw, v, off, n, len, out, ldo, d0, GT, CM); break;
                }
        }
}

static void attn_accum_group_bf16_avx512(const float *w, int64_t ldw, int G, const struct dse_kv_rows *v,
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
                case 6: accum_group_tile(wg, ldw, v, off, n, len, og, ldo, 6); break;
                case 7: accum_group_tile(wg, ldw, v, off, n, len, og, ldo, 7); break;
                default: accum_group_tile(wg, ldw, v, off, n, len, og, ldo, 8); break;
                }
        }
}

void dse__kernels_fill_avx512_kv(struct dse_kernels *k) {
        k->attn_scores_group_bf16 = attn_scores_group_bf16_avx512;
        k->attn_accum_group_bf16 = attn_accum_group_bf16_avx512;
}
