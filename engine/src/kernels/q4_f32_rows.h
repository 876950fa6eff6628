/* q4_f32_rows: Q4 weights times float activations, 4 rows at a time (matvec_q4 for
 * groups of 64k columns). One source for avx2.c and avx512.c: compiled with AVX-512VL
 * the same ymm instructions get 32 registers instead of 16, and its 20 live vectors at
 * R = 4 (acc, accg, zv, e, o) stop spilling to the stack (a store and reload per FMA
 * chain were a fifth of its samples: absorbed MLA's W_uv runs it every decode step).
 * Same instructions in the same order either way, so the same sums bit for bit. The
 * including file provides the AVX2 intrinsics and struct dse_qmat. */
#ifndef DSE_KERNELS_Q4_F32_ROWS_H
#define DSE_KERNELS_Q4_F32_ROWS_H

#include <immintrin.h>
#include <stdint.h>

#include "kernels/kernels.h"

#define Q4F_UNROLL _Pragma("GCC unroll 8")

/* The sum of a ymm's 8 floats (avx2.c uses it too). */
static inline float hsum8(__m256 v) {
        __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        s = _mm_hadd_ps(s, s);
        s = _mm_hadd_ps(s, s);
        return _mm_cvtss_f32(s);
}

/* Rows r..r+R-1 (R <= 4) of a Q4 matrix against float x, 64 columns (a 32-byte load per
 * row) at a time when the group is a multiple of 64: the nibbles minus the zero point
 * become int8 in [-16, 15], then float, and multiply x split into even and odd columns
 * (the order the nibbles come in; the split is shared by the R rows). Each group's sum
 * is scaled once, as the _ref twin does. */
static inline __attribute__((always_inline)) void q4_f32_rows(const struct dse_qmat *w, const float *x, float *y,
                                                              int64_t r, const int R) {
        int64_t G = w->group_size, rb = (w->cols + 1) / 2, ppg = G / 64, whole = w->cols / G;
        const uint8_t *row[4];
        const float *sc[4];
        const uint8_t *zr[4];
        __m256 acc[4];
        Q4F_UNROLL
        for (int i = 0; i < R; i++) {
                row[i] = (const uint8_t *)w->data + (r + i) * rb;
                sc[i] = w->scale + (r + i) * w->n_groups;
                zr[i] = w->zero + (r + i) * w->n_groups;
                acc[i] = _mm256_setzero_ps();
        }
        const __m256i m = _mm256_set1_epi8(0x0f);
        for (int64_t g = 0, p = 0; g < whole; g++) {
                __m256 accg[4];
                __m256i zv[4];
                Q4F_UNROLL
                for (int i = 0; i < R; i++) {
                        accg[i] = _mm256_setzero_ps();
                        zv[i] = _mm256_set1_epi8((char)zr[i][g]);
                }
                for (int64_t pe = p + ppg; p < pe; p++) {
                        /* x of columns 64p..64p+63 as evens and odds of each 16: e[k], o[k] */
                        __m256 e[4], o[4];
                        Q4F_UNROLL
                        for (int k = 0; k < 4; k++) {
                                __m256 a = _mm256_loadu_ps(x + p * 64 + 16 * k), b = _mm256_loadu_ps(x + p * 64 + 16 * k + 8);
                                e[k] = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xd8));
                                o[k] = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xdd)), 0xd8));
                        }
                        Q4F_UNROLL
                        for (int i = 0; i < R; i++) {
                                __m256i v = _mm256_loadu_si256((const __m256i *)(row[i] + p * 32));
                                __m256i lo = _mm256_sub_epi8(_mm256_and_si256(v, m), zv[i]);
                                __m256i hi = _mm256_sub_epi8(_mm256_and_si256(_mm256_srli_epi16(v, 4), m), zv[i]);
                                __m128i l0 = _mm256_castsi256_si128(lo), l1 = _mm256_extracti128_si256(lo, 1);
                                __m128i h0 = _mm256_castsi256_si128(hi), h1 = _mm256_extracti128_si256(hi, 1);
                                __m256 t = accg[i];
                                t = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(l0)), e[0], t);
                                t = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(l0, l0))), e[1], t);
                                t = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(l1)), e[2], t);
                                t = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(l1, l1))), e[3], t);
                                t = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(h0)), o[0], t);
                                t = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(h0, h0))), o[1], t);
                                t = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(h1)), o[2], t);
                                accg[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(h1, h1))), o[3], t);
                        }
                }
                Q4F_UNROLL
                for (int i = 0; i < R; i++)
                        acc[i] = _mm256_fmadd_ps(accg[i], _mm256_set1_ps(sc[i][g]), acc[i]);
        }
        Q4F_UNROLL
        for (int i = 0; i < R; i++) {
                float tail = 0.0f; /* columns past the last whole group, as the _ref twin sums them */
                for (int64_t g = whole; g < w->n_groups; g++) {
                        int64_t c1 = (g + 1) * G < w->cols ? (g + 1) * G : w->cols;
                        float z = (float)zr[i][g], part = 0.0f;
                        for (int64_t c = g * G; c < c1; c++) {
                                uint8_t b = row[i][c / 2];
                                part += ((float)((c & 1) ? b >> 4 : b & 0xf) - z) * x[c];
                        }
                        tail += part * sc[i][g];
                }
                y[r + i] = hsum8(acc[i]) + tail;
        }
}

#endif
