/* Speculative decoding in the scheduler: who proposes draft tokens, how many each
 * sequence may verify per step, and the acceptance rules that keep the output the
 * non-speculative one (exactly, for point-mass drafts; in distribution, for drafts drawn
 * from a draft model's own distribution).
 *
 * A drafter is an ops table over its own state, so n-gram lookup (here), an MTP head or
 * a draft model (both needing the target's hidden state or their own KV cache, hence
 * the per-request hooks) plug in the same way. A step verifies [pending token,
 * d_1..d_k] of a sequence in one forward pass (dse_batch_seq.n_draft); spec_verify then
 * walks the k + 1 positions. */
#ifndef DSV_WORKER_SPECULATE_H
#define DSV_WORKER_SPECULATE_H

#include <stdint.h>

#define SPEC_K_LIMIT 8 /* drafts per sequence per step, the most --spec-k-max allows */

enum spec_method { SPEC_OFF, SPEC_NGRAM, SPEC_MTP, SPEC_DRAFT };

struct spec_config {
        enum spec_method method; /* SPEC_OFF (0): plain decoding */
        int k_min, k_max;        /* 1 <= k_min <= k_max <= SPEC_K_LIMIT: a sequence's drafts per step */
        int step_tokens;         /* a step sampling this many positions is compute-bound: drafts
                                    never take it past that (0: no limit beyond the token budget) */
        int by_cost;             /* nonzero: a sequence's drafts are also cut to what pays at the
                                    measured step cost (spec_cost_drafts_in_step) */
};

/* "off" | "ngram" | "mtp" | "draft" -> *ret; -EINVAL otherwise. */
int spec_method_parse(const char *s, enum spec_method *ret);
const char *spec_method_name(enum spec_method m);

/* How a drafter with a distribution of its own draws from it (the draft model under
 * sampling): the scheduler turns the drafter's logits for draft position i into the
 * request's draft distribution q_i (the request's bias, penalties over its tokens and
 * drafts 0..i-1, and sampler settings), keeps q_i and returns the token drawn from it,
 * or -errno. */
struct spec_pick {
        int (*pick)(void *ctx, int i, const float *logits, int n_logits);
        void *ctx;
};

struct spec_drafter_ops {
        const char *name;
        /* Up to max_draft tokens proposed to follow tokens[0..n_tokens) of the request in
         * scheduler slot `slot`, into draft; returns how many (0: no guess) or -errno.
         * These are point masses (greedy, a lookup). */
        int (*propose)(void *self, int slot, const int32_t *tokens, int32_t n_tokens, int max_draft,
                       int32_t *draft);
        /* After verification: n_accepted of the n_draft proposals were kept (a drafter
         * with its own KV cache rolls the rest back). NULL when stateless. */
        void (*verified)(void *self, int slot, int n_draft, int n_accepted);
        /* The request in slot ended or was preempted. NULL when stateless. */
        void (*release)(void *self, int slot);
        /* A drafter with a distribution of its own (NULL otherwise), for a sampled
         * request: as propose, but each draft is pick's draw, and the chain goes one pick
         * further, into draft[max_draft] (never proposed; max_draft may be 0): the draw
         * for the position after the last draft, which verification weighs like a draft,
         * so every sampled position follows the same rule. */
        int (*propose_sampled)(void *self, int slot, const int32_t *tokens, int32_t n_tokens, int max_draft,
                               int32_t *draft, const struct spec_pick *pick);
};

struct spec_drafter {
        const struct spec_drafter_ops *ops;
        void *self;
};

/* The n-gram drafter (stateless, self unused): dse_ngram_draft with n from
 * SPEC_NGRAM_MAX down to SPEC_NGRAM_MIN over the last SPEC_NGRAM_WINDOW tokens. */
#define SPEC_NGRAM_MIN 2
#define SPEC_NGRAM_MAX 4
#define SPEC_NGRAM_WINDOW 4096
extern const struct spec_drafter_ops spec_ngram_ops;

