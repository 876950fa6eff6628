/* DeepSeek-V2/V3 forward pass (DeepSeek modeling_deepseek.py): pre-norm decoder layers
 * of multi-head latent attention (MLA) and a dense SwiGLU MLP (layers before
 * first_k_dense_replace or off moe_layer_freq) or a routed MoE with shared experts.
 *
 * MLA caches per token and layer only the normalised KV latent c (kv_lora_rank) and the
 * rotated shared key k_pe (qk_rope_head_dim). Attention runs in the absorbed form: with
 * kv_b_proj's per-head blocks W_uk (nope, kv_lora_rank) and W_uv (v, kv_lora_rank),
 *     score_t = q_nope . (W_uk c_t) + q_pe . k_pe_t = (W_uk^T q_nope) . c_t + q_pe . k_pe_t
 *     out     = sum_t p_t W_uv c_t = W_uv (sum_t p_t c_t)
 * The naive form (decompress k_nope and v per cached token) is kept for the
 * absorbed-vs-naive test (dse__session_set_mla_naive). Layers >= num_hidden_layers (V3
 * MTP modules) are never looked at. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"
#include "model/forward.h"
#include "model/rope.h"

/* q_a_layernorm and kv_a_layernorm use the reference RMSNorm default, not rms_norm_eps. */
#define MLA_NORM_EPS 1e-6f

struct ds_mlp {
        struct dse_qmat gate; /* (width, hidden) */
        struct dse_qmat up;   /* (width, hidden) */
        struct dse_qmat down; /* (hidden, width) */
};

struct ds_layer {
        float *attn_norm;        /* (hidden) input_layernorm */
        struct dse_qmat wq;      /* (H*(nope+rope), hidden) when q_lora_rank == 0 */
        struct dse_qmat wq_a;    /* (q_lora_rank, hidden) */
        float *q_a_norm;         /* (q_lora_rank) */
        struct dse_qmat wq_b;    /* (H*(nope+rope), q_lora_rank) */
        struct dse_qmat wkv_a;   /* (kv_lora_rank + rope, hidden) kv_a_proj_with_mqa */
        float *kv_a_norm;        /* (kv_lora_rank) */
        struct dse_qmat wkv_b;   /* (H*(nope+v), kv_lora_rank): per head nope rows of W_uk, v rows of W_uv */
        struct dse_qmat wo;      /* (hidden, H*v) */
        float *ffn_norm;         /* (hidden) post_attention_layernorm */
        int is_moe;
        struct ds_mlp mlp;       /* dense MLP (intermediate) or shared experts (moe_inter*n_shared) */
        int has_shared;
        struct dse_qmat router;  /* (n_experts, hidden) mlp.gate.weight */
        float *router_bias;      /* (n_experts) V3 e_score_correction_bias, else NULL */
        struct ds_mlp *experts;  /* (n_experts) each (moe_inter) wide */
};

