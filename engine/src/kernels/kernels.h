/* The kernel table: one function pointer per operation and weight format, filled per CPU
 * level (ggml's type traits, STYLE.md "Kernel dispatch").
 *
 *     struct dse_kernels k;
 *     dse_kernels_resolve(DSE_CPU_AVX2, &k);
 *     k.matvec[w.dtype](&w, x, y, r0, r1);    // y[r] = W[r,:] . x  for r in [r0, r1)
 *
 * ref.c holds the plain `_ref` twins: the specification, the fallback for every entry and
 * the test oracle. avx2.c overrides what it speeds up. Kernels take a row range and never
 * know about threads; the caller splits rows over the pool. All activations and all
 * accumulation are float32.
 */
#ifndef DSE_KERNELS_H
#define DSE_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "dse.h"
#include "model/model.h"

/* FP8 block size of DeepSeek-V3 checkpoints (weight_block_size [128, 128]). */
#define DSE_F8_BLOCK 128

/* A weight matrix W [rows, cols] (HF [out, in]) as the kernels see it. The views point
 * into the model mapping; nothing is owned.
 *   F32/F16/BF16: data holds rows*cols elements.
 *   F8_E4M3:      data holds rows*cols bytes; W[r,c] = e4m3(data[r,c]) *
 *                 scale[(r/128) * ceil(cols/128) + c/128].
 *   Q8:           data holds rows*cols int8; W[r,c] = q * scale[r * n_groups + c/group].
 *   Q4:           row r occupies (cols+1)/2 bytes, low nibble = even column;
 *                 W[r,c] = (q - zero[r*n_groups + c/group]) * scale[r*n_groups + c/group].
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
        const int32_t *perm;
};

/* y[r] = sum_c W[r,c] * x[c] for r in [r0, r1); y is indexed by absolute row. */
typedef void (*dse_matvec_fn)(const struct dse_qmat *w, const float *x, float *y, int64_t r0, int64_t r1);

struct dse_kernels {
        enum dse_cpu_level level;
        dse_matvec_fn matvec[DSE_DTYPE_COUNT]; /* F32 F16 BF16 F8_E4M3 Q8 Q4; NULL otherwise */
        /* out[c] = W[r, c] for all c (in stored column order). */
        void (*dequant_row)(const struct dse_qmat *w, int64_t r, float *out);
        float (*dot)(const float *a, const float *b, int64_t n);
        /* y[i] += a * x[i] */
        void (*axpy)(float a, const float *x, float *y, int64_t n);
        /* out[i] = w[i] * x[i] / sqrt(mean(x^2) + eps); out may alias x. */
        void (*rmsnorm)(float *out, const float *x, const float *w, int64_t n, float eps);
        /* x[i] = exp(x[i] - max) / sum, in place (n >= 1). */
        void (*softmax)(float *x, int64_t n);
        /* gate[i] = silu(gate[i]) * up[i]: the SwiGLU gate, in place. */
        void (*swiglu)(float *gate, const float *up, int64_t n);
};

/* Fills k for level (capped at what the library was built with): the _ref entries first,
 * then the overrides of every level up to it. -EINVAL for an unknown level. */
int dse_kernels_resolve(enum dse_cpu_level level, struct dse_kernels *ret_k);

/* The scalar twins (ref.c). */
void dse__kernels_fill_ref(struct dse_kernels *k);
/* The reference dequant_row, for SIMD versions that speed up only some formats. */
void dse__kernels_ref_dequant_row(const struct dse_qmat *w, int64_t r, float *out);
/* AVX2+FMA+F16C overrides (avx2.c); call only when the CPU has them. */
void dse__kernels_fill_avx2(struct dse_kernels *k);

/* Scalar conversions shared by ref.c and the tests. */
float dse__kern_f16_to_f32(uint16_t h);
float dse__kern_bf16_to_f32(uint16_t h);
float dse__kern_f8e4m3_to_f32(uint8_t b);
/* 256-entry e4m3 decode table (built once, thread-safe). */
const float *dse__f8e4m3_table(void);

#endif
