/* dsvisor-bench model --threads 1,2 (thread_scaling.h). Every round runs each thread
 * count in turn (the order reversed every other round, so neither count always follows
 * the other): one read pass of the caller's probe, then a batch-1 decode whose steps
 * give the tok/s, then as many steps again with the pool's call accounting on
 * (dse_pool_timing_start) and the main thread's clocks read around each step. The
 * accounting has a cost (two clock reads per thread per call), so the tok/s are taken
 * from the steps without it.
 *
 * Per labelled call kind (the MoE regions are labelled by the engine, the rest is
 * "other"), over the accounting steps of all rounds:
 *   idle       1 - the threads' wall time inside the task / (threads x the call's wall
 *              time): the time a thread waits for the others at the join, as the last
 *              measurements of the 2-thread loss defined it; on a loaded host it also
 *              holds the time a thread had no CPU
 *   imbalance  1 - the threads' CPU time inside the task / (threads x the CPU time of
 *              the busiest): the same for CPU time, which a thread without a CPU does not
 *              accrue, so it is the split's own unevenness as long as every thread runs
 *   absent     the share of (call, thread) pairs where the thread did not run the task
 *              (dse_pool_run_shared: the caller finished before it started)
 *   start      the mean time from a call's start to a helper thread's entry into it
 *   woken      the share of those entries from a futex sleep (the spin had run out), the
 *              expensive kind of wake-up
 * and between the calls:
 *   serial     the main thread's time outside the pool's calls (norms, RoPE, routing,
 *              gathering, sampling): wall and CPU per step; its share of the 1-thread
 *              step's CPU is the Amdahl serial fraction s, and 1 / (s + (1 - s) / T) the
 *              ratio T threads could reach with no idle time at all. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_sort.h"
#include "thread_scaling.h"
#include "bench_clock.h"

#define MAX_COUNTS 8
#define MAX_ROUNDS 64

struct count_stats {
        int threads;
        struct dse_pool *pool;
        double tok_s[MAX_ROUNDS], read_bw[MAX_ROUNDS];
        /* the accounting steps of every round, summed */
        long acc_steps;
        double step_wall_ns, step_cpu_ns; /* the main thread's */
        int n_ph;
        struct dse_pool_phase_timing ph[DSE_POOL_TIMING_PHASES];
};

static void merge_phases(struct count_stats *c, const struct dse_pool_phase_timing *ph, int n) {
        for (int i = 0; i < n; i++) {
                int j = 0;
                while (j < c->n_ph && strcmp(c->ph[j].label, ph[i].label) != 0)
                        j++;
                if (j == c->n_ph) {
                        if (j == DSE_POOL_TIMING_PHASES)
                                continue; /* the pool keeps no more labels than this either */
                        c->ph[c->n_ph++] = (struct dse_pool_phase_timing){.label = ph[i].label};
                }
                struct dse_pool_phase_timing *d = &c->ph[j];
                d->calls += ph[i].calls;
                d->wall_ns += ph[i].wall_ns;
                d->caller_cpu_ns += ph[i].caller_cpu_ns;
                d->task_wall_ns += ph[i].task_wall_ns;
                d->task_cpu_ns += ph[i].task_cpu_ns;
                d->task_cpu_max_ns += ph[i].task_cpu_max_ns;
                d->threads_absent += ph[i].threads_absent;
                d->start_delay_ns += ph[i].start_delay_ns;
                d->threads_woken += ph[i].threads_woken;
        }
}

/* One sequence over a paged cache sized for 1 + 2 * steps tokens: one untimed step, steps
 * timed steps (*ret_tok_s), then steps accounted ones added to c. */
