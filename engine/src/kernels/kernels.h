/* The kernel table: one function pointer per operation and weight format, filled per CPU
 * level (ggml's type traits, STYLE.md "Kernel dispatch").
 *
 *     struct dse_kernels k;
 *     dse_kernels_resolve(DSE_CPU_AVX2, &k);
 *     k.matvec[w.dtype](&w, x, y, r0, r1);    // y[r] = W[r,:] . x  for r in [r0, r1)
 *
 * ref.c holds the plain `_ref` twins: the specification, the fallback for every entry and
 * the test oracle. avx2.c overrides what it speeds up (avx2_kv.c its attention over stored KV
 * rows, avx2_q8_xq.c its Q8 matmul_xq, bit for bit the reference's), avx512.c what it speeds up beyond
 * that on every AVX-512 F+BW+VL CPU (avx512_kv.c the grouped attention over BF16 KV rows),
 * avx512_vnni.c matmul_xq where the CPU has AVX-512
 * VNNI (from 5 tokens its 8-token layout and Q8's 16-token one for whole blocks of 16,
 * DSE_KFEAT_T8), avx512_bf16.c matmul_bf16act where it has AVX512_BF16 (avx512_bf16_kv.c
 * the grouped attention scores on vdpbf16ps), and amx.c takes
 * matmul_xq from 8 (Q8) or 16 (Q4) tokens and matmul_bf16act from 16 where the CPU has
 * AMX and Linux grants the tile state (DSV_NO_AMX=1 leaves out AMX and Q8's 8- and 16-token
 * layouts, whose float order depends on the tokens per call; Q4's 8-token blocks keep the
 * 4-token order). The SIMD matmuls prepare activations on the stack: up to
 * ~350 KiB (AMX), ~100 KiB otherwise; call them on threads with ordinary (MiB) stacks. Kernels take a row range and never
 * know about threads; the caller splits rows over the pool. Accumulation is float32.
 *
 * Two activation precisions, chosen explicitly by the caller:
 *   matvec, matmul     float32 activations: exact up to float32 rounding (the fixtures'
 *                      strict tolerance row).
 *   matmul_xq          Q8/Q4 weights times activations quantized to int8 per 32-column
 *                      block (llama.cpp's Q8_0 activations), integer dot products: the
 *                      fast path for decode and prefill, with the activation rounding
 *                      error (relative ~1/254 per element; the fixtures' second row).
 *
 *     struct dse_xq xq;                               // storage sized once at setup
 *     dse__xq_init(&xq, mem, n_tok, w.cols);          // mem: dse__xq_bytes(n_tok, cols)
 *     k.quantize_xq(x, ldx, &xq);                     // once per matmul, one thread
 *     k.matmul_xq[w.dtype](&w, &xq, y, ldy, r0, r1);  // rows split over the pool
 */
#ifndef DSE_KERNELS_H
#define DSE_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#ifdef __F16C__
#include <immintrin.h>
#endif

#include "dse.h"
#include "model/model.h"

/* FP8 block size of DeepSeek-V3 checkpoints (weight_block_size [128, 128]). */
#define DSE_F8_BLOCK 128

/* How far ahead of the weight being read the streaming kernels prefetch into L2, in bytes
 * of the matrix (rows are contiguous, so this runs on into the following rows). A core's
 * hardware prefetchers alone keep too few lines in flight while the kernel computes, and
 * a short distance into L1 covers too little of the memory latency. */
#define DSE_PREFETCH_AHEAD 8192

/* Makes the vector just loaded opaque to the compiler, so a weight line used by several
 * instructions is loaded once: left alone, gcc folds the load into each user (the Q4
 * kernels' two nibble ANDs), two load-queue entries waiting on the same miss, and half as
 * many lines in flight. */
#define DSE_LOAD_ONCE(v) __asm__("" : "+v"(v))

