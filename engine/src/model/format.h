/* File side of the engine's models: the native format's on-disk layout (FORMAT.md),
 * checksums, element conversions, the safetensors reader and the Hugging Face config
 * parser. Internal to libdse; the math side only needs model.h. */
#ifndef DSE_MODEL_FORMAT_H
#define DSE_MODEL_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"

/* ---- native format constants (FORMAT.md) ---------------------------------------- */

#define DSE_FORMAT_MAGIC "DSEMODL\n"
#define DSE_FORMAT_VERSION_MAJOR 3 /* 3: Q4 scales and zeros 16 rows interleaved; 2: Q4 data
                                    * 16 rows interleaved; 1: row-major */
#define DSE_FORMAT_VERSION_MINOR 3 /* 1: n_mtp_layers and the MTP modules' tensors;
                                    * 2: mla_kv_b_split, k_b_proj and v_b_proj;
                                    * 3: Q4 with F16 scales and no zero points (symmetric) */
#define DSE_FORMAT_HEADER_SIZE 256     /* fixed header at offset 0 */
#define DSE_FORMAT_HPARAM_SIZE 48      /* one hyper-parameter record */
#define DSE_FORMAT_ENTRY_SIZE 192      /* one tensor-table entry */
#define DSE_FORMAT_DATA_ALIGN (2u << 20) /* data region start: a 2 MiB boundary */
#define DSE_FORMAT_TENSOR_ALIGN 64u    /* every tensor's offset inside the data region */
#define DSE_FORMAT_QUANT_MAX 16        /* quant_format string field, NUL-padded */

/* Bytes a tensor of this dtype and logical shape occupies (Q4 rows padded to whole
 * bytes). -EOVERFLOW if it does not fit in 63 bits, -EINVAL for a bad dtype or shape. */
int dse__tensor_size_bytes(enum dse_dtype dtype, int32_t n_dims, const int64_t *shape, uint64_t *ret_size);

/* Parses a dtype name as written by dse_dtype_to_string; -EOPNOTSUPP if unknown. */
int dse__dtype_from_string(const char *s, enum dse_dtype *ret);

/* CRC32C (Castagnoli). Start with crc = 0; chain by passing the previous result. The
 * _ref twin is the portable table version; dse__crc32c uses SSE4.2 when present. */
uint32_t dse__crc32c(uint32_t crc, const void *buf, size_t len);
uint32_t dse__crc32c_ref(uint32_t crc, const void *buf, size_t len);

/* Checks hyper-parameters for internal consistency and sane bounds, so that schema
 * shapes cannot overflow. -EBADMSG (from a file) naming the field. */
int dse__hparams_validate(const struct dse_hparams *hp, const char *what, struct dse_diag *reterr);
/* No rope scaling, with the Hugging Face defaults of every scaling parameter (the
 * original context is max_position_embeddings, which must be set first). */
void dse__hparams_rope_defaults(struct dse_hparams *hp);

/* Parses the native header, hyper-parameters and tensor table from the first `size`
 * bytes of a native file (`file_size` is the whole file's size) and checks every offset,
 * size, dtype, name and shape against each other and the hyper-parameters. On success
 * *ret_tensors (malloc'ed, sorted by name, data pointers set relative to `base`, which
 * may be NULL to leave them NULL) and *ret_n are set. `what` names the file in messages.
 * This is the fuzzed entry point of the native reader. */
int dse__native_parse(const uint8_t *buf, size_t size, uint64_t file_size, const char *what,
                      const uint8_t *base, struct dse_hparams *ret_hp, char ret_quant[DSE_FORMAT_QUANT_MAX],
                      struct dse_tensor **ret_tensors, size_t *ret_n, struct dse_diag *reterr);

/* Serialises a complete header + hyper-parameters + table for the given tensors (whose
 * `data` fields are ignored; offsets are taken from `offsets`, crcs from `crcs`) into
 * buf[0..data_offset). Returns the data offset needed (2 MiB aligned) when buf is NULL. */
