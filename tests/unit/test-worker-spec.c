/* Speculative decoding in the scheduler (n-gram drafts): a request's tokens are the
 * same with and without speculation, greedy on every model fixture and seeded sampling
 * with every sampler option and penalty, alone and in a batch of 8, with identical
 * log-probabilities; under sampling, the token distribution over 2,000 seeds per side
 * passes a chi-square test of homogeneity against plain decoding's over other seeds;
 * drafts are really proposed, accepted and rejected; every KV block is back after the
 * requests end; the draft length adapts to acceptance and respects its bounds; a drafter
 * plugged through its ops table (all drafts right, all wrong) keeps the output and sees
 * its hooks called. MTP drafts (the bundled model, the FP8 fixture with a module) keep
 * the output too, alone and in a batch of 8, greedy and seeded, under preemption and
 * with prefix-cache hits; a model without a module refuses MTP. A draft model (the same
 * model in int8) keeps the greedy output the same ways; under sampling its drafts are
 * draws from its own distribution, so a seed's tokens are its own (the same alone, in a
 * batch, under preemption) and their distribution is the target's by a chi-square
 * goodness-of-fit test against the exact target probabilities; the rule itself, integrated
 * over its draws, emits p; a draft model whose tokenizer differs is refused. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dse.h"
#include "dsv_ipc.h"
#include "draft_drafter.h"
#include "mtp_drafter.h"
#include "scheduler.h"
#include "speculate.h"
#include "t.h"
#include "fixture-models.h"

#define MAX_REQ 2048
#define MAX_OUT 48
#define TOP 4

struct events {
        int32_t out[MAX_REQ][MAX_OUT];
        float lp[MAX_REQ][MAX_OUT];
        struct dsv_ipc_logprob top[MAX_REQ][MAX_OUT][TOP];
        int n_out[MAX_REQ];
        int n_final, n_error;
};

static void on_event(void *user, const struct dsv_ipc_msg *m) {
        struct events *ev = user;
        if (m->type == DSV_IPC_TOKEN && m->u.token.id < MAX_REQ) {
                uint64_t id = m->u.token.id;
                int n = ev->n_out[id];
                if (n < MAX_OUT) {
                        ev->out[id][n] = m->u.token.token;
                        ev->lp[id][n] = m->u.token.n_top ? m->u.token.logprob : 0;
                        for (size_t j = 0; j < m->u.token.n_top && j < TOP; j++)
                                ev->top[id][n][j] = m->u.token.top[j];
                        ev->n_out[id]++;
                }
        } else if (m->type == DSV_IPC_FINAL) {
                ev->n_final++;
        } else if (m->type == DSV_IPC_ERROR) {
                ev->n_error++;
        }
}

static int64_t now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct rig {
        struct dse_kv_cache *kv;
        struct dse_batch *b;
        struct sched *s;
        struct events *ev;
        int vocab;
        struct spec_mtp mtp; /* the drafter of SPEC_MTP */
        struct spec_draft draft; /* the drafter of SPEC_DRAFT */
        char err[256];
};

static const struct spec_config ngram = {SPEC_NGRAM, 1, 4, 0, 0};
static const struct spec_config off = {SPEC_OFF, 1, 4, 0, 0};
static const struct spec_config mtp = {SPEC_MTP, 1, 4, 0, 0};
static const struct spec_config draft = {SPEC_DRAFT, 1, 4, 0, 0};

/* The draft model of SPEC_DRAFT on a rig over target m, its cache sized as the worker
 * sizes it for the rig's pool. */
static int rig_attach_draft(struct rig *g, struct dse_model *m, struct dse_model *draft_model, int max_batch,
                            const struct spec_config *spec) {
        struct dse_kv_stats st;
        dse_kv_cache_stats(g->kv, &st);
        struct spec_draft_config dc = {m, "target", "draft", dse_kv_cache_dtype(g->kv), max_batch, 160,
                                       spec_draft_kv_tokens((size_t)st.n_blocks * 16, max_batch, spec->k_max, 16), NULL};
        int r = spec_draft_init(&g->draft, draft_model, &dc, g->err, sizeof g->err);
        return r < 0 ? r : spec_draft_attach(&g->draft, g->s, spec, g->err, sizeof g->err);
}

/* draft_model: SPEC_DRAFT's draft model, else unused. */
static int rig_init_with(struct rig *g, struct dse_model *m, struct dse_model *draft_model, int max_batch,
                         const struct spec_config *spec) {
        memset(g, 0, sizeof *g);
        g->vocab = dse_model_vocab_size(m);
        g->ev = calloc(1, sizeof *g->ev);
        struct dse_kv_cache *probe;
        int r = g->ev ? dse_kv_cache_new(m, 1 << 20, 16, 1, 16, &probe, NULL) : -ENOMEM;
        if (r < 0)
                return r;
        size_t bb = dse_kv_cache_block_bytes(probe);
        dse_kv_cache_free(probe);
        struct sched_config cfg = {max_batch, 256, 160, MAX_REQ};
        if ((r = dse_kv_cache_new(m, bb * 96, 16, max_batch, 160, &g->kv, NULL)) < 0 ||
            (r = dse_batch_new(m, g->kv, NULL, &g->b, NULL)) < 0 ||
            (r = sched_new(&cfg, m, NULL, g->kv, g->b, on_event, g->ev, &g->s)) < 0)
                return r;
        if (spec->method == SPEC_MTP)
                return spec_mtp_attach(&g->mtp, g->s, g->b, g->kv, spec, g->err, sizeof g->err);
        if (spec->method == SPEC_DRAFT)
                return rig_attach_draft(g, m, draft_model, max_batch, spec);
        return sched_set_speculation(g->s, spec);
}

static int rig_init(struct rig *g, struct dse_model *m, int max_batch, const struct spec_config *spec) {
        return rig_init_with(g, m, NULL, max_batch, spec);
}

static void rig_done(struct rig *g) {
        sched_free(g->s);
        spec_draft_done(&g->draft);
        dse_batch_free(g->b);
        dse_kv_cache_free(g->kv);
        free(g->ev);
}

static int run(struct rig *g) {
        for (int steps = 0; sched_busy(g->s); steps++)
                if (steps > 100000 || sched_step(g->s, now_ms()) < 0)
                        return -EIO;
        return 0;
}

/* A prompt that repeats itself, so n-gram lookup has matches from the first step:
 * a salted stem, then the model's own greedy continuation of it (random fixtures fall
 * into loops), which the drafts then mostly predict. */
struct params {
        float temperature, top_p, min_p, rep, presence, frequency;
        int top_k, logprobs, max_tokens;
};

static int add(struct rig *g, uint64_t id, const int32_t *prompt, int n, const struct params *p, uint64_t seed) {
        struct dsv_ipc_request req = {.id = id, .input = DSV_IPC_INPUT_TOKENS, .max_tokens = p->max_tokens};
        dsv_ipc_sampling_init(&req.sampling);
        req.sampling.temperature = p->temperature;
        req.sampling.top_k = p->top_k;
        req.sampling.top_p = p->top_p > 0 ? p->top_p : 1.0f;
        req.sampling.min_p = p->min_p;
        req.sampling.repetition_penalty = p->rep > 0 ? p->rep : 1.0f;
        req.sampling.presence_penalty = p->presence;
        req.sampling.frequency_penalty = p->frequency;
        req.sampling.seed = seed;
        req.sampling.has_seed = 1;
        req.logprobs = p->logprobs;
        return sched_add(g->s, &req, prompt, (size_t)n, now_ms());
}

static void stem(int32_t *ids, int n, int vocab, int salt) {
        for (int i = 0; i < n; i++)
                ids[i] = (int32_t)((i % 5) * 41 + 3 + salt * 17) % vocab;
}

/* 8 prompts of 10..31 tokens: the repeating stem of request i. */
static int prompt_len(int i) {
        return 10 + (i * 7) % 22;
}

