/* AVX-512 VNNI kernels: matmul_xq on vpdpbusd. This file is compiled with -mavx512vnni
 * beside the F+BW+VL flags and not with -mavx512bf16; kernels.c installs its entries
 * only when the CPU reports VNNI. Each routine computes what its `_ref` twin in ref.c
 * computes; the integer block products are exact, as the reference's are, and only
 * their scaling and summation order differ.
 *
 * The integer kernels decode a weight block once into registers and use it for up to
 * four tokens (batched decode and prefill are compute-bound on two cores, so decoding
 * per token would cost nearly as much as the products), and keep several rows in flight
 * so the loads of one row hide behind the arithmetic of the others. Q8 from 5 tokens on
 * lays 8 tokens across one vector instead (q8_t8_block), which cuts the float work per
 * product by eight, and each whole block of 16 tokens 16 (q8_t16_block), which halves it
 * again; those layouts sum in another float order than the 4-token blocks, so a
 * token's result then depends on the number of tokens in the call, and it is a sub-feature
 * of its own (DSE_KFEAT_T8) that DSV_NO_AMX=1 leaves out with AMX. Q4 (16 rows
 * interleaved) sums 16 rows per vector, so its float work is small already: with
 * DSE_KFEAT_T8 it only takes up to 8 tokens per register block, in the same float order. */
#include <immintrin.h>
#include <string.h>

#include "kernels/avx512_blocks.h"
#include "kernels/kernels.h"
#include "kernels/q4_xsums.h"

/* One token's activations over one 64-column step (blocks 2p and 2p+1), prepared once
 * per token block and column chunk and then shared by every row of a super-block. */
struct xprep {
        __m512i x;  /* q of 64 columns as stored */
        __m512 dv;  /* each int32 lane's block scale d */
        __m512i nc; /* -128 * (sum of the lane's four q) */
};

/* A token block's prepared activations over one column chunk (Q8): token t's steps from
 * v[t * ts]. A block of TB tokens over KC columns has ts = PC; n < TB tokens over whole
 * rows (decode) share the same room, TB / n times as much each, so a lone token takes
 * rows of up to 4 * KC columns in one piece. */
struct xchunk {
        struct xprep v[TB * PC];
        int64_t ts;
};

/* The 64 bytes of q from column 64p, zero past the token's padded row (an odd n_blocks
 * leaves the last step half empty), and the two block scales, zero past n_blocks. */
static inline __m512i xq_load64(const struct dse_xq *xq, int64_t t, int64_t p) {
        const int8_t *q = xq->q + t * xq->n_blocks * DSE_XQ_BLOCK;
        return _mm512_maskz_loadu_epi8(mask64(xq->n_blocks * DSE_XQ_BLOCK - p * 64), q + p * 64);
}

static inline __m512 xq_d2(const struct dse_xq *xq, int64_t t, int64_t p, __m512i lane_idx) {
        const float *d = xq->d + t * xq->n_blocks;
        __m512 d2 = _mm512_maskz_loadu_ps(mask16(xq->n_blocks - 2 * p), d + 2 * p);
        return _mm512_permutexvar_ps(lane_idx, d2);
}

/* Q8: lanes 0-7 hold block 2p (natural column order), lanes 8-15 block 2p+1. The
 * unsigned operand will be w + 128, so each lane starts from -128 * sum(q). */
static void prep_q8(const struct dse_xq *xq, int64_t t0, int T, int64_t pc, int64_t pe, struct xchunk *xc) {
        struct xprep *xp = xc->v;
        const __m512i lane = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
        const __m512i u128 = _mm512_set1_epi8((char)0x80);
        UNROLL
        for (int t = 0; t < T; t++)
                for (int64_t p = pc; p < pe; p++) {
                        struct xprep *o = xp + t * xc->ts + (p - pc);
                        o->x = xq_load64(xq, t0 + t, p);
                        o->dv = xq_d2(xq, t0 + t, p, lane);
                        o->nc = _mm512_sub_epi32(_mm512_setzero_si512(),
                                                 _mm512_dpbusd_epi32(_mm512_setzero_si512(), u128, o->x));
                }
}

/* Rows r..r+R-1 of a Q8 matrix (group a multiple of 32) times T prepared tokens over the
 * steps [pc, pe): per step and row, the 64 weight bytes become w + 128 once (unsigned for
 * vpdpbusd) and serve all T tokens; the lane sums are exact integers, scaled by the
 * lane's s * d. The chunk's sums are added to y (written when first). */
static inline __attribute__((always_inline)) void q8_block(const struct dse_qmat *w, const struct xchunk *xc,
                                                           int64_t pc, int64_t pe, float *y, int64_t ldy, int64_t r,
                                                           int64_t rstep, const int R, const int T, int first) {
        int64_t n = w->cols, G = w->group_size;
        const struct xprep *xp = xc->v;
        const int8_t *row[RB];
        const float *sc[RB];
        __m512 acc[RB][TB];
        UNROLL
        for (int i = 0; i < R; i++) {
                row[i] = (const int8_t *)w->data + (r + i * rstep) * n;
                sc[i] = w->scale + (r + i * rstep) * w->n_groups;
                UNROLL
                for (int t = 0; t < T; t++)
                        acc[i][t] = _mm512_setzero_ps();
        }
        const __m512i flip = _mm512_set1_epi8((char)0x80);
        for (int64_t p = pc; p < pe; p++) {
                int64_t c = p * 64, g0 = c / G, g1 = (c + 32) / G;
                __mmask64 m = mask64(n - c);
                __m512i wu[RB];
                __m512 sv[RB];
                UNROLL
                for (int i = 0; i < R; i++) {
                        _mm_prefetch((const char *)(row[i] + c + DSE_PREFETCH_AHEAD), _MM_HINT_T1);
                        wu[i] = _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, row[i] + c), flip);
                        /* a group past the row's end has no scale: its lanes' sums are 0 */
                        float s1 = c + 32 < n ? sc[i][g1] : 0.0f;
                        sv[i] = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_set1_ps(sc[i][g0])),
                                                                     _mm256_castps_pd(_mm256_set1_ps(s1)), 1));
                }
                UNROLL
                for (int t = 0; t < T; t++) {
                        const struct xprep *o = xp + t * xc->ts + (p - pc);
                        UNROLL
                        for (int i = 0; i < R; i++) {
                                __m512i s = _mm512_dpbusd_epi32(o->nc, wu[i], o->x);
                                acc[i][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(sv[i], o->dv),
                                                            acc[i][t]);
                        }
                }
        }
        UNROLL
        for (int t = 0; t < T; t++)
                UNROLL
                for (int i = 0; i < R; i++) {
                        float v = _mm512_reduce_add_ps(acc[i][t]);
                        y[t * ldy + r + i * rstep] = first ? v : y[t * ldy + r + i * rstep] + v;
                }
}

