/* AVX-512 kernels (this file alone is compiled with -mavx512f -mavx512bw -mavx512vl
 * -mavx512vnni -mavx512bf16 -mfma -mf16c). Each routine computes what its `_ref` twin in
 * ref.c computes; only the summation order differs, and the integer block products of
 * matmul_xq are exact, as the reference's are. Helpers are static inline so no AVX-512
 * code reaches other callers through the linker.
 *
 * Two fills: dse__kernels_fill_avx512 (F+BW+VL: float-activation matmuls, quantize_xq,
 * vector helpers) and dse__kernels_fill_avx512_vnni (matmul_xq on vpdpbusd), which
 * kernels.c calls only when the CPU reports VNNI.
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
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/q4_f32_rows.h"
#include "kernels/q4_xsums.h"

#define TB 4                   /* tokens per register block */
#define RB 4                   /* rows per register block */
#define RS 64                  /* rows per super-block: their weights stay in L2 while every token block uses them */
#define KC 8192                /* columns per chunk of prepared activations (whole rows, mostly: the
                                * rows then stream front to back, as the prefetchers like) */
#define PC (KC / 64)           /* 64-column steps per chunk */

/* The register blocks' loops over rows and tokens must unroll completely (at -O2 GCC
 * leaves them rolled, and the accumulators then live in memory). */
#define UNROLL _Pragma("GCC unroll 16")

/* The first n lanes (none for n <= 0, all past the width). */
static inline __mmask64 mask64(int64_t n) {
        return n >= 64 ? ~(__mmask64)0 : n <= 0 ? 0 : (((__mmask64)1 << n) - 1);
}

static inline __mmask32 mask32(int64_t n) {
        return n >= 32 ? ~(__mmask32)0 : n <= 0 ? 0 : (__mmask32)((1u << n) - 1);
}

static inline __mmask16 mask16(int64_t n) {
        return (__mmask16)(n >= 16 ? 0xffff : n <= 0 ? 0 : ((1u << n) - 1));
}

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
                        d[b] = amax / 127.0f;
                        __m512 vid = _mm512_set1_ps(id);
                        __m128i q0 = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v0, vid)));
                        __m128i q1 = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v1, vid)));
                        _mm256_storeu_si256((__m256i *)(q + c0), _mm256_set_m128i(q1, q0));
                }
        }
}

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
 * lines in flight over several streams than over one (Q4 decode, Xeon SPR VM:
 * dse-kernel-bench n=1 0.69 -> 0.77-0.80 of the read probe with one thread, Qwen 1.5B
 * int4 batch 1 16.8 -> 19.6 tok/s). Then the rows left over one at a time. Every row's
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
         * rows (for the former row-major Q4 kernel the preparation was 2.4% of Qwen int4
         * batch-1 samples, against 41% in its row blocks), and each weight row is then read once for every token: the rows
         * need no super-blocks, and are read as RB streams spread over the range. Wider
         * rows fall to the chunked path below, which reads each row in pieces and 64 rows
         * at a time: Qwen 1.5B's int8 down projection (8960 columns, just past KC) streamed
         * 0.59-0.72 of the read probe there, against 0.91-1.04 for 1536 columns. */
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
 * those share port 0 with vpdpbusd on this core: in L2 it reaches 117 GMAC/s per thread
 * where Q4's interleaved kernel, with a tenth of that float work, reaches 192
 * (dse-kernel-bench --format q8 / q4, compute, n >= 8). Here a vector holds 16 tokens,
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
 * (z) ahead in their own order: a late scale line holds up the group's FMAs and, behind
 * them, the loads of the next lines. Prefetching the next row blocks' ones instead (as
 * the row-major layout needed) measured no gain and cost ~5% at n = 1 in L2
 * (dse-kernel-bench --format q4). Each 64 weight bytes are loaded once (DSE_LOAD_ONCE).
 * Both together, batch-1 decode at 2 threads, alternated runs (bench/RESULTS.md, "Scale
 * prefetch and one load per weight line"): Qwen 1.5B int4 0.824 -> 0.846 of the paired
 * probe, V2-Lite 8 layers 0.787 -> 0.811. */

#define Q4_TMAX 8     /* tokens per register block with DSE_KFEAT_T8 (TB without) */
#define Q4_NR1 4      /* row blocks side by side for 1-2 tokens (2 for 3-4, 1 from 5), spread over
                       * the range: more streams keep more lines in flight (in-process A/B,
                       * 1 thread: n=3-4 0.58-0.66 -> 0.66-0.75 of the read probe with 2 blocks
                       * rather than 1, n=2 +5% with 4 rather than 2); the most a register block
                       * holds */
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
        const float *sp[Q4_NR1];
        const uint8_t *zp[Q4_NR1];
        __m512 acc[Q4_NR1][Q4_TMAX];
        UNROLL
        for (int t = 0; t < T; t++) {
                q[t] = xq->q + (t0 + t) * nb * DSE_XQ_BLOCK;
                d[t] = xq->d + (t0 + t) * nb;
        }
        UNROLL
        for (int i = 0; i < NR; i++) {
                p[i] = (const uint8_t *)w->data + Rv[i] * nb * DSE_Q4_TILE;
                sp[i] = w->scale + Rv[i] * w->n_groups * DSE_Q4_ROWS;
                zp[i] = w->zero + Rv[i] * w->n_groups * DSE_Q4_ROWS;
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
                        _mm_prefetch((const char *)(sp[i] + DSE_Q4_ROWS * (g + 8)), _MM_HINT_T0);  /* 8 lines */
                        _mm_prefetch((const char *)(zp[i] + DSE_Q4_ROWS * (g + 16)), _MM_HINT_T0); /* 4 lines */
                        __m512 s = _mm512_loadu_ps(sp[i] + DSE_Q4_ROWS * g);
                        __m512 sz = _mm512_mul_ps(s, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(
                                                             (const __m128i *)(zp[i] + DSE_Q4_ROWS * g)))));
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