/* Per-sequence draft length: follows the sequence's measured acceptance. A sequence
 * kept plain probes now and then (a probe of a draft model first feeds it the tokens
 * it missed, so the wait grows while probes change nothing). */
#define SPEC_PROBE_MIN 16
#define SPEC_PROBE_MAX 256
struct spec_seq {
        float mean_accepted; /* moving average of drafts accepted per verification */
        float accept_rate;   /* moving average of accepted / proposed drafts */
        /* Decayed counts of the drafts accepted and of the drafts the acceptance walk
         * reached (the accepted ones and the one rejected): their ratio is the chance a
         * draft is accepted once the drafts before it were, the per-position rate the
         * expected tokens of a verification follow. */
        float hits, reached;
        int plain_steps;     /* steps the policy chose plain decoding since the sequence last
                                verified drafts */
        int probe_every;     /* plain steps before a probe: SPEC_PROBE_MIN, doubled (up to
                                SPEC_PROBE_MAX) by each probe after which plain decoding
                                still wins, back to SPEC_PROBE_MIN after one that turned
                                drafting on */
        int probing;         /* a probe is due (set until a verification carries drafts) */
        int probed;          /* a probe was verified since the policy last weighed the counts */
};

/* Acceptance of an instance's drafts over every sequence (decayed counts as in
 * spec_seq): what a new sequence expects until its own drafts are verified. */
struct spec_accept {
        double hits, reached;
};

void spec_seq_init(struct spec_seq *q, const struct spec_config *cfg);
/* A new sequence starts from the instance's acceptance (as two drafts' worth of
 * evidence) instead of the optimism of spec_seq_init; nothing without a measurement. */
void spec_seq_prior(struct spec_seq *q, const struct spec_accept *instance);
/* Drafts the sequence should propose in its next step, in [k_min, k_max]. */
int spec_seq_k(const struct spec_seq *q, const struct spec_config *cfg);
/* After a verification of n_draft drafts of which n_accepted were kept: the moving
 * averages and the counts; a probe's verification restarts the counts from its own
 * result (and marks the sequence probed for spec_seq_plan). */
void spec_seq_update(struct spec_seq *q, int n_draft, int n_accepted);
/* The sequence's per-position acceptance (hits / reached); 1 before any evidence. */
double spec_seq_rate(const struct spec_seq *q);
/* Expected tokens of a verification of n drafts each accepted at rate a once the ones
 * before it were: the drafts kept plus the token after them, (1 - a^(n+1)) / (1 - a). */
double spec_expected_tokens(double a, int n);
void spec_accept_add(struct spec_accept *a, int n_draft, int n_accepted);

/* Measured seconds of a decode-only step by the tokens it carried (moving averages):
 * a step about as slow with k more tokens is memory-bound, so drafts are nearly free;
 * one slower in proportion to its tokens is compute-bound, and a draft costs what the
 * position it may save costs. */
#define SPEC_COST_TOKENS 32
struct spec_cost {
        double step_s[SPEC_COST_TOKENS + 1]; /* by tokens; 0: not measured */
};

void spec_cost_observe(struct spec_cost *c, int tokens, double seconds);
/* Of k_min..k drafts for a sequence whose drafts are accepted at rate a, added to a step
 * of `tokens` tokens that already yields `yield` tokens (one per sampled position, plus
 * the expected accepted drafts of the sequences before; 1 for a sequence alone): the
 * count with the most expected tokens of the whole step, yield - 1 + (1 - a^(n+1)) /
 * (1 - a), per step cost t(tokens + n) / t(tokens) (a step's time includes proposing
 * its drafts; t(tokens) never measured: the cheapest measured candidate's), a cost not
 * yet measured taken as no dearer (so it gets tried and measured); the larger count on a
 * tie. A step sampling many positions in proportion to its tokens (compute-bound) then
 * gains from a draft only what it costs every position of the step. *ret_value (when
 * not NULL): that count's tokens per t(tokens). */
int spec_cost_drafts_in_step(const struct spec_cost *c, int tokens, double yield, int k_min, int k, double a,
                             double *ret_value);

