/* AVX-512 F+BW+VL kernels: the float-activation matmuls, quantize_xq, dequant_row,
 * axpy_rows and the vector helpers. This file is compiled with -mavx512f -mavx512bw
 * -mavx512vl -mfma -mf16c and nothing more, so it runs on every CPU of the level, VNNI
 * or BF16 or not; the vpdpbusd kernels are in avx512_vnni.c and the vdpbf16ps one in
 * avx512_bf16.c, each compiled with its own extension (tests/check-kernel-isa.sh checks
 * the objects). Each routine computes what its `_ref` twin in ref.c computes; only the
 * summation order differs. Helpers are static inline so no AVX-512 code reaches other
 * callers through the linker. */
#include <immintrin.h>
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "kernels/avx512_blocks.h"
#include "kernels/kernels.h"
#include "kernels/q4_f32_rows.h"

/* ---- int8 activations ---------------------------------------------------------------- */

/* d and q exactly as quantize_xq_ref computes them: the same max, the same 127/max
 * product, the same round-to-nearest-even conversion (MXCSR default), and a block past
 * cols read through a zero mask, which is what the reference's zero padding gives. */
static void quantize_xq_avx512(const float *x, int64_t ldx, struct dse_xq *xq) {
        for (int64_t t = 0; t < xq->n; t++) {
                const float *xt = x + t * ldx;
                int8_t *q = xq->q + t * xq->n_blocks * DSE_XQ_BLOCK;
                float *d = xq->d + t * xq->n_blocks;
                for (int64_t b = 0; b < xq->n_blocks; b++) {
                        int64_t c0 = b * DSE_XQ_BLOCK, len = xq->cols - c0;
                        __m512 v0 = _mm512_maskz_loadu_ps(mask16(len), xt + c0);
                        __m512 v1 = _mm512_maskz_loadu_ps(mask16(len - 16), xt + c0 + 16);
                        float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
                        float id = amax > 0.0f ? 127.0f / amax : 0.0f;
                        d[b] = dse__xq_scale(amax);
                        __m512 vid = _mm512_set1_ps(id);
                        __m128i q0 = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v0, vid)));
                        __m128i q1 = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v1, vid)));
                        _mm256_storeu_si256((__m256i *)(q + c0), _mm256_set_m128i(q1, q0));
                }
        }
}
/* ---- float activations ---------------------------------------------------------------- */

/* Sixteen weights of columns c.. as float32, zero past the mask. */
static inline __m512 load16(const void *data, enum dse_dtype dt, int64_t off, __mmask16 m) {
        switch (dt) {
        case DSE_DTYPE_F32:
                return _mm512_maskz_loadu_ps(m, (const float *)data + off);
        case DSE_DTYPE_F16:
                return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)data + off));
        default: /* BF16: the top half of a float32 */
                return _mm512_castsi512_ps(_mm512_slli_epi32(
                        _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, (const uint16_t *)data + off)), 16));
        }
}

/* Rows r..r+R-1 of an F32/F16/BF16 matrix times T tokens: each 16-column piece of a row
 * is converted once and multiplies every token; the tail goes through a mask, so there is
 * no scalar loop. */
static inline __attribute__((always_inline)) void fp_block(const struct dse_qmat *w, enum dse_dtype dt,
                                                           const float *x, int64_t ldx, float *y, int64_t ldy,
                                                           int64_t r, const int R, const int T) {
        int64_t n = w->cols;
        __m512 acc[RB][TB];
        UNROLL
        for (int i = 0; i < R; i++)
                UNROLL
                for (int t = 0; t < T; t++)
                        acc[i][t] = _mm512_setzero_ps();
        for (int64_t c = 0; c < n; c += 16) {
                __mmask16 m = mask16(n - c);
                __m512 wv[RB];
                UNROLL
                for (int i = 0; i < R; i++)
                        wv[i] = load16(w->data, dt, (r + i) * n + c, m);
                UNROLL
                for (int t = 0; t < T; t++) {
                        __m512 xv = _mm512_maskz_loadu_ps(m, x + t * ldx + c);
                        UNROLL
                        for (int i = 0; i < R; i++)
                                acc[i][t] = _mm512_fmadd_ps(wv[i], xv, acc[i][t]);
                }
        }
        UNROLL
        for (int t = 0; t < T; t++)
                UNROLL
                for (int i = 0; i < R; i++)
                        y[t * ldy + r + i] = _mm512_reduce_add_ps(acc[i][t]);
}

