/* AMX int8 matmul_xq for many tokens (prefill, large batches). This file alone is
 * compiled with the AVX-512 flags plus -mamx-tile -mamx-int8; kernels.c installs it only
 * when the CPU reports AMX-TILE and AMX-INT8 and Linux grants the tile state
 * (arch_prctl ARCH_REQ_XCOMP_PERM), over the VNNI entries, and leaves to the entries it
 * replaced what the tiles do not take (few tokens, Q8's last rows % 16, groups that are
 * not a multiple of 32 columns).
 *
 * One tile product is 16 weight rows x 16 tokens x 32 columns, one activation block:
 *   A (16 x 32 bytes)  the weights as int8 (Q8 as stored; Q4 as q - z, decoded from
 *                      the interleaved layout once per super-block and chunk into a
 *                      staging buffer)
 *   B (8 x 64 bytes)   the block's q of 16 tokens in the VNNI layout, B[k/4][4t + k%4],
 *                      prepared once per token block and chunk for all rows
 *   C (16 x 16 int32)  exact integer sums, converted and scaled by s[r, g] * d[t, b] into
 *                      float accumulators (one register per weight row, a lane per token)
 * so the integer products are those of the reference, and only their scaling and
 * summation order differ. */
#include <errno.h>
#include <immintrin.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kernels/kernels.h"
#include "kernels/transpose16.h"

/* Fewer tokens than this go to the VNNI kernel: a tile product of 16 tokens wastes the
 * absent ones, and Q4 pays a decode into int8 per row that only many tokens amortise,
 * so Q4 needs twice as many tokens as Q8 before the tiles gain. */
#define AMX_MIN_TOKENS_Q8 8
#define AMX_MIN_TOKENS_Q4 16
#define AKC 2048          /* columns per chunk */
#define AKB (AKC / 32)    /* activation blocks per chunk */
#define ARS 128           /* rows per super-block: their staged chunk (256 KiB) stays in L2 */

/* Loops over the 16 rows of a tile must unroll so F stays in registers (GCC -O2 keeps
 * them rolled). */
#define UNROLL _Pragma("GCC unroll 16")

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA  18

struct tilecfg {
        uint8_t palette, start_row;
        uint8_t reserved[14];
        uint16_t colsb[16];
        uint8_t rows[16];
};

static int amx_ok;
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;

