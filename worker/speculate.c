/* Speculative decoding's drafter, draft lengths and acceptance rule (see speculate.h). */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "dse.h"
#include "speculate.h"

int spec_method_parse(const char *s, enum spec_method *ret) {
        if (!strcmp(s, "off"))
                *ret = SPEC_OFF;
        else if (!strcmp(s, "ngram"))
                *ret = SPEC_NGRAM;
        else if (!strcmp(s, "mtp"))
                *ret = SPEC_MTP;
        else if (!strcmp(s, "draft"))
                *ret = SPEC_DRAFT;
        else
                return -EINVAL;
        return 0;
}

const char *spec_method_name(enum spec_method m) {
        return m == SPEC_NGRAM ? "ngram" : m == SPEC_MTP ? "mtp" : m == SPEC_DRAFT ? "draft" : "off";
}

static int ngram_propose(void *self, int slot, const int32_t *tokens, int32_t n_tokens, int max_draft,
                         int32_t *draft) {
        (void)self;
        (void)slot;
        return dse_ngram_draft(tokens, n_tokens, SPEC_NGRAM_MIN, SPEC_NGRAM_MAX, SPEC_NGRAM_WINDOW, max_draft, draft);
}

const struct spec_drafter_ops spec_ngram_ops = {.name = "ngram", .propose = ngram_propose};

/* A new sequence starts at the top of its range: the first verification measures. */
void spec_seq_init(struct spec_seq *q, const struct spec_config *cfg) {
        *q = (struct spec_seq){.mean_accepted = (float)cfg->k_max, .accept_rate = 1.0f,
                               .probe_every = SPEC_PROBE_MIN};
}

/* The weight of the instance's acceptance in a new sequence's counts: two drafts, so
 * the sequence's own first verifications soon outweigh it. */
#define SPEC_PRIOR_DRAFTS 2.0

void spec_seq_prior(struct spec_seq *q, const struct spec_accept *instance) {
        if (instance->reached > 0) {
                q->hits = (float)(SPEC_PRIOR_DRAFTS * instance->hits / instance->reached);
                q->reached = (float)SPEC_PRIOR_DRAFTS;
        }
}

/* One more draft than the sequence usually gets accepted: a run of full acceptances
 * climbs to k_max, a run of rejections sinks to k_min, and a draft past the usual
 * acceptance length is cheap while the step is memory-bound. */
int spec_seq_k(const struct spec_seq *q, const struct spec_config *cfg) {
        int k = (int)(q->mean_accepted + 0.5f) + 1;
        return k < cfg->k_min ? cfg->k_min : k > cfg->k_max ? cfg->k_max : k;
}

/* Per verification, the older counts weigh 0.8: about the last five verifications
 * decide, so text that turns repetitive (or stops being) shows within a few steps. */
#define SPEC_SEQ_DECAY 0.8f

void spec_seq_update(struct spec_seq *q, int n_draft, int n_accepted) {
        if (n_draft > 0) {
                float reached = (float)(n_accepted + (n_accepted < n_draft));
                q->mean_accepted += 0.5f * ((float)n_accepted - q->mean_accepted);
                q->accept_rate += 0.3f * ((float)n_accepted / (float)n_draft - q->accept_rate);
                if (q->probing) {
                        /* A probe measures the text as it is now, after the plain steps:
                         * its result plus even odds worth half a draft (one accepted draft:
                         * 0.75, one rejected: 0.25), not the history it came to question. */
                        q->hits = (float)n_accepted + 0.5f;
                        q->reached = reached + 1.0f;
                        q->probed = 1;
                } else {
                        q->hits = SPEC_SEQ_DECAY * q->hits + (float)n_accepted;
                        q->reached = SPEC_SEQ_DECAY * q->reached + reached;
                }
                q->probing = 0;
                q->plain_steps = 0;
        }
}

double spec_seq_rate(const struct spec_seq *q) {
        return q->reached > 0 ? (double)q->hits / (double)q->reached : 1.0;
}

/* The instance's counts decay slowly (0.98 per verification): they describe the
 * method on this instance's traffic, not one sequence's text. */
void spec_accept_add(struct spec_accept *a, int n_draft, int n_accepted) {
        if (n_draft > 0) {
                a->hits = 0.98 * a->hits + n_accepted;
                a->reached = 0.98 * a->reached + n_accepted + (n_accepted < n_draft);
        }
}

double spec_expected_tokens(double a, int n) {
        return a >= 1 ? n + 1 : (1 - pow(a, n + 1)) / (1 - a);
}

void spec_cost_observe(struct spec_cost *c, int tokens, double seconds) {
        if (tokens < 1 || tokens > SPEC_COST_TOKENS || !(seconds > 0))
                return;
        double *t = &c->step_s[tokens];
        *t = *t > 0 ? *t + 0.2 * (seconds - *t) : seconds;
}

