/* q4_f32_rows: Q4 weights (16 rows interleaved, model.h "The Q4 layout") times float
 * activations, a block of 16 rows at a time: matvec and matmul of Q4 at the AVX2 and
 * AVX-512 levels. One source for avx2.c and avx512.c: a "row vector" is one zmm of 16
 * lanes when compiled with AVX-512F, two ymm halves (rows 0-7, 8-15) otherwise. The two
 * levels differ in their number of chains and in how X[g] is summed, so their results
 * differ by rounding (each is deterministic, below).
 *
 * Why this shape: a 64-byte chunk of a tile holds 16 rows x 4 bytes, an int32 lane per
 * row, and byte e of lane L carries W[L, 8k + e] (low nibble) and W[L, 8k + 4 + e] (high).
 * Masked once per chunk into their bytes (low nibbles, then high), byte e of every lane
 * is column 8k + e (or 8k + 4 + e) of 16 rows: a mask, a shift or a byte shuffle takes it
 * into the lanes, one conversion makes it float, one FMA against the broadcast x[c] adds
 * it: about 3.4 vector operations per column for 16 rows, where the row-major layout cost
 * about 8.5 (a convert and a widening per row per 8 columns). The shuffles run beside the
 * conversions (port 5 and port 0), where a shift and a mask per column would queue on
 * port 0 with them. The zero point is taken off once per group, as
 * part = sum q x - z X[g] with X[g] the group's sum of x, so the inner loop never
 * subtracts it; the _ref twin's part = sum (q - z) x differs from it only by rounding.
 *
 * Summation order, fixed per (row, token): per group, column c adds into chain
 * ((c mod 32) / 8) mod Q4F_C when its whole 32-column block lies in the group and in the
 * matrix, else into chain 0, in increasing column order; the chains add up in a fixed
 * tree; part = fnmadd(z, X[g], chains); acc = fmadd(part, s, acc) per group in order.
 * A row's result therefore does not depend on r0/r1 (the whole 16-row block is computed,
 * only rows in range are stored) nor on the tokens per call (each token's operations are
 * the same at any T). The including file provides the intrinsics. */
#ifndef DSE_KERNELS_Q4_F32_ROWS_H
#define DSE_KERNELS_Q4_F32_ROWS_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernels/avx2_loads.h" /* hsum8 */
#include "kernels/kernels.h"

#define Q4F_UNROLL _Pragma("GCC unroll 16")


#ifdef __AVX512F__
/* 16 rows in one zmm; 4 chains (one per chunk of a tile) keep 4 FMAs in flight for a lone
 * token, and 4 tokens share each decoded column (16 chain registers of 32). */
#define Q4F_C  4
#define Q4F_TB 4
typedef __m512 q4f_f;
typedef __m512i q4f_i;
static inline q4f_i q4f_load(const uint8_t *p) {
        return _mm512_loadu_si512((const void *)p);
}
static inline q4f_f q4f_zero(void) {
        return _mm512_setzero_ps();
}
/* The chunk's low nibbles (h = 0) or high ones (h = 1), each in its own byte. */
static inline __attribute__((always_inline)) q4f_i q4f_half(q4f_i v, const int h) {
        return _mm512_and_si512(h ? _mm512_srli_epi32(v, 4) : v, _mm512_set1_epi32(0x0f0f0f0f));
}
/* Byte e of each lane of n as floats: a mask, a shift or a byte shuffle (port 5, beside
 * the conversions' port 0). */