static void amx_request(void) {
        amx_ok = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

int dse__kernels_amx_usable(void) {
        pthread_once(&amx_once, amx_request);
        return amx_ok;
}

/* Two sets of tiles, so the product of one block runs while the previous one's sums are
 * scaled: C in tmm0/tmm1 (16 rows x 16 int32), A in tmm2/tmm3 (16 rows x 32 int8), B in
 * tmm4/tmm5 (8 x (16 tokens x 4 int8)). */
static void tiles_configure(void) {
        struct tilecfg c;
        memset(&c, 0, sizeof c);
        c.palette = 1;
        for (int i = 0; i < 2; i++) {
                c.rows[0 + i] = 16;
                c.colsb[0 + i] = 64;
                c.rows[2 + i] = 16;
                c.colsb[2 + i] = 32;
                c.rows[4 + i] = 8;
                c.colsb[4 + i] = 64;
        }
        _tile_loadconfig(&c);
}

/* The activations of tokens t0..t0+T-1 (T <= 16) over blocks [b0, b1) in the B layout,
 * and each block's d per token (0 for absent tokens). Per block the 16 tokens' 8 dwords
 * are an 8 x 16 transposition (each zmm holds tokens j and j + 8, two unpack stages and a
 * two-source permute), not 8 gathers: about a fifth of a prefill's AMX time went to the
 * gathers. Absent tokens repeat the last one: their d of 0 zeroes their lanes of F and
 * they are never stored. The A tiles of both formats hold their 32 columns in order. */
static void prep_tokens(const struct dse_xq *xq, int64_t t0, int T, int64_t b0, int64_t b1, int32_t (*bt)[8][16],
                        float (*dv)[16]) {
        int64_t stride = xq->n_blocks * DSE_XQ_BLOCK;
        __mmask16 m = (__mmask16)((1u << T) - 1);
        /* lane t: token t0 + t; dword offset of its d row */
        __m512i di = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                        _mm512_set1_epi32((int)xq->n_blocks));
        const __m512i lo = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13), hi = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
        const int8_t *q[16];
        for (int t = 0; t < 16; t++)
                q[t] = xq->q + (t0 + (t < T ? t : T - 1)) * stride;
        const float *d = xq->d + t0 * xq->n_blocks;
        for (int64_t b = b0; b < b1; b++) {
                __m512i r[8], s[8], u[8];
                UNROLL
                for (int j = 0; j < 8; j++) /* 128-bit lanes: token j dwords 0-3, 4-7, token j + 8 dwords 0-3, 4-7 */
                        r[j] = _mm512_inserti64x4(
                                _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(q[j] + b * DSE_XQ_BLOCK))),
                                _mm256_loadu_si256((const __m256i *)(q[j + 8] + b * DSE_XQ_BLOCK)), 1);
                UNROLL
                for (int j = 0; j < 4; j++) {
                        s[2 * j] = _mm512_unpacklo_epi32(r[2 * j], r[2 * j + 1]);
                        s[2 * j + 1] = _mm512_unpackhi_epi32(r[2 * j], r[2 * j + 1]);
                }
                UNROLL
                for (int h = 0; h < 2; h++) { /* u[4h + e]: dword e of each lane, tokens 4h..4h+3 (+ 8) */
                        u[4 * h + 0] = _mm512_unpacklo_epi64(s[4 * h], s[4 * h + 2]);
                        u[4 * h + 1] = _mm512_unpackhi_epi64(s[4 * h], s[4 * h + 2]);
                        u[4 * h + 2] = _mm512_unpacklo_epi64(s[4 * h + 1], s[4 * h + 3]);
                        u[4 * h + 3] = _mm512_unpackhi_epi64(s[4 * h + 1], s[4 * h + 3]);
                }
                UNROLL
                for (int e = 0; e < 4; e++) { /* dword e of lanes 0 and 2 is k = e, of lanes 1 and 3 k = 4 + e */
                        _mm512_store_si512(bt[b - b0][e], _mm512_permutex2var_epi64(u[e], lo, u[4 + e]));
                        _mm512_store_si512(bt[b - b0][4 + e], _mm512_permutex2var_epi64(u[e], hi, u[4 + e]));
                }
                _mm512_store_ps(dv[b - b0], _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, di, d + b, 4));
        }
}

/* Rows r..r+15 of Q8 weights over blocks [b0, b1) as int8, 32 bytes per block per row,
 * zero past the row's end: (AKB, 16, 32). */
static void stage_q8(const struct dse_qmat *w, int64_t r, int64_t b0, int64_t b1, int8_t (*a)[16][32]) {
        int64_t n = w->cols;
        for (int i = 0; i < 16; i++) {
                const int8_t *row = (const int8_t *)w->data + (r + i) * n;
                for (int64_t b = b0; b < b1; b++) {
                        int64_t c = b * 32;
                        __m256i v = _mm256_maskz_loadu_epi8(n - c >= 32 ? ~0u : (1u << (n - c)) - 1, row + c);
                        _mm256_store_si256((__m256i *)a[b - b0][i], v);
                }
        }
}

/* Row block R of Q4 weights (rows 16R..16R+15) over blocks [b0, b1) as int8 q - z, row
 * by row with the columns in order: (AKB, 16, 32). grp[j] is the weight group of block
 * b0 + j. A tile's chunk k is an int32 lane per row: its low nibbles are columns
 * 8k..8k+3 of the row, its high ones 8k+4..8k+7, so row L of A is dword L of [lo0 hi0
 * lo1 hi1 lo2 hi2 lo3 hi3], an 8 x 16 dword transposition (two unpack stages and one
 * two-source permute per pair of outputs). The zero point goes off per byte, as the
 * reference's q - z: the same integer products. Padded columns meet q = 0 (xq's
 * padding); padded rows (whose bytes and zero points may hold anything) get z = 0 and
 * are never stored. */
