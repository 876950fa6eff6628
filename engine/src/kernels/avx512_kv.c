/* AVX-512 F+BW attention of G queries over one run of BF16 KV rows (the query heads of a
 * GQA KV head; compiled with -mavx512f -mavx512bw -mavx512vl -mfma and nothing more):
 * what attn_scores_group_bf16_ref and attn_accum_group_bf16_ref compute, 16 elements at a
 * time with float32 FMA accumulation; only the summation order differs. Each piece of a
 * row is converted to float32 once for every query of a tile (scores: a zero-extension
 * and a shift; weighted rows: 32 elements as even and odd lanes, a shift and a mask), the
 * last piece of a row goes through a mask (no scalar tail), and a score's 16 partial
 * sums are reduced with those of the other rows and queries of its step in one
 * transposing tree, 16 sums a tree, instead of one horizontal sum each. The weighted
 * rows go in tiles of 3 queries over whole rows of a GQA head (128 elements, 24
 * accumulators), so a run is streamed from memory once, in address order, and read
 * again from cache by the group's other tiles (tiles of 6 queries over half rows read
 * each half with a stride, which the hardware prefetch followed at a lower rate). A query's
 * operations are the same whatever tile and step it falls in, so its result does not
 * depend on G nor on the other queries. */
#include <immintrin.h>
#include <string.h>

#include "kernels/avx512_blocks.h"
#include "kernels/avx512_hsum16.h"
#include "kernels/group_tiles.h"
#include "kernels/kernels.h"

#define GQ 8 /* queries of a scores tile (DSE_SCORES_TILES_8) */
#define AQ 3 /* queries of a weighted-rows tile ... */
#define AC 4 /* ... and its 32-element parts: AQ * AC * 2 = 24 accumulators in registers */

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

DSE_SCORES_TILES_8(scores_group_tile)

static void attn_scores_group_bf16_avx512(const float *q, int64_t ldq, int G, const struct dse_kv_rows *k,
                                          int64_t off, int64_t n, int64_t len, float scale, float *scores,
                                          int64_t lds) {
        dse_scores_tiles_8(scores_group_tile_fns, q, ldq, G, k, off, n, len, scale, scores, lds);
}

/* A 32-element piece of a row as two float32 vectors without widening: read as 16
 * 32-bit lanes, the even elements are the low halves shifted up, the odd ones the high
 * halves with the low ones cleared. The output is split the same way when loaded and
 * interleaved back when stored. */
static inline void out_load_split(const float *o, int64_t left, __m512 *even, __m512 *odd) {
        const __m512i to_even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        const __m512i to_odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
        __m512 a = _mm512_maskz_loadu_ps(mask16(left), o), b = _mm512_maskz_loadu_ps(mask16(left - 16), o + 16);
        *even = _mm512_permutex2var_ps(a, to_even, b);
        *odd = _mm512_permutex2var_ps(a, to_odd, b);
}

static inline void out_store_split(float *o, int64_t left, __m512 even, __m512 odd) {
        const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
        const __m512i hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
        _mm512_mask_storeu_ps(o, mask16(left), _mm512_permutex2var_ps(even, lo, odd));
        _mm512_mask_storeu_ps(o + 16, mask16(left - 16), _mm512_permutex2var_ps(even, hi, odd));
}

/* Elements [d0, d0 + 32C) of every row (masked past len unless full) for a tile of GT
 * queries, their sums in registers over the run, each element's in row order. */