static int decode(const struct dse_model *m, struct count_stats *c, int steps, enum dse_kv_dtype kv_dtype,
                  int round, double *ret_tok_s) {
        struct dse_diag d = {0};
        struct dse_kv_cache *kv = NULL;
        struct dse_batch *b = NULL;
        int vocab = dse_model_vocab_size(m), block = 16, n_ctx = 1 + 2 * steps, r;
        float *logits = malloc((size_t)vocab * sizeof(float));
        if (!logits)
                return -ENOMEM;
        const char *what = "kv cache";
        if ((r = dse_kv_cache_new_typed(m, kv_dtype, 64u << 20, block, 1, n_ctx, &kv, &d)) < 0)
                goto out;
        size_t budget = dse_kv_cache_block_bytes(kv) * (size_t)((n_ctx + block - 1) / block);
        dse_kv_cache_free(kv);
        kv = NULL;
        if ((r = dse_kv_cache_new_typed(m, kv_dtype, budget, block, 1, n_ctx, &kv, &d)) < 0)
                goto out;
        what = "batch";
        if ((r = dse_batch_new(m, kv, c->pool, &b, &d)) < 0)
                goto out;
        what = "kv seq";
        if ((r = dse_kv_seq_open(kv)) < 0)
                goto out;
        int32_t tok = 0;
        struct dse_batch_seq seq = {.seq = r, .tokens = &tok, .n_tokens = 1, .logits = logits};
        uint64_t rng = 0x9e3779b97f4a7c15ull * (uint64_t)(round + 1);
        double t0 = 0, cpu0 = 0;
        what = "decode step";
        for (int step = 0; step <= 2 * steps; step++) {
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                tok = (int32_t)((rng >> 33) % (uint64_t)vocab);
                if (step == 1)
                        t0 = bench_now_s();
                if (step == steps + 1) {
                        *ret_tok_s = steps / (bench_now_s() - t0);
                        dse_pool_timing_start(c->pool);
                }
                double w = 1e9 * bench_clock_s(CLOCK_MONOTONIC), cpu = 1e9 * bench_clock_s(CLOCK_THREAD_CPUTIME_ID);
                if (step == steps + 1)
                        cpu0 = cpu;
                if ((r = dse_batch_step(b, &seq, 1, &d)) < 0)
                        goto out;
                if (step > steps) {
                        c->step_wall_ns += 1e9 * bench_clock_s(CLOCK_MONOTONIC) - w;
                        c->acc_steps++;
                }
        }
        c->step_cpu_ns += 1e9 * bench_clock_s(CLOCK_THREAD_CPUTIME_ID) - cpu0;
        dse_pool_timing_stop(c->pool);
        struct dse_pool_phase_timing ph[DSE_POOL_TIMING_PHASES];
        int n = dse_pool_timing_read(c->pool, ph, DSE_POOL_TIMING_PHASES);
        merge_phases(c, ph, n < DSE_POOL_TIMING_PHASES ? n : DSE_POOL_TIMING_PHASES);
        r = 0;
out:
        if (r < 0)
                fprintf(stderr, "dsvisor-bench: %d threads: %s: %s%s%s\n", c->threads, what, strerror(-r),
                        d.msg[0] ? ": " : "", d.msg);
        dse_batch_free(b);
        dse_kv_cache_free(kv);
        free(logits);
        return r;
}

/* CPUs sharing CPU 0's core by the kernel's topology (sysfs thread_siblings_list, e.g.
 * "0-1" or "0,2"; a VM shows what its hypervisor tells it), 0 if unreadable. Two threads
 * on one core share its caches and memory requests, so a memory-bound decode cannot
 * double there whatever the split. */
static int core0_threads(void) {
        FILE *f = fopen("/sys/devices/system/cpu/cpu0/topology/thread_siblings_list", "r");
        char buf[256];
        int n = 0;
        if (!f)
                return 0;
        if (fgets(buf, sizeof buf, f)) {
                char *p = buf;
                while (*p >= '0' && *p <= '9') {
                        long a = strtol(p, &p, 10), b = a;
                        if (*p == '-')
                                b = strtol(p + 1, &p, 10);
                        n += b >= a ? (int)(b - a + 1) : 0;
                        if (*p == ',')
                                p++;
                }
        }
        fclose(f);
        return n;
}