struct ds_state {
        struct ds_layer *layers; /* (n_layers) */
        struct dse_qmat embed;   /* (vocab, hidden) */
        struct dse_qmat lm_head; /* (vocab, hidden) */
        float *final_norm;       /* (hidden) */
        struct dse_rope rope;    /* over qk_rope_head_dim, interleaved pairs */
        float softmax_scale;
        int32_t H, nope, rope_dim, vdim, kvr, qk_dim, lat_dim; /* lat_dim = kvr + rope_dim */
        int n_threads;
        int64_t mlp_width;       /* widest MLP: the row stride of hb, hb2 */
        /* activations: per token of the call (T = DSE__MAX_STEP_TOKENS) ... */
        float *x, *xb, *xb2;     /* (T, hidden) */
        float *qa;               /* (T, q_lora_rank) */
        float *q;                /* (T, H, nope+rope) */
        float *kv_a;             /* (T, kvr + rope) */
        float *att_out;          /* (T, H, v) */
        float *hb, *hb2;         /* (T, mlp_width) */
        float *cos, *sin;        /* (T, rope/2) */
        float *logits;           /* (T, vocab) */
        /* attention, all tokens of the call per head */
        float *q_abs;            /* (T, H, kvr + rope) [W_uk^T q_nope | q_pe] per token and head: a query
                                  * over whole latent rows [c | k_pe] */
        float *o_lat;            /* (T, H, kvr) sum_t p_t c_t per token and head */
        float *uv;               /* (n_threads, T, H*(nope+v)) rows of kv_b_proj applied to o_lat */
        float *att;              /* (n_threads, n_ctx) scores, then probabilities */
        float *kvb_full;         /* (n_threads, H*(nope+v)) naive form: decompressed k/v of one token */
        /* MoE: the (token, k) pairs gathered expert by expert (K = n_experts_per_tok) */
        float *router_logits;    /* (T, n_experts) */
        int32_t *moe_idx;        /* (T, K) chosen experts */
        float *moe_w;            /* (T, K) their weights */
        int32_t *moe_pos;        /* (T, K) where pair (t, k) sits in the gathered order */
        int32_t *moe_first;      /* (n_experts + 1) each expert's first gathered row */
        float *moe_in;           /* (T*K, hidden) gathered inputs */
        float *moe_hb, *moe_hb2; /* (T*K, moe_inter) gathered gate/up outputs */
        float *moe_eo;           /* (T*K, hidden) gathered expert outputs */
        float *moe_out;          /* (T, hidden) */
        void *moe_xq_in;         /* int8 copies of moe_in ... */
        void *moe_xq_hb;         /* ... and of moe_hb */
        struct dse__mm *moe_mm;  /* (n_experts + 1) one grouped call's items */
        struct dse_xq *moe_sub;  /* (n_experts) each expert's rows of the int8 copies */
        /* KV rows (through s->kv): latent c then k_pe, (kvr + rope) per layer and token */
};

static int lw(struct dse_session *s, int l, const char *what, int64_t rows, int64_t cols, struct dse_qmat *ret,
              struct dse_diag *reterr) {
        char name[DSE_TENSOR_NAME_MAX];
        snprintf(name, sizeof name, "model.layers.%d.%s.weight", l, what);
        return dse__session_weight(s, name, rows, cols, 0, ret, reterr);
}

static int lv(struct dse_session *s, int l, const char *what, int64_t n, int optional, float **ret,
              struct dse_diag *reterr) {
        char name[DSE_TENSOR_NAME_MAX];
        snprintf(name, sizeof name, "model.layers.%d.%s", l, what);
        return dse__session_vector(s, name, n, optional, ret, reterr);
}

static int mlp_weights(struct dse_session *s, int l, const char *prefix, int64_t width, struct ds_mlp *m,
                       struct dse_diag *reterr) {
        int64_t D = s->hp->hidden_size;
        char what[96];
        int r;
        snprintf(what, sizeof what, "%s.gate_proj", prefix);
        if ((r = lw(s, l, what, width, D, &m->gate, reterr)) < 0)
                return r;
        snprintf(what, sizeof what, "%s.up_proj", prefix);
        if ((r = lw(s, l, what, width, D, &m->up, reterr)) < 0)
                return r;
        snprintf(what, sizeof what, "%s.down_proj", prefix);
        return lw(s, l, what, D, width, &m->down, reterr);
}

static int is_moe_layer(const struct dse_hparams *hp, int l) {
        return hp->n_routed_experts > 0 && l >= hp->first_k_dense_replace &&
               l % (hp->moe_layer_freq > 0 ? hp->moe_layer_freq : 1) == 0;
}

