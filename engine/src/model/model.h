/* Engine-internal model representation: hyper-parameters and a table of named tensors
 * that view the mapped native file in place. This header is the seam between the file
 * side (safetensors/HF import, native format writer and loader: format.c, hf/) and the
 * math side (arch_*.c, kernels/). Tensor names are the Hugging Face names
 * ("model.layers.3.self_attn.q_proj.weight"); a quantized weight keeps that name for its
 * packed data and carries auxiliary tensors with suffixes (see FORMAT.md):
 *   "<name>.scale"  F32  per-group scales   (Q8/Q4: [rows, ceil(cols/group)];
 *                                            F8_E4M3: [ceil(rows/128), ceil(cols/128)])
 *   "<name>.zero"   U8   Q4 zero points     [rows, ceil(cols/group)]
 *   "<name>.perm"   I32  Q4 input order     [cols] (GPTQ act-order: column j of the
 *                                            stored matrix is input perm[j])
 */
#ifndef DSE_MODEL_H
#define DSE_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "dse.h"

enum dse_dtype {
        DSE_DTYPE_F32,
        DSE_DTYPE_F16,
        DSE_DTYPE_BF16,
        DSE_DTYPE_F8_E4M3, /* FN variant, with 128x128 block scales in "<name>.scale" */
        DSE_DTYPE_Q8,      /* int8 symmetric: W = q * scale[row, col/group] */
        DSE_DTYPE_Q4,      /* int4 + zero: W = (q - zero[row, g]) * scale[row, g]; 16 rows
                              interleaved (the Q4 layout below) */
        DSE_DTYPE_I32,
        DSE_DTYPE_U8,      /* raw bytes: zero points, embedded tokenizer files */
        DSE_DTYPE_COUNT
};

const char *dse_dtype_to_string(enum dse_dtype dtype);

enum dse_arch {
        DSE_ARCH_LLAMA,
        DSE_ARCH_QWEN2,
        DSE_ARCH_DEEPSEEK_V2,
        DSE_ARCH_DEEPSEEK_V3,
        DSE_ARCH_COUNT
};

const char *dse_arch_to_string(enum dse_arch arch); /* the HF model_type string */

enum dse_rope_type {
        DSE_ROPE_DEFAULT,
        DSE_ROPE_LINEAR,
        DSE_ROPE_YARN,
        DSE_ROPE_LLAMA3,
        DSE_ROPE_TYPE_COUNT
};

enum dse_moe_topk {
        DSE_MOE_GREEDY,               /* deepseek_v2 topk_method "greedy" */
        DSE_MOE_GROUP_LIMITED_GREEDY, /* deepseek_v2 "group_limited_greedy" */
        DSE_MOE_NOAUX_TC,             /* deepseek_v3 "noaux_tc" */
        DSE_MOE_TOPK_COUNT
};

enum dse_moe_scoring {
        DSE_MOE_SOFTMAX,
        DSE_MOE_SIGMOID,
        DSE_MOE_SCORING_COUNT
};

struct dse_hparams {
        enum dse_arch arch;
        int32_t n_layers;          /* num_hidden_layers (MTP layers excluded) */
        int32_t hidden_size;
        int32_t intermediate_size; /* dense MLP width */
        int32_t n_heads;
        int32_t n_kv_heads;        /* llama/qwen2 GQA; equals n_heads for MHA */
        int32_t head_dim;          /* llama/qwen2: explicit head_dim or hidden/n_heads */
        int32_t vocab_size;
        int32_t max_position_embeddings;
        float rms_norm_eps;
        float rope_theta;
        int32_t tie_word_embeddings;
        int32_t attention_bias;    /* qwen2: q/k/v biases */

        /* rope_scaling */
        enum dse_rope_type rope_type;
        float rope_factor;
        int32_t rope_original_max_pos; /* original_max_position_embeddings */
        float rope_low_freq_factor;    /* llama3 */
        float rope_high_freq_factor;   /* llama3 */
        float rope_beta_fast;          /* yarn, default 32 */
        float rope_beta_slow;          /* yarn, default 1 */
        float rope_mscale;             /* yarn */
        float rope_mscale_all_dim;     /* yarn */

        /* DeepSeek MLA (0 when absent) */
        int32_t q_lora_rank; /* 0: single q_proj */
        int32_t kv_lora_rank;
        int32_t qk_nope_head_dim;
        int32_t qk_rope_head_dim;
        int32_t v_head_dim;

