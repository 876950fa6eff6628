/* llama and qwen2 forward pass (transformers modeling_llama.py / modeling_qwen2.py):
 * pre-norm decoder layers of GQA attention with rotate-half RoPE and a SwiGLU MLP. Qwen2
 * adds q/k/v biases; tied models reuse the embedding matrix as the LM head.
 * One token per call, float32 activations; K and V rows (one [k | v] row per layer and
 * position) through the session's KV view. */
#include <math.h>
#include <stdio.h>
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
        struct dse_qmat w_gate;    /* (intermediate, hidden) */
        struct dse_qmat w_up;      /* (intermediate, hidden) */
        struct dse_qmat w_down;    /* (hidden, intermediate) */
};

struct llama_state {
        struct llama_layer *layers; /* (n_layers) */
        struct dse_qmat embed;      /* (vocab, hidden) */
        struct dse_qmat lm_head;    /* (vocab, hidden); the embedding when tied */
        float *final_norm;          /* (hidden) */
        struct dse_rope rope;
        int32_t q_dim, kv_dim;      /* n_heads*head_dim, n_kv_heads*head_dim */
        /* activations */
        float *x, *xb, *xb2;        /* (hidden) */
        float *q;                   /* (n_heads*head_dim) */
        float *att_out;             /* (n_heads*head_dim) */
        float *hb, *hb2;            /* (intermediate) */
        float *att;                 /* (n_heads, n_ctx) scores, then probabilities */
        float *cos, *sin;           /* (head_dim/2) */
};

static int layer_weight(struct dse_session *s, int l, const char *what, int64_t rows, int64_t cols,
                        struct dse_qmat *ret, struct dse_diag *reterr) {
        char name[DSE_TENSOR_NAME_MAX];
        snprintf(name, sizeof name, "model.layers.%d.%s.weight", l, what);
        return dse__session_weight(s, name, rows, cols, 0, ret, reterr);
}

static int layer_vector(struct dse_session *s, int l, const char *what, int64_t n, int optional, float **ret,
                        struct dse_diag *reterr) {
        char name[DSE_TENSOR_NAME_MAX];
        snprintf(name, sizeof name, "model.layers.%d.%s", l, what);
        return dse__session_vector(s, name, n, optional, ret, reterr);
}

