/* Reading a model fixture's reference ids (fixtures/models/README.md), shared by the
 * golden-model tests. Include after t.h. */
#ifndef DSV_TESTS_MODEL_REF_H
#define DSV_TESTS_MODEL_REF_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

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

#endif