#define FP_MATMUL(name, dt)                                                                                    \
        static void name(const struct dse_qmat *w, const float *x, int64_t ldx, int64_t n, float *y,           \
                         int64_t ldy, int64_t r0, int64_t r1) {                                                \
                for (int64_t rs = r0; rs < r1; rs += RS) {                                                     \
                        int64_t re = rs + RS < r1 ? rs + RS : r1;                                              \
                        for (int64_t t0 = 0; t0 < n; t0 += TB) {                                               \
                                int T = n - t0 < TB ? (int)(n - t0) : TB;                                      \
                                const float *xt = x + t0 * ldx;                                                \
                                float *yt = y + t0 * ldy;                                                      \
                                int64_t r = rs;                                                                \
                                for (; r + RB <= re; r += RB)                                                  \
                                        switch (T) {                                                           \
                                        case 1: fp_block(w, dt, xt, ldx, yt, ldy, r, RB, 1); break;            \
                                        case 2: fp_block(w, dt, xt, ldx, yt, ldy, r, RB, 2); break;            \
                                        case 3: fp_block(w, dt, xt, ldx, yt, ldy, r, RB, 3); break;            \
                                        default: fp_block(w, dt, xt, ldx, yt, ldy, r, RB, 4); break;           \
                                        }                                                                      \
                                for (; r < re; r++)                                                            \
                                        switch (T) {                                                           \
                                        case 1: fp_block(w, dt, xt, ldx, yt, ldy, r, 1, 1); break;             \
                                        case 2: fp_block(w, dt, xt, ldx, yt, ldy, r, 1, 2); break;             \
                                        case 3: fp_block(w, dt, xt, ldx, yt, ldy, r, 1, 3); break;             \
                                        default: fp_block(w, dt, xt, ldx, yt, ldy, r, 1, 4); break;            \
                                        }                                                                      \
                        }                                                                                      \
                }                                                                                              \
        }                                                                                                      \
        static void name##_vec(const struct dse_qmat *w, const float *x, float *y, int64_t r0, int64_t r1) {   \
                name(w, x, 0, 1, y, 0, r0, r1);                                                                \
        }
FP_MATMUL(matmul_f32_avx512, DSE_DTYPE_F32)
FP_MATMUL(matmul_f16_avx512, DSE_DTYPE_F16)
FP_MATMUL(matmul_bf16_avx512, DSE_DTYPE_BF16)

/* ---- vector helpers -------------------------------------------------------------------- */

static float dot_avx512(const float *a, const float *b, int64_t n) {
        __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
        int64_t i = 0;
        for (; i + 32 <= n; i += 32) {
                a0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), a0);
                a1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), a1);
        }
        for (; i < n; i += 16) {
                __mmask16 m = mask16(n - i);
                a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), a0);
        }
        return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