/* What an instance's policy measures: step costs (those of steps where a drafter draws
 * every sampled token, drafts or not, apart: a draft model under sampling runs even
 * for a plain step), acceptance over every sequence, and the sequences' drafting steps
 * since a plain step was last chosen to measure its cost again (after SPEC_REMEASURE
 * of them: the host's load moves it). Zeroed: nothing measured. */
#define SPEC_REMEASURE 32
struct spec_policy {
        struct spec_cost cost, cost_drawn;
        struct spec_accept accept;
        int drafting_steps;
};

/* The policy of one sequence's step (with cfg->by_cost): the drafts q verifies in a
 * decode-only step already holding `tokens` tokens that yield `yield` (as above), at
 * most `room`, by pol->cost (pol->cost_drawn when `drawn`: the drafter draws the
 * sequence's token). tokens 0 or past SPEC_COST_TOKENS: a step the table does not hold
 * (a prompt's), whose drafts ride on its long pass, costed as free.
 * 0 (plain decoding) while the plain step of that size is not measured, once per
 * SPEC_REMEASURE drafting steps of the instance, and when no count in [k_min,
 * min(k_max, room)] yields more tokens per unit time than plain decoding at the
 * sequence's measured acceptance (spec_seq_rate); then, after q->probe_every such
 * steps, a probe of k_min drafts (kept due until a verification carries drafts), so a
 * sequence whose text turns repetitive drafts again. Without cfg->by_cost: spec_seq_k
 * within room. */
int spec_seq_plan(struct spec_seq *q, const struct spec_config *cfg, struct spec_policy *pol, int drawn, int tokens,
                  double yield, int room);

/* Inverse-CDF draw from probs (n, summing to about 1) with u in [0, 1): the first
 * token whose cumulative probability passes u times the total; -EINVAL when every
 * probability is 0. */
int spec_draw(const float *probs, int32_t n, double u);

/* The standard speculative-sampling rule at one position (Leviathan et al.; Chen et
 * al.): draft x drawn from q is kept with probability min(1, p(x)/q(x)) (u_accept <
 * p(x)/q(x)); otherwise the token is drawn with u_residual from the residual
 * norm(max(0, p - q)), which has no mass at x. So the emitted token is distributed as p
 * whatever q is. p and q: (n) probabilities, q(x) > 0. Returns the token, x when kept;
 * a residual of no mass (p = q up to rounding) falls back to a draw from p. */
int spec_accept_or_resample(const float *p, const float *q, int32_t n, int32_t x, double u_accept,
                            double u_residual);

/* Lanes of dse_sampler_uniform_at for the draws of one output position under the rule
 * above: the draft's draw, the acceptance draw, the residual draw, and a position
 * sampled from p alone (the drafter had no distribution for it). */
enum spec_lane { SPEC_LANE_DRAFT, SPEC_LANE_ACCEPT, SPEC_LANE_RESIDUAL, SPEC_LANE_PLAIN };

/* Samples position i (0..n_draft) of a verification from the target distribution
 * given everything before it (the accepted drafts included: penalties, masks and the
 * sampler's stream advance token by token), emits the token, and returns it; -1 when
 * the request ended with it (it is then gone). */
typedef int (*spec_sample_fn)(void *ctx, int i);

/* The acceptance walk over one verification: returns how many drafts were accepted
 * (before the token that ended the request, when one did); *ret_ended is set when the
 * request ended during the walk. Every emitted token (at
 * most n_draft + 1) came from sample. */
int spec_verify(const int32_t *draft, int n_draft, spec_sample_fn sample, void *ctx, int *ret_ended);

/* Counters of an instance's speculation, for stats and metrics. */
struct spec_stats {
        int64_t verifications;   /* steps of a sequence that carried at least one draft */
        int64_t draft_tokens, accepted_tokens;
        int64_t accepted_hist[SPEC_K_LIMIT + 1]; /* verifications by drafts accepted */
};

void spec_stats_add(struct spec_stats *st, int n_draft, int n_accepted);

#endif
