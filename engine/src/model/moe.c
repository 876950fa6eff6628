/* DeepSeek MoE routing (DeepSeek-V2/V3 modeling_deepseek.py MoEGate; fixtures README
 * "Semantics followed"): scores, expert choice and combination weights for one token. */
#include <math.h>

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
