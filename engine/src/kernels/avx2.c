/* AVX2 + FMA + F16C kernels (this file alone is compiled with -mavx2 -mfma -mf16c).
 * Each routine computes exactly what its `_ref` twin in ref.c computes, 8 columns at a
 * time with float32 FMA accumulation; only the summation order differs. Helpers are
 * static inline so no AVX2 code reaches other callers through the linker. */
#include <immintrin.h>
#include <string.h>

#include "kernels/avx2_loads.h"
#include "kernels/kernels.h"
#include "kernels/q4_f32_rows.h"
#include "kernels/q4_xsums.h"

/* Register-block loops must unroll completely (at -O2 GCC leaves them rolled, and the
 * accumulators then live in memory). */
#define UNROLL _Pragma("GCC unroll 8")

static void matvec_f32_avx2(const struct dse_qmat *w, const float *x, float *y, int64_t r0, int64_t r1) {
        const float *W = w->data; /* (rows, cols) */
        int64_t n = w->cols;
        for (int64_t r = r0; r < r1; r++) {
                const float *row = W + r * n;
                __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
                int64_t c = 0;
                for (; c + 16 <= n; c += 16) {
                        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(row + c), _mm256_loadu_ps(x + c), a0);
                        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(row + c + 8), _mm256_loadu_ps(x + c + 8), a1);
                }
                for (; c + 8 <= n; c += 8)
                        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(row + c), _mm256_loadu_ps(x + c), a0);
                float acc = hsum8(_mm256_add_ps(a0, a1));
                for (; c < n; c++)
                        acc += row[c] * x[c];
                y[r] = acc;
        }
}

/* Columns c..c+7 of rows 0..R-1 (row i at row + i * n) widened once, times the same
 * columns of tokens 0..T-1 of x, into acc[i][t]. */
static inline __attribute__((always_inline)) void bf16_piece(const uint16_t *row, int64_t n, const float *x,
                                                             int64_t ldx, int64_t c, const int R, const int T,
                                                             __m256 acc[4][3]) {
        __m256 wv[4];
        UNROLL
        for (int i = 0; i < R; i++)
                wv[i] = load_bf16x8(row + i * n + c);
        UNROLL
        for (int t = 0; t < T; t++) {
                __m256 xv = _mm256_loadu_ps(x + t * ldx + c);
                UNROLL
                for (int i = 0; i < R; i++)
                        acc[i][t] = _mm256_fmadd_ps(wv[i], xv, acc[i][t]);
        }
}

/* Rows r..r+R-1 of a BF16 matrix times tokens 0..T-1 of x (R * T <= 6 for the two
 * accumulators of each pair, R <= 4, T <= 3): each 8-column piece of a row is widened
 * once and multiplies the tile's T tokens while it sits in a register. A (row, token)
 * sum is the same whatever tile computes it: columns c..c+7 of each 16 into a0, c+8..c+15
 * into a1, a last 8 into a0, then hsum8(a0 + a1) and the last cols % 8 one by one. */
static inline __attribute__((always_inline)) void bf16_tile(const struct dse_qmat *w, const float *x, int64_t ldx,
                                                            float *y, int64_t ldy, int64_t r, const int R,
                                                            const int T) {
        int64_t n = w->cols, c = 0;
        const uint16_t *row = (const uint16_t *)w->data + r * n; /* row i at row + i * n */
        __m256 a0[4][3], a1[4][3];
        UNROLL
        for (int i = 0; i < R; i++)
                UNROLL
                for (int t = 0; t < T; t++)
                        a0[i][t] = a1[i][t] = _mm256_setzero_ps();
        for (; c + 16 <= n; c += 16) {
                bf16_piece(row, n, x, ldx, c, R, T, a0);
                bf16_piece(row, n, x, ldx, c + 8, R, T, a1);
        }
        if (c + 8 <= n) {
                bf16_piece(row, n, x, ldx, c, R, T, a0);
                c += 8;
        }
        UNROLL
        for (int t = 0; t < T; t++)
                UNROLL
                for (int i = 0; i < R; i++) {
                        float acc = hsum8(_mm256_add_ps(a0[i][t], a1[i][t]));
                        for (int64_t cc = c; cc < n; cc++)
                                acc += dse__kern_bf16_to_f32(row[i * n + cc]) * x[t * ldx + cc];
                        y[t * ldy + r + i] = acc;
                }
}

