/* Hugging Face folder -> native file (dse_model_convert_hf), and the model-argument
 * resolver with its conversion cache (dse_model_resolve).
 *
 * The converter plans every output tensor from the safetensors headers first (so the
 * header size and each tensor's offset are known), then streams: one source tensor, or
 * one block of its rows, is read with pread, converted and written with pwrite, then
 * the buffer is reused. Peak memory is a few row blocks plus, for AWQ/GPTQ, one packed
 * tensor — never the model. The output goes to "<out>.tmp.XXXXXX" and is renamed into
 * place only when complete. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../internal.h"
#include "format.h"
#include "gguf/gguf.h"

#define CHUNK_BYTES (16u << 20) /* target size of one streamed row block (source bytes) */
#define QUANT_GROUP 32          /* columns per scale for --quant-format int8/int4 */
#define FP8_BLOCK 128

enum target {
        TARGET_AUTO,
        TARGET_BF16,
        TARGET_INT8,
        TARGET_INT4,
};

enum src_kind {
        SRC_FLOAT, /* F32 / F16 / BF16 */
        SRC_FP8,   /* F8_E4M3 + weight_scale_inv */
        SRC_AWQ,
        SRC_GPTQ,
        SRC_BLOB, /* a tokenizer file */
        SRC_GGML, /* GGUF Q8_0 / Q5_0 / Q4_0 blocks kept as native Q8 / Q4 */
        SRC_CT,   /* compressed-tensors integer weights (qweight: weight or weight_packed) */
};

struct out_tensor {
        struct dse_tensor t; /* data unused */
        uint64_t offset;     /* inside the data region */
        uint64_t written;
        uint32_t crc;
};

struct job {
        char name[DSE_TENSOR_NAME_MAX];
        enum src_kind kind;
        int64_t rows, cols; /* logical; 1-D tensors: rows 1 */
        int n_dims;
        const struct dse__st_tensor *src, *scale_inv, *qweight, *qzeros, *scales, *g_idx;
        enum dse_dtype out_dtype;
        int32_t group;
        uint32_t ggml_type; /* SRC_GGML */
        const struct dse__ct_scheme *ct; /* SRC_CT */
        int out_data, out_scale, out_zero, out_perm; /* out_tensor indices or -1 */
        char blob_path[4096];
        const char *blob_data; /* a tokenizer file made in memory (GGUF), else read from blob_path */
};

struct conv {
        const char *dir;
        struct dse__st_set *st;
        struct dse_hparams hp;
        struct dse__hf_quant quant;
        enum target target;
        struct dse__gguf_tokenizer gguf_tok; /* a GGUF file's tokenizer files */
        struct job *jobs;
        size_t n_jobs;
        struct out_tensor *outs;
        size_t n_outs;
        int fd;
        uint64_t data_off;
        struct dse_diag *reterr;
};

/* ---- planning ---------------------------------------------------------------------- */

static int add_out(struct conv *c, const char *name, const char *suffix, enum dse_dtype dtype, int n_dims, int64_t d0,
                   int64_t d1, int32_t group) {
        struct out_tensor *v = realloc(c->outs, (c->n_outs + 1) * sizeof *v);
        if (!v)
                return -ENOMEM;
        c->outs = v;
        struct out_tensor *o = &v[c->n_outs];
        memset(o, 0, sizeof *o);
        if ((size_t)snprintf(o->t.name, sizeof o->t.name, "%s%s", name, suffix) >= sizeof o->t.name)
                return dse__fail(c->reterr, -ENAMETOOLONG, "tensor name '%s%s' is too long", name, suffix);
        o->t.dtype = dtype;
        o->t.n_dims = n_dims;
        o->t.shape[0] = d0;
        o->t.shape[1] = d1;
        o->t.group_size = group;
        int r = dse__tensor_size_bytes(dtype, n_dims, o->t.shape, &o->t.size_bytes);
        if (r < 0)
                return dse__fail(c->reterr, r, "tensor '%s%s': bad shape", name, suffix);
        return (int)c->n_outs++;
}

static int st_float(enum dse__st_dtype d) {
        return d == DSE_ST_F32 || d == DSE_ST_F16 || d == DSE_ST_BF16;
}

static enum dse_dtype native_float(enum dse__st_dtype d) {
        return d == DSE_ST_F32 ? DSE_DTYPE_F32 : d == DSE_ST_F16 ? DSE_DTYPE_F16 : DSE_DTYPE_BF16;
}

/* Checks a source tensor's dtype and 2-D (or 1-D when d1 < 0) shape. */
static int check_src(struct conv *c, const struct dse__st_tensor *t, enum dse__st_dtype dtype, int64_t d0, int64_t d1,
                     const char *what) {
        int n_dims = d1 < 0 ? 1 : 2;
        if (t->dtype != dtype)
                return dse__fail(c->reterr, -EOPNOTSUPP, "%s: tensor '%s': dtype %s, expected %s for %s",
                                 dse__st_file_path(c->st, t->file), t->name, dse__st_dtype_to_string(t->dtype),
                                 dse__st_dtype_to_string(dtype), what);
        if (t->n_dims != n_dims || t->shape[0] != d0 || (n_dims == 2 && t->shape[1] != d1))
                return dse__fail(c->reterr, -EBADMSG,
                                 "%s: tensor '%s': shape [%lld, %lld] contradicts config.json (expected [%lld, %lld] for %s)",
                                 dse__st_file_path(c->st, t->file), t->name, (long long)t->shape[0],
                                 (long long)(t->n_dims > 1 ? t->shape[1] : 0), (long long)d0, (long long)(d1 < 0 ? 0 : d1),
                                 what);
        return 0;
}

static const struct dse__st_tensor *find_aux(const struct conv *c, const char *base, const char *suffix) {
        char name[DSE_TENSOR_NAME_MAX + 32];
        snprintf(name, sizeof name, "%s%s", base, suffix);
        return dse__st_find(c->st, name);
}

static void mark_used(const struct conv *c, uint8_t *used, const struct dse__st_tensor *t) {
        if (t)
                used[t - dse__st_tensor_at(c->st, 0)] = 1;
}

/* A float dtype and the shape [d0, d1] (1-D [d0] when d1 < 0). */
static int check_float_src(struct conv *c, const struct dse__st_tensor *t, int64_t d0, int64_t d1, const char *what) {
        if (!st_float(t->dtype))
                return dse__fail(c->reterr, -EOPNOTSUPP, "%s: tensor '%s': dtype %s, expected F32, F16 or BF16 for %s",
                                 dse__st_file_path(c->st, t->file), t->name, dse__st_dtype_to_string(t->dtype), what);
        return check_src(c, t, t->dtype, d0, d1, what);
}

/* A per-matrix value (strategy "tensor"): one element, stored as [1] or [1, 1]. */
static int check_single(struct conv *c, const struct dse__st_tensor *t, const char *what) {
        if (t->n_dims == 2 && t->shape[0] == 1 && t->shape[1] == 1)
                return check_src(c, t, t->dtype, 1, 1, what);
        return check_src(c, t, t->dtype, 1, -1, what);
}

/* A compressed-tensors weight: 1 when no config group covers it (a float tensor, planned
 * as usual), 0 when planned as SRC_CT, or an error when the tensors and the config
 * disagree. */