        /* DeepSeek MoE (n_routed_experts 0: dense model) */
        int32_t n_routed_experts;
        int32_t n_shared_experts;
        int32_t n_experts_per_tok;
        int32_t moe_intermediate_size;
        int32_t first_k_dense_replace;
        int32_t moe_layer_freq;
        int32_t n_group;
        int32_t topk_group;
        enum dse_moe_topk topk_method;
        enum dse_moe_scoring scoring_func;
        int32_t norm_topk_prob;
        float routed_scaling_factor;

        /* special ids from config.json / generation_config.json (-1: none) */
        int32_t bos_token_id;
        int32_t eos_token_id;

        /* DeepSeek-V3 multi-token prediction modules kept after the main layers
         * (num_nextn_predict_layers; 0: none). Module m is layer n_layers + m. */
        int32_t n_mtp_layers;

        /* DeepSeek MLA: kv_b_proj held as llama.cpp's converter splits it (GGUF attn_k_b,
         * attn_v_b), per head W_uk transposed and W_uv, so quantized blocks stay as
         * written: k_b_proj (H * kv_lora_rank, nope), v_b_proj (H * v, kv_lora_rank). */
        int32_t mla_kv_b_split;
};

#define DSE_TENSOR_MAX_DIMS 4
#define DSE_TENSOR_NAME_MAX 128

/* The Q4 layout (FORMAT.md "Q4 layout"): rows in blocks of 16, the last padded with zero
 * rows; columns in blocks of 32, the last padded with zero nibbles. The tile of row block
 * R and column block b (rows 16R.., columns 32b..) is 256 bytes at (R * ceil(cols/32) + b)
 * * 256; its byte 64k + 4L + e (k, e < 4, L < 16) holds W[16R + L, 32b + 8k + e] in the
 * low nibble and W[16R + L, 32b + 8k + 4 + e] in the high one. Why: one 64-byte load is
 * 16 rows x 4 bytes, an int32 lane per row that vpdpbusd sums against 4 broadcast
 * activations, and the 4 loads of a 32-column block add into the same lanes, so a block
 * costs one conversion to float per 16 rows instead of one per row and 64 bytes. A matrix
 * stored row-major paid that per row; its decode was bound by those instructions, not by
 * memory. */
#define DSE_Q4_ROWS 16  /* rows per interleaved block */
#define DSE_Q4_COLS 32  /* columns per tile */
#define DSE_Q4_TILE 256 /* bytes per tile */

/* Bytes of a rows x cols Q4 matrix, padding included. */
static inline uint64_t dse__q4_bytes(int64_t rows, int64_t cols) {
        return (uint64_t)((rows + DSE_Q4_ROWS - 1) / DSE_Q4_ROWS) * (uint64_t)((cols + DSE_Q4_COLS - 1) / DSE_Q4_COLS) *
               DSE_Q4_TILE;
}

/* The byte holding W[r, c] of a matrix with cols columns; the nibble is dse__q4_shift(c). */
static inline int64_t dse__q4_byte(int64_t cols, int64_t r, int64_t c) {
        int64_t nb = (cols + DSE_Q4_COLS - 1) / DSE_Q4_COLS;
        return ((r / DSE_Q4_ROWS) * nb + c / DSE_Q4_COLS) * DSE_Q4_TILE + (c % DSE_Q4_COLS) / 8 * 64 +
               4 * (r % DSE_Q4_ROWS) + (c & 3);
}

static inline int dse__q4_shift(int64_t c) {
        return (c & 4) ? 4 : 0;
}

/* q of W[r, c], 0..15. */
static inline int dse__q4_get(const uint8_t *data, int64_t cols, int64_t r, int64_t c) {
        return (data[dse__q4_byte(cols, r, c)] >> dse__q4_shift(c)) & 0xf;
}

/* Stores q (0..15) as W[r, c]; the other nibble of its byte is kept. */
static inline void dse__q4_put(uint8_t *data, int64_t cols, int64_t r, int64_t c, unsigned q) {
        uint8_t *b = data + dse__q4_byte(cols, r, c);
        int sh = dse__q4_shift(c);
        *b = (uint8_t)((*b & ~(0xf << sh)) | (q & 0xf) << sh);
}

/* A Q4 matrix's scales and zero points (the .scale F32 and .zero U8 tensors) have
 * ceil(cols/group) columns and its rows padded to 16, and are stored 16 rows interleaved
 * as well: the pair (r, g) at element ((r/16) * n_groups + g) * 16 + r%16; the padding
 * rows hold 0. Why: a row block's group is then one 16-lane vector (64 bytes of scales,
 * 16 of zero points), read in file order. Stored row-major, the kernels gathered 16 rows'
 * values or transposed 16 x 16 blocks per row block, a measurable share of a batch-1
 * decode, and read them 16 rows apart.
 * dse__scale_rows: the rows of a Q8 or Q4 matrix's scale (and zero point) tensor, Q4's
 * padded to 16; dse__q4_sidx: the element of row r, group g in a Q4 one. */