/* Rows r..r+R-1 for every token, in tiles of up to 3 tokens. */
#define BF16_ROWS(R)                                                                                           \
        for (int64_t t0 = 0; t0 < n; t0 += 3)                                                                  \
                switch (n - t0) {                                                                              \
                case 1: bf16_tile(w, x + t0 * ldx, ldx, y + t0 * ldy, ldy, r, R, 1); break;                   \
                case 2: bf16_tile(w, x + t0 * ldx, ldx, y + t0 * ldy, ldy, r, R, 2); break;                   \
                default: bf16_tile(w, x + t0 * ldx, ldx, y + t0 * ldy, ldy, r, R, 3); break;                  \
                }

/* One token (a matvec): blocks of 4 rows, so one x load serves 4 rows. Several: pairs of
 * rows times tiles of 3 tokens, each pair's weights widened once per tile rather than
 * once per token, and the pair staying in L1 while every tile uses it. */
static void matmul_bf16_avx2(const struct dse_qmat *w, const float *x, int64_t ldx, int64_t n, float *y,
                             int64_t ldy, int64_t r0, int64_t r1) {
        int64_t r = r0;
        if (n == 1) {
                for (; r + 4 <= r1; r += 4)
                        bf16_tile(w, x, ldx, y, ldy, r, 4, 1);
        } else {
                for (; r + 2 <= r1; r += 2)
                        BF16_ROWS(2)
        }
        for (; r < r1; r++)
                BF16_ROWS(1)
}
#undef BF16_ROWS

static void matvec_bf16_avx2(const struct dse_qmat *w, const float *x, float *y, int64_t r0, int64_t r1) {
        matmul_bf16_avx2(w, x, 0, 1, y, 0, r0, r1);
}

static void matvec_f16_avx2(const struct dse_qmat *w, const float *x, float *y, int64_t r0, int64_t r1) {
        const uint16_t *W = w->data; /* (rows, cols) */
        int64_t n = w->cols;
        for (int64_t r = r0; r < r1; r++) {
                const uint16_t *row = W + r * n;
                __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
                int64_t c = 0;
                for (; c + 16 <= n; c += 16) {
                        a0 = _mm256_fmadd_ps(load_f16x8(row + c), _mm256_loadu_ps(x + c), a0);
                        a1 = _mm256_fmadd_ps(load_f16x8(row + c + 8), _mm256_loadu_ps(x + c + 8), a1);
                }
                for (; c + 8 <= n; c += 8)
                        a0 = _mm256_fmadd_ps(load_f16x8(row + c), _mm256_loadu_ps(x + c), a0);
                float acc = hsum8(_mm256_add_ps(a0, a1));
                for (; c < n; c++)
                        acc += dse__kern_f16_to_f32(row[c]) * x[c];
                y[r] = acc;
        }
}

static void matvec_f8_avx2(const struct dse_qmat *w, const float *x, float *y, int64_t r0, int64_t r1) {
        const uint8_t *W = w->data; /* (rows, cols) */
        const float *lut = dse__f8e4m3_table();
        int64_t n = w->cols;
        for (int64_t r = r0; r < r1; r++) {
                const uint8_t *row = W + r * n;
                const float *srow = w->scale + (r / DSE_F8_BLOCK) * w->n_groups; /* (n_groups) */
                float acc = 0.0f;
                for (int64_t c0 = 0; c0 < n; c0 += DSE_F8_BLOCK) {
                        int64_t c1 = c0 + DSE_F8_BLOCK < n ? c0 + DSE_F8_BLOCK : n, c = c0;
                        __m256 a = _mm256_setzero_ps();
                        for (; c + 8 <= c1; c += 8)
                                a = _mm256_fmadd_ps(load_f8x8(row + c, lut), _mm256_loadu_ps(x + c), a);
                        float part = hsum8(a);
                        for (; c < c1; c++)
                                part += lut[row[c]] * x[c];
                        acc += part * srow[c0 / DSE_F8_BLOCK];
                }
                y[r] = acc;
        }
}

