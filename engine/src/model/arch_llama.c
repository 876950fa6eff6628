/* llama and qwen2 forward pass (transformers modeling_llama.py / modeling_qwen2.py):
 * pre-norm decoder layers of GQA attention with rotate-half RoPE and a SwiGLU MLP. Qwen2
 * adds q/k/v biases; tied models reuse the embedding matrix as the LM head.
 * Up to DSE__MAX_STEP_TOKENS tokens per call share every pass over the weights
 * (activations int8 or float32 as the session says, dse.h); K and V rows (one [k | v]
 * row per layer and position) through each token's KV view. The weights are bound once
 * per model (llama_bind); a session holds only its activations (llama_init). */
#include <math.h>
#include <string.h>

#include "internal.h"
#include "model/forward.h"
#include "model/rope.h"

struct llama_layer {
        float *attn_norm;          /* (hidden) input_layernorm */
        struct dse_qmat wq;        /* (n_heads*head_dim, hidden) */
        struct dse_qmat wk, wv;    /* (n_kv_heads*head_dim, hidden) */
        struct dse_qmat wo;        /* (hidden, n_heads*head_dim) */
        float *bq, *bk, *bv, *bo;  /* biases (qwen2: q/k/v) or NULL */
        float *ffn_norm;           /* (hidden) post_attention_layernorm */
        struct dse__mlp mlp;       /* (intermediate) wide */
};

/* The model's bindings, shared by its sessions. */
struct llama_weights {
        struct llama_layer *layers; /* (n_layers) */
        struct dse__embed_head eh;
        struct dse_rope rope;
        int32_t q_dim, kv_dim;      /* n_heads*head_dim, n_kv_heads*head_dim */
};

/* A session's activations, one row per token of the call (T = DSE__MAX_STEP_TOKENS). */
struct llama_state {
        const struct llama_weights *w;
        float *x, *xb, *xb2;        /* (T, hidden) */
        float *q;                   /* (T, n_heads*head_dim) */
        float *k, *v;               /* (T, n_kv_heads*head_dim) before they go to the cache */
        float *att_out;             /* (T, n_heads*head_dim) */
        float *hb, *hb2;            /* (T, intermediate) */
        float *cos, *sin;           /* (T, head_dim/2) */
        float *logits;              /* (T, vocab) */
        float *att;                 /* (n_threads, group, n_ctx) scores, then probabilities, per thread */
};

static int llama_bind(struct dse__weights *w, struct dse_diag *reterr) {
        const struct dse_hparams *hp = w->hp;
        int64_t D = hp->hidden_size, F = hp->intermediate_size, V = hp->vocab_size, hd = hp->head_dim;
        if (D <= 0 || F <= 0 || V <= 0 || hd <= 0 || hp->n_heads <= 0 || hp->n_kv_heads <= 0 ||
            hp->n_heads % hp->n_kv_heads || hp->n_layers <= 0)
                return dse__fail(reterr, -EBADMSG, "llama: inconsistent hyper-parameters");
        struct llama_weights *lw = dse__weights_alloc(w, sizeof *lw);
        if (!lw)
                return -ENOMEM;
        w->arch = lw;
        lw->q_dim = (int32_t)(hp->n_heads * hd);
        lw->kv_dim = (int32_t)(hp->n_kv_heads * hd);
        int r = dse__rope_init(&lw->rope, hp, (int32_t)hd, DSE_ROPE_PAIRS_HALF, reterr);
        if (r < 0)
                return r;
        if ((r = dse__embed_head_bind(w, &lw->eh, reterr)) < 0)
                return r;

        /* qwen2 always has q/k/v biases; llama's attention_bias adds them and o's. */
        int qkv_bias_optional = !(hp->arch == DSE_ARCH_QWEN2 || hp->attention_bias);
        int o_bias_optional = !(hp->arch == DSE_ARCH_LLAMA && hp->attention_bias);
        if (!(lw->layers = dse__weights_alloc(w, (size_t)hp->n_layers * sizeof *lw->layers)))
                return -ENOMEM;
        for (int l = 0; l < hp->n_layers; l++) {
                struct llama_layer *L = &lw->layers[l];
                if ((r = dse__weights_layer_vector(w, l, "input_layernorm.weight", D, 0, &L->attn_norm, reterr)) < 0 ||
                    (r = dse__weights_layer_vector(w, l, "post_attention_layernorm.weight", D, 0, &L->ffn_norm, reterr)) < 0 ||
                    (r = dse__weights_layer_matrix(w, l, "self_attn.q_proj", lw->q_dim, D, &L->wq, reterr)) < 0 ||
                    (r = dse__weights_layer_matrix(w, l, "self_attn.k_proj", lw->kv_dim, D, &L->wk, reterr)) < 0 ||
                    (r = dse__weights_layer_matrix(w, l, "self_attn.v_proj", lw->kv_dim, D, &L->wv, reterr)) < 0 ||
                    (r = dse__weights_layer_matrix(w, l, "self_attn.o_proj", D, lw->q_dim, &L->wo, reterr)) < 0 ||
                    (r = dse__weights_layer_vector(w, l, "self_attn.q_proj.bias", lw->q_dim, qkv_bias_optional, &L->bq,
                                                   reterr)) < 0 ||
                    (r = dse__weights_layer_vector(w, l, "self_attn.k_proj.bias", lw->kv_dim, qkv_bias_optional, &L->bk,
                                                   reterr)) < 0 ||
                    (r = dse__weights_layer_vector(w, l, "self_attn.v_proj.bias", lw->kv_dim, qkv_bias_optional, &L->bv,
                                                   reterr)) < 0 ||
                    (r = dse__weights_layer_vector(w, l, "self_attn.o_proj.bias", D, o_bias_optional, &L->bo, reterr)) < 0 ||
                    (r = dse__weights_layer_mlp(w, l, "mlp", F, &L->mlp, reterr)) < 0)
                        return r;
        }
        return 0;
}

