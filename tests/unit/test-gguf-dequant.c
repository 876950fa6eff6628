/* GGUF dequantisation: the engine's block-wise dequantiser (gguf_types.c) against the
 * per-element formulas of the GGUF block layouts (tests/gguf/gguf-ref.c), bit for bit,
 * on random blocks of every supported type (random bytes, with the f16 scales drawn from
 * finite values so that every element is a number). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf-ref.h"
#include "gguf_writer.h"
#include "kernels/kernels.h"
#include "model/gguf/gguf.h"
#include "t.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint32_t next(void) { return (uint32_t)(t_xorshift64(&rng) >> 32); }

/* byte offsets of the f16 fields of each block type */
static void set_scales(uint32_t type, uint8_t *b) {
        static const struct {
                uint32_t type;
                int off[2];
        } f16s[] = {{2, {0, -1}},  {3, {0, 2}},  {6, {0, -1}},   {7, {0, 2}},    {8, {0, -1}},
                    {10, {80, 82}}, {11, {108, -1}}, {12, {0, 2}}, {13, {0, 2}}, {14, {208, -1}}};
        for (size_t i = 0; i < sizeof f16s / sizeof f16s[0]; i++)
                if (f16s[i].type == type)
                        for (int k = 0; k < 2; k++)
                                if (f16s[i].off[k] >= 0) {
                                        float v = ((float)(next() % 2000) - 1000.0f) / 997.0f * ldexpf(1, (int)(next() % 20) - 14);
                                        uint16_t h = gguf_f32_to_f16(v);
                                        b[f16s[i].off[k]] = (uint8_t)h;
                                        b[f16s[i].off[k] + 1] = (uint8_t)(h >> 8);
                                }
}

TEST(every_type_matches_the_reference_formulas) {
        static const uint32_t types[] = {0, 1, 30, 2, 3, 6, 7, 8, 10, 11, 12, 13, 14};
        for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
                uint32_t type = types[ti];
                int64_t be = dse__ggml_block_elems(type);
                size_t bb = dse__ggml_block_bytes(type);
                ASSERT_TRUE(be > 0 && bb > 0);
                int nblocks = be == 1 ? 4096 : 200;
                int64_t n = be * nblocks;
                uint8_t *data = malloc(bb * (size_t)nblocks);
                float *got = malloc((size_t)n * sizeof *got);
                for (size_t i = 0; i < bb * (size_t)nblocks; i++)
                        data[i] = (uint8_t)next();
                if (type == 0) /* finite floats */
                        for (int64_t i = 0; i < n; i++) {
                                float v = ((float)(int32_t)next()) * 1e-6f;
                                memcpy(data + 4 * i, &v, 4);
                        }
                for (int k = 0; be > 1 && k < nblocks; k++)
                        set_scales(type, data + (size_t)k * bb);
                dse__ggml_dequantize(type, data, got, n);
                size_t bad = 0;
                for (int64_t i = 0; i < n; i++) {
                        float want = gguf_ref_value(type, data + (size_t)(i / be) * bb, (int)(i % be));
                        if (memcmp(&want, &got[i], 4) != 0 && !(isnan(want) && isnan(got[i]))) {
                                if (!bad)
                                        fprintf(stderr, "  %s element %lld: got %.9g want %.9g\n",
                                                dse__ggml_type_name(type), (long long)i, got[i], want);
                                bad++;
                        }
                }
                free(data);
                free(got);
                if (bad)
                        T_FAIL("%s: %zu of %lld values differ from ggml's formulas", dse__ggml_type_name(type), bad,
                               (long long)n);
        }
}

/* ggml's reference quantizers, then dequantisation: Q8_0 of values already on the grid
 * is exact, and Q4_0 keeps every value within half a step. */