static void matvec_q8_avx2(const struct dse_qmat *w, const float *x, float *y, int64_t r0, int64_t r1) {
        const int8_t *W = w->data; /* (rows, cols) */
        int64_t n = w->cols, G = w->group_size;
        for (int64_t r = r0; r < r1; r++) {
                const int8_t *row = W + r * n;
                const float *srow = w->scale + r * w->n_groups; /* (n_groups) */
                __m256 acc = _mm256_setzero_ps();
                float tail = 0.0f;
                for (int64_t g = 0; g < w->n_groups; g++) {
                        int64_t c = g * G, c1 = c + G < n ? c + G : n;
                        __m256 part = _mm256_setzero_ps();
                        for (; c + 8 <= c1; c += 8)
                                part = _mm256_fmadd_ps(load_i8x8(row + c), _mm256_loadu_ps(x + c), part);
                        float t = 0.0f;
                        for (; c < c1; c++)
                                t += (float)row[c] * x[c];
                        acc = _mm256_fmadd_ps(part, _mm256_set1_ps(srow[g]), acc);
                        tail += t * srow[g];
                }
                y[r] = hsum8(acc) + tail;
        }
}

/* ---- int8 activations -------------------------------------------------------------- */

/* One 32-column block of activations: d and q exactly as quantize_xq_ref computes them
 * (the same max, the same 127/max product, round-to-nearest-even conversion). */
static void quantize_xq_avx2(const float *x, int64_t ldx, struct dse_xq *xq) {
        const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
        for (int64_t t = 0; t < xq->n; t++) {
                const float *xt = x + t * ldx;
                int8_t *q = xq->q + t * xq->n_blocks * DSE_XQ_BLOCK;
                float *d = xq->d + t * xq->n_blocks;
                for (int64_t b = 0; b < xq->n_blocks; b++) {
                        int64_t c0 = b * DSE_XQ_BLOCK, len = xq->cols - c0 < DSE_XQ_BLOCK ? xq->cols - c0 : DSE_XQ_BLOCK;
                        float tail[DSE_XQ_BLOCK];
                        const float *src = xt + c0;
                        if (len < DSE_XQ_BLOCK) {
                                memset(tail, 0, sizeof tail);
                                memcpy(tail, src, (size_t)len * sizeof(float));
                                src = tail;
                        }
                        __m256 v0 = _mm256_loadu_ps(src), v1 = _mm256_loadu_ps(src + 8);
                        __m256 v2 = _mm256_loadu_ps(src + 16), v3 = _mm256_loadu_ps(src + 24);
                        __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(v0, abs_mask), _mm256_and_ps(v1, abs_mask)),
                                                 _mm256_max_ps(_mm256_and_ps(v2, abs_mask), _mm256_and_ps(v3, abs_mask)));
                        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
                        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
                        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
                        float amax = _mm_cvtss_f32(m4);
                        float id = amax > 0.0f ? 127.0f / amax : 0.0f;
                        d[b] = dse__xq_scale(amax);
                        __m256 vid = _mm256_set1_ps(id);
                        __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(v0, vid));
                        __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(v1, vid));
                        __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(v2, vid));
                        __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(v3, vid));
                        __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
                        p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
                        _mm256_storeu_si256((__m256i *)(q + c0), p);
                }
        }
}