static void stage_q4(const struct dse_qmat *w, int64_t R, int64_t b0, int64_t b1, const int32_t *grp,
                     int8_t (*a)[16][32]) {
        int64_t nb = (w->cols + 31) / 32, rows = w->rows - 16 * R;
        const uint8_t *p = (const uint8_t *)w->data + R * nb * DSE_Q4_TILE;
        const uint8_t *zp = w->zero + R * w->n_groups * DSE_Q4_ROWS; /* group g: 16 bytes at zp + 16 g */
        const __mmask16 real = (__mmask16)(rows < 16 ? (1u << rows) - 1 : 0xffff);
        const __m512i lo4 = _mm512_set1_epi8(0x0f);
        const __m512i i0 = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11), i1 = _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15);
        __m512i z = _mm512_setzero_si512();
        int64_t zg = -1;
        for (int64_t b = b0; b < b1; b++) {
                if (grp[b - b0] != zg) { /* the 16 rows' zero points, each in the 4 bytes of its lane */
                        zg = grp[b - b0];
                        z = _mm512_maskz_mullo_epi32(
                                real, _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(zp + DSE_Q4_ROWS * zg))),
                                _mm512_set1_epi32(0x01010101));
                }
                const uint8_t *tile = p + b * DSE_Q4_TILE;
                __m512i t[8], u[8];
                UNROLL
                for (int k = 0; k < 4; k++) {
                        __m512i v = _mm512_loadu_si512(tile + 64 * k);
                        __m512i l = _mm512_sub_epi8(_mm512_and_si512(v, lo4), z);
                        __m512i h = _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(v, 4), lo4), z);
                        /* per 128-bit lane (rows 4m'..4m'+3): [l h] dwords of rows 0,1 and 2,3 */
                        t[2 * k] = _mm512_unpacklo_epi32(l, h);
                        t[2 * k + 1] = _mm512_unpackhi_epi32(l, h);
                }
                UNROLL
                for (int x = 0; x < 2; x++) { /* x = 0: columns 0-15 (chunks 0, 1), 1: 16-31 */
                        u[4 * x + 0] = _mm512_unpacklo_epi64(t[4 * x], t[4 * x + 2]);     /* rows 4m' */
                        u[4 * x + 1] = _mm512_unpackhi_epi64(t[4 * x], t[4 * x + 2]);     /* rows 4m' + 1 */
                        u[4 * x + 2] = _mm512_unpacklo_epi64(t[4 * x + 1], t[4 * x + 3]); /* rows 4m' + 2 */
                        u[4 * x + 3] = _mm512_unpackhi_epi64(t[4 * x + 1], t[4 * x + 3]); /* rows 4m' + 3 */
                }
                UNROLL
                for (int m = 0; m < 4; m++) { /* row m + 4m' = lane m' of u[m] then lane m' of u[m + 4] */
                        __m512i o0 = _mm512_permutex2var_epi64(u[m], i0, u[m + 4]); /* rows m, m + 4 */
                        __m512i o1 = _mm512_permutex2var_epi64(u[m], i1, u[m + 4]); /* rows m + 8, m + 12 */
                        _mm256_store_si256((__m256i *)a[b - b0][m], _mm512_castsi512_si256(o0));
                        _mm256_store_si256((__m256i *)a[b - b0][m + 4], _mm512_extracti64x4_epi64(o0, 1));
                        _mm256_store_si256((__m256i *)a[b - b0][m + 8], _mm512_castsi512_si256(o1));
                        _mm256_store_si256((__m256i *)a[b - b0][m + 12], _mm512_extracti64x4_epi64(o1, 1));
                }
        }
}

/* One 16-row block times one token block over the chunk's blocks: acc[i] (lanes =
 * tokens) += C * s[r+i, g] * d[t, b]; the chunk's sums are added to y (written when
 * first). */
/* A of block j: 16 rows of 32 bytes at a + j * a_step, rows a_stride bytes apart. */
struct amx_a {
        const int8_t *a;
        int64_t a_step, a_stride;
};

static inline __attribute__((always_inline)) void tile_product(struct amx_a A, const int32_t (*bt)[8][16], int64_t j,
                                                                const int c) {
        /* c selects the tile set: literal tile numbers, as the intrinsics require */
        if (c == 0) {
                _tile_zero(0);
                _tile_loadd(2, A.a + j * A.a_step, A.a_stride);
                _tile_loadd(4, bt[j], 64);
                _tile_dpbssd(0, 2, 4);
        } else {
                _tile_zero(1);
                _tile_loadd(3, A.a + j * A.a_step, A.a_stride);
                _tile_loadd(5, bt[j], 64);
                _tile_dpbssd(1, 3, 5);
        }
}

/* The scaling: per block, F[i] += C[i] * d (three instructions per row); at the end of
 * each weight group, out[i] += F[i] * s[r+i, g], so s costs one FMA per group, not one
 * multiply per block. Only rows r+i0..r+i1-1 are stored (a Q4 row block cut by the row
 * range). s[r+i, g] is sc[so[i] + gs g]: Q8's scales are row-major (gs 1), Q4's 16 rows
 * interleaved (gs 16, r a multiple of 16), its padded rows' scales stored too (any value:
 * those rows are never stored). */
