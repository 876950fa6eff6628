/* dsvisor-bench model --threads 1,2: batch-1 decode at several thread counts in one
 * process, alternating, with the ratio to the first count, the read bandwidth at each
 * count in the same rounds, and where the time of each count goes (the pool's per-call
 * accounting: idle share per labelled call, and the serial part between the calls). */
#ifndef DSV_BENCH_THREAD_SCALING_H
#define DSV_BENCH_THREAD_SCALING_H

#include "dse.h"

struct thread_scaling_opts {
        const int *threads; /* thread counts, the first is the ratios' base */
        int n_threads;
        int steps;          /* timed decode steps per count per round */
        int rounds;
        enum dse_kv_dtype kv_dtype;
        int json;
};

/* One read pass on pool: bytes per second (the caller's probe over the weights). */
typedef double (*thread_scaling_probe_fn)(struct dse_pool *pool, void *ctx);

/* Runs the measurement and prints it (text, or one JSON object with --json). Returns 0 or
 * a negative errno (the failing call named on stderr). */
int thread_scaling_run(const struct dse_model *m, const struct thread_scaling_opts *o, thread_scaling_probe_fn probe,
                       void *probe_ctx);

#endif
