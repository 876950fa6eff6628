/* How the grouped attention kernels (avx512_kv.c, avx512_bf16_kv.c) cut a group of queries:
 * tiles of up to 8, the tile routine compiled once per tile size so that its accumulators
 * are a fixed set of registers. A macro, so it is compiled with the flags of the file
 * that uses it. */
#ifndef DSE_KERNELS_GROUP_TILES_H
#define DSE_KERNELS_GROUP_TILES_H

/* TILE(g0, GT) for each tile of G queries: GT (a constant 1..8) queries from g0. */
#define DSE_GROUP_TILES_8(G, TILE)                                                                              \
        for (int g0_ = 0; g0_ < (G); g0_ += 8)                                                                  \
                switch ((G) - g0_ < 8 ? (G) - g0_ : 8) {                                                        \
                case 1: TILE(g0_, 1); break;                                                                    \
                case 2: TILE(g0_, 2); break;                                                                    \
                case 3: TILE(g0_, 3); break;                                                                    \
                case 4: TILE(g0_, 4); break;                                                                    \
                case 5: TILE(g0_, 5); break;                                                                    \
                case 6: TILE(g0_, 6); break;                                                                    \
                case 7: TILE(g0_, 7); break;                                                                    \
                default: TILE(g0_, 8); break;                                                                   \
                }

#endif
