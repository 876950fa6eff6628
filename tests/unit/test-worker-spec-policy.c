/* The speculation policy (speculate.h, spec_seq_plan) on given step costs and
 * acceptance: plain decoding when no draft count yields more tokens per unit time, the
 * count that yields most otherwise (drafting cost included in the measured steps), the
 * plain step measured first and again after SPEC_REMEASURE drafting steps, a step that
 * already samples many positions at a compute-bound cost kept plain, the per-position
 * acceptance estimate, the instance's acceptance for a new sequence, and probing: a
 * sequence that stopped drafting tries k_min drafts after probe_every plain steps,
 * probe_every doubling (to SPEC_PROBE_MAX) while probes leave plain decoding ahead and
 * falling back once a probe turns drafting on. */
#include <stdio.h>

#include "speculate.h"
#include "t.h"

static const struct spec_config by_cost = {SPEC_MTP, 1, 4, 8, 1};

/* A batch-1 table: t(1) = 1 ms and t(1 + n) = r[n - 1] ms. */
static struct spec_policy policy_with(const double r[4]) {
        struct spec_policy pol = {0};
        spec_cost_observe(&pol.cost, 1, 1e-3);
        for (int n = 1; n <= 4; n++)
                spec_cost_observe(&pol.cost, 1 + n, r[n - 1] * 1e-3);
        return pol;
}

/* A sequence whose counts say rate a (as ten drafts of evidence). */
static struct spec_seq seq_at(double a) {
        struct spec_seq q;
        spec_seq_init(&q, &by_cost);
        q.hits = (float)(10 * a);
        q.reached = 10;
        return q;
}

/* The verification costs the spec bench measured on the bundled model (1.65 / 2.31 /
 * 2.99 / 3.75 x a one-token pass, drafts free as n-gram's): at a per-position rate of
 * 0.9 the counts yield 1.90, 2.71, 3.44, 4.10 tokens, per unit time 1.15, 1.17, 1.15,
 * 1.09: two drafts; always accepted, 2/1.65, 3/2.31, 4/2.99, 5/3.75: three; at 0.5, 1.5
 * tokens for 1.65: none pays, plain decoding. */
TEST(plan_picks_the_count_with_most_tokens_per_time) {
        static const double bench[4] = {1.65, 2.31, 2.99, 3.75};
        struct spec_policy pol = policy_with(bench);
        struct spec_seq q = seq_at(0.9);
        ASSERT_EQ(spec_seq_plan(&q, &by_cost, &pol, 0, 1, 1, 8), 2);
        q = seq_at(1.0);
        ASSERT_EQ(spec_seq_plan(&q, &by_cost, &pol, 0, 1, 1, 8), 3);
        q = seq_at(0.5);
        ASSERT_EQ(spec_seq_plan(&q, &by_cost, &pol, 0, 1, 1, 8), 0);
        /* room and k_max bound the count */
        q = seq_at(1.0);
        ASSERT_EQ(spec_seq_plan(&q, &by_cost, &pol, 0, 1, 1, 2), 2);
        /* a memory-bound step (as dear with 4 more tokens): all four, even at 0.3 */
        static const double flat[4] = {1.0, 1.0, 1.0, 1.0};
        pol = policy_with(flat);
        q = seq_at(0.3);
        ASSERT_EQ(spec_seq_plan(&q, &by_cost, &pol, 0, 1, 1, 8), 4);
}

/* A drafter whose drafting costs a pass of its own per draft (MTP on a model whose
 * module is half a pass): t(1 + n) = 1 + 0.65 n + 0.5 n. Accepted at 0.8, one draft
 * yields 1.8 tokens for 2.15: plain decoding; the costs of the steps drawn by a draft
 * model under sampling are their own table. */
TEST(plan_turns_drafting_off_when_drafting_costs_more_than_it_saves) {
        static const double mtp[4] = {2.15, 3.30, 4.45, 5.60};
        struct spec_policy pol = policy_with(mtp);
        struct spec_seq q = seq_at(0.8);
        ASSERT_EQ(spec_seq_plan(&q, &by_cost, &pol, 0, 1, 1, 8), 0);
        q = seq_at(1.0);
        ASSERT_EQ(spec_seq_plan(&q, &by_cost, &pol, 0, 1, 1, 8), 0);
        /* drawn steps: the plain one not measured yet, so it is taken first */
        ASSERT_EQ(spec_seq_plan(&q, &by_cost, &pol, 1, 1, 1, 8), 0);
        spec_cost_observe(&pol.cost_drawn, 1, 2e-3);
        spec_cost_observe(&pol.cost_drawn, 2, 2.2e-3);
        ASSERT_EQ(spec_seq_plan(&q, &by_cost, &pol, 1, 1, 1, 1), 1);
}

/* Nothing is weighed against a plain step never measured: plain decoding first. Then,
 * drafting, one plain step per SPEC_REMEASURE drafting steps measures it again. */
TEST(plan_measures_the_plain_step_first_and_again) {
        struct spec_policy pol = {0};
        for (int n = 1; n <= 4; n++)
                spec_cost_observe(&pol.cost, 1 + n, 1e-3);
        struct spec_seq q = seq_at(1.0);
        ASSERT_EQ(spec_seq_plan(&q, &by_cost, &pol, 0, 1, 1, 8), 0);
        spec_cost_observe(&pol.cost, 1, 1e-3);
        int plain = 0;
        for (int i = 0; i < 4 * SPEC_REMEASURE; i++)
                plain += spec_seq_plan(&q, &by_cost, &pol, 0, 1, 1, 8) == 0;
        ASSERT_TRUE(plain >= 3 && plain <= 4);
        /* a prompt's step, not in the table, is not held back */
        ASSERT_EQ(spec_seq_plan(&q, &by_cost, &pol, 0, SPEC_COST_TOKENS + 10, 1, 8), 4);
        ASSERT_EQ(spec_seq_plan(&q, &by_cost, &pol, 0, 0, 1, 8), 4);
}

