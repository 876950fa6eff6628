/* DeepSeek-V2/V3 forward pass (DeepSeek modeling_deepseek.py): pre-norm decoder layers
 * of multi-head latent attention (MLA) and a dense SwiGLU MLP (layers before
 * first_k_dense_replace or off moe_layer_freq) or a routed MoE with shared experts.
 *
 * MLA caches per token and layer only the normalised KV latent c (kv_lora_rank) and the
 * rotated shared key k_pe (qk_rope_head_dim). Attention runs in the absorbed form: with
 * kv_b_proj's per-head blocks W_uk (nope, kv_lora_rank) and W_uv (v, kv_lora_rank),
 *     score_t = q_nope . (W_uk c_t) + q_pe . k_pe_t = (W_uk^T q_nope) . c_t + q_pe . k_pe_t
 *     out     = sum_t p_t W_uv c_t = W_uv (sum_t p_t c_t)
 * A model imported from a GGUF file whose converter split kv_b_proj (mla_kv_b_split)
 * holds W_uk^T and W_uv as matrices of their own, k_b_proj and v_b_proj, and both
 * products are matrix products over a head's rows, on int8 activations where the weights
 * are Q8/Q4, as llama.cpp computes them.
 * The naive form (decompress k_nope and v per cached token) is kept for the
 * absorbed-vs-naive test (dse__session_set_mla_naive). A V3 multi-token prediction (MTP)
 * module (layer num_hidden_layers + m) runs as DeepSeek's reference does (ds_mtp_forward):
 * eh_proj([enorm(embedding of the next token); hnorm(hidden state)]), one decoder layer
 * with its own KV rows, then shared_head.norm and the main model's LM head (the module's
 * copies of the embedding and head are the main model's). The weights are bound once per model (ds_bind); a
 * session holds only its activations and scratch (ds_init). The MoE layer is moe.c's. */
#include <math.h>
#include <string.h>

#include "internal.h"
#include "model/forward.h"
#include "model/rope.h"

/* q_a_layernorm and kv_a_layernorm use the reference RMSNorm default, not rms_norm_eps. */
#define MLA_NORM_EPS 1e-6f

struct ds_layer {
        float *attn_norm;        /* (hidden) input_layernorm */
        struct dse_qmat wq;      /* (H*(nope+rope), hidden) when q_lora_rank == 0 */
        struct dse_qmat wq_a;    /* (q_lora_rank, hidden) */
        float *q_a_norm;         /* (q_lora_rank) */
        struct dse_qmat wq_b;    /* (H*(nope+rope), q_lora_rank) */
        struct dse_qmat wkv_a;   /* (kv_lora_rank + rope, hidden) kv_a_proj_with_mqa */
        float *kv_a_norm;        /* (kv_lora_rank) */
        struct dse_qmat wkv_b;   /* (H*(nope+v), kv_lora_rank): per head nope rows of W_uk, v rows of W_uv */
        struct dse_qmat wk_b;    /* mla_kv_b_split, instead: (H*kv_lora_rank, nope) per head W_uk^T ... */
        struct dse_qmat wv_b;    /* ... and (H*v, kv_lora_rank) per head W_uv */
        struct dse_qmat wo;      /* (hidden, H*v) */
        float *ffn_norm;         /* (hidden) post_attention_layernorm */
        int is_moe;
        struct dse__mlp mlp;     /* dense MLP (intermediate wide), unless is_moe */
        struct dse__moe_layer moe;
};

/* A V3 MTP module: its decoder layer and the pieces around it. */
struct ds_mtp {
        struct ds_layer layer;
        float *enorm, *hnorm;    /* (hidden) */
        struct dse_qmat eh_proj; /* (hidden, 2 hidden): [embedding | hidden state] */
        float *head_norm;        /* (hidden) shared_head.norm */
};

/* The model's bindings, shared by its sessions. */
struct ds_weights {
        struct ds_layer *layers; /* (n_layers) */
        struct ds_mtp *mtp;      /* (n_mtp_layers) */
        struct dse__embed_head eh;
        struct dse_rope rope;    /* over qk_rope_head_dim, interleaved pairs */
        float softmax_scale;
        int32_t H, nope, rope_dim, vdim, kvr, qk_dim, lat_dim; /* lat_dim = kvr + rope_dim */
        int64_t mlp_width;       /* widest MLP: the row stride of a session's hb, hb2 */
};