/* The register blocks specialised by token count, so a lone decode token carries no
 * dead accumulators. Rows [r, re): contiguous blocks of RB rows, or with spread the
 * range cut into RB equal parts read side by side — block k takes row k of each part —
 * so each thread streams from RB places far apart: the hardware prefetchers keep more
 * lines in flight over several streams than over one, and decode is bound by how many
 * lines are in flight. Then the rows left over one at a time. Every row's
 * sums are the same either way. */
#define Q8_T(r, rstep, R)                                                                                       \
        switch (T) {                                                                                            \
        case 1: q8_block(w, xp, pc, pe, y, ldy, r, rstep, R, 1, first); break;                                  \
        case 2: q8_block(w, xp, pc, pe, y, ldy, r, rstep, R, 2, first); break;                                  \
        case 3: q8_block(w, xp, pc, pe, y, ldy, r, rstep, R, 3, first); break;                                  \
        default: q8_block(w, xp, pc, pe, y, ldy, r, rstep, R, 4, first); break;                                 \
        }
static void q8_block_rows(const struct dse_qmat *w, const struct xchunk *xp, int64_t pc, int64_t pe, float *y,
                          int64_t ldy, int64_t r, int64_t re, int spread, int T, int first) {
        if (spread) {
                int64_t part = (re - r) / RB;
                for (int64_t k = 0; k < part; k++)
                        Q8_T(r + k, part, RB)
                r += RB * part;
        }
        for (; r + RB <= re; r += RB)
                Q8_T(r, 1, RB)
        for (; r < re; r++)
                Q8_T(r, 1, 1)
}

/* Super-blocks of RS rows; within one, token blocks of TB; within those, chunks of KC
 * columns (steps of 64 columns) whose activations are prepared once for all the
 * super-block's rows. Q8 only: Q4's interleaved rows have their own driver below. */
static void matmul_xq_blocked(const struct dse_qmat *w, const struct dse_xq *xq, float *y, int64_t ldy, int64_t r0,
                              int64_t r1) {
        _Alignas(64) struct xchunk xc;
        int64_t np = (w->cols + 63) / 64; /* 64-column steps */
        /* Decode (n <= TB, whole rows in the room n tokens have) is prepared once for all
         * rows (the preparation is small beside the row blocks), and each weight row is then
         * read once for every token: the rows need no super-blocks, and are read as RB
         * streams spread over the range. Wider rows fall to the chunked path below, which
         * reads each row in pieces and 64 rows at a time, and streams markedly slower:
         * hence a lone token's room of 4 * KC columns. */
        int64_t share = xq->n <= TB ? TB / xq->n : 0;
        if (share && np <= share * PC) {
                xc.ts = share * PC;
                prep_q8(xq, 0, (int)xq->n, 0, np, &xc);
                q8_block_rows(w, &xc, 0, np, y, ldy, r0, r1, 1, (int)xq->n, 1);
                return;
        }
        xc.ts = PC;
        for (int64_t rs = r0; rs < r1; rs += RS) {
                int64_t re = rs + RS < r1 ? rs + RS : r1;
                for (int64_t t0 = 0; t0 < xq->n; t0 += TB) {
                        int T = xq->n - t0 < TB ? (int)(xq->n - t0) : TB;
                        for (int64_t pc = 0; pc < np; pc += PC) {
                                int64_t pe = pc + PC < np ? pc + PC : np;
                                prep_q8(xq, t0, T, pc, pe, &xc);
                                q8_block_rows(w, &xc, pc, pe, y + t0 * ldy, ldy, rs, re, 0, T, pc == 0);
                        }
                }
        }
}

/* ---- Q8 times 8 tokens at once: one int32 lane per token and column half ---------------
 *
 * The 4-token blocks above give each 32-column activation block eight int32 lanes, so
 * every row, token and 64 columns pays a convert, a multiply and an FMA besides its
 * vpdpbusd: as much float work as integer work. Here a vector holds 8 tokens x 2 column
 * halves instead: lane 2t+h sums, over the whole 32-column block, the products of token t
 * with the columns of half h, so the block's scaling is one convert and one FMA per row for
 * all 8 tokens, and the integer work (four vpdpbusd per row and block) dominates. The
 * weights enter as a broadcast 8-byte piece (vpbroadcastq, a load), made unsigned as
 * w + 128 once per row and 64 bytes; the activations are rearranged to match once per
 * token block and column chunk, for all rows. Per row and group: s * F; w + 128 starts
 * each block's sums from -128 * sum(q). Used from T8_MIN tokens: below that the padding
 * lanes cost more than the 4-lane layout wastes. (Q4's interleaved kernel below has no
 * such float work to save: it takes 8 tokens in its own register blocks.) */

