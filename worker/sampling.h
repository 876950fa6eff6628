/* Per-request logit processing the engine's sampler leaves to the caller: logit bias,
 * a grammar's token mask, repetition, presence and frequency penalties (applied in that
 * order, before the sampler's temperature and filters), and top-n log-probabilities. */
#ifndef DSV_WORKER_SAMPLING_H
#define DSV_WORKER_SAMPLING_H

#include <stddef.h>
#include <stdint.h>

#include "dsv_ipc.h"

#define SAMPLING_MAX_TOP 20

struct penalties {
        float repetition; /* 1: off. transformers' RepetitionPenaltyLogitsProcessor over
                             prompt and output: a seen token's logit l becomes l / p when
                             l > 0, else l * p */
        float presence;   /* 0: off. OpenAI: l -= presence once per token seen in the output */
        float frequency;  /* 0: off. OpenAI: l -= frequency * (times seen in the output) */
};

/* Marks (one stamp per vocabulary entry) so a penalty touches each distinct token once
 * without clearing anything per call. */
struct sampling_scratch {
        uint32_t *stamp; /* (vocab) */
        uint32_t epoch;
        int32_t vocab;
};

int sampling_scratch_init(struct sampling_scratch *sc, int32_t vocab);
void sampling_scratch_done(struct sampling_scratch *sc);

/* Applies p to logits (vocab) in place for a sequence of n_tokens ids whose first
 * n_prompt are the prompt. */
void sampling_apply_penalties(struct sampling_scratch *sc, const struct penalties *p, const int32_t *tokens,
                              int32_t n_prompt, int32_t n_tokens, float *logits);

/* Adds each bias to its token's logit; a bias of -100 bans the token (-inf), as OpenAI
 * documents it. Ids must be inside the vocabulary. */
void sampling_apply_bias(const struct dsv_ipc_logit_bias *bias, size_t n, float *logits);

/* Sets every logit whose bit (mask[id / 64] >> id % 64) is clear to -inf. */
void sampling_apply_mask(const uint64_t *mask, int32_t vocab, float *logits);

/* The one id mask allows, or -1 when it allows none or several. */
int32_t sampling_mask_single(const uint64_t *mask, int32_t vocab);

/* The log-softmax of logits at chosen, and the n most likely tokens (highest first,
 * lowest id on ties) with their log-probabilities in top (n <= SAMPLING_MAX_TOP). */
float sampling_logprobs(const float *logits, int32_t vocab, int32_t chosen, int n, struct dsv_ipc_logprob *top);

#endif
