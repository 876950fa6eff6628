/* Shared between proto.c (cJSON encoding and decoding) and event.c (the fixed-buffer
 * event encoder). */
#ifndef DSV_IPC_PROTO_INTERNAL_H
#define DSV_IPC_PROTO_INTERNAL_H

#include <math.h>

#define DSV__IPC_STR_(x) #x
#define DSV__IPC_STR(x) DSV__IPC_STR_(x)

#define DSV__IPC_MAX_TOP_LOGPROBS 20
#define DSV__IPC_MAX_STOP_STRINGS 16
/* Entries of a request's logit_bias; bytes of one token in top_logprobs. */
#define DSV__IPC_MAX_LOGIT_BIAS 4096
#define DSV__IPC_MAX_TOKEN_BYTES 4096
#define DSV__IPC_MAX_CHOICES 4096

/* Log-probabilities go out inside the range the decoder accepts, [-1e30, 0]: rounding
 * can give +1e-8 for a near-certain token, and a token the model rules out has -inf
 * (JSON has no infinity; cJSON would print null, which no peer accepts). */
static inline double dsv__ipc_logprob_clamp(float x) {
        if (isnan(x) || x < -1e30f)
                return -1e30;
        return x > 0.0f ? 0.0 : (double)x;
}

#endif
