/* dse-kernel-bench: the integer kernels (quantize_xq + matmul_xq) alone, per CPU level,
 * against a read-bandwidth probe measured in the same run (issue 4, kernels).
 *
 *     dse-kernel-bench [--format q4|q8] [--threads T] [--mb M] [--reps N]
 *
 * Two measurements per kernel set (avx2; avx512 with VNNI, with VNNI and the 8-token layout
 * (DSE_KFEAT_T8), and with AMX on top, as far as the CPU has them):
 *   stream   one matrix of about M MB of weights (default 256, far past the caches),
 *            rows split over T threads, n = 1 and n = 8 tokens per pass: GB/s of weight
 *            bytes read (data + scales + zeros) per wall second, and that over the probe's
 *            GB/s (a T-thread streaming read of a buffer of the same size, best pass).
 *            n = 8 is shown as aggregate tokens/s over the n = 1 tokens/s.
 *   compute  a 256 x 4096 matrix that stays in L2, one thread, n = 1..32: GMAC/s of
 *            thread CPU time (so other jobs on a shared machine do not count), the
 *            measure of how much arithmetic each decoded weight block does.
 * Best of --reps passes everywhere. The probe and the kernels run in the same process
 * one after the other, so the ratio does not depend on a bandwidth typed in. */
#include <errno.h>
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/kernels.h"

static double now_s(clockid_t clk) {
        struct timespec ts;
        clock_gettime(clk, &ts);
        return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(void) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        return (uint32_t)(rng >> 11);
}

struct mat {
        struct dse_qmat w;
        size_t bytes; /* data + scales + zeros: what one pass reads */
};

static int mat_new(struct mat *m, enum dse_dtype dt, int64_t rows, int64_t cols, int32_t group) {
        memset(m, 0, sizeof *m);
        m->w.dtype = dt;
        m->w.rows = rows;
        m->w.cols = cols;
        m->w.group_size = group;
        m->w.n_groups = (cols + group - 1) / group;
        size_t data = dt == DSE_DTYPE_Q4 ? (size_t)(rows * ((cols + 1) / 2)) : (size_t)(rows * cols);
        size_t ng = (size_t)(rows * m->w.n_groups);
        uint8_t *d = aligned_alloc(64, (data + 63) & ~(size_t)63);
        float *s = malloc(ng * sizeof(float));
        uint8_t *z = malloc(ng);
        if (!d || !s || !z)
                return -ENOMEM;
        for (size_t i = 0; i < data; i++)
                d[i] = (uint8_t)rnd();
        for (size_t i = 0; i < ng; i++) {
                s[i] = 0.001f * (float)(1 + rnd() % 100);
                z[i] = (uint8_t)(rnd() % 16);
        }
        m->w.data = d;
        m->w.scale = s;
        m->w.zero = dt == DSE_DTYPE_Q4 ? z : NULL;
        if (dt != DSE_DTYPE_Q4)
                free(z);
        m->bytes = data + ng * sizeof(float) + (dt == DSE_DTYPE_Q4 ? ng : 0);
        return 0;
}

/* ---- threads: a pass over rows split in T parts, or the probe over T slices ---------- */

struct job {
        const struct dse_kernels *k;
        const struct dse_qmat *w;
        const struct dse_xq *xq;
        float *y;
        int64_t ldy, r0, r1;
        const uint8_t *buf; /* probe */
        size_t len;
        double sink;
};

static void *run_kernel(void *arg) {
        struct job *j = arg;
        j->k->matmul_xq[j->w->dtype](j->w, j->xq, j->y, j->ldy, j->r0, j->r1);
        return NULL;
}

static void *run_probe(void *arg) {
        struct job *j = arg;
        __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
        for (size_t i = 0; i + 128 <= j->len; i += 128) {
                a0 = _mm256_xor_si256(a0, _mm256_load_si256((const __m256i *)(j->buf + i)));
                a1 = _mm256_xor_si256(a1, _mm256_load_si256((const __m256i *)(j->buf + i + 32)));
                a2 = _mm256_xor_si256(a2, _mm256_load_si256((const __m256i *)(j->buf + i + 64)));
                a3 = _mm256_xor_si256(a3, _mm256_load_si256((const __m256i *)(j->buf + i + 96)));
        }
        __m256i a = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
        j->sink = (double)_mm256_extract_epi32(a, 0);
        return NULL;
}

