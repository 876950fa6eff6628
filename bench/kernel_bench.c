/* dse-kernel-bench: the integer kernels (quantize_xq + matmul_xq) alone, per CPU level,
 * against a read-bandwidth probe measured in the same run.
 *
 *     dse-kernel-bench [--format q4|q8] [--threads T] [--mb M] [--reps N] [--float]
 *
 * Two measurements per kernel set (avx2; avx512 with VNNI, with VNNI and the 8-token layout
 * (DSE_KFEAT_T8), and with AMX on top, as far as the CPU has them):
 *   stream   one matrix of about M MB of weights (default 256, far past the caches),
 *            rows split over T threads, n = 1 and n = 8 tokens per pass: GB/s of weight
 *            bytes read (data + scales + zeros) per wall second, and that over the probe's
 *            GB/s (read_probe.h: a T-thread streaming read of the matrix's own data, the
 *            best pass of each variant, with and without the kernels' prefetch).
 *            n = 8 is shown as aggregate tokens/s over the n = 1 tokens/s.
 *   compute  a 256 x 4096 matrix that stays in L2, one thread, n = 1..32: GMAC/s of
 *            thread CPU time (so other jobs on a shared machine do not count), the
 *            measure of how much arithmetic each decoded weight block does.
 * --float instead: the float-activation kernels (matvec of BF16, F32, Q8 and Q4 weights,
 * and bf16act) streaming, per level, against the probe over each matrix.
 * Best of --reps passes everywhere. The probe and the kernels run in the same process
 * one after the other, so the ratio does not depend on a bandwidth typed in. */
#include <errno.h>
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "dse_internal.h"
#include "read_probe.h"
#include "bench_clock.h"

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(void) { return (uint32_t)(bench_xorshift64(&rng) >> 11); }

struct mat {
        struct dse_qmat w;
        size_t bytes; /* data + scales + zeros: what one pass reads */
};

/* Bytes of w's data array (what the probe reads; scales and zeros come on top). */
static size_t data_bytes(const struct dse_qmat *w) {
        switch (w->dtype) {
        case DSE_DTYPE_Q4:
                return (size_t)dse__q4_bytes(w->rows, w->cols);
        case DSE_DTYPE_Q8:
                return (size_t)(w->rows * w->cols);
        case DSE_DTYPE_F32:
                return (size_t)(w->rows * w->cols) * 4;
        default: /* BF16 */
                return (size_t)(w->rows * w->cols) * 2;
        }
}

/* A Q4, Q8, BF16 or F32 matrix of random weights (floats in [0.5, 2): no subnormals,
 * whose assists would time something else). */
static int mat_new(struct mat *m, enum dse_dtype dt, int64_t rows, int64_t cols, int32_t group) {
        memset(m, 0, sizeof *m);
        m->w.dtype = dt;
        m->w.rows = rows;
        m->w.cols = cols;
        int quant = dt == DSE_DTYPE_Q4 || dt == DSE_DTYPE_Q8;
        m->w.group_size = quant ? group : 0;
        m->w.n_groups = quant ? (cols + group - 1) / group : 0;
        size_t data = data_bytes(&m->w);
        size_t ng = (size_t)(dse__scale_rows(dt, rows) * m->w.n_groups);
        /* on 2 MiB pages, as the weights are served (hugetlb memfd, or the file mapping's
         * PMD-mapped page cache) */
        size_t huge = 2u << 20;
        uint8_t *d = aligned_alloc(huge, (data + huge - 1) / huge * huge);
        if (!d)
                return -ENOMEM;
        madvise(d, (data + huge - 1) / huge * huge, MADV_HUGEPAGE);
        if (dt == DSE_DTYPE_BF16)
                for (size_t i = 0; i < data / 2; i++)
                        ((uint16_t *)d)[i] = (uint16_t)(0x3f00 + rnd() % 0x100);
        else if (dt == DSE_DTYPE_F32)
                for (size_t i = 0; i < data / 4; i++)
                        ((float *)d)[i] = 0.5f + (float)(rnd() % 1500) / 1000.0f;
        else
                for (size_t i = 0; i < data; i++)
                        d[i] = (uint8_t)rnd();
        m->w.data = d;
        m->bytes = data;
        if (quant) {
                float *sc = malloc(ng * sizeof(float));
                uint8_t *z = dt == DSE_DTYPE_Q4 ? malloc(ng) : NULL;
                if (!sc || (dt == DSE_DTYPE_Q4 && !z))
                        return -ENOMEM;
                for (size_t i = 0; i < ng; i++) {
                        sc[i] = 0.001f * (float)(1 + rnd() % 100);
                        if (z)
                                z[i] = (uint8_t)(rnd() % 16);
                }
                m->w.scale = sc;
                m->w.zero = z;
                m->bytes += ng * sizeof(float) + (z ? ng : 0);
        }
        return 0;
}