static inline int64_t dse__scale_rows(enum dse_dtype dtype, int64_t rows) {
        return dtype == DSE_DTYPE_Q4 ? (rows + DSE_Q4_ROWS - 1) / DSE_Q4_ROWS * DSE_Q4_ROWS : rows;
}

static inline int64_t dse__q4_sidx(int64_t n_groups, int64_t r, int64_t g) {
        return ((r / DSE_Q4_ROWS) * n_groups + g) * DSE_Q4_ROWS + r % DSE_Q4_ROWS;
}

struct dse_tensor {
        char name[DSE_TENSOR_NAME_MAX];
        enum dse_dtype dtype;
        int32_t n_dims;
        int64_t shape[DSE_TENSOR_MAX_DIMS]; /* row-major; weights are [out, in] as in HF */
        int32_t group_size;                 /* Q8/Q4: columns per scale group; else 0 */
        /* shape is logical (elements): a Q4 weight [rows, cols] stores rows * ceil(cols/2)
         * bytes, row r at data + r * ceil(cols/2); size_bytes is the stored size. */
        const void *data;                   /* view into the mapping, >= 64-byte aligned */
        uint64_t size_bytes;
};

/* An opened model: owns the mapping; tensors are read-only views into it. */
struct dse_model;

const struct dse_hparams *dse__model_hparams(const struct dse_model *model);
/* NULL when absent. */
const struct dse_tensor *dse__model_tensor(const struct dse_model *model, const char *name);
size_t dse__model_n_tensors(const struct dse_model *model);
/* What identifies the model's contents: the native header's CRC32C, which covers the
 * hyper-parameters and every tensor's own checksum (the tokenizer files included). */
uint32_t dse__model_header_crc(const struct dse_model *model);
/* CRC32C over the checksums of the embedded tokenizer files; 0 without a tokenizer. */
uint32_t dse__model_tokenizer_crc(const struct dse_model *model);
const struct dse_tensor *dse__model_tensor_at(const struct dse_model *model, size_t i);

/* ---- the tensors an architecture expects (schema.c) ------------------------------ */

enum dse_schema_kind {
        DSE_SCHEMA_EMBED,       /* model.embed_tokens.weight [vocab, hidden] */
        DSE_SCHEMA_NORM,        /* RMSNorm weights [n] */
        DSE_SCHEMA_LINEAR,      /* projection weights [out, in]: quantizable */
        DSE_SCHEMA_BIAS,        /* qwen2 q/k/v biases [out] */
        DSE_SCHEMA_ROUTER,      /* mlp.gate.weight [n_experts, hidden] */
        DSE_SCHEMA_ROUTER_BIAS, /* mlp.gate.e_score_correction_bias [n_experts] */
        DSE_SCHEMA_LM_HEAD,     /* lm_head.weight [vocab, hidden] (absent when tied) */
        DSE_SCHEMA_KIND_COUNT
};

struct dse_schema_entry {
        char name[DSE_TENSOR_NAME_MAX]; /* HF name */
        enum dse_schema_kind kind;
        int32_t n_dims;                 /* 1 or 2 */
        int64_t shape[2];               /* logical [out, in] or [n] */
};

/* Every tensor the architecture of hp expects (layers < n_layers + n_mtp_layers), in a stable
 * order. *ret_entries is malloc'ed; the caller frees it. -EINVAL for an hparams the
 * schema cannot describe (validate it first), -ENOMEM, -E2BIG when it would hold more
 * than max_entries (SIZE_MAX: no bound) — a file with fewer tensors cannot match it, and
 * hyper-parameters within their ranges can still ask for millions of entries. */
int dse__model_schema(const struct dse_hparams *hp, size_t max_entries, struct dse_schema_entry **ret_entries,
                      size_t *ret_n);

/* The first max_entries entries of that list (all of it when shorter), *ret_whole 1 when
 * nothing was left out: a caller can check what it has before saying the rest cannot
 * match. *ret_entries is malloc'ed (NULL when empty); the caller frees it. */
int dse__model_schema_head(const struct dse_hparams *hp, size_t max_entries, struct dse_schema_entry **ret_entries,
                           size_t *ret_n, int *ret_whole);

#endif