static double run_threads(int T, struct job *jobs, void *(*fn)(void *)) {
        pthread_t th[16];
        double t0 = now_s(CLOCK_MONOTONIC);
        for (int i = 1; i < T; i++)
                if (pthread_create(&th[i], NULL, fn, &jobs[i]) != 0)
                        abort();
        fn(&jobs[0]);
        for (int i = 1; i < T; i++)
                pthread_join(th[i], NULL);
        return now_s(CLOCK_MONOTONIC) - t0;
}

static double probe_gbs(int T, size_t len, int reps) {
        uint8_t *buf = aligned_alloc(64, len);
        memset(buf, 1, len);
        struct job jobs[16];
        for (int i = 0; i < T; i++)
                jobs[i] = (struct job){.buf = buf + len / (size_t)T * (size_t)i, .len = len / (size_t)T};
        double best = 1e30;
        for (int r = 0; r < reps; r++) {
                double t = run_threads(T, jobs, run_probe);
                best = t < best ? t : best;
        }
        free(buf);
        return (double)len / best / 1e9;
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
                double t0 = now_s(CLOCK_MONOTONIC);
                k->quantize_xq(x, m->w.cols, &xq);
                run_threads(T, jobs, run_kernel);
                double t = now_s(CLOCK_MONOTONIC) - t0;
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
                double t0 = now_s(CLOCK_THREAD_CPUTIME_ID);
                k->matmul_xq[m->w.dtype](&m->w, &xq, y, m->w.rows, 0, m->w.rows);
                double t = now_s(CLOCK_THREAD_CPUTIME_ID) - t0;
                best = t < best ? t : best;
        }
        return best;
}

int main(int argc, char **argv) {
        enum dse_dtype dt = DSE_DTYPE_Q4;
        int T = 1, reps = 5;
        double mb = 256;
        for (int i = 1; i + 1 < argc; i += 2) {
                if (strcmp(argv[i], "--format") == 0)
                        dt = strcmp(argv[i + 1], "q8") == 0 ? DSE_DTYPE_Q8 : DSE_DTYPE_Q4;
                else if (strcmp(argv[i], "--threads") == 0)
                        T = atoi(argv[i + 1]);
                else if (strcmp(argv[i], "--mb") == 0)
                        mb = atof(argv[i + 1]);
                else if (strcmp(argv[i], "--reps") == 0)
                        reps = atoi(argv[i + 1]);
                else {
                        fprintf(stderr, "usage: dse-kernel-bench [--format q4|q8] [--threads T] [--mb M] [--reps N]\n");
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
        int32_t group = dt == DSE_DTYPE_Q4 ? 128 : 32;
        const char *fmt = dt == DSE_DTYPE_Q4 ? "int4 g128" : "int8 g32";

        /* stream: cols 4096, rows for about mb MB */
        int64_t cols = 4096, row_bytes = dt == DSE_DTYPE_Q4 ? cols / 2 + cols / 128 * 5 : cols + cols / 32 * 4;
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

        double probe = probe_gbs(T, big.bytes, reps);
        printf("dse-kernel-bench: %s, stream matrix %lldx%lld (%.0f MB), %d thread(s), best of %d\n", fmt,
               (long long)rows, (long long)cols, big.bytes / 1e6, T, reps);
        printf("read probe (same run, %d thread(s)): %.2f GB/s\n", T, probe);
        for (int l = 0; l < n_lv; l++) {
                struct dse_kernels k;
                dse__kernels_resolve_with(lv[l].level, lv[l].feat, &k);
                double t1 = pass_s(&k, &big, 1, T, reps, x, xq_mem, y);
                double t8 = pass_s(&k, &big, 8, T, reps, x, xq_mem, y);
                double gbs = big.bytes / t1 / 1e9;
                printf("%-12s stream n=1: %.2f GB/s = %.2f of probe; n=8: %.2f GB/s of weights, aggregate %.2fx n=1\n",
                       lv[l].name, gbs, gbs / probe, big.bytes / t8 / 1e9, 8 * t1 / t8);
        }
        double probe2 = probe_gbs(T, big.bytes, reps);
        printf("read probe again: %.2f GB/s\n", probe2);
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
                                        double t0 = now_s(CLOCK_THREAD_CPUTIME_ID);
                                        fns[f](&w, x, cols, ns[i], y, 256, 0, 256);
                                        double t = now_s(CLOCK_THREAD_CPUTIME_ID) - t0;
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
