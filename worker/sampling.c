/* Repetition/presence/frequency penalties and log-probabilities (see sampling.h). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sampling.h"

int sampling_scratch_init(struct sampling_scratch *sc, int32_t vocab) {
        sc->stamp = calloc((size_t)vocab, sizeof *sc->stamp);
        sc->epoch = 0;
        sc->vocab = vocab;
        return sc->stamp ? 0 : -ENOMEM;
}

void sampling_scratch_done(struct sampling_scratch *sc) {
        free(sc->stamp);
        sc->stamp = NULL;
}

/* A fresh mark value; on wrap-around every stamp is cleared once. */
static uint32_t next_epoch(struct sampling_scratch *sc) {
        if (++sc->epoch == 0) {
                memset(sc->stamp, 0, (size_t)sc->vocab * sizeof *sc->stamp);
                sc->epoch = 1;
        }
        return sc->epoch;
}

void sampling_apply_penalties(struct sampling_scratch *sc, const struct penalties *p, const int32_t *tokens,
                              int32_t n_prompt, int32_t n_tokens, float *logits) {
        if (p->repetition != 1.0f) {
                uint32_t e = next_epoch(sc);
                for (int32_t i = 0; i < n_tokens; i++) {
                        int32_t t = tokens[i];
                        if (sc->stamp[t] == e)
                                continue;
                        sc->stamp[t] = e;
                        logits[t] = logits[t] > 0 ? logits[t] / p->repetition : logits[t] * p->repetition;
                }
        }
        if (p->presence != 0.0f || p->frequency != 0.0f) {
                uint32_t e = next_epoch(sc);
                for (int32_t i = n_prompt; i < n_tokens; i++) {
                        int32_t t = tokens[i];
                        logits[t] -= p->frequency;
                        if (sc->stamp[t] != e) {
                                sc->stamp[t] = e;
                                logits[t] -= p->presence;
                        }
                }
        }
}

void sampling_apply_bias(const struct dsv_ipc_logit_bias *bias, size_t n, float *logits) {
        for (size_t i = 0; i < n; i++)
                logits[bias[i].token] = bias[i].bias <= -100.0f ? -INFINITY : logits[bias[i].token] + bias[i].bias;
}

void sampling_apply_mask(const uint64_t *mask, int32_t vocab, float *logits) {
        for (int32_t w = 0; w * 64 < vocab; w++) {
                uint64_t bits = mask[w];
                int32_t end = vocab - w * 64 < 64 ? vocab - w * 64 : 64;
                if (bits == ~0ull && end == 64)
                        continue;
                for (int32_t b = 0; b < end; b++)
                        if (!(bits >> b & 1))
                                logits[w * 64 + b] = -INFINITY;
        }
}

int32_t sampling_mask_single(const uint64_t *mask, int32_t vocab) {
        int32_t found = -1;
        for (int32_t w = 0; w * 64 < vocab; w++) {
                uint64_t bits = mask[w];
                if (!bits)
                        continue;
                if (found >= 0 || (bits & (bits - 1)))
                        return -1;
                found = w * 64 + __builtin_ctzll(bits);
        }
        return found < vocab ? found : -1;
}

float sampling_logprobs(const float *logits, int32_t vocab, int32_t chosen, int n, struct dsv_ipc_logprob *top) {
        float mx = -INFINITY;
        for (int32_t i = 0; i < vocab; i++)
                if (logits[i] > mx)
                        mx = logits[i];
        double sum = 0;
        for (int32_t i = 0; i < vocab; i++)
                sum += exp((double)logits[i] - (double)mx);
        double lse = (double)mx + log(sum);
        /* top-n by insertion: n is at most SAMPLING_MAX_TOP */
        int k = 0;
        for (int32_t i = 0; i < vocab; i++) {
                float v = logits[i];
                if (isnan(v) || (k == n && !(v > top[k - 1].logprob)))
                        continue;
                int j = k < n ? k++ : n - 1;
                while (j > 0 && top[j - 1].logprob < v) {
                        top[j] = top[j - 1];
                        j--;
                }
                top[j] = (struct dsv_ipc_logprob){i, v};
        }
        for (int j = 0; j < k; j++)
                top[j].logprob = (float)((double)top[j].logprob - lse);
        return (float)((double)logits[chosen] - lse);
}
