/* The KV rows' layout (engine/src/kv.h): within a block's layer, each plane (a GQA
 * head's K or V; an MLA latent row whole) holds its part of every position back to back,
 * so one KV head's rows are one contiguous stream; positions map through the block table;
 * a row stored across planes reads back as it was (exactly in f32, to the type's
 * rounding otherwise) and touches no byte outside its parts; the bytes per position are
 * the planes' together. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kv.h"
#include "t.h"

#define BT 4   /* positions per block */
#define NB 3   /* blocks */

static struct dse_hparams gqa(int32_t n_kv_heads, int32_t head_dim) {
        return (struct dse_hparams){.arch = DSE_ARCH_QWEN2, .n_layers = 2, .n_heads = 2 * n_kv_heads,
                                    .n_kv_heads = n_kv_heads, .head_dim = head_dim};
}

static struct dse_hparams mla(void) {
        return (struct dse_hparams){.arch = DSE_ARCH_DEEPSEEK_V2, .n_layers = 2, .n_heads = 4, .n_kv_heads = 4,
                                    .head_dim = 24, .kv_lora_rank = 32, .qk_rope_head_dim = 8};
}

/* A value per (layer, position, element): 0.25 to 1.75 in steps of 0.25, every value in
 * every group of 7 or more elements, so F32, BF16 and FP8 (scale 1.75 / 448 = 2^-8) store
 * it exactly and INT8 within half its step. */
static float value(int l, int32_t pos, int32_t e) {
        return (float)(1 + (l * 7 + pos * 3 + e) % 7) * 0.25f;
}

static void check_layout(const struct dse_hparams *hp, enum dse_kv_dtype dtype) {
        struct dse__kv_view v;
        dse__kv_layout(hp, dtype, &v);
        int32_t n = v.row_floats, n_planes = n / v.plane_floats;
        int mla_arch = hp->arch == DSE_ARCH_DEEPSEEK_V2;
        ASSERT_EQ(v.plane_floats, mla_arch ? n : hp->head_dim);
        ASSERT_EQ(n_planes * v.plane_floats, n);
        ASSERT_EQ(v.row_bytes, n_planes * v.plane_bytes);
        ASSERT_EQ(v.plane_bytes % 4, 0);
        size_t bytes = (size_t)NB * (size_t)v.n_layers * BT * (size_t)v.row_bytes;
        uint8_t *mem = calloc(1, bytes);
        ASSERT_TRUE(mem);
        static const int32_t table[NB] = {2, 0, 1}; /* positions 0..3 in block 2, 4..7 in 0, 8..11 in 1 */
        v.base = mem;
        v.blocks = table;
        v.block_tokens = BT;
        float tol = dtype == DSE_KV_INT8 ? 1.75f / 127.0f * 0.5f + 1e-6f : 0.0f;
        float *x = malloc((size_t)n * sizeof(float)), *y = malloc((size_t)n * sizeof(float));
        ASSERT_TRUE(x && y);
        for (int l = 0; l < v.n_layers; l++)
                for (int32_t pos = 0; pos < NB * BT; pos++) {
                        for (int32_t p = 0; p < n_planes; p++) {
                                size_t at = (((size_t)table[pos / BT] * (size_t)v.n_layers + (size_t)l) * BT *
                                                     (size_t)v.row_bytes +
                                             ((size_t)p * BT + (size_t)(pos % BT)) * (size_t)v.plane_bytes);
                                ASSERT_TRUE(dse__kv_plane_row(&v, l, pos, p) == mem + at);
                                if (pos % BT + 1 < BT) /* a plane's positions back to back */
                                        ASSERT_TRUE(dse__kv_plane_row(&v, l, pos + 1, p) ==
                                                    dse__kv_plane_row(&v, l, pos, p) + v.plane_bytes);
                        }
                        for (int32_t e = 0; e < n; e++)
                                x[e] = value(l, pos, e);
                        /* across planes: every row in two pieces cut in the middle of a plane
                         * where the type allows (FP8 and INT8 store whole groups) */
                        int32_t cut = dtype == DSE_KV_FP8 || dtype == DSE_KV_INT8 ? v.group : v.plane_floats / 2 + 1;
                        dse__kv_store(&v, l, pos, 0, x, cut);
                        dse__kv_store(&v, l, pos, cut, x + cut, n - cut);
                }
        for (int l = 0; l < v.n_layers; l++)
                for (int32_t pos = 0; pos < NB * BT; pos++) {
                        dse__kv_load(&v, l, pos, 0, n, y);
                        for (int32_t e = 0; e < n; e++)
                                if (!(fabsf(y[e] - value(l, pos, e)) <= tol))
                                        T_FAIL("%s %s: layer %d position %d element %d reads %g, stored %g",
                                               mla_arch ? "mla" : "gqa", dse_kv_dtype_to_string(dtype), l, pos, e,
                                               (double)y[e], (double)value(l, pos, e));
                }
        free(x);
        free(y);
        free(mem);
}

TEST(gqa_planes_are_heads) {
        for (int t = 0; t < DSE_KV_DTYPE_COUNT; t++) {
                struct dse_hparams hp = gqa(2, 32);
                check_layout(&hp, (enum dse_kv_dtype)t);
                hp = gqa(3, 8);
                check_layout(&hp, (enum dse_kv_dtype)t);
        }
}

TEST(mla_plane_is_the_row) {
        struct dse_hparams hp = mla();
        for (int t = 0; t < DSE_KV_DTYPE_COUNT; t++)
                check_layout(&hp, (enum dse_kv_dtype)t);
}

/* The bytes per position stay what the row-major layout had wherever a head's elements
 * fill whole 4-byte words. */
TEST(bytes_per_position) {
        struct dse__kv_view v;
        struct dse_hparams hp = gqa(2, 128);
        dse__kv_layout(&hp, DSE_KV_BF16, &v);
        ASSERT_EQ(v.row_bytes, 2 * 2 * 128 * 2);
        dse__kv_layout(&hp, DSE_KV_INT8, &v);
        ASSERT_EQ(v.row_bytes, 2 * 2 * (128 + 4));
        dse__kv_layout(&hp, DSE_KV_F32, &v);
        ASSERT_EQ(v.row_bytes, 2 * 2 * 128 * 4);
}