static int plan_ct(struct conv *c, const struct dse_schema_entry *se, const char *base, struct job *j, uint8_t *used) {
        int linear = se->kind == DSE_SCHEMA_LINEAR || se->kind == DSE_SCHEMA_LM_HEAD;
        const struct dse__ct_scheme *s;
        int r = dse__ct_scheme_for(&c->quant, base, linear, &s, c->reterr);
        if (r < 0)
                return r;
        const struct dse__st_tensor *packed = find_aux(c, base, ".weight_packed"), *w = dse__st_find(c->st, se->name);
        const struct dse__st_tensor *stored = packed ? packed : w;
        int is_int = packed || (w && w->dtype == DSE_ST_I8);
        if (!s) {
                if (is_int)
                        return dse__fail(c->reterr, -EBADMSG,
                                         "%s: tensor '%s' is quantized but no compressed-tensors config group targets "
                                         "'%s' (or 'ignore' names it)",
                                         dse__st_file_path(c->st, stored->file), stored->name, base);
                return 1;
        }
        if (!stored)
                return dse__fail(c->reterr, -EBADMSG, "%s: missing tensor '%s' (or '%s.weight_packed')", c->dir, se->name,
                                 base);
        if (!is_int || (packed != NULL) != (s->packed != 0))
                return dse__fail(c->reterr, -EBADMSG,
                                 "%s: tensor '%s' is %s, but compressed-tensors config group %s stores '%s' as %s",
                                 dse__st_file_path(c->st, stored->file), stored->name,
                                 is_int ? (packed ? "pack-quantized" : "int8") : dse__st_dtype_to_string(stored->dtype),
                                 s->name, base, s->packed ? "pack-quantized 'weight_packed'" : "int8 'weight'");
        int64_t rows = se->shape[0], cols = se->shape[1];
        int32_t g = s->group_size ? s->group_size : (int32_t)cols;
        int64_t ng = s->tensor ? 1 : (cols + g - 1) / g;
        j->kind = SRC_CT;
        j->ct = s;
        j->qweight = stored;
        j->scales = find_aux(c, base, ".weight_scale");
        j->qzeros = find_aux(c, base, ".weight_zero_point");
        j->g_idx = find_aux(c, base, ".weight_g_idx");
        const struct dse__st_tensor *shape = find_aux(c, base, ".weight_shape");
        if (packed) {
                if ((r = check_src(c, packed, DSE_ST_I32, rows, (cols + 7) / 8, "weight_packed [out, ceil(in/8)]")) < 0)
                        return r;
        } else if ((r = check_src(c, w, DSE_ST_I8, rows, cols, "int-quantized weight [out, in]")) < 0) {
                return r;
        }
        if (shape) { /* pack-quantized records the unpacked shape */
                int64_t v[2] = {0, 0};
                int32_t v32[2] = {0, 0};
                int i64 = shape->dtype == DSE_ST_I64;
                if ((r = check_src(c, shape, i64 ? DSE_ST_I64 : DSE_ST_I32, 2, -1, "weight_shape [2]")) < 0 ||
                    (r = dse__st_read(c->st, shape, 0, i64 ? (void *)v : (void *)v32, i64 ? 16 : 8, c->reterr)) < 0)
                        return r;
                if (!i64) {
                        v[0] = v32[0];
                        v[1] = v32[1];
                }
                if (v[0] != rows || v[1] != cols)
                        return dse__fail(c->reterr, -EBADMSG,
                                         "%s: tensor '%s' says [%lld, %lld], config.json gives '%s' [%lld, %lld]",
                                         dse__st_file_path(c->st, shape->file), shape->name, (long long)v[0],
                                         (long long)v[1], se->name, (long long)rows, (long long)cols);
        }
        if (!j->scales)
                return dse__fail(c->reterr, -EBADMSG, "%s: missing tensor '%s.weight_scale'", c->dir, base);
        if (s->tensor)
                r = st_float(j->scales->dtype) ? check_single(c, j->scales, "weight_scale (strategy tensor) [1]")
                                               : check_float_src(c, j->scales, 1, -1, "weight_scale");
        else
                r = check_float_src(c, j->scales, rows, ng, s->group_size ? "weight_scale [out, in/group_size]"
                                                                         : "weight_scale (strategy channel) [out, 1]");
        if (r < 0)
                return r;
        if (!s->sym && !j->qzeros)
                return dse__fail(c->reterr, -EBADMSG,
                                 "%s: missing tensor '%s.weight_zero_point' (config group %s is not symmetric)", c->dir,
                                 base, s->name);
        if (j->qzeros) {
                if (s->tensor)
                        r = check_single(c, j->qzeros, "weight_zero_point (strategy tensor) [1]");
                else if (packed)
                        r = check_src(c, j->qzeros, DSE_ST_I32, (rows + 7) / 8, ng, "weight_zero_point [ceil(out/8), groups]");
                else
                        r = check_src(c, j->qzeros, DSE_ST_I8, rows, ng, "weight_zero_point [out, groups]");
                if (r == 0 && s->tensor && j->qzeros->dtype != (packed ? DSE_ST_I32 : DSE_ST_I8))
                        r = check_src(c, j->qzeros, packed ? DSE_ST_I32 : DSE_ST_I8, 1, -1, "weight_zero_point");
                if (r < 0)
                        return r;
        }
        if (s->g_idx && !j->g_idx)
                return dse__fail(c->reterr, -EBADMSG, "%s: missing tensor '%s.weight_g_idx' (config group %s: actorder "
                                 "group)", c->dir, base, s->name);
        if (j->g_idx && (r = check_src(c, j->g_idx, DSE_ST_I32, cols, -1, "weight_g_idx [in]")) < 0)
                return r;
        mark_used(c, used, stored);
        mark_used(c, used, j->scales);
        mark_used(c, used, j->qzeros);
        mark_used(c, used, j->g_idx);
        mark_used(c, used, shape);
        j->group = g;
        return 0;
}

static int plan_weight(struct conv *c, const struct dse_schema_entry *se, struct job *j, uint8_t *used) {
        const struct dse__st_set *st = c->st;
        int64_t rows = se->shape[0], cols = se->n_dims == 2 ? se->shape[1] : se->shape[0];
        j->rows = se->n_dims == 2 ? rows : 1;
        j->cols = cols;
        j->n_dims = se->n_dims;
        snprintf(j->name, sizeof j->name, "%s", se->name);
        j->out_data = j->out_scale = j->out_zero = j->out_perm = -1;
        int r;

        /* "x.weight" may come as "x.qweight" + "x.qzeros" + "x.scales" (+ "x.g_idx") */
        char base[DSE_TENSOR_NAME_MAX];
        snprintf(base, sizeof base, "%s", se->name);
        size_t bl = strlen(base);
        if (bl > 7 && strcmp(base + bl - 7, ".weight") == 0)
                base[bl - 7] = 0;
        if (c->quant.method == DSE_HF_QUANT_CT && se->n_dims == 2 && (r = plan_ct(c, se, base, j, used)) <= 0)
                return r;
        const struct dse__st_tensor *qw = se->n_dims == 2 ? find_aux(c, base, ".qweight") : NULL;
        if (qw) {
                if (c->quant.method != DSE_HF_QUANT_AWQ && c->quant.method != DSE_HF_QUANT_GPTQ)
                        return dse__fail(c->reterr, -EBADMSG,
                                         "%s: tensor '%s' is quantized but config.json has no awq/gptq quantization_config",
                                         dse__st_file_path(st, qw->file), qw->name);
                int32_t g = c->quant.group_size > 0 ? c->quant.group_size : (int32_t)cols;
                int64_t ng = (cols + g - 1) / g;
                j->qweight = qw;
                j->qzeros = find_aux(c, base, ".qzeros");
                j->scales = find_aux(c, base, ".scales");
                j->g_idx = find_aux(c, base, ".g_idx");
                if (!j->qzeros || !j->scales)
                        return dse__fail(c->reterr, -EBADMSG, "%s: missing tensor '%s.qzeros' or '%s.scales'", c->dir,
                                         base, base);
                if (c->quant.method == DSE_HF_QUANT_AWQ) {
                        j->kind = SRC_AWQ;
                        if (rows % 8)
                                return dse__fail(c->reterr, -EOPNOTSUPP, "tensor '%s': AWQ needs out %% 8 == 0", base);
                        if ((r = check_src(c, qw, DSE_ST_I32, cols, rows / 8, "AWQ qweight [in, out/8]")) < 0 ||
                            (r = check_src(c, j->qzeros, DSE_ST_I32, ng, rows / 8, "AWQ qzeros [in/g, out/8]")) < 0 ||
                            (r = check_src(c, j->scales, DSE_ST_F16, ng, rows, "AWQ scales [in/g, out]")) < 0)
                                return r;
                        if (j->g_idx)
                                used[j->g_idx - dse__st_tensor_at(st, 0)] = 1;
                        j->g_idx = NULL;
                } else {
                        j->kind = SRC_GPTQ;
                        if ((r = check_src(c, qw, DSE_ST_I32, (cols + 7) / 8, rows, "GPTQ qweight [in/8, out]")) < 0 ||
                            (r = check_src(c, j->qzeros, DSE_ST_I32, ng, (rows + 7) / 8, "GPTQ qzeros [groups, out/8]")) < 0 ||
                            (r = check_src(c, j->scales, DSE_ST_F16, ng, rows, "GPTQ scales [groups, out]")) < 0 ||
                            (j->g_idx && (r = check_src(c, j->g_idx, DSE_ST_I32, cols, -1, "GPTQ g_idx [in]")) < 0))
                                return r;
                }
                used[qw - dse__st_tensor_at(st, 0)] = 1;
                used[j->qzeros - dse__st_tensor_at(st, 0)] = 1;
                used[j->scales - dse__st_tensor_at(st, 0)] = 1;
                if (j->g_idx)
                        used[j->g_idx - dse__st_tensor_at(st, 0)] = 1;
                j->group = g;
                return 0;
        }
        const struct dse__st_tensor *t = dse__st_find(st, se->name);
        if (!t)
                return dse__fail(c->reterr, -EBADMSG, "%s: missing tensor '%s'", c->dir, se->name);
        used[t - dse__st_tensor_at(st, 0)] = 1;
        j->src = t;
        if (st_float(t->dtype)) {
                int gt = dse__st_ggml_type(st, t);
                j->kind = SRC_FLOAT;
                if (gt >= 0 && dse__ggml_native_dtype((uint32_t)gt) >= 0 && se->n_dims == 2 && c->target == TARGET_AUTO &&
                    se->kind != DSE_SCHEMA_ROUTER) {
                        j->kind = SRC_GGML;
                        j->ggml_type = (uint32_t)gt;
                }
                return check_src(c, t, t->dtype, se->shape[0], se->n_dims == 2 ? se->shape[1] : -1, "config.json");
        }
        if (t->dtype == DSE_ST_F8_E4M3 && se->n_dims == 2) {
                j->kind = SRC_FP8;
                if (c->quant.method != DSE_HF_QUANT_FP8 || c->quant.block[0] != FP8_BLOCK || c->quant.block[1] != FP8_BLOCK)
                        return dse__fail(c->reterr, -EOPNOTSUPP,
                                         "%s: tensor '%s' is F8_E4M3 but config.json has no fp8 quantization_config with "
                                         "weight_block_size [128, 128]",
                                         dse__st_file_path(st, t->file), t->name);
                j->scale_inv = find_aux(c, se->name, "_scale_inv");
                if (!j->scale_inv)
                        return dse__fail(c->reterr, -EBADMSG, "%s: missing tensor '%s_scale_inv'", c->dir, se->name);
                used[j->scale_inv - dse__st_tensor_at(st, 0)] = 1;
                if ((r = check_src(c, t, DSE_ST_F8_E4M3, rows, cols, "config.json")) < 0 ||
                    (r = check_src(c, j->scale_inv, DSE_ST_F32, (rows + FP8_BLOCK - 1) / FP8_BLOCK,
                                   (cols + FP8_BLOCK - 1) / FP8_BLOCK, "FP8 block scales [out/128, in/128]")) < 0)
                        return r;
                return 0;
        }
        return dse__fail(c->reterr, -EOPNOTSUPP, "%s: tensor '%s': dtype %s is not supported here",
                         dse__st_file_path(st, t->file), t->name, dse__st_dtype_to_string(t->dtype));
}