static void outputs_equal(const struct events *a, const struct events *b, int n_req, int with_logprobs) {
        for (int i = 0; i < n_req; i++) {
                ASSERT_EQ(a->n_out[i], b->n_out[i]);
                for (int t = 0; t < a->n_out[i]; t++) {
                        ASSERT_EQ(a->out[i][t], b->out[i][t]);
                        if (!with_logprobs)
                                continue;
                        ASSERT_FLOAT_EQ(a->lp[i][t], b->lp[i][t]);
                        for (int j = 0; j < TOP; j++) {
                                ASSERT_EQ(a->top[i][t][j].token, b->top[i][t][j].token);
                                ASSERT_FLOAT_EQ(a->top[i][t][j].logprob, b->top[i][t][j].logprob);
                        }
                }
        }
}

/* Whether speculation keeps the plain tokens seed for seed: always, except a draft
 * model under sampling, whose drafts are draws from its own distribution q weighed by
 * the standard rule (the same distribution as plain decoding, another coupling of the
 * draws: draft_model_sampling_matches_target_chi_square tests it), and whose tokens are
 * then their seed's alone, in a batch, under preemption. */
static int keeps_plain_draws(const struct params *p, const struct spec_config *spec) {
        return spec->method != SPEC_DRAFT || p->temperature <= 0;
}

/* 8 requests: plain one at a time, speculative one at a time, speculative all in one
 * batch: the same tokens (and logprobs); under sampled drafting the speculative ones
 * alone and in the batch. Returns the speculative batch's counters. */
static void spec_equals_plain_with(struct dse_model *m, struct dse_model *draft_model, const struct params *p,
                                   const struct spec_config *spec, struct spec_stats *ret) {
        struct events *plain = calloc(1, sizeof *plain), *alone = calloc(1, sizeof *alone);
        ASSERT_TRUE(plain && alone);
        int32_t ids[64];
        for (int pass = 0; pass < 2; pass++)
                for (int i = 0; i < 8; i++) {
                        struct rig g;
                        ASSERT_OK(rig_init_with(&g, m, draft_model, 8, pass == 0 ? &off : spec));
                        stem(ids, prompt_len(i), g.vocab, i);
                        ASSERT_OK(add(&g, (uint64_t)i, ids, prompt_len(i), p, 500 + (uint64_t)i));
                        ASSERT_OK(run(&g));
                        struct events *dst = pass == 0 ? plain : alone;
                        memcpy(dst->out[i], g.ev->out[i], sizeof dst->out[i]);
                        memcpy(dst->lp[i], g.ev->lp[i], sizeof dst->lp[i]);
                        memcpy(dst->top[i], g.ev->top[i], sizeof dst->top[i]);
                        dst->n_out[i] = g.ev->n_out[i];
                        rig_done(&g);
                }
        struct rig g;
        ASSERT_OK(rig_init_with(&g, m, draft_model, 8, spec));
        for (int i = 0; i < 8; i++) {
                stem(ids, prompt_len(i), g.vocab, i);
                ASSERT_OK(add(&g, (uint64_t)i, ids, prompt_len(i), p, 500 + (uint64_t)i));
        }
        ASSERT_OK(run(&g));
        ASSERT_EQ(g.ev->n_final, 8);
        if (keeps_plain_draws(p, spec))
                outputs_equal(plain, alone, 8, p->logprobs > 0);
        outputs_equal(keeps_plain_draws(p, spec) ? plain : alone, g.ev, 8, p->logprobs > 0);
        struct sched_stats st;
        sched_get_stats(g.s, &st);
        ASSERT_EQ(st.kv_blocks_used, 0);
        if (spec->method == SPEC_DRAFT)
                ASSERT_EQ(spec_draft_blocks_used(&g.draft), 0);
        *ret = st.spec;
        rig_done(&g);
        free(plain);
        free(alone);
}

static void spec_equals_plain(struct dse_model *m, const struct params *p, const struct spec_config *spec,
                              struct spec_stats *ret) {
        spec_equals_plain_with(m, NULL, p, spec, ret);
}

TEST(greedy_identical_every_fixture) {
        const struct params p = {.max_tokens = 40, .logprobs = TOP};
        for (size_t f = 0; f < N_FIXTURE_MODELS; f++) {
                struct dse_model *m = fixture_model_open(fixture_models[f]);
                ASSERT_TRUE(m);
                struct spec_stats st;
                spec_equals_plain(m, &p, &ngram, &st);
                dse_model_free(m);
                if (t_failed_current)
                        return;
                fprintf(stderr, "  %s: %lld drafts, %lld accepted in %lld verifications\n", fixture_models[f],
                        (long long)st.draft_tokens, (long long)st.accepted_tokens, (long long)st.verifications);
                ASSERT_TRUE(st.accepted_tokens > 0 && st.accepted_tokens < st.draft_tokens);
        }
}

TEST(seeded_sampling_identical_with_every_option) {
        struct dse_model *m = fixture_model_open("llama3-rope-gqa");
        ASSERT_TRUE(m);
        static const struct params ps[] = {
                {.temperature = 0.5f, .max_tokens = 40, .logprobs = TOP},
                {.temperature = 0.7f, .top_k = 20, .top_p = 0.9f, .min_p = 0.02f, .max_tokens = 40},
                {.temperature = 0.3f, .rep = 1.05f, .presence = 0.1f, .frequency = 0.05f, .max_tokens = 40,
                 .logprobs = TOP},
        };
        for (size_t i = 0; i < sizeof ps / sizeof *ps; i++) {
                struct spec_stats st;
                spec_equals_plain(m, &ps[i], &ngram, &st);
                if (t_failed_current)
                        break;
                fprintf(stderr, "  params %zu: %lld drafts, %lld accepted\n", i, (long long)st.draft_tokens,
                        (long long)st.accepted_tokens);
                ASSERT_TRUE(st.accepted_tokens > 0 && st.accepted_tokens < st.draft_tokens);
        }
        dse_model_free(m);
}

/* MTP drafts on the bundled default model (DeepSeek-V3 with one MTP module): greedy,
 * seeded sampling with top-k/top-p/min-p and with penalties, alone and in a batch of 8,
 * the same tokens and logprobs as plain decoding; the drafts are proposed, accepted and
 * rejected. */
TEST(mtp_identical_default_model) {
        struct dse_model *m = default_model_open();
        ASSERT_TRUE(m);
        static const struct params ps[] = {
                {.max_tokens = 40, .logprobs = TOP},
                {.temperature = 0.7f, .top_k = 20, .top_p = 0.9f, .min_p = 0.02f, .max_tokens = 40, .logprobs = TOP},
                {.temperature = 0.5f, .rep = 1.05f, .presence = 0.1f, .frequency = 0.05f, .max_tokens = 40},
        };
        for (size_t i = 0; i < sizeof ps / sizeof *ps; i++) {
                struct spec_stats st;
                spec_equals_plain(m, &ps[i], &mtp, &st);
                if (t_failed_current)
                        break;
                fprintf(stderr, "  mtp params %zu: %lld drafts, %lld accepted in %lld verifications\n", i,
                        (long long)st.draft_tokens, (long long)st.accepted_tokens, (long long)st.verifications);
                ASSERT_TRUE(st.accepted_tokens > 0 && st.accepted_tokens < st.draft_tokens);
        }
        dse_model_free(m);
}

/* The same on the FP8 fixture whose checkpoint carries an MTP module (q_lora, FP8 block
 * scales in the module too): a random model's module drafts badly, but the output stays
 * the plain one. */
TEST(mtp_identical_fp8_fixture) {
        struct dse_model *m = fixture_model_open("deepseek-v3-fp8-mtp");
        ASSERT_TRUE(m);
        ASSERT_EQ(dse_model_n_mtp_layers(m), 1);
        const struct params greedy = {.max_tokens = 40, .logprobs = TOP},
                            sampled = {.temperature = 0.7f, .top_p = 0.9f, .max_tokens = 40};
        struct spec_stats st;
        spec_equals_plain(m, &greedy, &mtp, &st);
        ASSERT_TRUE(st.draft_tokens > 0);
        spec_equals_plain(m, &sampled, &mtp, &st);
        ASSERT_TRUE(st.draft_tokens > 0);
        dse_model_free(m);
}

/* MTP drafting with a KV pool too small for the batch: sequences are preempted and
 * recomputed (their slots reopened, the module's rows and hidden states rebuilt), and
 * every request's tokens and logprobs are still the plain ones. */