static void axpy_avx512(float a, const float *x, float *y, int64_t n) {
        __m512 va = _mm512_set1_ps(a);
        for (int64_t i = 0; i < n; i += 16) {
                __mmask16 m = mask16(n - i);
                _mm512_mask_storeu_ps(y + i, m,
                                      _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
        }
}

/* Q4 (groups a multiple of 32): y of 128 columns (NC tiles of 32) held in registers over
 * all n rows. Each 16-row tile is first transposed on the stack (8 shuffles per 16 rows),
 * so a row's 32 columns are 16 contiguous bytes, its 4 bytes of each chunk k. Those 16
 * bytes broadcast to the 4 quarters of a zmm (a load, no shuffle) and shifted right by
 * 8e in quarter e put byte e of chunk k into the low bits of dword 4e + k: the low nibble is
 * column 8k + e, and shifted 4 more, the high one 8k + 4 + e. vpermps looks the nibble
 * up in the group's table of (q - z) * s, using only an index's low 4 bits. Per row and
 * 32 columns that is 2 shifts (port 0) and 2 lookups (port 5) beside 2 FMAs, where a
 * widening per row (vpmovzxbd) would crowd port 5 further. The table holds exactly what dequant_row
 * computes for each q, and each column's updates stay one FMA per row in row order, so y
 * is bit for bit dequant_row then axpy. Columns past cols (a cut last tile) are computed
 * from y read as 0 and never stored. */
static inline __attribute__((always_inline)) void axpy_rows_q4_block(const struct dse_qmat *w, int64_t r0, int64_t n,
                                                                     const float *a, float *y, int64_t c0,
                                                                     const int NC) {
        const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        /* dword 4e + k holds byte e of chunk k: the low nibble is column 8k + e, the high one
         * 8k + 4 + e; y's 32 columns in those two orders, and back */
        const __m512i sh_lo = _mm512_setr_epi32(0, 0, 0, 0, 8, 8, 8, 8, 16, 16, 16, 16, 24, 24, 24, 24);
        const __m512i sh_hi = _mm512_setr_epi32(4, 4, 4, 4, 12, 12, 12, 12, 20, 20, 20, 20, 28, 28, 28, 28);
        const __m512i lo_in = _mm512_setr_epi32(0, 8, 16, 24, 1, 9, 17, 25, 2, 10, 18, 26, 3, 11, 19, 27);
        const __m512i hi_in = _mm512_setr_epi32(4, 12, 20, 28, 5, 13, 21, 29, 6, 14, 22, 30, 7, 15, 23, 31);
        const __m512i out0 = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 1, 5, 9, 13, 17, 21, 25, 29);
        const __m512i out1 = _mm512_setr_epi32(2, 6, 10, 14, 18, 22, 26, 30, 3, 7, 11, 15, 19, 23, 27, 31);
        int64_t cols = w->cols, G = w->group_size, nb = (cols + DSE_Q4_COLS - 1) / DSE_Q4_COLS;
        __m512 al[4], ah[4];
        __mmask16 m0[4], m1[4];
        UNROLL
        for (int k = 0; k < NC; k++) {
                m0[k] = mask16(cols - c0 - 32 * k);
                m1[k] = mask16(cols - c0 - 32 * k - 16);
                __m512 y0 = _mm512_maskz_loadu_ps(m0[k], y + c0 + 32 * k);
                __m512 y1 = _mm512_maskz_loadu_ps(m1[k], y + c0 + 32 * k + 16);
                al[k] = _mm512_permutex2var_ps(y0, lo_in, y1);
                ah[k] = _mm512_permutex2var_ps(y0, hi_in, y1);
        }
        _Alignas(64) uint8_t buf[4][DSE_Q4_TILE]; /* tile k transposed: row L at 64 (L % 4) + 16 (L / 4) */
        for (int64_t R = r0 / DSE_Q4_ROWS, re = r0 + n; R * DSE_Q4_ROWS < re; R++) {
                const uint8_t *tile = (const uint8_t *)w->data + (R * nb + c0 / DSE_Q4_COLS) * DSE_Q4_TILE;
                UNROLL
                for (int k = 0; k < NC; k++) {
                        const uint8_t *p = tile + k * DSE_Q4_TILE;
                        __m512i v0 = _mm512_loadu_si512((const void *)p), v1 = _mm512_loadu_si512((const void *)(p + 64));
                        __m512i v2 = _mm512_loadu_si512((const void *)(p + 128)), v3 = _mm512_loadu_si512((const void *)(p + 192));
                        __m512i t0 = _mm512_unpacklo_epi32(v0, v1), t1 = _mm512_unpackhi_epi32(v0, v1);
                        __m512i t2 = _mm512_unpacklo_epi32(v2, v3), t3 = _mm512_unpackhi_epi32(v2, v3);
                        _mm512_store_si512((void *)buf[k], _mm512_unpacklo_epi64(t0, t2));
                        _mm512_store_si512((void *)(buf[k] + 64), _mm512_unpackhi_epi64(t0, t2));
                        _mm512_store_si512((void *)(buf[k] + 128), _mm512_unpacklo_epi64(t1, t3));
                        _mm512_store_si512((void *)(buf[k] + 192), _mm512_unpackhi_epi64(t1, t3));
                }
                int64_t ra = R * DSE_Q4_ROWS > r0 ? R * DSE_Q4_ROWS : r0;
                int64_t rz = R * DSE_Q4_ROWS + DSE_Q4_ROWS < re ? R * DSE_Q4_ROWS + DSE_Q4_ROWS : re;
                for (int64_t r = ra; r < rz; r++) {
                        unsigned L = (unsigned)r % DSE_Q4_ROWS, off = 64 * (L % 4) + 16 * (L / 4);
                        /* row r's scale and zero point of group g: 16 apart (model.h dse__q4_sidx) */
                        int64_t s0 = dse__q4_sidx(w->n_groups, r, 0);
                        __m512 va = _mm512_set1_ps(a[r - r0]), t = _mm512_setzero_ps();
                        int64_t gp = -1;
                        UNROLL
                        for (int k = 0; k < NC; k++) {
                                int64_t g = (c0 + 32 * k) / G;
                                if (g != gp) { /* a tile lies in one group (G a multiple of 32) */
                                        __m512 vz = _mm512_set1_ps((float)dse__q4_zero(w, s0 + DSE_Q4_ROWS * g));
                                        t = _mm512_mul_ps(_mm512_sub_ps(iota, vz),
                                                          _mm512_set1_ps(dse__q4_scale(w, s0 + DSE_Q4_ROWS * g)));
                                        gp = g;
                                }
                                __m512i v = _mm512_broadcast_i32x4(
                                        _mm_load_si128((const __m128i *)(buf[k] + off)));
                                al[k] = _mm512_fmadd_ps(va, _mm512_permutexvar_ps(_mm512_srlv_epi32(v, sh_lo), t), al[k]);
                                ah[k] = _mm512_fmadd_ps(va, _mm512_permutexvar_ps(_mm512_srlv_epi32(v, sh_hi), t), ah[k]);
                        }
                }
        }
        UNROLL
        for (int k = 0; k < NC; k++) {
                _mm512_mask_storeu_ps(y + c0 + 32 * k, m0[k], _mm512_permutex2var_ps(al[k], out0, ah[k]));
                _mm512_mask_storeu_ps(y + c0 + 32 * k + 16, m1[k], _mm512_permutex2var_ps(al[k], out1, ah[k]));
        }
}