/* A weight matrix W [rows, cols] (HF [out, in]) as the kernels see it. The views point
 * into the model mapping; nothing is owned.
 *   F32/F16/BF16: data holds rows*cols elements.
 *   F8_E4M3:      data holds rows*cols bytes; W[r,c] = e4m3(data[r,c]) *
 *                 scale[(r/128) * ceil(cols/128) + c/128].
 *   Q8:           data holds rows*cols int8; W[r,c] = q * scale[r * n_groups + c/group].
 *   Q4:           q = dse__q4_get(data, cols, r, c): 16 rows interleaved (model.h, "Q4
 *                 layout"); W[r,c] = (q - zero[i]) * scale[i], i = dse__q4_sidx(n_groups, r, c/group)
 *                 (scales and zero points 16 rows interleaved too, model.h); or, symmetric
 *                 with fp16 scales (scale_f16 set, scale and zero NULL: a GGUF Q4_0
 *                 block's own 18 bytes per 32 weights, where the float scale and zero
 *                 point take 21), W[r,c] = (q - 8) * f16(scale_f16[i]). dse__q4_scale and
 *                 dse__q4_zero read either form.
 *   perm (Q4, may be NULL): stored column j multiplies input x[perm[j]]; kernels read x in
 *                 stored order, so the caller gathers x first (dse__linear does). */
struct dse_qmat {
        enum dse_dtype dtype;
        int64_t rows, cols;
        int32_t group_size; /* Q8/Q4 columns per scale group */
        int64_t n_groups;   /* scale columns: ceil(cols/group), F8: ceil(cols/128) */
        const void *data;
        const float *scale;
        const uint8_t *zero;
        const uint16_t *scale_f16; /* Q4 symmetric: fp16 scales, zero point 8 */
        const int32_t *perm;
};

/* y[r] = sum_c W[r,c] * x[c] for r in [r0, r1); y is indexed by absolute row. */
typedef void (*dse_matvec_fn)(const struct dse_qmat *w, const float *x, float *y, int64_t r0, int64_t r1);

/* Y[t, r] = sum_c W[r,c] * X[t, c] for tokens t < n and rows r in [r0, r1): X is
 * (n, ldx), Y is (n, ldy), indexed by absolute row. One pass over the weight rows serves
 * all n tokens (a block of rows stays in L1 while every token uses it). */
typedef void (*dse_matmul_fn)(const struct dse_qmat *w, const float *x, int64_t ldx, int64_t n, float *y,
                              int64_t ldy, int64_t r0, int64_t r1);

/* ---- int8 activations (matmul_xq) ---- */

#define DSE_XQ_BLOCK 32

/* n tokens of cols activations, each 32-column block b of token t quantized
 * symmetrically: d = dse__xq_scale(max|x|), q = nearbyintf(x * (127 / max|x|)), in
 * [-127, 127] (an all-zero block has d = 0 and q = 0). The storage is the caller's. */
struct dse_xq {
        int64_t n, cols, n_blocks; /* n_blocks = ceil(cols / 32) */
        int8_t *q;                 /* (n, n_blocks * 32): columns past cols are 0 */
        float *d;                  /* (n, n_blocks) */
};

/* The scale of a block whose largest magnitude is amax: amax / 127 rounded to 11
 * significant bits (to nearest, ties to even). That is fp16's precision, the scale a ggml
 * Q8_0 block holds, so on the same weights the int8 products are llama.cpp's; the
 * exponent keeps float32's range, so a block of tiny values keeps its precision. */