/* Chooses the stored format of a planned weight and adds its output tensors. */
static int plan_outputs(struct conv *c, const struct dse_schema_entry *se, struct job *j) {
        int linear = se->kind == DSE_SCHEMA_LINEAR || se->kind == DSE_SCHEMA_LM_HEAD;
        int matrix = se->n_dims == 2;
        enum dse_dtype d;
        int32_t group = 0;
        int q4_source = j->kind == SRC_AWQ || j->kind == SRC_GPTQ || (j->kind == SRC_CT && j->ct->bits == 4);
        if (!matrix) {
                d = native_float(j->src->dtype); /* norms and biases keep their precision */
        } else if (j->kind == SRC_GGML) {
                d = (enum dse_dtype)dse__ggml_native_dtype(j->ggml_type); /* exact: FORMAT.md "GGUF import" */
                group = 32;
        } else if (!linear) {
                /* embedding and router: kept unless bf16 is asked for */
                d = c->target == TARGET_BF16 || j->kind != SRC_FLOAT ? DSE_DTYPE_BF16 : native_float(j->src->dtype);
        } else if (c->target == TARGET_AUTO && j->kind == SRC_CT) {
                /* exact: FORMAT.md "compressed-tensors import" */
                if (j->ct->bits == 4) {
                        d = DSE_DTYPE_Q4;
                        group = j->group;
                } else if (j->ct->sym && !j->qzeros && !j->g_idx && (j->ct->group_size % QUANT_GROUP) == 0) {
                        d = DSE_DTYPE_Q8;
                        group = QUANT_GROUP;
                } else {
                        d = DSE_DTYPE_F32;
                        dse__log(DSE_LOG_INFO, "%s: '%s' (int8 with %s) kept as F32: native Q8 holds symmetric "
                                 "weights in groups of %d", c->dir, se->name,
                                 j->qzeros ? "zero points" : j->g_idx ? "act-order groups" : "another group size",
                                 QUANT_GROUP);
                }
        } else if (c->target == TARGET_AUTO) {
                d = j->kind == SRC_FLOAT ? native_float(j->src->dtype) : j->kind == SRC_FP8 ? DSE_DTYPE_F8_E4M3 : DSE_DTYPE_Q4;
                group = d == DSE_DTYPE_Q4 ? j->group : 0;
        } else if (c->target == TARGET_BF16) {
                d = DSE_DTYPE_BF16;
        } else if (c->target == TARGET_INT4) {
                d = DSE_DTYPE_Q4;
                group = q4_source ? j->group : QUANT_GROUP;
        } else {
                d = DSE_DTYPE_Q8;
                group = QUANT_GROUP;
        }
        j->out_dtype = d;
        j->group = group;
        int r = add_out(c, se->name, "", d, se->n_dims, se->shape[0], matrix ? se->shape[1] : 0, group);
        if (r < 0)
                return r;
        j->out_data = r;
        int64_t rows = j->rows, cols = j->cols, ng = group ? (cols + group - 1) / group : 0;
        if (d == DSE_DTYPE_F8_E4M3) {
                if ((r = add_out(c, se->name, ".scale", DSE_DTYPE_F32, 2, (rows + FP8_BLOCK - 1) / FP8_BLOCK,
                                 (cols + FP8_BLOCK - 1) / FP8_BLOCK, 0)) < 0)
                        return r;
                j->out_scale = r;
        } else if (d == DSE_DTYPE_Q8 || d == DSE_DTYPE_Q4) {
                int64_t srows = dse__scale_rows(d, rows); /* Q4: padded (model.h) */
                /* GGUF Q4_0 keeps its blocks' fp16 scales and zero point 8: Q4's symmetric
                 * form, 18 bytes per 32 weights as in the GGUF file (FORMAT.md) */
                int sym = d == DSE_DTYPE_Q4 && j->kind == SRC_GGML;
                if ((r = add_out(c, se->name, ".scale", sym ? DSE_DTYPE_F16 : DSE_DTYPE_F32, 2, srows, ng, 0)) < 0)
                        return r;
                j->out_scale = r;
                if (d == DSE_DTYPE_Q4 && !sym) {
                        if ((r = add_out(c, se->name, ".zero", DSE_DTYPE_U8, 2, srows, ng, 0)) < 0)
                                return r;
                        j->out_zero = r;
                }
        }
        return 0;
}

/* GPTQ (and compressed-tensors) act-order needs "<name>.perm" only when g_idx is not sequential: known only after
 * reading g_idx, so it is read (it is small) while planning. */
static int plan_gptq_perm(struct conv *c, struct job *j) {
        if ((j->kind != SRC_GPTQ && j->kind != SRC_CT) || !j->g_idx || j->out_dtype != DSE_DTYPE_Q4)
                return 0;
        int32_t *g = malloc((size_t)j->cols * sizeof *g);
        if (!g)
                return -ENOMEM;
        int r = dse__st_read(c->st, j->g_idx, 0, g, (size_t)j->cols * 4, c->reterr);
        int sequential = 1;
        for (int64_t i = 0; r == 0 && i < j->cols; i++)
                sequential &= g[i] == i / j->group;
        free(g);
        if (r < 0 || sequential)
                return r;
        if ((r = add_out(c, j->name, ".perm", DSE_DTYPE_I32, 1, j->cols, 0, 0)) < 0)
                return r;
        j->out_perm = r;
        return 0;
}

/* A tokenizer file: from the folder, or (data non-NULL) made in memory. */
static int plan_blob(struct conv *c, const char *file, const char *data, size_t data_len) {
        char path[4096];
        if ((size_t)snprintf(path, sizeof path, "%s/%s", c->dir, file) >= sizeof path)
                return -ENAMETOOLONG;
        struct stat st = {.st_size = (off_t)data_len};
        if (!data && stat(path, &st) < 0)
                return 0; /* absent: nothing to embed */
        if (!data && !S_ISREG(st.st_mode))
                return dse__fail(c->reterr, -EINVAL, "'%s' is not a regular file", path);
        if (st.st_size == 0)
                return 0; /* empty: nothing to embed */
        struct job *v = realloc(c->jobs, (c->n_jobs + 1) * sizeof *v);
        if (!v)
                return -ENOMEM;
        c->jobs = v;
        struct job *j = &v[c->n_jobs];
        memset(j, 0, sizeof *j);
        snprintf(j->name, sizeof j->name, "%s", file);
        snprintf(j->blob_path, sizeof j->blob_path, "%s", path);
        j->blob_data = data;
        j->kind = SRC_BLOB;
        j->rows = 1;
        j->cols = st.st_size;
        j->out_scale = j->out_zero = j->out_perm = -1;
        int r = add_out(c, file, "", DSE_DTYPE_U8, 1, st.st_size, 0, 0);
        if (r < 0)
                return r;
        j->out_data = r;
        c->n_jobs++;
        return 0;
}

/* Non-parameter buffers PyTorch modules registered as persistent and older exports
 * saved: rotary frequency and cos/sin caches. They are recomputed from config.json,
 * as transformers does when it drops them from a state dict. */
static int is_module_buffer(const char *name) {
        static const char *const suffixes[] = {"rotary_emb.inv_freq", "rotary_emb.cos_cached",
                                               "rotary_emb.sin_cached"};
        size_t nl = strlen(name);
        for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
                size_t sl = strlen(suffixes[i]);
                if (nl >= sl && strcmp(name + nl - sl, suffixes[i]) == 0 && (nl == sl || name[nl - sl - 1] == '.'))
                        return 1;
        }
        return 0;
}

/* Whether two source tensors hold the same bytes, read CHUNK_BYTES at a time: 1 or 0,
 * or a negative errno. */
static int same_bytes(struct conv *c, const struct dse__st_tensor *a, const struct dse__st_tensor *b) {
        if (a->dtype != b->dtype || a->end - a->begin != b->end - b->begin)
                return 0;
        uint64_t n = a->end - a->begin;
        size_t chunk = n < CHUNK_BYTES ? (size_t)n : CHUNK_BYTES;
        uint8_t *x = malloc(chunk ? chunk : 1), *y = malloc(chunk ? chunk : 1);
        int r = x && y ? 1 : -ENOMEM;
        for (uint64_t off = 0; r == 1 && off < n; off += chunk) {
                size_t k = n - off < chunk ? (size_t)(n - off) : chunk;
                int e;
                if ((e = dse__st_read(c->st, a, off, x, k, c->reterr)) < 0 ||
                    (e = dse__st_read(c->st, b, off, y, k, c->reterr)) < 0)
                        r = e;
                else
                        r = memcmp(x, y, k) == 0;
        }
        free(x);
        free(y);
        return r;
}

/* An MTP module's embed_tokens or shared_head.head: DeepSeek-V3 shares them with the
 * main model (the checkpoint holds copies), so the native file keeps only the main
 * model's. Returns 1 (dropped with a note), 0 (not such a tensor) or a negative errno,
 * -EOPNOTSUPP for a copy that differs. */
static int drop_mtp_copy(struct conv *c, const struct dse__st_tensor *t, int layer) {
        char embed[64], head[64];
        snprintf(embed, sizeof embed, "model.layers.%d.embed_tokens.weight", layer);
        snprintf(head, sizeof head, "model.layers.%d.shared_head.head.weight", layer);
        int is_embed = strcmp(t->name, embed) == 0;
        if (!is_embed && strcmp(t->name, head) != 0)
                return 0;
        const char *main_name = is_embed || c->hp.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
        const struct dse__st_tensor *main_t = dse__st_find(c->st, main_name);
        int same = main_t ? same_bytes(c, t, main_t) : 0;
        if (same < 0)
                return same;
        if (!same)
                return dse__fail(c->reterr, -EOPNOTSUPP,
                                 "%s: tensor '%s' differs from %s: an MTP module with its own %s is not supported "
                                 "(DeepSeek-V3 shares them with the main model)",
                                 dse__st_file_path(c->st, t->file), t->name, main_name,
                                 is_embed ? "embedding" : "output head");
        dse__log(DSE_LOG_INFO, "%s: %s is a copy of %s: the MTP module uses the main model's",
                 dse__st_file_path(c->st, t->file), t->name, main_name);
        return 1;
}

