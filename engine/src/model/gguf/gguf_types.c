/* ggml tensor types: block sizes and dequantisation. The arithmetic follows ggml's
 * reference dequantize_row_* (ggml-quants.c) operation for operation, in float, so the
 * values are the ones llama.cpp computes: a scale is formed first (d * sc) and then
 * multiplied by the integer, and the minimum subtracted last. It is compiled with
 * -ffp-contract=off (engine/CMakeLists.txt): a * b - c is never one fused operation. */
#include <string.h>

#include "gguf.h"

#define QK_K 256

struct type_info {
        uint32_t id;
        const char *name;
        int64_t block_elems;
        size_t block_bytes;
};

static const struct type_info types[] = {
        {DSE_GGML_F32, "F32", 1, 4},        {DSE_GGML_F16, "F16", 1, 2},     {DSE_GGML_BF16, "BF16", 1, 2},
        {DSE_GGML_Q4_0, "Q4_0", 32, 18},    {DSE_GGML_Q4_1, "Q4_1", 32, 20}, {DSE_GGML_Q5_0, "Q5_0", 32, 22},
        {DSE_GGML_Q5_1, "Q5_1", 32, 24},    {DSE_GGML_Q8_0, "Q8_0", 32, 34}, {DSE_GGML_Q2_K, "Q2_K", QK_K, 84},
        {DSE_GGML_Q3_K, "Q3_K", QK_K, 110}, {DSE_GGML_Q4_K, "Q4_K", QK_K, 144}, {DSE_GGML_Q5_K, "Q5_K", QK_K, 176},
        {DSE_GGML_Q6_K, "Q6_K", QK_K, 210},
};

static const struct type_info *info(uint32_t type) {
        for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
                if (types[i].id == type)
                        return &types[i];
        return NULL;
}

const char *dse__ggml_type_name(uint32_t type) {
        const struct type_info *t = info(type);
        return t ? t->name : NULL;
}

int64_t dse__ggml_block_elems(uint32_t type) {
        const struct type_info *t = info(type);
        return t ? t->block_elems : 0;
}

size_t dse__ggml_block_bytes(uint32_t type) {
        const struct type_info *t = info(type);
        return t ? t->block_bytes : 0;
}

static float h2f(const uint8_t *p) {
        return dse__f16_to_f32((uint16_t)(p[0] | p[1] << 8));
}

static void deq_q4_0(const uint8_t *b, float *y) {
        const float d = h2f(b);
        const uint8_t *qs = b + 2;
        for (int j = 0; j < 16; j++) {
                const int x0 = (qs[j] & 0x0F) - 8, x1 = (qs[j] >> 4) - 8;
                y[j] = x0 * d;
                y[j + 16] = x1 * d;
        }
}

static void deq_q4_1(const uint8_t *b, float *y) {
        const float d = h2f(b), m = h2f(b + 2);
        const uint8_t *qs = b + 4;
        for (int j = 0; j < 16; j++) {
                const int x0 = qs[j] & 0x0F, x1 = qs[j] >> 4;
                y[j] = x0 * d + m;
                y[j + 16] = x1 * d + m;
        }
}

static void deq_q5(const uint8_t *b, float *y, int has_min) {
        const float d = h2f(b), m = has_min ? h2f(b + 2) : 0.0f;
        const uint8_t *p = b + (has_min ? 4 : 2);
        uint32_t qh;
        memcpy(&qh, p, 4); /* little-endian host (the engine requires one) */
        const uint8_t *qs = p + 4;
        for (int j = 0; j < 16; j++) {
                const uint8_t xh0 = ((qh >> j) << 4) & 0x10, xh1 = (qh >> (j + 12)) & 0x10;
                if (has_min) {
                        const int x0 = (qs[j] & 0x0F) | xh0, x1 = (qs[j] >> 4) | xh1;
                        y[j] = x0 * d + m;
                        y[j + 16] = x1 * d + m;
                } else {
                        const int x0 = ((qs[j] & 0x0F) | xh0) - 16, x1 = ((qs[j] >> 4) | xh1) - 16;
                        y[j] = x0 * d;
                        y[j + 16] = x1 * d;
                }
        }
}