static inline __attribute__((always_inline)) q4f_f q4f_byte(q4f_i n, const int e) {
        q4f_i b;
        if (e == 0)
                b = _mm512_and_si512(n, _mm512_set1_epi32(0xff));
        else if (e == 3)
                b = _mm512_srli_epi32(n, 24);
        else
                b = _mm512_shuffle_epi8(n, _mm512_setr4_epi32((int)(0x80808000u | (unsigned)e),
                                                              (int)(0x80808004u | (unsigned)e),
                                                              (int)(0x80808008u | (unsigned)e),
                                                              (int)(0x8080800cu | (unsigned)e)));
        return _mm512_cvtepi32_ps(b);
}
static inline q4f_f q4f_nib_var(q4f_i v, int sh) {
        return _mm512_cvtepi32_ps(
                _mm512_and_si512(_mm512_srl_epi32(v, _mm_cvtsi32_si128(sh)), _mm512_set1_epi32(0xf)));
}
static inline q4f_f q4f_fmadd_s(q4f_f a, float x, q4f_f acc) {
        return _mm512_fmadd_ps(a, _mm512_set1_ps(x), acc);
}
static inline q4f_f q4f_fnmadd_s(q4f_f a, float x, q4f_f acc) {
        return _mm512_fnmadd_ps(a, _mm512_set1_ps(x), acc);
}
static inline q4f_f q4f_fmadd(q4f_f a, q4f_f b, q4f_f acc) {
        return _mm512_fmadd_ps(a, b, acc);
}
static inline q4f_f q4f_add(q4f_f a, q4f_f b) {
        return _mm512_add_ps(a, b);
}
/* 16 consecutive floats (a row block's scales of one group) */
static inline q4f_f q4f_f32(const float *p) {
        return _mm512_loadu_ps(p);
}
/* 16 consecutive bytes (a row block's zero points of one group) as floats */
static inline q4f_f q4f_u8(const uint8_t *b) {
        return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)b)));
}
/* 16 consecutive fp16 values (a row block's scales of one group, symmetric Q4) */
static inline q4f_f q4f_f16(const uint16_t *p) {
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}
static inline q4f_f q4f_set1(float v) {
        return _mm512_set1_ps(v);
}
/* lanes lo..hi-1 of v to y[lo..hi-1] */
static inline void q4f_store(float *y, q4f_f v, int lo, int hi) {
        __mmask16 m = (__mmask16)(((1u << hi) - 1) & ~((1u << lo) - 1));
        _mm512_mask_storeu_ps(y, m, v);
}
/* The sum of x[c0..c1), 16 columns at a time, never reading past c1. */
static inline float q4f_xsum(const float *x, int64_t c0, int64_t c1) {
        __m512 s = _mm512_setzero_ps();
        for (int64_t c = c0; c < c1; c += 16) {
                int64_t n = c1 - c;
                __mmask16 m = (__mmask16)(n >= 16 ? 0xffff : (1u << n) - 1);
                s = _mm512_add_ps(s, _mm512_maskz_loadu_ps(m, x + c));
        }
        return _mm512_reduce_add_ps(s);
}
#else
/* 16 rows as two ymm halves; 2 chains (even and odd chunks) give 4 FMAs in flight, and
 * one token per call keeps the 8 chain registers and the decoded halves within 16. */