TEST(mtp_identical_under_preemption) {
        struct dse_model *m = default_model_open();
        ASSERT_TRUE(m);
        const struct params p = {.max_tokens = 40, .logprobs = TOP};
        int32_t ids[64];
        struct rig plain;
        ASSERT_OK(rig_init(&plain, m, 8, &off));
        for (int i = 0; i < 8; i++) {
                stem(ids, prompt_len(i), plain.vocab, i);
                ASSERT_OK(add(&plain, (uint64_t)i, ids, prompt_len(i), &p, 500 + (uint64_t)i));
        }
        ASSERT_OK(run(&plain));
        /* 16 blocks of 16 positions for 8 sequences of up to 71: preemption is certain */
        struct rig g;
        memset(&g, 0, sizeof g);
        g.vocab = dse_model_vocab_size(m);
        ASSERT_TRUE((g.ev = calloc(1, sizeof *g.ev)) != NULL);
        size_t bb = dse_kv_cache_block_bytes(plain.kv);
        struct sched_config cfg = {8, 256, 160, MAX_REQ};
        ASSERT_OK(dse_kv_cache_new(m, bb * 16, 16, 8, 160, &g.kv, NULL));
        ASSERT_OK(dse_batch_new(m, g.kv, NULL, &g.b, NULL));
        ASSERT_OK(sched_new(&cfg, m, NULL, g.kv, g.b, on_event, g.ev, &g.s));
        ASSERT_OK(spec_mtp_attach(&g.mtp, g.s, g.b, g.kv, &mtp, g.err, sizeof g.err));
        for (int i = 0; i < 8; i++) {
                stem(ids, prompt_len(i), g.vocab, i);
                ASSERT_OK(add(&g, (uint64_t)i, ids, prompt_len(i), &p, 500 + (uint64_t)i));
        }
        ASSERT_OK(run(&g));
        ASSERT_EQ(g.ev->n_final, 8);
        outputs_equal(plain.ev, g.ev, 8, 1);
        struct sched_stats st;
        sched_get_stats(g.s, &st);
        fprintf(stderr, "  %lld preemptions; %lld drafts, %lld accepted\n", (long long)st.preemptions,
                (long long)st.spec.draft_tokens, (long long)st.spec.accepted_tokens);
        ASSERT_TRUE(st.preemptions > 0 && st.spec.accepted_tokens > 0);
        ASSERT_EQ(st.kv_blocks_used, 0);
        rig_done(&g);
        rig_done(&plain);
        dse_model_free(m);
}

/* Requests whose prompts share a cached prefix with MTP drafting: the later ones attach
 * the earlier one's blocks (the module's rows in them included) and still give the
 * plain tokens. */
TEST(mtp_identical_with_prefix_hits) {
        struct dse_model *m = default_model_open();
        ASSERT_TRUE(m);
        const struct params p = {.max_tokens = 24, .logprobs = TOP};
        int32_t ids[4][64], V = dse_model_vocab_size(m);
        for (int i = 0; i < 4; i++) {
                stem(ids[i], 56, V, 5);
                ids[i][50 + i] = (ids[i][50 + i] + 1 + i) % V; /* the same first 50 tokens, then apart */
        }
        struct rig r[2];
        for (int k = 0; k < 2; k++) {
                ASSERT_OK(rig_init(&r[k], m, 8, k ? &mtp : &off));
                for (int i = 0; i < 4; i++) { /* one after the other: each finds the others' blocks */
                        ASSERT_OK(add(&r[k], (uint64_t)i, ids[i], 56, &p, 900 + (uint64_t)i));
                        ASSERT_OK(run(&r[k]));
                }
        }
        outputs_equal(r[0].ev, r[1].ev, 4, 1);
        struct sched_stats st;
        sched_get_stats(r[1].s, &st);
        fprintf(stderr, "  prefix hits %lld of %lld tokens; %lld drafts, %lld accepted\n",
                (long long)st.prefix_hit_tokens, (long long)st.prefix_query_tokens, (long long)st.spec.draft_tokens,
                (long long)st.spec.accepted_tokens);
        ASSERT_TRUE(st.prefix_hit_tokens >= 3 * 48 && st.spec.draft_tokens > 0);
        rig_done(&r[0]);
        rig_done(&r[1]);
        dse_model_free(m);
}

/* A draft model (the bundled model converted to int8: the same tokenizer, other
 * weights) drafts for the bundled model: greedy, alone and in a batch of 8, the same
 * tokens and logprobs as plain decoding; seeded sampling with top-k/top-p/min-p and
 * with penalties, the same tokens and logprobs alone and in a batch of 8 (see
 * keeps_plain_draws); drafts are proposed and accepted, rejected ones cut back from the
 * draft cache, whose blocks all come back. */
TEST(draft_model_identical_default_model) {
        struct dse_model *m = default_model_open(), *dm = default_model_convert("int8");
        ASSERT_TRUE(m && dm);
        static const struct params ps[] = {
                {.max_tokens = 40, .logprobs = TOP},
                {.temperature = 0.7f, .top_k = 20, .top_p = 0.9f, .min_p = 0.02f, .max_tokens = 40, .logprobs = TOP},
                {.temperature = 0.5f, .rep = 1.05f, .presence = 0.1f, .frequency = 0.05f, .max_tokens = 40},
        };
        long long sampled_drafts = 0, sampled_accepted = 0;
        for (size_t i = 0; i < sizeof ps / sizeof *ps; i++) {
                struct spec_stats st;
                spec_equals_plain_with(m, dm, &ps[i], &draft, &st);
                if (t_failed_current)
                        break;
                fprintf(stderr, "  draft params %zu: %lld drafts, %lld accepted in %lld verifications\n", i,
                        (long long)st.draft_tokens, (long long)st.accepted_tokens, (long long)st.verifications);
                ASSERT_TRUE(st.accepted_tokens > 0);
                if (i > 0) {
                        sampled_drafts += st.draft_tokens;
                        sampled_accepted += st.accepted_tokens;
                }
        }
        /* sampling rejects some drafts (the rejection path ran), though one parameter set
         * alone may accept every draft of an int8 copy of the model */
        ASSERT_TRUE(sampled_accepted < sampled_drafts);
        dse_model_free(dm);
        dse_model_free(m);
}

/* Under sampled drafting a seed's tokens do not depend on how many drafts each step
 * verified: with the bundled model in int4 drafting (some drafts rejected), 8 seeded
 * requests in a batch give the same tokens and logprobs with one
 * draft per step, up to 4, up to 8, drafts cut by the measured step cost, and a step
 * bound that leaves most steps no room for drafts (each position still drawn through the
 * draft model). */
TEST(draft_model_sampled_tokens_independent_of_k) {
        struct dse_model *m = default_model_open(), *dm = default_model_convert("int4");
        ASSERT_TRUE(m && dm);
        const struct params p = {.temperature = 0.9f, .top_p = 0.95f, .presence = 0.2f, .max_tokens = 40,
                                 .logprobs = TOP};
        static const struct spec_config cfgs[] = {
                {SPEC_DRAFT, 1, 1, 0, 0}, {SPEC_DRAFT, 1, 4, 0, 0}, {SPEC_DRAFT, 8, 8, 0, 0},
                {SPEC_DRAFT, 1, 4, 0, 1}, {SPEC_DRAFT, 1, 4, 9, 0},
        };
        struct events *first = calloc(1, sizeof *first);
        ASSERT_TRUE(first);
        int32_t ids[64];
        for (size_t c = 0; c < sizeof cfgs / sizeof *cfgs && !t_failed_current; c++) {
                struct rig g;
                ASSERT_OK(rig_init_with(&g, m, dm, 8, &cfgs[c]));
                for (int i = 0; i < 8; i++) {
                        stem(ids, prompt_len(i), g.vocab, i);
                        ASSERT_OK(add(&g, (uint64_t)i, ids, prompt_len(i), &p, 300 + (uint64_t)i));
                }
                ASSERT_OK(run(&g));
                ASSERT_EQ(g.ev->n_final, 8);
                struct sched_stats st;
                sched_get_stats(g.s, &st);
                fprintf(stderr, "  k %d..%d, by cost %d, step tokens %d: %lld drafts, %lld accepted in %lld steps\n",
                        cfgs[c].k_min, cfgs[c].k_max, cfgs[c].by_cost, cfgs[c].step_tokens,
                        (long long)st.spec.draft_tokens, (long long)st.spec.accepted_tokens, (long long)st.steps);
                ASSERT_TRUE(st.spec.draft_tokens > 0);
                if (c == 1) /* the residual draws are among those compared */
                        ASSERT_TRUE(st.spec.accepted_tokens < st.spec.draft_tokens);
                if (c == 0)
                        memcpy(first, g.ev, sizeof *first);
                else
                        outputs_equal(first, g.ev, 8, 1);
                rig_done(&g);
        }
        free(first);
        dse_model_free(dm);
        dse_model_free(m);
}