TEST(reference_quantizers_round_trip) {
        float x[64];
        for (int i = 0; i < 64; i++)
                x[i] = (float)((int)(next() % 255) - 127) * 0.03125f;
        x[5] = 127 * 0.03125f; /* the block's max: d = 0.03125 exactly */
        x[37] = -127 * 0.03125f;
        uint8_t q8[68], q4[36];
        float y[64];
        gguf_quantize_q8_0(x, q8, 64);
        dse__ggml_dequantize(8, q8, y, 64);
        for (int i = 0; i < 64; i++)
                ASSERT_FLOAT_EQ(y[i], x[i]);
        gguf_quantize_q4_0(x, q4, 64);
        dse__ggml_dequantize(2, q4, y, 64);
        for (int b = 0; b < 2; b++) {
                float amax = 0;
                for (int i = 0; i < 32; i++)
                        amax = fmaxf(amax, fabsf(x[32 * b + i]));
                for (int i = 0; i < 32; i++)
                        ASSERT_TRUE(fabsf(y[32 * b + i] - x[32 * b + i]) <= amax / 8 * 0.5f + 1e-3f);
        }
}

/* The exact native forms: Q8_0 and Q5_0 blocks as Q8 (q * scale), Q4_0 as Q4's symmetric
 * form ((q - 8) * fp16 scale, in the 16-row interleaved layout), on random blocks of a
 * 20 x 64 matrix (a partial 16-row block included): every value as ggml's formulas. */
TEST(native_forms_hold_the_values_exactly) {
        static const uint32_t types[] = {8, 6, 2};
        const int64_t rows = 20, cols = 64, ng = cols / 32;
        for (size_t ti = 0; ti < 3; ti++) {
                uint32_t type = types[ti];
                size_t bb = dse__ggml_block_bytes(type);
                uint8_t *src = malloc(bb * (size_t)(rows * ng));
                for (size_t i = 0; i < bb * (size_t)(rows * ng); i++)
                        src[i] = (uint8_t)next();
                for (int64_t k = 0; k < rows * ng; k++)
                        set_scales(type, src + (size_t)k * bb);
                size_t bad = 0;
                if (dse__ggml_native_dtype(type) == DSE_DTYPE_Q8) {
                        int8_t *q = malloc((size_t)(rows * cols));
                        float *s = malloc((size_t)(rows * ng) * sizeof *s);
                        dse__ggml_to_q8_rows(type, src, rows, cols, q, s);
                        for (int64_t r = 0; r < rows; r++)
                                for (int64_t c = 0; c < cols; c++) {
                                        float w = (float)q[r * cols + c] * s[r * ng + c / 32];
                                        float want = gguf_ref_value(type, src + (size_t)(r * ng + c / 32) * bb, (int)(c % 32));
                                        bad += memcmp(&w, &want, 4) != 0;
                                }
                        free(q);
                        free(s);
                } else {
                        ASSERT_EQ(dse__ggml_native_dtype(type), DSE_DTYPE_Q4);
                        int64_t srows = dse__scale_rows(DSE_DTYPE_Q4, rows);
                        uint8_t *d = calloc((size_t)dse__q4_bytes(rows, cols), 1);
                        uint16_t *s = calloc((size_t)(srows * ng), sizeof *s);
                        float *row = malloc((size_t)cols * sizeof *row);
                        dse__ggml_to_q4_rows(src, rows, cols, d, s);
                        /* read back as the kernels define Q4's symmetric form */
                        struct dse_qmat w = {.dtype = DSE_DTYPE_Q4, .rows = rows, .cols = cols, .group_size = 32,
                                             .n_groups = ng, .data = d, .scale_f16 = s};
                        for (int64_t r = 0; r < rows; r++) {
                                dse__kernels_ref_dequant_row(&w, r, row);
                                for (int64_t c = 0; c < cols; c++) {
                                        float want = gguf_ref_value(type, src + (size_t)(r * ng + c / 32) * bb, (int)(c % 32));
                                        bad += memcmp(&row[c], &want, 4) != 0;
                                }
                        }
                        free(d);
                        free(s);
                        free(row);
                }
                free(src);
                if (bad)
                        T_FAIL("%s: %zu values differ in the native form", dse__ggml_type_name(type), bad);
        }
        ASSERT_EQ(dse__ggml_native_dtype(12), -1); /* Q4_K: F32 */
}