static void mat_free(struct mat *m) {
        free((void *)m->w.data);
        free((void *)m->w.scale);
        free((void *)m->w.zero);
}

/* ---- threads: a pass over rows split in T parts, or the probe over T slices ---------- */

struct job {
        const struct dse_kernels *k;
        const struct dse_qmat *w;
        const struct dse_xq *xq;
        const float *x; /* float activations (matvec, bf16act), when xq is NULL */
        dse_matmul_fn bf16act;
        float *y;
        int64_t ldy, r0, r1;
        const uint8_t *buf; /* probe */
        size_t len;
        int variant;
        double sink;
};

static void *run_kernel(void *arg) {
        struct job *j = arg;
        if (j->xq)
                j->k->matmul_xq[j->w->dtype](j->w, j->xq, j->y, j->ldy, j->r0, j->r1);
        else if (j->bf16act)
                j->bf16act(j->w, j->x, j->w->cols, 1, j->y, j->ldy, j->r0, j->r1);
        else
                j->k->matvec[j->w->dtype](j->w, j->x, j->y, j->r0, j->r1);
        return NULL;
}

static void *run_probe(void *arg) {
        struct job *j = arg;
        j->sink = (double)read_probe(j->buf, j->len, j->variant);
        return NULL;
}

static double run_threads(int T, struct job *jobs, void *(*fn)(void *)) {
        pthread_t th[16];
        double t0 = bench_now_s();
        for (int i = 1; i < T; i++)
                if (pthread_create(&th[i], NULL, fn, &jobs[i]) != 0)
                        abort();
        fn(&jobs[0]);
        for (int i = 1; i < T; i++)
                pthread_join(th[i], NULL);
        return bench_now_s() - t0;
}

/* GB/s of the best T-thread pass of each read_probe variant over the matrix's own data
 * (the same pages the kernels read); ret_variant: the variant that won. */
static double probe_gbs(int T, const struct mat *m, int reps, int *ret_variant) {
        size_t len = data_bytes(&m->w);
        size_t per = len / (size_t)T / 2048 * 2048; /* 8 streams of 256-byte steps: every byte read */
        struct job jobs[16];
        double best = 1e30;
        for (int v = 0; v < READ_PROBE_VARIANTS; v++) {
                for (int i = 0; i < T; i++)
                        jobs[i] = (struct job){.buf = (const uint8_t *)m->w.data + per * (size_t)i, .len = per, .variant = v};
                for (int r = 0; r < reps; r++) {
                        double t = run_threads(T, jobs, run_probe);
                        if (t < best) {
                                best = t;
                                *ret_variant = v;
                        }
                }
        }
        return (double)(per * (size_t)T) / best / 1e9;
}

/* Best wall seconds of a T-thread pass of n tokens (quantize_xq on one thread first, as
 * the forward pass does it). */
static double pass_s(const struct dse_kernels *k, const struct mat *m, int64_t n, int T, int reps, float *x,
                     void *xq_mem, float *y) {
        struct dse_xq xq;
        dse__xq_init(&xq, xq_mem, n, m->w.cols);
        struct job jobs[16];
        for (int i = 0; i < T; i++)
                jobs[i] = (struct job){.k = k, .w = &m->w, .xq = &xq, .y = y, .ldy = m->w.rows,
                                       .r0 = m->w.rows * i / T, .r1 = m->w.rows * (i + 1) / T};
        double best = 1e30;
        for (int r = 0; r < reps; r++) {
                double t0 = bench_now_s();
                k->quantize_xq(x, m->w.cols, &xq);
                run_threads(T, jobs, run_kernel);
                double t = bench_now_s() - t0;
                best = t < best ? t : best;
        }
        return best;
}