#define T8_MIN 5
#define T8C 4096              /* columns per chunk: its prepared activations (56 KiB) stay in L2 */
#define T8B (T8C / 32)        /* blocks per chunk */
#define T8R 8                 /* rows per register block */

/* 8 tokens' activations over one chunk's blocks. xv[j][k] lane 2t+h: the 4 q of token t
 * that meet weight piece k (bytes 8k..8k+7 of the block) in half h; nq[j] lane 2t+h:
 * -128 * the sum of those q; dv[j] lane 2t+h: token t's d. Absent tokens are 0. */
struct t8chunk {
        __m512i xv[T8B][4];
        __m512i nq[T8B];
        __m512 dv[T8B];
        int32_t grp[T8B]; /* group of block j, counted from the chunk's first group */
};

/* Token t's q of block b as stored: qword k is what weight piece k meets. */
static void prep_t8(const struct dse_xq *xq, int64_t t0, int T, int64_t b0, int64_t b1, int64_t G,
                    struct t8chunk *tc) {
        const __m512i one = _mm512_set1_epi8(1);
        int64_t stride = xq->n_blocks * DSE_XQ_BLOCK, gf = b0 * 32 / G;
        _Alignas(64) uint64_t piece[4][8];
        _Alignas(64) float d[16];
        for (int64_t b = b0; b < b1; b++) {
                int64_t j = b - b0;
                memset(piece, 0, sizeof piece);
                memset(d, 0, sizeof d);
                for (int t = 0; t < T; t++) {
                        __m256i v = _mm256_loadu_si256((const __m256i *)(xq->q + (t0 + t) * stride + b * 32));
                        _Alignas(32) uint64_t o[4];
                        _mm256_store_si256((__m256i *)o, v);
                        for (int k = 0; k < 4; k++)
                                piece[k][t] = o[k];
                        d[2 * t] = d[2 * t + 1] = xq->d[(t0 + t) * xq->n_blocks + b];
                }
                __m512i qs = _mm512_setzero_si512();
                for (int k = 0; k < 4; k++) {
                        tc->xv[j][k] = _mm512_load_si512(piece[k]);
                        qs = _mm512_dpbusd_epi32(qs, one, tc->xv[j][k]);
                }
                tc->dv[j] = _mm512_load_ps(d);
                int32_t g = (int32_t)(b * 32 / G - gf);
                tc->grp[j] = g;
                tc->nq[j] = _mm512_mullo_epi32(qs, _mm512_set1_epi32(-128));
        }
}

/* Rows r..r+R-1 of the 8-token layout's sums into y (written when first): lanes 2t and
 * 2t+1 hold token t's two column halves. */
static inline __attribute__((always_inline)) void t8_store_rows(const __m512 *acc, float *y, int64_t ldy, int64_t r,
                                                                const int R, int T, int first) {
        UNROLL
        for (int i = 0; i < R; i++) {
                _Alignas(64) float o[16];
                _mm512_store_ps(o, _mm512_add_ps(acc[i], _mm512_permute_ps(acc[i], 0xb1)));
                for (int t = 0; t < T; t++)
                        y[t * ldy + r + i] = first ? o[2 * t] : y[t * ldy + r + i] + o[2 * t];
        }
}

/* The 8- and 16-token Q8 blocks' shared steps over R rows from r. Their rows' pointers,
 * group scales from group gf on, and zeroed sums. */
static inline __attribute__((always_inline)) void q8_rows_init(const struct dse_qmat *w, int64_t r, int64_t gf,
                                                               const int R, const int8_t **row, const float **sc,
                                                               __m512 *acc, __m512 *F) {
        UNROLL
        for (int i = 0; i < R; i++) {
                row[i] = (const int8_t *)w->data + (r + i) * w->cols;
                sc[i] = w->scale + (r + i) * w->n_groups + gf;
                acc[i] = _mm512_setzero_ps();
                F[i] = _mm512_setzero_ps();
        }
}

/* Blocks b and b+1 of each row as w + 128 into wu[i] (past the row's end: w + 128 = 128
 * meets q = 0), prefetching ahead rows lines further on. */
static inline __attribute__((always_inline)) void q8_rows_flip(const int8_t *const *row, int64_t b, int64_t cols,
                                                               int64_t ahead, const int R, uint8_t (*wu)[64]) {
        const __m512i flip = _mm512_set1_epi8((char)0x80);
        UNROLL
        for (int i = 0; i < R; i++) {
                const int8_t *p = row[i] + b * 32;
                _mm_prefetch((const char *)(p + ahead * cols), _MM_HINT_T1);
                _mm512_store_si512(wu[i], _mm512_xor_si512(_mm512_maskz_loadu_epi8(mask64(cols - b * 32), p), flip));
        }
}

/* A block's integer sums S into the rows' float sums: F += cvt(S) * d, and at a group's
 * last block acc += F * s of group g. */
static inline __attribute__((always_inline)) void q8_rows_scale(const __m512i *S, __m512 d, const float *const *sc,
                                                                int32_t g, int last, const int R, __m512 *F,
                                                                __m512 *acc) {
        UNROLL
        for (int i = 0; i < R; i++) {
                F[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S[i]), d, F[i]);
                if (last) {
                        acc[i] = _mm512_fmadd_ps(F[i], _mm512_set1_ps(sc[i][g]), acc[i]);
                        F[i] = _mm512_setzero_ps();
                }
        }
}

