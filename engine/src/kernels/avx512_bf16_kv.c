/* AVX-512 BF16 scores of G queries over one run of BF16 KV rows on vdpbf16ps
 * (attn_scores_group_bf16act): the queries rounded to bf16 once per call, nearest even,
 * then a pair of exact bf16 products per lane and instruction, float32 accumulation;
 * only the summation order differs from the _ref twin in ref.c. The weighted rows stay
 * on float32 FMA (avx512_kv.c): rounding the softmax weights would round a chunk's
 * weights of the split attention differently from the whole softmax's, and the two
 * forms must agree to float32 rounding. Queries longer than QC elements are left to the
 * reference twin. This file is compiled with -mavx512bf16 beside
 * the F+BW+VL flags and not with -mavx512vnni; kernels.c installs its entries only when
 * the CPU reports AVX512_BF16. A query's operations are the same whatever tile and step
 * it falls in, so its result does not depend on G nor on the other queries. */
#include <immintrin.h>
#include <string.h>

#include "kernels/avx512_blocks.h"
#include "kernels/avx512_hsum16.h"
#include "kernels/group_tiles.h"
#include "kernels/kernels.h"

#define GQ 8    /* queries of a tile (DSE_SCORES_TILES_8) */
#define QC 1024 /* elements of a query at most (any MLA or GQA head of the presets); longer ones go to the twin */

/* x (n floats) as n bf16, nearest even, zero up to the next multiple of 32. */
static inline void round_bf16(const float *x, int64_t n, uint16_t *xb) {
        for (int64_t i = 0; i < n; i += 32) {
                __m512bh v = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(mask16(n - i - 16), x + i + 16),
                                                 _mm512_maskz_loadu_ps(mask16(n - i), x + i));
                _mm512_storeu_si512(xb + i, (__m512i)v);
        }
}

/* One 32-element step at d (lanes past m zero) of NR rows against GT rounded queries:
 * one vdpbf16ps per row and query, query g's row i summed in a[g * NR + i]. */
static inline __attribute__((always_inline)) void scores_step(const uint16_t *qb, const uint16_t *const *row,
                                                              int64_t d, __mmask32 m, __m512 *a, const int GT,
                                                              const int NR) {
        __m512bh x[16];
        UNROLL for (int i = 0; i < NR; i++) x[i] = (__m512bh)_mm512_maskz_loadu_epi16(m, row[i] + d);
        UNROLL for (int g = 0; g < GT; g++) {
                __m512bh qv = (__m512bh)_mm512_loadu_si512(qb + g * QC + d);
                UNROLL for (int i = 0; i < NR; i++) a[g * NR + i] = _mm512_dpbf16_ps(a[g * NR + i], x[i], qv);
        }
}

/* Elements [0, len) of NR rows from t against a tile of GT rounded queries (qb: (GT,
 * QC)), the NR * GT sums reduced in one tree; a query's NR scores are adjacent lanes. */
static inline __attribute__((always_inline)) void scores_rows(const uint16_t *qb, const struct dse_kv_rows *k,
                                                              int64_t off, int64_t t, int64_t len, float scale,
                                                              float *scores, int64_t lds, const int GT,
                                                              const int NR) {
        const uint16_t *row[16];
        __m512 a[16];
        UNROLL for (int j = 0; j < 16; j++) a[j] = _mm512_setzero_ps();
        UNROLL for (int i = 0; i < NR; i++) row[i] = (const uint16_t *)(k->rows + (t + i) * k->ld) + off;
        int64_t d = 0;
        for (; d + 32 <= len; d += 32)
                scores_step(qb, row, d, ~(__mmask32)0, a, GT, NR);
        if (d < len)
                scores_step(qb, row, d, mask32(len - d), a, GT, NR);
        float sum[16];
        _mm512_storeu_ps(sum, _mm512_mul_ps(_mm512_set1_ps(scale), hsum16x16(a)));
        UNROLL for (int g = 0; g < GT; g++) memcpy(scores + g * lds + t, sum + g * NR, (size_t)NR * sizeof(float));
}

static inline __attribute__((always_inline)) void scores_tile(const float *q, int64_t ldq, const struct dse_kv_rows *k,
                                                              int64_t off, int64_t n, int64_t len, float scale,
                                                              float *scores, int64_t lds, const int GT) {
        const int NR = GT <= 2 ? 8 : GT <= 4 ? 4 : 2; /* NR * GT <= 16: one tree a step */
        _Alignas(64) uint16_t qb[GQ * QC];
        for (int g = 0; g < GT; g++)
                round_bf16(q + g * ldq, len, qb + g * QC);
        int64_t t = 0;
        for (; t + NR <= n; t += NR)
                scores_rows(qb, k, off, t, len, scale, scores, lds, GT, NR);
        for (; t < n; t++)
                scores_rows(qb, k, off, t, len, scale, scores, lds, GT, 1);
}

DSE_SCORES_TILES_8(scores_tile)

static void attn_scores_group_bf16act_avx512(const float *q, int64_t ldq, int G, const struct dse_kv_rows *k,
                                             int64_t off, int64_t n, int64_t len, float scale, float *scores,
                                             int64_t lds) {
        if (len > QC) {
                dse__kernels_ref_attn_scores_group_bf16act(q, ldq, G, k, off, n, len, scale, scores, lds);
                return;
        }
        dse_scores_tiles_8(scores_tile_fns, q, ldq, G, k, off, n, len, scale, scores, lds);
}

void dse__kernels_fill_avx512_bf16_kv(struct dse_kernels *k) {
        k->attn_scores_group_bf16act = attn_scores_group_bf16act_avx512;
}