/* Q8, groups a multiple of 16 columns: y held in registers over all n rows, 128 columns
 * (NC pieces of 16) at a time; per piece dequant_row's multiply by the group's scale and
 * axpy's FMA, in row order, so the same bits as those two. */
static inline __attribute__((always_inline)) void axpy_rows_q8_block(const struct dse_qmat *w, int64_t r0, int64_t n,
                                                                     const float *a, float *y, int64_t c0,
                                                                     const int NC) {
        int64_t cols = w->cols, G = w->group_size;
        __m512 acc[8];
        UNROLL
        for (int k = 0; k < NC; k++)
                acc[k] = _mm512_loadu_ps(y + c0 + 16 * k);
        for (int64_t i = 0; i < n; i++) {
                const int8_t *row = (const int8_t *)w->data + (r0 + i) * cols + c0;
                const float *srow = w->scale + (r0 + i) * w->n_groups;
                __m512 va = _mm512_set1_ps(a[i]);
                UNROLL
                for (int k = 0; k < NC; k++) {
                        __m512 x = _mm512_mul_ps(
                                _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(row + 16 * k)))),
                                _mm512_set1_ps(srow[(c0 + 16 * k) / G]));
                        acc[k] = _mm512_fmadd_ps(va, x, acc[k]);
                }
        }
        UNROLL
        for (int k = 0; k < NC; k++)
                _mm512_storeu_ps(y + c0 + 16 * k, acc[k]);
}

/* Q8, any group: per row, dequant_row's multiply and axpy's FMA on 16 columns at a time,
 * the row never stored. */
static void axpy_rows_q8(const struct dse_qmat *w, int64_t r0, int64_t n, const float *a, float *y) {
        int64_t cols = w->cols, G = w->group_size;
        for (int64_t i = 0; i < n; i++) {
                int64_t r = r0 + i;
                const int8_t *row = (const int8_t *)w->data + r * cols;
                const float *srow = w->scale + r * w->n_groups;
                __m512 va = _mm512_set1_ps(a[i]);
                for (int64_t g = 0; g < w->n_groups; g++) {
                        int64_t c1 = (g + 1) * G < cols ? (g + 1) * G : cols;
                        __m512 s = _mm512_set1_ps(srow[g]);
                        for (int64_t c = g * G; c < c1; c += 16) {
                                __mmask16 m = mask16(c1 - c);
                                __m512 x = _mm512_mul_ps(
                                        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, row + c))), s);
                                _mm512_mask_storeu_ps(y + c, m, _mm512_fmadd_ps(va, x, _mm512_maskz_loadu_ps(m, y + c)));
                        }
                }
        }
}