/* Source tensors outside the schema: layers past the MTP modules config.json declares
 * (num_nextn_predict_layers), module buffers and a tied lm_head are skipped with a
 * message, and the MTP modules' copies of the embedding and head are dropped
 * (drop_mtp_copy); anything else is an error, since it means the checkpoint is not the
 * architecture config.json claims. A tied lm_head.weight is dropped because
 * transformers ties it to the embedding after loading (tie_weights), so the embedding
 * is the output head whatever the file holds. */
static int check_leftovers(struct conv *c, const uint8_t *used) {
        size_t n_mtp = 0, n_buffers = 0;
        const char *buffer = NULL;
        for (size_t i = 0; i < dse__st_n_tensors(c->st); i++) {
                if (used[i])
                        continue;
                const struct dse__st_tensor *t = dse__st_tensor_at(c->st, i);
                int layer, r;
                if (c->hp.arch == DSE_ARCH_DEEPSEEK_V3 && sscanf(t->name, "model.layers.%d.", &layer) == 1 &&
                    layer >= c->hp.n_layers + c->hp.n_mtp_layers) {
                        n_mtp++;
                } else if (c->hp.n_mtp_layers > 0 && sscanf(t->name, "model.layers.%d.", &layer) == 1 &&
                           layer >= c->hp.n_layers && (r = drop_mtp_copy(c, t, layer)) != 0) {
                        if (r < 0)
                                return r;
                } else if (is_module_buffer(t->name)) {
                        n_buffers++;
                        buffer = t->name;
                } else if (c->hp.tie_word_embeddings && strcmp(t->name, "lm_head.weight") == 0) {
                        const struct dse__st_tensor *embed = dse__st_find(c->st, "model.embed_tokens.weight");
                        int same = embed ? same_bytes(c, t, embed) : 0;
                        if (same < 0)
                                return same;
                        dse__log(same ? DSE_LOG_INFO : DSE_LOG_WARN,
                                 "%s: lm_head.weight ignored (%s model.embed_tokens.weight): config.json sets "
                                 "tie_word_embeddings, so the output head is the embedding, as transformers ties them",
                                 dse__st_file_path(c->st, t->file), same ? "a copy of" : "it differs from");
                } else {
                        return dse__fail(c->reterr, -EBADMSG,
                                         "%s: unexpected tensor '%s' (not part of %s with this config.json)",
                                         dse__st_file_path(c->st, t->file), t->name, dse_arch_to_string(c->hp.arch));
                }
        }
        if (n_mtp)
                dse__log(DSE_LOG_INFO, "%s: skipping %zu tensors of layers >= num_hidden_layers + "
                         "num_nextn_predict_layers (%d): multi-token prediction modules config.json does not declare",
                         c->dir, n_mtp, c->hp.n_layers + c->hp.n_mtp_layers);
        if (n_buffers)
                dse__log(DSE_LOG_INFO, "%s: skipping %zu non-parameter buffers such as '%s': rotary tables are "
                         "computed from config.json", c->dir, n_buffers, buffer);
        return 0;
}

/* A quantization_config over a checkpoint none of whose weights is quantized: the
 * quantized loaders of transformers would find none of the tensors they expect and
 * leave the layers uninitialised, and a converter guessing which of the two is wrong
 * would guess silently. */
static int check_quant_claim(struct conv *c) {
        const char *method, *expect;
        switch (c->quant.method) {
        case DSE_HF_QUANT_FP8:
                method = "fp8";
                expect = "F8_E4M3 '.weight' with '.weight_scale_inv'";
                break;
        case DSE_HF_QUANT_AWQ:
        case DSE_HF_QUANT_GPTQ:
                method = c->quant.method == DSE_HF_QUANT_AWQ ? "awq" : "gptq";
                expect = "'.qweight'";
                break;
        case DSE_HF_QUANT_CT:
                method = "compressed-tensors";
                expect = "int8 '.weight' or '.weight_packed'";
                break;
        default:
                return 0;
        }
        for (size_t i = 0; i < c->n_jobs; i++)
                if (c->jobs[i].kind == SRC_AWQ || c->jobs[i].kind == SRC_GPTQ || c->jobs[i].kind == SRC_FP8 ||
                    c->jobs[i].kind == SRC_CT)
                        return 0;
        return dse__fail(c->reterr, -EBADMSG,
                         "%s/config.json: quantization_config claims quant_method '%s' but no weight is quantized "
                         "(no %s tensors); remove quantization_config if the checkpoint was dequantized",
                         c->dir, method, expect);
}

/* A checkpoint whose config.json declares MTP modules its files do not hold (exports
 * that drop them): converted without them, so the main model still serves. */
static void check_mtp_present(struct conv *c) {
        char name[64];
        snprintf(name, sizeof name, "model.layers.%d.eh_proj.weight", c->hp.n_layers);
        if (c->hp.n_mtp_layers > 0 && !dse__st_find(c->st, name)) {
                dse__log(DSE_LOG_INFO, "%s: config.json declares %d MTP module%s (num_nextn_predict_layers) but the "
                         "checkpoint holds no '%s': converting without, so --speculative mtp is not available",
                         c->dir, c->hp.n_mtp_layers, c->hp.n_mtp_layers > 1 ? "s" : "", name);
                c->hp.n_mtp_layers = 0;
        }
}

/* The failure of a checkpoint holding fewer tensors (n_source) than its hyper-parameters
 * call for: err with its message (the first tensor found missing) and that reason after
 * it, or -EBADMSG with the reason alone when err is 0. */
static int fail_too_many_tensors(struct conv *c, int err, size_t n_source) {
        const char *source = dse__gguf_is_gguf(c->dir) ? "its metadata" : "config.json";
        if (err == 0)
                return dse__fail(c->reterr, -EBADMSG,
                                 "%s: the hyper-parameters in %s call for more tensors than the %zu the checkpoint holds",
                                 c->dir, source, n_source);
        if (!c->reterr)
                return err;
        char first[sizeof c->reterr->msg];
        memcpy(first, c->reterr->msg, sizeof first);
        first[sizeof first - 1] = '\0';
        return dse__fail(c->reterr, err,
                         "%s; the hyper-parameters in %s call for more tensors than the %zu the checkpoint holds", first,
                         source, n_source);
}

static int plan(struct conv *c) {
        check_mtp_present(c);
        struct dse_schema_entry *schema;
        size_t n_schema, n_source = dse__st_n_tensors(c->st);
        int whole;
        /* every schema entry is read from checkpoint tensors of its own (a GGUF file's
         * stacked experts count once per expert), so when the schema is longer than the
         * checkpoint one of its first n_source + 1 entries is missing: only those are
         * built, as hyper-parameters within their ranges can ask for close to a million */
        int r = dse__model_schema_head(&c->hp, n_source + 1, &schema, &n_schema, &whole);
        if (r < 0)
                return r;
        int too_many = !whole || n_schema > n_source;
        uint8_t *used = calloc(n_source + 1, 1);
        c->jobs = calloc(n_schema + 3, sizeof *c->jobs);
        if (!used || !c->jobs) {
                r = -ENOMEM;
                goto out;
        }
        for (size_t s = 0; s < n_schema; s++) {
                struct job *j = &c->jobs[c->n_jobs];
                if ((r = plan_weight(c, &schema[s], j, used)) < 0 || (r = plan_outputs(c, &schema[s], j)) < 0 ||
                    (r = plan_gptq_perm(c, j)) < 0) {
                        if (too_many)
                                r = fail_too_many_tensors(c, r, n_source);
                        goto out;
                }
                c->n_jobs++;
        }
        if (too_many) {
                r = fail_too_many_tensors(c, 0, n_source);
                goto out;
        }
        if ((r = check_quant_claim(c)) < 0 || (r = check_leftovers(c, used)) < 0)
                goto out;
        static const char *const blobs[] = {"tokenizer.json", "tokenizer_config.json", "tokenizer.model"};
        const struct dse__gguf_tokenizer *gt = &c->gguf_tok;
        const char *data[3] = {gt->json, gt->config, gt->spm};
        size_t len[3] = {gt->json_len, gt->config_len, gt->spm_len};
        int gguf = dse__gguf_is_gguf(c->dir);
        for (size_t i = 0; i < 3; i++)
                if ((!gguf || data[i]) && (r = plan_blob(c, blobs[i], data[i], len[i])) < 0)
                        goto out;
        /* offsets: in plan order, each 64-byte aligned */
        uint64_t off = 0;
        for (size_t i = 0; i < c->n_outs; i++) {
                off = (off + DSE_FORMAT_TENSOR_ALIGN - 1) / DSE_FORMAT_TENSOR_ALIGN * DSE_FORMAT_TENSOR_ALIGN;
                c->outs[i].offset = off;
                off += c->outs[i].t.size_bytes;
        }
        c->data_off = dse__native_header_size(c->n_outs);
out:
        free(used);
        free(schema);
        return r;
}

/* ---- streaming --------------------------------------------------------------------- */

static int out_write(struct conv *c, int idx, const void *buf, size_t n) {
        struct out_tensor *o = &c->outs[idx];
        if (n > o->t.size_bytes - o->written)
                return dse__fail(c->reterr, -EIO, "tensor '%s': converter wrote past its size", o->t.name);
        const uint8_t *p = buf;
        uint64_t pos = c->data_off + o->offset + o->written;
        size_t left = n;
        while (left) {
                ssize_t k = pwrite(c->fd, p, left, (off_t)pos);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return dse__fail(c->reterr, -errno, "writing tensor '%s': %s", o->t.name, strerror(errno));
                }
                p += k;
                pos += (uint64_t)k;
                left -= (size_t)k;
        }
        o->crc = dse__crc32c(o->crc, buf, n);
        o->written += n;
        return 0;
}

