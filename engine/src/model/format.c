/* The native model format (engine/FORMAT.md): header and table (de)serialisation, the
 * validating mmap loader, per-tensor CRC32C verification and the model accessors of
 * model.h. Loading parses only the header and table; tensors are views into the
 * mapping, used in place. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../internal.h"
#include "format.h"
#include "weights.h"

_Static_assert(sizeof(enum dse_arch) == 4 && sizeof(enum dse_rope_type) == 4 && sizeof(enum dse_moe_topk) == 4 &&
                       sizeof(enum dse_moe_scoring) == 4,
               "enum hyper-parameters are stored as 32-bit integers");

/* ---- names ------------------------------------------------------------------------ */

static const char *const dtype_names[DSE_DTYPE_COUNT] = {
        [DSE_DTYPE_F32] = "F32", [DSE_DTYPE_F16] = "F16", [DSE_DTYPE_BF16] = "BF16", [DSE_DTYPE_F8_E4M3] = "F8_E4M3",
        [DSE_DTYPE_Q8] = "Q8",   [DSE_DTYPE_Q4] = "Q4",   [DSE_DTYPE_I32] = "I32",   [DSE_DTYPE_U8] = "U8",
};

const char *dse_dtype_to_string(enum dse_dtype dtype) {
        return dtype >= 0 && dtype < DSE_DTYPE_COUNT ? dtype_names[dtype] : "unknown";
}

int dse__dtype_from_string(const char *s, enum dse_dtype *ret) {
        for (int d = 0; d < DSE_DTYPE_COUNT; d++)
                if (strcmp(s, dtype_names[d]) == 0) {
                        *ret = d;
                        return 0;
                }
        return -EOPNOTSUPP;
}

static const char *const arch_names[DSE_ARCH_COUNT] = {
        [DSE_ARCH_LLAMA] = "llama",
        [DSE_ARCH_QWEN2] = "qwen2",
        [DSE_ARCH_DEEPSEEK_V2] = "deepseek_v2",
        [DSE_ARCH_DEEPSEEK_V3] = "deepseek_v3",
};

const char *dse_arch_to_string(enum dse_arch arch) {
        return arch >= 0 && arch < DSE_ARCH_COUNT ? arch_names[arch] : "unknown";
}

/* ---- element conversions ---------------------------------------------------------- */

float dse__bf16_to_f32(uint16_t h) {
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
}

uint16_t dse__f32_to_bf16(float f) {
        uint32_t u;
        memcpy(&u, &f, 4);
        if ((u & 0x7fffffffu) > 0x7f800000u)
                return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
        u += 0x7fffu + ((u >> 16) & 1);
        return (uint16_t)(u >> 16);
}

float dse__f16_to_f32(uint16_t h) {
        uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, u;
        if (exp == 0x1f) {
                u = sign | 0x7f800000u | mant << 13;
        } else if (exp) {
                u = sign | (exp + 112) << 23 | mant << 13;
        } else if (mant) { /* subnormal: normalise */
                int e = -1;
                do {
                        e++;
                        mant <<= 1;
                } while (!(mant & 0x400));
                u = sign | (uint32_t)(112 - e) << 23 | (mant & 0x3ff) << 13;
        } else {
                u = sign;
        }
        float f;
        memcpy(&f, &u, 4);
        return f;
}

float dse__e4m3_to_f32(uint8_t v) {
        int exp = (v >> 3) & 0xf, mant = v & 7;
        float sign = v & 0x80 ? -1.0f : 1.0f;
        if (exp == 0xf && mant == 7)
                return __builtin_nanf("");
        if (exp == 0)
                return sign * ldexpf((float)mant, -9); /* subnormal: mant/8 * 2^-6 */
        return sign * ldexpf(1.0f + (float)mant / 8.0f, exp - 7);
}

/* ---- sizes ------------------------------------------------------------------------ */

int dse__tensor_size_bytes(enum dse_dtype dtype, int32_t n_dims, const int64_t *shape, uint64_t *ret_size) {
        static const uint8_t esize[DSE_DTYPE_COUNT] = {
                [DSE_DTYPE_F32] = 4, [DSE_DTYPE_F16] = 2, [DSE_DTYPE_BF16] = 2, [DSE_DTYPE_F8_E4M3] = 1,
                [DSE_DTYPE_Q8] = 1,  [DSE_DTYPE_Q4] = 1,  [DSE_DTYPE_I32] = 4,  [DSE_DTYPE_U8] = 1,
        };
        if (dtype < 0 || dtype >= DSE_DTYPE_COUNT || n_dims < 1 || n_dims > DSE_TENSOR_MAX_DIMS)
                return -EINVAL;
        uint64_t n = 1;
        for (int i = 0; i < n_dims; i++) {
                if (shape[i] <= 0)
                        return -EINVAL;
                uint64_t d = (uint64_t)shape[i];
                /* Q4: the last two dimensions are one matrix in the Q4 layout (model.h),
                 * rows padded to 16 and columns to 32 (a vector is one row); its size
                 * stands for both */
                if (dtype == DSE_DTYPE_Q4 && i == n_dims - 2) {
                        d = 1;
                } else if (dtype == DSE_DTYPE_Q4) {
                        uint64_t row_blocks = n_dims > 1 ? ((uint64_t)shape[i - 1] + DSE_Q4_ROWS - 1) / DSE_Q4_ROWS : 1;
                        uint64_t col_blocks = (d + DSE_Q4_COLS - 1) / DSE_Q4_COLS;
                        if (row_blocks > (UINT64_MAX >> 12) / col_blocks)
                                return -EOVERFLOW;
                        d = row_blocks * col_blocks * DSE_Q4_TILE;
                }
                if (n > (UINT64_MAX >> 2) / d)
                        return -EOVERFLOW;
                n *= d;
        }
        n *= esize[dtype];
        if (n > (uint64_t)INT64_MAX)
                return -EOVERFLOW;
        *ret_size = n;
        return 0;
}

/* ---- hyper-parameters: a key/value table so minor versions can add fields -------- */

enum { HP_I32, HP_F32 };

/* since: the minor version that added the key; a file of an older minor version lacks
 * it and reads as 0. */