static void deq_q8_0(const uint8_t *b, float *y) {
        const float d = h2f(b);
        const int8_t *qs = (const int8_t *)(b + 2);
        for (int j = 0; j < 32; j++)
                y[j] = qs[j] * d;
}

static void deq_q2_k(const uint8_t *b, float *y) {
        const uint8_t *scales = b, *q = b + 16;
        const float d = h2f(b + 80), min = h2f(b + 82);
        int is = 0;
        for (int n = 0; n < QK_K; n += 128) {
                int shift = 0;
                for (int j = 0; j < 4; j++) {
                        for (int half = 0; half < 2; half++) {
                                const uint8_t sc = scales[is++];
                                const float dl = d * (sc & 0xF), ml = min * (sc >> 4);
                                for (int l = 0; l < 16; l++)
                                        *y++ = dl * (int8_t)((q[l + 16 * half] >> shift) & 3) - ml;
                        }
                        shift += 2;
                }
                q += 32;
        }
}

/* The 16 six-bit Q3_K scales from their 12 packed bytes. */
static void q3_k_scales(const uint8_t *b, int8_t *s) {
        for (int i = 0; i < 16; i++) {
                const int low = i < 8 ? b[i] & 15 : b[i - 8] >> 4, hi = (b[8 + i % 4] >> (2 * (i / 4))) & 3;
                s[i] = (int8_t)(low | hi << 4);
        }
}