/* ---- Q4 weights (16 rows interleaved) times int8 activations ---------------------------
 * Chunk k (64 bytes) of a tile holds 16 rows x 4 bytes, an int32 lane per row: the low
 * nibbles are columns 8k..8k+3, the high ones 8k+4..8k+7; its 32-byte halves are rows 0-7
 * and 8-15 of the row block. AVX2 has no vpdpbusd: vpmaddubsw multiplies the nibbles
 * (unsigned) by the 4 broadcast activation bytes of their columns (signed) into int16
 * pair sums, the 8 products of a 32-column block (4 chunks, low and high nibbles) add up
 * in int16 (at most 16 * 15 * 127 = 30480 in magnitude, every partial sum too: no
 * saturation), and one vpmaddwd by 1 makes each row lane's exact int32 sum S_b over the
 * block. Per row and token:
 *   F_g  = sum over the group's blocks of cvt(S_b) * d_b     (one FMA per block)
 *   acc += (F_g - z_g * X_g) * s_g                            (once per group)
 * with X_g = sum_b d_b * sum(q_b) of the token, so the zero point costs nothing per
 * block. Each (row, token) lane sees this one sequence of operations whatever the number
 * of tokens in the call and the row range, so its result depends on neither (the
 * determinism test-engine-kv checks bitwise). */

#define Q4XQ_T   2    /* tokens per register block (x both halves: 4 sums, 4 F in registers) */
#define Q4XQ_TB  64   /* tokens per super-block: their acc stay on the stack */
#define Q4XQ_CAP 8192 /* floats of X on the stack (32 KiB) */

static inline __m256i bcast32(const int8_t *p) {
        int32_t v;
        memcpy(&v, p, sizeof v);
        return _mm256_set1_epi32(v);
}

/* Group g of row block R (tiles at p) for tokens t..t+T-1 (T <= Q4XQ_T): acc (lanes =
 * the 16 rows, per token) += (F_g - z * X_g) * s, sv and zv the rows' s_g and z_g (16
 * floats each, converted on the stack once per group from either Q4 form). */
static inline __attribute__((always_inline)) void q4_xq_group(const uint8_t *p, const struct dse_xq *xq, int64_t t,
                                                              int64_t b0, int64_t b1, const float *Xg, int64_t ng,
                                                              const float *sv, const float *zv, float (*acc)[16],
                                                              const int T) {
        int64_t nb = xq->n_blocks;
        const __m256i m = _mm256_set1_epi8(0x0f), one16 = _mm256_set1_epi16(1);
        const int8_t *q[Q4XQ_T];
        const float *d[Q4XQ_T];
        __m256 F[Q4XQ_T][2];
        UNROLL
        for (int j = 0; j < T; j++) {
                q[j] = xq->q + (t + j) * nb * DSE_XQ_BLOCK;
                d[j] = xq->d + (t + j) * nb;
                F[j][0] = F[j][1] = _mm256_setzero_ps();
        }
        for (int64_t b = b0; b < b1; b++) {
                const uint8_t *tile = p + b * DSE_Q4_TILE;
                __m256i S[Q4XQ_T][2];
                UNROLL
                for (int j = 0; j < T; j++)
                        S[j][0] = S[j][1] = _mm256_setzero_si256();
                UNROLL
                for (int k = 0; k < 4; k++) {
                        _mm_prefetch((const char *)(tile + 64 * k + DSE_PREFETCH_AHEAD), _MM_HINT_T1);
                        __m256i xl[Q4XQ_T], xh[Q4XQ_T];
                        UNROLL
                        for (int j = 0; j < T; j++) {
                                xl[j] = bcast32(q[j] + b * DSE_XQ_BLOCK + 8 * k);
                                xh[j] = bcast32(q[j] + b * DSE_XQ_BLOCK + 8 * k + 4);
                        }
                        UNROLL
                        for (int h = 0; h < 2; h++) {
                                __m256i v = _mm256_loadu_si256((const __m256i *)(tile + 64 * k + 32 * h));
                                DSE_LOAD_ONCE(v);
                                __m256i lo = _mm256_and_si256(v, m), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m);
                                UNROLL
                                for (int j = 0; j < T; j++)
                                        S[j][h] = _mm256_add_epi16(S[j][h], _mm256_add_epi16(_mm256_maddubs_epi16(lo, xl[j]),
                                                                                             _mm256_maddubs_epi16(hi, xh[j])));
                        }
                }
                UNROLL
                for (int j = 0; j < T; j++) {
                        __m256 dv = _mm256_set1_ps(d[j][b]);
                        UNROLL
                        for (int h = 0; h < 2; h++)
                                F[j][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(S[j][h], one16)), dv, F[j][h]);
                }
        }
        UNROLL
        for (int j = 0; j < T; j++) {
                __m256 xg = _mm256_set1_ps(Xg[j * ng]);
                UNROLL
                for (int h = 0; h < 2; h++) {
                        __m256 f = _mm256_fnmadd_ps(_mm256_load_ps(zv + 8 * h), xg, F[j][h]);
                        _mm256_store_ps(acc[j] + 8 * h,
                                        _mm256_fmadd_ps(f, _mm256_loadu_ps(sv + 8 * h), _mm256_load_ps(acc[j] + 8 * h)));
                }
        }
}