/* A session's activations and scratch. */
struct ds_state {
        const struct ds_weights *w;
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
        uint8_t *xq_head;        /* (n_threads, xq_head_bytes) split kv_b: one head's int8 activations */
        size_t xq_head_bytes;
        float *lat_row;          /* (n_threads, kvr + rope) naive form: one cached latent row as floats */
        float *moe_out;          /* (T, hidden) */
        float *eh;               /* (T, 2 hidden) an MTP module's [enorm(e) | hnorm(h)] */
        struct dse__moe_scratch moe;
        /* KV rows (through s->kv): latent c then k_pe, (kvr + rope) per layer and token */
};

static int is_moe_layer(const struct dse_hparams *hp, int l) {
        return hp->n_routed_experts > 0 && l >= hp->first_k_dense_replace &&
               l % (hp->moe_layer_freq > 0 ? hp->moe_layer_freq : 1) == 0;
}

/* Layer l's attention and MLP (a main layer or an MTP module's); *ret_width is its
 * widest MLP. */
static int bind_layer(struct dse__weights *w, const struct ds_weights *dw, int l, struct ds_layer *L,
                      int64_t *ret_width, struct dse_diag *reterr) {
        const struct dse_hparams *hp = w->hp;
        int64_t D = hp->hidden_size, H = dw->H;
        int r;
        if ((r = dse__weights_layer_vector(w, l, "input_layernorm.weight", D, 0, &L->attn_norm, reterr)) < 0 ||
            (r = dse__weights_layer_vector(w, l, "post_attention_layernorm.weight", D, 0, &L->ffn_norm, reterr)) < 0)
                return r;
        if (hp->q_lora_rank > 0) {
                if ((r = dse__weights_layer_matrix(w, l, "self_attn.q_a_proj", hp->q_lora_rank, D, &L->wq_a,
                                                   reterr)) < 0 ||
                    (r = dse__weights_layer_vector(w, l, "self_attn.q_a_layernorm.weight", hp->q_lora_rank, 0,
                                                   &L->q_a_norm, reterr)) < 0 ||
                    (r = dse__weights_layer_matrix(w, l, "self_attn.q_b_proj", H * dw->qk_dim, hp->q_lora_rank,
                                                   &L->wq_b, reterr)) < 0)
                        return r;
        } else if ((r = dse__weights_layer_matrix(w, l, "self_attn.q_proj", H * dw->qk_dim, D, &L->wq, reterr)) < 0) {
                return r;
        }
        if ((r = dse__weights_layer_matrix(w, l, "self_attn.kv_a_proj_with_mqa", dw->lat_dim, D, &L->wkv_a,
                                           reterr)) < 0 ||
            (r = dse__weights_layer_vector(w, l, "self_attn.kv_a_layernorm.weight", dw->kvr, 0, &L->kv_a_norm,
                                           reterr)) < 0 ||
            (r = dse__weights_layer_matrix(w, l, "self_attn.o_proj", D, H * dw->vdim, &L->wo, reterr)) < 0)
                return r;
        if (hp->mla_kv_b_split) {
                if ((r = dse__weights_layer_matrix(w, l, "self_attn.k_b_proj", H * dw->kvr, dw->nope, &L->wk_b,
                                                   reterr)) < 0 ||
                    (r = dse__weights_layer_matrix(w, l, "self_attn.v_b_proj", H * dw->vdim, dw->kvr, &L->wv_b,
                                                   reterr)) < 0)
                        return r;
                if (L->wk_b.perm || L->wv_b.perm)
                        return dse__fail(reterr, -EOPNOTSUPP, "layer %d: k_b_proj/v_b_proj with permuted columns", l);
        } else {
                if ((r = dse__weights_layer_matrix(w, l, "self_attn.kv_b_proj", H * (dw->nope + dw->vdim), dw->kvr,
                                                   &L->wkv_b, reterr)) < 0)
                        return r;
                if (L->wkv_b.perm)
                        return dse__fail(reterr, -EOPNOTSUPP,
                                         "layer %d: kv_b_proj with permuted columns cannot be absorbed", l);
        }

        L->is_moe = is_moe_layer(hp, l);
        *ret_width = hp->intermediate_size;
        if (L->is_moe)
                return dse__moe_bind(w, l, &L->moe, ret_width, reterr);
        return dse__weights_layer_mlp(w, l, "mlp", *ret_width, &L->mlp, reterr);
}

