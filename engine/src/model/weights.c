/* Binding a model's tensors as weights (weights.h): lookups by name with shape and
 * auxiliary-tensor checks, norm vectors converted to float32 into the model's arena. */
#include <stdio.h>
#include <string.h>

#include "internal.h"
#include "model/weights.h"

void *dse__weights_alloc(struct dse__weights *w, size_t bytes) {
        return dse__arena_alloc(&w->arena, bytes);
}

static size_t dtype_elem_bytes(enum dse_dtype dt) {
        switch (dt) {
        case DSE_DTYPE_F32:
        case DSE_DTYPE_I32: return 4;
        case DSE_DTYPE_F16:
        case DSE_DTYPE_BF16: return 2;
        default: return 1;
        }
}

/* The auxiliary tensor `<name><suffix>`: must exist with dtype dt and shape [d0, d1]
 * (d1 < 0: 1-D [d0]). */
static int aux_tensor(const struct dse__weights *w, const char *name, const char *suffix, enum dse_dtype dt, int64_t d0,
                      int64_t d1, const void **ret, struct dse_diag *reterr) {
        char full[DSE_TENSOR_NAME_MAX + 16];
        snprintf(full, sizeof full, "%s%s", name, suffix);
        const struct dse_tensor *t = dse__model_tensor(w->model, full);
        if (!t)
                return dse__fail(reterr, -EBADMSG, "tensor '%s' missing", full);
        int ok = t->dtype == dt && (d1 < 0 ? t->n_dims == 1 && t->shape[0] == d0
                                           : t->n_dims == 2 && t->shape[0] == d0 && t->shape[1] == d1);
        uint64_t need = (uint64_t)d0 * (uint64_t)(d1 < 0 ? 1 : d1) * dtype_elem_bytes(dt);
        if (!ok || t->size_bytes < need)
                return dse__fail(reterr, -EBADMSG, "tensor '%s': expected %s [%lld, %lld]", full, dse_dtype_to_string(dt),
                                 (long long)d0, (long long)d1);
        *ret = t->data;
        return 0;
}

int dse__weights_matrix(struct dse__weights *w, const char *name, int64_t rows, int64_t cols, int optional,
                        struct dse_qmat *ret, struct dse_diag *reterr) {
        memset(ret, 0, sizeof *ret);
        const struct dse_tensor *t = dse__model_tensor(w->model, name);
        if (!t)
                return optional ? 0 : dse__fail(reterr, -EBADMSG, "tensor '%s' missing", name);
        if (t->dtype > DSE_DTYPE_Q4) /* the kernels multiply F32 .. Q4 */
                return dse__fail(reterr, -EOPNOTSUPP, "tensor '%s': dtype %d cannot be a weight", name, (int)t->dtype);
        if (t->n_dims != 2 || t->shape[0] != rows || t->shape[1] != cols)
                return dse__fail(reterr, -EBADMSG, "tensor '%s': expected shape [%lld, %lld]", name, (long long)rows,
                                 (long long)cols);
        uint64_t need = t->dtype == DSE_DTYPE_Q4 ? dse__q4_bytes(rows, cols)
                                                 : (uint64_t)rows * (uint64_t)cols * dtype_elem_bytes(t->dtype);
        if (t->size_bytes < need)
                return dse__fail(reterr, -EBADMSG, "tensor '%s': %llu bytes, expected %llu", name,
                                 (unsigned long long)t->size_bytes, (unsigned long long)need);
        struct dse_qmat m = {.dtype = t->dtype, .rows = rows, .cols = cols, .data = t->data};
        int r = 0;
        const void *p;
        switch (t->dtype) {
        case DSE_DTYPE_F8_E4M3:
                m.n_groups = (cols + DSE_F8_BLOCK - 1) / DSE_F8_BLOCK;
                r = aux_tensor(w, name, ".scale", DSE_DTYPE_F32, (rows + DSE_F8_BLOCK - 1) / DSE_F8_BLOCK, m.n_groups,
                               &p, reterr);
                m.scale = p;
                break;
        case DSE_DTYPE_Q8:
        case DSE_DTYPE_Q4:
                if (t->group_size <= 0)
                        return dse__fail(reterr, -EBADMSG, "tensor '%s': group size %d", name, t->group_size);
                m.group_size = t->group_size;
                m.n_groups = (cols + m.group_size - 1) / m.group_size;
                int64_t srows = dse__scale_rows(t->dtype, rows);
                char scale_name[DSE_TENSOR_NAME_MAX + 8];
                snprintf(scale_name, sizeof scale_name, "%s.scale", name);
                const struct dse_tensor *st = dse__model_tensor(w->model, scale_name);
                /* Q4's symmetric form keeps F16 scales and no zero points (kernels.h) */
                int f16 = t->dtype == DSE_DTYPE_Q4 && st && st->dtype == DSE_DTYPE_F16;
                if ((r = aux_tensor(w, name, ".scale", f16 ? DSE_DTYPE_F16 : DSE_DTYPE_F32, srows, m.n_groups, &p,
                                    reterr)) < 0)
                        return r;
                if (f16)
                        m.scale_f16 = p;
                else
                        m.scale = p;
                if (t->dtype == DSE_DTYPE_Q4) {
                        if (!f16 && (r = aux_tensor(w, name, ".zero", DSE_DTYPE_U8, srows, m.n_groups, &p, reterr)) < 0)
                                return r;
                        m.zero = f16 ? NULL : p;
                        char perm_name[DSE_TENSOR_NAME_MAX + 8];
                        snprintf(perm_name, sizeof perm_name, "%s.perm", name);
                        if (dse__model_tensor(w->model, perm_name)) {
                                if ((r = aux_tensor(w, name, ".perm", DSE_DTYPE_I32, cols, -1, &p, reterr)) < 0)
                                        return r;
                                m.perm = p;
                                for (int64_t j = 0; j < cols; j++)
                                        if (m.perm[j] < 0 || m.perm[j] >= cols)
                                                return dse__fail(reterr, -EBADMSG, "tensor '%s': index %d out of range",
                                                                 perm_name, m.perm[j]);
                        }
                }
                break;
        default:
                break;
        }
        if (r < 0)
                return r;
        if (cols > w->max_cols)
                w->max_cols = cols;
        *ret = m;
        return 0;
}

