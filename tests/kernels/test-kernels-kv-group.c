/* The grouped BF16 attention kernels (attn_scores_group_bf16, attn_accum_group_bf16, and
 * the vdpbf16ps scores attn_scores_group_bf16act against their own twin's oracle) at
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

/* attn_scores_group_bf16act (fn: its _ref twin or the table's entry) against the float64
 * oracle over the bf16-rounded queries, bitwise alone, the stride gaps untouched. */
static void check_bf16act_shape(dse_attn_scores_group_fn fn, const struct shape *sh, uint64_t seed) {
        int G = sh->G;
        int64_t n = sh->n, len = sh->len, off = sh->off;
        int64_t ld = 2 * (off + len) + 6, ldq = len + 3, lds = n + 5;
        rng_seed(seed);
        uint8_t *rows = malloc((size_t)(n * ld));
        float *q = malloc((size_t)(G * ldq) * sizeof *q), *sc = malloc((size_t)(G * lds) * sizeof *sc);
        float *alone = malloc((size_t)lds * sizeof *alone);
        ASSERT_TRUE(rows && q && sc && alone);
        for (int64_t i = 0; i < n * ld / 2; i++) {
                uint16_t h = dse__kern_f32_to_bf16(rng_unit());
                memcpy(rows + 2 * i, &h, 2);
        }
        for (int64_t i = 0; i < G * ldq; i++)
                q[i] = rng_unit();
        struct dse_kv_rows kv = {.rows = rows, .ld = ld, .group = 1};
        for (int64_t i = 0; i < G * lds; i++)
                sc[i] = -7.0f;
        fn(q, ldq, G, &kv, off, n, len, 0.0883883f, sc, lds);
        for (int g = 0; g < G; g++) {
                fn(q + g * ldq, ldq, 1, &kv, off, n, len, 0.0883883f, alone, lds);
                ASSERT_TRUE(memcmp(alone, sc + g * lds, (size_t)n * sizeof(float)) == 0);
                for (int64_t t = 0; t < n; t++) {
                        double dot = 0, mag = 0;
                        for (int64_t i = 0; i < len; i++) {
                                uint16_t h;
                                memcpy(&h, rows + t * ld + 2 * (off + i), 2);
                                double p = bf16_value(dse__kern_f32_to_bf16(q[g * ldq + i])) * bf16_value(h);
                                dot += p;
                                mag += fabs(p);
                        }
                        ASSERT_NEAR(sc[g * lds + t], 0.0883883 * dot, 0.0883883 * (REL_TOL * mag + ABS_TOL));
                }
                for (int64_t t = n; t < lds; t++)
                        ASSERT_TRUE(sc[g * lds + t] == -7.0f);
        }
        free(rows);
        free(q);
        free(sc);
        free(alone);
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

/* The vdpbf16ps scores: filled exactly where the CPU has AVX-512 BF16; the twin and the
 * entry at the same shapes, and at lengths past a query's rounding slice (1024). */
TEST(group_scores_bf16act_against_oracle) {
        static const int groups[] = {1, 2, 3, 4, 6, 8, 9, 16};
        static const int64_t runs[] = {1, 2, 5, 9, 31, 100, 515};
        static const int64_t lens[][2] = {{0, 1}, {1, 15}, {0, 16}, {2, 17}, {0, 31}, {0, 32}, {3, 33},
                                          {0, 64}, {5, 100}, {0, 128}, {128, 128}, {0, 576}, {1, 1030}};
        struct dse_cpu_info cpu;
        int ok = dse_cpu_detect(&cpu, NULL) >= 0;
        int have = ok && cpu.detected >= DSE_CPU_AVX512 && cpu.avx512bf16;
        struct dse_kernels k;
        enum dse_cpu_level lvl = ok && cpu.detected >= DSE_CPU_AVX512 ? DSE_CPU_AVX512 : DSE_CPU_SCALAR;
        ASSERT_OK(dse__kernels_resolve_with(lvl, have ? DSE_KFEAT_BF16 : 0, &k));
        ASSERT_TRUE(have ? k.attn_scores_group_bf16act != NULL : k.attn_scores_group_bf16act == NULL);
        ASSERT_OK(dse__kernels_resolve_with(lvl, 0, &k));
        ASSERT_TRUE(k.attn_scores_group_bf16act == NULL);
        ASSERT_OK(dse__kernels_resolve_with(lvl, have ? DSE_KFEAT_BF16 : 0, &k));
        dse_attn_scores_group_fn fns[2] = {dse__kernels_ref_attn_scores_group_bf16act, k.attn_scores_group_bf16act};
        int n_checked = 0;
        for (int f = 0; f < 2; f++) {
                if (!fns[f])
                        continue;
                for (size_t gi = 0; gi < sizeof groups / sizeof groups[0]; gi++)
                        for (size_t ri = 0; ri < sizeof runs / sizeof runs[0]; ri++)
                                for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
                                        if (runs[ri] > 100 && lens[li][1] != 128 && lens[li][1] != 17)
                                                continue;
                                        if (lens[li][1] > 128 && runs[ri] > 9) /* the slices need few rows */
                                                continue;
                                        struct shape sh = {groups[gi], runs[ri], lens[li][0], lens[li][1]};
                                        check_bf16act_shape(fns[f], &sh, 8800 + 1000 * gi + 37 * ri + li);
                                        n_checked++;
                                }
        }
        fprintf(stderr, "  %d (twin or entry, group, run, length) bf16act score shapes checked%s\n", n_checked,
                have ? "" : " (twin only: no AVX-512 BF16 here)");
}

