/* AVX2 matmul_xq for Q8 weights: int8 weights times int8 activations on vpmaddubsw and
 * vpmaddwd (this file alone is compiled with -mavx2 -mfma -mf16c -ffp-contract=off: no
 * AVX-512, and no fused multiply-add where the reference rounds twice).
 *
 * It computes exactly what dse__kernels_ref_matmul_xq computes, bit for bit: per row,
 * token and 32-column block the exact integer sum S of w * q, then, in block order,
 * acc = acc + (s * d) * float(S), each operation rounded as the reference rounds it. So
 * a (row, token) result depends neither on the tokens in the call nor on the row range.
 *
 * The vector lanes are rows, so that a lane's sum over a whole block stays in its lane and
 * needs no horizontal reduction: 8 rows' 32-byte blocks are transposed once (lane i of
 * vector k = row i's bytes 4k..4k+3) and then serve a tile of tokens, each token's 4
 * bytes of column chunk k broadcast to all lanes. AVX2 has no vpdpbusd: vpmaddubsw takes
 * |w| (unsigned, at most 128) against q with w's sign (|q| <= 127), so a pair sum is at
 * most 2 * 128 * 127 = 32512 and never saturates, and vpmaddwd by 1 widens it to the
 * lane's int32. The scaling is then four float operations (a convert, two products, a sum)
 * per 8 rows and token.
 *
 * One token (decode) is bound by how many weight lines are in flight: the 8 rows of a
 * block are taken from 8 parts of the row range far apart (block k takes row k of each
 * part), 8 streams each prefetched DSE_PREFETCH_AHEAD bytes ahead. Many tokens (prefill)
 * are bound by the arithmetic: a block of 8 rows is transposed once per tile of Q8_TT
 * tokens, whose sums wait on the stack. A tile of at most Q8_REDUCE_T tokens (decode)
 * leaves the rows as loaded and reduces each row's 8 lanes per token instead (vphaddd),
 * which costs less than a transpose shared by so few tokens; the sums are the same
 * integers either way. */
#include <immintrin.h>
#include <string.h>

#include "kernels/kernels.h"

/* Register-block loops must unroll completely (at -O2 GCC leaves them rolled, and the
 * vectors then live in memory). */
#define UNROLL _Pragma("GCC unroll 8")

#define Q8_LANES 8 /* rows per register block */
#define Q8_TT    32 /* tokens per tile */
#define Q8_REDUCE_T 2 /* tiles of up to this many tokens reduce each row's lanes instead of transposing */

/* v[i] (row i's 32 bytes) -> v[k] lane i = row i's int32 k: a transpose of 8 x 8 int32. */
static inline __attribute__((always_inline)) void transpose8_epi32(__m256i v[8]) {
        __m256i t[8], u[8];
        UNROLL
        for (int i = 0; i < 4; i++) {
                t[2 * i] = _mm256_unpacklo_epi32(v[2 * i], v[2 * i + 1]);
                t[2 * i + 1] = _mm256_unpackhi_epi32(v[2 * i], v[2 * i + 1]);
        }
        UNROLL
        for (int h = 0; h < 2; h++) { /* rows 0-3, rows 4-7 */
                __m256i *a = t + 4 * h, *o = u + 4 * h;
                o[0] = _mm256_unpacklo_epi64(a[0], a[2]); /* int32 0 | 4 */
                o[1] = _mm256_unpackhi_epi64(a[0], a[2]); /* 1 | 5 */
                o[2] = _mm256_unpacklo_epi64(a[1], a[3]); /* 2 | 6 */
                o[3] = _mm256_unpackhi_epi64(a[1], a[3]); /* 3 | 7 */
        }
        UNROLL
        for (int k = 0; k < 4; k++) {
                v[k] = _mm256_permute2x128_si256(u[k], u[4 + k], 0x20);
                v[k + 4] = _mm256_permute2x128_si256(u[k], u[4 + k], 0x31);
        }
}

/* m[i] (8 int32 partial sums of row i) -> lane i = the sum of m[i]'s 8 lanes. */
static inline __attribute__((always_inline)) __m256i reduce8_epi32(const __m256i m[8]) {
        __m256i h01 = _mm256_hadd_epi32(m[0], m[1]), h23 = _mm256_hadd_epi32(m[2], m[3]);
        __m256i h45 = _mm256_hadd_epi32(m[4], m[5]), h67 = _mm256_hadd_epi32(m[6], m[7]);
        __m256i h0123 = _mm256_hadd_epi32(h01, h23), h4567 = _mm256_hadd_epi32(h45, h67); /* rows 0-3 | 0-3 */
        return _mm256_add_epi32(_mm256_permute2x128_si256(h0123, h4567, 0x20),
                                _mm256_permute2x128_si256(h0123, h4567, 0x31));
}