int dse__weights_vector(struct dse__weights *w, const char *name, int64_t n, int optional, float **ret,
                        struct dse_diag *reterr) {
        *ret = NULL;
        const struct dse_tensor *t = dse__model_tensor(w->model, name);
        if (!t)
                return optional ? 0 : dse__fail(reterr, -EBADMSG, "tensor '%s' missing", name);
        if (t->n_dims != 1 || t->shape[0] != n)
                return dse__fail(reterr, -EBADMSG, "tensor '%s': expected shape [%lld]", name, (long long)n);
        if (t->dtype != DSE_DTYPE_F32 && t->dtype != DSE_DTYPE_F16 && t->dtype != DSE_DTYPE_BF16)
                return dse__fail(reterr, -EOPNOTSUPP, "tensor '%s': dtype %d, expected F32, F16 or BF16", name,
                                 (int)t->dtype);
        if (t->size_bytes < (uint64_t)n * dtype_elem_bytes(t->dtype))
                return dse__fail(reterr, -EBADMSG, "tensor '%s': truncated", name);
        float *v = dse__weights_alloc(w, (size_t)n * sizeof(float));
        if (!v)
                return -ENOMEM;
        struct dse_qmat m = {.dtype = t->dtype, .rows = 1, .cols = n, .data = t->data};
        dse__kernels_ref_dequant_row(&m, 0, v); /* exact at every level: the reference serves */
        *ret = v;
        return 0;
}

int dse__weights_layer_matrix(struct dse__weights *w, int l, const char *what, int64_t rows, int64_t cols,
                              struct dse_qmat *ret, struct dse_diag *reterr) {
        char name[DSE_TENSOR_NAME_MAX];
        snprintf(name, sizeof name, "model.layers.%d.%s.weight", l, what);
        return dse__weights_matrix(w, name, rows, cols, 0, ret, reterr);
}

int dse__weights_layer_vector(struct dse__weights *w, int l, const char *what, int64_t n, int optional, float **ret,
                              struct dse_diag *reterr) {
        char name[DSE_TENSOR_NAME_MAX];
        snprintf(name, sizeof name, "model.layers.%d.%s", l, what);
        return dse__weights_vector(w, name, n, optional, ret, reterr);
}

int dse__weights_layer_mlp(struct dse__weights *w, int l, const char *prefix, int64_t width, struct dse__mlp *ret,
                           struct dse_diag *reterr) {
        int64_t D = w->hp->hidden_size;
        char what[96];
        int r;
        snprintf(what, sizeof what, "%s.gate_proj", prefix);
        if ((r = dse__weights_layer_matrix(w, l, what, width, D, &ret->gate, reterr)) < 0)
                return r;
        snprintf(what, sizeof what, "%s.up_proj", prefix);
        if ((r = dse__weights_layer_matrix(w, l, what, width, D, &ret->up, reterr)) < 0)
                return r;
        snprintf(what, sizeof what, "%s.down_proj", prefix);
        return dse__weights_layer_matrix(w, l, what, D, width, &ret->down, reterr);
}