static int ds_bind(struct dse__weights *w, struct dse_diag *reterr) {
        const struct dse_hparams *hp = w->hp;
        int64_t D = hp->hidden_size, V = hp->vocab_size;
        if (D <= 0 || V <= 0 || hp->n_heads <= 0 || hp->n_layers <= 0 || hp->kv_lora_rank <= 0 ||
            hp->qk_nope_head_dim <= 0 || hp->qk_rope_head_dim <= 0 || hp->v_head_dim <= 0 || hp->q_lora_rank < 0)
                return dse__fail(reterr, -EBADMSG, "deepseek: inconsistent MLA hyper-parameters");
        struct ds_weights *dw = dse__weights_alloc(w, sizeof *dw);
        if (!dw)
                return -ENOMEM;
        w->arch = dw;
        dw->H = hp->n_heads;
        dw->nope = hp->qk_nope_head_dim;
        dw->rope_dim = hp->qk_rope_head_dim;
        dw->vdim = hp->v_head_dim;
        dw->kvr = hp->kv_lora_rank;
        dw->qk_dim = dw->nope + dw->rope_dim;
        dw->lat_dim = dw->kvr + dw->rope_dim;
        int r = dse__rope_init(&dw->rope, hp, dw->rope_dim, DSE_ROPE_PAIRS_INTERLEAVED, reterr);
        if (r < 0)
                return r;
        /* softmax scale: q_head_dim^-0.5, times mscale(factor, mscale_all_dim)^2 under
         * rope scaling with a non-zero mscale_all_dim */
        double scale = 1.0 / sqrt((double)dw->qk_dim);
        if (hp->rope_type != DSE_ROPE_DEFAULT && hp->rope_mscale_all_dim != 0) {
                double m = dse__yarn_mscale(hp->rope_factor, hp->rope_mscale_all_dim);
                scale *= m * m;
        }
        dw->softmax_scale = (float)scale;
        if (hp->n_routed_experts > 0 && (r = dse__moe_check(hp, reterr)) < 0)
                return r;
        if ((r = dse__embed_head_bind(w, &dw->eh, reterr)) < 0)
                return r;

        int64_t max_width = 1, width;
        if (!(dw->layers = dse__weights_alloc(w, (size_t)hp->n_layers * sizeof *dw->layers)))
                return -ENOMEM;
        for (int l = 0; l < hp->n_layers; l++) {
                if ((r = bind_layer(w, dw, l, &dw->layers[l], &width, reterr)) < 0)
                        return r;
                max_width = width > max_width ? width : max_width;
        }
        if (hp->n_mtp_layers > 0 && !(dw->mtp = dse__weights_alloc(w, (size_t)hp->n_mtp_layers * sizeof *dw->mtp)))
                return -ENOMEM;
        for (int m = 0; m < hp->n_mtp_layers; m++) {
                struct ds_mtp *M = &dw->mtp[m];
                int l = hp->n_layers + m;
                if ((r = bind_layer(w, dw, l, &M->layer, &width, reterr)) < 0 ||
                    (r = dse__weights_layer_vector(w, l, "enorm.weight", D, 0, &M->enorm, reterr)) < 0 ||
                    (r = dse__weights_layer_vector(w, l, "hnorm.weight", D, 0, &M->hnorm, reterr)) < 0 ||
                    (r = dse__weights_layer_matrix(w, l, "eh_proj", D, 2 * D, &M->eh_proj, reterr)) < 0 ||
                    (r = dse__weights_layer_vector(w, l, "shared_head.norm.weight", D, 0, &M->head_norm, reterr)) < 0)
                        return r;
                max_width = width > max_width ? width : max_width;
        }
        dw->mlp_width = max_width;
        return 0;
}