static const struct {
        const char *key;
        size_t offset;
        int type;
        int since;
} hp_fields[] = {
#define I(f) {#f, offsetof(struct dse_hparams, f), HP_I32, 0}
#define F(f) {#f, offsetof(struct dse_hparams, f), HP_F32, 0}
#define I1(f) {#f, offsetof(struct dse_hparams, f), HP_I32, 1}
#define I2(f) {#f, offsetof(struct dse_hparams, f), HP_I32, 2}
        I(arch), I(n_layers), I(hidden_size), I(intermediate_size), I(n_heads), I(n_kv_heads), I(head_dim),
        I(vocab_size), I(max_position_embeddings), F(rms_norm_eps), F(rope_theta), I(tie_word_embeddings),
        I(attention_bias), I(rope_type), F(rope_factor), I(rope_original_max_pos), F(rope_low_freq_factor),
        F(rope_high_freq_factor), F(rope_beta_fast), F(rope_beta_slow), F(rope_mscale), F(rope_mscale_all_dim),
        I(q_lora_rank), I(kv_lora_rank), I(qk_nope_head_dim), I(qk_rope_head_dim), I(v_head_dim),
        I(n_routed_experts), I(n_shared_experts), I(n_experts_per_tok), I(moe_intermediate_size),
        I(first_k_dense_replace), I(moe_layer_freq), I(n_group), I(topk_group), I(topk_method), I(scoring_func),
        I(norm_topk_prob), F(routed_scaling_factor), I(bos_token_id), I(eos_token_id), I1(n_mtp_layers),
        I2(mla_kv_b_split),
#undef I2
#undef I1
#undef I
#undef F
};
#define N_HP_FIELDS (sizeof hp_fields / sizeof hp_fields[0])

#define CHECK(cond, ...)                                                                                        \
        do {                                                                                                    \
                if (!(cond))                                                                                    \
                        return dse__fail(reterr, -EBADMSG, __VA_ARGS__);                                        \
        } while (0)

void dse__hparams_rope_defaults(struct dse_hparams *hp) {
        hp->rope_type = DSE_ROPE_DEFAULT;
        hp->rope_factor = 1.0f;
        hp->rope_original_max_pos = hp->max_position_embeddings;
        hp->rope_low_freq_factor = 1.0f;
        hp->rope_high_freq_factor = 4.0f;
        hp->rope_beta_fast = 32.0f;
        hp->rope_beta_slow = 1.0f;
        hp->rope_mscale = 1.0f;
        hp->rope_mscale_all_dim = 0.0f;
}

int dse__hparams_validate(const struct dse_hparams *hp, const char *what, struct dse_diag *reterr) {
        const int32_t big = 1 << 24;
        CHECK(hp->arch >= 0 && hp->arch < DSE_ARCH_COUNT, "%s: unknown architecture %d", what, (int)hp->arch);
        CHECK(hp->n_layers > 0 && hp->n_layers <= 4096, "%s: n_layers %d out of range", what, hp->n_layers);
        CHECK(hp->hidden_size > 0 && hp->hidden_size <= big, "%s: hidden_size %d out of range", what, hp->hidden_size);
        CHECK(hp->intermediate_size > 0 && hp->intermediate_size <= big, "%s: intermediate_size %d out of range", what,
              hp->intermediate_size);
        CHECK(hp->vocab_size > 0 && hp->vocab_size <= big, "%s: vocab_size %d out of range", what, hp->vocab_size);
        CHECK(hp->n_heads > 0 && hp->n_heads <= 65536, "%s: n_heads %d out of range", what, hp->n_heads);
        CHECK(hp->n_kv_heads > 0 && hp->n_kv_heads <= hp->n_heads && hp->n_heads % hp->n_kv_heads == 0,
              "%s: n_kv_heads %d must divide n_heads %d", what, hp->n_kv_heads, hp->n_heads);
        CHECK(hp->head_dim > 0 && hp->head_dim <= 65536, "%s: head_dim %d out of range", what, hp->head_dim);
        CHECK(hp->max_position_embeddings > 0, "%s: max_position_embeddings must be positive", what);
        CHECK(hp->rms_norm_eps > 0 && hp->rms_norm_eps < 1, "%s: rms_norm_eps out of range", what);
        CHECK(hp->rope_theta > 0, "%s: rope_theta must be positive", what);
        CHECK(hp->rope_type >= 0 && hp->rope_type < DSE_ROPE_TYPE_COUNT, "%s: unknown rope type %d", what,
              (int)hp->rope_type);
        CHECK(hp->rope_factor > 0, "%s: rope factor must be positive", what);
        CHECK(hp->rope_original_max_pos > 0, "%s: original_max_position_embeddings must be positive", what);
        CHECK(hp->bos_token_id >= -1 && hp->eos_token_id >= -1, "%s: bad bos/eos token id", what);
        CHECK(hp->n_mtp_layers >= 0 && hp->n_mtp_layers <= 16 && (hp->n_mtp_layers == 0 || hp->arch == DSE_ARCH_DEEPSEEK_V3),
              "%s: n_mtp_layers %d out of range (0..16, deepseek_v3 only)", what, hp->n_mtp_layers);
        CHECK(hp->mla_kv_b_split == 0 ||
                      (hp->mla_kv_b_split == 1 && (hp->arch == DSE_ARCH_DEEPSEEK_V2 || hp->arch == DSE_ARCH_DEEPSEEK_V3)),
              "%s: mla_kv_b_split %d out of range (0 or 1, DeepSeek only)", what, hp->mla_kv_b_split);
        if (hp->arch == DSE_ARCH_LLAMA || hp->arch == DSE_ARCH_QWEN2) {
                CHECK((int64_t)hp->n_heads * hp->head_dim <= big, "%s: n_heads * head_dim out of range", what);
                CHECK(hp->head_dim % 2 == 0, "%s: head_dim %d must be even for RoPE", what, hp->head_dim);
                return 0;
        }
        CHECK(hp->q_lora_rank >= 0 && hp->q_lora_rank <= big, "%s: q_lora_rank out of range", what);
        CHECK(hp->kv_lora_rank > 0 && hp->kv_lora_rank <= big, "%s: kv_lora_rank out of range", what);
        CHECK(hp->qk_nope_head_dim >= 0 && hp->qk_nope_head_dim <= 65536, "%s: qk_nope_head_dim out of range", what);
        CHECK(hp->qk_rope_head_dim > 0 && hp->qk_rope_head_dim <= 65536 && hp->qk_rope_head_dim % 2 == 0,
              "%s: qk_rope_head_dim must be positive and even", what);
        CHECK(hp->v_head_dim > 0 && hp->v_head_dim <= 65536, "%s: v_head_dim out of range", what);
        CHECK((int64_t)hp->n_heads * (hp->qk_nope_head_dim + hp->qk_rope_head_dim + hp->v_head_dim) <= big,
              "%s: attention width out of range", what);
        CHECK(hp->n_routed_experts >= 0 && hp->n_routed_experts <= 65536, "%s: n_routed_experts out of range", what);
        CHECK((int64_t)hp->n_routed_experts * hp->n_layers <= (1 << 18),
              "%s: too many experts (n_routed_experts x n_layers)", what);
        CHECK(hp->topk_method >= 0 && hp->topk_method < DSE_MOE_TOPK_COUNT, "%s: unknown topk_method", what);
        CHECK(hp->scoring_func >= 0 && hp->scoring_func < DSE_MOE_SCORING_COUNT, "%s: unknown scoring_func", what);
        CHECK(hp->moe_layer_freq >= 1, "%s: moe_layer_freq must be >= 1", what);
        CHECK(hp->first_k_dense_replace >= 0, "%s: first_k_dense_replace must be >= 0", what);
        if (hp->n_routed_experts > 0) {
                CHECK(hp->n_experts_per_tok > 0 && hp->n_experts_per_tok <= hp->n_routed_experts,
                      "%s: num_experts_per_tok %d out of range", what, hp->n_experts_per_tok);
                CHECK(hp->moe_intermediate_size > 0 && hp->moe_intermediate_size <= big,
                      "%s: moe_intermediate_size out of range", what);
                CHECK(hp->n_shared_experts >= 0 && hp->n_shared_experts <= 1024, "%s: n_shared_experts out of range",
                      what);
                CHECK((int64_t)hp->moe_intermediate_size * (hp->n_shared_experts ? hp->n_shared_experts : 1) <= big,
                      "%s: shared expert width out of range", what);
                CHECK(hp->n_group >= 1 && hp->n_routed_experts % hp->n_group == 0,
                      "%s: n_group %d must divide n_routed_experts %d", what, hp->n_group, hp->n_routed_experts);
                CHECK(hp->topk_group >= 1 && hp->topk_group <= hp->n_group, "%s: topk_group %d out of range", what,
                      hp->topk_group);
        }
        return 0;
}