/* Other architectures (llama, qwen2 MHA/GQA caches) with a draft model of the same
 * fixture in int8: greedy output unchanged, sampled output its seeds' alone and in a
 * batch. */
TEST(draft_model_identical_fixtures) {
        static const char *const names[] = {"llama-bf16-linear-rope", "qwen2-bf16-tied"};
        for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
                struct dse_model *m = fixture_model_open(names[i]), *dm = NULL;
                struct dse_diag diag = {{0}};
                ASSERT_TRUE(m);
                ASSERT_OK(fixture_model_convert(names[i], "int8", &dm, &diag));
                const struct params greedy = {.max_tokens = 40, .logprobs = TOP},
                                    sampled = {.temperature = 0.7f, .top_p = 0.9f, .max_tokens = 40};
                struct spec_stats st;
                spec_equals_plain_with(m, dm, &greedy, &draft, &st);
                ASSERT_TRUE(st.accepted_tokens > 0);
                spec_equals_plain_with(m, dm, &sampled, &draft, &st);
                ASSERT_TRUE(st.draft_tokens > 0);
                dse_model_free(dm);
                dse_model_free(m);
        }
}

/* A draft model with a KV pool too small for the batch: target sequences are preempted
 * and recomputed (their draft sequences closed, reopened on the draft cache's prefix
 * blocks), the draft cache itself runs short at times; every request's tokens and
 * logprobs are still the plain ones (sampled: those of the same seeds without
 * preemption) and every block of both caches comes back. */
TEST(draft_model_identical_under_preemption) {
        struct dse_model *m = default_model_open(), *dm = default_model_convert("int8");
        ASSERT_TRUE(m && dm);
        static const struct params ps[] = {
                {.max_tokens = 40, .logprobs = TOP},
                {.temperature = 0.7f, .top_k = 20, .top_p = 0.9f, .max_tokens = 40, .logprobs = TOP},
        };
        for (size_t k = 0; k < sizeof ps / sizeof *ps && !t_failed_current; k++) {
                int32_t ids[64];
                /* the reference: plain decoding, or under sampled drafting the draft
                 * model with a pool that never preempts */
                struct rig plain;
                ASSERT_OK(rig_init_with(&plain, m, dm, 8, keeps_plain_draws(&ps[k], &draft) ? &off : &draft));
                for (int i = 0; i < 8; i++) {
                        stem(ids, prompt_len(i), plain.vocab, i);
                        ASSERT_OK(add(&plain, (uint64_t)i, ids, prompt_len(i), &ps[k], 500 + (uint64_t)i));
                }
                ASSERT_OK(run(&plain));
                /* 16 blocks of 16 positions for 8 sequences of up to 71: preemption is certain */
                struct rig g;
                memset(&g, 0, sizeof g);
                g.vocab = dse_model_vocab_size(m);
                ASSERT_TRUE((g.ev = calloc(1, sizeof *g.ev)) != NULL);
                size_t bb = dse_kv_cache_block_bytes(plain.kv);
                struct sched_config cfg = {8, 256, 160, MAX_REQ};
                ASSERT_OK(dse_kv_cache_new(m, bb * 16, 16, 8, 160, &g.kv, NULL));
                ASSERT_OK(dse_batch_new(m, g.kv, NULL, &g.b, NULL));
                ASSERT_OK(sched_new(&cfg, m, NULL, g.kv, g.b, on_event, g.ev, &g.s));
                ASSERT_OK(rig_attach_draft(&g, m, dm, 8, &draft));
                for (int i = 0; i < 8; i++) {
                        stem(ids, prompt_len(i), g.vocab, i);
                        ASSERT_OK(add(&g, (uint64_t)i, ids, prompt_len(i), &ps[k], 500 + (uint64_t)i));
                }
                ASSERT_OK(run(&g));
                ASSERT_EQ(g.ev->n_final, 8);
                outputs_equal(plain.ev, g.ev, 8, 1);
                struct sched_stats st;
                sched_get_stats(g.s, &st);
                fprintf(stderr, "  params %zu: %lld preemptions; %lld drafts, %lld accepted\n", k,
                        (long long)st.preemptions, (long long)st.spec.draft_tokens, (long long)st.spec.accepted_tokens);
                ASSERT_TRUE(st.preemptions > 0 && st.spec.accepted_tokens > 0);
                ASSERT_EQ(st.kv_blocks_used, 0);
                ASSERT_EQ(spec_draft_blocks_used(&g.draft), 0);
                rig_done(&g);
                rig_done(&plain);
        }
        dse_model_free(dm);
        dse_model_free(m);
}

/* Requests whose prompts share a cached prefix, with a draft model: the later ones
 * attach the earlier ones' blocks in both caches and still give the plain tokens. */
TEST(draft_model_identical_with_prefix_hits) {
        struct dse_model *m = default_model_open(), *dm = default_model_convert("int8");
        ASSERT_TRUE(m && dm);
        const struct params p = {.max_tokens = 24, .logprobs = TOP};
        int32_t ids[4][64], V = dse_model_vocab_size(m);
        for (int i = 0; i < 4; i++) {
                stem(ids[i], 56, V, 5);
                ids[i][50 + i] = (ids[i][50 + i] + 1 + i) % V; /* the same first 50 tokens, then apart */
        }
        struct rig r[2];
        for (int k = 0; k < 2; k++) {
                ASSERT_OK(rig_init_with(&r[k], m, dm, 8, k ? &draft : &off));
                for (int i = 0; i < 4; i++) { /* one after the other: each finds the others' blocks */
                        ASSERT_OK(add(&r[k], (uint64_t)i, ids[i], 56, &p, 900 + (uint64_t)i));
                        ASSERT_OK(run(&r[k]));
                }
        }
        outputs_equal(r[0].ev, r[1].ev, 4, 1);
        struct sched_stats st;
        sched_get_stats(r[1].s, &st);
        struct dse_kv_stats dst;
        dse_kv_cache_stats(r[1].draft.kv, &dst);
        fprintf(stderr, "  prefix hits %lld of %lld tokens (draft cache %lld of %lld); %lld drafts, %lld accepted\n",
                (long long)st.prefix_hit_tokens, (long long)st.prefix_query_tokens, (long long)dst.prefix_hit_tokens,
                (long long)dst.prefix_query_tokens, (long long)st.spec.draft_tokens,
                (long long)st.spec.accepted_tokens);
        ASSERT_TRUE(st.prefix_hit_tokens >= 3 * 48 && dst.prefix_hit_tokens >= 3 * 48 && st.spec.draft_tokens > 0);
        ASSERT_EQ(spec_draft_blocks_used(&r[1].draft), 0);
        rig_done(&r[0]);
        rig_done(&r[1]);
        dse_model_free(dm);
        dse_model_free(m);
}

/* A draft model that does not share the served model's tokenizer is refused at load,
 * the message naming both: one without a tokenizer for the bundled model, and two
 * tokenizer-less fixtures whose vocabularies differ. The bundled model's own int8
 * conversion passes. */