/* F32, F16, BF16: their conversions are exact, so a widened piece is what dequant_row
 * writes; per row, axpy's FMA on it. */
static void axpy_rows_fp(const struct dse_qmat *w, int64_t r0, int64_t n, const float *a, float *y) {
        int64_t cols = w->cols;
        for (int64_t i = 0; i < n; i++) {
                __m512 va = _mm512_set1_ps(a[i]);
                for (int64_t c = 0; c < cols; c += 16) {
                        __mmask16 m = mask16(cols - c);
                        __m512 x = load16(w->data, w->dtype, (r0 + i) * cols + c, m);
                        _mm512_mask_storeu_ps(y + c, m, _mm512_fmadd_ps(va, x, _mm512_maskz_loadu_ps(m, y + c)));
                }
        }
}

/* Q4 times float activations: 16-row blocks of the interleaved layout, any group size
 * (q4_f32_rows.h: the same sums as AVX2's, 4 tokens per decoded block). */
static void matvec_q4_avx512(const struct dse_qmat *w, const float *x, float *y, int64_t r0, int64_t r1) {
        q4f_matvec(w, x, y, r0, r1);
}

static void matmul_q4_avx512(const struct dse_qmat *w, const float *x, int64_t ldx, int64_t n, float *y, int64_t ldy,
                             int64_t r0, int64_t r1) {
        q4f_matmul(w, x, ldx, n, y, ldy, r0, r1);
}

static void axpy_rows_avx512(const struct dse_qmat *w, int64_t r0, int64_t n, const float *a, float *y) {
        if (w->dtype == DSE_DTYPE_Q4 && w->group_size % DSE_Q4_COLS == 0) {
                if (n <= 0)
                        return;
                int64_t c0 = 0;
                for (; c0 + 128 <= w->cols; c0 += 128)
                        axpy_rows_q4_block(w, r0, n, a, y, c0, 4);
                switch ((w->cols - c0 + 31) / 32) { /* the last tile may be cut */
                case 1: axpy_rows_q4_block(w, r0, n, a, y, c0, 1); break;
                case 2: axpy_rows_q4_block(w, r0, n, a, y, c0, 2); break;
                case 3: axpy_rows_q4_block(w, r0, n, a, y, c0, 3); break;
                case 4: axpy_rows_q4_block(w, r0, n, a, y, c0, 4); break;
                default: break;
                }
        } else if (w->dtype == DSE_DTYPE_Q8 && w->group_size % 16 == 0 && w->cols % 16 == 0) {
                int64_t c0 = 0;
                for (; c0 + 128 <= w->cols; c0 += 128)
                        axpy_rows_q8_block(w, r0, n, a, y, c0, 8);
                switch ((w->cols - c0) / 16) {
                case 1: axpy_rows_q8_block(w, r0, n, a, y, c0, 1); break;
                case 2: axpy_rows_q8_block(w, r0, n, a, y, c0, 2); break;
                case 3: axpy_rows_q8_block(w, r0, n, a, y, c0, 3); break;
                case 4: axpy_rows_q8_block(w, r0, n, a, y, c0, 4); break;
                case 5: axpy_rows_q8_block(w, r0, n, a, y, c0, 5); break;
                case 6: axpy_rows_q8_block(w, r0, n, a, y, c0, 6); break;
                case 7: axpy_rows_q8_block(w, r0, n, a, y, c0, 7); break;
                default: break;
                }
        } else if (w->dtype == DSE_DTYPE_Q8) {
                axpy_rows_q8(w, r0, n, a, y);
        } else if (w->dtype == DSE_DTYPE_F32 || w->dtype == DSE_DTYPE_F16 || w->dtype == DSE_DTYPE_BF16) {
                axpy_rows_fp(w, r0, n, a, y);
        } else {
                dse__kernels_fma_axpy_rows(w, r0, n, a, y);
        }
}

/* Lane i: the sum of v[i]'s lanes, for 16 vectors at once (pairs within 128-bit lanes,
 * then quads, then across the lanes): 45 shuffles and adds where 16 separate reductions
 * take about 130. */