static int ds_init(struct dse_session *s, struct dse_diag *reterr) {
        const struct dse_hparams *hp = s->hp;
        int64_t D = hp->hidden_size, V = hp->vocab_size;
        if (D <= 0 || V <= 0 || hp->n_heads <= 0 || hp->n_layers <= 0 || hp->kv_lora_rank <= 0 ||
            hp->qk_nope_head_dim <= 0 || hp->qk_rope_head_dim <= 0 || hp->v_head_dim <= 0 || hp->q_lora_rank < 0)
                return dse__fail(reterr, -EBADMSG, "deepseek: inconsistent MLA hyper-parameters");
        struct ds_state *st = dse__session_alloc(s, sizeof *st);
        if (!st)
                return -ENOMEM;
        s->arch = st;
        st->H = hp->n_heads;
        st->nope = hp->qk_nope_head_dim;
        st->rope_dim = hp->qk_rope_head_dim;
        st->vdim = hp->v_head_dim;
        st->kvr = hp->kv_lora_rank;
        st->qk_dim = st->nope + st->rope_dim;
        st->lat_dim = st->kvr + st->rope_dim;
        st->n_threads = s->pool ? dse_pool_n_threads(s->pool) : 1;
        int r = dse__rope_init(&st->rope, hp, st->rope_dim, DSE_ROPE_PAIRS_INTERLEAVED, reterr);
        if (r < 0)
                return r;
        /* softmax scale: q_head_dim^-0.5, times mscale(factor, mscale_all_dim)^2 under
         * rope scaling with a non-zero mscale_all_dim */
        double scale = 1.0 / sqrt((double)st->qk_dim);
        if (hp->rope_type != DSE_ROPE_DEFAULT && hp->rope_mscale_all_dim != 0) {
                double m = dse__yarn_mscale(hp->rope_factor, hp->rope_mscale_all_dim);
                scale *= m * m;
        }
        st->softmax_scale = (float)scale;
        if (hp->n_routed_experts > 0 && (r = dse__moe_check(hp, reterr)) < 0)
                return r;

        if ((r = dse__session_weight(s, "model.embed_tokens.weight", V, D, 0, &st->embed, reterr)) < 0)
                return r;
        if (st->embed.perm)
                return dse__fail(reterr, -EOPNOTSUPP, "model.embed_tokens.weight: permuted columns");
        if ((r = dse__session_weight(s, "lm_head.weight", V, D, hp->tie_word_embeddings, &st->lm_head, reterr)) < 0)
                return r;
        if (!st->lm_head.data)
                st->lm_head = st->embed;
        if ((r = dse__session_vector(s, "model.norm.weight", D, 0, &st->final_norm, reterr)) < 0)
                return r;

        int64_t H = st->H, max_width = 1;
        if (!(st->layers = dse__session_alloc(s, (size_t)hp->n_layers * sizeof *st->layers)))
                return -ENOMEM;
        for (int l = 0; l < hp->n_layers; l++) {
                struct ds_layer *L = &st->layers[l];
                if ((r = lv(s, l, "input_layernorm.weight", D, 0, &L->attn_norm, reterr)) < 0 ||
                    (r = lv(s, l, "post_attention_layernorm.weight", D, 0, &L->ffn_norm, reterr)) < 0)
                        return r;
                if (hp->q_lora_rank > 0) {
                        if ((r = lw(s, l, "self_attn.q_a_proj", hp->q_lora_rank, D, &L->wq_a, reterr)) < 0 ||
                            (r = lv(s, l, "self_attn.q_a_layernorm.weight", hp->q_lora_rank, 0, &L->q_a_norm, reterr)) < 0 ||
                            (r = lw(s, l, "self_attn.q_b_proj", H * st->qk_dim, hp->q_lora_rank, &L->wq_b, reterr)) < 0)
                                return r;
                } else if ((r = lw(s, l, "self_attn.q_proj", H * st->qk_dim, D, &L->wq, reterr)) < 0) {
                        return r;
                }
                if ((r = lw(s, l, "self_attn.kv_a_proj_with_mqa", st->lat_dim, D, &L->wkv_a, reterr)) < 0 ||
                    (r = lv(s, l, "self_attn.kv_a_layernorm.weight", st->kvr, 0, &L->kv_a_norm, reterr)) < 0 ||
                    (r = lw(s, l, "self_attn.kv_b_proj", H * (st->nope + st->vdim), st->kvr, &L->wkv_b, reterr)) < 0 ||
                    (r = lw(s, l, "self_attn.o_proj", D, H * st->vdim, &L->wo, reterr)) < 0)
                        return r;
                if (L->wkv_b.perm)
                        return dse__fail(reterr, -EOPNOTSUPP, "layer %d: kv_b_proj with permuted columns cannot be absorbed", l);

                L->is_moe = is_moe_layer(hp, l);
                if (!L->is_moe) {
                        if ((r = mlp_weights(s, l, "mlp", hp->intermediate_size, &L->mlp, reterr)) < 0)
                                return r;
                        max_width = hp->intermediate_size > max_width ? hp->intermediate_size : max_width;
                        continue;
                }
                int64_t E = hp->n_routed_experts, W = hp->moe_intermediate_size;
                if (W <= 0)
                        return dse__fail(reterr, -EBADMSG, "deepseek: moe_intermediate_size %lld", (long long)W);
                max_width = W > max_width ? W : max_width;
                if ((r = lw(s, l, "mlp.gate", E, D, &L->router, reterr)) < 0 ||
                    (r = lv(s, l, "mlp.gate.e_score_correction_bias", E, hp->topk_method != DSE_MOE_NOAUX_TC,
                            &L->router_bias, reterr)) < 0)
                        return r;
                if (hp->n_shared_experts > 0) {
                        int64_t SW = W * hp->n_shared_experts;
                        if ((r = mlp_weights(s, l, "mlp.shared_experts", SW, &L->mlp, reterr)) < 0)
                                return r;
                        L->has_shared = 1;
                        max_width = SW > max_width ? SW : max_width;
                }
                if (!(L->experts = dse__session_alloc(s, (size_t)E * sizeof *L->experts)))
                        return -ENOMEM;
                for (int e = 0; e < E; e++) {
                        char prefix[48];
                        snprintf(prefix, sizeof prefix, "mlp.experts.%d", e);
                        if ((r = mlp_weights(s, l, prefix, W, &L->experts[e], reterr)) < 0)
                                return r;
                }
        }

        size_t n_ctx = (size_t)s->n_ctx, hkv = (size_t)H * (st->nope + st->vdim), T = DSE__MAX_STEP_TOKENS;
        size_t n_exp = hp->n_routed_experts > 0 ? (size_t)hp->n_routed_experts : 1;
        size_t n_k = hp->n_experts_per_tok > 0 ? (size_t)hp->n_experts_per_tok : 1;
        size_t qlr = hp->q_lora_rank > 0 ? (size_t)hp->q_lora_rank : 1;
        size_t mw = hp->moe_intermediate_size > 0 ? (size_t)hp->moe_intermediate_size : 1, nth = (size_t)st->n_threads;
        st->mlp_width = max_width;
#define ALLOC(p, n) (((p) = dse__session_alloc(s, (size_t)(n) * sizeof(float))) != NULL)
        if (!ALLOC(st->x, T * D) || !ALLOC(st->xb, T * D) || !ALLOC(st->xb2, T * D) || !ALLOC(st->qa, T * qlr) ||
            !ALLOC(st->q, T * H * st->qk_dim) || !ALLOC(st->kv_a, T * st->lat_dim) ||
            !ALLOC(st->att_out, T * H * st->vdim) || !ALLOC(st->hb, T * max_width) || !ALLOC(st->hb2, T * max_width) ||
            !ALLOC(st->cos, T * st->rope_dim / 2) || !ALLOC(st->sin, T * st->rope_dim / 2) ||
            !ALLOC(st->logits, T * V) || !ALLOC(st->q_abs, T * H * (st->kvr + st->rope_dim)) || !ALLOC(st->o_lat, T * H * st->kvr) ||
            !ALLOC(st->uv, nth * T * hkv) || !ALLOC(st->att, nth * n_ctx) ||
            !ALLOC(st->kvb_full, nth * hkv) || !ALLOC(st->moe_out, T * D) || !ALLOC(st->router_logits, T * n_exp) ||
            !ALLOC(st->moe_w, T * n_k) || !ALLOC(st->moe_in, T * n_k * D) || !ALLOC(st->moe_hb, T * n_k * mw) ||
            !ALLOC(st->moe_hb2, T * n_k * mw) || !ALLOC(st->moe_eo, T * n_k * D) ||
            !(st->moe_idx = dse__session_alloc(s, T * n_k * sizeof(int32_t))) ||
            !(st->moe_pos = dse__session_alloc(s, T * n_k * sizeof(int32_t))) ||
            !(st->moe_first = dse__session_alloc(s, (n_exp + 1) * sizeof(int32_t))) ||
            !(st->moe_xq_in = dse__session_alloc(s, dse__xq_bytes((int64_t)(T * n_k), D))) ||
            !(st->moe_xq_hb = dse__session_alloc(s, dse__xq_bytes((int64_t)(T * n_k), (int64_t)mw))) ||
            !(st->moe_mm = dse__session_alloc(s, 2 * (n_exp + 1) * sizeof(struct dse__mm))) ||
            !(st->moe_sub = dse__session_alloc(s, n_exp * sizeof(struct dse_xq))))
                return -ENOMEM;
#undef ALLOC
        return 0;
}

