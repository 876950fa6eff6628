/* The DeepSeek MoE layer (DeepSeek-V2/V3 modeling_deepseek.py DeepseekMoE): routing
 * (MoEGate; fixtures README "Semantics followed": scores, expert choice and combination
 * weights for one token), then for a call's tokens the gather of (token, expert) pairs
 * expert by expert, the experts' SwiGLU MLPs beside the shared experts, and the weighted
 * combine. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"
#include "model/forward.h"

/* Index of the largest value among those with keep[i] set (first wins a tie), -1 if none. */
static int argmax_kept(const float *v, const uint8_t *keep, int n) {
        int best = -1;
        for (int i = 0; i < n; i++)
                if (keep[i] && (best < 0 || v[i] > v[best]))
                        best = i;
        return best;
}

int dse__moe_check(const struct dse_hparams *hp, struct dse_diag *reterr) {
        int E = hp->n_routed_experts, K = hp->n_experts_per_tok;
        if (E <= 0 || E > DSE_MOE_MAX_EXPERTS || K <= 0 || K > E)
                return dse__fail(reterr, -EBADMSG, "moe: %d experts, %d per token (at most %d experts)", E, K,
                                 DSE_MOE_MAX_EXPERTS);
        if (hp->topk_method != DSE_MOE_GREEDY &&
            (hp->n_group <= 0 || E % hp->n_group || hp->topk_group <= 0 || hp->topk_group > hp->n_group ||
             K > hp->topk_group * (E / hp->n_group)))
                return dse__fail(reterr, -EBADMSG, "moe: %d experts do not split into n_group %d / topk_group %d for top-%d",
                                 E, hp->n_group, hp->topk_group, K);
        if ((unsigned)hp->topk_method >= DSE_MOE_TOPK_COUNT || (unsigned)hp->scoring_func >= DSE_MOE_SCORING_COUNT)
                return dse__fail(reterr, -EOPNOTSUPP, "moe: topk_method %d / scoring_func %d", (int)hp->topk_method,
                                 (int)hp->scoring_func);
        return 0;
}

void dse__moe_route(const struct dse_hparams *hp, const float *logits, const float *bias, int32_t *ret_idx,
                    float *ret_w) {
        int E = hp->n_routed_experts, K = hp->n_experts_per_tok;
        float scores[DSE_MOE_MAX_EXPERTS], choice[DSE_MOE_MAX_EXPERTS];
        uint8_t keep[DSE_MOE_MAX_EXPERTS];

        /* scores: softmax over all experts (v2) or independent sigmoids (v3) */
        if (hp->scoring_func == DSE_MOE_SOFTMAX) {
                float max = logits[0], sum = 0.0f;
                for (int e = 1; e < E; e++)
                        max = logits[e] > max ? logits[e] : max;
                for (int e = 0; e < E; e++)
                        sum += scores[e] = expf(logits[e] - max);
                for (int e = 0; e < E; e++)
                        scores[e] /= sum;
        } else {
                for (int e = 0; e < E; e++)
                        scores[e] = 1.0f / (1.0f + expf(-logits[e]));
        }
        /* noaux_tc chooses by score + e_score_correction_bias but weighs by the score */
        int noaux = hp->topk_method == DSE_MOE_NOAUX_TC;
        for (int e = 0; e < E; e++) {
                choice[e] = scores[e] + (noaux && bias ? bias[e] : 0.0f);
                keep[e] = 1;
        }

        /* group limit: keep the topk_group groups with the best group score (the max,
         * or for noaux_tc the sum of the two largest choice values) */
        if (hp->topk_method != DSE_MOE_GREEDY) {
                int G = hp->n_group, per = E / G;
                float gscore[DSE_MOE_MAX_EXPERTS];
                uint8_t gkeep[DSE_MOE_MAX_EXPERTS];
                for (int g = 0; g < G; g++) {
                        const float *c = choice + g * per;
                        float a = -INFINITY, b = -INFINITY; /* largest, second largest */
                        for (int i = 0; i < per; i++) {
                                if (c[i] > a) {
                                        b = a;
                                        a = c[i];
                                } else if (c[i] > b) {
                                        b = c[i];
                                }
                        }
                        gscore[g] = noaux ? a + (per > 1 ? b : 0.0f) : a;
                        gkeep[g] = 1;
                }
                uint8_t chosen[DSE_MOE_MAX_EXPERTS] = {0};
                for (int n = 0; n < hp->topk_group; n++) {
                        int g = argmax_kept(gscore, gkeep, G);
                        gkeep[g] = 0;
                        chosen[g] = 1;
                }
                for (int e = 0; e < E; e++)
                        keep[e] = chosen[e / per];
        }

        /* top-k experts among those kept */
        float sum = 0.0f;
        for (int k = 0; k < K; k++) {
                int e = argmax_kept(choice, keep, E);
                keep[e] = 0;
                ret_idx[k] = e;
                ret_w[k] = scores[e];
                sum += scores[e];
        }

        /* v2: renormalise (top_k > 1 and norm_topk_prob) or scale; v3: renormalise if
         * asked, then always scale */
        int renorm = K > 1 && hp->norm_topk_prob;
        for (int k = 0; k < K; k++) {
                if (renorm)
                        ret_w[k] /= sum + 1e-20f;
                if (hp->arch == DSE_ARCH_DEEPSEEK_V3 || !renorm)
                        ret_w[k] *= hp->routed_scaling_factor;
        }
}