/* Q8 rows r..r+R-1 over the chunk's blocks [b0, b1) (b0 even): the chunk's sums of the
 * 8 tokens are added to y (written when first). */
static inline __attribute__((always_inline)) void q8_t8_block(const struct dse_qmat *w, const struct t8chunk *tc,
                                                              int64_t b0, int64_t b1, float *y, int64_t ldy,
                                                              int64_t r, const int R, int T, int first) {
        const int8_t *row[T8R];
        const float *sc[T8R];
        _Alignas(64) uint8_t wu[T8R][64]; /* a row's 64 bytes as w + 128 */
        __m512 acc[T8R], F[T8R];
        q8_rows_init(w, r, b0 * 32 / w->group_size, R, row, sc, acc, F);
        for (int64_t b = b0; b < b1; b++) {
                int64_t j = b - b0, u = j & 1;
                if (u == 0)
                        q8_rows_flip(row, b, w->cols, 2 * T8R, R, wu);
                __m512i S[T8R];
                UNROLL
                for (int i = 0; i < R; i++)
                        S[i] = tc->nq[j];
                UNROLL
                for (int k = 0; k < 4; k++)
                        UNROLL
                        for (int i = 0; i < R; i++)
                                S[i] = _mm512_dpbusd_epi32(S[i], _mm512_set1_epi64(*(const int64_t *)(wu[i] + 32 * u + 8 * k)),
                                                           tc->xv[j][k]);
                q8_rows_scale(S, tc->dv[j], sc, tc->grp[j], b + 1 == b1 || tc->grp[j + 1] != tc->grp[j], R, F, acc);
        }
        t8_store_rows(acc, y, ldy, r, R, T, first);
}

/* Token blocks of 8 (the last may be short, zero-padded), chunks of T8C columns prepared
 * once for all rows of the range. */
static void matmul_xq_t8(const struct dse_qmat *w, const struct dse_xq *xq, int64_t n, float *y, int64_t ldy,
                         int64_t r0, int64_t r1) {
        _Alignas(64) struct t8chunk tc;
        for (int64_t t0 = 0; t0 < n; t0 += 8) {
                int T = n - t0 < 8 ? (int)(n - t0) : 8;
                for (int64_t b0 = 0; b0 < xq->n_blocks; b0 += T8B) {
                        int64_t b1 = b0 + T8B < xq->n_blocks ? b0 + T8B : xq->n_blocks;
                        prep_t8(xq, t0, T, b0, b1, w->group_size, &tc);
                        int64_t r = r0;
                        float *yt = y + t0 * ldy;
                        for (; r + T8R <= r1; r += T8R)
                                q8_t8_block(w, &tc, b0, b1, yt, ldy, r, T8R, T, b0 == 0);
                        for (; r < r1; r++)
                                q8_t8_block(w, &tc, b0, b1, yt, ldy, r, 1, T, b0 == 0);
                }
        }
}

/* ---- Q8 times 16 tokens at once: one int32 lane per token --------------------------------
 *
 * The 8-token layout still pays a convert and an FMA per row, block and 4 vpdpbusd, and
 * those share port 0 with vpdpbusd: in L2 it stays well behind Q4's interleaved kernel,
 * which has a tenth of that float work. Here a vector holds 16 tokens,
 * lane t summing the whole 32-column block of token t: 8 vpdpbusd per row and block, each
 * of a broadcast 4-byte weight piece (w + 128, as in the 8-token layout) with the tokens'
 * 4 q that meet it, then one convert and one FMA for all 16 tokens. Per row and group:
 * s * F. Used for whole blocks of 16 tokens (prefill's calls bring up to 128). */

#define T16C 2048             /* columns per chunk: its prepared activations (40 KiB) stay in L2 */
#define T16B (T16C / 32)      /* blocks per chunk */
#define T16R 8                /* rows per register block */

/* 16 tokens' activations over one chunk's blocks. xv[j][k] lane t: token t's q[32b+4k..+3]
 * (b = the chunk's block j); nq[j] lane t: -128 * token t's sum of q over block b; dv[j]
 * lane t: token t's d of block b. */
struct t16chunk {
        __m512i xv[T16B][8];
        __m512i nq[T16B];
        __m512 dv[T16B];
        int32_t grp[T16B]; /* group of block j, counted from the chunk's first group */
};

static void prep_t16(const struct dse_xq *xq, int64_t t0, int64_t b0, int64_t b1, int64_t G, struct t16chunk *tc) {
        const __m512i one = _mm512_set1_epi8(1);
        int64_t stride = xq->n_blocks * DSE_XQ_BLOCK, gf = b0 * 32 / G;
        _Alignas(64) uint32_t piece[8][16];
        _Alignas(64) float d[16];
        for (int64_t b = b0; b < b1; b++) {
                int64_t j = b - b0;
                for (int t = 0; t < 16; t++) {
                        const int8_t *q = xq->q + (t0 + t) * stride + b * 32;
                        for (int k = 0; k < 8; k++)
                                memcpy(&piece[k][t], q + 4 * k, 4);
                        d[t] = xq->d[(t0 + t) * xq->n_blocks + b];
                }
                __m512i qs = _mm512_setzero_si512();
                for (int k = 0; k < 8; k++) {
                        tc->xv[j][k] = _mm512_load_si512(piece[k]);
                        qs = _mm512_dpbusd_epi32(qs, one, tc->xv[j][k]);
                }
                tc->dv[j] = _mm512_load_ps(d);
                tc->grp[j] = (int32_t)(b * 32 / G - gf);
                tc->nq[j] = _mm512_mullo_epi32(qs, _mm512_set1_epi32(-128));
        }
}