struct mla_job {
        struct dse_session *s;
        const struct ds_layer *L;
        int l;                       /* layer: its latents are kv rows (kvr + rope) */
        const struct dse__tok *toks; /* (n) each with its sequence's view and position */
        int n;
};

/* Absorbed MLA for heads [h0, h1), every token of the call: a head's rows of kv_b_proj
 * are decoded once for all tokens. */
static void mla_absorbed(void *ctx, size_t h0, size_t h1, int ith) {
        const struct mla_job *j = ctx;
        struct dse_session *s = j->s;
        struct ds_state *st = s->arch;
        const struct dse_qmat *wkv_b = &j->L->wkv_b;
        int32_t kvr = st->kvr, rd = st->rope_dim, blk = st->nope + st->vdim, n = j->n;
        int64_t QD = (int64_t)st->H * st->qk_dim, HK = (int64_t)st->H * kvr, HQ = (int64_t)st->H * (kvr + rd),
                hkv = (int64_t)st->H * blk;
        float *att = st->att + (size_t)ith * (size_t)s->n_ctx;           /* (T) */
        float *uv = st->uv + (size_t)ith * DSE__MAX_STEP_TOKENS * (size_t)hkv; /* (n, hkv) by absolute row */
        for (size_t h = h0; h < h1; h++) {
                /* q_abs = W_uk^T q_nope: a q_nope-weighted sum of the head's k rows (one
                 * axpy_rows per token: the rows decoded in registers, which for Q4 costs
                 * less than writing one decoded row out for all tokens); q_pe (rotated)
                 * after it */
                for (int i = 0; i < n; i++) {
                        float *qa = st->q_abs + i * HQ + (int64_t)h * (kvr + rd);
                        const float *q_nope = st->q + i * QD + (int64_t)h * st->qk_dim;
                        memset(qa, 0, (size_t)kvr * sizeof(float));
                        s->k.axpy_rows(wkv_b, (int64_t)h * blk, st->nope, q_nope, qa);
                        memcpy(qa + kvr, q_nope + st->nope, (size_t)rd * sizeof(float));
                }
                for (int i = 0; i < n; i++) {
                        const struct dse__kv_view *kv = j->toks[i].kv;
                        const float *q_abs = st->q_abs + i * HQ + (int64_t)h * (kvr + rd); /* (kvr + rope) */
                        float *o_lat = st->o_lat + i * HK + (int64_t)h * kvr;               /* (kvr) */
                        /* scores over whole latent rows [c | k_pe], values over c */
                        dse__attend(s, kv, j->l, j->toks[i].pos + 1, q_abs, 0, kvr + rd, st->softmax_scale, 0, kvr,
                                    att, o_lat);
                }
                /* out_h = W_uv o_lat: the head's v rows of kv_b_proj, for all tokens at once */
                int64_t v0 = (int64_t)h * blk + st->nope;
                s->k.matmul[wkv_b->dtype](wkv_b, st->o_lat + (int64_t)h * kvr, HK, n, uv, hkv, v0, v0 + st->vdim);
                for (int i = 0; i < n; i++)
                        memcpy(st->att_out + (int64_t)i * st->H * st->vdim + (int64_t)h * st->vdim, uv + i * hkv + v0,
                               (size_t)st->vdim * sizeof(float));
        }
}