/* A step of 8 decoding sequences that costs in proportion to its tokens
 * (compute-bound): a draft adds 1/8 to the time of all 8 and at most one token, so
 * even drafts always accepted do not pay for the step; the same step at a flat cost
 * takes them. spec_cost_drafts_in_step with a yield of 1 (one sequence's view) would take them in both. */
TEST(plan_keeps_a_compute_bound_batch_plain) {
        struct spec_policy lin = {0}, flat = {0};
        for (int t = 1; t <= SPEC_COST_TOKENS; t++) {
                spec_cost_observe(&lin.cost, t, 1e-3 * t);
                spec_cost_observe(&flat.cost, t, 1e-3);
        }
        struct spec_seq q = seq_at(0.9);
        ASSERT_EQ(spec_seq_plan(&q, &by_cost, &lin, 0, 8, 8, 8), 0);
        q = seq_at(0.9);
        ASSERT_EQ(spec_seq_plan(&q, &by_cost, &flat, 0, 8, 8, 8), 4);
        ASSERT_EQ(spec_cost_drafts_in_step(&lin.cost, 8, 1.0, 1, 4, 0.9, NULL), 4);
        /* batch 1 at the same linear cost: (1 + a) / 2 < 1, plain */
        q = seq_at(0.9);
        ASSERT_EQ(spec_seq_plan(&q, &by_cost, &lin, 0, 1, 1, 8), 0);
}

/* The per-position rate: a verification of 4 drafts keeping 2 reached 3 of them; one
 * keeping all 4 reached 4. The instance's rate seeds a new sequence as two drafts. */
TEST(acceptance_per_position) {
        struct spec_seq q;
        spec_seq_init(&q, &by_cost);
        ASSERT_FLOAT_EQ(spec_seq_rate(&q), 1.0);
        spec_seq_update(&q, 4, 2);
        ASSERT_FLOAT_EQ(spec_seq_rate(&q), 2.0 / 3.0);
        spec_seq_update(&q, 4, 4);
        ASSERT_NEAR(spec_seq_rate(&q), (0.8 * 2 + 4) / (0.8 * 3 + 4), 1e-6);
        struct spec_accept inst = {0};
        spec_accept_add(&inst, 4, 1);
        spec_accept_add(&inst, 0, 0);
        struct spec_seq fresh;
        spec_seq_init(&fresh, &by_cost);
        spec_seq_prior(&fresh, &inst);
        ASSERT_NEAR(spec_seq_rate(&fresh), 0.5, 1e-6);
        ASSERT_NEAR(spec_expected_tokens(0.5, 2), 1.75, 1e-12);
        ASSERT_NEAR(spec_expected_tokens(1.0, 3), 4.0, 1e-12);
}

/* Steps until spec_seq_plan proposes drafts, at most limit. */
static int steps_to_probe(struct spec_seq *q, struct spec_policy *pol, int limit) {
        for (int i = 1; i <= limit; i++)
                if (spec_seq_plan(q, &by_cost, pol, 0, 1, 1, 8) > 0)
                        return i;
        return -1;
}

/* A sequence kept plain probes with k_min drafts after probe_every plain steps, again
 * on the next step while no verification came (the drafter had none to offer); each
 * probe after which plain decoding still wins doubles the wait, up to SPEC_PROBE_MAX.
 * When the text turns repetitive, a probe's accepted draft turns drafting on (the probe
 * restarts the counts: 1.5 of 2, 0.75, and one draft yields 1.75 tokens for 1.65) and
 * the wait is back at SPEC_PROBE_MIN. */
TEST(plan_reprobes_with_a_growing_wait) {
        static const double bench[4] = {1.65, 2.31, 2.99, 3.75};
        struct spec_policy pol = policy_with(bench);
        struct spec_seq q = seq_at(0.1);
        ASSERT_EQ(steps_to_probe(&q, &pol, 1000), SPEC_PROBE_MIN);
        ASSERT_EQ(spec_seq_plan(&q, &by_cost, &pol, 0, 1, 1, 8), 1); /* still due */
        int wait = SPEC_PROBE_MIN;
        for (int probe = 0; probe < 6; probe++) {
                spec_seq_update(&q, 1, 0);
                wait = wait * 2 > SPEC_PROBE_MAX ? SPEC_PROBE_MAX : wait * 2;
                ASSERT_EQ(steps_to_probe(&q, &pol, 1000), wait);
                ASSERT_EQ(q.probe_every, wait);
        }
        ASSERT_EQ(wait, SPEC_PROBE_MAX);
        spec_seq_update(&q, 1, 1);
        ASSERT_EQ(spec_seq_plan(&q, &by_cost, &pol, 0, 1, 1, 8), 1);
        ASSERT_EQ(q.probe_every, SPEC_PROBE_MIN);
        ASSERT_FLOAT_EQ(spec_seq_rate(&q), 0.75);
        /* drafting verifications then move the counts as usual */
        spec_seq_update(&q, 1, 1);
        ASSERT_TRUE(spec_seq_rate(&q) > 0.75);
        /* without the cost rule: spec_seq_k within the room, no probing */
        const struct spec_config plain_rule = {SPEC_NGRAM, 1, 4, 8, 0};
        struct spec_seq r;
        spec_seq_init(&r, &plain_rule);
        ASSERT_EQ(spec_seq_plan(&r, &plain_rule, &pol, 0, 1, 1, 3), 3);
        ASSERT_EQ(spec_seq_plan(&r, &plain_rule, &pol, 0, 1, 1, 0), 0);
}
