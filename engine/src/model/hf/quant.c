/* Quantized weights into the native Q4/Q8 layouts (FORMAT.md, "Quantized tensors"):
 * lossless repacking of AWQ (GEMM), GPTQ (v1) and compressed-tensors int4 checkpoints,
 * and group-wise quantisation of float weights for --quant-format int8/int4. Formulas:
 * the fixtures README, "Quantized formats", AutoAWQ / AutoGPTQ's dequantisation code and
 * compressed-tensors' pack_quantized compressor. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../format.h"

/* AWQ GEMM packs eight output columns per int32 in this nibble order. */
static const int awq_order[8] = {0, 2, 4, 6, 1, 3, 5, 7};

/* A Q4 matrix's scales and zero points, padding rows included, to 0 (model.h). */
static void clear_q4_scales(int64_t rows, int64_t ng, float *scale, uint8_t *zero) {
        size_t n = (size_t)(dse__scale_rows(DSE_DTYPE_Q4, rows) * ng);
        memset(scale, 0, n * sizeof *scale);
        memset(zero, 0, n);
}

int dse__awq_repack(const int32_t *qweight, const int32_t *qzeros, const uint16_t *scales, int64_t in, int64_t out,
                    int32_t group, uint8_t *data, float *scale, uint8_t *zero) {
        if (in <= 0 || out <= 0 || out % 8 || group <= 0)
                return -EINVAL;
        int64_t packed = out / 8, ng = (in + group - 1) / group;
        memset(data, 0, (size_t)dse__q4_bytes(out, in));
        clear_q4_scales(out, ng, scale, zero);
        for (int64_t i = 0; i < in; i++)
                for (int64_t c = 0; c < packed; c++) {
                        uint32_t w = (uint32_t)qweight[i * packed + c];
                        for (int k = 0; k < 8; k++) {
                                int64_t o = 8 * c + awq_order[k];
                                dse__q4_put(data, in, o, i, (w >> (4 * k)) & 0xf);
                        }
                }
        for (int64_t g = 0; g < ng; g++)
                for (int64_t c = 0; c < packed; c++) {
                        uint32_t z = (uint32_t)qzeros[g * packed + c];
                        for (int k = 0; k < 8; k++) {
                                int64_t o = 8 * c + awq_order[k];
                                zero[dse__q4_sidx(ng, o, g)] = (uint8_t)((z >> (4 * k)) & 0xf);
                                scale[dse__q4_sidx(ng, o, g)] = dse__f16_to_f32(scales[g * out + o]);
                        }
                }
        return 0;
}

int dse__group_perm(const int32_t *g_idx, int64_t in, int32_t group, int32_t *perm) {
        int64_t ng = (in + group - 1) / group;
        /* inputs stably sorted by group (a counting sort keeps equal keys in order) */
        int64_t *start = calloc((size_t)ng + 1, sizeof *start);
        if (!start)
                return -ENOMEM;
        for (int64_t i = 0; i < in; i++) {
                int32_t g = g_idx ? g_idx[i] : (int32_t)(i / group);
                if (g < 0 || g >= ng) {
                        free(start);
                        return -EOPNOTSUPP;
                }
                start[g + 1]++;
        }
        for (int64_t g = 0; g < ng; g++) {
                int64_t want = g < ng - 1 ? group : in - group * (ng - 1);
                if (start[g + 1] != want) { /* every group must fill exactly its stored columns */
                        free(start);
                        return -EOPNOTSUPP;
                }
                start[g + 1] += start[g];
        }
        int identity = 1;
        for (int64_t i = 0; i < in; i++) {
                int32_t g = g_idx ? g_idx[i] : (int32_t)(i / group);
                int64_t j = start[g]++;
                perm[j] = (int32_t)i;
                identity &= j == i;
        }
        free(start);
        return !identity;
}

int dse__gptq_repack(const int32_t *qweight, const int32_t *qzeros, const uint16_t *scales, const int32_t *g_idx,
                     int64_t in, int64_t out, int32_t group, uint8_t *data, float *scale, uint8_t *zero,
                     int32_t *perm) {
        if (in <= 0 || out <= 0 || group <= 0)
                return -EINVAL;
        int64_t ng = (in + group - 1) / group, zpacked = (out + 7) / 8;
        int permuted = dse__group_perm(g_idx, in, group, perm);
        if (permuted < 0)
                return permuted;
        memset(data, 0, (size_t)dse__q4_bytes(out, in));
        clear_q4_scales(out, ng, scale, zero);
        for (int64_t j = 0; j < in; j++) {
                int64_t i = perm[j];
                const int32_t *qrow = qweight + (i / 8) * out;
                int shift = 4 * (int)(i % 8);
                for (int64_t o = 0; o < out; o++)
                        dse__q4_put(data, in, o, j, ((uint32_t)qrow[o] >> shift) & 0xf);
        }
        for (int64_t g = 0; g < ng; g++)
                for (int64_t o = 0; o < out; o++) {
                        uint32_t z = (uint32_t)qzeros[g * zpacked + o / 8];
                        zero[dse__q4_sidx(ng, o, g)] = (uint8_t)(((z >> (4 * (o % 8))) & 0xf) + 1); /* v1: zero - 1 */
                        scale[dse__q4_sidx(ng, o, g)] = dse__f16_to_f32(scales[g * out + o]);
                }
        return permuted;
}

