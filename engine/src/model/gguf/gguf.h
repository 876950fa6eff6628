/* GGUF files (llama.cpp / ggml): the container parser, the block formats of the ggml
 * tensor types, and the import of a GGUF model as a converter source. Internal to
 * libdse. The layout follows ggml's docs/gguf.md; every bound is checked against the
 * file (engine/FORMAT.md "Input invariants" lists them). */
#ifndef DSE_MODEL_GGUF_H
#define DSE_MODEL_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "../format.h"

enum dse__gguf_vtype {
        DSE_GGUF_U8 = 0,
        DSE_GGUF_I8 = 1,
        DSE_GGUF_U16 = 2,
        DSE_GGUF_I16 = 3,
        DSE_GGUF_U32 = 4,
        DSE_GGUF_I32 = 5,
        DSE_GGUF_F32 = 6,
        DSE_GGUF_BOOL = 7,
        DSE_GGUF_STRING = 8,
        DSE_GGUF_ARRAY = 9,
        DSE_GGUF_U64 = 10,
        DSE_GGUF_I64 = 11,
        DSE_GGUF_F64 = 12,
        DSE_GGUF_VTYPE_COUNT
};

/* ggml tensor type ids (frozen by ggml) that this reader knows. */
enum dse__ggml_type {
        DSE_GGML_F32 = 0,
        DSE_GGML_F16 = 1,
        DSE_GGML_Q4_0 = 2,
        DSE_GGML_Q4_1 = 3,
        DSE_GGML_Q5_0 = 6,
        DSE_GGML_Q5_1 = 7,
        DSE_GGML_Q8_0 = 8,
        DSE_GGML_Q2_K = 10,
        DSE_GGML_Q3_K = 11,
        DSE_GGML_Q4_K = 12,
        DSE_GGML_Q5_K = 13,
        DSE_GGML_Q6_K = 14,
        DSE_GGML_BF16 = 30,
};

#define DSE_GGUF_MAGIC 0x46554747u    /* "GGUF" read as a little-endian u32 */
#define DSE_GGUF_DEFAULT_ALIGNMENT 32u
#define DSE_GGUF_NAME_MAX 64          /* ggml's GGML_MAX_NAME, terminator included */
#define DSE_GGUF_KEY_MAX 65535

/* One metadata entry. `value` points at the value's bytes inside the parsed buffer: for
 * an array, at its first element (after the element type and count). */
struct dse__gguf_kv {
        const char *key; /* not terminated: key_len bytes */
        size_t key_len;
        enum dse__gguf_vtype type;
        enum dse__gguf_vtype elem_type; /* arrays */
        uint64_t count;                 /* arrays: element count; 1 otherwise */
        const uint8_t *value;
        size_t value_bytes; /* all of the value's bytes (an array: every element) */
};

struct dse__gguf_tensor {
        char name[DSE_GGUF_NAME_MAX];
        uint32_t type; /* enum dse__ggml_type */
        uint32_t n_dims;
        int64_t ne[4];   /* ggml order: ne[0] is the contiguous axis; unused dims 1 */
        uint64_t offset; /* inside the data section */
        uint64_t size;   /* bytes */
};

struct dse__gguf {
        uint32_t version;
        uint32_t alignment;
        uint64_t data_offset; /* file offset of the data section */
        struct dse__gguf_kv *kv;
        size_t n_kv;
        struct dse__gguf_tensor *tensors; /* file order */
        size_t n_tensors;
};

/* Parses a whole GGUF file held in buf[0..size): header, metadata, tensor infos, and
 * checks every tensor's data lies inside the file, aligned, without overlap. The result
 * points into buf (keys, values), so buf must outlive it. `what` names the file in
 * messages. -EBADMSG for a malformed file, -EOPNOTSUPP for a version or tensor type this
 * reader does not know. This is the fuzzed entry point of the GGUF reader. */
int dse__gguf_parse(const uint8_t *buf, size_t size, const char *what, struct dse__gguf **ret,
                    struct dse_diag *reterr);
void dse__gguf_free(struct dse__gguf *g);

const struct dse__gguf_kv *dse__gguf_find(const struct dse__gguf *g, const char *key);
const struct dse__gguf_tensor *dse__gguf_find_tensor(const struct dse__gguf *g, const char *name);

/* Typed reads of a metadata value. Integers of any width and sign are accepted where an
 * integer is asked for (gguf-py writes most counts as u32, the spec says u64). Return 0,
 * -ENOENT when the key is absent, -EBADMSG (with a message naming the key) when its type
 * or value does not fit. */
