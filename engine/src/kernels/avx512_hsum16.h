/* The sums of 16 AVX-512 float vectors at once, for kernels that reduce many dot products
 * together (the grouped attention's scores): a transposing tree of 15 adds instead of a
 * horizontal sum per vector. Included by AVX-512 kernel files only. */
#ifndef DSE_KERNELS_AVX512_HSUM16_H
#define DSE_KERNELS_AVX512_HSUM16_H

#include <immintrin.h>

#include "kernels/avx512_blocks.h"

/* Lane j = the sum of the lanes of v[j]; every vector's lanes are added in the same
 * order whatever its slot: quarters 0+2 and 1+3, then those two, then within each
 * quarter elements 0+2 and 1+3, then those two. */
static inline __attribute__((always_inline)) __m512 hsum16x16(const __m512 v[16]) {
        __m512 s[8], r[4], u[2];
        UNROLL for (int i = 0; i < 8; i++) s[i] =
                _mm512_add_ps(_mm512_shuffle_f32x4(v[i], v[i + 8], 0x44), _mm512_shuffle_f32x4(v[i], v[i + 8], 0xee));
        UNROLL for (int i = 0; i < 4; i++) r[i] =
                _mm512_add_ps(_mm512_shuffle_f32x4(s[i], s[i + 4], _MM_SHUFFLE(2, 0, 2, 0)),
                              _mm512_shuffle_f32x4(s[i], s[i + 4], _MM_SHUFFLE(3, 1, 3, 1)));
        UNROLL for (int i = 0; i < 2; i++) u[i] =
                _mm512_add_ps(_mm512_shuffle_ps(r[i], r[i + 2], _MM_SHUFFLE(1, 0, 1, 0)),
                              _mm512_shuffle_ps(r[i], r[i + 2], _MM_SHUFFLE(3, 2, 3, 2)));
        __m512 w = _mm512_add_ps(_mm512_shuffle_ps(u[0], u[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_ps(u[0], u[1], _MM_SHUFFLE(3, 1, 3, 1)));
        /* the tree leaves v[j]'s sum in lane perm[j] (perm is its own inverse) */
        const __m512i perm = _mm512_setr_epi32(0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15);
        return _mm512_permutexvar_ps(perm, w);
}

#endif