/* Q8 rows r..r+R-1 over the chunk's blocks [b0, b1) (b0 even): the chunk's sums of the
 * 16 tokens are added to y (written when first). */
static inline __attribute__((always_inline)) void q8_t16_block(const struct dse_qmat *w, const struct t16chunk *tc,
                                                               int64_t b0, int64_t b1, float *y, int64_t ldy,
                                                               int64_t r, const int R, int first) {
        const int8_t *row[T16R];
        const float *sc[T16R];
        _Alignas(64) uint8_t wu[T16R][64]; /* a row's 64 bytes as w + 128 */
        __m512 acc[T16R], F[T16R];
        q8_rows_init(w, r, b0 * 32 / w->group_size, R, row, sc, acc, F);
        for (int64_t b = b0; b < b1; b++) {
                int64_t j = b - b0, u = j & 1;
                if (u == 0)
                        q8_rows_flip(row, b, w->cols, 2 * T16R, R, wu);
                __m512i S[T16R];
                UNROLL
                for (int i = 0; i < R; i++)
                        S[i] = tc->nq[j];
                UNROLL
                for (int k = 0; k < 8; k++)
                        UNROLL
                        for (int i = 0; i < R; i++) {
                                int32_t wp;
                                memcpy(&wp, wu[i] + 32 * u + 4 * k, 4);
                                S[i] = _mm512_dpbusd_epi32(S[i], _mm512_set1_epi32(wp), tc->xv[j][k]);
                        }
                q8_rows_scale(S, tc->dv[j], sc, tc->grp[j], b + 1 == b1 || tc->grp[j + 1] != tc->grp[j], R, F, acc);
        }
        /* lane t is token t: scatter the R rows' 16 sums into y's columns r..r+R-1 */
        UNROLL
        for (int i = 0; i < R; i++) {
                _Alignas(64) float o[16];
                _mm512_store_ps(o, acc[i]);
                for (int t = 0; t < 16; t++)
                        y[t * ldy + r + i] = first ? o[t] : y[t * ldy + r + i] + o[t];
        }
}

/* n (a multiple of 16) tokens in blocks of 16, chunks of T16C columns prepared once for
 * all rows of the range. */
static void matmul_xq_t16(const struct dse_qmat *w, const struct dse_xq *xq, int64_t n, float *y, int64_t ldy,
                          int64_t r0, int64_t r1) {
        _Alignas(64) struct t16chunk tc;
        for (int64_t t0 = 0; t0 < n; t0 += 16) {
                for (int64_t b0 = 0; b0 < xq->n_blocks; b0 += T16B) {
                        int64_t b1 = b0 + T16B < xq->n_blocks ? b0 + T16B : xq->n_blocks;
                        prep_t16(xq, t0, b0, b1, w->group_size, &tc);
                        int64_t r = r0;
                        float *yt = y + t0 * ldy;
                        for (; r + T16R <= r1; r += T16R)
                                q8_t16_block(w, &tc, b0, b1, yt, ldy, r, T16R, b0 == 0);
                        for (; r < r1; r++)
                                q8_t16_block(w, &tc, b0, b1, yt, ldy, r, 1, b0 == 0);
                }
        }
}

/* Tokens t0.. of xq (a view, no copy). */
static struct dse_xq xq_from(const struct dse_xq *xq, int64_t t0) {
        struct dse_xq v = *xq;
        v.n -= t0;
        v.q += t0 * xq->n_blocks * DSE_XQ_BLOCK;
        v.d += t0 * xq->n_blocks;
        return v;
}

/* Whole blocks of 16 tokens through matmul_xq_t16; of the rest, from T8_MIN tokens, whole
 * blocks of 8 and a short last one of T8_MIN or more through matmul_xq_t8; a shorter rest,
 * and fewer tokens, through the 4-token blocks. */
static void matmul_xq_split(const struct dse_qmat *w, const struct dse_xq *xq, float *y, int64_t ldy, int64_t r0,
                            int64_t r1) {
        int64_t n16 = xq->n / 16 * 16;
        if (n16)
                matmul_xq_t16(w, xq, n16, y, ldy, r0, r1);
        struct dse_xq rest = xq_from(xq, n16);
        int64_t m = rest.n, n8 = m < T8_MIN ? 0 : m % 8 && m % 8 < T8_MIN ? m / 8 * 8 : m;
        if (n8)
                matmul_xq_t8(w, &rest, n8, y + n16 * ldy, ldy, r0, r1);
        if (n8 == m)
                return;
        struct dse_xq tail = xq_from(&rest, n8);
        matmul_xq_blocked(w, &tail, y + (n16 + n8) * ldy, ldy, r0, r1);
}

static void matmul_xq_q8_avx512(const struct dse_qmat *w, const struct dse_xq *xq, float *y, int64_t ldy, int64_t r0,
                                int64_t r1) {
        if (w->group_size % DSE_XQ_BLOCK) {
                dse__kernels_ref_matmul_xq(w, xq, y, ldy, r0, r1);
                return;
        }
        matmul_xq_blocked(w, xq, y, ldy, r0, r1);
}

static void matmul_xq_q8_t8_avx512(const struct dse_qmat *w, const struct dse_xq *xq, float *y, int64_t ldy,
                                   int64_t r0, int64_t r1) {
        if (w->group_size % DSE_XQ_BLOCK) {
                dse__kernels_ref_matmul_xq(w, xq, y, ldy, r0, r1);
                return;
        }
        matmul_xq_split(w, xq, y, ldy, r0, r1);
}