/* Row block by row block: each group's 16 x G weights stay in L1 while every token of
 * the super-block uses them. Rows of a partial block outside [r0, r1) and rows past the
 * matrix (whose padding, scales and zero points too, may hold anything) are computed and
 * not stored. */
static void matmul_xq_q4_avx2(const struct dse_qmat *w, const struct dse_xq *xq, float *y, int64_t ldy, int64_t r0,
                              int64_t r1) {
        int64_t ng = w->n_groups, nb = xq->n_blocks;
        /* a 32-column block must lie in one group; past Q4XQ_CAP groups (more than 262144
         * columns) X would not fit on the stack: the reference takes both */
        if (w->group_size % DSE_XQ_BLOCK || ng > Q4XQ_CAP || r0 >= r1) {
                dse__kernels_ref_matmul_xq(w, xq, y, ldy, r0, r1);
                return;
        }
        int64_t bpg = w->group_size / DSE_XQ_BLOCK, tb = Q4XQ_CAP / ng < Q4XQ_TB ? Q4XQ_CAP / ng : Q4XQ_TB;
        float X[Q4XQ_CAP];
        _Alignas(32) float acc[Q4XQ_TB][16], sv[16], zv[16];
        for (int64_t t0 = 0; t0 < xq->n; t0 += tb) {
                int64_t T = xq->n - t0 < tb ? xq->n - t0 : tb;
                q4_prep_x(xq, w->group_size, t0, T, 0, ng, X, ng);
                for (int64_t R = r0 / DSE_Q4_ROWS; R * DSE_Q4_ROWS < r1; R++) {
                        const uint8_t *p = (const uint8_t *)w->data + R * nb * DSE_Q4_TILE;
                        int64_t rb = R * DSE_Q4_ROWS;
                        memset(acc, 0, (size_t)T * sizeof acc[0]);
                        /* the block's s_g and z_g: 16 rows per group, in group order (model.h
                         * dse__q4_sidx) */
                        for (int64_t g = 0; g < ng; g++) {
                                q4f_f s = q4f_scales(w, rb * ng + 16 * g), z = q4f_zeros(w, rb * ng + 16 * g);
                                _mm256_store_ps(sv, s.a);
                                _mm256_store_ps(sv + 8, s.b);
                                _mm256_store_ps(zv, z.a);
                                _mm256_store_ps(zv + 8, z.b);
                                int64_t b0 = g * bpg, b1 = b0 + bpg < nb ? b0 + bpg : nb, j = 0;
                                for (; j + 2 <= T; j += 2)
                                        q4_xq_group(p, xq, t0 + j, b0, b1, X + j * ng + g, ng, sv, zv, acc + j, 2);
                                if (j < T)
                                        q4_xq_group(p, xq, t0 + j, b0, b1, X + j * ng + g, ng, sv, zv, acc + j, 1);
                        }
                        for (int64_t j = 0; j < T; j++)
                                for (int i = 0; i < 16; i++)
                                        if (rb + i >= r0 && rb + i < r1)
                                                y[(t0 + j) * ldy + rb + i] = acc[j][i];
                }
        }
}