static inline float dse__xq_scale(float amax) {
        float d = amax / 127.0f;
        uint32_t u;
        memcpy(&u, &d, sizeof u);
        u = (u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu;
        memcpy(&d, &u, sizeof d);
        return d;
}

/* Bytes of storage dse__xq_init needs for n tokens of cols activations. */
size_t dse__xq_bytes(int64_t n, int64_t cols);
/* Lays xq out over mem (dse__xq_bytes(n, cols) bytes, 64-byte aligned). */
void dse__xq_init(struct dse_xq *xq, void *mem, int64_t n, int64_t cols);

/* Y[t, r] = sum_c W[r,c] * d[t, c/32] * q[t, c] for t < xq->n, r in [r0, r1); Y is
 * (xq->n, ldy). The products of one 32-column block and one weight group are exact
 * integers; only their scaling and summation round. Requires xq->cols == w->cols. */
typedef void (*dse_matmul_xq_fn)(const struct dse_qmat *w, const struct dse_xq *xq, float *y, int64_t ldy,
                                 int64_t r0, int64_t r1);

/* A run of KV rows as the cache stores them (enum dse_kv_dtype): element d of row t is
 * at rows + t * ld (bytes) in the row's type: BF16 uint16, FP8 e4m3 bytes, INT8 int8;
 * FP8 and INT8 rows hold a float32 scale per group of `group` elements at scale_off
 * bytes from the row's start: x[t, d] = elem * scale[d / group]. */
struct dse_kv_rows {
        const uint8_t *rows;
        int64_t ld;
        int64_t scale_off;
        int32_t group;
};

/* attn_scores and attn_accum over stored rows, elements [off, off + len) of each (off
 * and len multiples of group for FP8 and INT8): scores[t] = scale * sum_d q[d] *
 * x[t, off + d]; out[d] += sum_t w[t] * x[t, off + d]. */
typedef void (*dse_attn_scores_kv_fn)(const float *q, const struct dse_kv_rows *k, int64_t off, int64_t n,
                                      int64_t len, float scale, float *scores);
typedef void (*dse_attn_accum_kv_fn)(const float *w, const struct dse_kv_rows *v, int64_t off, int64_t n,
                                     int64_t len, float *out);

/* The same for G queries that share the rows (the query heads of one GQA KV head): each
 * row read once for all of them. scores[g * lds + t] = scale * sum_d q[g * ldq + d] *
 * x[t, off + d]; out[g * ldo + d] += sum_t w[g * ldw + t] * x[t, off + d]. Query g's
 * result does not depend on G nor on the other queries. */
typedef void (*dse_attn_scores_group_fn)(const float *q, int64_t ldq, int G, const struct dse_kv_rows *k,
                                         int64_t off, int64_t n, int64_t len, float scale, float *scores,
                                         int64_t lds);
typedef void (*dse_attn_accum_group_fn)(const float *w, int64_t ldw, int G, const struct dse_kv_rows *v,
                                        int64_t off, int64_t n, int64_t len, float *out, int64_t ldo);

/* out[c] = W[r, c] for all c (in stored column order). */
typedef void (*dse_dequant_row_fn)(const struct dse_qmat *w, int64_t r, float *out);

struct dse_kernels {
        enum dse_cpu_level level;
        dse_matvec_fn matvec[DSE_DTYPE_COUNT]; /* F32 F16 BF16 F8_E4M3 Q8 Q4; NULL otherwise */
        dse_matmul_fn matmul[DSE_DTYPE_COUNT]; /* the same formats, n tokens at once */
        /* x (xq->n, ldx) -> xq, as struct dse_xq defines (bit-identical at every level). */
        void (*quantize_xq)(const float *x, int64_t ldx, struct dse_xq *xq);
        dse_matmul_xq_fn matmul_xq[DSE_DTYPE_COUNT]; /* Q8 Q4; NULL otherwise */
        dse_dequant_row_fn dequant_row;
        float (*dot)(const float *a, const float *b, int64_t n);
        /* y[i] += a * x[i] */
        void (*axpy)(float a, const float *x, float *y, int64_t n);
        /* y[c] += a[i] * W[r0 + i, c] for i = 0 .. n-1 in that order, every column c: what
         * dequant_row then axpy row by row give, bit for bit at each level, without the
         * row written out and read back (absorbed MLA's W_ukᵀ q_nope, every decode step). */
        void (*axpy_rows)(const struct dse_qmat *w, int64_t r0, int64_t n, const float *a, float *y);
        /* Attention over n cached rows of a run (rows ld floats apart, as a KV block holds
         * them): scores[t] = scale * sum_{d < len} q[d] * k[t * ld + d]. One call per run
         * of keys rather than a dot per key, so the sums of many keys are reduced
         * together. */
        void (*attn_scores)(const float *q, const float *k, int64_t ld, int64_t n, int64_t len, float scale,
                            float *scores);
        /* out[d] += sum_{t < n} w[t] * v[t * ld + d] for d < len: the softmax-weighted
         * rows, out kept in registers over the run instead of loaded and stored per row. */
        void (*attn_accum)(const float *w, const float *v, int64_t ld, int64_t n, int64_t len, float *out);
        /* The same over a cache of another element type (NULL for DSE_KV_F32, whose rows
         * attn_scores and attn_accum read as floats). */
        dse_attn_scores_kv_fn attn_scores_kv[DSE_KV_DTYPE_COUNT];
        dse_attn_accum_kv_fn attn_accum_kv[DSE_KV_DTYPE_COUNT];
        /* G queries over one run of BF16 rows (the default cache type): the K and V rows of
         * a KV head read and widened once for all the query heads that share it. The
         * other types take attn_*_kv (or attn_scores/attn_accum) once per query. */
        dse_attn_scores_group_fn attn_scores_group_bf16;
        dse_attn_accum_group_fn attn_accum_group_bf16;
        /* attn_scores_group_bf16 with each query element rounded to bf16 (nearest even,
         * dse__kern_f32_to_bf16), exact bf16 products, float32 accumulation: a relative
         * 2^-9 on the queries, as the cache's own rounding puts on the keys, which the
         * fixtures' BF16 KV row holds (a query rounds the same whatever chunk of the
         * split attention it meets, so the split and whole forms still agree). Filled
         * only where the CPU multiplies bf16 pairs natively (AVX-512 BF16 vdpbf16ps);
         * NULL elsewhere, where attn_scores_group_bf16 is the path. Twin:
         * dse__kernels_ref_attn_scores_group_bf16act. */
        dse_attn_scores_group_fn attn_scores_group_bf16act;
        /* out[i] = w[i] * x[i] / sqrt(mean(x^2) + eps); out may alias x. */
        void (*rmsnorm)(float *out, const float *x, const float *w, int64_t n, float eps);
        /* x[i] = exp(x[i] - max) / sum, in place (n >= 1). */
        void (*softmax)(float *x, int64_t n);
        /* softmax without its last pass: x[i] = exp(x[i] - max) in place (n >= 1), *ret_max
         * = max, *ret_sum = the sum of the new x[i]. The split attention keeps a chunk's
         * weights unnormalised and folds the division into the merge of the chunks. */
        void (*softmax_parts)(float *x, int64_t n, float *ret_max, float *ret_sum);
        /* gate[i] = silu(gate[i]) * up[i]: the SwiGLU gate, in place. */
        void (*swiglu)(float *gate, const float *up, int64_t n);
        /* BF16 weights times activations rounded to bf16 per element (nearest even,
         * dse__kern_f32_to_bf16), float32 accumulation; otherwise matmul's contract. The
         * products are exact, the activation rounding (relative 2^-9) puts it in the
         * fixtures' looser row, so the caller chooses it. Filled only where the CPU
         * multiplies bf16 pairs natively (AVX-512 BF16 vdpbf16ps); NULL elsewhere, where
         * matmul[DSE_DTYPE_BF16] is the path. Twin: dse__kernels_ref_matmul_bf16act. */
        dse_matmul_fn matmul_bf16act;
};

/* Fills k for level (capped at what the library was built with): the _ref entries first,
 * then the overrides of every level up to it. -EINVAL for an unknown level. */
int dse_kernels_resolve(enum dse_cpu_level level, struct dse_kernels *ret_k);

/* ref.c's kernels the SIMD files call for what they leave to the specification. */
/* The reference dequant_row, for SIMD versions that speed up only some formats. */
void dse__kernels_ref_dequant_row(const struct dse_qmat *w, int64_t r, float *out);
/* axpy_rows with each update one fused multiply-add, y[c] = fma(a[i], W[r, c], y[c]), as
 * the AVX2 and AVX-512 axpy make it: their axpy_rows for the formats they do not speed up. */
void dse__kernels_fma_axpy_rows(const struct dse_qmat *w, int64_t r0, int64_t n, const float *a, float *y);
/* The reference matmul_xq, for shapes the SIMD versions leave out (groups that are not
 * a multiple of 32 columns). */
void dse__kernels_ref_matmul_xq(const struct dse_qmat *w, const struct dse_xq *xq, float *y, int64_t ldy,
                                int64_t r0, int64_t r1);
/* The reference matmul_bf16act (BF16 weights only). */
void dse__kernels_ref_matmul_bf16act(const struct dse_qmat *w, const float *x, int64_t ldx, int64_t n, float *y,
                                     int64_t ldy, int64_t r0, int64_t r1);

/* The reference attn_scores_group_bf16act. */
void dse__kernels_ref_attn_scores_group_bf16act(const float *q, int64_t ldq, int G, const struct dse_kv_rows *k,
                                                int64_t off, int64_t n, int64_t len, float scale, float *scores,
                                                int64_t lds);

/* The reference attention over FP8 and INT8 KV rows, for scale groups the SIMD versions
 * leave out (not whole multiples of 8 elements). */
void dse__kernels_ref_attn_scores_fp8(const float *q, const struct dse_kv_rows *k, int64_t off, int64_t n,
                                      int64_t len, float scale, float *scores);
void dse__kernels_ref_attn_scores_int8(const float *q, const struct dse_kv_rows *k, int64_t off, int64_t n,
                                       int64_t len, float scale, float *scores);
void dse__kernels_ref_attn_accum_fp8(const float *w, const struct dse_kv_rows *v, int64_t off, int64_t n,
                                     int64_t len, float *out);
void dse__kernels_ref_attn_accum_int8(const float *w, const struct dse_kv_rows *v, int64_t off, int64_t n,
                                      int64_t len, float *out);

/* The fills, in resolve order (kernels.c): each gets the table as the fills before it left
 * it and overrides what it speeds up. A kernel that leaves some shapes or formats to the
 * entry it replaced keeps that entry at its fill (resolve order makes it the same one
 * every time), so the SIMD files never call each other. */
/* The scalar twins (ref.c). */
void dse__kernels_fill_ref(struct dse_kernels *k);
/* AVX2+FMA+F16C overrides (avx2.c); call only when the CPU has them. */
void dse__kernels_fill_avx2(struct dse_kernels *k);
/* AVX2 attention over BF16/FP8/INT8 KV rows (avx2_kv.c), with the AVX2 fill. */
void dse__kernels_fill_avx2_kv(struct dse_kernels *k);
/* AVX2 Q8 matmul_xq (avx2_q8_xq.c), with the AVX2 fill: bit for bit the reference's. */
void dse__kernels_fill_avx2_q8_xq(struct dse_kernels *k);
/* AVX-512 F+BW+VL overrides (avx512.c), applied over the AVX2 ones. */
void dse__kernels_fill_avx512(struct dse_kernels *k);
/* AVX-512 attention of a group of queries over BF16 KV rows (avx512_kv.c), with the
 * AVX-512 fill. */
void dse__kernels_fill_avx512_kv(struct dse_kernels *k);
/* AVX-512 VNNI overrides (vpdpbusd matmul_xq, avx512_vnni.c); only when the CPU also has
 * VNNI. */
void dse__kernels_fill_avx512_vnni(struct dse_kernels *k);
/* VNNI matmul_xq with the 8-token layout (DSE_KFEAT_T8) over the 4-token blocks, as
 * batch-variant as AMX: only where the table allows it. */
void dse__kernels_fill_avx512_t8(struct dse_kernels *k);
/* AVX-512 BF16 overrides (vdpbf16ps matmul_bf16act, avx512_bf16.c); only when the CPU
 * also has AVX512_BF16. */
void dse__kernels_fill_avx512_bf16(struct dse_kernels *k);
/* AVX-512 BF16 grouped attention scores over BF16 KV rows (vdpbf16ps
 * attn_scores_group_bf16act, avx512_bf16_kv.c), with the AVX-512 BF16 fill. */
void dse__kernels_fill_avx512_bf16_kv(struct dse_kernels *k);
/* AMX-BF16 matmul_bf16act for 16 tokens or more (amx.c), over the vdpbf16ps entry. */
void dse__kernels_fill_amx_bf16(struct dse_kernels *k);
/* AMX-INT8 matmul_xq for 8 tokens or more (amx.c), over the VNNI entries with the 8-token
 * layout; only when the CPU has AMX-TILE and AMX-INT8 and dse__kernels_amx_usable()
 * (Linux granted the tile state to the process; the first call asks). */
void dse__kernels_fill_amx(struct dse_kernels *k);
int dse__kernels_amx_usable(void);

/* Sub-features of the AVX-512 level that select further entries. */
#define DSE_KFEAT_VNNI 1u /* vpdpbusd matmul_xq */
#define DSE_KFEAT_AMX  2u /* AMX tiles for matmul_xq of many tokens (needs VNNI too; brings
                           * DSE_KFEAT_T8's entries, which it leaves fewer tokens to) */
#define DSE_KFEAT_BF16 4u /* vdpbf16ps: matmul_bf16act, attn_scores_group_bf16act */
#define DSE_KFEAT_T8   8u /* matmul_xq from 5 tokens in the 8-token layout, Q8's whole blocks of
                           * 16 in the 16-token one (needs VNNI): a Q8 token's sums then
                           * depend on the tokens per call, as with AMX */
/* dse_kernels_resolve with the sub-features given rather than detected, so the tests can
 * check the AVX-512 table with each of them. A feature the CPU lacks must not be given. */
int dse__kernels_resolve_with(enum dse_cpu_level level, unsigned feat, struct dse_kernels *ret_k);

/* Scalar conversions shared by ref.c and the tests. */
float dse__kern_f16_to_f32(uint16_t h);
float dse__kern_bf16_to_f32(uint16_t h);
/* float32 -> bfloat16, round to nearest even (NaN stays NaN). */
uint16_t dse__kern_f32_to_bf16(float f);
float dse__kern_f8e4m3_to_f32(uint8_t b);
/* float32 -> e4m3, round to nearest even, saturating at +-448 (no NaN is made from a
 * finite value); the inverse of dse__kern_f8e4m3_to_f32 on its 254 finite values. */
uint8_t dse__kern_f32_to_f8e4m3(float f);
/* 256-entry e4m3 decode table (built once, thread-safe). */
const float *dse__f8e4m3_table(void);

/* The zero point of a Q4 matrix stored with fp16 scales (GGUF Q4_0's q - 8). */
#define DSE_Q4_SYM_ZERO 8

/* Scale and zero point i (dse__q4_sidx) of a Q4 matrix, in either of its forms. The SIMD
 * files (built with F16C) widen an fp16 scale in one instruction, exact as the reference
 * converter: dequant_row and axpy_rows take one per row and group, every decoded token. */
static inline float dse__q4_scale(const struct dse_qmat *w, int64_t i) {
        if (!w->scale_f16)
                return w->scale[i];
#ifdef __F16C__
        return _cvtsh_ss(w->scale_f16[i]);
#else
        return dse__kern_f16_to_f32(w->scale_f16[i]);
#endif
}
static inline int dse__q4_zero(const struct dse_qmat *w, int64_t i) {
        return w->scale_f16 ? DSE_Q4_SYM_ZERO : w->zero[i];
}

#endif