#define Q4F_C  2
#define Q4F_TB 1
typedef struct {
        __m256 a, b; /* rows 0-7, rows 8-15 */
} q4f_f;
typedef struct {
        __m256i a, b;
} q4f_i;
static inline q4f_i q4f_load(const uint8_t *p) {
        return (q4f_i){_mm256_loadu_si256((const __m256i *)p), _mm256_loadu_si256((const __m256i *)(p + 32))};
}
static inline q4f_f q4f_zero(void) {
        return (q4f_f){_mm256_setzero_ps(), _mm256_setzero_ps()};
}
static inline __attribute__((always_inline)) __m256i q4f_half8(__m256i v, const int h) {
        return _mm256_and_si256(h ? _mm256_srli_epi32(v, 4) : v, _mm256_set1_epi32(0x0f0f0f0f));
}
static inline __attribute__((always_inline)) q4f_i q4f_half(q4f_i v, const int h) {
        return (q4f_i){q4f_half8(v.a, h), q4f_half8(v.b, h)};
}
static inline __attribute__((always_inline)) __m256 q4f_byte8(__m256i n, const int e) {
        __m256i b;
        if (e == 0)
                b = _mm256_and_si256(n, _mm256_set1_epi32(0xff));
        else if (e == 3)
                b = _mm256_srli_epi32(n, 24);
        else
                b = _mm256_shuffle_epi8(n, _mm256_setr_epi32((int)(0x80808000u | (unsigned)e), (int)(0x80808004u | (unsigned)e),
                                                             (int)(0x80808008u | (unsigned)e), (int)(0x8080800cu | (unsigned)e),
                                                             (int)(0x80808000u | (unsigned)e), (int)(0x80808004u | (unsigned)e),
                                                             (int)(0x80808008u | (unsigned)e), (int)(0x8080800cu | (unsigned)e)));
        return _mm256_cvtepi32_ps(b);
}
static inline __attribute__((always_inline)) q4f_f q4f_byte(q4f_i n, const int e) {
        return (q4f_f){q4f_byte8(n.a, e), q4f_byte8(n.b, e)};
}
static inline q4f_f q4f_nib_var(q4f_i v, int sh) {
        __m128i n = _mm_cvtsi32_si128(sh);
        __m256i m = _mm256_set1_epi32(0xf);
        return (q4f_f){_mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srl_epi32(v.a, n), m)),
                       _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srl_epi32(v.b, n), m))};
}
static inline q4f_f q4f_fmadd_s(q4f_f a, float x, q4f_f acc) {
        __m256 xv = _mm256_set1_ps(x);
        return (q4f_f){_mm256_fmadd_ps(a.a, xv, acc.a), _mm256_fmadd_ps(a.b, xv, acc.b)};
}
static inline q4f_f q4f_fnmadd_s(q4f_f a, float x, q4f_f acc) {
        __m256 xv = _mm256_set1_ps(x);
        return (q4f_f){_mm256_fnmadd_ps(a.a, xv, acc.a), _mm256_fnmadd_ps(a.b, xv, acc.b)};
}
static inline q4f_f q4f_fmadd(q4f_f a, q4f_f b, q4f_f acc) {
        return (q4f_f){_mm256_fmadd_ps(a.a, b.a, acc.a), _mm256_fmadd_ps(a.b, b.b, acc.b)};
}
static inline q4f_f q4f_add(q4f_f a, q4f_f b) {
        return (q4f_f){_mm256_add_ps(a.a, b.a), _mm256_add_ps(a.b, b.b)};
}
static inline q4f_f q4f_f32(const float *p) {
        return (q4f_f){_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)};
}
static inline q4f_f q4f_u8(const uint8_t *b) {
        return (q4f_f){_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)b))),
                       _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(b + 8))))};
}
static inline q4f_f q4f_f16(const uint16_t *p) {
        return (q4f_f){_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)),
                       _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 8)))};
}
static inline q4f_f q4f_set1(float v) {
        return (q4f_f){_mm256_set1_ps(v), _mm256_set1_ps(v)};
}
static inline void q4f_store(float *y, q4f_f v, int lo, int hi) {
        float t[16];
        _mm256_storeu_ps(t, v.a);
        _mm256_storeu_ps(t + 8, v.b);
        memcpy(y + lo, t + lo, (size_t)(hi - lo) * sizeof(float));
}
/* The sum of x[c0..c1), 8 columns at a time, then the rest in order. */
static inline float q4f_xsum(const float *x, int64_t c0, int64_t c1) {
        __m256 s = _mm256_setzero_ps();
        int64_t c = c0;
        for (; c + 8 <= c1; c += 8)
                s = _mm256_add_ps(s, _mm256_loadu_ps(x + c));
        float r = hsum8(s);
        for (; c < c1; c++)
                r += x[c];
        return r;
}
#endif