static void to_f32(enum dse__st_dtype d, const void *src, float *dst, size_t n) {
        if (d == DSE_ST_F32) {
                memcpy(dst, src, n * 4);
        } else if (d == DSE_ST_F16) {
                const uint16_t *s = src;
                for (size_t i = 0; i < n; i++)
                        dst[i] = dse__f16_to_f32(s[i]);
        } else {
                const uint16_t *s = src;
                for (size_t i = 0; i < n; i++)
                        dst[i] = dse__bf16_to_f32(s[i]);
        }
}

/* Writes rows of float weights in the job's output format. scratch holds at least
 * emit_scratch_bytes(rows, cols). */
static size_t emit_scratch_bytes(int64_t rows, int64_t cols) {
        /* bf16 or q8 data (q4's padded tiles fit in rows rounded up to 16 times cols)
         * plus per-column-or-less scales and zeros (5 bytes each; q4's of padded rows) */
        int64_t padded = dse__scale_rows(DSE_DTYPE_Q4, rows);
        return (size_t)(padded * (cols + DSE_Q4_COLS)) * 2 + 64 + (size_t)(padded * (cols + 1)) * 5;
}

static int emit_f32_rows(struct conv *c, const struct job *j, const float *x, int64_t rows, uint8_t *scratch) {
        int64_t cols = j->cols, n = rows * cols;
        switch (j->out_dtype) {
        case DSE_DTYPE_F32:
                return out_write(c, j->out_data, x, (size_t)n * 4);
        case DSE_DTYPE_BF16: {
                uint16_t *h = (uint16_t *)scratch;
                for (int64_t i = 0; i < n; i++)
                        h[i] = dse__f32_to_bf16(x[i]);
                return out_write(c, j->out_data, h, (size_t)n * 2);
        }
        case DSE_DTYPE_Q8: {
                int64_t ng = (cols + j->group - 1) / j->group;
                int8_t *q = (int8_t *)scratch;
                float *s = (float *)(scratch + ((n + 63) & ~63));
                dse__quantize_q8_rows(x, rows, cols, j->group, q, s);
                int r = out_write(c, j->out_data, q, (size_t)n);
                return r < 0 ? r : out_write(c, j->out_scale, s, (size_t)(rows * ng) * 4);
        }
        case DSE_DTYPE_Q4: { /* rows: whole 16-row blocks but for the matrix's last (block_rows) */
                int64_t ng = (cols + j->group - 1) / j->group, nb = (int64_t)dse__q4_bytes(rows, cols);
                int64_t ns = dse__scale_rows(DSE_DTYPE_Q4, rows) * ng; /* scales of whole 16-row blocks */
                uint8_t *q = scratch;
                float *s = (float *)(scratch + ((nb + 63) & ~63));
                uint8_t *z = (uint8_t *)(s + ns);
                dse__quantize_q4_rows(x, rows, cols, j->group, q, s, z);
                int r = out_write(c, j->out_data, q, (size_t)nb);
                if (r == 0)
                        r = out_write(c, j->out_scale, s, (size_t)ns * 4);
                return r < 0 ? r : out_write(c, j->out_zero, z, (size_t)ns);
        }
        default:
                return dse__fail(c->reterr, -EOPNOTSUPP, "tensor '%s': cannot write %s from floats", j->name,
                                 dse_dtype_to_string(j->out_dtype));
        }
}

/* Rows per streamed block: about CHUNK_BYTES of source, at least one row; FP8 sources
 * use whole 128-row blocks, Q4 output whole 16-row blocks (its rows are interleaved 16 at
 * a time, so a block of 16k rows is a contiguous stretch of the output). */
static int64_t block_rows(const struct job *j, size_t src_esize) {
        int64_t row = j->cols * (int64_t)src_esize;
        int64_t n = row > 0 ? (int64_t)CHUNK_BYTES / row : 1;
        if (n < 1)
                n = 1;
        if (j->kind == SRC_FP8)
                n = n < FP8_BLOCK ? FP8_BLOCK : n / FP8_BLOCK * FP8_BLOCK;
        if (j->out_dtype == DSE_DTYPE_Q4)
                n = n < DSE_Q4_ROWS ? DSE_Q4_ROWS : n / DSE_Q4_ROWS * DSE_Q4_ROWS;
        return n < j->rows ? n : j->rows;
}

static int run_float_or_fp8(struct conv *c, const struct job *j) {
        const struct dse__st_tensor *t = j->src;
        size_t es = dse__st_dtype_size(t->dtype);
        int64_t br = block_rows(j, es), cols = j->cols;
        int r = 0;
        float *sinv = NULL;
        int nbc = (int)((cols + FP8_BLOCK - 1) / FP8_BLOCK);
        if (j->kind == SRC_FP8) {
                size_t n = (size_t)(dse__st_dtype_size(DSE_ST_F32) * ((j->rows + FP8_BLOCK - 1) / FP8_BLOCK) * nbc);
                sinv = malloc(n);
                if (!sinv)
                        return -ENOMEM;
                if ((r = dse__st_read(c->st, j->scale_inv, 0, sinv, n, c->reterr)) < 0)
                        goto out_sinv;
                struct dse__nonfinite bad = {0};
                dse__nonfinite_count(DSE_DTYPE_F32, sinv, n / 4, 0, &bad);
                dse__nonfinite_warn(dse__st_file_path(c->st, j->scale_inv->file), j->scale_inv->name, &bad);
                if (j->out_dtype == DSE_DTYPE_F8_E4M3 && (r = out_write(c, j->out_scale, sinv, n)) < 0)
                        goto out_sinv;
        }
        int copy = (j->kind == SRC_FLOAT && j->out_dtype == native_float(t->dtype)) ||
                   (j->kind == SRC_FP8 && j->out_dtype == DSE_DTYPE_F8_E4M3);
        struct dse__nonfinite bad = {0};
        size_t blk = (size_t)(br * cols);
        uint8_t *src = malloc(blk * es);
        float *f = copy ? NULL : malloc(blk * sizeof *f);
        /* scratch for emit_f32_rows: bf16/q8/q4 data plus scales and zeros */
        uint8_t *scratch = copy ? NULL : malloc(emit_scratch_bytes(br, cols));
        if (!src || (!copy && (!f || !scratch))) {
                r = -ENOMEM;
                goto out;
        }
        for (int64_t r0 = 0; r0 < j->rows && r == 0; r0 += br) {
                int64_t n_rows = j->rows - r0 < br ? j->rows - r0 : br;
                size_t n = (size_t)(n_rows * cols);
                if ((r = dse__st_read(c->st, t, (uint64_t)(r0 * cols) * es, src, n * es, c->reterr)) < 0)
                        break;
                if (copy) {
                        dse__nonfinite_count(j->out_dtype, src, n, (uint64_t)(r0 * cols), &bad);
                        r = out_write(c, j->out_data, src, n * es);
                        continue;
                }
                if (j->kind == SRC_FP8) {
                        for (int64_t rr = 0; rr < n_rows; rr++) {
                                const float *srow = sinv + ((r0 + rr) / FP8_BLOCK) * nbc;
                                for (int64_t cc = 0; cc < cols; cc++)
                                        f[rr * cols + cc] = dse__e4m3_to_f32(src[rr * cols + cc]) * srow[cc / FP8_BLOCK];
                        }
                } else {
                        to_f32(t->dtype, src, f, n);
                }
                dse__nonfinite_count(DSE_DTYPE_F32, f, n, (uint64_t)(r0 * cols), &bad);
                r = emit_f32_rows(c, j, f, n_rows, scratch);
        }
        if (r == 0)
                dse__nonfinite_warn(dse__st_file_path(c->st, t->file), t->name, &bad);
out:
        free(scratch);
        free(f);
        free(src);
out_sinv:
        free(sinv);
        return r;
}

static void *read_whole(struct conv *c, const struct dse__st_tensor *t, int *err) {
        size_t n = t->end - t->begin;
        void *buf = malloc(n ? n : 1);
        if (!buf) {
                *err = -ENOMEM;
                return NULL;
        }
        if ((*err = dse__st_read(c->st, t, 0, buf, n, c->reterr)) < 0) {
                free(buf);
                return NULL;
        }
        return buf;
}

/* A whole Q4 matrix in stored order, and its permutation when the columns were
 * reordered (perm non-NULL), which planning must have foreseen. */
static int write_q4(struct conv *c, const struct job *j, const uint8_t *data, const float *scale,
                    const uint8_t *zero, const int32_t *perm) {
        int64_t out = j->rows, in = j->cols, ng = (in + j->group - 1) / j->group;
        size_t ns = (size_t)(dse__scale_rows(DSE_DTYPE_Q4, out) * ng);
        int r;
        if ((r = out_write(c, j->out_data, data, (size_t)dse__q4_bytes(out, in))) < 0 ||
            (r = out_write(c, j->out_scale, scale, ns * 4)) < 0 || (r = out_write(c, j->out_zero, zero, ns)) < 0)
                return r;
        if (j->out_perm >= 0)
                return perm ? out_write(c, j->out_perm, perm, (size_t)in * 4)
                            : dse__fail(c->reterr, -EIO, "tensor '%s': permutation planned but not made", j->name);
        return perm ? dse__fail(c->reterr, -EIO, "tensor '%s': permutation not planned", j->name) : 0;
}