static inline __m512 reduce16(const __m512 v[16]) {
        __m512 a[8], b[4], c[2];
        UNROLL
        for (int i = 0; i < 8; i++) /* per 128-bit lane: v[2i]'s and v[2i+1]'s partials, interleaved */
                a[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]),
                                     _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
        UNROLL
        for (int i = 0; i < 4; i++) /* per 128-bit lane: one partial of each of v[4i..4i+3] */
                b[i] = _mm512_add_ps(_mm512_shuffle_ps(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm512_shuffle_ps(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
        UNROLL
        for (int i = 0; i < 2; i++)
                c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
        return _mm512_add_ps(_mm512_shuffle_f32x4(c[0], c[1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(c[0], c[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

/* 16 keys at a time: q's piece is loaded once for all 16, and their sums are reduced
 * together; fewer keys one by one. */
static void attn_scores_avx512(const float *q, const float *k, int64_t ld, int64_t n, int64_t len, float scale,
                               float *scores) {
        int64_t t = 0;
        for (; t + 16 <= n; t += 16) {
                __m512 acc[16];
                UNROLL
                for (int i = 0; i < 16; i++)
                        acc[i] = _mm512_setzero_ps();
                for (int64_t d = 0; d < len; d += 16) {
                        __mmask16 m = mask16(len - d);
                        __m512 qv = _mm512_maskz_loadu_ps(m, q + d);
                        UNROLL
                        for (int i = 0; i < 16; i++)
                                acc[i] = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(m, k + (t + i) * ld + d), acc[i]);
                }
                _mm512_storeu_ps(scores + t, _mm512_mul_ps(reduce16(acc), _mm512_set1_ps(scale)));
        }
        for (; t < n; t++)
                scores[t] = scale * dot_avx512(q, k + t * ld, len);
}

/* C pieces of 16 (the last masked at len) from column d0, in registers over all n rows. */
static inline __attribute__((always_inline)) void accum_piece(const float *w, const float *v, int64_t ld, int64_t n,
                                                              int64_t len, float *out, int64_t d0, const int C) {
        __m512 acc[8];
        __mmask16 m[8];
        UNROLL
        for (int c = 0; c < C; c++) {
                m[c] = mask16(len - d0 - 16 * c);
                acc[c] = _mm512_maskz_loadu_ps(m[c], out + d0 + 16 * c);
        }
        for (int64_t t = 0; t < n; t++) {
                __m512 wt = _mm512_set1_ps(w[t]);
                const float *vt = v + t * ld + d0;
                UNROLL
                for (int c = 0; c < C; c++)
                        acc[c] = _mm512_fmadd_ps(wt, _mm512_maskz_loadu_ps(m[c], vt + 16 * c), acc[c]);
        }
        UNROLL
        for (int c = 0; c < C; c++)
                _mm512_mask_storeu_ps(out + d0 + 16 * c, m[c], acc[c]);
}

static void attn_accum_avx512(const float *w, const float *v, int64_t ld, int64_t n, int64_t len, float *out) {
        for (int64_t d0 = 0; d0 < len; d0 += 128)
                switch ((len - d0 + 15) / 16) {
                case 1: accum_piece(w, v, ld, n, len, out, d0, 1); break;
                case 2: accum_piece(w, v, ld, n, len, out, d0, 2); break;
                case 3: accum_piece(w, v, ld, n, len, out, d0, 3); break;
                case 4: accum_piece(w, v, ld, n, len, out, d0, 4); break;
                case 5: accum_piece(w, v, ld, n, len, out, d0, 5); break;
                case 6: accum_piece(w, v, ld, n, len, out, d0, 6); break;
                case 7: accum_piece(w, v, ld, n, len, out, d0, 7); break;
                default: accum_piece(w, v, ld, n, len, out, d0, 8); break;
                }
}

/* The sum of squares vectorised, the float squares summed in float64 as the _ref twin
 * sums them (in another order, which float64 leaves out of the float mean); the scaling
 * as the twin does it, w * (x * inv). */
static void rmsnorm_avx512(float *out, const float *x, const float *w, int64_t n, float eps) {
        __m512d ss0 = _mm512_setzero_pd(), ss1 = _mm512_setzero_pd();
        for (int64_t i = 0; i < n; i += 16) {
                __m512 v = _mm512_maskz_loadu_ps(mask16(n - i), x + i);
                __m512 sq = _mm512_mul_ps(v, v);
                ss0 = _mm512_add_pd(ss0, _mm512_cvtps_pd(_mm512_castps512_ps256(sq)));
                ss1 = _mm512_add_pd(ss1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(sq), 1))));
        }
        double ss = _mm512_reduce_add_pd(_mm512_add_pd(ss0, ss1));
        __m512 inv = _mm512_set1_ps(1.0f / sqrtf((float)(ss / (double)n) + eps));
        for (int64_t i = 0; i < n; i += 16) {
                __mmask16 m = mask16(n - i);
                __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), inv);
                _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, w + i), v));
        }
}

