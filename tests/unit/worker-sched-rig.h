/* The scheduler test rig shared by test-worker-sched and test-worker-sched-alloc: the
 * llama3-rope-gqa fixture model (opened once), a KV pool, a batch and a scheduler whose
 * events are collected per request id. Include after t.h, from one file per test. */
#ifndef DSV_WORKER_SCHED_RIG_H
#define DSV_WORKER_SCHED_RIG_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dse.h"
#include "dsv_ipc.h"
#include "scheduler.h"

#define MAX_REQ 16
#define MAX_OUT 64

struct events {
        int32_t out[MAX_REQ][MAX_OUT]; /* by request id */
        int n_out[MAX_REQ];
        char reason[MAX_REQ][16];
        int error[MAX_REQ];            /* code + 1, 0: none */
        int n_final, n_error;
};

static inline void on_event(void *user, const struct dsv_ipc_msg *m) {
        struct events *ev = user;
        switch (m->type) {
        case DSV_IPC_TOKEN:
                if (m->u.token.id < MAX_REQ && ev->n_out[m->u.token.id] < MAX_OUT)
                        ev->out[m->u.token.id][ev->n_out[m->u.token.id]++] = m->u.token.token;
                break;
        case DSV_IPC_FINAL:
                if (m->u.final.id < MAX_REQ)
                        snprintf(ev->reason[m->u.final.id], 16, "%s", m->u.final.finish_reason);
                ev->n_final++;
                break;
        case DSV_IPC_ERROR:
                if (m->u.error.id < MAX_REQ)
                        ev->error[m->u.error.id] = (int)m->u.error.code + 1;
                ev->n_error++;
                break;
        default:
                break;
        }
}

static inline int64_t now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct rig {
        struct dse_model *m;
        struct dse_kv_cache *kv;
        struct dse_batch *b;
        struct sched *s;
        struct events ev;
        int vocab;
};

static struct dse_model *model;

static inline struct dse_model *fixture_model(void) {
        if (model)
                return model;
        char dir[1024], native[4096];
        snprintf(dir, sizeof dir, "%s/llama3-rope-gqa", t_fixture("models"));
        if (!getenv("DSV_CACHE_DIR") && getenv("DSV_BUILD_DIR")) {
                char cache[1100];
                snprintf(cache, sizeof cache, "%s/model-cache", getenv("DSV_BUILD_DIR"));
                setenv("DSV_CACHE_DIR", cache, 1);
        }
        struct dse_diag diag = {{0}};
        if (dse_model_resolve(dir, native, sizeof native, &diag) < 0 || dse_model_open(native, 0, &model, &diag) < 0)
                fprintf(stderr, "  fixture: %s\n", diag.msg);
        return model;
}

/* kv_blocks: pool size in blocks of 16 tokens. */
static inline int rig_init(struct rig *g, int max_batch, int budget, int kv_blocks, int n_ctx) {
        memset(g, 0, sizeof *g);
        if (!(g->m = fixture_model()))
                return -ENOENT;
        g->vocab = dse_model_vocab_size(g->m);
        struct dse_kv_cache *probe;
        int r = dse_kv_cache_new(g->m, 1 << 20, 16, 1, 16, &probe, NULL);
        if (r < 0)
                return r;
        size_t bb = dse_kv_cache_block_bytes(probe);
        dse_kv_cache_free(probe);
        if ((r = dse_kv_cache_new(g->m, bb * (size_t)kv_blocks, 16, max_batch, n_ctx, &g->kv, NULL)) < 0 ||
            (r = dse_batch_new(g->m, g->kv, NULL, &g->b, NULL)) < 0)
                return r;
        struct sched_config cfg = {max_batch, budget, n_ctx, 32};
        return sched_new(&cfg, g->m, NULL, g->kv, g->b, on_event, &g->ev, &g->s);
}

static inline void rig_done(struct rig *g) {
        sched_free(g->s);
        dse_batch_free(g->b);
        dse_kv_cache_free(g->kv);
}

static inline void prompt_for(int32_t *ids, int n, int vocab, int salt) {
        for (int i = 0; i < n; i++)
                ids[i] = (int32_t)((i * 131 + 7 + salt * 57) % vocab);
}

static inline int add(struct rig *g, uint64_t id, int n_prompt, int salt, int max_tokens, float temperature, uint64_t seed) {
        int32_t ids[256];
        prompt_for(ids, n_prompt, g->vocab, salt);
        struct dsv_ipc_request req = {.id = id, .input = DSV_IPC_INPUT_TOKENS, .max_tokens = max_tokens};
        dsv_ipc_sampling_init(&req.sampling);
        req.sampling.temperature = temperature;
        req.sampling.seed = seed;
        req.sampling.has_seed = 1;
        return sched_add(g->s, &req, ids, (size_t)n_prompt, now_ms());
}

static inline int run(struct rig *g, int max_steps) {
        int steps = 0;
        while (sched_busy(g->s) && steps < max_steps) {
                if (sched_step(g->s, now_ms()) < 0)
                        return -EIO;
                steps++;
        }
        return steps;
}

#endif