uint64_t dse__native_header_size(size_t n_tensors);
int dse__native_write_header(uint8_t *buf, uint64_t data_offset, uint64_t data_size,
                             const struct dse_hparams *hp, const char *quant, const struct dse_tensor *tensors,
                             const uint64_t *offsets, const uint32_t *crcs, size_t n);

/* ---- element conversions (exact where the math allows) -------------------------- */

float dse__bf16_to_f32(uint16_t h);
uint16_t dse__f32_to_bf16(float f); /* round to nearest even; NaN stays NaN */
float dse__f16_to_f32(uint16_t h);
float dse__e4m3_to_f32(uint8_t v);  /* FN variant: bias 7, no infinities, S.1111.111 NaN */

/* ---- non-finite values (values.c) ------------------------------------------------ */

struct dse__nonfinite {
        uint64_t n_nan, n_inf;
        uint64_t first; /* element index of the first non-finite value */
};

/* Adds the NaN and Inf values among n elements of a float dtype (other dtypes hold
 * none) to acc; `base` is the element index of data[0] within its tensor. */
void dse__nonfinite_count(enum dse_dtype dtype, const void *data, size_t n, uint64_t base,
                          struct dse__nonfinite *acc);
/* Logs a warning naming the file and tensor when acc counted any. */
void dse__nonfinite_warn(const char *what, const char *tensor, const struct dse__nonfinite *acc);

/* ---- Hugging Face side (hf/) ------------------------------------------------------ */

enum dse__hf_quant_method {
        DSE_HF_QUANT_NONE,
        DSE_HF_QUANT_FP8,
        DSE_HF_QUANT_AWQ,
        DSE_HF_QUANT_GPTQ,
        DSE_HF_QUANT_CT, /* compressed-tensors */
};

/* One config group of a compressed-tensors quantization_config: how the weights of the
 * modules its targets name are stored. */
struct dse__ct_scheme {
        char name[64];      /* the config_groups key, for messages */
        int32_t bits;       /* 4 or 8 */
        int32_t group_size; /* columns per scale; 0: one scale per output row or per tensor */
        int32_t tensor;     /* strategy "tensor": one scale for the whole matrix */
        int32_t sym;        /* no weight_zero_point */
        int32_t packed;     /* pack-quantized: eight 4-bit values per int32 */
        int32_t g_idx;      /* actorder "group": weight_g_idx gives each column's group */
        int32_t act_int8;   /* input activations: dynamic per-token int8 */
        char **targets;     /* class names ("Linear"), module names or "re:" regexes */
        size_t n_targets;
};

struct dse__hf_quant {
        enum dse__hf_quant_method method;
        int32_t bits;
        int32_t group_size;
        int32_t sym;        /* GPTQ */
        int32_t desc_act;   /* GPTQ */
        int32_t block[2];   /* FP8 weight_block_size [out, in] */
        /* compressed-tensors; owned, freed by dse__hf_quant_free */
        struct dse__ct_scheme *ct;
        size_t n_ct;
        char **ct_ignore;
        size_t n_ct_ignore;
};

void dse__hf_quant_free(struct dse__hf_quant *q);

/* The compressed-tensors scheme that covers module `module` (a tensor name without
 * ".weight"; `linear`: it is a Linear layer, the class "Linear" targets): *ret is NULL
 * when no group targets it or `ignore` names it. Names match exactly, "re:" patterns
 * from the start of the name (Python's re.match), as compressed-tensors matches them.
 * -EBADMSG names a pattern that does not compile. */
int dse__ct_scheme_for(const struct dse__hf_quant *q, const char *module, int linear,
                       const struct dse__ct_scheme **ret, struct dse_diag *reterr);

/* Parses config.json (and generation_config.json for missing bos/eos, gen may be NULL)
 * into hparams with Hugging Face defaults, and the quantization_config. -EOPNOTSUPP for
 * an unknown model_type, rope type or quantization method, -EBADMSG for malformed JSON
 * or missing required keys. `what` names the file in messages. */