/* ---- Q4 times int8 activations: 16 rows interleaved ---------------------------------------
 *
 * Chunk k (64 bytes) of tile (R, b) holds an int32 lane per row L of row block R: its low
 * nibbles are columns 32b+8k..32b+8k+3, its high ones 32b+8k+4..32b+8k+7 (model.h).
 * vpdpbusd of the low nibbles with the broadcast int32 of a token's q[32b+8k..+3] (and of
 * the high nibbles with q[32b+8k+4..+7]) adds each row's products into that row's lane, so
 * a block's 4 chunks sum into one register per token and row block: exact integers, then
 * one convert and one FMA per 16 rows, token and 32 columns, where the row-major kernel
 * paid them per row and 8 columns. The weights need no shuffle; the activations none
 * either (a broadcast load); the high nibbles are masked in place (v & 0xf0, 16 times
 * their value, so that sum is 16 times exact and an arithmetic shift undoes it): one AND
 * per nibble and 64 bytes, shared by the block's tokens.
 *
 * Per row and token the float order is fixed: per block F = fma(cvt(sum), d_b, F); per
 * group acc = fma(F, s, acc), then acc = fnma(s z, X[g], acc), X[g] being the sum over the
 * group's blocks of d_b * sum(q) (the zero point: sum (w - z) q = sum w q - z sum q).
 * Nothing in it depends on the tokens per call, on the row blocks a register block holds,
 * on r0/r1 or on where the columns are cut into chunks (chunks end on group boundaries and
 * the next one goes on from the rows' stored sums, which a float store keeps exactly):
 * the 8-token blocks (DSE_KFEAT_T8) give the same bits as the 4-token ones. Groups that
 * are not a multiple of 32 columns share a block between groups; they take the reference.
 *
 * The scales and zero points are 16 rows interleaved as well (model.h): a row block's
 * group is one 64-byte load of s and one 16-byte load of z, read in group order, so they
 * are two more sequential streams per row block, prefetched 8 groups (s) and 16 groups
 * (z) ahead in their own order (fp16 scales: one 32-byte load, 16 groups ahead, and no
 * z): a late scale line holds up the group's FMAs and, behind
 * them, the loads of the next lines. Prefetching the next row blocks' ones instead (as
 * the row-major layout needed) gains nothing here and costs a little in L2. Each 64
 * weight bytes are loaded once (DSE_LOAD_ONCE), so no two loads wait on one miss. */

#define Q4_TMAX 8     /* tokens per register block with DSE_KFEAT_T8 (TB without) */
#define Q4_NR1 4      /* row blocks side by side for 1-2 tokens (2 for 3-4, 1 from 5), spread over
                       * the range: more streams keep more lines in flight, as many as the
                       * registers allow; the most a register block holds */
#define Q4_SPLIT 4    /* register blocks of up to this many (row block, token) pairs keep the
                       * nibbles' sums apart (v & 0xf0); larger ones lack the registers and
                       * shift the high nibbles down into one sum */
#define Q4_SB 4       /* row blocks per super-block in the chunked path (64 rows: their chunk of
                       * weights stays in L2 while every token block reads it) */
#define Q4_KC 8192    /* columns per chunk in the chunked path */
#define Q4_XN 8192    /* group sums (tokens x groups) prepared at once: 32 KiB of stack */

/* Row blocks Rv[0..NR-1] times tokens t0..t0+T-1 over the groups [g0, g1): the rows' sums
 * start at 0 (first) or from y, and the rows in [r0, r1) are stored back. X: the tokens'
 * group sums from group g0, xs apart. */
