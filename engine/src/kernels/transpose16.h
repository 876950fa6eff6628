/* A 16 x 16 float transposition in AVX-512 registers, for amx.c, which turns 16 rows'
 * per-token sums (the C tile's output) into one vector of the 16 rows per token. The
 * including file provides the AVX-512F target. */
#ifndef DSE_KERNELS_TRANSPOSE16_H
#define DSE_KERNELS_TRANSPOSE16_H

#include <immintrin.h>

/* r[i] lane j -> r[j] lane i. */
static inline void transpose16(__m512 r[16]) {
        __m512 t[16];
        for (int i = 0; i < 16; i += 2) {
                t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
                t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
        }
        /* r[i + c], 128-bit lane l: rows i..i+3 of column 4l + c */
        for (int i = 0; i < 16; i += 4)
                for (int h = 0; h < 2; h++) {
                        __m512d a = _mm512_castps_pd(t[i + h]), b = _mm512_castps_pd(t[i + h + 2]);
                        r[i + 2 * h] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
                        r[i + 2 * h + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
                }
        /* column 4l + c gathers 128-bit lane l of r[c], r[4 + c], r[8 + c], r[12 + c] */
        for (int c = 0; c < 4; c++) {
                __m512 x0 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x44), x1 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xee);
                __m512 y0 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x44),
                       y1 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xee);
                t[c] = _mm512_shuffle_f32x4(x0, y0, 0x88);
                t[4 + c] = _mm512_shuffle_f32x4(x0, y0, 0xdd);
                t[8 + c] = _mm512_shuffle_f32x4(x1, y1, 0x88);
                t[12 + c] = _mm512_shuffle_f32x4(x1, y1, 0xdd);
        }
        for (int i = 0; i < 16; i++)
                r[i] = t[i];
}

#endif