static void tile_block(const struct dse_qmat *w, struct amx_a a, const int32_t (*bt)[8][16],
                       const float (*dv)[16], const int32_t *grp, int64_t nb, int64_t r, int T, float *y,
                       int64_t ldy, int first, int i0, int i1) {
        _Alignas(64) int32_t cbuf[16][16];
        _Alignas(64) float out[16][16];
        __m512 F[16];
        int q4 = w->dtype == DSE_DTYPE_Q4;
        const float *sc = w->scale + r * w->n_groups;
        int64_t so[16], gs = q4 ? DSE_Q4_ROWS : 1;
        UNROLL
        for (int i = 0; i < 16; i++) {
                F[i] = _mm512_setzero_ps();
                _mm512_store_ps(out[i], F[i]);
                so[i] = q4 ? i : i * w->n_groups;
        }
        tile_product(a, bt, 0, 0);
        for (int64_t j = 0; j < nb; j += 2) {
                /* block j is in set 0, j + 1 goes to set 1 before j's sums are read */
                if (j + 1 < nb)
                        tile_product(a, bt, j + 1, 1);
                for (int u = 0; u < 2 && j + u < nb; u++) {
                        if (u == 0)
                                _tile_stored(0, cbuf, 64);
                        else
                                _tile_stored(1, cbuf, 64);
                        if (u == 0 && j + 2 < nb)
                                tile_product(a, bt, j + 2, 0);
                        __m512 d = _mm512_load_ps(dv[j + u]);
                        UNROLL
                        for (int i = 0; i < 16; i++)
                                F[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(cbuf[i])), d, F[i]);
                        int64_t g = grp[j + u];
                        if (j + u + 1 == nb || grp[j + u + 1] != g) {
                                UNROLL
                                for (int i = 0; i < 16; i++) {
                                        _mm512_store_ps(out[i], _mm512_fmadd_ps(F[i], _mm512_set1_ps(sc[so[i] + gs * g]),
                                                                                _mm512_load_ps(out[i])));
                                        F[i] = _mm512_setzero_ps();
                                }
                        }
                }
        }
        /* out (rows x tokens) transposed to a vector of 16 rows per token, stored (or added)
         * under the mask of the rows in range */
        __m512 v[16];
        UNROLL
        for (int i = 0; i < 16; i++)
                v[i] = _mm512_load_ps(out[i]);
        transpose16(v);
        __mmask16 mask = (__mmask16)(((1u << i1) - 1) & ~((1u << i0) - 1));
        for (int t = 0; t < T; t++) {
                float *yt = y + t * ldy + r;
                _mm512_mask_storeu_ps(yt, mask, first ? v[t] : _mm512_add_ps(v[t], _mm512_maskz_loadu_ps(mask, yt)));
        }
}

/* The table's Q8 and Q4 matmul_xq before dse__kernels_fill_amx replaced them (the VNNI
 * entries with the 8-token layout, by resolve order: every fill stores the same ones), for
 * what the AMX kernel leaves out. */
static _Atomic dse_matmul_xq_fn below_xq[DSE_DTYPE_COUNT];

/* Q8 takes 16-row blocks from r0 and leaves the last (r1 - r0) % 16 rows to the VNNI
 * kernel; Q4 takes every row block of the layout that [r0, r1) touches, whole, and stores
 * the rows in range, so a row's sums do not depend on where the range starts. Q4 with
 * fp16 scales goes to the VNNI kernel whole: no AMX host here to test its staging. */
