/* The output's confidence, counted for drift detection: each sampled token's probability
 * under the model's distribution at that step and that distribution's entropy, in the
 * bins of stats_reply's token_prob_hist and entropy_hist (ipc/PROTOCOL.md, minor 5).
 * The supervisor compares the instances' recent counts (supervisor/drift.c).
 *
 * Test hook: DSV_TEST_PERTURB_LOGITS=NAME:SCALE makes the worker of instance NAME
 * multiply every logit the model gives by SCALE (0 < SCALE ≤ 100, not 1) before sampling
 * and counting, so its output drifts from its peers'. Off unless set; only for tests of
 * the drift detection (tests/integration/test-drift.sh). */
#ifndef DSV_WORKER_CONFIDENCE_H
#define DSV_WORKER_CONFIDENCE_H

#include <stdbool.h>
#include <stdint.h>

#include "dsv_ipc.h"

struct confidence {
        int64_t token_prob_hist[DSV_IPC_CONFIDENCE_BINS];
        int64_t entropy_hist[DSV_IPC_CONFIDENCE_BINS];
        int64_t requests; /* the requests the tokens came from */
};

/* Counts token tok, sampled from the model's logits (vocab) times scale (the test hook's;
 * 1 normally): the distribution is their softmax; first: its request's first token. */
void confidence_observe(struct confidence *c, const float *logits, int32_t vocab, float scale, int32_t tok,
                        bool first);

/* The test hook's scale for instance name from spec (DSV_TEST_PERTURB_LOGITS's value,
 * NULL when unset): 1 when it is unset or names another instance, else SCALE. -EINVAL
 * when spec is not NAME:SCALE with SCALE in (0, 100]. */
int confidence_fault_scale(const char *spec, const char *instance, float *ret_scale);

#endif
