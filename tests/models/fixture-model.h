/* Opening a fixture model by folder name for the model tests (converted once into
 * $DSV_BUILD_DIR/model-cache unless DSV_CACHE_DIR says otherwise). */
#ifndef DSV_TESTS_FIXTURE_MODEL_H
#define DSV_TESTS_FIXTURE_MODEL_H

#include <stdio.h>
#include <stdlib.h>

#include "dse.h"
#include "t.h"

static inline struct dse_model *open_fixture(const char *name, struct dse_diag *diag) {
        char dir[1024], native[4096];
        snprintf(dir, sizeof dir, "%s/%s", t_fixture("models"), name);
        if (!getenv("DSV_CACHE_DIR") && getenv("DSV_BUILD_DIR")) {
                char cache[1100];
                snprintf(cache, sizeof cache, "%s/model-cache", getenv("DSV_BUILD_DIR"));
                setenv("DSV_CACHE_DIR", cache, 1);
        }
        struct dse_model *m = NULL;
        if (dse_model_resolve(dir, native, sizeof native, diag) < 0 || dse_model_open(native, 0, &m, diag) < 0)
                return NULL;
        return m;
}

#endif
