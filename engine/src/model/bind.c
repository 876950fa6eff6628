/* Binding a model's weights when it is opened (weights.h): the architecture's forward
 * pass is chosen here, once, and its bind op builds the per-layer views the model keeps
 * for all its sessions. */
#include <stdlib.h>

#include "internal.h"
#include "model/forward.h"

static const struct dse__arch_ops *arch_ops(enum dse_arch arch) {
        switch (arch) {
        case DSE_ARCH_LLAMA:
        case DSE_ARCH_QWEN2: return &dse__arch_llama;
        case DSE_ARCH_DEEPSEEK_V2:
        case DSE_ARCH_DEEPSEEK_V3: return &dse__arch_deepseek;
        default: return NULL;
        }
}

int dse__weights_bind(const struct dse_model *model, struct dse__weights **ret, struct dse_diag *reterr) {
        struct dse__weights *w = calloc(1, sizeof *w);
        if (!w)
                return dse__fail(reterr, -ENOMEM, "out of memory binding the model's weights");
        w->model = model;
        w->hp = dse__model_hparams(model);
        w->ops = arch_ops(w->hp->arch);
        if (!w->ops)
                w->err = dse__fail(&w->diag, -EOPNOTSUPP, "architecture %d has no forward pass", (int)w->hp->arch);
        else
                w->err = w->ops->bind(w, &w->diag);
        if (w->err == -ENOMEM) {
                dse__weights_free(w);
                return dse__fail(reterr, -ENOMEM, "out of memory binding the model's weights");
        }
        if (w->err < 0) { /* what was bound is of no use to anyone */
                dse__arena_free(&w->arena);
                w->arch = NULL;
        }
        *ret = w;
        return 0;
}

void dse__weights_free(struct dse__weights *w) {
        if (!w)
                return;
        dse__arena_free(&w->arena);
        free(w);
}