/* Best thread-CPU seconds of one single-thread call (the matrix already in cache). */
static double call_cpu_s(const struct dse_kernels *k, const struct mat *m, int64_t n, int reps, float *x,
                         void *xq_mem, float *y) {
        struct dse_xq xq;
        dse__xq_init(&xq, xq_mem, n, m->w.cols);
        k->quantize_xq(x, m->w.cols, &xq);
        k->matmul_xq[m->w.dtype](&m->w, &xq, y, m->w.rows, 0, m->w.rows); /* warm */
        double best = 1e30;
        for (int r = 0; r < reps; r++) {
                double t0 = bench_clock_s(CLOCK_THREAD_CPUTIME_ID);
                k->matmul_xq[m->w.dtype](&m->w, &xq, y, m->w.rows, 0, m->w.rows);
                double t = bench_clock_s(CLOCK_THREAD_CPUTIME_ID) - t0;
                best = t < best ? t : best;
        }
        return best;
}

/* --float: the float-activation kernels one token at a time (matvec, the decode path of
 * every matrix matmul_xq does not take; bf16act for BF16 where the CPU has vdpbf16ps)
 * streaming a matrix of about mb MB per format, per level, against the probe over that
 * matrix, best of reps. */
static void float_stream(const struct dse_cpu_info *cpu, int T, double mb, int reps, const float *x, float *y) {
        static const enum dse_dtype dts[] = {DSE_DTYPE_BF16, DSE_DTYPE_F32, DSE_DTYPE_Q8, DSE_DTYPE_Q4};
        static const char *const names[] = {"bf16", "f32", "q8 g32", "q4 g128"};
        static const int32_t groups[] = {0, 0, 32, 128};
        static const double bytes_per_col[] = {2, 4, 1 + 4.0 / 32, 0.5 + 5.0 / 128};
        enum dse_cpu_level levels[2] = {DSE_CPU_AVX2, DSE_CPU_AVX512};
        int n_lv = cpu->detected >= DSE_CPU_AVX512 ? 2 : 1;
        int64_t cols = 4096;
        printf("float activations, one token (matvec), %d thread(s), best of %d, GB/s of weights and of probe:\n", T,
               reps);
        for (size_t f = 0; f < sizeof dts / sizeof dts[0]; f++) {
                int64_t rows = (int64_t)(mb * 1e6 / (bytes_per_col[f] * (double)cols)) / 64 * 64;
                struct mat m;
                if (mat_new(&m, dts[f], rows, cols, groups[f]) < 0)
                        exit(1);
                int pv = 0;
                double probe = probe_gbs(T, &m, reps, &pv);
                printf("%-8s (%lldx%lld, %.0f MB) probe %.2f GB/s (%s):", names[f], (long long)rows, (long long)cols,
                       m.bytes / 1e6, probe, read_probe_name(pv));
                for (int l = 0; l < n_lv; l++) {
                        struct dse_kernels k;
                        dse__kernels_resolve_with(levels[l], l && cpu->avx512bf16 ? DSE_KFEAT_BF16 : 0, &k);
                        for (int act = 0; act < (dts[f] == DSE_DTYPE_BF16 && k.matmul_bf16act ? 2 : 1); act++) {
                                struct job jobs[16];
                                for (int i = 0; i < T; i++)
                                        jobs[i] = (struct job){.k = &k, .w = &m.w, .x = x, .y = y, .ldy = rows,
                                                               .bf16act = act ? k.matmul_bf16act : NULL,
                                                               .r0 = rows * i / T, .r1 = rows * (i + 1) / T};
                                double best = 1e30;
                                for (int r = 0; r < reps; r++) {
                                        double t = run_threads(T, jobs, run_kernel);
                                        best = t < best ? t : best;
                                }
                                double gbs = m.bytes / best / 1e9;
                                printf(" %s%s %.2f = %.2f", l ? "avx512" : "avx2", act ? "-bf16act" : "", gbs,
                                       gbs / probe);
                        }
                }
                printf("\n");
                mat_free(&m);
        }
}