static int llama_init(struct dse_session *s, struct dse_diag *reterr) {
        const struct dse_hparams *hp = s->hp;
        int64_t D = hp->hidden_size, F = hp->intermediate_size, V = hp->vocab_size, hd = hp->head_dim;
        if (D <= 0 || F <= 0 || V <= 0 || hd <= 0 || hp->n_heads <= 0 || hp->n_kv_heads <= 0 ||
            hp->n_heads % hp->n_kv_heads || hp->n_layers <= 0)
                return dse__fail(reterr, -EBADMSG, "llama: inconsistent hyper-parameters");
        struct llama_state *st = dse__session_alloc(s, sizeof *st);
        if (!st)
                return -ENOMEM;
        s->arch = st;
        st->q_dim = (int32_t)(hp->n_heads * hd);
        st->kv_dim = (int32_t)(hp->n_kv_heads * hd);
        int r = dse__rope_init(&st->rope, hp, (int32_t)hd, DSE_ROPE_PAIRS_HALF, reterr);
        if (r < 0)
                return r;

        if ((r = dse__session_weight(s, "model.embed_tokens.weight", V, D, 0, &st->embed, reterr)) < 0)
                return r;
        if (st->embed.perm)
                return dse__fail(reterr, -EOPNOTSUPP, "model.embed_tokens.weight: permuted columns");
        if ((r = dse__session_weight(s, "lm_head.weight", V, D, hp->tie_word_embeddings, &st->lm_head, reterr)) < 0)
                return r;
        if (!st->lm_head.data) /* tie_word_embeddings */
                st->lm_head = st->embed;
        if ((r = dse__session_vector(s, "model.norm.weight", D, 0, &st->final_norm, reterr)) < 0)
                return r;

        /* qwen2 always has q/k/v biases; llama's attention_bias adds them and o's. */
        int qkv_bias_optional = !(hp->arch == DSE_ARCH_QWEN2 || hp->attention_bias);
        int o_bias_optional = !(hp->arch == DSE_ARCH_LLAMA && hp->attention_bias);
        if (!(st->layers = dse__session_alloc(s, (size_t)hp->n_layers * sizeof *st->layers)))
                return -ENOMEM;
        for (int l = 0; l < hp->n_layers; l++) {
                struct llama_layer *L = &st->layers[l];
                if ((r = layer_vector(s, l, "input_layernorm.weight", D, 0, &L->attn_norm, reterr)) < 0 ||
                    (r = layer_vector(s, l, "post_attention_layernorm.weight", D, 0, &L->ffn_norm, reterr)) < 0 ||
                    (r = layer_weight(s, l, "self_attn.q_proj", st->q_dim, D, &L->wq, reterr)) < 0 ||
                    (r = layer_weight(s, l, "self_attn.k_proj", st->kv_dim, D, &L->wk, reterr)) < 0 ||
                    (r = layer_weight(s, l, "self_attn.v_proj", st->kv_dim, D, &L->wv, reterr)) < 0 ||
                    (r = layer_weight(s, l, "self_attn.o_proj", D, st->q_dim, &L->wo, reterr)) < 0 ||
                    (r = layer_vector(s, l, "self_attn.q_proj.bias", st->q_dim, qkv_bias_optional, &L->bq, reterr)) < 0 ||
                    (r = layer_vector(s, l, "self_attn.k_proj.bias", st->kv_dim, qkv_bias_optional, &L->bk, reterr)) < 0 ||
                    (r = layer_vector(s, l, "self_attn.v_proj.bias", st->kv_dim, qkv_bias_optional, &L->bv, reterr)) < 0 ||
                    (r = layer_vector(s, l, "self_attn.o_proj.bias", D, o_bias_optional, &L->bo, reterr)) < 0 ||
                    (r = layer_weight(s, l, "mlp.gate_proj", F, D, &L->w_gate, reterr)) < 0 ||
                    (r = layer_weight(s, l, "mlp.up_proj", F, D, &L->w_up, reterr)) < 0 ||
                    (r = layer_weight(s, l, "mlp.down_proj", D, F, &L->w_down, reterr)) < 0)
                        return r;
        }

        if (!(st->x = dse__session_alloc(s, (size_t)D * 4)) || !(st->xb = dse__session_alloc(s, (size_t)D * 4)) ||
            !(st->xb2 = dse__session_alloc(s, (size_t)D * 4)) ||
            !(st->q = dse__session_alloc(s, (size_t)st->q_dim * 4)) ||
            !(st->att_out = dse__session_alloc(s, (size_t)st->q_dim * 4)) ||
            !(st->hb = dse__session_alloc(s, (size_t)F * 4)) || !(st->hb2 = dse__session_alloc(s, (size_t)F * 4)) ||
            !(st->att = dse__session_alloc(s, (size_t)hp->n_heads * (size_t)s->n_ctx * 4)) ||
            !(st->cos = dse__session_alloc(s, (size_t)hd / 2 * 4)) ||
            !(st->sin = dse__session_alloc(s, (size_t)hd / 2 * 4)))
                return -ENOMEM;
        return 0;
}

struct attn_job {
        struct dse_session *s;
        int l;
        int32_t pos;
};

