/* How the grouped attention scores (avx512_kv.c, avx512_bf16_kv.c) cut a group of
 * queries: tiles of up to 8, the tile routine compiled once per tile size so that its
 * accumulators are a fixed set of registers. Each size is its own function, kept out of
 * line: one function holding all eight took clang with the fuzz build's ASan, UBSan and
 * coverage instrumentation minutes to compile, eight small ones take seconds, and a call
 * per tile and run costs nothing beside the run's rows. Macros, so that the functions
 * are compiled with the flags of the file that uses them. */
#ifndef DSE_KERNELS_GROUP_TILES_H
#define DSE_KERNELS_GROUP_TILES_H

#include "kernels/kernels.h"

/* Scores of a tile of queries (the group's G fixed by the function): a
 * dse_attn_scores_group_fn without G. */
typedef void (*dse_scores_tile_fn)(const float *q, int64_t ldq, const struct dse_kv_rows *k, int64_t off,
                                   int64_t n, int64_t len, float scale, float *scores, int64_t lds);

#define DSE_SCORES_TILE_FN_(TILE, GT)                                                                          \
        static __attribute__((noinline)) void TILE##_##GT(const float *q, int64_t ldq,                         \
                                                          const struct dse_kv_rows *k, int64_t off, int64_t n, \
                                                          int64_t len, float scale, float *scores,             \
                                                          int64_t lds) {                                       \
                TILE(q, ldq, k, off, n, len, scale, scores, lds, GT);                                          \
        }

/* TILE##_1 .. TILE##_8, TILE(..., GT) for GT = 1 .. 8, and the table TILE##_fns of them. */
#define DSE_SCORES_TILES_8(TILE)                                                                               \
        DSE_SCORES_TILE_FN_(TILE, 1)                                                                           \
        DSE_SCORES_TILE_FN_(TILE, 2)                                                                           \
        DSE_SCORES_TILE_FN_(TILE, 3)                                                                           \
        DSE_SCORES_TILE_FN_(TILE, 4)                                                                           \
        DSE_SCORES_TILE_FN_(TILE, 5)                                                                           \
        DSE_SCORES_TILE_FN_(TILE, 6)                                                                           \
        DSE_SCORES_TILE_FN_(TILE, 7)                                                                           \
        DSE_SCORES_TILE_FN_(TILE, 8)                                                                           \
        static const dse_scores_tile_fn TILE##_fns[8] = {TILE##_1, TILE##_2, TILE##_3, TILE##_4,               \
                                                         TILE##_5, TILE##_6, TILE##_7, TILE##_8};

/* The scores of G queries, tile by tile: query g0 + i of a tile is the tile's query i. */
static inline void dse_scores_tiles_8(const dse_scores_tile_fn fns[8], const float *q, int64_t ldq, int G,
                                      const struct dse_kv_rows *k, int64_t off, int64_t n, int64_t len,
                                      float scale, float *scores, int64_t lds) {
        for (int g0 = 0; g0 < G; g0 += 8)
                fns[(G - g0 < 8 ? G - g0 : 8) - 1](q + g0 * ldq, ldq, k, off, n, len, scale, scores + g0 * lds, lds);
}

#endif