/* ---- little-endian field access ---------------------------------------------------- */

static uint32_t rd32(const uint8_t *p) {
        return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t rd64(const uint8_t *p) {
        return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32;
}
static void wr32(uint8_t *p, uint32_t v) {
        for (int i = 0; i < 4; i++)
                p[i] = (uint8_t)(v >> (8 * i));
}
static void wr64(uint8_t *p, uint64_t v) {
        wr32(p, (uint32_t)v);
        wr32(p + 4, (uint32_t)(v >> 32));
}

/* header field offsets (FORMAT.md, "Header") */
enum {
        H_MAGIC = 0,
        H_VERSION_MAJOR = 8,
        H_VERSION_MINOR = 12,
        H_FILE_SIZE = 16,
        H_DATA_OFFSET = 24,
        H_DATA_SIZE = 32,
        H_HPARAMS_OFFSET = 40,
        H_N_HPARAMS = 48,
        H_N_TENSORS = 52,
        H_TABLE_OFFSET = 56,
        H_QUANT = 64,
        H_CRC = 80,
};
/* tensor entry field offsets (FORMAT.md, "Tensor table") */
enum { E_NAME = 0, E_DTYPE = 128, E_N_DIMS = 132, E_SHAPE = 136, E_GROUP = 168, E_CRC = 172, E_OFFSET = 176, E_SIZE = 184 };
enum { P_KEY = 0, P_KEY_MAX = 40, P_TYPE = 40, P_VALUE = 44 };

static uint64_t align_up(uint64_t v, uint64_t a) {
        return (v + a - 1) / a * a;
}

uint64_t dse__native_header_size(size_t n_tensors) {
        uint64_t end = DSE_FORMAT_HEADER_SIZE + N_HP_FIELDS * DSE_FORMAT_HPARAM_SIZE +
                       (uint64_t)n_tensors * DSE_FORMAT_ENTRY_SIZE;
        return align_up(end, DSE_FORMAT_DATA_ALIGN);
}

static uint32_t header_crc(const uint8_t *buf, uint64_t end) {
        static const uint8_t zero[4];
        uint32_t c = dse__crc32c(0, buf, H_CRC);
        c = dse__crc32c(c, zero, 4);
        return dse__crc32c(c, buf + H_CRC + 4, end - H_CRC - 4);
}

/* Whether a Q4 weight keeps fp16 scales (minor 3): a ".scale" tensor of dtype F16. */
static int q4_f16_scales(const struct dse_tensor *tensors, size_t n) {
        for (size_t i = 0; i < n; i++) {
                size_t len = strlen(tensors[i].name);
                if (tensors[i].dtype == DSE_DTYPE_F16 && len > 6 && strcmp(tensors[i].name + len - 6, ".scale") == 0)
                        return 1;
        }
        return 0;
}

int dse__native_write_header(uint8_t *buf, uint64_t data_offset, uint64_t data_size, const struct dse_hparams *hp,
                             const char *quant, const struct dse_tensor *tensors, const uint64_t *offsets,
                             const uint32_t *crcs, size_t n) {
        if (dse__native_header_size(n) > data_offset || n > UINT32_MAX || strlen(quant) >= DSE_FORMAT_QUANT_MAX)
                return -EINVAL;
        uint64_t hp_off = DSE_FORMAT_HEADER_SIZE, table_off = hp_off + N_HP_FIELDS * DSE_FORMAT_HPARAM_SIZE;
        memset(buf, 0, data_offset);
        memcpy(buf + H_MAGIC, DSE_FORMAT_MAGIC, 8);
        wr32(buf + H_VERSION_MAJOR, DSE_FORMAT_VERSION_MAJOR);
        /* the oldest minor version that describes the file, so older readers take what
         * they can (FORMAT.md, "Versioning") */
        wr32(buf + H_VERSION_MINOR, q4_f16_scales(tensors, n) ? 3 : hp->mla_kv_b_split ? 2 : hp->n_mtp_layers > 0 ? 1 : 0);
        wr64(buf + H_FILE_SIZE, data_offset + data_size);
        wr64(buf + H_DATA_OFFSET, data_offset);
        wr64(buf + H_DATA_SIZE, data_size);
        wr64(buf + H_HPARAMS_OFFSET, hp_off);
        wr32(buf + H_N_HPARAMS, (uint32_t)N_HP_FIELDS);
        wr32(buf + H_N_TENSORS, (uint32_t)n);
        wr64(buf + H_TABLE_OFFSET, table_off);
        memcpy(buf + H_QUANT, quant, strlen(quant));
        for (size_t i = 0; i < N_HP_FIELDS; i++) {
                uint8_t *p = buf + hp_off + i * DSE_FORMAT_HPARAM_SIZE;
                memcpy(p + P_KEY, hp_fields[i].key, strlen(hp_fields[i].key));
                wr32(p + P_TYPE, (uint32_t)hp_fields[i].type);
                uint32_t v;
                memcpy(&v, (const uint8_t *)hp + hp_fields[i].offset, 4);
                wr32(p + P_VALUE, v);
        }
        for (size_t i = 0; i < n; i++) {
                const struct dse_tensor *t = &tensors[i];
                uint8_t *p = buf + table_off + i * DSE_FORMAT_ENTRY_SIZE;
                if (strlen(t->name) >= DSE_TENSOR_NAME_MAX)
                        return -EINVAL;
                memcpy(p + E_NAME, t->name, strlen(t->name));
                wr32(p + E_DTYPE, (uint32_t)t->dtype);
                wr32(p + E_N_DIMS, (uint32_t)t->n_dims);
                for (int d = 0; d < DSE_TENSOR_MAX_DIMS; d++)
                        wr64(p + E_SHAPE + 8 * d, d < t->n_dims ? (uint64_t)t->shape[d] : 0);
                wr32(p + E_GROUP, (uint32_t)t->group_size);
                wr32(p + E_CRC, crcs[i]);
                wr64(p + E_OFFSET, offsets[i]);
                wr64(p + E_SIZE, t->size_bytes);
        }
        wr32(buf + H_CRC, header_crc(buf, table_off + n * DSE_FORMAT_ENTRY_SIZE));
        return 0;
}

/* ---- reading and validation ------------------------------------------------------- */

struct parsed_entry {
        struct dse_tensor t;
        uint64_t offset;
        uint32_t crc;
};

static int cmp_entry_name(const void *a, const void *b) {
        return strcmp(((const struct parsed_entry *)a)->t.name, ((const struct parsed_entry *)b)->t.name);
}

static int cmp_entry_offset(const void *a, const void *b) {
        const struct parsed_entry *x = *(const struct parsed_entry *const *)a, *y = *(const struct parsed_entry *const *)b;
        return (x->offset > y->offset) - (x->offset < y->offset);
}

static const struct parsed_entry *find_entry(const struct parsed_entry *v, size_t n, const char *name) {
        struct parsed_entry key;
        snprintf(key.t.name, sizeof key.t.name, "%s", name);
        return bsearch(&key, v, n, sizeof key, cmp_entry_name);
}

static int parse_hparams(const uint8_t *p, uint32_t n, uint32_t minor, const char *what, struct dse_hparams *hp,
                         struct dse_diag *reterr) {
        uint8_t seen[N_HP_FIELDS] = {0};
        memset(hp, 0, sizeof *hp);
        for (uint32_t i = 0; i < n; i++, p += DSE_FORMAT_HPARAM_SIZE) {
                char key[P_KEY_MAX + 1];
                memcpy(key, p + P_KEY, P_KEY_MAX);
                key[P_KEY_MAX] = 0;
                CHECK(memchr(p + P_KEY, 0, P_KEY_MAX), "%s: hyper-parameter %u: key not terminated", what, i);
                for (size_t f = 0; f < N_HP_FIELDS; f++) {
                        if (strcmp(key, hp_fields[f].key) != 0)
                                continue;
                        CHECK(rd32(p + P_TYPE) == (uint32_t)hp_fields[f].type, "%s: hyper-parameter '%s': wrong type",
                              what, key);
                        CHECK(!seen[f], "%s: hyper-parameter '%s' appears twice", what, key);
                        seen[f] = 1;
                        uint32_t v = rd32(p + P_VALUE);
                        memcpy((uint8_t *)hp + hp_fields[f].offset, &v, 4);
                }
                /* keys this reader does not know come from a newer minor version: ignored */
        }
        for (size_t f = 0; f < N_HP_FIELDS; f++)
                CHECK(seen[f] || hp_fields[f].since > (int)minor, "%s: hyper-parameter '%s' is missing", what,
                      hp_fields[f].key);
        return dse__hparams_validate(hp, what, reterr);
}

static int parse_entry(const uint8_t *p, uint32_t i, uint64_t data_size, const char *what, struct parsed_entry *e,
                       struct dse_diag *reterr) {
        memset(e, 0, sizeof *e);
        CHECK(memchr(p + E_NAME, 0, DSE_TENSOR_NAME_MAX) && p[E_NAME], "%s: tensor #%u: name empty or not terminated",
              what, i);
        memcpy(e->t.name, p + E_NAME, DSE_TENSOR_NAME_MAX);
        const char *name = e->t.name;
        uint32_t dtype = rd32(p + E_DTYPE), n_dims = rd32(p + E_N_DIMS);
        if (dtype >= DSE_DTYPE_COUNT)
                return dse__fail(reterr, -EOPNOTSUPP, "%s: tensor '%s': unknown dtype %u", what, name, dtype);
        CHECK(n_dims >= 1 && n_dims <= DSE_TENSOR_MAX_DIMS, "%s: tensor '%s': %u dimensions", what, name, n_dims);
        e->t.dtype = (enum dse_dtype)dtype;
        e->t.n_dims = (int32_t)n_dims;
        for (uint32_t d = 0; d < DSE_TENSOR_MAX_DIMS; d++) {
                uint64_t s = rd64(p + E_SHAPE + 8 * d);
                if (d < n_dims)
                        CHECK(s >= 1 && s <= (uint64_t)INT64_MAX, "%s: tensor '%s': bad dimension %u", what, name, d);
                else
                        CHECK(s == 0, "%s: tensor '%s': unused dimension %u is not zero", what, name, d);
                e->t.shape[d] = (int64_t)s;
        }
        e->t.group_size = (int32_t)rd32(p + E_GROUP);
        e->crc = rd32(p + E_CRC);
        e->offset = rd64(p + E_OFFSET);
        e->t.size_bytes = rd64(p + E_SIZE);
        uint64_t want;
        int r = dse__tensor_size_bytes(e->t.dtype, e->t.n_dims, e->t.shape, &want);
        CHECK(r == 0, "%s: tensor '%s': shape overflows", what, name);
        CHECK(want == e->t.size_bytes, "%s: tensor '%s': size %llu does not match %s shape (%llu bytes)", what, name,
              (unsigned long long)e->t.size_bytes, dse_dtype_to_string(e->t.dtype), (unsigned long long)want);
        CHECK(e->offset % DSE_FORMAT_TENSOR_ALIGN == 0, "%s: tensor '%s': offset 0x%llx is not 64-byte aligned", what,
              name, (unsigned long long)e->offset);
        CHECK(e->offset <= data_size && e->t.size_bytes <= data_size - e->offset,
              "%s: tensor '%s': offset 0x%llx + %llu bytes past the end of the data region (%llu bytes)", what, name,
              (unsigned long long)e->offset, (unsigned long long)e->t.size_bytes, (unsigned long long)data_size);
        int quant = e->t.dtype == DSE_DTYPE_Q4 || e->t.dtype == DSE_DTYPE_Q8;
        CHECK(quant ? e->t.group_size > 0 : e->t.group_size == 0, "%s: tensor '%s': bad group_size %d for %s", what,
              name, e->t.group_size, dse_dtype_to_string(e->t.dtype));
        return 0;
}

static int is_float(enum dse_dtype d) {
        return d == DSE_DTYPE_F32 || d == DSE_DTYPE_F16 || d == DSE_DTYPE_BF16;
}

static int dtype_allowed(enum dse_schema_kind kind, enum dse_dtype d) {
        switch (kind) {
        case DSE_SCHEMA_NORM:
        case DSE_SCHEMA_BIAS:
        case DSE_SCHEMA_ROUTER_BIAS:
                return is_float(d);
        case DSE_SCHEMA_EMBED:
        case DSE_SCHEMA_ROUTER:
                return is_float(d) || d == DSE_DTYPE_Q8 || d == DSE_DTYPE_Q4;
        case DSE_SCHEMA_LINEAR:
        case DSE_SCHEMA_LM_HEAD:
                return is_float(d) || d == DSE_DTYPE_Q8 || d == DSE_DTYPE_Q4 || d == DSE_DTYPE_F8_E4M3;
        default:
                return 0;
        }
}

/* Marks an auxiliary tensor "<base><suffix>" as used after checking dtype and 2-D shape
 * (or 1-D when d1 == 0). Returns its entry, NULL with *err set when wrong/missing. */
static const struct parsed_entry *check_aux(const struct parsed_entry *v, size_t n, uint8_t *used, const char *base,
                                            const char *suffix, enum dse_dtype dtype, int64_t d0, int64_t d1,
                                            int optional, const char *what, int *err, struct dse_diag *reterr) {
        char name[DSE_TENSOR_NAME_MAX + 16];
        snprintf(name, sizeof name, "%s%s", base, suffix);
        const struct parsed_entry *e = strlen(name) < DSE_TENSOR_NAME_MAX ? find_entry(v, n, name) : NULL;
        if (!e) {
                if (!optional)
                        *err = dse__fail(reterr, -EBADMSG, "%s: tensor '%s' needs '%s'", what, base, name);
                return NULL;
        }
        used[e - v] = 1;
        int n_dims = d1 ? 2 : 1;
        if (e->t.dtype != dtype || e->t.n_dims != n_dims || e->t.shape[0] != d0 || (d1 && e->t.shape[1] != d1)) {
                *err = dse__fail(reterr, -EBADMSG, "%s: tensor '%s': expected %s [%lld%s%lld], found %s [%lld, %lld]",
                                 what, name, dse_dtype_to_string(dtype), (long long)d0, d1 ? ", " : "",
                                 (long long)(d1 ? d1 : 0), dse_dtype_to_string(e->t.dtype), (long long)e->t.shape[0],
                                 (long long)(e->t.n_dims > 1 ? e->t.shape[1] : 0));
                return NULL;
        }
        return e;
}

/* Checks every tensor against the architecture's schema: present, right logical shape,
 * a dtype the kind allows, quantization side tensors present and shaped; nothing else
 * but the embedded tokenizer files. */
static int check_schema(const struct dse_hparams *hp, const struct parsed_entry *v, size_t n, const uint8_t *base,
                        const char *what, struct dse_diag *reterr) {
        struct dse_schema_entry *schema;
        size_t n_schema;
        int r = dse__model_schema(hp, n, &schema, &n_schema);
        if (r == -E2BIG)
                return dse__fail(reterr, -EBADMSG, "%s: the hyper-parameters call for more tensors than the %zu the file holds",
                                 what, n);
        if (r < 0)
                return r;
        uint8_t *used = calloc(n ? n : 1, 1);
        if (!used) {
                free(schema);
                return -ENOMEM;
        }
        for (size_t s = 0; s < n_schema && r == 0; s++) {
                const struct dse_schema_entry *se = &schema[s];
                const struct parsed_entry *e = find_entry(v, n, se->name);
                if (!e) {
                        r = dse__fail(reterr, -EBADMSG, "%s: missing tensor '%s'", what, se->name);
                        break;
                }
                used[e - v] = 1;
                const struct dse_tensor *t = &e->t;
                if (t->n_dims != se->n_dims || t->shape[0] != se->shape[0] || (se->n_dims == 2 && t->shape[1] != se->shape[1])) {
                        r = dse__fail(reterr, -EBADMSG,
                                      "%s: tensor '%s': shape [%lld, %lld] contradicts the hyper-parameters (expected [%lld, %lld])",
                                      what, se->name, (long long)t->shape[0], (long long)(t->n_dims > 1 ? t->shape[1] : 0),
                                      (long long)se->shape[0], (long long)(se->n_dims > 1 ? se->shape[1] : 0));
                        break;
                }
                if (!dtype_allowed(se->kind, t->dtype)) {
                        r = dse__fail(reterr, -EBADMSG, "%s: tensor '%s': dtype %s is not allowed here", what, se->name,
                                      dse_dtype_to_string(t->dtype));
                        break;
                }
                if (t->n_dims != 2)
                        continue;
                int64_t rows = t->shape[0], cols = t->shape[1];
                int64_t groups = t->group_size > 0 ? (cols + t->group_size - 1) / t->group_size : 0;
                if (t->dtype == DSE_DTYPE_F8_E4M3) {
                        check_aux(v, n, used, se->name, ".scale", DSE_DTYPE_F32, (rows + 127) / 128, (cols + 127) / 128,
                                  0, what, &r, reterr);
                } else if (t->dtype == DSE_DTYPE_Q8) {
                        check_aux(v, n, used, se->name, ".scale", DSE_DTYPE_F32, rows, groups, 0, what, &r, reterr);
                } else if (t->dtype == DSE_DTYPE_Q4) {
                        int64_t srows = dse__scale_rows(DSE_DTYPE_Q4, rows); /* padded to 16 (model.h) */
                        /* the scales' dtype names the form: F32 with U8 zero points, or F16 and
                         * symmetric, zero point 8 (minor 3); a .zero beside F16 scales is left
                         * unused, which the check below refuses by name */
                        char sname[DSE_TENSOR_NAME_MAX + 16];
                        snprintf(sname, sizeof sname, "%s.scale", se->name);
                        const struct parsed_entry *sc =
                                strlen(sname) < DSE_TENSOR_NAME_MAX ? find_entry(v, n, sname) : NULL;
                        int f16 = sc && sc->t.dtype == DSE_DTYPE_F16;
                        check_aux(v, n, used, se->name, ".scale", f16 ? DSE_DTYPE_F16 : DSE_DTYPE_F32, srows, groups, 0,
                                  what, &r, reterr);
                        if (r == 0 && !f16)
                                check_aux(v, n, used, se->name, ".zero", DSE_DTYPE_U8, srows, groups, 0, what, &r, reterr);
                        const struct parsed_entry *perm =
                                r == 0 ? check_aux(v, n, used, se->name, ".perm", DSE_DTYPE_I32, cols, 0, 1, what, &r, reterr)
                                       : NULL;
                        if (perm && base) {
                                /* the kernels gather inputs through perm: it must be a permutation */
                                uint8_t *hit = calloc((size_t)cols, 1);
                                if (!hit) {
                                        r = -ENOMEM;
                                        break;
                                }
                                const int32_t *pv = (const int32_t *)(const void *)(base + perm->offset);
                                for (int64_t j = 0; j < cols && r == 0; j++) {
                                        if (pv[j] < 0 || pv[j] >= cols || hit[pv[j]])
                                                r = dse__fail(reterr, -EBADMSG, "%s: tensor '%s.perm': not a permutation",
                                                              what, se->name);
                                        else
                                                hit[pv[j]] = 1;
                                }
                                free(hit);
                        }
                }
        }
        for (size_t i = 0; i < n && r == 0; i++) {
                if (used[i])
                        continue;
                const char *name = v[i].t.name;
                if (strcmp(name, "tokenizer.json") == 0 || strcmp(name, "tokenizer_config.json") == 0 ||
                    strcmp(name, "tokenizer.model") == 0) {
                        if (v[i].t.dtype != DSE_DTYPE_U8 || v[i].t.n_dims != 1)
                                r = dse__fail(reterr, -EBADMSG, "%s: tensor '%s' must be U8 [bytes]", what, name);
                        continue;
                }
                r = dse__fail(reterr, -EBADMSG, "%s: unexpected tensor '%s' (not part of %s with these hyper-parameters)",
                              what, name, dse_arch_to_string(hp->arch));
        }
        free(used);
        free(schema);
        return r;
}

int dse__native_parse(const uint8_t *buf, size_t size, uint64_t file_size, const char *what, const uint8_t *base,
                      struct dse_hparams *ret_hp, char ret_quant[DSE_FORMAT_QUANT_MAX], struct dse_tensor **ret_tensors,
                      size_t *ret_n, struct dse_diag *reterr) {
        if (!buf || !what || !ret_hp || !ret_quant || !ret_tensors || !ret_n)
                return -EINVAL;
        CHECK(size >= DSE_FORMAT_HEADER_SIZE && file_size >= DSE_FORMAT_HEADER_SIZE,
              "%s: truncated: %llu bytes, smaller than the %d-byte header", what, (unsigned long long)file_size,
              DSE_FORMAT_HEADER_SIZE);
        CHECK(memcmp(buf + H_MAGIC, DSE_FORMAT_MAGIC, 8) == 0, "%s: not a dsvisor model file (bad magic)", what);
        uint32_t major = rd32(buf + H_VERSION_MAJOR), minor = rd32(buf + H_VERSION_MINOR);
        if (major != DSE_FORMAT_VERSION_MAJOR)
                return dse__fail(reterr, -EOPNOTSUPP,
                                 "%s: format version %u.%u is %s than this reader (%d.x); %s", what, major, minor,
                                 major > DSE_FORMAT_VERSION_MAJOR ? "newer" : "older", DSE_FORMAT_VERSION_MAJOR,
                                 major > DSE_FORMAT_VERSION_MAJOR ? "upgrade dsvisor" : "convert the model again");
        uint64_t fsize = rd64(buf + H_FILE_SIZE), data_off = rd64(buf + H_DATA_OFFSET), data_size = rd64(buf + H_DATA_SIZE);
        uint64_t hp_off = rd64(buf + H_HPARAMS_OFFSET), table_off = rd64(buf + H_TABLE_OFFSET);
        uint32_t n_hp = rd32(buf + H_N_HPARAMS), n = rd32(buf + H_N_TENSORS);
        CHECK(fsize == file_size, "%s: truncated or extended: the header says %llu bytes, the file has %llu", what,
              (unsigned long long)fsize, (unsigned long long)file_size);
        CHECK(data_off % DSE_FORMAT_DATA_ALIGN == 0 && data_off <= fsize && data_size == fsize - data_off,
              "%s: data region at 0x%llx (%llu bytes) is not 2 MiB aligned or does not end the file", what,
              (unsigned long long)data_off, (unsigned long long)data_size);
        CHECK(hp_off >= DSE_FORMAT_HEADER_SIZE && hp_off <= data_off &&
                      (uint64_t)n_hp * DSE_FORMAT_HPARAM_SIZE <= data_off - hp_off,
              "%s: hyper-parameters at 0x%llx (%u records) overrun the data region", what, (unsigned long long)hp_off,
              n_hp);
        CHECK(table_off >= DSE_FORMAT_HEADER_SIZE && table_off <= data_off &&
                      (uint64_t)n * DSE_FORMAT_ENTRY_SIZE <= data_off - table_off,
              "%s: tensor table at 0x%llx (%u entries) overruns the data region", what, (unsigned long long)table_off, n);
        uint64_t meta_end = table_off + (uint64_t)n * DSE_FORMAT_ENTRY_SIZE;
        if (hp_off + (uint64_t)n_hp * DSE_FORMAT_HPARAM_SIZE > meta_end)
                meta_end = hp_off + (uint64_t)n_hp * DSE_FORMAT_HPARAM_SIZE;
        CHECK(meta_end <= size, "%s: truncated: header and table need %llu bytes, have %zu", what,
              (unsigned long long)meta_end, size);
        CHECK(header_crc(buf, meta_end) == rd32(buf + H_CRC), "%s: header checksum mismatch (corrupt header or table)",
              what);
        CHECK(memchr(buf + H_QUANT, 0, DSE_FORMAT_QUANT_MAX), "%s: quant_format not terminated", what);

        struct dse_hparams hp;
        int r = parse_hparams(buf + hp_off, n_hp, minor, what, &hp, reterr);
        if (r < 0)
                return r;
        struct parsed_entry *v = calloc(n ? n : 1, sizeof *v);
        struct parsed_entry **by_off = calloc(n ? n : 1, sizeof *by_off);
        struct dse_tensor *out = calloc(n ? n : 1, sizeof *out);
        if (!v || !by_off || !out) {
                r = -ENOMEM;
                goto out;
        }
        for (uint32_t i = 0; i < n; i++)
                if ((r = parse_entry(buf + table_off + (uint64_t)i * DSE_FORMAT_ENTRY_SIZE, i, data_size, what, &v[i],
                                     reterr)) < 0)
                        goto out;
        qsort(v, n, sizeof *v, cmp_entry_name);
        for (uint32_t i = 1; i < n; i++)
                if (strcmp(v[i].t.name, v[i - 1].t.name) == 0) {
                        r = dse__fail(reterr, -EBADMSG, "%s: tensor '%s' appears twice", what, v[i].t.name);
                        goto out;
                }
        for (uint32_t i = 0; i < n; i++)
                by_off[i] = &v[i];
        qsort(by_off, n, sizeof *by_off, cmp_entry_offset);
        for (uint32_t i = 1; i < n; i++)
                if (by_off[i]->offset < by_off[i - 1]->offset + by_off[i - 1]->t.size_bytes) {
                        r = dse__fail(reterr, -EBADMSG, "%s: tensors '%s' and '%s' overlap at offset 0x%llx", what,
                                      by_off[i - 1]->t.name, by_off[i]->t.name, (unsigned long long)by_off[i]->offset);
                        goto out;
                }
        if ((r = check_schema(&hp, v, n, base ? base + data_off : NULL, what, reterr)) < 0)
                goto out;
        for (uint32_t i = 0; i < n; i++) {
                out[i] = v[i].t;
                out[i].data = base ? base + data_off + v[i].offset : NULL;
        }
        *ret_hp = hp;
        memcpy(ret_quant, buf + H_QUANT, DSE_FORMAT_QUANT_MAX);
        *ret_tensors = out;
        *ret_n = n;
        out = NULL;
out:
        free(out);
        free(by_off);
        free(v);
        return r;
}

/* The stored CRC of tensor i: re-read from the table so dse_tensor stays the seam's shape. */
static int table_crcs(const uint8_t *buf, const struct dse_tensor *tensors, size_t n, uint32_t *crcs) {
        uint64_t table_off = rd64(buf + H_TABLE_OFFSET);
        for (size_t i = 0; i < n; i++) {
                const uint8_t *p = buf + table_off + i * DSE_FORMAT_ENTRY_SIZE;
                /* tensors are sorted by name; find each entry's slot by name */
                size_t lo = 0, hi = n;
                while (lo < hi) {
                        size_t mid = (lo + hi) / 2;
                        int c = strcmp(tensors[mid].name, (const char *)p + E_NAME);
                        if (c == 0) {
                                lo = mid;
                                break;
                        }
                        if (c < 0)
                                lo = mid + 1;
                        else
                                hi = mid;
                }
                if (lo >= n || strcmp(tensors[lo].name, (const char *)p + E_NAME) != 0)
                        return -EBADMSG;
                crcs[lo] = rd32(p + E_CRC);
        }
        return 0;
}

/* ---- the model object ---------------------------------------------------------- */

struct dse_model {
        char *what;               /* path, or "fd N" */
        uint8_t *map;
        size_t map_size;
        struct dse_hparams hp;
        char quant[DSE_FORMAT_QUANT_MAX];
        struct dse_tensor *tensors; /* sorted by name */
        uint32_t *crcs;
        size_t n;
        struct dse__weights *weights; /* bound at open, read-only after */
};

void dse_model_free(struct dse_model *model) {
        if (!model)
                return;
        if (model->map)
                munmap(model->map, model->map_size);
        dse__weights_free(model->weights);
        free(model->tensors);
        free(model->crcs);
        free(model->what);
        free(model);
}

static int model_map(int fd, const char *what, unsigned flags, struct dse_model **ret_model, struct dse_diag *reterr) {
        struct stat st;
        if (fstat(fd, &st) < 0)
                return dse__fail(reterr, -errno, "cannot stat '%s': %s", what, strerror(errno));
        if (!S_ISREG(st.st_mode))
                return dse__fail(reterr, -EINVAL, "%s: not a regular file", what);
        uint64_t size = (uint64_t)st.st_size;
        if (size < DSE_FORMAT_HEADER_SIZE)
                return dse__fail(reterr, -EBADMSG, "%s: truncated: %llu bytes, smaller than the %d-byte header", what,
                                 (unsigned long long)size, DSE_FORMAT_HEADER_SIZE);
        if (size > SIZE_MAX)
                return dse__fail(reterr, -EFBIG, "%s: too large to map", what);
        struct dse_model *m = calloc(1, sizeof *m);
        if (!m)
                return -ENOMEM;
        int r;
        m->what = strdup(what);
        if (!m->what) {
                r = -ENOMEM;
                goto fail;
        }
        /* Validate the header and table before mapping the data with MAP_POPULATE. */
        m->map = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
        if (m->map == MAP_FAILED) {
                m->map = NULL;
                r = dse__fail(reterr, -errno, "cannot map '%s': %s", what, strerror(errno));
                goto fail;
        }
        m->map_size = (size_t)size;
        /* Ask for 2 MiB pages before the first touch: page-cache reads through this mapping
         * then come in 2 MiB folios, mapped by one TLB entry each (a file's pages already
         * cached in small folios stay small; dse_model_convert_hf drops its output from the
         * cache for that reason). The batch-1 decode streams the weights and, for MoE,
         * jumps between experts: with 4 KiB pages it pays page walks that a plain read of
         * the same bytes mostly does not. A hugetlb memfd has such pages already; a kernel
         * without file THP refuses or ignores the advice, which only costs speed. */
        (void)madvise(m->map, m->map_size, MADV_HUGEPAGE);
        uint64_t data_off = rd64(m->map + H_DATA_OFFSET);
        size_t meta = data_off <= size ? (size_t)data_off : (size_t)size;
        if (meta < DSE_FORMAT_HEADER_SIZE)
                meta = DSE_FORMAT_HEADER_SIZE;
        r = dse__native_parse(m->map, meta, size, what, m->map, &m->hp, m->quant, &m->tensors, &m->n, reterr);
        if (r < 0)
                goto fail;
        m->crcs = calloc(m->n ? m->n : 1, sizeof *m->crcs);
        if (!m->crcs) {
                r = -ENOMEM;
                goto fail;
        }
        if ((r = table_crcs(m->map, m->tensors, m->n, m->crcs)) < 0)
                goto fail;
        if (flags & DSE_MODEL_POPULATE) {
                /* fault every page in now, after validation, instead of on first use */
#ifdef MADV_POPULATE_READ
                if (madvise(m->map, m->map_size, MADV_POPULATE_READ) < 0)
#endif
                {
                        volatile uint8_t sink = 0;
                        for (size_t off = 0; off < m->map_size; off += 4096)
                                sink ^= m->map[off];
                        (void)sink;
                }
        }
        if ((r = dse__weights_bind(m, &m->weights, reterr)) < 0)
                goto fail;
        *ret_model = m;
        return 0;
fail:
        dse_model_free(m);
        return r;
}

int dse_model_open_fd(int fd, unsigned flags, struct dse_model **ret_model, struct dse_diag *reterr) {
        if (fd < 0 || !ret_model || (flags & ~(unsigned)DSE_MODEL_POPULATE))
                return -EINVAL;
        char what[32];
        snprintf(what, sizeof what, "fd %d", fd);
        return model_map(fd, what, flags, ret_model, reterr);
}

int dse_model_open(const char *path, unsigned flags, struct dse_model **ret_model, struct dse_diag *reterr) {
        if (!path || !ret_model || (flags & ~(unsigned)DSE_MODEL_POPULATE))
                return -EINVAL;
        int fd = dse__open_input(path, reterr);
        if (fd < 0)
                return fd;
        int r = model_map(fd, path, flags, ret_model, reterr);
        close(fd);
        return r;
}

int dse_model_huge_bytes(const struct dse_model *model, uint64_t *ret_huge, uint64_t *ret_total) {
        if (!model || !ret_huge || !ret_total)
                return -EINVAL;
        FILE *f = fopen("/proc/self/smaps", "re");
        if (!f)
                return -errno;
        /* the mapping's VMAs (one, unless something split it): their size if the kernel
         * page size is 2 MiB (hugetlb), else their FilePmdMapped (a file) or
         * ShmemPmdMapped (a shmem memfd: the supervisor's image in normal pages) */
        uintptr_t lo = (uintptr_t)model->map, hi = lo + model->map_size;
        uint64_t huge = 0, vma_bytes = 0;
        int inside = 0;
        char line[512];
        while (fgets(line, sizeof line, f)) {
                unsigned long a, b, kb;
                if (sscanf(line, "%lx-%lx ", &a, &b) == 2) {
                        inside = a >= lo && b <= hi;
                        vma_bytes = (uint64_t)(b - a);
                } else if (inside && sscanf(line, "KernelPageSize: %lu kB", &kb) == 1 && kb == 2048) {
                        huge += vma_bytes;
                } else if (inside && (sscanf(line, "FilePmdMapped: %lu kB", &kb) == 1 ||
                                      sscanf(line, "ShmemPmdMapped: %lu kB", &kb) == 1)) {
                        huge += (uint64_t)kb * 1024;
                }
        }
        fclose(f);
        *ret_huge = huge;
        *ret_total = model->map_size;
        return 0;
}

int dse_model_verify(const struct dse_model *model, struct dse_diag *reterr) {
        if (!model)
                return -EINVAL;
        for (size_t i = 0; i < model->n; i++) {
                const struct dse_tensor *t = &model->tensors[i];
                uint32_t c = dse__crc32c(0, t->data, t->size_bytes);
                if (c != model->crcs[i])
                        return dse__fail(reterr, -EBADMSG, "%s: tensor '%s': checksum mismatch (stored %08x, data %08x)",
                                         model->what, t->name, model->crcs[i], c);
        }
        return 0;
}

int dse_model_verify_values(const struct dse_model *model, size_t *ret_n_bad) {
        if (!model || !ret_n_bad)
                return -EINVAL;
        static const size_t esize[DSE_DTYPE_COUNT] = {
                [DSE_DTYPE_F32] = 4, [DSE_DTYPE_F16] = 2, [DSE_DTYPE_BF16] = 2, [DSE_DTYPE_F8_E4M3] = 1};
        size_t n_bad = 0;
        for (size_t i = 0; i < model->n; i++) {
                const struct dse_tensor *t = &model->tensors[i];
                if (t->dtype < 0 || t->dtype >= DSE_DTYPE_COUNT || !esize[t->dtype])
                        continue; /* integer codes: every value is finite */
                struct dse__nonfinite bad = {0};
                dse__nonfinite_count(t->dtype, t->data, t->size_bytes / esize[t->dtype], 0, &bad);
                dse__nonfinite_warn(model->what, t->name, &bad);
                n_bad += bad.n_nan + bad.n_inf > 0;
        }
        *ret_n_bad = n_bad;
        return 0;
}

int dse_model_describe(const struct dse_model *model, char *buf, size_t size) {
        if (!model || !buf)
                return -EINVAL;
        const struct dse_hparams *hp = &model->hp;
        uint64_t bytes = 0;
        for (size_t i = 0; i < model->n; i++)
                bytes += model->tensors[i].size_bytes;
        char mtp[48] = "";
        if (hp->n_mtp_layers > 0)
                snprintf(mtp, sizeof mtp, " + %d MTP module%s", hp->n_mtp_layers, hp->n_mtp_layers > 1 ? "s" : "");
        return snprintf(buf, size, "%s: %s, %d layers%s, hidden %d, vocab %d, %zu tensors, %.1f MiB of weights, %s",
                        model->what, dse_arch_to_string(hp->arch), hp->n_layers, mtp, hp->hidden_size, hp->vocab_size,
                        model->n, (double)bytes / (1 << 20), model->quant[0] ? model->quant : "-");
}

const char *dse_model_quant_format(const struct dse_model *model) {
        return model ? model->quant : NULL;
}

int dse_model_tokenizer(const struct dse_model *model, struct dse_tokenizer **ret_tok, struct dse_diag *reterr) {
        if (!model || !ret_tok)
                return -EINVAL;
        const struct dse_tensor *json = dse__model_tensor(model, "tokenizer.json");
        const struct dse_tensor *cfg = dse__model_tensor(model, "tokenizer_config.json");
        if (json)
                return dse_tokenizer_load_hf(json->data, json->size_bytes, cfg ? cfg->data : NULL,
                                             cfg ? cfg->size_bytes : 0, ret_tok, reterr);
        const struct dse_tensor *spm = dse__model_tensor(model, "tokenizer.model");
        if (spm && cfg) /* the HF folder layout: LlamaTokenizer reads both */
                return dse_tokenizer_load_spm_hf(spm->data, spm->size_bytes, cfg->data, cfg->size_bytes, ret_tok, reterr);
        if (spm)
                return dse_tokenizer_load_spm(spm->data, spm->size_bytes, ret_tok, reterr);
        return dse__fail(reterr, -ENOENT, "%s: no embedded tokenizer (tokenizer.json or tokenizer.model)", model->what);
}

const struct dse_hparams *dse__model_hparams(const struct dse_model *model) {
        return &model->hp;
}

uint32_t dse__model_header_crc(const struct dse_model *model) {
        return rd32(model->map + H_CRC);
}

uint32_t dse__model_tokenizer_crc(const struct dse_model *model) {
        static const char *const files[] = {"tokenizer.json", "tokenizer_config.json", "tokenizer.model"};
        uint32_t c = 0;
        for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
                const struct dse_tensor *t = dse__model_tensor(model, files[i]);
                if (t)
                        c = dse__crc32c(c, &model->crcs[t - model->tensors], sizeof(uint32_t));
        }
        return c;
}

const struct dse__weights *dse__model_weights(const struct dse_model *model) {
        return model->weights;
}

static int cmp_tensor_name(const void *a, const void *b) {
        return strcmp(((const struct dse_tensor *)a)->name, ((const struct dse_tensor *)b)->name);
}

const struct dse_tensor *dse__model_tensor(const struct dse_model *model, const char *name) {
        struct dse_tensor key;
        if (!model || !name || strlen(name) >= sizeof key.name)
                return NULL;
        snprintf(key.name, sizeof key.name, "%s", name);
        return bsearch(&key, model->tensors, model->n, sizeof key, cmp_tensor_name);
}

size_t dse__model_n_tensors(const struct dse_model *model) {
        return model->n;
}

const struct dse_tensor *dse__model_tensor_at(const struct dse_model *model, size_t i) {
        return i < model->n ? &model->tensors[i] : NULL;
}