int dse__hf_parse_config(const char *json, size_t len, const char *gen, size_t gen_len, const char *what,
                         struct dse_hparams *ret_hp, struct dse__hf_quant *ret_quant, struct dse_diag *reterr);

/* AutoGPTQ's quantize_config.json, for checkpoints whose config.json has no
 * quantization_config: the same keys, quant_method defaulting to "gptq". */
int dse__hf_parse_quantize_config(const char *json, size_t len, const char *what, struct dse__hf_quant *ret_quant,
                                  struct dse_diag *reterr);

enum dse__st_dtype {
        DSE_ST_F64,
        DSE_ST_F32,
        DSE_ST_F16,
        DSE_ST_BF16,
        DSE_ST_F8_E4M3,
        DSE_ST_F8_E5M2,
        DSE_ST_I64,
        DSE_ST_I32,
        DSE_ST_I16,
        DSE_ST_I8,
        DSE_ST_U8,
        DSE_ST_BOOL,
        DSE_ST_DTYPE_COUNT
};

const char *dse__st_dtype_to_string(enum dse__st_dtype dtype);
size_t dse__st_dtype_size(enum dse__st_dtype dtype);

struct dse__st_tensor {
        char name[DSE_TENSOR_NAME_MAX];
        enum dse__st_dtype dtype;
        int32_t n_dims; /* 0 for a scalar */
        int64_t shape[DSE_TENSOR_MAX_DIMS];
        uint64_t begin, end; /* data_offsets, relative to the data section */
        int file;            /* index into the shard set */
};

/* Parses one safetensors JSON header (the bytes after the 8-byte length) describing a
 * data section of data_size bytes: every entry's dtype, shape and offsets are checked
 * (sizes match, in range, no overlap). Entries come back sorted by name. This is the
 * fuzzed entry point of the safetensors reader. */
int dse__st_parse_header(const char *json, size_t len, uint64_t data_size, const char *what,
                         struct dse__st_tensor **ret_tensors, size_t *ret_n, struct dse_diag *reterr);

/* The safetensors files of one HF folder: model.safetensors, or the shards named by
 * model.safetensors.index.json. */
struct dse__st_set;

int dse__st_open_dir(const char *dir, struct dse__st_set **ret_set, struct dse_diag *reterr);
void dse__st_close(struct dse__st_set *set);
size_t dse__st_n_tensors(const struct dse__st_set *set);
const struct dse__st_tensor *dse__st_tensor_at(const struct dse__st_set *set, size_t i);
const struct dse__st_tensor *dse__st_find(const struct dse__st_set *set, const char *name);
const char *dse__st_file_path(const struct dse__st_set *set, int file);
/* A tensor set read from another format (GGUF), presented as the Hugging Face tensors
 * it holds: read() fills n bytes at byte offset `off` of tensor t's data in the
 * safetensors layout its dtype and shape give; close() frees ctx. */
struct dse__st_source {
        int (*read)(void *ctx, const struct dse__st_tensor *t, uint64_t off, void *buf, size_t n,
                    struct dse_diag *reterr);
        /* the ggml block type t is stored in (read() gives its values as F32) */
        uint32_t (*ggml_type)(void *ctx, const struct dse__st_tensor *t);
        /* rows [row0, row0 + n_rows) of t as stored: ggml blocks, rows in turn */
        int (*read_blocks)(void *ctx, const struct dse__st_tensor *t, int64_t row0, int64_t n_rows, void *buf,
                           struct dse_diag *reterr);
        void (*close)(void *ctx);
};
/* Takes ownership of tensors (malloc'ed; their file is 0, begin 0, end their size) and
 * ctx (closed on failure too); `path` names the source file in messages. */
int dse__st_set_from_source(const char *path, struct dse__st_tensor *tensors, size_t n,
                            const struct dse__st_source *source, void *ctx, struct dse__st_set **ret_set,
                            struct dse_diag *reterr);
/* The ggml type of a tensor from a GGUF source, -1 for a safetensors tensor; and its
 * rows as stored (dse__st_source.read_blocks). */