int dse__moe_bind(struct dse__weights *w, int l, struct dse__moe_layer *ret, int64_t *ret_width,
                  struct dse_diag *reterr) {
        const struct dse_hparams *hp = w->hp;
        int64_t D = hp->hidden_size, E = hp->n_routed_experts, W = hp->moe_intermediate_size, width = W;
        int r;
        if (W <= 0)
                return dse__fail(reterr, -EBADMSG, "deepseek: moe_intermediate_size %lld", (long long)W);
        if ((r = dse__weights_layer_matrix(w, l, "mlp.gate", E, D, &ret->router, reterr)) < 0 ||
            (r = dse__weights_layer_vector(w, l, "mlp.gate.e_score_correction_bias", E,
                                           hp->topk_method != DSE_MOE_NOAUX_TC, &ret->router_bias, reterr)) < 0)
                return r;
        if (hp->n_shared_experts > 0) {
                int64_t SW = W * hp->n_shared_experts;
                if ((r = dse__weights_layer_mlp(w, l, "mlp.shared_experts", SW, &ret->shared, reterr)) < 0)
                        return r;
                ret->has_shared = 1;
                width = SW > width ? SW : width;
        }
        if (!(ret->experts = dse__weights_alloc(w, (size_t)E * sizeof *ret->experts)))
                return -ENOMEM;
        for (int e = 0; e < E; e++) {
                char prefix[48];
                snprintf(prefix, sizeof prefix, "mlp.experts.%d", e);
                if ((r = dse__weights_layer_mlp(w, l, prefix, W, &ret->experts[e], reterr)) < 0)
                        return r;
        }
        *ret_width = width;
        return 0;
}

int dse__moe_scratch_init(struct dse_session *s, struct dse__moe_scratch *ret) {
        const struct dse_hparams *hp = s->hp;
        size_t T = DSE__MAX_STEP_TOKENS, D = (size_t)hp->hidden_size;
        size_t n_exp = hp->n_routed_experts > 0 ? (size_t)hp->n_routed_experts : 1;
        size_t n_k = hp->n_experts_per_tok > 0 ? (size_t)hp->n_experts_per_tok : 1;
        size_t mw = hp->moe_intermediate_size > 0 ? (size_t)hp->moe_intermediate_size : 1;
#define ALLOC(p, n) (((p) = dse__session_alloc(s, (size_t)(n) * sizeof *(p))) != NULL)
        if (!ALLOC(ret->router_logits, T * n_exp) || !ALLOC(ret->weight, T * n_k) || !ALLOC(ret->in, T * n_k * D) ||
            !ALLOC(ret->hb, T * n_k * mw) || !ALLOC(ret->hb2, T * n_k * mw) || !ALLOC(ret->eo, T * n_k * D) ||
            !ALLOC(ret->idx, T * n_k) || !ALLOC(ret->pos, T * n_k) || !ALLOC(ret->first, n_exp + 1) ||
            !(ret->xq_x = dse__session_alloc(s, dse__xq_bytes((int64_t)T, (int64_t)D))) ||
            !(ret->xq_in = dse__session_alloc(s, dse__xq_bytes((int64_t)(T * n_k), (int64_t)D))) ||
            !(ret->xq_hb = dse__session_alloc(s, dse__xq_bytes((int64_t)(T * n_k), (int64_t)mw))) ||
            !ALLOC(ret->mm, 2 * (n_exp + 1)) || !ALLOC(ret->sub, n_exp))
                return -ENOMEM;
#undef ALLOC
        return 0;
}

