/* The model fixtures (shared/fixtures/models) by name, and the bundled default model,
 * opened through the model cache of the build ($DSV_BUILD_DIR/model-cache unless
 * DSV_CACHE_DIR is set). Include after t.h. */
#ifndef DSV_TEST_FIXTURE_MODELS_H
#define DSV_TEST_FIXTURE_MODELS_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "dse.h"

/* Every fixture, each architecture, weight format and cache path. */
static const char *const fixture_models[] = {
        "deepseek-v2-mla-qlora-yarn", "deepseek-v2-lite-sharded", "deepseek-v2-group-limited",
        "deepseek-v3-noaux-yarn",     "deepseek-v3-fp8-mtp",      "llama-bf16-linear-rope",
        "llama3-rope-gqa",            "qwen2-bf16-tied",          "qwen2-awq-g32",
        "llama-gptq-sym",             "llama-gptq-actorder-asym",
};
#define N_FIXTURE_MODELS (sizeof fixture_models / sizeof fixture_models[0])

/* A model folder through the build's model cache; NULL (and a message) on failure. */
static inline struct dse_model *model_dir_open(const char *dir) {
        char native[4096];
        if (!getenv("DSV_CACHE_DIR") && getenv("DSV_BUILD_DIR")) {
                char cache[1100];
                snprintf(cache, sizeof cache, "%s/model-cache", getenv("DSV_BUILD_DIR"));
                setenv("DSV_CACHE_DIR", cache, 1);
        }
        struct dse_diag diag = {{0}};
        struct dse_model *m = NULL;
        if (dse_model_resolve(dir, native, sizeof native, &diag) < 0 || dse_model_open(native, 0, &m, &diag) < 0) {
                fprintf(stderr, "  %s: %s\n", dir, diag.msg);
                return NULL;
        }
        return m;
}

/* The model folder dir converted to quant ("bf16", "int8", "int4") in a temporary
 * directory under $DSV_BUILD_DIR (else /tmp), removed once the model is open. Returns 0
 * or a negative errno, diag saying why. */
static inline int model_dir_convert(const char *dir, const char *quant, struct dse_model **ret_m,
                                    struct dse_diag *diag) {
        char tmp[1024], native[1200];
        snprintf(tmp, sizeof tmp, "%s/fixture-convert.XXXXXX",
                 getenv("DSV_BUILD_DIR") ? getenv("DSV_BUILD_DIR") : "/tmp");
        if (!mkdtemp(tmp))
                return -errno;
        snprintf(native, sizeof native, "%s/model-%s.dse", tmp, quant);
        *ret_m = NULL;
        int r = dse_model_convert_hf(dir, native, quant, diag);
        if (r >= 0)
                r = dse_model_open(native, 0, ret_m, diag);
        unlink(native);
        rmdir(tmp);
        return r;
}

/* The fixture converted to quant (model_dir_convert). */
static inline int fixture_model_convert(const char *name, const char *quant, struct dse_model **ret_m,
                                        struct dse_diag *diag) {
        char dir[1024];
        snprintf(dir, sizeof dir, "%s/%s", t_fixture("models"), name);
        return model_dir_convert(dir, quant, ret_m, diag);
}

static inline struct dse_model *fixture_model_open(const char *name) {
        char dir[1024];
        snprintf(dir, sizeof dir, "%s/%s", t_fixture("models"), name);
        return model_dir_open(dir);
}

/* The bundled default model (models/default: deepseek_v3 with one MTP module). */
static inline struct dse_model *default_model_open(void) {
        char dir[1024];
        snprintf(dir, sizeof dir, "%s/models/default", getenv("DSV_SOURCE_DIR") ? getenv("DSV_SOURCE_DIR") : "..");
        return model_dir_open(dir);
}

/* The bundled default model converted to quant (model_dir_convert); NULL (and a
 * message) on failure. */
static inline struct dse_model *default_model_convert(const char *quant) {
        char dir[1024];
        snprintf(dir, sizeof dir, "%s/models/default", getenv("DSV_SOURCE_DIR") ? getenv("DSV_SOURCE_DIR") : "..");
        struct dse_diag diag = {{0}};
        struct dse_model *m = NULL;
        if (model_dir_convert(dir, quant, &m, &diag) < 0)
                fprintf(stderr, "  models/default as %s: %s\n", quant, diag.msg);
        return m;
}

#endif
