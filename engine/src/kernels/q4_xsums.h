/* The activations' group sums of the Q4 int8-activation kernels (avx2.c and avx512_vnni.c,
 * AVX2 instructions): X_g = sum over group g's 32-column blocks b, in order, of d_b *
 * sum(q_b), so a kernel takes the zero point off once per group (sum (w - z) q = sum w q
 * - z sum q) instead of per block. */
#ifndef DSE_KERNELS_Q4_XSUMS_H
#define DSE_KERNELS_Q4_XSUMS_H

#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "kernels/kernels.h"

/* The 32 q of a block summed exactly (made unsigned, then sums of absolute differences). */
static inline int32_t q_sum32(const int8_t *q) {
        __m256i v = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)q), _mm256_set1_epi8((char)0x80));
        __m256i s = _mm256_sad_epu8(v, _mm256_setzero_si256());
        __m128i h = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        return (int32_t)(_mm_cvtsi128_si64(h) + _mm_extract_epi64(h, 1)) - 32 * 128;
}

/* X[t * xs + g - g0] = the sum over group g's blocks b, in order, of d_b * sum(q_b) for
 * token t0 + t, for the groups [g0, g1). */
static inline void q4_prep_x(const struct dse_xq *xq, int64_t G, int64_t t0, int64_t T, int64_t g0, int64_t g1, float *X,
                             int64_t xs) {
        int64_t nb = xq->n_blocks, bpg = G / DSE_XQ_BLOCK;
        for (int64_t t = 0; t < T; t++) {
                const int8_t *q = xq->q + (t0 + t) * nb * DSE_XQ_BLOCK;
                const float *d = xq->d + (t0 + t) * nb;
                for (int64_t g = g0; g < g1; g++) {
                        int64_t be = (g + 1) * bpg < nb ? (g + 1) * bpg : nb;
                        float a = 0.0f;
                        for (int64_t b = g * bpg; b < be; b++)
                                a = fmaf(d[b], (float)q_sum32(q + b * DSE_XQ_BLOCK), a);
                        X[t * xs + g - g0] = a;
                }
        }
}

#endif