/* Naive MLA for heads [h0, h1): decompress k_nope and v of every cached token. */
static void mla_naive(void *ctx, size_t h0, size_t h1, int ith) {
        const struct mla_job *j = ctx;
        struct dse_session *s = j->s;
        struct ds_state *st = s->arch;
        const struct dse_qmat *wkv_b = &j->L->wkv_b;
        int32_t kvr = st->kvr, rd = st->rope_dim, blk = st->nope + st->vdim;
        int64_t QD = (int64_t)st->H * st->qk_dim;
        float *kv = st->kvb_full + (size_t)ith * st->H * blk; /* (H*(nope+v)) by absolute row */
        float *att = st->att + (size_t)ith * (size_t)s->n_ctx;
        for (size_t h = h0; h < h1; h++)
                for (int i = 0; i < j->n; i++) {
                        const struct dse__kv_view *cache = j->toks[i].kv;
                        int32_t T = j->toks[i].pos + 1;
                        const float *q_nope = st->q + i * QD + (int64_t)h * st->qk_dim;
                        const float *q_pe = q_nope + st->nope;
                        float *out = st->att_out + (int64_t)i * st->H * st->vdim + (int64_t)h * st->vdim; /* (v) */
                        int64_t k0 = (int64_t)h * blk, v0 = k0 + st->nope;
                        for (int32_t t = 0; t < T; t++) {
                                const float *lat = dse__kv_row(cache, j->l, t);
                                s->k.matvec[wkv_b->dtype](wkv_b, lat, kv, k0, v0); /* k_nope_t (nope) */
                                att[t] = (s->k.dot(q_nope, kv + k0, st->nope) + s->k.dot(q_pe, lat + kvr, rd)) *
                                         st->softmax_scale;
                        }
                        s->k.softmax(att, T);
                        memset(out, 0, (size_t)st->vdim * sizeof(float));
                        for (int32_t t = 0; t < T; t++) {
                                const float *lat = dse__kv_row(cache, j->l, t);
                                s->k.matvec[wkv_b->dtype](wkv_b, lat, kv, v0, v0 + st->vdim); /* v_t (v) */
                                s->k.axpy(att[t], kv + v0, out, st->vdim);
                        }
                }
}

