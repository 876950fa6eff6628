/* Continuous batching over the engine's paged KV cache (see sched.h).
 *
 * A running request has n_tokens ids (prompt, then generated) of which the first
 * n_computed are in its KV sequence; the rest are pending. A prompt is all pending at
 * admission (less what the prefix cache supplies); after each sample the new id is the
 * one pending token. So decode and chunked prefill are the same operation, and a
 * preempted request simply becomes pending from position 0 again. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "constraint.h"
#include "sampling.h"
#include "scheduler.h"

/* RQ_LOADING: admitted, its KV sequence waiting for prefix blocks the disk tier reads
 * back (dse_kv_seq_attach_prefix_start); it joins the steps once they are in. */
enum rq_state { RQ_FREE, RQ_WAITING, RQ_LOADING, RQ_RUNNING };

/* How long a step with nothing to evaluate but loads in flight waits for one. */
#define LOAD_WAIT_MS 5

struct rq {
        enum rq_state state;
        uint64_t id;
        int64_t order;             /* arrival number: smaller is older */
        int seq;                   /* KV sequence, -1 while waiting */
        int32_t *tokens;           /* (n_ctx) prompt then generated ids */
        int32_t n_prompt, n_tokens, n_computed, n_gen, max_tokens;
        struct dse_sampler *smp;
        struct dse_detok *detok;   /* NULL without a tokenizer */
        struct penalties pen;
        int32_t logprobs;
        int64_t deadline_ms;
        char *text;                /* event text scratch */
        size_t text_cap;
        struct dsv_ipc_logprob top[SAMPLING_MAX_TOP];
        struct dsv_ipc_bytes top_bytes[SAMPLING_MAX_TOP];
        struct constraint con;     /* con.m NULL: unconstrained */
        struct dsv_ipc_logit_bias *bias;
        size_t n_bias;
        double t_arrival, t_sched, t_first; /* monotonic seconds; 0: not yet */
        int32_t n_cached;          /* prompt tokens the KV cache supplied at first admission */
        int first_load;            /* the first admission's load is in flight: n_cached comes with it */
        struct spec_seq spec;
        int sampling;              /* temperature > 0 */
        int sampled;               /* this step's drafts are draws from the drafter's distribution */
        int n_q;                   /* when sampled: the step's positions with a draft distribution
                                      (rows of sched.draft_q) and a draw in draft[] */
        int32_t draft[SPEC_K_LIMIT + 1]; /* this step's drafts (also at tokens[n_tokens..]); when
                                            sampled, the bonus position's draw after them */
};

struct step_entry {
        int rq;
        int32_t chunk;
        int32_t n_draft; /* draft tokens after the chunk (a decode's one token) */
        int need;        /* new KV blocks */
};

struct sched {
        struct sched_config cfg;
        const struct dse_model *model;
        const struct dse_tokenizer *tok;
        struct dse_kv_cache *kv;
        struct dse_batch *batch;
        sched_emit_fn emit;
        void *user;
        int32_t vocab, eos;
        int n_slots;
        struct rq *rqs;              /* (n_slots) */
        int *active;                 /* (n_slots) slot indices, oldest first */
        int n_active;
        int64_t next_order;
        uint64_t seed_base;
        float *seq_logits;           /* (max_batch, logit_rows, vocab) by KV sequence */
        float *draft_q;              /* (max_batch, logit_rows, vocab) by KV sequence: the draft
                                        distributions of sampled drafting; NULL without */
        float *target_p;             /* (vocab) the target distribution at a position; NULL without */
        int logit_rows;              /* 1 + the most drafts a sequence verifies */
        int fast_forward;            /* the longest forced run a step carries; 0: none */
        struct spec_config spec_cfg;
        struct spec_drafter drafter; /* ops NULL: no speculation */
        struct spec_stats spec;
        struct spec_policy policy;
        float *work;                 /* (vocab) penalised logits */
        struct sampling_scratch scratch;
        struct step_entry *entries;  /* (max_batch) */
        struct dse_batch_seq *bseqs; /* (max_batch) */
        int32_t *bdrafts;            /* (max_batch) drafts of bseqs[i] */
        int *cands;                  /* (n_slots) admission order scratch */
        int *masked;                 /* (max_batch) slots whose mask this step computes */
        struct grammar_cache *grammars;
        struct dse_pool *pool;       /* for the masks; NULL: this thread */
        int64_t constrained_tokens, forced_tokens, fast_forward_tokens;
        struct confidence confidence;
        float logit_scale;           /* the drift test hook's; 1: off */
        int64_t preemptions, steps, step_tokens;
        int64_t step_tokens_buckets[DSV_IPC_STEP_TOKEN_BUCKETS + 1]; /* steps by tokens carried */
        int32_t last_seqs, last_tokens;
};

void sched_free(struct sched *s) {
        if (!s)
                return;
        for (int i = 0; i < s->n_slots; i++) {
                free(s->rqs[i].tokens);
                free(s->rqs[i].text);
                dse_sampler_free(s->rqs[i].smp);
                dse_detok_free(s->rqs[i].detok);
                constraint_done(&s->rqs[i].con, s->grammars);
                free(s->rqs[i].bias);
        }
        grammar_cache_free(s->grammars);
        free(s->masked);
        free(s->rqs);
        free(s->active);
        free(s->seq_logits);
        free(s->draft_q);
        free(s->target_p);
        free(s->work);
        sampling_scratch_done(&s->scratch);
        free(s->entries);
        free(s->bseqs);
        free(s->bdrafts);
        free(s->cands);
        free(s);
}

int sched_new(const struct sched_config *cfg, const struct dse_model *model, const struct dse_tokenizer *tok,
              struct dse_kv_cache *kv, struct dse_batch *batch, sched_emit_fn emit, void *user,
              struct sched **ret_sched) {
        if (!cfg || !model || !kv || !batch || !emit || !ret_sched || cfg->max_batch < 1 || cfg->token_budget < 1 ||
            cfg->n_ctx < 2 || cfg->max_queue < 0)
                return -EINVAL;
        struct sched *s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        s->cfg = *cfg;
        s->model = model;
        s->tok = tok;
        s->kv = kv;
        s->batch = batch;
        s->emit = emit;
        s->logit_scale = 1;
        s->user = user;
        s->vocab = dse_model_vocab_size(model);
        s->eos = tok ? dse_tokenizer_eos(tok) : -1;
        s->n_slots = cfg->max_batch + cfg->max_queue;
        s->seed_base = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull;
        s->rqs = calloc((size_t)s->n_slots, sizeof *s->rqs);
        s->active = calloc((size_t)s->n_slots, sizeof *s->active);
        s->cands = calloc((size_t)s->n_slots, sizeof *s->cands);
        s->logit_rows = 1;
        s->seq_logits = malloc((size_t)cfg->max_batch * (size_t)s->logit_rows * (size_t)s->vocab * sizeof(float));
        s->work = malloc((size_t)s->vocab * sizeof(float));
        s->entries = calloc((size_t)cfg->max_batch, sizeof *s->entries);
        s->bseqs = calloc((size_t)cfg->max_batch, sizeof *s->bseqs);
        s->masked = calloc((size_t)cfg->max_batch, sizeof *s->masked);
        s->bdrafts = calloc((size_t)cfg->max_batch, sizeof *s->bdrafts);
        if (!s->rqs || !s->active || !s->cands || !s->seq_logits || !s->work || !s->entries || !s->bseqs ||
            !s->bdrafts || !s->masked || grammar_cache_new(tok, s->n_slots, &s->grammars) < 0 ||
            sampling_scratch_init(&s->scratch, s->vocab) < 0) {
                sched_free(s);
                return -ENOMEM;
        }
        *ret_sched = s;
        return 0;
}

