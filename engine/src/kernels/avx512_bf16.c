/* AVX-512 BF16 kernel: matmul_bf16act on vdpbf16ps. This file is compiled with
 * -mavx512bf16 beside the F+BW+VL flags and not with -mavx512vnni; kernels.c installs
 * its entry only when the CPU reports AVX512_BF16. */
#include <immintrin.h>

#include "kernels/avx512_blocks.h"
#include "kernels/kernels.h"

/* Rows r..r+R-1 of a BF16 matrix times T tokens already rounded to bf16 (xb: (TB, KC)
 * for the columns [c0, c1)): 32 columns per step, one vdpbf16ps per row and token (a pair
 * of exact products per lane), the weights as stored (consecutive columns are the
 * instruction's pairs). The chunk's sums are added to y (written when first). */
static inline __attribute__((always_inline)) void bf16act_block(const struct dse_qmat *w, const uint16_t *xb,
                                                                int64_t c0, int64_t c1, float *y, int64_t ldy,
                                                                int64_t r, const int R, const int T, int first) {
        int64_t n = w->cols;
        const uint16_t *W = w->data;
        __m512 acc[RB][TB];
        UNROLL
        for (int i = 0; i < R; i++)
                UNROLL
                for (int t = 0; t < T; t++)
                        acc[i][t] = _mm512_setzero_ps();
        for (int64_t c = c0; c < c1; c += 32) {
                __mmask32 m = mask32(c1 - c);
                __m512bh wv[RB];
                UNROLL
                for (int i = 0; i < R; i++)
                        wv[i] = (__m512bh)_mm512_maskz_loadu_epi16(m, W + (r + i) * n + c);
                UNROLL
                for (int t = 0; t < T; t++) {
                        __m512bh xv = (__m512bh)_mm512_load_si512(xb + t * KC + (c - c0));
                        UNROLL
                        for (int i = 0; i < R; i++)
                                acc[i][t] = _mm512_dpbf16_ps(acc[i][t], wv[i], xv);
                }
        }
        UNROLL
        for (int t = 0; t < T; t++)
                UNROLL
                for (int i = 0; i < R; i++) {
                        float v = _mm512_reduce_add_ps(acc[i][t]);
                        y[t * ldy + r + i] = first ? v : y[t * ldy + r + i] + v;
                }
}

#define BF16ACT_CALL(R)                                                                                        \
        switch (T) {                                                                                           \
        case 1: bf16act_block(w, xb, c0, c1, yt, ldy, r, R, 1, c0 == 0); break;                               \
        case 2: bf16act_block(w, xb, c0, c1, yt, ldy, r, R, 2, c0 == 0); break;                               \
        case 3: bf16act_block(w, xb, c0, c1, yt, ldy, r, R, 3, c0 == 0); break;                               \
        default: bf16act_block(w, xb, c0, c1, yt, ldy, r, R, 4, c0 == 0); break;                              \
        }

/* Super-blocks of RS rows; token blocks of TB; chunks of KC columns whose activations
 * are rounded to bf16 once (zero past cols) for all the super-block's rows. */
static void matmul_bf16act_avx512(const struct dse_qmat *w, const float *x, int64_t ldx, int64_t n, float *y,
                                  int64_t ldy, int64_t r0, int64_t r1) {
        _Alignas(64) uint16_t xb[TB * KC];
        for (int64_t rs = r0; rs < r1; rs += RS) {
                int64_t re = rs + RS < r1 ? rs + RS : r1;
                for (int64_t t0 = 0; t0 < n; t0 += TB) {
                        int T = n - t0 < TB ? (int)(n - t0) : TB;
                        float *yt = y + t0 * ldy;
                        for (int64_t c0 = 0; c0 < w->cols; c0 += KC) {
                                int64_t c1 = c0 + KC < w->cols ? c0 + KC : w->cols;
                                for (int t = 0; t < T; t++)
                                        for (int64_t c = c0; c < c1; c += 32) {
                                                const float *xt = x + (t0 + t) * ldx + c;
                                                __m512bh v = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(mask16(c1 - c - 16), xt + 16),
                                                                                 _mm512_maskz_loadu_ps(mask16(c1 - c), xt));
                                                _mm512_store_si512(xb + t * KC + (c - c0), (__m512i)v);
                                        }
                                int64_t r = rs;
                                for (; r + RB <= re; r += RB)
                                        BF16ACT_CALL(RB)
                                for (; r < re; r++)
                                        BF16ACT_CALL(1)
                        }
                }
        }
}

void dse__kernels_fill_avx512_bf16(struct dse_kernels *k) {
        k->matmul_bf16act = matmul_bf16act_avx512;
}