TEST(draft_model_tokenizer_mismatch_refused) {
        struct dse_model *m = default_model_open(), *fx = fixture_model_open("llama-bf16-linear-rope"),
                         *fx2 = fixture_model_open("qwen2-bf16-tied"), *dm = default_model_convert("int8");
        ASSERT_TRUE(m && fx && fx2 && dm);
        char err[512] = "";
        ASSERT_ERR(spec_draft_tokenizer_check(m, "models/default", fx, "llama-fixture", err, sizeof err), -EINVAL);
        fprintf(stderr, "  %s\n", err);
        ASSERT_TRUE(strstr(err, "--draft-model llama-fixture") && strstr(err, "models/default") &&
                    strstr(err, "tokenizer"));
        err[0] = 0;
        ASSERT_ERR(spec_draft_tokenizer_check(fx, "llama-fixture", m, "models/default", err, sizeof err), -EINVAL);
        ASSERT_TRUE(strstr(err, "--draft-model models/default") && strstr(err, "llama-fixture"));
        ASSERT_TRUE(dse_model_vocab_size(fx) != dse_model_vocab_size(fx2));
        err[0] = 0;
        ASSERT_ERR(spec_draft_tokenizer_check(fx, "llama-fixture", fx2, "qwen2-fixture", err, sizeof err), -EINVAL);
        fprintf(stderr, "  %s\n", err);
        ASSERT_TRUE(strstr(err, "qwen2-fixture") && strstr(err, "llama-fixture"));
        ASSERT_OK(spec_draft_tokenizer_check(m, "models/default", dm, "int8", err, sizeof err));
        /* through the rig: the scheduler gets no drafter */
        struct rig g;
        ASSERT_ERR(rig_init_with(&g, m, fx, 2, &draft), -EINVAL);
        ASSERT_TRUE(strstr(g.err, "--draft-model draft") && strstr(g.err, "target"));
        rig_done(&g);
        dse_model_free(dm);
        dse_model_free(fx2);
        dse_model_free(fx);
        dse_model_free(m);
}

/* --speculative mtp on a model without an MTP module is refused, naming why. */
TEST(mtp_refused_without_module) {
        struct dse_model *m = fixture_model_open("llama-bf16-linear-rope");
        ASSERT_TRUE(m);
        struct rig g;
        ASSERT_ERR(rig_init(&g, m, 2, &mtp), -EOPNOTSUPP);
        ASSERT_TRUE(strstr(g.err, "--speculative mtp") && strstr(g.err, "no MTP module"));
        rig_done(&g);
        dse_model_free(m);
}

/* Q(a, x), the regularized upper incomplete gamma function (Numerical Recipes 6.2):
 * the chi-square survival function is Q(df / 2, chi2 / 2). */
static double gamma_q(double a, double x) {
        if (x <= 0)
                return 1;
        double gln = lgamma(a);
        if (x < a + 1) {
                double ap = a, sum = 1 / a, del = sum;
                for (int n = 0; n < 1000; n++) {
                        del *= x / ++ap;
                        sum += del;
                        if (fabs(del) < fabs(sum) * 1e-14)
                                break;
                }
                return 1 - sum * exp(-x + a * log(x) - gln);
        }
        double b = x + 1 - a, c = 1 / 1e-300, d = 1 / b, h = d;
        for (int i = 1; i < 1000; i++) {
                double an = -i * (i - a);
                b += 2;
                d = an * d + b;
                d = fabs(d) < 1e-300 ? 1e-300 : d;
                c = b + an / c;
                c = fabs(c) < 1e-300 ? 1e-300 : c;
                d = 1 / d;
                double del = d * c;
                h *= del;
                if (fabs(del - 1) < 1e-14)
                        break;
        }
        return exp(-x + a * log(x) - gln) * h;
}

/* Two samples of equal size over categories: the chi-square test of homogeneity, with
 * categories expected fewer than 5 times pooled. Returns the p-value. */
static double homogeneity_p(const int *a, const int *b, int n_cat, int *ret_df) {
        double chi2 = 0;
        int df = -1, pool_a = 0, pool_b = 0;
        for (int c = 0; c < n_cat; c++) {
                if (a[c] + b[c] < 10) {
                        pool_a += a[c];
                        pool_b += b[c];
                        continue;
                }
                chi2 += (double)(a[c] - b[c]) * (a[c] - b[c]) / (a[c] + b[c]);
                df++;
        }
        if (pool_a + pool_b > 0) {
                chi2 += (double)(pool_a - pool_b) * (pool_a - pool_b) / (pool_a + pool_b);
                df++;
        }
        *ret_df = df;
        return df > 0 ? gamma_q(df / 2.0, chi2 / 2.0) : 1;
}

#define N_SAMPLES 2000

/* Each generated position's token over N_SAMPLES seeds, plain vs speculative (disjoint
 * seeds: the same seed gives the same tokens, see above, which would prove nothing
 * here). */
TEST(sampling_distribution_equals_plain_chi_square) {
        struct dse_model *m = fixture_model_open("llama3-rope-gqa");
        ASSERT_TRUE(m);
        const struct params p = {.temperature = 0.6f, .max_tokens = 3};
        int V = dse_model_vocab_size(m);
        int *count[2][3];
        for (int s = 0; s < 2; s++)
                for (int t = 0; t < 3; t++)
                        ASSERT_TRUE((count[s][t] = calloc((size_t)V, sizeof(int))) != NULL);
        /* The prompt: a stem and the model's greedy continuation, which loops. */
        int32_t prompt[64];
        int n_prompt = 12;
        stem(prompt, n_prompt, V, 3);
        {
                struct rig g;
                ASSERT_OK(rig_init(&g, m, 1, &off));
                const struct params greedy = {.max_tokens = 24};
                ASSERT_OK(add(&g, 0, prompt, n_prompt, &greedy, 0));
                ASSERT_OK(run(&g));
                memcpy(prompt + n_prompt, g.ev->out[0], (size_t)g.ev->n_out[0] * sizeof(int32_t));
                n_prompt += g.ev->n_out[0];
                rig_done(&g);
        }
        struct spec_stats st = {0};
        for (int s = 0; s < 2; s++) {
                struct rig g;
                ASSERT_OK(rig_init(&g, m, 8, s == 0 ? &off : &ngram));
                for (int i = 0; i < N_SAMPLES; i++)
                        ASSERT_OK(add(&g, (uint64_t)i, prompt, n_prompt, &p, (uint64_t)(s * 1000003 + i)));
                ASSERT_OK(run(&g));
                ASSERT_EQ(g.ev->n_final, N_SAMPLES);
                for (int i = 0; i < N_SAMPLES; i++)
                        for (int t = 0; t < 3 && t < g.ev->n_out[i]; t++)
                                count[s][t][g.ev->out[i][t]]++;
                if (s == 1) {
                        struct sched_stats ss;
                        sched_get_stats(g.s, &ss);
                        st = ss.spec;
                }
                rig_done(&g);
        }
        fprintf(stderr, "  %lld drafts, %lld accepted in %lld verifications\n", (long long)st.draft_tokens,
                (long long)st.accepted_tokens, (long long)st.verifications);
        /* Both outcomes of the rule occur often. */
        ASSERT_TRUE(st.accepted_tokens > N_SAMPLES / 4);
        ASSERT_TRUE(st.draft_tokens - st.accepted_tokens > N_SAMPLES / 4);
        for (int t = 0; t < 3; t++) {
                int df;
                double pv = homogeneity_p(count[0][t], count[1][t], V, &df);
                fprintf(stderr, "  token %d: chi-square p = %.4f (df %d)\n", t, pv, df);
                ASSERT_TRUE(df >= 2);
                ASSERT_TRUE(pv > 0.01);
        }
        for (int s = 0; s < 2; s++)
                for (int t = 0; t < 3; t++)
                        free(count[s][t]);
        dse_model_free(m);
}

/* The target's sampling distribution (params p: temperature, top-k, top-p, min-p)
 * after tokens[0..n), from the rig's own cache and batch, into ret (vocab). */
static int target_probs(struct rig *g, const int32_t *tokens, int n, const struct params *p, float *ret) {
        float *logits = malloc((size_t)g->vocab * sizeof(float));
        struct dse_sampler_params sp;
        dse_sampler_params_default(&sp);
        sp.temperature = p->temperature;
        sp.top_k = p->top_k;
        sp.top_p = p->top_p > 0 ? p->top_p : 1.0f;
        sp.min_p = p->min_p;
        struct dse_sampler *smp = NULL;
        int seq = -1, r = logits ? dse_sampler_new(&sp, g->vocab, &smp, NULL) : -ENOMEM;
        if (r >= 0)
                r = seq = dse_kv_seq_open(g->kv);
        if (r >= 0) {
                struct dse_batch_seq one = {seq, tokens, n, logits};
                r = dse_batch_step(g->b, &one, 1, NULL);
        }
        if (r >= 0)
                r = dse_sampler_probs(smp, logits, ret);
        if (seq >= 0)
                dse_kv_seq_close(g->kv, seq);
        dse_sampler_free(smp);
        free(logits);
        return r < 0 ? r : 0;
}