/* The scales and zero points of a row block's group, 16 rows from element i (model.h
 * dse__q4_sidx), in either Q4 form (kernels.h struct dse_qmat). */
static inline q4f_f q4f_scales(const struct dse_qmat *w, int64_t i) {
        return w->scale_f16 ? q4f_f16(w->scale_f16 + i) : q4f_f32(w->scale + i);
}
static inline q4f_f q4f_zeros(const struct dse_qmat *w, int64_t i) {
        return w->scale_f16 ? q4f_set1((float)DSE_Q4_SYM_ZERO) : q4f_u8(w->zero + i);
}

/* Groups' sums of x kept on the stack per call: up to Q4F_XS (token, group) pairs, 32 KiB;
 * a matrix with more groups than that computes them per row block (the same function,
 * so the same values). */
#define Q4F_XS 8192

/* Row block R (rows 16R..16R+15) against T tokens (x rows ldx apart; xs[t * ldxs + g] = X[g]
 * of token t, or NULL to compute it here); rows 16R+lo..16R+hi-1 stored to y (rows ldy
 * apart per token, indexed by absolute row). */
static inline __attribute__((always_inline)) void q4f_block(const struct dse_qmat *w, const float *x, int64_t ldx,
                                                            const float *xs, int64_t ldxs, const int T, int64_t R,
                                                            float *y, int64_t ldy, int lo, int hi) {
        const int64_t cols = w->cols, G = w->group_size, ng = w->n_groups, nb = (cols + 31) / 32;
        const uint8_t *tile = (const uint8_t *)w->data + R * nb * DSE_Q4_TILE;
        /* the block's scales and zero points, 16 rows per group in group order (model.h
         * dse__q4_sidx); rows past the matrix (a padded last block) hold whatever the
         * padding holds: they are computed, never stored */
        int64_t rbase = R * DSE_Q4_ROWS, sbase = R * ng * DSE_Q4_ROWS;
        q4f_f acc[Q4F_TB];
        Q4F_UNROLL
        for (int t = 0; t < T; t++)
                acc[t] = q4f_zero();
        for (int64_t g = 0; g < ng; g++) {
                q4f_f p[Q4F_TB][Q4F_C];
                Q4F_UNROLL
                for (int t = 0; t < T; t++)
                        Q4F_UNROLL
                        for (int j = 0; j < Q4F_C; j++)
                                p[t][j] = q4f_zero();
                int64_t c = g * G, ce = c + G < cols ? c + G : cols;
                while (c < ce) {
                        if (!(c & 31) && c + 32 <= ce) { /* a whole block in the group */
                                const uint8_t *tb = tile + (c / 32) * DSE_Q4_TILE;
                                Q4F_UNROLL
                                for (int k = 0; k < 4; k++) {
                                        q4f_i v = q4f_load(tb + 64 * k);
                                        _mm_prefetch((const char *)(tb + 64 * k + DSE_PREFETCH_AHEAD), _MM_HINT_T1);
                                        Q4F_UNROLL
                                        for (int h = 0; h < 2; h++) {
                                                q4f_i nh = q4f_half(v, h);
                                                Q4F_UNROLL
                                                for (int e = 0; e < 4; e++) {
                                                        q4f_f q = q4f_byte(nh, e);
                                                        Q4F_UNROLL
                                                        for (int t = 0; t < T; t++)
                                                                p[t][k % Q4F_C] = q4f_fmadd_s(
                                                                        q, x[t * ldx + c + 8 * k + 4 * h + e],
                                                                        p[t][k % Q4F_C]);
                                                }
                                        }
                                }
                                c += 32;
                        } else { /* a column of a block cut by the group or the matrix */
                                int64_t k = (c & 31) / 8, e = c & 7;
                                q4f_f q = q4f_nib_var(q4f_load(tile + (c / 32) * DSE_Q4_TILE + 64 * k),
                                                      (int)(8 * (e & 3) + 4 * (e >> 2)));
                                Q4F_UNROLL
                                for (int t = 0; t < T; t++)
                                        p[t][0] = q4f_fmadd_s(q, x[t * ldx + c], p[t][0]);
                                c++;
                        }
                }
                q4f_f s = q4f_scales(w, sbase + g * DSE_Q4_ROWS), z = q4f_zeros(w, sbase + g * DSE_Q4_ROWS);
                Q4F_UNROLL
                for (int t = 0; t < T; t++) {
#if Q4F_C == 4
                        q4f_f part = q4f_add(q4f_add(p[t][0], p[t][1]), q4f_add(p[t][2], p[t][3]));
#else
                        q4f_f part = q4f_add(p[t][0], p[t][1]);
#endif
                        float X = xs ? xs[t * ldxs + g]
                                     : q4f_xsum(x + t * ldx, g * G, (g + 1) * G < cols ? (g + 1) * G : cols);
                        part = q4f_fnmadd_s(z, X, part);
                        acc[t] = q4f_fmadd(part, s, acc[t]);
                }
        }
        Q4F_UNROLL
        for (int t = 0; t < T; t++)
                q4f_store(y + t * ldy + rbase, acc[t], lo, hi);
}