/* The table's dequant_row before dse__kernels_fill_avx512 replaced it (the AVX2 one, by
 * resolve order: every fill stores the same entry), for the formats this file leaves to
 * it. */
static _Atomic dse_dequant_row_fn below_dequant_row;

/* out[c] = W[r, c] for Q8 and Q4 (groups a multiple of 32), 16 columns per step within
 * each group, with the _ref twin's operations per element ((float)q * s, ((float)q - (float)z) * s), so the
 * values are identical; the other formats through the entry below. MLA absorption
 * decodes 128 kv_b_proj rows per head and token with it. */
static void dequant_row_avx512(const struct dse_qmat *w, int64_t r, float *out) {
        int64_t n = w->cols, G = w->group_size;
        if (w->dtype == DSE_DTYPE_Q8) {
                const float *srow = w->scale + r * w->n_groups;
                const int8_t *row = (const int8_t *)w->data + r * n;
                for (int64_t g = 0; g < w->n_groups; g++) {
                        int64_t c1 = (g + 1) * G < n ? (g + 1) * G : n;
                        __m512 s = _mm512_set1_ps(srow[g]);
                        for (int64_t c = g * G; c < c1; c += 16) {
                                __mmask16 m = mask16(c1 - c);
                                __m512 q = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, row + c)));
                                _mm512_mask_storeu_ps(out + c, m, _mm512_mul_ps(q, s));
                        }
                }
        } else if (w->dtype == DSE_DTYPE_Q4 && G % DSE_Q4_COLS == 0) {
                /* row r's 4 bytes of the 4 chunks of a tile (64 bytes apart), each doubled
                 * and widened to 8 lanes: shifted by 0 or 4, columns 8k..8k+7 in order. A
                 * tile lies in one group (other groups take the entry below). */
                int64_t nb = (n + DSE_Q4_COLS - 1) / DSE_Q4_COLS;
                const uint8_t *p = (const uint8_t *)w->data + (r / DSE_Q4_ROWS) * nb * DSE_Q4_TILE + 4 * (r % DSE_Q4_ROWS);
                /* row r's group g at srow[16 g] (model.h: 16 rows interleaved) */
                int64_t s0 = dse__q4_sidx(w->n_groups, r, 0);
                const __m512i shift = _mm512_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4, 0, 0, 0, 0, 4, 4, 4, 4);
                const __m512i lo4 = _mm512_set1_epi32(0xf);
                for (int64_t b = 0; b < nb; b++) {
                        int64_t c = b * DSE_Q4_COLS, g = c / G;
                        __m512 s = _mm512_set1_ps(dse__q4_scale(w, s0 + DSE_Q4_ROWS * g));
                        __m512 vz = _mm512_set1_ps((float)dse__q4_zero(w, s0 + DSE_Q4_ROWS * g));
                        int32_t d[4];
                        for (int k = 0; k < 4; k++)
                                memcpy(&d[k], p + b * DSE_Q4_TILE + 64 * k, sizeof d[k]);
                        __m128i dv = _mm_loadu_si128((const __m128i *)d);
                        __m512i v0 = _mm512_cvtepu8_epi32(_mm_unpacklo_epi32(dv, dv));
                        __m512i v1 = _mm512_cvtepu8_epi32(_mm_unpackhi_epi32(dv, dv));
                        v0 = _mm512_and_si512(_mm512_srlv_epi32(v0, shift), lo4);
                        v1 = _mm512_and_si512(_mm512_srlv_epi32(v1, shift), lo4);
                        _mm512_mask_storeu_ps(out + c, mask16(n - c),
                                              _mm512_mul_ps(_mm512_sub_ps(_mm512_cvtepi32_ps(v0), vz), s));
                        _mm512_mask_storeu_ps(out + c + 16, mask16(n - c - 16),
                                              _mm512_mul_ps(_mm512_sub_ps(_mm512_cvtepi32_ps(v1), vz), s));
                }
        } else {
                atomic_load_explicit(&below_dequant_row, memory_order_relaxed)(w, r, out);
        }
}