static int llama_init(struct dse_session *s) {
        const struct dse_hparams *hp = s->hp;
        int64_t D = hp->hidden_size, F = hp->intermediate_size, V = hp->vocab_size, hd = hp->head_dim;
        struct llama_state *st = dse__session_alloc(s, sizeof *st);
        if (!st)
                return -ENOMEM;
        s->arch = st;
        st->w = s->w->arch;
        size_t T = DSE__MAX_STEP_TOKENS;
#define ALLOC(p, n) (((p) = dse__session_alloc(s, (size_t)(n) * sizeof(float))) != NULL)
        if (!ALLOC(st->x, T * D) || !ALLOC(st->xb, T * D) || !ALLOC(st->xb2, T * D) || !ALLOC(st->q, T * st->w->q_dim) ||
            !ALLOC(st->k, T * st->w->kv_dim) || !ALLOC(st->v, T * st->w->kv_dim) || !ALLOC(st->att_out, T * st->w->q_dim) ||
            !ALLOC(st->hb, T * F) || !ALLOC(st->hb2, T * F) || !ALLOC(st->cos, T * hd / 2) ||
            !ALLOC(st->sin, T * hd / 2) || !ALLOC(st->logits, T * V) ||
            !ALLOC(st->att, (size_t)s->n_threads * (size_t)(hp->n_heads / hp->n_kv_heads) * (size_t)s->n_ctx))
                return -ENOMEM;
#undef ALLOC
        return 0;
}

struct attn_job {
        struct dse_session *s;
        int l;
        const struct dse__tok *toks; /* (n) the call's tokens */
        int n;
        int n_long;                  /* tokens over the split's positions (dse__attend_long) ... */
        int long_tok[DSE__MAX_STEP_TOKENS]; /* ... their indices */
};

/* Causal attention of units [u0, u1), a unit one KV head's query heads (its group) for
 * one token of the call: token i at position pos attends to its sequence's cached
 * positions 0..pos (its own row included, written before), the group's queries over each
 * row read once. One parallel region per layer whatever the token count; a head's result
 * does not depend on which thread or which other tokens share the call. */
static void attn_units(void *ctx, size_t u0, size_t u1, int ith) {
        const struct attn_job *j = ctx;
        struct dse_session *s = j->s;
        const struct dse_hparams *hp = s->hp;
        struct llama_state *st = s->arch;
        int32_t hd = hp->head_dim, group = hp->n_heads / hp->n_kv_heads, qd = st->w->q_dim, kvd = st->w->kv_dim;
        float scale = 1.0f / sqrtf((float)hd);
        float *att = st->att + (size_t)ith * (size_t)group * (size_t)s->n_ctx; /* (group, T) this thread's */
        for (size_t u = u0; u < u1; u++) {
                int32_t kh = (int32_t)(u / (size_t)j->n), i = (int32_t)(u % (size_t)j->n);
                int32_t T = j->toks[i].pos + 1;
                if (dse__attn_is_long(s, T))
                        continue;
                size_t qo = (size_t)i * qd + (size_t)kh * group * hd; /* the group's first head */
                /* rows [k (kv_dim) | v (kv_dim)] */
                dse__attend(s, j->toks[i].kv, j->l, T, st->q + qo, hd, group, (int64_t)kh * hd, hd, scale,
                            kvd + (int64_t)kh * hd, hd, att, st->att_out + qo, hd);
        }
}