static double median(double *v, int n) {
        qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
        return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double mean(const double *v, int n) {
        double s = 0;
        for (int i = 0; i < n; i++)
                s += v[i];
        return s / n;
}

/* The per-step figures of one count's accounting. */
struct acc_summary {
        double step_wall_us, main_cpu_us, serial_wall_us, serial_cpu_us;
};

static struct acc_summary summarize(const struct count_stats *c) {
        double calls_wall = 0, calls_cpu = 0, steps = (double)c->acc_steps;
        for (int i = 0; i < c->n_ph; i++) {
                calls_wall += (double)c->ph[i].wall_ns;
                calls_cpu += (double)c->ph[i].caller_cpu_ns;
        }
        return (struct acc_summary){.step_wall_us = c->step_wall_ns / steps / 1e3,
                                    .main_cpu_us = c->step_cpu_ns / steps / 1e3,
                                    .serial_wall_us = (c->step_wall_ns - calls_wall) / steps / 1e3,
                                    .serial_cpu_us = (c->step_cpu_ns - calls_cpu) / steps / 1e3};
}

static double share(double part, double whole) {
        return whole > 0 ? part / whole : 0;
}

static void phase_figures(const struct count_stats *c, const struct dse_pool_phase_timing *p, double ret[8]) {
        double steps = (double)c->acc_steps, T = c->threads;
        ret[0] = (double)p->calls / steps;
        ret[1] = (double)p->wall_ns / steps / 1e3;
        ret[2] = (double)p->task_cpu_ns / steps / 1e3;
        ret[3] = 1 - share((double)p->task_wall_ns, T * (double)p->wall_ns);
        ret[4] = 1 - share((double)p->task_cpu_ns, T * (double)p->task_cpu_max_ns);
        ret[5] = share((double)p->threads_absent, T * (double)p->calls);
        double helpers = (T - 1) * (double)p->calls - (double)p->threads_absent; /* helper runs, roughly */
        ret[6] = helpers > 0 ? (double)p->start_delay_ns / helpers / 1e3 : 0;
        ret[7] = share((double)p->threads_woken, helpers);
}

static void print_text(struct count_stats *cs, const struct thread_scaling_opts *o, double s_amdahl) {
        int R = o->rounds;
        printf("thread scaling: batch-1 decode, %d rounds of %d timed steps per thread count, the counts alternating; "
               "%d hardware thread(s) on CPU 0's core\n", R, o->steps, core0_threads());
        for (int k = 0; k < o->n_threads; k++) {
                printf("threads %d: decode tok/s", cs[k].threads);
                for (int i = 0; i < R; i++)
                        printf(" %.2f", cs[k].tok_s[i]);
                printf(" (mean %.2f); read GB/s", mean(cs[k].tok_s, R));
                for (int i = 0; i < R; i++)
                        printf(" %.2f", cs[k].read_bw[i] / 1e9);
                printf("\n");
        }
        for (int k = 1; k < o->n_threads; k++) {
                double dr[MAX_ROUNDS], br[MAX_ROUNDS];
                printf("%d threads / %d: decode", cs[k].threads, cs[0].threads);
                for (int i = 0; i < R; i++) {
                        dr[i] = cs[k].tok_s[i] / cs[0].tok_s[i];
                        br[i] = cs[k].read_bw[i] / cs[0].read_bw[i];
                        printf(" %.3f", dr[i]);
                }
                printf(" (median %.3f); read bandwidth", median(dr, R));
                for (int i = 0; i < R; i++)
                        printf(" %.3f", br[i]);
                printf(" (median %.3f)\n", median(br, R));
        }
        printf("where the time goes (accounting steps; per step; idle = join wait / call time, imbalance = the "
               "same in CPU time, absent = threads that did not run a call, start = a helper's start after the call's, "
               "woken = helpers that had gone to sleep):\n");
        for (int k = 0; k < o->n_threads; k++) {
                struct count_stats *c = &cs[k];
                struct acc_summary a = summarize(c);
                printf("  %d thread%s: step %.0f us wall, main thread %.0f us CPU\n", c->threads,
                       c->threads > 1 ? "s" : "", a.step_wall_us, a.main_cpu_us);
                printf("    %-34s %7s %10s %12s %6s %9s %6s %9s %6s\n", "call", "calls", "wall us", "task CPU us",
                       "idle", "imbalance", "absent", "start us", "woken");
                for (int i = 0; i < c->n_ph; i++) {
                        double f[8];
                        phase_figures(c, &c->ph[i], f);
                        printf("    %-34s %7.1f %10.0f %12.0f %5.1f%% %8.1f%% %5.1f%% %9.1f %5.1f%%\n", c->ph[i].label,
                               f[0], f[1], f[2], 100 * f[3], 100 * f[4], 100 * f[5], f[6], 100 * f[7]);
                }
                printf("    %-34s %7s %10.0f %12.0f  (%.1f%% of the step's wall time, %.1f%% of the main thread's "
                       "CPU)\n", "serial, between the calls", "", a.serial_wall_us, a.serial_cpu_us,
                       100 * share(a.serial_wall_us, a.step_wall_us), 100 * share(a.serial_cpu_us, a.main_cpu_us));
        }
        if (s_amdahl >= 0) {
                printf("Amdahl: serial fraction %.4f of the 1-thread step's CPU; with no idle time", s_amdahl);
                for (int k = 0; k < o->n_threads; k++)
                        if (cs[k].threads > 1)
                                printf(" %d threads could reach %.3fx", cs[k].threads,
                                       1 / (s_amdahl + (1 - s_amdahl) / cs[k].threads));
                printf("\n");
        }
}

static void print_json(struct count_stats *cs, const struct thread_scaling_opts *o, double s_amdahl) {
        int R = o->rounds;
        printf("{\"mode\":\"thread_scaling\",\"rounds\":%d,\"steps\":%d,\"core0_threads\":%d,\"counts\":[", R,
               o->steps, core0_threads());
        for (int k = 0; k < o->n_threads; k++) {
                struct count_stats *c = &cs[k];
                struct acc_summary a = summarize(c);
                double dr[MAX_ROUNDS], br[MAX_ROUNDS];
                for (int i = 0; i < R; i++) {
                        dr[i] = c->tok_s[i] / cs[0].tok_s[i];
                        br[i] = c->read_bw[i] / cs[0].read_bw[i];
                }
                printf("%s{\"threads\":%d,\"decode_tok_s\":[", k ? "," : "", c->threads);
                for (int i = 0; i < R; i++)
                        printf("%s%.3f", i ? "," : "", c->tok_s[i]);
                printf("],\"read_bw_bytes_per_s\":[");
                for (int i = 0; i < R; i++)
                        printf("%s%.0f", i ? "," : "", c->read_bw[i]);
                printf("],\"decode_ratio_median\":%.4f,\"read_ratio_median\":%.4f,\"step_wall_us\":%.1f,"
                       "\"main_cpu_us\":%.1f,\"serial_wall_us\":%.1f,\"serial_cpu_us\":%.1f,\"calls\":[",
                       median(dr, R), median(br, R), a.step_wall_us, a.main_cpu_us, a.serial_wall_us, a.serial_cpu_us);
                for (int i = 0; i < c->n_ph; i++) {
                        double f[8];
                        phase_figures(c, &c->ph[i], f);
                        printf("%s{\"label\":\"%s\",\"calls_per_step\":%.2f,\"wall_us\":%.1f,\"task_cpu_us\":%.1f,"
                               "\"idle\":%.4f,\"imbalance\":%.4f,\"absent\":%.4f,\"start_delay_us\":%.2f,"
                               "\"woken\":%.4f}", i ? "," : "", c->ph[i].label, f[0], f[1], f[2], f[3], f[4], f[5], f[6],
                               f[7]);
                }
                printf("]}");
        }
        printf("],\"amdahl_serial_fraction\":%.5f}\n", s_amdahl);
}

int thread_scaling_run(const struct dse_model *m, const struct thread_scaling_opts *o, thread_scaling_probe_fn probe,
                       void *probe_ctx) {
        if (o->n_threads < 2 || o->n_threads > MAX_COUNTS || o->rounds < 1 || o->rounds > MAX_ROUNDS || o->steps < 1)
                return -EINVAL;
        struct count_stats *cs = calloc((size_t)o->n_threads, sizeof *cs);
        if (!cs)
                return -ENOMEM;
        int r = 0;
        for (int k = 0; k < o->n_threads && r == 0; k++) {
                cs[k].threads = o->threads[k];
                if ((r = dse_pool_new(o->threads[k], NULL, 0, &cs[k].pool)) < 0)
                        fprintf(stderr, "dsvisor-bench: a pool of %d threads: %s\n", o->threads[k], strerror(-r));
        }
        for (int round = 0; round < o->rounds && r == 0; round++)
                for (int i = 0; i < o->n_threads && r == 0; i++) {
                        struct count_stats *c = &cs[round % 2 ? o->n_threads - 1 - i : i];
                        c->read_bw[round] = probe(c->pool, probe_ctx);
                        r = decode(m, c, o->steps, o->kv_dtype, round, &c->tok_s[round]);
                }
        if (r == 0) {
                double s_amdahl = -1;
                for (int k = 0; k < o->n_threads; k++)
                        if (cs[k].threads == 1) {
                                struct acc_summary a = summarize(&cs[k]);
                                s_amdahl = share(a.serial_cpu_us, a.main_cpu_us);
                        }
                if (o->json)
                        print_json(cs, o, s_amdahl);
                else
                        print_text(cs, o, s_amdahl);
        }
        for (int k = 0; k < o->n_threads; k++)
                dse_pool_free(cs[k].pool);
        free(cs);
        return r;
}