static inline __m256i bcast32(const int8_t *p) {
        int32_t v;
        memcpy(&v, p, sizeof v);
        return _mm256_set1_epi32(v);
}

/* What a register block reads: the weight rows of rv and their scale rows, tokens t0.. of
 * the activations, and the row's shape in blocks. */
struct rows8 {
        const int8_t *row[Q8_LANES];
        const float *sc[Q8_LANES];
        const int8_t *q; /* token t0's q, then the next tokens' nb * 32 apart */
        const float *d;  /* token t0's d, nb apart */
        int64_t n, nb, full, bpg; /* columns, blocks, whole blocks, blocks per group */
};

static inline __attribute__((always_inline)) void rows8_start(struct rows8 *R, const struct dse_qmat *w,
                                                              const struct dse_xq *xq, const int64_t *rv, int64_t t0) {
        for (int i = 0; i < Q8_LANES; i++) {
                R->row[i] = (const int8_t *)w->data + rv[i] * w->cols;
                R->sc[i] = w->scale + rv[i] * w->n_groups;
        }
        R->n = w->cols;
        R->nb = xq->n_blocks;
        R->full = w->cols / DSE_XQ_BLOCK;
        R->bpg = w->group_size / DSE_XQ_BLOCK;
        R->q = xq->q + t0 * R->nb * DSE_XQ_BLOCK;
        R->d = xq->d + t0 * R->nb;
}

/* Block b of a row of n columns (full whole blocks): the last one zero past the row's end,
 * as q is. With prefetch, every other block asks for the line DSE_PREFETCH_AHEAD on. */
static inline __attribute__((always_inline)) __m256i row_block(const int8_t *row, int64_t b, int64_t full, int64_t n,
                                                               int prefetch) {
        if (b < full) {
                if (prefetch && !(b & 1))
                        _mm_prefetch((const char *)(row + b * DSE_XQ_BLOCK + DSE_PREFETCH_AHEAD), _MM_HINT_T1);
                return _mm256_loadu_si256((const __m256i *)(row + b * DSE_XQ_BLOCK));
        }
        _Alignas(32) int8_t tail[DSE_XQ_BLOCK] = {0};
        memcpy(tail, row + b * DSE_XQ_BLOCK, (size_t)(n - b * DSE_XQ_BLOCK));
        return _mm256_load_si256((const __m256i *)tail);
}

/* The 8 rows' scales of group g, row i in lane i. */
static inline __m256 scales8(const float *const *sc, int64_t g) {
        return _mm256_setr_ps(sc[0][g], sc[1][g], sc[2][g], sc[3][g], sc[4][g], sc[5][g], sc[6][g], sc[7][g]);
}

/* Rows rv[0..7] (any rows of w; a short block repeats its last row, whose lanes are not
 * stored) times tokens t0..t0+T-1 (T <= Q8_TT) over the whole row: y of the first nr
 * rows. */
static inline __attribute__((always_inline)) void q8_rows8(const struct dse_qmat *w, const struct dse_xq *xq,
                                                           const int64_t *rv, int nr, int64_t t0, int T,
                                                           float *y, int64_t ldy) {
        struct rows8 R;
        rows8_start(&R, w, xq, rv, t0);
        const __m256i one16 = _mm256_set1_epi16(1);
        _Alignas(32) float acc[Q8_TT][Q8_LANES];
        for (int t = 0; t < T; t++)
                _mm256_store_ps(acc[t], _mm256_setzero_ps());
        for (int64_t b = 0, g = 0, gb = 0; b < R.nb; b++) { /* block b is in group g, its gb-th */
                __m256i wt[Q8_LANES], aw[Q8_LANES];
                UNROLL
                for (int i = 0; i < Q8_LANES; i++)
                        wt[i] = row_block(R.row[i], b, R.full, R.n, 1);
                transpose8_epi32(wt);
                UNROLL
                for (int k = 0; k < Q8_LANES; k++)
                        aw[k] = _mm256_abs_epi8(wt[k]);
                __m256 sv = scales8(R.sc, g);
                for (int t = 0; t < T; t++) {
                        const int8_t *qb = R.q + (t * R.nb + b) * DSE_XQ_BLOCK;
                        __m256i S = _mm256_setzero_si256();
                        UNROLL
                        for (int k = 0; k < Q8_LANES; k++) {
                                __m256i xs = _mm256_sign_epi8(bcast32(qb + 4 * k), wt[k]);
                                S = _mm256_add_epi32(S, _mm256_madd_epi16(_mm256_maddubs_epi16(aw[k], xs), one16));
                        }
                        /* the reference's acc + (s * d) * S, rounded step by step */
                        __m256 sd = _mm256_mul_ps(sv, _mm256_set1_ps(R.d[t * R.nb + b]));
                        _mm256_store_ps(acc[t], _mm256_add_ps(_mm256_load_ps(acc[t]),
                                                              _mm256_mul_ps(sd, _mm256_cvtepi32_ps(S))));
                }
                if (++gb == R.bpg) {
                        gb = 0;
                        g++;
                }
        }
        for (int t = 0; t < T; t++)
                for (int i = 0; i < nr; i++)
                        y[(t0 + t) * ldy + rv[i]] = acc[t][i];
}