#define N_RULE_SAMPLES (2 * MAX_REQ)

/* A worse draft model: the rig's draft model with a fixed random bias on each token's
 * logit before the request's sampler settings make q of them, so q is often far from
 * p. It plugs in through the ops table around the real drafter (its KV cache, chain
 * and picks). */
struct biased_draft {
        struct spec_draft *inner;
        const struct spec_pick *pick; /* the scheduler's, during a proposal */
        float bias[512];
        float logits[512];
};

static int biased_pick(void *ctx, int i, const float *logits, int n_logits) {
        struct biased_draft *b = ctx;
        for (int v = 0; v < n_logits; v++)
                b->logits[v] = logits[v] + b->bias[v];
        return b->pick->pick(b->pick->ctx, i, b->logits, n_logits);
}

static int biased_propose_sampled(void *self, int slot, const int32_t *tokens, int32_t n_tokens, int max_draft,
                                  int32_t *draft, const struct spec_pick *pick) {
        struct biased_draft *b = self;
        struct spec_pick mine = {biased_pick, b};
        b->pick = pick;
        return spec_draft_ops.propose_sampled(b->inner, slot, tokens, n_tokens, max_draft, draft, &mine);
}

static void biased_release(void *self, int slot) {
        spec_draft_ops.release(((struct biased_draft *)self)->inner, slot);
}

static const struct spec_drafter_ops biased_ops = {.name = "biased-draft",
                                                   .release = biased_release,
                                                   .propose_sampled = biased_propose_sampled};

/* The rule against the exact target distribution: N_RULE_SAMPLES seeds of a 2-token
 * request drafted by a draft model (the target fixture in int4, its logits biased by
 * a fixed N(0, 9) per token, so a third of the drafts are rejected and the residual
 * matters), temperature 2 and top-k 6; the pairs (first, second token) are counted
 * against N * p(t1) * p(t2 | t1), p computed from the target's own logits, by a
 * chi-square goodness-of-fit test (cells expected fewer than 5 times pooled; a pair
 * of probability 0 fails at once; p-value > 0.01, the bound). The first
 * position is a draft, the second the draw after it (the bonus when the draft is kept,
 * a step without room for drafts when not), so every path of the rule is counted.
 * Accepting every draft (p/q taken as 1) or resampling from p instead of the residual
 * fails it. */
TEST(draft_model_sampling_matches_target_chi_square) {
        struct dse_model *m = fixture_model_open("llama-bf16-linear-rope"), *dm = NULL;
        struct dse_diag diag = {{0}};
        ASSERT_TRUE(m);
        ASSERT_OK(fixture_model_convert("llama-bf16-linear-rope", "int4", &dm, &diag));
        ASSERT_TRUE(dse_model_vocab_size(m) <= 512);
        const struct params p = {.temperature = 2.0f, .top_k = 6, .max_tokens = 2};
        struct rig g;
        ASSERT_OK(rig_init_with(&g, m, dm, 8, &draft));
        struct biased_draft bd = {.inner = &g.draft};
        uint64_t x = 12345;
        for (int v = 0; v < 512; v++) { /* Box-Muller over a 64-bit LCG */
                double u[2];
                for (int j = 0; j < 2; j++) {
                        x = x * 6364136223846793005ull + 1442695040888963407ull;
                        u[j] = ((double)(x >> 11) + 0.5) * 0x1.0p-53;
                }
                bd.bias[v] = (float)(3 * sqrt(-2 * log(u[0])) * cos(2 * M_PI * u[1]));
        }
        ASSERT_OK(sched_set_drafter(g.s, &draft, &(struct spec_drafter){&biased_ops, &bd}));
        int V = g.vocab;
        int32_t prompt[16];
        int n_prompt = 12;
        stem(prompt, n_prompt, V, 3);
        float *p1 = malloc((size_t)V * sizeof(float)), *p2 = malloc((size_t)V * V * sizeof(float));
        int *count = calloc((size_t)V * V, sizeof(int));
        ASSERT_TRUE(p1 && p2 && count);
        /* the exact distribution of the pairs, before the scheduler runs */
        ASSERT_OK(target_probs(&g, prompt, n_prompt, &p, p1));
        for (int t1 = 0; t1 < V; t1++)
                if (p1[t1] > 0) {
                        prompt[n_prompt] = t1;
                        ASSERT_OK(target_probs(&g, prompt, n_prompt + 1, &p, p2 + (size_t)t1 * V));
                }
        int outside = 0;
        for (int round = 0; round < N_RULE_SAMPLES / MAX_REQ; round++) { /* as many as the queue holds */
                memset(g.ev, 0, sizeof *g.ev);
                for (int i = 0; i < MAX_REQ; i++)
                        ASSERT_OK(add(&g, (uint64_t)i, prompt, n_prompt, &p, 7000 + (uint64_t)(round * MAX_REQ + i)));
                ASSERT_OK(run(&g));
                ASSERT_EQ(g.ev->n_final, MAX_REQ);
                for (int i = 0; i < MAX_REQ; i++) {
                        ASSERT_EQ(g.ev->n_out[i], 2);
                        int t1 = g.ev->out[i][0], t2 = g.ev->out[i][1];
                        outside += !(p1[t1] > 0) || !(p2[(size_t)t1 * V + t2] > 0);
                        count[(size_t)t1 * V + t2]++;
                }
        }
        struct sched_stats st;
        sched_get_stats(g.s, &st);
        fprintf(stderr, "  %lld drafts, %lld accepted in %lld verifications; %d pairs outside the support\n",
                (long long)st.spec.draft_tokens, (long long)st.spec.accepted_tokens,
                (long long)st.spec.verifications, outside);
        ASSERT_EQ(outside, 0);
        /* both outcomes of the rule occur often */
        ASSERT_TRUE(st.spec.accepted_tokens > N_RULE_SAMPLES / 10);
        ASSERT_TRUE(st.spec.draft_tokens - st.spec.accepted_tokens > N_RULE_SAMPLES / 10);
        double chi2 = 0, pool_o = 0, pool_e = 0;
        int df = -1;
        for (int t1 = 0; t1 < V; t1++)
                for (int t2 = 0; p1[t1] > 0 && t2 < V; t2++) {
                        double e = N_RULE_SAMPLES * (double)p1[t1] * (double)p2[(size_t)t1 * V + t2];
                        double o = count[(size_t)t1 * V + t2];
                        if (e <= 0)
                                continue;
                        if (e < 5) {
                                pool_o += o;
                                pool_e += e;
                                continue;
                        }
                        chi2 += (o - e) * (o - e) / e;
                        df++;
                }
        if (pool_e > 0) {
                chi2 += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
                df++;
        }
        double pv = df > 0 ? gamma_q(df / 2.0, chi2 / 2.0) : 1;
        fprintf(stderr, "  pairs: chi-square %.1f, df %d, p = %.4f\n", chi2, df, pv);
        ASSERT_TRUE(df >= 10);
        ASSERT_TRUE(pv > 0.01);
        free(p1);
        free(p2);
        free(count);
        rig_done(&g);
        dse_model_free(dm);
        dse_model_free(m);
}

/* The rule at one position, integrated exactly over its draws: x ~ q (each x weighted
 * by q(x)), the acceptance and residual uniforms on a midpoint grid; the emitted
 * token's distribution is p for drafts close to the target, far from it, with disjoint
 * support, a point-mass draft, a point-mass target and q = p; spec_draw on the same
 * grid gives its probabilities back. */