/* Q4 times float activations: 16-row blocks of the interleaved layout, any group size
 * (q4_f32_rows.h). */
static void matvec_q4_avx2(const struct dse_qmat *w, const float *x, float *y, int64_t r0, int64_t r1) {
        q4f_matvec(w, x, y, r0, r1);
}

static void matmul_q4_avx2(const struct dse_qmat *w, const float *x, int64_t ldx, int64_t n, float *y, int64_t ldy,
                           int64_t r0, int64_t r1) {
        q4f_matmul(w, x, ldx, n, y, ldy, r0, r1);
}

/* ---- matmul over row blocks for the float-activation formats --------------------- */

/* 16 rows at a time serve every token while they sit in L1/L2: one pass over the
 * weights from memory for all n tokens, each token's products as matvec computes them. */
#define MATMUL_BY_ROW_BLOCKS(name, matvec)                                                                    \
        static void name(const struct dse_qmat *w, const float *x, int64_t ldx, int64_t n, float *y,          \
                         int64_t ldy, int64_t r0, int64_t r1) {                                               \
                for (int64_t rb = r0; rb < r1; rb += 16) {                                                    \
                        int64_t re = rb + 16 < r1 ? rb + 16 : r1;                                             \
                        for (int64_t t = 0; t < n; t++)                                                       \
                                matvec(w, x + t * ldx, y + t * ldy, rb, re);                                  \
                }                                                                                             \
        }
MATMUL_BY_ROW_BLOCKS(matmul_f32_avx2, matvec_f32_avx2)
MATMUL_BY_ROW_BLOCKS(matmul_f16_avx2, matvec_f16_avx2)
MATMUL_BY_ROW_BLOCKS(matmul_f8_avx2, matvec_f8_avx2)
MATMUL_BY_ROW_BLOCKS(matmul_q8_avx2, matvec_q8_avx2)

/* out[c] = W[r, c]: 8 columns per step, the _ref twin's conversions for the tail (MLA
 * absorption decodes kv_b_proj rows with it every token, so Q8/Q4 matter too). */
