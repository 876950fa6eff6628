/* A model fixture's reference ids (fixtures/models/README.md) and a converted model run
 * on the exact path, shared by the golden-model tests. Include after t.h. */
#ifndef DSV_TESTS_MODEL_REF_H
#define DSV_TESTS_MODEL_REF_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dse.h"

#include "t.h"

/* A flat JSON array of integers. */
static inline int read_ids(const char *path, int32_t *ids, int max) {
        size_t len;
        char *s = slurp(path, &len);
        if (!s)
                return -errno;
        int n = 0;
        for (char *p = s; *p && n < max;) {
                if ((*p >= '0' && *p <= '9') || *p == '-')
                        ids[n++] = (int32_t)strtol(p, &p, 10);
                else
                        p++;
        }
        free(s);
        return n;
}

static inline int argmax(const float *v, int n) {
        int best = 0;
        for (int i = 1; i < n; i++)
                if (v[i] > v[best])
                        best = i;
        return best;
}

/* Converts `src` (a Hugging Face folder or a GGUF file) into `native` and runs the prompt,
 * then the n_decode ids of gen one at a time, on the exact path (scalar kernels, float32
 * activations): (P + n_decode) rows of logits, malloc'ed; NULL with a message on failure. */
static inline float *convert_and_run(const char *src, const char *native, const int32_t *prompt, int P,
                                     const int32_t *gen, int n_decode, int *ret_vocab) {
        struct dse_diag diag = {{0}};
        int r = dse_model_convert_hf(src, native, "auto", &diag);
        if (r < 0) {
                fprintf(stderr, "convert %s: %s (%s)\n", src, strerror(-r), diag.msg);
                return NULL;
        }
        struct dse_model *m = NULL;
        if ((r = dse_model_open(native, 0, &m, &diag)) < 0) {
                fprintf(stderr, "open %s: %s (%s)\n", native, strerror(-r), diag.msg);
                return NULL;
        }
        int V = dse_model_vocab_size(m);
        setenv("DSV_CPU", "scalar", 1);
        struct dse_session *s = NULL;
        float *out = malloc((size_t)(P + n_decode) * V * sizeof *out);
        r = out ? dse_session_new(m, P + n_decode, NULL, &s, &diag) : -ENOMEM;
        if (r == 0)
                r = dse_session_set_activations(s, DSE_ACTIVATIONS_F32);
        if (r == 0)
                r = dse_session_eval(s, prompt, (size_t)P, out, NULL, &diag);
        for (int j = 0; r == 0 && j < n_decode; j++)
                r = dse_session_eval(s, &gen[j], 1, NULL, out + (size_t)(P + j) * V, &diag);
        if (r < 0) {
                fprintf(stderr, "eval %s: %s (%s)\n", src, strerror(-r), diag.msg);
                free(out);
                out = NULL;
        }
        unsetenv("DSV_CPU");
        dse_session_free(s);
        dse_model_free(m);
        *ret_vocab = V;
        return out;
}

#endif