TEST(rule_emits_the_target_distribution) {
        enum { N = 5, GRID = 400 };
        static const float cases[][2][N] = {
                {{0.4f, 0.3f, 0.2f, 0.1f, 0.0f}, {0.35f, 0.35f, 0.1f, 0.1f, 0.1f}},
                {{0.7f, 0.1f, 0.1f, 0.05f, 0.05f}, {0.05f, 0.05f, 0.1f, 0.1f, 0.7f}},
                {{0.5f, 0.5f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.2f, 0.3f, 0.5f}},
                {{0.25f, 0.25f, 0.25f, 0.25f, 0.0f}, {0.0f, 1.0f, 0.0f, 0.0f, 0.0f}},
                {{0.0f, 0.0f, 1.0f, 0.0f, 0.0f}, {0.2f, 0.2f, 0.2f, 0.2f, 0.2f}},
                {{0.1f, 0.2f, 0.3f, 0.4f, 0.0f}, {0.1f, 0.2f, 0.3f, 0.4f, 0.0f}},
        };
        for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
                const float *p = cases[c][0], *q = cases[c][1];
                double out[N] = {0}, drawn[N] = {0};
                for (int x = 0; x < N; x++)
                        for (int a = 0; q[x] > 0 && a < GRID; a++)
                                for (int b = 0; b < GRID; b++) {
                                        int y = spec_accept_or_resample(p, q, N, x, (a + 0.5) / GRID, (b + 0.5) / GRID);
                                        ASSERT_TRUE(y >= 0 && y < N);
                                        out[y] += q[x] / ((double)GRID * GRID);
                                }
                for (int g = 0; g < GRID; g++)
                        drawn[spec_draw(q, N, (g + 0.5) / GRID)] += 1.0 / GRID;
                for (int y = 0; y < N; y++) {
                        if (fabs(out[y] - p[y]) > 2.0 / GRID)
                                T_FAIL("case %zu: token %d emitted with %.4f, p = %.4f", c, y, out[y], (double)p[y]);
                        if (fabs(drawn[y] - q[y]) > 1.0 / GRID)
                                T_FAIL("case %zu: spec_draw gives %d with %.4f, q = %.4f", c, y, drawn[y], (double)q[y]);
                }
        }
        static const float zero[N] = {0};
        ASSERT_ERR(spec_draw(zero, N, 0.5), -EINVAL);
}

/* The draft length follows acceptance: full acceptance climbs to k_max, rejection
 * sinks to k_min. */
TEST(draft_length_adapts_within_bounds) {
        const struct spec_config c = {SPEC_NGRAM, 2, 6, 0, 0};
        struct spec_seq q;
        spec_seq_init(&q, &c);
        ASSERT_EQ(spec_seq_k(&q, &c), 6);
        for (int i = 0; i < 10; i++)
                spec_seq_update(&q, spec_seq_k(&q, &c), 0);
        ASSERT_EQ(spec_seq_k(&q, &c), 2);
        for (int i = 0; i < 10; i++)
                spec_seq_update(&q, spec_seq_k(&q, &c), spec_seq_k(&q, &c));
        ASSERT_EQ(spec_seq_k(&q, &c), 6);
        for (int i = 0; i < 10; i++)
                spec_seq_update(&q, 4, 2);
        ASSERT_EQ(spec_seq_k(&q, &c), 3);
}

/* Bounds outside speculate.h's and a change after requests came are refused. */
TEST(bad_speculation_config) {
        struct dse_model *m = fixture_model_open("llama3-rope-gqa");
        ASSERT_TRUE(m);
        struct rig g;
        ASSERT_OK(rig_init(&g, m, 2, &off));
        const struct spec_config bad[] = {
                {SPEC_NGRAM, 0, 4, 0, 0}, {SPEC_NGRAM, 3, 2, 0, 0}, {SPEC_NGRAM, 1, SPEC_K_LIMIT + 1, 0, 0}, {SPEC_NGRAM, 1, 4, -1, 0}};
        for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
                ASSERT_ERR(sched_set_speculation(g.s, &bad[i]), -EINVAL);
        int32_t ids[4] = {1, 2, 3, 4};
        const struct params p = {.max_tokens = 2};
        ASSERT_OK(add(&g, 0, ids, 4, &p, 0));
        ASSERT_ERR(sched_set_speculation(g.s, &ngram), -EBUSY);
        rig_done(&g);
        dse_model_free(m);
}

/* A drafter that knows each request's plain greedy output (found by its prompt) and
 * proposes it, or, as an adversary, proposes it with the first draft changed; it counts
 * the hooks' calls. */
struct oracle {
        int32_t seqs[8][64 + MAX_OUT];
        int len[8], n_prompt[8];
        int wrong, vocab;
        int any; /* propose max_draft copies of the last token, whatever the sequence */
        int verified, verified_drafts, verified_accepted, released;
};

static int oracle_propose(void *self, int slot, const int32_t *tokens, int32_t n_tokens, int max_draft, int32_t *draft) {
        struct oracle *o = self;
        (void)slot;
        if (o->any) {
                for (int i = 0; i < max_draft; i++)
                        draft[i] = tokens[n_tokens - 1];
                return max_draft;
        }
        for (int i = 0; i < 8; i++) {
                if (n_tokens > o->len[i] || n_tokens < o->n_prompt[i] ||
                    memcmp(o->seqs[i], tokens, (size_t)n_tokens * sizeof(int32_t)) != 0)
                        continue;
                int n = o->len[i] - n_tokens < max_draft ? o->len[i] - n_tokens : max_draft;
                memcpy(draft, o->seqs[i] + n_tokens, (size_t)n * sizeof(int32_t));
                if (o->wrong && n > 0)
                        draft[0] = (draft[0] + 1) % o->vocab;
                return n;
        }
        return 0;
}

static void oracle_verified(void *self, int slot, int n_draft, int n_accepted) {
        struct oracle *o = self;
        (void)slot;
        o->verified++;
        o->verified_drafts += n_draft;
        o->verified_accepted += n_accepted;
}

static void oracle_release(void *self, int slot) {
        (void)slot;
        ((struct oracle *)self)->released++;
}

static const struct spec_drafter_ops oracle_ops = {"oracle", oracle_propose, oracle_verified, oracle_release, NULL};

/* Drafts that are all right: every verification accepts k, the bonus token follows, and
 * the output is the plain one in fewer steps; drafts that are all wrong: nothing is
 * accepted, the same output, every block back. The hooks see each verification and
 * each request's end. */
TEST(plugged_drafter_all_right_and_all_wrong) {
        struct dse_model *m = fixture_model_open("qwen2-bf16-tied");
        ASSERT_TRUE(m);
        static struct oracle o;
        memset(&o, 0, sizeof o);
        o.vocab = dse_model_vocab_size(m);
        const struct params p = {.max_tokens = 33};
        int64_t plain_steps;
        {
                struct rig g;
                ASSERT_OK(rig_init(&g, m, 8, &off));
                for (int i = 0; i < 8; i++) {
                        o.n_prompt[i] = prompt_len(i);
                        stem(o.seqs[i], o.n_prompt[i], g.vocab, i + 40);
                        ASSERT_OK(add(&g, (uint64_t)i, o.seqs[i], o.n_prompt[i], &p, 1));
                }
                ASSERT_OK(run(&g));
                struct sched_stats st;
                sched_get_stats(g.s, &st);
                plain_steps = st.steps;
                for (int i = 0; i < 8; i++) {
                        ASSERT_EQ(g.ev->n_out[i], 33);
                        memcpy(o.seqs[i] + o.n_prompt[i], g.ev->out[i], 33 * sizeof(int32_t));
                        o.len[i] = o.n_prompt[i] + 33;
                }
                rig_done(&g);
        }
        const struct spec_config c = {SPEC_NGRAM, 1, 4, 0, 0};
        for (o.wrong = 0; o.wrong < 2; o.wrong++) {
                o.verified = o.verified_drafts = o.verified_accepted = o.released = 0;
                struct spec_drafter d = {&oracle_ops, &o};
                struct rig g;
                ASSERT_OK(rig_init(&g, m, 8, &off));
                ASSERT_OK(sched_set_drafter(g.s, &c, &d));
                for (int i = 0; i < 8; i++)
                        ASSERT_OK(add(&g, (uint64_t)i, o.seqs[i], o.n_prompt[i], &p, 1));
                ASSERT_OK(run(&g));
                for (int i = 0; i < 8; i++) {
                        ASSERT_EQ(g.ev->n_out[i], 33);
                        for (int t = 0; t < 33; t++)
                                ASSERT_EQ(g.ev->out[i][t], o.seqs[i][o.n_prompt[i] + t]);
                }
                struct sched_stats st;
                sched_get_stats(g.s, &st);
                fprintf(stderr, "  %s drafts: %lld steps (plain %lld), %lld of %lld accepted, hist[0] %lld hist[4] %lld\n",
                        o.wrong ? "wrong" : "right", (long long)st.steps, (long long)plain_steps,
                        (long long)st.spec.accepted_tokens, (long long)st.spec.draft_tokens,
                        (long long)st.spec.accepted_hist[0], (long long)st.spec.accepted_hist[4]);
                ASSERT_EQ(st.kv_blocks_used, 0);
                ASSERT_EQ(o.released, 8);
                if (o.wrong) {
                        ASSERT_EQ(st.spec.accepted_tokens, 0);
                        ASSERT_TRUE(st.spec.draft_tokens > 0);
                        ASSERT_EQ(st.spec.accepted_hist[0], st.spec.verifications);
                } else {
                        ASSERT_EQ(st.spec.accepted_tokens, st.spec.draft_tokens);
                        /* a prompt's step, then 33 tokens in steps of up to 5 */
                        ASSERT_TRUE(st.steps * 3 < plain_steps);
                        ASSERT_TRUE(st.spec.accepted_hist[4] > 0);
                }
                /* Every verification but those that ended a request went through the hook. */
                ASSERT_TRUE(o.verified <= st.spec.verifications && o.verified >= st.spec.verifications - 8);
                rig_done(&g);
        }
        dse_model_free(m);
}