int main(int argc, char **argv) {
        enum dse_dtype dt = DSE_DTYPE_Q4;
        int T = 1, reps = 5, float_only = 0;
        double mb = 256;
        for (int i = 1; i < argc; i += 2) {
                if (strcmp(argv[i], "--float") == 0) {
                        float_only = 1;
                        i--;
                } else if (i + 1 >= argc) {
                        fprintf(stderr, "dse-kernel-bench: %s needs a value\n", argv[i]);
                        return 2;
                } else if (strcmp(argv[i], "--format") == 0)
                        dt = strcmp(argv[i + 1], "q8") == 0 ? DSE_DTYPE_Q8 : DSE_DTYPE_Q4;
                else if (strcmp(argv[i], "--threads") == 0)
                        T = atoi(argv[i + 1]);
                else if (strcmp(argv[i], "--mb") == 0)
                        mb = atof(argv[i + 1]);
                else if (strcmp(argv[i], "--reps") == 0)
                        reps = atoi(argv[i + 1]);
                else {
                        fprintf(stderr, "usage: dse-kernel-bench [--format q4|q8] [--threads T] [--mb M] [--reps N] [--float]\n");
                        return 2;
                }
        }
        if (T < 1 || T > 16 || reps < 1 || mb < 1) {
                fprintf(stderr, "dse-kernel-bench: bad option\n");
                return 2;
        }
        struct dse_cpu_info cpu;
        if (dse_cpu_detect(&cpu, NULL) < 0)
                return 1;
        if (float_only) {
                /* y: as many rows as the Q4 matrix has (the most) */
                float *xf = malloc(4096 * sizeof(float)), *yf = malloc((size_t)(mb * 1e6 / 2048 + 64) * sizeof(float));
                for (int i = 0; i < 4096; i++)
                        xf[i] = (float)((int)(rnd() % 2001) - 1000) / 1000.0f;
                float_stream(&cpu, T, mb, reps, xf, yf);
                return 0;
        }
        int32_t group = dt == DSE_DTYPE_Q4 ? 128 : 32;
        const char *fmt = dt == DSE_DTYPE_Q4 ? "int4 g128" : "int8 g32";

        /* stream: cols 4096, rows for about mb MB */
        int64_t cols = 4096, row_bytes = dt == DSE_DTYPE_Q4 ? (int64_t)dse__q4_bytes(16, cols) / 16 + cols / 128 * 5
                                                             : cols + cols / 32 * 4;
        int64_t rows = (int64_t)(mb * 1e6) / row_bytes / 64 * 64;
        struct mat big, small;
        if (mat_new(&big, dt, rows, cols, group) < 0 || mat_new(&small, dt, 256, cols, group) < 0)
                return 1;
        int64_t nmax = 128;
        float *x = malloc((size_t)(nmax * cols) * sizeof(float));
        float *y = malloc((size_t)(nmax * rows) * sizeof(float));
        void *xq_mem = aligned_alloc(64, dse__xq_bytes(nmax, cols));
        for (int64_t i = 0; i < nmax * cols; i++)
                x[i] = (float)((int)(rnd() % 2001) - 1000) / 1000.0f;

        struct {
                const char *name;
                enum dse_cpu_level level;
                unsigned feat;
        } lv[] = {{"avx2", DSE_CPU_AVX2, 0},
                  {"avx512-vnni", DSE_CPU_AVX512, DSE_KFEAT_VNNI},
                  {"avx512-t8", DSE_CPU_AVX512, DSE_KFEAT_VNNI | DSE_KFEAT_T8},
                  {"avx512-amx", DSE_CPU_AVX512, DSE_KFEAT_VNNI | DSE_KFEAT_T8 | DSE_KFEAT_AMX}};
        int n_lv = cpu.detected >= DSE_CPU_AVX512 && cpu.avx512vnni ? 3 : 1;
        if (n_lv == 3 && cpu.amx_tile && cpu.amx_int8 && dse__kernels_amx_usable())
                n_lv = 4;

        int pv = 0;
        double probe = probe_gbs(T, &big, reps, &pv);
        printf("dse-kernel-bench: %s, stream matrix %lldx%lld (%.0f MB), %d thread(s), best of %d\n", fmt,
               (long long)rows, (long long)cols, big.bytes / 1e6, T, reps);
        printf("read probe (same run, %d thread(s), %s over the matrix's data): %.2f GB/s\n", T, read_probe_name(pv),
               probe);
        for (int l = 0; l < n_lv; l++) {
                struct dse_kernels k;
                dse__kernels_resolve_with(lv[l].level, lv[l].feat, &k);
                double t1 = pass_s(&k, &big, 1, T, reps, x, xq_mem, y);
                double t8 = pass_s(&k, &big, 8, T, reps, x, xq_mem, y);
                double gbs = big.bytes / t1 / 1e9;
                printf("%-12s stream n=1: %.2f GB/s = %.2f of probe; n=8: %.2f GB/s of weights, aggregate %.2fx n=1\n",
                       lv[l].name, gbs, gbs / probe, big.bytes / t8 / 1e9, 8 * t1 / t8);
        }
        double probe2 = probe_gbs(T, &big, reps, &pv);
        printf("read probe again: %.2f GB/s (%s)\n", probe2, read_probe_name(pv));
        printf("compute (256x%lld, in L2, 1 thread, GMAC per thread-CPU second; levels interleaved per rep):\n",
               (long long)cols);
        static const int64_t ns[] = {1, 2, 4, 8, 16, 32, 128};
        struct dse_kernels ks[4];
        double gm[4][7];
        for (int l = 0; l < n_lv; l++)
                dse__kernels_resolve_with(lv[l].level, lv[l].feat, &ks[l]);
        for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
                double best[4] = {1e30, 1e30, 1e30, 1e30};
                for (int r = 0; r < 4 * reps; r++)
                        for (int l = 0; l < n_lv; l++) {
                                double t = call_cpu_s(&ks[l], &small, ns[i], 1, x, xq_mem, y);
                                best[l] = t < best[l] ? t : best[l];
                        }
                for (int l = 0; l < n_lv; l++)
                        gm[l][i] = (double)(256 * cols * ns[i]) / best[l] / 1e9;
        }
        for (int l = 0; l < n_lv; l++) {
                printf("%-12s", lv[l].name);
                for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
                        printf(" n=%lld %.1f (%.2fx)", (long long)ns[i], gm[l][i], gm[l][i] / gm[l][0]);
                printf("\n");
        }
        for (int l = 1; l < n_lv; l++) {
                printf("%s/avx2:", lv[l].name);
                for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
                        printf(" n=%lld %.2fx", (long long)ns[i], gm[l][i] / gm[0][i]);
                printf("\n");
        }
        /* BF16 weights: float activations (matmul) against bf16 activations (vdpbf16ps) */
        struct dse_kernels kb;
        dse__kernels_resolve_with(cpu.detected, cpu.avx512bf16 ? DSE_KFEAT_BF16 : 0, &kb);
        struct dse_kernels kab;
        dse__kernels_resolve_with(cpu.detected, cpu.avx512bf16 ? DSE_KFEAT_BF16 | DSE_KFEAT_VNNI | DSE_KFEAT_AMX : 0, &kab);
        if (kb.matmul_bf16act) {
                uint16_t *wb = aligned_alloc(64, (size_t)(256 * cols) * 2);
                for (int64_t i = 0; i < 256 * cols; i++)
                        wb[i] = (uint16_t)(0x3c00 + rnd() % 0x300);
                struct dse_qmat w = {.dtype = DSE_DTYPE_BF16, .rows = 256, .cols = cols, .data = wb};
                printf("bf16 weights (256x%lld, in L2, 1 thread, GMAC per thread-CPU second; avx512):\n", (long long)cols);
                dse_matmul_fn fns[3] = {kb.matmul[DSE_DTYPE_BF16], kb.matmul_bf16act, kab.matmul_bf16act};
                const char *names[3] = {"float act", "bf16 act", "bf16 act+amx"};
                for (int f = 0; f < 3; f++) {
                        printf("%-12s", names[f]);
                        for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
                                double best = 1e30;
                                for (int r = 0; r < 4 * reps; r++) {
                                        double t0 = bench_clock_s(CLOCK_THREAD_CPUTIME_ID);
                                        fns[f](&w, x, cols, ns[i], y, 256, 0, 256);
                                        double t = bench_clock_s(CLOCK_THREAD_CPUTIME_ID) - t0;
                                        best = t < best ? t : best;
                                }
                                printf(" n=%lld %.1f", (long long)ns[i], (double)(256 * cols * ns[i]) / best / 1e9);
                        }
                        printf("\n");
                }
                free(wb);
        }
        return 0;
}