static int run_int4(struct conv *c, const struct job *j) {
        int64_t out = j->rows, in = j->cols;
        int32_t g = j->group ? j->group : (int32_t)in;
        if (j->out_dtype != DSE_DTYPE_Q4) /* re-target: dequantize below with the checkpoint's own group */
                g = c->quant.group_size > 0 ? c->quant.group_size : (int32_t)in;
        int64_t ng = (in + g - 1) / g, ns = dse__scale_rows(DSE_DTYPE_Q4, out) * ng; /* scales of padded rows (model.h) */
        int r = 0;
        int32_t *qw = read_whole(c, j->qweight, &r), *qz = qw ? read_whole(c, j->qzeros, &r) : NULL;
        uint16_t *sc = qz ? read_whole(c, j->scales, &r) : NULL;
        int32_t *gi = sc && j->g_idx ? read_whole(c, j->g_idx, &r) : NULL;
        uint8_t *data = malloc((size_t)dse__q4_bytes(out, in));
        float *scale = malloc((size_t)ns * sizeof *scale);
        uint8_t *zero = malloc((size_t)ns);
        int32_t *perm = malloc((size_t)in * sizeof *perm);
        float *f = NULL;
        uint8_t *scratch = NULL;
        if (r < 0)
                goto out;
        if (!data || !scale || !zero || !perm) {
                r = -ENOMEM;
                goto out;
        }
        struct dse__nonfinite bad = {0};
        dse__nonfinite_count(DSE_DTYPE_F16, sc, (size_t)(j->scales->end - j->scales->begin) / 2, 0, &bad);
        dse__nonfinite_warn(dse__st_file_path(c->st, j->scales->file), j->scales->name, &bad);
        if (j->kind == SRC_AWQ) {
                r = dse__awq_repack(qw, qz, sc, in, out, g, data, scale, zero);
        } else {
                r = dse__gptq_repack(qw, qz, sc, gi, in, out, g, data, scale, zero, perm);
                if (r == -EOPNOTSUPP)
                        r = dse__fail(c->reterr, r,
                                      "%s: tensor '%s': g_idx does not give every group exactly %d columns; this "
                                      "act-order layout cannot be stored as contiguous groups",
                                      dse__st_file_path(c->st, j->g_idx->file), j->g_idx->name, g);
        }
        if (r < 0)
                goto out;
        int permuted = j->kind == SRC_GPTQ && r == 1;
        r = 0;
        if (j->out_dtype == DSE_DTYPE_Q4) {
                r = write_q4(c, j, data, scale, zero, permuted ? perm : NULL);
                goto out;
        }
        /* another target: exact dequantization to floats in input order, then re-encode */
        f = malloc((size_t)(out * in) * sizeof *f);
        scratch = malloc(emit_scratch_bytes(out, in));
        if (!f || !scratch) {
                r = -ENOMEM;
                goto out;
        }
        for (int64_t o = 0; o < out; o++)
                for (int64_t s = 0; s < in; s++) {
                        int q = dse__q4_get(data, in, o, s);
                        int64_t i = permuted ? perm[s] : s, k = dse__q4_sidx(ng, o, s / g);
                        f[o * in + i] = (float)(q - zero[k]) * scale[k];
                }
        r = emit_f32_rows(c, j, f, out, scratch);
out:
        free(scratch);
        free(f);
        free(perm);
        free(zero);
        free(scale);
        free(data);
        free(gi);
        free(sc);
        free(qz);
        free(qw);
        return r;
}

/* One float per (row, group) from a per-tensor, per-row or per-group source. */
static void ct_spread_scale(enum dse__st_dtype dtype, const void *src, const struct dse__ct_scheme *s, int64_t out,
                            int64_t ng, float *dst) {
        for (int64_t o = 0; o < out; o++)
                for (int64_t g = 0; g < ng; g++) {
                        int64_t k = s->tensor ? 0 : s->group_size ? o * ng + g : o;
                        to_f32(dtype, (const uint8_t *)src + (size_t)k * dse__st_dtype_size(dtype), &dst[o * ng + g], 1);
                }
}

/* Zero points as int8 per (row, group): packed (row o in word o/8, nibble o%8, minus 8)
 * or stored as int8, per tensor, row or group. */
static void ct_spread_zero(const void *src, int packed, const struct dse__ct_scheme *s, int64_t out, int64_t ng,
                           int8_t *dst) {
        int64_t src_ng = s->tensor ? 1 : ng;
        for (int64_t o = 0; o < out; o++)
                for (int64_t g = 0; g < ng; g++) {
                        int64_t og = s->tensor ? 0 : o, gg = s->tensor ? 0 : g;
                        if (packed) {
                                uint32_t w = (uint32_t)((const int32_t *)src)[(og / 8) * src_ng + gg];
                                dst[o * ng + g] = (int8_t)((int)((w >> (4 * (og % 8))) & 0xf) - 8);
                        } else {
                                dst[o * ng + g] = ((const int8_t *)src)[og * src_ng + gg];
                        }
                }
}

static int run_ct(struct conv *c, const struct job *j) {
        const struct dse__ct_scheme *s = j->ct;
        int64_t out = j->rows, in = j->cols;
        int32_t g = s->group_size ? s->group_size : (int32_t)in;
        int64_t ng = (in + g - 1) / g, ns = dse__scale_rows(DSE_DTYPE_Q4, out) * ng;
        int r = 0, permuted = 0;
        void *raw = read_whole(c, j->qweight, &r), *raw_scale = raw ? read_whole(c, j->scales, &r) : NULL;
        void *raw_zero = raw_scale && j->qzeros ? read_whole(c, j->qzeros, &r) : NULL;
        int32_t *gi = raw_scale && j->g_idx ? read_whole(c, j->g_idx, &r) : NULL;
        int8_t *q = malloc((size_t)(out * in)), *zp = j->qzeros ? malloc((size_t)(out * ng)) : NULL;
        float *scale = malloc((size_t)(out * ng) * sizeof *scale), *f = NULL;
        int32_t *perm = gi ? malloc((size_t)in * sizeof *perm) : NULL;
        uint8_t *data = NULL, *zero = NULL, *scratch = NULL;
        float *qscale = NULL;
        if (r < 0)
                goto out;
        if (!q || !scale || (j->qzeros && !zp) || (gi && !perm)) {
                r = -ENOMEM;
                goto out;
        }
        if (s->packed)
                dse__ct_unpack4(raw, out, in, q);
        else
                memcpy(q, raw, (size_t)(out * in));
        ct_spread_scale(j->scales->dtype, raw_scale, s, out, ng, scale);
        struct dse__nonfinite bad = {0};
        dse__nonfinite_count(DSE_DTYPE_F32, scale, (size_t)(out * ng), 0, &bad);
        dse__nonfinite_warn(dse__st_file_path(c->st, j->scales->file), j->scales->name, &bad);
        if (zp)
                ct_spread_zero(raw_zero, s->packed, s, out, ng, zp);
        if (s->bits == 4 && !s->packed) { /* packed nibbles are in range by construction */
                const struct dse__st_tensor *bad_t = NULL;
                for (int64_t k = 0; k < out * in && !bad_t; k++)
                        if (q[k] < -8 || q[k] > 7)
                                bad_t = j->qweight;
                for (int64_t k = 0; zp && k < out * ng && !bad_t; k++)
                        if (zp[k] < -8 || zp[k] > 7)
                                bad_t = j->qzeros;
                if (bad_t) {
                        r = dse__fail(c->reterr, -EBADMSG, "%s: tensor '%s': a value outside -8..7 in a 4-bit config group",
                                      dse__st_file_path(c->st, bad_t->file), bad_t->name);
                        goto out;
                }
        }
        if (gi && (permuted = dse__group_perm(gi, in, g, perm)) < 0) {
                r = permuted == -EOPNOTSUPP
                            ? dse__fail(c->reterr, permuted,
                                        "%s: tensor '%s': weight_g_idx does not give every group exactly %d columns; "
                                        "this act-order layout cannot be stored as contiguous groups",
                                        dse__st_file_path(c->st, j->g_idx->file), j->g_idx->name, g)
                            : permuted;
                goto out;
        }
        if (j->out_dtype == DSE_DTYPE_Q4 && j->group == g) {
                data = malloc((size_t)dse__q4_bytes(out, in));
                qscale = malloc((size_t)ns * sizeof *qscale);
                zero = malloc((size_t)ns);
                if (!data || !qscale || !zero) {
                        r = -ENOMEM;
                        goto out;
                }
                dse__int_to_q4(q, zp, scale, permuted ? perm : NULL, out, in, g, data, qscale, zero);
                r = write_q4(c, j, data, qscale, zero, permuted ? perm : NULL);
                goto out;
        }
        if (j->out_dtype == DSE_DTYPE_Q8 && c->target == TARGET_AUTO && !zp && !gi &&
            (s->group_size == 0 || g % QUANT_GROUP == 0)) {
                int64_t n32 = (in + QUANT_GROUP - 1) / QUANT_GROUP;
                qscale = malloc((size_t)(out * n32) * sizeof *qscale);
                if (!qscale) {
                        r = -ENOMEM;
                        goto out;
                }
                for (int64_t o = 0; o < out; o++)
                        for (int64_t k = 0; k < n32; k++)
                                qscale[o * n32 + k] = scale[o * ng + k * QUANT_GROUP / g];
                if ((r = out_write(c, j->out_data, q, (size_t)(out * in))) == 0)
                        r = out_write(c, j->out_scale, qscale, (size_t)(out * n32) * 4);
                goto out;
        }
        /* another output type: (q - zero) * scale in float32, then re-encoded */
        f = malloc((size_t)(out * in) * sizeof *f);
        scratch = malloc(emit_scratch_bytes(out, in));
        if (!f || !scratch) {
                r = -ENOMEM;
                goto out;
        }
        for (int64_t o = 0; o < out; o++)
                for (int64_t i = 0; i < in; i++) {
                        int64_t k = o * ng + (gi ? gi[i] : i / g);
                        f[o * in + i] = (float)(q[o * in + i] - (zp ? zp[k] : 0)) * scale[k];
                }
        r = emit_f32_rows(c, j, f, out, scratch);
out:
        free(scratch);
        free(f);
        free(zero);
        free(qscale);
        free(data);
        free(perm);
        free(scale);
        free(zp);
        free(q);
        free(gi);
        free(raw_zero);
        free(raw_scale);
        free(raw);
        return r;
}