static void dequant_row_avx2(const struct dse_qmat *w, int64_t r, float *out) {
        int64_t n = w->cols, c = 0;
        switch (w->dtype) {
        case DSE_DTYPE_F16: {
                const uint16_t *row = (const uint16_t *)w->data + r * n;
                for (; c + 8 <= n; c += 8)
                        _mm256_storeu_ps(out + c, load_f16x8(row + c));
                for (; c < n; c++)
                        out[c] = dse__kern_f16_to_f32(row[c]);
                return;
        }
        case DSE_DTYPE_BF16: {
                const uint16_t *row = (const uint16_t *)w->data + r * n;
                for (; c + 8 <= n; c += 8)
                        _mm256_storeu_ps(out + c, load_bf16x8(row + c));
                for (; c < n; c++)
                        out[c] = dse__kern_bf16_to_f32(row[c]);
                return;
        }
        case DSE_DTYPE_F8_E4M3: {
                const uint8_t *row = (const uint8_t *)w->data + r * n;
                const float *lut = dse__f8e4m3_table();
                const float *srow = w->scale + (r / DSE_F8_BLOCK) * w->n_groups;
                for (; c + 8 <= n; c += 8) /* 8 divides 128: a step never straddles two blocks */
                        _mm256_storeu_ps(out + c, _mm256_mul_ps(load_f8x8(row + c, lut),
                                                                _mm256_set1_ps(srow[c / DSE_F8_BLOCK])));
                for (; c < n; c++)
                        out[c] = lut[row[c]] * srow[c / DSE_F8_BLOCK];
                return;
        }
        case DSE_DTYPE_Q8: { /* per group, the _ref twin's one multiply per element */
                const int8_t *row = (const int8_t *)w->data + r * n;
                const float *srow = w->scale + r * w->n_groups;
                for (int64_t g = 0; g < w->n_groups; g++) {
                        int64_t c1 = (g + 1) * w->group_size < n ? (g + 1) * w->group_size : n;
                        __m256 s = _mm256_set1_ps(srow[g]);
                        for (c = g * w->group_size; c + 8 <= c1; c += 8)
                                _mm256_storeu_ps(out + c, _mm256_mul_ps(load_i8x8(row + c), s));
                        for (; c < c1; c++)
                                out[c] = (float)row[c] * srow[g];
                }
                return;
        }
        case DSE_DTYPE_Q4: {
                /* (q - z) * s as the _ref twin computes it. Row r's 4 bytes of chunk k of a tile
                 * (64 bytes apart) duplicated into 8 lanes: the low nibbles are columns
                 * 8k..8k+3, the high ones 8k+4..8k+7. A 32-column tile lies in one group when
                 * the group is a multiple of 32; other groups take the _ref twin. */
                int64_t G = w->group_size, nb = (n + DSE_Q4_COLS - 1) / DSE_Q4_COLS;
                if (G % DSE_Q4_COLS) {
                        dse__kernels_ref_dequant_row(w, r, out);
                        return;
                }
                const uint8_t *p = (const uint8_t *)w->data + (r / DSE_Q4_ROWS) * nb * DSE_Q4_TILE + 4 * (r % DSE_Q4_ROWS);
                /* row r's scale and zero point of group g: 16 apart (model.h dse__q4_sidx) */
                int64_t s0 = dse__q4_sidx(w->n_groups, r, 0);
                const __m256i sh = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4), m = _mm256_set1_epi32(0xf);
                for (int64_t b = 0; b < nb; b++) {
                        int64_t g = b * DSE_Q4_COLS / G;
                        __m256 s = _mm256_set1_ps(dse__q4_scale(w, s0 + g * DSE_Q4_ROWS));
                        __m256 vz = _mm256_set1_ps((float)dse__q4_zero(w, s0 + g * DSE_Q4_ROWS));
                        for (int k = 0; k < 4 && (c = b * DSE_Q4_COLS + 8 * k) < n; k++) {
                                int32_t d;
                                memcpy(&d, p + b * DSE_Q4_TILE + 64 * k, sizeof d);
                                __m256i v = _mm256_and_si256(_mm256_srlv_epi32(_mm256_cvtepu8_epi32(_mm_set1_epi32(d)), sh), m);
                                __m256 o = _mm256_mul_ps(_mm256_sub_ps(_mm256_cvtepi32_ps(v), vz), s);
                                if (c + 8 <= n) {
                                        _mm256_storeu_ps(out + c, o);
                                } else {
                                        float t[8];
                                        _mm256_storeu_ps(t, o);
                                        memcpy(out + c, t, (size_t)(n - c) * sizeof(float));
                                }
                        }
                }
                return;
        }
        default:
                dse__kernels_ref_dequant_row(w, r, out);
                return;
        }
}

static float dot_avx2(const float *a, const float *b, int64_t n) {
        __m256 a0 = _mm256_setzero_ps();
        int64_t i = 0;
        for (; i + 8 <= n; i += 8)
                a0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), a0);
        float acc = hsum8(a0);
        for (; i < n; i++)
                acc += a[i] * b[i];
        return acc;
}

static void axpy_avx2(float a, const float *x, float *y, int64_t n) {
        __m256 va = _mm256_set1_ps(a);
        int64_t i = 0;
        for (; i + 8 <= n; i += 8)
                _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
        for (; i < n; i++)
                y[i] += a * x[i];
}

/* Each row decoded into a buffer on the stack and added with axpy, as the caller did
 * before this entry existed (MLA's rows are 512 columns); wider rows one fused
 * multiply-add per element, which is what axpy_avx2 makes of each. */
static void axpy_rows_avx2(const struct dse_qmat *w, int64_t r0, int64_t n, const float *a, float *y) {
        float row[1024];
        if (w->cols > (int64_t)(sizeof row / sizeof row[0])) {
                dse__kernels_fma_axpy_rows(w, r0, n, a, y);
                return;
        }
        for (int64_t i = 0; i < n; i++) {
                dequant_row_avx2(w, r0 + i, row);
                axpy_avx2(a[i], row, y, w->cols);
        }
}