/* out = down(silu(gate(x)) * up(x)) for n tokens: x, out (n, hidden); gate and up in
 * one region */
static void swiglu(struct dse_session *s, const struct ds_mlp *m, const float *x, int n, float *out) {
        struct ds_state *st = s->arch;
        int64_t D = s->hp->hidden_size, W = st->mlp_width;
        struct dse__mm gu = {.w = &m->gate, .w_up = &m->up, .x = x, .ldx = D, .n = n, .y = st->hb, .y_up = st->hb2,
                             .ldy = W};
        dse__linear_group(s, &gu, 1); /* hb = silu(gate) * up */
        dse__linear_n(s, &m->down, st->hb, W, n, out, D, NULL);
}

/* Rows [j0, j0 + m) of a quantized buffer of n rows, as its own dse_xq. */
static struct dse_xq xq_rows(const struct dse_xq *all, int64_t j0, int64_t m) {
        struct dse_xq v = *all;
        v.n = m;
        v.q = all->q + j0 * all->n_blocks * DSE_XQ_BLOCK;
        v.d = all->d + j0 * all->n_blocks;
        return v;
}

/* Routed experts plus shared experts of one MoE layer for n tokens: out (n, hidden).
 * The (token, k) pairs are gathered expert by expert, so each expert's weights are read
 * once for all the tokens routed to it, and the whole layer takes three parallel regions
 * whatever the number of experts touched: the router with the shared experts' gate and up
 * (the router alone was a region of 64 short rows, nearly all wake-up and join), then the
 * routed experts' gate, up and SwiGLU with the shared experts' down, then the routed downs.
 * Each token still adds its experts' outputs in its top-k order after the shared
 * experts', so the result is the token-by-token one exactly. */