static int run_blob(struct conv *c, const struct job *j) {
        if (j->blob_data)
                return out_write(c, j->out_data, j->blob_data, (size_t)j->cols);
        int fd = dse__open_input(j->blob_path, c->reterr);
        if (fd < 0)
                return fd;
        size_t n = (size_t)j->cols;
        uint8_t *buf = malloc(n);
        int r = buf ? 0 : -ENOMEM;
        size_t got = 0;
        while (r == 0 && got < n) {
                ssize_t k = read(fd, buf + got, n - got);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        r = dse__fail(c->reterr, k < 0 ? -errno : -EIO, "cannot read '%s'", j->blob_path);
                else
                        got += (size_t)k;
        }
        if (r == 0)
                r = out_write(c, j->out_data, buf, n);
        free(buf);
        close(fd);
        return r;
}

/* GGUF blocks into native Q8 / Q4, a block of rows at a time (whole 16-row blocks for Q4). */
static int run_ggml(struct conv *c, const struct job *j) {
        int64_t cols = j->cols, ng = cols / 32;
        size_t src_row = (size_t)ng * dse__ggml_block_bytes(j->ggml_type);
        int64_t br = block_rows(j, src_row / (size_t)cols ? src_row / (size_t)cols : 1);
        int q4 = j->out_dtype == DSE_DTYPE_Q4;
        int64_t srows = dse__scale_rows(j->out_dtype, br);
        size_t sbytes = q4 ? sizeof(uint16_t) : sizeof(float); /* Q4: the blocks' fp16 scales */
        uint8_t *src = malloc((size_t)br * src_row);
        uint8_t *data = malloc(q4 ? (size_t)dse__q4_bytes(br, cols) : (size_t)(br * cols));
        void *scale = malloc((size_t)(srows * ng) * sbytes);
        int r = src && data && scale ? 0 : -ENOMEM;
        struct dse__nonfinite bad = {0};
        for (int64_t r0 = 0; r == 0 && r0 < j->rows; r0 += br) {
                int64_t n = j->rows - r0 < br ? j->rows - r0 : br, ns = dse__scale_rows(j->out_dtype, n) * ng;
                if ((r = dse__st_read_blocks(c->st, j->src, r0, n, src, c->reterr)) < 0)
                        break;
                if (q4) {
                        memset(data, 0, (size_t)dse__q4_bytes(n, cols));
                        memset(scale, 0, (size_t)ns * sbytes);
                        dse__ggml_to_q4_rows(src, n, cols, data, scale);
                } else {
                        dse__ggml_to_q8_rows(j->ggml_type, src, n, cols, (int8_t *)data, scale);
                }
                dse__nonfinite_count(q4 ? DSE_DTYPE_F16 : DSE_DTYPE_F32, scale, (size_t)ns, (uint64_t)(r0 * ng), &bad);
                if ((r = out_write(c, j->out_data, data, q4 ? (size_t)dse__q4_bytes(n, cols) : (size_t)(n * cols))) < 0 ||
                    (r = out_write(c, j->out_scale, scale, (size_t)ns * sbytes)) < 0)
                        break;
        }
        if (r == 0)
                dse__nonfinite_warn(dse__st_file_path(c->st, j->src->file), j->src->name, &bad);
        free(scale);
        free(data);
        free(src);
        return r;
}

static int run_job(struct conv *c, const struct job *j) {
        switch (j->kind) {
        case SRC_GGML:
                return run_ggml(c, j);
        case SRC_FLOAT:
        case SRC_FP8:
                return run_float_or_fp8(c, j);
        case SRC_AWQ:
        case SRC_GPTQ:
                return run_int4(c, j);
        case SRC_CT:
                return run_ct(c, j);
        case SRC_BLOB:
                return run_blob(c, j);
        }
        return -EINVAL;
}

/* ---- driver ----------------------------------------------------------------------- */

static int read_text(const char *dir, const char *file, int required, char **ret, size_t *ret_len,
                     struct dse_diag *reterr) {
        char path[4096];
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, file) >= sizeof path)
                return -ENAMETOOLONG;
        if (!required && access(path, F_OK) < 0 && errno == ENOENT) {
                *ret = NULL;
                *ret_len = 0;
                return 0;
        }
        int fd = dse__open_input(path, reterr);
        if (fd < 0)
                return fd;
        FILE *f = fdopen(fd, "rb");
        if (!f) {
                close(fd);
                return -ENOMEM;
        }
        char *buf = NULL;
        size_t len = 0, cap = 0;
        int r = 0;
        for (;;) {
                if (len == cap) {
                        cap = cap ? cap * 2 : 4096;
                        char *nb = cap <= (64u << 20) ? realloc(buf, cap + 1) : NULL;
                        if (!nb) {
                                r = cap > (64u << 20) ? dse__fail(reterr, -EFBIG, "'%s' is too large", path) : -ENOMEM;
                                break;
                        }
                        buf = nb;
                }
                size_t k = fread(buf + len, 1, cap - len, f);
                len += k;
                if (k == 0)
                        break;
        }
        if (r == 0 && ferror(f))
                r = dse__fail(reterr, -EIO, "cannot read '%s'", path);
        fclose(f);
        if (r < 0) {
                free(buf);
                return r;
        }
        buf[len] = 0;
        *ret = buf;
        *ret_len = len;
        return 0;
}

static int parse_target(const char *s, const struct dse__hf_quant *q, enum target *ret, struct dse_diag *reterr) {
        if (!s || strcmp(s, "auto") == 0)
                *ret = TARGET_AUTO;
        else if (strcmp(s, "bf16") == 0)
                *ret = TARGET_BF16;
        else if (strcmp(s, "int8") == 0)
                *ret = TARGET_INT8;
        else if (strcmp(s, "int4") == 0)
                *ret = TARGET_INT4;
        else if (strcmp(s, "awq") == 0 || strcmp(s, "gptq") == 0) {
                enum dse__hf_quant_method want = s[0] == 'a' ? DSE_HF_QUANT_AWQ : DSE_HF_QUANT_GPTQ;
                if (q->method != want)
                        return dse__fail(reterr, -EINVAL, "--quant-format %s: the checkpoint is not %s-quantized", s, s);
                *ret = TARGET_AUTO;
        } else
                return dse__fail(reterr, -EINVAL, "unknown quant format '%s' (auto, bf16, int8, int4, awq, gptq)", s);
        return 0;
}

static const char *source_format(const struct conv *c) {
        if (dse__gguf_is_gguf(c->dir))
                return "gguf";
        switch (c->quant.method) {
        case DSE_HF_QUANT_FP8: return "fp8";
        case DSE_HF_QUANT_AWQ: return "awq";
        case DSE_HF_QUANT_GPTQ: return "gptq";
        case DSE_HF_QUANT_CT: return "compressed"; /* compressed-tensors, within the 15-byte label */
        default: return "float";
        }
}

static int write_all(struct conv *c, const char *quant_label) {
        uint64_t data_size = 0;
        for (size_t i = 0; i < c->n_outs; i++)
                if (c->outs[i].offset + c->outs[i].t.size_bytes > data_size)
                        data_size = c->outs[i].offset + c->outs[i].t.size_bytes;
        /* pad the file to a 2 MiB multiple (a hole), so a copy into a hugetlbfs memfd,
         * whose size is always a huge-page multiple, is byte-for-byte the same file */
        data_size = (data_size + DSE_FORMAT_DATA_ALIGN - 1) / DSE_FORMAT_DATA_ALIGN * DSE_FORMAT_DATA_ALIGN;
        if (ftruncate(c->fd, (off_t)(c->data_off + data_size)) < 0)
                return dse__fail(c->reterr, -errno, "cannot size the output: %s", strerror(errno));
        int r;
        for (size_t i = 0; i < c->n_jobs; i++)
                if ((r = run_job(c, &c->jobs[i])) < 0)
                        return r;
        uint64_t *offsets = malloc((c->n_outs + 1) * sizeof *offsets);
        uint32_t *crcs = malloc((c->n_outs + 1) * sizeof *crcs);
        struct dse_tensor *ts = malloc((c->n_outs + 1) * sizeof *ts);
        uint8_t *hdr = malloc(c->data_off);
        r = offsets && crcs && ts && hdr ? 0 : -ENOMEM;
        for (size_t i = 0; r == 0 && i < c->n_outs; i++) {
                if (c->outs[i].written != c->outs[i].t.size_bytes)
                        r = dse__fail(c->reterr, -EIO, "tensor '%s': wrote %llu of %llu bytes", c->outs[i].t.name,
                                      (unsigned long long)c->outs[i].written, (unsigned long long)c->outs[i].t.size_bytes);
                offsets[i] = c->outs[i].offset;
                crcs[i] = c->outs[i].crc;
                ts[i] = c->outs[i].t;
        }
        if (r == 0)
                r = dse__native_write_header(hdr, c->data_off, data_size, &c->hp, quant_label, ts, offsets, crcs,
                                             c->n_outs);
        for (uint64_t done = 0; r == 0 && done < c->data_off;) {
                ssize_t k = pwrite(c->fd, hdr + done, c->data_off - done, (off_t)done);
                if (k < 0 && errno != EINTR)
                        r = dse__fail(c->reterr, -errno, "writing the header: %s", strerror(errno));
                else if (k > 0)
                        done += (uint64_t)k;
        }
        free(hdr);
        free(ts);
        free(crcs);
        free(offsets);
        return r;
}

