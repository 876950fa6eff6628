/* dsvisor-bench kvtier (kv_tier_bench.c): time to first token with the KV disk tier. */
#ifndef DSV_BENCH_KV_TIER_H
#define DSV_BENCH_KV_TIER_H

#include "dse.h"

struct kv_tier_bench_opts {
        const char *tier_dir; /* where the tier files go (the cache's disk) */
        int prefix_tokens;    /* the shared prefix of the TTFT comparison */
        int chat_convs, chat_turns, chat_turn_tokens; /* the multi-turn replay */
};

/* Prints (or, json, one object) the TTFT of a prompt whose prefix is in the RAM pool,
 * only on the disk tier, and nowhere, in the same run; the read of the tier's bytes by
 * pread against mmap + copy; and a multi-turn chat replay through a pool too small for
 * it, with and without the tier. */
int kv_tier_bench_run(const struct dse_model *m, struct dse_pool *pool, const char *preset, const char *format,
                      int threads, int json, const struct kv_tier_bench_opts *opts);

#endif
