/* AVX-512 BF16 scores of G queries over one run of BF16 KV rows on vdpbf16ps
 * (attn_scores_group_bf16act): the queries rounded to bf16 once per call, nearest even,
 * then a pair of exact bf16 products per lane and instruction, float32 accumulation;
 * only the summation order differs from the _ref twin in ref.c. The weighted rows stay
 * on float32 FMA (avx512_kv.c): rounding the softmax weights would round a chunk's
 * weights of the split attention differently from the whole softmax's, and the two
 * forms must agree to float32 rounding. This file is compiled with -mavx512bf16 beside
 * the F+BW+VL flags and not with -mavx512vnni; kernels.c installs its entries only when
 * the CPU reports AVX512_BF16. A query's operations are the same whatever tile and step
 * it falls in, so its result does not depend on G nor on the other queries. */
#include <immintrin.h>

#include "kernels/avx512_blocks.h"
#include "kernels/avx512_hsum16.h"
#include "kernels/kernels.h"

#define GQ 8    /* queries of a tile */
#define QC 1024 /* elements of a query rounded at once (any MLA or GQA head of the presets) */

/* x (n floats) as n bf16, nearest even, zero up to the next multiple of 32. */
static inline void round_bf16(const float *x, int64_t n, uint16_t *xb) {
        for (int64_t i = 0; i < n; i += 32) {
                __m512bh v = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(mask16(n - i - 16), x + i + 16),
                                                 _mm512_maskz_loadu_ps(mask16(n - i), x + i));
                _mm512_storeu_si512(xb + i, (__m512i)v);
        }
}

/* Elements [0, len) of NR rows from t (rows already at the slice) against a tile of GT
 * rounded queries (qb: (GT, QC)): 32 elements a step, one vdpbf16ps per row and query,
 * the NR * GT sums reduced in one tree and added to the slices before. */
static inline __attribute__((always_inline)) void scores_rows(const uint16_t *qb, const struct dse_kv_rows *k,
                                                              int64_t off, int64_t t, int64_t len, float scale,
                                                              float *scores, int64_t lds, int first, int last,
                                                              const int GT, const int NR) {
        const uint16_t *row[16];
        __m512 a[16];
        UNROLL for (int j = 0; j < 16; j++) a[j] = _mm512_setzero_ps();
        UNROLL for (int i = 0; i < NR; i++) row[i] = (const uint16_t *)(k->rows + (t + i) * k->ld) + off;
        for (int64_t d = 0; d < len; d += 32) {
                __mmask32 m = mask32(len - d);
                __m512bh x[16];
                UNROLL for (int i = 0; i < NR; i++) x[i] = (__m512bh)_mm512_maskz_loadu_epi16(m, row[i] + d);
                UNROLL for (int g = 0; g < GT; g++) {
                        __m512bh qv = (__m512bh)_mm512_loadu_si512(qb + g * QC + d);
                        UNROLL for (int i = 0; i < NR; i++) a[i * GT + g] = _mm512_dpbf16_ps(a[i * GT + g], x[i], qv);
                }
        }
        float sum[16];
        _mm512_storeu_ps(sum, hsum16x16(a));
        UNROLL for (int i = 0; i < NR; i++) UNROLL for (int g = 0; g < GT; g++) {
                float *s = scores + g * lds + t + i, v = first ? sum[i * GT + g] : *s + sum[i * GT + g];
                *s = last ? scale * v : v;
        }
}

static inline __attribute__((always_inline)) void scores_tile(const float *q, int64_t ldq, const struct dse_kv_rows *k,
                                                              int64_t off, int64_t n, int64_t len, float scale,
                                                              float *scores, int64_t lds, const int GT) {
        const int NR = GT <= 2 ? 8 : GT <= 4 ? 4 : 2; /* NR * GT <= 16: one tree a step */
        _Alignas(64) uint16_t qb[GQ * QC];
        for (int64_t s0 = 0; s0 < len; s0 += QC) {
                int64_t sl = len - s0 < QC ? len - s0 : QC;
                int first = s0 == 0, last = s0 + sl == len;
                for (int g = 0; g < GT; g++)
                        round_bf16(q + g * ldq + s0, sl, qb + g * QC);
                int64_t t = 0;
                for (; t + NR <= n; t += NR)
                        scores_rows(qb, k, off + s0, t, sl, scale, scores, lds, first, last, GT, NR);
                for (; t < n; t++)
                        scores_rows(qb, k, off + s0, t, sl, scale, scores, lds, first, last, GT, 1);
        }
}

static void attn_scores_group_bf16act_avx512(const float *q, int64_t ldq, int G, const struct dse_kv_rows *k,
                                             int64_t off, int64_t n, int64_t len, float scale, float *scores,
                                             int64_t lds) {
        for (int g0 = 0; g0 < G; g0 += GQ) {
                const float *qg = q + g0 * ldq;
                float *sg = scores + g0 * lds;
                switch (G - g0 < GQ ? G - g0 : GQ) {
                case 1: scores_tile(qg, ldq, k, off, n, len, scale, sg, lds, 1); break;
                case 2: scores_tile(qg, ldq, k, off, n, len, scale, sg, lds, 2); break;
                case 3: scores_tile(qg, ldq, k, off, n, len, scale, sg, lds, 3); break;
                case 4: scores_tile(qg, ldq, k, off, n, len, scale, sg, lds, 4); break;
                case 5: scores_tile(qg, ldq, k, off, n, len, scale, sg, lds, 5); break;
                case 6: scores_tile(qg, ldq, k, off, n, len, scale, sg, lds, 6); break;
                case 7: scores_tile(qg, ldq, k, off, n, len, scale, sg, lds, 7); break;
                default: scores_tile(qg, ldq, k, off, n, len, scale, sg, lds, 8); break;
                }
        }
}

void dse__kernels_fill_avx512_bf16_kv(struct dse_kernels *k) {
        k->attn_scores_group_bf16act = attn_scores_group_bf16act_avx512;
}
