/* DeepSeek MoE routing (engine/src/model/moe.c) on hand-worked cases: each case is built
 * so that the method under test picks different experts than the simpler methods would. */
#include <math.h>

#include "model/forward.h"
#include "t.h"

static struct dse_hparams v2(int E, int K) {
        struct dse_hparams hp = {0};
        hp.arch = DSE_ARCH_DEEPSEEK_V2;
        hp.n_routed_experts = E;
        hp.n_experts_per_tok = K;
        hp.topk_method = DSE_MOE_GREEDY;
        hp.scoring_func = DSE_MOE_SOFTMAX;
        hp.n_group = 1;
        hp.topk_group = 1;
        hp.routed_scaling_factor = 1.5f;
        return hp;
}

TEST(v2_greedy_scaled) {
        /* softmax(ln 1..4) = (1,2,3,4)/10: top-2 = experts 3, 2; weights * 1.5 */
        struct dse_hparams hp = v2(4, 2);
        float logits[4] = {0, logf(2), logf(3), logf(4)};
        int32_t idx[2];
        float w[2];
        ASSERT_OK(dse__moe_check(&hp, NULL));
        dse__moe_route(&hp, logits, NULL, idx, w);
        ASSERT_EQ(idx[0], 3);
        ASSERT_EQ(idx[1], 2);
        ASSERT_NEAR(w[0], 0.4 * 1.5, 1e-6);
        ASSERT_NEAR(w[1], 0.3 * 1.5, 1e-6);
}

TEST(v2_greedy_renormalised_not_scaled) {
        struct dse_hparams hp = v2(4, 2);
        hp.norm_topk_prob = 1;
        float logits[4] = {0, logf(2), logf(3), logf(4)};
        int32_t idx[2];
        float w[2];
        dse__moe_route(&hp, logits, NULL, idx, w);
        ASSERT_NEAR(w[0], 0.4 / 0.7, 1e-6);
        ASSERT_NEAR(w[1], 0.3 / 0.7, 1e-6);
}

TEST(v2_group_limited_greedy) {
        /* scores (5,1,3,3)/12; groups {0,1} {2,3}; group max 5/12 > 3/12 keeps group 0,
         * so top-2 is experts 0 and 1 (plain greedy would take 0 and 2) */
        struct dse_hparams hp = v2(4, 2);
        hp.topk_method = DSE_MOE_GROUP_LIMITED_GREEDY;
        hp.n_group = 2;
        hp.topk_group = 1;
        hp.routed_scaling_factor = 1.0f;
        float logits[4] = {logf(5), 0, logf(3), logf(3)};
        int32_t idx[2];
        float w[2];
        ASSERT_OK(dse__moe_check(&hp, NULL));
        dse__moe_route(&hp, logits, NULL, idx, w);
        ASSERT_EQ(idx[0], 0);
        ASSERT_EQ(idx[1], 1);
        ASSERT_NEAR(w[0], 5.0 / 12, 1e-6);
        ASSERT_NEAR(w[1], 1.0 / 12, 1e-6);
}

TEST(v3_noaux_tc_sigmoid_bias_groups) {
        /* sigmoid scores: 0.5 everywhere but expert 6 (0.75). choice = score + bias =
         * (.6 .6 .8 .3 .5 .5 1.0 .5); group sums of the top two (pairs): 1.2 1.1 1.0 1.5
         * keep groups 3 and 0 (a max-based group score would keep 1 and 3); top-2 of
         * choice among experts {0,1,6,7}: 6, then 0 (tie with 1, first wins). Weights are
         * the sigmoid scores 0.75, 0.5 renormalised (0.6, 0.4) times 2.5. */
        struct dse_hparams hp = {0};
        hp.arch = DSE_ARCH_DEEPSEEK_V3;
        hp.n_routed_experts = 8;
        hp.n_experts_per_tok = 2;
        hp.topk_method = DSE_MOE_NOAUX_TC;
        hp.scoring_func = DSE_MOE_SIGMOID;
        hp.n_group = 4;
        hp.topk_group = 2;
        hp.norm_topk_prob = 1;
        hp.routed_scaling_factor = 2.5f;
        float logits[8] = {0, 0, 0, 0, 0, 0, logf(3), 0};
        float bias[8] = {0.1f, 0.1f, 0.3f, -0.2f, 0.0f, 0.0f, 0.25f, 0.0f};
        int32_t idx[2];
        float w[2];
        ASSERT_OK(dse__moe_check(&hp, NULL));
        dse__moe_route(&hp, logits, bias, idx, w);
        ASSERT_EQ(idx[0], 6);
        ASSERT_EQ(idx[1], 0);
        ASSERT_NEAR(w[0], 0.6 * 2.5, 1e-6);
        ASSERT_NEAR(w[1], 0.4 * 2.5, 1e-6);
}

TEST(check_rejects_bad_groups) {
        struct dse_hparams hp = v2(6, 2);
        hp.topk_method = DSE_MOE_GROUP_LIMITED_GREEDY;
        hp.n_group = 4; /* 6 experts do not split into 4 groups */
        hp.topk_group = 2;
        ASSERT_ERR(dse__moe_check(&hp, NULL), -EBADMSG);
        hp = v2(4, 5); /* more experts per token than experts */
        ASSERT_ERR(dse__moe_check(&hp, NULL), -EBADMSG);
}