void dse__ct_unpack4(const int32_t *packed, int64_t rows, int64_t cols, int8_t *q) {
        int64_t words = (cols + 7) / 8;
        for (int64_t r = 0; r < rows; r++)
                for (int64_t k = 0; k < cols; k++) {
                        uint32_t w = (uint32_t)packed[r * words + k / 8];
                        q[r * cols + k] = (int8_t)((int)((w >> (4 * (k % 8))) & 0xf) - 8);
                }
}

void dse__int_to_q4(const int8_t *q, const int8_t *zp, const float *scale, const int32_t *perm, int64_t out,
                    int64_t in, int32_t group, uint8_t *data, float *ret_scale, uint8_t *zero) {
        int64_t ng = (in + group - 1) / group;
        memset(data, 0, (size_t)dse__q4_bytes(out, in));
        clear_q4_scales(out, ng, ret_scale, zero);
        for (int64_t o = 0; o < out; o++) {
                for (int64_t j = 0; j < in; j++)
                        dse__q4_put(data, in, o, j, (unsigned)(q[o * in + (perm ? perm[j] : j)] + 8));
                for (int64_t g = 0; g < ng; g++) {
                        zero[dse__q4_sidx(ng, o, g)] = (uint8_t)((zp ? zp[o * ng + g] : 0) + 8);
                        ret_scale[dse__q4_sidx(ng, o, g)] = scale[o * ng + g];
                }
        }
}

void dse__quantize_q8_rows(const float *x, int64_t rows, int64_t cols, int32_t group, int8_t *data, float *scale) {
        int64_t ng = (cols + group - 1) / group;
        for (int64_t r = 0; r < rows; r++)
                for (int64_t g = 0; g < ng; g++) {
                        int64_t c0 = g * group, c1 = c0 + group < cols ? c0 + group : cols;
                        float amax = 0;
                        for (int64_t c = c0; c < c1; c++)
                                amax = fmaxf(amax, fabsf(x[r * cols + c]));
                        float s = amax / 127.0f, inv = s > 0 ? 1.0f / s : 0;
                        scale[r * ng + g] = s;
                        for (int64_t c = c0; c < c1; c++) {
                                float q = roundf(x[r * cols + c] * inv);
                                data[r * cols + c] = (int8_t)(q > 127 ? 127 : q < -127 ? -127 : q);
                        }
                }
}

void dse__quantize_q4_rows(const float *x, int64_t rows, int64_t cols, int32_t group, uint8_t *data, float *scale,
                           uint8_t *zero) {
        int64_t ng = (cols + group - 1) / group;
        memset(data, 0, (size_t)dse__q4_bytes(rows, cols));
        clear_q4_scales(rows, ng, scale, zero);
        for (int64_t r = 0; r < rows; r++)
                for (int64_t g = 0; g < ng; g++) {
                        int64_t c0 = g * group, c1 = c0 + group < cols ? c0 + group : cols;
                        float mn = 0, mx = 0; /* the range includes 0, so 0 is exact */
                        for (int64_t c = c0; c < c1; c++) {
                                mn = fminf(mn, x[r * cols + c]);
                                mx = fmaxf(mx, x[r * cols + c]);
                        }
                        float s = (mx - mn) / 15.0f, inv = s > 0 ? 1.0f / s : 0;
                        float z = s > 0 ? roundf(-mn * inv) : 0;
                        z = z < 0 ? 0 : z > 15 ? 15 : z;
                        scale[dse__q4_sidx(ng, r, g)] = s;
                        zero[dse__q4_sidx(ng, r, g)] = (uint8_t)z;
                        for (int64_t c = c0; c < c1; c++) {
                                float q = roundf(x[r * cols + c] * inv) + z;
                                dse__q4_put(data, cols, r, c, (unsigned)(q < 0 ? 0 : q > 15 ? 15 : q));
                        }
                }
}
