/* dsvisor-bench spec (spec_bench.c): speculative decoding's costs and gains. */
#ifndef DSV_BENCH_SPEC_H
#define DSV_BENCH_SPEC_H

#include "dse.h"

struct spec_bench_opts {
        const char *serve_model; /* the model the worker serves for acceptance and speed-up */
        const char *draft_model; /* a draft model for the served one (--draft-model), or NULL */
        const char *held_out;    /* text file, one passage per line */
        int n_passages;          /* passages per task */
        int max_tokens;          /* per request */
        int repeat;              /* rounds of the three tasks, 1..SPEC_BENCH_MAX_REPEAT */
};

#define SPEC_BENCH_MAX_REPEAT 16

/* Prints (or, json, adds to one object) verify_cost on model m, then acceptance and
 * speed-up of n-gram, (for a model with an MTP module) MTP and (given one) draft-model drafting through
 * dsvisor-worker on opts->serve_model. */
int spec_bench_run(const struct dse_model *m, struct dse_pool *pool, const char *preset, const char *format,
                   int threads, int json, const struct spec_bench_opts *opts);

#endif