static int ds_init(struct dse_session *s) {
        const struct dse_hparams *hp = s->hp;
        int64_t D = hp->hidden_size, V = hp->vocab_size;
        struct ds_state *st = dse__session_alloc(s, sizeof *st);
        if (!st)
                return -ENOMEM;
        s->arch = st;
        const struct ds_weights *w = st->w = s->w->arch;
        size_t n_ctx = (size_t)s->n_ctx, H = (size_t)w->H, hkv = H * (size_t)(w->nope + w->vdim);
        size_t T = DSE__MAX_STEP_TOKENS, qlr = hp->q_lora_rank > 0 ? (size_t)hp->q_lora_rank : 1;
        size_t nth = (size_t)s->n_threads, mw = (size_t)w->mlp_width;
#define ALLOC(p, n) (((p) = dse__session_alloc(s, (size_t)(n) * sizeof(float))) != NULL)
        if (!ALLOC(st->x, T * D) || !ALLOC(st->xb, T * D) || !ALLOC(st->xb2, T * D) || !ALLOC(st->qa, T * qlr) ||
            !ALLOC(st->q, T * H * w->qk_dim) || !ALLOC(st->kv_a, T * w->lat_dim) ||
            !ALLOC(st->att_out, T * H * w->vdim) || !ALLOC(st->hb, T * mw) || !ALLOC(st->hb2, T * mw) ||
            !ALLOC(st->cos, T * w->rope_dim / 2) || !ALLOC(st->sin, T * w->rope_dim / 2) ||
            !ALLOC(st->logits, T * V) || !ALLOC(st->q_abs, T * H * (w->kvr + w->rope_dim)) ||
            !ALLOC(st->o_lat, T * H * w->kvr) || !ALLOC(st->uv, nth * T * hkv) || !ALLOC(st->att, nth * n_ctx) ||
            !ALLOC(st->kvb_full, nth * hkv) || !ALLOC(st->lat_row, nth * (size_t)w->lat_dim) ||
            !ALLOC(st->moe_out, T * D) || (hp->n_mtp_layers > 0 && !ALLOC(st->eh, T * 2 * D)))
                return -ENOMEM;
#undef ALLOC
        if (hp->mla_kv_b_split) {
                int64_t cols = w->nope > w->kvr ? w->nope : w->kvr;
                st->xq_head_bytes = (dse__xq_bytes(DSE__MAX_STEP_TOKENS, cols) + 63) & ~(size_t)63;
                if (!(st->xq_head = dse__session_alloc(s, nth * st->xq_head_bytes)))
                        return -ENOMEM;
        }
        if (dse__moe_scratch_init(s, &st->moe) < 0)
                return -ENOMEM;
        st->moe.shared_hb = st->hb; /* mlp_width covers the shared experts too */
        st->moe.shared_hb2 = st->hb2;
        st->moe.shared_ld = w->mlp_width;
        return 0;
}

struct mla_job {
        struct dse_session *s;
        const struct ds_layer *L;
        int l;                       /* layer: its latents are kv rows (kvr + rope) */
        const struct dse__tok *toks; /* (n) each with its sequence's view and position */
        int n;
        int n_long;                  /* tokens over the split's positions (dse__attend_long) ... */
        int long_tok[DSE__MAX_STEP_TOKENS]; /* ... their indices */
};

/* Y[t, r] = W[r, :] . x_t for r in [r0, r1) and n tokens of x (n, ldx): a head's rows of
 * a split kv_b matrix, on int8 activations (quantized here, on thread ith's storage)
 * where the session multiplies W's type so. */
static void head_rows(struct dse_session *s, const struct dse_qmat *W, const float *x, int64_t ldx, int n, float *y,
                      int64_t ldy, int64_t r0, int64_t r1, int ith) {
        struct ds_state *st = s->arch;
        if (!dse__use_xq(s, W)) {
                s->k.matmul[W->dtype](W, x, ldx, n, y, ldy, r0, r1);
                return;
        }
        struct dse_xq xq;
        dse__xq_init(&xq, st->xq_head + (size_t)ith * st->xq_head_bytes, n, W->cols);
        s->k.quantize_xq(x, ldx, &xq);
        s->k.matmul_xq[W->dtype](W, &xq, y, ldy, r0, r1);
}

/* out_h = W_uv o_lat for head h and every token of the call: the head's v rows of
 * kv_b_proj, read once for all tokens. */