static void moe(struct dse_session *s, const struct ds_layer *L, const float *x, int n, float *out) {
        const struct dse_hparams *hp = s->hp;
        struct ds_state *st = s->arch;
        int64_t D = hp->hidden_size, E = hp->n_routed_experts, K = hp->n_experts_per_tok, NK = n * K;
        int64_t W = hp->moe_intermediate_size, SW = st->mlp_width;
        /* the router and the shared experts' gate and up read the same x: one region */
        struct dse__mm *mm = st->moe_mm;
        int n_mm = 0;
        mm[n_mm++] = (struct dse__mm){.w = &L->router, .x = x, .ldx = D, .n = n, .y = st->router_logits, .ldy = E};
        if (L->has_shared)
                mm[n_mm++] = (struct dse__mm){.w = &L->mlp.gate, .w_up = &L->mlp.up, .x = x, .ldx = D, .n = n,
                                              .y = st->hb, .y_up = st->hb2, .ldy = SW};
        dse__linear_group(s, mm, n_mm); /* router_logits (n, n_experts); hb = silu(gate) * up */
        for (int i = 0; i < n; i++)
                dse__moe_route(hp, st->router_logits + i * E, L->router_bias, st->moe_idx + i * K, st->moe_w + i * K);

        /* gather: expert e's pairs are rows moe_first[e] .. moe_first[e+1] */
        int64_t j = 0;
        for (int64_t e = 0; e < E; e++) {
                st->moe_first[e] = (int32_t)j;
                for (int64_t ik = 0; ik < NK; ik++)
                        if (st->moe_idx[ik] == e) {
                                st->moe_pos[ik] = (int32_t)j;
                                memcpy(st->moe_in + j * D, x + (ik / K) * D, (size_t)D * sizeof(float));
                                j++;
                        }
        }
        st->moe_first[E] = (int32_t)j;
        /* int8 copies of the gathered inputs, offered to every expert (an expert whose
         * weights have no int8 path, or a column permutation, takes the float rows) */
        int xq = s->act == DSE_ACTIVATIONS_INT8;
        struct dse_xq xin, xhb, *sub_in = st->moe_sub;
        if (xq) {
                dse__xq_init(&xin, st->moe_xq_in, NK, D);
                s->k.quantize_xq(st->moe_in, D, &xin);
        }

        n_mm = 0;
        /* the shared experts' down beside the routed experts' gate and up; out = its
         * result, as before the routed experts are added */
        if (L->has_shared)
                mm[n_mm++] = (struct dse__mm){.w = &L->mlp.down, .x = st->hb, .ldx = SW, .n = n, .y = out, .ldy = D};
        for (int64_t e = 0; e < E; e++) {
                int64_t j0 = st->moe_first[e], m = st->moe_first[e + 1] - j0;
                if (m == 0)
                        continue;
                const struct ds_mlp *ex = &L->experts[e];
                if (xq)
                        sub_in[e] = xq_rows(&xin, j0, m);
                mm[n_mm++] = (struct dse__mm){.w = &ex->gate, .w_up = &ex->up, .x = st->moe_in + j0 * D, .ldx = D,
                                              .n = m, .y = st->moe_hb + j0 * W, .y_up = st->moe_hb2 + j0 * W,
                                              .ldy = W, .xq = xq ? &sub_in[e] : NULL};
        }
        dse__linear_group(s, mm, n_mm);

        if (xq) {
                dse__xq_init(&xhb, st->moe_xq_hb, NK, W);
                s->k.quantize_xq(st->moe_hb, W, &xhb);
        }
        n_mm = 0;
        for (int64_t e = 0; e < E; e++) {
                int64_t j0 = st->moe_first[e], m = st->moe_first[e + 1] - j0;
                if (m == 0)
                        continue;
                if (xq)
                        sub_in[e] = xq_rows(&xhb, j0, m);
                mm[n_mm++] = (struct dse__mm){.w = &L->experts[e].down, .x = st->moe_hb + j0 * W, .ldx = W, .n = m,
                                              .y = st->moe_eo + j0 * D, .ldy = D, .xq = xq ? &sub_in[e] : NULL};
        }
        dse__linear_group(s, mm, n_mm);
        if (!L->has_shared)
                memset(out, 0, (size_t)(n * D) * sizeof(float));
        for (int64_t ik = 0; ik < NK; ik++)
                s->k.axpy(st->moe_w[ik], st->moe_eo + (int64_t)st->moe_pos[ik] * D, out + (ik / K) * D, D);
}