/* Causal attention of heads [h0, h1) at position pos over cached positions 0..pos. */
static void attn_heads(void *ctx, size_t h0, size_t h1, int ith) {
        const struct attn_job *j = ctx;
        struct dse_session *s = j->s;
        const struct dse_hparams *hp = s->hp;
        struct llama_state *st = s->arch;
        int32_t hd = hp->head_dim, group = hp->n_heads / hp->n_kv_heads, T = j->pos + 1;
        float scale = 1.0f / sqrtf((float)hd);
        for (size_t h = h0; h < h1; h++) {
                const float *q = st->q + h * hd;                    /* (head_dim) */
                float *att = st->att + h * (size_t)s->n_ctx;        /* (T) */
                float *out = st->att_out + h * hd;                  /* (head_dim) */
                size_t kvo = (h / group) * (size_t)hd;              /* GQA: the head's kv head */
                for (int32_t t = 0; t < T; t++) /* row t: [k (kv_dim) | v (kv_dim)] */
                        att[t] = s->k.dot(q, dse__kv_row(&s->kv, j->l, t) + kvo, hd) * scale;
                s->k.softmax(att, T);
                memset(out, 0, (size_t)hd * sizeof(float));
                for (int32_t t = 0; t < T; t++)
                        s->k.axpy(att[t], dse__kv_row(&s->kv, j->l, t) + st->kv_dim + kvo, out, hd);
        }
}

static void llama_forward(struct dse_session *s, int32_t token, int32_t pos, float *logits) {
        const struct dse_hparams *hp = s->hp;
        struct llama_state *st = s->arch;
        int64_t D = hp->hidden_size, F = hp->intermediate_size;
        int32_t hd = hp->head_dim;
        float *x = st->x; /* (hidden) residual stream */

        s->k.dequant_row(&st->embed, token, x);
        dse__rope_angles(&st->rope, pos, st->cos, st->sin);

        for (int l = 0; l < hp->n_layers; l++) {
                const struct llama_layer *L = &st->layers[l];
                float *k = dse__kv_row(&s->kv, l, pos); /* (kv_dim) this position's cache row */
                float *v = k + st->kv_dim;              /* (kv_dim) */

                /* attention: q, k, v projections, RoPE on q and k, cache k and v */
                s->k.rmsnorm(st->xb, x, L->attn_norm, D, hp->rms_norm_eps);
                dse__linear(s, &L->wq, st->xb, st->q, L->bq);
                dse__linear(s, &L->wk, st->xb, k, L->bk);
                dse__linear(s, &L->wv, st->xb, v, L->bv);
                for (int h = 0; h < hp->n_heads; h++)
                        dse__rope_apply(&st->rope, st->q + (size_t)h * hd, st->cos, st->sin);
                for (int h = 0; h < hp->n_kv_heads; h++)
                        dse__rope_apply(&st->rope, k + (size_t)h * hd, st->cos, st->sin);

                struct attn_job job = {s, l, pos};
                dse__parallel(s, (size_t)hp->n_heads, attn_heads, &job);
                dse__linear(s, &L->wo, st->att_out, st->xb2, L->bo);
                for (int64_t i = 0; i < D; i++)
                        x[i] += st->xb2[i];

                /* SwiGLU MLP: down(silu(gate(x)) * up(x)) */
                s->k.rmsnorm(st->xb, x, L->ffn_norm, D, hp->rms_norm_eps);
                dse__linear(s, &L->w_gate, st->xb, st->hb, NULL);
                dse__linear(s, &L->w_up, st->xb, st->hb2, NULL);
                s->k.swiglu(st->hb, st->hb2, F);
                dse__linear(s, &L->w_down, st->hb, st->xb2, NULL);
                for (int64_t i = 0; i < D; i++)
                        x[i] += st->xb2[i];
        }

        if (!logits)
                return;
        s->k.rmsnorm(st->xb, x, st->final_norm, D, hp->rms_norm_eps);
        dse__linear(s, &st->lm_head, st->xb, logits, NULL);
}

static size_t llama_kv_bytes_per_token(const struct dse_session *s) {
        const struct llama_state *st = s->arch;
        return 2 * (size_t)s->hp->n_layers * (size_t)st->kv_dim * sizeof(float);
}

const struct dse__arch_ops dse__arch_llama = {
        .init = llama_init,
        .forward = llama_forward,
        .kv_bytes_per_token = llama_kv_bytes_per_token,
};