/* Tiles of at most Q8_REDUCE_T tokens (decode): each row's block used where it is loaded
 * (again from L1 for a second token), its 8 lanes reduced per token, the sums in
 * registers, so nothing waits on the stack between the blocks. */
static inline __attribute__((always_inline)) void q8_rows8_few(const struct dse_qmat *w, const struct dse_xq *xq,
                                                               const int64_t *rv, int nr, int64_t t0, const int T,
                                                               float *y, int64_t ldy) {
        struct rows8 R;
        rows8_start(&R, w, xq, rv, t0);
        const __m256i one16 = _mm256_set1_epi16(1);
        __m256 acc[Q8_REDUCE_T];
        UNROLL
        for (int t = 0; t < T; t++)
                acc[t] = _mm256_setzero_ps();
        for (int64_t b = 0, g = 0, gb = 0; b < R.nb; b++) { /* block b is in group g, its gb-th */
                __m256 sv = scales8(R.sc, g);
                UNROLL
                for (int t = 0; t < T; t++) {
                        const int8_t *qb = R.q + (t * R.nb + b) * DSE_XQ_BLOCK;
                        __m256i xv = _mm256_loadu_si256((const __m256i *)qb), m[Q8_LANES];
                        UNROLL
                        for (int i = 0; i < Q8_LANES; i++) {
                                __m256i wv = row_block(R.row[i], b, R.full, R.n, t == 0);
                                m[i] = _mm256_madd_epi16(
                                        _mm256_maddubs_epi16(_mm256_abs_epi8(wv), _mm256_sign_epi8(xv, wv)), one16);
                        }
                        /* the reference's acc + (s * d) * S, rounded step by step */
                        __m256 sd = _mm256_mul_ps(sv, _mm256_set1_ps(R.d[t * R.nb + b]));
                        acc[t] = _mm256_add_ps(acc[t], _mm256_mul_ps(sd, _mm256_cvtepi32_ps(reduce8_epi32(m))));
                }
                if (++gb == R.bpg) {
                        gb = 0;
                        g++;
                }
        }
        UNROLL
        for (int t = 0; t < T; t++) {
                _Alignas(32) float o[Q8_LANES];
                _mm256_store_ps(o, acc[t]);
                for (int i = 0; i < nr; i++)
                        y[(t0 + t) * ldy + rv[i]] = o[i];
        }
}

static void q8_rows8_tokens(const struct dse_qmat *w, const struct dse_xq *xq, const int64_t *rv, int nr, float *y,
                            int64_t ldy) {
        for (int64_t t0 = 0; t0 < xq->n; t0 += Q8_TT) {
                int T = xq->n - t0 < Q8_TT ? (int)(xq->n - t0) : Q8_TT;
                if (T == 1)
                        q8_rows8_few(w, xq, rv, nr, t0, 1, y, ldy);
                else if (T == 2)
                        q8_rows8_few(w, xq, rv, nr, t0, 2, y, ldy);
                else
                        q8_rows8(w, xq, rv, nr, t0, T, y, ldy);
        }
}

/* Rows [r0, r1): blocks of 8 rows taken from 8 equal parts of the range side by side
 * (block k: row k of each part), then the rows left over as one short block. */
static void matmul_xq_q8_avx2(const struct dse_qmat *w, const struct dse_xq *xq, float *y, int64_t ldy, int64_t r0,
                              int64_t r1) {
        if (w->group_size % DSE_XQ_BLOCK) {
                dse__kernels_ref_matmul_xq(w, xq, y, ldy, r0, r1);
                return;
        }
        if (r0 >= r1 || xq->n <= 0)
                return;
        int64_t part = (r1 - r0) / Q8_LANES, rv[Q8_LANES];
        for (int64_t k = 0; k < part; k++) {
                for (int i = 0; i < Q8_LANES; i++)
                        rv[i] = r0 + k + i * part;
                q8_rows8_tokens(w, xq, rv, Q8_LANES, y, ldy);
        }
        int64_t rest = r0 + Q8_LANES * part;
        if (rest < r1) {
                for (int i = 0; i < Q8_LANES; i++)
                        rv[i] = rest + i < r1 ? rest + i : r1 - 1;
                q8_rows8_tokens(w, xq, rv, (int)(r1 - rest), y, ldy);
        }
}

void dse__kernels_fill_avx2_q8_xq(struct dse_kernels *k) {
        k->matmul_xq[DSE_DTYPE_Q8] = matmul_xq_q8_avx2;
}