int sched_set_speculation(struct sched *s, const struct spec_config *sc) {
        struct spec_drafter ngram = {&spec_ngram_ops, NULL}, none = {0};
        return sched_set_drafter(s, sc, sc && sc->method == SPEC_NGRAM ? &ngram : &none);
}

/* Room for the logits of 1 + the most drafts or forced tokens a sequence carries, and
 * (with_q) as many draft distributions. */
static int set_logit_rows(struct sched *s, int k_max, int fast_forward, int with_q) {
        int rows = 1 + (k_max > fast_forward ? k_max : fast_forward);
        size_t n = (size_t)s->cfg.max_batch * (size_t)rows * (size_t)s->vocab;
        float *logits = malloc(n * sizeof(float)), *q = with_q ? malloc(n * sizeof(float)) : NULL,
              *p = with_q ? malloc((size_t)s->vocab * sizeof(float)) : NULL;
        if (!logits || (with_q && (!q || !p))) {
                free(logits);
                free(q);
                free(p);
                return -ENOMEM;
        }
        free(s->seq_logits);
        free(s->draft_q);
        free(s->target_p);
        s->seq_logits = logits;
        s->draft_q = q;
        s->target_p = p;
        s->logit_rows = rows;
        return 0;
}

int sched_set_drafter(struct sched *s, const struct spec_config *sc, const struct spec_drafter *drafter) {
        if (!s || !sc || !drafter || (sc->method != SPEC_OFF && !drafter->ops) ||
            (sc->method != SPEC_OFF && (sc->k_min < 1 || sc->k_max < sc->k_min || sc->k_max > SPEC_K_LIMIT ||
                                        sc->step_tokens < 0)))
                return -EINVAL;
        if (s->n_active > 0 || s->steps > 0)
                return -EBUSY;
        int on = sc->method != SPEC_OFF;
        int r = set_logit_rows(s, on ? sc->k_max : 0, s->fast_forward, on && drafter->ops->propose_sampled);
        if (r < 0)
                return r;
        s->spec_cfg = *sc;
        s->drafter = sc->method == SPEC_OFF ? (struct spec_drafter){0} : *drafter;
        return 0;
}

int sched_set_fast_forward(struct sched *s, int max_run) {
        if (!s || max_run < 0 || max_run > SPEC_K_LIMIT)
                return -EINVAL;
        if (s->n_active > 0 || s->steps > 0)
                return -EBUSY;
        int r = set_logit_rows(s, s->drafter.ops ? s->spec_cfg.k_max : 0, max_run,
                               s->drafter.ops && s->drafter.ops->propose_sampled);
        if (r == 0)
                s->fast_forward = max_run;
        return r;
}

int sched_slot_seq(const struct sched *s, int slot) {
        if (!s || slot < 0 || slot >= s->n_slots || s->rqs[slot].state != RQ_RUNNING)
                return -1;
        return s->rqs[slot].seq;
}

/* ---- events ---- */

static void emit_error(struct sched *s, uint64_t id, enum dsv_ipc_error_code code, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));