static void mla_uv(const struct mla_job *j, size_t h, int ith) {
        struct dse_session *s = j->s;
        struct ds_state *st = s->arch;
        const struct ds_weights *w = st->w;
        if (s->hp->mla_kv_b_split) { /* rows h*v.. of v_b_proj land at head h's place in att_out */
                int64_t HV = (int64_t)w->H * w->vdim;
                head_rows(s, &j->L->wv_b, st->o_lat + (int64_t)h * w->kvr, (int64_t)w->H * w->kvr, j->n, st->att_out,
                          HV, (int64_t)h * w->vdim, (int64_t)(h + 1) * w->vdim, ith);
                return;
        }
        const struct dse_qmat *wkv_b = &j->L->wkv_b;
        int32_t blk = w->nope + w->vdim;
        int64_t HK = (int64_t)w->H * w->kvr, hkv = (int64_t)w->H * blk;
        float *uv = st->uv + (size_t)ith * DSE__MAX_STEP_TOKENS * (size_t)hkv; /* (n, hkv) by absolute row */
        int64_t v0 = (int64_t)h * blk + w->nope;
        s->k.matmul[wkv_b->dtype](wkv_b, st->o_lat + (int64_t)h * w->kvr, HK, j->n, uv, hkv, v0, v0 + w->vdim);
        for (int i = 0; i < j->n; i++)
                memcpy(st->att_out + (int64_t)i * w->H * w->vdim + (int64_t)h * w->vdim, uv + i * hkv + v0,
                       (size_t)w->vdim * sizeof(float));
}

static void mla_uv_heads(void *ctx, size_t h0, size_t h1, int ith) {
        for (size_t h = h0; h < h1; h++)
                mla_uv(ctx, h, ith);
}

/* Long token p's heads, one pair of the split form (every head reads the same latent
 * rows, so a BF16 cache's are read once for all of them): as mla_absorbed attends. */
static void mla_pair(const void *ctx, int p, struct dse__attn_pair *ret) {
        const struct mla_job *j = ctx;
        const struct ds_state *st = j->s->arch;
        const struct ds_weights *w = st->w;
        int32_t i = j->long_tok[p];
        int64_t HQ = (int64_t)w->H * (w->kvr + w->rope_dim), HK = (int64_t)w->H * w->kvr;
        *ret = (struct dse__attn_pair){.kv = j->toks[i].kv, .T = j->toks[i].pos + 1, .q = st->q_abs + i * HQ,
                                       .out = st->o_lat + i * HK, .n_q = w->H, .ldq = w->kvr + w->rope_dim,
                                       .ldo = w->kvr};
}

/* Absorbed MLA for heads [h0, h1), every token of the call: a head's rows of kv_b_proj
 * are decoded once for all tokens. Tokens over the split's positions are left to
 * dse__attend_long, and then W_uv to mla_uv_heads, once they are attended. */