static inline __attribute__((always_inline)) void q4_block(const struct dse_qmat *w, const struct dse_xq *xq,
                                                           const float *X, int64_t xs, int64_t t0, const int64_t *Rv,
                                                           int64_t g0, int64_t g1, float *y, int64_t ldy, int64_t r0,
                                                           int64_t r1, int first, const int NR, const int T) {
        const int split = NR * T <= Q4_SPLIT;
        int64_t nb = xq->n_blocks, bpg = w->group_size / DSE_XQ_BLOCK;
        const uint8_t *p[Q4_NR1];
        const int8_t *q[Q4_TMAX];
        const float *d[Q4_TMAX];
        __mmask16 keep[Q4_NR1];
        int64_t si[Q4_NR1]; /* the row block's first scale and zero point (model.h dse__q4_sidx) */
        const int sym = w->scale_f16 != NULL;
        __m512 acc[Q4_NR1][Q4_TMAX];
        UNROLL
        for (int t = 0; t < T; t++) {
                q[t] = xq->q + (t0 + t) * nb * DSE_XQ_BLOCK;
                d[t] = xq->d + (t0 + t) * nb;
        }
        UNROLL
        for (int i = 0; i < NR; i++) {
                p[i] = (const uint8_t *)w->data + Rv[i] * nb * DSE_Q4_TILE;
                si[i] = Rv[i] * w->n_groups * DSE_Q4_ROWS;
                keep[i] = (__mmask16)(mask16(r1 - 16 * Rv[i]) & ~mask16(r0 - 16 * Rv[i]));
                UNROLL
                for (int t = 0; t < T; t++)
                        acc[i][t] = first ? _mm512_setzero_ps()
                                          : _mm512_maskz_loadu_ps(keep[i], y + (t0 + t) * ldy + 16 * Rv[i]);
        }
        const __m512i lo4 = _mm512_set1_epi8(0x0f), hi4 = _mm512_set1_epi8((char)0xf0);
        for (int64_t g = g0; g < g1; g++) {
                int64_t be = (g + 1) * bpg < nb ? (g + 1) * bpg : nb;
                __m512 F[Q4_NR1][Q4_TMAX];
                UNROLL
                for (int i = 0; i < NR; i++)
                        UNROLL
                        for (int t = 0; t < T; t++)
                                F[i][t] = _mm512_setzero_ps();
                for (int64_t b = g * bpg; b < be; b++) {
                        __m512i Sl[Q4_NR1][Q4_TMAX], Sh[Q4_NR1][Q4_TMAX];
                        UNROLL
                        for (int i = 0; i < NR; i++)
                                UNROLL
                                for (int t = 0; t < T; t++)
                                        Sl[i][t] = Sh[i][t] = _mm512_setzero_si512();
                        UNROLL
                        for (int k = 0; k < 4; k++) {
                                __m512i xl[Q4_TMAX], xh[Q4_TMAX];
                                UNROLL
                                for (int t = 0; t < T; t++) {
                                        int32_t l4, h4;
                                        memcpy(&l4, q[t] + b * DSE_XQ_BLOCK + 8 * k, 4);
                                        memcpy(&h4, q[t] + b * DSE_XQ_BLOCK + 8 * k + 4, 4);
                                        xl[t] = _mm512_set1_epi32(l4);
                                        xh[t] = _mm512_set1_epi32(h4);
                                }
                                UNROLL
                                for (int i = 0; i < NR; i++) {
                                        const uint8_t *c = p[i] + b * DSE_Q4_TILE + 64 * k;
                                        _mm_prefetch((const char *)(c + DSE_PREFETCH_AHEAD), _MM_HINT_T1);
                                        __m512i v = _mm512_loadu_si512(c);
                                        DSE_LOAD_ONCE(v);
                                        __m512i wl = _mm512_and_si512(v, lo4);
                                        __m512i wh = split ? _mm512_and_si512(v, hi4)
                                                           : _mm512_and_si512(_mm512_srli_epi16(v, 4), lo4);
                                        UNROLL
                                        for (int t = 0; t < T; t++) {
                                                Sl[i][t] = _mm512_dpbusd_epi32(Sl[i][t], wl, xl[t]);
                                                if (split)
                                                        Sh[i][t] = _mm512_dpbusd_epi32(Sh[i][t], wh, xh[t]);
                                                else
                                                        Sl[i][t] = _mm512_dpbusd_epi32(Sl[i][t], wh, xh[t]);
                                        }
                                }
                        }
                        UNROLL
                        for (int i = 0; i < NR; i++)
                                UNROLL
                                for (int t = 0; t < T; t++) {
                                        __m512i s = split ? _mm512_add_epi32(Sl[i][t], _mm512_srai_epi32(Sh[i][t], 4))
                                                          : Sl[i][t];
                                        F[i][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_set1_ps(d[t][b]), F[i][t]);
                                }
                }
                UNROLL
                for (int i = 0; i < NR; i++) {
                        /* the 16 rows' s and s z (padded rows' too: never stored) */
                        int64_t e = si[i] + DSE_Q4_ROWS * g;
                        __m512 s, sz;
                        if (sym) {
                                _mm_prefetch((const char *)(w->scale_f16 + e + DSE_Q4_ROWS * 16), _MM_HINT_T0); /* 8 lines */
                                s = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w->scale_f16 + e)));
                                sz = _mm512_mul_ps(s, _mm512_set1_ps((float)DSE_Q4_SYM_ZERO));
                        } else {
                                _mm_prefetch((const char *)(w->scale + e + DSE_Q4_ROWS * 8), _MM_HINT_T0); /* 8 lines */
                                _mm_prefetch((const char *)(w->zero + e + DSE_Q4_ROWS * 16), _MM_HINT_T0); /* 4 lines */
                                s = _mm512_loadu_ps(w->scale + e);
                                sz = _mm512_mul_ps(s, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(
                                                              _mm_loadu_si128((const __m128i *)(w->zero + e)))));
                        }
                        UNROLL
                        for (int t = 0; t < T; t++) {
                                acc[i][t] = _mm512_fmadd_ps(F[i][t], s, acc[i][t]);
                                acc[i][t] = _mm512_fnmadd_ps(sz, _mm512_set1_ps(X[t * xs + g - g0]), acc[i][t]);
                        }
                }
        }
        UNROLL
        for (int i = 0; i < NR; i++)
                UNROLL
                for (int t = 0; t < T; t++)
                        _mm512_mask_storeu_ps(y + (t0 + t) * ldy + 16 * Rv[i], keep[i], acc[i][t]);
}

/* The register block for NR row blocks and T tokens, specialised (the accumulators of
 * absent ones would otherwise stay live). */
static void q4_call(const struct dse_qmat *w, const struct dse_xq *xq, const float *X, int64_t xs, int64_t t0,
                    const int64_t *Rv, int64_t g0, int64_t g1, float *y, int64_t ldy, int64_t r0, int64_t r1, int first,
                    int NR, int T) {
#define Q4_B(nr, t) q4_block(w, xq, X, xs, t0, Rv, g0, g1, y, ldy, r0, r1, first, nr, t)
        if (NR == Q4_NR1 && T == 1)
                Q4_B(Q4_NR1, 1);
        else if (NR == Q4_NR1 && T == 2)
                Q4_B(Q4_NR1, 2);
        else if (NR == 2 && T == 3)
                Q4_B(2, 3);
        else if (NR == 2 && T == 4)
                Q4_B(2, 4);
        else
                switch (T) {
                case 1: Q4_B(1, 1); break;
                case 2: Q4_B(1, 2); break;
                case 3: Q4_B(1, 3); break;
                case 4: Q4_B(1, 4); break;
                case 5: Q4_B(1, 5); break;
                case 6: Q4_B(1, 6); break;
                case 7: Q4_B(1, 7); break;
                default: Q4_B(1, 8); break;
                }
#undef Q4_B
}