/* Rows [j0, j0 + m) of a quantized buffer of n rows, as its own dse_xq. */
static struct dse_xq xq_rows(const struct dse_xq *all, int64_t j0, int64_t m) {
        struct dse_xq v = *all;
        v.n = m;
        v.q = all->q + j0 * all->n_blocks * DSE_XQ_BLOCK;
        v.d = all->d + j0 * all->n_blocks;
        return v;
}

/* Whether every expert the call routes to takes int8 inputs in its gate and up (no
 * float path, no column permutation): then the gathered inputs are only needed in int8. */
static int routed_all_int8(const struct dse_session *s, const struct dse__moe_layer *L,
                           const struct dse__moe_scratch *ms, int64_t E) {
        for (int64_t e = 0; e < E; e++) {
                const struct dse__mlp *ex = &L->experts[e];
                if (ms->first[e + 1] > ms->first[e] &&
                    (!dse__use_xq(s, &ex->gate) || ex->gate.perm || ex->up.perm))
                        return 0;
        }
        return 1;
}

/* Routed experts plus shared experts of one MoE layer for n tokens: out (n, hidden).
 * The (token, k) pairs are gathered expert by expert, so each expert's weights are read
 * once for all the tokens routed to it, and the whole layer takes three parallel regions
 * whatever the number of experts touched: the router with the shared experts' gate and up
 * (the router alone is a region of few short rows, nearly all wake-up and join), then the
 * routed experts' gate, up and SwiGLU with the shared experts' down, then the routed downs.
 * Within a region the experts' rows are laid end to end and cut by their cost
 * (dse__linear_group), not handed out expert by expert. Between the regions the calling
 * thread works alone, so that part is kept small: with int8 activations x is quantized
 * once (n rows, not n * top-k) and its int8 rows are what is gathered, the float rows
 * only when an expert has no int8 path. Each token still adds its experts' outputs in its
 * top-k order after the shared experts', so the result is the token-by-token one exactly. */