static void mla_absorbed(void *ctx, size_t h0, size_t h1, int ith) {
        const struct mla_job *j = ctx;
        struct dse_session *s = j->s;
        struct ds_state *st = s->arch;
        const struct ds_weights *w = st->w;
        const struct dse_qmat *wkv_b = &j->L->wkv_b;
        int32_t kvr = w->kvr, rd = w->rope_dim, blk = w->nope + w->vdim, n = j->n;
        int64_t QD = (int64_t)w->H * w->qk_dim, HK = (int64_t)w->H * kvr, HQ = (int64_t)w->H * (kvr + rd);
        int split = s->hp->mla_kv_b_split;
        float *att = st->att + (size_t)ith * (size_t)s->n_ctx;           /* (T) */
        for (size_t h = h0; h < h1; h++) {
                /* q_abs = W_uk^T q_nope: a q_nope-weighted sum of the head's k rows (one
                 * axpy_rows per token: the rows decoded in registers, which for Q4 costs
                 * less than writing one decoded row out for all tokens), or with a split
                 * kv_b the product of the head's rows of k_b_proj (rows h*kvr.. land at
                 * head h's place in q_abs); q_pe (rotated) after it */
                if (split)
                        head_rows(s, &j->L->wk_b, st->q + (int64_t)h * w->qk_dim, QD, n, st->q_abs + (int64_t)h * rd,
                                  HQ, (int64_t)h * kvr, (int64_t)(h + 1) * kvr, ith);
                for (int i = 0; i < n; i++) {
                        float *qa = st->q_abs + i * HQ + (int64_t)h * (kvr + rd);
                        const float *q_nope = st->q + i * QD + (int64_t)h * w->qk_dim;
                        if (!split) {
                                memset(qa, 0, (size_t)kvr * sizeof(float));
                                s->k.axpy_rows(wkv_b, (int64_t)h * blk, w->nope, q_nope, qa);
                        }
                        memcpy(qa + kvr, q_nope + w->nope, (size_t)rd * sizeof(float));
                }
                for (int i = 0; i < n; i++) {
                        const struct dse__kv_view *kv = j->toks[i].kv;
                        if (j->n_long && dse__attn_is_long(s, j->toks[i].pos + 1))
                                continue;
                        const float *q_abs = st->q_abs + i * HQ + (int64_t)h * (kvr + rd); /* (kvr + rope) */
                        float *o_lat = st->o_lat + i * HK + (int64_t)h * kvr;               /* (kvr) */
                        /* scores over whole latent rows [c | k_pe], values over c */
                        dse__attend(s, kv, j->l, j->toks[i].pos + 1, q_abs, 0, 1, 0, kvr + rd, w->softmax_scale, 0, kvr,
                                    att, o_lat, 0);
                }
                if (!j->n_long)
                        mla_uv(j, h, ith);
        }
}

/* Naive MLA for heads [h0, h1): decompress k_nope and v of every cached token. */
static void mla_naive(void *ctx, size_t h0, size_t h1, int ith) {
        const struct mla_job *j = ctx;
        struct dse_session *s = j->s;
        struct ds_state *st = s->arch;
        const struct ds_weights *w = st->w;
        const struct dse_qmat *wkv_b = &j->L->wkv_b;
        int32_t kvr = w->kvr, rd = w->rope_dim, blk = w->nope + w->vdim;
        int64_t QD = (int64_t)w->H * w->qk_dim;
        float *kv = st->kvb_full + (size_t)ith * w->H * blk; /* (H*(nope+v)) by absolute row */
        float *lat = st->lat_row + (size_t)ith * w->lat_dim;  /* (kvr + rope) */
        float *att = st->att + (size_t)ith * (size_t)s->n_ctx;
        int split = s->hp->mla_kv_b_split;
        for (size_t h = h0; h < h1; h++)
                for (int i = 0; i < j->n; i++) {
                        const struct dse__kv_view *cache = j->toks[i].kv;
                        int32_t T = j->toks[i].pos + 1;
                        const float *q_nope = st->q + i * QD + (int64_t)h * w->qk_dim;
                        const float *q_pe = q_nope + w->nope;
                        float *out = st->att_out + (int64_t)i * w->H * w->vdim + (int64_t)h * w->vdim; /* (v) */
                        /* kv holds k_nope_t at k0 and v_t at v0: kv_b_proj's rows, or with a
                         * split kv_b W_uk c_t summed over k_b_proj's rows after v_b_proj's */
                        int64_t k0 = split ? (int64_t)w->H * w->vdim : (int64_t)h * blk;
                        int64_t v0 = split ? (int64_t)h * w->vdim : k0 + w->nope;
                        for (int32_t t = 0; t < T; t++) {
                                dse__kv_load(cache, j->l, t, 0, w->lat_dim, lat);
                                if (split) {
                                        memset(kv + k0, 0, (size_t)w->nope * sizeof(float));
                                        s->k.axpy_rows(&j->L->wk_b, (int64_t)h * kvr, kvr, lat, kv + k0);
                                } else {
                                        s->k.matvec[wkv_b->dtype](wkv_b, lat, kv, k0, v0); /* k_nope_t (nope) */
                                }
                                att[t] = (s->k.dot(q_nope, kv + k0, w->nope) + s->k.dot(q_pe, lat + kvr, rd)) *
                                         w->softmax_scale;
                        }
                        s->k.softmax(att, T);
                        memset(out, 0, (size_t)w->vdim * sizeof(float));
                        const struct dse_qmat *wv = split ? &j->L->wv_b : wkv_b;
                        for (int32_t t = 0; t < T; t++) {
                                dse__kv_load(cache, j->l, t, 0, w->kvr, lat);
                                s->k.matvec[wv->dtype](wv, lat, kv, v0, v0 + w->vdim); /* v_t (v) */
                                s->k.axpy(att[t], kv + v0, out, w->vdim);
                        }
                }
}