static void matmul_xq_amx(const struct dse_qmat *w, const struct dse_xq *xq, float *y, int64_t ldy, int64_t r0,
                          int64_t r1) {
        int q4 = w->dtype == DSE_DTYPE_Q4;
        int64_t rb0 = q4 ? r0 / 16 * 16 : r0, rows16 = q4 ? (r1 + 15) / 16 * 16 : r0 + (r1 - r0) / 16 * 16;
        if (xq->n < (q4 ? AMX_MIN_TOKENS_Q4 : AMX_MIN_TOKENS_Q8) || w->group_size % DSE_XQ_BLOCK || rows16 <= rb0 ||
            w->scale_f16) {
                atomic_load_explicit(&below_xq[w->dtype], memory_order_relaxed)(w, xq, y, ldy, r0, r1);
                return;
        }
        /* about 300 KiB of stack: the staged weights of a super-block's chunk (Q4, or Q8
         * rows whose blocks are not all whole; other Q8 tiles load straight from the
         * mapping), a token block's B tiles and scales */
        _Alignas(64) int8_t a[ARS / 16][AKB][16][32];
        _Alignas(64) int32_t bt[AKB][8][16];
        _Alignas(64) float dv[AKB][16];
        int32_t grp[AKB]; /* the weight group of each block of the chunk: the hot loops divide by nothing */
        int direct = w->dtype == DSE_DTYPE_Q8 && w->cols % 32 == 0;
        tiles_configure();
        for (int64_t rs = rb0; rs < rows16; rs += ARS) {
                int64_t re = rs + ARS < rows16 ? rs + ARS : rows16;
                for (int64_t b0 = 0; b0 < xq->n_blocks; b0 += AKB) {
                        int64_t b1 = b0 + AKB < xq->n_blocks ? b0 + AKB : xq->n_blocks;
                        for (int64_t b = b0; b < b1; b++)
                                grp[b - b0] = (int32_t)(b * 32 / w->group_size);
                        for (int64_t r = rs; r < re && !direct; r += 16)
                                if (q4)
                                        stage_q4(w, r / 16, b0, b1, grp, a[(r - rs) / 16]);
                                else
                                        stage_q8(w, r, b0, b1, a[(r - rs) / 16]);
                        for (int64_t t0 = 0; t0 < xq->n; t0 += 16) {
                                int T = xq->n - t0 < 16 ? (int)(xq->n - t0) : 16;
                                prep_tokens(xq, t0, T, b0, b1, bt, dv);
                                for (int64_t r = rs; r < re; r += 16) {
                                        struct amx_a A = {&a[(r - rs) / 16][0][0][0], 16 * 32, 32};
                                        if (direct)
                                                A = (struct amx_a){(const int8_t *)w->data + r * w->cols + b0 * 32, 32,
                                                                   w->cols};
                                        int i0 = r < r0 ? (int)(r0 - r) : 0, i1 = r1 - r < 16 ? (int)(r1 - r) : 16;
                                        tile_block(w, A, (const int32_t(*)[8][16])bt, (const float(*)[16])dv, grp,
                                                   b1 - b0, r, T, y + t0 * ldy, ldy, b0 == 0, i0, i1);
                                }
                        }
                }
        }
        _tile_release();
        if (rows16 < r1) /* Q8 only */
                atomic_load_explicit(&below_xq[w->dtype], memory_order_relaxed)(w, xq, y, ldy, rows16, r1);
}

void dse__kernels_fill_amx(struct dse_kernels *k) {
        atomic_store_explicit(&below_xq[DSE_DTYPE_Q8], k->matmul_xq[DSE_DTYPE_Q8], memory_order_relaxed);
        atomic_store_explicit(&below_xq[DSE_DTYPE_Q4], k->matmul_xq[DSE_DTYPE_Q4], memory_order_relaxed);
        k->matmul_xq[DSE_DTYPE_Q8] = matmul_xq_amx;
        k->matmul_xq[DSE_DTYPE_Q4] = matmul_xq_amx;
}

/* ---- AMX-BF16: matmul_bf16act for many tokens ------------------------------------------ */

#define BKP (AKC / 2) /* bf16 pairs per chunk */

/* C in tmm0/tmm1 (two 16-row blocks x 16 tokens, float32), A in tmm2/tmm3 (16 rows x 32
 * bf16 straight from the mapping), B in tmm4 (16 pairs x 16 tokens x 2 bf16). C sums a
 * whole chunk in the tile: bf16 products need no per-block scaling. */
static void tiles_configure_bf16(void) {
        struct tilecfg c;
        memset(&c, 0, sizeof c);
        c.palette = 1;
        for (int t = 0; t < 5; t++) {
                c.rows[t] = 16;
                c.colsb[t] = 64;
        }
        _tile_loadconfig(&c);
}

/* Tokens t0..t0+T-1 (the rest zero) over columns [c0, c1), rounded to bf16 (nearest
 * even, as dse__kern_f32_to_bf16) in the B layout: bp[k][p][t] = pair p of block k. */