/* spec.step_tokens bounds the positions a step samples: 3 sequences and a bound of 4
 * leave room for one draft per step (the oldest sequence's), prompt tokens before the
 * last not counted; 4 sequences leave none. */
TEST(step_tokens_bound_the_drafts) {
        struct dse_model *m = fixture_model_open("qwen2-bf16-tied");
        ASSERT_TRUE(m);
        static struct oracle o;
        memset(&o, 0, sizeof o);
        o.vocab = dse_model_vocab_size(m);
        o.any = 1;
        const struct params p = {.max_tokens = 12};
        for (int i = 0; i < 8; i++)
                stem(o.seqs[i], 20, o.vocab, i + 60);
        for (int n_seq = 3; n_seq <= 4; n_seq++) {
                const struct spec_config c = {SPEC_NGRAM, 1, 4, 4, 0};
                struct spec_drafter d = {&oracle_ops, &o};
                struct rig g;
                ASSERT_OK(rig_init(&g, m, 8, &off));
                ASSERT_OK(sched_set_drafter(g.s, &c, &d));
                for (int i = 0; i < n_seq; i++)
                        ASSERT_OK(add(&g, (uint64_t)i, o.seqs[i], 20, &p, 1));
                struct sched_stats st;
                int steps = 0;
                while (sched_busy(g.s)) {
                        int n = sched_step(g.s, now_ms());
                        ASSERT_TRUE(n > 0);
                        sched_get_stats(g.s, &st);
                        /* the first step: n_seq prompts of 20 and the drafts */
                        int prompt_tokens = steps == 0 ? n_seq * 19 : 0;
                        ASSERT_TRUE(n - prompt_tokens <= (n_seq == 3 ? 4 : n_seq));
                        steps++;
                }
                sched_get_stats(g.s, &st);
                fprintf(stderr, "  %d sequences: %lld drafts in %d steps\n", n_seq, (long long)st.spec.draft_tokens, steps);
                if (n_seq == 3)
                        ASSERT_TRUE(st.spec.draft_tokens >= steps - 1);
                else
                        ASSERT_EQ(st.spec.draft_tokens, 0);
                rig_done(&g);
        }
        dse_model_free(m);
}

/* The draft count by measured step cost: all the drafts while a step costs the same
 * with more tokens, the fewest once it costs in proportion and drafts are mostly
 * rejected, all again when they are always accepted and cost less than the tokens
 * they bring; an unmeasured size counts as no dearer. */
TEST(drafts_by_measured_step_cost) {
        struct spec_cost flat = {{0}}, linear = {{0}}, none = {{0}};
        for (int t = 1; t <= SPEC_COST_TOKENS; t++) {
                spec_cost_observe(&flat, t, 0.010);
                spec_cost_observe(&linear, t, 0.010 * t);
        }
        ASSERT_EQ(spec_cost_drafts_in_step(&flat, 1, 1.0, 1, 4, 0.3, NULL), 4);
        ASSERT_EQ(spec_cost_drafts_in_step(&linear, 1, 1.0, 1, 4, 0.3, NULL), 1);
        ASSERT_EQ(spec_cost_drafts_in_step(&linear, 1, 1.0, 0, 4, 0.3, NULL), 0);
        ASSERT_EQ(spec_cost_drafts_in_step(&linear, 8, 1.0, 1, 4, 1.0, NULL), 4); /* (1+n) tokens for (8+n)/8 */
        ASSERT_EQ(spec_cost_drafts_in_step(&none, 1, 1.0, 1, 4, 0.1, NULL), 4);
        /* a moving average: one slow reading moves it a fifth of the way */
        spec_cost_observe(&flat, 2, 0.060);
        ASSERT_NEAR(flat.step_s[2], 0.020, 1e-12);
        spec_cost_observe(&flat, 0, 1.0);
        spec_cost_observe(&flat, SPEC_COST_TOKENS + 1, 1.0);
        ASSERT_NEAR(flat.step_s[1], 0.010, 0);
}

/* A drafter that always proposes (MTP) never runs a step without drafts: the counts
 * are then weighed against the cheapest measured one. Steps costing in proportion to
 * their tokens plus a draft each as dear as a token: at acceptance 0.75 one draft pays
 * best; costs that stay flat: all four. */
TEST(drafts_by_cost_without_a_draftless_step) {
        struct spec_cost dear = {{0}}, flat = {{0}};
        for (int t = 2; t <= SPEC_COST_TOKENS; t++) {
                spec_cost_observe(&dear, t, 0.010 * (2 * t - 1));
                spec_cost_observe(&flat, t, 0.010);
        }
        ASSERT_EQ(spec_cost_drafts_in_step(&dear, 1, 1.0, 1, 4, 0.75, NULL), 1);
        ASSERT_EQ(spec_cost_drafts_in_step(&flat, 1, 1.0, 1, 4, 0.75, NULL), 4);
        /* the base is the cheapest measured count, not the first: an unmeasured count
         * is taken as no dearer than 2 drafts (the cheapest here), so 3 gets tried */
        struct spec_cost uneven = {{0}};
        spec_cost_observe(&uneven, 2, 0.050);
        spec_cost_observe(&uneven, 3, 0.020);
        spec_cost_observe(&uneven, 5, 0.060);
        ASSERT_EQ(spec_cost_drafts_in_step(&uneven, 1, 1.0, 1, 4, 0.5, NULL), 3);
        /* an unmeasured count is still tried */
        struct spec_cost partial = {{0}};
        spec_cost_observe(&partial, 2, 0.010);
        spec_cost_observe(&partial, 3, 0.030);
        ASSERT_EQ(spec_cost_drafts_in_step(&partial, 1, 1.0, 1, 4, 0.75, NULL), 4);
}

/* With the cost rule on, the tokens are still the plain ones. */
TEST(greedy_and_seeded_identical_with_cost_rule) {
        struct dse_model *m = fixture_model_open("qwen2-bf16-tied");
        ASSERT_TRUE(m);
        const struct spec_config by_cost = {SPEC_NGRAM, 1, 4, 8, 1};
        const struct params greedy = {.max_tokens = 40, .logprobs = TOP}, sampled = {.temperature = 0.5f, .max_tokens = 40};
        struct spec_stats st;
        spec_equals_plain(m, &greedy, &by_cost, &st); /* drafts alone; none in the batch of 8 (step_tokens 8) */
        ASSERT_EQ(st.draft_tokens, 0);
        spec_equals_plain(m, &sampled, &by_cost, &st);
        dse_model_free(m);
}