/* Decoder layer L (KV layer l) over the residual streams st->x (n, hidden) of the
 * call's tokens, whose rope angles are in st->cos / st->sin. */
static void layer_forward(struct dse_session *s, const struct ds_layer *L, int l, const struct dse__tok *toks,
                          int n) {
        const struct dse_hparams *hp = s->hp;
        struct ds_state *st = s->arch;
        const struct ds_weights *w = st->w;
        int64_t D = hp->hidden_size, QD = (int64_t)w->H * w->qk_dim;
        int64_t OD = (int64_t)w->H * w->vdim, QL = hp->q_lora_rank, h2 = w->rope_dim / 2;
        float *x = st->x; /* (n, hidden) residual streams */

        for (int i = 0; i < n; i++)
                s->k.rmsnorm(st->xb + i * D, x + i * D, L->attn_norm, D, hp->rms_norm_eps);
        /* q (H, nope+rope): q_b(norm(q_a(x))) or q_proj(x); kv_a (kvr + rope), the
         * cache row [norm(c), rope(k_pe)] below, in the same region as q_a or
         * q_proj, which read the same x (one wake-up and join fewer per layer) */
        struct dse__mm qkv[2] = {
                {.w = QL > 0 ? &L->wq_a : &L->wq, .x = st->xb, .ldx = D, .n = n, .y = QL > 0 ? st->qa : st->q,
                 .ldy = QL > 0 ? QL : QD},
                {.w = &L->wkv_a, .x = st->xb, .ldx = D, .n = n, .y = st->kv_a, .ldy = w->lat_dim},
        };
        dse__label_calls(s, "attention: q, kv_a");
        dse__linear_group(s, qkv, 2);
        if (QL > 0) {
                for (int i = 0; i < n; i++)
                        s->k.rmsnorm(st->qa + i * QL, st->qa + i * QL, L->q_a_norm, QL, MLA_NORM_EPS);
                dse__linear_n(s, &L->wq_b, st->qa, QL, n, st->q, QD, NULL);
        }
        for (int i = 0; i < n; i++) {
                const float *cos = st->cos + i * h2, *sin = st->sin + i * h2;
                for (int h = 0; h < w->H; h++)
                        dse__rope_apply(&w->rope, st->q + i * QD + (int64_t)h * w->qk_dim + w->nope, cos, sin);
                /* the row [norm(c) | rope(k_pe)] made in place, then stored in the
                 * cache's type */
                float *lat = st->kv_a + (int64_t)i * w->lat_dim; /* (kvr + rope) */
                s->k.rmsnorm(lat, lat, L->kv_a_norm, w->kvr, MLA_NORM_EPS);
                dse__rope_apply(&w->rope, lat + w->kvr, cos, sin);
                dse__kv_store(toks[i].kv, l, toks[i].pos, 0, lat, w->lat_dim);
        }
        /* Every token's latent is cached before any attends: a token sees its
         * sequence's earlier tokens of this call through the cache. */
        struct mla_job job = {.s = s, .L = L, .l = l, .toks = toks, .n = n};
        for (int i = 0; i < n && !s->mla_naive; i++)
                if (dse__attn_is_long(s, toks[i].pos + 1))
                        job.long_tok[job.n_long++] = i;
        dse__label_calls(s, "attention: MLA heads");
        dse__parallel(s, (size_t)w->H, s->mla_naive ? mla_naive : mla_absorbed, &job);
        if (job.n_long) {
                dse__attend_long(s, l, job.n_long, mla_pair, &job, w->kvr + w->rope_dim, w->kvr,
                                 w->softmax_scale);
                dse__parallel(s, (size_t)w->H, mla_uv_heads, &job);
        }
        dse__label_calls(s, "attention: o_proj");
        dse__linear_n(s, &L->wo, st->att_out, OD, n, st->xb2, D, NULL);
        for (int64_t i = 0; i < n * D; i++)
                x[i] += st->xb2[i];

        for (int i = 0; i < n; i++)
                s->k.rmsnorm(st->xb + i * D, x + i * D, L->ffn_norm, D, hp->rms_norm_eps);
        if (L->is_moe) {
                dse__moe_forward(s, &L->moe, &st->moe, st->xb, n, st->moe_out);
                for (int64_t i = 0; i < n * D; i++)
                        x[i] += st->moe_out[i];
        } else {
                dse__label_calls(s, "dense mlp");
                dse__swiglu_mlp(s, &L->mlp, st->xb, n, st->hb, st->hb2, w->mlp_width, st->xb2);
                for (int64_t i = 0; i < n * D; i++)
                        x[i] += st->xb2[i];
        }
}

