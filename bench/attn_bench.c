/* dse-attn-bench: one decoded token's attention at depth over a BF16 KV cache, the kernels
 * alone, per CPU level, on one thread.
 *
 *     dse-attn-bench [--depth N] [--layers L] [--kv-heads H] [--group G] [--head-dim D]
 *                    [--chunk N] [--reps N]
 *
 * Defaults are R1-Distill-Qwen-1.5B's shapes (28 layers, 2 KV heads, 6 query heads per KV
 * head, head_dim 128) at depth 4096. The cache is laid out as the engine's private cache
 * is (per layer, one plane per KV head's K and V, rows head_dim bf16 apart), and each
 * query group walks it as dse__attend_long's chunks do: per chunk of --chunk positions
 * (default 512, the engine's split) the grouped scores, each query's softmax, the
 * grouped weighted rows. The variants: each level's kernel table as the engine uses it,
 * and each level past AVX2 once more with float32 scores (where it has vdpbf16ps ones)
 * and once with the AVX2 grouped kernels (its table before it had grouped kernels of its
 * own). They take turns, rep after rep, so a loaded host slows them alike, and
 * the times are the thread's CPU time; printed are the best and median ms per token of
 * each and the median's ratio to the first, with the KV bytes read per token and their
 * rate. Not a model: no projections, no merge of the chunks. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "bench_sort.h"
#include "dse_internal.h"
#include "bench_clock.h"

static uint64_t rng = 88172645463325252ull;
static float rnd_unit(void) {
        return (float)(bench_xorshift64(&rng) >> 40) / (float)(1u << 24) * 2.0f - 1.0f;
}

struct shape {
        int depth, layers, kv_heads, group, head_dim, chunk;
};

/* One token's attention: every layer, every KV head, chunk by chunk, on the kernels the
 * engine picks from the table (attend.c: the vdpbf16ps scores where there are). */
static void attend_token(const struct dse_kernels *k, const struct shape *sh, const uint8_t *kv, const float *q,
                         float *att, float *o) {
        int64_t plane_bytes = (int64_t)sh->head_dim * 2, plane = (int64_t)sh->depth * plane_bytes;
        int G = sh->group, S = sh->chunk;
        for (int l = 0; l < sh->layers; l++)
                for (int h = 0; h < sh->kv_heads; h++) {
                        const uint8_t *kp = kv + ((size_t)l * (size_t)sh->kv_heads + (size_t)h) * 2 * (size_t)plane;
                        for (int t0 = 0; t0 < sh->depth; t0 += S) {
                                int n = sh->depth - t0 < S ? sh->depth - t0 : S;
                                struct dse_kv_rows K = {.rows = kp + (size_t)t0 * (size_t)plane_bytes, .ld = plane_bytes};
                                struct dse_kv_rows V = {.rows = K.rows + plane, .ld = plane_bytes};
                                (k->attn_scores_group_bf16act ? k->attn_scores_group_bf16act : k->attn_scores_group_bf16)(
                                        q, sh->head_dim, G, &K, 0, n, sh->head_dim, 0.088f, att, n);
                                for (int g = 0; g < G; g++) {
                                        k->softmax(att + (size_t)g * (size_t)n, n);
                                        memset(o + (size_t)g * (size_t)sh->head_dim, 0, (size_t)sh->head_dim * sizeof(float));
                                }
                                k->attn_accum_group_bf16(att, n, G, &V, 0, n, sh->head_dim, o, sh->head_dim);
                        }
                }
}