static void ds_forward(struct dse_session *s, const struct dse__tok *toks, int n) {
        const struct dse_hparams *hp = s->hp;
        struct ds_state *st = s->arch;
        int64_t D = hp->hidden_size, V = hp->vocab_size, QD = (int64_t)st->H * st->qk_dim;
        int64_t OD = (int64_t)st->H * st->vdim, QL = hp->q_lora_rank, h2 = st->rope_dim / 2;
        float *x = st->x; /* (n, hidden) residual streams */

        for (int i = 0; i < n; i++) {
                s->k.dequant_row(&st->embed, toks[i].token, x + i * D);
                dse__rope_angles(&st->rope, toks[i].pos, st->cos + i * h2, st->sin + i * h2);
        }

        for (int l = 0; l < hp->n_layers; l++) {
                const struct ds_layer *L = &st->layers[l];

                for (int i = 0; i < n; i++)
                        s->k.rmsnorm(st->xb + i * D, x + i * D, L->attn_norm, D, hp->rms_norm_eps);
                /* q (H, nope+rope): q_b(norm(q_a(x))) or q_proj(x); kv_a (kvr + rope), the
                 * cache row [norm(c), rope(k_pe)] below, in the same region as q_a or
                 * q_proj, which read the same x (one wake-up and join fewer per layer) */
                struct dse__mm qkv[2] = {
                        {.w = QL > 0 ? &L->wq_a : &L->wq, .x = st->xb, .ldx = D, .n = n, .y = QL > 0 ? st->qa : st->q,
                         .ldy = QL > 0 ? QL : QD},
                        {.w = &L->wkv_a, .x = st->xb, .ldx = D, .n = n, .y = st->kv_a, .ldy = st->lat_dim},
                };
                dse__linear_group(s, qkv, 2);
                if (QL > 0) {
                        for (int i = 0; i < n; i++)
                                s->k.rmsnorm(st->qa + i * QL, st->qa + i * QL, L->q_a_norm, QL, MLA_NORM_EPS);
                        dse__linear_n(s, &L->wq_b, st->qa, QL, n, st->q, QD, NULL);
                }
                for (int i = 0; i < n; i++) {
                        const float *cos = st->cos + i * h2, *sin = st->sin + i * h2;
                        for (int h = 0; h < st->H; h++)
                                dse__rope_apply(&st->rope, st->q + i * QD + (int64_t)h * st->qk_dim + st->nope, cos,
                                                sin);
                        const float *kv_a = st->kv_a + (int64_t)i * st->lat_dim;
                        float *lat = dse__kv_row(toks[i].kv, l, toks[i].pos); /* (kvr + rope) */
                        s->k.rmsnorm(lat, kv_a, L->kv_a_norm, st->kvr, MLA_NORM_EPS);
                        memcpy(lat + st->kvr, kv_a + st->kvr, (size_t)st->rope_dim * sizeof(float));
                        dse__rope_apply(&st->rope, lat + st->kvr, cos, sin);
                }
                /* Every token's latent is cached before any attends: a token sees its
                 * sequence's earlier tokens of this call through the cache. */
                struct mla_job job = {s, L, l, toks, n};
                dse__parallel(s, (size_t)st->H, s->mla_naive ? mla_naive : mla_absorbed, &job);
                dse__linear_n(s, &L->wo, st->att_out, OD, n, st->xb2, D, NULL);
                for (int64_t i = 0; i < n * D; i++)
                        x[i] += st->xb2[i];

                for (int i = 0; i < n; i++)
                        s->k.rmsnorm(st->xb + i * D, x + i * D, L->ffn_norm, D, hp->rms_norm_eps);
                if (L->is_moe) {
                        moe(s, L, st->xb, n, st->moe_out);
                        for (int64_t i = 0; i < n * D; i++)
                                x[i] += st->moe_out[i];
                } else {
                        swiglu(s, &L->mlp, st->xb, n, st->xb2);
                        for (int64_t i = 0; i < n * D; i++)
                                x[i] += st->xb2[i];
                }
        }

        /* LM head over the tokens that want logits, in one pass */
        int m = 0;
        for (int i = 0; i < n; i++)
                if (toks[i].logits)
                        s->k.rmsnorm(st->xb + (m++) * D, x + i * D, st->final_norm, D, hp->rms_norm_eps);
        if (m == 0)
                return;
        dse__linear_n(s, &st->lm_head, st->xb, D, m, st->logits, V, NULL);
        for (int i = 0, k = 0; i < n; i++)
                if (toks[i].logits)
                        memcpy(toks[i].logits, st->logits + (k++) * V, (size_t)V * sizeof(float));
}

static size_t ds_kv_bytes_per_token(const struct dse_session *s) {
        const struct ds_state *st = s->arch;
        return (size_t)s->hp->n_layers * (size_t)st->lat_dim * sizeof(float);
}

const struct dse__arch_ops dse__arch_deepseek = {
        .init = ds_init,
        .forward = ds_forward,
        .kv_bytes_per_token = ds_kv_bytes_per_token,
};