static void attn_scores_avx2(const float *q, const float *k, int64_t ld, int64_t n, int64_t len, float scale,
                             float *scores) {
        for (int64_t t = 0; t < n; t++)
                scores[t] = scale * dot_avx2(q, k + t * ld, len);
}

/* C pieces of 8 from column d0, in registers over all n rows. */
static inline __attribute__((always_inline)) void accum_piece(const float *w, const float *v, int64_t ld, int64_t n,
                                                              float *out, int64_t d0, const int C) {
        __m256 acc[8];
        UNROLL
        for (int c = 0; c < C; c++)
                acc[c] = _mm256_loadu_ps(out + d0 + 8 * c);
        for (int64_t t = 0; t < n; t++) {
                __m256 wt = _mm256_set1_ps(w[t]);
                UNROLL
                for (int c = 0; c < C; c++)
                        acc[c] = _mm256_fmadd_ps(wt, _mm256_loadu_ps(v + t * ld + d0 + 8 * c), acc[c]);
        }
        UNROLL
        for (int c = 0; c < C; c++)
                _mm256_storeu_ps(out + d0 + 8 * c, acc[c]);
}

static void attn_accum_avx2(const float *w, const float *v, int64_t ld, int64_t n, int64_t len, float *out) {
        int64_t d0 = 0;
        for (; d0 + 64 <= len; d0 += 64)
                accum_piece(w, v, ld, n, out, d0, 8);
        switch ((len - d0) / 8) {
        case 1: accum_piece(w, v, ld, n, out, d0, 1); break;
        case 2: accum_piece(w, v, ld, n, out, d0, 2); break;
        case 3: accum_piece(w, v, ld, n, out, d0, 3); break;
        case 4: accum_piece(w, v, ld, n, out, d0, 4); break;
        case 5: accum_piece(w, v, ld, n, out, d0, 5); break;
        case 6: accum_piece(w, v, ld, n, out, d0, 6); break;
        case 7: accum_piece(w, v, ld, n, out, d0, 7); break;
        default: break;
        }
        for (int64_t d = d0 + (len - d0) / 8 * 8; d < len; d++) /* the last len % 8 columns */
                for (int64_t t = 0; t < n; t++)
                        out[d] += w[t] * v[t * ld + d];
}

void dse__kernels_fill_avx2(struct dse_kernels *k) {
        k->level = DSE_CPU_AVX2;
        k->matvec[DSE_DTYPE_F32] = matvec_f32_avx2;
        k->matvec[DSE_DTYPE_F16] = matvec_f16_avx2;
        k->matvec[DSE_DTYPE_BF16] = matvec_bf16_avx2;
        k->matvec[DSE_DTYPE_F8_E4M3] = matvec_f8_avx2;
        k->matvec[DSE_DTYPE_Q8] = matvec_q8_avx2;
        k->matvec[DSE_DTYPE_Q4] = matvec_q4_avx2;
        k->matmul[DSE_DTYPE_F32] = matmul_f32_avx2;
        k->matmul[DSE_DTYPE_F16] = matmul_f16_avx2;
        k->matmul[DSE_DTYPE_BF16] = matmul_bf16_avx2;
        k->matmul[DSE_DTYPE_F8_E4M3] = matmul_f8_avx2;
        k->matmul[DSE_DTYPE_Q8] = matmul_q8_avx2;
        k->matmul[DSE_DTYPE_Q4] = matmul_q4_avx2;
        k->quantize_xq = quantize_xq_avx2;
        k->matmul_xq[DSE_DTYPE_Q4] = matmul_xq_q4_avx2;
        k->dequant_row = dequant_row_avx2;
        k->dot = dot_avx2;
        k->axpy = axpy_avx2;
        k->axpy_rows = axpy_rows_avx2;
        k->attn_scores = attn_scores_avx2;
        k->attn_accum = attn_accum_avx2;
}