/* ---- bf16 activations ------------------------------------------------------------------- */

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

void dse__kernels_avx512_matmul_bf16act(const struct dse_qmat *w, const float *x, int64_t ldx, int64_t n, float *y,
                                        int64_t ldy, int64_t r0, int64_t r1) {
        matmul_bf16act_avx512(w, x, ldx, n, y, ldy, r0, r1);
}

void dse__kernels_fill_avx512_bf16(struct dse_kernels *k) {
        k->matmul_bf16act = matmul_bf16act_avx512;
}

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
 * 32 columns that is 2 shifts (port 0) and 2 lookups (port 5) beside 2 FMAs; a widening
 * per row instead (vpmovzxbd, port 5) measured 6% slower. The table holds exactly what dequant_row
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
                        const float *srow = w->scale + dse__q4_sidx(w->n_groups, r, 0);
                        const uint8_t *zrow = w->zero + dse__q4_sidx(w->n_groups, r, 0);
                        __m512 va = _mm512_set1_ps(a[r - r0]), t = _mm512_setzero_ps();
                        int64_t gp = -1;
                        UNROLL
                        for (int k = 0; k < NC; k++) {
                                int64_t g = (c0 + 32 * k) / G;
                                if (g != gp) { /* a tile lies in one group (G a multiple of 32) */
                                        __m512 vz = _mm512_set1_ps((float)zrow[DSE_Q4_ROWS * g]);
                                        t = _mm512_mul_ps(_mm512_sub_ps(iota, vz), _mm512_set1_ps(srow[DSE_Q4_ROWS * g]));
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

/* The sum of squares vectorised; the scaling as the _ref twin does it, w * (x * inv). */
static void rmsnorm_avx512(float *out, const float *x, const float *w, int64_t n, float eps) {
        __m512 ss = _mm512_setzero_ps();
        for (int64_t i = 0; i < n; i += 16) {
                __m512 v = _mm512_maskz_loadu_ps(mask16(n - i), x + i);
                ss = _mm512_fmadd_ps(v, v, ss);
        }
        __m512 inv = _mm512_set1_ps(1.0f / sqrtf(_mm512_reduce_add_ps(ss) / (float)n + eps));
        for (int64_t i = 0; i < n; i += 16) {
                __mmask16 m = mask16(n - i);
                __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), inv);
                _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, w + i), v));
        }
}