int dse_model_convert_hf(const char *hf_dir, const char *out_path, const char *quant_format, struct dse_diag *reterr) {
        if (!hf_dir || !out_path)
                return -EINVAL;
        struct conv c = {.dir = hf_dir, .fd = -1, .reterr = reterr};
        char *cfg = NULL, *gen = NULL, *tmp = NULL;
        size_t cfg_len, gen_len;
        char what[4200];
        int r;
        if (dse__gguf_is_gguf(hf_dir)) {
                c.quant.method = DSE_HF_QUANT_NONE;
                r = dse__gguf_import(hf_dir, &c.hp, &c.st, &c.gguf_tok, reterr);
                if (r == 0)
                        r = parse_target(quant_format, &c.quant, &c.target, reterr);
                goto planned_source;
        }
        snprintf(what, sizeof what, "%s/config.json", hf_dir);
        r = read_text(hf_dir, "config.json", 1, &cfg, &cfg_len, reterr);
        if (r == 0)
                r = read_text(hf_dir, "generation_config.json", 0, &gen, &gen_len, reterr);
        if (r == 0)
                r = dse__hf_parse_config(cfg, cfg_len, gen, gen_len, what, &c.hp, &c.quant, reterr);
        if (r == 0 && c.quant.method == DSE_HF_QUANT_NONE) {
                char *qc = NULL;
                size_t qc_len = 0;
                r = read_text(hf_dir, "quantize_config.json", 0, &qc, &qc_len, reterr);
                if (r == 0 && qc) {
                        snprintf(what, sizeof what, "%s/quantize_config.json", hf_dir);
                        r = dse__hf_parse_quantize_config(qc, qc_len, what, &c.quant, reterr);
                }
                free(qc);
        }
        if (r == 0)
                r = parse_target(quant_format, &c.quant, &c.target, reterr);
        if (r == 0)
                r = dse__st_open_dir(hf_dir, &c.st, reterr);
planned_source:
        if (r == 0)
                r = plan(&c);
        if (r < 0)
                goto out;

        size_t tl = strlen(out_path) + 16;
        tmp = malloc(tl);
        if (!tmp) {
                r = -ENOMEM;
                goto out;
        }
        snprintf(tmp, tl, "%s.tmp.XXXXXX", out_path);
        c.fd = mkostemp(tmp, O_CLOEXEC);
        if (c.fd < 0) {
                r = dse__fail(reterr, -errno, "cannot create '%s': %s", tmp, strerror(errno));
                free(tmp);
                tmp = NULL;
                goto out;
        }
        char label[DSE_FORMAT_QUANT_MAX];
        snprintf(label, sizeof label, "%s/%s", quant_format ? quant_format : "auto", source_format(&c));
        if ((r = write_all(&c, label)) < 0)
                goto out;
        if (fchmod(c.fd, 0644) < 0 || fsync(c.fd) < 0) {
                r = dse__fail(reterr, -errno, "cannot finish '%s': %s", tmp, strerror(errno));
                goto out;
        }
        /* The written pages sit in the page cache in the write path's small folios, and a
         * mapping keeps them so: dropped now (clean after the fsync), the first
         * dse_model_open reads the file back in the 2 MiB folios it asks for (format.c). */
        (void)posix_fadvise(c.fd, 0, 0, POSIX_FADV_DONTNEED);
        if (rename(tmp, out_path) < 0) {
                r = dse__fail(reterr, -errno, "cannot rename '%s' to '%s': %s", tmp, out_path, strerror(errno));
                goto out;
        }
        free(tmp);
        tmp = NULL;
out:
        if (c.fd >= 0)
                close(c.fd);
        if (tmp) {
                unlink(tmp);
                free(tmp);
        }
        free(c.outs);
        free(c.jobs);
        dse__hf_quant_free(&c.quant);
        dse__gguf_tokenizer_free(&c.gguf_tok);
        dse__st_close(c.st);
        free(gen);
        free(cfg);
        return r;
}

/* ---- dse_model_resolve --------------------------------------------------------- */

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
        const uint8_t *b = p;
        for (size_t i = 0; i < n; i++) {
                h ^= b[i];
                h *= 0x100000001b3ull;
        }
        return h;
}

static int ends_with(const char *s, const char *suffix) {
        size_t a = strlen(s), b = strlen(suffix);
        return a >= b && strcmp(s + a - b, suffix) == 0;
}

static int key_file(const struct dirent *d) {
        return d->d_name[0] != '.' &&
               (ends_with(d->d_name, ".json") || ends_with(d->d_name, ".safetensors") || ends_with(d->d_name, ".model"));
}

/* The cache key: the folder's (or GGUF file's) absolute path and the name, size and
 * mtime of every file the conversion reads, plus the format version and converter
 * revision. */
static uint64_t cache_key_start(const char *abs) {
        uint64_t h = fnv1a(0xcbf29ce484222325ull, abs, strlen(abs) + 1);
        /* bump CONVERTER_REVISION when the converter's output changes for the same input,
         * so cached files from an older converter are not reused */
        enum { CONVERTER_REVISION = 2 };
        uint32_t version = DSE_FORMAT_VERSION_MAJOR << 24 | DSE_FORMAT_VERSION_MINOR << 16 | CONVERTER_REVISION;
        return fnv1a(h, &version, sizeof version);
}

static uint64_t cache_key_file(uint64_t h, const char *name, const struct stat *st) {
        int64_t v[3] = {st->st_size, st->st_mtim.tv_sec, st->st_mtim.tv_nsec};
        h = fnv1a(h, name, strlen(name) + 1);
        return fnv1a(h, v, sizeof v);
}

static int cache_key(const char *abs, uint64_t *ret, struct dse_diag *reterr) {
        struct dirent **names;
        int n = scandir(abs, &names, key_file, alphasort);
        if (n < 0)
                return dse__fail(reterr, -errno, "cannot list '%s': %s", abs, strerror(errno));
        uint64_t h = cache_key_start(abs);
        int r = 0;
        for (int i = 0; i < n; i++) {
                char path[PATH_MAX + 258]; /* the folder, a slash and a file name */
                struct stat st;
                snprintf(path, sizeof path, "%s/%s", abs, names[i]->d_name);
                if (r == 0 && stat(path, &st) < 0)
                        r = dse__fail(reterr, -errno, "cannot stat '%s': %s", path, strerror(errno));
                if (r == 0)
                        h = cache_key_file(h, names[i]->d_name, &st);
                free(names[i]);
        }
        free(names);
        *ret = h;
        return r;
}

static int mkdir_p(char *path) {
        for (char *p = path + 1; *p; p++) {
                if (*p != '/')
                        continue;
                *p = 0;
                int r = mkdir(path, 0755);
                *p = '/';
                if (r < 0 && errno != EEXIST)
                        return -errno;
        }
        if (mkdir(path, 0755) < 0 && errno != EEXIST)
                return -errno;
        return 0;
}

static int cache_dir(char *buf, size_t size, struct dse_diag *reterr) {
        const char *env = getenv("DSV_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
        int n;
        if (env && *env)
                n = snprintf(buf, size, "%s", env);
        else if (xdg && *xdg)
                n = snprintf(buf, size, "%s/dsvisor", xdg);
        else if (home && *home)
                n = snprintf(buf, size, "%s/.cache/dsvisor", home);
        else
                return dse__fail(reterr, -ENOENT, "no cache folder: set DSV_CACHE_DIR, XDG_CACHE_HOME or HOME");
        if (n < 0 || (size_t)n >= size)
                return -ENAMETOOLONG;
        int r = mkdir_p(buf);
        if (r < 0)
                return dse__fail(reterr, r, "cannot create the cache folder '%s': %s", buf, strerror(-r));
        return 0;
}

/* The converted file of a folder or GGUF file in the cache, converted now if absent. */
static int cached_conversion(const char *abs, uint64_t key, char *ret_path, size_t size, struct dse_diag *reterr) {
        char dir[PATH_MAX], path[PATH_MAX + 64];
        int r = cache_dir(dir, sizeof dir, reterr);
        if (r < 0)
                return r;
        const char *base = strrchr(abs, '/');
        base = base && base[1] ? base + 1 : "model";
        int n = snprintf(path, sizeof path, "%s/%.64s-%016llx.dse", dir, base, (unsigned long long)key);
        if (n < 0 || (size_t)n >= sizeof path || (size_t)n >= size)
                return -ENAMETOOLONG;
        if (access(path, R_OK) != 0 && (r = dse_model_convert_hf(abs, path, "auto", reterr)) < 0)
                return r;
        snprintf(ret_path, size, "%s", path);
        return 0;
}

int dse_model_resolve(const char *arg, char *ret_path, size_t size, struct dse_diag *reterr) {
        if (!arg || !ret_path || !size)
                return -EINVAL;
        struct stat st;
        if (stat(arg, &st) < 0)
                return dse__fail(reterr, -errno, "cannot open '%s': %s", arg, strerror(errno));
        if (S_ISREG(st.st_mode) && dse__gguf_is_gguf(arg)) {
                char abs[PATH_MAX];
                if (!realpath(arg, abs))
                        return dse__fail(reterr, -errno, "cannot resolve '%s': %s", arg, strerror(errno));
                const char *name = strrchr(abs, '/');
                return cached_conversion(abs, cache_key_file(cache_key_start(abs), name ? name + 1 : abs, &st), ret_path,
                                         size, reterr);
        }
        if (S_ISREG(st.st_mode)) {
                char magic[8];
                int fd = open(arg, O_RDONLY | O_CLOEXEC);
                if (fd < 0)
                        return dse__fail(reterr, -errno, "cannot open '%s': %s", arg, strerror(errno));
                ssize_t k = pread(fd, magic, sizeof magic, 0);
                close(fd);
                if (k != (ssize_t)sizeof magic || memcmp(magic, DSE_FORMAT_MAGIC, 8) != 0)
                        return dse__fail(reterr, -EINVAL,
                                         "'%s' is neither a dsvisor model file, a GGUF file nor a Hugging Face folder",
                                         arg);
                if (strlen(arg) >= size)
                        return -ENAMETOOLONG;
                snprintf(ret_path, size, "%s", arg);
                return 0;
        }
        char abs[PATH_MAX], cfg[PATH_MAX + 16];
        if (!S_ISDIR(st.st_mode) || !realpath(arg, abs))
                return dse__fail(reterr, -EINVAL,
                                 "'%s' is neither a dsvisor model file, a GGUF file nor a Hugging Face folder", arg);
        snprintf(cfg, sizeof cfg, "%s/config.json", abs);
        if (access(cfg, R_OK) < 0)
                return dse__fail(reterr, -EINVAL, "'%s' is a folder without config.json: not a Hugging Face model", arg);
        uint64_t key = 0;
        int r = cache_key(abs, &key, reterr);
        return r < 0 ? r : cached_conversion(abs, key, ret_path, size, reterr);
}