static void emit_error(struct sched *s, uint64_t id, enum dsv_ipc_error_code code, const char *fmt, ...) {
        char msg[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        struct dsv_ipc_msg m = {.type = DSV_IPC_ERROR};
        m.u.error.id = id;
        m.u.error.code = code;
        m.u.error.message = msg;
        s->emit(s->user, &m);
}

/* Releases everything the request holds and forgets it. */
static void rq_release(struct sched *s, int slot) {
        struct rq *r = &s->rqs[slot];
        if (s->drafter.ops && s->drafter.ops->release)
                s->drafter.ops->release(s->drafter.self, slot);
        if (r->seq >= 0)
                dse_kv_seq_close(s->kv, r->seq);
        free(r->tokens);
        free(r->text);
        dse_sampler_free(r->smp);
        dse_detok_free(r->detok);
        constraint_done(&r->con, s->grammars);
        free(r->bias);
        memset(r, 0, sizeof *r);
        r->state = RQ_FREE;
        r->seq = -1;
        for (int i = 0; i < s->n_active; i++)
                if (s->active[i] == slot) {
                        memmove(s->active + i, s->active + i + 1, (size_t)(s->n_active - i - 1) * sizeof *s->active);
                        s->n_active--;
                        break;
                }
}

static void finish(struct sched *s, int slot, const char *reason) {
        struct rq *r = &s->rqs[slot];
        double now = worker_mono_s();
        struct dsv_ipc_msg m = {.type = DSV_IPC_FINAL};
        m.u.final.id = r->id;
        m.u.final.finish_reason = (char *)reason;
        m.u.final.prompt_tokens = r->n_prompt;
        m.u.final.completion_tokens = r->n_gen;
        m.u.final.cached_tokens = r->n_cached;
        double sched_t = r->t_sched > 0 ? r->t_sched : now, first = r->t_first > 0 ? r->t_first : now;
        m.u.final.queue_s = sched_t - r->t_arrival;
        m.u.final.prefill_s = first - sched_t;
        m.u.final.decode_s = now - first;
        m.u.final.ttft_s = r->t_first > 0 ? r->t_first - r->t_arrival : 0;
        /* Release first: whoever sees the final sees the blocks free. */
        rq_release(s, slot);
        s->emit(s->user, &m);
}

static void fail(struct sched *s, int slot, enum dsv_ipc_error_code code, const char *why) {
        uint64_t id = s->rqs[slot].id;
        rq_release(s, slot);
        emit_error(s, id, code, "%s", why);
}

/* ---- admission ---- */

static int find_slot(const struct sched *s, uint64_t id) {
        for (int i = 0; i < s->n_active; i++)
                if (s->rqs[s->active[i]].id == id)
                        return s->active[i];
        return -1;
}

static int check_sampling(const struct dsv_ipc_request *req, char *why, size_t size) {
        const struct dsv_ipc_sampling *p = &req->sampling;
        if (!(p->temperature >= 0 && p->temperature <= 100))
                return snprintf(why, size, "temperature %g outside [0, 100]", (double)p->temperature), -EINVAL;
        if (!(p->top_p > 0 && p->top_p <= 1))
                return snprintf(why, size, "top_p %g outside (0, 1]", (double)p->top_p), -EINVAL;
        if (!(p->min_p >= 0 && p->min_p <= 1))
                return snprintf(why, size, "min_p %g outside [0, 1]", (double)p->min_p), -EINVAL;
        if (p->top_k < 0)
                return snprintf(why, size, "top_k %d is negative", p->top_k), -EINVAL;
        if (!(p->repetition_penalty >= 0.01f && p->repetition_penalty <= 100))
                return snprintf(why, size, "repetition_penalty %g outside [0.01, 100]", (double)p->repetition_penalty),
                       -EINVAL;
        if (!(p->presence_penalty >= -2 && p->presence_penalty <= 2) ||
            !(p->frequency_penalty >= -2 && p->frequency_penalty <= 2))
                return snprintf(why, size, "presence/frequency penalty outside [-2, 2]"), -EINVAL;
        if (req->logprobs < 0 || req->logprobs > SAMPLING_MAX_TOP)
                return snprintf(why, size, "logprobs %d outside [0, %d]", req->logprobs, SAMPLING_MAX_TOP), -EINVAL;
        if (req->max_tokens < 0)
                return snprintf(why, size, "max_tokens %d is negative", req->max_tokens), -EINVAL;
        return 0;
}

int sched_add(struct sched *s, const struct dsv_ipc_request *req, const int32_t *tokens, size_t n_prompt,
              int64_t now_ms) {
        char why[256];
        int r;
        if (!s || !req)
                return -EINVAL;
        if (n_prompt == 0) {
                emit_error(s, req->id, DSV_IPC_ERR_INVALID_REQUEST, "empty prompt");
                return -EINVAL;
        }
        if ((r = check_sampling(req, why, sizeof why)) < 0) {
                emit_error(s, req->id, DSV_IPC_ERR_INVALID_REQUEST, "%s", why);
                return r;
        }
        for (size_t i = 0; i < n_prompt; i++)
                if (tokens[i] < 0 || tokens[i] >= s->vocab) {
                        emit_error(s, req->id, DSV_IPC_ERR_INVALID_REQUEST,
                                   "token %d at index %zu is outside the vocabulary (%d)", tokens[i], i, s->vocab);
                        return -EINVAL;
                }
        if (req->max_prompt_tokens > 0 && n_prompt > (size_t)req->max_prompt_tokens) {
                emit_error(s, req->id, DSV_IPC_ERR_PROMPT_TOO_LONG,
                           "prompt of %zu tokens exceeds the server's limit of %d prompt tokens", n_prompt,
                           req->max_prompt_tokens);
                return -E2BIG;
        }
        if (req->max_tokens_to_context && n_prompt >= (size_t)s->cfg.n_ctx) {
                emit_error(s, req->id, DSV_IPC_ERR_PROMPT_TOO_LONG,
                           "prompt of %zu tokens leaves no room to generate in the context of %d", n_prompt,
                           s->cfg.n_ctx);
                return -E2BIG;
        }
        int32_t max_tokens = req->max_tokens_to_context ? s->cfg.n_ctx - (int32_t)n_prompt : req->max_tokens;
        if (n_prompt + (size_t)max_tokens > (size_t)s->cfg.n_ctx) {
                emit_error(s, req->id, DSV_IPC_ERR_PROMPT_TOO_LONG,
                           "prompt of %zu tokens plus max_tokens %d exceeds the context of %d", n_prompt,
                           max_tokens, s->cfg.n_ctx);
                return -E2BIG;
        }
        if (req->n_stop > 0 && !s->tok) {
                emit_error(s, req->id, DSV_IPC_ERR_INVALID_REQUEST, "stop strings need a model with a tokenizer");
                return -EINVAL;
        }
        for (size_t i = 0; i < req->n_logit_bias; i++)
                if (req->logit_bias[i].token < 0 || req->logit_bias[i].token >= s->vocab ||
                    !(req->logit_bias[i].bias >= -100 && req->logit_bias[i].bias <= 100)) {
                        emit_error(s, req->id, DSV_IPC_ERR_INVALID_REQUEST,
                                   "logit_bias: token %d is outside the vocabulary (%d) or its bias outside [-100, 100]",
                                   req->logit_bias[i].token, s->vocab);
                        return -EINVAL;
                }
        if (req->deadline_unix_ms > 0 && now_ms >= req->deadline_unix_ms) {
                emit_error(s, req->id, DSV_IPC_ERR_DEADLINE, "deadline passed before the request was queued");
                return -ETIMEDOUT;
        }
        if (find_slot(s, req->id) >= 0) {
                emit_error(s, req->id, DSV_IPC_ERR_INVALID_REQUEST, "request id %llu is already in flight",
                           (unsigned long long)req->id);
                return -EEXIST;
        }
        int slot = -1;
        for (int i = 0; i < s->n_slots && slot < 0; i++)
                if (s->rqs[i].state == RQ_FREE)
                        slot = i;
        int n_waiting = 0;
        for (int i = 0; i < s->n_active; i++)
                n_waiting += s->rqs[s->active[i]].state == RQ_WAITING;
        if (slot < 0 || n_waiting >= s->cfg.max_queue) {
                emit_error(s, req->id, DSV_IPC_ERR_OVERLOADED, "queue full (%d waiting)", n_waiting);
                return -EBUSY;
        }

        struct rq *q = &s->rqs[slot];
        memset(q, 0, sizeof *q);
        q->seq = -1;
        q->id = req->id;
        q->tokens = malloc((size_t)s->cfg.n_ctx * sizeof(int32_t));
        q->text_cap = 4096;
        for (size_t i = 0; i < req->n_stop; i++)
                q->text_cap += 2 * strlen(req->stop[i]);
        q->text = malloc(q->text_cap);
        struct dse_sampler_params sp;
        dse_sampler_params_default(&sp);
        sp.temperature = req->sampling.temperature;
        sp.top_k = req->sampling.top_k;
        sp.top_p = req->sampling.top_p;
        sp.min_p = req->sampling.min_p;
        /* Without a seed each request still gets its own stream: never the batch's. */
        sp.seed = req->sampling.has_seed ? req->sampling.seed : s->seed_base ^ (req->id * 0xD1B54A32D192ED03ull);
        struct dse_diag diag = {{0}};
        r = q->tokens && q->text ? dse_sampler_new(&sp, s->vocab, &q->smp, &diag) : -ENOMEM;
        if (r >= 0 && s->tok)
                r = dse_detok_new(s->tok, (const char *const *)req->stop, req->n_stop, &q->detok, &diag);
        char what[48] = "";
        if (r >= 0 && req->constraint != DSV_IPC_CONSTRAINT_NONE &&
            (r = constraint_init(&q->con, s->grammars, req, &diag)) < 0)
                snprintf(what, sizeof what, "%s constraint: ", dsv_ipc_constraint_to_string(req->constraint));
        /* Alternatives' bytes come from the token trie. */
        if (r >= 0 && req->logprobs > 0 && s->tok && !grammar_cache_vocab(s->grammars, &diag))
                r = -ENOMEM;
        if (r >= 0 && req->n_logit_bias > 0) {
                q->bias = malloc(req->n_logit_bias * sizeof *q->bias);
                if (q->bias) {
                        memcpy(q->bias, req->logit_bias, req->n_logit_bias * sizeof *q->bias);
                        q->n_bias = req->n_logit_bias;
                } else {
                        r = -ENOMEM;
                }
        }
        if (r < 0) {
                enum dsv_ipc_error_code code = r == -ENOMEM ? DSV_IPC_ERR_INTERNAL : DSV_IPC_ERR_INVALID_REQUEST;
                emit_error(s, req->id, code, "%s%s", what, diag.msg[0] ? diag.msg : strerror(-r));
                free(q->tokens);
                free(q->text);
                free(q->bias);
                dse_sampler_free(q->smp);
                dse_detok_free(q->detok);
                constraint_done(&q->con, s->grammars);
                memset(q, 0, sizeof *q);
                return r;
        }
        memcpy(q->tokens, tokens, n_prompt * sizeof(int32_t));
        q->n_prompt = q->n_tokens = (int32_t)n_prompt;
        q->max_tokens = max_tokens;
        q->sampling = req->sampling.temperature > 0;
        q->pen = (struct penalties){req->sampling.repetition_penalty, req->sampling.presence_penalty,
                                    req->sampling.frequency_penalty};
        q->logprobs = req->logprobs;
        q->deadline_ms = req->deadline_unix_ms;
        q->t_arrival = worker_mono_s();
        q->order = s->next_order++;
        q->state = RQ_WAITING;
        spec_seq_init(&q->spec, &s->spec_cfg);
        spec_seq_prior(&q->spec, &s->policy.accept);
        s->active[s->n_active++] = slot;
        if (q->max_tokens == 0)
                finish(s, slot, "length");
        return 0;
}

void sched_set_pool(struct sched *s, struct dse_pool *pool) {
        s->pool = pool;
}

void sched_set_logit_scale(struct sched *s, float scale) {
        s->logit_scale = scale;
}

int sched_cancel(struct sched *s, uint64_t id, int64_t now_ms) {
        int slot = s ? find_slot(s, id) : -1;
        if (slot < 0)
                return -ENOENT;
        finish(s, slot, "cancelled");
        return 0;
}

void sched_abort_all(struct sched *s, enum dsv_ipc_error_code code, const char *why, int64_t now_ms) {
        while (s->n_active > 0)
                fail(s, s->active[0], code, why);
}

int sched_busy(const struct sched *s) {
        return s->n_active > 0;
}

/* ---- one step ---- */

static int pending(const struct rq *r) {
        return r->n_tokens - r->n_computed;
}

/* Length class for grouping prompts: floor(log2(pending)). */
static int length_class(int n) {
        int c = 0;
        while (n > 1) {
                n >>= 1;
                c++;
        }
        return c;
}

static void preempt(struct sched *s, int slot) {
        struct rq *r = &s->rqs[slot];
        if (s->drafter.ops && s->drafter.ops->release)
                s->drafter.ops->release(s->drafter.self, slot);
        dse_kv_seq_close(s->kv, r->seq);
        r->seq = -1;
        r->n_computed = 0;
        r->state = RQ_WAITING;
        s->preemptions++;
}

/* The youngest request holding a KV sequence, or -1. */
static int youngest_running(const struct sched *s) {
        for (int i = s->n_active - 1; i >= 0; i--)
                if (s->rqs[s->active[i]].state == RQ_RUNNING)
                        return s->active[i];
        return -1;
}

struct step_plan {
        int n;
        int budget;
        int reserved; /* blocks the entries need */
};

static int available(const struct sched *s, const struct step_plan *p) {
        return dse_kv_cache_n_available(s->kv) - p->reserved;
}

static void plan_drop(struct sched *s, struct step_plan *p, int slot) {
        for (int i = 0; i < p->n; i++)
                if (s->entries[i].rq == slot) {
                        p->budget += s->entries[i].chunk + s->entries[i].n_draft;
                        p->reserved -= s->entries[i].need;
                        s->entries[i] = s->entries[--p->n];
                        return;
                }
}

/* Adds chunk tokens of running request slot, preempting the youngest running requests
 * while the pool is short. 0 when added, -ENOSPC when slot itself was preempted. */
static int plan_add_running(struct sched *s, struct step_plan *p, int slot, int32_t chunk) {
        struct rq *r = &s->rqs[slot];
        int need = dse_kv_seq_blocks_needed(s->kv, r->seq, (size_t)chunk);
        while (need > available(s, p)) {
                int victim = youngest_running(s);
                plan_drop(s, p, victim);
                preempt(s, victim);
                if (victim == slot)
                        return -ENOSPC;
        }
        s->entries[p->n++] = (struct step_entry){slot, chunk, 0, need};
        p->budget -= chunk;
        p->reserved += need;
        return 0;
}

/* Opens a sequence for waiting request slot (taking cached prefix blocks) and adds its
 * first chunk; -ENOSPC/-EBUSY when it has to keep waiting (nothing is preempted for a
 * newcomer). */
static int plan_admit(struct sched *s, struct step_plan *p, int slot, double now) {
        struct rq *r = &s->rqs[slot];
        int seq = dse_kv_seq_open(s->kv);
        if (seq < 0)
                return seq;
        /* blocks the disk tier brings back come out of what this step leaves free */
        int cached = dse_kv_seq_attach_prefix_start(s->kv, seq, r->tokens, (size_t)r->n_tokens, available(s, p));
        if (cached >= 0)
                cached = dse_kv_seq_load_poll(s->kv, seq);
        if (cached == -EINPROGRESS) { /* the other sequences step on meanwhile */
                r->seq = seq;
                r->state = RQ_LOADING;
                if (r->t_sched == 0) {
                        r->t_sched = now;
                        r->first_load = 1;
                }
                return 0;
        }
        if (cached < 0) {
                dse_kv_seq_close(s->kv, seq);
                return cached;
        }
        int32_t chunk = pending(r) - cached < p->budget ? pending(r) - cached : p->budget;
        int need = dse_kv_seq_blocks_needed(s->kv, seq, (size_t)chunk);
        if (need > available(s, p)) {
                dse_kv_seq_close(s->kv, seq);
                return -ENOSPC;
        }
        r->seq = seq;
        r->n_computed = cached;
        r->state = RQ_RUNNING;
        if (r->t_sched == 0) {
                r->t_sched = now;
                r->n_cached = cached < r->n_prompt ? cached : r->n_prompt;
        }
        s->entries[p->n++] = (struct step_entry){slot, chunk, 0, need};
        p->budget -= chunk;
        p->reserved += need;
        return 0;
}

/* Requests holding a KV sequence (running or loading). */
static int n_running(const struct sched *s) {
        int n = 0;
        for (int i = 0; i < s->n_active; i++)
                n += s->rqs[s->active[i]].state == RQ_RUNNING || s->rqs[s->active[i]].state == RQ_LOADING;
        return n;
}

/* Loading requests whose blocks are in run from now on, from what came back. */
static void finish_loads(struct sched *s) {
        for (int i = 0; i < s->n_active; i++) {
                struct rq *r = &s->rqs[s->active[i]];
                if (r->state != RQ_LOADING)
                        continue;
                int cached = dse_kv_seq_load_poll(s->kv, r->seq);
                if (cached == -EINPROGRESS)
                        continue;
                r->n_computed = cached;
                r->state = RQ_RUNNING;
                if (r->first_load) {
                        r->first_load = 0;
                        r->n_cached = cached < r->n_prompt ? cached : r->n_prompt;
                }
        }
}

static int n_loading(const struct sched *s) {
        int n = 0;
        for (int i = 0; i < s->n_active; i++)
                n += s->rqs[s->active[i]].state == RQ_LOADING;
        return n;
}

static void plan_step(struct sched *s, struct step_plan *p, double now) {
        int max = s->cfg.max_batch;
        finish_loads(s);
        /* 1. decodes, oldest first: steady inter-token latency */
        for (int i = 0; i < s->n_active && p->n < max && p->budget > 0; i++) {
                int slot = s->active[i];
                if (s->rqs[slot].state == RQ_RUNNING && pending(&s->rqs[slot]) == 1)
                        plan_add_running(s, p, slot, 1);
        }
        /* 2. the next chunks of prompts being prefilled */
        for (int i = 0; i < s->n_active && p->n < max && p->budget > 0; i++) {
                int slot = s->active[i];
                struct rq *r = &s->rqs[slot];
                if (r->state != RQ_RUNNING || pending(r) <= 1)
                        continue;
                int in_plan = 0;
                for (int e = 0; e < p->n; e++)
                        in_plan |= s->entries[e].rq == slot;
                if (!in_plan)
                        plan_add_running(s, p, slot, pending(r) < p->budget ? pending(r) : p->budget);
        }
        /* 3. new prompts: the oldest waiting one, then its length class, then the rest */
        int n_c = 0, head = -1;
        for (int i = 0; i < s->n_active; i++)
                if (s->rqs[s->active[i]].state == RQ_WAITING) {
                        head = s->active[i];
                        break;
                }
        if (head < 0)
                return;
        int cls = length_class(pending(&s->rqs[head]));
        s->cands[n_c++] = head;
        for (int pass = 0; pass < 2; pass++)
                for (int i = 0; i < s->n_active; i++) {
                        int slot = s->active[i];
                        const struct rq *r = &s->rqs[slot];
                        if (slot != head && r->state == RQ_WAITING &&
                            (length_class(pending(r)) == cls) == (pass == 0))
                                s->cands[n_c++] = slot;
                }
        for (int c = 0; c < n_c && p->n < max && p->budget > 0 && n_running(s) < max; c++)
                if (plan_admit(s, p, s->cands[c], now) < 0)
                        break; /* first come, first served: no overtaking on blocks */
}

static void expire(struct sched *s, int64_t now_ms) {
        for (int i = 0; i < s->n_active;) {
                struct rq *r = &s->rqs[s->active[i]];
                if (r->deadline_ms > 0 && now_ms >= r->deadline_ms)
                        finish(s, s->active[i], "deadline");
                else
                        i++;
        }
}

/* Appends text to the request's event buffer at *len (truncating at its capacity,
 * which sched_add sized for one token plus what a detokenizer can hold back). */
static void text_append(struct rq *r, size_t *len, const char *t, int n) {
        if (n <= 0)
                return;
        size_t room = r->text_cap - 1 - *len;
        size_t k = (size_t)n < room ? (size_t)n : room;
        memcpy(r->text + *len, t, k);
        *len += k;
        r->text[*len] = '\0';
}

/* The grammar of a constrained request is complete and allows nothing but EOS next:
 * the output ends here. Computes the next mask on this thread. */
static int grammar_done(struct sched *s, struct rq *r) {
        if (!constraint_accepting(&r->con))
                return 0;
        int n = constraint_fill_mask(&r->con, s->grammars);
        return n == 0 || (n == 1 && sampling_mask_single(r->con.mask, s->vocab) == s->eos);
}

/* s->work: logits (n_logits of the vocabulary, the rest -inf) times scale, plus the
 * request's logit_bias. */
static void biased_logits(struct sched *s, const struct rq *r, const float *logits, int32_t n_logits, float scale) {
        memcpy(s->work, logits, (size_t)n_logits * sizeof(float));
        for (int32_t i = n_logits; i < s->vocab; i++)
                s->work[i] = -INFINITY;
        if (scale != 1)
                for (int32_t i = 0; i < n_logits; i++)
                        s->work[i] *= scale;
        if (r->n_bias > 0)
                sampling_apply_bias(r->bias, r->n_bias, s->work);
}

static const char *no_token_why(const struct rq *r) {
        return r->con.m || r->n_bias ? "logit_bias bans every token the output may continue with"
                                     : "sampling failed: every logit is NaN or -inf";
}

static double position_uniform(const struct rq *r, int i, enum spec_lane lane) {
        return dse_sampler_uniform_at(r->smp, (uint64_t)(r->n_gen + i), (uint32_t)lane);
}

/* The row of the draft distribution of request r's verification position i. */
static float *draft_q_row(const struct sched *s, const struct rq *r, int i) {
        return s->draft_q + ((size_t)r->seq * (size_t)s->logit_rows + (size_t)i) * (size_t)s->vocab;
}

/* The next token of an unconstrained request under sampled drafting, at its step's
 * verification position i: the target distribution p (logit_bias, penalties over the
 * tokens so far, sampler) against the draft's q at i by the standard rule
 * (spec_accept_or_resample); a position the drafter gave no distribution is drawn
 * from p. The draws are the position's own (dse_sampler_uniform_at at the output
 * index), so a seed gives the same tokens however the positions fell into steps. */
static int choose_by_rule(struct sched *s, struct rq *r, const float *logits, int i, const char **why) {
        biased_logits(s, r, logits, s->vocab, s->logit_scale);
        sampling_apply_penalties(&s->scratch, &r->pen, r->tokens, r->n_prompt, r->n_tokens, s->work);
        int tok = dse_sampler_probs(r->smp, s->work, s->target_p);
        if (tok >= 0)
                tok = i < r->n_q ? spec_accept_or_resample(s->target_p, draft_q_row(s, r, i), s->vocab, r->draft[i],
                                                           position_uniform(r, 0, SPEC_LANE_ACCEPT),
                                                           position_uniform(r, 0, SPEC_LANE_RESIDUAL))
                                 : spec_draw(s->target_p, s->vocab, position_uniform(r, 0, SPEC_LANE_PLAIN));
        if (tok < 0)
                *why = no_token_why(r);
        return tok;
}

/* The next token of request slot from its logits: logit_bias, the grammar's mask (a mask
 * allowing one token forces it), penalties, then the sampler. -EINVAL (with why) when
 * nothing can be chosen. */
static int choose(struct sched *s, struct rq *r, const float *logits, const char **why) {
        biased_logits(s, r, logits, s->vocab, s->logit_scale);
        if (r->con.m) {
                if (r->con.n_allowed <= 0) {
                        *why = r->con.n_allowed == 0 ? "the output grammar allows no token here"
                                                     : "computing the output grammar's token mask failed";
                        return -EINVAL;
                }
                s->constrained_tokens++;
                int32_t only = sampling_mask_single(r->con.mask, s->vocab);
                if (only >= 0) {
                        s->forced_tokens++;
                        return only;
                }
                sampling_apply_mask(r->con.mask, s->vocab, s->work);
        }
        sampling_apply_penalties(&s->scratch, &r->pen, r->tokens, r->n_prompt, r->n_tokens, s->work);
        int tok = dse_sampler_sample(r->smp, s->work);
        if (tok < 0)
                *why = no_token_why(r);
        return tok;
}

/* Samples request slot's next token from logits (the model's, for the position after
 * its last token; under sampled drafting, verification position rule_i, else -1),
 * streams it and ends the request when it is done. Returns the token, or -1 when the
 * request ended (it is then released). */
static int sample_next(struct sched *s, int slot, double now, const float *logits, int rule_i) {
        struct rq *r = &s->rqs[slot];
        const char *why = NULL;
        int tok = rule_i >= 0 ? choose_by_rule(s, r, logits, rule_i, &why) : choose(s, r, logits, &why);
        if (tok < 0) {
                fail(s, slot, r->n_bias && !r->con.m ? DSV_IPC_ERR_INVALID_REQUEST : DSV_IPC_ERR_INTERNAL, why);
                return -1;
        }
        confidence_observe(&s->confidence, logits, s->vocab, s->logit_scale, tok, r->n_gen == 0);
        if (r->con.m && constraint_accept(&r->con, s->grammars, tok) < 0) {
                fail(s, slot, DSV_IPC_ERR_INTERNAL, "the output grammar refused the token its mask allowed");
                return -1;
        }
        if (r->t_first == 0)
                r->t_first = now;
        r->tokens[r->n_tokens++] = tok;
        r->n_gen++;

        size_t len = 0;
        r->text[0] = '\0';
        int stopped = 0, is_eos = tok == s->eos;
        int complete = r->con.m && !is_eos && grammar_done(s, r);
        int at_length = r->n_gen >= r->max_tokens || r->n_tokens >= s->cfg.n_ctx;
        const char *t;
        if (r->detok && !is_eos) {
                int n = dse_detok_push(r->detok, tok, &t, &stopped);
                text_append(r, &len, t, n);
        }
        if (r->detok && (is_eos || complete || (at_length && !stopped))) {
                int n = dse_detok_flush(r->detok, &t);
                text_append(r, &len, t, n);
        }
        if (!is_eos || len > 0) {
                struct dsv_ipc_msg m = {.type = DSV_IPC_TOKEN};
                m.u.token.id = r->id;
                m.u.token.token = tok;
                m.u.token.text = r->text;
                if (r->logprobs > 0) {
                        m.u.token.logprob = sampling_logprobs(logits, s->vocab, tok, r->logprobs, r->top);
                        m.u.token.top = r->top;
                        m.u.token.n_top = (size_t)(r->logprobs < s->vocab ? r->logprobs : s->vocab);
                        const struct dse_grammar_vocab *v = s->tok ? grammar_cache_vocab(s->grammars, NULL) : NULL;
                        for (size_t i = 0; v && i < m.u.token.n_top; i++) {
                                size_t n = 0;
                                const uint8_t *b = dse_grammar_vocab_token_bytes(v, r->top[i].token, &n);
                                r->top_bytes[i] = (struct dsv_ipc_bytes){(uint8_t *)b, b ? n : 0};
                        }
                        m.u.token.top_bytes = v ? r->top_bytes : NULL;
                }
                s->emit(s->user, &m);
        }
        if (is_eos || stopped || complete)
                finish(s, slot, "stop");
        else if (at_length)
                finish(s, slot, "length");
        else
                return tok;
        return -1;
}

/* k capped so that the request's drafts and the token after them stay within its
 * max_tokens and the context. */
static int drafts_within(const struct sched *s, const struct rq *r, int k) {
        k = k < r->max_tokens - r->n_gen - 1 ? k : r->max_tokens - r->n_gen - 1;
        return k < s->cfg.n_ctx - r->n_tokens ? k : s->cfg.n_ctx - r->n_tokens;
}

/* Puts the first n of r->draft after entry e's tokens, fewer when free blocks are short
 * (nothing is preempted for a draft); returns how many. */
static int place_drafts(struct sched *s, struct step_plan *p, struct step_entry *e, struct rq *r, int n) {
        /* the blocks for the entry's whole chunk (a prompt's last one may be long) and the drafts */
        int need = n > 0 ? dse_kv_seq_blocks_needed(s->kv, r->seq, (size_t)(e->chunk + n)) : 0;
        while (n > 0 && need - e->need > available(s, p))
                need = --n > 0 ? dse_kv_seq_blocks_needed(s->kv, r->seq, (size_t)(e->chunk + n)) : 0;
        if (n <= 0)
                return 0;
        memcpy(r->tokens + r->n_tokens, r->draft, (size_t)n * sizeof(int32_t));
        e->n_draft = n;
        p->reserved += need - e->need;
        e->need = need;
        p->budget -= n;
        return n;
}

struct pick_ctx {
        struct sched *s;
        int slot;
};

/* spec_pick for request ctx->slot's draft position i: q_i from the drafter's logits as
 * the target's p will be made (logit_bias, penalties over the tokens and the drafts
 * before i, the sampler's filters), kept in draft_q, and the position's draft draw. */
static int pick_draft(void *arg, int i, const float *logits, int n_logits) {
        struct pick_ctx *c = arg;
        struct sched *s = c->s;
        struct rq *r = &s->rqs[c->slot];
        float *q = draft_q_row(s, r, i);
        biased_logits(s, r, logits, n_logits < s->vocab ? n_logits : s->vocab, 1);
        sampling_apply_penalties(&s->scratch, &r->pen, r->tokens, r->n_prompt, r->n_tokens + i, s->work);
        int tok = dse_sampler_probs(r->smp, s->work, q);
        if (tok >= 0)
                tok = spec_draw(q, s->vocab, position_uniform(r, i, SPEC_LANE_DRAFT));
        if (tok < 0)
                return tok;
        /* the history of the next pick's penalties (the last pick's may fall past the context) */
        if (r->n_tokens + i < s->cfg.n_ctx)
                r->tokens[r->n_tokens + i] = tok;
        r->n_q = i + 1;
        return tok;
}

/* Drafts for the planned entries that end with a sample (decodes, and the last chunk
 * of a prompt: a prompt that repeats itself is drafted from its first token on),
 * oldest first, within the request's max_tokens and context, from what the step leaves
 * of the token budget, and only from free blocks (nothing is preempted for a draft).
 * spec.step_tokens bounds the sampled positions of the step (one per such entry, plus
 * the drafts): past it the step is compute-bound and a verified draft costs about
 * what the position it may save costs. Prompt tokens before the last are not counted:
 * a draft adds a few positions to their long pass, and each accepted one saves a later
 * decode step of its sequence. */
static int plan_drafts(struct sched *s, struct step_plan *p) {
        const struct spec_config *sc = &s->spec_cfg;
        int room = p->budget, sampled = 0;
        for (int i = 0; i < p->n; i++)
                sampled += s->entries[i].chunk == pending(&s->rqs[s->entries[i].rq]);
        /* the tokens the step yields so far: one per sampled position, then the
         * expected accepted drafts of each sequence planned */
        double yield = sampled;
        int drawn = 0, decode_only = 1;
        for (int i = 0; i < p->n; i++)
                decode_only &= s->entries[i].chunk == 1;
        if (sc->step_tokens > 0 && sc->step_tokens - sampled < room)
                room = sc->step_tokens - sampled;
        for (int i = 0; i < p->n; i++) {
                struct step_entry *e = &s->entries[i];
                struct rq *r = &s->rqs[e->rq];
                if (e->chunk != pending(r))
                        continue;
                r->sampled = r->sampling && !r->con.m && s->drafter.ops->propose_sampled;
                r->n_q = 0;
                /* A constrained sequence's mask is known for its next position only. */
                if (r->con.m || (room <= 0 && !r->sampled))
                        continue;
                int avail = room > 0 ? drafts_within(s, r, room) : 0;
                /* the cost table holds decode-only steps; a prompt's step is not in it */
                int tokens = decode_only ? s->cfg.token_budget - p->budget : 0;
                int k = avail > 0 ? spec_seq_plan(&r->spec, sc, &s->policy, r->sampled, tokens, yield, avail) : 0;
                drawn |= r->sampled;
                if (k <= 0 && !r->sampled)
                        continue;
                int n;
                if (r->sampled) {
                        /* even with no room for drafts: the draw of the position this step
                         * samples comes from the draft model too */
                        struct pick_ctx ctx = {s, e->rq};
                        struct spec_pick pick = {pick_draft, &ctx};
                        n = s->drafter.ops->propose_sampled(s->drafter.self, e->rq, r->tokens, r->n_tokens,
                                                            k > 0 ? k : 0, r->draft, &pick);
                } else {
                        n = s->drafter.ops->propose(s->drafter.self, e->rq, r->tokens, r->n_tokens, k, r->draft);
                }
                int placed = place_drafts(s, p, e, r, n);
                room -= placed;
                yield += spec_expected_tokens(spec_seq_rate(&r->spec), placed) - 1;
        }
        return drawn;
}

/* Fast-forward: a constrained sequence whose next tokens are forced by its grammar
 * (constraint_forced_run) carries them as drafts that are certain, so one forward pass
 * gives the logits of the whole run and of the position after it. Each is then taken
 * as plain decoding takes it (verify_drafts), so the tokens, logprobs and random draws
 * are the same; within the request's max_tokens and context, what the step leaves of
 * the token budget, and free blocks. */
static void plan_forced(struct sched *s, struct step_plan *p) {
        for (int i = 0; i < p->n && p->budget > 0; i++) {
                struct step_entry *e = &s->entries[i];
                struct rq *r = &s->rqs[e->rq];
                if (e->chunk != pending(r) || !r->con.m || e->n_draft)
                        continue;
                int k = drafts_within(s, r, s->fast_forward < p->budget ? s->fast_forward : p->budget);
                if (k > 0)
                        place_drafts(s, p, e, r, constraint_forced_run(&r->con, s->grammars, s->vocab, s->eos, k,
                                                                       r->draft));
        }
}

struct verify_ctx {
        struct sched *s;
        int slot;
        double now;
        const float *logits; /* (n_draft + 1, vocab) */
};

static int verify_sample(void *arg, int i) {
        struct verify_ctx *c = arg;
        struct rq *r = &c->s->rqs[c->slot];
        if (i > 0 && r->con.m) /* a forced run: the mask of the state after its previous token */
                constraint_fill_mask(&r->con, c->s->grammars);
        return sample_next(c->s, c->slot, c->now, c->logits + (size_t)i * (size_t)c->s->vocab, r->sampled ? i : -1);
}

/* After a step that carried n_draft drafts of request slot (a constrained sequence's:
 * its forced run, plan_forced): emits the accepted drafts and the one token after
 * them, keeps the accepted drafts' KV rows and rolls back the rest. */
static void verify_drafts(struct sched *s, int slot, int32_t n_draft, double now) {
        struct rq *r = &s->rqs[slot];
        int seq = r->seq, ended, forced = r->con.m != NULL;
        struct verify_ctx c = {s, slot, now, s->seq_logits + (size_t)seq * (size_t)s->logit_rows * (size_t)s->vocab};
        int32_t draft[SPEC_K_LIMIT];
        if (n_draft > 0)
                memcpy(draft, r->draft, (size_t)n_draft * sizeof(int32_t));
        int n_acc = spec_verify(draft, n_draft, verify_sample, &c, &ended);
        if (!forced)
                spec_stats_add(&s->spec, n_draft, n_acc);
        if (ended || n_draft == 0)
                return;
        if (forced) {
                s->fast_forward_tokens += n_acc;
        } else {
                if (s->drafter.ops->verified)
                        s->drafter.ops->verified(s->drafter.self, slot, n_draft, n_acc);
                spec_seq_update(&r->spec, n_draft, n_acc);
                spec_accept_add(&s->policy.accept, n_draft, n_acc);
        }
        /* Cannot fail: n_acc <= n_draft, the drafts of this sequence's last step. */
        dse_kv_seq_accept(s->kv, seq, draft, (size_t)n_acc);
        r->n_computed += n_acc;
}

static void fill_masks(void *ctx, size_t begin, size_t end, int ith) {
        struct sched *s = ctx;
        (void)ith;
        for (size_t i = begin; i < end; i++)
                constraint_fill_mask(&s->rqs[s->masked[i]].con, s->grammars);
}

int sched_step(struct sched *s, int64_t now_ms) {
        expire(s, now_ms);
        if (s->n_active == 0)
                return 0;
        double now = worker_mono_s();
        struct step_plan p = {0, s->cfg.token_budget, 0};
        plan_step(s, &p, now);
        if (p.n == 0) {
                if (n_loading(s) > 0)
                        dse_kv_cache_load_wait(s->kv, LOAD_WAIT_MS);
                return 0;
        }
        /* a step's cost includes proposing its drafts (an MTP module runs a forward pass
         * per draft); it is this thread's CPU time, which the time a loaded host gives
         * to other processes does not inflate (the thread does its share of the pass
         * and waits for the pool's, spinning at first, so on a quiet host it is about
         * the wall time) */
        double t_step = worker_thread_cpu_s();
        int drawn = s->drafter.ops ? plan_drafts(s, &p) : 0;
        if (s->fast_forward)
                plan_forced(s, &p);
        int32_t n_tok = 0, n_drafts = 0;
        for (int i = 0; i < p.n; i++) {
                struct rq *r = &s->rqs[s->entries[i].rq];
                int32_t chunk = s->entries[i].chunk, n_draft = s->entries[i].n_draft;
                int last = r->n_computed + chunk == r->n_tokens;
                float *logits = s->seq_logits + (size_t)r->seq * (size_t)s->logit_rows * (size_t)s->vocab;
                s->bseqs[i] = (struct dse_batch_seq){r->seq, r->tokens + r->n_computed, chunk + n_draft,
                                                     last ? logits : NULL};
                s->bdrafts[i] = n_draft;
                n_tok += chunk + n_draft;
                n_drafts += n_draft;
        }
        struct dse_diag diag = {{0}};
        int r = s->drafter.ops || n_drafts ? dse_batch_verify(s->batch, s->bseqs, s->bdrafts, (size_t)p.n, &diag)
                                           : dse_batch_step(s->batch, s->bseqs, (size_t)p.n, &diag);
        if (r < 0) {
                for (int i = 0; i < p.n; i++)
                        fail(s, s->entries[i].rq, DSV_IPC_ERR_INTERNAL, diag.msg[0] ? diag.msg : strerror(-r));
                return r;
        }
        /* Decode-only steps measure what a step costs by its tokens. */
        int decode_only = 1;
        for (int i = 0; i < p.n; i++)
                decode_only &= s->entries[i].chunk == 1;
        if (s->drafter.ops && s->spec_cfg.by_cost && decode_only) {
                /* a step slowed by something else (page faults, caches another process
                 * emptied) would pass for a dear one, and a count the policy then avoids
                 * is not measured again soon: a reading counts at most twice the
                 * average so far */
                struct spec_cost *c = drawn ? &s->policy.cost_drawn : &s->policy.cost;
                double secs = worker_thread_cpu_s() - t_step, avg = n_tok <= SPEC_COST_TOKENS ? c->step_s[n_tok] : 0;
                spec_cost_observe(c, n_tok, avg > 0 && secs > 2 * avg ? 2 * avg : secs);
        }
        s->steps++;
        s->step_tokens += n_tok;
        int b = 0;
        while (b < DSV_IPC_STEP_TOKEN_BUCKETS && n_tok > dsv_ipc_step_token_bounds[b])
                b++;
        s->step_tokens_buckets[b]++;
        s->last_seqs = p.n;
        s->last_tokens = n_tok;
        now = worker_mono_s();
        /* The masks of the constrained sequences that sample now, together on the pool. */
        int n_masked = 0;
        for (int i = 0; i < p.n; i++) {
                struct rq *q = &s->rqs[s->entries[i].rq];
                q->n_computed += s->entries[i].chunk;
                if (q->n_computed == q->n_tokens && q->con.m)
                        s->masked[n_masked++] = s->entries[i].rq;
        }
        if (n_masked > 1 && s->pool)
                dse_pool_parallel_for(s->pool, (size_t)n_masked, fill_masks, s);
        else
                fill_masks(s, 0, (size_t)n_masked, 0);
        /* Entries refer to slots; sampling may finish (and free) a request, never
         * another entry's. */
        for (int i = 0; i < p.n; i++) {
                struct rq *q = &s->rqs[s->entries[i].rq];
                if (q->n_computed != q->n_tokens)
                        continue;
                if (s->drafter.ops || s->entries[i].n_draft)
                        verify_drafts(s, s->entries[i].rq, s->entries[i].n_draft, now);
                else
                        sample_next(s, s->entries[i].rq, now,
                                    s->seq_logits + (size_t)q->seq * (size_t)s->logit_rows * (size_t)s->vocab, -1);
        }
        return n_tok;
}

void sched_get_stats(const struct sched *s, struct sched_stats *st) {
        memset(st, 0, sizeof *st);
        for (int i = 0; i < s->n_active; i++) {
                const struct rq *r = &s->rqs[s->active[i]];
                if (r->state == RQ_RUNNING)
                        st->running++;
                else if (r->state == RQ_LOADING)
                        st->loading++;
                else
                        st->waiting++;
                if (r->n_computed < r->n_prompt)
                        st->queued_prompt_tokens += r->n_prompt - r->n_computed;
        }
        struct dse_kv_stats kst;
        dse_kv_cache_stats(s->kv, &kst);
        st->kv_blocks_used = kst.n_used;
        st->kv_blocks_total = kst.n_blocks;
        st->prefix_hit_rate =
                kst.prefix_query_tokens > 0 ? (double)kst.prefix_hit_tokens / (double)kst.prefix_query_tokens : 0;
        st->prefix_query_tokens = kst.prefix_query_tokens;
        st->prefix_hit_tokens = kst.prefix_hit_tokens;
        st->kv = kst;
        st->preemptions = s->preemptions;
        st->steps = s->steps;
        st->step_tokens = s->step_tokens;
        memcpy(st->step_tokens_buckets, s->step_tokens_buckets, sizeof st->step_tokens_buckets);
        st->last_step_seqs = s->last_seqs;
        st->last_step_tokens = s->last_tokens;
        st->constrained_tokens = s->constrained_tokens;
        st->forced_tokens = s->forced_tokens;
        st->fast_forward_tokens = s->fast_forward_tokens;
        struct grammar_cache_stats gs;
        grammar_cache_get_stats(s->grammars, &gs);
        st->grammar_compiles = gs.compiles;
        st->grammar_cache_hits = gs.hits;
        st->spec = s->spec;
        st->confidence = s->confidence;
}