int main(int argc, char **argv) {
        struct shape sh = {4096, 28, 2, 6, 128, 512};
        int reps = 7;
        for (int i = 1; i + 1 < argc; i += 2) {
                int v = atoi(argv[i + 1]);
                if (strcmp(argv[i], "--depth") == 0)
                        sh.depth = v;
                else if (strcmp(argv[i], "--layers") == 0)
                        sh.layers = v;
                else if (strcmp(argv[i], "--kv-heads") == 0)
                        sh.kv_heads = v;
                else if (strcmp(argv[i], "--group") == 0)
                        sh.group = v;
                else if (strcmp(argv[i], "--head-dim") == 0)
                        sh.head_dim = v;
                else if (strcmp(argv[i], "--chunk") == 0)
                        sh.chunk = v;
                else if (strcmp(argv[i], "--reps") == 0)
                        reps = v;
                else
                        break;
        }
        if (argc % 2 == 0 || sh.depth < 1 || sh.layers < 1 || sh.kv_heads < 1 || sh.group < 1 || sh.head_dim < 1 ||
            sh.chunk < 1 || reps < 1 || reps > 1000) {
                fprintf(stderr, "usage: dse-attn-bench [--depth N] [--layers L] [--kv-heads H] [--group G] "
                                "[--head-dim D] [--chunk N] [--reps N] (all >= 1, reps <= 1000)\n");
                return 2;
        }
        struct dse_cpu_info cpu;
        int r = dse_cpu_detect(&cpu, NULL);
        if (r < 0) {
                fprintf(stderr, "dse-attn-bench: CPU detection failed (%s)\n", strerror(-r));
                return 1;
        }
        /* the variants: each level's table from AVX2 up; below each level past AVX2 that
         * level with float32 scores (where it has the vdpbf16ps ones), and with the AVX2
         * grouped kernels (what it ran before it had its own) */
        struct dse_kernels k[3 * DSE_CPU_LEVEL_COUNT];
        char name[3 * DSE_CPU_LEVEL_COUNT][48];
        int n_var = 0;
        for (int lv = cpu.level >= DSE_CPU_AVX2 ? DSE_CPU_AVX2 : DSE_CPU_SCALAR; lv <= (int)cpu.level; lv++) {
                if ((r = dse_kernels_resolve((enum dse_cpu_level)lv, &k[n_var])) < 0) {
                        fprintf(stderr, "dse-attn-bench: level %s: %s\n", dse_cpu_level_to_string((enum dse_cpu_level)lv),
                                strerror(-r));
                        return 1;
                }
                snprintf(name[n_var], sizeof name[n_var], "%s", dse_cpu_level_to_string((enum dse_cpu_level)lv));
                n_var++;
                if (lv > DSE_CPU_AVX2 && k[n_var - 1].attn_scores_group_bf16act) {
                        k[n_var] = k[n_var - 1];
                        k[n_var].attn_scores_group_bf16act = NULL;
                        snprintf(name[n_var], sizeof name[n_var], "%s, f32 scores",
                                 dse_cpu_level_to_string((enum dse_cpu_level)lv));
                        n_var++;
                }
                if (lv > DSE_CPU_AVX2) {
                        k[n_var] = k[n_var - 1];
                        k[n_var].attn_scores_group_bf16 = k[0].attn_scores_group_bf16;
                        k[n_var].attn_scores_group_bf16act = NULL;
                        k[n_var].attn_accum_group_bf16 = k[0].attn_accum_group_bf16;
                        snprintf(name[n_var], sizeof name[n_var], "%s, avx2 grouped",
                                 dse_cpu_level_to_string((enum dse_cpu_level)lv));
                        n_var++;
                }
        }
        size_t kv_bytes = (size_t)sh.layers * (size_t)sh.kv_heads * 2 * (size_t)sh.depth * (size_t)sh.head_dim * 2;
        int S = sh.chunk;
        /* on 2 MiB pages where transparent huge pages allow, as the engine's cache is
         * (engine/src/kv_pages.h): in 4 KiB pages the TLB misses, not the kernels, set
         * the rate */
        size_t huge = (size_t)2 << 20, kv_map = (kv_bytes + huge - 1) / huge * huge;
        uint16_t *kv = aligned_alloc(huge, kv_map);
        if (kv)
                madvise(kv, kv_map, MADV_HUGEPAGE);
        float *q = malloc((size_t)sh.group * (size_t)sh.head_dim * sizeof(float));
        float *att = malloc((size_t)sh.group * (size_t)S * sizeof(float));
        float *o = malloc((size_t)sh.group * (size_t)sh.head_dim * sizeof(float));
        double *ms = malloc((size_t)n_var * (size_t)reps * sizeof(double));
        if (!kv || !q || !att || !o || !ms) {
                fprintf(stderr, "dse-attn-bench: out of memory for %zu bytes of KV\n", kv_bytes);
                return 1;
        }
        for (size_t i = 0; i < kv_bytes / 2; i++)
                kv[i] = dse__kern_f32_to_bf16(rnd_unit());
        for (int i = 0; i < sh.group * sh.head_dim; i++)
                q[i] = rnd_unit();
        for (int i = 0; i < n_var; i++) /* warm-up: page faults, caches */
                attend_token(&k[i], &sh, (const uint8_t *)kv, q, att, o);
        for (int rep = 0; rep < reps; rep++)
                for (int i = 0; i < n_var; i++) {
                        double t0 = bench_clock_s(CLOCK_THREAD_CPUTIME_ID);
                        attend_token(&k[i], &sh, (const uint8_t *)kv, q, att, o);
                        ms[i * reps + rep] = 1e3 * (bench_clock_s(CLOCK_THREAD_CPUTIME_ID) - t0);
                }
        printf("attention of one token at depth %d: %d layers x %d KV heads x %d queries, head_dim %d, bf16 KV "
               "(%.1f MB read per token), 1 thread, %d reps per variant taking turns, thread CPU time\n",
               sh.depth, sh.layers, sh.kv_heads, sh.group, sh.head_dim, (double)kv_bytes / 1e6, reps);
        double base = 0;
        for (int i = 0; i < n_var; i++) {
                double *m = ms + i * reps;
                qsort(m, (size_t)reps, sizeof *m, bench_cmp_double);
                double med = m[reps / 2];
                base = i == 0 ? med : base;
                printf("  %-20s best %7.2f ms  median %7.2f ms  worst %7.2f ms  %6.2f GB/s (median)  median / %s %.3f\n",
                       name[i], m[0], med, m[reps - 1], (double)kv_bytes / med / 1e6, name[0], med / base);
        }
        free(kv);
        free(q);
        free(att);
        free(o);
        free(ms);
        return 0;
}