static void prep_bf16(const float *x, int64_t ldx, int64_t t0, int T, int64_t c0, int64_t c1, uint32_t (*bp)[16][16]) {
        _Alignas(64) uint32_t row[BKP];
        int64_t nk = (c1 - c0 + 31) / 32;
        memset(bp, 0, sizeof(uint32_t) * 256 * (size_t)nk);
        for (int t = 0; t < T; t++) {
                const float *xt = x + (t0 + t) * ldx;
                for (int64_t c = c0; c < c1; c += 32) {
                        __mmask16 m0 = c1 - c >= 16 ? 0xffff : (__mmask16)((1u << (c1 - c)) - 1);
                        __mmask16 m1 = c1 - c >= 32 ? 0xffff : c1 - c <= 16 ? 0 : (__mmask16)((1u << (c1 - c - 16)) - 1);
                        __m512bh v = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(m1, xt + c + 16), _mm512_maskz_loadu_ps(m0, xt + c));
                        _mm512_store_si512(row + (c - c0) / 2, (__m512i)v);
                }
                for (int64_t k = 0; k < nk; k++)
                        UNROLL
                        for (int p = 0; p < 16; p++)
                                bp[k][p][t] = row[k * 16 + p];
        }
}

/* The table's matmul_bf16act before dse__kernels_fill_amx_bf16 replaced it (the
 * vdpbf16ps entry, by resolve order), for the shapes the tiles leave out. */
static _Atomic dse_matmul_fn below_bf16act;

static void matmul_bf16act_amx(const struct dse_qmat *w, const float *x, int64_t ldx, int64_t n, float *y,
                               int64_t ldy, int64_t r0, int64_t r1) {
        int64_t rows16 = r0 + (r1 - r0) / 16 * 16, cols = w->cols;
        if (n < 16 || rows16 == r0 || cols % 32) {
                atomic_load_explicit(&below_bf16act, memory_order_relaxed)(w, x, ldx, n, y, ldy, r0, r1);
                return;
        }
        _Alignas(64) uint32_t bp[AKC / 32][16][16];
        _Alignas(64) float cbuf[2][16][16];
        const uint16_t *W = w->data;
        tiles_configure_bf16();
        for (int64_t rs = r0; rs < rows16; rs += ARS) {
                int64_t re = rs + ARS < rows16 ? rs + ARS : rows16;
                for (int64_t t0 = 0; t0 < n; t0 += 16) {
                        int T = n - t0 < 16 ? (int)(n - t0) : 16;
                        for (int64_t c0 = 0; c0 < cols; c0 += AKC) {
                                int64_t c1 = c0 + AKC < cols ? c0 + AKC : cols, nk = (c1 - c0) / 32;
                                prep_bf16(x, ldx, t0, T, c0, c1, bp);
                                for (int64_t r = rs; r < re; r += 32) {
                                        int two = r + 32 <= re;
                                        const uint16_t *a0 = W + r * cols + c0, *a1 = a0 + 16 * cols;
                                        _tile_zero(0);
                                        if (two)
                                                _tile_zero(1);
                                        for (int64_t k = 0; k < nk; k++) {
                                                _tile_loadd(4, bp[k], 64);
                                                _tile_loadd(2, a0 + k * 32, cols * 2);
                                                _tile_dpbf16ps(0, 2, 4);
                                                if (two) {
                                                        _tile_loadd(3, a1 + k * 32, cols * 2);
                                                        _tile_dpbf16ps(1, 3, 4);
                                                }
                                        }
                                        _tile_stored(0, cbuf[0], 64);
                                        if (two)
                                                _tile_stored(1, cbuf[1], 64);
                                        for (int h = 0; h < 1 + two; h++)
                                                for (int t = 0; t < T; t++)
                                                        for (int i = 0; i < 16; i++) {
                                                                float *o = y + (t0 + t) * ldy + r + 16 * h + i;
                                                                *o = c0 == 0 ? cbuf[h][i][t] : *o + cbuf[h][i][t];
                                                        }
                                }
                        }
                }
        }
        _tile_release();
        if (rows16 < r1)
                atomic_load_explicit(&below_bf16act, memory_order_relaxed)(w, x, ldx, n, y, ldy, rows16, r1);
}

void dse__kernels_fill_amx_bf16(struct dse_kernels *k) {
        atomic_store_explicit(&below_bf16act, k->matmul_bf16act, memory_order_relaxed);
        k->matmul_bf16act = matmul_bf16act_amx;
}