int dse__st_ggml_type(const struct dse__st_set *set, const struct dse__st_tensor *t);
int dse__st_read_blocks(const struct dse__st_set *set, const struct dse__st_tensor *t, int64_t row0, int64_t n_rows,
                        void *buf, struct dse_diag *reterr);
/* Reads n bytes at byte offset `off` within tensor t's data. */
int dse__st_read(const struct dse__st_set *set, const struct dse__st_tensor *t, uint64_t off, void *buf,
                 size_t n, struct dse_diag *reterr);

/* ---- quantized-checkpoint repacking (hf/quant.c), all into native Q4 ------------- */

/* AWQ GEMM: qweight I32 [in, out/8], qzeros I32 [in/g, out/8], scales F16 [in/g, out].
 * Writes data (the Q4 layout, dse__q4_bytes(out, in)), scale F32 and zero U8, each
 * dse__scale_rows(DSE_DTYPE_Q4, out) x n_groups in the Q4 order (model.h), padding
 * included. */
int dse__awq_repack(const int32_t *qweight, const int32_t *qzeros, const uint16_t *scales, int64_t in,
                    int64_t out, int32_t group, uint8_t *data, float *scale, uint8_t *zero);

/* GPTQ v1: qweight I32 [in/8, out], qzeros I32 [n_groups, out/8] (stored zero - 1),
 * scales F16 [n_groups, out], g_idx I32 [in]. Computes perm (stored column j is input
 * perm[j], g_idx stably sorted) and writes data/scale/zero in stored order. Returns 1
 * when perm is not the identity, 0 when it is, -EOPNOTSUPP when a group does not have
 * exactly `group` columns (the last may be short) or g_idx is out of range. */
int dse__gptq_repack(const int32_t *qweight, const int32_t *qzeros, const uint16_t *scales,
                     const int32_t *g_idx, int64_t in, int64_t out, int32_t group, uint8_t *data, float *scale,
                     uint8_t *zero, int32_t *perm);

/* Compressed-tensors 4-bit values: q = nibble - 8 (-8..7), column (or, for zero points,
 * row) k in word k/8 at bits 4*(k%8). Unpacks `rows` x `cols` values from words
 * [rows, ceil(cols/8)] into q [rows, cols]. */
void dse__ct_unpack4(const int32_t *packed, int64_t rows, int64_t cols, int8_t *q);

/* Integer weights W[o, i] = (q[o, i] - zp[o, g]) * scale[o, g] (zp NULL: 0; g the group
 * of column i) into native Q4: stored column j holds input column perm[j] (perm NULL:
 * j), whose group is j / group; q and zp must lie in -8..7. Writes data/scale/zero as
 * dse__awq_repack does. */
void dse__int_to_q4(const int8_t *q, const int8_t *zp, const float *scale, const int32_t *perm, int64_t out,
                    int64_t in, int32_t group, uint8_t *data, float *ret_scale, uint8_t *zero);

/* The stored column order of a matrix whose column i belongs to group g_idx[i]: columns
 * stably sorted by group. Returns 1 when perm is not the identity, 0 when it is,
 * -EOPNOTSUPP when a group does not have exactly `group` columns (the last may be short)
 * or g_idx is out of range, -ENOMEM. */
int dse__group_perm(const int32_t *g_idx, int64_t in, int32_t group, int32_t *perm);

/* Group-wise quantisation of float rows (quantize-on-convert). Q8: symmetric,
 * scale = max|x|/127, scale [rows, n_groups]. Q4: asymmetric over [min(x,0), max(x,0)],
 * scale = range/15; scale and zero as dse__awq_repack writes them. */
void dse__quantize_q8_rows(const float *x, int64_t rows, int64_t cols, int32_t group, int8_t *data, float *scale);
void dse__quantize_q4_rows(const float *x, int64_t rows, int64_t cols, int32_t group, uint8_t *data, float *scale,
                           uint8_t *zero);

#endif
