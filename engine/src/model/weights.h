/* A model's tensors bound as the forward pass's weights, once per model, when it is
 * opened (format.c calls dse__weights_bind). The architecture's bind op looks every
 * layer's tensors up by name, checks their shapes, and keeps the results (weight views
 * into the mapping, norm vectors converted to float32) in the model's dse__weights;
 * every session over the model reads them from there. After binding they are
 * read-only, so any number of sessions on any threads may share them.
 *
 * A model whose tensors do not bind still opens (the file tools and the tokenizer need
 * no forward pass); the failure is kept in err/diag and a session on the model returns
 * it. */
#ifndef DSE_WEIGHTS_H
#define DSE_WEIGHTS_H

#include "arena.h"
#include "kernels/kernels.h"
#include "model/model.h"

struct dse__arch_ops;

struct dse__weights {
        const struct dse_model *model;
        const struct dse_hparams *hp;
        const struct dse__arch_ops *ops; /* the architecture's forward pass */
        void *arch;                      /* its layer bindings, set by ops->bind */
        int64_t max_cols;                /* widest weight bound */
        int err;                         /* 0, or why binding failed ... */
        struct dse_diag diag;            /* ... in words */
        struct dse__arena arena;         /* arch, and the float32 vectors */
};

/* A SwiGLU MLP: down(silu(gate x) * up x). */
struct dse__mlp {
        struct dse_qmat gate; /* (width, hidden) */
        struct dse_qmat up;   /* (width, hidden) */
        struct dse_qmat down; /* (hidden, width) */
};

/* Binds model's weights into a new *ret (the model owns it). Only allocation failure
 * (-ENOMEM) is returned; a model that does not bind gets a *ret with err set. */
int dse__weights_bind(const struct dse_model *model, struct dse__weights **ret, struct dse_diag *reterr);
void dse__weights_free(struct dse__weights *w);

/* The weights bound when model was opened (format.c). */
const struct dse__weights *dse__model_weights(const struct dse_model *model);

/* Zeroed, 64-byte aligned memory that lives as long as the model; NULL on ENOMEM. */
void *dse__weights_alloc(struct dse__weights *w, size_t bytes);

/* Looks up weight `name`, checks its logical shape is [rows, cols] and its auxiliary
 * tensors ("<name>.scale", ".zero", ".perm") against its dtype, and fills *ret.
 * optional: a missing tensor leaves ret->data NULL and returns 0. */
int dse__weights_matrix(struct dse__weights *w, const char *name, int64_t rows, int64_t cols, int optional,
                        struct dse_qmat *ret, struct dse_diag *reterr);

/* A 1-D tensor (norm weight, bias, router bias) of n elements in F32/F16/BF16, converted
 * to float32. optional: a missing tensor gives *ret = NULL. */
int dse__weights_vector(struct dse__weights *w, const char *name, int64_t n, int optional, float **ret,
                        struct dse_diag *reterr);

/* The same for layer l's tensors: "model.layers.<l>.<what>.weight" as a matrix,
 * "model.layers.<l>.<what>" as a vector. */
int dse__weights_layer_matrix(struct dse__weights *w, int l, const char *what, int64_t rows, int64_t cols,
                              struct dse_qmat *ret, struct dse_diag *reterr);
int dse__weights_layer_vector(struct dse__weights *w, int l, const char *what, int64_t n, int optional, float **ret,
                              struct dse_diag *reterr);

/* Layer l's SwiGLU MLP "<prefix>.gate_proj", ".up_proj", ".down_proj", width wide. */
int dse__weights_layer_mlp(struct dse__weights *w, int l, const char *prefix, int64_t width, struct dse__mlp *ret,
                           struct dse_diag *reterr);

#endif