/* Row blocks [Ra, Rb) times tokens t0..t0+T-1 (T <= Q4_TMAX): register blocks of NR row
 * blocks, with spread the range cut into NR equal parts read side by side (block k takes
 * row block k of each part), so each thread streams from NR places far apart, which keeps
 * more lines in flight than one stream (as matmul_xq_blocked's spread); then the rest. */
static void q4_rows(const struct dse_qmat *w, const struct dse_xq *xq, const float *X, int64_t xs, int64_t t0, int T,
                    int64_t Ra, int64_t Rb, int64_t g0, int64_t g1, float *y, int64_t ldy, int64_t r0, int64_t r1,
                    int first, int spread) {
        int NR = T <= 2 ? Q4_NR1 : T <= 4 ? 2 : 1;
        int64_t R = Ra, Rv[Q4_NR1];
        if (spread && NR > 1) {
                int64_t part = (Rb - Ra) / NR;
                for (int64_t k = 0; k < part; k++) {
                        for (int i = 0; i < NR; i++)
                                Rv[i] = Ra + k + i * part;
                        q4_call(w, xq, X, xs, t0, Rv, g0, g1, y, ldy, r0, r1, first, NR, T);
                }
                R += NR * part;
        }
        for (; R + NR <= Rb; R += NR) {
                for (int i = 0; i < NR; i++)
                        Rv[i] = R + i;
                q4_call(w, xq, X, xs, t0, Rv, g0, g1, y, ldy, r0, r1, first, NR, T);
        }
        for (; R < Rb; R++)
                q4_call(w, xq, X, xs, t0, &R, g0, g1, y, ldy, r0, r1, first, 1, T);
}

/* Q4 matmul_xq with register blocks of up to tmax tokens (TB, or Q4_TMAX with
 * DSE_KFEAT_T8). Decode (n <= tmax) prepares the group sums once and streams every row
 * block once, whole rows (in Q4_XN / n groups' chunks past that); more tokens go by
 * super-blocks of Q4_SB row blocks, chunks of about Q4_KC columns and token blocks, the
 * chunk's group sums prepared once for as many tokens as Q4_XN holds. No allocation; the
 * stack holds X (32 KiB). */
static void matmul_xq_q4_il(const struct dse_qmat *w, const struct dse_xq *xq, float *y, int64_t ldy, int64_t r0,
                            int64_t r1, int tmax) {
        if (w->group_size % DSE_XQ_BLOCK) {
                dse__kernels_ref_matmul_xq(w, xq, y, ldy, r0, r1);
                return;
        }
        if (r0 >= r1 || xq->n <= 0)
                return;
        _Alignas(64) float X[Q4_XN];
        int64_t n = xq->n, G = w->group_size, ng = (w->cols + G - 1) / G;
        int64_t Ra = r0 / DSE_Q4_ROWS, Rb = (r1 + DSE_Q4_ROWS - 1) / DSE_Q4_ROWS;
        if (n <= tmax) {
                int64_t cg = Q4_XN / n < ng ? Q4_XN / n : ng;
                for (int64_t g0 = 0; g0 < ng; g0 += cg) {
                        int64_t g1 = g0 + cg < ng ? g0 + cg : ng;
                        q4_prep_x(xq, G, 0, n, g0, g1, X, g1 - g0);
                        q4_rows(w, xq, X, g1 - g0, 0, (int)n, Ra, Rb, g0, g1, y, ldy, r0, r1, g0 == 0, 1);
                }
                return;
        }
        int64_t cg = Q4_KC / G < 1 ? 1 : Q4_KC / G < ng ? Q4_KC / G : ng, tp = Q4_XN / cg;
        for (int64_t ta = 0; ta < n; ta += tp) {
                int64_t tb = ta + tp < n ? ta + tp : n;
                for (int64_t g0 = 0; g0 < ng; g0 += cg) {
                        int64_t g1 = g0 + cg < ng ? g0 + cg : ng;
                        q4_prep_x(xq, G, ta, tb - ta, g0, g1, X, g1 - g0);
                        for (int64_t Rs = Ra; Rs < Rb; Rs += Q4_SB) {
                                int64_t Re = Rs + Q4_SB < Rb ? Rs + Q4_SB : Rb;
                                for (int64_t t0 = ta; t0 < tb; t0 += tmax) {
                                        int T = tb - t0 < tmax ? (int)(tb - t0) : tmax;
                                        q4_rows(w, xq, X + (t0 - ta) * (g1 - g0), g1 - g0, t0, T, Rs, Re, g0, g1, y,
                                                ldy, r0, r1, g0 == 0, 0);
                                }
                        }
                }
        }
}

static void matmul_xq_q4_avx512(const struct dse_qmat *w, const struct dse_xq *xq, float *y, int64_t ldy, int64_t r0,
                                int64_t r1) {
        matmul_xq_q4_il(w, xq, y, ldy, r0, r1, TB);
}

static void matmul_xq_q4_t8_avx512(const struct dse_qmat *w, const struct dse_xq *xq, float *y, int64_t ldy,
                                   int64_t r0, int64_t r1) {
        matmul_xq_q4_il(w, xq, y, ldy, r0, r1, Q4_TMAX);
}

void dse__kernels_fill_avx512_vnni(struct dse_kernels *k) {
        k->matmul_xq[DSE_DTYPE_Q8] = matmul_xq_q8_avx512;
        k->matmul_xq[DSE_DTYPE_Q4] = matmul_xq_q4_avx512;
}

void dse__kernels_fill_avx512_t8(struct dse_kernels *k) {
        k->matmul_xq[DSE_DTYPE_Q8] = matmul_xq_q8_t8_avx512;
        k->matmul_xq[DSE_DTYPE_Q4] = matmul_xq_q4_t8_avx512;
}