/* Y[t, r] for t < n, r in [r0, r1): each 16-row block serves the tokens Q4F_TB at a time
 * while it sits in L1/L2; the groups' sums of x for as many tokens as Q4F_XS holds are
 * computed once per pass over the rows. */
static void q4f_matmul(const struct dse_qmat *w, const float *x, int64_t ldx, int64_t n, float *y, int64_t ldy,
                       int64_t r0, int64_t r1) {
        if (r0 >= r1 || n <= 0)
                return;
        const int64_t ng = w->n_groups, G = w->group_size;
        float xs[Q4F_XS];
        int64_t per = ng <= Q4F_XS ? Q4F_XS / ng : 0; /* tokens per pass with xs on the stack */
        int64_t step = per ? per : Q4F_TB;
        for (int64_t t0 = 0; t0 < n; t0 += step) {
                int64_t te = t0 + step < n ? t0 + step : n;
                if (per)
                        for (int64_t t = t0; t < te; t++)
                                for (int64_t g = 0; g < ng; g++)
                                        xs[(t - t0) * ng + g] = q4f_xsum(x + t * ldx, g * G,
                                                                         (g + 1) * G < w->cols ? (g + 1) * G : w->cols);
                for (int64_t R = r0 / DSE_Q4_ROWS; R * DSE_Q4_ROWS < r1; R++) {
                        int64_t rb = R * DSE_Q4_ROWS;
                        int lo = (int)(r0 > rb ? r0 - rb : 0), hi = (int)(r1 < rb + 16 ? r1 - rb : 16);
                        for (int64_t t = t0; t < te; t += Q4F_TB) {
                                const float *xt = x + t * ldx, *xst = per ? xs + (t - t0) * ng : NULL;
                                float *yt = y + t * ldy;
                                switch (te - t < Q4F_TB ? te - t : Q4F_TB) {
                                case 1: q4f_block(w, xt, ldx, xst, ng, 1, R, yt, ldy, lo, hi); break;
#if Q4F_TB == 4
                                case 2: q4f_block(w, xt, ldx, xst, ng, 2, R, yt, ldy, lo, hi); break;
                                case 3: q4f_block(w, xt, ldx, xst, ng, 3, R, yt, ldy, lo, hi); break;
                                default: q4f_block(w, xt, ldx, xst, ng, 4, R, yt, ldy, lo, hi); break;
#endif
                                }
                        }
                }
        }
}

static void q4f_matvec(const struct dse_qmat *w, const float *x, float *y, int64_t r0, int64_t r1) {
        q4f_matmul(w, x, 0, 1, y, 0, r0, r1);
}

#endif