/* (long token, KV head) pair p of the split form: as attn_units attends. */
static void attn_pair(const void *ctx, int p, struct dse__attn_pair *ret) {
        const struct attn_job *j = ctx;
        const struct dse_hparams *hp = j->s->hp;
        const struct llama_state *st = j->s->arch;
        int32_t hd = hp->head_dim, group = hp->n_heads / hp->n_kv_heads, kh = p % hp->n_kv_heads;
        int32_t i = j->long_tok[p / hp->n_kv_heads];
        int64_t kvo = (int64_t)kh * hd;
        size_t qo = (size_t)i * st->w->q_dim + (size_t)kh * group * hd;
        *ret = (struct dse__attn_pair){.kv = j->toks[i].kv, .T = j->toks[i].pos + 1, .q = st->q + qo, .k_off = kvo,
                                       .v_off = st->w->kv_dim + kvo, .out = st->att_out + qo, .n_q = group,
                                       .ldq = hd, .ldo = hd};
}

static void llama_forward(struct dse_session *s, const struct dse__tok *toks, int n) {
        const struct dse_hparams *hp = s->hp;
        struct llama_state *st = s->arch;
        const struct llama_weights *w = st->w;
        int64_t D = hp->hidden_size, F = hp->intermediate_size;
        int32_t hd = hp->head_dim, qd = w->q_dim, kvd = w->kv_dim;
        float *x = st->x; /* (n, hidden) residual streams */

        dse__embed_tokens(s, &w->eh, toks, n, x);
        for (int i = 0; i < n; i++)
                dse__rope_angles(&w->rope, toks[i].pos, st->cos + i * hd / 2, st->sin + i * hd / 2);

        for (int l = 0; l < hp->n_layers; l++) {
                const struct llama_layer *L = &w->layers[l];

                /* attention: q, k, v projections (one region, x quantized once), RoPE on q
                 * and k, cache k and v */
                for (int i = 0; i < n; i++)
                        s->k.rmsnorm(st->xb + i * D, x + i * D, L->attn_norm, D, hp->rms_norm_eps);
                struct dse__mm qkv[3] = {
                        {.w = &L->wq, .x = st->xb, .ldx = D, .n = n, .y = st->q, .ldy = qd, .bias = L->bq},
                        {.w = &L->wk, .x = st->xb, .ldx = D, .n = n, .y = st->k, .ldy = kvd, .bias = L->bk},
                        {.w = &L->wv, .x = st->xb, .ldx = D, .n = n, .y = st->v, .ldy = kvd, .bias = L->bv},
                };
                dse__linear_group(s, qkv, 3);
                for (int i = 0; i < n; i++) {
                        const float *cos = st->cos + i * hd / 2, *sin = st->sin + i * hd / 2;
                        for (int h = 0; h < hp->n_heads; h++)
                                dse__rope_apply(&w->rope, st->q + (size_t)i * qd + (size_t)h * hd, cos, sin);
                        for (int h = 0; h < hp->n_kv_heads; h++)
                                dse__rope_apply(&w->rope, st->k + (size_t)i * kvd + (size_t)h * hd, cos, sin);
                        /* the row [k | v], in the cache's type */
                        dse__kv_store(toks[i].kv, l, toks[i].pos, 0, st->k + (size_t)i * kvd, kvd);
                        dse__kv_store(toks[i].kv, l, toks[i].pos, kvd, st->v + (size_t)i * kvd, kvd);
                }
                /* Every token's row is cached before any attends: a token sees its
                 * sequence's earlier tokens of this call through the cache. */
                struct attn_job job = {.s = s, .l = l, .toks = toks, .n = n};
                for (int i = 0; i < n; i++)
                        if (dse__attn_is_long(s, toks[i].pos + 1))
                                job.long_tok[job.n_long++] = i;
                dse__parallel(s, (size_t)hp->n_kv_heads * (size_t)n, attn_units, &job);
                if (job.n_long)
                        dse__attend_long(s, l, job.n_long * hp->n_kv_heads, attn_pair, &job, hd, hd,
                                         1.0f / sqrtf((float)hd));
                dse__linear_n(s, &L->wo, st->att_out, qd, n, st->xb2, D, L->bo);
                for (int64_t i = 0; i < n * D; i++)
                        x[i] += st->xb2[i];

                /* SwiGLU MLP: down(silu(gate(x)) * up(x)), gate, up and the gate in one region */
                for (int i = 0; i < n; i++)
                        s->k.rmsnorm(st->xb + i * D, x + i * D, L->ffn_norm, D, hp->rms_norm_eps);
                dse__swiglu_mlp(s, &L->mlp, st->xb, n, st->hb, st->hb2, F, st->xb2);
                for (int64_t i = 0; i < n * D; i++)
                        x[i] += st->xb2[i];
        }

        dse__lm_head(s, &w->eh, toks, n, x, st->xb, st->logits);
}

const struct dse__arch_ops dse__arch_llama = {
        .bind = llama_bind,
        .init = llama_init,
        .forward = llama_forward,
};