static inline __attribute__((always_inline)) void accum_group_piece(const float *w, int64_t ldw,
                                                                    const struct dse_kv_rows *v, int64_t off,
                                                                    int64_t n, int64_t len, float *out,
                                                                    int64_t ldo, int64_t d0, const int GT,
                                                                    const int C, const int full) {
        const __m512i high = _mm512_set1_epi32((int)0xffff0000u);
        __m512 even[AQ][AC], odd[AQ][AC];
        UNROLL for (int g = 0; g < GT; g++) UNROLL for (int c = 0; c < C; c++)
                out_load_split(out + g * ldo + d0 + 32 * c, len - d0 - 32 * c, &even[g][c], &odd[g][c]);
        for (int64_t t = 0; t < n; t++) {
                const uint16_t *row = (const uint16_t *)(v->rows + t * v->ld) + off + d0;
                UNROLL for (int c = 0; c < C; c++) {
                        __m512i x = full ? _mm512_loadu_si512(row + 32 * c)
                                         : _mm512_maskz_loadu_epi16(mask32(len - d0 - 32 * c), row + 32 * c);
                        __m512 xe = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
                        __m512 xo = _mm512_castsi512_ps(_mm512_and_si512(x, high));
                        UNROLL for (int g = 0; g < GT; g++) {
                                __m512 wv = _mm512_set1_ps(w[g * ldw + t]);
                                even[g][c] = _mm512_fmadd_ps(wv, xe, even[g][c]);
                                odd[g][c] = _mm512_fmadd_ps(wv, xo, odd[g][c]);
                        }
                }
        }
        UNROLL for (int g = 0; g < GT; g++) UNROLL for (int c = 0; c < C; c++)
                out_store_split(out + g * ldo + d0 + 32 * c, len - d0 - 32 * c, even[g][c], odd[g][c]);
}

/* Pieces of AC 32-element parts (whole rows of a GQA head: the run is streamed in
 * order, its rows read from memory once and from cache by the other tiles), then of 2
 * and 1, the last one masked. */
static inline __attribute__((always_inline)) void accum_group_tile(const float *w, int64_t ldw,
                                                                   const struct dse_kv_rows *v, int64_t off,
                                                                   int64_t n, int64_t len, float *out, int64_t ldo,
                                                                   const int GT) {
        int64_t d0 = 0;
        for (; d0 + 32 * AC <= len; d0 += 32 * AC)
                accum_group_piece(w, ldw, v, off, n, len, out, ldo, d0, GT, AC, 1);
        for (; d0 + 64 <= len; d0 += 64)
                accum_group_piece(w, ldw, v, off, n, len, out, ldo, d0, GT, 2, 1);
        for (; d0 + 32 <= len; d0 += 32)
                accum_group_piece(w, ldw, v, off, n, len, out, ldo, d0, GT, 1, 1);
        if (d0 < len)
                accum_group_piece(w, ldw, v, off, n, len, out, ldo, d0, GT, 1, 0);
}

static __attribute__((noinline)) void accum_group_tile_1(const float *w, int64_t ldw, const struct dse_kv_rows *v, int64_t off, int64_t n,
                               int64_t len, float *out, int64_t ldo) {
        accum_group_tile(w, ldw, v, off, n, len, out, ldo, 1);
}

static __attribute__((noinline)) void accum_group_tile_2(const float *w, int64_t ldw, const struct dse_kv_rows *v, int64_t off, int64_t n,
                               int64_t len, float *out, int64_t ldo) {
        accum_group_tile(w, ldw, v, off, n, len, out, ldo, 2);
}

static __attribute__((noinline)) void accum_group_tile_3(const float *w, int64_t ldw, const struct dse_kv_rows *v, int64_t off, int64_t n,
                               int64_t len, float *out, int64_t ldo) {
        accum_group_tile(w, ldw, v, off, n, len, out, ldo, 3);
}

static void attn_accum_group_bf16_avx512(const float *w, int64_t ldw, int G, const struct dse_kv_rows *v,
                                         int64_t off, int64_t n, int64_t len, float *out, int64_t ldo) {
        for (int g0 = 0; g0 < G; g0 += AQ) {
                const float *wt = w + g0 * ldw;
                float *ot = out + g0 * ldo;
                switch (G - g0 < AQ ? G - g0 : AQ) {
                case 1: accum_group_tile_1(wt, ldw, v, off, n, len, ot, ldo); break;
                case 2: accum_group_tile_2(wt, ldw, v, off, n, len, ot, ldo); break;
                default: accum_group_tile_3(wt, ldw, v, off, n, len, ot, ldo); break;
                }
        }
}

void dse__kernels_fill_avx512_kv(struct dse_kernels *k) {
        k->attn_scores_group_bf16 = attn_scores_group_bf16_avx512;
        k->attn_accum_group_bf16 = attn_accum_group_bf16_avx512;
}