int spec_cost_drafts_in_step(const struct spec_cost *c, int tokens, double yield, int k_min, int k, double a,
                             double *ret_value) {
        int best = k_min;
        double best_v = -1;
        /* t(tokens); when a step of that many tokens never ran (a drafter that always
         * proposes), the cheapest measured candidate's */
        double base = tokens >= 1 && tokens <= SPEC_COST_TOKENS ? c->step_s[tokens] : 0;
        for (int n = k_min, measured = base > 0; !measured && tokens >= 1 && n <= k && tokens + n <= SPEC_COST_TOKENS; n++)
                if (c->step_s[tokens + n] > 0 && (base <= 0 || c->step_s[tokens + n] < base))
                        base = c->step_s[tokens + n];
        for (int n = k_min; n <= k; n++) {
                double expect = spec_expected_tokens(a, n), ratio = 1;
                if (tokens >= 1 && tokens + n <= SPEC_COST_TOKENS && base > 0 && c->step_s[tokens + n] > 0)
                        ratio = c->step_s[tokens + n] / base;
                double v = (yield - 1 + expect) / ratio;
                if (v >= best_v) {
                        best_v = v;
                        best = n;
                }
        }
        if (ret_value)
                *ret_value = best_v;
        return best;
}

int spec_seq_plan(struct spec_seq *q, const struct spec_config *cfg, struct spec_policy *pol, int drawn, int tokens,
                  double yield, int room) {
        int k = cfg->k_max < room ? cfg->k_max : room;
        if (k <= 0)
                return 0;
        if (!cfg->by_cost)
                return spec_seq_k(q, cfg) < k ? spec_seq_k(q, cfg) : k;
        int k_min = cfg->k_min < k ? cfg->k_min : k;
        /* Every count is weighed against the plain step of this size: measure it first,
         * and again now and then. */
        const struct spec_cost *c = drawn ? &pol->cost_drawn : &pol->cost;
        int in_table = tokens >= 1 && tokens <= SPEC_COST_TOKENS;
        if (in_table && c->step_s[tokens] <= 0)
                return 0;
        double value;
        int n = spec_cost_drafts_in_step(c, tokens, yield, k_min, k, spec_seq_rate(q), &value);
        int wins = value > yield;
        if (q->probed)
                q->probe_every = wins                                  ? SPEC_PROBE_MIN
                                 : q->probe_every * 2 > SPEC_PROBE_MAX ? SPEC_PROBE_MAX
                                                                       : q->probe_every * 2;
        q->probed = 0;
        if (wins) {
                if (in_table && ++pol->drafting_steps > SPEC_REMEASURE) {
                        pol->drafting_steps = 0;
                        return 0;
                }
                return n;
        }
        if (q->probing || ++q->plain_steps >= q->probe_every) {
                q->probing = 1;
                return k_min;
        }
        return 0;
}

int spec_draw(const float *probs, int32_t n, double u) {
        double total = 0;
        int32_t last = -1;
        for (int32_t i = 0; i < n; i++)
                if (probs[i] > 0) {
                        total += probs[i];
                        last = i;
                }
        if (last < 0)
                return -EINVAL;
        double target = u * total, acc = 0;
        for (int32_t i = 0; i < last; i++) {
                acc += probs[i];
                if (probs[i] > 0 && target < acc)
                        return i;
        }
        return last; /* u rounded up to the total */
}

int spec_accept_or_resample(const float *p, const float *q, int32_t n, int32_t x, double u_accept,
                            double u_residual) {
        if (p[x] >= q[x] || u_accept * (double)q[x] < (double)p[x])
                return x;
        double total = 0;
        for (int32_t i = 0; i < n; i++)
                if (p[i] > q[i])
                        total += (double)p[i] - (double)q[i];
        if (!(total > 0))
                return spec_draw(p, n, u_residual);
        double target = u_residual * total, acc = 0;
        int32_t last = -1;
        for (int32_t i = 0; i < n; i++)
                if (p[i] > q[i]) {
                        acc += (double)p[i] - (double)q[i];
                        last = i;
                        if (target < acc)
                                return i;
                }
        return last;
}

/* The rule, from the general one (Leviathan et al.; Chen et al.): with target p and
 * draft distribution q at a position, draft x ~ q is accepted with probability
 * min(1, p(x)/q(x)); on rejection the token is drawn from the residual
 * norm(max(0, p - q)); then every emitted token is distributed as p. An n-gram (or any
 * deterministic) draft is a point mass, q = 1 at x: accept with probability
 * min(1, p(x)) = p(x), and the residual max(0, p - q) is p with x's mass removed
 * (p(x) - 1 <= 0), renormalised. Drawing y ~ p and accepting when y == x realises
 * exactly that: P(accept) = p(x), and given y != x, y ~ p restricted to the other tokens
 * and renormalised. So each position is sampled from the target as plain decoding
 * would (same penalties, masks and sampler, one draw per emitted token), and the walk
 * stops at the first sample that differs from its draft, which is the resample; after
 * k accepted drafts the k + 1-th sample is the bonus token. Greedy is the special case
 * of an argmax sampler: accept on exact match. Drafts drawn from a distribution of
 * their own take the general rule inside sample (spec_accept_or_resample): it returns x
 * when accepted and a residual token, never x, when not, so the walk is the same. */
int spec_verify(const int32_t *draft, int n_draft, spec_sample_fn sample, void *ctx, int *ret_ended) {
        *ret_ended = 0;
        for (int i = 0;; i++) {
                int tok = sample(ctx, i);
                if (tok < 0) {
                        *ret_ended = 1;
                        return i;
                }
                if (i == n_draft || tok != draft[i])
                        return i;
        }
}

void spec_stats_add(struct spec_stats *st, int n_draft, int n_accepted) {
        if (n_draft <= 0)
                return;
        st->verifications++;
        st->draft_tokens += n_draft;
        st->accepted_tokens += n_accepted;
        st->accepted_hist[n_accepted]++;
}
