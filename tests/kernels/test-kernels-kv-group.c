/* The grouped BF16 attention kernels (attn_scores_group_bf16, attn_accum_group_bf16) at
 * the shapes their SIMD tiles cut differently: groups of 1, 2, 3, 4, 6, 8 and past a tile
 * (9, 16), runs from one position to past a chunk of DSE__ATTN_SPLIT that are not whole
 * multiples of their row steps, lengths around 16 and 64 and Qwen's 128, at every level up
 * to the detected one. Each query is held to a float64 oracle over the stored elements
 * and must come out bit for bit as it does alone (G = 1); the gaps of the score and output
 * strides stay untouched. test-kernels-kv holds the short runs and the other KV types. */
#include <stdint.h>

#include "kernels/kernels.h"
#include "kernel-test-data.h"
#include "t.h"

/* float32 rounding of an n-term sum relative to the sum of |terms| (n <= 600) */
#define REL_TOL 2e-5
#define ABS_TOL 1e-6

static double bf16_value(uint16_t h) {
        uint32_t bits = (uint32_t)h << 16;
        float f;
        memcpy(&f, &bits, sizeof f);
        return f;
}

struct shape {
        int G;
        int64_t n, off, len;
};

static void check_shape(const struct shape *sh, enum dse_cpu_level top, uint64_t seed) {
        int G = sh->G;
        int64_t n = sh->n, len = sh->len, off = sh->off;
        int64_t ld = 2 * (off + len) + 6, ldq = len + 3, lds = n + 5, ldo = len + 7; /* strides with gaps */
        rng_seed(seed);
        uint8_t *rows = malloc((size_t)(n * ld));
        float *q = malloc((size_t)(G * ldq) * sizeof *q), *w = malloc((size_t)(G * lds) * sizeof *w);
        float *sc = malloc((size_t)(G * lds) * sizeof *sc), *alone = malloc((size_t)lds * sizeof *alone);
        float *out0 = malloc((size_t)(G * ldo) * sizeof *out0), *out = malloc((size_t)(G * ldo) * sizeof *out);
        float *one = malloc((size_t)ldo * sizeof *one);
        ASSERT_TRUE(rows && q && w && sc && alone && out0 && out && one);
        for (int64_t i = 0; i < n * ld / 2; i++) {
                uint16_t h = dse__kern_f32_to_bf16(rng_unit());
                memcpy(rows + 2 * i, &h, 2);
        }
        for (int64_t i = 0; i < G * ldq; i++)
                q[i] = rng_unit();
        for (int64_t i = 0; i < G * lds; i++)
                w[i] = rng_unit();
        for (int64_t i = 0; i < G * ldo; i++)
                out0[i] = rng_unit();
        struct dse_kv_rows kv = {.rows = rows, .ld = ld, .group = 1};
        for (int lvl = DSE_CPU_SCALAR; lvl <= (int)top; lvl++) {
                struct dse_kernels k;
                ASSERT_OK(dse_kernels_resolve((enum dse_cpu_level)lvl, &k));
                for (int64_t i = 0; i < G * lds; i++)
                        sc[i] = -7.0f; /* the gaps' marker */
                k.attn_scores_group_bf16(q, ldq, G, &kv, off, n, len, 0.0883883f, sc, lds);
                memcpy(out, out0, (size_t)(G * ldo) * sizeof *out);
                k.attn_accum_group_bf16(w, lds, G, &kv, off, n, len, out, ldo);
                for (int g = 0; g < G; g++) {
                        k.attn_scores_group_bf16(q + g * ldq, ldq, 1, &kv, off, n, len, 0.0883883f, alone, lds);
                        ASSERT_TRUE(memcmp(alone, sc + g * lds, (size_t)n * sizeof(float)) == 0);
                        memcpy(one, out0 + g * ldo, (size_t)ldo * sizeof *one);
                        k.attn_accum_group_bf16(w + g * lds, lds, 1, &kv, off, n, len, one, ldo);
                        ASSERT_TRUE(memcmp(one, out + g * ldo, (size_t)len * sizeof(float)) == 0);
                        for (int64_t t = 0; t < n; t++) {
                                double dot = 0, mag = 0;
                                for (int64_t i = 0; i < len; i++) {
                                        uint16_t h;
                                        memcpy(&h, rows + t * ld + 2 * (off + i), 2);
                                        dot += q[g * ldq + i] * bf16_value(h);
                                        mag += fabs(q[g * ldq + i] * bf16_value(h));
                                }
                                ASSERT_NEAR(sc[g * lds + t], 0.0883883 * dot, 0.0883883 * (REL_TOL * mag + ABS_TOL));
                        }
                        for (int64_t t = n; t < lds; t++)
                                ASSERT_TRUE(sc[g * lds + t] == -7.0f);
                        for (int64_t i = 0; i < len; i++) {
                                double want = out0[g * ldo + i], mag = fabs(want);
                                for (int64_t t = 0; t < n; t++) {
                                        uint16_t h;
                                        memcpy(&h, rows + t * ld + 2 * (off + i), 2);
                                        want += w[g * lds + t] * bf16_value(h);
                                        mag += fabs(w[g * lds + t] * bf16_value(h));
                                }
                                ASSERT_NEAR(out[g * ldo + i], want, REL_TOL * mag + ABS_TOL);
                        }
                        for (int64_t i = len; i < ldo; i++)
                                ASSERT_TRUE(out[g * ldo + i] == out0[g * ldo + i]);
                }
        }
        free(rows);
        free(q);
        free(w);
        free(sc);
        free(alone);
        free(out0);
        free(out);
        free(one);
}

TEST(group_kernels_at_tile_edges_all_levels) {
        static const int groups[] = {1, 2, 3, 4, 6, 8, 9, 16};
        static const int64_t runs[] = {1, 2, 5, 9, 31, 100, 515};
        static const int64_t lens[][2] = {{0, 1}, {1, 15}, {0, 16}, {2, 17}, {0, 48}, {3, 63}, {0, 64},
                                          {0, 80}, {5, 100}, {0, 128}, {128, 128}, {0, 130}, {7, 200}};
        enum dse_cpu_level top = detected_level();
        int n_checked = 0;
        for (size_t gi = 0; gi < sizeof groups / sizeof groups[0]; gi++)
                for (size_t ri = 0; ri < sizeof runs / sizeof runs[0]; ri++)
                        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
                                /* the long runs at a few lengths: the rest adds time, not cases */
                                if (runs[ri] > 100 && lens[li][1] != 128 && lens[li][1] != 17)
                                        continue;
                                struct shape sh = {groups[gi], runs[ri], lens[li][0], lens[li][1]};
                                check_shape(&sh, top, 7700 + 1000 * gi + 37 * ri + li);
                                n_checked++;
                        }
        fprintf(stderr, "  %d (group, run, length) shapes checked at every level up to %s\n", n_checked,
                dse_cpu_level_to_string(top));
}