void dse__moe_forward(struct dse_session *s, const struct dse__moe_layer *L, struct dse__moe_scratch *ms,
                      const float *x, int n, float *out) {
        const struct dse_hparams *hp = s->hp;
        int64_t D = hp->hidden_size, E = hp->n_routed_experts, K = hp->n_experts_per_tok, NK = n * K;
        int64_t W = hp->moe_intermediate_size, SW = ms->shared_ld;
        /* int8 rows of x, for the shared experts and gathered for the routed ones (the
         * quantization is row by row, so a gathered row is the row quantized) */
        int xq = s->act == DSE_ACTIVATIONS_INT8;
        struct dse_xq xx, xin, xhb, *sub_in = ms->sub;
        if (xq) {
                dse__xq_init(&xx, ms->xq_x, n, D);
                s->k.quantize_xq(x, D, &xx);
        }
        /* the router and the shared experts' gate and up read the same x: one region */
        struct dse__mm *mm = ms->mm;
        int n_mm = 0;
        mm[n_mm++] = (struct dse__mm){.w = &L->router, .x = x, .ldx = D, .n = n, .y = ms->router_logits, .ldy = E};
        if (L->has_shared)
                mm[n_mm++] = (struct dse__mm){.w = &L->shared.gate, .w_up = &L->shared.up, .x = x, .ldx = D, .n = n,
                                              .y = ms->shared_hb, .y_up = ms->shared_hb2, .ldy = SW,
                                              .xq = xq ? &xx : NULL};
        dse__label_calls(s, "moe: router, shared gate/up");
        dse__linear_group(s, mm, n_mm); /* router_logits (n, n_experts); hb = silu(gate) * up */
        for (int i = 0; i < n; i++)
                dse__moe_route(hp, ms->router_logits + i * E, L->router_bias, ms->idx + i * K, ms->weight + i * K);

        /* gather: expert e's pairs are rows first[e] .. first[e+1] */
        int64_t j = 0;
        for (int64_t e = 0; e < E; e++) {
                ms->first[e] = (int32_t)j;
                for (int64_t ik = 0; ik < NK; ik++)
                        if (ms->idx[ik] == e)
                                ms->pos[ik] = (int32_t)j++;
        }
        ms->first[E] = (int32_t)j;
        int float_in = !xq || !routed_all_int8(s, L, ms, E);
        if (xq)
                dse__xq_init(&xin, ms->xq_in, NK, D);
        for (int64_t ik = 0; ik < NK; ik++) {
                int64_t t = ik / K, p = ms->pos[ik];
                if (float_in)
                        memcpy(ms->in + p * D, x + t * D, (size_t)D * sizeof(float));
                if (xq) {
                        memcpy(xin.q + p * xin.n_blocks * DSE_XQ_BLOCK, xx.q + t * xx.n_blocks * DSE_XQ_BLOCK,
                               (size_t)(xx.n_blocks * DSE_XQ_BLOCK));
                        memcpy(xin.d + p * xin.n_blocks, xx.d + t * xx.n_blocks, (size_t)xx.n_blocks * sizeof(float));
                }
        }

        n_mm = 0;
        /* the shared experts' down beside the routed experts' gate and up; out = its
         * result, as before the routed experts are added */
        if (L->has_shared)
                mm[n_mm++] = (struct dse__mm){.w = &L->shared.down, .x = ms->shared_hb, .ldx = SW, .n = n, .y = out,
                                              .ldy = D};
        for (int64_t e = 0; e < E; e++) {
                int64_t j0 = ms->first[e], m = ms->first[e + 1] - j0;
                if (m == 0)
                        continue;
                const struct dse__mlp *ex = &L->experts[e];
                if (xq)
                        sub_in[e] = xq_rows(&xin, j0, m);
                mm[n_mm++] = (struct dse__mm){.w = &ex->gate, .w_up = &ex->up, .x = float_in ? ms->in + j0 * D : NULL,
                                              .ldx = D, .n = m, .y = ms->hb + j0 * W, .y_up = ms->hb2 + j0 * W,
                                              .ldy = W, .xq = xq ? &sub_in[e] : NULL};
        }
        dse__label_calls(s, "moe: shared down, routed gate/up");
        dse__linear_group(s, mm, n_mm);

        if (xq) {
                dse__xq_init(&xhb, ms->xq_hb, NK, W);
                s->k.quantize_xq(ms->hb, W, &xhb);
        }
        n_mm = 0;
        for (int64_t e = 0; e < E; e++) {
                int64_t j0 = ms->first[e], m = ms->first[e + 1] - j0;
                if (m == 0)
                        continue;
                if (xq)
                        sub_in[e] = xq_rows(&xhb, j0, m);
                mm[n_mm++] = (struct dse__mm){.w = &L->experts[e].down, .x = ms->hb + j0 * W, .ldx = W, .n = m,
                                              .y = ms->eo + j0 * D, .ldy = D, .xq = xq ? &sub_in[e] : NULL};
        }
        dse__label_calls(s, "moe: routed down");
        dse__linear_group(s, mm, n_mm);
        dse__label_calls(s, NULL);
        if (!L->has_shared)
                memset(out, 0, (size_t)(n * D) * sizeof(float));
        for (int64_t ik = 0; ik < NK; ik++)
                s->k.axpy(ms->weight[ik], ms->eo + (int64_t)ms->pos[ik] * D, out + (ik / K) * D, D);
}