static void rope_angles(struct ds_state *st, const struct dse__tok *toks, int n) {
        int64_t h2 = st->w->rope_dim / 2;
        for (int i = 0; i < n; i++)
                dse__rope_angles(&st->w->rope, toks[i].pos, st->cos + i * h2, st->sin + i * h2);
}

static void ds_forward(struct dse_session *s, const struct dse__tok *toks, int n) {
        const struct dse_hparams *hp = s->hp;
        struct ds_state *st = s->arch;
        const struct ds_weights *w = st->w;
        int64_t D = hp->hidden_size;

        dse__embed_tokens(s, &w->eh, toks, n, st->x);
        rope_angles(st, toks, n);
        for (int l = 0; l < hp->n_layers; l++)
                layer_forward(s, &w->layers[l], l, toks, n);
        for (int i = 0; i < n; i++)
                if (toks[i].hidden)
                        s->k.rmsnorm(toks[i].hidden, st->x + i * D, w->eh.final_norm, D, hp->rms_norm_eps);
        dse__label_calls(s, "lm head");
        dse__lm_head(s, &w->eh, toks, n, st->x, st->xb, st->logits);
        dse__label_calls(s, NULL);
}

static void ds_mtp_forward(struct dse_session *s, int m, const struct dse__tok *toks, const float *h, int n,
                           float *h_out) {
        const struct dse_hparams *hp = s->hp;
        struct ds_state *st = s->arch;
        const struct ds_weights *w = st->w;
        const struct ds_mtp *M = &w->mtp[m];
        int64_t D = hp->hidden_size, V = hp->vocab_size;

        /* [enorm(embedding of the next token) | hnorm(h)], embedding half first as
         * DeepSeek's reference concatenates them */
        dse__embed_tokens(s, &w->eh, toks, n, st->xb);
        for (int i = 0; i < n; i++) {
                s->k.rmsnorm(st->eh + i * 2 * D, st->xb + i * D, M->enorm, D, hp->rms_norm_eps);
                s->k.rmsnorm(st->eh + i * 2 * D + D, h + i * D, M->hnorm, D, hp->rms_norm_eps);
        }
        dse__linear_n(s, &M->eh_proj, st->eh, 2 * D, n, st->x, D, NULL);
        rope_angles(st, toks, n);
        layer_forward(s, &M->layer, hp->n_layers + m, toks, n);

        /* shared_head: its norm, then the main model's LM head for the rows that want
         * logits (packed into xb2) */
        int k = 0;
        for (int i = 0; i < n; i++) {
                s->k.rmsnorm(st->xb + i * D, st->x + i * D, M->head_norm, D, hp->rms_norm_eps);
                if (h_out)
                        memcpy(h_out + i * D, st->xb + i * D, (size_t)D * sizeof(float));
                if (toks[i].logits)
                        memcpy(st->xb2 + (k++) * D, st->xb + i * D, (size_t)D * sizeof(float));
        }
        if (k == 0)
                return;
        dse__linear_n(s, &w->eh.lm_head, st->xb2, D, k, st->logits, V, NULL);
        for (int i = 0, j = 0; i < n; i++)
                if (toks[i].logits)
                        memcpy(toks[i].logits, st->logits + (j++) * V, (size_t)V * sizeof(float));
}

const struct dse__arch_ops dse__arch_deepseek = {
        .bind = ds_bind,
        .init = ds_init,
        .forward = ds_forward,
        .mtp_forward = ds_mtp_forward,
};