/* out[c] = W[r, c] for Q8 and Q4 (groups a multiple of 32), 16 columns per step within
 * each group, with the _ref twin's operations per element ((float)q * s, ((float)q - (float)z) * s), so the
 * values are identical; the float formats as avx2.c converts them. MLA absorption
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
                 * tile lies in one group (other groups take the _ref twin through avx2.c). */
                int64_t nb = (n + DSE_Q4_COLS - 1) / DSE_Q4_COLS;
                const uint8_t *p = (const uint8_t *)w->data + (r / DSE_Q4_ROWS) * nb * DSE_Q4_TILE + 4 * (r % DSE_Q4_ROWS);
                /* row r's group g at srow[16 g] (model.h: 16 rows interleaved) */
                int64_t s0 = dse__q4_sidx(w->n_groups, r, 0);
                const float *srow = w->scale + s0;
                const uint8_t *zrow = w->zero + s0;
                const __m512i shift = _mm512_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4, 0, 0, 0, 0, 4, 4, 4, 4);
                const __m512i lo4 = _mm512_set1_epi32(0xf);
                for (int64_t b = 0; b < nb; b++) {
                        int64_t c = b * DSE_Q4_COLS, g = c / G;
                        __m512 s = _mm512_set1_ps(srow[DSE_Q4_ROWS * g]);
                        __m512 vz = _mm512_set1_ps((float)zrow[DSE_Q4_ROWS * g]);
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
                dse__kernels_avx2_dequant_row(w, r, out);
        }
}

void dse__kernels_avx512_matmul_xq(const struct dse_qmat *w, const struct dse_xq *xq, float *y, int64_t ldy,
                                   int64_t r0, int64_t r1) {
        if (w->dtype == DSE_DTYPE_Q4)
                matmul_xq_q4_t8_avx512(w, xq, y, ldy, r0, r1);
        else
                matmul_xq_q8_t8_avx512(w, xq, y, ldy, r0, r1);
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

/* The max, then e^(x - max) and its sum, then one reciprocal multiply (within an ulp of
 * the _ref twin's division). */
static void softmax_avx512(float *x, int64_t n) {
        __m512 mv = _mm512_set1_ps(-INFINITY);
        for (int64_t i = 0; i < n; i += 16)
                mv = _mm512_max_ps(mv, _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), mask16(n - i), x + i));
        __m512 max = _mm512_set1_ps(_mm512_reduce_max_ps(mv)), sum = _mm512_setzero_ps();
        for (int64_t i = 0; i < n; i += 16) {
                __mmask16 m = mask16(n - i);
                __m512 e = _mm512_maskz_mov_ps(m, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), max)));
                _mm512_mask_storeu_ps(x + i, m, e);
                sum = _mm512_add_ps(sum, e);
        }
        __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
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
        k->swiglu = swiglu_avx512;
}

void dse__kernels_fill_avx512_vnni(struct dse_kernels *k) {
        k->matmul_xq[DSE_DTYPE_Q8] = matmul_xq_q8_avx512;
        k->matmul_xq[DSE_DTYPE_Q4] = matmul_xq_q4_avx512;
}

void dse__kernels_fill_avx512_t8(struct dse_kernels *k) {
        k->matmul_xq[DSE_DTYPE_Q8] = matmul_xq_q8_t8_avx512;
        k->matmul_xq[DSE_DTYPE_Q4] = matmul_xq_q4_t8_avx512;
}