static void deq_q3_k(const uint8_t *b, float *y) {
        const uint8_t *hm = b, *q = b + 32;
        const float d_all = h2f(b + 108);
        int8_t scales[16];
        q3_k_scales(b + 96, scales);
        int is = 0;
        uint8_t m = 1;
        for (int n = 0; n < QK_K; n += 128) {
                int shift = 0;
                for (int j = 0; j < 4; j++) {
                        for (int half = 0; half < 2; half++) {
                                const float dl = d_all * (scales[is++] - 32);
                                for (int l = 16 * half; l < 16 * half + 16; l++)
                                        *y++ = dl * ((int8_t)((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
                        }
                        shift += 2;
                        m <<= 1;
                }
                q += 32;
        }
}

static void scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
        if (j < 4) {
                *d = q[j] & 63;
                *m = q[j + 4] & 63;
        } else {
                *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
                *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
        }
}

/* Q4_K (qh NULL) and Q5_K. */
static void deq_q45_k(const uint8_t *b, float *y, int five) {
        const float d = h2f(b), min = h2f(b + 2);
        const uint8_t *scales = b + 4, *qh = five ? b + 16 : NULL, *ql = b + (five ? 48 : 16);
        int is = 0;
        uint8_t u1 = 1, u2 = 2;
        for (int j = 0; j < QK_K; j += 64) {
                uint8_t sc, m;
                scale_min_k4(is + 0, scales, &sc, &m);
                const float d1 = d * sc, m1 = min * m;
                scale_min_k4(is + 1, scales, &sc, &m);
                const float d2 = d * sc, m2 = min * m;
                for (int l = 0; l < 32; l++)
                        *y++ = d1 * ((ql[l] & 0xF) + (qh && (qh[l] & u1) ? 16 : 0)) - m1;
                for (int l = 0; l < 32; l++)
                        *y++ = d2 * ((ql[l] >> 4) + (qh && (qh[l] & u2) ? 16 : 0)) - m2;
                ql += 32;
                is += 2;
                u1 <<= 2;
                u2 <<= 2;
        }
}

static void deq_q6_k(const uint8_t *b, float *y) {
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        const float d = h2f(b + 208);
        for (int n = 0; n < QK_K; n += 128) {
                for (int l = 0; l < 32; l++) {
                        const int is = l / 16;
                        const int8_t q1 = (int8_t)((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                        const int8_t q2 = (int8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                        const int8_t q3 = (int8_t)((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                        const int8_t q4 = (int8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                        y[l + 0] = d * sc[is + 0] * q1;
                        y[l + 32] = d * sc[is + 2] * q2;
                        y[l + 64] = d * sc[is + 4] * q3;
                        y[l + 96] = d * sc[is + 6] * q4;
                }
                y += 128;
                ql += 64;
                qh += 32;
                sc += 8;
        }
}

void dse__ggml_dequantize(uint32_t type, const void *src, float *dst, int64_t n) {
        const uint8_t *s = src;
        const struct type_info *t = info(type);
        if (!t)
                return;
        if (type == DSE_GGML_F32) {
                memcpy(dst, src, (size_t)n * 4);
                return;
        }
        if (type == DSE_GGML_F16 || type == DSE_GGML_BF16) {
                for (int64_t i = 0; i < n; i++) {
                        uint16_t h = (uint16_t)(s[2 * i] | s[2 * i + 1] << 8);
                        dst[i] = type == DSE_GGML_F16 ? dse__f16_to_f32(h) : dse__bf16_to_f32(h);
                }
                return;
        }
        for (int64_t i = 0; i < n / t->block_elems; i++, s += t->block_bytes, dst += t->block_elems) {
                switch (type) {
                case DSE_GGML_Q4_0: deq_q4_0(s, dst); break;
                case DSE_GGML_Q4_1: deq_q4_1(s, dst); break;
                case DSE_GGML_Q5_0: deq_q5(s, dst, 0); break;
                case DSE_GGML_Q5_1: deq_q5(s, dst, 1); break;
                case DSE_GGML_Q8_0: deq_q8_0(s, dst); break;
                case DSE_GGML_Q2_K: deq_q2_k(s, dst); break;
                case DSE_GGML_Q3_K: deq_q3_k(s, dst); break;
                case DSE_GGML_Q4_K: deq_q45_k(s, dst, 0); break;
                case DSE_GGML_Q5_K: deq_q45_k(s, dst, 1); break;
                case DSE_GGML_Q6_K: deq_q6_k(s, dst); break;
                default: return;
                }
        }
}

int dse__ggml_native_dtype(uint32_t type) {
        switch (type) {
        case DSE_GGML_Q8_0:
        case DSE_GGML_Q5_0: return DSE_DTYPE_Q8;
        case DSE_GGML_Q4_0: return DSE_DTYPE_Q4;
        default: return -1;
        }
}

void dse__ggml_to_q8_rows(uint32_t type, const void *src, int64_t rows, int64_t cols, int8_t *data, float *scale) {
        const uint8_t *b = src;
        size_t bb = dse__ggml_block_bytes(type);
        for (int64_t i = 0; i < rows * (cols / 32); i++, b += bb) {
                scale[i] = h2f(b);
                int8_t *q = data + i * 32;
                if (type == DSE_GGML_Q8_0) {
                        memcpy(q, b + 2, 32);
                        continue;
                }
                uint32_t qh; /* Q5_0: y = d * (x - 16), so x - 16 is the int8 value */
                memcpy(&qh, b + 2, 4);
                for (int j = 0; j < 16; j++) {
                        q[j] = (int8_t)(((b[6 + j] & 0x0F) | (((qh >> j) << 4) & 0x10)) - 16);
                        q[j + 16] = (int8_t)(((b[6 + j] >> 4) | ((qh >> (j + 12)) & 0x10)) - 16);
                }
        }
}

void dse__ggml_to_q4_rows(const void *src, int64_t rows, int64_t cols, uint8_t *data, uint16_t *scale) {
        const uint8_t *b = src;
        int64_t ng = cols / 32;
        for (int64_t r = 0; r < rows; r++)
                for (int64_t g = 0; g < ng; g++, b += 18) {
                        scale[dse__q4_sidx(ng, r, g)] = (uint16_t)(b[0] | b[1] << 8); /* d, little-endian fp16 */
                        for (int j = 0; j < 16; j++) {
                                dse__q4_put(data, cols, r, 32 * g + j, b[2 + j] & 0x0F);
                                dse__q4_put(data, cols, r, 32 * g + 16 + j, b[2 + j] >> 4);
                        }
                }
}