int dse__gguf_get_i64(const struct dse__gguf *g, const char *what, const char *key, int64_t *ret,
                      struct dse_diag *reterr);
int dse__gguf_get_f64(const struct dse__gguf *g, const char *what, const char *key, double *ret,
                      struct dse_diag *reterr);
int dse__gguf_get_str(const struct dse__gguf *g, const char *what, const char *key, const char **ret,
                      size_t *ret_len, struct dse_diag *reterr);

/* Element i of an array value: numbers as double (integers exactly up to 2^53), strings
 * as pointer and length. Strings are found by walking from the start; callers that read
 * every element use dse__gguf_str_next instead. */
double dse__gguf_arr_num(const struct dse__gguf_kv *kv, uint64_t i);
/* Reads the string at *pos (a cursor inside a string array, starting at kv->value) and
 * advances it. The parser checked every length, so this cannot read past the array. */
void dse__gguf_str_next(const uint8_t **pos, const char **ret, size_t *ret_len);

/* A GGUF tokenizer as Hugging Face files (gguf_vocab.c); NULL members are absent. */
struct dse__gguf_tokenizer {
        char *json, *config, *spm; /* tokenizer.json, tokenizer_config.json, tokenizer.model */
        size_t json_len, config_len, spm_len;
};

/* Builds the tokenizer files from `tokenizer.ggml.*` and `tokenizer.chat_template`:
 * model "gpt2" gives tokenizer.json, "llama" tokenizer.model, both a
 * tokenizer_config.json; no tokenizer.ggml.model (or "none") gives none. -EOPNOTSUPP
 * naming an unsupported tokenizer model or pre-tokenizer, -EBADMSG for malformed keys. */
int dse__gguf_tokenizer_files(const struct dse__gguf *g, const char *what, struct dse__gguf_tokenizer *ret,
                              struct dse_diag *reterr);
void dse__gguf_tokenizer_free(struct dse__gguf_tokenizer *t);

/* Opens a GGUF model file as a converter source (gguf_import.c): hyper-parameters from
 * its metadata, a tensor set holding its tensors under their Hugging Face names,
 * shapes and (for quantized types, F32) dtypes, and its tokenizer files. -EOPNOTSUPP
 * naming an architecture, tensor type or feature it does not import. */
int dse__gguf_import(const char *path, struct dse_hparams *ret_hp, struct dse__st_set **ret_set,
                     struct dse__gguf_tokenizer *ret_tok, struct dse_diag *reterr);

/* True when the file starts with the GGUF magic (0 when it cannot be read). */
int dse__gguf_is_gguf(const char *path);

/* ---- ggml tensor types (gguf_types.c) ------------------------------------------- */

/* Name ("Q4_K"), elements per block and bytes per block of a ggml type; 0 / NULL for a
 * type this reader does not know. */
const char *dse__ggml_type_name(uint32_t type);
int64_t dse__ggml_block_elems(uint32_t type);
size_t dse__ggml_block_bytes(uint32_t type);

/* Dequantises n elements (a multiple of the type's block) following ggml's reference
 * dequantize_row_* arithmetic, so every value is bit-identical to ggml's. */
void dse__ggml_dequantize(uint32_t type, const void *src, float *dst, int64_t n);

/* The ggml types the native format holds exactly: Q8_0 and Q5_0 as Q8 (q = the block's
 * integer, q5 - 16 for Q5_0; scale = d widened), Q4_0 as Q4's symmetric form (fp16 scale
 * = d, zero point 8); all with group 32. The native dtype, or -1 for any other type. */
int dse__ggml_native_dtype(uint32_t type);
/* rows x cols of such blocks (cols a multiple of 32) into Q8 data [rows, cols] and
 * scales [rows, cols/32]; or into the Q4 layout (rows a multiple of 16 or the matrix's
 * last rows; data and scale zeroed by the caller and sized as for dse__q4_bytes and
 * dse__scale_rows) with the blocks' fp16 scales. Every W = (q - 8) * scale equals
 * ggml's value. */
void dse__ggml_to_q8_rows(uint32_t type, const void *src, int64_t rows, int64_t cols, int8_t *data, float *scale);
void dse__ggml_to_q4_rows(const void *src, int64_t rows, int64_t cols, uint8_t *data, uint16_t *scale);

#endif