/* e^x, 16 lanes: x = n ln2 + r with |r| <= ln2/2 (ln2 split in two so n ln2 is exact
 * enough), e^r by its degree-7 Taylor polynomial (relative error below 2^-24 on that
 * range), times 2^n by vscalefps, which gives inf and 0 past the float range as expf
 * does. Within 2 ulp of expf. */
static inline __m512 exp16(__m512 x) {
        x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(100.0f)), _mm512_set1_ps(-110.0f));
        __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
        r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
        __m512 p = _mm512_set1_ps(1.0f / 5040);
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
        return _mm512_scalef_ps(p, n);
}

/* The max, then e^(x - max) and its sum. */
static void softmax_parts_avx512(float *x, int64_t n, float *ret_max, float *ret_sum) {
        __m512 mv = _mm512_set1_ps(-INFINITY);
        for (int64_t i = 0; i < n; i += 16)
                mv = _mm512_max_ps(mv, _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), mask16(n - i), x + i));
        float top = _mm512_reduce_max_ps(mv);
        __m512 max = _mm512_set1_ps(top), sum = _mm512_setzero_ps();
        for (int64_t i = 0; i < n; i += 16) {
                __mmask16 m = mask16(n - i);
                __m512 e = _mm512_maskz_mov_ps(m, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), max)));
                _mm512_mask_storeu_ps(x + i, m, e);
                sum = _mm512_add_ps(sum, e);
        }
        *ret_max = top;
        *ret_sum = _mm512_reduce_add_ps(sum);
}

/* softmax_parts, then one reciprocal multiply (within an ulp of the _ref twin's
 * division). */
static void softmax_avx512(float *x, int64_t n) {
        float top, sum;
        softmax_parts_avx512(x, n, &top, &sum);
        __m512 inv = _mm512_set1_ps(1.0f / sum);
        for (int64_t i = 0; i < n; i += 16) {
                __mmask16 m = mask16(n - i);
                _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), inv));
        }
}

/* gate / (1 + e^-gate) * up: e^-gate overflows to inf for gate < -88.7 and the quotient
 * is then -0, as in the _ref twin. */
static void swiglu_avx512(float *gate, const float *up, int64_t n) {
        for (int64_t i = 0; i < n; i += 16) {
                __mmask16 m = mask16(n - i);
                __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
                __m512 s = _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), exp16(_mm512_sub_ps(_mm512_setzero_ps(), g))));
                _mm512_mask_storeu_ps(gate + i, m, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m, up + i)));
        }
}

void dse__kernels_fill_avx512(struct dse_kernels *k) {
        atomic_store_explicit(&below_dequant_row, k->dequant_row, memory_order_relaxed);
        k->level = DSE_CPU_AVX512;
        k->matvec[DSE_DTYPE_F32] = matmul_f32_avx512_vec;
        k->matvec[DSE_DTYPE_F16] = matmul_f16_avx512_vec;
        k->matvec[DSE_DTYPE_BF16] = matmul_bf16_avx512_vec;
        k->matmul[DSE_DTYPE_F32] = matmul_f32_avx512;
        k->matmul[DSE_DTYPE_F16] = matmul_f16_avx512;
        k->matmul[DSE_DTYPE_BF16] = matmul_bf16_avx512;
        k->matvec[DSE_DTYPE_Q4] = matvec_q4_avx512;
        k->matmul[DSE_DTYPE_Q4] = matmul_q4_avx512;
        k->quantize_xq = quantize_xq_avx512;
        k->dequant_row = dequant_row_avx512;
        k->dot = dot_avx512;
        k->axpy = axpy_avx512;
        k->axpy_rows = axpy_rows_avx512;
        k->attn_scores = attn_scores_avx512;
        k->attn_accum = attn_accum_avx512;
        k->rmsnorm = rmsnorm_avx512;
        k->softmax = softmax_avx512;
        k->softmax_parts = softmax_parts_avx512;
        k->swiglu = swiglu_avx512;
}

